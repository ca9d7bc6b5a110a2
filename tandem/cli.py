"""``tandem`` command line: designs, generate, sim, synth, pnr, map, pack, model, cosim, perf,
bench, sweep, setup, doctor, cache.

Exit status: 0 success, 1 verification failure, 2 user error (one line on stderr, no
traceback).
"""

import argparse
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from . import extras
from .errors import ToolError, UserError, VerificationError
from .progress import stderr_progress

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line and exits with status 2."""

    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _add_params(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("design", help="design name (see `tandem designs`)")
    parser.add_argument("-c", "--config", metavar="FILE", help="YAML file of parameter values")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one parameter (repeatable; applied after --config)",
    )


def _resolve(args):
    from .config import resolve_params
    from .registry import get_design

    design = get_design(args.design)
    params = resolve_params(design.params, args.config, args.overrides, design=design.name)
    return design, params


def _cmd_designs(args) -> int:
    from .registry import all_designs

    designs = all_designs()
    if args.json:
        data = [
            {
                **d.describe(),
                "params": [
                    {
                        "name": p.name,
                        "type": p.type,
                        "default": p.default,
                        "doc": p.doc,
                        "rule": p.rule,
                    }
                    for p in d.params.describe()
                ],
            }
            for d in designs
        ]
        print(json.dumps(data, indent=2))
        return 0
    for d in designs:
        print(f"{d.name}: {d.summary}")
        infos = d.params.describe()
        width = max(len(p.name) for p in infos)
        for p in infos:
            rule = f" [{p.rule}]" if p.rule else ""
            print(f"  {p.name:<{width}}  {p.type:<5} = {p.default!s:<6} {p.doc}{rule}")
        print()
    return 0


def _cmd_generate(args) -> int:
    from .args import default_output, output_dir
    from .generate import generate, output_names, write_files

    design, params = _resolve(args)
    out = default_output("generate", design.name) if args.output is None else args.output
    names = output_names(design, args.board is not None)
    if args.fusesoc:
        from .fusesoc import fusesoc_names

        names += fusesoc_names(design)
    output_dir(out, "--output", names)
    generated = generate(design, params, board=args.board)
    files = generated.files()
    if args.fusesoc:
        from .fusesoc import core_files

        files.update(core_files(generated))
    paths = write_files(out, files)
    if args.json:
        files = [str(path) for path in paths]
        data = {"output": str(out), "files": files, "manifest": generated.manifest}
        print(json.dumps(data, indent=2))
    else:
        for path in paths:
            print(path)
    return 0


def _cmd_sim(args) -> int:
    from tandem.sim.runner import run_regression

    design, params = _resolve(args)
    if args.seed is not None and args.seed < 0:
        raise UserError(f"--seed must be a non-negative integer, not {args.seed}")
    result = run_regression(
        design,
        params,
        simulator=args.simulator,
        seed=args.seed,
        waves=args.waves,
        run_dir=args.run_dir,
        testcase=args.testcase,
        progress=stderr_progress("sim"),
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.summary())
    if not result.tests:
        raise VerificationError(
            f"{design.name}: no test ran on {args.simulator}; see {result.log_file}"
        )
    if not result.passed:
        raise VerificationError(
            f"{design.name}: regression failed on {args.simulator} (seed {result.seed})"
        )
    return 0


def _cmd_synth(args) -> int:
    from .args import output_dir
    from .generate import write_files
    from .synth import synthesize

    design, params = _resolve(args)
    name = f"{design.name}.{args.board}.synth.json"
    if args.output is not None:
        output_dir(args.output, "--output", (name,))  # before synthesis
    report = synthesize(design, params, args.board, progress=stderr_progress("synth"))
    if args.output is not None:
        write_files(args.output, {name: report.to_json().encode()})
    if args.json:
        sys.stdout.write(report.to_json())
    else:
        print(report.table())
    return 0


def _cmd_pnr(args) -> int:
    from . import pnr

    return pnr.run(args, *_resolve(args))


def _cmd_prove(args) -> int:
    from . import prove

    return prove.run(args, *_resolve(args))


def _cmd_cosim_decode(args) -> int:
    """``tandem cosim decode``: the decode runtime, or with ``--program`` a compiled program."""
    if args.program is not None:
        from tandem.mappings.llm.cli import run_program

        return run_program(args)
    from tandem.host.system import decode_cli

    return decode_cli.run(args)


def _add_tool_family(sub, kind: str, help_text: str) -> None:
    """``tandem map NAME`` or ``tandem pack NAME``: one subcommand per distinct tool the
    registered designs name (:attr:`tandem.registry.Design.tools`).

    Each tool's module defines ``add_arguments(parser)`` and ``run(args) -> int`` (exit
    status); its import is light (heavy imports inside ``run``). A module that has not landed
    yet is left out.
    """
    from .registry import all_tools

    p = sub.add_parser(kind, help=help_text)
    family = p.add_subparsers(dest="tool", required=True, parser_class=_Parser)
    for tool in all_tools(kind):
        try:
            module = importlib.import_module(tool.module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not tool.module.startswith(exc.name):
                raise
            continue
        tp = family.add_parser(tool.name, help=tool.summary, description=tool.summary)
        module.add_arguments(tp)
        tp.set_defaults(func=module.run)


def build_parser() -> argparse.ArgumentParser:
    """The ``tandem`` argument parser."""
    from . import __version__

    parser = _Parser(
        prog="tandem",
        description="Generators, golden models, verification, mappers and the host runtime of "
        "the accelerator half of GPU + FPGA/ACAP systems.",
    )
    parser.add_argument("--version", action="version", version=f"tandem {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    from . import main_job

    p = sub.add_parser(
        "run",
        help="the main job: generate the HPU's Verilog, verify it, decode on SmolLM2 with it",
        description="tandem's main job, end to end: generate the HPU's Verilog for SmolLM2-135M's "
        "attention, verify it against the golden model in a simulator, and decode a prompt with "
        "every attention on an HPU card.",
    )
    main_job.add_arguments(p)
    p.set_defaults(func=main_job.run)

    _add_design_commands(sub)
    _add_tool_family(sub, "map", "map a workload onto a design (tile programs, schedules)")
    _add_tool_family(sub, "pack", "pack weights into a design's streams")

    _add_system_commands(sub)
    _add_suite_commands(sub)
    _add_threads_everywhere(parser)
    return parser


def _add_design_commands(sub) -> None:
    """``designs``, ``generate``, ``sim``, ``synth``, ``pnr`` and ``prove``: one design each."""
    p = sub.add_parser("designs", help="list every design with its parameters and defaults")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_designs)

    from .args import add_output

    p = sub.add_parser("generate", help="write Verilog and a manifest for a design")
    _add_params(p)
    add_output(p, "build/generate/DESIGN")
    p.add_argument("--board", help="also write an .xdc clock constraint for this board")
    p.add_argument(
        "--fusesoc",
        action="store_true",
        help="also write a FuseSoC core (DESIGN.core) with Vivado synth and ECP5 pnr targets",
    )
    p.add_argument(
        "--json", action="store_true", help="print the files written and the manifest as JSON"
    )
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("sim", help="cocotb regression of a design against its golden model")
    _add_params(p)
    p.add_argument(
        "--simulator",
        choices=("verilator", "icarus"),
        default="verilator",
        help="HDL simulator (default verilator; icarus is the second, slower one)",
    )
    p.add_argument("--seed", type=int, help="random seed of the stimulus (default: random)")
    p.add_argument("--waves", action="store_true", help="dump a waveform")
    p.add_argument("--testcase", help="run only this cocotb test")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.add_argument(
        "--run-dir", type=Path, help="folder for log, results and waves (default build/sim/...)"
    )
    p.set_defaults(func=_cmd_sim)

    p = sub.add_parser("synth", help="resource report from yosys, as %% of a board")
    _add_params(p)
    p.add_argument("--board", required=True, help="target board (see constraints/boards)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-o", "--output", metavar="DIR", help="also write the JSON report here")
    p.set_defaults(func=_cmd_synth, extras=("synth",))

    from . import pnr  # light: the tools run inside place_and_route()

    p = sub.add_parser("pnr", help="place and route on an ECP5 board: post-route Fmax, utilization")
    _add_params(p)
    pnr.add_arguments(p)
    p.set_defaults(func=_cmd_pnr, extras=("synth",))

    from . import prove  # light: amaranth and yosys load inside prove()

    p = sub.add_parser("prove", help="formal proof of the stream rules (BMC, k-induction)")
    _add_params(p)
    prove.add_arguments(p)
    p.set_defaults(func=_cmd_prove, extras=("synth",))


def _add_system_commands(sub) -> None:
    """``model``, ``cosim``, ``perf`` and ``compile``: the GPU + accelerator system."""
    from tandem.host.system import decode_cli, model  # light: torch and gguf load in their run()

    p = sub.add_parser("model", help="get model weights for the decode runtime")
    family = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    tp = family.add_parser("fetch", help="put a model's GGUF file into ~/.cache/tandem/models")
    model.add_fetch_arguments(tp)
    tp.set_defaults(func=model.run_fetch)

    p = sub.add_parser("cosim", help="run the GPU + accelerator system (golden model or RTL)")
    family = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    tp = family.add_parser("decode", help="LLM decode with every decode attention on HPU cards")
    decode_cli.add_arguments(tp)
    tp.set_defaults(func=_cmd_cosim_decode, extras=("model",))

    from tandem.host.system import perf

    p = sub.add_parser("perf", help="performance model: GPU alone vs GPU + HPU cards")
    family = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    tp = family.add_parser("decode", help="project LLM decode throughput against batch")
    perf.add_arguments(tp)
    tp.set_defaults(func=perf.run)

    from tandem.mappings.llm import cli as llm_cli

    p = sub.add_parser(
        "compile",
        help="compile a Llama-architecture model into weights and instruction programs",
        description="FlightLLM-style mapping flow: per-layer N:M pruning and int8 packing for "
        "sparse-mpe, a decode program and length-adaptive prefill templates (docs/compiler.md).",
    )
    llm_cli.add_arguments(p)
    p.set_defaults(func=llm_cli.run, extras=("model",))


def _add_suite_commands(sub) -> None:
    """``bench``, ``sweep``, ``setup``, ``doctor`` and ``cache``: suites and upkeep."""
    from . import bench, sweep

    p = sub.add_parser("bench", help="run the benchmark suite; write bench.json and bench.md")
    bench.add_arguments(p)
    p.set_defaults(func=bench.run)

    p = sub.add_parser("sweep", help="design-space sweep: generate + synth + benchmark per point")
    sweep.add_arguments(p)
    p.set_defaults(
        func=sweep.run, extras=lambda a: ("sweep",) if a.no_synth else ("sweep", "synth")
    )

    from . import cache, doctor

    p = sub.add_parser("setup", help="bring the OS packages and SmolLM2 weights pip cannot")
    doctor.add_setup_arguments(p)
    p.set_defaults(func=doctor.run_setup)

    p = sub.add_parser("doctor", help="every tool tandem uses: version or missing, and the fix")
    doctor.add_arguments(p)
    p.set_defaults(func=doctor.run)

    p = sub.add_parser("cache", help="list or clean simulator builds and model weights")
    cache.add_arguments(p)


def _feature(args) -> str:
    """What the user ran, as a phrase: ``tandem cosim decode``."""
    words = [getattr(args, key, None) for key in ("command", "action", "tool")]
    return " ".join(["tandem", *(w for w in words if isinstance(w, str))])


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def _threads_requested(argv: Sequence[str]) -> int | None:
    """The value of the first ``--threads N`` (or ``--threads=N``) in ``argv``; None if absent
    or not in 1 .. the cores (the parser and :func:`_check_threads` then report it)."""
    from tandem.host.common.threads import available_cores

    for i, word in enumerate(argv):
        if word == "--":
            break
        if word == "--threads" and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith("--threads="):
            value = word.partition("=")[2]
        else:
            continue
        valid = value.isdigit() and 1 <= int(value) <= available_cores()
        return int(value) if valid else None
    return None


def _add_threads_everywhere(parser: argparse.ArgumentParser) -> None:
    """``--threads N`` on the root and on every subcommand, read once by :func:`main`.

    Subcommands default to ``SUPPRESS`` so that a value given before the subcommand survives.
    """
    help_text = (
        "threads of torch, BLAS and OpenMP together (default: the cores no other process is "
        "running on)"
    )
    parsers = [parser]
    while parsers:
        current = parsers.pop()
        subparsers = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subparsers:
            parsers.extend(dict.fromkeys(action.choices.values()))  # aliases appear once
        if "--threads" not in current._option_string_actions:
            current.add_argument(
                "--threads",
                type=int,
                metavar="N",
                help=help_text,
                default=None if current is parser else argparse.SUPPRESS,
            )


def _check_threads(args) -> None:
    from tandem.host.common.threads import available_cores

    from .args import integer

    threads = getattr(args, "threads", None)
    if threads is not None:
        integer(threads, "--threads", 1, available_cores(), " (this machine's cores)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tandem`` command."""
    words = sys.argv[1:] if argv is None else list(argv)
    # Before the parser imports numpy: the thread pools read their size when they load.
    from tandem.host.common.threads import configure_threads

    configure_threads(_threads_requested(words))
    parser = build_parser()
    if not words:
        parser.print_usage(sys.stderr)  # a bare `tandem`: show what it takes, then the error
    args = parser.parse_args(argv)
    # A SIGTERM raises SystemExit in the main thread instead of ending the process at once, so
    # that `subprocess.run` kills the tool it waits on (yosys, a simulator build) and temporary
    # folders are removed on the way out: nothing is left running or behind.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _run(parser, args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(parser, args) -> int:
    """Run the parsed command; user errors, tool errors and interrupts become exit statuses."""
    try:
        needs = getattr(args, "extras", ())  # optional features, checked before any work
        extras.require(_feature(args), *(needs(args) if callable(needs) else needs))
        _check_threads(args)
        status = args.func(args)
        sys.stdout.flush()  # inside the try: a reader that left shows here, not at exit
    except BrokenPipeError:
        # The reader went away (`tandem designs | head`): not an error of ours. Point stdout at
        # /dev/null so Python's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except UserError as exc:
        sys.stderr.write(f"tandem: error: {exc}\n")
        return 2
    except ModuleNotFoundError as exc:
        extra = extras.extra_of(exc.name)  # an optional package imported deep in a command
        if extra is None:
            raise
        sys.stderr.write(f"tandem: error: {extras.need_message(_feature(args), extra)}\n")
        return 2
    except VerificationError as exc:
        sys.stderr.write(f"tandem: FAILED: {exc}\n")
        return 1
    except ToolError as exc:
        sys.stderr.write(f"tandem: error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
