import os

import pytest
from tandem.host.common.threads import available_cores, configure_threads

# Each xdist worker gets its share of the cores for torch, BLAS and OpenMP, set before any test
# imports them: pools sized to every core in every worker fight over the same cores.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
configure_threads(max(1, available_cores() // _workers))

# The suite's Verilator models run short regressions: built at -O0 they compile in about a fifth
# of the CPU time and the whole build-and-run of the slowest RTL tests takes less time than at
# verilated.mk's -Os (docs/benchmarks.md, "Test-suite builds"). Benchmarks keep -Os.
os.environ.setdefault("TANDEM_VERILATOR_OPT", "-O0")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns "auto" into a count
def pytest_cmdline_main(config):
    """``-n auto`` where pytest-xdist is installed and no ``-n``, ``--tx`` or ``--pdb`` was given.

    Here rather than in pyproject's ``addopts``, where pytest without xdist rejects ``-n``. Never
    in an xdist worker (it runs this hook too, with ``-n`` cleared): it would start workers of
    its own.
    """
    option = config.option
    if (
        config.pluginmanager.hasplugin("xdist")
        and not hasattr(config, "workerinput")
        and "PYTEST_XDIST_WORKER" not in os.environ
        and getattr(option, "numprocesses", 0) is None
        and not getattr(option, "tx", None)
        and not getattr(option, "usepdb", False)
    ):
        option.numprocesses = "auto"


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=20261121, help="stimulus seed of RTL regressions")


@pytest.fixture(scope="session")
def seed(request) -> int:
    return request.config.getoption("--seed")


@pytest.fixture(scope="session")
def sim_cache(tmp_path_factory):
    """Simulator build cache shared by all xdist workers of one pytest run."""
    root = tmp_path_factory.getbasetemp()
    shared = root.parent if root.name.startswith("popen-gw") else root
    path = shared / "sim-cache"
    path.mkdir(exist_ok=True)
    return path
