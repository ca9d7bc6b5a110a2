"""N:M weight packer of the sparse DSP engines (``sparse-dsp-chain``, ``sparse-mpe``).

* :mod:`.packer`: patterns, packing a dense int8 matrix into value and index streams (with a
  clear error naming the first group that breaks the pattern), magnitude pruning, per-output-
  channel int8 quantization, PyTorch 2:4 semi-structured round trip.
* :mod:`.engine`: the engines' beat streams (row pairs, cascade segments, passes) built from a
  packed matrix, and the unpacking of their results.
* :mod:`.cli`: ``tandem pack nm``.
"""

from .engine import ChainStreams, MpeStreams, chain_streams, mm_units, mpe_streams, mv_units
from .packer import (
    NMError,
    NMPacked,
    NMPattern,
    check_nm,
    from_torch_semi_structured,
    pack_nm,
    prune_magnitude,
    quantize_per_channel,
    to_torch_semi_structured,
)

__all__ = [
    "ChainStreams",
    "MpeStreams",
    "NMError",
    "NMPacked",
    "NMPattern",
    "chain_streams",
    "check_nm",
    "from_torch_semi_structured",
    "mm_units",
    "mpe_streams",
    "mv_units",
    "pack_nm",
    "prune_magnitude",
    "quantize_per_channel",
    "to_torch_semi_structured",
]
