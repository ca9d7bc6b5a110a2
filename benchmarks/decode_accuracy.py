"""SmolLM2-135M decode with every decode attention on HPU cards (golden model) vs pure torch.

Teacher forcing: pure float32 torch decoding (torch attention) generates ``--tokens`` greedy
tokens per prompt; the offloaded runtime is fed the same tokens, and the logits of every decode
step are compared: top-1 agreement, mean KL(torch || hpu), max |logit error|. Five chat prompts
run as one batch of five (two sub-batches, ``--hpus`` cards).

Usage::

    tandem model fetch smollm2-135m
    python benchmarks/decode_accuracy.py [--tokens 32] [--hpus 2] [--no-smoothing] [--json out]
"""

import argparse
import json
import sys
import time

from tandem.bench import Figures, add_benchmark_options, skip

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a KV cache is in one sentence.",
    "List three prime numbers.",
    "Why is the sky blue?",
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--hpus", type=int, default=2)
    parser.add_argument("--no-smoothing", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    add_benchmark_options(parser, json="write the figures here")
    args = parser.parse_args(argv)
    import torch
    from tandem.host.hpu import HpuParams
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.system.decode import (
        Decoder,
        HpuAttention,
        Llama,
        TorchAttention,
        logit_agreement,
    )
    from tandem.host.system.model import find_model, load_gguf

    from tandem.errors import UserError

    torch.set_num_threads(args.threads)
    path = find_model("smollm2-135m")
    if path is None:
        if args.figures is not None:  # in the suite: a missing model is a skip, not an error
            return skip("SmolLM2-135M is not fetched; run: tandem model fetch smollm2-135m")
        print("error: SmolLM2 not fetched; run: tandem model fetch smollm2-135m", file=sys.stderr)
        return 2
    try:
        config, weights, tok = load_gguf(path)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    model = Llama(config, weights)
    prompts = [tok.chat_prompt(p) for p in PROMPTS]
    start = time.perf_counter()
    reference = Decoder(model, TorchAttention(config)).generate(
        prompts, args.tokens, keep_logits=True
    )
    torch_s = time.perf_counter() - start
    cards = [HpuDevice(HpuParams.for_model(config), name=f"hpu{i}") for i in range(args.hpus)]
    attention = HpuAttention(config, cards, smoothing=not args.no_smoothing)
    start = time.perf_counter()
    got = Decoder(model, attention).generate(
        prompts, args.tokens, keep_logits=True, forced=reference.tokens
    )
    hpu_s = time.perf_counter() - start
    report = logit_agreement(reference.logits, got.logits)
    free_run = Decoder(model, HpuAttention(config, cards, smoothing=not args.no_smoothing))
    free = free_run.generate(prompts, args.tokens)
    same = sum(a == b for r, g in zip(reference.tokens, free.tokens) for a, b in zip(r, g))
    total = sum(len(r) for r in reference.tokens)
    for prompt, ids in zip(PROMPTS, free.tokens):
        print(f"{prompt!r} -> {tok.decode(ids, skip_special=True)!r}")
    cycles = [sum(c.values()) for c in got.step_cycles]
    print(
        f"SmolLM2-135M, {len(prompts)} prompts x {args.tokens} tokens, {args.hpus} cards, key "
        f"smoothing {'off' if args.no_smoothing else 'on'}; teacher forcing over "
        f"{report['positions']} decode positions:"
    )
    print(
        f"  top-1 agreement {report['agreement']:.2%}  mean KL {report['mean_kl']:.3e}  "
        f"max |logit error| {report['max_logit_error']:.3f}"
    )
    print(f"  free-running greedy: {same}/{total} tokens identical to torch decoding")
    print(
        f"  modelled engine cycles per decode step (all cards, 30 layers x 3 KV heads x 5 seqs):"
        f" mean {sum(cycles) / len(cycles):.0f}"
    )
    print(f"  wall: torch {torch_s:.1f} s, offloaded (golden) {hpu_s:.1f} s")
    json_path = None if args.json is None else str(args.json)  # config is written as JSON
    figures = Figures("decode-accuracy", config=vars(args) | {"figures": None, "json": json_path})
    note = (
        f"SmolLM2-135M, {len(prompts)} prompts x {args.tokens} tokens, teacher forcing, "
        f"{args.hpus} golden HPU cards vs torch float32"
    )
    figures.add(
        "top-1 agreement",
        report["agreement"],
        design="hpu",
        reference=0.97,
        reference_label="target",
        note=note,
    )
    figures.add(
        "mean KL divergence",
        report["mean_kl"],
        "nats",
        design="hpu",
        note=note,
        higher_is_better=False,
    )
    figures.add("free-running tokens identical to torch", same / total, design="hpu", note=note)
    figures.write(args.figures)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({**report, "free_running_same": same, "tokens": total}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
