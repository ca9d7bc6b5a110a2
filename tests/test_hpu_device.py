"""HpuDevice on the golden backend: capacity, KV writes, attention against hpu_golden."""

import warnings

import numpy as np
import pytest
from tandem.host.common.errors import CapacityError, SaturationWarning
from tandem.host.hpu import (
    HpuParams,
    hpu_golden,
    key_smoothing,
    merge_partials,
    quantize_rows,
    score_scale,
)
from tandem.host.hpu.cycles import FILL_CYCLES, GAP_CYCLES, call_cycles, request_beats
from tandem.host.hpu.device import Attend, AttendBatch, HpuDevice
from tandem.host.hpu.golden import hpu_golden_batch
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS

P = HpuParams(head_dim=32, lanes=16, mem_data_bits=128, kv_bits=8, gqa_group=2, max_seq_len=256)


def tokens(rng, n, d=32):
    k, ks = quantize_rows(rng.standard_normal((n, d)) * np.exp(rng.normal(0, 0.5, (n, 1))))
    v, vs = quantize_rows(rng.standard_normal((n, d)))
    return k, ks, v, vs


def query(rng, p=P, temperature=2.0):
    q, qs = quantize_rows(rng.standard_normal((p.gqa_group, p.head_dim)) * temperature, p.q_bits)
    return q, score_scale(qs, p.head_dim)


def test_allocate_free_capacity():
    dev = HpuDevice(P, memory_bytes=10 * P.layout.page_bytes, max_sequences=3)
    assert dev.free_bytes == dev.capacity_bytes and dev.free_sequences == 3
    a = dev.allocate(64, heads=2)  # 2 pages per head
    assert a.nbytes == dev.bytes_for(64, 2) == 4 * P.layout.page_bytes
    b = dev.allocate(33, heads=1)
    assert b.base(0) == a.start + a.nbytes  # first fit, contiguous
    assert dev.free_bytes == 4 * P.layout.page_bytes
    assert dev.tokens_fit(heads=2) == 2 * PAGE_TOKENS
    with pytest.raises(CapacityError, match="largest free span"):
        dev.allocate(200, heads=1)
    dev.allocate(1)
    with pytest.raises(CapacityError, match="sequence slots"):
        dev.allocate(1)
    dev.free(a)
    dev.free(b)
    assert dev.free_sequences == 2
    big = dev.allocate(192, heads=1)  # the freed spans merged: 6 pages contiguous again
    assert big.start == 0
    with pytest.raises(ValueError, match="not allocated"):
        dev.free(a)


def test_write_read_kv_roundtrip():
    rng = np.random.default_rng(1)
    dev = HpuDevice(P, memory_bytes=1 << 16)
    seq = dev.allocate(100, heads=3)
    k, ks, v, vs = tokens(rng, 40)
    dev.write_kv(seq, 1, k, ks, v, vs)
    k2, ks2, v2, vs2 = tokens(rng, 3)
    dev.append(seq, 1, k2, ks2, v2, vs2)
    got = dev.read_kv(seq, 1)
    np.testing.assert_array_equal(got[0], np.concatenate([k, k2]))
    np.testing.assert_array_equal(got[1].view(np.uint16), np.concatenate([ks, ks2]).view(np.uint16))
    np.testing.assert_array_equal(got[2], np.concatenate([v, v2]))
    assert seq.lengths.tolist() == [0, 43, 0]
    assert dev.read_kv(seq, 0)[0].shape == (0, 32)  # other heads untouched
    with pytest.raises(ValueError, match="do not fit"):
        dev.write_kv(seq, 0, *tokens(rng, 101))


def test_attend_matches_golden_with_append():
    rng = np.random.default_rng(2)
    dev = HpuDevice(P, memory_bytes=1 << 16)
    seq = dev.allocate(64, heads=1)
    k, ks, v, vs = tokens(rng, 31)
    dev.write_kv(seq, 0, k, ks, v, vs)
    for step in range(3):  # crosses the page boundary at 32
        q, c = query(rng)
        new = tokens(rng, 1)
        got = dev.attend(seq, 0, q, c, new=new)
        k, ks = np.concatenate([k, new[0]]), np.concatenate([ks, new[1]])
        v, vs = np.concatenate([v, new[2]]), np.concatenate([vs, new[3]])
        want = hpu_golden(P, q, c, k, ks, v, vs)
        np.testing.assert_array_equal(got.y, want.y)
        assert seq.lengths[0] == 32 + step
        assert dev.last_cycles > FILL_CYCLES
    np.testing.assert_array_equal(dev.read_kv(seq, 0)[0], k)  # the engine's appends landed


