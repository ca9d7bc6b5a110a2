"""One convention for what commands write and print (issue 17): without ``-o`` the files go
under ``build/<command>/<design or tool>`` in the working folder and their paths are printed;
``-o`` still chooses the place; ``--json`` prints the command's figures as JSON on stdout and
nothing else there."""

import json
from pathlib import Path

import numpy as np
import pytest
from tandem.hw.common.exp2 import Exp2

from tandem.cli import main

MTX = "%%MatrixMarket matrix coordinate real general\n8 8 3\n1 2 1.0\n3 4 1.0\n8 1 1.0\n"


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A fresh working folder with a graph and a 2:4 weight matrix in it."""
    monkeypatch.chdir(tmp_path)
    Path("g.mtx").write_text(MTX)
    np.save("W.npy", np.eye(8, 16, dtype=np.int8))
    return tmp_path


#: Each command that writes files, the folder it writes into without -o, and what it writes.
COMMANDS = {
    "generate": (
        ["generate", "exp2", "--board", "u280"],
        "build/generate/exp2",
        ["exp2.v", "exp2.manifest.json", "exp2.xdc"],
    ),
    "map spmm": (
        ["map", "spmm", "--graph", "g.mtx", "--features", "16", "--no-heatmap"],
        "build/map/spmm",
        ["mapping.yaml", "mapping.npz"],
    ),
    "map rnn": (
        ["map", "rnn", "--input", "32", "--hidden", "32", "--no-plot"],
        "build/map/rnn",
        ["lstm_x32_h32.schedule.yaml", "lstm_x32_h32.program.npz"],
    ),
    "pack nm": (
        ["pack", "nm", "--weights", "W.npy", "--pattern", "2:4"],
        "build/pack/nm",
        ["W.npz"],
    ),
}


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_without_output_the_files_go_under_build(name, work, capsys):
    args, folder, names = COMMANDS[name]
    assert main(args) == 0
    out = capsys.readouterr().out
    written = sorted(f"{folder}/{n}" for n in names)
    assert [f for f in _files(work) if f.startswith("build/")] == written
    for path in written:  # the user is told where each file went
        assert path in out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_output_still_chooses_the_place(name, work, capsys):
    args, _, names = COMMANDS[name]
    target = "elsewhere/p.npz" if name == "pack nm" else "elsewhere"
    assert main([*args, "-o", target]) == 0
    capsys.readouterr()
    assert not (work / "build").exists()
    expected = ["elsewhere/p.npz"] if name == "pack nm" else [f"elsewhere/{n}" for n in names]
    assert [f for f in _files(work) if f.startswith("elsewhere")] == sorted(expected)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_json_is_the_only_thing_on_stdout_and_names_the_files(name, work, capsys):
    args, folder, names = COMMANDS[name]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(data["files"]) == sorted(f"{folder}/{n}" for n in names)
    assert all(Path(f).is_file() for f in data["files"])


def test_json_holds_the_figures(work, capsys):
    """Each command's figures, as the files (or the text report) state them."""
    import yaml

    assert main([*COMMANDS["generate"][0], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["output"] == "build/generate/exp2"
    manifest = json.loads(Path("build/generate/exp2/exp2.manifest.json").read_text())
    assert data["manifest"] == manifest and data["manifest"]["latency"] == Exp2.LATENCY

    assert main([*COMMANDS["map spmm"][0], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    summary = yaml.safe_load(Path("build/map/spmm/mapping.yaml").read_text())
    assert {k: v for k, v in data.items() if k not in ("output", "files")} == summary
    assert data["cycles"]["makespan"] > 0 and data["speedup_vs_best_baseline"] > 0

    assert main(COMMANDS["map rnn"][0]) == 0
    text = capsys.readouterr().out
    assert main([*COMMANDS["map rnn"][0], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    schedule = yaml.safe_load(Path(data["files"][0]).read_text())
    assert data["predicted"] == schedule["predicted"]
    row = next(line.split() for line in text.splitlines() if line.startswith("overlapped"))
    assert int(row[3]) == data["predicted"]["sequence_cycles"]  # the text report's figure
    assert 0 < data["predicted"]["mac_utilization"] <= 1 and data["speedup_over_naive"] >= 1

    assert main([*COMMANDS["pack nm"][0], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["rows"], data["cols"], data["pattern"]) == (8, 16, "2:4")
    assert (data["slots"], data["nonzeros"]) == (64, 8)
    assert data["row_pairs"] == 4 and data["row_pairs_sharing_indices"] == 4


def test_an_empty_output_is_still_an_error(work, capsys):
    """``-o ''`` is not the default folder: one line, exit 2, nothing written."""
    for args, _, _ in COMMANDS.values():
        assert main([*args, "-o", ""]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(COMMANDS) and all("empty string" in line for line in err), err
    assert not (work / "build").exists()
