"""The SpMM datapath on the host (``systolic``, ``sparse-engine``): parameters and golden
models. The engines' device API is :mod:`tandem.host.spmm.device`."""

from .golden import (
    GcnResult,
    SparseBeat,
    SparseEngineParams,
    SystolicParams,
    check_formats_match,
    gcn_layer,
    gpu_transform,
    mapped_spmm,
    quantize_adjacency,
    quantize_features,
    sparse_engine_golden,
    sparse_tile_golden,
    sparse_tile_stream,
    systolic_decode,
    systolic_golden,
    systolic_tile_golden,
    systolic_tile_stream,
)

__all__ = [
    "GcnResult",
    "SparseBeat",
    "SparseEngineParams",
    "SystolicParams",
    "check_formats_match",
    "gcn_layer",
    "gpu_transform",
    "mapped_spmm",
    "quantize_adjacency",
    "quantize_features",
    "sparse_engine_golden",
    "sparse_tile_golden",
    "sparse_tile_stream",
    "systolic_decode",
    "systolic_golden",
    "systolic_tile_golden",
    "systolic_tile_stream",
]
