"""``tandem run``, the main job: generate, verify, decode (the tiny model when weights are absent).

The Verilog generation and the decode run here; the verification step's simulator build takes
minutes, so these tests skip it (``--no-verify``) or run it only where a build is cached by the
RTL tests' marker; the regression itself is covered by tests/test_hpu_rtl.py.
"""

from pathlib import Path

import pytest
from tandem.host.system import model

from tandem.cli import main


@pytest.fixture
def no_weights(monkeypatch):
    """As on a machine where the SmolLM2 weights were never fetched."""
    monkeypatch.setattr(model, "find_model", lambda name, *a, **k: None)


def test_run_falls_back_to_the_tiny_model_and_says_so(tmp_path, capsys, no_weights):
    out = tmp_path / "run"
    status = main(["run", "-o", str(out), "--no-verify", "--tokens", "3", "--prompt", "hi"])
    captured = capsys.readouterr()
    assert status == 0
    assert "weights are not here" in captured.err and "'tiny'" in captured.err
    assert "[1/2] generating the HPU Verilog" in captured.err and "[2/2] decod" in captured.err
    assert sorted(p.name for p in out.iterdir()) == ["hpu.manifest.json", "hpu.v"]
    assert "module hpu" in (out / "hpu.v").read_text()
    assert "generated:" in captured.out and "modelled cycles hpu0" in captured.out
    assert captured.out.count("\n[0] 'hi' -> ") == 1


def test_run_json_is_one_object_with_every_step(tmp_path, capsys, no_weights):
    import json

    out = tmp_path / "run"
    args = ["run", "-o", str(out), "--no-verify", "--tokens", "3", "--prompt", "hi", "--json"]
    assert main(args) == 0
    outcome = json.loads(capsys.readouterr().out)  # stdout holds the JSON and nothing else
    assert outcome["model"] == "tiny" and outcome["verified"] is None
    assert sorted(Path(f).name for f in outcome["generated"]["files"]) == [
        "hpu.manifest.json",
        "hpu.v",
    ]
    decoded = outcome["decoded"]
    assert decoded["backend"] == "golden" and decoded["decode_steps"] == 2
    assert len(decoded["sequences"][0]["tokens"]) == 3


def _status(args) -> int:
    """Exit status of ``tandem ARGS`` (argparse's errors exit, ours return)."""
    try:
        return main(args)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tokens", "0"], "--tokens"),
        (["--tokens", "1000000"], "--tokens"),
        (["--quick", "--no-verify"], "not allowed with"),
        (["--backend", "fpga"], "invalid choice"),
    ],
)
def test_run_rejects_bad_flags_before_any_work(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert _status(["run", "-o", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1
    assert not out.exists()


def test_run_output_that_is_a_file_is_refused(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("x")
    assert _status(["run", "-o", str(taken), "--no-verify"]) == 2
    err = capsys.readouterr().err
    assert "--output" in err and len(err.strip().splitlines()) == 1
    assert taken.read_text() == "x"


def test_the_main_job_is_the_readme_s_second_command():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("```")[1].strip().splitlines()
    assert block[1].startswith("tandem run")
