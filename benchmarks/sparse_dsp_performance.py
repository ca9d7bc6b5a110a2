"""N:M speed-up and DSP utilization of ``sparse-mpe``, measured in RTL simulation (Verilator).

Run: ``python benchmarks/sparse_dsp_performance.py [--rows 1024 --cols 1024] [--json FILE]
[--plot FILE.png] [--synth]``. About two minutes on two cores (Verilator build included);
``--synth`` adds ``tandem synth sparse-mpe --board u280`` of the same engine (several minutes).

What it measures. The default ``sparse-mpe`` (2 chains x 8 DSP stages = 16 DSP48E2, two int8
MACs each, so 32 MACs per cycle) runs, one request after another in the cocotb benchmark test,
a GEMV ``W @ x`` of random int8 weights magnitude-pruned to each pattern (row pairs pruned
together, so matrix-vector mode fills both lanes of every DSP), then SmolLM2-135M's layer 0
q_proj (576 x 576, ``tests/data/sparse_dsp_smollm2_q0.npz``) at 2:4 and dense. Every result is
checked bit-exact against the golden model and ``W @ x`` in int64. Cycles run from the first
weight beat offered (activations already loaded) to the last result taken.

* dense-equivalent MACs per cycle: ``rows * cols * batch / cycles``;
* DSP utilization: ``useful MACs / (DSPs * 2 * cycles)``, useful MACs being the N slots per
  group of every row (what the N:M format asks for);
* speed-up: cycles of the dense (16:16) run over cycles of the pattern; target M/N within 5 %.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from tandem.bench import Figures, Provenance, add_benchmark_options

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "data" / "sparse_dsp_smollm2_q0.npz"
PATTERNS = ["1:2", "1:4", "2:4", "1:8", "2:8", "4:8", "1:16", "2:16", "4:16", "8:16", "16:16"]


def _problems(rows: int, cols: int, seed: int):
    from tandem.mappings.nm import NMPattern, prune_magnitude, quantize_per_channel

    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (rows, cols))
    x = rng.integers(-128, 128, cols)
    out = []
    for text in PATTERNS:
        pattern = NMPattern.parse(text)
        pruned = prune_magnitude(w, pattern, pair_rows=True)
        out.append(("random", text, pruned.astype(np.int8), x, "mv"))
    with np.load(FIXTURE) as data:
        lw, lx = data["w"].astype(np.float64), data["x"].astype(np.float64)
    x0 = lx[:, :2]
    xq = np.rint(x0 / (np.abs(x0).max(axis=0) / 127)).astype(np.int64)
    for label, pattern, pair_rows, mode in (
        ("smollm2 per-row", "2:4", False, "mv"),
        ("smollm2 row-pairs", "2:4", True, "mv"),
        ("smollm2 per-row", "2:4", False, "mm"),
        ("smollm2", "16:16", False, "mv"),
        ("smollm2", "16:16", False, "mm"),
    ):
        pruned = prune_magnitude(lw, NMPattern.parse(pattern), pair_rows=pair_rows)
        q, _ = quantize_per_channel(pruned)
        out.append((label, pattern, q, xq[:, 0] if mode == "mv" else xq, mode))
    return out


def run(rows: int, cols: int, seed: int):
    from tandem.sim.runner import run_regression

    from tandem.registry import get_design

    problems = _problems(rows, cols, seed)
    design = get_design("sparse-mpe")
    params = design.params(max_k=max(1024, 1 << (cols - 1).bit_length()))
    with tempfile.TemporaryDirectory(prefix="tandem-sparse-dsp-") as tmp:
        arrays = {"count": np.int64(len(problems))}
        for i, (_, text, w, x, mode) in enumerate(problems):
            n, m = (int(v) for v in text.split(":"))
            arrays |= {f"{i}_w": w, f"{i}_x": x, f"{i}_n": n, f"{i}_m": m, f"{i}_mode": mode}
        bench = Path(tmp) / "problems.npz"
        np.savez(bench, **arrays)
        result = run_regression(
            design,
            params,
            simulator="verilator",
            seed=seed,
            run_dir=Path(tmp) / "run",
            testcase="benchmark",
            plusargs=(f"+tandem_sparse_dsp_bench={bench}",),
        )
        if not result.passed:
            log = result.log_file.read_text()[-3000:]
            print(result.summary(), log, sep="\n", file=sys.stderr)
            raise SystemExit(1)
        figures = result.tests[0].figures["problems"]
    for (label, _, w, _, _), fig in zip(problems, figures):
        fig["workload"], fig["shape"] = label, list(w.shape)
    return params, figures


def _parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--plot", type=Path, help="draw speed-up and utilization (PNG)")
    parser.add_argument("--synth", action="store_true", help="also synthesize it for the U280")
    add_benchmark_options(parser, seed=True, json="also write the figures here")
    return parser.parse_args(argv)


def _print_table(params, figures) -> None:
    """Each problem's line, after adding its speed-up over dense and the M/N target to it."""
    dsps = params.chains * params.stages
    print(
        f"sparse-mpe: {params.chains} chains x {params.stages} DSP48E2 = {dsps} DSPs, "
        f"{2 * dsps} int8 MACs/cycle; RTL simulation (Verilator), bit-exact vs W @ x"
    )
    head = (
        f"{'workload':<19}{'shape':>10}{'mode':>5}{'N:M':>6}{'cycles':>8}"
        f"{'dense-eq MAC/cyc':>17}{'util':>7}{'speed-up':>9}{'M/N':>6}{'err':>7}"
    )
    print(head)
    dense = {}
    for f in figures:
        if f["pattern"] == "16:16":
            dense[(f["workload"].split()[0], f["mode"])] = f["cycles"]
    for f in figures:
        n, m = (int(v) for v in f["pattern"].split(":"))
        base = dense.get((f["workload"].split()[0], f["mode"]))
        f["speedup"] = round(base / f["cycles"], 4) if base else None
        f["target"] = m / n
        f["speedup_error"] = round(f["speedup"] / f["target"] - 1, 4) if base else None
        shape = "x".join(str(s) for s in f["shape"])
        print(
            f"{f['workload']:<19}{shape:>10}{f['mode']:>5}{f['pattern']:>6}{f['cycles']:>8}"
            f"{f['dense_equivalent_macs_per_cycle']:>17.2f}{f['dsp_utilization']:>7.3f}"
            f"{f['speedup']:>9.3f}{m / n:>6.2f}{100 * f['speedup_error']:>6.1f}%"
        )


