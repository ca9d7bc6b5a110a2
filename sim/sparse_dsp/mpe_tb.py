"""cocotb regression of ``sparse-mpe`` against :func:`tandem.host.sparse_dsp.mpe_golden`.

Every result is compared bit for bit with the golden model, and the unpacked results with
``W @ x`` computed in int64 from the dense matrix. With the plusarg
``+tandem_sparse_dsp_bench=FILE`` (an ``.npz`` of problems, see
``benchmarks/sparse_dsp_performance.py``) a ``benchmark`` test runs those problems back to back
without backpressure and records cycles per problem.
"""

import itertools
import json
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, with_timeout
from tandem.host.sparse_dsp import mpe_golden
from tandem.mappings.nm import NMPattern, mpe_streams, pack_nm
from tandem.sim.scoreboard import Scoreboard
from tandem.sim.stream import random_pause
from tandem.sim.tb import CLOCK_PERIOD_NS, StreamTestbench, evaluate_combinational, timed_golden

from .common import all_patterns, make_problem

BENCH_PLUSARG = "tandem_sparse_dsp_bench"


class MpeTestbench(StreamTestbench):
    """Sends requests (configuration, activations, weights) and checks the results."""

    async def start(self):
        evaluate_combinational(self.dut)
        for name in ("cfg_i", "act_i", "w_i"):
            self.source(name)
        self.sink("o")
        await self.reset()
        return self

    def traffic(self, gaps: float = 0.0, backpressure: float = 0.0) -> None:
        for name in ("act_i", "w_i"):
            self.source(name).set_pause_generator(random_pause(self.rng, gaps) if gaps else None)
        self.sink("o").set_pause_generator(
            random_pause(self.rng, backpressure) if backpressure else None
        )

    async def load(self, streams) -> None:
        """Send the configuration word and the activations; return once all are taken."""
        self.source("cfg_i").send(streams.config_word)
        act = self.source("act_i")
        act.send_all(streams.act_payload(t) for t in range(len(streams.act_beats)))
        await with_timeout(act.wait(), (100 * len(streams.act_beats) + 1000) * 10, "ns")

    async def request(self, name: str, packed, x, reference, mode: str, seg=None) -> dict:
        """Run one product through the engine; return its figures."""
        p = self.params
        streams = mpe_streams(p, packed, x, mode, seg=seg)
        expected = timed_golden(mpe_golden)(p, streams.cfg, streams.act_beats, streams.w_beats)
        await self.load(streams)
        start = self.now_cycles()
        payloads = [streams.weight_payload(t) for t in range(len(streams.w_beats))]
        self.source("w_i").send_all(payloads)
        limit = 50 * (len(payloads) * streams.cfg["pairs"] + len(expected)) + 2000
        actual = await with_timeout(
            self.sink("o").recv_n(len(expected)), limit * CLOCK_PERIOD_NS, "ns"
        )
        cycles = self.now_cycles() - start
        label = f"{name} {packed.pattern} {mode} seg {streams.layout.seg}"
        Scoreboard(label, expected).check(actual)
        y = streams.unpack(actual)
        assert np.array_equal(y, reference), f"{label}: unpacked results differ from W @ x"
        macs_per_cycle = p.chains * p.stages * 2
        return {
            "pattern": str(packed.pattern),
            "mode": mode,
            "segment": streams.layout.seg,
            "beats": len(payloads),
            "steps": len(payloads) * streams.cfg["pairs"],
            "results": len(expected),
            "cycles": cycles,
            "useful_macs": streams.useful_macs,
            "dense_macs": streams.dense_macs,
            "dsp_utilization": round(streams.useful_macs / (macs_per_cycle * cycles), 4),
            "dense_equivalent_macs_per_cycle": round(streams.dense_macs / cycles, 3),
        }


def _batch(tb, mode: str) -> int:
    return 0 if mode == "mv" else int(tb.rng.integers(1, tb.params.max_batch + 1))


