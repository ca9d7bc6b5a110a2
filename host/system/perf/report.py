"""The command line of ``tandem perf decode``: its options and their checks, the text table, the
plot and the printed projection."""

import numpy as np
from tandem.host.hpu import HpuParams

from tandem.boards import load_board, load_gpu
from tandem.errors import UserError

from .cards import KV_PLACEMENTS
from .inputs import load_efficiency, load_model_shape, model_names
from .model import decode_projection
from .paper import PAPER, paper_comparison


def _batches(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(
            f"--batch must be comma-separated integers like 1,8,16, not {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise UserError(f"--batch must list positive integers, not {text!r}")
    return sorted(set(values))


def add_arguments(parser) -> None:
    """Options of ``tandem perf decode``."""
    from tandem.boards import board_names, gpu_names

    parser.add_argument("--model", required=True, help=f"model shape: {', '.join(model_names())}")
    parser.add_argument("--gpu", required=True, help=f"GPU: {', '.join(gpu_names())}")
    parser.add_argument("--hpus", type=int, default=0, help="HPU cards beside the GPU (default 0)")
    parser.add_argument(
        "--hpu-board",
        default="u55c",
        help=f"board of the HPU cards (default u55c): {', '.join(board_names())}",
    )
    parser.add_argument(
        "--batch", default="1,8,16,32,64", help="comma-separated batch sizes (default 1,8,16,32,64)"
    )
    parser.add_argument("--input", type=int, default=1024, help="prompt tokens (default 1024)")
    parser.add_argument("--output", type=int, default=1024, help="generated tokens (default 1024)")
    parser.add_argument(
        "--engines", type=int, help="hpu engines per card (default: HBM channels // read ports)"
    )
    parser.add_argument(
        "--hpu-clock-mhz", type=float, help="engine clock (default: the board's default clock)"
    )
    parser.add_argument(
        "--hpu-latency",
        type=int,
        default=100,
        help="read latency (cycles) of the measured stream efficiency to use (default 100)",
    )
    parser.add_argument(
        "--pcie-latency-us", type=float, default=0.0, help="fixed latency per transfer (default 0)"
    )
    parser.add_argument(
        "--kv-bits",
        type=int,
        default=HpuParams().kv_bits,
        choices=(8, 16),
        help="the cards' KV format: int16 (default) or int8 rows (half the bytes per token, "
        "about 25x the attention error)",
    )
    parser.add_argument(
        "--placement",
        choices=KV_PLACEMENTS,
        default="channels",
        help="where the cards put KV regions (as `tandem cosim decode --placement`): whole "
        "inside pseudo-channels, spread over all of them (channels, the default), or a "
        "sequence's regions one after another (contiguous)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of rows")
    parser.add_argument("--plot", metavar="FILE", help="draw tokens/s against batch (PNG)")


def _fmt(value, spec: str, suffix: str = "") -> str:
    width = int(spec.split(".")[0] or 0) + len(suffix)
    return "-".rjust(width) if value is None else format(value, spec) + suffix


def table(rows: list[dict]) -> str:
    """The rows as a short text table, with the speed-up where both systems fit."""
    gpu = {r["batch"]: r for r in rows if r["system"] == "gpu"}
    head = (
        f"{'system':<8} {'batch':>5} {'tokens/s':>9} {'step ms':>8} {'gpu lin':>8} "
        f"{'gpu attn':>8} {'pcie':>6} {'hpu':>7} {'MFU':>6} {'tok/s/W':>8} {'speedup':>7}  "
        "bottleneck / memory"
    )
    lines = [head]
    for r in rows:
        s = r["split_ms"] or {}
        base = gpu.get(r["batch"])
        speedup = None
        if r["system"] != "gpu" and base and not base["oom"] and not r["oom"]:
            speedup = r["tokens_per_s"] / base["tokens_per_s"]
        what = f"OOM: {r['oom_reason']}" if r["oom"] else r["bottleneck"]
        if r.get("hpu_bound") and not r["oom"]:
            what += f" (cards {r['hpu_bound']}-bound)"
        lines.append(
            f"{r['system']:<8} {r['batch']:>5} {_fmt(r['tokens_per_s'], '9.1f')} "
            f"{_fmt(r['step_ms'], '8.2f')} {_fmt(s.get('gpu_linear'), '8.2f')} "
            f"{_fmt(s.get('gpu_attention'), '8.2f')} {_fmt(s.get('pcie'), '6.2f')} "
            f"{_fmt(s.get('hpu'), '7.2f')} {_fmt(r['mfu'], '6.3f')} "
            f"{_fmt(r['tokens_per_s_per_w'], '8.3f')} {_fmt(speedup, '6.2f', 'x')}  {what}"
        )
    return "\n".join(lines)


def decode_figure(rows: list[dict]):
    """Tokens/s against batch for each system, as a matplotlib Figure.

    A batch that runs out of memory has no tokens/s: it is marked ``x`` in a strip of its own
    above the plot, at its batch, never drawn as 0 (or any) tokens/s.
    """
    from tandem.plots import log2_axis, subplots

    systems = [
        (system, marker, f"C{level}", [r for r in rows if r["system"] == system])
        for level, (system, marker) in enumerate((("gpu", "o"), ("gpu+hpu", "s")))
    ]
    systems = [(s, m, c, mine) for s, m, c, mine in systems if mine]
    names = {s: s if s == "gpu" else f"gpu + {mine[0]['hpus']} hpu" for s, _, _, mine in systems}
    short = [(s, c, mine) for s, _, c, mine in systems if any(r["oom"] for r in mine)]
    if short:
        fig, (strip, ax) = subplots(
            2, figsize=(6.4, 4.4), sharex=True, height_ratios=(0.5 + 0.4 * len(short), 7)
        )
        for level, (_, color, mine) in enumerate(short):
            oom = [r["batch"] for r in mine if r["oom"]]
            strip.plot(oom, [level] * len(oom), "x", color=color, markersize=8, mew=2)
        strip.set_ylim(-0.7, len(short) - 0.3)
        strip.set_yticks(range(len(short)), [names[s] for s, _, _ in short], fontsize=8)
        strip.tick_params(axis="x", labelbottom=False)
        strip.set_title("out of memory (no tokens/s)", fontsize=8, loc="left")
        strip.grid(True, axis="x", alpha=0.3)
    else:
        fig, ax = subplots(figsize=(6.4, 4.4))
    for system, marker, color, mine in systems:
        fits = [(r["batch"], r["tokens_per_s"]) for r in mine if not r["oom"]]
        if fits:
            ax.plot(*zip(*fits, strict=True), marker=marker, color=color, label=names[system])
    first = rows[0]
    batches = [r["batch"] for r in rows]
    log2_axis(ax, batches)
    ax.set_xlim(min(batches) / 1.4, max(batches) * 1.4)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch (sequences decoded together)")
    ax.set_ylabel("decode throughput (tokens/s)")
    fig.suptitle(
        f"{first['model']} on {first['gpu']}, {first['input']} in / {first['output']} out "
        "(performance model)",
        fontsize=11,
    )
    ax.grid(True, alpha=0.3)
    if ax.get_lines():
        ax.legend(loc="upper left", fontsize=8)
    return fig


def plot(rows: list[dict], path) -> None:
    """Draw :func:`decode_figure` to ``path`` (PNG, byte-reproducible: no metadata)."""
    import os
    from pathlib import Path

    from tandem.plots import save_png

    path = Path(path)
    fig = decode_figure(rows)
    tmp = path.with_name(path.name + ".tmp")
    try:
        save_png(fig, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write plot {path}: {exc.strerror}") from None


def _engines_text(hpu: dict) -> str:
    fit = hpu["resources"]
    text = f"{hpu['engines_per_card']} per card, limited by {hpu['engines_limited_by']}"
    if hpu.get("config_choice"):
        text = f"{hpu['config_choice']}; {text}"
    if not fit["checked"]:
        return text + f"; resources not checked: {fit['reason']}"
    per = fit["per_engine"]
    text += (
        f"; one engine uses {per['lut']:,} LUT, {per['ff']:,} FF, {per['dsp']:,} DSP, so "
        f"{fit['engines_fit']} fit in {fit['share']:.0%} of the card ({fit['bound_by'].upper()}"
        f"-bound; {fit['synthesized']})"
    )
    if not fit["fits"]:
        text += f"; WARNING: {hpu['engines_per_card']} engines do not fit"
    return text


def _describe(rows: list[dict]) -> str:
    hpu = next((r["hpu"] for r in rows if r["system"] == "gpu+hpu"), None)
    first = rows[0]
    g = load_gpu(first["gpu"])
    text = (
        f"{first['model']} decode, {first['input']} in / {first['output']} out, on {g.name} "
        f"({g.memory_gib} GiB, {g.memory_bandwidth_gb_s} GB/s, {g.fp16_dense_tflops} TFLOPS)"
    )
    if hpu:
        e = hpu["efficiency"]
        p = hpu["params"]
        mean = np.mean([r["hpu_efficiency_mean"] for r in rows if r.get("hpu_efficiency_mean")])
        text += (
            f"\n+ {hpu['cards']} x {hpu['board']}: {hpu['engines_per_card']} engines/card at "
            f"{hpu['clock_mhz']:g} MHz (lanes {p['lanes']}, head_dim {p['head_dim']}, "
            f"G {p['gqa_group']}), HBM {hpu['hbm_gb_s']:g} GB/s x stream efficiency "
            f"{mean:.3f} (mean)\n  engines: {_engines_text(hpu)}"
            f"\n  efficiency: RTL, read latency {e['read_latency_cycles']}, "
            f"per call, measured with lanes {e['reference_params']['lanes']} head_dim "
            f"{e['reference_params']['head_dim']} G {e['reference_params']['gqa_group']} "
            f"({e['simulator']}; {e['source']}; `{e['command']}`)"
        )
        calls = [c for r in rows if r.get("hpu_channels") for c in r["hpu_channels"]["calls"]]
        if calls:
            placement = next(r for r in rows if r.get("hpu_channels"))["hpu_channels"]["placement"]
            touched = [c["touched"] for c in calls]
            rates = [c["gb_s"] for c in calls]
            text += (
                f"\n  KV placement {placement}: a call reads {min(touched):g}-{max(touched):g} of "
                f"{hpu['hbm_channels']} pseudo-channels, {min(rates):.0f}-{max(rates):.0f} GB/s "
                f"(a channel sustains at most "
                f"{hpu['hbm_gb_s'] * hpu['sustained_fraction'] / hpu['hbm_channels']:.2f} GB/s)"
            )
    return text


#: Most HPU cards beside one GPU: a dual-socket host has at most 256 PCIe lanes (16 x16 slots);
#: 64 leaves room for PCIe switches.
MAX_HPUS = 64
#: Largest batch projected: the GPU + HPU rows place every sequence on a card one by one
#: (about 80 us each: 65536 take 5 s).
MAX_BATCH = 1 << 16
#: Longest fixed latency per transfer (us): a PCIe completion times out after at most 64 s
#: (PCI Express Base Specification, completion timeout range D).
MAX_PCIE_LATENCY_US = 64e6


def check_arguments(args) -> list[int]:
    """Every flag of ``tandem perf decode``, whether ``--hpus`` uses it or not, before any work;
    returns the batch sizes."""
    from tandem.args import MAX_CLOCK_MHZ, integer, output_file, real
    from tandem.boards import board_names

    load_model_shape(args.model)
    load_gpu(args.gpu)
    board = load_board(args.hpu_board)
    integer(args.hpus, "--hpus", 0, MAX_HPUS, " (cards beside one GPU)")
    batches = _batches(args.batch)
    integer(max(batches), "--batch", 1, MAX_BATCH)
    integer(args.input, "--input", 1)
    integer(args.output, "--output", 1)
    if args.engines is not None:
        dsp = board.capacity("dsp") or max(
            load_board(name).capacity("dsp") or 0 for name in board_names()
        )
        integer(args.engines, "--engines", 1, dsp, f" (DSP slices of {board.name})")
    if args.hpu_clock_mhz is not None:
        real(args.hpu_clock_mhz, "--hpu-clock-mhz", 0.0, MAX_CLOCK_MHZ, above=True)
    latencies = load_efficiency().latencies
    if args.hpu_latency not in latencies:
        raise UserError(
            f"--hpu-latency {args.hpu_latency}: the stream efficiency was measured at read "
            f"latencies {', '.join(map(str, latencies))} only"
        )
    real(args.pcie_latency_us, "--pcie-latency-us", 0.0, MAX_PCIE_LATENCY_US, why=" (64 s)")
    if args.plot is not None:
        output_file(args.plot, "--plot")
    if args.hpus == 0:  # the GPU alone: a card's flag would be ignored, so it is refused
        card_flags = {
            "--hpu-board": args.hpu_board != "u55c",
            "--engines": args.engines is not None,
            "--hpu-clock-mhz": args.hpu_clock_mhz is not None,
            "--hpu-latency": args.hpu_latency != 100,
            "--pcie-latency-us": args.pcie_latency_us != 0.0,
            "--kv-bits": args.kv_bits != HpuParams().kv_bits,
            "--placement": args.placement != "channels",
        }
        given = [flag for flag, set_ in card_flags.items() if set_]
        if given:
            raise UserError(f"{', '.join(given)} describe HPU cards: give --hpus N (at least 1)")
    return batches


def run(args) -> int:
    """``tandem perf decode``: print the projection (table or JSON), draw the plot."""
    import json

    rows = decode_projection(
        args.model,
        args.gpu,
        check_arguments(args),
        input_tokens=args.input,
        output_tokens=args.output,
        hpus=args.hpus,
        hpu_board=args.hpu_board,
        engines=args.engines,
        clock_mhz=args.hpu_clock_mhz,
        latency=args.hpu_latency,
        pcie_latency_us=args.pcie_latency_us,
        kv_bits=args.kv_bits,
        placement=args.placement,
    )
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(_describe(rows))
    print(table(rows))
    cmp = paper_comparison(rows)
    if cmp:
        print(
            f"best gpu+hpu (batch {cmp['hpu_best_batch']}) / best gpu alone (batch "
            f"{cmp['gpu_best_batch']}): {cmp['speedup']:.2f}x tokens/s"
            + (
                f", {cmp['tokens_per_s_per_w_ratio']:.2f}x tokens/s/W"
                if "tokens_per_s_per_w_ratio" in cmp
                else ""
            )
        )
        same = all(
            str(rows[0].get(k, "")) == str(PAPER[k]) for k in ("model", "gpu", "input", "output")
        )
        hpu_rows = [r for r in rows if r["system"] == "gpu+hpu"]
        if same and hpu_rows and hpu_rows[0]["hpus"] == PAPER["hpus"]:
            print(
                f"HPU paper (arXiv 2504.16112, measured): up to {PAPER['speedup']}x tokens/s, "
                f"{PAPER['tokens_per_s_per_w_ratio']}x tokens/s/W; the GPU alone runs out of "
                "memory at large batches"
            )
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
