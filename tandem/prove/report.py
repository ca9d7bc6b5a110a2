"""What ``tandem prove`` reports: the outcome of each property on each channel or buffer, and the
report of one design that gathers them."""

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .engines import SAT_ENGINE

#: The properties, by the name each result line carries.
PROPERTIES = {
    "hold": "valid and payload held until ready",
    "reset": "no valid in the cycles after a reset",
    "axi-reset": "no AXI manager valid while reset is high",
    "axi-4k": "no AXI burst crosses 4 KiB",
    "no-overflow": "no write into a full buffer is lost",
}

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
    engine: str = SAT_ENGINE
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
