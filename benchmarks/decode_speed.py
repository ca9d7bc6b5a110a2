"""Decode tokens/s with attention on the golden HPU against the same runtime with torch attention.

Run: ``python benchmarks/decode_speed.py [--batch 4] [--prompt-tokens 240] [--new-tokens 16]``.
Both runs use one :class:`~tandem.host.system.decode.Decoder` on SmolLM2-135M (the GGUF of
``tandem model fetch``; the benchmark skips when it is absent), the same prompts (slices of a
real English text, about ``--prompt-tokens`` tokens each) and greedy decoding; they differ only
in where attention runs: :class:`~tandem.host.system.decode.TorchAttention` (float32 KV,
``scaled_dot_product_attention``) or :class:`~tandem.host.system.decode.HpuAttention` on one
golden HPU card (quantization, descriptors, device memory, the bit-exact engine model and its
cycle model, all in the loop; the model is its compiled twin where a C compiler builds it,
``--kernel numpy`` runs the numpy specification, and the table names the one that ran).
Printed: decode tokens/s of each (decode steps only, prefill excluded; the best of ``--repeat``
runs of each, the two sides alternating so that a passing load hits both), their ratio (target
>= 0.8), the HPU side's share of the golden run's wall time, and the machine's load average
(other work on the cores skews the ratio). The GPU side runs on torch's CPU threads here.
"""

import argparse
import os
import sys
import time

from tandem.bench import Figures, add_benchmark_options, skip

#: Longest sequence (prompt + new tokens) the benchmark's engine holds.
MAX_SEQ_LEN = 1024
#: Target of the host-runtime issue: the golden HPU decode at >= 0.8x torch attention's tokens/s.
TARGET_RATIO = 0.8

#: Real English text the prompts are cut from (the model's own README domain: plain prose).
TEXT = (
    "The history of computing is a story of machines that grew faster by doing more at once. "
    "Early computers ran one instruction at a time, and each new generation made that single "
    "stream of work quicker by raising the clock. When the clock could rise no further without "
    "melting the chip, designers turned to parallelism: several cores on one die, wide vector "
    "units that apply one operation to many numbers, and graphics processors with thousands of "
    "small cores built to shade pixels and later trusted with the arithmetic of neural networks. "
    "Large language models changed the balance again. Generating text one token at a time reads "
    "every weight of the model and every entry of the attention cache for each new token, so the "
    "speed of decoding is set less by arithmetic than by how fast memory can be read. A graphics "
    "processor that spends most of a decode step waiting on memory leaves most of its arithmetic "
    "idle, and engineers have proposed moving the memory-bound part of the work, attention over "
    "the cache of keys and values, to cheaper devices built around high-bandwidth memory, such as "
    "field-programmable gate arrays. The graphics processor keeps the dense matrix products that "
    "suit it, the attention cards keep the cache and stream through it at the full speed of their "
    "memory, and the two exchange only the small vectors of each step over the system bus. "
    "Whether such a split pays off depends on the size of the batch, the length of the context, "
    "the bandwidth of the link between the devices and the care with which the numbers are "
    "quantized, because the cards store the cache in eight-bit integers to make the most of their "
    "memory. Researchers measure the error this introduces against full-precision attention, the "
    "share of the memory bandwidth the cards achieve, and the tokens per second the whole system "
    "delivers at a given power, and they compare these figures with the graphics processor alone. "
    "Rivers carve valleys over millions of years, and the shape of a valley records the climate "
    "and the rock it crossed. Glaciers leave broad troughs with steep walls, while water alone "
    "cuts narrow gorges; geologists read these forms the way a historian reads old letters, "
    "slowly, checking each claim against the evidence of the ground. In the same spirit, an "
    "engineer reads the trace of a program to learn where its time goes before changing a line."
)


def prompts(tokenizer, batch: int, length: int) -> list[list[int]]:
    """``batch`` prompts of ``length`` tokens, each a different window of :data:`TEXT`."""
    ids = tokenizer.encode(TEXT)
    if len(ids) < length + batch:
        raise ValueError(f"the text has {len(ids)} tokens, too few for {length}-token prompts")
    step = max((len(ids) - length) // max(batch - 1, 1), 1)
    return [ids[b * step : b * step + length] for b in range(batch)]


def _parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4, help="sequences decoded together")
    parser.add_argument("--prompt-tokens", type=int, default=240, help="tokens per prompt")
    parser.add_argument("--new-tokens", type=int, default=16, help="tokens generated per prompt")
    parser.add_argument("--repeat", type=int, default=2, help="runs per side; the best counts")
    parser.add_argument(
        "--threads",
        type=int,
        help="threads of torch, BLAS and OpenMP (default: the cores no other process runs on)",
    )
    parser.add_argument(
        "--kernel",
        choices=("auto", "native", "numpy"),
        default="auto",
        help="the golden HPU's kernel: its compiled twin (native), the numpy specification, "
        "or the twin where a C compiler builds it (auto, the default)",
    )
    add_benchmark_options(parser)
    return parser.parse_args(argv)


def _check_args(args) -> bool:
    """Whether the options are in range (else says why)."""
    for flag, value in (
        ("--batch", args.batch),
        ("--prompt-tokens", args.prompt_tokens),
        ("--new-tokens", args.new_tokens),
        ("--repeat", args.repeat),
        ("--threads", 1 if args.threads is None else args.threads),
    ):
        if value < 1:
            print(f"decode_speed: {flag} must be at least 1, not {value}", file=sys.stderr)
            return False
    if args.prompt_tokens + args.new_tokens > MAX_SEQ_LEN:
        print(
            f"decode_speed: --prompt-tokens + --new-tokens must be at most {MAX_SEQ_LEN} (the "
            f"engine's max_seq_len here), not {args.prompt_tokens + args.new_tokens}",
            file=sys.stderr,
        )
        return False
    return True


