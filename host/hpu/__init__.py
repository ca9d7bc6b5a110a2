"""The ``hpu`` attention datapath on the host: parameters, wire formats, golden model and
cycle model. The card's device API is :mod:`tandem.host.hpu.device`."""

from .codec import (
    HpuRequest,
    HpuResult,
    decode_result,
    descriptor_beats,
    pack_descriptor,
    read_port_bursts,
    result_words,
    unpack_results,
)
from .cycles import FILL_CYCLES, GAP_CYCLES, call_cycles, request_beats
from .golden import (
    HpuBatchResult,
    hpu_golden,
    hpu_golden_batch,
    merge_partials,
)
from .params import (
    HEADER_BYTES,
    HpuParams,
    check_scales,
    decode_scales,
    key_smoothing,
    quantize_rows,
    score_scale,
)

__all__ = [
    "FILL_CYCLES",
    "GAP_CYCLES",
    "HEADER_BYTES",
    "HpuBatchResult",
    "HpuParams",
    "HpuRequest",
    "HpuResult",
    "call_cycles",
    "check_scales",
    "decode_result",
    "decode_scales",
    "descriptor_beats",
    "hpu_golden",
    "hpu_golden_batch",
    "key_smoothing",
    "merge_partials",
    "pack_descriptor",
    "quantize_rows",
    "read_port_bursts",
    "request_beats",
    "result_words",
    "score_scale",
    "unpack_results",
]
