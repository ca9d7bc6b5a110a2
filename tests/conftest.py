import pytest


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
