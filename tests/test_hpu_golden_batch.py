"""The batched golden model (one vectorized call per batch) against an independent,
request-by-request reference written the plain way, with Python integers."""

import numpy as np
import pytest
from tandem.host.common.exp2 import exp2_golden
from tandem.host.common.reciprocal import reciprocal_golden
from tandem.host.hpu import HpuParams, decode_scales, hpu_golden, hpu_golden_batch


def reference(p: HpuParams, q, q_scale, k, k_scale, v, v_scale):
    """The engine's arithmetic row by row, with Python integers (no vectorization, no floats).

    Returns ``(m, l, o, y)`` for one request.
    """
    c_mant, c_exp = decode_scales(q_scale)
    k_mant, k_exp = decode_scales(k_scale)
    v_mant, v_exp = decode_scales(v_scale)

    def scale(value, mant, exp, shift, bits, signed):
        product, total = int(value) * int(mant), int(exp) + shift
        if total >= 0:
            out = max(min(product, 1 << bits), -(1 << bits)) << total
        else:
            out = (product + (1 << (-total - 1))) >> -total
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        return max(lo, min(hi, out))

    def rescale(x, shift):  # round(x * 2**-shift), half up, as the engine's shifter
        return (x + (1 << shift >> 1)) >> shift

    ms, ls, os_, ys = [], [], [], []
    exp2_lo = -(1 << (p.exp2.in_width - 1))
    unit = 1 << p.score_frac_bits
    for g in range(p.gqa_group):
        m, l_acc, o = p.max_start, 0, [0] * p.head_dim  # m: an integer in log2 units
        for t in range(len(k)):
            dot = sum(int(a) * int(b) for a, b in zip(q[g], k[t]))
            s = scale(dot, c_mant[g] * k_mant[t], c_exp[g] + k_exp[t], p.score_frac_bits,
                      p.score_bits, True)  # fmt: skip
            shift = 0
            if s > m * unit:
                top = -(-s // unit)  # ceil(s)
                shift, m = min(top - m, (1 << p.shift_bits) - 1), top
            prob = int(exp2_golden(p.exp2, max(s - m * unit, exp2_lo)))
            w = scale(prob, v_mant[t], v_exp[t], p.w_frac_bits - p.prob_frac_bits,
                      p.weight_bits, False)  # fmt: skip
            l_acc = rescale(l_acc, shift) + prob
            o = [rescale(x, shift) + w * int(b) for x, b in zip(o, v[t])]
        r = int(reciprocal_golden(p.reciprocal, l_acc))  # 1/m, l = m * 2**(msb - frac)
        o_shift = max(l_acc.bit_length() - 1, p.prob_frac_bits - 1) + p.out_o_shift_offset
        top = 1 << (p.out_operand_bits - 1)
        scaled = [max(-top, min(top - 1, x >> o_shift)) for x in o]
        lo, hi = -(1 << (p.out_bits - 1)), (1 << (p.out_bits - 1)) - 1
        half = 1 << (p.out_product_shift - 1)
        y = [max(lo, min(hi, (x * r + half) >> p.out_product_shift)) for x in scaled]
        ms.append(m * unit), ls.append(l_acc), os_.append(o), ys.append(y)
    return np.array(ms), np.array(ls), np.array(os_), np.array(ys)


def random_request(rng, p: HpuParams, n: int, kind: int):
    q = rng.integers(-(1 << (p.q_bits - 1)), 1 << (p.q_bits - 1), (p.gqa_group, p.head_dim))
    kv_top = 1 << (p.kv_bits - 1)
    k = rng.integers(-kv_top, kv_top, (n, p.head_dim))
    v = rng.integers(-kv_top, kv_top, (n, p.head_dim))
    q_scale = np.abs(rng.normal(0, [1e-3, 1.0, 1e-2][kind % 3], p.gqa_group)).astype(np.float16)
    k_scale = np.abs(rng.normal(0, [1e-2, 0.1, 1.0][kind % 3], n)).astype(np.float16)
    v_scale = np.abs(rng.normal(0, [1e-2, 10.0, 1e3][kind % 3], n)).astype(np.float16)
    if kind == 3:
        k_scale[:] = 0  # every score equal: one segment
    if kind == 4:
        top = (1 << (p.q_bits - 1)) - 1  # the max grows often: scores rise with position
        k = np.minimum(np.abs(k), kv_top - 1) * np.arange(n)[:, None] // n
        q = np.minimum(np.abs(q), top)
    return q, q_scale, k, k_scale, v, v_scale


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"head_dim": 32, "gqa_group": 2},
        {"head_dim": 128, "gqa_group": 1, "q_bits": 8},
        {"kv_bits": 16, "lanes": 16},
        {"kv_bits": 8, "lanes": 32, "head_dim": 256, "gqa_group": 1},
    ],
)
def test_golden_matches_the_row_by_row_reference(overrides):
    p = HpuParams(**overrides)
    rng = np.random.default_rng(3)
    for trial in range(10):
        request = random_request(rng, p, int(rng.integers(1, 70)), trial % 5)
        m, l_acc, o, y = reference(p, *request)
        got = hpu_golden(p, *request)
        assert np.array_equal(got.m, m) and np.array_equal(got.l, l_acc), trial
        assert np.array_equal(got.o, o) and np.array_equal(got.y, y), trial


def test_batch_of_mixed_lengths_equals_request_by_request():
    p = HpuParams(head_dim=32, gqa_group=2)
    rng = np.random.default_rng(4)
    lengths = [1, 7, 33, 64, 2, 40]
    requests = [random_request(rng, p, n, i) for i, n in enumerate(lengths)]
    width = max(lengths) + 5  # padding beyond the longest request is ignored as well
    k = np.zeros((len(lengths), width, p.head_dim), np.int64)
    v = np.zeros_like(k)
    k_scale = np.ones((len(lengths), width), np.float16)
    v_scale = np.ones_like(k_scale)
    for i, (_, _, ki, ksi, vi, vsi) in enumerate(requests):
        n = lengths[i]
        k[i, :n], v[i, :n], k_scale[i, :n], v_scale[i, :n] = ki, vi, ksi, vsi
        k[i, n:] = 127  # garbage in the padding must not leak into the result
    q = np.stack([r[0] for r in requests])
    q_scale = np.stack([r[1] for r in requests])
    batch = hpu_golden_batch(p, q, q_scale, k, k_scale, v, v_scale, lengths)
    for i, request in enumerate(requests):
        one = hpu_golden(p, *request)
        assert np.array_equal(batch.m[i], one.m) and np.array_equal(batch.l[i], one.l)
        assert np.array_equal(batch.o[i], one.o) and np.array_equal(batch.y[i], one.y)


def test_batch_rejects_bad_lengths_and_values():
    p = HpuParams(head_dim=32, gqa_group=1, kv_bits=8, lanes=32)
    q = np.zeros((1, 1, 32), np.int64)
    k = np.zeros((1, 4, 32), np.int64)
    s = np.ones((1, 4), np.float16)
    with pytest.raises(ValueError, match="sequence lengths"):
        hpu_golden_batch(p, q, np.ones((1, 1)), k, s, k, s, [5])
    with pytest.raises(ValueError, match="k must be int8"):
        hpu_golden_batch(p, q, np.ones((1, 1)), k + 200, s, k, s, [4])
    with pytest.raises(ValueError, match="q must be int16"):
        hpu_golden_batch(p, q + (1 << 15), np.ones((1, 1)), k, s, k, s, [4])
