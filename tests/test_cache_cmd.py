"""``tandem cache list`` and ``tandem cache clean`` on a cache folder of the test's own."""

import fcntl
import json
import os
import re
import shutil
import time

import pytest

from tandem.cli import main

DAY = 86400


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """``$XDG_CACHE_HOME/tandem`` in a temporary folder (what the runner and model code read)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "tandem"


def _build(root, name, size, age_days, params=None, complete=True):
    """A simulator build as tandem.sim.runner leaves it, last used ``age_days`` ago."""
    design = name.rsplit("-", 2)[0]
    path = root / "sim" / name
    path.mkdir(parents=True)
    (path / f"{design}.v").write_bytes(b"x" * size)
    (path / f"{design}.manifest.json").write_text(json.dumps({"params": params or {}}))
    total = size + (path / f"{design}.manifest.json").stat().st_size
    if complete:
        (path / ".tandem-built").write_text("ok\n")
        total += 3
    lock = root / "sim" / f".{name}.lock"
    lock.touch()
    when = time.time() - age_days * DAY
    for p in (*path.iterdir(), path, lock):
        os.utime(p, (when, when))
    return total


def _model(root, age_days):
    path = root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"GGUF" + b"\0" * 96)
    when = time.time() - age_days * DAY
    os.utime(path, (when, when))
    return path


def _list(capsys):
    capsys.readouterr()  # what came before
    assert main(["cache", "list", "--json"]) == 0
    return {e["name"]: e for e in json.loads(capsys.readouterr().out)}


def test_list_shows_each_build_and_model(cache_root, capsys):
    size = _build(cache_root, "exp2-verilator-0123456789abcdef0123", 1000, 3, {"in_frac": 12})
    _build(cache_root, "adder-tree-icarus-fedcba9876543210fedc", 50, 40, complete=False)
    _model(cache_root, 100)
    entries = _list(capsys)
    exp2 = entries["exp2-verilator-0123456789abcdef0123"]
    assert (exp2["kind"], exp2["design"], exp2["simulator"]) == ("sim", "exp2", "verilator")
    assert exp2["key"] == "0123456789abcdef0123" and exp2["size"] == size
    assert exp2["params"] == {"in_frac": 12} and exp2["complete"]
    assert entries["adder-tree-icarus-fedcba9876543210fedc"]["design"] == "adder-tree"
    assert not entries["adder-tree-icarus-fedcba9876543210fedc"]["complete"]
    model = entries["SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert (model["kind"], model["design"], model["size"]) == ("models", "smollm2-135m", 100)
    assert main(["cache", "list"]) == 0
    table = capsys.readouterr().out
    assert re.search(
        r"^sim +exp2 +verilator +0123456789abcdef0123 +1\.0 KiB +3 d ago$", table, re.M
    )
    assert "(incomplete)" in table and "3 d ago" in table
    assert table.splitlines()[-1].startswith("3 entries, ")


def test_list_of_an_empty_cache(cache_root, capsys):
    assert main(["cache", "list"]) == 0
    assert capsys.readouterr().out.strip() == f"{cache_root}: empty"


def test_clean_older_than_removes_old_builds_and_never_models(cache_root, capsys):
    old = _build(cache_root, "exp2-icarus-00000000000000000001", 700, 30)
    _build(cache_root, "exp2-verilator-00000000000000000002", 900, 1)
    model = _model(cache_root, 365)
    assert main(["cache", "clean", "--older-than", "7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("removed ") and "exp2-icarus-00000000000000000001" in out[0]
    assert out[-1] == f"freed {old} bytes ({old} B) in 1 entries"
    assert not (cache_root / "sim" / "exp2-icarus-00000000000000000001").exists()
    assert not (cache_root / "sim" / ".exp2-icarus-00000000000000000001.lock").exists()
    assert (cache_root / "sim" / "exp2-verilator-00000000000000000002").exists()
    assert model.exists()
    assert main(["cache", "clean", "--older-than", "7", "--models"]) == 0
    assert not model.exists()
    assert capsys.readouterr().out.splitlines()[-1] == "freed 100 bytes (100 B) in 1 entries"


def test_clean_by_design_all_and_dry_run(cache_root, capsys):
    _build(cache_root, "exp2-icarus-00000000000000000001", 10, 0)
    keep = _build(cache_root, "mac-verilator-00000000000000000003", 20, 0)
    model = _model(cache_root, 0)
    assert main(["cache", "clean", "--design", "exp2"]) == 0
    assert set(_list(capsys)) == {"mac-verilator-00000000000000000003", model.name}
    assert main(["cache", "clean", "--all", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would free {keep} bytes" in out and len(_list(capsys)) == 2
    assert main(["cache", "clean", "--all"]) == 0
    assert set(_list(capsys)) == {model.name}
    assert main(["cache", "clean", "--all", "--models"]) == 0
    assert _list(capsys) == {}


def test_clean_keeps_a_build_under_way(cache_root, capsys):
    name = "exp2-verilator-00000000000000000004"
    _build(cache_root, name, 10, 30, complete=False)
    with open(cache_root / "sim" / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # what tandem.sim.runner holds while it builds
        assert main(["cache", "clean", "--all"]) == 0
    out = capsys.readouterr().out
    assert "it is being built" in out and "freed 0 bytes" in out
    assert (cache_root / "sim" / name).exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "say what to remove: --older-than DAYS, --design NAME or --all"),
        (["--design", "exp3"], "unknown design 'exp3' (did you mean 'exp2'?)"),
        (["--older-than", "-1"], "--older-than must be a number of days in 0..100000, not -1.0"),
        (["--older-than", "soon"], "argument --older-than: invalid float value: 'soon'"),
    ],
)
def test_clean_bad_input_is_one_line(cache_root, capsys, argv, message):
    try:
        status = main(["cache", "clean", *argv])
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    assert status == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(message)


@pytest.mark.rtl
@pytest.mark.skipif(shutil.which("iverilog") is None, reason="icarus verilog not installed")
def test_a_real_build_is_listed_with_its_parameters(cache_root, tmp_path, capsys):
    from tandem.sim.runner import run_regression

    from tandem.registry import get_design

    design = get_design("adder-tree")
    params = design.params()
    result = run_regression(design, params, simulator="icarus", run_dir=tmp_path / "run")
    assert result.passed
    (entry,) = _list(capsys).values()
    assert entry["name"] == result.build_dir.name
    assert (entry["design"], entry["simulator"]) == ("adder-tree", "icarus")
    assert entry["params"] == json.loads(json.dumps(params.to_dict()))
    assert main(["cache", "clean", "--design", "adder-tree"]) == 0
    assert not result.build_dir.exists()


def test_a_build_from_another_python_environment_is_not_reused(monkeypatch):
    """A Verilator build links cocotb's libraries by path: another environment's build (its
    cocotb elsewhere, perhaps gone) gets a key of its own, not this one's."""
    from tandem.sim import runner

    from tandem.registry import get_design

    design = get_design("adder-tree")
    params = design.params()
    here = runner._cache_key(design, params, "verilator", "0" * 64, False)
    monkeypatch.setattr(runner, "_cocotb_libs", lambda: "/elsewhere/venv/cocotb/libs")
    assert runner._cache_key(design, params, "verilator", "0" * 64, False) != here
