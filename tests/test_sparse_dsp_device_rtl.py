"""``backend="rtl"`` of the stream-engine devices: the same script on golden and RTL.

For each device (``SparseMpeDevice``, ``SpmmDevice``, ``RnnDevice``) a small script runs on
both backends and must give bit-identical outputs; RTL cycles are simulated and must equal
the golden backend's cycle models, which are cycle-exact: ``mpe_cycles`` (GEMV and GEMM
requests of one to two token pairs), the SpMM engines' cost model, the rnn scheduler (LSTM and
GRU). The engine configurations are those of ``tests/test_sparse_dsp_rtl.py``,
``tests/test_spmm_rtl.py`` and ``tests/test_rnn_rtl.py`` (``x8-h12-8x4-b2-stream`` and
``gru-x12-h20-8x4-b2``), so one pytest run builds each Verilator model once for both files
(the ``sim_cache`` fixture).
Verilator and Icarus run every script (Icarus on a smaller graph); the error test covers a
bad request, a result that never comes, a timeout, a killed simulator and a closed device.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from tandem.host.common.errors import CosimError, CosimTimeoutError, DeviceClosedError
from tandem.host.rnn import RnnParams
from tandem.host.rnn.device import RnnDevice
from tandem.host.sparse_dsp import SparseMpeParams
from tandem.host.sparse_dsp.device import SparseMpeDevice, mpe_cycles
from tandem.host.spmm import SparseEngineParams, SystolicParams
from tandem.host.spmm.device import SpmmDevice
from tandem.mappings.nm import NMPattern, mpe_streams, prune_magnitude
from tandem.mappings.spmm.graph import gcn_normalize
from tandem.mappings.spmm.readers import read_graph

from tandem.errors import UserError

from .test_accel_devices import DATA

SIMULATORS = ["verilator", "icarus"]
MPE = SparseMpeParams(chains=2, stages=4, max_k=256, max_batch=4)
SYSTOLIC = SystolicParams(rows=4, cols=3, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
SPARSE = SparseEngineParams(lanes=3, tile=8, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
RNN = RnnParams(max_input=8, max_hidden=12, tile_rows=8, tile_cols=4, weight_source="stream")
#: tests/test_rnn_rtl.py's ``gru-x12-h20-8x4-b2``: the same build.
GRU = RnnParams(cell="gru", max_input=12, max_hidden=20, tile_rows=8, tile_cols=4)


def need(simulator: str) -> None:
    """Skip (visibly, with the reason) when ``simulator`` cannot run here."""
    from tandem.sim.toolchain import prepare

    try:
        prepare(simulator)
    except UserError as exc:
        pytest.skip(str(exc))


def rtl(cls, simulator, cache, run_dir, *args, **kwargs):
    return cls(
        *args,
        backend="rtl",
        simulator=simulator,
        cache_dir=cache,
        run_dir=run_dir,
        timeout_s=300,
        **kwargs,
    )


def run_script(script, golden, device):
    """``script`` on the golden device, then on ``device`` (RTL): lazy start, clean close."""
    want = script(golden)
    with device as dev:
        assert not dev.backend.started  # lazy: nothing runs before the first call
        got = script(dev)
        assert dev.backend.started
    assert not dev.backend.started  # closed: the simulator is gone
    return want, got


# --- sparse-mpe ----------------------------------------------------------------------------
def mpe_script(dev):
    rng = np.random.default_rng(7)
    w = prune_magnitude(rng.integers(-128, 128, (24, 96)), NMPattern(2, 4), pair_rows=True)
    dev.load(w.astype(np.int8), "2:4")
    x = rng.integers(-128, 128, 96).astype(np.int8)
    xs = rng.integers(-128, 128, (96, 7)).astype(np.int8)  # batches of 4 and 3 tokens
    out = [(dev.gemv(x), dev.last_cycles), (dev.gemm(xs), dev.last_cycles)]
    dev.load(
        prune_magnitude(rng.integers(-128, 128, (10, 200)), NMPattern(1, 8)).astype(np.int8), "1:8"
    )
    out.append((dev.gemv(rng.integers(-128, 128, 200).astype(np.int8)), dev.last_cycles))
    xs = rng.integers(-128, 128, (200, 5)).astype(np.int8)  # 4 tokens, then 1
    out.append((dev.gemm(xs), dev.last_cycles))
    return out


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_mpe_rtl_bit_identical(simulator, sim_cache, tmp_path):
    need(simulator)
    golden, got = run_script(
        mpe_script,
        SparseMpeDevice(MPE),
        rtl(SparseMpeDevice, simulator, sim_cache, tmp_path, MPE),
    )
    for (y, modelled), (z, simulated) in zip(golden, got, strict=True):
        assert z.dtype == np.int32 and np.array_equal(y, z)
        assert simulated > 0
        print(
            f"sparse-mpe {simulator}: model {modelled}, RTL {simulated} cycles, "
            f"ratio {modelled / simulated:.3f}"
        )
        # Exact also for 3-4 tokens: each further token pair's capture stalls the pipeline
        # until the result serializer is empty, which mpe_cycles counts.
        assert simulated == modelled, (modelled, simulated)


# --- rnn -----------------------------------------------------------------------------------
def rnn_script(dev):
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    out = []
    for x_size, h_size in ((6, 10), (8, 12)):  # a second model: the program is loaded again
        dev.load(torch.nn.LSTM(x_size, h_size).state_dict())
        for steps, batch in ((4, 3), (2, 2)):  # batch 3: two commands, the second padded
            x = dev.quantize(rng.standard_normal((steps, batch, x_size)))
            out.append((*dev.run(x), dev.last_cycles))
    return out


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_rnn_rtl_bit_identical(simulator, sim_cache, tmp_path):
    need(simulator)
    golden, got = run_script(
        rnn_script, RnnDevice(RNN), rtl(RnnDevice, simulator, sim_cache, tmp_path, RNN)
    )
    for (h, c, modelled), (h2, c2, simulated) in zip(golden, got, strict=True):
        assert np.array_equal(h, h2) and np.array_equal(c, c2)
        print(f"rnn {simulator}: model {modelled}, RTL {simulated} cycles")
        assert simulated == modelled > 0  # the scheduler's model is cycle-exact


def gru_script(dev):
    torch.manual_seed(4)
    rng = np.random.default_rng(4)
    out = []
    # A small GRU, then the engine's largest (a second program, every memory row used).
    for x_size, h_size, steps, batch in ((5, 7, 4, 3), (12, 20, 2, 2)):
        dev.load(torch.nn.GRU(x_size, h_size).state_dict())
        x = dev.quantize(2 * rng.standard_normal((steps, batch, x_size)))
        h, c = dev.run(x)  # batch 3: two commands, the second padded
        assert c is None
        out.append((h, dev.last_cycles))
    return out


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_gru_rtl_bit_identical(simulator, sim_cache, tmp_path):
    need(simulator)
    golden, got = run_script(
        gru_script, RnnDevice(GRU), rtl(RnnDevice, simulator, sim_cache, tmp_path, GRU)
    )
    for (h, modelled), (h2, simulated) in zip(golden, got, strict=True):
        assert np.array_equal(h, h2)
        print(f"rnn gru {simulator}: model {modelled}, RTL {simulated} cycles")
        assert simulated == modelled > 0  # the same scheduler model, cycle-exact for GRU too


# --- systolic + sparse-engine ----------------------------------------------------------------
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
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_spmm_rtl_bit_identical(simulator, sim_cache, tmp_path):
    need(simulator)
    script = spmm_script(766 if simulator == "verilator" else 200)
    golden = SpmmDevice(SYSTOLIC, SPARSE, features=5, tile=8)
    device = rtl(SpmmDevice, simulator, sim_cache, tmp_path, SYSTOLIC, SPARSE, features=5, tile=8)
    (acc, out, modelled, span), (acc2, out2, simulated, span2) = run_script(script, golden, device)
    assert np.array_equal(acc, acc2) and np.array_equal(out, out2)
    print(f"spmm {simulator}: model {modelled}, RTL {simulated}")
    # Both engines' RTL takes exactly the cost model's cycles; memory stays modelled.
    assert simulated == modelled and span2 == span == modelled["makespan"]
    assert min(simulated["systolic"], simulated["sparse-engine"]) > 0


# --- errors --------------------------------------------------------------------------------
@pytest.mark.rtl
def test_rtl_errors_are_exceptions_not_hangs(sim_cache, tmp_path):
    need("verilator")
    rng = np.random.default_rng(1)
    w = prune_magnitude(rng.integers(-128, 128, (16, 64)), NMPattern(2, 4), pair_rows=True)
    x = rng.integers(-128, 128, 64).astype(np.int8)
    want = w.astype(np.int64) @ x
    dev = rtl(SparseMpeDevice, "verilator", sim_cache, tmp_path / "a", MPE)
    dev.load(w.astype(np.int8), "2:4")
    engine = dev.backend.client
    streams = mpe_streams(MPE, dev.packed, x.astype(np.int64), "mv")
    with pytest.raises(CosimError, match="has no stream 'nope'"):  # a bad request
        engine.stream([("send", "nope", [1])], 1)
    acts = [streams.act_payload(t) for t in range(len(streams.act_beats))]
    weights = [streams.weight_payload(t) for t in range(len(streams.w_beats))]
    missing = [
        ("send", "cfg_i", [streams.config_word]),
        ("load", "act_i", acts),
        ("send", "w_i", weights),
        ("recv", "o", streams.outputs + 3),  # three results that never come
    ]
    with pytest.raises(CosimError, match="not done within the budget"):
        engine.stream(missing, 10)
    assert np.array_equal(dev.gemv(x), want)  # the server reset the engine and goes on
    assert dev.last_cycles == mpe_cycles(streams)
    engine.timeout_s = 1e-3  # far less than a request takes
    with pytest.raises(CosimTimeoutError, match="did not answer"):
        dev.gemv(x)
    assert not engine.started  # stopped, not hanging
    engine.timeout_s = 300
    assert np.array_equal(dev.gemv(x), want)  # a fresh simulator on the next call
    engine.kill()  # what a simulator crash looks like to the host
    with pytest.raises(CosimError, match="died"):
        dev.gemv(x)
    dev.close()
    with pytest.raises(DeviceClosedError, match="closed"):  # as on golden
        dev.gemv(x)
