"""The compiled twin of :func:`~tandem.host.hpu.golden.hpu_golden_batch` (``golden_native.c``).

The numpy model is the specification: it vectorizes over tokens and requests, and for the
small batches of a decode step (six requests of a few hundred tokens) its cost is numpy's
per-operation overhead. The twin runs the engine's recurrence token by
token in C, as the gateware does, in a few tens of microseconds; the golden HPU backend uses
it where a C compiler is at hand (``kernel="auto"``) and says which one ran. Both return the
same :class:`~tandem.host.hpu.golden.HpuBatchResult`, bit for bit
(``tests/test_hpu_golden_native.py``).
"""

import ctypes
from functools import cache
from pathlib import Path

import numpy as np
from tandem.host.common.exp2 import exp2_table
from tandem.host.common.native import NativeLibrary, load_native
from tandem.host.common.reciprocal import reciprocal_seed_table
from tandem.mappings.hpu.kv_layout import BLOCK_BYTES, PAGE_TOKENS, KvLayout

from .golden import HpuBatchResult, check_batch_inputs
from .params import HpuParams

__all__ = ["hpu_golden_batch_native", "hpu_golden_regions_native", "native_golden"]

SOURCE = Path(__file__).with_name("golden_native.c")


class _Params(ctypes.Structure):
    """``hpu_golden_params`` of golden_native.c, field for field."""

    _fields_ = (
        [
            (name, ctypes.c_int32)
            for name in (
                "gqa_group",
                "head_dim",
                "score_frac_bits",
                "score_bits",
                "prob_frac_bits",
                "weight_bits",
                "out_bits",
                "out_operand_bits",
                "out_o_shift_offset",
                "out_product_shift",
            )
        ]
        + [
            ("max_start", ctypes.c_int64),
            ("distance_cap", ctypes.c_int64),
            ("weight_shift", ctypes.c_double),
        ]
        + [
            (name, ctypes.c_int32)
            for name in (
                "recip_in_bits",
                "recip_in_frac_bits",
                "recip_out_bits",
                "recip_out_frac_bits",
                "recip_seed_bits",
                "recip_work_frac_bits",
                "recip_newton_steps",
                "recip_left_shift",
                "recip_mantissa_only",
                "dot_fits_int32",
                "exp2_in_frac_bits",
                "exp2_rem_bits",
                "exp2_lut_frac_bits",
                "exp2_out_frac_bits",
                "exp2_max_shift",
                "kv_bytes",
            )
        ]
    )


def native_golden() -> NativeLibrary:
    """The built twin (``library`` None and ``reason`` where there is no C compiler)."""
    built = load_native(SOURCE)
    if built.library is not None and not hasattr(built.library.hpu_golden_batch, "_ready"):
        function = built.library.hpu_golden_batch
        function.restype = None
        function.argtypes = [
            ctypes.POINTER(_Params),
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_int64,
        ] + [ctypes.c_void_p] * 17
        function._ready = True
    return built


@cache
def _tables(params: HpuParams):
    """The C view of ``params`` and the small tables the kernel indexes (exp2 segments,
    reciprocal seeds)."""
    p, recip = params, params.reciprocal
    fields = _Params(
        gqa_group=p.gqa_group,
        head_dim=p.head_dim,
        score_frac_bits=p.score_frac_bits,
        score_bits=p.score_bits,
        prob_frac_bits=p.prob_frac_bits,
        weight_bits=p.weight_bits,
        out_bits=p.out_bits,
        out_operand_bits=p.out_operand_bits,
        out_o_shift_offset=p.out_o_shift_offset,
        out_product_shift=p.out_product_shift,
        max_start=p.max_start,
        distance_cap=1 << (p.exp2.in_width - 1),
        weight_shift=float(2.0 ** (p.w_frac_bits - p.prob_frac_bits)),
        recip_in_bits=recip.in_bits,
        recip_in_frac_bits=recip.in_frac_bits,
        recip_out_bits=recip.out_bits,
        recip_out_frac_bits=recip.out_frac_bits,
        recip_seed_bits=recip.seed_bits,
        recip_work_frac_bits=recip.work_frac_bits,
        recip_newton_steps=recip.newton_steps,
        recip_left_shift=recip.left_shift,
        recip_mantissa_only=recip.mantissa_only,
        # |q| <= 2**(q_bits - 1), |k| <= 128: the dot of head_dim products fits int32
        dot_fits_int32=int((p.q_bits - 1) + 7 + (p.head_dim - 1).bit_length() < 31),
        exp2_in_frac_bits=p.exp2.in_frac_bits,
        exp2_rem_bits=p.exp2.rem_bits,
        exp2_lut_frac_bits=p.exp2.lut_frac_bits,
        exp2_out_frac_bits=p.exp2.out_frac_bits,
        exp2_max_shift=p.exp2.max_shift,
        kv_bytes=p.kv_bits // 8,
    )
    seeds = np.ascontiguousarray(reciprocal_seed_table(recip), dtype=np.int64)
    base, slope = (np.ascontiguousarray(t, dtype=np.int64) for t in exp2_table(p.exp2))
    return fields, base, slope, seeds


class _View(ctypes.Structure):
    """``hpu_kv_view`` of golden_native.c: where a request's token rows and scales lie."""

    _fields_ = [
        (name, ctypes.c_int64)
        for name in (
            "page_tokens",
            "page_stride",
            "row_stride",
            "k_rows",
            "k_scales",
            "v_rows",
            "v_scales",
        )
    ]


