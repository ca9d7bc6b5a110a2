"""The N:M sparse DSP datapath on the host (``sparse-dsp-chain``, ``sparse-mpe``): parameters
and golden models. The engine's device API is :mod:`tandem.host.sparse_dsp.device`."""

from .golden import (
    CASCADE_MAX_PRODUCTS,
    LANE_SHIFT,
    LOW_FLOOR,
    MODE_MM,
    MODE_MV,
    SparseDspChainParams,
    SparseMpeParams,
    chain_config_fields,
    chain_golden,
    mpe_config_fields,
    mpe_golden,
    pack_pair,
    packed_matmul,
    split_lanes,
    split_lanes_naive,
)

__all__ = [
    "CASCADE_MAX_PRODUCTS",
    "LANE_SHIFT",
    "LOW_FLOOR",
    "MODE_MM",
    "MODE_MV",
    "SparseDspChainParams",
    "SparseMpeParams",
    "chain_config_fields",
    "chain_golden",
    "mpe_config_fields",
    "mpe_golden",
    "pack_pair",
    "packed_matmul",
    "split_lanes",
    "split_lanes_naive",
]
