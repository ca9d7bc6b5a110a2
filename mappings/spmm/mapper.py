"""Classification of tiles (empty / sparse / dense), load balancing, baselines, outputs.

Balancing. A dense tile costs the systolic array the same ``D`` cycles whatever it holds; a
sparse tile ``i`` costs the sparse engine ``s_i``. For a given number ``k`` of dense tiles the
systolic array takes ``k * D`` and the sparse engine is fastest when the ``k`` tiles it gives
away are its ``k`` most expensive ones, so the best plan is a prefix of the tiles sorted by
``s_i``. The mapper evaluates the makespan (largest of systolic, sparse and memory cycles,
:class:`~.cost.Totals`) of every prefix ``k = 0 .. m`` at once with cumulative sums, for two
orders (by sparse cost and by density), and keeps the best. It then evaluates the three
baselines with the same cost model (all dense, all sparse, fixed density threshold) and never
returns a plan worse than the best of them: the result is at least as good by construction.
"""

import io
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .cost import CostModel, TileCosts, Totals
from .graph import (
    SUBGRAPHS,
    Ordering,
    identity_ordering,
    normalize_in_place,
    partition_ordering,
    with_self_loops,
)
from .parallel import DEFAULT_THREADS, background, run_all
from .tiling import TileStats, tile_stats

__all__ = [
    "Mapping",
    "balance",
    "baselines",
    "map_adjacency",
    "map_graph",
    "map_ordered",
    "npz_bytes",
    "order_nodes",
    "plan_all",
    "write_mapping",
]

EMPTY, SPARSE, DENSE = 0, 1, 2


@dataclass(frozen=True)
class Plan:
    """One assignment of the non-empty tiles and its predicted cycles."""

    name: str
    dense: np.ndarray
    totals: Totals
    extra: dict = field(default_factory=dict)


_PREFIX_CHUNK = 1 << 16
"""Prefixes evaluated at once by :func:`_best_prefix_span`: its buffers stay in cache."""


def _best_prefix_span(
    model: CostModel,
    s: np.ndarray,
    b: np.ndarray,
    head: np.ndarray,
    m: int | None = None,
    sums: tuple[int, int] | None = None,
    *,
    chunk: int = _PREFIX_CHUNK,
) -> tuple[int, int]:
    """First best ``(makespan, k)`` of sending the first ``k`` tiles of an order to the
    systolic array, over every ``k``.

    ``s`` and ``b`` are every tile's sparse-engine cycles and bytes (``sums``: their totals,
    if known); ``head`` is the order, or its first part when the order continues past it
    (``m`` tiles in all, default ``head.size``): then ``k`` runs over ``0 .. head.size``.
    The makespans are evaluated ``chunk`` prefixes at a time (the prefix sums carried from
    one chunk to the next), so the buffers stay in cache on tens of millions of tiles; the
    integer and float operations per ``k`` are the same whatever the chunk.
    """
    m = head.size if m is None else m
    s_sum, b_sum = (int(s.sum()), int(b.sum())) if sums is None else sums
    r = head.size
    dense_cycles, dense_bytes = model.dense_cycles, model.dense_bytes
    fill_sparse, fill_systolic = model.sparse.fill_cycles, model.systolic.fill_cycles
    size = min(chunk, r + 1)
    span = np.empty(size, np.int64)
    work = np.empty(size, np.int64)
    memory = np.empty(size, np.float64)
    before_s = before_b = 0  # over head[:lo]: sum of s, sum of (b - dense bytes)
    best = None
    for lo in range(0, r + 1, chunk):  # the prefixes k = lo .. hi - 1
        hi = min(lo + chunk, r + 1)
        n = hi - lo
        taken = head[lo : hi - 1]  # the tiles that prefixes lo + 1 .. hi - 1 add
        here, spare, ahead = span[:n], work[:n], memory[:n]
        # Sparse-engine cycles of the tiles it keeps: total - (prefix sum in this order).
        here[0] = before_s
        np.take(s, taken, out=here[1:])
        np.cumsum(here, out=here)
        if hi <= r:  # carried to the next chunk: its first prefix also holds head[hi - 1]
            before_s = int(here[-1]) + int(s[head[hi - 1]])
        np.subtract(s_sum, here, out=here)
        if lo < m:
            here[: min(n, m - lo)] += fill_sparse  # an idle engine pays no fill
        np.multiply(np.arange(lo, hi, dtype=np.int64), dense_cycles, out=spare)
        spare[1 if lo == 0 else 0 :] += fill_systolic
        np.maximum(here, spare, out=here)
        # Bytes moved: total - sum over the first k of (sparse bytes - dense bytes).
        spare[0] = before_b
        np.take(b, taken, out=spare[1:])
        spare[1:] -= dense_bytes
        np.cumsum(spare, out=spare)
        if hi <= r:
            before_b = int(spare[-1]) + int(b[head[hi - 1]]) - dense_bytes
        np.subtract(b_sum, spare, out=spare)
        np.divide(spare, model.bytes_per_cycle, out=ahead)
        np.ceil(ahead, out=ahead)
        # Cycle counts are far below 2**53, so the float maximum is exact.
        np.maximum(here, ahead, out=here, casting="unsafe")
        k = int(np.argmin(here))
        if best is None or here[k] < best[0]:
            best = (int(here[k]), lo + k)
    return best


