"""SpMM graph readers: seconds and peak memory to read a 1 M-entry Matrix Market file and edge list.

Writes, into a temporary folder, a Matrix Market file (``real general``, ``--entries`` entries
``i j value`` with values as Python writes floats, 17 significant digits) and an edge list
(SNAP style: a ``#`` header, ``u<TAB>v`` lines, 0-based integer ids), optionally gzip'ed too,
and reads each into a CSR with

* ``tandem``: ``tandem.mappings.spmm.readers.read_graph`` (what ``tandem map spmm`` runs);
* ``scipy``: ``scipy.io.mmread(path).tocsr()`` for the Matrix Market file (the same CSR);
  ``numpy.loadtxt`` then ``scipy.sparse.csr_matrix`` of both directions for the edge list
  (mmread reads no edge lists).

Every read runs ``--repeat`` times, each in a fresh Python process that has imported the readers
and read a tiny file of the same kind first (so imports and first-use costs are not counted).
Seconds are wall-clock (``time.perf_counter``) around the one call, the median of the runs
(the minimum is printed too: the machine is shared). Memory is the **peak resident set added by
the read**: the process's ``VmHWM`` is reset (``/proc/self/clear_refs``) right before the read
and read back after it, minus the resident set before it. Resident memory rather than
``tracemalloc``: it counts what the C++ parser (fast_matrix_market) and numpy allocate outside
Python's allocator, and not the pages numpy reserves with ``calloc`` but never touches; it is what
a user's machine has to have. Where ``/proc`` is missing, ``ru_maxrss`` (the peak of the whole
process) stands in.

Targets (issue 17): 1 M Matrix Market entries in under 0.2 s and 150 MB.

    python benchmarks/graph_reader_speed.py [--entries 1000000] [--repeat 5] [--gzip]
        [--figures PATH]
"""

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The same /proc helpers as the mapper's benchmark (this folder is on sys.path when run).
from spmm_mapper_speed import _reset_peak, _vm

TARGET_S, TARGET_MB = 0.2, 150.0


def _status(field: str) -> float:
    """A ``/proc/self/status`` memory field in MB (0 where the file does not exist)."""
    return _vm(field) * 1024


def _reader(kind: str, reader: str):
    import numpy as np
    import scipy.io
    import scipy.sparse as sp
    from tandem.mappings.spmm.readers import read_graph

    if reader == "tandem":
        return read_graph
    if kind == "mtx":
        return lambda path: scipy.io.mmread(path).tocsr()

    def loadtxt(path):
        ends = np.loadtxt(path, dtype=np.int64, comments="#")
        names, inverse = np.unique(ends, return_inverse=True)
        u, v = inverse.reshape(-1, 2).T
        n = names.size
        matrix = sp.csr_matrix((np.ones(2 * u.size), (np.r_[u, v], np.r_[v, u])), shape=(n, n))
        matrix.sum_duplicates()
        matrix.data[:] = 1.0
        return matrix

    return loadtxt


def one(kind: str, reader: str, path: str, tiny: str) -> dict:
    """One read in this (fresh) process: seconds, CPU seconds, peak MB added, non-zeros."""
    import gc

    read = _reader(kind, reader)
    read(tiny)  # imports, first-use costs, the parser's threads
    gc.collect()
    before = _status("VmRSS")
    reset = _reset_peak()
    start, cpu = time.perf_counter(), time.process_time()
    matrix = read(path)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if reset:
        peak = _status("VmHWM") - before
    else:  # ru_maxrss: the whole process's peak, in KiB on Linux
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    return {"seconds": seconds, "cpu": cpu, "peak_mb": peak, "nnz": int(matrix.nnz)}


