"""The :class:`Design` record, everything tandem knows about one design, and :func:`register`.

This module is the leaf of the registry: it imports nothing from :mod:`tandem.builtin_designs` (the
built-in designs, which import this module to register themselves) nor from any generator or
golden model, so it stays cheap to import. Lookups go through :mod:`tandem.registry`, which
loads the built-ins on first use.

Every per-design fact lives in the record: the CLI, the board defaults, the sweep, the
co-simulation launcher and the benchmark scripts read it here rather than keeping their own
tables keyed by design name.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from .boards import DEFAULT_BOARD
from .config import Params

__all__ = ["Design", "SweepBenchmark", "Tool", "register", "registered"]

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"


@dataclass(frozen=True)
class Tool:
    """A ``tandem map NAME`` or ``tandem pack NAME`` command of one or more designs.

    Designs that share a tool name the same record; the CLI adds each distinct tool once.

    Attributes
    ----------
    kind
        ``"map"`` (a workload onto the design: tile programs, schedules) or ``"pack"``
        (weights into the design's streams).
    name
        Subcommand name: ``tandem <kind> <name>``.
    module
        Dotted name of the module that implements it: ``add_arguments(parser)`` and
        ``run(args) -> int`` (exit status). Its import must stay light (heavy imports inside
        ``run``); a module that cannot be found is left out of the CLI.
    summary
        One line: the subcommand's help and description.
    """

    kind: Literal["map", "pack"]
    name: str
    module: str
    summary: str

    def __post_init__(self):
        if self.kind not in ("map", "pack"):
            raise ValueError(f"tool kind must be 'map' or 'pack', not {self.kind!r}")
        if not re.fullmatch(_DOTTED, self.module):
            raise ValueError(f"tool module must be a dotted module name, not {self.module!r}")


@dataclass(frozen=True)
class SweepBenchmark:
    """How ``tandem sweep`` measures one design's throughput.

    Attributes
    ----------
    testcase
        The cocotb test of the design's regression that runs (bit-exact against the golden
        model) and records the figures.
    unit
        Unit of the throughput (work per clock cycle).
    throughput
        ``throughput(params, figures) -> float`` from the test's recorded figures.
    """

    testcase: str
    unit: str
    throughput: Callable[[Any, dict], float]


@dataclass(frozen=True)
class Design:
    """One registered design and every fact tandem keeps about it.

    Attributes
    ----------
    name
        CLI name; the generated top module is this name with ``-`` turned into ``_``.
    summary
        One line for ``tandem designs``.
    params
        The design's :class:`~tandem.config.Params` subclass: its only parameter set.
    generator
        Callable building the top ``wiring.Component`` from a parameter set.
    golden
        The bit-exact golden model, ``golden(params, inputs) -> outputs``.
    testbench
        Dotted name of the cocotb module that verifies the generated Verilog.
    board
        Board (``constraints/boards`` file stem) the design is synthesized and swept for when
        none is named: the board its paper used, else :data:`tandem.boards.DEFAULT_BOARD`.
    docs
        Path of the design's documentation page, relative to the repository root (for example
        ``docs/hpu.md``); ``None`` where there is none.
    tools
        The ``tandem map`` / ``tandem pack`` commands that work for this design.
    cosim_server
        Dotted name of the cocotb module that serves the design to a host over a socket
        (:mod:`tandem.sim.cosim.launch` runs it); ``None`` for designs with no host device.
    device
        The host device class as ``"module:Class"``, the way a host program drives the design
        (golden or RTL backend); ``None`` for designs with none. Stored as text, so reading the
        registry never imports the host runtime.
    sweep
        The throughput benchmark ``tandem sweep`` runs at every point; ``None`` where the
        design has none (a sweep then needs synthesis).
    quick_test
        One representative test of the regression (it streams at the design's full rate) that
        quick benchmark runs (``benchmarks/sim_speed.py --quick``) run instead of the whole
        regression; ``None``: the whole regression is quick enough.
    quick_overrides
        Parameters quick benchmark runs change, so that they share one simulator build with
        another quick benchmark (for the HPU: ``hpu_stream_efficiency.py``'s configuration).
    expected_dsps
        ``expected_dsps(params) -> int``: the DSP48E2 count the parameters imply, where the
        design maps one multiplier per DSP (``benchmarks/resources.py`` checks yosys's
        mapping against it); ``None`` where that is not known.
    prove_depth, prove_mode
        What ``tandem prove D`` checks when not told: ``None`` for the defaults (depth 20,
        k-induction then BMC); a depth past the first output beat of the proof parameters and
        ``"bmc"`` where induction does not close (docs/formal.md).
    prove_margin
        Cycles past its first beat that ``tandem prove D`` checks each output channel to in
        BMC (at most the depth; ``None``: every output to the full depth).
    prove_params
        Parameters ``tandem prove D`` changes from the defaults when none are named: smaller
        widths and depths of the same gateware where a BMC of the defaults cannot reach an
        output beat (docs/formal.md says what they keep and what they leave out).
    """

    name: str
    summary: str
    params: type[Params]
    generator: Callable[[Params], Any]
    golden: Callable[..., Any]
    testbench: str
    board: str = DEFAULT_BOARD
    docs: str | None = None
    tools: tuple[Tool, ...] = ()
    cosim_server: str | None = None
    device: str | None = None
    sweep: SweepBenchmark | None = None
    quick_test: str | None = None
    quick_overrides: Mapping[str, Any] = field(default_factory=dict, hash=False)
    expected_dsps: Callable[[Any], int] | None = None
    prove_depth: int | None = None
    prove_mode: str | None = None
    prove_margin: int | None = None
    prove_params: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self):
        # A read-only copy: the record is frozen, and so is what it holds.
        object.__setattr__(self, "quick_overrides", MappingProxyType(dict(self.quick_overrides)))
        object.__setattr__(self, "prove_params", MappingProxyType(dict(self.prove_params)))
        unknown = set(self.prove_params) - set(self.params.__dataclass_fields__)
        if unknown:
            raise ValueError(f"{self.name}: prove_params name no parameter {sorted(unknown)}")
        object.__setattr__(self, "tools", tuple(self.tools))
        if self.device is not None and not re.fullmatch(f"{_DOTTED}:[A-Za-z_]\\w*", self.device):
            raise ValueError(f"device must be 'module:Class', not {self.device!r}")
        unknown = set(self.quick_overrides) - set(self.params.__dataclass_fields__)
        if unknown:
            raise ValueError(f"{self.name}: quick_overrides name no parameter {sorted(unknown)}")

    @property
    def top(self) -> str:
        """Verilog name of the top module."""
        return self.name.replace("-", "_")

    def describe(self) -> dict[str, Any]:
        """The design's facts as plain JSON values (``tandem designs --json``)."""
        return {
            "name": self.name,
            "summary": self.summary,
            "testbench": self.testbench,
            "board": self.board,
            "docs": self.docs,
            "tools": [
                {"kind": t.kind, "name": t.name, "module": t.module, "summary": t.summary}
                for t in self.tools
            ],
            "cosim_server": self.cosim_server,
            "device": self.device,
            "sweep": (
                None
                if self.sweep is None
                else {"testcase": self.sweep.testcase, "unit": self.sweep.unit}
            ),
            "quick_test": self.quick_test,
            "quick_overrides": dict(self.quick_overrides),
        }


_designs: dict[str, Design] = {}


def register(design: Design) -> Design:
    """Add ``design`` to the registry; names must be unique."""
    if design.name in _designs and _designs[design.name] != design:
        raise ValueError(f"design {design.name!r} is already registered")
    _designs[design.name] = design
    return design


def registered() -> dict[str, Design]:
    """The designs registered so far, by name (the built-ins only once they are loaded)."""
    return dict(_designs)
