"""cocotb regression of the ``hpu`` decode-attention engine against :func:`hpu_golden`.

The testbench plays host and device memory: it keeps each sequence's KV cache (the ``kv_bits`` rows
and binary16 scales the host wrote), writes them into :class:`DeviceMemory` at the addresses
of :class:`~tandem.mappings.hpu.kv_layout.KvLayout`, sends descriptors (:func:`pack_descriptor`,
split into little-endian beats) and compares every result beat bit-exactly with
:func:`result_words` of the golden model. It also checks what the engine did to memory:

* read bursts: each port issued exactly :meth:`KvLayout.read_bursts` of every request, in
  order, with no more than ``max_outstanding`` in flight;
* writes: after a run, memory equals the expected image byte for byte (random initial fill,
  the rows the host wrote, and the appended rows and scales at their layout addresses;
  padding and unused scale slots untouched), so nothing is lost and nothing stray lands.

Stimulus and timing are drawn from cocotb's seed (the runner's ``seed``, combined by cocotb
with each test's name), so a failure reproduces with the same seed; requests and the memory
image do not depend on the design's timing. Figures (cycles, stream efficiency) go to
the runner's results file.

The sweep used by ``benchmarks/hpu_stream_efficiency.py`` is defined only when the runner
passes ``+tandem_hpu_sweep_lengths=64,128,...`` and ``+tandem_hpu_sweep_latencies=0,100``, so
ordinary regressions do not run it.
"""

import cocotb
from cocotb.triggers import ClockCycles
from tandem.host.hpu import unpack_results
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS
from tandem.sim.hpu.hpu_stimulus import (
    KINDS,
    MERGE_ABS_LSB,
    MERGE_REL,
    make_query,
    make_tokens,
    merge_error,
)
from tandem.sim.hpu.hpu_testbench import Expected, HpuTestbench, KvSequence
from tandem.sim.hpu.memory import MODEL_LATENCY

__all__ = [
    "MERGE_ABS_LSB",
    "MERGE_REL",
    "Expected",
    "HpuTestbench",
    "KvSequence",
    "make_query",
    "make_tokens",
    "merge_error",
]


async def _start(dut, **traffic) -> HpuTestbench:
    tb = HpuTestbench(dut)
    tb.set_traffic(**traffic)
    await tb.reset()
    return tb


def _lengths(tb: HpuTestbench, *candidates: int) -> list[int]:
    """The candidates that fit ``max_seq_len``, or ``max_seq_len`` itself."""
    fit = [n for n in candidates if n <= tb.p.max_seq_len]
    return fit or [tb.p.max_seq_len]


# --- tests ---------------------------------------------------------------------------------
@cocotb.test()
async def single_token(dut):
    """Length 1: one token read from memory; and length 1 appending (nothing to read)."""
    tb = await _start(dut)
    one = tb.new_sequence(1)
    tb.submit(one)
    await tb.check_results()
    empty = tb.new_sequence(0)
    tb.submit(empty, append=True)  # n_mem = 0: no read burst at all
    await tb.check_results()
    tb.submit(empty)  # and the token it appended, read back
    await tb.check_results()
    await tb.finish("single_token")


@cocotb.test()
async def odd_lengths(dut):
    """Lengths around page and burst boundaries, with and without append."""
    tb = await _start(dut)
    for n in _lengths(tb, 2, 31, 32, 33, 47, 64, 100):
        seq = tb.new_sequence(n, kind="gauss")
        tb.submit(seq)
        await tb.check_results()
        tb.submit(seq, append=True)
        await tb.check_results()
    await tb.finish("odd_lengths")


@cocotb.test()
async def max_seq_len(dut):
    """A full sequence: max_seq_len - 1 tokens plus an append, then all max_seq_len read."""
    tb = await _start(dut)
    n = tb.p.max_seq_len
    seq = tb.new_sequence(n - 1, kind="ramp")
    tb.submit(seq, append=True)
    await tb.check_results()
    tb.submit(seq, partial=True)
    tb.submit(seq)
    await tb.check_results()
    await tb.finish("max_seq_len")


