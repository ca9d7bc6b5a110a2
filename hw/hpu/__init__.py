"""HPU attention-offload engine: decode attention over a KV cache held in device memory."""
