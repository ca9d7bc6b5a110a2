"""SpMM mapper: readers, GCN normalization, partition, tile statistics, cost model, balancing,
outputs and the ``tandem map spmm`` command."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import yaml
from tandem.host.spmm import SparseEngineParams, SystolicParams
from tandem.mappings.spmm.cost import CostModel
from tandem.mappings.spmm.graph import (
    gcn_normalize,
    identity_ordering,
    partition_ordering,
)
from tandem.mappings.spmm.mapper import baselines, map_adjacency, write_mapping
from tandem.mappings.spmm.readers import GraphError, read_graph
from tandem.mappings.spmm.tiling import tile_stats

from tandem.boards import load_board
from tandem.cli import main

DATA = Path(__file__).parent / "data"
FOUR_ELT = DATA / "spmm_4elt.graph.gz"
MGRAPH = DATA / "spmm_test.mgraph"
WORMNET = DATA / "spmm_wormnet_head.txt"


def model(tile=16, features=16, **kw):
    systolic = SystolicParams(rows=kw.get("rows", 4), cols=kw.get("cols", 4))
    sparse = SparseEngineParams(lanes=kw.get("lanes", 4), tile=max(tile, 16))
    return CostModel(systolic, sparse, load_board(kw.get("board", "vck190")), tile, features)


def power_law(n, m, seed=0, exponent=0.9):
    rng = np.random.default_rng(seed)
    w = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    w /= w.sum()
    r, c = rng.choice(n, m, p=w), rng.choice(n, m, p=w)
    a = sp.csr_matrix((np.ones(m), (r, c)), shape=(n, n))
    a = ((a + a.T) > 0).astype(np.float64)
    perm = rng.permutation(n)
    return sp.csr_matrix(a[perm][:, perm])


# ------------------------------------------------- readers: tests/test_spmm_readers.py


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------- normalization, order


def test_gcn_normalization_matches_dense_formula():
    a = read_graph(MGRAPH)
    norm = gcn_normalize(a).toarray()
    tilde = a.toarray() + np.eye(a.shape[0])
    d = tilde.sum(axis=1) ** -0.5
    np.testing.assert_allclose(norm, d[:, None] * tilde * d[None, :], rtol=1e-12)
    with pytest.raises(GraphError, match="node 0 has row degree -2"):
        gcn_normalize(sp.csr_matrix(np.array([[0.0, -3.0], [-3.0, 0.0]])), source="neg")


def test_partition_is_a_permutation_with_aligned_subgraphs():
    a = gcn_normalize(power_law(3000, 20000))
    order = partition_ordering(a, 32)
    assert order.size % 32 == 0 and np.all(order.bounds % 32 == 0)
    assert np.unique(order.position).size == a.shape[0]
    for k in range(3):
        members = order.position[order.node_class == k]
        assert np.all((members >= order.bounds[k]) & (members < order.bounds[k + 1]))
    degree = np.diff(a.indptr)
    hubs = order.node_class == 0
    assert hubs.any() and degree[hubs].min() > degree[~hubs].max() / 4


def test_symmetry_check_and_induced_subgraph_match_scipy():
    from tandem.mappings.spmm.graph import _induced_subgraph, _is_symmetric

    rng = np.random.default_rng(5)
    cycle = sp.csr_matrix(np.roll(np.eye(5, dtype=np.int8), 1, axis=1))  # equal row/col counts
    assert not _is_symmetric(cycle)
    for k in range(20):
        n = int(rng.integers(1, 300))
        a = sp.random(n, n, density=float(rng.uniform(0, 0.1)), random_state=k, format="csr")
        a = (a + a.T).tocsr() if k % 2 else a
        if k % 4 == 1 and a.nnz:  # drop one entry off the diagonal: no longer symmetric
            off = np.flatnonzero(a.tocoo().row != a.tocoo().col)
            if off.size:
                a.data[off[0]] = 0
                a.eliminate_zeros()
        a.sum_duplicates()
        pattern = sp.csr_matrix((np.ones(a.nnz, np.int8), a.indices, a.indptr), shape=a.shape)
        assert _is_symmetric(pattern) == ((pattern != pattern.T).nnz == 0)
        nodes = np.flatnonzero(rng.random(n) < 0.7)
        got, want = _induced_subgraph(pattern, nodes), pattern[nodes][:, nodes]
        assert np.array_equal(got.indptr, want.indptr)
        assert np.array_equal(got.indices, want.indices)


def test_reordering_concentrates_nonzeros():
    """Measured, not assumed: fewer non-empty tiles and a shorter makespan than file order."""
    for a in (gcn_normalize(read_graph(FOUR_ELT)), gcn_normalize(power_law(4000, 30000))):
        cm = model(tile=32)
        plain = map_adjacency(a, cm, reorder="none")
        ordered = map_adjacency(a, cm, reorder="partition")
        assert ordered.stats.count < plain.stats.count
        assert ordered.plan.totals.makespan < plain.plan.totals.makespan


# ------------------------------------------------------------------------------ tile stats


def brute_stats(a, ordering, tile):
    n = ordering.size
    dense = np.zeros((n, n), bool)
    coo = a.tocoo()
    dense[ordering.position[coo.row], ordering.position[coo.col]] = True
    out = {}
    bands = -(-n // tile)
    for i in range(bands):
        for j in range(bands):
            block = dense[i * tile : (i + 1) * tile, j * tile : (j + 1) * tile]
            if block.any():
                out[(i, j)] = (block.sum(), block.any(1).sum(), block.any(0).sum())
    return out


@pytest.mark.parametrize("tile", [4, 64, 128, 256])
def test_tile_stats_match_a_loop_over_tiles(tile):
    a = gcn_normalize(power_law(700, 4000, seed=tile))
    for ordering in (identity_ordering(700), partition_ordering(a, tile)):
        stats = tile_stats(a, ordering, tile)
        want = brute_stats(a, ordering, tile)
        got = {
            (int(i), int(j)): (int(z), int(r), int(c))
            for i, j, z, r, c in zip(
                stats.tile_row, stats.tile_col, stats.nnz, stats.rows, stats.cols
            )
        }
        assert got == want
        assert stats.nnz.sum() == a.nnz
        keys = stats.tile_row.astype(np.int64) * stats.bands + stats.tile_col
        assert np.all(np.diff(keys) > 0)


# ------------------------------------------------------------------------ cost and balance


def test_cost_model_reads_engine_params_and_board():
    cm = model(tile=32, features=20, rows=4, cols=8, lanes=8)
    assert cm.dense_cycles == (32 // 4) * 3 * 32
    stats = tile_stats(gcn_normalize(read_graph(MGRAPH)), identity_ordering(766), 32)
    np.testing.assert_array_equal(cm.sparse_cycles(stats), 3 * (stats.cols + stats.nnz))
    board = load_board("vck190")
    assert cm.bytes_per_cycle == pytest.approx(
        board.memory[0]["bandwidth_gb_s"] * 1e9 / (board.default_clock_mhz * 1e6)
    )
    slow = model(tile=32, board="u280")
    assert slow.clock_mhz == load_board("u280").default_clock_mhz
    with pytest.raises(Exception, match="multipliers"):
        CostModel(SystolicParams(rows=64, cols=64), SparseEngineParams(), board, 64, 16)
    with pytest.raises(Exception, match="feature buffer"):
        CostModel(SystolicParams(), SparseEngineParams(tile=32), board, 64, 16)


@pytest.mark.parametrize(("tile", "nodes"), [(16, 20000), (64, 20000), (64, 3000)])
def test_tile_costs_and_totals_match_the_formulas(tile, nodes):
    """The shortcuts (one cost for all one-non-zero tiles when they are most tiles, sums over
    the smaller side) agree with the engines' formulas applied to every tile."""
    cm = model(tile=tile)
    a = gcn_normalize(power_law(nodes, 6000, seed=tile))
    stats = tile_stats(a, identity_ordering(nodes), tile)
    costs = cm.tile_costs(stats)
    np.testing.assert_array_equal(costs.cycles, cm.sparse_cycles(stats))
    np.testing.assert_array_equal(costs.bytes, cm.sparse_bytes(stats))
    rng = np.random.default_rng(tile)
    for p in (0.0, 0.1, 0.9, 1.0):
        dense = rng.random(stats.count) < p
        t = cm.totals(stats, dense, costs)
        sparse = ~dense
        assert t.sparse_cycles == int(costs.cycles[sparse].sum()) + (
            cm.sparse.fill_cycles if sparse.any() else 0
        )
        moved = dense.sum() * cm.dense_bytes + costs.bytes[sparse].sum()
        assert t.memory_cycles == int(np.ceil(moved / cm.bytes_per_cycle))


