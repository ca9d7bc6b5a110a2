"""The ``hpu`` engine's datapath blocks, each alone in Amaranth's simulator against the host.

The whole engine is checked bit- and cycle-exact against the golden model in ``test_hpu.py``;
these tests pin the K side, the V side and the output on their own ports (their class
docstrings, the layouts of :mod:`tandem.hw.hpu.beats`), under seeded random gaps and
backpressure. Every reference is built here from the host side, never from the gateware: the
golden model's own steps (:mod:`tandem.host.hpu.golden`: the scores' rounding, ``exp2``'s
table, ``w = p * v_scale``) walked row by row, and checked against
:func:`~tandem.host.hpu.hpu_golden`'s final m, l, o and y before a component meets them.

* K side: each row's entry (every query's shift of l and o, the clamped growth of the integer
  max, ``2**shift_bits - 1`` on a request's first row; and ``p = exp2(s - m)``) and each
  request's final (m, l); ``bank_done`` once per request for its slot, after which the slot
  may be rewritten at once; ``i.ready`` falls while ``rows_o`` is not read, and no row is lost;
* score scale: ``dot * c * k_scale`` rounded half up and saturated, three cycles later;
* V side: the snapshot is the golden ``o`` (padding elements too) with the request's tag, held
  unchanged until ``release``; the next request's last beat waits for it;
* result scale: ``y = round(clamp(o >> shift) * (1/m))`` saturated, raw words unchanged, under
  backpressure;
* output: result beats are :func:`~tandem.host.hpu.result_words` of the golden result (full
  and partial mode, elements past ``head_dim`` zero), ``release`` once per request before its
  last beat leaves, after which the snapshot may be overwritten at once.

Two parameter sets: the default engine (int16, G 3, four beats a row: the V update over two
stages) and a small int8 one with one beat a row (G 2, the V update in one stage), both with
a head narrower than the row or with int16 values.
"""

from collections import deque

import numpy as np
import pytest
from amaranth.sim import Simulator
from tandem.host.common.fixed import shift_round_half_up, value_range
from tandem.host.common.reciprocal import leading_one, reciprocal_golden
from tandem.host.hpu import HpuParams, HpuResult, decode_scales, hpu_golden, result_words
from tandem.host.hpu import golden as hpu_model
from tandem.hw.hpu.beats import DESCRIPTOR_SLOTS, TAG_BITS
from tandem.hw.hpu.k_side import KSide, ScoreScale
from tandem.hw.hpu.output import Output, ResultScale
from tandem.hw.hpu.v_side import VSide
from tandem.sim.amaranth_sim import run_scenario

from .test_hpu import SMALL, make_sequence

PARAMS = {
    # int16 K and V, head_dim 64, G 3: four beats a row (the V side's update over two stages).
    "default": HpuParams(),
    # int8, head_dim 32 in 64-element rows, G 2: one beat a row (the update in one stage).
    "one_beat": HpuParams(**{**SMALL, "lanes": 64, "mem_data_bits": 512}, gqa_group=2),
    # int8 queries and K, G 3: queries 0 and 1 share the K side's multipliers, query 2 not.
    "int8_q": HpuParams(**SMALL, gqa_group=3, q_bits=8),
    # SmolLM2's card engine: two beats a row, so G 3's score products take two units over two
    # phases (the second unit idle in the second).
    "two_units": HpuParams(lanes=32, mem_data_bits=512),
    # The scaling products in DSP48E2s (the default puts them in fabric, where their adder
    # trees take more stages), on one and two units.
    "dsp": HpuParams(scaling_multipliers="dsp"),
    "dsp_two_units": HpuParams(lanes=32, mem_data_bits=512, scaling_multipliers="dsp"),
}
#: The output's tests also run with a multiplier per lane (each result beat in one part; the
#: default shares them over 4 parts).
OUTPUT_PARAMS = {**PARAMS, "one_part": HpuParams(out_beat_cycles=1)}


# --- references from the host side -----------------------------------------------------------
def _word(values, bits: int) -> int:
    return sum((int(v) & ((1 << bits) - 1)) << (k * bits) for k, v in enumerate(values))


def _scale_bits(scale) -> int:
    return int(np.asarray(scale, dtype=np.float16).view(np.uint16))


