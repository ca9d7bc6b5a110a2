import numpy as np
import pytest
from tandem.host.common.arith import AdderTreeParams, MacParams, adder_tree_golden, mac_golden, wrap
from tandem.hw.common.adder_tree import AdderTree
from tandem.hw.common.mac import Mac
from tandem.sim.amaranth_sim import run_scenario

from .rtl import assert_regression_passes


def test_wrap():
    assert wrap([127, 128, -129, 255], 8).tolist() == [127, -128, 127, -1]


def test_mac_golden_groups_and_wraps():
    params = MacParams(acc_bits=8)
    out = mac_golden(params, [10, 10, 3, 100], [10, 10, 1, 2], [False, True, True, False])
    assert out.tolist() == [wrap(200, 8), 3]


@pytest.mark.parametrize("n_inputs", [2, 3, 8, 13])
def test_adder_tree_matches_golden(n_inputs):
    params = AdderTreeParams(n_inputs=n_inputs, in_bits=8)
    rng = np.random.default_rng(n_inputs)
    rows = rng.integers(-128, 128, (60, n_inputs))
    rows[0], rows[1] = -128, 127
    out, _ = run_scenario(
        AdderTree(params), rows.tolist(), len(rows), valid_gaps=0.2, backpressure=0.3
    )
    assert out == adder_tree_golden(params, rows).tolist()


def test_mac_matches_golden_with_extremes():
    params = MacParams()
    rng = np.random.default_rng(0)
    n = 200
    a = rng.integers(-(1 << 26), 1 << 26, n)
    b = rng.integers(-(1 << 17), 1 << 17, n)
    a[:6], b[:6] = -(1 << 26), -(1 << 17)
    last = rng.random(n) < 0.2
    last[-1] = True
    expected = mac_golden(params, a, b, last)
    inputs = [{"a": int(x), "b": int(y), "last": int(z)} for x, y, z in zip(a, b, last)]
    out, _ = run_scenario(Mac(params), inputs, len(expected), valid_gaps=0.2, backpressure=0.5)
    assert out == expected.tolist()


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
@pytest.mark.parametrize("design", ["adder-tree", "mac"])
def test_rtl_regression(design, simulator, seed, sim_cache, tmp_path):
    assert_regression_passes(design, simulator, seed, sim_cache, tmp_path)