@pytest.mark.parametrize(("tile", "nodes", "edges"), [(16, 20000, 6000), (16, 60, 400)])
def test_balance_on_compact_costs_equals_the_search_over_all_tiles(tile, nodes, edges):
    """balance() orders only the tiles with more than one non-zero; the generic search over
    full per-tile arrays (both orders, first best prefix) gives the same plan."""
    from tandem.mappings.spmm.mapper import _best_prefix, _descending, balance

    cm = model(tile=tile)
    stats = tile_stats(
        gcn_normalize(power_law(nodes, edges, seed=1)), identity_ordering(nodes), tile
    )
    costs = cm.tile_costs(stats)
    best = None
    for values in (costs.cycles, stats.nnz):
        head, at_low = _descending(values)
        span, k = _best_prefix(cm, costs.cycles, costs.bytes, head, at_low)
        order = np.concatenate([head, np.flatnonzero(at_low)])
        if best is None or span < best[0]:
            best = (span, order[:k])
    plan = balance(cm, stats, costs)
    assert plan.totals.makespan == best[0]
    assert np.array_equal(np.flatnonzero(plan.dense), np.sort(best[1]))


@pytest.mark.parametrize("seed", range(6))
def test_density_aware_never_worse_than_any_baseline(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 3000))
    a = gcn_normalize(power_law(n, int(n * rng.integers(2, 30)), seed=seed))
    cm = model(tile=int(rng.choice([16, 32, 64])), features=int(rng.integers(1, 64)))
    for reorder in ("none", "partition"):
        for threshold in (None, float(rng.uniform(0.01, 0.9))):
            mapping = map_adjacency(a, cm, reorder=reorder, threshold=threshold)
            best = min(p.totals.makespan for p in mapping.baselines.values())
            assert mapping.plan.totals.makespan <= best
            # The engines finish close together unless one tile dominates.
            t = mapping.plan.totals
            assert mapping.plan.totals == cm.totals(mapping.stats, mapping.dense)
            if t.memory_cycles < t.makespan and mapping.dense.any() and (~mapping.dense).any():
                gap = abs(t.systolic_cycles - t.sparse_cycles)
                largest = max(cm.dense_cycles, int(cm.sparse_cycles(mapping.stats).max()))
                assert gap <= largest + cm.systolic.fill_cycles + cm.sparse.fill_cycles


