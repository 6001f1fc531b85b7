// Package clusterpb holds the coordination service's gRPC messages and
// stubs (package cluster's wire format), generated from cluster.proto by
// scripts/gen-proto.sh; edit the .proto, not the generated files.
package clusterpb
