"""Design-space sweeps: generate + synthesize + benchmark every point of a parameter grid.

``tandem sweep DESIGN --grid grid.yaml`` evaluates each point of the grid on Dask
(``dask.distributed``): a local cluster by default (``--workers N`` processes, one thread
each), or an existing cluster with ``--scheduler ADDRESS``. The grid file::

    board: u280              # optional; default: the design's registered board
    grid:                    # every combination of these values is one point
      stages: [2, 4, 8]
      acc_bits: [32, 40]
    fixed:                   # optional: the same value at every point
      max_m: 16

A point is one parameter set. Evaluating it (:func:`evaluate_point`):

1. resolves the parameters (an invalid combination is that point's error);
2. generates the Verilog (:func:`tandem.generate.generate`);
3. synthesizes it with yosys for the board (:func:`tandem.synth.synthesize`): LUT, FF, DSP,
   BRAM;
4. runs the design's sweep benchmark (its registry entry's
   :attr:`~tandem.registry.Design.sweep`): one cocotb test of the design's regression in
   Verilator, checked bit-exact against the golden model, whose measured cycles give the
   throughput in work per clock cycle (MACs/cycle for the arrays, results/cycle for
   the streaming units).

Points are independent and idempotent. Each result is cached in ``OUT/cache/<key>.json``, the
key hashing the design, the parameters, the board, the simulator and the tool versions, so a
sweep that is interrupted (or extended with more values) evaluates only the points it has not
done. A point that fails is reported with its error and is not cached (it runs again next
time); the others go on. The sweep writes ``OUT/sweep.csv``, ``OUT/sweep.md`` (a table, the
Pareto-optimal points marked) and ``OUT/pareto.png`` (a resource against throughput, the
Pareto front drawn). A point is Pareto-optimal when no other point has at least its throughput
with at most its resource, and is strictly better in one.
"""

import csv
import functools
import hashlib
import io
import itertools
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .design_record import SweepBenchmark
from .errors import UserError

__all__ = [
    "SweepBenchmark",
    "evaluate_point",
    "load_grid",
    "pareto_front",
    "run_sweep",
    "summarize",
]


#: Most points of one grid: each takes seconds to minutes (generate, synthesize, simulate), so
#: 10,000 are days of a cluster; a larger grid is a typo (a value list too many).
MAX_POINTS = 10_000

#: The resource the Pareto plot and front use, in order of preference: the first one any point
#: uses.
PARETO_RESOURCES = ("dsp", "lut", "ff")


def load_grid(path: str | Path, design) -> tuple[str, list[dict[str, Any]]]:
    """The board and the points (parameter overrides) of a grid file; one-line errors."""
    from .config import read_yaml, show

    path = Path(path)
    data = read_yaml(path, "grid file", "not valid YAML")
    if not isinstance(data, dict) or not isinstance(data.get("grid"), dict) or not data["grid"]:
        got = data.get("grid") if isinstance(data, dict) else data
        raise UserError(
            f"{path}: needs a 'grid:' mapping of parameter names to lists of values, not "
            f"{show(got)}"
        )
    unknown = set(data) - {"grid", "fixed", "board", "design"}
    if unknown:
        raise UserError(f"{path}: unknown key {sorted(unknown)[0]!r} (grid, fixed, board)")
    if data.get("design") not in (None, design.name):
        raise UserError(f"{path}: grid is for design {data['design']!r}, not {design.name!r}")
    fields = set(design.params.__dataclass_fields__)
    fixed = data.get("fixed") or {}
    if not isinstance(fixed, dict):
        raise UserError(f"{path}: 'fixed:' must be a mapping of parameter names to values")
    axes = {}
    for name, values in {**data["grid"], **{k: [v] for k, v in fixed.items()}}.items():
        if name not in fields:
            known = ", ".join(sorted(fields))
            raise UserError(f"{path}: {design.name} has no parameter {name!r}; it has {known}")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise UserError(f"{path}: parameter {name!r} has an empty list of values")
        axes[name] = values
    count = math.prod(len(v) for v in axes.values())
    if count > MAX_POINTS:
        raise UserError(f"{path}: {count} points; a sweep takes at most {MAX_POINTS}")
    names = list(axes)
    points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes.values())]
    board = data.get("board") or design.board
    return str(board), points


