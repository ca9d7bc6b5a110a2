import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tandem.hw.common.exp2 import Exp2

from tandem.boards import board_names, gpu_names, load_board, load_gpu


def tandem(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "tandem", *args], capture_output=True, text=True, cwd=cwd
    )


def test_designs_lists_every_design_with_defaults():
    out = tandem("designs").stdout
    for name in ("exp2", "reciprocal", "adder-tree", "mac"):
        assert f"{name}:" in out
    data = json.loads(tandem("designs", "--json").stdout)
    exp2 = next(d for d in data if d["name"] == "exp2")
    assert {p["name"]: p["default"] for p in exp2["params"]}["lut_bits"] == 6
    # Every per-design fact of the registry, as JSON.
    hpu = next(d for d in data if d["name"] == "hpu")
    assert hpu["board"] == "u55c" and hpu["docs"] == "docs/hpu.md"
    assert hpu["cosim_server"] == "tandem.sim.cosim.hpu_server"
    assert hpu["sweep"]["testcase"] == hpu["quick_test"] == "line_rate_streaming"
    assert hpu["quick_overrides"] == {"max_seq_len": 512}
    systolic = next(d for d in data if d["name"] == "systolic")
    assert [(t["kind"], t["name"]) for t in systolic["tools"]] == [("map", "spmm")]


