"""cocotb regression of ``hpu-card`` against :func:`~tandem.host.hpu.card.hpu_card_golden`.

The testbench plays host and card memory: each engine's AXI ports (``k_axi_<e>``,
``v_axi_<e>``, ``w_axi_<e>``) have a :class:`~tandem.sim.hpu.memory.DeviceMemory` of their own
holding the whole card's address range, so a request sent to the wrong engine reads random
bytes and writes where no one expects it. Sequences are placed by the runtime's channel-aware
allocator (:class:`~tandem.mappings.hpu.channels.ChannelSpace`), each region whole inside one
pseudo-channel, so the requests of a batch spread over every engine.

A batch of requests goes out as one transfer of descriptors on ``desc_i``; the golden model
gives each engine's results in its descriptors' order, and the scoreboard takes the beats of
``result_o`` by their ``engine`` field and compares them in that order, bit for bit, with
:func:`~tandem.host.hpu.result_words`. It also checks that a request's beats come contiguous
(no other engine's beat in between) and, per engine, the single-engine testbench's own checks
(:class:`~tandem.sim.hpu.hpu_tb.HpuTestbench`): each port's read bursts exactly as the layout
gives them, in order, and memory equal to the expected image after the run.

With ``hbm=True`` (the test ``hbm_decode``) the engines' read ports draw on one shared
HBM timing model (:mod:`tandem.sim.hpu.hbm`, the card's pseudo-channels at the U55C's rates
scaled to the simulated port width) instead of each memory answering a beat a cycle: the
test runs one decode step's requests and records the card's cycles, the model's
(:func:`~tandem.host.hpu.card.card_call_cycles`) and the KV bytes per channel. Plusargs
:data:`HBM_LENGTHS` and :data:`HBM_HEADS` set the step's sequences (``benchmarks/
hpu_card_rtl.py``).

Stimulus and timing are drawn from cocotb's seed as in :mod:`tandem.sim.hpu.hpu_tb`.
"""

from collections import deque
from dataclasses import dataclass

import cocotb
import numpy as np
from cocotb.triggers import SimTimeoutError, with_timeout
from tandem.host.hpu import HpuParams, HpuRequest, descriptor_beats, read_port_bursts
from tandem.host.hpu.card import (
    HpuCardParams,
    card_call_cycles,
    decode_card_result,
    engine_channels,
    route,
)
from tandem.host.hpu.codec import result_words
from tandem.mappings.hpu.channels import ChannelSpace
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS
from tandem.sim.hpu.hbm import HbmModel, HbmParams
from tandem.sim.hpu.hpu_tb import KINDS, Expected, HpuTestbench, KvSequence, make_query, make_tokens
from tandem.sim.hpu.memory import MODEL_LATENCY, DeviceMemory, HbmMemory
from tandem.sim.stream import StreamSink
from tandem.sim.tb import CLOCK_PERIOD_NS, StreamTestbench, evaluate_combinational

__all__ = ["CAPACITY", "HBM_HEADS", "HBM_LENGTHS", "MODEL_BYTES", "CardTestbench", "EngineSide"]

#: Tokens a sequence may hold (at most ``max_seq_len``): long enough for several pages, short
#: enough that a regression at the default 4096 stays within minutes in Icarus.
CAPACITY = 96
#: The largest card memory the testbench models: every engine's memory model holds the whole
#: address range, in the testbench's own memory.
MODEL_BYTES = 256 << 20
#: Plusarg: the token counts of the decode step's sequences in ``hbm_decode`` (comma list).
HBM_LENGTHS = "tandem_card_hbm_lengths"
#: Plusarg: KV heads per sequence in ``hbm_decode`` (one region, one request each).
HBM_HEADS = "tandem_card_hbm_heads"


@dataclass
class EngineSide:
    """What the card testbench keeps of one engine: its memory, the requests sent to it and
    the bursts they must read. Its checks are the single-engine testbench's own."""

    index: int
    p: HpuParams
    memory: DeviceMemory
    origin: str
    clock: object
    sequences: list[KvSequence]

    def __post_init__(self):
        self.layout = self.p.layout
        self.pending: deque[Expected] = deque()
        self.done: list[Expected] = []
        self.expected_bursts = {name: [] for name in self.memory.read}

    check_bursts = HpuTestbench.check_bursts
    check_memory = HpuTestbench.check_memory
    locate = HpuTestbench.locate
    compare = HpuTestbench._compare


