"""``hpu``: decode attention over a KV cache in device memory — parameters, formats, golden model.

One request covers one sequence and one KV head: ``G = gqa_group`` query vectors attend over
the ``length`` tokens of the sequence. The engine appends the new token's k and v (when the
request carries them), reads every other K and V row once, and runs a one-pass online softmax.

Number formats (every width below is a parameter or derived from one)
----------------------------------------------------------------------
``k``, ``v``
    int8 or int16 (``kv_bits``) per element, one IEEE binary16 scale per token
    (``k_real = k * k_scale``).
``q``
    int8 or int16 (``q_bits``) per element. Its per-vector scale is folded, by the host, into
    one binary16 *score scale* per query: ``c = q_scale * log2(e) / sqrt(head_dim)``
    (:func:`score_scale`), so that scores come out in log2 units and softmax needs only 2**x.
Scales in hardware
    A binary16 value is ``mant * 2**exp`` with ``mant = (1 << 10) | fraction`` (no implicit
    one when the exponent field is 0) and ``exp = max(field, 1) - 25``. The sign bit is
    ignored; the host rejects negative, infinite and NaN scales.
Dot product
    ``dot = sum(q * k)`` exact in ``q_bits + kv_bits + log2(row elements)`` bits.
Score
    ``s = dot * c * k_scale`` as a signed fixed-point number with ``score_frac_bits``
    fraction bits and ``score_int_bits`` integer bits, rounded half up, saturating.
Online softmax (per row)
    ``m`` is the running maximum, an *integer* in log2 units (``max_bits`` wide, signed); it
    starts at ``max_start = -2**score_int_bits``, the most negative score's value. A row whose
    score ``s > m`` grows it to ``ceil(s)``; the rescale ``alpha = 2**(m_old - m_new)`` is then an
    exact power of two, ``l`` and ``o`` shift right by ``m_new - m_old`` (rounded half up; a
    shift past their widths leaves 0; the amount is clamped at ``2**shift_bits - 1``), and rows
    that do not grow the max shift by 0. Every row's weight is ``p = exp2(s - m)`` from one
    ``exp2`` unit per query, unsigned with ``prob_frac_bits`` fraction bits, in (0, 1]: the row
    that grows the max has ``s - m`` in (-1, 0]. ``l <- round(l * alpha) + p``, and
    ``l <= length`` holds. Partial mode emits ``m`` in the score format
    (``m * 2**score_frac_bits``): a valid max for merging, since ``l`` and ``o`` are sums
    relative to it. The rescale needs no multiplier (a shifter per accumulator element).
Value weight
    ``w = p * v_scale`` unsigned, ``weight_bits`` wide with ``w_frac_bits`` fraction bits
    (``weight_frac_bits``, plus 8 for int16 K/V), rounded half up, saturating (v scales above
    ``2**(weight_bits - w_frac_bits)``
    saturate).
Accumulator
    ``o <- round(o * alpha) + w * v`` per element (``round(o * alpha)`` the rounded shift
    above), signed, ``o_bits`` wide: exact integer products, never overflows (the width covers
    ``max_seq_len`` tokens).
Result
    Full mode: ``y = o / l`` in floating point with one narrow multiply. ``l = m * 2**e``
    with ``m`` in [1, 2) (``e`` from l's leading one); ``reciprocal`` gives ``1/m`` with
    ``recip_frac_bits`` (16) fraction bits, in (0.5, 1]. The exponent goes to o instead:
    ``o' = o >> (e + const)`` (a floor) keeps ``OUT_GUARD_BITS`` (2) bits of ``o / l`` below
    y's LSB and is clamped to ``out_operand_bits`` (27: one DSP48E2 operand; a clamped o' still
    saturates y, and counts as saturated). ``y = o' * (1/m)`` rounded half up by
    ``out_product_shift`` and saturated to ``out_bits``.
    Partial mode: ``(m, l, o)`` for the request's slice of the sequence, merged on the host
    exactly as FlashDecoding does (:func:`merge_partials`).

The golden model is bit-exact with the gateware and vectorized over tokens and over the
requests of a batch (:func:`hpu_golden_batch`, one call per batch of the golden backend):
between two rows that grow the running maximum, ``l`` and ``o`` are plain integer sums, so
only the (few: the integer max grows by whole octaves) rows that grow it are walked in order,
every request and query at once.
"""