def write_files(folder: Path, entries: int, seed: int, gz: bool) -> dict:
    """The benchmark's files: ``{name: (kind, path, tiny path)}``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = max(entries // 20, 10)
    rows, cols = rng.integers(1, n + 1, (2, entries))
    values = rng.standard_normal(entries)
    mtx = folder / "graph.mtx"
    with open(mtx, "w") as out:
        out.write(
            f"%%MatrixMarket matrix coordinate real general\n% benchmark\n{n} {n} {entries}\n"
        )
        for start in range(0, entries, 1 << 16):
            chunk = slice(start, start + (1 << 16))
            out.writelines(
                f"{r} {c} {v!r}\n"
                for r, c, v in zip(
                    rows[chunk].tolist(), cols[chunk].tolist(), values[chunk].tolist()
                )
            )
    edges = folder / "graph.txt"
    with open(edges, "w") as out:
        out.write(f"# benchmark edge list\n# Nodes: {n} Edges: {entries}\n# FromNodeId\tToNodeId\n")
        for start in range(0, entries, 1 << 16):
            chunk = slice(start, start + (1 << 16))
            out.writelines(
                f"{u}\t{v}\n"
                for u, v in zip((rows[chunk] - 1).tolist(), (cols[chunk] - 1).tolist())
            )
    tiny_mtx = folder / "tiny.mtx"
    tiny_mtx.write_text("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 2 0.5\n2 1 1.5\n")
    tiny_edges = folder / "tiny.txt"
    tiny_edges.write_text("# tiny\n0\t1\n1\t2\n")
    files = {"Matrix Market": ("mtx", mtx, tiny_mtx), "edge list": ("edges", edges, tiny_edges)}
    if gz:
        for name, (kind, path, tiny) in list(files.items()):
            packed = path.with_name(path.name + ".gz")
            packed.write_bytes(gzip.compress(path.read_bytes(), compresslevel=6, mtime=0))
            files[f"{name}, gzip"] = (kind, packed, tiny)
    return files


def main(argv=None) -> int:
    from tandem.bench import Figures, add_figures_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000, help="entries (lines) a file")
    parser.add_argument("--repeat", type=int, default=5, help="reads of each file and reader")
    parser.add_argument("--gzip", action="store_true", help="also read the files gzip'ed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON line per read")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    add_figures_option(parser)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(*args.one)))
        return 0
    if args.entries < 1 or args.repeat < 1:
        parser.error("--entries and --repeat must be at least 1")
    figures = Figures("graph-reader-speed", config={"entries": args.entries, "repeat": args.repeat})
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="tandem-readers-") as folder:
        files = write_files(Path(folder), args.entries, args.seed, args.gzip)
        print(
            f"{'file':<22}{'MB':>6}  {'reader':<8}{'s (median)':>11}{'s (min)':>9}{'CPU s':>7}"
            f"{'peak MB':>9}{'x 0.2 s':>9}{'x 150 MB':>10}"
        )
        for name, (kind, path, tiny) in files.items():
            for reader in ("tandem", "scipy"):
                runs = []
                for _ in range(args.repeat):
                    out = subprocess.run(
                        [sys.executable, __file__, "--one", kind, reader, str(path), str(tiny)],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                    if args.json:
                        print(json.dumps({"file": name, "reader": reader, **runs[-1]}))
                seconds = statistics.median(r["seconds"] for r in runs)
                fastest = min(r["seconds"] for r in runs)
                cpu = statistics.median(r["cpu"] for r in runs)
                peak = statistics.median(r["peak_mb"] for r in runs)
                label = (
                    "tandem" if reader == "tandem" else ("mmread" if kind == "mtx" else "loadtxt")
                )
                print(
                    f"{name:<22}{path.stat().st_size / 1e6:>6.1f}  {label:<8}{seconds:>11.3f}"
                    f"{fastest:>9.3f}{cpu:>7.2f}{peak:>9.0f}{seconds / TARGET_S:>9.2f}"
                    f"{peak / TARGET_MB:>10.2f}"
                )
                note = (
                    f"{args.entries} entries, {path.stat().st_size / 1e6:.1f} MB, median of "
                    f"{args.repeat} fresh processes, load average {os.getloadavg()[0]:.1f} on "
                    f"{os.cpu_count()} cores"
                )
                target = reader == "tandem" and kind == "mtx" and "gzip" not in name
                reference = {"reference_label": "target"} if target else {}
                figures.add(
                    f"{name} read, {label}, seconds",
                    seconds,
                    "s",
                    design="sparse-engine",
                    higher_is_better=False,
                    note=note,
                    **({"reference": TARGET_S} | reference if target else {}),
                )
                figures.add(
                    f"{name} read, {label}, peak memory",
                    peak,
                    "MB",
                    design="sparse-engine",
                    higher_is_better=False,
                    note=note,
                    **({"reference": TARGET_MB} | reference if target else {}),
                )
    print(
        "s = wall-clock seconds of the read alone (median and min of fresh processes); peak MB = "
        "resident memory the read added at its peak; x 0.2 s, x 150 MB = ratio to issue 17's "
        "targets for 1 M Matrix Market entries (below 1 meets them)"
    )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
