"""The attention calls an :class:`~tandem.host.hpu.device.HpuDevice` takes, and their checks.

:class:`Attend` is one call (:meth:`~tandem.host.hpu.device.HpuDevice.attend_many` takes a list);
:class:`AttendBatch` is many calls as arrays
(:meth:`~tandem.host.hpu.device.HpuDevice.attend_batch`). :func:`stack_calls` turns a list of
calls into a batch, and :func:`check_batch` checks a batch's arrays against the engine's
parameters, so that no value reaches the engine that its formats do not hold: each raises
``ValueError`` with one line naming the bad value.
"""

from dataclasses import dataclass

import numpy as np
from tandem.host.common.checks import flag, int_array

from .allocator import SeqAlloc
from .params import HpuParams, check_scales

__all__ = ["Attend", "AttendBatch", "check_batch", "scale_values", "stack_calls", "token_rows"]


@dataclass
class Attend:
    """One attention call for :meth:`HpuDevice.attend_many`.

    ``q`` are the ``gqa_group`` integer queries [G, head_dim], ``score_scale`` their binary16
    score scales (``score_scale(q_scale, head_dim)``, not the queries' own scale); ``new`` is
    ``(k, k_scale, v, v_scale)`` of a token the engine appends first (``kv_bits`` row,
    binary16 scale) or None; ``partial`` asks for ``(m, l, o)``.
    """

    seq: SeqAlloc
    head: int
    q: np.ndarray
    score_scale: np.ndarray
    new: tuple | None = None
    partial: bool = False


@dataclass
class AttendBatch:
    """Many attention calls as arrays: the vectorized form of a list of :class:`Attend`, for
    :meth:`HpuDevice.attend_batch`. Call ``i`` is head ``heads[i]`` of ``seqs[i]``.

    Attributes
    ----------
    seqs
        The calls' sequences (:class:`SeqAlloc` of this device), a list of R.
    heads
        Head index of each call [R].
    q
        Integer queries [R, gqa_group, head_dim] (``q_bits`` wide).
    score_scale
        binary16 score scales [R, gqa_group].
    partial
        bool [R]: return ``(m, l, o)`` instead of ``y``.
    append
        bool [R]: the engine appends the call's new token first (all False when None).
    new_k, new_v
        Integer rows (``kv_bits``) [R, head_dim] of the appended tokens (read where ``append``).
    new_k_scale, new_v_scale
        binary16 scales [R] of the appended tokens.
    """

    seqs: list
    heads: np.ndarray
    q: np.ndarray
    score_scale: np.ndarray
    partial: np.ndarray
    append: np.ndarray | None = None
    new_k: np.ndarray | None = None
    new_k_scale: np.ndarray | None = None
    new_v: np.ndarray | None = None
    new_v_scale: np.ndarray | None = None


def stack_calls(params: HpuParams, calls: list[Attend]) -> AttendBatch:
    """The calls of ``calls`` (a non-empty list of :class:`Attend`) as one :class:`AttendBatch`,
    their arrays checked against ``params``; the heads are the calls' own, unchecked."""
    p, count = params, len(calls)
    for index, call in enumerate(calls):
        _check_call(index, call)
    q = _stacked([c.q for c in calls], p.head_dim, p.q_bits, "q", p.gqa_group)
    score_scale = _stacked_scales([c.score_scale for c in calls], "score_scale", p.gqa_group)
    append = np.array([c.new is not None for c in calls], dtype=bool)
    new_k = np.zeros((count, p.head_dim), dtype=np.int64)
    new_v = np.zeros((count, p.head_dim), dtype=np.int64)
    new_k_scale = np.zeros(count, dtype=np.float16)
    new_v_scale = np.zeros(count, dtype=np.float16)
    if append.any():
        adding = [c.new for c, a in zip(calls, append, strict=True) if a]
        bits = p.kv_bits
        new_k[append] = _stacked([n[0] for n in adding], p.head_dim, bits, "new k", 1)[:, 0]
        new_v[append] = _stacked([n[2] for n in adding], p.head_dim, bits, "new v", 1)[:, 0]
        new_k_scale[append] = _stacked_scales([n[1] for n in adding], "new k_scale", 1)[:, 0]
        new_v_scale[append] = _stacked_scales([n[3] for n in adding], "new v_scale", 1)[:, 0]
    seqs = [c.seq for c in calls]
    heads = [c.head for c in calls]
    partial = np.array([bool(c.partial) for c in calls], dtype=bool)
    batch = AttendBatch(seqs, heads, q, score_scale, partial, append, new_k, new_k_scale)
    batch.new_v, batch.new_v_scale = new_v, new_v_scale
    return batch