@cache
def _memory_view(layout: KvLayout) -> _View:
    """The device memory's KV layout: per page a K part and a V part (a scale block, rows)."""
    return _View(
        page_tokens=PAGE_TOKENS,
        page_stride=layout.page_stride,
        row_stride=layout.row_bytes,
        k_rows=BLOCK_BYTES,
        k_scales=0,
        v_rows=layout.value_shift + BLOCK_BYTES,
        v_scales=layout.value_shift,
    )


def hpu_golden_batch_native(
    params: HpuParams, q, score_scale, k, k_scale, v, v_scale, lengths
) -> HpuBatchResult:
    """:func:`~tandem.host.hpu.golden.hpu_golden_batch` in C: same arguments, same checks,
    the same result bit for bit. Raises ``RuntimeError`` where the twin cannot be built
    (:func:`native_golden` says why)."""
    p = params
    q, k, v, lengths = check_batch_inputs(p, q, k, v, lengths)
    r, n, d = lengths.size, k.shape[1], p.head_dim
    # Each request's rows and scales as one span of a buffer, one page of n tokens:
    # [k rows n*row][v rows n*row][k scales 2n][v scales 2n], row = d elements of kv_bits.
    element = "<i2" if p.kv_bits == 16 else np.int8
    row = d * (p.kv_bits // 8)
    parts = [
        np.ascontiguousarray(k, dtype=element).reshape(r, n * d).view(np.uint8),
        np.ascontiguousarray(v, dtype=element).reshape(r, n * d).view(np.uint8),
        np.asarray(k_scale, dtype="<f2").reshape(r, n).view(np.uint8),
        np.asarray(v_scale, dtype="<f2").reshape(r, n).view(np.uint8),
    ]
    buffer = np.ascontiguousarray(np.concatenate(parts, axis=1))
    span = buffer.shape[1]
    view = _View(
        page_tokens=max(n, 1),
        page_stride=0,
        row_stride=row,
        k_rows=0,
        k_scales=2 * n * row,
        v_rows=n * row,
        v_scales=2 * n * row + 2 * n,
    )
    bases = np.arange(r, dtype=np.int64) * span
    return _run(p, view, buffer, bases, lengths, q, score_scale)


def hpu_golden_regions_native(
    params: HpuParams, memory: np.ndarray, bases, lengths, q, score_scale
) -> HpuBatchResult:
    """The golden model of R requests over the KV regions at ``bases`` of device ``memory``
    (uint8, :class:`~tandem.mappings.hpu.kv_layout.KvLayout`), read in place: what
    ``read_regions`` then :func:`~tandem.host.hpu.golden.hpu_golden_batch` compute, bit for
    bit, without copying the rows out. ``ValueError`` for a region outside ``memory``."""
    p, layout = params, params.layout
    bases = np.asarray(bases, dtype=np.int64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if bases.shape != lengths.shape:
        raise ValueError(f"{bases.size} bases for {lengths.size} lengths")
    if lengths.size:  # the C code reads what these say: every byte must be in memory
        if lengths.min() < 1 or lengths.max() > p.max_seq_len:
            raise ValueError(f"sequence lengths must be in 1..{p.max_seq_len}")
        ends = layout.region_end(bases, lengths)
        if bases.min() < 0 or ends.max() > memory.size:
            raise ValueError(f"a KV region lies outside the {memory.size}-byte memory")
    q = np.asarray(q).reshape(lengths.size, p.gqa_group, p.head_dim)
    top = 1 << (p.q_bits - 1)
    if q.size and (q.min() < -top or q.max() >= top):
        raise ValueError(f"q must be int{p.q_bits} ({-top}..{top - 1})")
    memory = np.asarray(memory)
    if memory.dtype != np.uint8 or not memory.flags.c_contiguous:
        raise ValueError("memory must be a contiguous uint8 array")
    return _run(p, _memory_view(layout), memory, bases, lengths, q, score_scale)


def _run(p: HpuParams, view: _View, buffer, bases, lengths, q, score_scale) -> HpuBatchResult:
    """One call of the C kernel on checked inputs."""
    built = native_golden()
    if built.library is None:
        raise RuntimeError(f"the compiled HPU golden model is not available: {built.reason}")
    r, g, d = lengths.size, p.gqa_group, p.head_dim
    n = int(lengths.max()) if r else 1
    fields, exp2_base, exp2_slope, seeds = _tables(p)
    q16 = np.ascontiguousarray(q, dtype=np.int16)  # q_bits <= 16
    score_bits = np.ascontiguousarray(
        np.asarray(score_scale, dtype=np.float16).reshape(r, g).view(np.uint16)
    )
    bases = np.ascontiguousarray(bases, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    m, l_sum = np.empty((r, g), dtype=np.int64), np.empty((r, g), dtype=np.int64)
    o, y = np.empty((r, g, d), dtype=np.int64), np.empty((r, g, d), dtype=np.int64)
    saturated = np.empty((r, 3), dtype=np.int64)
    work = np.empty(n, dtype=np.int64)
    factors = np.empty(2 * n)
    pointers = np.empty(2 * n, dtype=np.uintp)
    k_scale_bits = np.empty(n, dtype=np.uint16)
    arrays = (q16, score_bits, buffer, bases, lengths, exp2_base, exp2_slope, seeds, m,
              l_sum, o, y, saturated, work, factors, pointers, k_scale_bits)  # fmt: skip
    built.library.hpu_golden_batch(
        ctypes.byref(fields), ctypes.byref(view), r, n, *(a.ctypes.data for a in arrays)
    )
    counts = {"score": saturated[:, 0], "weight": saturated[:, 1], "output": saturated[:, 2]}
    return HpuBatchResult(m, l_sum, o, y, counts)