@functools.cache
def source_digest() -> str:
    """Hash of tandem's own Python sources: a changed generator or testbench misses the cache."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for folder in (root, *(root.parent / name for name in ("hw", "host", "sim", "mappings"))):
        for path in sorted(folder.rglob("*.py")) if folder.is_dir() else ():
            digest.update(path.relative_to(root.parent).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def point_key(design_name: str, overrides: dict, board: str, simulator: str) -> str:
    """Cache key of one point: design, parameters, board, simulator, tool versions, sources."""
    from .generate import tool_versions

    key = {
        "design": design_name,
        "params": overrides,
        "board": board,
        "simulator": simulator,
        "tools": tool_versions(),
        "sources": source_digest(),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def evaluate_point(
    design_name: str,
    overrides: dict,
    board: str,
    simulator: str,
    out_dir: str,
    synth: bool = True,
) -> dict[str, Any]:
    """Generate, synthesize and benchmark one point; return its row (raises on failure).

    Runs in a Dask worker: everything it needs comes in as plain values, and it writes only
    inside its own folder ``out_dir/points/<key>``.
    """
    from .config import resolve_params
    from .generate import generate
    from .registry import get_design

    design = get_design(design_name)
    key = point_key(design_name, overrides, board, simulator)
    folder = Path(out_dir) / "points" / key
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    params = resolve_params(
        design.params, None, [f"{k}={v}" for k, v in overrides.items()], design=design.name
    )
    generated = generate(design, params)
    row: dict[str, Any] = {
        "key": key,
        "params": overrides,
        "board": board,
        "verilog_sha256": generated.manifest["verilog"]["sha256"],
    }
    if synth:
        from .synth import synthesize

        report = synthesize(design, params, board)
        row["resources"] = {k: report.used.get(k, 0) for k in ("lut", "ff", "dsp", "bram36")}
    bench = design.sweep
    if bench is not None:
        from tandem.sim.runner import run_regression

        result = run_regression(
            design,
            params,
            simulator=simulator,
            seed=1,
            testcase=bench.testcase,
            run_dir=folder / "sim",
        )
        if not result.passed:
            failed = next((t for t in result.tests if not t.passed), None)
            why = failed.message if failed else "no test ran"
            raise RuntimeError(f"{bench.testcase} failed in {simulator}: {why}")
        figures = result.tests[0].figures
        row["throughput"] = round(float(bench.throughput(params, figures)), 6)
        row["throughput_unit"] = bench.unit
        row["cycles"] = int(figures.get("cycles", 0))
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def _safe_evaluate(design_name, overrides, board, simulator, out_dir, synth, cache_file):
    """:func:`evaluate_point` that returns its error instead of raising, and caches success."""
    try:
        row = evaluate_point(design_name, overrides, board, simulator, out_dir, synth)
    except Exception as exc:  # a failed point is data for the report, not a crash
        message = str(exc).strip().splitlines()
        return {
            "params": overrides,
            "error": f"{type(exc).__name__}: {message[0] if message else ''}",
            "traceback": traceback.format_exc(limit=4),
        }
    path = Path(cache_file)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: an interrupted write leaves no half-cached point
    return row


def pareto_front(rows: list[dict], resource: str) -> set[str]:
    """Keys of the points no other point beats on both ``resource`` (lower) and throughput."""
    done = [r for r in rows if "throughput" in r and resource in r.get("resources", {})]
    front = set()
    for r in done:
        cost, value = r["resources"][resource], r["throughput"]
        dominated = any(
            o["resources"][resource] <= cost
            and o["throughput"] >= value
            and (o["resources"][resource] < cost or o["throughput"] > value)
            for o in done
        )
        if not dominated:
            front.add(r["key"])
    return front


def _pareto_resource(rows: list[dict]) -> str | None:
    for name in PARETO_RESOURCES:
        if any(r.get("resources", {}).get(name, 0) > 0 for r in rows):
            return name
    return None


def _table(design_name: str, rows: list[dict], front: set[str], resource: str | None) -> str:
    names = sorted({k for r in rows for k in r["params"]})
    unit = next((r["throughput_unit"] for r in rows if "throughput_unit" in r), "")
    head = [*names, "LUT", "FF", "DSP", "BRAM36", f"throughput ({unit})", "cycles", "pareto"]
    lines = [
        f"# sweep of {design_name}",
        "",
        f"{len(rows)} points; Pareto front on {resource or '-'} against throughput.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = [str(r["params"].get(n, "")) for n in names]
        if "error" in r:
            cells += ["", "", "", "", "", "", f"failed: {r['error']}"]
        else:
            res = r.get("resources", {})
            cells += [f"{res.get(k, '')}" for k in ("lut", "ff", "dsp", "bram36")]
            cells += [f"{r.get('throughput', '')}", f"{r.get('cycles', '')}"]
            cells.append("yes" if r.get("key") in front else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _csv(rows: list[dict]) -> str:
    names = sorted({k for r in rows for k in r["params"]})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*names, "lut", "ff", "dsp", "bram36", "throughput", "unit", "cycles", "error"])
    for r in rows:
        res = r.get("resources", {})
        writer.writerow(
            [r["params"].get(n, "") for n in names]
            + [res.get(k, "") for k in ("lut", "ff", "dsp", "bram36")]
            + [r.get("throughput", ""), r.get("throughput_unit", ""), r.get("cycles", "")]
            + [r.get("error", "")]
        )
    return out.getvalue()


#: Axis titles of the resources the Pareto front is drawn against.
RESOURCE_NAMES = {"dsp": "DSP blocks", "lut": "LUTs", "ff": "flip-flops"}


def pareto_figure(design_name: str, rows: list[dict], front: set[str], resource: str):
    """Throughput against ``resource`` as a matplotlib Figure: every point, the front drawn and
    labelled (only its points: labelling every one overprints), each label naming the
    parameters the grid varies."""
    from .plots import label_points, subplots

    done = [r for r in rows if "throughput" in r and resource in r.get("resources", {})]
    fig, ax = subplots(figsize=(6.4, 4.4), dpi=120)
    xs = [r["resources"][resource] for r in done]
    ys = [r["throughput"] for r in done]
    ax.scatter(xs, ys, color="tab:gray", s=18, label="grid point", zorder=2)
    best = sorted(
        (r for r in done if r["key"] in front),
        key=lambda r: (r["resources"][resource], r["throughput"]),
    )
    points = [(r["resources"][resource], r["throughput"]) for r in best]
    if points:
        ax.step(
            *zip(*points, strict=True),
            where="post",
            color="tab:red",
            marker="o",
            zorder=3,
            label="Pareto front",
        )
    ax.margins(0.08)
    names = sorted({k for r in done for k in r["params"]})
    varied = [k for k in names if len({repr(r["params"].get(k)) for r in done}) > 1] or names
    labels = [", ".join(f"{k}={r['params'][k]}" for k in varied if k in r["params"]) for r in best]
    unit = done[0]["throughput_unit"] if done else ""
    ax.set_xlabel(f"{RESOURCE_NAMES.get(resource, resource.upper())} used (yosys)")
    ax.set_ylabel(f"throughput ({unit}, RTL simulation)")
    ax.set_title(f"{design_name}: resources against throughput", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    label_points(ax, points, labels, obstacles=list(zip(xs, ys, strict=True)))
    return fig


def _plot(path: Path, design_name: str, rows: list[dict], front: set[str], resource: str) -> None:
    from .plots import save_png

    save_png(pareto_figure(design_name, rows, front, resource), path)


def run_sweep(
    design_name: str,
    grid_path: str | Path,
    *,
    out_dir: str | Path,
    scheduler: str | None = None,
    workers: int = 2,
    simulator: str = "verilator",
    synth: bool = True,
    progress=None,
) -> list[dict]:
    """Evaluate every point of the grid on Dask; write the table, CSV and Pareto plot.

    Returns the rows in grid order: each a finished point (``resources``, ``throughput``,
    ``cached``) or a failed one (``error``).
    """
    from .registry import get_design

    design = get_design(design_name)
    board, points = load_grid(grid_path, design)
    if design.sweep is None and not synth:
        raise UserError(f"{design_name} has no sweep benchmark; run with synthesis")
    if synth:
        from .boards import load_board

        load_board(board)  # a bad board name is a user error before any work starts
    out_dir = Path(out_dir)
    cache = out_dir / "cache"
    cache.mkdir(parents=True, exist_ok=True)

    rows: list[dict | None] = [None] * len(points)
    todo = []
    for index, overrides in enumerate(points):
        key = point_key(design_name, overrides, board, simulator)
        cached = cache / f"{key}.json"
        if cached.exists():
            rows[index] = {**json.loads(cached.read_text()), "cached": True}
            if progress is not None:
                progress(rows[index])
        else:
            todo.append((index, overrides, cached))

    if todo:
        from dask.distributed import Client, LocalCluster, as_completed

        cluster = None
        if scheduler is None:
            cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            )
        try:
            with Client(cluster if cluster is not None else scheduler) as client:
                futures = {}
                for index, overrides, cached in todo:
                    future = client.submit(
                        _safe_evaluate,
                        design_name,
                        overrides,
                        board,
                        simulator,
                        str(out_dir.resolve()),
                        synth,
                        str(cached.resolve()),
                        key=f"tandem-sweep-{cached.stem}",
                        pure=False,
                    )
                    futures[future] = index
                for future in as_completed(futures):
                    index = futures[future]
                    try:
                        row = future.result()
                    except Exception as exc:  # the worker itself died
                        row = {"params": points[index], "error": f"{type(exc).__name__}: {exc}"}
                    rows[index] = {**row, "cached": False}
                    if progress is not None:
                        progress(rows[index])
        finally:
            if cluster is not None:
                cluster.close()

    finished = [r for r in rows if r is not None]
    summary = summarize(design_name, board, finished, synth)
    resource, front = summary["pareto_resource"], _front(summary)
    (out_dir / "sweep.md").write_text(_table(design_name, finished, front, resource))
    (out_dir / "sweep.csv").write_text(_csv(finished))
    (out_dir / "sweep.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if resource and any("throughput" in r for r in finished):
        _plot(out_dir / "pareto.png", design_name, finished, front, resource)
    return finished


def summarize(design_name: str, board: str, rows: list[dict], synth: bool = True) -> dict:
    """What ``sweep.json`` holds (and ``tandem sweep --json`` prints): the design, the board,
    the resource of the Pareto front (None without synthesis) and every point in grid order,
    each marked ``pareto`` (a failed point keeps its error, not its traceback)."""
    resource = _pareto_resource(rows) if synth else None
    front = pareto_front(rows, resource) if resource else set()
    return {
        "design": design_name,
        "board": board,
        "pareto_resource": resource,
        "points": [
            {k: v for k, v in r.items() if k != "traceback"} | {"pareto": r.get("key") in front}
            for r in rows
        ],
    }


def _front(summary: dict) -> set[str]:
    return {p["key"] for p in summary["points"] if p["pareto"]}


def add_arguments(parser) -> None:
    """Arguments of ``tandem sweep``."""
    from .args import add_output

    parser.add_argument("design", help="design name (see `tandem designs`)")
    parser.add_argument("--grid", required=True, metavar="FILE", help="grid YAML (see docs)")
    add_output(parser, "build/sweep/DESIGN", help="table, plot and cache")
    parser.add_argument(
        "--scheduler", metavar="ADDRESS", help="an existing Dask scheduler (default: local)"
    )
    parser.add_argument("--workers", type=int, default=2, help="local cluster's worker processes")
    parser.add_argument(
        "--simulator",
        choices=("verilator", "icarus"),
        default="verilator",
        help="HDL simulator (default verilator; icarus is the second, slower one)",
    )
    parser.add_argument(
        "--no-synth", action="store_true", help="skip synthesis (throughput only, no Pareto plot)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the points and the Pareto front as JSON"
    )


def check_points(design, points: list[dict[str, Any]], path) -> None:
    """Raise a one-line :class:`UserError` naming the first point of the grid whose parameters
    are invalid (``tandem sweep`` checks the whole grid before it starts anything)."""
    from .config import resolve_params

    for point in points:
        overrides = [f"{k}={v}" for k, v in point.items()]
        try:
            resolve_params(design.params, None, overrides, design=design.name)
        except UserError as exc:
            label = ", ".join(f"{k}={v}" for k, v in point.items())
            raise UserError(f"{path}: point {label}: {str(exc).split(': ', 1)[-1]}") from None


def _point_line(row: dict) -> str:
    """One finished point, for the progress on stderr."""
    label = ", ".join(f"{k}={v}" for k, v in row["params"].items())
    if "error" in row:
        return f"FAILED  {label}: {row['error']}"
    res = row.get("resources", {})
    used = " ".join(f"{k}={res[k]:g}" for k in ("lut", "ff", "dsp") if k in res)
    speed = f"{row['throughput']:.4g} {row['throughput_unit']}" if "throughput" in row else ""
    origin = "cached" if row.get("cached") else f"{row.get('seconds', 0):.0f} s"
    return f"done    {label}: {used} {speed} ({origin})"


def run(args) -> int:
    """``tandem sweep``: 0 when every point finished, 1 when some failed.

    Progress goes to stderr (the grid's size, then ``[done/total]`` and the figures of each
    point as it finishes); the outcome to stdout: the table of ``sweep.md``, or with ``--json``
    what ``sweep.json`` holds.
    """
    from .args import default_output, integer, output_dir
    from .boards import load_board
    from .progress import counted, stderr_progress
    from .registry import get_design

    # The whole grid, the board and the output folder before anything starts.
    if args.scheduler is None:
        integer(args.workers, "--workers", 1, os.cpu_count() or 1, " (this machine's CPUs)")
    design = get_design(args.design)
    board, points = load_grid(args.grid, design)
    check_points(design, points, args.grid)
    load_board(board)
    if design.sweep is None and args.no_synth:
        raise UserError(f"{design.name} has no sweep benchmark; run with synthesis")
    out_dir = default_output("sweep", design.name) if args.output is None else args.output
    out_dir = output_dir(out_dir, "--output", ("sweep.md", "sweep.csv", "sweep.json", "pareto.png"))

    say = stderr_progress("sweep")
    say(f"{len(points)} points of {design.name} on {board} into {out_dir}")
    finished = counted(say, len(points))
    rows = run_sweep(
        design.name,
        args.grid,
        out_dir=out_dir,
        scheduler=args.scheduler,
        workers=args.workers,
        simulator=args.simulator,
        synth=not args.no_synth,
        progress=lambda row: finished(_point_line(row)),
    )
    summary = summarize(design.name, board, rows, not args.no_synth)
    failed = [r for r in rows if "error" in r]
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(_table(design.name, rows, _front(summary), summary["pareto_resource"]), end="")
        done = len(rows) - len(failed)
        print(f"{done} of {len(rows)} points done; wrote {out_dir / 'sweep.md'}")
    if failed:
        print(f"{len(failed)} points failed; they run again next time", file=sys.stderr)
        return 1
    return 0