def test_attend_many_in_order_and_partial_merge():
    """A batch with two calls on one head sees the first call's token; partials merge."""
    rng = np.random.default_rng(3)
    dev = HpuDevice(P, memory_bytes=1 << 17)
    left, right = dev.allocate(64), dev.allocate(64)
    whole = dev.allocate(128)
    k, ks, v, vs = tokens(rng, 100)
    dev.write_kv(left, 0, k[:64], ks[:64], v[:64], vs[:64])
    dev.write_kv(right, 0, k[64:], ks[64:], v[64:], vs[64:])
    dev.write_kv(whole, 0, k, ks, v, vs)
    q, c = query(rng, temperature=6.0)
    results = dev.attend_many(
        [
            Attend(left, 0, q, c, partial=True),
            Attend(right, 0, q, c, partial=True),
            Attend(whole, 0, q, c),
        ]
    )
    merged = merge_partials(P, results[:2]) * (1 << P.out_frac_bits)
    y = results[2].y.astype(np.float64)
    allowance = 4 + 2.0**-11 * np.abs(y).max(axis=1, keepdims=True)
    assert np.all(np.abs(merged - y) <= allowance)
    assert results[0].y is None and results[2].m.size == 0  # what the engine emits
    new1, new2 = tokens(rng, 1), tokens(rng, 1)
    a, b = dev.attend_many([Attend(right, 0, q, c, new=new1), Attend(right, 0, q, c, new=new2)])
    kk = np.concatenate([k[64:], new1[0], new2[0]])
    kks = np.concatenate([ks[64:], new1[1], new2[1]])
    vv = np.concatenate([v[64:], new1[2], new2[2]])
    vvs = np.concatenate([vs[64:], new1[3], new2[3]])
    np.testing.assert_array_equal(b.y, hpu_golden(P, q, c, kk, kks, vv, vvs).y)
    np.testing.assert_array_equal(a.y, hpu_golden(P, q, c, kk[:-1], kks[:-1], vv[:-1], vvs[:-1]).y)
    assert right.lengths[0] == 38