class _Memories:
    """Every engine's memory, set alike (latency, backpressure) as one."""

    def __init__(self, memories: list[DeviceMemory]):
        self.memories = memories

    def set_read_latency(self, latency) -> None:
        for memory in self.memories:
            memory.set_read_latency(latency)

    def set_backpressure(self, probability: float) -> None:
        for memory in self.memories:
            memory.set_backpressure(probability)


class CardTestbench(StreamTestbench):
    """Clock, reset, descriptor source, result sink, each engine's memory, the host's state."""

    def __init__(self, dut, *, hbm: bool = False, capacity: int | None = None):
        super().__init__(dut)
        evaluate_combinational(dut)
        self.origin = f"seed {cocotb.RANDOM_SEED} (test seed {self.seed})"
        self.traffic_rng = np.random.default_rng([self.seed, 1])
        self.card: HpuCardParams = self.params
        self.p = p = self.card.engine
        if self.card.memory_bytes * self.card.engines > MODEL_BYTES:
            raise ValueError(
                f"the testbench models each engine's memory whole: memory_bytes * engines must "
                f"be at most {MODEL_BYTES}, not {self.card.memory_bytes * self.card.engines}"
            )
        self.capacity = min(p.max_seq_len, capacity or CAPACITY)
        self.layout = p.layout
        self.desc = self.source("desc_i")
        self.results = StreamSink(dut, "result_o", self.clock, self.reset_signal, signed=False)
        self._sinks["result_o"] = self.results
        fill = np.random.default_rng([self.seed, 2])
        self.sequences: list[KvSequence] = []
        self.engines = []
        #: The card's HBM (one set of channels for every engine), or None.
        self.hbm: HbmMemory | None = None
        if hbm:
            hbm_params = HbmParams.of_board(self.card.geometry, p.beat_bytes)
            self.hbm = HbmMemory(
                HbmModel(hbm_params), self.clock, self.reset_signal, CLOCK_PERIOD_NS
            )
        for e, own in enumerate(engine_channels(self.card)):
            memory = DeviceMemory(
                dut,
                self.clock,
                self.reset_signal,
                size=self.card.memory_bytes,
                beat_bytes=p.beat_bytes,
                rng=self.traffic_rng,
                fill_rng=fill,
                read_ports=[f"{name}_{e}" for name in p.read_port_names],
                write_port=f"w_axi_{e}",
                period_ns=CLOCK_PERIOD_NS,
                hbm=self.hbm,
                channels=own,
            )
            memory.hold_in_reset(True)  # until the first reset (HpuTestbench does the same)
            self.engines.append(EngineSide(e, p, memory, self.origin, self.clock, self.sequences))
        #: The card memory as the host and the golden model see it (the engines' memories hold
        #: the same bytes wherever a region lies).
        self.image = np.zeros(self.card.memory_bytes, dtype=np.uint8)
        self.space = ChannelSpace(self.card.geometry, self.layout.value_offset)
        self.memory = _Memories([side.memory for side in self.engines])
        self.sent = 0

    set_traffic = HpuTestbench.set_traffic  # through :attr:`memory`, every engine's

    async def reset(self, cycles: int = 2) -> None:
        await super().reset(cycles)
        for side in self.engines:
            side.pending.clear()
            side.memory.hold_in_reset(False)
            side.memory.clear_records()
            for bursts in side.expected_bursts.values():
                bursts.clear()

    # --- host side -----------------------------------------------------------------------
    def new_sequence(
        self,
        length: int,
        *,
        kind: str = "gauss",
        base: int | None = None,
        capacity: int | None = None,
    ) -> KvSequence:
        """A region of ``capacity`` tokens (default the testbench's) whole inside one
        pseudo-channel (at ``base``, else allocated), ``length`` random tokens written to it."""
        p = self.p
        capacity = capacity or self.capacity
        if base is None:
            (base,) = self.space.take(self.layout.region_bytes(capacity), 1, 1).tolist()
        direction = self.rng.standard_normal(p.head_dim)
        direction /= np.linalg.norm(direction)
        k, ks, v, vs = make_tokens(self.rng, p, length, kind, direction)
        seq_id = int(self.rng.integers(0, 1 << 32))
        seq = KvSequence(seq_id, base, capacity, kind, direction, k, ks, v, vs)
        self.write(seq, 0, (k, ks, v, vs), host=True)
        self.sequences.append(seq)
        return seq

    def write(self, seq: KvSequence, start: int, tokens, *, host: bool) -> None:
        """Rows ``tokens`` = ``(k, k_scale, v, v_scale)`` of ``seq`` from position ``start``: a
        host write (into the owning engine's memory and the golden model's), or a write the
        engine must do (into its expected image; the golden model makes its own)."""
        k, ks, v, vs = tokens
        memory = self.engines[int(route(self.card, seq.base))].memory

        def write(buffer):
            self.layout.write_rows(buffer, seq.base, start, k, ks, value=False)
            self.layout.write_rows(buffer, seq.base, start, v, vs, value=True)

        if not len(k):
            return
        if host:
            memory.host_write(write)
            write(self.image)
        else:
            memory.expect_write(write)

    def request(self, seq: KvSequence, *, append=False, partial=False, first_page=0):
        """A request over ``seq`` from ``first_page`` on (with a new token when ``append``);
        ``(request, first position, stored rows it reads)``. Updates the host's copy."""
        p = self.p
        start = first_page * PAGE_TOKENS
        n_mem = seq.length - start
        q, c = make_query(self.rng, p, seq.kind, seq.direction)
        base = seq.base + first_page * self.layout.page_stride
        request = HpuRequest(seq.seq_id, base, n_mem + int(append), q, c, partial=partial)
        if append:
            nk, nks, nv, nvs = make_tokens(self.rng, p, 1, seq.kind, seq.direction, seq.length)
            request.new_k, request.new_v = nk[0], nv[0]
            request.new_k_scale, request.new_v_scale = float(nks[0]), float(nvs[0])
            self.write(seq, seq.length, (nk, nks, nv, nvs), host=False)
            seq.extend(nk, nks, nv, nvs)
        return request, start, n_mem

    def submit(self, specs) -> list[Expected]:
        """Send the requests ``specs`` (``(sequence, options of request())`` pairs) as one
        transfer; the golden model's results wait in each engine's queue."""
        built = [self.request(seq, **options) for seq, options in specs]
        requests = [r for r, _, _ in built]
        per_engine = self.design.golden(self.card, self.image, requests)  # timed
        owners = route(self.card, [r.base for r in requests]).tolist()
        taken = [0] * self.card.engines
        out = []
        for (request, start, n_mem), e in zip(built, owners, strict=True):
            result = per_engine[e][taken[e]]
            taken[e] += 1
            side = self.engines[e]
            expected = Expected(
                index=self.sent,
                request=request,
                start=start,
                n_mem=n_mem,
                result=result,
                words=result_words(self.p, result, request.partial),
                sent_cycle=self.now_cycles(),
            )
            for name, bursts in read_port_bursts(self.p, request.base, n_mem).items():
                side.expected_bursts[f"{name}_{e}"].extend(
                    (b.address, b.beats, self.sent) for b in bursts
                )
            side.pending.append(expected)
            out.append(expected)
            self.sent += 1
        self.desc.send_all(b for r in requests for b in descriptor_beats(self.p, r))
        return out

    # --- checks --------------------------------------------------------------------------
    async def check_results(self) -> None:
        """Receive every pending request's beats from ``result_o`` and compare them."""
        pending = [e for side in self.engines for e in side.pending]
        # Generous: every result and KV beat stalled, and each request's latencies.
        beat = self.p.beat_bytes
        beats = sum(
            len(e.words) + self.layout.region_bytes(max(e.n_mem, 1)) // beat for e in pending
        )
        budget = 5000 + 40 * beats + 400 * len(pending)
        deadline = self.now_cycles() + budget
        under_way = None  # the engine whose request's beats are coming
        while any(side.pending for side in self.engines):
            remaining = max(deadline - self.now_cycles(), 1)
            try:
                payload = await with_timeout(self.results.recv(), remaining * CLOCK_PERIOD_NS, "ns")
            except SimTimeoutError:
                waiting = {s.index: len(s.pending) for s in self.engines if s.pending}
                raise AssertionError(
                    f"{self.origin}: timeout after {budget} cycles; requests waiting per engine "
                    f"{waiting}; {len(self.desc.queue)} descriptor beats not taken"
                ) from None
            words, tag, last, engine, error = decode_card_result(self.card, payload)
            if engine >= len(self.engines) or not self.engines[engine].pending:
                raise AssertionError(f"{self.origin}: a result beat from engine {engine}, none due")
            if error:
                raise AssertionError(
                    f"{self.origin}: engine {engine} flagged an AXI error on good traffic"
                )
            if under_way is not None and engine != under_way:
                raise AssertionError(
                    f"{self.origin}: a beat of engine {engine} inside a request of engine "
                    f"{under_way}: a request's beats must be contiguous"
                )
            side = self.engines[engine]
            expected = side.pending[0]
            expected.beats.append((words, tag, last))
            under_way = None if last else engine
            if last or len(expected.beats) >= len(expected.words) + 4:
                side.pending.popleft()
                expected.done_cycle = self.now_cycles()
                side.compare(expected)
                side.done.append(expected)

    async def finish(self, test_name: str, **figures) -> dict:
        """Per engine: bursts and memory; record the figures."""
        for side in self.engines:
            side.check_bursts()
            await side.check_memory()
        done = [e for side in self.engines for e in side.done]
        figures.setdefault("requests", len(done))
        figures["requests_per_engine"] = [len(side.done) for side in self.engines]
        if done:
            first = min(e.sent_cycle for e in done)
            figures.setdefault("cycles", max(e.done_cycle for e in done) - first)
        self.record(test_name, **figures)
        return figures