def _measure(args, model, batch, params):
    """Each side's best run ``{"torch" | "hpu": (output, attention s)}`` and the golden
    kernels that ran, as ``(kernel, why not the twin)``."""
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.system.decode import Decoder, HpuAttention, TorchAttention

    config = model.config
    kernels = []

    def run(kind: str):
        if kind == "torch":
            attention = TorchAttention(config)
        else:
            try:
                device = HpuDevice(params, memory_bytes=256 << 20, kernel=args.kernel)
            except ValueError as exc:  # --kernel native where no C compiler builds it
                print(f"decode_speed: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
            kernels.append((device.backend.kernel, device.backend.kernel_note))
            attention = HpuAttention(config, [device])
        timer = _AttendTimer(attention)
        out = Decoder(model, timer).generate(batch, args.new_tokens)
        attention.close()
        return out, timer.seconds

    # The two sides alternate, so a load that comes and goes hits both alike; each side's
    # best run counts.
    best: dict[str, tuple] = {}
    for _ in range(args.repeat):
        for kind in ("torch", "hpu"):
            out, attend_s = run(kind)
            if kind not in best or out.wall_s < best[kind][0].wall_s:
                best[kind] = (out, attend_s)
    return best, kernels


def _figures(args, label, threads: int, kernel, torch_rate, hpu_rate, ratio) -> Figures:
    figures = Figures(
        "decode-speed",
        config={
            "model": label,
            "batch": args.batch,
            "prompt_tokens": args.prompt_tokens,
            "new_tokens": args.new_tokens,
            "threads": threads,
            "golden_kernel": kernel,
        },
    )
    note = f"SmolLM2-135M, batch {args.batch}, {args.prompt_tokens}-token prompts, CPU"
    figures.add("decode tokens/s, torch attention", torch_rate, "tokens/s", note=note)
    figures.add("decode tokens/s, golden HPU attention", hpu_rate, "tokens/s", note=note)
    figures.add(
        "golden HPU / torch attention tokens/s",
        ratio,
        "ratio",
        reference=TARGET_RATIO,
        reference_label="target",
        note=note,
    )
    return figures


def main(argv=None) -> int:
    args = _parse_args(argv)
    if not _check_args(args):
        return 2
    from tandem.host.common.threads import configure_threads

    configure_threads(args.threads)  # before torch loads: its pool reads the size then
    import torch
    from tandem.host.hpu import HpuParams
    from tandem.host.system.decode import load_model_weights
    from tandem.host.system.model import find_model

    if find_model("smollm2-135m") is None:
        return skip("SmolLM2-135M is not fetched; run: tandem model fetch smollm2-135m")
    model, tokenizer, label = load_model_weights("smollm2-135m")
    try:
        batch = prompts(tokenizer, args.batch, args.prompt_tokens)
    except ValueError as exc:
        print(f"decode_speed: {exc}", file=sys.stderr)
        return 2
    params = HpuParams.for_model(model.config, max_seq_len=MAX_SEQ_LEN)

    start = time.perf_counter()
    best, kernels = _measure(args, model, batch, params)
    (reference, torch_attend_s), (golden, hpu_attend_s) = best["torch"], best["hpu"]
    steps = golden.decode_tokens
    torch_rate = reference.decode_tokens / reference.wall_s
    hpu_rate = steps / golden.wall_s
    ratio = hpu_rate / torch_rate
    same = sum(a == b for x, y in zip(reference.tokens, golden.tokens) for a, b in zip(x, y))
    total = sum(len(x) for x in reference.tokens)
    print(
        f"{label}: batch {args.batch}, {args.prompt_tokens}-token prompts, "
        f"{args.new_tokens} new tokens, {torch.get_num_threads()} torch threads, "
        f"load average {os.getloadavg()[0]:.1f} (1 min, after the runs)"
    )
    print(f"{'attention':<22} {'tokens/s':>9} {'decode s':>9} {'attention s':>12}")
    print(
        f"{'torch (float32 SDPA)':<22} {torch_rate:>9.2f} {reference.wall_s:>9.2f} "
        f"{torch_attend_s:>12.2f}"
    )
    kernel, why = kernels[-1]
    side = f"golden HPU ({kernel})"
    print(f"{side:<22} {hpu_rate:>9.2f} {golden.wall_s:>9.2f} {hpu_attend_s:>12.2f}")
    if why:
        print(f"golden kernel: numpy, the compiled twin is not available: {why}")
    print(
        f"ratio golden HPU / torch: {ratio:.2f} (target >= {TARGET_RATIO}); HPU side "
        f"{hpu_attend_s / golden.wall_s:.0%} of the golden run; same tokens {same}/{total}; "
        f"{time.perf_counter() - start:.0f} s in all"
    )
    threads = torch.get_num_threads()
    _figures(args, label, threads, kernel, torch_rate, hpu_rate, ratio).write(args.figures)
    return 0


class _AttendTimer:
    """An attention backend wrapped to add up the wall time of its ``attend`` calls."""

    def __init__(self, attention):
        self.attention = attention
        self.seconds = 0.0

    def __getattr__(self, name):
        return getattr(self.attention, name)

    def attend(self, *args):
        start = time.perf_counter()
        out = self.attention.attend(*args)
        self.seconds += time.perf_counter() - start
        return out


if __name__ == "__main__":
    sys.exit(main())
