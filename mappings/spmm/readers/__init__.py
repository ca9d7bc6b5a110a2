"""Graph and sparse-matrix readers: Matrix Market, edge lists, METIS ``.graph``, scipy ``.npz``.

Every reader returns a square ``scipy.sparse.csr_matrix`` (float64, duplicates summed) and
raises :class:`GraphError` (a :class:`~tandem.errors.UserError`: one line, exit status 2)
naming the file and, for text formats, the line: malformed lines, indices out of range, NaN or
infinite values, empty graphs, binary or non-UTF-8 text, broken gzip data, sizes beyond the
limits below. Text files may be gzip-compressed (recognized by their first bytes, whatever
their name).

Limits, from what the mapper holds in its 8 GB target (``docs/spmm.md``, "Mapper speed": 4.4 GB
for 104.6 M non-zeros, i.e. about 45 bytes a non-zero, and about 130 bytes a node measured with
16 M mostly isolated nodes): :data:`MAX_NONZEROS` = 2**27 (134 M non-zeros, about 6 GB in the
mapper) and :data:`MAX_NODES` = 2**25 (33.5 M nodes, about 4.4 GB). A file whose header
promises more is refused before anything is allocated.

Two paths read a text file:

* **Fast**: the file is read in blocks of about 1 MiB of whole lines. Each block is checked in
  numpy (no per-line Python; see "fast-path block checks" below): one pass over every byte
  finds the bytes that are not digits, and the rest runs on that skeleton. Only the standard
  layout passes: one space (or, in edge lists, one tab) between fields, integers where indices
  go, numbers written so that C and Python read them alike. Checked blocks are parsed without
  a Python loop: Matrix Market by ``scipy.io.mmread`` (fast_matrix_market; a plain file with a
  standard header by its name, anything else through a stream with a canonical header), integer
  edge lists and METIS by numpy (eight digits a 64-bit word, at the skeleton's positions),
  weighted edge lists by ``numpy.fromstring``. The checks come before mmread, not after: what it
  returns gives no sign of what it misread (``1.0abc`` as 1.0, ``1 2 3 4`` as ``1 2 3``, ``1 2.5``
  as row 1, column 2, value .5), and a NUL byte after a value crashes it. With ``threads`` > 1
  the blocks are checked (and parsed) on that many threads: numpy releases the GIL in its
  loops. Memory: a few blocks, and the arrays of the result. A pipe is read once into memory
  (the walk may need it again).
* **Walk**: anything the fast path does not accept (other spacing, comments between entries,
  ``1.0`` as an index, NaN, a bad token, a lying header, ...) is read again by walking its
  lines, block by block, with Python's ``float``/``int`` on every token: it either names the
  first bad line or returns the same matrix (values parsed the same way, to the bit). Slower
  (about 1 s a million entries) but its memory is bounded the same way.
"""

from pathlib import Path

import scipy.sparse as sp

from ..parallel import check_threads
from .edges import read_edge_list
from .limits import MAX_NODES, MAX_NONZEROS, GraphError
from .metis import read_metis
from .mtx import read_mtx
from .npz import read_npz

__all__ = [
    "FORMATS",
    "MAX_NODES",
    "MAX_NONZEROS",
    "GraphError",
    "read_edge_list",
    "read_graph",
    "read_metis",
    "read_mtx",
    "read_npz",
]

FORMATS = ("mtx", "edges", "metis", "npz")


def _detect(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = name.rsplit(".", 1)[-1] if "." in name else ""
    if suffix == "mtx":
        return "mtx"
    if suffix == "npz":
        return "npz"
    if suffix in ("graph", "mgraph", "metis"):
        return "metis"
    return "edges"


def read_graph(path, fmt: str | None = None, *, threads: int = 1) -> sp.csr_matrix:
    """Read a graph or sparse matrix; ``fmt`` is one of :data:`FORMATS` or None (by suffix);
    ``threads`` check and parse the blocks of a text file.

    Suffixes: ``.mtx`` Matrix Market, ``.npz`` scipy sparse, ``.graph``/``.mgraph``/``.metis``
    METIS, anything else an edge list (optionally ``.gz`` on text formats).
    """
    path = Path(path)
    if fmt is None:
        fmt = _detect(path)
    readers = {"mtx": read_mtx, "edges": read_edge_list, "metis": read_metis}
    if fmt == "npz":
        return read_npz(path)
    if fmt not in readers:
        raise GraphError(f"unknown graph format {fmt!r}; known: {', '.join(FORMATS)}")
    return readers[fmt](path, threads=check_threads(threads))
