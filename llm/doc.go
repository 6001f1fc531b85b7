// Package llm runs Hugging Face decoder checkpoints (Llama, Mistral, Qwen2,
// Qwen3) on any tensorbridge backend: text generation, embeddings
// (Embedder) and fine-tuning (FineTune, LoRA or full).
//
// It reads a checkpoint directory (config.json, safetensors weights,
// tokenizer.json, generation_config.json), places the weights on the device (bfloat16 on
// TPU, float32 on the CPU backends, int8 on request, split over a mesh for
// tensor parallelism), builds the decoder's prefill and decode programs
// for buckets of context length, and runs a continuous-batching engine
// (one goroutine owns a KV cache of fixed slots, one per sequence, and
// prefills new requests between decode steps) with on-device sampling
// (Engine.Generate).
// Greedy decoding gives transformers' token ids exactly
// (TestAgainstTransformers); docs/generation.md shows the CLI and the API.
package llm
