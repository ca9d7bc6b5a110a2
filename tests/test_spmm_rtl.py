"""RTL regressions of the SpMM engines: ``tandem.sim.spmm.*_tb`` in Verilator and Icarus.

Each runs every test of its cocotb module (fully dense tile, single non-zero and empty rows,
maximum values, duplicate (row, col) hazards for the sparse engine, random valid gaps and
backpressure, and a line-rate run whose cycles must equal the cost model's prediction).
Configurations are small to keep the builds short; a non-square array and lane counts that
do not divide the feature count exercise the padding.
"""

import pytest

from .rtl import assert_regression_passes

CONFIGS = {
    "systolic": {"rows": 4, "cols": 3, "a_bits": 10, "a_frac": 8, "x_bits": 9, "acc_bits": 26},
    "sparse-engine": {
        "lanes": 3,
        "tile": 8,
        "a_bits": 10,
        "a_frac": 8,
        "x_bits": 9,
        "acc_bits": 26,
    },
}


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
@pytest.mark.parametrize("design", sorted(CONFIGS))
def test_rtl_regression(design, simulator, seed, sim_cache, tmp_path):
    result = assert_regression_passes(
        design, simulator, seed, sim_cache, tmp_path, **CONFIGS[design]
    )
    figures = {t.name: t.figures for t in result.tests}
    assert figures["line_rate"]["cycles"] == figures["line_rate"]["predicted"], figures
