"""``backend="rtl"`` of SpmmDevice: the same GCN layer on golden and RTL.

The script runs on both backends and must give bit-identical outputs; RTL cycles are simulated
and must equal the systolic and sparse engines' cost model, which is cycle-exact. The engine
configurations are those of ``tests/test_spmm_rtl.py``, so one pytest run builds each
Verilator model once for both files (the ``sim_cache`` fixture). The script runs through the
native harness, Verilator under cocotb and Icarus (on a smaller graph).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from tandem.host.spmm import SparseEngineParams, SystolicParams
from tandem.host.spmm.device import SpmmDevice
from tandem.mappings.spmm.graph import gcn_normalize
from tandem.mappings.spmm.readers import read_graph

from .rtl import ROUTES, need, rtl_device, run_script
from .test_spmm_device import DATA

SYSTOLIC = SystolicParams(rows=4, cols=3, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
SPARSE = SparseEngineParams(lanes=3, tile=8, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)


def spmm_script(nodes):
    a = gcn_normalize(read_graph(DATA / "spmm_test.mgraph"))
    a = sp.csr_matrix(a[:nodes, :nodes])
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((nodes, 8)), rng.standard_normal((8, 5))

    def script(dev):
        mapping = dev.load(a)
        assert mapping.dense.any() and (~mapping.dense).any()
        r = dev.gcn_layer(x, w, device="cpu")
        return r.accumulators, r.output, dict(dev.last_engine_cycles), dev.last_cycles

    return script


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ROUTES)
def test_spmm_rtl_bit_identical(simulator, sim_cache, tmp_path):
    need(simulator)
    script = spmm_script(200 if simulator == "icarus" else 766)
    golden = SpmmDevice(SYSTOLIC, SPARSE, features=5, tile=8)
    device = rtl_device(
        SpmmDevice, simulator, sim_cache, tmp_path, SYSTOLIC, SPARSE, features=5, tile=8
    )
    (acc, out, modelled, span), (acc2, out2, simulated, span2) = run_script(script, golden, device)
    assert np.array_equal(acc, acc2) and np.array_equal(out, out2)
    print(f"spmm {simulator}: model {modelled}, RTL {simulated}")
    # Both engines' RTL takes exactly the cost model's cycles; memory stays modelled.
    assert simulated == modelled and span2 == span == modelled["makespan"]
    assert min(simulated["systolic"], simulated["sparse-engine"]) > 0