from dataclasses import dataclass, field
from functools import cache

import numpy as np
from tandem.host.common.exp2 import Exp2Params, exp2_golden
from tandem.host.common.fixed import (
    saturate,
    shift_round_half_up,
    value_range,
)
from tandem.host.common.reciprocal import leading_one, reciprocal_golden

from .codec import HpuResult
from .params import HpuParams, decode_scales

__all__ = [
    "HpuBatchResult",
    "check_batch_inputs",
    "hpu_golden",
    "hpu_golden_batch",
    "merge_partials",
]


# --- golden model ---------------------------------------------------------------------------
@cache
def _scale_values() -> np.ndarray:
    """The value ``mant * 2**exp`` the gateware decodes from each of the 65,536 binary16 bit
    patterns (:func:`~tandem.host.hpu.params.decode_scales`: sign ignored, exponent field 31
    read as a plain exponent), as float64, indexed by the pattern. Exact: 11-bit mantissas."""
    bits = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    mant, exp = decode_scales(bits)
    values = np.ldexp(mant.astype(np.float64), exp)
    values.flags.writeable = False
    return values


def _scale_value(scales, shape) -> np.ndarray:
    """float64 values of binary16 ``scales`` as the gateware decodes them, reshaped."""
    bits = np.asarray(scales, dtype=np.float16).view(np.uint16)
    return _scale_values()[bits].reshape(shape)


@cache
def _exp2_of_distance(params: Exp2Params) -> np.ndarray:
    """``exp2_golden(params, -x)`` for every ``x`` in ``0 .. 2**(in_width - 1)``: the whole input
    range of the unit as one table (32,769 entries for the default engine), read by index."""
    table = exp2_golden(params, -np.arange((1 << (params.in_width - 1)) + 1, dtype=np.int64))
    table.flags.writeable = False
    return table


