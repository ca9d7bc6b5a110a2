"""SpMM graph readers: seconds and peak memory to read a 1 M-entry graph, against scipy.io.mmread.

Writes, into a temporary folder, three files of one random graph, optionally gzip'ed too:

* Matrix Market (``real general``, ``--entries`` entries ``i j value``, values as Python writes
  floats, 17 significant digits);
* an edge list (SNAP style: a ``#`` header, ``u<TAB>v`` lines, 0-based integer ids), the same
  entries without values;
* METIS (``n m`` then each vertex's neighbours): the undirected graph of those edges, each
  listed on both ends, self loops dropped;

and reads each into a CSR with

* ``tandem``: ``tandem.mappings.spmm.readers.read_graph`` (what ``tandem map spmm`` runs), its
  blocks checked on ``--threads`` threads (by default tandem's budget: the cores no other
  process runs on, as ``tandem map spmm`` takes them);
* ``mmread``: ``scipy.io.mmread(path).tocsr()``, fast_matrix_market's C++ parser on every core.
  For the Matrix Market file the very file; for the edge list and METIS, which mmread does not
  read, the same integers written as a Matrix Market ``pattern general`` file (the edges once,
  then made symmetric with ``m + m.T``; METIS's lines, both ends of every edge), so that both
  readers parse as many numbers and build the same CSR.

Every read runs ``--repeat`` times, each in a fresh Python process that has imported the readers
and read a tiny file of the same kind first (so imports and first-use costs are not counted);
tandem's and mmread's reads alternate, so that both see the same load on a shared machine.
Seconds are wall-clock (``time.perf_counter``) around the one call, the median of the runs
(the minimum is printed too). ``x mmread`` is tandem's median over mmread's. Memory is the
**peak resident set added by the read**: the process's ``VmHWM`` is reset
(``/proc/self/clear_refs``) right before the read and read back after it, minus the resident
set before it. Resident memory rather than ``tracemalloc``: it counts what the C++ parser
(fast_matrix_market) and numpy allocate outside Python's allocator, and not the pages numpy
reserves with ``calloc`` but never touches; it is what a user's machine has to have. Where
``/proc`` is missing, ``ru_maxrss`` (the peak of the whole process) stands in.

Targets: every format within 2x of mmread's time, at most 200 MB.

    python benchmarks/graph_reader_speed.py [--entries 1000000] [--repeat 5] [--gzip]
        [--threads N] [--figures PATH]
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

TARGET_RATIO, TARGET_MB = 2.0, 200.0


def _status(field: str) -> float:
    """A ``/proc/self/status`` memory field in MB (0 where the file does not exist)."""
    return _vm(field) * 1024


def _reader(kind: str, reader: str, threads: int):
    import scipy.io
    from tandem.mappings.spmm.readers import read_graph

    if reader == "tandem":
        return lambda path: read_graph(path, threads=threads)
    if kind != "edges":
        return lambda path: scipy.io.mmread(path).tocsr()

    def symmetric(path):
        # An edge list is undirected: tandem's CSR holds both directions, each edge once.
        matrix = scipy.io.mmread(path).tocsr()
        matrix = (matrix + matrix.T).tocsr()
        matrix.data[:] = 1.0
        return matrix

    return symmetric


def one(kind: str, reader: str, path: str, tiny: str, threads: str) -> dict:
    """One read in this (fresh) process: seconds, CPU seconds, peak MB added, non-zeros."""
    import gc

    from tandem.host.common.threads import thread_budget

    threads = int(threads) if threads != "budget" else thread_budget()
    read = _reader(kind, reader, threads)
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
    return {
        "seconds": seconds,
        "cpu": cpu,
        "peak_mb": peak,
        "nnz": int(matrix.nnz),
        "threads": threads if reader == "tandem" else os.cpu_count(),
    }


def _write_lines(path: Path, head: str, lines) -> None:
    with open(path, "w") as out:
        out.write(head)
        out.writelines(lines)


def _pattern(path: Path, n: int, rows, cols) -> None:
    """A Matrix Market ``pattern general`` file of 1-based ``rows``, ``cols``."""
    _write_lines(
        path,
        f"%%MatrixMarket matrix coordinate pattern general\n{n} {n} {len(rows)}\n",
        (f"{r} {c}\n" for r, c in zip(rows.tolist(), cols.tolist())),
    )


def write_files(folder: Path, entries: int, seed: int, gz: bool) -> dict:
    """The benchmark's files: ``{name: (kind, path, tiny path, mmread's path, its tiny)}``."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    n = max(entries // 20, 10)
    rows, cols = rng.integers(1, n + 1, (2, entries))
    values = rng.standard_normal(entries)
    mtx = folder / "graph.mtx"
    _write_lines(
        mtx,
        f"%%MatrixMarket matrix coordinate real general\n% benchmark\n{n} {n} {entries}\n",
        (f"{r} {c} {v!r}\n" for r, c, v in zip(rows.tolist(), cols.tolist(), values.tolist())),
    )
    edges = folder / "graph.txt"
    _write_lines(
        edges,
        f"# benchmark edge list\n# Nodes: {n} Edges: {entries}\n# FromNodeId\tToNodeId\n",
        (f"{u}\t{v}\n" for u, v in zip((rows - 1).tolist(), (cols - 1).tolist())),
    )
    edges_mtx = folder / "edges.mtx"
    _pattern(edges_mtx, n, rows, cols)
    graph = sp.csr_matrix((np.ones(entries), (rows - 1, cols - 1)), shape=(n, n))
    graph = (graph + graph.T).tocsr()
    graph.setdiag(0)
    graph.eliminate_zeros()
    metis = folder / "graph.graph"
    neighbours = (graph.indices + 1).tolist()
    ptr = graph.indptr.tolist()
    _write_lines(
        metis,
        f"% benchmark\n{n} {graph.nnz // 2}\n",
        (" ".join(map(str, neighbours[ptr[i] : ptr[i + 1]])) + "\n" for i in range(n)),
    )
    metis_mtx = folder / "metis.mtx"
    coo = graph.tocoo()
    _pattern(metis_mtx, n, coo.row + 1, coo.col + 1)
    tiny_mtx = folder / "tiny.mtx"
    tiny_mtx.write_text("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 2 0.5\n2 1 1.5\n")
    tiny_pattern = folder / "tiny_pattern.mtx"
    tiny_pattern.write_text("%%MatrixMarket matrix coordinate pattern general\n2 2 2\n1 2\n2 1\n")
    tiny_edges = folder / "tiny.txt"
    tiny_edges.write_text("# tiny\n0\t1\n1\t2\n")
    tiny_metis = folder / "tiny.graph"
    tiny_metis.write_text("3 2\n2\n1 3\n2\n")
    files = {
        "Matrix Market": ("mtx", mtx, tiny_mtx, mtx, tiny_mtx),
        "edge list": ("edges", edges, tiny_edges, edges_mtx, tiny_pattern),
        "METIS": ("metis", metis, tiny_metis, metis_mtx, tiny_pattern),
    }
    if gz:
        for name, (kind, path, tiny, base, base_tiny) in list(files.items()):
            for plain in {path, base}:
                packed = plain.with_name(plain.name + ".gz")
                packed.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=6, mtime=0))
            files[f"{name}, gzip"] = (
                kind,
                path.with_name(path.name + ".gz"),
                tiny,
                base.with_name(base.name + ".gz"),
                base_tiny,
            )
    return files


