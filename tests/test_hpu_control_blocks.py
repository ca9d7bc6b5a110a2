"""The ``hpu`` engine's control and memory blocks, each alone in Amaranth's simulator.

The whole engine is checked bit- and cycle-exact against the golden model in ``test_hpu.py``;
these tests pin each component's own contract (its class docstring, the layouts of
:mod:`tandem.hw.hpu.beats`) under seeded random gaps and backpressure, against references
built here from the host side (:mod:`tandem.host.hpu`, :mod:`tandem.mappings.hpu.kv_layout`,
:mod:`tandem.host.common.reciprocal`), never from the gateware:

* parser: each slot's header and k/v row beats are the descriptor's bytes, and so are the
  query beats it sends on ``query_w`` (at the same place with or without an append), ``full``
  after the last beat, ``desc_i`` waits on a full slot, ``release`` empties one;
* reader: the AR bursts are :func:`~tandem.host.hpu.read_port_bursts` (4 KiB boundaries,
  ``max_outstanding``), the part streams carry each page part's bytes in order, ``busy``
  falls after the last burst;
* writer: the appended token lands as :meth:`~tandem.mappings.hpu.kv_layout.KvLayout.write_rows`
  puts it (padding and neighbouring scales untouched), ``ready``/``idle`` as documented;
* sequencer: row beats (data, scale, beat, flags) of the stored rows, then the appended row,
  ``free`` on the last beat, scale beats taken without ``o.ready``;
* normalizer: (m, l) passed through in order, each ``recips[g]`` the golden mantissa
  reciprocal of ``l``;
* scheduler: reads, write and K start of each slot in order and as soon as the documented
  conditions hold, at most ``REQUEST_QUEUE_DEPTH`` K starts not taken; the V request queue
  returns requests in order and holds the running one's row, scale and tag.
"""

import itertools
from collections import deque

import numpy as np
import pytest
from amaranth.sim import Simulator
from tandem.host.common.reciprocal import reciprocal_golden
from tandem.host.hpu import HpuParams, descriptor_beats, pack_descriptor, read_port_bursts
from tandem.host.hpu.codec import pack_header, unpack_header
from tandem.hw.hpu.beats import DESCRIPTOR_SLOTS, REQUEST_QUEUE_DEPTH, body_beats
from tandem.hw.hpu.normalizer import Normalizer
from tandem.hw.hpu.parser import Parser
from tandem.hw.hpu.reader import Reader
from tandem.hw.hpu.scheduler import Scheduler, VRequestQueue
from tandem.hw.hpu.sequencer import Sequencer
from tandem.hw.hpu.writer import Writer
from tandem.mappings.hpu.kv_layout import AXI_BOUNDARY, BLOCK_BYTES, PAGE_TOKENS

from .test_hpu import SMALL, make_sequence, request_for, store

PARAMS = {
    "default": HpuParams(),
    "small": HpuParams(**SMALL, gqa_group=2),
    # One read port, few bursts in flight, short bursts.
    "one_port": HpuParams(**SMALL, gqa_group=1, read_ports=1, max_outstanding=2, max_burst_beats=4),
}


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def _beats_of(data, beat_bytes: int) -> list[int]:
    data = bytes(data)
    return [
        int.from_bytes(data[i : i + beat_bytes], "little") for i in range(0, len(data), beat_bytes)
    ]


def _header_word(p: HpuParams, *, base: int, length: int, append: int, seq_id: int = 0) -> int:
    values = {
        "seq_id": seq_id,
        "length": length,
        "base": base,
        "append": append,
        "partial": 0,
        "new_k_scale": 0.0,
        "new_v_scale": 0.0,
        "score_scale": np.zeros(p.gqa_group),
    }
    return int.from_bytes(pack_header(p, values), "little")


def _part_beats(p: HpuParams, memory, base: int, rows: int, value: bool) -> list[int]:
    """The page beats of one part of ``rows`` stored rows: each page's scale block, then its
    rows, from the layout's addresses."""
    layout, out = p.layout, []
    for first in range(0, rows, PAGE_TOKENS):
        block = int(layout.scale_address(base, first, value=value))
        out += _beats_of(memory[block : block + BLOCK_BYTES], p.beat_bytes)
        for r in range(first, min(rows, first + PAGE_TOKENS)):
            row = int(layout.row_address(base, r, value=value))
            out += _beats_of(memory[row : row + layout.row_bytes], p.beat_bytes)
    return out


class _Source:
    """A stream producer that offers its payloads in order with random gaps and holds each
    offered one until it is taken."""

    def __init__(self, port, items, rng, gaps):
        self.port, self.items, self.rng, self.gaps = port, deque(items), rng, gaps
        self.offering, self.fire = False, False

    def drive(self, ctx):
        if not self.offering and self.items and self.rng.random() >= self.gaps:
            self.offering = True
        ctx.set(self.port.valid, int(self.offering))
        if self.offering:
            ctx.set(self.port.payload, self.items[0])

    def sample(self, ctx):
        self.fire = self.offering and bool(ctx.get(self.port.ready))
        return self.fire

    def apply(self):
        if self.fire:
            self.items.popleft()
            self.offering = False


