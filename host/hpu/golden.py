"""``hpu``: decode attention over a KV cache in device memory — parameters, formats, golden model.

One request covers one sequence and one KV head: ``G = gqa_group`` query vectors attend over
the ``length`` tokens of the sequence. The engine appends the new token's k and v (when the
request carries them), reads every other K and V row once, and runs a one-pass online softmax.

Number formats (every width below is a parameter or derived from one)
----------------------------------------------------------------------
``k``, ``v``
    int8 per element, one IEEE binary16 scale per token (``k_real = k * k_scale``).
``q``
    int8 or int16 (``q_bits``) per element. Its per-vector scale is folded, by the host, into
    one binary16 *score scale* per query: ``c = q_scale * log2(e) / sqrt(head_dim)``
    (:func:`score_scale`), so that scores come out in log2 units and softmax needs only 2**x.
Scales in hardware
    A binary16 value is ``mant * 2**exp`` with ``mant = (1 << 10) | fraction`` (no implicit
    one when the exponent field is 0) and ``exp = max(field, 1) - 25``. The sign bit is
    ignored; the host rejects negative, infinite and NaN scales.
Dot product
    ``dot = sum(q * k)`` exact in ``q_bits + 8 + log2(row elements)`` bits.
Score
    ``s = dot * c * k_scale`` as a signed fixed-point number with ``score_frac_bits``
    fraction bits and ``score_int_bits`` integer bits, rounded half up, saturating.
Online softmax (per row)
    ``m`` is the running maximum (starts at the most negative score). For each row
    ``e = exp2(-|s - m|)`` (one ``exp2`` unit per query); if ``s > m`` the max grows and
    ``alpha = e, p = 1`` else ``alpha = 1, p = e``. ``alpha`` and ``p`` are unsigned with
    ``prob_frac_bits`` fraction bits; 1.0 is exact, so rows that do not grow the max leave
    ``l`` and ``o`` untouched by the rescale. ``l <- round(l * alpha) + p``.
Value weight
    ``w = p * v_scale`` unsigned, ``weight_bits`` wide with ``weight_frac_bits`` fraction bits,
    rounded half up, saturating (v scales above ``2**(weight_bits - weight_frac_bits)``
    saturate).
Accumulator
    ``o <- round(o * alpha) + w * v`` per element, signed, ``o_bits`` wide: exact integer
    products, never overflows (the width covers ``max_seq_len`` tokens).
Result
    Full mode: ``y = o / l`` using ``reciprocal`` on ``l`` (``recip_frac_bits`` fraction bits)
    then one multiply, rounded half up to ``out_frac_bits`` and saturated to ``out_bits``.
    Partial mode: ``(m, l, o)`` for the request's slice of the sequence, merged on the host
    exactly as FlashDecoding does (:func:`merge_partials`).

The golden model is bit-exact with the gateware and vectorized over tokens: between two rows
that grow the running maximum, ``l`` and ``o`` are plain integer sums, so only the (usually
few) rows that grow it are handled one at a time.
"""

import numpy as np
from tandem.host.common.exp2 import exp2_golden
from tandem.host.common.fixed import round_shift_right, saturate
from tandem.host.common.reciprocal import reciprocal_golden

from .codec import HpuResult
from .params import HpuParams, decode_scales

__all__ = ["hpu_golden", "merge_partials"]


# --- golden model --------------------------------------------------------------------------
def _mul_round(a, b, shift: int) -> np.ndarray:
    """``round_half_up(a * b / 2**shift)`` exactly, whatever the width of the product.

    Used where products of the engine's wide accumulators can exceed 63 bits; Python integers
    keep them exact and the arrays involved are small (one accumulator row).
    """
    product = np.asarray(a, dtype=np.int64).astype(object) * np.asarray(b, dtype=np.int64)
    return np.asarray((product + (1 << (shift - 1))) >> shift, dtype=object)


def _scale_product(value, mant, exp, shift: int, bits: int, signed: bool):
    """``value * mant * 2**(exp + shift)`` rounded half up and saturated, like the gateware."""
    product = np.asarray(value, dtype=np.int64) * mant
    total = np.asarray(exp + shift, dtype=np.int64)
    lo, hi = -(1 << bits), 1 << bits
    left = np.clip(product, lo, hi) << np.clip(total, 0, None)
    right = round_shift_right(product, np.clip(-total, 0, 62))
    return saturate(np.where(total >= 0, left, right), bits, signed)


