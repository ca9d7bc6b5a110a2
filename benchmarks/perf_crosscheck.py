"""Performance model against the decode runtime: accelerator cycles per decode step.

Run: ``python benchmarks/perf_crosscheck.py [--backend golden|rtl] [--simulator verilator|icarus]
[--layers N] [--lengths 37 90 20 64] [--steps 3] [--cards 2]``

Runs :class:`tandem.host.system.decode.Decoder` with every decode attention on ``--cards``
:class:`~tandem.host.hpu.device.HpuDevice` cards (golden model or the RTL itself) on a
SmolLM2-135M-shaped Llama (the real weights when the GGUF file is found, else random weights;
the cycles depend on the attention shape only), and prints, per decode step and card, the
cycles the runtime reports next to those :func:`tandem.host.system.perf.hpu_step_cycles` predicts,
and their ratio. ``--layers`` cuts the model short (the per-layer calls are the same) so
that an RTL run stays short. Exit status 1 when a ratio is off by more than 10 %.
"""

import argparse
import sys
import time

import numpy as np
from tandem.host.system.perf import hpu_step_cycles, load_model_shape

from tandem.bench import Figures, Provenance, add_benchmark_options


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("golden", "rtl"), default="golden")
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument("--layers", type=int, help="decoder layers (default: the model's)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[37, 90, 20, 64])
    parser.add_argument("--steps", type=int, default=3, help="tokens per sequence (>= 2)")
    parser.add_argument("--cards", type=int, default=2)
    add_benchmark_options(parser)
    args = parser.parse_args(argv)
    if args.steps < 2 or args.cards < 1 or min(args.lengths) < 1:
        print("perf_crosscheck: error: --steps >= 2, --cards >= 1, --lengths >= 1", file=sys.stderr)
        return 2

    import torch
    from tandem.host.hpu import HpuParams
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.system.decode import Decoder, HpuAttention, Llama
    from tandem.host.system.model import LlamaConfig, random_llama

    torch.set_num_threads(1)
    shape = load_model_shape("smollm2-135m")
    layers = args.layers or shape.layers
    config = LlamaConfig(
        n_layers=layers,
        dim=shape.hidden,
        n_heads=shape.heads,
        n_kv_heads=shape.kv_heads,
        hidden=shape.intermediate,
        vocab=256,
    )
    model = Llama(config, random_llama(config, 0), "cpu")
    capacity = max(args.lengths) + args.steps
    params = HpuParams.for_model(config, max_seq_len=max(64, 1 << (capacity - 1).bit_length()))
    options = {"simulator": args.simulator} if args.backend == "rtl" else {}
    card_bytes = 32 << 20
    cards = [
        HpuDevice(params, memory_bytes=card_bytes, name=f"hpu{i}", backend=args.backend, **options)
        for i in range(args.cards)
    ]
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, config.vocab, n).tolist() for n in args.lengths]
    start = time.perf_counter()
    try:
        result = Decoder(model, HpuAttention(config, cards)).generate(prompts, args.steps)
    finally:
        for card in cards:
            card.close()
    elapsed = time.perf_counter() - start
    shape_used = shape if layers == shape.layers else _with_layers(shape, layers)
    capacities = [n + args.steps for n in args.lengths]
    print(
        f"smollm2-135m shape, {layers} layers, random weights, {args.backend} backend"
        + (f" ({args.simulator})" if args.backend == "rtl" else "")
        + f", {args.cards} cards, prompts {args.lengths}, {elapsed:.0f} s"
    )
    print(f"{'step':>4} {'card':>5} {'runtime':>9} {'model':>9} {'model/runtime':>13}")
    worst = 0.0
    for step, measured in enumerate(result.step_cycles, start=1):
        contexts = [n + step for n in args.lengths]
        predicted = hpu_step_cycles(
            shape_used,
            params,
            contexts,
            cards=args.cards,
            capacities=capacities,
            card_bytes=card_bytes,
            latency=2,
        )
        for card in sorted(measured):
            ratio = predicted.get(card, 0.0) / measured[card]
            worst = max(worst, abs(ratio - 1))
            model = predicted.get(card, 0.0)
            print(f"{step:>4} {card:>5} {measured[card]:>9} {model:>9.0f} {ratio:>13.3f}")
    print(f"largest deviation {100 * worst:.1f} % (limit 10 %)")
    figures = Figures(
        "perf-crosscheck", config={k: v for k, v in vars(args).items() if k != "figures"}
    )
    # On the golden backend the runtime's cycles are themselves the cycle model's, so the
    # figure compares two models; on the RTL backend it is a measurement.
    how = {"provenance": Provenance.RTL}
    if args.backend == "golden":
        how = {
            "provenance": Provenance.MODELLED,
            "assumptions": [
                "the runtime's cycles from the golden backend's cycle model (host/hpu/cycles.py, "
                "its FILL and GAP fitted to RTL cycles by benchmarks/decode_cycles.py)",
                "the engine's memory as its RTL simulation measured it "
                "(constraints/measured/hpu_stream_efficiency.yaml)",
            ],
        }
    figures.add(
        "largest |model / runtime - 1| of HPU cycles per step",
        100 * worst,
        "%",
        design="hpu",
        reference=10.0,
        reference_label="limit",
        higher_is_better=False,
        note=f"SmolLM2-135M shape, {layers} layers, {args.backend} backend, {args.cards} cards, "
        f"prompts {args.lengths}, {args.steps} steps",
        **how,
    )
    figures.write(args.figures)
    return 0 if worst <= 0.10 else 1


def _with_layers(shape, layers):
    from dataclasses import replace

    return replace(shape, layers=layers)


if __name__ == "__main__":
    sys.exit(main())
