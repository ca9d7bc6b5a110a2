"""Error of the rnn engine's fixed-point sigmoid and tanh against float64, over every input.

Run: ``python benchmarks/rnn_activation_error.py [--set key=value ...]``. Every representable
activation input (``2 * act_max + 1`` values, state_frac fraction bits, +-2**act_range_bits)
goes through the same tables the gateware's ROMs hold; prints max and mean absolute error in
output LSBs and absolute, for the given parameters and a sweep of table sizes.
"""

import argparse
import sys

import numpy as np
from tandem.host.rnn import RnnParams, sigmoid_fixed, tanh_fixed

from tandem.bench import Figures, add_benchmark_options
from tandem.config import resolve_params
from tandem.errors import UserError


def errors(params: RnnParams) -> dict[str, tuple[float, float]]:
    a = np.arange(-params.act_max, params.act_max + 1)
    real = a / 2.0**params.state_frac
    lsb = 2.0**-params.gate_frac
    out = {}
    for name, fixed, ref in (
        ("sigmoid", sigmoid_fixed, 1.0 / (1.0 + np.exp(-real))),
        ("tanh", tanh_fixed, np.tanh(real)),
    ):
        err = np.abs(fixed(params, a) * lsb - ref)
        out[name] = (float(err.max()), float(err.mean()))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    add_benchmark_options(parser)
    args = parser.parse_args(argv)
    try:
        base = resolve_params(RnnParams, None, args.overrides, design="rnn")
    except UserError as exc:
        print(f"rnn_activation_error: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"inputs: all {2 * base.act_max + 1} values in +-{2**base.act_range_bits} "
        f"(state_frac {base.state_frac}); outputs gate_frac {base.gate_frac} "
        f"(LSB {2.0**-base.gate_frac:.2e})"
    )
    figures = Figures("rnn-activation", config=base.to_dict())
    header = f"{'segments':>9} {'function':<8} {'max LSB':>8} {'mean LSB':>9} {'max abs':>10}"
    print(header)
    sizes = sorted({base.act_segment_bits, 6, 7, 8, 9, 10, 11})
    for bits in sizes:
        if bits > base.act_range_bits + base.state_frac:
            continue
        p = base.replace(act_segment_bits=bits)
        mark = " (this config)" if bits == base.act_segment_bits else ""
        for name, (mx, mean) in errors(p).items():
            lsb = 2.0**-p.gate_frac
            print(f"{1 << bits:>9} {name:<8} {mx / lsb:>8.2f} {mean / lsb:>9.3f} {mx:>10.2e}{mark}")
            if mark:
                note = f"{1 << bits} segments, every input in +-{2**base.act_range_bits}"
                for label, value in (("max", mx / lsb), ("mean", mean / lsb)):
                    figures.add(
                        f"{name} {label} error",
                        value,
                        "LSB",
                        design="rnn",
                        note=note,
                        higher_is_better=False,
                    )
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
