"""The proof of ``tandem prove``: a design's proof parameters and defaults, and the runs that
check its harness (the cut netlist first, a failure again on the full one; BMC to each output's
first beat where a result rests on BMC alone) into a :class:`~tandem.prove.report.ProofReport`."""

import hashlib
import os
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from ..config import Params
from ..errors import ToolError, UserError
from ..progress import Progress
from ..registry import Design
from .engines import (
    ENGINES,
    PREPARE_SAT,
    PREPARE_SMT,
    Engine,
    Smtbmc,
    SolverRun,
    keep_trace,
    require_yosys,
    run_sat,
    run_yosys,
    select_engine,
    yosys_error,
)
from .harness import build_harness, cut_multipliers, label_asserts
from .report import ProofReport, PropertyResult

#: Steps of bounded model checking (and the longest induction tried) when none is asked for.
DEFAULT_DEPTH = 20

Mode = Literal["prove", "bmc"]


def default_trace_dir() -> Path:
    """Where counterexamples are kept: ``$XDG_CACHE_HOME/tandem/prove`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tandem" / "prove"


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
    only: Sequence[str] | None = None,
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
    only
        Check only these output channels (``"result_o"``, ``"k_axi.ar"``) and, with
        ``"buffers"``, the FIFOs (default: everything).

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
    select_engine(engine)  # a missing solver is said before the design is built
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
        only=only,
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
    only: Sequence[str] | None = None,
) -> ProofReport:
    """:func:`prove` for any ``wiring.Component`` (a design's top, a block, a test mutant).

    ``name`` names the report and the trace folder; ``params`` is only recorded.
    """
    from amaranth.back import rtlil

    _check_options(depth, mode, timeout, engine, margin)
    require_yosys()
    engine, label, notes = select_engine(engine)
    start = time.monotonic()
    harness, ports, checks, covers = build_harness(component)
    text = label_asserts(rtlil.convert(harness, name="top", ports=ports, emit_src=False))
    pinned = checks + covers  # every check's skip input is pinned, the unselected ones off
    if only:
        checks, covers = _select(name, checks, covers, only)
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

    with tempfile.TemporaryDirectory(prefix="tandem-prove-") as tmp:
        run = _ProofRun(
            Path(tmp), name, {"cut": cut_text, "full": text}, cut, engine, timeout, progress,
            checks, covers, report, traces, pinned,
        )  # fmt: skip
        if mode == "bmc":
            run.bmc(depth, margin)
        else:
            run.prove(depth)
        run.report_first_beats()

    report.results = [run.results[c.ident] for c in checks]
    report.seconds = round(time.monotonic() - start, 2)
    report.notes += report.beat_notes()
    return report


def check_group(check) -> str:
    """What ``--only`` names a check or cover by: its output channel, or ``"buffers"`` for
    the FIFOs' checks (one solver run checks them together)."""
    return "buffers" if check.prop in ("no-overflow", "first-full") else check.target


def _select(name: str, checks, covers, only: Sequence[str]):
    """The checks and covers of the channels in ``only``; an unknown name is a user error."""
    known = sorted({check_group(c) for c in checks})
    unknown = [n for n in only if n not in known]
    if unknown:
        raise UserError(
            f"--only {unknown[0]}: {name} has no output channel or buffers of that name; it has "
            f"{', '.join(known)}"
        )
    wanted = set(only)
    return (
        [c for c in checks if check_group(c) in wanted],
        [c for c in covers if check_group(c) in wanted],
    )


class _ProofRun:
    """The solver runs of one :func:`prove_component` call in the folder ``work``.

    ``texts`` holds the RTLIL of the harness (``"full"``) and of its multiplier-cut twin
    (``"cut"``); ``results`` gathers a :class:`PropertyResult` per property.

    Where a result rests on BMC alone, the report says how deep each output's first beat is (a
    "cover": valid is never high, its counterexample the first beat), since a BMC depth that
    never reaches a beat checks only the cycles before it. In BMC mode the covers run with the
    properties (one run where no beat is reachable); in prove mode afterwards, and only if
    some property was not proved.
    """

    def __init__(
        self, work: Path, name: str, texts: dict[str, str], cut, engine: Engine,
        timeout: float | None, progress, checks, covers, report: ProofReport, traces: Path,
        pinned=None,
    ):  # fmt: skip
        self.work, self.name, self.texts, self.engine = work, name, texts, engine
        self.timeout, self.progress, self.report, self.traces = timeout, progress, report, traces
        self.checks, self.covers = checks, covers
        self.everything = checks + covers
        # The harness's every check and cover: a run pins the skip input of each, so that a
        # check left out (``only``) is off rather than free.
        self.pinned = self.everything if pinned is None else pinned
        self.by_ident = {c.ident: c for c in self.everything}
        # BMC runs one output channel (its properties and its first beat) at a time, and the
        # buffers together (:meth:`~tandem.prove.engines.Smtbmc.solve`).
        self.group_of = {c.ident: check_group(c) for c in self.everything}
        self.results: dict[str, PropertyResult] = {}
        self.netlists: dict[str, str] = {}
        self.cover_idents = {c.ident for c in covers}
        self.found: dict[str, int | None] = {}
        # The cut netlist first (where there is one); what fails there is run again on the full
        # netlist, which decides (the cut only adds behaviours).
        self.first_variant = "cut" if cut else "full"

    def netlist(self, variant: str) -> str:
        """The prepared netlist of ``variant`` ("cut" or "full"), made on first use: RTLIL
        for ``sat``, SMT-LIB for ``smtbmc``."""
        if variant not in self.netlists:
            work = self.work
            (work / f"{variant}.il").write_text(self.texts[variant])
            if self.engine == "smtbmc":
                out = f"{variant}.smt2"
                script = f"read_rtlil {variant}.il; {PREPARE_SMT}; write_smt2 -wires {out}"
            else:
                out = f"{variant}.prep.il"
                script = f"read_rtlil {variant}.il; {PREPARE_SAT}; write_rtlil {out}"
            code, log, timed_out = run_yosys(
                ["-q", "-l", "yosys.log", "-p", script], work, self.timeout
            )
            if code != 0:
                reason = "time limit" if timed_out else yosys_error(log, code)
                raise ToolError(f"yosys could not prepare the {self.name} harness: {reason}")
            self.netlists[variant] = out
        return self.netlists[variant]

    def solve(
        self, variant: str, idents: list[str], run_mode: str, run_depth: int
    ) -> list[tuple[list[str], SolverRun]]:
        """Run ``idents`` to ``run_depth``. Returns ``(idents, outcome)`` groups: each
        failure found (peeled off, the rest going on without it), then the rest."""
        if not idents:
            return []
        if self.engine == "smtbmc":
            # A failure on the cut netlist is run again on the full one: no trace there.
            traced = [c.ident for c in self.checks] if variant == "full" else []
            smt = Smtbmc(
                self.work, self.netlist(variant), self.pinned, self.group_of, traced,
                self.timeout, self.progress,
            )  # fmt: skip
            return smt.solve(idents, run_depth, run_mode)
        groups = []
        while idents:
            outcome = run_sat(
                self.work, self.netlist(variant), self.pinned, set(idents), run_depth,
                run_mode, self.timeout,
            )  # fmt: skip
            if outcome.outcome != "failed":
                groups.append((idents, outcome))
                break
            failing = outcome.failing or list(idents)
            groups.append((failing, outcome))
            idents = [i for i in idents if i not in failing]
        return groups

    def record(self, idents: list[str], outcome: SolverRun) -> None:
        """Put the result of ``idents`` (one solver run's ``outcome``) in :attr:`results`."""
        if outcome.outcome == "unknown":
            self.report.notes.append(
                f"solver stopped after BMC depth {outcome.depth}: {outcome.reason}"
            )
        trace = None
        if outcome.outcome == "failed" and outcome.trace is not None:
            first = self.by_ident[idents[0]]
            label = re.sub(r"\W", "_", f"{first.target}.{first.prop}")
            trace = str(keep_trace(outcome.trace, self.traces, f"{label}.vcd"))
        for ident in idents:
            c = self.by_ident[ident]
            self.results[ident] = PropertyResult(
                c.target,
                c.prop,
                outcome.outcome,
                "k-induction" if outcome.outcome == "proved" else "bmc",
                outcome.depth,
                round(outcome.seconds, 2),
                trace,
            )

    def collect(self, groups, suspects: list[str] | None) -> None:
        """Note the covers' first beats of ``groups`` and record their properties; with
        ``suspects``, failed properties go there instead (to run again on the full netlist)."""
        for idents, outcome in groups:
            for ident in idents:
                if ident in self.cover_idents:
                    self.found[ident] = outcome.depth if outcome.outcome == "failed" else None
            props = [i for i in idents if i not in self.cover_idents]
            if suspects is not None and outcome.outcome == "failed":
                suspects += props
            elif props:
                self.record(props, outcome)

    def check(self, idents: list[str], run_mode: str, run_depth: int) -> None:
        """Run ``idents`` on the first netlist, and what failed on the cut one on the full."""
        suspects: list[str] = []
        groups = self.solve(self.first_variant, idents, run_mode, run_depth)
        self.collect(groups, suspects if self.first_variant == "cut" else None)
        self.collect(self.solve("full", suspects, run_mode, run_depth), None)

    def bmc(self, depth: int, margin: int | None) -> None:
        """BMC mode: the first beats first, then each output channel (and the buffers
        together) to its own depth: ``margin`` cycles past its first beat, at most ``depth``."""
        self.collect(self.solve(self.first_variant, sorted(self.cover_idents), "bmc", depth), None)
        first_beat = {
            c.target: self.found.get(c.ident) for c in self.covers if c.prop == "first-valid"
        }
        parts: dict[str, list[str]] = {}
        for c in self.checks:
            parts.setdefault(self.group_of[c.ident], []).append(c.ident)
        for group, idents in parts.items():
            beat = first_beat.get(group)
            run_depth = depth if margin is None or beat is None else min(depth, beat + margin)
            self.check(idents, "bmc", run_depth)

    def prove(self, depth: int) -> None:
        """Prove mode: every property by k-induction, then the covers where one was not
        proved."""
        self.check([c.ident for c in self.checks], "prove", depth)
        if any(self.results[c.ident].status != "proved" for c in self.checks):
            self.collect(
                self.solve(self.first_variant, sorted(self.cover_idents), "bmc", depth), None
            )

    def report_first_beats(self) -> None:
        """The report's ``first_valid`` and ``first_full`` where covers ran."""
        if self.found:
            covers, found = self.covers, self.found
            self.report.first_valid = {
                c.target: found[c.ident] for c in covers if c.prop == "first-valid"
            }
            self.report.first_full = {
                c.target: found[c.ident] for c in covers if c.prop == "first-full"
            }
