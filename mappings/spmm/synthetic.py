"""Synthetic power-law graphs for benchmarks: fast, reproducible, any size."""

import numpy as np
import scipy.sparse as sp

__all__ = ["power_law_graph"]


def power_law_graph(nodes: int, nonzeros: int, *, skew: float = 3.0, seed: int = 0):
    """Undirected graph with about ``nonzeros`` adjacency entries and power-law degrees.

    Each edge end is ``floor(nodes * u**skew)`` for uniform ``u`` (so node ``k`` is picked with
    probability ~ ``k**(1/skew - 1)``), then the node ids are shuffled so the file order carries
    no degree information. Self loops and repeated edges are dropped, so the count comes out a
    little below ``nonzeros``. Returns a CSR matrix with unit weights (float32 to save memory).
    """
    rng = np.random.default_rng(seed)
    edges = nonzeros // 2
    ends = (nodes * rng.random(2 * edges) ** skew).astype(np.int64)
    np.minimum(ends, nodes - 1, out=ends)
    relabel = rng.permutation(nodes)
    ends = relabel[ends]
    u, v = ends[:edges], ends[edges:]
    keep = u != v
    u, v = u[keep], v[keep]
    rows = np.concatenate([u, v]).astype(np.int32)
    cols = np.concatenate([v, u]).astype(np.int32)
    del u, v, ends
    a = sp.csr_matrix(
        (np.ones(rows.size, np.float32), (rows, cols)), shape=(nodes, nodes), dtype=np.float32
    )
    a.sum_duplicates()
    a.data[:] = 1.0
    return a
