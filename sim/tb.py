"""Testbench base for cocotb modules: clock, reset, design context, figures, stream checks.

The runner passes the manifest of the generated Verilog as ``+tandem_manifest=PATH``; the
testbench rebuilds the design's parameter set from it, so the stimulus, the golden model and
the RTL all read the same parameters. Figures a test measures (cycles, transfers per cycle) go
to ``+tandem_results=PATH`` as JSON keyed by test name.
"""

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.handle import HierarchyObject
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout

import tandem.builtin_designs  # noqa: F401  (registers the designs now, not in the first test's time)
from tandem.registry import get_design

from .measure import CLOCK_PERIOD_NS, timed_golden
from .scoreboard import Scoreboard
from .stream import StreamSink, StreamSource, random_pause

__all__ = [
    "CLOCK_PERIOD_NS",
    "StreamTestbench",
    "evaluate_combinational",
    "run_line_rate_check",
    "run_reset_check",
    "run_stream_check",
    "timed_golden",
]


def evaluate_combinational(dut) -> None:
    """Make Icarus evaluate every ``always @*`` block of Yosys-written Verilog once.

    Yosys adds a never-changing register (``...dump_module$1``) to every ``always @*`` block so
    that simulators run the block at time zero; Icarus applies the register's initial value
    without an event, so a block whose inputs never change after reset (a ``ready`` that only
    depends on registers at their initial value, the HPU's ``w_axi__awvalid`` while no request
    appends) stays X for ever and a handshake on it fails. Writing the register once, in the
    top and every submodule (each has its own blocks), wakes every such block. Verilator
    evaluates everything at start-up anyway, so this does nothing there.
    """
    if "icarus" not in cocotb.SIM_NAME.lower():
        return
    for handle in dut:
        if "dump_module" in handle._name:
            handle.value = 1
        elif isinstance(handle, HierarchyObject):
            evaluate_combinational(handle)


class StreamTestbench:
    """Owns the clock, reset, the design's parameters and its stream ports.

    Attributes
    ----------
    design, params, manifest
        The registered design, its parameter set and the generated Verilog's manifest.
    rng
        numpy Generator seeded with cocotb's random seed (printed by cocotb at start-up).
    """

    def __init__(self, dut):
        self.dut = dut
        manifest_path = cocotb.plusargs.get("tandem_manifest")
        if not manifest_path:
            raise RuntimeError("run this testbench through tandem.sim.runner (no manifest given)")
        self.manifest: dict[str, Any] = json.loads(Path(str(manifest_path)).read_text())
        design = get_design(self.manifest["design"])
        # Time the golden model on the work this regression gives the RTL (see measure.py).
        self.design = dataclasses.replace(design, golden=timed_golden(design.golden))
        self.params = self.design.params(**self.manifest["params"])
        self.seed = int(cocotb.RANDOM_SEED)
        self.rng = np.random.default_rng(self.seed)
        self.clock = dut.clk
        self.reset_signal = dut.rst
        cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
        self._sources: dict[str, StreamSource] = {}
        self._sinks: dict[str, StreamSink] = {}

    def source(self, name: str = "i") -> StreamSource:
        """Driver of input stream ``name`` (created once)."""
        if name not in self._sources:
            self._sources[name] = StreamSource(self.dut, name, self.clock, self.reset_signal)
        return self._sources[name]

    def sink(self, name: str = "o") -> StreamSink:
        """Monitor of output stream ``name``; signedness comes from the manifest."""
        if name not in self._sinks:
            signed = bool(self.manifest["streams"][name]["payload_signed"])
            self._sinks[name] = StreamSink(
                self.dut, name, self.clock, self.reset_signal, signed=signed
            )
        return self._sinks[name]

    async def reset(self, cycles: int = 2) -> None:
        """Hold reset for ``cycles`` clock cycles; queued stimulus is dropped."""
        for source in self._sources.values():
            source.clear()
        self.reset_signal.value = 1
        await ClockCycles(self.clock, cycles)
        self.reset_signal.value = 0
        for sink in self._sinks.values():
            sink.queue.clear()
        await RisingEdge(self.clock)

    def now_cycles(self) -> int:
        """Simulated clock cycles since time zero."""
        return int(cocotb.utils.get_sim_time("ns") // CLOCK_PERIOD_NS)

    def record(self, test_name: str, **figures: Any) -> None:
        """Store figures for ``test_name`` in the results file the runner reads back."""
        path = cocotb.plusargs.get("tandem_results")
        if not path:
            return
        path = Path(str(path))
        data = json.loads(path.read_text()) if path.exists() else {}
        data.setdefault(test_name, {}).update(figures)
        path.write_text(json.dumps(data, indent=2) + "\n")


async def run_stream_check(
    tb: StreamTestbench,
    test_name: str,
    inputs,
    expected,
    *,
    valid_gaps: float = 0.0,
    backpressure: float = 0.0,
) -> dict[str, Any]:
    """Stream ``inputs`` through the design and compare every output with ``expected``.

    One output is expected per element of ``expected``. Records and returns ``cycles`` (first
    input offered to last output taken), ``transfers`` and ``throughput`` (outputs per cycle).
    """
    source, sink = tb.source("i"), tb.sink("o")
    source.set_pause_generator(random_pause(tb.rng, valid_gaps) if valid_gaps else None)
    sink.set_pause_generator(random_pause(tb.rng, backpressure) if backpressure else None)
    start = tb.now_cycles()
    source.send_all(int(v) for v in inputs)
    # Generous bound: every transfer stalled by gaps and backpressure, plus pipeline latency.
    limit = (len(expected) + len(inputs)) * 40 + 1000
    actual = await with_timeout(sink.recv_n(len(expected)), limit * CLOCK_PERIOD_NS, "ns")
    cycles = tb.now_cycles() - start
    Scoreboard(f"{tb.design.name}.{test_name}", expected, inputs).check(actual)
    figures = {
        "cycles": cycles,
        "transfers": len(expected),
        "throughput": round(len(expected) / max(cycles, 1), 4),
    }
    tb.record(test_name, **figures)
    return figures


async def run_reset_check(tb: StreamTestbench, test_name: str, fill, inputs) -> dict[str, Any]:
    """Fill the pipeline with ``fill`` against a stalled output, reset, then check ``inputs``.

    Anything the design kept from before the reset would come out first and fail the check.
    """
    source, sink = tb.source("i"), tb.sink("o")
    sink.set_pause_generator(itertools.repeat(True))
    source.send_all(int(v) for v in fill)
    await ClockCycles(tb.clock, 4 * (tb.manifest.get("latency") or 1) + 8)
    await tb.reset()
    return await run_stream_check(tb, test_name, inputs, tb.design.golden(tb.params, inputs))


async def run_line_rate_check(tb: StreamTestbench, test_name: str, inputs, expected):
    """Back-to-back stream check that also fails unless one result leaves per cycle.

    N results may take at most N + latency + 2 cycles (the 2 covers the handshake edges).
    """
    figures = await run_stream_check(tb, test_name, inputs, expected)
    bound = len(expected) + tb.manifest["latency"] + 2
    assert figures["cycles"] <= bound, (
        f"{len(expected)} results took {figures['cycles']} cycles; line rate allows {bound}"
    )
    return figures