@cocotb.test()
async def append_then_read(dut):
    """Appends across a page boundary, each next request reading the tokens appended before."""
    tb = await _start(dut)
    seq = tb.new_sequence(min(31, tb.p.max_seq_len - 3))
    for _ in range(2):
        tb.submit(seq, append=True)
        await tb.check_results()  # the host's next step needs this result first
    tb.submit(seq)
    await tb.check_results()
    await tb.finish("append_then_read")


@cocotb.test()
async def append_back_to_back(dut):
    """Appends to one sequence queued with no gap: each request reads the previous one's token.

    The engine must see its previous writes acknowledged before reading; slow write channels
    (random pauses on AW, W and B) with a fast read side would expose a stale read.
    """
    tb = await _start(dut)
    tb.memory.write.set_backpressure(tb.traffic_rng, aw=0.5, w=0.5, b=0.7)
    seq = tb.new_sequence(min(30, tb.p.max_seq_len - 4))
    for _ in range(4):  # crosses the page boundary at 32
        tb.submit(seq, append=True)
    await tb.check_results()
    await tb.finish("append_back_to_back")


@cocotb.test()
async def back_to_back_sequences(dut):
    """Descriptors for different sequences queued with no gap; results in order."""
    tb = await _start(dut)
    lengths = [int(n) for n in tb.rng.integers(1, min(tb.p.max_seq_len, 96), 6)]
    sequences = [tb.new_sequence(n, kind=KINDS[i % 3]) for i, n in enumerate(lengths)]
    start = tb.now_cycles()
    for i, seq in enumerate(sequences):
        tb.submit(seq, append=bool(i % 2), partial=i % 3 == 2)
    await tb.check_results()
    await tb.finish(
        "back_to_back_sequences",
        cycles=tb.now_cycles() - start,
        stream_efficiency=round(tb.memory.stream_efficiency(), 4),
    )