def check_batch(params: HpuParams, batch: AttendBatch) -> AttendBatch:
    """``batch`` checked against ``params``: heads in range of their sequences, arrays of the
    right shapes and ranges (a new :class:`AttendBatch`; ``batch.seqs`` is a list)."""
    p, seqs = params, batch.seqs
    count = len(seqs)
    heads = int_array(batch.heads, "batch.heads", 64, ndim=(1,))
    limit = np.fromiter((s.heads for s in seqs), np.int64, count)
    if heads.shape != (count,):
        raise ValueError(f"batch.heads must hold {count} heads (one per seq), not {heads.size}")
    outside = (heads < 0) | (heads >= limit)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise ValueError(
            f"batch.heads[{i}] must be in 0..{limit[i] - 1} (sequence {seqs[i].handle}'s "
            f"heads), not {heads[i]}"
        )
    g, d = p.gqa_group, p.head_dim
    q = _shaped(int_array(batch.q, "batch.q", p.q_bits), "batch.q", (count, g, d))
    score_scale = _scale_rows(batch.score_scale, "batch.score_scale", (count, g))
    partial = _flags(batch.partial, "batch.partial", count)
    append = _flags(batch.append, "batch.append", count)
    if append.any():
        bits = p.kv_bits
        new_k = _shaped(int_array(batch.new_k, "batch.new_k", bits), "batch.new_k", (count, d))
        new_v = _shaped(int_array(batch.new_v, "batch.new_v", bits), "batch.new_v", (count, d))
        new_k_scale = _scale_rows(batch.new_k_scale, "batch.new_k_scale", (count,))
        new_v_scale = _scale_rows(batch.new_v_scale, "batch.new_v_scale", (count,))
    else:
        new_k = new_v = np.zeros((count, d), dtype=np.int64)
        new_k_scale = new_v_scale = np.zeros(count, dtype=np.float16)
    checked = AttendBatch(list(seqs), heads.tolist(), q, score_scale, partial, append)
    checked.new_k, checked.new_k_scale = new_k, new_k_scale
    checked.new_v, checked.new_v_scale = new_v, new_v_scale
    return checked


def _check_call(index: int, call) -> None:
    """The parts of one :class:`Attend` that are not arrays: its type, ``new``, ``partial``."""
    if not isinstance(call, Attend):
        raise ValueError(f"calls[{index}] must be an Attend, not {type(call).__name__}")
    if call.new is not None and (not isinstance(call.new, (tuple, list)) or len(call.new) != 4):
        raise ValueError(f"calls[{index}].new must be (k, k_scale, v, v_scale) or None")
    flag(call.partial, f"calls[{index}].partial")


def _stacked(arrays: list, head_dim: int, bits: int, name: str, rows: int) -> np.ndarray:
    """Each of ``arrays`` as ``rows`` rows of ``head_dim`` integers ([rows, head_dim], or
    [head_dim] for one row), checked, stacked: int64 [len(arrays), rows, head_dim] (one check
    for the whole batch; per item for its message)."""
    count = len(arrays)
    try:
        stack = np.asarray(arrays)
    except (ValueError, TypeError):  # ragged
        stack = None
    shapes = [(count, rows, head_dim)] + ([(count, head_dim)] if rows == 1 else [])
    if stack is None or stack.dtype == object or stack.shape not in shapes:
        for values in arrays:
            token_rows(values, name, head_dim, bits, rows)
    return int_array(stack, name, bits).reshape(count, rows, head_dim)


def token_rows(values, name: str, head_dim: int, bits: int = 8, rows: int | None = None):
    """``values`` as int64 [n, head_dim] (one row may come as [head_dim]), checked against the
    signed ``bits``-bit range; exactly ``rows`` rows unless None."""
    array = int_array(values, name, bits, ndim=(1, 2))
    shape = array.shape
    if array.ndim == 1:
        array = array[None]
    if array.shape[1] != head_dim or (rows is not None and len(array) != rows):
        want = f"{rows} rows" if rows is not None else "rows"
        raise ValueError(f"{name} must have {want} of {head_dim}, not shape {shape}")
    return array


def scale_values(values, name: str) -> np.ndarray:
    """``values`` as binary16 [n] (a scalar is one value), checked: real, finite, >= 0."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError):
        array = np.asarray(None)  # ragged: rejected below
    if array.dtype.kind not in "iuf" or array.ndim > 1:
        raise ValueError(
            f"{name} must be real numbers [n], not {array.dtype} of shape {array.shape}"
        )
    with np.errstate(over="ignore"):  # too large for binary16: inf, rejected
        return check_scales(name, array.reshape(-1))


def _stacked_scales(scales: list, name: str, per_call: int) -> np.ndarray:
    """Each of ``scales`` as ``per_call`` binary16 values, checked, stacked: [len, per_call]."""
    count = len(scales)
    try:
        stack = np.asarray(scales)
    except (ValueError, TypeError):  # ragged
        stack = None
    shapes = [(count, per_call)] + ([(count,)] if per_call == 1 else [])
    if stack is None or stack.dtype.kind not in "iuf" or stack.shape not in shapes:
        for index, values in enumerate(scales):
            got = scale_values(values, f"{name} of calls[{index}]")
            if got.size != per_call:
                raise ValueError(
                    f"{name} of calls[{index}] must hold {per_call} values, not {got.size}"
                )
    with np.errstate(over="ignore"):
        return check_scales(name, stack).reshape(count, per_call)


def _shaped(array: np.ndarray, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` reshaped to ``shape``; one line naming ``name`` when its size does not fit."""
    if array.size != int(np.prod(shape)):
        raise ValueError(f"{name} must have shape {shape}, not {array.shape}")
    return array.reshape(shape)


def _scale_rows(values, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``values`` as binary16 of ``shape``, checked: real, finite, non-negative."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError):  # ragged
        array = np.asarray(None)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be real numbers, not {array.dtype}")
    with np.errstate(over="ignore"):  # too large for binary16: inf, rejected
        return _shaped(check_scales(name, array), name, shape)


def _flags(values, name: str, count: int) -> np.ndarray:
    """``values`` as bool [count]: booleans only (None means all False)."""
    if values is None:
        return np.zeros(count, dtype=bool)
    array = np.asarray(values)
    if array.dtype != bool or array.shape != (count,):
        raise ValueError(f"{name} must be {count} booleans, not {array.dtype} {array.shape}")
    return array
