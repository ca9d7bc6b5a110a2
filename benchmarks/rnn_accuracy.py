"""Accuracy of the rnn engine (its bit-exact golden model) against float32 ``torch.nn.LSTM``.

Run: ``python benchmarks/rnn_accuracy.py [--steps 100] [--batch 4]``. For each (X, H) and
weight width, a ``torch.nn.LSTM`` (PyTorch's default initialization, seed 0, and the same
module with weights x3 so gates saturate) gives the weights through its ``state_dict``; inputs
are N(0, 1). Prints max and mean absolute error of h and c over every step, batch element and
unit. Target: max abs error on h below 0.02 with int16 state.
"""

import argparse
import sys

import numpy as np
import torch
from tandem.host.rnn import RnnParams, lstm_accuracy

SHAPES = ((32, 32), (64, 64), (128, 128), (256, 256), (24, 40))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args(argv)
    print(f"{args.steps} steps, batch {args.batch}, int16 state (12 fraction bits)")
    print(
        f"{'X':>5} {'H':>5} {'weights':>8} {'w scale':>8} {'w_frac':>6}"
        f" {'h max':>9} {'h mean':>9} {'c max':>9} {'c mean':>9}"
    )
    worst = 0.0
    for x_size, h_size in SHAPES:
        for scale in (1.0, 3.0):
            torch.manual_seed(0)
            module = torch.nn.LSTM(x_size, h_size)
            with torch.no_grad():
                for p in module.parameters():
                    p.mul_(scale)
            x = np.random.default_rng(1).standard_normal((args.steps, args.batch, x_size))
            for bits in (16, 8):
                params = RnnParams(max_input=x_size, max_hidden=h_size, weight_bits=bits)
                e = lstm_accuracy(params, module, x)
                worst = max(worst, e["h_max"])
                print(
                    f"{x_size:>5} {h_size:>5} {'int' + str(bits):>8} {scale:>8g} {e['w_frac']:>6}"
                    f" {e['h_max']:>9.2e} {e['h_mean']:>9.2e} {e['c_max']:>9.2e}"
                    f" {e['c_mean']:>9.2e}"
                )
    print(f"worst max abs error on h: {worst:.2e} (target < 0.02)")
    return 0 if worst < 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
