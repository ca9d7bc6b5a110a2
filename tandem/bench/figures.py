"""What a benchmark script reports and the options scripts share: :class:`Figures` of
:class:`Figure` values, each with its :class:`Provenance`, :func:`add_benchmark_options` and
:func:`skip`."""

import enum
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Exit status a benchmark script uses to say "skipped" (its first stderr line says why).
SKIP_EXIT = 3


class Provenance(enum.StrEnum):
    """How a figure was obtained: the fixed vocabulary of :attr:`Figure.provenance`.

    Every value but ``MODELLED`` is a measurement of something that ran; a modelled figure is
    a formula over other figures and names its assumptions (:attr:`Figure.assumptions`).
    """

    RTL = "measured: RTL simulation"
    SYNTHESIS = "measured: synthesis (yosys)"
    PLACE_AND_ROUTE = "measured: place and route"
    GOLDEN_REAL_DATA = "measured: golden model on real data"
    GOLDEN_SYNTHETIC_DATA = "measured: golden model on synthetic data"
    GOLDEN_EVERY_INPUT = "measured: golden model on every input"
    WALL_TIME = "measured: host runtime (wall time)"
    CPU_TIME = "measured: host runtime (CPU time)"
    PEAK_MEMORY = "measured: host runtime (peak memory)"
    COUNTERS = "measured: host runtime (counters)"
    GPU = "measured: GPU (PyTorch on CUDA)"
    MODELLED = "modelled"


@dataclass
class Figure:
    """One figure: measured, or modelled from measured ones (:attr:`provenance` says which).

    Attributes
    ----------
    name
        What was measured, short and specific (``"stream efficiency, 2048 tokens"``).
    value
        The measurement.
    unit
        ``"ratio"``, ``"x"`` (a speed-up), ``"%"``, ``"cycles"``, ``"cycles/s"``, ``"s"``, ...
    reference
        A published figure or a target to compare with, if any.
    reference_label
        Where ``reference`` comes from (``"HPU paper"``, ``"target"``).
    higher_is_better
        Direction, for the ratio to the reference (None when neither is better).
    design
        The design measured, when the script covers several.
    note
        Conditions the figure holds under (configuration, simulator, workload).
    provenance
        How it was obtained, a :class:`Provenance` value; empty: the :class:`Benchmark`'s.
    assumptions
        For a modelled figure, each assumption the model makes and where its numbers come from
        (``"GPU at its data sheet's peaks (constraints/gpus/l40s.yaml)"``).
    command
        The command that reproduces it; empty: the script as the suite ran it.
    """

    name: str
    value: float
    unit: str = "ratio"
    reference: float | None = None
    reference_label: str = ""
    higher_is_better: bool | None = True
    design: str = ""
    note: str = ""
    provenance: str = ""
    assumptions: list[str] = field(default_factory=list)
    command: str = ""

    def __post_init__(self):
        if self.provenance and self.provenance not in set(Provenance):
            choices = ", ".join(repr(p.value) for p in Provenance)
            raise ValueError(f"provenance must be one of {choices}, not {self.provenance!r}")
        if self.assumptions and self.provenance != Provenance.MODELLED:
            raise ValueError(f"{self.name!r}: only a modelled figure has assumptions")
        self.assumptions = list(self.assumptions)

    def meets_reference(self) -> bool | None:
        """Whether the figure reaches its reference (None without one or without direction)."""
        if self.reference is None or self.higher_is_better is None:
            return None
        if self.higher_is_better:
            return self.value >= self.reference
        return self.value <= self.reference


