"""SpMM engines: parameters, golden models (stream and tile level), the gateware in the Amaranth
simulator, and the GCN layer host through a mapping."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from tandem.host.common.arith import wrap
from tandem.host.spmm import (
    SparseEngineParams,
    SystolicParams,
    gcn_layer,
    quantize_adjacency,
    sparse_engine_golden,
    sparse_tile_golden,
    sparse_tile_stream,
    systolic_decode,
    systolic_golden,
    systolic_tile_golden,
    systolic_tile_stream,
)
from tandem.hw.spmm.sparse_engine import SparseEngine
from tandem.hw.spmm.systolic import Systolic
from tandem.mappings.spmm.cost import CostModel
from tandem.mappings.spmm.graph import gcn_normalize
from tandem.mappings.spmm.mapper import map_adjacency
from tandem.mappings.spmm.readers import read_graph
from tandem.sim.amaranth_sim import run_scenario

from tandem.boards import load_board
from tandem.config import ParamError

DATA = Path(__file__).parent / "data"
SMALL_SYS = SystolicParams(rows=2, cols=3, a_bits=6, a_frac=3, x_bits=5, acc_bits=12)
SMALL_SP = SparseEngineParams(lanes=3, tile=8, a_bits=6, a_frac=3, x_bits=5, acc_bits=12)


def test_params_rules():
    with pytest.raises(ParamError, match="a_frac"):
        SystolicParams(a_bits=8, a_frac=8)
    with pytest.raises(ParamError, match="acc_bits"):
        SparseEngineParams(a_bits=16, x_bits=16, acc_bits=24)
    with pytest.raises(ParamError, match="power of two"):
        SparseEngineParams(tile=48)
    assert SparseEngineParams(tile=64).index_bits == 6


def test_systolic_stream_golden_equals_tile_product():
    rng = np.random.default_rng(0)
    p = SystolicParams(rows=4, cols=3)
    for t, f in ((8, 3), (9, 7), (16, 1)):
        a = rng.integers(-(1 << 15), 1 << 15, (t, t))
        x = rng.integers(-(1 << 15), 1 << 15, (t, f))
        stream = systolic_tile_stream(p, a, x)
        rows = systolic_golden(p, *stream)
        assert stream[0].shape[0] == p.tile_cycles(t, f)
        assert np.array_equal(systolic_decode(p, rows, t, f), wrap(a @ x, p.acc_bits))
        assert np.array_equal(systolic_tile_golden(p, a, x), wrap(a @ x, p.acc_bits))
    with pytest.raises(ValueError, match="at least rows"):
        systolic_golden(p, np.zeros((2, 4)), np.zeros((2, 3)), [0, 1])


def test_sparse_stream_golden_equals_tile_product_with_duplicates():
    rng = np.random.default_rng(1)
    p = SparseEngineParams(lanes=4, tile=16)
    rows = np.sort(rng.integers(0, 16, 60))
    cols = rng.integers(0, 16, 60)
    cols[1] = cols[0]
    rows[1] = rows[0]  # a duplicate (row, col): both products add
    values = rng.integers(-(1 << 15), 1 << 15, 60)
    x = rng.integers(-(1 << 15), 1 << 15, (16, 10))
    out = np.zeros((16, 12), np.int64)
    cycles = 0
    for lane0 in range(0, 10, 4):
        beats = sparse_tile_stream(p, rows, cols, values, x, lane0)
        cycles += beats[0].size
        r, sums = sparse_engine_golden(p, *beats)
        np.add.at(out[:, lane0 : lane0 + 4], r, sums)
    assert cycles == p.tile_cycles(60, np.unique(cols).size, 10)
    dense = np.zeros((16, 16), np.int64)
    np.add.at(dense, (rows, cols), values)
    assert np.array_equal(wrap(out[:, :10], p.acc_bits), wrap(dense @ x, p.acc_bits))
    assert np.array_equal(sparse_tile_golden(p, rows, cols, values, x), wrap(dense @ x, 48))


def test_sparse_golden_reads_the_latest_load():
    p = SparseEngineParams(lanes=1, tile=4, a_bits=8, a_frac=0, x_bits=8, acc_bits=16)
    kind = [0, 1, 0, 1, 1]
    col = [2, 2, 2, 2, 3]
    x = [[5], [0], [7], [0], [0]]
    rows, sums = sparse_engine_golden(
        p, kind, [0, 0, 0, 1, 1], col, [0, 3, 0, 2, 9], x, [0, 1, 0, 0, 1]
    )
    assert rows.tolist() == [0, 1] and sums.ravel().tolist() == [15, 14]


def _systolic_payloads(a, x, last):
    return [
        {"a": [int(v) for v in aa], "x": [int(v) for v in xx], "last": int(lv)}
        for aa, xx, lv in zip(a, x, last)
    ]


@pytest.mark.parametrize(("gaps", "backpressure"), [(0.0, 0.0), (0.4, 0.5)])
def test_systolic_gateware_in_amaranth_sim(gaps, backpressure):
    rng = np.random.default_rng(2)
    p = SMALL_SYS
    tiles = [rng.integers(-32, 32, (4, 4)) * (rng.random((4, 4)) < d) for d in (0.2, 1.0)]
    streams = [systolic_tile_stream(p, a, rng.integers(-16, 16, (4, 5))) for a in tiles]
    a, x, last = (np.concatenate([s[i] for s in streams]) for i in range(3))
    want = systolic_golden(p, a, x, last)
    outs, cycles = run_scenario(
        Systolic(p),
        _systolic_payloads(a, x, last),
        len(want),
        valid_gaps=gaps,
        backpressure=backpressure,
        seed=5,
    )
    got = np.array([[int(o[c]) for c in range(p.cols)] for o in outs])
    assert np.array_equal(got, want)
    if not gaps:
        assert cycles == len(a) + p.fill_cycles - 1  # this helper counts from the first edge


@pytest.mark.parametrize(("gaps", "backpressure"), [(0.0, 0.0), (0.4, 0.5)])
def test_sparse_gateware_in_amaranth_sim(gaps, backpressure):
    rng = np.random.default_rng(3)
    p = SMALL_SP
    beats = []
    for d in (0.1, 0.6):
        tile = rng.integers(-32, 32, (8, 8)) * (rng.random((8, 8)) < d)
        r, c = np.nonzero(tile)
        beats.append(sparse_tile_stream(p, r, c, tile[r, c], rng.integers(-16, 16, (8, 3))))
    fields = [np.concatenate([b[i] for b in beats]) for i in range(6)]
    rows, sums = sparse_engine_golden(p, *fields)
    payloads = [
        {
            "kind": int(k),
            "row": int(r),
            "col": int(c),
            "value": int(v),
            "x": [int(e) for e in xx],
            "row_end": int(e2),
        }
        for k, r, c, v, xx, e2 in zip(*fields)
    ]
    outs, cycles = run_scenario(
        SparseEngine(p), payloads, len(rows), valid_gaps=gaps, backpressure=backpressure, seed=7
    )
    assert [int(o.row) for o in outs] == rows.tolist()
    assert np.array_equal(np.array([[int(o.sums[k]) for k in range(3)] for o in outs]), sums)
    if not gaps:
        assert cycles == len(payloads) + p.fill_cycles - 1


# ------------------------------------------------------------------------------ GCN host


def _mapping(a, features):
    model = CostModel(
        SystolicParams(rows=4, cols=4),
        SparseEngineParams(lanes=4, tile=32),
        load_board("vck190"),
        32,
        features,
    )
    return map_adjacency(a, model, reorder="partition")


def test_gcn_layer_is_bit_exact_with_the_tile_golden_models():
    """The vectorized host path equals every tile run through its engine's golden model."""
    a = gcn_normalize(read_graph(DATA / "spmm_test.mgraph"))
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((a.shape[0], 12)), rng.standard_normal((12, 6))
    mapping = _mapping(a, 6)
    assert mapping.dense.any() and (~mapping.dense).any()
    result = gcn_layer(mapping, a, x, w, device="cpu")
    sysp, spp = mapping.model.systolic, mapping.model.sparse
    t, order = mapping.stats.tile, mapping.ordering
    permuted = sp.csr_matrix(
        (
            quantize_adjacency(a.tocoo().data, sysp),
            (order.position[a.tocoo().row], order.position[a.tocoo().col]),
        ),
        shape=(order.size,) * 2,
        dtype=np.int64,
    ).toarray()
    feats = np.zeros((order.size, 6), np.int64)
    feats[order.position] = result.features
    out = np.zeros_like(feats)
    for k in range(mapping.stats.count):
        i, j = int(mapping.stats.tile_row[k]), int(mapping.stats.tile_col[k])
        block = permuted[i * t : (i + 1) * t, j * t : (j + 1) * t]
        xb = feats[j * t : (j + 1) * t]
        if mapping.dense[k]:
            part = systolic_decode(
                sysp, systolic_golden(sysp, *systolic_tile_stream(sysp, block, xb)), t, 6
            )
        else:
            r, c = np.nonzero(block)
            part = np.zeros((t, 8), np.int64)
            for lane0 in (0, 4):
                rr, sums = sparse_engine_golden(
                    spp, *sparse_tile_stream(spp, r, c, block[r, c], xb, lane0)
                )
                np.add.at(part[:, lane0 : lane0 + 4], rr, sums)
            part = part[:, :6]
        out[i * t : (i + 1) * t] += part
    assert np.array_equal(wrap(out, sysp.acc_bits)[order.position], result.accumulators)
    assert sum(result.nonzeros.values()) == a.nnz


def test_gcn_layer_against_float_reference_within_the_documented_bound():
    import torch

    a = gcn_normalize(read_graph(DATA / "spmm_wormnet_head.txt"))
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((a.shape[0], 16)), rng.standard_normal((16, 8))
    result = gcn_layer(_mapping(a, 8), a, x, w)
    xw = (torch.tensor(x, dtype=torch.float32) @ torch.tensor(w, dtype=torch.float32)).double()
    reference = a @ xw.numpy()
    p = SystolicParams()
    row_abs = np.asarray(abs(a).sum(axis=1)).ravel()
    row_nnz = np.diff(a.indptr)
    half_a = 2.0 ** -(p.a_frac + 1)
    peak = np.abs(xw.numpy()).max()
    bound = row_abs * result.x_scale / 2 + row_nnz * half_a * (peak + result.x_scale / 2)
    assert np.all(np.abs(result.output - reference) <= bound[:, None] * (1 + 1e-9) + 1e-12)
    rel = np.linalg.norm(result.output - reference) / np.linalg.norm(reference)
    assert rel < 1e-3