def _runs(kind: str, reader: str, path: Path, tiny: Path, threads: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--one", kind, reader, str(path), str(tiny), threads],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    from tandem.bench import Figures, add_benchmark_options

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000, help="entries (lines) a file")
    parser.add_argument("--repeat", type=int, default=5, help="reads of each file and reader")
    parser.add_argument("--gzip", action="store_true", help="also read the files gzip'ed")
    parser.add_argument(
        "--threads",
        default="budget",
        help="tandem's threads (default: its budget, the cores no other process runs on, as "
        "tandem map spmm takes them)",
    )
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    add_benchmark_options(parser, seed=True, json_lines="print one JSON line per read")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(*args.one)))
        return 0
    if args.entries < 1 or args.repeat < 1:
        parser.error("--entries and --repeat must be at least 1")
    if args.threads != "budget" and not (args.threads.isdigit() and int(args.threads) >= 1):
        parser.error(f"--threads must be a positive integer, not {args.threads!r}")
    figures = Figures("graph-reader-speed", config={"entries": args.entries, "repeat": args.repeat})
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="tandem-readers-") as folder:
        files = write_files(Path(folder), args.entries, args.seed, args.gzip)
        print(
            f"{'file':<21}{'MB':>6}  {'reader':<8}{'s (median)':>11}{'s (min)':>9}{'CPU s':>7}"
            f"{'peak MB':>9}{'x mmread':>10}{'x 200 MB':>10}{'threads':>9}"
        )
        for name, (kind, path, tiny, base, base_tiny) in files.items():
            runs = {"tandem": [], "mmread": []}
            for _ in range(args.repeat):
                for reader, (where, small) in (
                    ("tandem", (path, tiny)),
                    ("mmread", (base, base_tiny)),
                ):
                    runs[reader].append(_runs(kind, reader, where, small, args.threads))
                    if args.json:
                        print(json.dumps({"file": name, "reader": reader, **runs[reader][-1]}))
            threads = sorted({r["threads"] for r in runs["tandem"]})  # the budget may vary
            median = {
                reader: statistics.median(r["seconds"] for r in got) for reader, got in runs.items()
            }
            note = (
                f"{args.entries} entries, {path.stat().st_size / 1e6:.1f} MB, tandem on "
                f"{'/'.join(map(str, threads))} threads, median of "
                f"{args.repeat} fresh processes, load average {os.getloadavg()[0]:.1f} on "
                f"{os.cpu_count()} cores"
            )
            for reader, where in (("tandem", path), ("mmread", base)):
                seconds = median[reader]
                fastest = min(r["seconds"] for r in runs[reader])
                cpu = statistics.median(r["cpu"] for r in runs[reader])
                peak = statistics.median(r["peak_mb"] for r in runs[reader])
                ratio = seconds / median["mmread"]
                used = "/".join(str(t) for t in sorted({r["threads"] for r in runs[reader]}))
                print(
                    f"{name:<21}{where.stat().st_size / 1e6:>6.1f}  {reader:<8}{seconds:>11.3f}"
                    f"{fastest:>9.3f}{cpu:>7.2f}{peak:>9.0f}{ratio:>10.2f}{peak / TARGET_MB:>10.2f}"
                    f"{used:>9}"
                )
                for what, value, unit, target in (
                    ("seconds", seconds, "s", None),
                    ("peak memory", peak, "MB", TARGET_MB),
                ):
                    figures.add(
                        f"{name} read, {reader}, {what}",
                        value,
                        unit,
                        design="sparse-engine",
                        higher_is_better=False,
                        note=note,
                        **(
                            {"reference": target, "reference_label": "target"}
                            if reader == "tandem" and target
                            else {}
                        ),
                    )
            figures.add(
                f"{name} read, tandem / mmread, seconds",
                median["tandem"] / median["mmread"],
                "ratio",
                design="sparse-engine",
                higher_is_better=False,
                note=note,
                reference=TARGET_RATIO,
                reference_label="target",
            )
    print(
        "s = wall-clock seconds of the read alone (median and min of fresh processes); peak MB = "
        "resident memory the read added at its peak; x mmread = median seconds over mmread's "
        "(edge list and METIS: mmread of the same integers as a Matrix Market pattern file); "
        "x 200 MB = peak over issue 39's limit; threads = tandem's (mmread takes every core). "
        "Targets (issue 39): x mmread at most 2, x 200 MB at most 1"
    )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