@dataclass
class Figures:
    """The figures one benchmark script measured, and how it ran."""

    benchmark: str
    figures: list[Figure] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, value: float, unit: str = "ratio", **details) -> Figure:
        """Record one figure (keyword arguments as in :class:`Figure`) and return it.

        A modelled figure must name its assumptions.
        """
        figure = Figure(name=name, value=float(value), unit=unit, **details)
        if figure.provenance == Provenance.MODELLED and not figure.assumptions:
            raise ValueError(f"{name!r}: a modelled figure names its assumptions")
        self.figures.append(figure)
        return figure

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "benchmark": self.benchmark,
            "config": self.config,
            "figures": [asdict(f) for f in self.figures],
        }

    def write(self, path: str | Path | None) -> None:
        """Write the figures as JSON to ``path`` (nothing when None)."""
        if path is None:
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, path: str | Path) -> "Figures":
        """Read what :meth:`write` wrote (also without the provenance fields)."""
        data = json.loads(Path(path).read_text())
        return cls(
            benchmark=data["benchmark"],
            figures=[Figure(**f) for f in data.get("figures", [])],
            config=data.get("config", {}),
        )


#: Where a benchmark script's ``--out`` writes its builds, plots and reports by default.
BENCHMARK_OUT = Path("build") / "benchmarks"
#: The help of each option :func:`add_benchmark_options` adds, unless a script gives its own.
BENCHMARK_HELP = {
    "seed": "random seed (default: %(default)s)",
    "out": "folder for the runs' builds, plots and reports (default: %(default)s)",
    "figures": "also write the figures here as JSON",
}


def add_benchmark_options(
    parser,
    *,
    quick: str | None = None,
    seed: bool = False,
    json: str | None = None,
    json_lines: str | None = None,
    out: bool | str | Path | None = False,
    figures: bool = True,
    helps: dict[str, str] | None = None,
) -> None:
    """Add the options benchmark scripts share, each with one spelling, to ``parser``.

    The options come in this order: ``--quick``, ``--seed N``, ``--json`` (``--json PATH``, or
    the flag ``--json``), ``--out PATH``, ``--figures PATH``. A script adds each only where it
    uses it, and gives its own help text where what the option does is particular to it.

    Parameters
    ----------
    parser
        The script's :class:`argparse.ArgumentParser`.
    quick
        Add the flag ``--quick`` (what ``tandem bench --quick`` passes where a script lists it
        in its ``quick_args``) with this help text: what the small run does.
    seed
        Add ``--seed N`` (an int, default 1).
    json
        Add ``--json PATH`` (a :class:`~pathlib.Path`, default None) with this help text: what
        the script writes there.
    json_lines
        Add the flag ``--json`` with this help text: what the script prints as JSON lines.
    out
        Add ``--out PATH`` (a :class:`~pathlib.Path`): False, none; True, the default is
        :data:`BENCHMARK_OUT`; a path, the default is that path; None, no default (the script
        decides what a run without ``--out`` writes).
    figures
        Add ``--figures PATH``, where the suite reads the script's :class:`Figures`.
    helps
        Help texts that replace those of :data:`BENCHMARK_HELP`, by option name (``"seed"``).
    """
    if json is not None and json_lines is not None:
        raise ValueError("--json is either a file (json) or a flag (json_lines), not both")
    helps = BENCHMARK_HELP | (helps or {})
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    if seed:
        parser.add_argument("--seed", type=int, default=1, metavar="N", help=helps["seed"])
    if json is not None:
        parser.add_argument("--json", type=Path, metavar="PATH", help=json)
    if json_lines is not None:
        parser.add_argument("--json", action="store_true", help=json_lines)
    if out is not False:
        default = BENCHMARK_OUT if out is True else None if out is None else Path(out)
        parser.add_argument("--out", type=Path, default=default, metavar="PATH", help=helps["out"])
    if figures:
        parser.add_argument("--figures", type=Path, metavar="PATH", help=helps["figures"])


def add_figures_option(parser) -> None:
    """Add ``--figures PATH`` (the suite's JSON) to a benchmark script's argument parser.

    The same as ``add_benchmark_options(parser)``, for a script with no other shared option.
    """
    add_benchmark_options(parser)


def skip(reason: str) -> int:
    """Say why a benchmark cannot run here, on stderr, and return :data:`SKIP_EXIT`."""
    print(f"skipped: {reason}", file=sys.stderr)
    return SKIP_EXIT