async def _start(dut, **traffic) -> CardTestbench:
    tb = CardTestbench(dut)
    tb.set_traffic(**traffic)
    await tb.reset()
    return tb


def _sequences(tb: CardTestbench, count: int) -> list[KvSequence]:
    top = max(2, tb.capacity - 4)
    return [
        tb.new_sequence(int(tb.rng.integers(1, top)), kind=KINDS[i % len(KINDS)])
        for i in range(count)
    ]


# --- tests ---------------------------------------------------------------------------------
@cocotb.test()
async def routed_batch(dut):
    """One transfer of requests over sequences on every channel: each reaches its engine."""
    tb = await _start(dut)
    sequences = _sequences(tb, 2 * tb.card.geometry.channels)
    specs = [(s, {"append": i % 2 == 1, "partial": i % 3 == 2}) for i, s in enumerate(sequences)]
    await _run_batch(tb, specs)
    figures = await tb.finish("routed_batch")
    assert all(figures["requests_per_engine"]), figures  # every engine had work


async def _run_batch(tb: CardTestbench, specs) -> None:
    tb.submit(specs)
    await tb.check_results()


@cocotb.test()
async def engines_overlap(dut):
    """A long request for engine 0, then short ones for the others: theirs come out first,
    since the engines work at once and the results merge at request boundaries."""
    tb = await _start(dut)
    by_engine = {}
    while len(by_engine) < tb.card.engines:
        seq = tb.new_sequence(1)
        by_engine.setdefault(int(route(tb.card, seq.base)), seq)
    long = by_engine[0]
    long.extend(*make_tokens(tb.rng, tb.p, tb.capacity - 2, "gauss", long.direction, 1))
    tb.write(long, 0, (long.k, long.k_scale, long.v, long.v_scale), host=True)
    specs = [(long, {"append": True})]
    specs += [(by_engine[e], {}) for e in range(1, tb.card.engines) for _ in range(2)]
    sent = tb.submit(specs)
    await tb.check_results()
    await tb.finish("engines_overlap", long_tokens=long.length)
    if tb.card.engines > 1:
        assert sent[0].done_cycle > max(e.done_cycle for e in sent[1:]), (
            f"{tb.origin}: engine 0's long request finished at cycle {sent[0].done_cycle}, "
            f"before the other engines' short ones ({[e.done_cycle for e in sent[1:]]})"
        )