def hpu_golden(params: HpuParams, q, q_scale, k, k_scale, v, v_scale, partial: bool = False):
    """Bit-exact model of the ``hpu`` engine for one request.

    Parameters
    ----------
    params
        The engine's parameters.
    q
        Integer queries [gqa_group, head_dim] (``q_bits`` wide).
    q_scale
        binary16 score scales [gqa_group] (:func:`score_scale`).
    k, v
        int8 rows [n, head_dim], position order, the appended token last.
    k_scale, v_scale
        binary16 per-token scales [n].
    partial
        Also leave ``y`` out (the engine returns ``(m, l, o)`` instead).

    Returns
    -------
    HpuResult
    """
    p = params
    q = np.asarray(q, dtype=np.int64).reshape(p.gqa_group, p.head_dim)
    k = np.asarray(k, dtype=np.int64).reshape(-1, p.head_dim)
    v = np.asarray(v, dtype=np.int64).reshape(-1, p.head_dim)
    n = len(k)
    if not 1 <= n <= p.max_seq_len:
        raise ValueError(f"sequence length must be in 1..{p.max_seq_len}, not {n}")
    one = 1 << p.prob_frac_bits
    c_mant, c_exp = decode_scales(q_scale)
    k_mant, k_exp = decode_scales(k_scale)
    v_mant, v_exp = decode_scales(v_scale)
    dots = q @ k.T  # [G, n], exact
    scores = _scale_product(
        dots,
        c_mant[:, None] * k_mant[None, :],
        c_exp[:, None] + k_exp[None, :],
        p.score_frac_bits,
        p.score_bits,
        True,
    )
    exp2_lo = -(1 << (p.exp2.in_width - 1))
    ms, ls, os_ = [], [], []
    for g in range(p.gqa_group):
        s = scores[g]
        previous = np.concatenate([[p.score_min], np.maximum.accumulate(s)[:-1]])
        grew = s > previous
        e = exp2_golden(p.exp2, np.maximum(-np.abs(s - previous), exp2_lo))
        alpha = np.where(grew, e, one)
        prob = np.where(grew, one, e)
        w = _scale_product(
            prob, v_mant, v_exp, p.weight_frac_bits - p.prob_frac_bits, p.weight_bits, False
        )
        contributions = w[:, None] * v  # [n, d]
        # Segments start at row 0 and at every row that grows the max; inside a segment
        # alpha is exactly 1.0, so l and o are plain sums there.
        starts = np.flatnonzero(grew | (np.arange(n) == 0))
        l_sums = np.add.reduceat(prob, starts)
        o_sums = np.add.reduceat(contributions, starts, axis=0)
        l_acc, o_acc = 0, np.zeros(p.head_dim, dtype=np.int64)
        for index, start in enumerate(starts):
            a = int(alpha[start])
            l_acc = ((l_acc * a + (one >> 1)) >> p.prob_frac_bits) + int(l_sums[index])
            if a != one:  # rescaling by exactly 1.0 is the identity
                o_acc = _mul_round(o_acc, a, p.prob_frac_bits).astype(np.int64)
            o_acc = o_acc + o_sums[index]
        ms.append(int(s.max()))
        ls.append(l_acc)
        os_.append(o_acc)
    m = np.maximum(np.array(ms, dtype=np.int64), p.score_min)
    l_final = np.array(ls, dtype=np.int64)
    o = np.stack(os_)
    y = None
    if not partial:
        r = reciprocal_golden(p.reciprocal, l_final)
        lo, hi = -(1 << (p.out_bits - 1)), (1 << (p.out_bits - 1)) - 1
        y = np.clip(_mul_round(o, r[:, None], p.out_shift), lo, hi).astype(np.int64)
    return HpuResult(0, m, l_final, o, y)


def merge_partials(params: HpuParams, partials) -> np.ndarray:
    """Merge ``(m, l, o)`` results of disjoint slices of one sequence, as FlashDecoding does.

    Returns the attention output as float64 [G, head_dim]: with ``M = max m_i``,
    ``sum_i o_i 2**(m_i - M) / sum_i l_i 2**(m_i - M)`` in real units.
    """
    p = params
    m = np.stack([r.m for r in partials]).astype(np.float64) / (1 << p.score_frac_bits)
    top = m.max(axis=0)
    factor = np.exp2(m - top)  # [parts, G]
    l_real = np.stack([r.l for r in partials]) / float(1 << p.prob_frac_bits)
    o_real = np.stack([r.o for r in partials]) / float(1 << p.weight_frac_bits)
    total_l = (factor * l_real).sum(axis=0)
    total_o = (factor[..., None] * o_real).sum(axis=0)
    return total_o / total_l[:, None]
