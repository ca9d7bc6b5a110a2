"""SpmmDevice (systolic + sparse-engine): bit-exact with gcn_layer and the stream goldens,
cycles from the engines' cost model, clear errors."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from tandem.host.spmm import SparseEngineParams, SystolicParams, gcn_layer
from tandem.host.spmm.device import SpmmDevice
from tandem.mappings.spmm.graph import gcn_normalize
from tandem.mappings.spmm.readers import read_graph

from .device_checks import assert_closed_device_refuses

DATA = Path(__file__).parent / "data"


def _spmm_device(features):
    return SpmmDevice(
        SystolicParams(rows=4, cols=4),
        SparseEngineParams(lanes=4, tile=32),
        features=features,
        tile=32,
    )


def test_spmm_gcn_layer_is_bit_exact_with_gcn_layer_and_the_stream_goldens():
    a = gcn_normalize(read_graph(DATA / "spmm_test.mgraph"))
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((a.shape[0], 12)), rng.standard_normal((12, 6))
    dev = _spmm_device(6)
    mapping = dev.load(a)
    assert mapping.dense.any() and (~mapping.dense).any()
    result = dev.gcn_layer(x, w, device="cpu")
    direct = gcn_layer(mapping, a, x, w, device="cpu")
    assert np.array_equal(result.accumulators, direct.accumulators)
    assert np.array_equal(result.output, direct.output)
    assert result.nonzeros == direct.nonzeros and result.x_scale == direct.x_scale
    totals = mapping.plan.totals
    assert dev.last_engine_cycles == {
        "systolic": totals.systolic_cycles,
        "sparse-engine": totals.sparse_cycles,
        "memory": totals.memory_cycles,
        "makespan": totals.makespan,
    }
    assert dev.last_cycles == totals.makespan
    streamed = dev.aggregate(result.features, streams=True)  # every tile as beat streams
    assert np.array_equal(streamed, direct.accumulators)


def test_spmm_device_errors_and_rtl():
    dev = _spmm_device(4)
    with pytest.raises(ValueError, match="no adjacency loaded"):
        dev.aggregate(np.zeros((3, 4), np.int64))
    with pytest.raises(ValueError, match="must be square"):
        dev.load(sp.csr_matrix(np.ones((3, 4))))
    dev.load(sp.csr_matrix(np.ones((3, 3))), normalize=True)
    with pytest.raises(ValueError, match=r"features must be \(3, 4\)"):
        dev.aggregate(np.zeros((3, 5), np.int64))
    with pytest.raises(ValueError, match="w 4 columns"):
        dev.gcn_layer(np.zeros((3, 2)), np.zeros((2, 5)))
    rtl = SpmmDevice(features=4, backend="rtl")
    assert set(rtl.backend.engines) == {"systolic", "sparse-engine"}
    assert not rtl.backend.started
    rtl.close()


def test_a_closed_golden_device_refuses_calls_like_an_rtl_one():
    spmm = _spmm_device(4)
    spmm.load(sp.identity(8, format="csr"))
    assert_closed_device_refuses(spmm, lambda: spmm.aggregate(np.zeros((8, 4), np.int64)))
