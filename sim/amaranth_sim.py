"""Amaranth-simulator helpers for fast unit tests of small stream blocks.

These run in-process with Amaranth's Python simulator: no Verilog, no compiler, so they suit
unit tests of helpers and corner cases. Full regressions of generated Verilog go through
:mod:`tandem.sim.runner` (cocotb on Verilator or Icarus).
"""

import random
from collections.abc import Iterable, Sequence
from typing import Any

from amaranth.sim import Simulator

__all__ = ["run_scenario", "stream_get", "stream_put"]


async def stream_put(ctx, port, payload) -> None:
    """Offer ``payload`` on the stream ``port`` (a consumer's ``i``) until it is taken."""
    ctx.set(port.valid, 1)
    ctx.set(port.payload, payload)
    await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


async def stream_get(ctx, port):
    """Take one payload from the stream ``port`` (a producer's ``o``)."""
    ctx.set(port.ready, 1)
    (payload,) = await ctx.tick().sample(port.payload).until(port.valid)
    ctx.set(port.ready, 0)
    return payload


def run_scenario(
    dut,
    inputs: Iterable[Any],
    n_outputs: int,
    *,
    i: str = "i",
    o: str = "o",
    valid_gaps: float = 0.0,
    backpressure: float = 0.0,
    seed: int = 0,
    vcd: str | None = None,
    max_cycles: int | None = None,
) -> tuple[list[Any], int]:
    """Stream ``inputs`` into ``dut.<i>`` and collect ``n_outputs`` payloads from ``dut.<o>``.

    Parameters
    ----------
    dut
        A ``wiring.Component`` with stream ports named ``i`` and ``o`` (or as given).
    inputs
        Payloads to send, in order.
    n_outputs
        How many payloads to collect before stopping.
    valid_gaps, backpressure
        Probability, each cycle, that the producer idles or the consumer refuses a transfer.
    seed
        Seed of the gap and backpressure pattern.
    vcd
        Write a waveform to this path.
    max_cycles
        Fail instead of running forever if the outputs do not arrive (default: a generous bound
        from the number of transfers).

    Returns
    -------
    outputs, cycles
        The collected payloads and the number of clock cycles from first input to last output.
    """
    inputs = list(inputs)
    in_port, out_port = getattr(dut, i), getattr(dut, o)
    producer_rng, consumer_rng = random.Random(seed), random.Random(seed + 1)
    outputs: list[Any] = []
    limit = max_cycles or 64 + 20 * (len(inputs) + n_outputs)
    cycles = 0

    async def producer(ctx):
        for payload in inputs:
            while producer_rng.random() < valid_gaps:
                await ctx.tick()
            await stream_put(ctx, in_port, payload)

    async def consumer(ctx):
        nonlocal cycles
        while len(outputs) < n_outputs:
            if consumer_rng.random() < backpressure:
                ctx.set(out_port.ready, 0)
                await ctx.tick()
                cycles += 1
                continue
            ctx.set(out_port.ready, 1)
            _, _, payload, valid = await ctx.tick().sample(out_port.payload, out_port.valid)
            cycles += 1
            if valid:
                outputs.append(payload)
            if cycles > limit:
                raise TimeoutError(
                    f"only {len(outputs)} of {n_outputs} outputs after {cycles} cycles"
                )
        ctx.set(out_port.ready, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer, background=True)
    sim.add_testbench(consumer)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    return outputs, cycles


def as_ints(values: Sequence[Any]) -> list[int]:
    """Payloads from :func:`run_scenario` as plain integers (for scalar payload shapes)."""
    return [int(v) for v in values]