def _request(p, n, rng, *, jump=None, sign=1):
    """A request of ``n`` rows: make_sequence's q/K/V, the rows padded to ``row_elems`` with
    random elements (the query's padding is zero, as the descriptor's), and the golden model's
    steps row by row. ``jump``: a row whose k scale is 2**9 times larger, toward every query
    (``sign`` 1: its score grows every max past the shift's width, and the rows after it
    underflow ``exp2``) or away from them (-1: the least score, which grows no max)."""
    seq = make_sequence(p, n, rng)
    top = 1 << (p.kv_bits - 1)
    if jump is not None:
        toward = (seq["q"] / np.linalg.norm(seq["q"], axis=1, keepdims=True)).sum(axis=0)
        seq["k"][jump] = sign * np.rint(toward / np.abs(toward).max() * (top - 1))
        seq["ks"] = seq["ks"].copy()
        seq["ks"][jump] = np.float16(float(seq["ks"][jump]) * 512)
    pad = p.row_elems - p.head_dim
    seq["k_rows"] = np.concatenate([seq["k"], rng.integers(-top, top, (n, pad))], axis=1)
    seq["v_rows"] = np.concatenate([seq["v"], rng.integers(-top, top, (n, pad))], axis=1)
    seq["q_rows"] = np.concatenate([seq["q"], np.zeros((p.gqa_group, pad), np.int64)], axis=1)
    seq.update(_steps(p, seq, n))
    return seq


def _steps(p, seq, n):
    """The golden model's arithmetic row by row (:func:`tandem.host.hpu.hpu_golden_batch`
    walks only the rows that grow the max): each row's score, shift and ``p``, its weights,
    and ``l`` and ``o`` (every element of the row, padding included) after the last row."""
    g, sfb = p.gqa_group, p.score_frac_bits
    dots = seq["q"].astype(np.int64) @ seq["k"].astype(np.int64).T  # [G, n]
    scores, _ = hpu_model._round_scaled_int(p, dots[None], seq["c"], seq["ks"], (1, g, n))
    scores = scores[0]
    ceilings = -((-scores) >> sfb)  # the integer max a row's score grows it to
    start = np.full((g, 1), p.max_start, np.int64)
    maxes = np.maximum.accumulate(np.concatenate([start, ceilings], axis=1), axis=1)
    top_shift = (1 << p.shift_bits) - 1
    shifts = np.minimum(np.diff(maxes, axis=1), top_shift)
    shifts[:, 0] = top_shift  # a request's first row shifts by the most: it clears l and o
    distance = np.minimum((maxes[:, 1:] << sfb) - scores, 1 << (p.exp2.in_width - 1))
    prob = hpu_model._exp2_of_distance(p.exp2)[distance]  # [G, n]
    v_value = hpu_model._scale_value(seq["vs"], (1, n))
    w_shift = float(2.0 ** (p.w_frac_bits - p.prob_frac_bits))
    weights, _ = hpu_model._round_scaled(prob * (v_value * w_shift), p.weight_bits, False)
    l_acc = np.zeros(g, np.int64)
    o_acc = np.zeros((g, p.row_elems), np.int64)
    for t in range(n):
        amount = np.minimum(shifts[:, t], 62)  # the golden model's widest shift: leaves 0
        l_acc = shift_round_half_up(l_acc, amount) + prob[:, t]
        o_acc = shift_round_half_up(o_acc, amount[:, None]) + weights[:, t, None] * seq["v_rows"][t]
    gold = hpu_golden(p, seq["q"], seq["c"], seq["k"], seq["ks"], seq["v"], seq["vs"])
    assert np.array_equal(maxes[:, -1] << sfb, gold.m) and np.array_equal(l_acc, gold.l)
    assert np.array_equal(o_acc[:, : p.head_dim], gold.o)
    return {"shifts": shifts, "prob": prob, "m": maxes[:, -1], "l": l_acc, "o": o_acc}


def _row_beats(p, rows, scales):
    """The row beats a sequencer hands a side for ``rows`` [n, row_elems]: element 0 lowest."""
    n, lanes, beats = len(rows), p.lanes, p.row_beats
    return [
        {
            "data": _word(row[b * lanes : (b + 1) * lanes], p.kv_bits),
            "scale": _scale_bits(scales[t]),
            "beat": b,
            "last_beat": int(b == beats - 1),
            "first_row": int(t == 0),
            "last_row": int(t == n - 1),
        }
        for t, row in enumerate(rows)
        for b in range(beats)
    ]


