"""A ``torch.nn.LSTM`` (or ``torch.nn.GRU``) run through RnnDevice, on the golden model or on
the RTL.

Run: ``python examples/lstm.py [--cell lstm|gru] [--backend golden|rtl|both]
[--simulator verilator|icarus]``. The layer's ``state_dict`` is quantized to the engine's int16
weights, the inputs to int16 (12 fraction bits); the engine (built with ``cell``) runs whole
sequences from zero state. ``both`` runs on each backend, checks that h (and the LSTM's c) are
bit-identical and prints both cycle counts and wall-clock times. The error against the float32
torch module is printed too.
"""

import argparse
import sys
import time

import numpy as np
import torch
from tandem.host.rnn import RnnParams, torch_lstm_reference
from tandem.host.rnn.device import RnnDevice


def run(backend: str, args, module, x):
    params = RnnParams(
        cell=args.cell,
        batch=2,
        max_input=args.inputs,
        max_hidden=args.hidden,
        tile_rows=8,
        tile_cols=8,
    )
    options = (
        {} if backend == "golden" else {"simulator": args.simulator, "cache_dir": args.cache_dir}
    )
    with RnnDevice(params, backend=backend, **options) as lstm:
        lstm.load(module.state_dict())
        xq = lstm.quantize(x)
        lstm.run(xq[:1, : params.batch])  # warm-up; on rtl starts (builds) the simulator
        start = time.perf_counter()
        h, c = lstm.run(xq)  # c is None for a GRU
        seconds = time.perf_counter() - start
        cycles = lstm.last_cycles
        h_ref, _ = torch_lstm_reference(module, x)
        error = np.abs(lstm.to_float(h) - h_ref).max()
    print(
        f"{backend:>6}: h {h.shape}, {cycles} cycles, {seconds:.3f} s; max |h - torch| {error:.2e}"
    )
    return h, c, cycles, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", choices=("lstm", "gru"), default="lstm")
    parser.add_argument("--backend", choices=("golden", "rtl", "both"), default="golden")
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument("--cache-dir", help="simulator build cache (default ~/.cache/tandem/sim)")
    parser.add_argument("--inputs", type=int, default=16, help="X")
    parser.add_argument("--hidden", type=int, default=24, help="H")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    module = (torch.nn.GRU if args.cell == "gru" else torch.nn.LSTM)(args.inputs, args.hidden)
    x = np.random.default_rng(0).standard_normal((args.steps, args.batch, args.inputs))
    backends = ("golden", "rtl") if args.backend == "both" else (args.backend,)
    runs = {b: run(b, args, module, x) for b in backends}
    if len(runs) == 2:
        g, r = runs["golden"], runs["rtl"]
        same = np.array_equal(g[0], r[0]) and (g[1] is r[1] is None or np.array_equal(g[1], r[1]))
        print(f"bit-identical: {same}; golden is {r[3] / g[3]:.0f}x faster")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