@cocotb.test()
async def every_pattern(dut):
    """Each N:M pattern up to max_m in both modes, patterns changing between requests."""
    tb = await MpeTestbench(dut).start()
    tb.traffic(gaps=0.2, backpressure=0.3)
    p = tb.params
    for k, pattern in enumerate(all_patterns(p.max_m)):
        mode = ("mv", "mm")[k % 2]
        cols = int(tb.rng.integers(pattern.m, p.max_k // 2 + 1))
        rows = int(tb.rng.integers(3, 12))
        packed, x, ref = make_problem(tb.rng, rows, cols, pattern, _batch(tb, mode))
        await tb.request("every_pattern", packed, x, ref, mode)


@cocotb.test()
async def extreme_values(dut):
    """-128 everywhere over the full buffer length: longest cascades, carries and sums."""
    tb = await MpeTestbench(dut).start()
    p = tb.params
    for pattern in (NMPattern(p.max_m, p.max_m), NMPattern(1, 2), NMPattern(4, 8)):
        for mode in ("mv", "mm"):
            batch = p.max_batch if mode == "mm" else 0
            packed, x, ref = make_problem(tb.rng, 4, p.max_k, pattern, batch, "extreme")
            await tb.request("extreme_values", packed, x, ref, mode, max(p.segment_choices))


@cocotb.test()
async def segments_and_row_pairs(dut):
    """Every cascade segment; rows with their own patterns (matrix-vector rows run alone)."""
    tb = await MpeTestbench(dut).start()
    tb.traffic(gaps=0.1, backpressure=0.5)
    p = tb.params
    for seg in p.segment_choices:
        for kind, mode in (("random", "mv"), ("per-row", "mv"), ("per-row", "mm")):
            packed, x, ref = make_problem(tb.rng, 9, 100, NMPattern(2, 4), _batch(tb, mode), kind)
            await tb.request("segments_and_row_pairs", packed, x, ref, mode, seg)


@cocotb.test()
async def reset_mid_request(dut):
    """Reset while weights stream and results wait; then reset during the activation load."""
    tb = await MpeTestbench(dut).start()
    p = tb.params
    packed, x, ref = make_problem(tb.rng, 8, 96, NMPattern(2, 8), 0)
    streams = mpe_streams(p, packed, x, "mv")
    await tb.load(streams)
    tb.sink("o").set_pause_generator(itertools.repeat(True))  # never ready
    tb.source("w_i").send_all(streams.weight_payload(t) for t in range(len(streams.w_beats)))
    await ClockCycles(tb.clock, p.stages + 20)
    await tb.reset()
    tb.traffic()
    packed, x, ref = make_problem(tb.rng, 6, 80, NMPattern(1, 4), p.max_batch)
    await tb.request("reset_mid_request", packed, x, ref, "mm")
    # Reset with only part of the activations loaded.
    tb.source("cfg_i").send(streams.config_word)
    tb.source("act_i").send(streams.act_payload(0))
    await ClockCycles(tb.clock, 6)
    await tb.reset()
    packed, x, ref = make_problem(tb.rng, 5, 70, NMPattern(4, 16), 0)
    await tb.request("reset_mid_request", packed, x, ref, "mv")


@cocotb.test()
async def line_rate(dut):
    """A GEMV back to back without backpressure: every DSP busy on both lanes."""
    tb = await MpeTestbench(dut).start()
    p = tb.params
    rows = 16 * p.chains * p.stages // max(p.segment_choices)
    packed, x, ref = make_problem(tb.rng, rows, p.max_k, NMPattern(2, 4), 0)
    figures = await tb.request("line_rate", packed, x, ref, "mv")
    # Pipeline fill, plus the last pass's results leaving one per cycle.
    drain = 2 * p.chains * p.stages // figures["segment"]
    bound = figures["beats"] + tb.manifest["latency"] + drain + 4
    assert figures["cycles"] <= bound, f"{figures} exceeds {bound} cycles"
    tb.record("line_rate", **figures)


if BENCH_PLUSARG in cocotb.plusargs:

    @cocotb.test()
    async def benchmark(dut):
        """Problems from the benchmark file, one after another, no gaps or backpressure."""
        path = Path(str(cocotb.plusargs[BENCH_PLUSARG]))
        tb = await MpeTestbench(dut).start()
        rows = []
        with np.load(path, allow_pickle=False) as data:
            count = int(data["count"])
            problems = [
                {k: data[f"{i}_{k}"] for k in ("w", "x", "n", "m", "mode")} for i in range(count)
            ]
        for i, prob in enumerate(problems):
            pattern = NMPattern(int(prob["n"]), int(prob["m"]))
            w = prob["w"].astype(np.int8)
            packed = pack_nm(w, pattern)
            x = prob["x"].astype(np.int64)
            ref = w.astype(np.int64) @ x
            figures = await tb.request("benchmark", packed, x, ref, str(prob["mode"]))
            figures["problem"] = i
            rows.append(figures)
            cocotb.log.info("benchmark %s", json.dumps(figures))
        tb.record("benchmark", problems=rows)
