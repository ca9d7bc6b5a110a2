"""Error of ``exp2`` and ``reciprocal`` against float64, exhaustively over every input.

Run: ``python benchmarks/fixed_point_error.py [--set-exp2 key=value ...] [--set-reciprocal ...]
[--figures FILE]``. Prints max/mean absolute error (in output LSBs and absolute) and max/mean
relative error.
"""

import argparse
import sys

import numpy as np
from tandem.host.common.exp2 import Exp2Params, exp2_golden, exp2_reference
from tandem.host.common.reciprocal import ReciprocalParams, reciprocal_golden, reciprocal_reference

from tandem.bench import Figures, add_benchmark_options
from tandem.config import resolve_params
from tandem.errors import UserError


def _row(name, region, got, ref, lsb, figures: Figures):
    abs_err = np.abs(got - ref)
    rel = abs_err / np.abs(ref)
    note = f"{region}, {len(ref)} inputs, exhaustive"
    figures.add(
        "max error", abs_err.max() / lsb, "LSB", design=name, note=note, higher_is_better=False
    )
    figures.add(
        "mean error", abs_err.mean() / lsb, "LSB", design=name, note=note, higher_is_better=False
    )
    figures.add(
        "max relative error", rel.max(), "ratio", design=name, note=note, higher_is_better=False
    )
    return (
        f"{name:<11}{region:<34}{len(ref):>8}  "
        f"{abs_err.max() / lsb:>7.3f} {abs_err.mean() / lsb:>7.3f}"
        f"  {abs_err.max():>9.3e} {rel.max():>9.3e} {rel.mean():>9.3e}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set-exp2", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--set-reciprocal", action="append", default=[], metavar="KEY=VALUE")
    add_benchmark_options(parser)
    args = parser.parse_args(argv)
    try:
        e = resolve_params(Exp2Params, None, args.set_exp2, design="exp2")
        r = resolve_params(ReciprocalParams, None, args.set_reciprocal, design="reciprocal")
    except UserError as exc:
        print(f"fixed_point_error: error: {exc}", file=sys.stderr)
        return 2

    figures = Figures("fixed-point", config={"exp2": e.to_dict(), "reciprocal": r.to_dict()})
    print(
        f"{'unit':<11}{'inputs':<34}{'count':>8}  {'max LSB':>7} {'mean':>7}"
        f"  {'max abs':>9} {'max rel':>9} {'mean rel':>9}"
    )
    x = e.input_range()
    x = x[x <= 0]  # the domain; positive inputs clamp to 0 and give exactly 1.0
    lsb = 2.0**-e.out_frac_bits
    got, ref = exp2_golden(e, x) * lsb, exp2_reference(e, x)
    print(_row("exp2", "all x <= 0", got, ref, lsb, figures))
    live = ref >= 2.0**-8
    print(_row("exp2", "results >= 2**-8", got[live], ref[live], lsb, figures))
    print(f"  {e}")

    x = r.input_range()[1:]
    lsb = 2.0**-r.out_frac_bits
    got, ref = reciprocal_golden(r, x) * lsb, reciprocal_reference(r, x)
    fits = ref <= ((1 << r.out_bits) - 1) * lsb
    print(_row("reciprocal", "non-zero x whose 1/x fits", got[fits], ref[fits], lsb, figures))
    big = fits & (ref >= 2.0)
    print(_row("reciprocal", "1/x >= 2 and fits", got[big], ref[big], lsb, figures))
    print(f"  {r}")
    print(f"  saturated: {int((~fits).sum())} inputs (1/x above the output range) and x = 0")
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
