"""The benchmark suite: one script per design, run together by ``tandem bench``.

Every script in ``benchmarks/`` prints its figures as a table and, given ``--figures PATH``,
also writes them as JSON in one shape (:class:`Figures`), so that the suite can gather them.
A figure is a measured number with its unit; most are ratios measured in the same run
(efficiency, utilization, speed-up against a named baseline, error against a float
reference), and a figure with a published reference or a target carries it, so the summary
can show the ratio to it.

``tandem bench`` runs the scripts listed in :data:`BENCHMARKS` one after the other, each in its
own Python process with a time limit, and writes ``bench.json`` (every figure, every script's
status, time and log) and ``bench.md`` (the same as Markdown tables) into the output folder.
``--quick`` gives every script its small arguments: the whole suite then takes under ten
minutes on the 2-core CI machine once the simulator builds are cached (they are cached under
``~/.cache/tandem/sim``, see :mod:`tandem.sim.runner`). A script that fails or runs out of
time is reported with the last line of its log and does not stop the others; a script whose
inputs are missing (a simulator, the SmolLM2 GGUF file) is reported as skipped with the
reason.

The scripts live in the source tree, not in the installed package: ``tandem bench`` finds them
next to the package (``<checkout>/benchmarks``) or in ``--benchmarks DIR``.
"""

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .args import output_dir, real
from .errors import UserError

__all__ = [
    "BENCHMARKS",
    "SKIP_EXIT",
    "Benchmark",
    "Figure",
    "Figures",
    "add_figures_option",
    "find_benchmarks_dir",
    "markdown_summary",
    "run_suite",
    "skip",
]

#: Exit status a benchmark script uses to say "skipped" (its first stderr line says why).
SKIP_EXIT = 3
#: What ``tandem bench`` writes into its output folder (beside ``logs/``).
BENCH_FILES = ("bench.json", "bench.md")