def test_balance_is_optimal_on_a_small_case():
    """Exhaustive search over every assignment of a few tiles agrees with the mapper."""
    a = gcn_normalize(power_law(60, 200, seed=3))
    cm = model(tile=16, features=8)
    mapping = map_adjacency(a, cm, reorder="none")
    m = mapping.stats.count
    assert m <= 16
    best = min(
        cm.totals(mapping.stats, np.array([(k >> i) & 1 for i in range(m)], bool)).makespan
        for k in range(1 << m)
    )
    assert mapping.plan.totals.makespan == best


def test_threshold_baseline_uses_its_density():
    a = gcn_normalize(read_graph(MGRAPH))
    cm = model(tile=16)
    stats = tile_stats(a, identity_ordering(766), 16)
    plans = baselines(cm, stats, 0.05)
    assert np.array_equal(plans["threshold"].dense, stats.density >= 0.05)
    assert not plans["all_sparse"].dense.any() and plans["all_dense"].dense.all()


def brute_prefix(model, s, b, order):
    """First best (makespan, k) of sending order[:k] to the systolic array: a loop over k."""
    best = None
    for k in range(order.size + 1):
        kept = order[k:]
        sparse = int(s[kept].sum()) + (model.sparse.fill_cycles if kept.size else 0)
        systolic = k * model.dense_cycles + (model.systolic.fill_cycles if k else 0)
        moved = int(b[kept].sum()) + k * model.dense_bytes
        span = max(sparse, systolic, int(np.ceil(moved / model.bytes_per_cycle)))
        if best is None or span < best[0]:
            best = (span, k)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_fast_prefix_search_matches_a_loop_over_k(seed):
    """Balancing skips per-tile work on the uniform tail (the one-non-zero tiles): same answer."""
    from types import SimpleNamespace

    from tandem.mappings.spmm.mapper import _best_prefix, _best_prefix_span, _descending

    rng = np.random.default_rng(seed)
    m = int(rng.integers(0, 120))
    nnz = np.where(rng.random(m) < rng.uniform(0, 1), 1, rng.integers(1, 9, m))
    cols = np.minimum(nnz, rng.integers(1, 4, m))
    s = rng.integers(1, 3) * (nnz + cols)
    b = nnz * int(rng.integers(1, 30)) + cols * int(rng.integers(0, 30))
    fake = SimpleNamespace(
        dense_cycles=int(rng.integers(1, 40)),
        dense_bytes=int(rng.integers(1, 200)),  # below and above a tile's bytes: both regimes
        bytes_per_cycle=float(rng.choice([0.37, 1.0, 3.3, 1e3])),
        sparse=SimpleNamespace(fill_cycles=int(rng.integers(0, 9))),
        systolic=SimpleNamespace(fill_cycles=int(rng.integers(0, 9))),
    )
    for values in (s, nnz):
        head, at_low = _descending(values)
        order = np.argsort(-values, kind="stable")
        assert np.array_equal(np.concatenate([head, np.flatnonzero(at_low)]), order)
        want = brute_prefix(fake, s, b, order)
        assert _best_prefix(fake, s, b, head, at_low) == want
        for chunk in (1, 2, 7):  # prefix sums carried across chunks: the same first best
            assert _best_prefix_span(fake, s, b, order, chunk=chunk) == want


