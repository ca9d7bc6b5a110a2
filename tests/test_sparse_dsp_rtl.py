"""RTL regressions of ``sparse-dsp-chain`` and ``sparse-mpe`` (cocotb, Verilator and Icarus).

Each runs every test of its cocotb module (``tandem.sim.sparse_dsp.chain_tb`` / ``mpe_tb``):
every N:M pattern up to ``max_m`` (1:2 ... 16:16) in both modes with the pattern changing
between requests, -128 everywhere (the overflow-adjust window and the longest carries), every
cascade segment, rows that cannot share a DSP, random gaps and backpressure, reset in the middle
of a request, and a back-to-back run that must keep one beat per cycle. One configuration per
design keeps the builds within the CI budget: an 8-stage chain (so eight-product cascades, the
overflow-adjust corner, run in RTL), and 2 chains x 4 stages with a 256-column buffer and
batches up to 4 (its 64-byte buffer word keeps the Verilator build small).
"""

import pytest

from .rtl import assert_regression_passes

CONFIGS = {
    "sparse-dsp-chain": {"stages": 8},
    "sparse-mpe": {"chains": 2, "stages": 4, "max_k": 256, "max_batch": 4},
}


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
@pytest.mark.parametrize("design", sorted(CONFIGS))
def test_rtl_regression(design, simulator, seed, sim_cache, tmp_path):
    result = assert_regression_passes(
        design, simulator, seed, sim_cache, tmp_path, **CONFIGS[design]
    )
    figures = {t.name: t.figures for t in result.tests}
    # The cocotb test asserts the cycle bound; this catches a run that recorded nothing.
    assert figures["line_rate"]["dsp_utilization"] > 0.8, figures