@cocotb.test()
async def random_traffic(dut):
    """Random batches under random read latency and backpressure everywhere: appends, partial
    slices, later pages; several requests per sequence in one transfer."""
    tb = await _start(
        dut,
        latency=(MODEL_LATENCY, 40),
        memory_backpressure=0.25,
        desc_gaps=0.3,
        result_backpressure=0.3,
    )
    sequences = _sequences(tb, 6)
    for _ in range(3):
        specs = []
        for seq in sequences:
            for _ in range(int(tb.rng.integers(0, 3))):
                room = seq.length < seq.capacity
                append = seq.length == 0 or (room and bool(tb.rng.random() < 0.5))
                pages = (seq.length - (0 if append else 1)) // PAGE_TOKENS
                first = int(tb.rng.integers(0, pages + 1)) if tb.rng.random() < 0.3 else 0
                partial = bool(tb.rng.random() < 0.3)
                specs.append((seq, {"append": append, "partial": partial, "first_page": first}))
        if specs:
            await _run_batch(tb, specs)
    await tb.finish("random_traffic")


def _plusarg_ints(name: str, default: list[int]) -> list[int]:
    if name not in cocotb.plusargs:
        return default
    return [int(item) for item in str(cocotb.plusargs[name]).split(",")]


@cocotb.test()
async def hbm_decode(dut):
    """One decode step on the card's shared HBM model: results as the golden model's, no
    channel faster than its sustained rate, and the figures the card benchmark prints."""
    lengths = _plusarg_ints(HBM_LENGTHS, [])
    heads = _plusarg_ints(HBM_HEADS, [1])[0]
    tb = CardTestbench(dut, hbm=True, capacity=max(lengths) + 1 if lengths else None)
    hbm = tb.hbm.params
    tb.set_traffic(latency=hbm.latency)
    await tb.reset()
    if not lengths:  # the regression's own: two sequences per channel, of random lengths
        top = max(2, tb.capacity - 4)
        count = 2 * tb.card.geometry.channels
        lengths = [int(tb.rng.integers(top // 2, top)) for _ in range(count)]
    specs = []
    # Placed as a runtime admits a batch: longest first, each sequence's regions sized for its
    # tokens and the appended one, so the allocator's byte balance is a balance of the step's
    # reads. One sequence's KV heads of one layer are the runtime's call group.
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        region = tb.layout.region_bytes(n + 1)
        for base in tb.space.take(region, heads, heads).tolist():
            seq = tb.new_sequence(n, kind=KINDS[i % len(KINDS)], base=base, capacity=n + 1)
            specs.append((seq, {}))
    for side in tb.engines:
        side.memory.clear_records()
    tb.hbm.clear_counters()
    for spec in specs:
        spec[1]["append"] = True
    expected = tb.submit(specs)
    await tb.check_results()
    requests = [e.request for e in expected]
    model = card_call_cycles(tb.card, requests, hbm)
    windows = [w for side in tb.engines if (w := side.memory.read_window()) is not None]
    first, last = min(w[0] for w in windows), max(w[1] for w in windows)
    read_cycles = last - first + 1
    channel_bytes = tb.hbm.channel_bytes()
    touched = int((channel_bytes > 0).sum())
    kv_bytes = int(channel_bytes.sum())
    assert kv_bytes == sum(side.memory.read_bytes() for side in tb.engines)
    peak = hbm.sustained_bytes_per_cycle
    # Each channel's share of the read window can never pass its sustained rate by more than
    # the bucket it starts with (the model paces it).
    bound = peak * read_cycles + hbm.bucket_beats * hbm.beat_bytes + hbm.beat_bytes
    worst = int(np.argmax(channel_bytes))
    assert channel_bytes[worst] <= bound, (
        f"{tb.origin}: channel {worst} served {int(channel_bytes[worst])} bytes in "
        f"{read_cycles} cycles, more than its sustained {peak:.3f} bytes per cycle allows"
    )
    await tb.finish(
        "hbm_decode",
        lengths=lengths,
        heads=heads,
        model_cycles=round(model.total, 1),
        model_engine_cycles=[round(c, 1) for c in model.engines],
        read_cycles=read_cycles,
        kv_bytes=kv_bytes,
        channel_bytes=channel_bytes.tolist(),
        touched_channels=touched,
        sustained_bytes_per_cycle=peak,
        bandwidth_fraction=kv_bytes / (read_cycles * touched * peak),
        hbm={k: v for k, v in vars(hbm).items() if k != "sources"},
    )
