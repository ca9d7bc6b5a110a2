"""Run the ``rnn`` gateware in Amaranth's simulator: load a program, run sequences, collect h, c.

A fast check of the engine without Verilog or cocotb, used by the unit tests. One testbench
coroutine plays every peer each cycle: the tile loader, the command source, the x source
(optionally with random gaps) and the output sink (optionally with random backpressure).
"""

from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator
from tandem.host.rnn import (
    QuantLstm,
    RnnParams,
    cmd_payload,
    decode_outputs,
    pack_tiles,
    tile_beats,
    weight_beats,
    x_beats,
)
from tandem.hw.rnn.engine import Rnn
from tandem.mappings.rnn.tiling import TileProgram

__all__ = ["SequenceRun", "run_sequences"]


@dataclass
class SequenceRun:
    """Per sequence: h and c ``(T, B, H)``, the sticky saturation flags ``(T, row_blocks, B)``
    and the cycles from command to last output."""

    h: list[np.ndarray] = field(default_factory=list)
    c: list[np.ndarray] = field(default_factory=list)
    sat: list[np.ndarray] = field(default_factory=list)
    cycles: list[int] = field(default_factory=list)


def run_sequences(
    params: RnnParams,
    model: QuantLstm,
    program: TileProgram,
    xs: list[np.ndarray],
    *,
    x_gaps: float = 0.0,
    backpressure: float = 0.0,
    reset_between: bool = False,
    seed: int = 0,
    max_cycles: int = 2_000_000,
) -> SequenceRun:
    """Load ``program`` with ``model``'s weights, then run every ``x`` of ``xs`` (``(T, B, X)``
    int16 arrays) as one sequence each; optionally pulse ``rst`` between sequences."""
    dut = Rnn(params)
    tiles, biases = pack_tiles(params, model, program)
    tile_words = tile_beats(params, program, tiles, biases)
    rng = np.random.default_rng(seed)
    result = SequenceRun()

    async def bench(ctx):
        cycle = 0

        async def tick():
            nonlocal cycle
            await ctx.tick()
            cycle += 1
            if cycle > max_cycles:
                raise TimeoutError(f"rnn did not finish in {max_cycles} cycles")

        # Load the program.
        for word in tile_words:
            ctx.set(dut.tile_i.valid, 1)
            ctx.set(dut.tile_i.payload.as_value(), word)
            while not ctx.get(dut.tile_i.ready):
                await tick()
            await tick()
        ctx.set(dut.tile_i.valid, 0)
        for index, x in enumerate(xs):
            if reset_between and index:
                ctx.set(domain.rst, 1)
                await tick()
                ctx.set(domain.rst, 0)
            steps = x.shape[0]
            xw = list(x_beats(params, program, x))
            stream_w = params.weight_source == "stream"
            ww = weight_beats(params, tiles) * steps if stream_w else []
            w_index = 0
            expected = steps * program.row_blocks * params.batch
            outputs = []
            ctx.set(dut.cmd_i.valid, 1)
            ctx.set(dut.cmd_i.payload.as_value(), cmd_payload(params, program, steps, model.w_frac))
            start = None
            x_valid = False
            while len(outputs) < expected:
                if not x_valid and xw and rng.random() >= x_gaps:
                    x_valid = True
                ctx.set(dut.x_i.valid, int(x_valid))
                if x_valid:
                    ctx.set(dut.x_i.payload, xw[0])
                sink_ready = rng.random() >= backpressure
                ctx.set(dut.o.ready, int(sink_ready))
                if stream_w:
                    w_valid = w_index < len(ww)
                    ctx.set(dut.w_i.valid, int(w_valid))
                    if w_valid:
                        ctx.set(dut.w_i.payload, ww[w_index])
                    w_fire = w_valid and ctx.get(dut.w_i.ready)
                cmd_fire = start is None and ctx.get(dut.cmd_i.ready)
                x_fire = x_valid and ctx.get(dut.x_i.ready)
                out_fire = sink_ready and ctx.get(dut.o.valid)
                if out_fire:
                    outputs.append(ctx.get(dut.o.payload.as_value()))
                if cmd_fire:
                    start = cycle
                await tick()
                if cmd_fire:
                    ctx.set(dut.cmd_i.valid, 0)
                if x_fire:
                    xw.pop(0)
                    x_valid = False
                if stream_w and w_fire:
                    w_index += 1
            ctx.set(dut.o.ready, 0)
            ctx.set(dut.x_i.valid, 0)
            if stream_w:
                ctx.set(dut.w_i.valid, 0)
                assert w_index == len(ww), f"engine took {w_index} of {len(ww)} weight tiles"
            h, c, sat = decode_outputs(params, program, outputs, steps)
            result.h.append(h)
            result.c.append(c)
            result.sat.append(sat)
            result.cycles.append(cycle - start)
            # Wait until the engine takes commands again.
            while not ctx.get(dut.cmd_i.ready):
                await tick()

    top = Module()
    top.domains.sync = domain = ClockDomain()
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return result
