"""cocotb regression of ``rnn`` against :func:`tandem.host.rnn.rnn_golden`.

The LSTM (or GRU, ``cell = gru``) is X = ``max_input``, H = ``max_hidden`` of the generated
engine (unless the plusargs below ask for less), with random weights (uniform in
+-2/sqrt(H), so gates saturate now and then). Every test checks h and c of every step of
every batch element bit for bit; the tests without backpressure also check that the
sequence takes exactly the cycles :mod:`tandem.mappings.rnn.schedule` predicts.

Plusargs (all optional): ``+rnn_input=X``, ``+rnn_hidden=H`` run a smaller LSTM than the
engine holds (default: max_input, max_hidden); ``+rnn_long=N`` length of the long sequence
(default 100);
``+rnn_bench_steps=N`` steps of the ``utilization`` test (default 4), which runs the overlapped
and the naive program back to back and records cycles, MAC utilization and the prediction.
"""

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from tandem.host.rnn import (
    cmd_payload,
    decode_outputs,
    pack_tiles,
    quantize_lstm,
    rnn_golden,
    saturation_flags,
    tile_beats,
    weight_beats,
    x_beats,
)
from tandem.mappings.rnn.schedule import predict, sequence_cycles
from tandem.mappings.rnn.tiling import build_program
from tandem.sim.scoreboard import Scoreboard
from tandem.sim.stream import random_pause
from tandem.sim.tb import CLOCK_PERIOD_NS, StreamTestbench, timed_golden


def _plusarg(name: str, default: int) -> int:
    value = cocotb.plusargs.get(name)
    return int(value) if value not in (None, "") else default