def _binary16_bits(value) -> int:
    return int(np.asarray(value, dtype="<f2").view("<u2"))


# --- parser ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["default", "small"])
def test_parser_fills_slots_in_turn_with_the_descriptor_bytes(name):
    p = PARAMS[name]
    rng = np.random.default_rng(10)
    requests = []
    for i in range(9):
        n = int(rng.integers(1, 60))
        seq = make_sequence(p, n, rng)
        append = i % 3 != 1  # every third request has no k/v rows
        base = int(rng.integers(0, 1 << 20)) * BLOCK_BYTES
        requests.append(request_for(seq, seq_id=1000 + i, base=base, n=n, append=append))
    descriptors = [pack_descriptor(p, r) for r in requests]
    beats = [descriptor_beats(p, r) for r in requests]
    for r, b in zip(requests, beats, strict=True):
        assert len(b) == p.header_beats + body_beats(p) - (0 if r.append else 2 * p.row_beats)
    dut = Parser(p)
    source = _Source(dut.desc_i, [w for b in beats for w in b], rng, gaps=0.3)
    rows = 2 * p.row_beats
    seen = {"stalled": 0, "released_out_of_order": 0, "checked": 0}
    written = [{} for _ in range(DESCRIPTOR_SLOTS)]  # per slot: query beat -> data on query_w

    def check_slot(ctx, slot, index):
        request, data = requests[index], descriptors[index]
        assert ctx.get(dut.headers[slot].as_value()) == int.from_bytes(data[:64], "little")
        fields = unpack_header(p, data)
        view = dut.headers[slot]
        for key in ("seq_id", "length", "base", "append", "partial"):
            assert ctx.get(getattr(view, key)) == int(fields[key]), key
        assert ctx.get(view.new_k_scale) == _binary16_bits(fields["new_k_scale"])
        for g in range(p.gqa_group):
            assert ctx.get(view.score_scale[g]) == _binary16_bits(fields["score_scale"][g])
        body = _beats_of(data[64:], p.beat_bytes)
        queries = [written[slot].get(b) for b in range(body_beats(p) - rows)]
        if request.append:
            assert [ctx.get(dut.bodies[slot][b]) for b in range(rows)] == body[:rows]
            assert queries == body[rows:]
        else:  # the queries go where they do with an append; the k/v rows are not defined
            assert queries == body
        seen["checked"] += 1

    async def bench(ctx):
        fill, beat_in_request, parsed = 0, 0, 0
        slot_request = [None] * DESCRIPTOR_SLOTS  # the request each full slot holds
        released = 0
        for _ in range(3000):
            source.drive(ctx)
            # The K side releases full slots at random, in any order.
            release = [
                s
                for s in range(DESCRIPTOR_SLOTS)
                if slot_request[s] is not None and rng.random() < 0.015
            ]
            ctx.set(dut.release, sum(1 << s for s in release))
            ready = ctx.get(dut.desc_i.ready)
            assert ready == (slot_request[fill] is None)
            if source.offering and not ready:
                seen["stalled"] += 1
            for s in range(DESCRIPTOR_SLOTS):
                if slot_request[s] is not None:
                    check_slot(ctx, s, slot_request[s])
            if ctx.get(dut.query_w.valid):  # a query beat, into the K side's memory
                write = ctx.get(dut.query_w.payload)
                written[int(write.slot)][int(write.beat)] = int(write.data)
            fire = source.sample(ctx)
            await ctx.tick()
            source.apply()
            if fire:
                beat_in_request += 1
                if beat_in_request == len(beats[parsed]):
                    slot_request[fill] = parsed
                    parsed, fill, beat_in_request = parsed + 1, (fill + 1) % DESCRIPTOR_SLOTS, 0
            for s in release:
                if slot_request[s] != min(x for x in slot_request if x is not None):
                    seen["released_out_of_order"] += 1
                slot_request[s] = None
                released += 1
            full = sum(1 << s for s in range(DESCRIPTOR_SLOTS) if slot_request[s] is not None)
            assert ctx.get(dut.full) == full
            if released == len(requests):
                return
        raise TimeoutError(f"{released} of {len(requests)} requests parsed and released")

    _run(dut, bench)
    assert seen["stalled"] > 10 and seen["released_out_of_order"] > 0 and seen["checked"] > 100


