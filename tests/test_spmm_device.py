"""SpmmDevice (systolic + sparse-engine): bit-exact with gcn_layer and the stream goldens,
cycles from the engines' cost model, clear errors."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from tandem.host.spmm import SparseEngineParams, SystolicParams, gcn_layer, quantize_adjacency
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


def test_an_adjacency_value_that_does_not_fit_raises_instead_of_clipping():
    """1000 in a_bits 10, a_frac 8 (range -2..1.996) names itself, its position and the range
    rather than saturating to 511; so does 1.999, which rounds past the range. The rejected load
    leaves the loaded adjacency, and the golden functions refuse the value too."""
    systolic = SystolicParams(rows=4, cols=3, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
    sparse = SparseEngineParams(lanes=3, tile=8, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
    dev = SpmmDevice(systolic, sparse, features=3)
    good = sp.csr_matrix(np.eye(4) + np.eye(4, k=1) * 1.99)
    mapping = dev.load(good)
    for value, shown in ((1000.0, "1000"), (1.999, "1.999"), (-2.01, "-2.01")):
        a = good.tolil()
        a[1, 2] = value
        with pytest.raises(
            ValueError,
            match=rf"adjacency value at \(1, 2\) = {shown} does not fit a_bits=10, a_frac=8, "
            r"range -2\.\.1\.99609",
        ):
            dev.load(a.tocsr())
    assert dev.mapping is mapping and dev.adjacency is not None
    acc = dev.aggregate(np.ones((4, 3), np.int64))
    assert acc[:3, 0].tolist() == [256 + 509] * 3  # 1.99 is 509/256, within the range
    bad = good.copy()
    bad.data[1] = 1000.0
    with pytest.raises(ValueError, match=r"adjacency values\[1\] = 1000 does not fit"):
        quantize_adjacency(bad.data, systolic)


def test_a_closed_golden_device_refuses_calls_like_an_rtl_one():
    spmm = _spmm_device(4)
    spmm.load(sp.identity(8, format="csr"))
    assert_closed_device_refuses(spmm, lambda: spmm.aggregate(np.zeros((8, 4), np.int64)))
