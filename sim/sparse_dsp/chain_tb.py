"""cocotb regression of ``sparse-dsp-chain`` against :func:`tandem.host.sparse_dsp.chain_golden`.

Every result is compared bit for bit with the golden model, and the unpacked results with
``W @ x`` computed in int64 from the dense matrix.
"""

import itertools

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, with_timeout
from tandem.host.sparse_dsp import chain_golden
from tandem.mappings.nm import NMPattern, chain_streams
from tandem.sim.scoreboard import Scoreboard
from tandem.sim.stream import pack_fields, random_pause
from tandem.sim.tb import CLOCK_PERIOD_NS, StreamTestbench, evaluate_combinational, timed_golden

from .common import all_patterns, make_problem


class ChainTestbench(StreamTestbench):
    """Sends configuration words and beats, checks results; records beats and cycles."""

    async def start(self):
        evaluate_combinational(self.dut)
        self.source("cfg_i")
        self.source("i")
        self.sink("o")
        await self.reset()
        return self

    def traffic(self, gaps: float = 0.0, backpressure: float = 0.0) -> None:
        self.source("i").set_pause_generator(random_pause(self.rng, gaps) if gaps else None)
        self.sink("o").set_pause_generator(
            random_pause(self.rng, backpressure) if backpressure else None
        )

    async def configure(self, streams) -> None:
        cfg = self.source("cfg_i")
        cfg.send(streams.config_word)
        await with_timeout(cfg.wait(), 10000 * CLOCK_PERIOD_NS, "ns")

    def payloads(self, streams) -> list[int]:
        return [pack_fields(*streams.beat_fields(t)) for t in range(len(streams.beats["last"]))]

    async def request(self, name: str, packed, x, reference, mode: str, seg=None) -> dict:
        """Run one matrix through the chain; return beats, results and cycles."""
        streams = chain_streams(self.params, packed, x, mode, seg=seg)
        expected = timed_golden(chain_golden)(self.params, streams.cfg, streams.beats)
        await self.configure(streams)
        payloads = self.payloads(streams)
        start = self.now_cycles()
        self.source("i").send_all(payloads)
        limit = 50 * (len(payloads) + len(expected)) + 1000
        actual = await with_timeout(
            self.sink("o").recv_n(len(expected)), limit * CLOCK_PERIOD_NS, "ns"
        )
        cycles = self.now_cycles() - start
        label = f"{name} {packed.pattern} {mode} seg {streams.layout.seg}"
        Scoreboard(label, expected).check(actual)
        y = streams.unpack(actual)
        assert np.array_equal(y, reference), f"{label}: unpacked results differ from W @ x"
        return {"beats": len(payloads), "results": len(expected), "cycles": cycles}


@cocotb.test()
async def every_pattern(dut):
    """Each N:M pattern up to max_m, both modes, every cascade segment, patterns changing."""
    tb = await ChainTestbench(dut).start()
    tb.traffic(gaps=0.2, backpressure=0.3)
    p = tb.params
    runs = 0
    for k, pattern in enumerate(all_patterns(p.max_m)):
        mode = ("mv", "mm")[k % 2]
        seg = p.segment_choices[k % len(p.segment_choices)]
        cols = int(tb.rng.integers(1, 4)) * pattern.m + int(tb.rng.integers(0, pattern.m))
        packed, x, ref = make_problem(tb.rng, 5, cols, pattern, 2 if mode == "mm" else 0)
        await tb.request("every_pattern", packed, x, ref, mode, seg)
        runs += 1
    tb.record("every_pattern", requests=runs)


@cocotb.test()
async def extreme_values(dut):
    """-128 everywhere: eight (-128)*(-128) products in one cascade need the adjust window."""
    tb = await ChainTestbench(dut).start()
    p = tb.params
    for pattern in (NMPattern(p.max_m, p.max_m), NMPattern(1, 2), NMPattern(2, 4)):
        for mode in ("mv", "mm"):
            packed, x, ref = make_problem(
                tb.rng, 4, 4 * pattern.m * 2, pattern, 2 if mode == "mm" else 0, "extreme"
            )
            await tb.request("extreme_values", packed, x, ref, mode, max(p.segment_choices))


@cocotb.test()
async def per_row_patterns(dut):
    """Rows with their own patterns: matrix-vector rows run alone, the second lane idle."""
    tb = await ChainTestbench(dut).start()
    tb.traffic(gaps=0.1, backpressure=0.5)
    packed, x, ref = make_problem(tb.rng, 7, 64, NMPattern(2, 4), 0, "per-row")
    await tb.request("per_row_patterns", packed, x, ref, "mv")


@cocotb.test()
async def reset_mid_request(dut):
    """Reset with beats in flight and results waiting; the next request comes out right."""
    tb = await ChainTestbench(dut).start()
    pattern = NMPattern(2, 8)
    packed, x, ref = make_problem(tb.rng, 6, 64, pattern, 0)
    streams = chain_streams(tb.params, packed, x, "mv")
    await tb.configure(streams)
    tb.sink("o").set_pause_generator(itertools.repeat(True))  # never ready
    tb.source("i").send_all(tb.payloads(streams))
    await ClockCycles(tb.clock, tb.params.stages + 12)
    await tb.reset()
    tb.traffic()
    packed, x, ref = make_problem(tb.rng, 6, 40, NMPattern(1, 4), 2)
    await tb.request("reset_mid_request", packed, x, ref, "mm")


@cocotb.test()
async def line_rate(dut):
    """Back to back, no backpressure: one beat per cycle, both lanes of every DSP busy."""
    tb = await ChainTestbench(dut).start()
    p = tb.params
    pattern = NMPattern(2, 4)
    packed, x, ref = make_problem(tb.rng, 16 * p.stages // max(p.segment_choices), 512, pattern, 0)
    figures = await tb.request("line_rate", packed, x, ref, "mv", max(p.segment_choices))
    useful = packed.nonzeros
    bound = figures["beats"] + p.stages + 4 + figures["results"] + 4
    assert figures["cycles"] <= bound, f"{figures} exceeds {bound} cycles"
    tb.record(
        "line_rate",
        **figures,
        dsp_utilization=round(useful / (p.stages * 2 * figures["cycles"]), 4),
    )