def _y(p, o, l_sum):
    """The golden model's division (:func:`tandem.host.hpu.hpu_golden_batch`): ``o`` [G, E]
    by ``l`` [G] into y [G, E], with 1/m of l's mantissa and o's shift by l's exponent."""
    recip = reciprocal_golden(p.reciprocal, l_sum)
    msb = np.maximum(leading_one(l_sum, p.l_bits), p.prob_frac_bits - 1)
    o_scaled = np.asarray(o) >> (msb + p.out_o_shift_offset)[:, None]
    o_clamped = np.clip(o_scaled, *value_range(p.out_operand_bits, True))
    y = shift_round_half_up(o_clamped * recip[:, None], p.out_product_shift)
    return np.clip(y, *value_range(p.out_bits, True))


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


class _Offer:
    """A producer on a stream that idles with probability ``gap`` before each payload and then
    holds it until it is taken: each cycle :meth:`drive`, then :meth:`fire` (before the clock
    edge), and :meth:`advance` after the edge where it fired."""

    def __init__(self, port, payloads, gap, rng):
        self.port, self.pending, self.gap, self.rng = port, deque(payloads), gap, rng
        self.offering = False

    def drive(self, ctx, allowed=True):
        if not self.offering and self.pending and allowed and self.rng.random() >= self.gap:
            self.offering = True
        ctx.set(self.port.valid, self.offering)
        if self.pending:
            ctx.set(self.port.payload, self.pending[0])
        return self.offering

    def fire(self, ctx):
        """Whether the offered payload is taken this cycle (read before the edge)."""
        return self.offering and bool(ctx.get(self.port.ready))

    def advance(self):
        self.pending.popleft()
        self.offering = False


# --- K side ----------------------------------------------------------------------------------
def _load_slot(ctx, dut, p, slot, writes, seq=None, rng=None):
    """A descriptor slot's score scales, set at once, and its query beats, queued on
    ``writes`` for ``query_w`` (one a cycle, as the parser sends them): ``seq``'s, or random
    ones (whose padding elements are not zero) where no request owns it."""
    mask = (1 << p.mem_data_bits) - 1
    for g in range(p.gqa_group):
        if seq is None:
            top = 1 << (p.q_bits - 1)
            query = rng.integers(-top, top, p.row_elems)
            scale = int(rng.integers(0x3000, 0x5000))
        else:
            query, scale = seq["q_rows"][g], _scale_bits(seq["c"][g])
        word = _word(query, p.q_bits)
        for b in range(p.q_beats):
            writes.append((slot, g * p.q_beats + b, word >> (b * p.mem_data_bits) & mask))
        ctx.set(dut.query_scales[slot][g], scale)


def _drive_query_write(ctx, dut, writes) -> None:
    """Offers the first queued query beat on ``query_w`` (taken at the next edge)."""
    ctx.set(dut.query_w.valid, bool(writes))
    if writes:
        slot, beat, data = writes[0]
        ctx.set(dut.query_w.payload.slot, slot)
        ctx.set(dut.query_w.payload.beat, beat)
        ctx.set(dut.query_w.payload.data, data)


