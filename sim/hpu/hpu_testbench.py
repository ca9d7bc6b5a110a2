"""The ``hpu`` testbench: the host's state (:class:`KvSequence`, :class:`Expected`) and
:class:`HpuTestbench`, which plays host and device memory around the engine (see
:mod:`tandem.sim.hpu.hpu_tb`)."""

from collections import deque
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge, SimTimeoutError, with_timeout
from tandem.host.hpu import (
    HpuParams,
    HpuRequest,
    HpuResult,
    decode_result,
    descriptor_beats,
    hpu_golden,
    read_port_bursts,
    result_words,
)
from tandem.host.hpu.codec import result_error
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS
from tandem.sim.hpu.hpu_stimulus import make_query, make_tokens
from tandem.sim.hpu.memory import MODEL_LATENCY, DeviceMemory
from tandem.sim.stream import StreamSink, random_pause
from tandem.sim.tb import (
    CLOCK_PERIOD_NS,
    StreamTestbench,
    evaluate_combinational,
    timed_golden,
)


@dataclass
class KvSequence:
    """One sequence's KV cache for one KV head, as the host knows it.

    ``k``/``v`` are int64 [length, head_dim], ``k_scale``/``v_scale`` binary16 [length];
    ``capacity`` tokens fit in the region at ``base``.
    """

    seq_id: int
    base: int
    capacity: int
    kind: str
    direction: np.ndarray
    k: np.ndarray
    k_scale: np.ndarray
    v: np.ndarray
    v_scale: np.ndarray

    @property
    def length(self) -> int:
        return len(self.k)

    def extend(self, k, k_scale, v, v_scale) -> None:
        """Append tokens to the host's copy."""
        self.k = np.concatenate([self.k, k])
        self.k_scale = np.concatenate([self.k_scale, k_scale])
        self.v = np.concatenate([self.v, v])
        self.v_scale = np.concatenate([self.v_scale, v_scale])


@dataclass
class Expected:
    """A request sent and what must come back for it."""

    index: int
    request: HpuRequest
    start: int
    n_mem: int
    result: HpuResult
    words: list[list[int]]
    sent_cycle: int
    beats: list[tuple[list[int], int, int]] = field(default_factory=list)
    done_cycle: int | None = None

    def describe(self) -> str:
        r = self.request
        mode = "partial" if r.partial else "full"
        append = ", append" if r.append else ""
        return (
            f"request #{self.index} (seq_id {r.seq_id:#x}, base {r.base:#x}, length {r.length}, "
            f"positions {self.start}..{self.start + r.length - 1}, {mode}{append})"
        )