def _first_true(lo: int, hi: int, pred) -> int:
    """Smallest ``j`` in ``[lo, hi]`` with ``pred(j)`` (monotone: False then True), else hi + 1."""
    hi += 1
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _best_in_uniform_tail(model: CostModel, r: int, u: int, su: int, bu: int) -> tuple[int, int]:
    """First best ``(makespan, k)`` for ``k = r + 1 .. r + u`` when the last ``u`` tiles of the
    order (after ``r``) are uniform: each costs the sparse engine ``su`` cycles and ``bu``
    bytes.

    After the head the sparse cycles fall linearly (to 0 when no tile is left), the systolic
    cycles rise linearly, and the memory bound is the ceiling of a linear function: each is
    monotone, so the makespan falls until the rising terms overtake the falling ones and then
    rises. Two binary searches find the first minimum exactly, with the same integer and
    float operations as :func:`_best_prefix_span`.
    """
    left_s = u * su  # sparse cycles of the tail
    moved_r = u * bu + r * model.dense_bytes  # bytes moved when the head is dense
    d, db, bpc = model.dense_cycles, model.dense_bytes, model.bytes_per_cycle
    fill_s, fill_d = model.sparse.fill_cycles, model.systolic.fill_cycles

    def sparse(j):
        return left_s - j * su + (fill_s if j < u else 0)

    def systolic(j):
        return (r + j) * d + fill_d

    def memory(j):
        return math.ceil((moved_r - j * (bu - db)) / bpc)

    falling = (sparse, memory) if bu > db else (sparse,)
    rising = (systolic,) if bu > db else (systolic, memory)

    def fall(j):
        return max(f(j) for f in falling)

    def rise(j):
        return max(f(j) for f in rising)

    cross = _first_true(1, u, lambda j: fall(j) <= rise(j))
    best = (rise(cross), r + cross) if cross <= u else None
    if cross >= 2:  # before the crossing the makespan is fall(j), non-increasing
        value = fall(cross - 1)
        if best is None or value <= best[0]:
            best = (value, r + _first_true(1, cross - 1, lambda j: fall(j) <= value))
    return best