def _add_problem_figures(suite: Figures, figures) -> None:
    """Random GEMV DSP utilization, and every pattern's speed-up over dense."""
    for f in figures:
        n, m = (int(v) for v in f["pattern"].split(":"))
        where = f"{f['workload']} {'x'.join(map(str, f['shape']))} {f['mode']}, Verilator RTL"
        if f["workload"] == "random":
            suite.add(
                f"DSP utilization, {f['pattern']}",
                f["dsp_utilization"],
                design="sparse-mpe",
                reference=0.95,
                reference_label="target",
                note=where,
            )
        if f["speedup"] is not None and f["pattern"] != "16:16":
            suite.add(
                f"speed-up over dense, {f['workload']} {f['mode']} {f['pattern']}",
                f["speedup"],
                "x",
                design="sparse-mpe",
                reference=m / n,
                reference_label="M/N (ideal)",
                note=where,
            )


def _layer_errors(suite: Figures) -> None:
    """SmolLM2 q_proj's error at 2:4 in int8 against float, printed and added to ``suite``."""
    from tandem.mappings.nm import NMPattern
    from tandem.mappings.nm.accuracy import layer_errors

    with np.load(FIXTURE) as data:
        lw, lx = data["w"].astype(np.float64), data["x"].astype(np.float64)
    for pair_rows in (False, True):
        e = layer_errors(lw, lx, NMPattern(2, 4), pair_rows=pair_rows)
        print(
            f"SmolLM2 q_proj 2:4 ({'row-pair' if pair_rows else 'per-row'} pruning), int8, "
            f"16 tokens: rel. L2 error vs float W@x {100 * e['engine_vs_dense']:.2f} %, "
            f"vs pruned float {100 * e['engine_vs_pruned']:.2f} %, pruning alone "
            f"{100 * e['pruned_vs_dense']:.2f} %"
        )
        suite.add(
            f"relative L2 error vs float W@x, 2:4 {'row-pair' if pair_rows else 'per-row'}",
            e["engine_vs_dense"],
            design="sparse-mpe",
            higher_is_better=False,
            note="SmolLM2 q_proj, int8, 16 tokens; pruning included",
            provenance=Provenance.GOLDEN_REAL_DATA,
        )