def _round_scaled(product, bits: int, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """``product`` (float64, exact) rounded half up and saturated to a ``bits``-wide integer;
    also where it saturated (bool, same shape).

    The gateware computes ``value * mant * 2**exp`` with an exact integer product, then shifts
    (rounding half up) and saturates. Every product the engine forms this way has at most 52
    significant bits (a dot product of at most 30 bits times two 11-bit mantissas; a 17-bit
    probability times one), and multiplying by powers of two is exact, so float64 holds the
    value before rounding exactly and ``floor(x + 0.5)`` is the same rounding.
    """
    lo, hi = value_range(bits, signed)
    rounded = np.floor(product + 0.5)
    clipped = np.minimum(np.maximum(rounded, lo), hi)
    return clipped.astype(np.int64), clipped != rounded


def _round_scaled_int(p: HpuParams, dots, score_scale, k_scale, shape):
    """Scores ``dot * c * k_scale`` rounded half up to ``score_frac_bits`` and saturated, and
    where they saturated, in int64: the exact product ``dot * c_mant * k_mant`` (below 2**59
    with int16 keys) shifted by ``c_exp + k_exp + score_frac_bits``, as the gateware does."""
    r, g, n = shape
    c_mant, c_exp = decode_scales(np.reshape(score_scale, (r, g, 1)))
    k_mant, k_exp = decode_scales(np.reshape(k_scale, (r, 1, n)))
    product = dots * (c_mant * k_mant)
    shift = c_exp + k_exp + p.score_frac_bits
    lo, hi = value_range(p.score_bits, True)
    left = np.minimum(np.maximum(shift, 0), 62)
    # A left shift saturates where the product exceeds the range shifted right.
    above, below = product > (hi >> left), product < -((hi + 1) >> left)
    up = np.where(above, hi + 1, np.where(below, lo - 1, product << left))
    down = shift_round_half_up(product, np.minimum(np.maximum(-shift, 0), 62))
    rounded = np.where(shift >= 0, up, down)
    clipped = saturate(rounded, p.score_bits, True)
    return clipped, clipped != rounded


def _per_request(saturated: np.ndarray, valid, requests: int) -> np.ndarray:
    """Count of True in ``saturated`` [R, ...] per request, where ``valid`` (broadcast) holds."""
    if not saturated.any():
        return np.zeros(requests, dtype=np.int64)
    if valid is not None:
        saturated = saturated & valid
    return saturated.reshape(requests, -1).sum(axis=1)


@dataclass
class HpuBatchResult:
    """What :func:`hpu_golden_batch` returns for R requests (formats of :class:`HpuParams`).

    ``m`` [R, G] and ``l`` [R, G], ``o`` [R, G, head_dim]; ``y`` [R, G, head_dim] is the
    full-mode output of every request (what the engine emits when the request is not partial).
    ``saturated`` counts, per request [R], the values the engine clipped to their format:
    ``"score"`` (``s`` beyond ``score_bits``), ``"weight"`` (``w = p * v_scale`` beyond
    ``weight_bits``: v scales above ``2**(weight_bits - w_frac_bits)``) and ``"output"``
    (``y`` beyond ``out_bits``, which only full-mode requests emit). The accumulators ``l``
    and ``o`` are wide enough never to saturate.
    """

    m: np.ndarray
    l: np.ndarray  # noqa: E741 (the running sum's name in every softmax paper)
    o: np.ndarray
    y: np.ndarray
    saturated: dict = field(default_factory=dict)

    def result(self, index: int, seq_id: int = 0, partial: bool = False) -> HpuResult:
        """Request ``index``'s :class:`HpuResult` (``y`` None when ``partial``)."""
        y = None if partial else self.y[index]
        return HpuResult(seq_id, self.m[index], self.l[index], self.o[index], y)


def hpu_golden_batch(
    params: HpuParams, q, score_scale, k, k_scale, v, v_scale, lengths
) -> HpuBatchResult:
    """Bit-exact model of the ``hpu`` engine for a batch of R requests, in one vectorized call.

    Parameters
    ----------
    params
        The engine's parameters.
    q
        Integer queries [R, gqa_group, head_dim] (``q_bits`` wide).
    score_scale
        binary16 score scales [R, gqa_group] (:func:`~tandem.host.hpu.params.score_scale`).
    k, v
        Integer rows [R, N, head_dim] (``kv_bits``), position order, the appended token last;
        request r uses
        its first ``lengths[r]`` rows (``N >= max(lengths)``; the rest is padding and ignored).
    k_scale, v_scale
        binary16 per-token scales [R, N].
    lengths
        Tokens per request [R], each in ``1 .. max_seq_len``.

    Returns
    -------
    HpuBatchResult

    Notes
    -----
    Every request and query is one row of [R * G, N] arrays. Between two rows that grow the
    (integer) running maximum the rescale is a shift by 0, so ``l`` and ``o`` are plain integer
    sums over such segments (``l`` by ``np.bincount``, ``o`` by one product per request of its
    weights spread over [segments, tokens] with its values); only the segment boundaries are
    walked in order, all R * G rows at once, shifting ``l`` and ``o`` right with rounding.
    """
    p = params
    g, d = p.gqa_group, p.head_dim
    q, k, v, lengths = check_batch_inputs(p, q, k, v, lengths)
    r, n = lengths.size, k.shape[1]
    v_value = _scale_value(v_scale, (r, 1, n))
    scores, score_clipped = _batch_scores(p, q, score_scale, k, k_scale, (r, g, n))
    padded = bool(r) and int(lengths.min()) < n
    valid = (np.arange(n) < lengths[:, None])[:, None, :]  # [R, 1, N]
    saturated = {"score": _per_request(score_clipped, valid if padded else None, r)}
    # Padding scores the minimum: it never grows the running maximum, and it adds nothing.
    if padded:
        scores = np.where(valid, scores, p.score_min)
    scores = scores.reshape(r * g, n)
    maxes, grown = _running_maxes(p, scores)
    distance = np.minimum((maxes[:, 1:] << p.score_frac_bits) - scores, 1 << (p.exp2.in_width - 1))
    prob = _exp2_of_distance(p.exp2)[distance].reshape(r, g, n)  # exp2(s - m), in (0, 1]
    # w = p * v_scale with w_frac_bits fraction bits (see _round_scaled).
    w_shift = float(2.0 ** (p.w_frac_bits - p.prob_frac_bits))
    w, weight_clipped = _round_scaled(prob * (v_value * w_shift), p.weight_bits, False)
    saturated["weight"] = _per_request(weight_clipped, valid if padded else None, r)
    if padded:
        prob = np.where(valid, prob, 0)
        w = np.where(valid, w, 0)
    l_acc, o_acc = _accumulate_segments(p, prob, w, v, grown)
    m = maxes[:, -1] << p.score_frac_bits
    y, output_clipped = _normalized_output(p, l_acc, o_acc)
    saturated["output"] = _per_request(output_clipped, None, r)
    return HpuBatchResult(
        m.reshape(r, g),
        l_acc.reshape(r, g),
        o_acc.reshape(r, g, d),
        y.reshape(r, g, d),
        saturated,
    )


def _batch_scores(p: HpuParams, q, score_scale, k, k_scale, shape):
    """Scores ``s = dot * c * k_scale`` [R, G, N] with ``score_frac_bits`` fraction bits, and
    where they clipped to ``score_bits`` (see :func:`_round_scaled`)."""
    r, g, n = shape
    c_value = _scale_value(score_scale, (r, g, 1))
    k_value = _scale_value(k_scale, (r, 1, n))
    # Exact in float64: |dot| < 2**(q_bits + kv_bits - 2 + log2(row elements)) <= 2**37.
    dots = np.matmul(q.astype(np.float64), k.astype(np.float64).transpose(0, 2, 1))
    if p.kv_bits == 8:
        return _round_scaled(
            dots * (c_value * (k_value * float(1 << p.score_frac_bits))), p.score_bits, True
        )
    # The product has up to 59 significant bits: exact in int64, not in float64.
    return _round_scaled_int(p, dots.astype(np.int64), score_scale, k_scale, shape)


def _running_maxes(p: HpuParams, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The running maximum [R * G, N + 1] of ``scores`` [R * G, N] (``max_start`` first) and by
    how much each row grows it [R * G, N].

    The running max is an integer in log2 units: ceil of the largest score so far (never below
    max_start), so a row grows it by a whole number of octaves or not at all.
    """
    unit = 1 << p.score_frac_bits
    maxes = np.empty((scores.shape[0], scores.shape[1] + 1), dtype=np.int64)
    maxes[:, 0] = p.max_start
    np.maximum.accumulate(scores, axis=1, out=maxes[:, 1:])
    maxes[:, 1:] += unit - 1  # ceil; scores >= score_min, whose ceil is max_start
    maxes[:, 1:] >>= p.score_frac_bits
    return maxes, np.diff(maxes, axis=1)


def _accumulate_segments(p: HpuParams, prob, w, v, grown) -> tuple[np.ndarray, np.ndarray]:
    """The running sums ``l`` [R * G] and ``o`` [R * G, head_dim] of probabilities ``prob`` and
    weights ``w`` [R, G, N] over values ``v`` [R, N, head_dim], rescaled where ``grown``."""
    r, g, n = prob.shape
    # Segments start at row 0 and at every row that grows the max; inside a segment the shift
    # is 0, so l and o are plain sums there. ``segment`` numbers them per query.
    starts_mask = grown > 0
    starts_mask[:, 0] = True
    segment = np.cumsum(starts_mask, axis=1) - 1  # [R * G, N]
    segments = int(segment[:, -1].max()) + 1 if r else 0
    # alpha = 2**-shift: o and l shift right, rounding half up; a shift past their widths
    # (at most 60 bits) leaves 0, as any shift of 62 does.
    seg_shift = np.zeros((r * g, segments), dtype=np.int64)
    start_rows, start_cols = np.nonzero(starts_mask)
    seg_shift[start_rows, segment[start_rows, start_cols]] = grown[start_rows, start_cols]
    np.minimum(seg_shift, 62, out=seg_shift)
    flat = (np.arange(r * g)[:, None] * segments + segment).reshape(-1)
    # Integer sums through float64 (bincount, BLAS), exact: |w * v| < 2**(26 + 7) and at most
    # 2**17 tokens (the parameters' ranges) keep every partial sum an integer below 2**53.
    # int16 values are summed as two bytes (high signed, low unsigned), each sum exact.
    seg_l = np.bincount(flat, prob.reshape(-1), r * g * segments)
    seg_l = seg_l.astype(np.int64).reshape(r * g, segments)
    if p.kv_bits == 8:
        seg_o = _segment_sums(w.reshape(r * g, n), v, flat, segments, g)
    else:
        v = v.astype(np.int64)
        seg_o = _segment_sums(w.reshape(r * g, n), v >> 8, flat, segments, g) << 8
        seg_o += _segment_sums(w.reshape(r * g, n), v & 0xFF, flat, segments, g)
    l_acc = np.zeros(r * g, dtype=np.int64)
    o_acc = np.zeros((r * g, p.head_dim), dtype=np.int64)
    for j in range(segments):
        # Rows without a j-th segment shift by 0, the identity, so every row takes the same
        # exact arithmetic.
        shift = seg_shift[:, j]
        l_acc = shift_round_half_up(l_acc, shift) + seg_l[:, j]
        if j:
            o_acc = shift_round_half_up(o_acc, shift[:, None])
        o_acc += seg_o[:, j]
    return l_acc, o_acc


def _normalized_output(p: HpuParams, l_acc, o_acc) -> tuple[np.ndarray, np.ndarray]:
    """The full-mode output ``y = o / l`` [R * G, head_dim] in ``out_bits``, and where it (or
    its operand ``o'``) clipped."""
    recip = reciprocal_golden(p.reciprocal, l_acc)  # 1/m of l's mantissa m
    msb = np.maximum(leading_one(l_acc, p.l_bits), p.prob_frac_bits - 1)
    o_shift = msb + p.out_o_shift_offset
    o_lo, o_hi = value_range(p.out_operand_bits, True)
    o_scaled = o_acc >> o_shift[:, None]
    o_clamped = np.minimum(np.maximum(o_scaled, o_lo), o_hi)
    lo, hi = value_range(p.out_bits, True)
    # o' has at most 35 bits (out_bits <= 32) and 1/m 17: the product is exact in int64.
    unclipped = shift_round_half_up(o_clamped * recip[:, None], p.out_product_shift)
    y = np.minimum(np.maximum(unclipped, lo), hi)
    return y, (y != unclipped) | (o_clamped != o_scaled)


def check_batch_inputs(params: HpuParams, q, k, v, lengths):
    """The checks of :func:`hpu_golden_batch` (and of its compiled twin) on its integer
    inputs; returns ``(q [R, G, D], k [R, N, D], v [R, N, D], lengths [R] int64)``."""
    p = params
    g, d = p.gqa_group, p.head_dim
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    r = lengths.size
    q = np.asarray(q).reshape(r, g, d)
    top = 1 << (p.q_bits - 1)
    if q.size and (q.min() < -top or q.max() >= top):
        raise ValueError(f"q must be int{p.q_bits} ({-top}..{top - 1})")
    k, v = _kv_rows(k, "k", p.kv_bits), _kv_rows(v, "v", p.kv_bits)
    # rows per request: -1 cannot be inferred from an empty batch
    rows = k.size // (r * d) if r else (k.shape[-2] if k.ndim > 1 else 0)
    k, v = k.reshape(r, rows, d), v.reshape(r, -1 if r else rows, d)
    n = k.shape[1]
    if v.shape[1] != n:
        raise ValueError(f"k and v must hold the same rows, not {n} and {v.shape[1]}")
    if r and (lengths.min() < 1 or lengths.max() > min(p.max_seq_len, n)):
        raise ValueError(
            f"sequence lengths must be in 1..{p.max_seq_len} (and at most the {n} rows given), "
            f"not {lengths.min()}..{lengths.max()}"
        )
    return q, k, v, lengths


def _segment_sums(w, v, flat, segments: int, g: int) -> np.ndarray:
    """``sum(w[row, t] * v[row // g, t])`` over the tokens ``t`` of each segment of each row:
    int64 [rows, segments, head_dim] (zero for segments a row does not have).

    One matrix product per request: its rows' weights spread over [segments, tokens] (each
    token's weight in its segment's row) times its values. The zeros cost multiplications,
    but BLAS does them faster than a gather of the few tokens outside a row's longest segment
    would, in the decode runtime's batches.
    """
    rows, n = w.shape
    spread = np.zeros((rows * segments, n))
    spread[flat, np.tile(np.arange(n), rows)] = w.reshape(-1)
    spread = spread.reshape(rows // g, g * segments, n)
    sums = np.matmul(spread, v.astype(np.float64)).astype(np.int64)
    return sums.reshape(rows, segments, v.shape[-1])


def _kv_rows(values, name: str, bits: int) -> np.ndarray:
    """``values`` as an integer array, checked to be ``bits`` wide (the sums rely on it)."""
    values = np.asarray(values)
    top = 1 << (bits - 1)
    narrow = np.issubdtype(values.dtype, np.integer) and values.dtype.itemsize * 8 <= bits
    if not narrow and values.size and (values.min() < -top or values.max() >= top):
        raise ValueError(f"{name} must be int{bits} ({-top}..{top - 1})")
    return values


def hpu_golden(params: HpuParams, q, score_scale, k, k_scale, v, v_scale, partial: bool = False):
    """Bit-exact model of the ``hpu`` engine for one request.

    Parameters
    ----------
    params
        The engine's parameters.
    q
        Integer queries [gqa_group, head_dim] (``q_bits`` wide).
    score_scale
        binary16 score scales [gqa_group] (:func:`~tandem.host.hpu.params.score_scale`).
    k, v
        int8 rows [n, head_dim], position order, the appended token last.
    k_scale, v_scale
        binary16 per-token scales [n].
    partial
        Also leave ``y`` out (the engine returns ``(m, l, o)`` instead).

    Returns
    -------
    HpuResult
        ``seq_id`` 0; ``m``, ``l``, ``o`` always, ``y`` in full mode. One request of
        :func:`hpu_golden_batch`.
    """
    p = params
    k = np.asarray(k, dtype=np.int64).reshape(-1, p.head_dim)
    n = len(k)
    if not 1 <= n <= p.max_seq_len:
        raise ValueError(f"sequence length must be in 1..{p.max_seq_len}, not {n}")
    batch = hpu_golden_batch(
        p,
        np.reshape(q, (1, p.gqa_group, p.head_dim)),
        np.reshape(score_scale, (1, p.gqa_group)),
        k[None],
        np.reshape(k_scale, (1, n)),
        np.reshape(v, (1, n, p.head_dim)),
        np.reshape(v_scale, (1, n)),
        [n],
    )
    return batch.result(0, partial=partial)


def merge_partials(params: HpuParams, partials) -> np.ndarray:
    """Merge ``(m, l, o)`` results of disjoint slices of one sequence, as FlashDecoding does.

    Returns the attention output as float64 [G, head_dim]: with ``M = max m_i``,
    ``sum_i o_i 2**(m_i - M) / sum_i l_i 2**(m_i - M)`` in real units.

    Raises
    ------
    ValueError
        When ``partials`` is not a non-empty list of partial-mode :class:`HpuResult` of
        ``params``' shapes (``m`` and ``l`` [G], ``o`` [G, head_dim]), or when a query's
        merged ``l`` is not above 0 (the quotient has no value; the part holding the largest
        ``m`` of real results has ``l >= 1``).
    """
    p = params
    g, d = p.gqa_group, p.head_dim
    if not isinstance(partials, (list, tuple)) or not partials:
        raise ValueError(f"partials must be a non-empty list of HpuResult, not {partials!r:.60}")
    want = ((g,), (g,), (g, d))
    for i, r in enumerate(partials):
        shapes = (np.shape(r.m), np.shape(r.l), np.shape(r.o)) if isinstance(r, HpuResult) else ()
        if shapes != want:
            raise ValueError(
                f"partials[{i}] must be a partial-mode HpuResult with m and l [{g}] and o "
                f"[{g}, {d}], not {type(r).__name__} {shapes or ''}".rstrip()
            )
    m = np.stack([r.m for r in partials]).astype(np.float64) / (1 << p.score_frac_bits)
    top = m.max(axis=0)
    factor = np.exp2(m - top)  # [parts, G]
    l_real = np.stack([r.l for r in partials]) / float(1 << p.prob_frac_bits)
    o_real = np.stack([r.o for r in partials]) / float(1 << p.w_frac_bits)
    total_l = (factor * l_real).sum(axis=0)
    total_o = (factor[..., None] * o_real).sum(axis=0)
    if not (total_l > 0).all():
        query = int(np.flatnonzero(~(total_l > 0))[0])
        raise ValueError(f"partials merge query {query}'s l to {total_l[query]:g}, not above 0")
    return total_o / total_l[:, None]