@pytest.mark.parametrize("name", PARAMS)
def test_k_side_rows_and_stats_match_the_golden_softmax(name):
    """Three requests (slots 1, 2, then 1 again once ``bank_done`` frees it); the second's
    row 5 grows the max past the shift's width, the third's first row scores the least score
    (it grows no max, yet must clear the previous l). ``rows_o`` is not read until ``i.ready``
    has been low for 20 cycles, ``stats_o`` not until every beat is in (three (m, l) held);
    then both see random backpressure."""
    p = PARAMS[name]
    rng = np.random.default_rng(11)
    slots = (1, 2, 1)
    requests = [
        _request(p, 23, rng),
        _request(p, 30, rng, jump=5),
        _request(p, 17, rng, jump=0, sign=-1),
    ]
    top_shift = (1 << p.shift_bits) - 1
    assert (requests[1]["shifts"][:, 5] == top_shift).all()  # clamped growth
    assert (requests[1]["prob"][:, 6:] == 0).any()  # exp2 underflows after the jump
    assert (requests[2]["prob"][:, 0] == 1 << p.prob_frac_bits).all()  # s = m = max_start
    expected_rows = [
        [(int(r["shifts"][g, t]), int(r["prob"][g, t])) for g in range(p.gqa_group)]
        for r in requests
        for t in range(r["shifts"].shape[1])
    ]
    expected_stats = [
        [(int(r["m"][g]), int(r["l"][g])) for g in range(p.gqa_group)] for r in requests
    ]
    beats = [
        (index, beat)
        for index, r in enumerate(requests)
        for beat in _row_beats(p, r["k_rows"], r["ks"])
    ]
    dut = KSide(p)
    got_rows, got_stats, pulses = [], [], []
    refused_streak, stall_end = 0, None
    done_at, last_taken = {}, {}
    control = np.random.default_rng(12)

    async def bench(ctx):
        nonlocal refused_streak, stall_end
        owner = {0: None, 1: 0, 2: 1}  # which request's queries each slot holds
        writes = deque()  # query beats still to write: (slot, beat, data)
        _load_slot(ctx, dut, p, 0, writes, rng=control)
        _load_slot(ctx, dut, p, 1, writes, requests[0])
        _load_slot(ctx, dut, p, 2, writes, requests[1])
        producer = _Offer(dut.i, [beat for _, beat in beats], 0.2, control)
        owners = deque(index for index, _ in beats)
        unfinished = list(range(len(requests)))  # requests whose bank_done is still to come
        for cycle in range(4000):
            index = owners[0] if owners else None
            allowed = (
                index is not None
                and owner[slots[index]] == index
                and all(slot != slots[index] for slot, _, _ in writes)
            )
            _drive_query_write(ctx, dut, writes)
            offering = producer.drive(ctx, allowed)
            # bank matters only with a beat: any slot between them
            bank = slots[index] if offering else int(control.integers(DESCRIPTOR_SLOTS))
            ctx.set(dut.bank, bank)
            stalled = stall_end is None
            rows_ready = not stalled and control.random() < 0.7
            stats_ready = not owners and control.random() < 0.5
            ctx.set(dut.rows_o.ready, rows_ready)
            ctx.set(dut.stats_o.ready, stats_ready)
            taken = producer.fire(ctx)
            if producer.offering and not taken:
                refused_streak += 1
                if stalled and refused_streak >= 20:
                    stall_end = cycle
            else:
                refused_streak = 0
            if rows_ready and ctx.get(dut.rows_o.valid):
                entry = ctx.get(dut.rows_o.payload)
                got_rows.append([(int(e.shift), int(e.prob)) for e in entry])
            if stats_ready and ctx.get(dut.stats_o.valid):
                stats = ctx.get(dut.stats_o.payload)
                got_stats.append([(int(s.max), int(s.sum)) for s in stats])
            done = ctx.get(dut.bank_done)
            if done:
                pulses.append(done)
                for slot in range(DESCRIPTOR_SLOTS):
                    if done >> slot & 1:
                        request = next(r for r in unfinished if slots[r] == slot)
                        unfinished.remove(request)
                        done_at[request] = cycle
                        # The slot is free at once: load the next request using it, or junk.
                        following = [r for r in unfinished if slots[r] == slot]
                        nxt = following[0] if following else None
                        owner[slot] = nxt
                        seq = requests[nxt] if nxt is not None else None
                        _load_slot(ctx, dut, p, slot, writes, seq, control)
            wrote = ctx.get(dut.query_w.valid)
            await ctx.tick()
            if wrote:
                writes.popleft()
            if taken:
                if beats[len(beats) - len(owners)][1]["last_row"]:
                    last_taken[index] = cycle
                producer.advance()
                owners.popleft()
            if len(got_rows) == len(expected_rows) and len(got_stats) == len(requests):
                break
        # Nothing more comes out.
        ctx.set(dut.rows_o.ready, 1)
        ctx.set(dut.stats_o.ready, 1)
        for _ in range(30):
            assert not ctx.get(dut.rows_o.valid) and not ctx.get(dut.stats_o.valid)
            await ctx.tick()

    _run(dut, bench)
    assert stall_end is not None, "i.ready never fell while rows_o stalled"
    assert len(got_rows) == len(expected_rows)
    for row, (got, want) in enumerate(zip(got_rows, expected_rows, strict=True)):
        assert got == want, f"row {row}: {got} != {want}"
    assert got_stats == expected_stats
    # bank_done: one single-slot pulse per request, for its slot, after its last beat.
    assert pulses == [1 << s for s in slots]
    assert all(done_at[r] > last_taken[r] for r in range(len(requests)))


