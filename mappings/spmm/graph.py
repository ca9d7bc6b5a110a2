"""GCN normalization, the three-way partition by degree heterogeneity, and node reordering.

Partition (H-GCN splits the graph "by its heterogeneity"; tandem's rule, measured in
``benchmarks/spmm_mapping.py``): with ``d`` the node degrees of ``A + I`` and ``mean`` their
mean,

* **hubs**: ``d >= hub_factor * mean`` (default 4x). Their rows and columns hold the heavy tail
  of a power-law graph; put next to each other (by degree, largest first) they form the dense
  tiles of the top-left corner and dense strips along the top and the left.
* **tail**: ``d <= tail_factor * mean`` (default 1/4, at least degree 2 = one edge plus the
  self loop). Placed next to their first already-placed neighbour, so a hub's leaves share
  its columns.
* **body**: the rest, ordered by reverse Cuthill-McKee on the body's own subgraph (a band
  around the diagonal for meshes, which are all body).

Each subgraph starts on a tile boundary (the node order is padded with empty positions), so
every tile belongs to one (row subgraph, column subgraph) pair.
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from .parallel import DEFAULT_THREADS, background, run_all
from .readers import GraphError

__all__ = [
    "SUBGRAPHS",
    "Ordering",
    "gcn_normalize",
    "identity_ordering",
    "normalize_in_place",
    "partition_ordering",
    "symmetric_pattern",
    "with_self_loops",
]

SUBGRAPHS = ("hubs", "body", "tail")


def gcn_normalize(
    adjacency: sp.spmatrix, *, source: str = "graph", threads: int = DEFAULT_THREADS
) -> sp.csr_matrix:
    """``D_r^-1/2 (A + I) D_c^-1/2`` (Kipf and Welling), CSR, float64, canonical.

    ``D_r``/``D_c`` are the row/column sums of ``A + I`` (equal for an undirected graph).
    A node whose degree is not positive (possible with negative edge weights) is an error
    naming ``source`` and the node. ``threads``: the row and column sums, then blocks of
    rows, run on that many threads (the same bits with any number).
    """
    a = with_self_loops(adjacency, source=source)
    normalize_in_place(a, source=source, threads=threads)
    return a


def with_self_loops(adjacency: sp.spmatrix, *, source: str = "graph") -> sp.csr_matrix:
    """``A + I``, CSR, float64, canonical, explicit zeros removed: the pattern of the GCN
    adjacency, which is all the mapper reads (:func:`normalize_in_place` scales it)."""
    a = sp.csr_matrix(adjacency, dtype=np.float64)
    n = a.shape[0]
    if n == 0:
        raise GraphError(f"{source}: empty graph (no nodes)")
    a = (a + sp.identity(n, dtype=np.float64, format="csr")).tocsr()
    a.sum_duplicates()
    a.eliminate_zeros()
    return a


def normalize_in_place(
    a: sp.csr_matrix, *, source: str = "graph", threads: int = DEFAULT_THREADS
) -> None:
    """Scale ``A + I`` (from :func:`with_self_loops`) to ``D_r^-1/2 (A + I) D_c^-1/2`` in
    place; only ``a.data`` changes, so the pattern can be read meanwhile."""
    # Row sums (a reduceat per row) and column sums (scipy's scatter over the non-zeros, in
    # row order) are computed exactly as scipy does, each in one piece: their summation
    # order, hence their bits, stay those of ``a.sum(axis=...)``.
    d_row, d_col = run_all(
        threads,
        [
            lambda: np.asarray(a.sum(axis=1)).ravel(),
            lambda: np.asarray(a.sum(axis=0)).ravel(),
        ],
    )
    for name, d in (("row", d_row), ("column", d_col)):
        bad = np.flatnonzero(~(d > 0))
        if bad.size:
            raise GraphError(
                f"{source}: node {int(bad[0])} has {name} degree {d[bad[0]]:g} after adding the "
                "self loop; GCN normalization needs positive degrees"
            )
    # The power is taken once per node, not once per non-zero (the same IEEE operation, so
    # the same bits); the product is applied in place, a block of rows at a time, so the
    # scale factors never take more than a few MB. Blocks are independent: each thread
    # takes a run of them.
    r_scale = d_row**-0.5
    c_scale = d_col**-0.5
    counts = np.diff(a.indptr)
    blocks = list(_row_blocks(a.indptr, 1 << 22 if threads == 1 else 1 << 20))

    def scale(first, last):
        for lo, hi in blocks[first:last]:
            start, stop = a.indptr[lo], a.indptr[hi]
            factor = np.repeat(r_scale[lo:hi], counts[lo:hi])
            factor *= c_scale[a.indices[start:stop]]
            a.data[start:stop] *= factor

    run_all(threads, [lambda i=i: scale(i, i + 1) for i in range(len(blocks))])


def _row_blocks(indptr: np.ndarray, block: int = 1 << 22):
    """``(first row, end row)`` ranges of about ``block`` non-zeros each (whole rows)."""
    nnz = int(indptr[-1])
    cuts = np.searchsorted(indptr, np.arange(block, nnz, block), side="right") - 1
    edges = np.unique(np.r_[0, cuts, indptr.size - 1])
    return zip(edges[:-1].tolist(), edges[1:].tolist())


@dataclass(frozen=True)
class Ordering:
    """Where every node goes in the tiled matrix.

    Attributes
    ----------
    position
        ``(n,)`` new index of each node.
    size
        Rows (and columns) of the reordered matrix, padding included.
    node_class
        ``(n,)`` subgraph of each node: index into :data:`SUBGRAPHS`, or all 1 (body) for
        no partition.
    bounds
        ``(4,)`` first padded position of hubs, body, tail, and the end (tile multiples when
        partitioned).
    method
        ``"partition"`` or ``"none"``.
    """

    position: np.ndarray
    size: int
    node_class: np.ndarray
    bounds: np.ndarray
    method: str

    def order(self) -> np.ndarray:
        """``(size,)`` node at each position, -1 for padding."""
        order = np.full(self.size, -1, np.int64)
        order[self.position] = np.arange(self.position.size)
        return order


def identity_ordering(n: int) -> Ordering:
    """The file's own node order, no partition, no padding."""
    return Ordering(
        position=np.arange(n, dtype=np.int64),
        size=n,
        node_class=np.ones(n, np.int8),
        bounds=np.array([0, 0, n, n]),
        method="none",
    )


