"""How evenly one decode call loads a card's HBM pseudo-channels, per placement policy.

Run: ``python benchmarks/hpu_channel_balance.py [--input 1024] [--output 1024]
[--smollm2-batch 64] [--smollm2-cards 1] [--llama-batch 48] [--llama-cards 4]
[--json PATH] [--figures PATH]``

Replays the placement of a decode batch through the decode runtime's own allocation path
(:class:`~tandem.host.system.decode.HpuAttention` on :class:`~tandem.host.hpu.device.HpuDevice`
cards of the U55C's 16 GiB and 32 pseudo-channels) for SmolLM2-135M shapes and for Llama-2-7B
shapes at the HPU paper's setup (batch 48 on 4 cards, 1K in / 1K out), once with each
placement policy (``contiguous``: a sequence's regions one after another; ``channels``: each
region inside one channel, spread per call group). No attention is computed: for the first and
the last decode step, every call (one layer of one sub-batch on one card, the sub-batches the
runtime ping-pongs: the first ``ceil(B/2)`` sequences and the rest) gets the bytes its requests
read from each channel, as the device's ``last_channel_bytes`` counts them
(:func:`~tandem.mappings.hpu.channels.request_channel_bytes` of the requests' bases and rows).

Per call: the channels it touches; its busiest and its least loaded channel over the mean of
all the card's channels; and two bandwidth caps: ``touched / channels`` (the share of the
card's peak the touched channels give when evenly loaded) and ``mean / busiest`` (the share
when the call lasts as long as its busiest channel). The issue's target is every channel
within 10 % of the mean bytes of each call.
"""

import argparse
import json
import sys
import time

import numpy as np
from tandem.host.hpu.allocator import PLACEMENTS
from tandem.host.hpu.device import HpuDevice
from tandem.host.system.decode import HpuAttention
from tandem.host.system.model import LlamaConfig
from tandem.host.system.perf import PAPER, hpu_params_for_model, load_model_shape
from tandem.mappings.hpu.channels import board_channels, request_channel_bytes

from tandem.bench import Figures, Provenance, add_benchmark_options

#: The card whose memory is modelled.
BOARD = "u55c"
#: Every channel's bytes within this share of the mean, in every call (the target).
TARGET = 0.10
#: The bandwidth cap turns counted bytes into a share of bandwidth only under these.
CAP_ASSUMPTIONS = (
    "a call lasts as long as its busiest pseudo-channel takes to deliver its bytes",
    f"every pseudo-channel at the same rate (constraints/boards/{BOARD}.yaml)",
)


def config_of(name: str) -> LlamaConfig:
    """The decode runtime's shape of the model ``constraints/models/<name>.yaml`` describes."""
    m = load_model_shape(name)
    return LlamaConfig(m.layers, m.hidden, m.heads, m.kv_heads, m.intermediate, m.vocab)


def place_batch(name: str, batch: int, cards: int, capacity: int, policy: str) -> HpuAttention:
    """``batch`` sequences of ``capacity`` tokens moved onto ``cards`` cards as the runtime
    moves them (:meth:`HpuAttention.start` with an empty prefill: the allocation without the
    writes)."""
    import torch  # the runtime's prefill cache comes as torch tensors

    channels, channel_bytes = board_channels(BOARD)
    memory = channels * channel_bytes
    params = hpu_params_for_model(
        load_model_shape(name), max_seq_len=capacity, addr_bits=max(32, (memory - 1).bit_length())
    )
    devices = [
        HpuDevice(
            params,
            memory_bytes=memory,
            max_sequences=max(batch, 1),
            name=f"hpu{i}",
            placement=policy,
            channels=channels,
            kernel="numpy",  # nothing runs: no compiled kernel to build
        )
        for i in range(cards)
    ]
    config = config_of(name)
    attention = HpuAttention(config, devices, smoothing=False)
    empty = [torch.zeros(config.n_kv_heads, 0, config.head_dim)] * config.n_layers
    for b in range(batch):
        attention.start(b, empty, empty, capacity)
    return attention


def call_bytes(attention: HpuAttention, context: int) -> list[np.ndarray]:
    """Bytes per channel of every call of the decode step whose new token is the
    ``context``-th (one array per (sub-batch, layer, card) that gets requests)."""
    c, layout = attention.config, attention.params.layout
    batch = len(attention.seqs)
    half = (batch + 1) // 2
    subbatches = [range(half), range(half, batch)] if batch > 1 else [range(1)]
    position = context - 1
    out = []
    for members in subbatches:
        for layer in range(c.n_layers):
            heads = layer * c.n_kv_heads + np.arange(c.n_kv_heads)
            per_card: dict[int, tuple[list, list]] = {}
            for b in members:
                for s in attention.seqs[b].slices:
                    if s.first > position:
                        continue
                    # The slice holding the new token reads the rows before it (the token
                    # comes in the descriptor); the others read all they hold.
                    rows = position - s.first if s.holds(position) else s.capacity
                    bases, counts = per_card.setdefault(s.device, ([], []))
                    bases.append(s.alloc.bases[heads])
                    counts.append(np.full(c.n_kv_heads, rows))
            for card, (bases, counts) in sorted(per_card.items()):
                geometry = attention.devices[card].geometry
                out.append(
                    request_channel_bytes(
                        geometry, layout, np.concatenate(bases), np.concatenate(counts)
                    )
                )
    return out