# --- reader ----------------------------------------------------------------------------------
class _ReadSubordinate:
    """An AXI read subordinate over ``memory``: random ``arready``, a random latency per burst
    and random gaps before each R beat (held once offered), bursts returned in order."""

    def __init__(self, port, memory, beat_bytes, rng):
        self.port, self.memory, self.bb, self.rng = port, memory, beat_bytes, rng
        self.bursts = deque()  # [ready_cycle, address, beats left]
        self.issued, self.in_flight, self.most_in_flight = [], 0, 0
        self.offering = False
        self.held_ar = None  # the AR offered and not taken last cycle

    def drive(self, ctx, cycle):
        self.arready = self.rng.random() < 0.7
        ctx.set(self.port.arready, int(self.arready))
        if not self.offering and self.bursts and self.bursts[0][0] <= cycle:
            self.offering = self.rng.random() < 0.7
        ctx.set(self.port.rvalid, int(self.offering))
        if self.offering:
            _, address, left = self.bursts[0]
            word = self.memory[address : address + self.bb].tobytes()
            ctx.set(self.port.rdata, int.from_bytes(word, "little"))
            ctx.set(self.port.rlast, int(left == 1))

    def sample(self, ctx):
        port = self.port
        self.ar = None
        if ctx.get(port.arvalid):
            ar = (ctx.get(port.araddr), ctx.get(port.arlen) + 1)
            assert ctx.get(port.arsize) == (self.bb - 1).bit_length()
            assert ctx.get(port.arburst) == 1 and ctx.get(port.arid) == 0
            if self.held_ar is not None:
                assert ar == self.held_ar, "AR changed before it was taken"
            self.held_ar = None if self.arready else ar
            self.ar = ar if self.arready else None
        else:
            assert self.held_ar is None, "arvalid dropped before the AR was taken"
        self.r_fire = self.offering and bool(ctx.get(port.rready))

    def apply(self, cycle):
        if self.ar is not None:
            self.issued.append(self.ar)
            latency = int(self.rng.integers(0, 8))
            self.bursts.append([cycle + 1 + latency, *self.ar])
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.r_fire:
            self.offering = False
            head = self.bursts[0]
            head[1] += self.bb
            head[2] -= 1
            if head[2] == 0:
                self.bursts.popleft()
                self.in_flight -= 1


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("default", (False,)),
        ("default", (True,)),
        ("small", (True,)),
        ("one_port", (False, True)),
    ],
)
def test_reader_issues_the_port_bursts_and_streams_each_part(name, parts):
    p = PARAMS[name]
    rng = np.random.default_rng(20 + len(parts))
    port_name = p.read_port_names[0] if len(parts) == 2 else ("v_axi" if parts[0] else "k_axi")
    memory = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    # (base, length, append): a 4 KiB boundary inside a page, page ends, one token appended
    # to no stored rows.
    requests = [(0xFC0, 70, 1), (0x2000, 33, 0), (0x1000, 1, 1), (0x40, 32, 1), (0xF00, 5, 0)]
    bursts, streams = [], {value: [] for value in parts}
    for base, length, append in requests:
        rows = length - append
        bursts += [(b.address, b.beats) for b in read_port_bursts(p, base, rows)[port_name]]
        for value in parts:
            streams[value] += _part_beats(p, memory, base, rows, value)
    # The references cover a burst cut at a 4 KiB boundary before max_burst_beats.
    assert p.max_burst_beats * p.beat_bytes <= BLOCK_BYTES or any(
        (a + n * p.beat_bytes) % 4096 == 0
        and n < p.max_burst_beats
        and (a + n * p.beat_bytes,) == next_burst[:1]
        for (a, n), next_burst in itertools.pairwise(bursts)
    )
    dut = Reader(p, parts=parts, name="kv" if len(parts) == 2 else "k")
    axi = _ReadSubordinate(dut.axi, memory, p.beat_bytes, rng)
    outs = {value: getattr(dut, "v_o" if value else "k_o") for value in parts}
    got = {value: [] for value in parts}

    flags = []

    async def bench(ctx):
        pending = deque(requests)
        busy, left = False, 0  # the model's busy and the request's bursts still to come
        # A request with no stored rows keeps the reader busy until no burst is in flight,
        # as the reader counts them: a burst's end leaves its count a cycle after its last beat.
        draining = False
        none_in_flight = True
        expected_bursts = deque(bursts)
        ctx.set(dut.error_o.ready, 1)
        for cycle in range(20000):
            axi.drive(ctx, cycle)
            ready = {value: rng.random() < 0.6 for value in parts}
            for value, port in outs.items():
                ctx.set(port.ready, int(ready[value]))
            assert ctx.get(dut.busy) == busy
            start = not busy and pending and rng.random() < 0.3
            ctx.set(dut.start, int(bool(start)))
            if start:
                base, length, append = pending.popleft()
                ctx.set(
                    dut.header.as_value(), _header_word(p, base=base, length=length, append=append)
                )
                rows = length - append
                left = len(read_port_bursts(p, base, rows)[port_name])
            else:  # the header is only looked at with start
                ctx.set(dut.header.as_value(), int(rng.integers(0, 1 << 62)))
            fired = {
                value: ctx.get(port.payload)
                for value, port in outs.items()
                if ready[value] and ctx.get(port.valid)
            }
            axi.sample(ctx)
            if axi.ar is not None:
                assert busy and not start
                assert axi.ar == expected_bursts.popleft()
            drained = none_in_flight and axi.in_flight == 0
            none_in_flight = axi.in_flight == 0
            if ctx.get(dut.error_o.valid):
                flags.append(ctx.get(dut.error_o.payload))
            await ctx.tick()
            axi.apply(cycle)
            for value, word in fired.items():
                got[value].append(word)
            if start:
                busy = draining = True
                if left > 0:
                    draining = False
            elif draining and drained:
                busy = draining = False
            elif axi.ar is not None:
                left -= 1
                busy = left > 0
            assert axi.in_flight <= p.max_outstanding
            if not pending and all(len(got[v]) == len(streams[v]) for v in parts):
                break
        assert not expected_bursts and axi.issued == bursts
        # Every request's flag, none set (every beat answered OKAY).
        for _ in range(4 * p.max_outstanding):
            if ctx.get(dut.error_o.valid):
                flags.append(ctx.get(dut.error_o.payload))
            await ctx.tick()
        assert flags == [0] * len(requests)
        for value in parts:
            assert got[value] == streams[value], f"{'V' if value else 'K'} beats"

    _run(dut, bench)
    if p.max_outstanding <= 2:
        assert axi.most_in_flight == p.max_outstanding


