"""Fitting the routing terms of an ECP5 delay model to nextpnr-ecp5's post-route paths.

:func:`tandem.timing.estimate_timing` prices a routed net at ``net + net_per_log2_fanout *
log2(fan-out)``, adds ``net_block`` to a net that enters or leaves a MULT18X18D or DP16KD and
``clock_uncertainty`` once per path. The cell delays come from the Trellis timing database; these
four routing terms are what the method lacks, and they are fitted here: for every design point,
the estimated path splits into its cells (fixed figures) and its routed nets (the fan-outs and
hard-block nets the walk reports), so nextpnr's critical-path delay ``D`` is linear in the four
terms::

    D - cells = net * nets + net_per_log2_fanout * sum(log2 fan-out) + net_block * block_nets
                + clock_uncertainty

solved by non-negative least squares, weighted by ``1 / D`` so that each point counts by its
relative error (the error quoted is relative). The path itself depends on the terms (a higher
fan-out price can make another path the longest), so :func:`fit` re-walks every netlist with
the new terms and fits again until the terms settle.

``benchmarks/timing_calibration.py`` runs it on every registered design; the tests run it on
synthetic points.
"""

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import nnls

from .timing import Ecp5DelayModel, TimingEstimate, estimate_timing

__all__ = ["COEFFICIENTS", "PathFeatures", "fit", "fit_features", "relative_errors", "summary"]

#: The fitted routing terms of :class:`~tandem.timing.Ecp5DelayModel`, in column order.
COEFFICIENTS = ("net", "net_per_log2_fanout", "net_block", "clock_uncertainty")


@dataclass(frozen=True)
class PathFeatures:
    """One design point's estimated path, split into what the routing terms multiply.

    Attributes
    ----------
    measured_ns
        nextpnr-ecp5's critical-path delay (1000 / its Fmax).
    cells_ns
        The path's delay by the model without its routed nets and clock term.
    nets
        Routed nets on the path.
    log2_fanout
        Sum of log2(fan-out) over them.
    block_nets
        Those that enter or leave a hard block.
    """

    measured_ns: float
    cells_ns: float
    nets: int
    log2_fanout: float
    block_nets: int

    @classmethod
    def of(cls, estimate: TimingEstimate, model: Ecp5DelayModel, measured_ns: float):
        """The features of ``estimate`` (walked with ``model``) against ``measured_ns``."""
        assert estimate.path_ns is not None and estimate.net_ns is not None
        cells = estimate.path_ns - estimate.net_ns - model.clock_uncertainty
        return cls(
            measured_ns=measured_ns,
            cells_ns=cells,
            nets=len(estimate.path_fanouts),
            log2_fanout=sum(math.log2(max(f, 1)) for f in estimate.path_fanouts),
            block_nets=estimate.path_block_nets,
        )

    def row(self) -> list[float]:
        """The coefficients' multipliers, in :data:`COEFFICIENTS` order."""
        return [self.nets, self.log2_fanout, self.block_nets, 1.0]

    def predict(self, coefficients: Sequence[float]) -> float:
        """The path delay with these routing terms (ns)."""
        return self.cells_ns + float(np.dot(self.row(), coefficients))


def fit_features(points: Sequence[PathFeatures]) -> tuple[float, ...]:
    """Non-negative least squares of the routing terms over fixed paths, relative residuals.

    Parameters
    ----------
    points
        At least as many as there are terms (:data:`COEFFICIENTS`).

    Returns
    -------
    tuple of float
        The terms in :data:`COEFFICIENTS` order (ns).
    """
    if len(points) < len(COEFFICIENTS):
        raise ValueError(f"need at least {len(COEFFICIENTS)} points to fit, not {len(points)}")
    weights = np.array([1.0 / p.measured_ns for p in points])
    a = np.array([p.row() for p in points]) * weights[:, None]
    b = np.array([p.measured_ns - p.cells_ns for p in points]) * weights
    solution, _ = nnls(a, b)
    return tuple(float(x) for x in solution)


def with_terms(model: Ecp5DelayModel, coefficients: Sequence[float], **changes) -> Ecp5DelayModel:
    """``model`` with its routing terms replaced (:data:`COEFFICIENTS` order)."""
    terms = {name: round(float(v), 4) for name, v in zip(COEFFICIENTS, coefficients, strict=True)}
    return replace(model, **terms, **changes)


def fit(
    netlists: Sequence[Callable[[], dict[str, Any]]],
    measured_ns: Sequence[float],
    start: Ecp5DelayModel,
    *,
    rounds: int = 6,
    progress: Callable[[str], None] | None = None,
) -> tuple[Ecp5DelayModel, list[PathFeatures]]:
    """Fit the routing terms, re-walking the netlists until the longest paths settle.

    Parameters
    ----------
    netlists
        One callable per point that returns its yosys ``synth_ecp5`` netlist.
    measured_ns
        nextpnr-ecp5's critical-path delay of each point.
    start
        The model whose cell figures are kept and whose terms start the first walk.
    rounds
        Most walk-and-fit rounds.
    progress
        Called with one line per round.

    Returns
    -------
    (Ecp5DelayModel, list of PathFeatures)
        The fitted model and each point's features under it.
    """
    model = start
    features: list[PathFeatures] = []
    for round_ in range(rounds):
        features = [
            PathFeatures.of(estimate_timing(load(), model), model, ns)
            for load, ns in zip(netlists, measured_ns, strict=True)
        ]
        terms = fit_features(features)
        settled = all(
            abs(getattr(model, name) - round(t, 4)) < 1e-3
            for name, t in zip(COEFFICIENTS, terms, strict=True)
        )
        model = with_terms(model, terms)
        if progress:
            text = ", ".join(f"{n} {getattr(model, n):.3f}" for n in COEFFICIENTS)
            progress(f"fit round {round_ + 1}: {text} ns")
        if settled:
            break
    features = [
        PathFeatures.of(estimate_timing(load(), model), model, ns)
        for load, ns in zip(netlists, measured_ns, strict=True)
    ]
    return model, features


def relative_errors(estimated_mhz: Sequence[float], measured_mhz: Sequence[float]) -> list[float]:
    """Estimated Fmax against the measured one: estimate / measured - 1, per point."""
    return [e / m - 1.0 for e, m in zip(estimated_mhz, measured_mhz, strict=True)]


def summary(errors: Sequence[float]) -> dict[str, float]:
    """Median and worst absolute relative error, in percent."""
    absolute = [abs(float(e)) * 100 for e in errors]
    return {
        "median_percent": round(statistics.median(absolute), 1),
        "worst_percent": round(max(absolute), 1),
    }