def _descending(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable order of ``values`` (non-negative integers) from largest to smallest, in 2 parts.

    Returns the sorted indices of every tile above the smallest value, then a mask of the
    tiles holding the smallest value: they come last, in index order, found without sorting
    (on large graphs they are most tiles, one non-zero each). The first part is sorted as
    packed ``(top - value, index)`` 64-bit keys with numpy's SIMD sort; the keys are
    distinct, so that is the stable order, at a fraction of the cost of a stable ``argsort``.
    """
    if values.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    at_low = values == values.min()
    rest = np.flatnonzero(~at_low)
    top = int(values[rest].max()) if rest.size else 0
    if rest.size >= 1 << 32 or top >= 1 << 31:
        rest = rest[np.argsort(top - values[rest], kind="stable")]
    else:
        key = (top - values[rest]).astype(np.int64)
        key <<= 32
        key |= rest
        key.sort()
        key &= (1 << 32) - 1
        rest = key
    return rest, at_low


def _best_split(model: CostModel, s, b, head, tail_size, tail_cost, sums) -> tuple[int, int]:
    """First best ``(makespan, k)`` over every prefix of ``head`` followed by ``tail_size``
    tiles that each cost ``tail_cost = (cycles, bytes)`` on the sparse engine.

    ``head`` indexes ``s`` and ``b`` (cycles and bytes); ``sums`` are the totals over all
    tiles, head and tail.
    """
    best = _best_prefix_span(model, s, b, head, head.size + tail_size, sums)
    if tail_size:
        in_tail = _best_in_uniform_tail(model, head.size, tail_size, *tail_cost)
        if in_tail[0] < best[0]:
            best = in_tail
    return best


def _best_prefix(
    model: CostModel, s, b, head, at_low, *, sums=None, uniform_in=()
) -> tuple[int, int]:
    """First best ``(makespan, k)`` over every prefix of the order ``head``, then ``at_low``.

    ``head`` and ``at_low`` come from :func:`_descending`; the tiles in ``at_low`` follow
    ``head`` in index order. ``sums`` are the totals of ``s`` and ``b`` if known;
    ``uniform_in`` names those of ``"s"`` and ``"b"`` known to be uniform on ``at_low``.
    """
    sums = (int(s.sum()), int(b.sum())) if sums is None else sums
    tail_size = int(np.count_nonzero(at_low))
    if tail_size > 1:
        first = int(np.argmax(at_low))
        uniform = not any(
            np.any((v != v[first]) & at_low)
            for name, v in (("s", s), ("b", b))
            if name not in uniform_in
        )
    else:
        uniform = False
    if not uniform:
        head = np.concatenate([head, np.flatnonzero(at_low)])
        return _best_split(model, s, b, head, 0, None, sums)
    first = int(np.argmax(at_low))
    return _best_split(model, s, b, head, tail_size, (int(s[first]), int(b[first])), sums)


def _singles_mask(costs: TileCosts) -> np.ndarray:
    """``(count,)`` True for the tiles with one non-zero (all but ``costs.multi``)."""
    mask = np.ones(costs.count, bool)
    mask[costs.multi] = False
    return mask


def _at_least(stats: TileStats, nonzeros: float) -> np.ndarray:
    """``(count,)`` True for the tiles with at least ``nonzeros`` non-zeros.

    ``density >= theta`` is tested as ``nnz >= theta * T**2``, without the float density
    array: ``nnz / T**2`` is exact, so is ``theta * T**2``.
    """
    if nonzeros > 1:  # only tiles with more than one non-zero can pass
        mask = np.zeros(stats.count, bool)
        mask[stats.multi[stats.multi_nnz >= nonzeros]] = True
        return mask
    return np.ones(stats.count, bool)  # every tile holds at least one


def _order_plans(model: CostModel, stats: TileStats, costs: TileCosts) -> list:
    """One task per order (see :func:`balance`), each returning ``(makespan, k, name, head,
    tail)`` of its best prefix: the order is ``head`` (tile indices), then the tiles where
    the mask ``tail()`` is True, in index order. The orders are independent (threads)."""
    sums = costs.total_cycles, costs.total_bytes
    single = costs.single_cycles, costs.single_bytes

    def plan(name, low, values):
        multi_values = values()
        if costs.singles > 1 and (multi_values.size == 0 or multi_values.min() > low):
            # The one-non-zero tiles hold the smallest value alone, so they end the order in
            # index order; the others are sorted by themselves. Everything here is the size
            # of the other tiles, a tenth of all on large power-law graphs.
            rest, at_low = _descending(multi_values)
            order = np.concatenate([rest, np.flatnonzero(at_low)])
            span, k = _best_split(
                model, costs.multi_cycles, costs.multi_bytes, order, costs.singles, single, sums
            )
            return span, k, name, costs.multi[order], lambda: _singles_mask(costs)
        s, b = costs.cycles, costs.bytes
        head, at_low = _descending(s if name == "sparse cost" else stats.nnz)
        known = ("s",) if name == "sparse cost" else ()
        span, k = _best_prefix(model, s, b, head, at_low, sums=sums, uniform_in=known)
        return span, k, name, head, lambda: at_low

    return [
        lambda: plan("sparse cost", costs.single_cycles, lambda: costs.multi_cycles),
        lambda: plan("density", 1, lambda: stats.multi_nnz),
    ]


def balance(
    model: CostModel,
    stats: TileStats,
    costs: TileCosts | None = None,
    *,
    threads: int = DEFAULT_THREADS,
) -> Plan:
    """Best prefix plan over the orders by sparse cost and by density (see module docstring).

    ``costs`` (:meth:`~.cost.CostModel.tile_costs` of ``stats``) saves recomputing them.
    ``threads``: the two orders are searched side by side (the same plan with any number).
    """
    if costs is None:
        costs = model.tile_costs(stats)
    return plan_all(model, stats, costs, threads=threads, with_baselines=False)[0]


def baselines(
    model: CostModel,
    stats: TileStats,
    threshold: float | None = None,
    costs: TileCosts | None = None,
) -> dict:
    """The three reference plans, costed by the same model (``costs`` as in :func:`balance`)."""
    if costs is None:
        costs = model.tile_costs(stats)
    tasks = _baseline_plans(model, stats, threshold, costs)
    return {plan.name: plan for plan in (task() for task in tasks)}


def plan_all(
    model: CostModel,
    stats: TileStats,
    costs: TileCosts,
    threshold: float | None = None,
    *,
    threads: int = DEFAULT_THREADS,
    with_baselines: bool = True,
) -> tuple[Plan, dict]:
    """:func:`balance` and :func:`baselines` in one go: ``(plan, baselines)``.

    The two order searches and the three baselines are independent tasks, handed to
    ``threads`` threads together (the same plans with any number).
    """
    costs.total_cycles, costs.total_bytes  # noqa: B018 - summed once, before the threads
    searches = _order_plans(model, stats, costs)
    references = _baseline_plans(model, stats, threshold, costs) if with_baselines else []
    done = run_all(threads, searches + references)
    best = None
    for found in done[: len(searches)]:
        if best is None or found[0] < best[0]:
            best = found
    _, k, name, head, tail = best
    dense = np.zeros(stats.count, bool)
    dense[head[:k]] = True
    if k > head.size:
        dense[np.flatnonzero(tail())[: k - head.size]] = True
    plan = Plan("density-aware", dense, model.totals(stats, dense, costs), {"order": name})
    return plan, {ref.name: ref for ref in done[len(searches) :]}


def _baseline_plans(model: CostModel, stats: TileStats, threshold, costs: TileCosts) -> list:
    """One task per baseline (all dense, all sparse, fixed density threshold), each returning
    its :class:`Plan`."""
    m = stats.count
    theta = model.break_even_density() if threshold is None else float(threshold)

    def plan(name, dense, extra=None):
        return Plan(name, dense, model.totals(stats, dense, costs), extra or {})

    return [
        lambda: plan("all_dense", np.ones(m, bool)),
        lambda: plan("all_sparse", np.zeros(m, bool)),
        lambda: plan(
            "threshold",
            _at_least(stats, theta * (stats.tile * stats.tile)),
            {"density": theta},
        ),
    ]


@dataclass(frozen=True)
class Mapping:
    """The tiles of one adjacency, where each runs, in which order, and what it costs."""

    source: str
    nodes: int
    nnz: int
    model: CostModel
    ordering: Ordering
    stats: TileStats
    plan: Plan
    baselines: dict

    @property
    def dense(self) -> np.ndarray:
        """``(m,)`` True where a non-empty tile goes to the systolic array."""
        return self.plan.dense

    def engine_orders(self) -> tuple[np.ndarray, np.ndarray]:
        """Indices into the tile list, in the order the systolic / sparse engine runs them.

        Both engines walk their tiles by tile row, then tile column, so the partial sums of
        one block of output rows are complete as early as possible.
        """
        return np.flatnonzero(self.dense), np.flatnonzero(~self.dense)

    def subgraph_table(self) -> list[dict]:
        """Nodes, non-zeros and tiles per class of each row subgraph (partitioned orders)."""
        if self.ordering.method != "partition":
            return []
        bounds = self.ordering.bounds // self.stats.tile
        band_class = np.searchsorted(bounds[1:], self.stats.tile_row, side="right")
        counts = np.bincount(self.ordering.node_class, minlength=3)
        table = []
        for k, name in enumerate(SUBGRAPHS):
            mine = band_class == k
            bands = int(bounds[k + 1] - bounds[k])
            dense = int((mine & self.dense).sum())
            sparse = int((mine & ~self.dense).sum())
            table.append(
                {
                    "name": name,
                    "nodes": int(counts[k]),
                    "nonzeros": self.stats.nnz_sum(mine),
                    "tiles": {
                        "dense": dense,
                        "sparse": sparse,
                        "empty": bands * self.stats.bands - dense - sparse,
                    },
                }
            )
        return table

    def summary(self) -> dict:
        """The ``mapping.yaml`` content: plain Python types, stable order."""
        stats, model, dense = self.stats, self.model, self.dense
        totals = self.plan.totals
        best_name = min(self.baselines, key=lambda k: self.baselines[k].totals.makespan)
        best = self.baselines[best_name].totals.makespan
        return {
            "graph": {
                "source": self.source,
                "nodes": self.nodes,
                "nonzeros": self.nnz,
                "padded_nodes": self.ordering.size,
                "reorder": self.ordering.method,
            },
            "tile": stats.tile,
            "features": model.features,
            "board": {
                "name": model.board.name,
                "clock_mhz": model.clock_mhz,
                "memory": model.board.memory[0]["kind"],
                "bytes_per_cycle": round(model.bytes_per_cycle, 3),
            },
            "engines": {
                "systolic": model.systolic.to_dict(),
                "sparse-engine": model.sparse.to_dict(),
            },
            "cost": {
                "dense_tile_cycles": model.dense_cycles,
                "sparse_tile_cycles": "passes * (distinct columns + non-zeros)",
                "sparse_passes": model.sparse.passes(model.features),
            },
            "subgraphs": self.subgraph_table(),
            "tiles": {
                "total": stats.total,
                "empty": stats.total - stats.count,
                "sparse": int((~dense).sum()),
                "dense": int(dense.sum()),
            },
            "nonzeros": {
                "systolic": stats.nnz_sum(dense),
                "sparse-engine": stats.nnz_sum(~dense),
            },
            "cycles": {
                "systolic": totals.systolic_cycles,
                "sparse-engine": totals.sparse_cycles,
                "memory": totals.memory_cycles,
                "makespan": totals.makespan,
            },
            "makespan_us": round(model.microseconds(totals.makespan), 3),
            "plan": self.plan.name,
            "baselines": {
                name: {"makespan": plan.totals.makespan, **_rounded(plan.extra)}
                for name, plan in self.baselines.items()
            },
            "speedup_vs_best_baseline": round(best / max(totals.makespan, 1), 4),
        }


def _rounded(extra: dict) -> dict:
    return {k: round(float(v), 6) for k, v in extra.items()}


def map_adjacency(
    adjacency: sp.csr_matrix,
    model: CostModel,
    *,
    reorder: str = "partition",
    threshold: float | None = None,
    source: str = "graph",
    threads: int = DEFAULT_THREADS,
) -> Mapping:
    """Tile, classify and balance a (GCN-normalized) adjacency on the two engines.

    Only the adjacency's pattern is read.

    Parameters
    ----------
    adjacency
        Square CSR matrix, canonical (sorted, no duplicates).
    model
        Cost model; its ``tile`` is the tile edge.
    reorder
        ``"partition"`` (three subgraphs, see :mod:`.graph`) or ``"none"`` (file order).
    threshold
        Density of the fixed-threshold baseline; default the break-even density.
    threads
        Threads for the large passes (see :mod:`.parallel`); the mapping is the same with
        any number, 1 runs everything in the calling thread.
    """
    ordering = order_nodes(adjacency, model.tile, reorder, threads=threads)
    return map_ordered(
        adjacency, ordering, model, threshold=threshold, source=source, threads=threads
    )


def order_nodes(
    adjacency: sp.csr_matrix, tile: int, reorder: str, *, threads: int = DEFAULT_THREADS
) -> Ordering:
    """The node order of ``reorder`` (``"partition"`` or ``"none"``, see :func:`map_adjacency`)."""
    if reorder == "partition":
        return partition_ordering(adjacency, tile, threads=threads)
    if reorder == "none":
        return identity_ordering(adjacency.shape[0])
    raise ValueError(f"reorder must be 'partition' or 'none', not {reorder!r}")


def map_ordered(
    adjacency: sp.csr_matrix,
    ordering: Ordering,
    model: CostModel,
    *,
    threshold: float | None = None,
    source: str = "graph",
    threads: int = DEFAULT_THREADS,
) -> Mapping:
    """:func:`map_adjacency` with the node order given: tile statistics, costs, balancing and
    baselines."""
    n = adjacency.shape[0]
    stats = tile_stats(adjacency, ordering, model.tile, threads=threads)
    costs = model.tile_costs(stats)
    plan, refs = plan_all(model, stats, costs, threshold, threads=threads)
    best = min(refs.values(), key=lambda p: p.totals.makespan)
    if best.totals.makespan < plan.totals.makespan:
        plan = Plan(best.name, best.dense, best.totals, dict(best.extra))
    return Mapping(
        source=source,
        nodes=n,
        nnz=int(adjacency.nnz),
        model=model,
        ordering=ordering,
        stats=stats,
        plan=plan,
        baselines=refs,
    )


def map_graph(
    graph: sp.spmatrix,
    model: CostModel,
    *,
    reorder: str = "partition",
    threshold: float | None = None,
    source: str = "graph",
    path: str | None = None,
    threads: int = DEFAULT_THREADS,
) -> tuple[sp.csr_matrix, Mapping]:
    """GCN-normalize ``graph`` and map it: ``(A_hat, mapping)``.

    The same as :func:`~.graph.gcn_normalize` (its errors name ``path``, default ``source``)
    then :func:`map_adjacency`. The mapping reads only the pattern of ``A + I``, so with
    ``threads > 1`` the normalization's degrees and scaling run in a thread of their own
    beside the partition, whose scipy parts leave a core idle; the tiling, which keeps every
    thread busy, starts once both are done. A degree error is raised before any error of the
    mapping.
    """
    path = source if path is None else path
    a = with_self_loops(graph, source=path)
    scaled = background(threads, lambda: normalize_in_place(a, source=path, threads=1))
    try:
        ordering = order_nodes(a, model.tile, reorder, threads=threads)
    finally:
        error = scaled.exception()  # waits for the normalization
        if error is not None:
            raise error
    mapping = map_ordered(a, ordering, model, threshold=threshold, source=source, threads=threads)
    return a, mapping


def npz_bytes(arrays: dict) -> bytes:
    """An ``.npz`` archive (readable by ``numpy.load``) with fixed timestamps: reproducible."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            payload = io.BytesIO()
            np.lib.format.write_array(payload, np.ascontiguousarray(array), allow_pickle=False)
            archive.writestr(info, payload.getvalue())
    return buffer.getvalue()


def mapping_arrays(mapping: Mapping) -> dict:
    """Arrays of ``mapping.npz``: the tile list, each engine's run order, the node order."""
    stats = mapping.stats
    cls = np.where(mapping.dense, DENSE, SPARSE).astype(np.int8)
    systolic_order, sparse_order = mapping.engine_orders()
    return {
        "tile_row": stats.tile_row,
        "tile_col": stats.tile_col,
        "nnz": stats.nnz,
        "rows": stats.rows,
        "cols": stats.cols,
        "tile_class": cls,
        "systolic_order": systolic_order.astype(np.int64),
        "sparse_order": sparse_order.astype(np.int64),
        "position": mapping.ordering.position,
        "node_class": mapping.ordering.node_class,
        "subgraph_bounds": mapping.ordering.bounds.astype(np.int64),
        "tile": np.int64(stats.tile),
        "bands": np.int64(stats.bands),
    }


def write_mapping(mapping: Mapping, out_dir, *, heatmap: bool = True) -> list[Path]:
    """Write ``mapping.yaml``, ``mapping.npz`` and ``heatmap.png`` into ``out_dir``.

    Every file is rendered in memory first and then renamed into place, so an error leaves no
    half-written output.
    """
    import yaml

    from .plot import heatmap_png

    out_dir = Path(out_dir)
    files = {
        "mapping.yaml": yaml.safe_dump(mapping.summary(), sort_keys=False).encode(),
        "mapping.npz": npz_bytes(mapping_arrays(mapping)),
    }
    if heatmap:
        files["heatmap.png"] = heatmap_png(mapping)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        tmp = out_dir / f".{name}.tmp"
        tmp.write_bytes(content)
        written.append((tmp, out_dir / name))
    for tmp, final in written:
        tmp.replace(final)
    return [final for _, final in written]


def summary_table(summary: dict) -> str:
    """``mapping.yaml`` as a short table for the terminal."""
    t, c, nz = summary["tiles"], summary["cycles"], summary["nonzeros"]
    lines = [
        f"graph {summary['graph']['source']}: {summary['graph']['nodes']} nodes, "
        f"{summary['graph']['nonzeros']} non-zeros (normalized, self loops), "
        f"reorder {summary['graph']['reorder']}",
        f"tile {summary['tile']}, features {summary['features']}, board "
        f"{summary['board']['name']} at {summary['board']['clock_mhz']:g} MHz",
        "",
        f"{'':<15}{'tiles':>10}{'non-zeros':>14}{'cycles':>14}",
        f"{'systolic':<15}{t['dense']:>10}{nz['systolic']:>14}{c['systolic']:>14}",
        f"{'sparse-engine':<15}{t['sparse']:>10}{nz['sparse-engine']:>14}{c['sparse-engine']:>14}",
        f"{'empty':<15}{t['empty']:>10}{'':>14}{'':>14}",
        f"{'memory bound':<15}{'':>10}{'':>14}{c['memory']:>14}",
        f"{'makespan':<15}{'':>10}{'':>14}{c['makespan']:>14}"
        f"  ({summary['makespan_us']:g} us, plan: {summary['plan']})",
        "",
        "baselines (same cost model):",
    ]
    for name, b in summary["baselines"].items():
        extra = f"  (density >= {b['density']:.4g})" if "density" in b else ""
        lines.append(f"  {name:<13}{b['makespan']:>14}{extra}")
    lines.append(f"speed-up vs best baseline: {summary['speedup_vs_best_baseline']:.3f}x")
    if summary["subgraphs"]:
        lines += ["", f"{'subgraph':<10}{'nodes':>10}{'non-zeros':>12}{'dense':>8}{'sparse':>8}"]
        for s in summary["subgraphs"]:
            lines.append(
                f"{s['name']:<10}{s['nodes']:>10}{s['nonzeros']:>12}"
                f"{s['tiles']['dense']:>8}{s['tiles']['sparse']:>8}"
            )
    return "\n".join(lines)