def classify_nodes(
    adjacency: sp.csr_matrix, *, hub_factor: float = 4.0, tail_factor: float = 0.25
) -> np.ndarray:
    """Subgraph of each node (0 hubs, 1 body, 2 tail) from its degree in ``adjacency``."""
    degree = np.diff(adjacency.indptr)
    mean = degree.mean()
    cls = np.ones(degree.size, np.int8)
    cls[degree >= hub_factor * mean] = 0
    cls[(degree <= max(tail_factor * mean, 2)) & (cls != 0)] = 2
    return cls


def symmetric_pattern(adjacency: sp.csr_matrix, *, threads: int = DEFAULT_THREADS) -> sp.csr_matrix:
    """Pattern of ``A + A^T`` (int8 ones), CSR, canonical.

    The GCN adjacency of an undirected graph is symmetric already; that is checked exactly
    (the entries below the diagonal, transposed and sorted, equal those above it: one SIMD
    sort of half the keys) and the pattern reused, which costs a fraction of building the
    transpose and the sum.
    """
    a = adjacency
    pattern = sp.csr_matrix((np.ones(a.nnz, np.int8), a.indices, a.indptr), shape=a.shape)
    if a.has_canonical_format and _is_symmetric(pattern, threads=threads):
        return pattern
    sym = (pattern + pattern.T).tocsr()
    sym.sum_duplicates()
    return sym


def _is_symmetric(pattern: sp.csr_matrix, *, threads: int = 1) -> bool:
    """Whether a canonical CSR pattern equals its transpose (exact).

    The diagonal is its own transpose; the pattern is symmetric exactly when the entries below
    it, transposed and sorted, are the entries above it, which canonical CSR lists sorted
    already. Packed ``(row, column)`` 64-bit keys, one SIMD sort of half the non-zeros; no
    random access (a gather or a scatter over the nodes costs more than the sort). With two
    threads the two sides are built side by side (the sort beside the other side's keys).
    """
    n = pattern.shape[0]
    indices = pattern.indices
    row = np.repeat(np.arange(n, dtype=indices.dtype), np.diff(pattern.indptr))
    upper, lower = run_all(threads, [lambda: indices > row, lambda: indices < row])
    if np.count_nonzero(upper) != np.count_nonzero(lower):
        return False  # cheap, common rejection
    b = max(1, (n - 1).bit_length())

    def keys(first, second, mask, sort):
        key = first[mask].astype(np.int64)
        key <<= b
        key |= second[mask]
        if sort:
            key.sort()
        return key

    below, above = run_all(
        threads,
        [lambda: keys(indices, row, lower, True), lambda: keys(row, indices, upper, False)],
    )
    return bool(np.array_equal(below, above))


