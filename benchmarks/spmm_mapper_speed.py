"""Mapper speed on synthetic power-law graphs: non-zeros per second and peak memory.

Each size runs in a fresh subprocess so its peak resident memory (``ru_maxrss``) is its own.
Timed stages: GCN normalization, partition + reordering, tile statistics + classification +
balancing (the "map" rate, in non-zeros of the normalized adjacency per second), and the total.

    python benchmarks/spmm_mapper_speed.py                 # 1M, 10M, 30M non-zeros
    python benchmarks/spmm_mapper_speed.py --sizes 100000000   # the 100M target (< 30 s, < 8 GB)
"""

import argparse
import json
import resource
import subprocess
import sys
import time


def one(nonzeros: int, tile: int, features: int) -> dict:
    from tandem.host.spmm import SparseEngineParams, SystolicParams
    from tandem.mappings.spmm.cost import CostModel
    from tandem.mappings.spmm.graph import gcn_normalize, partition_ordering
    from tandem.mappings.spmm.mapper import balance, baselines
    from tandem.mappings.spmm.synthetic import power_law_graph
    from tandem.mappings.spmm.tiling import tile_stats

    from tandem.boards import load_board

    graph = power_law_graph(max(nonzeros // 20, 1000), nonzeros, seed=1)
    model = CostModel(
        SystolicParams(), SparseEngineParams(tile=tile), load_board("vck190"), tile, features
    )
    t0 = time.perf_counter()
    a = gcn_normalize(graph)
    del graph
    t1 = time.perf_counter()
    ordering = partition_ordering(a, tile)
    t2 = time.perf_counter()
    stats = tile_stats(a, ordering, tile)
    plan = balance(model, stats)
    refs = baselines(model, stats)
    t3 = time.perf_counter()
    best = min(p.totals.makespan for p in refs.values())
    return {
        "nonzeros": int(a.nnz),
        "nodes": int(a.shape[0]),
        "tiles": stats.count,
        "normalize_s": round(t1 - t0, 3),
        "reorder_s": round(t2 - t1, 3),
        "map_s": round(t3 - t2, 3),
        "total_s": round(t3 - t0, 3),
        "map_rate_mnz_s": round(a.nnz / (t3 - t2) / 1e6, 1),
        "total_rate_mnz_s": round(a.nnz / (t3 - t0) / 1e6, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "speedup_vs_best_baseline": round(best / plan.totals.makespan, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000, 30_000_000])
    parser.add_argument("--tile", type=int, default=64)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.tile, args.features)))
        return 0
    print(
        f"{'non-zeros':>12}{'normalize s':>12}{'reorder s':>11}{'map s':>8}{'total s':>9}"
        f"{'map Mnz/s':>11}{'total Mnz/s':>12}{'peak GB':>9}"
    )
    for size in args.sizes:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                str(size),
                "--tile",
                str(args.tile),
                "--features",
                str(args.features),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{r['nonzeros']:>12}{r['normalize_s']:>12}{r['reorder_s']:>11}{r['map_s']:>8}"
            f"{r['total_s']:>9}{r['map_rate_mnz_s']:>11}{r['total_rate_mnz_s']:>12}"
            f"{r['peak_rss_gb']:>9}"
        )
    print(
        "peak GB includes generating the graph; rates count the normalized adjacency's "
        "non-zeros (self loops included)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