# --- writer ----------------------------------------------------------------------------------
class _WriteSubordinate:
    """An AXI write subordinate applying strobed beats to ``memory``: random ``awready`` and
    ``wready``, a random delay before each burst's B response."""

    def __init__(self, port, memory, beat_bytes, rng):
        self.port, self.memory, self.bb, self.rng = port, memory, beat_bytes, rng
        self.bursts = deque()  # [address, beats left] of the accepted AWs
        self.responses = deque()  # cycles at which each B may be offered
        self.aw_count = self.b_count = self.w_bursts = 0
        self.held_aw = self.held_w = None
        self.b_offering = False

    def drive(self, ctx, cycle):
        self.awready = self.rng.random() < 0.6
        self.wready = self.rng.random() < 0.6
        ctx.set(self.port.awready, int(self.awready))
        ctx.set(self.port.wready, int(self.wready))
        if not self.b_offering and self.responses and self.responses[0] <= cycle:
            self.b_offering = True
        ctx.set(self.port.bvalid, int(self.b_offering))

    def sample(self, ctx):
        port = self.port
        self.aw = self.w = None
        if ctx.get(port.awvalid):
            aw = (ctx.get(port.awaddr), ctx.get(port.awlen) + 1)
            assert ctx.get(port.awsize) == (self.bb - 1).bit_length()
            assert ctx.get(port.awburst) == 1 and ctx.get(port.awid) == 0
            assert self.held_aw in (None, aw), "AW changed before it was taken"
            self.held_aw = None if self.awready else aw
            self.aw = aw if self.awready else None
        else:
            assert self.held_aw is None, "awvalid dropped before the AW was taken"
        if ctx.get(port.wvalid):
            w = (ctx.get(port.wdata), ctx.get(port.wstrb), ctx.get(port.wlast))
            assert self.held_w in (None, w), "W changed before it was taken"
            self.held_w = None if self.wready else w
            self.w = w if self.wready else None
        else:
            assert self.held_w is None, "wvalid dropped before the W was taken"
        self.b_fire = self.b_offering and bool(ctx.get(port.bready))

    def apply(self, cycle):
        if self.aw is not None:
            self.bursts.append(list(self.aw))
            self.aw_count += 1
        if self.w is not None:
            assert self.bursts, "W beat before its AW"
            data, strobe, last = self.w
            head = self.bursts[0]
            chunk = data.to_bytes(self.bb, "little")
            for j in range(self.bb):
                if strobe >> j & 1:
                    self.memory[head[0] + j] = chunk[j]
            head[0] += self.bb
            head[1] -= 1
            assert last == (head[1] == 0), "wlast not on the burst's last beat"
            if head[1] == 0:
                self.bursts.popleft()
                self.w_bursts += 1
                self.responses.append(cycle + 1 + int(self.rng.integers(0, 6)))
        if self.b_fire:
            self.b_offering = False
            self.responses.popleft()
            self.b_count += 1


