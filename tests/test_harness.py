import json

import pytest
from tandem.sim.runner import run_regression
from tandem.sim.scoreboard import Scoreboard, first_mismatch
from tandem.sim.stream import pack_fields, to_signed

from .broken_exp2_tb import BROKEN


def test_scoreboard_names_the_first_mismatch():
    Scoreboard("ok", [1, 2, 3], [7, 8, 9]).check([1, 2, 3])
    with pytest.raises(
        AssertionError, match=r"first mismatch at index 1 \(input 0x8\): expected 2, got 5; 2 of 3"
    ):
        Scoreboard("x", [1, 2, 3], [7, 8, 9]).check([1, 5, 4])
    with pytest.raises(AssertionError, match=r"expected 3 outputs, got 2"):
        Scoreboard("x", [1, 2, 3]).check([1, 2])
    assert first_mismatch([1, 2], [1, 2]) is None


def test_payload_packing():
    assert pack_fields([-1, 1, 1], [4, 4, 1]) == 0b1_0001_1111
    assert to_signed(0xFF, 8) == -1 and to_signed(0x7F, 8) == 127


@pytest.mark.rtl
def test_a_wrong_golden_model_fails_with_the_first_mismatch(sim_cache, tmp_path):
    result = run_regression(
        BROKEN,
        BROKEN.params(),
        simulator="verilator",
        seed=1,
        cache_dir=sim_cache,
        run_dir=tmp_path,
    )
    assert not result.passed
    (test,) = result.tests
    assert "first mismatch at index" in test.message and "(input -0x1)" in test.message


@pytest.mark.rtl
def test_cached_build_is_reused_and_figures_come_back(sim_cache, tmp_path):
    from tandem.registry import get_design

    design = get_design("adder-tree")
    params = design.params(n_inputs=4, in_bits=6)
    first = run_regression(design, params, seed=2, cache_dir=sim_cache, run_dir=tmp_path / "a")
    second = run_regression(design, params, seed=2, cache_dir=sim_cache, run_dir=tmp_path / "b")
    assert first.passed and second.passed and second.build_cached
    assert first.cycles == second.cycles > 0
    figures = json.loads((tmp_path / "b" / "results.json").read_text())
    assert figures["line_rate"]["throughput"] > 0.9


@pytest.mark.rtl
def test_a_cached_build_runs_without_generating_again(tmp_path, monkeypatch):
    """The Verilog is generated once per (design, parameters, sources, tools): a later run of a
    cached build reads the manifest written beside it; other parameters generate again, and a
    build removed from the cache is generated and built again."""
    import shutil

    from tandem.sim import runner

    from tandem.registry import get_design

    design = get_design("adder-tree")
    params = design.params(n_inputs=4, in_bits=5)
    cache = tmp_path / "cache"
    first = run_regression(
        design, params, simulator="icarus", seed=3, cache_dir=cache, run_dir=tmp_path / "a"
    )
    generated = []
    real_generate = runner.generate
    monkeypatch.setattr(runner, "generate", lambda *a: generated.append(a) or real_generate(*a))
    second = run_regression(
        design, params, simulator="icarus", seed=3, cache_dir=cache, run_dir=tmp_path / "b"
    )
    assert first.passed and second.passed and second.build_cached and not generated
    assert (tmp_path / "b" / "adder-tree.manifest.json").read_bytes() == (
        tmp_path / "a" / "adder-tree.manifest.json"
    ).read_bytes()
    other = design.params(n_inputs=4, in_bits=6)
    run_regression(design, other, simulator="icarus", seed=3, cache_dir=cache, run_dir=tmp_path)
    assert len(generated) == 1
    shutil.rmtree(first.build_dir)
    again = run_regression(
        design, params, simulator="icarus", seed=3, cache_dir=cache, run_dir=tmp_path / "c"
    )
    assert again.passed and not again.build_cached and len(generated) == 2