# ---------------------------------------------------------------------------------- threads


def weighted_directed(n, m, seed):
    """Real weights, not symmetric in pattern or values: every float path of normalize."""
    rng = np.random.default_rng(seed)
    a = sp.csr_matrix((rng.uniform(0.1, 3, m), (rng.integers(0, n, m), rng.integers(0, n, m))))
    return sp.csr_matrix(a, shape=(n, n)) + sp.eye(n, n, 3, format="csr")


def mapping_fingerprint(a_hat, mapping):
    from tandem.mappings.spmm.mapper import mapping_arrays

    arrays = {k: np.asarray(v).tobytes() for k, v in mapping_arrays(mapping).items()}
    matrix = (a_hat.indptr.tobytes(), a_hat.indices.tobytes(), a_hat.data.tobytes())
    return matrix, arrays, yaml.safe_dump(mapping.summary())


@pytest.mark.parametrize(
    ("graph", "tile"),
    [
        (lambda: read_graph(FOUR_ELT), 32),
        (lambda: power_law(20000, 120000, seed=2), 16),  # most tiles hold one non-zero
        (lambda: power_law(3000, 60000, seed=3), 64),
        (lambda: weighted_directed(5000, 40000, 4), 128),  # asymmetric, two mask words
        (lambda: sp.csr_matrix((1, 1)), 4),  # one node, one non-zero
    ],
)
def test_threads_give_the_same_bits(graph, tile):
    """Every thread count gives the single-thread result bit for bit: A_hat, ordering, tile
    statistics, plan, mapping.npz arrays and mapping.yaml (map_graph overlaps normalizing
    with mapping; gcn_normalize then map_adjacency is the reference)."""
    from tandem.mappings.spmm.mapper import map_graph

    g = graph()
    cm = model(tile=tile, features=24)
    for reorder in ("partition", "none"):
        a = gcn_normalize(g, threads=1)
        want = mapping_fingerprint(a, map_adjacency(a, cm, reorder=reorder, threads=1))
        for threads in (1, 2, 3):
            got = mapping_fingerprint(*map_graph(g, cm, reorder=reorder, threads=threads))
            assert got == want, (reorder, threads)
            b = gcn_normalize(g, threads=threads)
            assert b.data.tobytes() == a.data.tobytes()