@pytest.mark.parametrize("name", ["default", "small"])
def test_writer_stores_the_appended_token_as_the_layout_does(name):
    p = PARAMS[name]
    rng = np.random.default_rng(30)
    region = p.layout.region_bytes(80)
    bases = [0, region, 2 * region + 0x40 * 3]  # the third one not page aligned
    seqs = [make_sequence(p, 80, rng) for _ in bases]
    # (sequence, length, append): page ends and starts, the first token of a region, and
    # requests without an append in between.
    requests = [(0, 31, 1), (1, 1, 1), (0, 32, 1), (2, 65, 0), (0, 33, 1), (1, 2, 1)]
    requests += [(2, 64, 1), (2, 65, 1), (1, 3, 0), (2, 66, 1), (0, 34, 0)]
    memory = rng.integers(0, 256, 3 * region + 4096, dtype=np.uint8)
    first = {s: min(n for t, n, a in requests if t == s and a) for s in range(len(bases))}
    last = {s: max(n for t, n, a in requests if t == s and a) for s in range(len(bases))}
    for s, base in enumerate(bases):  # the rows before the first appended one, stored
        store(p, memory, base, seqs[s], first[s] - 1)
    expected = memory.copy()
    for s, base in enumerate(bases):
        store(p, expected, base, seqs[s], last[s])
    assert not np.array_equal(memory, expected)
    dut = Writer(p)
    axi = _WriteSubordinate(dut.w_axi, memory, p.beat_bytes, rng)
    row_bytes = 2 * p.layout.row_bytes

    def append_bursts(s, n):
        """An append's write bursts: a row each (two where it straddles 4 KiB), a scale each."""
        rows = [p.layout.row_address(bases[s], n - 1, value=v) for v in (False, True)]
        split = sum(a // AXI_BOUNDARY != (a + p.layout.row_bytes - 1) // AXI_BOUNDARY for a in rows)
        return 4 + int(split)

    bursts = {(s, n): append_bursts(s, n) for s, n, a in requests if a}
    assert max(bursts.values()) > 4 or name != "default"  # the default's rows straddle some
    counts = {"not_ready": 0, "ready_not_idle": 0}

    async def bench(ctx):
        pending = deque(requests)
        writing, done_bursts, due = False, 0, 0  # the pending append, its bursts so far, all
        deciding = 0  # a start without an append takes the next two cycles too
        for cycle in range(5000):
            axi.drive(ctx, cycle)
            ready, idle = ctx.get(dut.ready), ctx.get(dut.idle)
            busy = writing or deciding > 0
            assert ready == (not busy)
            assert idle == (not busy and axi.aw_count == axi.b_count)
            counts["ready_not_idle"] += ready and not idle
            start = ready and pending and rng.random() < 0.3
            ctx.set(dut.start, int(bool(start)))
            if start:
                s, n, append = pending.popleft()
                request = request_for(seqs[s], seq_id=s, base=bases[s], n=n, append=bool(append))
                data = pack_descriptor(p, request)
                ctx.set(dut.header.as_value(), int.from_bytes(data[:64], "little"))
                body = data[64 : 64 + row_bytes] if append else rng.bytes(row_bytes)
                ctx.set(dut.body, int.from_bytes(body, "little"))
            else:  # only looked at with start (and registered then)
                junk = int(rng.integers(0, 1 << 62))
                ctx.set(dut.header.as_value(), junk | (1 << 128) * int(rng.integers(2)))
                ctx.set(dut.body, junk)
                if not ready:
                    counts["not_ready"] += 1
            axi.sample(ctx)
            await ctx.tick()
            axi.apply(cycle)
            deciding = 2 if start and not append else max(deciding - 1, 0)
            if start and append:
                writing, done_bursts, due = True, axi.w_bursts, bursts[s, n]
            if writing and axi.w_bursts - done_bursts == due:
                writing = False
            if not (pending or writing or deciding or axi.bursts) and axi.aw_count == axi.b_count:
                break
        assert not pending and axi.aw_count == sum(bursts.values())
        assert ctx.get(dut.idle)

    _run(dut, bench)
    assert np.array_equal(memory, expected)
    assert counts["not_ready"] > 0 and counts["ready_not_idle"] > 0


# --- sequencer -------------------------------------------------------------------------------
def _row_beats_expected(p, memory, base, rows, append, new_row, new_scale, value):
    """(data, scale, beat, last_beat, first_row, last_row) of each row beat of a request."""
    layout, bb, out = p.layout, p.beat_bytes, []
    for r in range(rows):
        at = int(layout.row_address(base, r, value=value))
        scale_at = int(layout.scale_address(base, r, value=value))
        scale = int.from_bytes(memory[scale_at : scale_at + 2].tobytes(), "little")
        data = _beats_of(memory[at : at + layout.row_bytes], bb)
        for b, word in enumerate(data):
            last = r == rows - 1 and not append
            out.append((word, scale, b, int(b == p.row_beats - 1), int(r == 0), int(last)))
    if append:
        data = _beats_of(new_row.to_bytes(layout.row_bytes, "little"), bb)
        for b, word in enumerate(data):
            out.append((word, new_scale, b, int(b == p.row_beats - 1), int(rows == 0), 1))
    return out


@pytest.mark.parametrize(
    ("name", "value", "gapless"),
    [("default", False, True), ("small", True, True), ("small", True, False)],
)
def test_sequencer_splits_page_beats_into_row_beats_then_the_appended_row(name, value, gapless):
    p = PARAMS[name]
    rng = np.random.default_rng(40)
    memory = rng.integers(0, 256, 1 << 16, dtype=np.uint8)  # rows, padding and scales
    # (base, stored rows, append): several pages, a page's last row, none stored.
    requests = [(0x40, 70, 1), (0x2000, 33, 0), (0x1000, 0, 1), (0x1000, 1, 0), (0, 32, 1)]
    requests += [(0x3000, 0, 1), (0x40, 31, 1), (0x2040, 2, 0)]
    stream, labels, expected, news = [], [], [], []
    for index, (base, rows, append) in enumerate(requests):
        words = _part_beats(p, memory, base, rows, value)
        stream += words
        for first in range(0, rows, PAGE_TOKENS):  # which beats are scale beats
            count = min(PAGE_TOKENS, rows - first)
            labels += [(index, "scale")] * p.scale_beats + [(index, "row")] * count * p.row_beats
        new_row = int.from_bytes(rng.bytes(p.layout.row_bytes), "little")
        new_scale = int(rng.integers(0, 1 << 16))
        news.append((new_row, new_scale))
        expected.append(
            deque(_row_beats_expected(p, memory, base, rows, append, new_row, new_scale, value))
        )
    assert len(labels) == len(stream)
    dut = Sequencer(p, name="v" if value else "k", gapless=gapless)
    source = _Source(dut.i, stream, rng, gaps=0.3)
    labels = deque(labels)
    counts = {"back_to_back": 0, "scales_under_backpressure": 0}

    async def bench(ctx):
        running, started = None, 0
        for _ in range(10000):
            source.drive(ctx)
            o_ready = rng.random() < 0.6
            ctx.set(dut.o.ready, int(o_ready))
            head = labels[0] if labels else None
            want = expected[running][0] if running is not None else None
            injected = want is not None and (head is None or head[0] != running)
            want_valid = want is not None and (
                injected or (source.offering and head == (running, "row"))
            )
            assert ctx.get(dut.o.valid) == want_valid
            if want_valid:
                payload = dut.o.payload
                got = tuple(
                    ctx.get(getattr(payload, f))
                    for f in ("data", "scale", "beat", "last_beat", "first_row", "last_row")
                )
                assert got == want, (running, len(expected[running]))
            taken = want_valid and o_ready
            last = taken and len(expected[running]) == 1
            last = last and gapless  # a sequencer with gaps is only free once idle
            assert ctx.get(dut.free) == (running is None or last)
            # The page beats: a scale beat of the running request is taken whatever o.ready,
            # a row beat with o.ready, nothing of a request not started yet.
            i_ready = ctx.get(dut.i.ready)
            if head is not None and source.offering:
                if head[0] != running:
                    assert not i_ready
                elif head[1] == "scale":
                    assert i_ready
                    counts["scales_under_backpressure"] += not o_ready
                else:
                    assert i_ready == o_ready
            start = (running is None or last) and started < len(requests) and rng.random() < 0.7
            ctx.set(dut.start, int(bool(start)))
            if start:
                _, rows, append = requests[started]
                ctx.set(dut.rows, rows)
                ctx.set(dut.append, append)
                counts["back_to_back"] += bool(last)
            else:  # only looked at with start
                ctx.set(dut.rows, int(rng.integers(0, p.max_seq_len)))
                ctx.set(dut.append, int(rng.integers(2)))
            fire = source.sample(ctx)
            await ctx.tick()
            source.apply()
            if fire:
                labels.popleft()
            if taken:
                expected[running].popleft()
                if not expected[running]:
                    running = None
            if start:
                running, started = started, started + 1
                # The appended row and its scale, held while the request runs (the engine
                # changes them the cycle after the start).
                ctx.set(dut.new_row, news[running][0])
                ctx.set(dut.new_scale, news[running][1])
            if started == len(requests) and running is None:
                break
        assert started == len(requests) and running is None and not labels

    _run(dut, bench)
    assert (counts["back_to_back"] > 0) == gapless and counts["scales_under_backpressure"] > 0


# --- normalizer ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["default", "small"])
def test_normalizer_passes_m_l_in_order_with_each_mantissa_reciprocal(name):
    p = PARAMS[name]
    rng = np.random.default_rng(50)
    g_count, count = p.gqa_group, 40
    # l from 1/2 (the smallest a request's sum can be) up to every bit set, with leading ones
    # anywhere, powers of two and mantissas of all ones among them; m over its signed range.
    msb = rng.integers(p.prob_frac_bits - 1, p.l_bits, (count, g_count))
    sums = (1 << msb) | (rng.integers(0, 1 << 62, (count, g_count)) & ((1 << msb) - 1))
    sums[3] = 1 << msb[3]
    sums[4] = (2 << msb[4]) - 1
    sums[5] = (1 << p.l_bits) - 1
    maxima = rng.integers(-(1 << (p.max_bits - 1)), 1 << (p.max_bits - 1), (count, g_count))
    recips = reciprocal_golden(p.reciprocal, sums)
    one = 1 << p.recip_frac_bits  # 1/m of a mantissa m in [1, 2) is in [1/2, 1]
    assert recips.min() >= one // 2 and recips.max() <= one
    inputs = [
        [{"max": int(maxima[r, g]), "sum": int(sums[r, g])} for g in range(g_count)]
        for r in range(count)
    ]
    dut = Normalizer(p)
    source = _Source(dut.i, inputs, rng, gaps=0.3)
    got, most_held = [], 0

    async def bench(ctx):
        nonlocal most_held
        sent = 0
        for cycle in range(4000):
            # The scheduler lets at most REQUEST_QUEUE_DEPTH requests wait for the output;
            # the output stalls for long stretches, so that they all do.
            held = sent - len(got)
            most_held = max(most_held, held)
            if source.offering or held < REQUEST_QUEUE_DEPTH:
                source.drive(ctx)
            else:
                ctx.set(dut.i.valid, 0)
            # Like the engine's output, ready only with valid (see the test below).
            valid = ctx.get(dut.o.valid)
            ready = valid and (cycle // 50) % 2 == 1 and rng.random() < 0.6
            ctx.set(dut.o.ready, int(ready))
            if ready:
                stats = dut.o.payload.stats
                got.append(
                    (
                        [(ctx.get(stats[g].max), ctx.get(stats[g].sum)) for g in range(g_count)],
                        [ctx.get(dut.o.payload.recips[g]) for g in range(g_count)],
                    )
                )
            fire = source.sample(ctx)
            await ctx.tick()
            source.apply()
            sent += fire
            if len(got) == count:
                return
        raise TimeoutError(f"{len(got)} of {count} results")

    _run(dut, bench)
    want = [
        ([(int(maxima[r, g]), int(sums[r, g])) for g in range(g_count)], recips[r].tolist())
        for r in range(count)
    ]
    assert got == want
    assert most_held == REQUEST_QUEUE_DEPTH


def test_normalizer_keeps_a_request_when_the_sink_is_ready_before_valid():
    """A sink may hold ready before valid: the (m, l) queue must not pop while the request's
    reciprocals are still in the pipeline (it did, once)."""
    p = PARAMS["small"]
    dut = Normalizer(p)
    stats = [{"max": 1, "sum": 3 << (p.prob_frac_bits - 1)}] * p.gqa_group
    got = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)  # an always-ready sink
        ctx.set(dut.i.payload, stats)
        ctx.set(dut.i.valid, 1)
        await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        for _ in range(100):
            if ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload.recips[0]))
                return
            await ctx.tick()

    _run(dut, bench)
    assert got == [int(reciprocal_golden(p.reciprocal, stats[0]["sum"]))]