def test_attend_batch_is_attend_many_as_arrays():
    """attend_batch gives, array for array, what attend_many gives for the same calls on an
    identical device: appends and not, partial and full, two calls on one head, two sequences;
    the lengths and cycles advance the same way."""
    rng = np.random.default_rng(5)
    devices = [HpuDevice(P, memory_bytes=1 << 18) for _ in range(2)]
    seqs = []
    for dev in devices:
        a, b = dev.allocate(96, heads=2), dev.allocate(64, heads=2)
        for seq, n in ((a, 40), (b, 33)):
            for head in range(2):
                dev.write_kv(seq, head, *tokens(np.random.default_rng(n + head), n))
        seqs.append((a, b))
    calls = []  # (sequence index, head, append, partial)
    for which, head, append, partial in [
        (0, 0, True, False),
        (0, 1, False, True),
        (1, 0, True, True),
        (1, 1, True, False),
        (0, 0, True, False),  # the same head again: sees the first call's token
    ]:
        q, c = query(rng, temperature=4.0)
        calls.append((which, head, q, c, tokens(rng, 1) if append else None, partial))
    many = devices[0].attend_many(
        [Attend(seqs[0][w], h, q, c, new, part) for w, h, q, c, new, part in calls]
    )
    news = [new if new is not None else tokens(rng, 1) for *_, new, _ in calls]
    batch = AttendBatch(
        seqs=[seqs[1][w] for w, *_ in calls],
        heads=np.array([h for _, h, *_ in calls]),
        q=np.stack([q for _, _, q, *_ in calls]),
        score_scale=np.stack([c for _, _, _, c, *_ in calls]),
        partial=np.array([part for *_, part in calls]),
        append=np.array([new is not None for *_, new, _ in calls]),
        new_k=np.concatenate([n[0] for n in news]),
        new_k_scale=np.concatenate([n[1] for n in news]),
        new_v=np.concatenate([n[2] for n in news]),
        new_v_scale=np.concatenate([n[3] for n in news]),
    )
    arrays = devices[1].attend_batch(batch)
    assert len(arrays) == len(many) == len(calls)
    for got, want in zip(arrays, many, strict=True):
        assert got.seq_id == want.seq_id
        for field in ("m", "l", "o"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
        assert (got.y is None) == (want.y is None)
        if want.y is not None:
            np.testing.assert_array_equal(got.y, want.y)
    np.testing.assert_array_equal(arrays.y[~batch.partial], [r.y for r in many if r.y is not None])
    assert not arrays.y[batch.partial].any() and not arrays.o[~batch.partial].any()
    for left, right in zip(seqs[0], seqs[1], strict=True):
        np.testing.assert_array_equal(left.lengths, right.lengths)
    assert seqs[0][0].lengths.tolist() == [42, 40]
    assert devices[0].last_cycles == devices[1].last_cycles > 0


def test_bad_calls():
    rng = np.random.default_rng(4)
    dev = HpuDevice(P, memory_bytes=1 << 16)
    seq = dev.allocate(32)
    q, c = query(rng)
    with pytest.raises(ValueError, match="holds no token"):
        dev.attend(seq, 0, q, c)
    dev.write_kv(seq, 0, *tokens(rng, 32))
    with pytest.raises(ValueError, match="integers"):
        dev.attend(seq, 0, q.astype(float), c)
    with pytest.raises(ValueError, match="rows"):
        dev.attend(seq, 0, q[:1], c)
    with pytest.raises(CapacityError, match="full"):
        dev.attend(seq, 0, q, c, new=tokens(rng, 1))
    with pytest.raises(ValueError, match="int8"):
        dev.write_kv(seq, 0, np.full((1, 32), 200), [1.0], np.zeros((1, 32), int), [1.0])
    with pytest.raises(ValueError, match="unknown backend"):
        HpuDevice(P, backend="fpga")


def test_cycle_model():
    """The modelled cycles follow the documented formula."""
    rng = np.random.default_rng(5)
    dev = HpuDevice(P, memory_bytes=1 << 16)
    seq = dev.allocate(96)
    dev.write_kv(seq, 0, *tokens(rng, 70))
    q, c = query(rng)
    dev.attend(seq, 0, q, c)
    # 70 rows: pages of 32/32/6 rows; a row is 64 bytes (32 padded), 4 beats of 16 bytes,
    # and so is each page's scale block.
    reads = 3 * 4 + 70 * 4
    # Its 2 result rows of 4 beats, out_beat_cycles each, follow its reads (DRAIN).
    results = 2 * 4 * P.out_beat_cycles
    assert dev.last_cycles == FILL_CYCLES + reads + GAP_CYCLES + results
    from tandem.host.hpu import HpuRequest

    short = HpuRequest(0, 0, 1, q, c)
    desc, read, out = (int(b[0]) for b in request_beats(P, [short.length], append=False))
    # header 4 beats + 2 queries of 64 int16 elements (8 beats each); 1 scale block + 1 row;
    # 2 result rows of 4 beats.
    assert (desc, read, out) == (4 + 2 * 8, 4 + 4, 2 * 4)
    # Each request's busy cycles are its results (8 beats of out_beat_cycles); the last one's
    # descriptor comes before them (DRAIN = max(D, R)).
    busy = max(20, 8 * P.out_beat_cycles)
    drain = 20 + 8 * P.out_beat_cycles - busy
    assert call_cycles(P, [short, short]) == FILL_CYCLES + 2 * (busy + GAP_CYCLES) + drain


def test_a_closed_golden_device_refuses_every_call():
    from tandem.host.common.errors import DeviceClosedError

    dev = HpuDevice(P, memory_bytes=1 << 20)
    seq = dev.allocate(32)
    with dev:
        pass
    for call in (
        lambda: dev.allocate(32),
        lambda: dev.read_kv(seq, 0),
        lambda: dev.free(seq),
        lambda: dev.attend_many([]),
    ):
        with pytest.raises(DeviceClosedError, match="hpu0: the device is closed"):
            call()


def test_saturations_are_counted_and_reported_once():
    """Values the engine clips are counted per place and call, and the first call that clips
    warns once: v scales above 2**(weight_bits - weight_frac_bits) saturate w, huge q and k
    scales saturate the score, and both counts match an independent count."""
    rng = np.random.default_rng(9)
    dev = HpuDevice(P, memory_bytes=1 << 16)
    seq = dev.allocate(32)
    k, ks, v, vs = tokens(rng, 20)
    dev.write_kv(seq, 0, k, ks, v, vs)
    q, c = query(rng)
    dev.attend(seq, 0, q, c)
    assert dev.last_saturations == {} and dev.total_saturations == {}
    big_v = vs.copy()
    big_v[:5] = 16.0  # w = p * 16 > 2**(26 - 24): saturates where p > 1/4
    dev.write_kv(seq, 0, k, ks, v, big_v)
    with pytest.warns(SaturationWarning, match="saturated values"):
        dev.attend(seq, 0, q, c)
    # Independent count: w before saturation is p * v_scale (p from the golden model's own
    # softmax is not needed: rows 0..4 of each query saturate unless their p is small).
    result = hpu_golden_batch(P, q[None], c[None], k[None], ks[None], v[None], big_v[None], [20])
    weight = dev.last_saturations["weight"]
    assert weight == int(result.saturated["weight"][0]) and 0 < weight <= 5 * P.gqa_group
    big_score = np.full(P.gqa_group, 60000.0, dtype=np.float16)
    dev.write_kv(seq, 0, k, np.full(20, 60000.0, dtype=np.float16), v, vs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning came once; counting goes on silently
        dev.attend(seq, 0, q, big_score)
    score = dev.last_saturations["score"]
    dots = q.astype(np.float64) @ k.T.astype(np.float64)
    real = dots * 60000.0 * 60000.0 * (1 << P.score_frac_bits)
    assert score == int((np.abs(real) >= 1 << (P.score_bits - 1)).sum()) > 0
    assert dev.total_saturations["weight"] == weight and dev.total_saturations["score"] == score


def test_float_inputs_are_the_runtime_recipe():
    """write_kv_real / attend_real quantize as the decode runtime does (smoothed keys, int8
    per token, q to q_bits with its scale folded into the score scale): the same integers
    reach the engine as through write_kv / attend, and the output is float attention within
    the recipe's error."""
    rng = np.random.default_rng(11)
    k, v = rng.standard_normal((40, P.head_dim)), rng.standard_normal((40, P.head_dim))
    k[:, 3] *= 20  # an outlier channel: what smoothing is for
    q = rng.standard_normal((P.gqa_group, P.head_dim)) * 2
    new = rng.standard_normal(P.head_dim), rng.standard_normal(P.head_dim)
    factors = key_smoothing(k)
    floats, ints = (HpuDevice(P, memory_bytes=1 << 16) for _ in range(2))
    a, b = floats.allocate(64), ints.allocate(64)
    floats.write_kv_real(a, 0, k, v, smoothing=factors)
    y = floats.attend_real(a, 0, q, new=new, smoothing=factors)
    (ki, ks), (vi, vs) = quantize_rows(k / factors), quantize_rows(v)
    ints.write_kv(b, 0, ki, ks, vi, vs)
    qi, qs = quantize_rows(q * factors, P.q_bits)
    token = (*quantize_rows(new[0] / factors), *quantize_rows(new[1]))
    want = ints.attend(b, 0, qi, score_scale(qs, P.head_dim), new=token)
    np.testing.assert_array_equal(y, want.real(P))
    keys, values = np.vstack([k, new[0]]), np.vstack([v, new[1]])
    logits = q @ keys.T / np.sqrt(P.head_dim)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    ref = (weights / weights.sum(axis=1, keepdims=True)) @ values
    assert np.all(np.linalg.norm(y - ref, axis=1) / np.linalg.norm(ref, axis=1) < 0.05)
    for bad in (
        lambda: floats.attend_real(a, 0, q[:1]),
        lambda: floats.attend_real(a, 0, np.full_like(q, np.nan)),
        lambda: floats.attend_real(a, 0, q, new=(new[0],)),
        lambda: floats.attend_real(a, 0, q, smoothing=-factors),
        lambda: floats.write_kv_real(a, 0, k[:, :3], v[:, :3]),
        lambda: floats.write_kv_real(a, 0, k, v, smoothing=factors[:3]),
    ):
        with pytest.raises(ValueError):
            bad()
    assert a.lengths[0] == 41  # the rejected calls appended nothing


def test_float_rows_too_large_for_a_binary16_scale_raise_and_change_nothing():
    """Float rows never clip (one binary16 scale per row from its own peak); a row whose scale
    would leave binary16 (|k| = 1e7 for int8 rows, beyond 65504 * 127) names the row, its peak
    and the range, and writes or appends nothing."""
    dev = HpuDevice(P, memory_bytes=1 << 16)
    seq = dev.allocate(64)
    k, v = np.ones((4, P.head_dim)), np.ones((4, P.head_dim))
    k[2, 5] = 1e7
    with pytest.raises(
        ValueError,
        match=r"k / smoothing row 2 reaches 1e\+07, beyond int8 values with a binary16 scale, "
        r"range -8\.31901e\+06\.\.8\.31901e\+06",
    ):
        dev.write_kv_real(seq, 0, k, v)
    k[2, 5] = 65504 * 127  # the largest peak the range promises: fits, unclipped
    dev.write_kv_real(seq, 0, k, v)
    stored, scales, _, _ = dev.read_kv(seq, 0)
    assert stored[2, 5] == 127 and float(scales[2]) == 65504.0
    q = np.ones((P.gqa_group, P.head_dim))
    q[1, 0] = 1e12
    with pytest.raises(ValueError, match=r"q \* smoothing row 1 reaches 1e\+12.*int16"):
        dev.attend_real(seq, 0, q)
    new = np.full(P.head_dim, 1.0), np.full(P.head_dim, -1e9)
    with pytest.raises(ValueError, match=r"new v reaches -?1e\+09"):
        dev.attend_real(seq, 0, np.ones((P.gqa_group, P.head_dim)), new=new)
    assert seq.lengths[0] == 4 and dev.calls == 0
    with pytest.raises(ValueError, match=r"q must be int16 \(-32768\.\.32767\), not 40000 at"):
        dev.attend(seq, 0, np.full((P.gqa_group, P.head_dim), 40000), np.ones(P.gqa_group))