def summarize(calls: list[np.ndarray]) -> dict:
    """Per-call balance figures (module docstring), over ``calls``."""
    counts = np.stack(calls).astype(float)  # [calls, channels]
    channels = counts.shape[1]
    mean = counts.mean(axis=1)
    touched = (counts > 0).sum(axis=1)
    busiest, least = counts.max(axis=1) / mean, counts.min(axis=1) / mean
    return {
        "calls": len(calls),
        "channels": channels,
        "touched_min": int(touched.min()),
        "touched_mean": float(touched.mean()),
        "touched_max": int(touched.max()),
        "busiest_over_mean": float(busiest.max()),
        "least_over_mean": float(least.min()),
        "cap_touched": float((touched / channels).mean()),
        "cap_busiest": float((1 / busiest).mean()),
        "within_target": bool(busiest.max() <= 1 + TARGET and least.min() >= 1 - TARGET),
    }


def run_case(label, name, batch, cards, tin, tout, policy) -> dict:
    start = time.perf_counter()
    attention = place_batch(name, batch, cards, tin + tout, policy)
    calls = call_bytes(attention, tin + 1) + call_bytes(attention, tin + tout)
    row = {"setup": label, "model": name, "batch": batch, "cards": cards, "policy": policy}
    row.update(summarize(calls), seconds=time.perf_counter() - start)
    return row


def table(rows: list[dict]) -> str:
    head = (
        f"{'setup':<34} {'policy':<10} {'calls':>5} {'touched min/mean/max':>21} "
        f"{'max/mean':>8} {'min/mean':>8} {'cap touched':>11} {'cap busiest':>11} {'<=10%':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        touched = (
            f"{r['touched_min']}/{r['touched_mean']:.1f}/{r['touched_max']} of {r['channels']}"
        )
        lines.append(
            f"{r['setup']:<34} {r['policy']:<10} {r['calls']:>5} {touched:>21} "
            f"{r['busiest_over_mean']:>8.2f} {r['least_over_mean']:>8.2f} "
            f"{r['cap_touched']:>11.3f} {r['cap_busiest']:>11.3f} "
            f"{'yes' if r['within_target'] else 'no':>5}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=int, default=PAPER["input"], help="prompt tokens")
    parser.add_argument("--output", type=int, default=PAPER["output"], help="new tokens")
    parser.add_argument("--smollm2-batch", type=int, default=64)
    parser.add_argument("--smollm2-cards", type=int, default=1)
    parser.add_argument("--llama-batch", type=int, default=48)
    parser.add_argument("--llama-cards", type=int, default=PAPER["hpus"])
    add_benchmark_options(parser, json="also write the rows here")
    args = parser.parse_args(argv)
    for flag in ("input", "output", "smollm2_batch", "smollm2_cards", "llama_batch", "llama_cards"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    tin, tout = args.input, args.output
    setups = [
        (f"smollm2-135m, batch {args.smollm2_batch}, {args.smollm2_cards} card(s)", "smollm2-135m",
         args.smollm2_batch, args.smollm2_cards),
        (f"llama-2-7b, batch {args.llama_batch}, {args.llama_cards} card(s)", PAPER["model"],
         args.llama_batch, args.llama_cards),
    ]  # fmt: skip
    rows = [
        run_case(label, name, batch, cards, tin, tout, policy)
        for label, name, batch, cards in setups
        for policy in PLACEMENTS
    ]
    print(f"{BOARD}: {board_channels(BOARD)[0]} pseudo-channels per card; {tin} in / {tout} out;")
    print("every call of the first and the last decode step (sub-batch x layer x card)")
    print(table(rows))
    figures = Figures("hpu-channel-balance", config={"input": tin, "output": tout, "board": BOARD})
    for r in rows:
        note = f"{r['setup']}, {tin} in / {tout} out, {r['calls']} calls"
        design = f"hpu ({r['policy']} placement)"
        figures.add("channels touched per call (mean)", r["touched_mean"], "channels",
                    design=design, note=note)  # fmt: skip
        target = {"reference": 1 + TARGET, "reference_label": "target"}
        if r["policy"] != "channels":
            target = {}
        figures.add("busiest channel over the mean, worst call", r["busiest_over_mean"],
                    higher_is_better=False, design=design, note=note, **target)  # fmt: skip
        figures.add("bandwidth cap, mean over busiest channel", r["cap_busiest"],
                    design=design, note=note, provenance=Provenance.MODELLED,
                    assumptions=CAP_ASSUMPTIONS)  # fmt: skip
    figures.write(args.figures)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
