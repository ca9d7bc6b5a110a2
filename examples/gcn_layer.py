"""One GCN layer ``A_hat · (X · W)`` through SpmmDevice, on the golden model or on the RTL.

Run: ``python examples/gcn_layer.py [--backend golden|rtl|both] [--simulator verilator|icarus]``.
``X · W`` runs on torch; the aggregation runs on the two SpMM engines (``systolic`` for dense
tiles, ``sparse-engine`` for sparse ones, as the mapper decides). ``both`` runs the layer on
each backend, checks that the results are bit-identical and prints both cycle reports and
wall-clock times. The graph is a synthetic power-law graph; the engines are small (4 x 4
systolic array, 4 sparse lanes, 32 x 32 tiles) so the first RTL run builds quickly.
"""

import argparse
import sys
import time

import numpy as np
from tandem.host.spmm import SparseEngineParams, SystolicParams
from tandem.host.spmm.device import SpmmDevice
from tandem.mappings.spmm.graph import gcn_normalize
from tandem.mappings.spmm.synthetic import power_law_graph


def run(backend: str, args, a, x, w):
    options = (
        {} if backend == "golden" else {"simulator": args.simulator, "cache_dir": args.cache_dir}
    )
    with SpmmDevice(
        SystolicParams(rows=4, cols=4),
        SparseEngineParams(lanes=4, tile=32),
        features=w.shape[1],
        tile=32,
        backend=backend,
        **options,
    ) as gcn:
        mapping = gcn.load(a)
        gcn.gcn_layer(x, w, device="cpu")  # warm-up: torch; on rtl starts (builds) the simulators
        start = time.perf_counter()
        result = gcn.gcn_layer(x, w, device="cpu")
        seconds = time.perf_counter() - start
        cycles = dict(gcn.last_engine_cycles)
    reference = a @ (x @ w)
    error = np.abs(result.output - reference).max() / np.abs(reference).max()
    print(
        f"{backend:>6}: {mapping.stats.count} tiles ({int(mapping.dense.sum())} dense), "
        f"cycles {cycles}, {seconds:.3f} s; max error vs float {error:.2e} (relative)"
    )
    return result, cycles, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("golden", "rtl", "both"), default="golden")
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument("--cache-dir", help="simulator build cache (default ~/.cache/tandem/sim)")
    parser.add_argument("--nodes", type=int, default=600)
    parser.add_argument("--edges", type=int, default=4000, help="adjacency entries (about)")
    parser.add_argument("--features", type=int, default=8, help="input features of X")
    parser.add_argument("--out-features", type=int, default=6, help="F, columns of W")
    args = parser.parse_args(argv)
    a = gcn_normalize(power_law_graph(args.nodes, args.edges, seed=1))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.nodes, args.features))
    w = rng.standard_normal((args.features, args.out_features)) / np.sqrt(args.features)
    backends = ("golden", "rtl") if args.backend == "both" else (args.backend,)
    runs = {b: run(b, args, a, x, w) for b in backends}
    if len(runs) == 2:
        same = np.array_equal(runs["golden"][0].accumulators, runs["rtl"][0].accumulators)
        print(f"bit-identical: {same}; golden is {runs['rtl'][2] / runs['golden'][2]:.0f}x faster")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
