"""Accuracy of the rnn engine (its bit-exact golden model) against float32 ``torch.nn.LSTM``
and ``torch.nn.GRU``.

Run: ``python benchmarks/rnn_accuracy.py [--steps 100] [--batch 4]``. For each cell, (X, H) and
weight width, a torch module (PyTorch's default initialization, seed 0, and the same module
with weights x3 so gates saturate) gives the weights through its ``state_dict``; inputs are
N(0, 1). Prints max and mean absolute error of h and c (LSTM) over every step, batch element
and unit. Target: max abs error on h below 0.02 with int16 state; the exit status holds the
int16-weight rows to it (int8 rows are reported beside them).
"""

import argparse
import sys

import numpy as np
import torch
from tandem.host.rnn import RnnParams, lstm_accuracy

from tandem.bench import Figures, add_benchmark_options

SHAPES = ((32, 32), (64, 64), (128, 128), (256, 256), (24, 40))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=4)
    add_benchmark_options(parser)
    args = parser.parse_args(argv)
    figures = Figures("rnn-accuracy", config={"steps": args.steps, "batch": args.batch})
    d = RnnParams()
    print(
        f"{args.steps} steps, batch {args.batch}, int16 x and h ({d.state_frac} fraction bits), "
        f"c {d.cell_bits} bits ({d.cell_frac} fraction bits)"
    )
    print(
        f"{'cell':>5} {'X':>5} {'H':>5} {'weights':>8} {'w scale':>8} {'w_frac':>6}"
        f" {'h max':>9} {'h mean':>9} {'c max':>9} {'c mean':>9}"
    )
    worst = {16: 0.0, 8: 0.0}
    worst_mean = {16: 0.0, 8: 0.0}
    for cell, x_size, h_size in [("lstm", *s) for s in SHAPES] + [("gru", *s) for s in SHAPES]:
        for scale in (1.0, 3.0):
            torch.manual_seed(0)
            kind = torch.nn.GRU if cell == "gru" else torch.nn.LSTM
            module = kind(x_size, h_size)
            with torch.no_grad():
                for p in module.parameters():
                    p.mul_(scale)
            x = np.random.default_rng(1).standard_normal((args.steps, args.batch, x_size))
            for bits in (16, 8):
                params = RnnParams(cell=cell, max_input=x_size, max_hidden=h_size, weight_bits=bits)
                e = lstm_accuracy(params, module, x)
                worst[bits] = max(worst[bits], e["h_max"])
                worst_mean[bits] = max(worst_mean[bits], e["h_mean"])
                print(
                    f"{cell:>5} {x_size:>5} {h_size:>5} {'int' + str(bits):>8} {scale:>8g}"
                    f" {e['w_frac']:>6}"
                    f" {e['h_max']:>9.2e} {e['h_mean']:>9.2e} {e['c_max']:>9.2e}"
                    f" {e['c_mean']:>9.2e}"
                )
    print(
        f"worst max abs error on h: int16 weights {worst[16]:.2e}, int8 weights "
        f"{worst[8]:.2e} (target < 0.02)"
    )
    note = (
        f"LSTM and GRU, {len(SHAPES)} shapes, weight scales 1 and 3, {args.steps} steps, "
        f"batch {args.batch}, vs torch float32"
    )
    for bits in (16, 8):
        figures.add(
            f"max abs error on h, int{bits} weights",
            worst[bits],
            "abs",
            reference=0.02 if bits == 16 else None,
            reference_label="target" if bits == 16 else "",
            higher_is_better=False,
            design="rnn",
            note=note,
        )
        figures.add(
            f"worst mean abs error on h, int{bits} weights",
            worst_mean[bits],
            "abs",
            higher_is_better=False,
            design="rnn",
            note=note,
        )
    figures.write(args.figures)
    return 0 if worst[16] < 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
