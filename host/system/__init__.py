"""The system level: the GPU + accelerator decode runtime, model loading, the performance model."""
