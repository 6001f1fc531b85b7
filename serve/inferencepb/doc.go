// Package inferencepb holds the Open Inference Protocol v2's gRPC messages
// and stubs (inference.GRPCInferenceService, as Triton and KServe define
// it), generated from inference.proto by scripts/gen-proto.sh; edit the
// .proto, not the generated files.
package inferencepb
