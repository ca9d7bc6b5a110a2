"""RTL regression of ``hpu-card``: the cocotb module ``tandem.sim.hpu.card_tb`` on generated
Verilog, in Verilator and Icarus.

Two engines of the small ``hpu`` configuration (head_dim 32, int8 K and V on 128-bit ports,
two queries, 64 tokens) over four pseudo-channels of 32 KiB, so each engine owns two channels
and a build stays within a minute or two per simulator on two cores. Every test of the module
runs: a routed batch over every channel, engines overlapping (a long request on one engine
finishes after short ones on the other), random batches under random latency and
backpressure, each engine's results compared in order with the golden model, and a decode
step on the shared HBM model (``hbm_decode``: no channel beyond its sustained rate, the card
cycle model within 15 % of the simulated cycles, as the engine's co-simulation test allows).
"""

import pytest

from .rtl import assert_regression_passes
from .test_hpu_card import CARD


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_rtl_regression(simulator, seed, sim_cache, tmp_path):
    result = assert_regression_passes("hpu-card", simulator, seed, sim_cache, tmp_path, **CARD)
    figures = {t.name: t.figures for t in result.tests}
    assert set(figures) >= {"routed_batch", "engines_overlap", "random_traffic", "hbm_decode"}
    assert all(figures["routed_batch"]["requests_per_engine"]), figures
    hbm = figures["hbm_decode"]
    assert abs(hbm["model_cycles"] / hbm["cycles"] - 1) <= 0.15, hbm