class RnnBench:
    """The engine, one random LSTM that fits it, and helpers to load programs and run."""

    def __init__(self, dut):
        self.tb = StreamTestbench(dut)
        self.dut = dut
        p = self.params = self.tb.params
        self.x_size = _plusarg("rnn_input", p.max_input)
        self.h_size = _plusarg("rnn_hidden", p.max_hidden)
        rng = self.tb.rng
        bound = 2.0 / np.sqrt(self.h_size)
        rows = (3 if p.cell == "gru" else 4) * self.h_size
        state = {
            "weight_ih_l0": rng.uniform(-bound, bound, (rows, self.x_size)),
            "weight_hh_l0": rng.uniform(-bound, bound, (rows, self.h_size)),
            "bias_ih_l0": rng.uniform(-bound, bound, rows),
            "bias_hh_l0": rng.uniform(-bound, bound, rows),
        }
        self.state = state
        self.model = quantize_lstm(p, state)
        self.program = None
        self.flags = None  # sticky saturation flags of the last run
        self.streamed = p.weight_source == "stream"
        self.weight_words: list[int] = []
        dut.cmd_i__valid.value = 0
        if self.streamed:
            dut.w_i__valid.value = 0

    def saturate_last_unit(self) -> None:
        """Biases that make the last unit saturate: an LSTM's i, f and g near +1, so its c
        grows by about one a step until it leaves the cell state's range; a GRU's n_h just
        below the activation range, so random x pushes it over now and then."""
        p, h, u = self.params, self.h_size, self.h_size - 1
        state = {k: v.copy() for k, v in self.state.items()}
        if p.cell == "gru":
            state["bias_hh_l0"][2 * h + u] = 15.5
        else:
            state["bias_ih_l0"][[u, h + u, 2 * h + u]] = 6.0
        self.model = quantize_lstm(p, state)

    def random_x(self, steps: int) -> np.ndarray:
        scale = 1 << self.params.state_frac
        x = self.tb.rng.normal(0.0, 1.5, (steps, self.params.batch, self.x_size))
        return np.clip(np.rint(x * scale), -32768, 32767).astype(np.int64)

    async def load(self, naive: bool = False) -> None:
        """Stream the tile program (weights, biases, entries) into the engine."""
        p = self.params
        self.program = build_program(
            self.x_size, self.h_size, p.tile_rows, p.tile_cols, naive=naive, cell=p.cell
        )
        tiles, biases = pack_tiles(p, self.model, self.program)
        self.weight_words = weight_beats(p, tiles) if self.streamed else []
        source = self.tb.source("tile_i").start()
        source.send_all(tile_beats(p, self.program, tiles, biases))
        await source.wait()
        await RisingEdge(self.tb.clock)
        source.stop()  # no coroutine per cycle while sequences run

    async def send_cmd(self, steps: int) -> int:
        """Offer the command until taken; returns the cycle of the transfer."""
        dut = self.dut
        dut.cmd_i__payload.value = cmd_payload(self.params, self.program, steps, self.model.w_frac)
        dut.cmd_i__valid.value = 1
        while True:
            await RisingEdge(self.tb.clock)
            if dut.cmd_i__ready.value == 1:
                break
        dut.cmd_i__valid.value = 0
        return self.tb.now_cycles()

    async def run(self, x, *, x_gaps: float = 0.0, backpressure: float = 0.0):
        """Run one sequence; returns (h, c, cycles from command to last output)."""
        p, tb = self.params, self.tb
        steps = x.shape[0]
        source, sink = tb.source("x_i"), tb.sink("o")
        source.set_pause_generator(random_pause(tb.rng, x_gaps) if x_gaps else None)
        sink.set_pause_generator(random_pause(tb.rng, backpressure) if backpressure else None)
        source.send_all(x_beats(p, self.program, x))
        if self.streamed:
            w_source = tb.source("w_i").start()
            w_source.set_pause_generator(random_pause(tb.rng, x_gaps) if x_gaps else None)
            w_source.send_all(self.weight_words * steps)
        start = await self.send_cmd(steps)
        expected = steps * self.program.row_blocks * p.batch
        bound = sequence_cycles(self.program, p.batch, steps)[0]
        limit = int(bound / (1.0 - backpressure) / (1.0 - x_gaps)) * 3 + 2000
        beats = await with_timeout(sink.recv_n(expected), limit * CLOCK_PERIOD_NS, "ns")
        cycles = tb.now_cycles() - start + 1  # both transfer cycles counted
        h, c, sat = decode_outputs(p, self.program, beats, steps)
        self.flags = sat
        return h, c, cycles

    async def run_fast(self, x):
        """Run one sequence with the output always ready, waking Python only while x is
        taken or a result is valid (so long sequences simulate at the simulator's speed)."""
        p, tb, dut = self.params, self.tb, self.dut
        steps = x.shape[0]
        beats = x_beats(p, self.program, x)
        expected = steps * self.program.row_blocks * p.batch
        outputs: list[int] = []
        last = [0]

        async def feed():
            index = 0
            while index < len(beats):
                dut.x_i__payload.value = beats[index]
                dut.x_i__valid.value = 1
                await RisingEdge(tb.clock)
                if dut.x_i__ready.value == 1:
                    index += 1
                elif dut.x_i__ready.value == 0:
                    await RisingEdge(dut.x_i__ready)
            dut.x_i__valid.value = 0

        async def collect():
            dut.o__ready.value = 1
            while len(outputs) < expected:
                if dut.o__valid.value != 1:
                    await RisingEdge(dut.o__valid)
                await RisingEdge(tb.clock)
                if dut.o__valid.value == 1:
                    outputs.append(int(dut.o__payload.value.to_unsigned()))
                    last[0] = tb.now_cycles()

        async def feed_weights():
            for _ in range(steps):
                for word in self.weight_words:
                    dut.w_i__payload.value = word
                    dut.w_i__valid.value = 1
                    while True:
                        await RisingEdge(tb.clock)
                        if dut.w_i__ready.value == 1:
                            break
                        await RisingEdge(dut.w_i__ready)
            dut.w_i__valid.value = 0

        feeder = cocotb.start_soon(feed())
        weights = cocotb.start_soon(feed_weights()) if self.streamed else None
        collector = cocotb.start_soon(collect())
        start = await self.send_cmd(steps)
        bound = sequence_cycles(self.program, p.batch, steps)[0] * 2 + 2000
        await with_timeout(collector, bound * CLOCK_PERIOD_NS, "ns")
        feeder.cancel()
        if weights is not None:
            weights.cancel()
        dut.o__ready.value = 0
        h, c, sat = decode_outputs(p, self.program, outputs, steps)
        self.flags = sat
        return h, c, last[0] - start + 1

    def check(self, name: str, x, h, c) -> int:
        """h, c and the sticky flags of the last run against the golden model; returns the
        golden's count of saturated values."""
        hg, cg, sat = timed_golden(rnn_golden)(self.params, (self.model, x), saturations=True)
        Scoreboard(f"rnn.{name}.h", hg.reshape(-1), x.reshape(-1)).check(h.reshape(-1).tolist())
        Scoreboard(f"rnn.{name}.c", cg.reshape(-1), x.reshape(-1)).check(c.reshape(-1).tolist())
        flags = saturation_flags(self.params, self.program, sat)
        Scoreboard(f"rnn.{name}.sat", flags.reshape(-1).astype(int), None).check(
            self.flags.reshape(-1).astype(int).tolist()
        )
        return int(sum(int(v.sum()) for v in sat.values()))

    def expect_cycles(self, steps: int, cycles: int) -> int:
        predicted = sequence_cycles(self.program, self.params.batch, steps)[0]
        assert cycles == predicted, f"{steps} steps took {cycles} cycles; predicted {predicted}"
        return predicted