# --- score scale -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", PARAMS)
def test_score_scale_rounds_and_saturates_like_the_golden_scores(name):
    """Random dot products and binary16 scales (typical ones, any finite pattern: left shifts
    that saturate, and tiny ones: right shifts that round to 0): each score is the golden model's
    ``dot * c * k_scale`` (:func:`tandem.host.hpu.golden._round_scaled_int`), three cycles
    after its row, with the row's flags."""
    p = PARAMS[name]
    rng = np.random.default_rng(13)
    g, count = p.gqa_group, 160
    top = 1 << (p.dot_bits - 1)
    dots = np.where(
        rng.random((count, g)) < 0.5,
        rng.integers(-top, top, (count, g)),
        rng.integers(-(1 << 16), 1 << 16, (count, g)),
    )
    # Typical scales, any finite pattern (left shifts that saturate), and tiny ones (right
    # shifts past the product: 0, or a rounding of it).
    kind = rng.choice(3, (count, g), p=(0.4, 0.3, 0.3))
    c = rng.uniform(1e-4, 0.3, (count, g)).astype(np.float16)
    k = rng.uniform(1e-5, 0.05, (count, g)).astype(np.float16)
    for scales in (c, k):
        bits = scales.view(np.uint16)
        bits[kind == 1] = rng.integers(0, 0x7C00, (kind == 1).sum())
        bits[kind == 2] = rng.integers(0, 0x1000, (kind == 2).sum())
    flat = count * g
    want, clipped = hpu_model._round_scaled_int(
        p, dots.reshape(flat, 1, 1), c.reshape(flat, 1), k.reshape(flat, 1), (flat, 1, 1)
    )
    want, clipped = want.reshape(count, g), clipped.reshape(count, g)
    lo, hi = value_range(p.score_bits, True)
    assert (want == hi).any() and (want == lo).any() and (want == 0).any()
    assert (~clipped & (want != 0)).sum() > count // 2
    c_mant, c_exp = decode_scales(c)
    k_mant, k_exp = decode_scales(k)
    total = c_exp + k_exp + p.score_frac_bits  # the exponent of the product's scale
    rows = [
        {
            "dot": dots[r].tolist(),
            "mant": (c_mant[r] * k_mant[r]).tolist(),
            "left": np.maximum(total[r], 0).tolist(),
            "right": np.minimum(np.maximum(-total[r], 0), 62).tolist(),
            "up": (total[r] >= 0).astype(int).tolist(),
            "first_row": int(rng.integers(2)),
            "last_row": int(rng.integers(2)),
        }
        for r in range(count)
    ]
    dut = ScoreScale(p)
    sent, got = [], []

    async def bench(ctx):
        pending = deque(rows)
        # Rows come row_beats cycles apart at least (a row's beats), so the units' turns
        # never overlap.
        free = 0
        for cycle in range((p.row_beats + 2) * count + 20):
            valid = bool(pending) and cycle >= free and rng.random() < 0.7
            free = cycle + p.row_beats if valid else free
            ctx.set(dut.i.valid, valid)
            if valid:
                ctx.set(dut.i.payload, pending.popleft())
                sent.append(cycle)
            if ctx.get(dut.o.valid):
                out = ctx.get(dut.o.payload)
                flags = (int(out.first_row), int(out.last_row))
                got.append((cycle, [int(s) for s in out.score], flags))
            await ctx.tick()

    _run(dut, bench)
    assert len(got) == count
    for r, (cycle, scores, flags) in enumerate(got):
        assert cycle == sent[r] + dut.LATENCY, f"row {r} left after {cycle - sent[r]} cycles"
        assert scores == want[r].tolist(), f"row {r}: {scores} != {want[r].tolist()}"
        assert flags == (rows[r]["first_row"], rows[r]["last_row"])


