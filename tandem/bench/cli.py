"""``tandem bench``: its arguments and what it runs."""

import json
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..args import output_dir, output_file, real
from ..errors import UserError
from . import suite
from .page import read_summary, write_results
from .runner import BENCH_FILES, run_suite
from .suite import Benchmark


def add_arguments(parser) -> None:
    """Arguments of ``tandem bench``."""
    from ..args import add_output

    parser.add_argument("--quick", action="store_true", help="small version of every benchmark")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    add_output(parser, "build/bench", help="where bench.json, bench.md and the logs go")
    parser.add_argument("--benchmarks", type=Path, metavar="DIR", help="the scripts' folder")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, metavar="S", help="limit per script (s)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print what bench.json holds (with --list: the benchmarks) as JSON",
    )
    parser.add_argument(
        "--results",
        type=Path,
        metavar="FILE",
        help="also write the results page (Markdown: every figure with its provenance)",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="BENCH_JSON",
        help="run nothing: write --results from this saved bench.json",
    )
    parser.add_argument(
        "--update",
        type=Path,
        metavar="BENCH_JSON",
        help="run the --only scripts and replace their entries in this saved bench.json "
        "(the others are kept; it and bench.md are rewritten in place)",
    )


def _status_line(entry: dict[str, Any]) -> str:
    reason = f" ({entry['reason']})" if entry.get("reason") else ""
    return (
        f"{entry['name']:<18} {entry['status']:<8} {entry.get('seconds', 0):7.1f} s  "
        f"{len(entry['figures'])} figures{reason}"
    )


def run(args) -> int:
    """``tandem bench``: exit status 0 when every benchmark ran or was skipped, else 1.

    Progress goes to stderr (each script as it starts, ``[done/total]`` as it finishes); the
    outcome to stdout: a table of the scripts, or with ``--json`` what ``bench.json`` holds.
    """
    from ..args import default_output
    from ..progress import counted, stderr_progress

    if args.list:
        if args.json:
            print(json.dumps([asdict(bench) for bench in suite.BENCHMARKS], indent=2))
            return 0
        for bench in suite.BENCHMARKS:
            quick = " ".join(bench.quick_args) or "-"
            print(f"{bench.name:<18} {bench.script:<28} quick: {quick}")
            print(f"{'':<18} {bench.what}")
        return 0
    results = None
    if args.results is not None:
        results = output_file(args.results, "--results", make_folder=True)
    if args.from_json is not None:
        if results is None:
            raise UserError("--from-json writes the results page: give --results FILE")
        if args.quick or args.only or args.update is not None:
            raise UserError(
                "--from-json runs nothing: --quick, --only and --update choose what to run"
            )
        summary = read_summary(args.from_json)
        write_results(summary, results)
        print(f"wrote {results} from {args.from_json}")
        return 0
    # A timeout beyond what Python's waits take (threading.TIMEOUT_MAX) is an overflow.
    real(args.timeout, "--timeout", 0.0, threading.TIMEOUT_MAX, above=True)
    update = None
    if args.update is not None:
        if args.output is not None:
            raise UserError("--update rewrites the saved run in its own folder: drop --output")
        if not args.only:
            raise UserError("--update replaces some scripts' entries: name them with --only")
        if args.update.name != "bench.json":
            raise UserError(f"--update {args.update}: name a bench.json that tandem bench wrote")
        update = read_summary(args.update)
        out = output_dir(args.update.parent, "--update", ("bench.md",))
    else:
        out = default_output("bench") if args.output is None else args.output
        out = output_dir(out, "--output", BENCH_FILES)

    say = stderr_progress("bench")
    total = len(args.only) if args.only else len(suite.BENCHMARKS)
    finished = counted(say, total)
    started = []

    def starting(bench: Benchmark) -> None:
        started.append(bench.name)
        mode = "quick" if args.quick else "full"
        say(f"{bench.name}: running, {len(started)} of {total} ({mode}) ...")

    summary = run_suite(
        quick=args.quick,
        only=args.only,
        out_dir=out,
        benchmarks_dir=args.benchmarks,
        timeout_s=args.timeout,
        progress=lambda entry: finished(_status_line(entry)),
        starting=starting,
        update=update,
    )
    # After --update, the outcome is that of the scripts this run ran, not of the kept ones.
    ran = [e for e in summary["benchmarks"] if update is None or e["name"] in args.only]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for entry in ran:
            print(_status_line(entry))
        seconds = summary["updates"][-1]["seconds"] if update is not None else summary["seconds"]
        print(f"{seconds:.0f} s; wrote {out / 'bench.json'} and {out / 'bench.md'}")
    if results is not None:
        write_results(summary, results)
        if not args.json:
            print(f"wrote {results}")
    bad = [e["name"] for e in ran if e["status"] in ("failed", "timeout")]
    if bad:
        print(f"not measured: {', '.join(bad)} (see their logs)", file=sys.stderr)
        return 1
    return 0