@cocotb.test()
async def lengths_1_and_long(dut):
    """A one-step sequence, then a long one (default 100 steps): bit-exact, cycle-exact."""
    bench = RnnBench(dut)
    await bench.tb.reset()
    await bench.load()
    long = _plusarg("rnn_long", 100)
    figures = {}
    for steps in (1, long):
        x = bench.random_x(steps)
        h, c, cycles = await bench.run(x)
        bench.check(f"len{steps}", x, h, c)
        bench.expect_cycles(steps, cycles)
        figures[f"cycles_len{steps}"] = cycles
    pred = predict(bench.program, bench.params.batch, long)
    figures["mac_utilization"] = round(pred.utilization, 4)
    bench.tb.record("lengths_1_and_long", **figures)


@cocotb.test()
async def random_backpressure_and_x_gaps(dut):
    """Random gaps on x and random backpressure on the output; results still bit-exact."""
    bench = RnnBench(dut)
    await bench.tb.reset()
    await bench.load()
    for steps in (5, 2):
        x = bench.random_x(steps)
        h, c, cycles = await bench.run(x, x_gaps=0.3, backpressure=0.4)
        bench.check(f"backpressure_len{steps}", x, h, c)
    bench.tb.record("random_backpressure_and_x_gaps", cycles=cycles)


@cocotb.test()
async def reset_between_and_mid_sequence(dut):
    """Reset in the middle of a sequence and between sequences: the next sequence starts clean
    (h = c = 0); the program and weights survive reset."""
    bench = RnnBench(dut)
    tb = bench.tb
    await tb.reset()
    await bench.load()
    x = bench.random_x(6)
    tb.source("x_i").send_all(x_beats(bench.params, bench.program, x))
    if bench.streamed:
        tb.source("w_i").start().send_all(bench.weight_words * 6)
    await bench.send_cmd(6)
    await ClockCycles(tb.clock, 3 * bench.program.entries * bench.params.batch // 2 + 7)
    await tb.reset()
    for steps in (3, 4):
        x = bench.random_x(steps)
        h, c, cycles = await bench.run(x)
        bench.check(f"after_reset_len{steps}", x, h, c)
        bench.expect_cycles(steps, cycles)
        await tb.reset()


@cocotb.test()
async def saturation_flag(dut):
    """A unit driven to saturate (``saturate_last_unit``): the sticky flag of every output
    equals the golden model's (raised from the first beat whose results saturated, cleared by
    the next command); when the cell state's range is narrower than the sequence (or a GRU),
    something must saturate, so the check cannot pass on zeros alone."""
    bench = RnnBench(dut)
    p = bench.params
    await bench.tb.reset()
    bench.saturate_last_unit()
    await bench.load()
    steps = _plusarg("rnn_long", 100)
    counts, raised = [], []
    for length in (steps, 3):  # the second command starts with the flag low again
        x = bench.random_x(length)
        h, c, _ = await bench.run(x)
        counts.append(bench.check(f"saturation_len{length}", x, h, c))
        raised.append(bool(bench.flags.any()))
    cell_range = 2 ** (p.cell_bits - 1 - p.cell_frac)
    if p.cell == "gru" or cell_range < steps // 2:
        assert counts[0] > 0, f"nothing saturated in {steps} steps; the test checks only zeros"
    bench.tb.record("saturation_flag", saturated=counts[0], raised=raised[0])


@cocotb.test()
async def utilization(dut):
    """Overlapped and naive programs back to back on the same engine: cycles, MAC
    utilization, the scheduler's prediction and the speed-up (``+rnn_bench_steps``)."""
    bench = RnnBench(dut)
    await bench.tb.reset()
    steps = _plusarg("rnn_bench_steps", 4)
    x = bench.random_x(steps)
    figures = {"steps": steps}
    for label, naive in (("overlapped", False), ("naive", True)):
        await bench.load(naive=naive)
        h, c, cycles = await bench.run_fast(x)
        bench.check(label, x, h, c)
        pred = predict(bench.program, bench.params.batch, steps)
        useful = bench.program.useful_macs * bench.params.batch * steps
        figures[f"{label}_cycles"] = cycles
        figures[f"{label}_predicted_cycles"] = pred.cycles
        figures[f"{label}_utilization"] = round(useful / (bench.program.array_macs * cycles), 6)
        figures[f"{label}_predicted_utilization"] = round(pred.utilization, 6)
        bench.expect_cycles(steps, cycles)
    figures["speedup"] = round(figures["naive_cycles"] / figures["overlapped_cycles"], 4)
    bench.tb.record("utilization", **figures)
