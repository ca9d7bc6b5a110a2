"""The command line of ``tandem prove``: its options and the command that prints the report."""

import sys

from ..config import Params
from ..errors import UserError, VerificationError
from ..progress import stderr_progress
from ..registry import Design
from .engines import ENGINES
from .proof import DEFAULT_DEPTH, prove


def add_arguments(parser) -> None:
    """Options of ``tandem prove`` after the design and parameter options."""
    parser.add_argument(
        "--depth",
        type=int,
        metavar="N",
        help="cycles of bounded model checking and longest induction "
        f"(default {DEFAULT_DEPTH}, or the design's: past its first output beat)",
    )
    parser.add_argument(
        "--mode",
        choices=("prove", "bmc"),
        help="prove: k-induction, else BMC; bmc: bounded model checking only "
        "(default: the design's, docs/formal.md)",
    )
    parser.add_argument(
        "--margin",
        type=int,
        metavar="N",
        help="in BMC, check each output channel to N cycles past its first beat, at most "
        "--depth (default: the design's, else to --depth)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        help="smtbmc: yosys-smtbmc with yices (default where yices-smt2 is installed); "
        "sat: yosys sat (MiniSat)",
    )
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="prove the design's default parameters, not its proof parameters (without -c or "
        "--set, designs with proof parameters in the registry prove those; docs/formal.md)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="time limit of one solver run (default: none)",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="CHANNEL",
        help="check only this output channel (result_o, k_axi.ar, ...) or, with 'buffers', the "
        "FIFOs (repeatable; default: everything)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args, design: Design, params: Params) -> int:
    """``tandem prove``: print the report; a failed property raises VerificationError."""
    from ..args import integer, real

    depth = args.depth
    if depth is not None:  # far beyond what a solver's memory holds for any design here
        depth = integer(depth, "--depth", 1, 1000, " (the solver's memory)")
    margin = args.margin
    if margin is not None:
        margin = integer(margin, "--margin", 1, 1000)
    timeout = None if args.timeout is None else real(args.timeout, "--timeout", 0, above=True)
    if args.defaults and (args.config or args.overrides):
        raise UserError("--defaults proves the default parameters: leave out -c and --set")
    # No parameters named: the design's proof parameters (its defaults where it has none).
    named = args.defaults or args.config or args.overrides
    report = prove(
        design,
        params if named else None,
        depth=depth,
        mode=args.mode,
        margin=margin,
        engine=args.engine,
        timeout=timeout,
        progress=stderr_progress("prove"),
        only=args.only,
    )
    if args.json:
        sys.stdout.write(report.to_json())
    else:
        print(report.table())
    failed = [r for r in report.results if r.status == "failed"]
    if failed:
        first = failed[0]
        raise VerificationError(
            f"{design.name}: {len(failed)} of {len(report.results)} properties failed; first: "
            f"{first.target} {first.prop} at cycle {first.depth} (trace {first.trace})"
        )
    unknown = [r for r in report.results if r.status == "unknown"]
    if unknown:
        raise VerificationError(
            f"{design.name}: {len(unknown)} properties undecided: the solver stopped after "
            f"BMC depth {min(r.depth for r in unknown)} (see the notes above)"
        )
    return 0
