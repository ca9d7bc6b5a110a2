"""HPU card in RTL on the HBM model: KV bandwidth against the channels' sustained peak, and the
card cycle model against the simulated cycles.

Usage: ``python benchmarks/hpu_card_rtl.py [--engines 2 4] [--tokens LO HI] [--sequences S]
[--heads H] [--channels-per-engine C] [--max-seq-len L] [--seed S] [--figures PATH]``

For each engine count N, builds ``hpu-card`` (N engines of the small ``hpu`` configuration:
head_dim 32, int8 K and V on 128-bit ports, two queries; ``C * N`` pseudo-channels, C = 2 as
on the U55C, 32 channels for 16 engines: each engine's K port streams from one channel and its
V port from another, the card's split KV layout) in Verilator and runs the cocotb test
``hbm_decode`` of :mod:`tandem.sim.hpu.card_tb`: one decode step of ``S`` sequences of ``H``
KV heads each, their stored lengths drawn from ``LO..HI`` tokens (512-2047 by default, 513-2048
with the appended token), each (sequence, head) region sized for its tokens and placed, longest
sequence first, by the runtime's channel-aware allocator
(:class:`~tandem.mappings.hpu.channels.ChannelSpace`), its request routed to the engine that
owns it, one token appended per request, every result compared with the golden model.
Every engine's read ports draw on one shared HBM model (:mod:`tandem.sim.hpu.hbm`: the
U55C's per-channel rate scaled to the port width, 0.91 sustained with refresh, 32-cycle
latency).

It prints, measured in one run per N:

* the card's KV read bandwidth over the sustained peak of the channels the step touched:
  KV bytes / (read window cycles x touched channels x sustained bytes per channel-cycle), the
  window from the first AR to the last R of any port (target >= 0.85);
* the card cycle model's step cycles (:func:`~tandem.host.hpu.card.card_call_cycles`, the
  engine's FILL/GAP fit and the HBM model's rates, nothing fitted to the card) against the
  RTL's, first descriptor to last result beat (target within 5 %).
"""

import argparse
import sys
import time
from pathlib import Path

from tandem.sim.runner import run_regression

from tandem.bench import Figures, Provenance, add_benchmark_options
from tandem.registry import get_design

#: The engine: the co-simulation tests' small configuration (tests/test_hpu.py SMALL, G = 2).
ENGINE = {"head_dim": 32, "lanes": 16, "mem_data_bits": 128, "kv_bits": 8, "gqa_group": 2}
BANDWIDTH_TARGET = 0.85
MODEL_TARGET = 0.05
TESTCASE = "hbm_decode"


