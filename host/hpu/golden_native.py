"""The compiled twin of :func:`~tandem.host.hpu.golden.hpu_golden_batch` (``golden_native.c``).

The numpy model is the specification: it vectorizes over tokens and requests, and for the
small batches of a decode step (six requests of a few hundred tokens) its cost is numpy's
per-operation overhead, about 0.6 ms a call. The twin runs the engine's recurrence token by
token in C, as the gateware does, in a few tens of microseconds; the golden HPU backend uses
it where a C compiler is at hand (``kernel="auto"``) and says which one ran. Both return the
same :class:`~tandem.host.hpu.golden.HpuBatchResult`, bit for bit
(``tests/test_hpu_golden_native.py``).
"""

import ctypes
from functools import cache
from pathlib import Path

import numpy as np
from tandem.host.common.native import NativeLibrary, load_native
from tandem.host.common.reciprocal import reciprocal_seed_table

from .golden import HpuBatchResult, _exp2_of_distance, _scale_values, check_batch_inputs
from .params import HpuParams

__all__ = ["hpu_golden_batch_native", "native_golden"]

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
                "out_shift",
            )
        ]
        + [
            ("score_min", ctypes.c_int64),
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
                "dot_fits_int32",
                "reserved",
            )
        ]
    )


def native_golden() -> NativeLibrary:
    """The built twin (``library`` None and ``reason`` where there is no C compiler)."""
    built = load_native(SOURCE)
    if built.library is not None and not hasattr(built.library.hpu_golden_batch, "_ready"):
        function = built.library.hpu_golden_batch
        function.restype = None
        function.argtypes = [ctypes.POINTER(_Params), ctypes.c_int64, ctypes.c_int64] + [
            ctypes.c_void_p
        ] * 16
        function._ready = True
    return built


@cache
def _tables(params: HpuParams):
    """The C view of ``params`` and the read-only tables the kernel indexes."""
    p, recip = params, params.reciprocal
    fields = _Params(
        gqa_group=p.gqa_group,
        head_dim=p.head_dim,
        score_frac_bits=p.score_frac_bits,
        score_bits=p.score_bits,
        prob_frac_bits=p.prob_frac_bits,
        weight_bits=p.weight_bits,
        out_bits=p.out_bits,
        out_shift=p.out_shift,
        score_min=p.score_min,
        distance_cap=1 << (p.exp2.in_width - 1),
        weight_shift=float(2.0 ** (p.weight_frac_bits - p.prob_frac_bits)),
        recip_in_bits=recip.in_bits,
        recip_in_frac_bits=recip.in_frac_bits,
        recip_out_bits=recip.out_bits,
        recip_out_frac_bits=recip.out_frac_bits,
        recip_seed_bits=recip.seed_bits,
        recip_work_frac_bits=recip.work_frac_bits,
        recip_newton_steps=recip.newton_steps,
        recip_left_shift=recip.left_shift,
        # |q| <= 2**(q_bits - 1), |k| <= 128: the dot of head_dim products fits int32
        dot_fits_int32=int((p.q_bits - 1) + 7 + (p.head_dim - 1).bit_length() < 31),
    )
    seeds = np.ascontiguousarray(reciprocal_seed_table(recip), dtype=np.int64)
    return fields, _scale_values(), _exp2_of_distance(p.exp2), seeds


def _pointer(array: np.ndarray) -> int:
    return array.ctypes.data


def hpu_golden_batch_native(
    params: HpuParams, q, score_scale, k, k_scale, v, v_scale, lengths
) -> HpuBatchResult:
    """:func:`~tandem.host.hpu.golden.hpu_golden_batch` in C: same arguments, same checks,
    the same result bit for bit. Raises ``RuntimeError`` where the twin cannot be built
    (:func:`native_golden` says why)."""
    built = native_golden()
    if built.library is None:
        raise RuntimeError(f"the compiled HPU golden model is not available: {built.reason}")
    p = params
    q, k, v, lengths = check_batch_inputs(p, q, k, v, lengths)
    r, n = lengths.size, k.shape[1]
    g, d = p.gqa_group, p.head_dim
    fields, scale_values, exp2_table, seeds = _tables(p)
    q32 = np.ascontiguousarray(q, dtype=np.int32)
    k8 = np.ascontiguousarray(k, dtype=np.int8)
    v8 = np.ascontiguousarray(v, dtype=np.int8)
    bits = [
        np.ascontiguousarray(np.asarray(x, dtype=np.float16).reshape(shape).view(np.uint16))
        for x, shape in ((score_scale, (r, g)), (k_scale, (r, n)), (v_scale, (r, n)))
    ]
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    m, l_sum = np.empty((r, g), dtype=np.int64), np.empty((r, g), dtype=np.int64)
    o, y = np.empty((r, g, d), dtype=np.int64), np.empty((r, g, d), dtype=np.int64)
    saturated = np.empty((r, 3), dtype=np.int64)
    work = np.empty(max(n, 1), dtype=np.int64)
    built.library.hpu_golden_batch(
        ctypes.byref(fields),
        r,
        n,
        *(
            _pointer(a)
            for a in (
                q32,
                bits[0],
                k8,
                bits[1],
                v8,
                bits[2],
                lengths,
                scale_values,
                exp2_table,
                seeds,
                m,
                l_sum,
                o,
                y,
                saturated,
                work,
            )
        ),
    )
    counts = {"score": saturated[:, 0], "weight": saturated[:, 1], "output": saturated[:, 2]}
    return HpuBatchResult(m, l_sum, o, y, counts)