@cocotb.test()
async def partial_slices_merge(dut):
    """Two page-aligned slices in partial mode merge to the full-mode output (in tolerance)."""
    tb = await _start(dut)
    n = _lengths(tb, 100)[0]
    seq = tb.new_sequence(n)
    full = tb.submit(seq)
    figures = {}
    if n > PAGE_TOKENS:
        split_page = max(1, (n // 2) // PAGE_TOKENS)
        query = (full.request.q, full.request.score_scale)  # the same queries for all three
        left = tb.submit(seq, partial=True, length=split_page * PAGE_TOKENS, query=query)
        right = tb.submit(seq, partial=True, first_page=split_page, query=query)
        await tb.check_results()
        parts = [
            unpack_results(tb.p, [w for w, _, _ in e.beats], True, e.request.seq_id)
            for e in (left, right)
        ]
        full_result = unpack_results(tb.p, [w for w, _, _ in full.beats], False)
        error, allowance = merge_error(tb.p, parts, full_result)
        assert error <= allowance, (
            f"{tb.origin}: merged partials differ from full mode by {error:.2f} output LSBs, "
            f"allowed {allowance:.2f} ({MERGE_ABS_LSB} LSB + {MERGE_REL:g} x max|y|)"
        )
        figures["merge_error_lsb"] = round(error, 3)
    else:
        tb.submit(seq, partial=True, query=(full.request.q, full.request.score_scale))
        await tb.check_results()
    await tb.finish("partial_slices_merge", **figures)


@cocotb.test()
async def reset_mid_request(dut):
    """Reset while read bursts are in flight; the next requests come out right."""
    tb = await _start(dut, latency=40)
    long = tb.new_sequence(_lengths(tb, 200)[0], kind="ramp")
    tb.submit(long)
    k_port = tb.memory.read[tb.p.read_port_names[0]]
    await tb.wait_until(
        lambda: k_port.in_flight >= 2 and k_port.stats.r_beats > 0,
        5000,
        "two bursts in flight with data flowing",
    )
    in_flight = k_port.in_flight
    await tb.reset()
    other = tb.new_sequence(_lengths(tb, 45)[0])
    tb.submit(long)
    tb.submit(other, append=True)
    await tb.check_results()
    # Then a reset with only part of a descriptor taken: the parser must start afresh.
    taken = tb.desc.transfers
    tb.submit(other)
    await tb.wait_until(lambda: tb.desc.transfers >= taken + 2, 1000, "descriptor beats taken")
    await tb.reset()
    tb.submit(long, partial=True)
    await tb.check_results()
    await tb.finish("reset_mid_request", in_flight_at_reset=in_flight)


@cocotb.test()
async def random_traffic(dut):
    """Random requests under random read latency and backpressure on every channel."""
    tb = await _start(
        dut,
        latency=(MODEL_LATENCY, 60),
        memory_backpressure=0.25,
        desc_gaps=0.3,
        result_backpressure=0.3,
    )
    p = tb.p
    top = max(1, min(p.max_seq_len - 8, 120))
    sequences = [tb.new_sequence(int(tb.rng.integers(0, top)), kind=KINDS[i % 3]) for i in range(4)]
    for _ in range(3):  # rounds; one request per sequence per round (see append_then_read)
        for seq in sequences:
            if tb.rng.random() < 0.25:
                continue
            append = seq.length == 0 or (seq.length < seq.capacity and tb.rng.random() < 0.6)
            pages = (seq.length - (0 if append else 1)) // PAGE_TOKENS
            first_page = int(tb.rng.integers(0, pages + 1)) if tb.rng.random() < 0.3 else 0
            partial = bool(tb.rng.random() < 0.3)
            tb.submit(seq, append=append, partial=partial, first_page=first_page)
        await tb.check_results()
    await tb.finish("random_traffic")


@cocotb.test()
async def line_rate_streaming(dut):
    """A long request against a memory answering every cycle: K and V stream at line rate."""
    tb = await _start(dut)
    n = _lengths(tb, 240)[0]
    seq = tb.new_sequence(n)
    tb.memory.clear_records()
    tb.submit(seq)
    await tb.check_results()
    efficiency = tb.memory.stream_efficiency()
    window = tb.memory.read_window()
    figures = await tb.finish(
        "line_rate_streaming",
        tokens=n,
        stream_efficiency=round(efficiency, 4),
        read_cycles=window[1] - window[0] + 1,
        read_bytes=tb.memory.read_bytes(),
        first_read_after_descriptor=window[0] - tb.done[-1].sent_cycle,
        last_result_after_last_read=tb.done[-1].done_cycle - window[1],
    )
    # A memory answering every cycle keeps both ports busy once a burst or two are in flight,
    # so only the first read's latency and the window's ends are lost: over 64 tokens or more
    # that stays under 10 %. Configurations allowing fewer than 8 beats in flight cannot cover
    # the model's own latency and are only recorded.
    if n >= 64 and tb.p.max_outstanding * tb.p.max_burst_beats >= 8:
        assert efficiency >= 0.9, (
            f"{tb.origin}: stream efficiency {efficiency:.3f} < 0.9 over {n} tokens ({figures})"
        )


@cocotb.test()
async def latency_hidden(dut):
    """A 100-cycle read latency costs the request about 100 cycles, not 100 per burst.

    Holds when ``max_outstanding`` bursts cover the latency; other configurations read a
    short sequence and only record the figure.
    """
    latency = 100
    tb = await _start(dut, latency=latency)
    p = tb.p
    hides = p.max_outstanding * p.max_burst_beats >= latency + 2 * p.max_burst_beats
    n = _lengths(tb, 240)[0] if hides else min(8, p.max_seq_len)
    seq = tb.new_sequence(n)
    tb.memory.clear_records()
    tb.submit(seq)
    await tb.check_results()
    first, last = tb.memory.read_window()
    beats = max(port.stats.r_beats for port in tb.memory.read.values())
    overhead = last - first + 1 - beats
    await tb.finish(
        "latency_hidden",
        tokens=n,
        read_cycles=last - first + 1,
        overhead_cycles=overhead,
        stream_efficiency=round(tb.memory.stream_efficiency(), 4),
    )
    if hides:
        # The first beat arrives `latency` cycles after the first address; after that one
        # beat per cycle. A few cycles of slack for page changes.
        assert overhead <= latency + 8, (
            f"{tb.origin}: {beats} beats per port took {last - first + 1} cycles with a "
            f"{latency}-cycle latency: {overhead} cycles beyond the beats, allowed {latency + 8}"
        )


@cocotb.test()
async def memory_latency(dut):
    """Self-check of the memory model: rvalid rises exactly ``latency`` cycles after an AR."""
    latency = 17
    tb = await _start(dut, latency=latency)
    seq = tb.new_sequence(_lengths(tb, 8)[0])
    tb.memory.clear_records()
    tb.submit(seq)
    await tb.check_results()
    for name, port in tb.memory.read.items():
        measured = port.stats.first_rvalid_cycle - port.stats.first_ar_cycle
        assert measured == latency, (
            f"{name}: first rvalid {measured} cycles after the first AR, latency set {latency}"
        )
    await tb.finish("memory_latency", measured_latency=measured)


# --- benchmark sweep (benchmarks/hpu_stream_efficiency.py) ---------------------------------
SWEEP_LENGTHS = "tandem_hpu_sweep_lengths"
SWEEP_LATENCIES = "tandem_hpu_sweep_latencies"
SWEEP_BATCH = "tandem_hpu_sweep_batch"


def _plusarg_ints(name: str) -> list[int]:
    return [int(item) for item in str(cocotb.plusargs[name]).split(",")]


if SWEEP_LENGTHS in cocotb.plusargs:

    @cocotb.test()
    async def stream_efficiency_sweep(dut):
        """Stream efficiency against sequence length and read latency (no backpressure).

        Each (latency, length) point runs one request alone, then ``batch`` requests queued
        back to back (a decode step's requests), measured over the whole read window.
        """
        config = {
            "lengths": _plusarg_ints(SWEEP_LENGTHS),
            "latencies": _plusarg_ints(SWEEP_LATENCIES),
            "batch": _plusarg_ints(SWEEP_BATCH)[0] if SWEEP_BATCH in cocotb.plusargs else 1,
        }
        tb = HpuTestbench(dut, regions=1, fill=False)
        await tb.reset()
        p = tb.p
        lengths = [n for n in config["lengths"] if n <= p.max_seq_len]
        seq = tb.new_sequence(max(lengths))
        rows = []
        for latency in config["latencies"]:
            tb.set_traffic(latency=latency)
            for n in lengths:
                for batch in sorted({1, config["batch"]}):
                    tb.memory.clear_records()
                    for bursts in tb.expected_bursts.values():
                        bursts.clear()
                    sent = tb.now_cycles()
                    for _ in range(batch):
                        tb.submit(seq, length=n)
                    await tb.check_results()
                    tb.check_bursts()
                    window = tb.memory.read_window()
                    rows.append(
                        {
                            "latency": latency,
                            "tokens": n,
                            "batch": batch,
                            "efficiency": tb.memory.stream_efficiency(),
                            "read_cycles": window[1] - window[0] + 1,
                            "read_bytes": tb.memory.read_bytes(),
                            "request_cycles": tb.done[-1].done_cycle - sent,
                            "in_flight_max": max(
                                port.stats.in_flight_max for port in tb.memory.read.values()
                            ),
                        }
                    )
                    await ClockCycles(tb.clock, 10)
        tb.record("stream_efficiency_sweep", rows=rows)
