"""``tandem map spmm``: tile a GCN adjacency for the systolic array and the sparse engine.

Writes ``mapping.yaml`` (summary), ``mapping.npz`` (tile lists, engine orders, node order) and
``heatmap.png`` into ``-o DIR`` (default ``build/map/spmm``) and prints the summary as a table,
or with ``--json`` as JSON (what ``mapping.yaml`` holds, and the files written). Heavy imports
stay inside :func:`run` so that ``tandem --help`` stays fast.
"""

import argparse

__all__ = ["add_arguments", "run"]

#: What ``-o DIR`` receives.
OUTPUTS = ("mapping.yaml", "mapping.npz", "heatmap.png")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tandem map spmm``."""
    from tandem.args import add_output

    parser.add_argument(
        "--graph",
        required=True,
        metavar="FILE",
        help="graph: .mtx, edge list, METIS .graph, scipy .npz (text may be .gz)",
    )
    parser.add_argument(
        "--format",
        choices=("mtx", "edges", "metis", "npz"),
        help="file format (default: from the suffix)",
    )
    parser.add_argument(
        "--features",
        required=True,
        type=int,
        metavar="F",
        help="feature columns of X·W (the layer's output width)",
    )
    parser.add_argument(
        "--tile",
        type=int,
        metavar="T",
        help="tile edge, a power of two (default: the sparse engine's tile)",
    )
    parser.add_argument("--board", default="vck190", help="board file (default vck190)")
    parser.add_argument(
        "--reorder",
        choices=("partition", "none"),
        default="partition",
        help="node order: three-subgraph partition (default) or the file's",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        metavar="DENSITY",
        help="density of the fixed-threshold baseline (default: break-even)",
    )
    parser.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="YAML with 'systolic:' and 'sparse-engine:' parameter sections",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="DESIGN.KEY=VALUE",
        help="engine parameter, e.g. systolic.rows=16 (repeatable)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="threads for the mapper's large passes and torch, BLAS and OpenMP (default: the "
        "cores no other process is running on; the mapping is the same)",
    )
    parser.add_argument("--no-heatmap", action="store_true", help="skip heatmap.png")
    add_output(parser, "build/map/spmm")
    parser.add_argument(
        "--json", action="store_true", help="print the summary and the files written as JSON"
    )


def engine_params(config: str | None, overrides: list[str]):
    """The two engines' parameter sets from ``-c`` and ``--set systolic.KEY=VALUE``."""
    from tandem.config import read_yaml, resolve_params, show
    from tandem.errors import UserError
    from tandem.registry import get_design

    designs = {name: get_design(name).params for name in ("systolic", "sparse-engine")}
    sections: dict = {}
    if config:
        data = read_yaml(config, "engine config") or {}
        if not isinstance(data, dict):
            raise UserError(
                f"{config}: expected a mapping with sections 'systolic' and/or 'sparse-engine', "
                f"not {show(data)}"
            )
        unknown = sorted(map(str, set(data) - set(designs)))
        if unknown:
            raise UserError(
                f"{config}: unknown section {show(unknown[0])}; expected 'systolic' and/or "
                "'sparse-engine'"
            )
        sections = data
    flags: dict[str, list[str]] = {name: [] for name in designs}
    for item in overrides:
        name, _, rest = item.partition(".")
        if name not in designs or "=" not in rest:
            raise UserError(
                f"--set {item!r}: expected systolic.KEY=VALUE or sparse-engine.KEY=VALUE"
            )
        flags[name].append(rest)
    params = {}
    for name, cls in designs.items():
        section = sections.get(name) or {}
        if not isinstance(section, dict):
            raise UserError(
                f"{config}: section {name!r} must be a mapping of parameters, not {show(section)}"
            )
        merged = [f"{k}={v}" for k, v in section.items()] + flags[name]
        params[name] = resolve_params(cls, None, merged, design=name)
    return params["systolic"], params["sparse-engine"]


def run(args) -> int:
    """Read, normalize, tile, classify, balance; write and print the mapping."""
    import json
    import os
    from pathlib import Path

    from tandem.host.common.threads import thread_budget

    from tandem.args import default_output, integer, output_dir
    from tandem.boards import load_board
    from tandem.errors import UserError
    from tandem.generate import staged_output

    from .cost import CostModel
    from .mapper import map_graph, summary_table, write_mapping
    from .readers import read_graph

    # Every flag and the output folder before the graph is read.
    out = default_output("map", "spmm") if args.output is None else args.output
    out = output_dir(out, "--output", OUTPUTS)
    systolic, sparse = engine_params(args.config, args.overrides)
    tile = args.tile if args.tile is not None else sparse.tile
    if tile < 2 or tile & (tile - 1):
        raise UserError(f"--tile must be a power of two >= 2, not {tile}")
    if tile > sparse.tile:
        sparse = sparse.replace(tile=tile)
    if args.threshold is not None and not 0.0 < args.threshold <= 1.0:  # also NaN
        raise UserError(f"--threshold must be in (0, 1], not {args.threshold}")
    threads = thread_budget() if args.threads is None else args.threads
    integer(threads, "--threads", 1, os.cpu_count() or 1, " (this machine's CPUs)")
    board = load_board(args.board)
    memory = int(sum(m["capacity_gib"] for m in board.memory) * 2**30)
    feature_bytes = -(-systolic.x_bits // 8)
    # X (nodes x features) streams from the board's memory: at least one node's row must fit.
    integer(args.features, "--features", 1, memory // feature_bytes, f" ({board.name} memory)")
    model = CostModel(systolic, sparse, board, tile, args.features)
    graph = read_graph(args.graph, args.format, threads=threads)
    nodes = int(graph.shape[0])
    if nodes * args.features * feature_bytes > memory:
        raise UserError(
            f"--features {args.features}: X of {nodes} nodes x {args.features} features "
            f"({feature_bytes * nodes * args.features} bytes) exceeds {board.name}'s "
            f"{memory} bytes of memory"
        )
    _, mapping = map_graph(
        graph,
        model,
        reorder=args.reorder,
        threshold=args.threshold,
        source=Path(args.graph).name,
        path=args.graph,
        threads=threads,
    )
    with staged_output(out, OUTPUTS, "--output") as staging:
        names = [p.name for p in write_mapping(mapping, staging, heatmap=not args.no_heatmap)]
    paths = [str(out / name) for name in names]
    if args.json:
        print(json.dumps({**mapping.summary(), "output": str(out), "files": paths}, indent=2))
        return 0
    print(summary_table(mapping.summary()))
    print()
    print("\n".join(paths))
    return 0