def card_params(design, engines: int, per_engine: int, max_seq_len: int, regions: int):
    """The card of ``engines`` engines, ``per_engine`` channels each (half of them for K spans,
    half for V spans), room for ``regions`` regions of ``max_seq_len`` tokens per K channel
    (plus one, the allocator's slack)."""
    probe = design.params(**ENGINE, max_seq_len=max_seq_len, engines=1, channels=2)
    region = probe.layout.region_bytes(max_seq_len + 1)
    channels = engines * per_engine
    channel = -(-(region * (regions + 1)) // (1 << 16)) << 16
    return design.params(
        **ENGINE,
        max_seq_len=max_seq_len,
        engines=engines,
        channels=channels,
        memory_bytes=channel * channels,
    )


def run_one(design, params, lengths, heads, seed, out: Path):
    plusargs = (
        f"+tandem_card_hbm_lengths={','.join(map(str, lengths))}",
        f"+tandem_card_hbm_heads={heads}",
    )
    start = time.perf_counter()
    result = run_regression(
        design,
        params,
        simulator="verilator",
        seed=seed,
        testcase=TESTCASE,
        run_dir=out / f"hpu-card-rtl-{params.engines}",
        plusargs=plusargs,
    )
    elapsed = time.perf_counter() - start
    if not result.passed or not result.tests:
        print(result.summary(), file=sys.stderr)
        return None
    figures = dict(result.tests[0].figures)
    figures["build"] = "cached" if result.build_cached else "new"
    figures["elapsed_s"] = elapsed
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--tokens", type=int, nargs=2, default=[512, 2047], metavar=("LO", "HI"))
    parser.add_argument("--sequences", type=int, default=0, help="default: 2 per channel / H")
    parser.add_argument("--heads", type=int, default=2, help="KV heads per sequence")
    parser.add_argument("--channels-per-engine", type=int, default=2)
    parser.add_argument("--max-seq-len", type=int, default=2048)
    add_benchmark_options(parser, seed=True, out=True)
    args = parser.parse_args(argv)
    lo, hi = args.tokens
    if not 1 <= lo <= hi < args.max_seq_len:
        print(
            f"hpu_card_rtl: error: --tokens must satisfy 1 <= LO <= HI < --max-seq-len "
            f"({args.max_seq_len}), not {lo} {hi}",
            file=sys.stderr,
        )
        return 2
    if (
        min(args.engines) < 1
        or args.heads < 1
        or args.channels_per_engine < 2
        or args.channels_per_engine % 2
    ):
        print(
            "hpu_card_rtl: error: --engines and --heads must be >= 1 and --channels-per-engine "
            "a positive even number (K and V channels)",
            file=sys.stderr,
        )
        return 2
    import numpy as np

    design = get_design("hpu-card")
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    figures = Figures(
        "hpu-card-rtl",
        config={
            "engine": ENGINE,
            "tokens": [lo, hi],
            "heads": args.heads,
            "channels_per_engine": args.channels_per_engine,
            "max_seq_len": args.max_seq_len,
            "seed": args.seed,
        },
    )
    rows = []
    for n in args.engines:
        channels = n * args.channels_per_engine
        sequences = args.sequences or max(1, 2 * channels // args.heads)
        regions = -(-sequences * args.heads // (channels // 2)) + 1
        params = card_params(design, n, args.channels_per_engine, args.max_seq_len, regions)
        lengths = rng.integers(lo, hi + 1, sequences).tolist()
        print(
            f"N = {n}: {channels} channels of {params.geometry.channel_bytes} B, {sequences} "
            f"sequences x {args.heads} heads, tokens {lengths} ...",
            flush=True,
        )
        got = run_one(design, params, lengths, args.heads, args.seed, args.out)
        if got is None:
            return 1
        error = got["model_cycles"] / got["cycles"] - 1
        rows.append((n, channels, got, error))
        print(
            f"  {got['build']} build, {got['elapsed_s']:.0f} s; per-engine requests "
            f"{got['requests_per_engine']}, model per engine {got['model_engine_cycles']}",
            flush=True,
        )
    print()
    print(
        f"{'N':>3} {'chan':>5} {'touched':>7} {'requests':>8} {'KV MB':>7} {'read cyc':>9} "
        f"{'BW/sust':>8} {'RTL cyc':>9} {'model cyc':>10} {'error':>8}"
    )
    for n, channels, got, error in rows:
        print(
            f"{n:>3} {channels:>5} {got['touched_channels']:>7} {got['requests']:>8} "
            f"{got['kv_bytes'] / 1e6:>7.3f} {got['read_cycles']:>9} "
            f"{got['bandwidth_fraction']:>8.4f} {got['cycles']:>9} {got['model_cycles']:>10.1f} "
            f"{100 * error:>+7.2f}%"
        )
    print(
        f"BW/sust: KV bytes / (read window x touched channels x "
        f"{rows[0][2]['sustained_bytes_per_cycle']:.3f} B/cycle, a channel's sustained rate); "
        f"targets: >= {BANDWIDTH_TARGET}, model within {100 * MODEL_TARGET:.0f} %"
    )
    for n, channels, got, error in rows:
        note = (
            f"N = {n} engines, {channels} channels, {got['requests']} requests of "
            f"{lo}-{hi} tokens, Verilator, HBM model (sim/hpu/hbm.py)"
        )
        figures.add(
            f"card KV bandwidth over the touched channels' sustained peak, N = {n}",
            got["bandwidth_fraction"],
            reference=BANDWIDTH_TARGET,
            reference_label="target",
            design="hpu-card",
            note=note,
        )
        figures.add(
            f"card cycle model error against RTL, N = {n}",
            abs(error),
            reference=MODEL_TARGET,
            reference_label="target",
            higher_is_better=False,
            design="hpu-card",
            note=note,
        )
        figures.add(
            f"card step cycles in RTL, N = {n}",
            got["cycles"],
            "cycles",
            higher_is_better=None,
            design="hpu-card",
            note=note,
            provenance=Provenance.RTL,
        )
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
