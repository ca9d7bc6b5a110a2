"""Shared bodies of the RTL tests: regressions of a design, devices on the RTL backend."""

import pytest
from tandem.sim.runner import run_regression

from tandem.errors import UserError
from tandem.registry import get_design

SIMULATORS = ["verilator", "icarus"]
#: How a device test reaches its RTL: Verilator through the native C++ harness (the RTL
#: backend's default), Verilator under cocotb, Icarus under cocotb. Every device script runs
#: on all three and must give the golden results with the same cycles on each.
ROUTES = ["native", "verilator", "icarus"]


def route_options(route: str) -> dict:
    """The RTL backend's ``simulator`` and ``harness`` of a route of :data:`ROUTES`."""
    if route == "native":
        return {"simulator": "verilator", "harness": "native"}
    return {"simulator": route, "harness": "cocotb"}


def assert_regression_passes(name, simulator, seed, cache, run_dir, **overrides):
    design = get_design(name)
    params = design.params(**overrides)
    result = run_regression(
        design, params, simulator=simulator, seed=seed, cache_dir=cache, run_dir=run_dir
    )
    assert result.tests, f"no cocotb test ran; log {result.log_file}"
    assert result.passed, result.summary()
    return result


def need(simulator: str) -> None:
    """Skip (visibly, with the reason) when ``simulator`` (or a route) cannot run here."""
    from tandem.sim.toolchain import prepare

    try:
        prepare(route_options(simulator)["simulator"])
    except UserError as exc:
        pytest.skip(str(exc))


def rtl_device(cls, route, cache, run_dir, *args, **kwargs):
    """A ``cls`` device on the RTL backend through ``route`` (:data:`ROUTES`), building into
    ``cache`` and running in ``run_dir``."""
    return cls(
        *args,
        backend="rtl",
        **route_options(route),
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