def coo_stats(a, ordering, tile):
    """{(tile row, tile col): (nnz, distinct rows, distinct cols)} from np.unique over COO."""
    coo = a.tocoo()
    pu, pv = ordering.position[coo.row], ordering.position[coo.col]
    bands = -(-ordering.size // tile)
    tile_of = (pu // tile) * bands + pv // tile
    ids, nnz = np.unique(tile_of, return_counts=True)
    rows = np.unique(tile_of * ordering.size + pu) // ordering.size
    cols = np.unique(tile_of * ordering.size + pv) // ordering.size
    r = np.bincount(np.searchsorted(ids, rows), minlength=ids.size)
    c = np.bincount(np.searchsorted(ids, cols), minlength=ids.size)
    return {
        (int(i // bands), int(i % bands)): (int(z), int(x), int(y))
        for i, z, x, y in zip(ids, nnz, r, c)
    }


def test_buckets_hold_no_more_tile_rows_than_32_bit_keys_can_count():
    """T = 4096 with 41 tile rows: tile column and in-tile fields take 30 of a key's 32 bits,
    so a bucket holds at most 4 tile rows; the statistics stay those of every tile."""
    from tandem.mappings.spmm import tiling

    nodes, tile = 41 * 4096 - 5, 4096
    a = gcn_normalize(power_law(nodes, 300000, seed=11))
    ordering = identity_ordering(nodes)
    lay = tiling._layout(ordering, tile)
    assert tiling._key_dtype(lay) == np.uint32 and lay.b + 2 * lay.s == 30
    buckets = tiling._bucketed_keys(a, ordering, lay, 2, 1 << 30)  # no cut by non-zeros
    assert np.diff(np.r_[buckets.first_band, lay.bands]).max() == 4
    stats = tile_stats(a, ordering, tile)
    got = {
        (int(i), int(j)): (int(z), int(r), int(c))
        for i, j, z, r, c in zip(stats.tile_row, stats.tile_col, stats.nnz, stats.rows, stats.cols)
    }
    assert got == coo_stats(a, ordering, tile)


def test_tile_keys_are_the_sorted_keys_of_every_non_zero():
    from tandem.mappings.spmm.tiling import tile_keys

    a = gcn_normalize(power_law(5000, 400000, seed=7))
    order = partition_ordering(a, 16)
    coo = a.tocoo()
    pu, pv = order.position[coo.row], order.position[coo.col]
    bits = max(1, (-(-order.size // 16) - 1).bit_length())
    want = np.sort(((pu >> 4) << (bits + 8)) | ((pv >> 4) << 8) | ((pu & 15) << 4) | (pv & 15))
    for threads in (1, 2, 3, 5):
        assert np.array_equal(tile_keys(a, order, 16, threads=threads), want)


@pytest.mark.parametrize("wide", [False, True])
def test_tile_stats_do_not_depend_on_buckets_runs_threads_or_key_width(wide, monkeypatch):
    """Tiny buckets and runs (many bucket boundaries inside a run, runs of one bucket), any
    thread count, and 64-bit bucket keys (used when 32 bits do not leave room) all give the
    statistics of a loop over the tiles."""
    from tandem.mappings.spmm import tiling

    if wide:
        monkeypatch.setattr(tiling, "_key_dtype", lambda lay: np.uint64)
    a = gcn_normalize(power_law(700, 4000, seed=3))
    ordering = partition_ordering(a, 8)
    want = brute_stats(a, ordering, 8)
    for bucket, chunk, threads in ((1, 1, 1), (7, 50, 2), (300, 3, 3), (1 << 16, 1 << 17, 2)):
        stats = tile_stats(a, ordering, 8, threads=threads, bucket=bucket, chunk=chunk)
        got = {
            (int(i), int(j)): (int(z), int(r), int(c))
            for i, j, z, r, c in zip(
                stats.tile_row, stats.tile_col, stats.nnz, stats.rows, stats.cols
            )
        }
        assert got == want, (bucket, chunk, threads)
        assert np.all(np.diff(stats.tile_id) > 0)


def test_parallel_helpers():
    from tandem.mappings.spmm.parallel import background, run_all, split

    assert run_all(2, [lambda i=i: i * i for i in range(9)]) == [i * i for i in range(9)]
    assert split(10, 3) == [(0, 3), (3, 6), (6, 10)] and split(0, 2) == []
    assert split(10, 4, align=4) == [(0, 4), (4, 10)]  # inner cuts on multiples of 4

    def boom():
        raise GraphError("bad node")

    for threads in (1, 2):
        with pytest.raises(GraphError, match="bad node"):
            run_all(threads, [lambda: 1, boom, lambda: 2])
        with pytest.raises(GraphError, match="bad node"):
            background(threads, boom).result()
    with pytest.raises(ValueError, match="threads must be a positive integer, not 0"):
        run_all(0, [])


def test_map_graph_reports_a_degree_error_with_threads():
    from tandem.mappings.spmm.mapper import map_graph

    bad = sp.csr_matrix(np.array([[0.0, -3.0], [-3.0, 0.0]]))
    for threads in (1, 2):
        with pytest.raises(GraphError, match="neg: node 0 has row degree -2"):
            map_graph(bad, model(tile=4), source="g", path="neg", threads=threads)


# ---------------------------------------------------------------------------------- outputs


def test_outputs_are_reproducible_and_complete(tmp_path):
    a = gcn_normalize(read_graph(WORMNET))
    mapping = map_adjacency(a, model(tile=32), source="wormnet")
    first = write_mapping(mapping, tmp_path / "a")
    second = write_mapping(map_adjacency(a, model(tile=32), source="wormnet"), tmp_path / "b")
    for x, y in zip(first, second):
        assert x.read_bytes() == y.read_bytes(), x.name
    summary = yaml.safe_load((tmp_path / "a" / "mapping.yaml").read_text())
    tiles = summary["tiles"]
    assert tiles["empty"] + tiles["sparse"] + tiles["dense"] == tiles["total"]
    assert summary["nonzeros"]["systolic"] + summary["nonzeros"]["sparse-engine"] == a.nnz
    assert summary["cycles"]["makespan"] <= min(
        b["makespan"] for b in summary["baselines"].values()
    )
    arrays = np.load(tmp_path / "a" / "mapping.npz")
    both = np.sort(np.r_[arrays["systolic_order"], arrays["sparse_order"]])
    assert np.array_equal(both, np.arange(arrays["nnz"].size))
    assert np.all(arrays["tile_class"][arrays["systolic_order"]] == 2)
    assert (tmp_path / "a" / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((tmp_path / "a").glob(".*.tmp"))


def test_cli_map_spmm(tmp_path, capsys):
    out = tmp_path / "out"
    status = main(
        [
            "map",
            "spmm",
            "--graph",
            str(MGRAPH),
            "--features",
            "24",
            "--tile",
            "32",
            "--set",
            "systolic.rows=4",
            "-o",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert status == 0 and "makespan" in text and "baselines" in text
    summary = yaml.safe_load((out / "mapping.yaml").read_text())
    assert summary["engines"]["systolic"]["rows"] == 4 and summary["tile"] == 32
    one = tmp_path / "one"
    argv = ["map", "spmm", "--graph", str(MGRAPH), "--features", "24", "--tile", "32"]
    assert main([*argv, "--set", "systolic.rows=4", "--threads", "1", "-o", str(one)]) == 0
    for name in ("mapping.yaml", "mapping.npz", "heatmap.png"):
        assert (one / name).read_bytes() == (out / name).read_bytes(), name


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tile", "48"], "--tile must be a power of two"),
        (["--set", "systolic.rows=0"], "rows"),
        (["--set", "rows=4"], "expected systolic.KEY=VALUE"),
        (["--board", "vck19"], "unknown board"),
        (["--threshold", "2"], "--threshold must be in"),
        (["--features", "0"], "--features must be at least 1"),
        (["--threads", "0"], "--threads must be at least 1"),
    ],
)
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    args = ["map", "spmm", "--graph", str(MGRAPH), "--features", "8", "-o", str(out)]
    status = main(args + argv)
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_bad_graph_names_the_line(tmp_path, capsys):
    bad = write(tmp_path, "bad.graph", "3 1\n2\n1\n")
    status = main(
        ["map", "spmm", "--graph", str(bad), "--features", "8", "-o", str(tmp_path / "o")]
    )
    assert status == 2 and "bad.graph:3:" in capsys.readouterr().err