# --- V side ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", PARAMS)
def test_v_side_snapshot_is_the_golden_o_and_waits_for_release(name):
    """Four requests (the last of one row) with their (shift, p) entries on ``rows_i``, both
    with random gaps. The first snapshot is held until the second request's last beat has
    waited for 8 cycles; the others are released a few random cycles after they appear."""
    p = PARAMS[name]
    rng = np.random.default_rng(14)
    lengths = (12, 5, 9, 1)
    requests = [_request(p, n, rng, jump=3 if r == 2 else None) for r, n in enumerate(lengths)]
    tags = [int(rng.integers(1 << 32)) | (r % 2) << 32 for r in range(len(requests))]
    assert max(tags) < 1 << TAG_BITS
    beats, beat_request = [], []
    for r, request in enumerate(requests):
        rows = _row_beats(p, request["v_rows"], request["vs"])
        beats += rows
        beat_request += [r] * len(rows)
    entries = [
        [
            {"shift": int(r["shifts"][g, t]), "prob": int(r["prob"][g, t])}
            for g in range(p.gqa_group)
        ]
        for r in requests
        for t in range(r["shifts"].shape[1])
    ]
    dut = VSide(p)
    snapshots, releases, end_taken, end_refused = [], [], {}, {}
    first_beats, entries_taken = [], []
    control = np.random.default_rng(15)

    def read_snapshot(ctx):
        return [
            [ctx.get(dut.snapshot[g][i]) for i in range(p.row_elems)] for g in range(p.gqa_group)
        ]

    async def bench(ctx):
        producer = _Offer(dut.i, beats, 0.25, control)
        rows = _Offer(dut.rows_i, entries, 0.3, control)
        requests_left = deque(beat_request)
        held_since, hold = None, 0
        for cycle in range(3000):
            producer.drive(ctx)
            rows.drive(ctx)
            r = requests_left[0] if requests_left else len(requests) - 1
            ctx.set(dut.tag, tags[r])
            current = beats[len(beats) - len(requests_left)] if requests_left else {}
            is_end = bool(current.get("last_row") and current.get("last_beat"))
            taken = producer.fire(ctx)
            if is_end and producer.offering and not taken:
                end_refused[r] = end_refused.get(r, 0) + 1
            rows_taken = rows.fire(ctx)
            release = False
            if ctx.get(dut.snapshot_valid):
                if held_since is None:  # a new snapshot
                    held_since = cycle
                    k = len(snapshots)
                    snapshots.append([ctx.get(dut.snapshot_tag), read_snapshot(ctx), None])
                    hold = None if k == 0 else int(control.integers(0, 8))
                # The first until the second request's last beat has waited, then by chance.
                waited = end_refused.get(1, 0) >= 8
                release = waited if hold is None else cycle - held_since >= hold
                if release:  # unchanged since it appeared
                    snapshots[-1][2] = read_snapshot(ctx)
                    releases.append(cycle)
            elif held_since is not None:
                assert releases and releases[-1] == cycle - 1, "snapshot_valid fell by itself"
                held_since = None
            ctx.set(dut.release, release)
            await ctx.tick()
            ctx.set(dut.release, 0)
            if taken:
                if is_end:
                    end_taken[r] = cycle
                if current["beat"] == 0:
                    first_beats.append(cycle)
                producer.advance()
                requests_left.popleft()
            if rows_taken:
                entries_taken.append(cycle)
                rows.advance()
            if len(releases) == len(requests):
                break

    _run(dut, bench)
    assert len(snapshots) == len(requests), f"{len(snapshots)} snapshots"
    for r, (tag, first, last) in enumerate(snapshots):
        assert tag == tags[r], f"request {r}: tag {tag:#x} != {tags[r]:#x}"
        want = requests[r]["o"].tolist()
        assert first == want, f"request {r}: snapshot is not the golden o"
        assert last == first, f"request {r}: snapshot changed before its release"
    # Each row's entry is read with its first beat and popped then (one-beat rows) or the cycle
    # after (the next row's first beat is two cycles later at the earliest).
    lag = 0 if p.row_beats == 1 else 1
    assert entries_taken == [c + lag for c in first_beats] and len(first_beats) == len(entries)
    # A request's last beat is taken only after the previous snapshot's release, and the second
    # one's did wait for it.
    assert end_refused.get(1, 0) >= 8
    for r in range(1, len(requests)):
        assert end_taken[r] > releases[r - 1], f"request {r}'s last beat before the release"


# --- result scale ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", OUTPUT_PARAMS)
def test_reciprocal_of_every_sum_is_in_the_result_scales_range(name):
    """ResultScale saturates y where o' leaves the multiplier's operand, which is exact only
    if 1/m >= 1/2 (a clamped o' then saturates y): the reciprocal unit's output for every
    mantissa (each of the 2**16 sums of one octave, and sums of higher octaves with random low
    bits) lies in [1/2, 1)."""
    p = OUTPUT_PARAMS[name]
    frac = p.reciprocal.out_frac_bits
    rng = np.random.default_rng(18)
    octave = p.prob_frac_bits
    sums = [np.arange(1 << octave, 1 << (octave + 1), dtype=np.int64)]
    for top in range(octave + 1, p.l_bits):
        sums.append(rng.integers(1 << top, 1 << (top + 1), 1 << 14, dtype=np.int64))
    sums.append(np.arange(1 << (octave - 1), 1 << octave, dtype=np.int64))  # l in [1/2, 1)
    recips = np.asarray(reciprocal_golden(p.reciprocal, np.concatenate(sums)))
    assert recips.min() >= 1 << (frac - 1) and recips.max() < 1 << frac


