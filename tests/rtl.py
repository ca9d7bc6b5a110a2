"""Shared body of the RTL regression tests."""

from tandem.sim.runner import run_regression

from tandem.registry import get_design


def assert_regression_passes(name, simulator, seed, cache, run_dir, **overrides):
    design = get_design(name)
    params = design.params(**overrides)
    result = run_regression(
        design, params, simulator=simulator, seed=seed, cache_dir=cache, run_dir=run_dir
    )
    assert result.tests, f"no cocotb test ran; log {result.log_file}"
    assert result.passed, result.summary()
    return result