def _induced_subgraph(pattern: sp.csr_matrix, nodes: np.ndarray) -> sp.csr_matrix:
    """``pattern[nodes][:, nodes]`` for sorted ``nodes``: the same canonical CSR, built with one
    gather and one compress instead of scipy's general column indexing, which is slower."""
    rows = pattern[nodes]
    renumber = np.full(pattern.shape[1], -1, np.int32)
    renumber[nodes] = np.arange(nodes.size, dtype=np.int32)
    column = renumber[rows.indices]
    keep = column >= 0
    # Kept entries before each row start; increasing ``nodes`` keep each row's columns sorted.
    before = np.zeros(keep.size + 1, np.int32 if keep.size < 1 << 31 else np.int64)
    np.cumsum(keep, out=before[1:])
    indptr = before[rows.indptr]
    data = np.ones(int(before[-1]), pattern.dtype)
    return sp.csr_matrix((data, column[keep], indptr), shape=(nodes.size, nodes.size))


def partition_ordering(
    adjacency: sp.csr_matrix,
    tile: int,
    *,
    hub_factor: float = 4.0,
    tail_factor: float = 0.25,
    threads: int = DEFAULT_THREADS,
) -> Ordering:
    """Three-way partition and the order that concentrates non-zeros (see module docstring).

    ``adjacency`` is the normalized (or any) square CSR matrix; only its pattern is read.
    ``threads``: with more than one, the exact symmetry check (:func:`symmetric_pattern`)
    runs beside the steps that assume it passes (classes, the body's subgraph, the tails'
    rows), which are redone on ``A + A^T`` in the rare case it fails. Reverse Cuthill-McKee
    is scipy's, in one thread. The order is the same with any number of threads.
    """
    n = adjacency.shape[0]
    a = adjacency
    pattern = sp.csr_matrix((np.ones(a.nnz, np.int8), a.indices, a.indptr), shape=a.shape)

    def parts(sym):
        cls = classify_nodes(sym, hub_factor=hub_factor, tail_factor=tail_factor)
        degree = np.diff(sym.indptr)
        hubs = np.flatnonzero(cls == 0)
        hubs = hubs[np.lexsort((hubs, -degree[hubs]))]
        body = np.flatnonzero(cls == 1)
        inner = _induced_subgraph(sym, body) if body.size else None
        tail = np.flatnonzero(cls == 2)
        return cls, hubs, body, inner, tail, sym[tail] if tail.size else None

    found = None
    if a.has_canonical_format:
        check = background(threads, lambda: _is_symmetric(pattern))
        if threads > 1 or check.result():
            found = parts(pattern)
        if not check.result():
            found = None
    if found is None:
        sym = (pattern + pattern.T).tocsr()
        sym.sum_duplicates()
        found = parts(sym)
    pattern = None  # the check is done with it
    cls, hubs, body, inner, tail, sub = found
    if body.size:
        body = body[reverse_cuthill_mckee(inner, symmetric_mode=True)]
    del inner

    def padded(count):
        return -(-count // tile) * tile

    bounds = np.cumsum([0, padded(hubs.size), padded(body.size), padded(tail.size)])
    position = np.empty(n, np.int64)
    position[hubs] = bounds[0] + np.arange(hubs.size)
    position[body] = bounds[1] + np.arange(body.size)
    if tail.size:
        # Key of a tail node: the smallest position among its hub/body neighbours, so leaves
        # line up under the columns of what they hang off; tails among themselves come last.
        placed = np.full(n, np.iinfo(np.int64).max, np.int64)
        placed[hubs] = position[hubs]
        placed[body] = position[body]
        lengths = np.diff(sub.indptr)
        neighbor_pos = placed[sub.indices]
        key = np.full(tail.size, np.iinfo(np.int64).max, np.int64)
        nonempty = np.flatnonzero(lengths > 0)
        if nonempty.size:
            key[nonempty] = np.minimum.reduceat(neighbor_pos, sub.indptr[nonempty])
        tail = tail[np.lexsort((tail, key))]
        position[tail] = bounds[2] + np.arange(tail.size)
    return Ordering(
        position=position, size=int(bounds[3]), node_class=cls, bounds=bounds, method="partition"
    )