@pytest.mark.parametrize("name", OUTPUT_PARAMS)
def test_result_scale_divides_clamps_and_saturates_like_the_golden_output(name):
    """Random issued beats: o of every magnitude (small, near the operand's clamp, the whole
    accumulator range), every shift, reciprocals over [1/2, 1), raw beats among them;
    under random gaps and backpressure each result word is the golden model's
    ``y = round(clamp(o >> (shift + least)) * (1/m))`` saturated, raw words unchanged."""
    p = OUTPUT_PARAMS[name]
    rng = np.random.default_rng(16)
    count, lanes = 120, p.lanes
    o_lo, o_hi = value_range(p.o_bits, True)
    kind = rng.integers(3, size=(count, 1))
    small = rng.integers(-(1 << 40), 1 << 40, (count, lanes))
    edge = rng.integers(-(1 << 28), 1 << 28, (count, lanes)) << p.out_o_shift_min
    words = np.where(
        kind == 0, small, np.where(kind == 1, edge, rng.integers(o_lo, o_hi, (count, lanes)))
    )
    shifts = rng.integers(p.position_bits + 1, size=count)
    # 1/m in [1/2, 1): the reciprocal unit's whole range (ResultScale's contract), the ends
    # among them.
    half = 1 << (p.reciprocal.out_frac_bits - 1)
    recips = rng.integers(half, 2 * half, count)
    recips[:4] = [half, half, 2 * half - 1, 2 * half - 1]
    raw = rng.random(count) < 0.25
    beats = [
        {
            "words": words[b].tolist(),
            "raw": int(raw[b]),
            "tag": int(rng.integers(1 << 32)),
            "last": int(rng.integers(2)),
            "shift": int(shifts[b]),
            "recip": int(recips[b]),
        }
        for b in range(count)
    ]
    o_scaled = words >> (shifts + p.out_o_shift_min)[:, None]
    clamped = np.clip(o_scaled, *value_range(p.out_operand_bits, True))
    unclipped = shift_round_half_up(clamped * recips[:, None], p.out_product_shift)
    y = np.clip(unclipped, *value_range(p.out_bits, True))
    want = np.where(raw[:, None], words, y)
    cooked = ~raw[:, None]
    assert ((clamped != o_scaled) & cooked).any() and ((y != unclipped) & cooked).any()
    assert ((y == unclipped) & (y != 0) & cooked).sum() > count
    # With out_beat_cycles > 1 each beat goes in as parts of out_lanes words, in order.
    parts, width = p.out_beat_cycles, p.out_lanes
    issued = [
        {
            **beat,
            "words": beat["words"][k * width : (k + 1) * width],
            **({"part": k} if parts > 1 else {}),
        }
        for beat in beats
        for k in range(parts)
    ]
    out, _ = run_scenario(ResultScale(p), issued, count, valid_gaps=0.3, backpressure=0.4, seed=17)
    for b, (payload, beat) in enumerate(zip(out, beats, strict=True)):
        got = [int(w) for w in payload.data]
        assert got == want[b].tolist(), f"beat {b}: {got[:3]}... != {want[b, :3].tolist()}..."
        assert (int(payload.tag), int(payload.last)) == (beat["tag"], beat["last"])