class HpuTestbench(StreamTestbench):
    """Clock, reset, descriptor source, result sink, device memory and the host's state.

    Parameters
    ----------
    dut
        The ``hpu`` top.
    regions
        Sequences of up to ``max_seq_len`` tokens the memory must hold.
    fill
        Fill memory with random bytes first.
    """

    def __init__(self, dut, *, regions: int = 8, fill: bool = True):
        super().__init__(dut)
        evaluate_combinational(dut)
        # cocotb seeds each test with the regression seed plus a hash of the test's name;
        # reports name the regression seed, which is what reproduces a failure.
        self.origin = f"seed {cocotb.RANDOM_SEED} (test seed {self.seed})"
        # Stimulus, memory fill and traffic (latencies, pauses) draw from separate streams, so
        # a change of the design's timing does not change the requests or the memory image.
        self.traffic_rng = np.random.default_rng([self.seed, 1])
        self.p: HpuParams = self.params
        self.layout = self.p.layout
        self.desc = self.source("desc_i")
        # The result payload is a packed struct (words, tag, last): read it unsigned.
        self.results = StreamSink(dut, "result_o", self.clock, self.reset_signal, signed=False)
        self._sinks["result_o"] = self.results
        gap = 4096  # sequences start at random 64-byte offsets, so 4 KiB splits vary
        size = regions * (self.layout.region_bytes(self.p.max_seq_len) + gap) + gap
        self.memory = DeviceMemory(
            dut,
            self.clock,
            self.reset_signal,
            size=size,
            beat_bytes=self.p.beat_bytes,
            rng=self.traffic_rng,
            fill_rng=np.random.default_rng([self.seed, 2]) if fill else None,
            read_ports=self.p.read_port_names,
            period_ns=CLOCK_PERIOD_NS,
        )
        self.memory.hold_in_reset(True)  # until the first reset (see hold_in_reset)
        self.sequences: list[KvSequence] = []
        self.pending: deque[Expected] = deque()
        self.done: list[Expected] = []
        self.sent = 0
        self.expected_bursts: dict[str, list[tuple[int, int, int]]] = {
            name: [] for name in self.memory.read
        }
        self._next_base = 0

    # --- configuration -------------------------------------------------------------------
    def set_traffic(
        self,
        *,
        latency: int | tuple[int, int] = MODEL_LATENCY,
        memory_backpressure: float = 0.0,
        desc_gaps: float = 0.0,
        result_backpressure: float = 0.0,
    ) -> None:
        """Read latency, random pauses on every AXI channel, descriptor gaps, result stalls."""
        self.memory.set_read_latency(latency)
        self.memory.set_backpressure(memory_backpressure)
        rng = self.traffic_rng
        self.desc.set_pause_generator(random_pause(rng, desc_gaps) if desc_gaps else None)
        self.results.set_pause_generator(
            random_pause(rng, result_backpressure) if result_backpressure else None
        )

    async def reset(self, cycles: int = 2) -> None:
        """Reset the design and the memory models; forget requests in flight and records."""
        self.pending.clear()
        await super().reset(cycles)
        self.memory.hold_in_reset(False)
        self.results.queue.clear()
        self.memory.clear_records()
        for bursts in self.expected_bursts.values():
            bursts.clear()

    # --- host side -----------------------------------------------------------------------
    def new_sequence(self, length: int, *, kind: str = "gauss", capacity: int | None = None):
        """Allocate a region, draw ``length`` tokens and write them to memory (host write)."""
        p = self.p
        capacity = p.max_seq_len if capacity is None else capacity
        base = self._next_base + 64 * int(self.rng.integers(0, 64))
        end = base + self.layout.region_bytes(capacity)
        if end > self.memory.size:
            raise ValueError("device memory too small: raise HpuTestbench(regions=...)")
        self._next_base = end
        direction = self.rng.standard_normal(p.head_dim)
        direction /= np.linalg.norm(direction)
        k, ks, v, vs = make_tokens(self.rng, p, length, kind, direction)
        seq_id = int(self.rng.integers(0, 1 << 32))
        seq = KvSequence(seq_id, base, capacity, kind, direction, k, ks, v, vs)
        self._host_write(seq, 0, k, ks, v, vs, host=True)
        self.sequences.append(seq)
        return seq

    def _host_write(self, seq: KvSequence, start: int, k, ks, v, vs, *, host: bool) -> None:
        def write(buffer):
            self.layout.write_rows(buffer, seq.base, start, k, ks, value=False)
            self.layout.write_rows(buffer, seq.base, start, v, vs, value=True)

        if len(k):
            (self.memory.host_write if host else self.memory.expect_write)(write)

    def submit(
        self,
        seq: KvSequence,
        *,
        append: bool = False,
        partial: bool = False,
        first_page: int = 0,
        length: int | None = None,
        query: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Expected:
        """Build a request over ``seq`` from page ``first_page`` on, queue its descriptor.

        ``append`` adds a new token at the end of the sequence (so the request covers every
        token from ``first_page`` on); otherwise ``length`` tokens (default: all) are read.
        ``query`` is ``(q, score scales)``; drawn at random when None.
        """
        p = self.p
        start = first_page * PAGE_TOKENS
        if append:
            if seq.length >= seq.capacity:
                raise ValueError("sequence is full")
            n_mem = seq.length - start
            length = n_mem + 1
        else:
            length = seq.length - start if length is None else length
            n_mem = length
        if not 1 <= length <= p.max_seq_len or n_mem < 0:
            raise ValueError(f"bad request length {length} from position {start}")
        q, c = make_query(self.rng, p, seq.kind, seq.direction) if query is None else query
        k, ks = seq.k[start : start + n_mem], seq.k_scale[start : start + n_mem]
        v, vs = seq.v[start : start + n_mem], seq.v_scale[start : start + n_mem]
        base = seq.base + first_page * self.layout.page_stride
        request = HpuRequest(seq.seq_id, base, length, q, c, partial=partial)
        if append:
            nk, nks, nv, nvs = make_tokens(self.rng, p, 1, seq.kind, seq.direction, seq.length)
            request.new_k, request.new_v = nk[0], nv[0]
            request.new_k_scale, request.new_v_scale = float(nks[0]), float(nvs[0])
            k, ks = np.concatenate([k, nk]), np.concatenate([ks, nks])
            v, vs = np.concatenate([v, nv]), np.concatenate([vs, nvs])
            self._host_write(seq, seq.length, nk, nks, nv, nvs, host=False)
            seq.extend(nk, nks, nv, nvs)
        result = timed_golden(hpu_golden)(p, q, c, k, ks, v, vs, partial)
        result.seq_id = seq.seq_id
        expected = Expected(
            index=self.sent,
            request=request,
            start=start,
            n_mem=n_mem,
            result=result,
            words=result_words(p, result, partial),
            sent_cycle=self.now_cycles(),
        )
        for name, bursts in read_port_bursts(p, base, n_mem).items():
            self.expected_bursts[name].extend((b.address, b.beats, self.sent) for b in bursts)
        self.sent += 1
        self.pending.append(expected)
        self.desc.send_all(descriptor_beats(p, request))
        return expected

    # --- checks --------------------------------------------------------------------------
    def _budget_cycles(self, requests) -> int:
        """Generous cycle bound for ``requests``: every beat stalled, every burst's latency."""
        p = self.p
        beats = 0
        for e in requests:
            per_port = self.layout.region_bytes(max(e.n_mem, 1)) // 2 // p.beat_bytes
            beats += 2 * per_port + len(e.words) + len(descriptor_beats(p, e.request))
        bursts = sum(len(b) for b in self.expected_bursts.values())
        return 5000 + 40 * beats + 200 * bursts // max(p.max_outstanding, 1) + 400 * len(requests)

    async def _receive(self, expected: Expected) -> None:
        limit = len(expected.words) + 4
        while True:
            payload = await self.results.recv()
            words, tag, last = decode_result(self.p, payload)
            # Every access of this testbench's memory answers OKAY at an aligned base.
            assert not result_error(self.p, payload), (
                f"{self.origin}: request {expected.index} came back with its error flag set"
            )
            expected.beats.append((words, tag, last))
            if last or len(expected.beats) >= limit:
                break
        expected.done_cycle = self.now_cycles()

    async def check_results(self, count: int | None = None) -> list[Expected]:
        """Receive the results of the ``count`` oldest pending requests (default: all), check.

        Raises ``AssertionError`` naming the seed, the request, the query, the element and the
        expected and actual values of the first mismatch.
        """
        count = len(self.pending) if count is None else count
        batch = [self.pending.popleft() for _ in range(count)]
        budget = self._budget_cycles(batch)
        deadline = self.now_cycles() + budget
        for expected in batch:
            remaining = max(deadline - self.now_cycles(), 1)
            try:
                await with_timeout(self._receive(expected), remaining * CLOCK_PERIOD_NS, "ns")
            except SimTimeoutError:
                raise AssertionError(self._timeout_report(expected, budget)) from None
            self._compare(expected)
            self.done.append(expected)
        return batch

    def _timeout_report(self, expected: Expected, budget: int) -> str:
        ports = ", ".join(
            f"{name}: {len(port.stats.ar)}/{len(self.expected_bursts[name])} bursts issued, "
            f"{port.in_flight} in flight, {port.stats.r_beats} beats"
            for name, port in self.memory.read.items()
        )
        return (
            f"{self.origin}: timeout after {budget} cycles waiting for "
            f"{expected.describe()}: {len(expected.beats)} of {len(expected.words)} result beats "
            f"arrived; {len(self.desc.queue)} descriptor beats not taken; {ports}; "
            f"writes: {len(self.memory.write.stats.aw)} AW, {len(self.memory.write.stats.w_beats)}"
            f" W, {self.memory.write.stats.b_count} B"
        )

    def _compare(self, expected: Expected) -> None:
        p = self.p
        partial = expected.request.partial
        head = f"{self.origin}: {expected.describe()}"
        got = expected.beats
        for beat, (_words, tag, _last) in enumerate(got):
            if tag != expected.request.seq_id:
                raise AssertionError(
                    f"{head}: beat {beat} has tag {tag:#x}, expected {expected.request.seq_id:#x}"
                )
        if len(got) != len(expected.words) or not got[-1][2]:
            raise AssertionError(
                f"{head}: 'last' on beat {len(got) - 1} (flag {got[-1][2]}), expected it on beat "
                f"{len(expected.words) - 1} of {len(expected.words)}"
            )
        actual = np.array([w for w, _, _ in got], dtype=object)
        want = np.array(expected.words, dtype=object)
        differ = np.argwhere(actual != want)
        if differ.size == 0:
            return
        beat, word = (int(i) for i in differ[0])
        per_query = p.row_beats + (1 if partial else 0)
        query, within = divmod(beat, per_query)
        if within < p.row_beats:
            element = within * p.lanes + word
            what = f"{'o' if partial else 'y'}[{query}][{element}]"
            if element >= p.head_dim:
                what += " (padding element)"
        else:
            what = {0: f"m[{query}]", 1: f"l[{query}]"}.get(word, f"unused word {word}")
        raise AssertionError(
            f"{head}: first mismatch at result beat {beat} word {word} = query {query}, {what}: "
            f"expected {want[beat, word]}, got {actual[beat, word]}; {len(differ)} of "
            f"{want.size} words differ"
        )

    def check_bursts(self) -> None:
        """Every port issued exactly the layout's bursts, in order, within max_outstanding."""
        errors = self.memory.errors()
        assert not errors, f"{self.origin}: AXI protocol errors: " + "; ".join(errors[:5])
        for name, port in self.memory.read.items():
            want = self.expected_bursts[name]
            got = port.bursts
            for i, (w, g) in enumerate(zip(want, got)):
                if (w[0], w[1]) != g:
                    e = next(x for x in self.done + list(self.pending) if x.index == w[2])
                    raise AssertionError(
                        f"{self.origin}: {name} burst {i} (of {e.describe()}): expected "
                        f"address {w[0]:#x} x {w[1]} beats, got {g[0]:#x} x {g[1]} beats"
                    )
            assert len(got) == len(want), (
                f"{self.origin}: {name} issued {len(got)} bursts, expected {len(want)}"
            )
            assert port.stats.in_flight_max <= self.p.max_outstanding, (
                f"{self.origin}: {name} had {port.stats.in_flight_max} bursts in flight, "
                f"max_outstanding is {self.p.max_outstanding}"
            )

    async def check_memory(self, settle_cycles: int = 5000) -> None:
        """Wait for writes to be answered, then compare memory with the expected image."""
        for _ in range(settle_cycles):
            if self.memory.idle():
                break
            await RisingEdge(self.clock)
        else:
            raise AssertionError(
                f"{self.origin}: memory not idle {settle_cycles} cycles after the last result "
                f"({self.memory.write.outstanding} writes unanswered, "
                + ", ".join(f"{n}: {p.in_flight} reads" for n, p in self.memory.read.items())
                + ")"
            )
        differ = self.memory.differences()
        if differ.size:
            address = int(differ[0])
            raise AssertionError(
                f"{self.origin}: memory differs from the expected image at {differ.size} "
                f"bytes; first at {address:#x} ({self.locate(address)}): expected "
                f"{self.memory.image[address]:#04x}, got {self.memory.view[address]:#04x}"
            )
        w = self.memory.write.stats
        assert len(w.w_beats) == sum(a.beats for a in w.aw), (
            f"{self.origin}: {len(w.w_beats)} W beats for AW bursts of "
            f"{sum(a.beats for a in w.aw)} beats"
        )

    def locate(self, address: int) -> str:
        """Which sequence, page, part and row or scale slot ``address`` belongs to."""
        layout = self.layout
        # Where the K and V spans of a region start (one span, K and V per page, unless split).
        spans = (("K", 0), ("V", layout.value_offset)) if layout.split else (("K", 0),)
        for seq in self.sequences:
            size = layout.region_bytes(seq.capacity)
            inside = [(p, address - seq.base - s) for p, s in spans]
            inside = [(p, offset) for p, offset in inside if 0 <= offset < size]
            if not inside:
                continue
            part, offset = inside[0]
            page, within = divmod(offset, layout.page_stride)
            if not layout.split:
                part = "V" if within >= layout.part_bytes else "K"
                within %= layout.part_bytes
            if within < 64:
                slot = f"scale of position {page * PAGE_TOKENS + within // 2}"
            else:
                row, byte = divmod(within - 64, layout.row_bytes)
                pad = " (padding)" if byte >= layout.head_dim else ""
                slot = f"row of position {page * PAGE_TOKENS + row}, byte {byte}{pad}"
            return f"seq_id {seq.seq_id:#x} (length {seq.length}) page {page} {part} {slot}"
        return "outside every sequence"

    async def finish(self, test_name: str, **figures) -> dict:
        """Check bursts and memory, record figures (cycles, requests) and return them."""
        self.check_bursts()
        await self.check_memory()
        figures.setdefault("requests", len(self.done))
        if self.done:
            last = max(e.done_cycle for e in self.done)
            figures.setdefault("cycles", last - min(e.sent_cycle for e in self.done))
        for name, port in self.memory.read.items():
            figures[f"{name}_in_flight_max"] = port.stats.in_flight_max
        self.record(test_name, **figures)
        return figures

    async def wait_until(self, condition, limit: int, what: str) -> None:
        """Wait (at most ``limit`` cycles) until ``condition()`` holds."""
        for _ in range(limit):
            if condition():
                return
            await RisingEdge(self.clock)
        raise AssertionError(f"{self.origin}: {what} did not happen within {limit} cycles")
