"""Mapping the HPU's workload: where a KV cache lives in device memory."""