# --- scheduler and V request queue -----------------------------------------------------------
@pytest.mark.parametrize(("name", "seed"), [("default", 60), ("small", 61)])
def test_scheduler_starts_reads_write_and_k_side_in_order_as_soon_as_allowed(name, seed):
    """A random model of the parser, readers, writer, K side and output around the scheduler:
    each start fires exactly when its docstring's conditions hold, slot after slot."""
    p = PARAMS[name]
    rng = np.random.default_rng(seed)
    count = 40
    append = rng.random(count) < 0.7
    dut = Scheduler(p)
    cycles = {"read": [], "write": [], "k": []}
    seen = {"cap": 0, "next_cycle": 0, "waits_for_ack": 0, "most_reserved": 0}

    async def bench(ctx):
        filled, slot_request = 0, [None] * DESCRIPTOR_SLOTS
        nr = nw = nk = 0  # requests whose reads, write, K side have started
        busy_left = writing_left = acking_left = k_busy_left = 0
        releases, stats_ready = deque(), deque()  # due cycles (releases: with the slot)
        taken = 0
        for cycle in range(20000):
            full = sum(1 << s for s, r in enumerate(slot_request) if r is not None)
            release = releases[0][1] if releases and releases[0][0] <= cycle else None
            writer_ready, writes_idle = writing_left == 0, writing_left == acking_left == 0
            k_free, v_room = k_busy_left == 0, rng.random() < 0.8
            produced = sum(due <= cycle for due in stats_ready)
            # The output is slow at first, so that the K side runs into its limit.
            take = produced > taken and rng.random() < (0.02 if cycle < 600 else 0.4)
            inputs = {
                "full": full,
                "release": 0 if release is None else 1 << release,
                "readers_busy": int(busy_left > 0),
                "writes_idle": int(writes_idle),
                "writer_ready": int(writer_ready),
                "k_free": int(k_free),
                "v_room": int(v_room),
                "stats_taken": int(take),
            }
            for key, value in inputs.items():
                ctx.set(getattr(dut, key), value)
            assert (ctx.get(dut.read_slot), ctx.get(dut.write_slot), ctx.get(dut.k_slot)) == (
                nr % DESCRIPTOR_SLOTS,
                nw % DESCRIPTOR_SLOTS,
                nk % DESCRIPTOR_SLOTS,
            )

            def present(i, filled=filled):
                return i < filled and slot_request[i % DESCRIPTOR_SLOTS] == i

            reserved = nk - taken
            read = present(nr) and nw == nr and writes_idle and busy_left == 0
            # Each start follows the one before on a later cycle (the next at the earliest).
            write = present(nw) and nr > nw and writer_ready
            k_ok = present(nk) and nw > nk and k_free and v_room
            k = k_ok and reserved < REQUEST_QUEUE_DEPTH
            got = (ctx.get(dut.read_start), ctx.get(dut.write_start), ctx.get(dut.k_start))
            assert got == (read, write, k), (cycle, nr, nw, nk)
            seen["cap"] += k_ok and not k
            seen["next_cycle"] += bool(
                write and cycles["read"] and cycles["read"][-1] == cycle - 1 and nr == nw + 1
            )
            seen["waits_for_ack"] += present(nr) and nw == nr and writer_ready and not writes_idle
            k_slot = nk % DESCRIPTOR_SLOTS
            await ctx.tick()
            busy_left = max(0, busy_left - 1)
            if writing_left:
                writing_left -= 1
            elif acking_left:
                acking_left -= 1
            k_busy_left = max(0, k_busy_left - 1)
            if read:
                cycles["read"].append(cycle)
                nr, busy_left = nr + 1, int(rng.integers(0, 5))
            if write:
                cycles["write"].append(cycle)
                if append[nw]:
                    writing_left, acking_left = int(rng.integers(1, 6)), int(rng.integers(0, 6))
                nw += 1
            if k:
                cycles["k"].append(cycle)
                assert ctx.get(dut.k_bank) == k_slot
                k_busy_left = int(rng.integers(0, 6))
                last = releases[-1][0] if releases else cycle
                releases.append((max(last, cycle) + int(rng.integers(1, 10)), k_slot, nk))
                last = stats_ready[-1] if stats_ready else cycle
                stats_ready.append(max(last, cycle) + int(rng.integers(1, 12)))
                nk += 1
            taken += take
            seen["most_reserved"] = max(seen["most_reserved"], nk - taken)
            # The parser takes a few cycles per descriptor.
            slot = filled % DESCRIPTOR_SLOTS
            if filled < count and slot_request[slot] is None and rng.random() < 0.5:
                slot_request[slot] = filled
                filled += 1
            if release is not None:
                _, slot, request = releases.popleft()
                assert slot_request[slot] == request
                slot_request[slot] = None
            if taken == count:
                break
        assert taken == count and not releases

    _run(dut, bench)
    for i in range(count):
        assert cycles["read"][i] < cycles["write"][i] < cycles["k"][i]
        if i:  # a request's reads come after the previous request's write
            assert cycles["read"][i] > cycles["write"][i - 1]
    assert seen["most_reserved"] == REQUEST_QUEUE_DEPTH and seen["cap"] > 0
    assert seen["next_cycle"] > 0 and seen["waits_for_ack"] > 0


