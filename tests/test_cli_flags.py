"""Every option a subcommand accepts is read by the code that runs it, in every mode.

The check follows the parsed arguments through the code: from a subcommand's ``func`` into every
function it hands ``args`` to (module functions, functions imported inside a function, lambdas),
collecting each ``args.NAME`` and ``getattr(args, "NAME")``. An option whose destination no
reachable code reads is parsed and ignored. A mode that takes its own path (``cosim decode
--program``) must read every option of its subcommand itself, to honour it or to refuse it.
"""

import argparse
import ast
import importlib
import inspect
import textwrap
import types

import pytest

from tandem.cli import build_parser

#: Options read before the subcommand runs, by the CLI itself.
_READ_BY_MAIN = {"help", "threads", "version"}

#: Subcommands whose mode takes a path of its own: (words, option that selects it, function).
_MODES = [
    (("cosim", "decode"), "--program", "tandem.mappings.llm.cli:run_program"),
]


def _leaves(parser: argparse.ArgumentParser, words=()):
    """``(words, parser)`` for every subcommand that has no subcommands of its own."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
        return
    for action in subs:
        seen = set()
        for name, child in action.choices.items():
            if id(child) not in seen:
                seen.add(id(child))
                yield from _leaves(child, (*words, name))


def _options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Option destinations to their first option string (positionals included)."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.dest in _READ_BY_MAIN:
            continue
        out[action.dest] = action.option_strings[0] if action.option_strings else action.dest
    return out


def _lambda_node(func) -> ast.Lambda | None:
    """The lambda's own node in its source line (the line may hold more than the lambda)."""
    source = textwrap.dedent(inspect.getsource(func)).strip()
    for end in range(len(source), 0, -1):  # the line may end inside a call: trim until it parses
        for start in range(len(source)):
            if not source.startswith("lambda", start):
                continue
            try:
                tree = ast.parse(source[start:end], mode="eval")
            except SyntaxError:
                continue
            if isinstance(tree.body, ast.Lambda):
                return tree.body
    return None


def _function_node(func):
    if func.__name__ == "<lambda>":
        return _lambda_node(func)
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    return tree.body[0]


def _resolve(node, func, local_imports):
    """The function object a call's callee names, or None."""
    if isinstance(node, ast.Name):
        if node.id in local_imports:
            return local_imports[node.id]
        if node.id in func.__code__.co_freevars:  # a function of the enclosing scope
            return inspect.getclosurevars(func).nonlocals.get(node.id)
        return func.__globals__.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, func, local_imports)
        if isinstance(base, types.ModuleType):
            return getattr(base, node.attr, None)
    return None


def _local_imports(tree, func) -> dict:
    """Names a function binds with ``import`` statements inside its body."""
    names = {}
    package = func.__module__.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module_name = ("." * node.level + (node.module or "")) if node.level else node.module
            module = importlib.import_module(module_name, package if node.level else None)
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if value is None:
                    value = importlib.import_module(f"{module.__name__}.{alias.name}")
                names[alias.asname or alias.name] = value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.partition(".")[0]] = importlib.import_module(
                    alias.name
                )
    return names


def _reads(func, seen=None) -> set[str]:
    """Every attribute of ``args`` that ``func`` or a function it hands ``args`` to reads."""
    seen = set() if seen is None else seen
    func = inspect.unwrap(func)
    if not isinstance(func, types.FunctionType) or func in seen:
        return set()
    seen.add(func)
    tree = _function_node(func)
    if tree is None or not tree.args.args:
        return set()
    name = tree.args.args[0].arg
    imports = _local_imports(tree, func)
    reads = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == name
        ):
            reads.add(node.attr)
        elif isinstance(node, ast.Call):
            args = [*node.args, *(k.value for k in node.keywords)]
            if (
                isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == name
                and isinstance(node.args[1], ast.Constant)
            ):
                reads.add(node.args[1].value)
            if any(isinstance(a, ast.Name) and a.id == name for a in args):
                callee = _resolve(node.func, func, imports)
                if callee is not None:
                    reads |= _reads(callee, seen)
    return reads


def _cases():
    parser = build_parser()
    cases = []
    for words, leaf in _leaves(parser):
        func = leaf._defaults.get("func")
        if func is not None:
            cases.append(pytest.param(words, leaf, func, id=" ".join(words)))
    return cases


@pytest.mark.parametrize(("words", "leaf", "func"), _cases())
def test_every_option_is_read(words, leaf, func):
    reads = _reads(func)
    unread = {flag for dest, flag in _options(leaf).items() if dest not in reads}
    assert not unread, f"tandem {' '.join(words)}: parsed but never read: {sorted(unread)}"


@pytest.mark.parametrize(("words", "mode", "target"), _MODES)
def test_every_option_is_read_in_each_mode(words, mode, target):
    parser = build_parser()
    leaf = dict(_leaves(parser))[words]
    module, _, name = target.partition(":")
    reads = _reads(getattr(importlib.import_module(module), name))
    options = _options(leaf)
    unread = {flag for dest, flag in options.items() if dest not in reads and flag != mode}
    assert not unread, (
        f"tandem {' '.join(words)} {mode}: parsed but neither honoured nor refused: "
        f"{sorted(unread)}"
    )


def test_the_audit_finds_an_unread_option():
    """The audit itself: an option nothing reads is reported; one read through a helper is not."""

    def helper(arguments):
        return arguments.used

    def command(args):
        return helper(args)

    reads = _reads(command)
    assert "used" in reads
    assert "ignored" not in reads


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--simulator", "icarus"], "--simulator icarus needs --backend rtl"),
        (["--harness", "cocotb"], "--harness and --waves need --backend rtl"),
        (["--compare"], "--compare needs --tokens 2"),
        (["--prompt", "\udcff"], "--prompt is not valid UTF-8"),
    ],
)
def test_a_flag_of_another_mode_is_refused(capsys, argv, message):
    """A flag that only the RTL backend reads is refused on the golden one, not ignored."""
    from tandem.cli import main

    status = main(["cosim", "decode", "--model", "tiny", "--prompt", "hi", "--tokens", "1", *argv])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["--engines", "4"],
        ["--hpu-clock-mhz", "200"],
        ["--hpu-board", "u280"],
        ["--kv-bits", "8"],
        ["--pcie-latency-us", "3"],
    ],
)
def test_card_flags_without_cards_are_refused(capsys, argv):
    """``tandem perf decode`` of the GPU alone refuses the flags that describe HPU cards."""
    from tandem.cli import main

    status = main(["perf", "decode", "--model", "smollm2-135m", "--gpu", "l40s", *argv])
    err = capsys.readouterr().err
    assert status == 2 and "give --hpus N" in err and argv[0] in err
    assert len(err.strip().splitlines()) == 1


def test_run_refuses_a_simulator_that_runs_nothing(capsys, tmp_path):
    from tandem.cli import main

    argv = ["run", "--no-verify", "--simulator", "icarus", "-o", str(tmp_path / "out")]
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2 and "runs nothing" in err and len(err.strip().splitlines()) == 1