@dataclass
class Figure:
    """One measured figure.

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
    """

    name: str
    value: float
    unit: str = "ratio"
    reference: float | None = None
    reference_label: str = ""
    higher_is_better: bool | None = True
    design: str = ""
    note: str = ""

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
        """Record one figure (keyword arguments as in :class:`Figure`) and return it."""
        figure = Figure(name=name, value=float(value), unit=unit, **details)
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
        """Read what :meth:`write` wrote."""
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
    """

    name: str
    script: str
    designs: tuple[str, ...]
    what: str
    quick_args: tuple[str, ...] = ()
    full_args: tuple[str, ...] = ()


#: The suite, in the order it runs (cheap analytic ones first).
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "fixed-point",
        "fixed_point_error.py",
        ("exp2", "reciprocal"),
        "exp2 and reciprocal units: error in LSB against float over every input",
    ),
    Benchmark(
        "hpu-error",
        "hpu_error.py",
        ("hpu",),
        "HPU golden (bit-exact with the RTL) against torch float attention on SmolLM2 K/V",
    ),
    Benchmark(
        "hpu-accuracy-dense",
        "hpu_accuracy_dense.py",
        ("hpu",),
        "HPU error at every decode step, layer and head of SmolLM2 as the runtime runs it",
        quick_args=("--tokens", "64"),
    ),
    Benchmark(
        "decode-accuracy",
        "decode_accuracy.py",
        ("hpu",),
        "SmolLM2-135M decode, attention on golden HPU cards, against torch float32",
        quick_args=("--tokens", "8"),
    ),
    Benchmark(
        "decode-cycles",
        "decode_cycles.py",
        ("hpu",),
        "golden HPU backend's cycle model against RTL cycles over ten batches, and its fit",
        quick_args=("--configs", "hd32-g2"),
    ),
    Benchmark(
        "decode-speed",
        "decode_speed.py",
        ("hpu",),
        "SmolLM2-135M decode tokens/s, golden HPU attention against torch attention",
        quick_args=("--new-tokens", "8", "--repeat", "1"),
    ),
    Benchmark(
        "shared-machine",
        "shared_machine.py",
        ("hpu", "sparse-mpe"),
        "compile, decode and the compiled program alone and beside a second CPU-bound process: "
        "wall and CPU time, loaded over quiet",
        quick_args=("--quick",),
    ),
    Benchmark(
        "hpu-efficiency",
        "hpu_stream_efficiency.py",
        ("hpu",),
        "HPU engine in RTL: KV stream efficiency against memory latency and length",
        quick_args=("--lengths", "64", "512", "--latencies", "2", "100"),
    ),
    Benchmark(
        "sparse-dsp",
        "sparse_dsp_performance.py",
        ("sparse-dsp-chain", "sparse-mpe"),
        "N:M sparse DSP chain: DSP utilization and speed-up over dense, in RTL",
        quick_args=("--rows", "128", "--cols", "256"),
    ),
    Benchmark(
        "spmm-cost-model",
        "spmm_cost_model.py",
        ("systolic", "sparse-engine"),
        "SpMM engines: cost-model cycles against RTL cycles across tile densities",
        quick_args=("--densities", "0.01,0.2,1.0"),
    ),
    Benchmark(
        "spmm-mapping",
        "spmm_mapping.py",
        ("systolic", "sparse-engine"),
        "density-aware SpMM mapping: makespan against three baselines on real graphs",
        quick_args=("--quick",),
    ),
    Benchmark(
        "spmm-mapper-speed",
        "spmm_mapper_speed.py",
        ("systolic", "sparse-engine"),
        "SpMM mapper: non-zeros per second and peak memory on power-law graphs",
        quick_args=("--sizes", "2000000"),
        full_args=("--sizes", "10000000", "100000000"),
    ),
    Benchmark(
        "rnn-activation",
        "rnn_activation_error.py",
        ("rnn",),
        "RNN sigmoid/tanh tables: error in LSB against float",
    ),
    Benchmark(
        "rnn-accuracy",
        "rnn_accuracy.py",
        ("rnn",),
        "quantized LSTM (golden, bit-exact with the RTL) against torch float",
        quick_args=("--steps", "20", "--batch", "2"),
    ),
    Benchmark(
        "rnn-long-sequence",
        "rnn_long_sequence.py",
        ("rnn",),
        "trained LSTMs (silero VAD, a character model) over 1250 steps against torch float: "
        "error and saturated values, int16 cell state against the default",
        quick_args=("--steps", "600", "--train-steps", "200"),
    ),
    Benchmark(
        "rnn-utilization",
        "rnn_utilization.py",
        ("rnn",),
        "RNN tile dispatcher in RTL: array utilization against a naive schedule",
        quick_args=("--hidden", "128", "--max-steps", "8"),
    ),
    Benchmark(
        "accel-backends",
        "accel_backends.py",
        ("sparse-mpe", "rnn", "systolic", "sparse-engine"),
        "device API, golden vs RTL backend: model/RTL cycles and the golden speed-up per call",
        quick_args=("--quick", "--simulator", "icarus"),
    ),
    Benchmark(
        "perf-paper",
        "perf_paper.py",
        ("hpu",),
        "system model: GPU + HPU cards against GPU alone, against the HPU paper",
    ),
    Benchmark(
        "perf-crosscheck",
        "perf_crosscheck.py",
        ("hpu",),
        "system model's HPU cycles against the decode runtime's, SmolLM2 shapes",
    ),
    Benchmark(
        "hpu-channel-balance",
        "hpu_channel_balance.py",
        ("hpu",),
        "HBM pseudo-channels one decode call loads, contiguous against channel-aware placement, "
        "SmolLM2 and Llama-2-7B (batch 48, 4 cards) shapes",
        quick_args=("--smollm2-batch", "64", "--llama-batch", "16", "--input", "256"),
    ),
    Benchmark(
        "resources",
        "resources.py",
        (),
        "LUT, FF, DSP, BRAM of every design's default configuration (yosys)",
        quick_args=("--quick",),
    ),
    Benchmark(
        "sim-speed",
        "sim_speed.py",
        (),
        "simulated cycles per second on Verilator and Icarus, and golden-model speed-up",
        quick_args=("--quick",),
    ),
    Benchmark(
        "native-speed",
        "native_speed.py",
        ("hpu", "rnn", "sparse-mpe", "systolic", "sparse-engine"),
        "RTL co-simulation: the native C++ harness against cocotb on the same workload",
        quick_args=("--context", "256"),
    ),
)


def add_figures_option(parser) -> None:
    """Add ``--figures PATH`` (the suite's JSON) to a benchmark script's argument parser."""
    parser.add_argument(
        "--figures", type=Path, metavar="PATH", help="also write the figures here as JSON"
    )


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


def _run_one(
    bench: Benchmark, folder: Path, out_dir: Path, quick: bool, timeout_s: float
) -> dict[str, Any]:
    script = folder / bench.script
    log = out_dir / "logs" / f"{bench.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {
        "name": bench.name,
        "script": f"benchmarks/{bench.script}",
        "designs": list(bench.designs),
        "what": bench.what,
        "log": str(log),
        "figures": [],
    }
    if not script.exists():
        entry.update(status="failed", seconds=0.0, reason=f"{script} does not exist")
        return entry
    args = list(bench.quick_args if quick else bench.full_args)
    with tempfile.TemporaryDirectory(prefix="tandem-bench-") as tmp:
        figures_path = Path(tmp) / "figures.json"
        command = [sys.executable, str(script), *args, "--figures", str(figures_path)]
        entry["command"] = " ".join(["python", f"benchmarks/{bench.script}", *args])
        start = time.perf_counter()
        env = dict(os.environ, MPLBACKEND="Agg")
        try:
            with open(log, "w") as handle:
                done = subprocess.run(
                    command,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    timeout=timeout_s,
                    env=env,
                    cwd=folder.parent,
                )
            returncode = done.returncode
        except subprocess.TimeoutExpired:
            returncode = None
        entry["seconds"] = round(time.perf_counter() - start, 2)
        text = log.read_text(errors="replace")
        if figures_path.exists():  # kept even when the script then failed: they were measured
            figures = Figures.read(figures_path)
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
) -> dict[str, Any]:
    """Run the suite and write ``bench.json`` and ``bench.md`` into ``out_dir``.

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

    Returns
    -------
    dict
        What ``bench.json`` holds.
    """
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
    start = time.perf_counter()
    entries = []
    for bench in selected:
        if starting is not None:
            starting(bench)
        entry = _run_one(bench, folder, out_dir, quick, timeout_s)
        entries.append(entry)
        if progress is not None:
            progress(entry)
    summary = {
        "quick": quick,
        "started_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": round(time.perf_counter() - start, 1),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "benchmarks": entries,
    }
    (out_dir / "bench.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "bench.md").write_text(markdown_summary(summary))
    return summary


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
    met = Figure(**figure).meets_reference()
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
    # A timeout beyond what Python's waits take (threading.TIMEOUT_MAX) is an overflow.
    real(args.timeout, "--timeout", 0.0, threading.TIMEOUT_MAX, above=True)
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
    )
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for entry in summary["benchmarks"]:
            print(_status_line(entry))
        print(f"{summary['seconds']:.0f} s; wrote {out / 'bench.json'} and {out / 'bench.md'}")
    bad = [e["name"] for e in summary["benchmarks"] if e["status"] in ("failed", "timeout")]
    if bad:
        print(f"not measured: {', '.join(bad)} (see their logs)", file=sys.stderr)
        return 1
    return 0
