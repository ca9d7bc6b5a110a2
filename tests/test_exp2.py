import numpy as np
import pytest
from tandem.host.common.exp2 import Exp2Params, exp2_golden, exp2_reference
from tandem.hw.common.exp2 import Exp2
from tandem.sim.amaranth_sim import run_scenario

from .rtl import assert_regression_passes


def test_golden_error_against_float64_is_within_one_lsb_everywhere():
    params = Exp2Params()
    x = params.input_range()  # exhaustive: all 2**17 inputs
    error = np.abs(exp2_golden(params, x) / 2.0**params.out_frac_bits - exp2_reference(params, x))
    assert error.max() * 2**params.out_frac_bits < 1.0
    assert exp2_golden(params, [0, 1, 100])[0] == 1 << params.out_frac_bits  # 2**0 is exact


def test_golden_is_monotonic_and_flushes_to_zero():
    params = Exp2Params()
    y = exp2_golden(params, params.input_range())
    assert np.all(np.diff(y) >= 0)
    assert y[0] == 0


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"lut_bits": 8, "in_frac_bits": 8},
        {
            "in_int_bits": 4,
            "in_frac_bits": 4,
            "lut_bits": 4,
            "out_frac_bits": 10,
            "lut_frac_bits": 12,
        },
    ],
)
def test_gateware_matches_golden_in_amaranth_sim(overrides):
    params = Exp2Params(**overrides)
    rng = np.random.default_rng(7)
    lo = -(1 << (params.in_width - 1))
    x = np.concatenate([rng.integers(lo, -lo, 250), [0, -1, 1, lo, -lo - 1]])
    out, _cycles = run_scenario(Exp2(params), x.tolist(), len(x), valid_gaps=0.2, backpressure=0.3)
    assert out == exp2_golden(params, x).tolist()


def test_gateware_streams_at_line_rate():
    params = Exp2Params()
    x = list(range(0, -400, -1))
    out, cycles = run_scenario(Exp2(params), x, len(x))
    assert out == exp2_golden(params, x).tolist()
    assert cycles <= len(x) + Exp2.LATENCY + 1


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_rtl_regression(simulator, seed, sim_cache, tmp_path):
    assert_regression_passes("exp2", simulator, seed, sim_cache, tmp_path)
