"""The proof of ``tandem prove``: a design's proof parameters and defaults, and the runs that
check its harness (the cut netlist first, a failure again on the full one; BMC to each output's
first beat where a result rests on BMC alone) into a :class:`~tandem.prove.report.ProofReport`."""

import hashlib
import os
import re
import tempfile
import time
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
    require_yosys()
    engine, label, notes = select_engine(engine)
    start = time.monotonic()
    harness, ports, checks, covers = build_harness(component)
    text = label_asserts(rtlil.convert(harness, name="top", ports=ports, emit_src=False))
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
    # buffers together (:meth:`~tandem.prove.engines.Smtbmc.solve`).
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
                    script = f"read_rtlil {variant}.il; {PREPARE_SMT}; write_smt2 -wires {out}"
                else:
                    out = f"{variant}.prep.il"
                    script = f"read_rtlil {variant}.il; {PREPARE_SAT}; write_rtlil {out}"
                code, log, timed_out = run_yosys(
                    ["-q", "-l", "yosys.log", "-p", script], work, timeout
                )
                if code != 0:
                    reason = "time limit" if timed_out else yosys_error(log, code)
                    raise ToolError(f"yosys could not prepare the {name} harness: {reason}")
                netlists[variant] = out
            return netlists[variant]

        def solve(
            variant: str, idents: list[str], run_mode: str, run_depth: int
        ) -> list[tuple[list[str], SolverRun]]:
            """Run ``idents`` to ``run_depth``. Returns ``(idents, outcome)`` groups: each
            failure found (peeled off, the rest going on without it), then the rest."""
            if not idents:
                return []
            if engine == "smtbmc":
                # A failure on the cut netlist is run again on the full one: no trace there.
                traced = [c.ident for c in checks] if variant == "full" else []
                smt = Smtbmc(
                    work, netlist(variant), everything, group_of, traced, timeout, progress
                )
                return smt.solve(idents, run_depth, run_mode)
            groups = []
            while idents:
                outcome = run_sat(
                    work, netlist(variant), everything, set(idents), run_depth, run_mode, timeout
                )
                if outcome.outcome != "failed":
                    groups.append((idents, outcome))
                    break
                failing = outcome.failing or list(idents)
                groups.append((failing, outcome))
                idents = [i for i in idents if i not in failing]
            return groups

        def record(idents: list[str], outcome: SolverRun) -> None:
            if outcome.outcome == "unknown":
                report.notes.append(
                    f"solver stopped after BMC depth {outcome.depth}: {outcome.reason}"
                )
            trace = None
            if outcome.outcome == "failed" and outcome.trace is not None:
                first = by_ident[idents[0]]
                label = re.sub(r"\W", "_", f"{first.target}.{first.prop}")
                trace = str(keep_trace(outcome.trace, traces, f"{label}.vcd"))
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