# --- output ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", OUTPUT_PARAMS)
def test_output_emits_the_golden_result_words(name):
    """Four requests: full, partial, full (one row) and a full one whose o saturates y, with
    snapshots (padding elements random) loaded a few random cycles after the previous release
    and overwritten with junk at once after their own; the (m, l, 1/m) come ahead with random
    gaps; ``result_o`` sees random backpressure."""
    p = OUTPUT_PARAMS[name]
    rng = np.random.default_rng(18)
    g, sfb = p.gqa_group, p.score_frac_bits
    o_lo, o_hi = value_range(p.o_bits, True)
    pad = p.row_elems - p.head_dim
    cases = []
    for n, partial in ((9, False), (30, True), (1, False)):
        seq = make_sequence(p, n, rng)
        gold = hpu_golden(p, seq["q"], seq["c"], seq["k"], seq["ks"], seq["v"], seq["vs"], partial)
        assert partial or np.array_equal(_y(p, gold.o, gold.l), gold.y)
        cases.append((gold, partial))
    # A synthetic result: large o over a small l, so y saturates and o' clamps.
    last = cases[0][0]
    big = rng.integers(o_lo // 4, o_hi // 4, (g, p.head_dim))
    saturating = HpuResult(0, last.m, last.l, big, _y(p, big, last.l))
    assert np.isin(saturating.y, value_range(p.out_bits, True)).any()
    cases.append((saturating, False))
    seq_ids = [int(rng.integers(1 << 32)) for _ in cases]
    snapshots = [
        np.concatenate([gold.o, rng.integers(o_lo, o_hi, (g, pad))], axis=1) for gold, _ in cases
    ]
    normalized = [
        {
            "stats": [{"max": int(gold.m[q]) >> sfb, "sum": int(gold.l[q])} for q in range(g)],
            "recips": reciprocal_golden(p.reciprocal, gold.l).tolist(),
        }
        for gold, _ in cases
    ]
    for gold, _ in cases:
        assert np.array_equal((gold.m >> sfb) << sfb, gold.m)  # m is an integer in log2 units
    expected = [
        (result_words(p, gold, partial), seq_id)
        for (gold, partial), seq_id in zip(cases, seq_ids, strict=True)
    ]
    dut = Output(p)
    beats, releases, loaded = [], [], []
    control = np.random.default_rng(19)

    def load(ctx, values, tag, valid):
        for q in range(g):
            for i in range(p.row_elems):
                ctx.set(dut.snapshot[q][i], int(values[q][i]))
        ctx.set(dut.snapshot_tag, tag)
        ctx.set(dut.snapshot_valid, valid)

    flags = [r % 2 for r in range(len(cases))]  # each request's error flag, on its beats

    async def bench(ctx):
        stats = _Offer(dut.i, normalized, 0.3, control)
        errors = _Offer(dut.error_i, flags, 0.3, control)
        k, wait = 0, int(control.integers(0, 6))
        for cycle in range(2000):
            if wait == 0 and not ctx.get(dut.snapshot_valid) and k < len(cases):
                tag = seq_ids[k] | int(cases[k][1]) << 32
                load(ctx, snapshots[k], tag, 1)
                loaded.append(cycle)
            wait = max(wait - 1, 0)
            stats.drive(ctx)
            errors.drive(ctx)
            ready = control.random() < 0.6
            ctx.set(dut.result_o.ready, ready)
            taken = stats.fire(ctx)
            assert not taken or ctx.get(dut.snapshot_valid), "(m, l) taken without a snapshot"
            assert taken == errors.fire(ctx), "(m, l) and the error flag taken apart"
            if ready and ctx.get(dut.result_o.valid):
                out = ctx.get(dut.result_o.payload)
                words = [int(w) for w in out.data]
                beats.append((words, int(out.tag), int(out.last), cycle, int(out.error)))
            released = ctx.get(dut.release)
            if released:
                releases.append(cycle)
            await ctx.tick()
            if taken:
                stats.advance()
                errors.advance()
            if released:  # as the V side: the snapshot is free, and overwritten at once
                junk = rng.integers(o_lo, o_hi, (g, p.row_elems))
                load(ctx, junk, int(rng.integers(1 << TAG_BITS)), 0)
                k, wait = k + 1, int(control.integers(0, 6))
            if len(beats) == sum(len(words) for words, _ in expected):
                break

    _run(dut, bench)
    at = 0
    for r, (words, seq_id) in enumerate(expected):
        mine = beats[at : at + len(words)]
        at += len(words)
        assert [b[0] for b in mine] == words, f"request {r}: result words"
        assert {b[1] for b in mine} == {seq_id}
        assert [b[2] for b in mine] == [0] * (len(words) - 1) + [1]
        assert {b[4] for b in mine} == {flags[r]}, f"request {r}: error flag"
        # release: once, after the snapshot is loaded and before the last beat leaves
        assert loaded[r] < releases[r] < mine[-1][3]
    assert at == len(beats) and len(releases) == len(cases)
