"""``backend="rtl"`` of SparseMpeDevice: the same script on golden and RTL.

A small script runs on both backends and must give bit-identical outputs; RTL cycles are
simulated and must equal the golden backend's ``mpe_cycles``, which is cycle-exact (GEMV and
GEMM requests of one to two token pairs). The engine configuration is that of
``tests/test_sparse_dsp_rtl.py``, so one pytest run builds its Verilator model once for both
files (the ``sim_cache`` fixture). The script runs through the native harness, Verilator under
cocotb and Icarus; the error test covers
a bad request, a result that never comes, a timeout, a killed simulator and a closed device.
"""

import numpy as np
import pytest
from tandem.host.common.errors import CosimError, CosimTimeoutError, DeviceClosedError
from tandem.host.sparse_dsp import SparseMpeParams
from tandem.host.sparse_dsp.device import SparseMpeDevice, mpe_cycles
from tandem.mappings.nm import NMPattern, mpe_streams, prune_magnitude

from .rtl import ROUTES, need, rtl_device, run_script

MPE = SparseMpeParams(chains=2, stages=4, max_k=256, max_batch=4)


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
@pytest.mark.parametrize("simulator", ROUTES)
def test_mpe_rtl_bit_identical(simulator, sim_cache, tmp_path):
    need(simulator)
    golden, got = run_script(
        mpe_script,
        SparseMpeDevice(MPE),
        rtl_device(SparseMpeDevice, simulator, sim_cache, tmp_path, MPE),
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


@pytest.mark.rtl
def test_rtl_errors_are_exceptions_not_hangs(sim_cache, tmp_path):
    need("native")
    rng = np.random.default_rng(1)
    w = prune_magnitude(rng.integers(-128, 128, (16, 64)), NMPattern(2, 4), pair_rows=True)
    x = rng.integers(-128, 128, 64).astype(np.int8)
    want = w.astype(np.int64) @ x
    dev = rtl_device(SparseMpeDevice, "native", sim_cache, tmp_path / "a", MPE)
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
    engine.timeout_s = 0.0  # no answer beats it (1 ms was raced by a fast Verilator reply)
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