@pytest.mark.parametrize(
    ("args", "listed"),
    [
        (["map", "--help"], ["spmm", "rnn", "tile a GCN adjacency for the systolic + sparse"]),
        (["pack", "--help"], ["nm", "pack an int8 matrix into N:M value and index streams"]),
        (["map", "spmm", "--help"], ["--graph", "--features"]),
        (["map", "rnn", "--help"], ["tile program and dispatch schedule of an LSTM/GRU"]),
        (["pack", "nm", "--help"], ["--weights", "--pattern"]),
    ],
)
def test_map_and_pack_commands_come_from_the_registry(args, listed):
    proc = tandem(*args)
    assert proc.returncode == 0, proc.stderr
    for text in listed:
        assert text in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "exp3", "-o", "out"], "unknown design 'exp3' (did you mean 'exp2'?)"),
        (["generate", "exp2", "-o", "out", "--set", "lut_bits=99"], "lut_bits must be between"),
        (["generate", "exp2", "-o", "out", "--set", "lutbits=2"], "did you mean 'lut_bits'"),
        (["generate", "exp2", "-o", "out", "-c", "missing.yaml"], "missing.yaml: no such config"),
        (["generate", "exp2", "-o", "out", "--board", "u250"], "unknown board 'u250'"),
        (["synth", "exp2", "--board", "zcu"], "unknown board 'zcu'"),
        (["sim", "exp2", "--simulator", "vcs"], "invalid choice: 'vcs'"),
        (["sim", "exp2", "--seed", "x"], "invalid int value: 'x'"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_user_errors_exit_2_with_one_line(tmp_path, args, message):
    proc = tandem(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_generate_writes_verilog_manifest_and_xdc(tmp_path):
    proc = tandem("generate", "exp2", "-o", "build", "--board", "u280", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "build"
    verilog = (out / "exp2.v").read_text()
    manifest = json.loads((out / "exp2.manifest.json").read_text())
    assert "module exp2(" in verilog
    assert manifest["params"]["lut_bits"] == 6 and manifest["latency"] == Exp2.LATENCY
    ports = {p["name"]: p for p in manifest["ports"]}
    assert ports["i__payload"] == {
        "name": "i__payload",
        "direction": "input",
        "width": 17,
        "signed": True,
        "stream": "i",
        "role": "payload",
    }
    assert ports["o__ready"]["direction"] == "input"
    import hashlib

    assert manifest["verilog"]["sha256"] == hashlib.sha256(verilog.encode()).hexdigest()
    assert "create_clock -period 3.333" in (out / "exp2.xdc").read_text()


def test_generated_files_are_reproducible_across_directories(tmp_path):
    a, b = tmp_path / "one" / "deep", tmp_path / "two"
    a.mkdir(parents=True)
    b.mkdir()
    for where in (a, b):
        proc = tandem("generate", "reciprocal", "-o", "gen", "--set", "newton_steps=1", cwd=where)
        assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (a / "gen").iterdir())
    assert names == ["reciprocal.manifest.json", "reciprocal.v"]
    for name in names:
        assert (a / "gen" / name).read_bytes() == (b / "gen" / name).read_bytes()
    text = (a / "gen" / "reciprocal.v").read_text()
    assert "src =" not in text and str(tmp_path) not in text and os.getcwd() not in text


def test_sim_reports_no_test_ran_as_failure(tmp_path):
    proc = tandem("sim", "adder-tree", "--testcase", "no_such_test", "--run-dir", "r", cwd=tmp_path)
    assert proc.returncode == 1
    assert "FAILED" in proc.stderr


def test_every_board_and_gpu_loads():
    assert {"u55c", "u280", "vck190", "vhk158"} <= set(board_names())
    assert {"l40s", "a100-80gb", "h100-sxm"} <= set(gpu_names())
    for name in board_names():
        board = load_board(name)
        assert board.default_clock_mhz > 0 and board.memory
        assert board.pcie == {} or board.pcie["lanes"] > 0  # {}: no host link (ULX3S)
        assert (board.yosys_family is None) == (board.architecture == "versal")
    for name in gpu_names():
        gpu = load_gpu(name)
        assert gpu.memory_bandwidth_gb_s > 0 and gpu.fp16_dense_tflops > 0


@pytest.mark.parametrize("fraction", [None, 0, 1.5, "high"])
def test_a_memory_with_a_peak_but_no_sustained_share_is_refused(fraction):
    """No bandwidth figure falls back to the data-sheet peak: a board's first memory, where it
    gives ``bandwidth_gb_s``, must give its ``sustained_fraction`` too, in (0, 1]."""
    from tandem.boards import _check_memory
    from tandem.errors import UserError

    entry = {"kind": "HBM2", "bandwidth_gb_s": 460}
    if fraction is not None:
        entry["sustained_fraction"] = fraction
    with pytest.raises(UserError, match="sustained_fraction is"):
        _check_memory("card", [entry])
    _check_memory(
        "card", [{**entry, "sustained_fraction": 0.91}, {"kind": "DDR4", "bandwidth_gb_s": 38}]
    )
    _check_memory("card", [{"kind": "SDRAM"}])


def test_every_package_folder_is_listed_in_pyproject():
    import tomllib

    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    for import_name, folder in config["package-dir"].items():
        for init in (root / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(root / folder).parts
            assert ".".join((import_name, *rel)) in listed, init


def test_version_bare_command_and_a_reader_that_leaves(tmp_path):
    import os
    import subprocess
    import sys

    from tandem import __version__

    run = [sys.executable, "-m", "tandem"]
    out = subprocess.run([*run, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"tandem {__version__}"
    bare = subprocess.run(run, capture_output=True, text=True)
    assert bare.returncode == 2 and bare.stderr.startswith("usage: tandem")
    assert "Traceback" not in bare.stderr
    # `tandem designs | head`: the reader is gone before tandem writes (no reader at all).
    read_end, write_end = os.pipe()
    os.close(read_end)
    designs = subprocess.run([*run, "designs", "--json"], stdout=write_end,
                             stderr=subprocess.PIPE)  # fmt: skip
    os.close(write_end)
    assert designs.returncode == 0
    assert b"Traceback" not in designs.stderr and b"BrokenPipe" not in designs.stderr


@pytest.mark.rtl
def test_sim_json_is_the_outcome_as_data(tmp_path, capsys):
    from tandem.cli import main

    args = ["sim", "exp2", "--simulator", "icarus", "--seed", "4", "--run-dir", str(tmp_path)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and data["seed"] == 4 and data["build_cached"]
    assert [t["name"] for t in data["tests"]] == [
        line.split()[1] for line in text.splitlines() if line.startswith("  PASS")
    ]
    assert all(t["figures"]["throughput"] > 0 for t in data["tests"])