def _synthesize(params, report: dict, suite: Figures) -> None:
    """``tandem synth sparse-mpe --board u280`` of the same engine, into ``report`` and
    ``suite``."""
    from tandem.registry import get_design
    from tandem.synth import synthesize

    synth = synthesize(get_design("sparse-mpe"), params, "u280")
    print(synth.table())
    report["synth_u280"] = json.loads(synth.to_json())
    for name, value in synth.used.items():
        suite.add(
            f"{name} on the U280",
            value,
            "cells",
            design="sparse-mpe",
            higher_is_better=None,
            note="yosys synth_xilinx",
            provenance=Provenance.SYNTHESIS,
        )


def main(argv=None) -> int:
    args = _parse_args(argv)
    if args.rows < 2 or args.cols < 16:
        print("sparse_dsp_performance: error: --rows >= 2 and --cols >= 16", file=sys.stderr)
        return 2
    params, figures = run(args.rows, args.cols, args.seed)
    _print_table(params, figures)
    randoms = [f for f in figures if f["workload"] == "random"]
    worst_util = min(f["dsp_utilization"] for f in randoms)
    worst_speed = max(abs(f["speedup_error"]) for f in randoms)
    print(
        f"random {args.rows}x{args.cols} GEMV: lowest DSP utilization {worst_util:.3f} "
        f"(target >= 0.95), largest speed-up deviation from M/N {100 * worst_speed:.1f} % "
        f"(target 5 %)"
    )
    smol = {
        (f["workload"], f["mode"]): f
        for f in figures
        if f["pattern"] == "2:4" and f["workload"].startswith("smollm2")
    }
    suite = Figures("sparse-dsp", config=params.to_dict())
    _add_problem_figures(suite, figures)
    for key, f in smol.items():
        print(
            f"SmolLM2 q_proj at 2:4, {key[0].split(' ', 1)[1]} pruning, {key[1]}: "
            f"{f['speedup']:.2f}x over dense (FlightLLM reports 1.6x from sparsity)"
        )
    _layer_errors(suite)
    report = {"params": params.to_dict(), "figures": figures}
    if args.synth:
        _synthesize(params, report, suite)
    suite.write(args.figures)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        _plot(randoms, args.plot)
    return 0


def performance_figure(figures):
    """Speed-up over dense and DSP utilization per N:M pattern (a Figure).

    Utilization is drawn as points on an axis that covers them and the 0.95 target: bars from 0
    would draw 0.955 and 0.97 alike.
    """
    from tandem.plots import log2_axis, subplots

    labels = [f["pattern"] for f in figures]
    fig, (a, b) = subplots(1, 2, figsize=(10, 3.8), dpi=120)
    a.bar(labels, [f["speedup"] for f in figures], color="C0", label="measured (RTL)")
    a.plot(labels, [f["target"] for f in figures], "k_", markersize=14, mew=2, label="M/N (ideal)")
    log2_axis(a, [f["target"] for f in figures], which="y", suffix="x")
    a.set_ylim(bottom=0.75)
    a.set_ylabel("speed-up over dense (16:16)")
    a.legend(loc="upper left", fontsize=8)
    util = [f["dsp_utilization"] for f in figures]
    b.plot(labels, util, "o", color="C0", label="measured (RTL)")
    b.axhline(0.95, color="k", linestyle=":", label="target 0.95")
    b.set_ylim(min(0.9, min(util) - 0.01), 1.0)
    b.set_ylabel("DSP utilization\n(useful MACs / DSP MAC slots)")
    b.legend(loc="lower right", fontsize=8)
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=60)
        ax.set_xlabel("N:M pattern (N kept of every M weights)")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("sparse-mpe, random GEMV, RTL simulation", fontsize=11)
    return fig


def _plot(figures, path: Path) -> None:
    from tandem.plots import save_png

    save_png(performance_figure(figures), path)


if __name__ == "__main__":
    sys.exit(main())