@pytest.mark.parametrize("name", ["default", "small"])
def test_v_request_queue_returns_requests_in_order_and_holds_the_running_one(name):
    p = PARAMS[name]
    rng = np.random.default_rng(70)
    row_bits = p.row_elems * p.kv_bits
    count = 40
    requests = [
        {
            "new_v": int.from_bytes(rng.bytes(row_bits // 8), "little"),
            "new_v_scale": int(rng.integers(0, 1 << 16)),
            "rows": int(rng.integers(0, p.max_seq_len)),
            "append": int(rng.integers(2)),
            "seq_id": int(rng.integers(0, 1 << 32)),
            "partial": int(rng.integers(2)),
        }
        for _ in range(count)
    ]
    dut = VRequestQueue(p)
    seen = {"full": 0}

    async def bench(ctx):
        queue, pushed, started, running = deque(), 0, 0, None
        for cycle in range(3000):
            free = rng.random() < (0.1 if cycle < 200 else 0.5)  # slow at first: it fills
            ctx.set(dut.seq_free, int(free))
            room = ctx.get(dut.room)
            assert room == (len(queue) < REQUEST_QUEUE_DEPTH)
            seen["full"] += not room
            push = room and pushed < count and rng.random() < 0.6
            ctx.set(dut.push, int(push))
            fields = requests[pushed] if push else requests[int(rng.integers(count))]
            for key, value in fields.items():
                ctx.set(getattr(dut.request, key), value)
            start = ctx.get(dut.start)
            # The head starts when the sequencer is free, once the FIFO has it (one or two
            # cycles after its push).
            pushed_at = queue[0][0] if queue else cycle
            assert not start or (free and pushed_at < cycle)
            assert start or not (free and pushed_at < cycle - 1)
            if start:
                head = requests[queue[0][1]]
                assert (ctx.get(dut.rows), ctx.get(dut.append)) == (head["rows"], head["append"])
            if running is not None:  # held while the request runs, whatever is pushed
                want = requests[running]
                tag = want["seq_id"] | want["partial"] << 32
                got = (ctx.get(dut.new_v), ctx.get(dut.new_v_scale), ctx.get(dut.tag))
                assert got == (want["new_v"], want["new_v_scale"], tag)
            await ctx.tick()
            if start:
                _, running = queue.popleft()
                assert running == started
                started += 1
            if push:
                queue.append((cycle, pushed))
                pushed += 1
            if started == count:
                break
        assert started == count

    _run(dut, bench)
    assert seen["full"] > 0
