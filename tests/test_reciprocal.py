import numpy as np
import pytest
from tandem.host.common.reciprocal import (
    ReciprocalParams,
    leading_one,
    reciprocal_golden,
    reciprocal_reference,
)
from tandem.host.hpu import HpuParams
from tandem.hw.common.reciprocal import Reciprocal
from tandem.sim.amaranth_sim import run_scenario

from .rtl import assert_regression_passes


def _errors(params):
    x = params.input_range()[1:]
    ref = reciprocal_reference(params, x)
    fits = ref < ((1 << params.out_bits) - 1) / 2.0**params.out_frac_bits
    got = reciprocal_golden(params, x) / 2.0**params.out_frac_bits
    return x[fits], np.abs(got - ref)[fits], ref[fits]


def test_golden_error_is_set_by_the_working_precision():
    params = ReciprocalParams()
    _x, abs_error, ref = _errors(params)  # exhaustive over every non-zero input
    lsb = 2.0**-params.out_frac_bits
    # Each result is within half an output LSB plus the working precision's relative error.
    assert np.all(abs_error <= lsb / 2 + ref * 2.0 ** -(params.work_frac_bits - 1))


def test_more_newton_steps_do_not_hurt_and_zero_saturates():
    worst = [
        _errors(ReciprocalParams(newton_steps=s, work_frac_bits=24))[1].max() for s in (0, 1, 2)
    ]
    assert worst[0] > worst[1] >= worst[2]
    params = ReciprocalParams()
    top = (1 << params.out_bits) - 1
    assert reciprocal_golden(params, [0, 1])[0] == top
    assert reciprocal_golden(params, [1 << params.in_frac_bits])[0] == 1 << params.out_frac_bits


def test_mantissa_only_gives_one_over_the_normalized_input():
    params = HpuParams().reciprocal
    assert (params.in_bits, params.out_frac_bits, params.mantissa_only) == (29, 16, 1)
    x = np.random.default_rng(5).integers(1, 1 << 29, 200000)
    mantissa = x / 2.0 ** leading_one(x, 29)  # in [1, 2)
    got = reciprocal_golden(params, x) / 2.0**16
    assert np.all((got >= 0.5) & (got <= 1.0))
    # The 16-bit working precision (inputs truncated to it) and one Newton step cost up to
    # 1.8 output LSBs.
    assert np.abs(got - 1.0 / mantissa).max() <= 1.8 * 2.0**-16
    assert reciprocal_golden(params, [0])[0] == (1 << 17) - 1


def test_leading_one():
    assert leading_one([0, 1, 2, 3, 255, 256], 16).tolist() == [0, 0, 1, 1, 7, 8]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"newton_steps": 0},
        {
            "in_bits": 12,
            "in_frac_bits": 0,
            "out_bits": 16,
            "out_frac_bits": 15,
            "work_frac_bits": 18,
            "newton_steps": 1,
        },
        # Wider than the working precision: normalization truncates.
        {
            "in_bits": 34,
            "in_frac_bits": 16,
            "out_bits": 30,
            "out_frac_bits": 29,
            "work_frac_bits": 24,
        },
        # The HPU's 1/l (1/m of l's mantissa), as HpuParams builds it, with its products in
        # DSP48E2s and in fabric.
        HpuParams(scaling_multipliers="dsp").reciprocal.to_dict(),
        HpuParams(scaling_multipliers="fabric").reciprocal.to_dict(),
        {"multipliers": "fabric"},
    ],
)
def test_gateware_matches_golden_in_amaranth_sim(overrides):
    params = ReciprocalParams(**overrides)
    rng = np.random.default_rng(3)
    top = (1 << params.in_bits) - 1
    x = np.concatenate([rng.integers(0, top + 1, 250), [0, 1, 2, 3, top, 1 << params.in_frac_bits]])
    out, _ = run_scenario(Reciprocal(params), x.tolist(), len(x), valid_gaps=0.2, backpressure=0.3)
    assert out == reciprocal_golden(params, x).tolist()


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_rtl_regression(simulator, seed, sim_cache, tmp_path):
    assert_regression_passes("reciprocal", simulator, seed, sim_cache, tmp_path)
