"""``tandem compile MODEL -o DIR`` and ``tandem cosim decode --program DIR``."""

import json
import time
from pathlib import Path

from tandem.errors import UserError

__all__ = ["add_arguments", "run", "run_program"]


def add_arguments(parser) -> None:
    """Options of ``tandem compile``."""
    from .compiler import DEFAULT_PATTERNS, CompileOptions

    defaults = CompileOptions()
    parser.add_argument(
        "model",
        help="smollm2-135m (see `tandem model fetch`), a Llama-architecture .gguf path, or 'tiny'",
    )
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    parser.add_argument(
        "--patterns",
        default=",".join(DEFAULT_PATTERNS),
        help="candidate N:M patterns, comma-separated; per layer the sparsest within --budget "
        f"is chosen (default {','.join(DEFAULT_PATTERNS)}; 16:16 alone = dense int8)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=defaults.budget,
        help="largest relative output error of a layer on the calibration text "
        f"(default {defaults.budget})",
    )
    parser.add_argument(
        "--criterion",
        choices=("magnitude", "activation"),
        default=defaults.criterion,
        help="pruning criterion: |w|, or |w| x the input channel's calibration norm (Wanda)",
    )
    parser.add_argument(
        "--calibration-text",
        default="execmodel",
        help="built-in text (execmodel, license) or a UTF-8 file (default execmodel)",
    )
    parser.add_argument(
        "--calibration-tokens", type=int, default=defaults.calibration_tokens, metavar="N"
    )
    parser.add_argument(
        "--max-prefill",
        type=int,
        default=defaults.max_prefill,
        metavar="N",
        help=f"longest prompt the prefill templates serve (default {defaults.max_prefill})",
    )
    parser.add_argument("--tile", type=int, default=defaults.tile, help="prefill tile, tokens")
    parser.add_argument(
        "--activation-bits",
        default=",".join(map(str, defaults.activation_bits)),
        help="candidate activation widths per layer, narrowest tried first: 8, 16 or 8,16 "
        "(16 bits run as two int8 digits; default 8,16)",
    )
    parser.add_argument(
        "--method",
        choices=("round", "gptq"),
        default=defaults.method,
        help="round: prune by --criterion, round to nearest (default); gptq: column by column "
        "with the error compensated on the calibration inputs (GPTQ / SparseGPT)",
    )
    parser.add_argument(
        "--weight-bits",
        default=",".join(map(str, defaults.weight_bits)),
        help="candidate weight widths per layer, narrowest tried first: 8, 16 or 8,16 (16 bits "
        "are two int8 digit matrices: twice the bytes and cycles; default 8)",
    )
    parser.add_argument(
        "--weight-group",
        type=int,
        default=defaults.weight_group,
        metavar="COLS",
        help="columns per weight scale: 0 = one scale per row (default), or a multiple of 16 "
        "dividing every layer's columns (64: one pass of the engine per 64-column block)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    """``tandem compile``."""
    from tandem.host.system.decode import load_model
    from tandem.host.system.texts import load_text

    from .compiler import CompileOptions, check_output_folder, compile_model

    options = CompileOptions(
        patterns=tuple(t.strip() for t in args.patterns.split(",") if t.strip()),
        budget=args.budget,
        criterion=args.criterion,
        calibration_tokens=args.calibration_tokens,
        max_prefill=args.max_prefill,
        tile=args.tile,
        activation_bits=_bits(args.activation_bits, "--activation-bits"),
        weight_bits=_bits(args.weight_bits, "--weight-bits"),
        method=args.method,
        weight_group=args.weight_group,
    )
    try:
        text = load_text(args.calibration_text)
    except ValueError as exc:
        raise UserError(str(exc).replace("--texts", "--calibration-text")) from None
    check_output_folder(args.output)
    say = (lambda *a, **k: None) if args.json else print
    model, tokenizer, label = load_model(args.model, device="cpu")
    summary = compile_model(
        model, tokenizer, args.output, options, text=text, model_label=label, log=say
    )
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    counts = ", ".join(f"{n} x {p}" for p, n in summary["pattern_counts"].items())
    print(f"compiled {label} into {args.output} in {summary['compile_s']:.1f} s")
    print(f"  layers: {counts}; weights {summary['weight_bytes'] / 2**20:.1f} MiB")
    print(
        f"  programs: {summary['instructions']} instructions, {summary['storage_bytes']} bytes "
        f"for decode and prefill lengths 1..{options.max_prefill} in "
        f"{len(summary['buckets'])} buckets; compiled per length: "
        f"{summary['storage_bytes_per_length']} bytes ({summary['storage_ratio']:.0f}x)"
    )
    print(f"  on-chip activation buffers: {summary['on_chip_bytes']} bytes at most")
    if summary["clipped_weights"]:
        print(
            f"  weights clipped to their width by the error compensation: "
            f"{summary['clipped_weights']} (per layer in summary.json)"
        )
    return 0


def _bits(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UserError(f"{flag} takes 8 and/or 16, not {text!r}") from None


def run_program(args) -> int:
    """``tandem cosim decode --program DIR``: decode on the compiled program."""
    import numpy as np
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.sparse_dsp.device import SparseMpeDevice
    from tandem.host.sparse_dsp.golden import SparseMpeParams
    from tandem.host.system.decode import HpuAttention, hpu_params_for, load_model
    from tandem.host.system.perf import engine_clock

    from tandem.args import output_file
    from tandem.boards import load_board

    from .runner import CompiledModel, ProgramRunner

    if args.tokens < 1:
        raise UserError(f"--tokens must be at least 1, not {args.tokens}")
    if args.trace is not None:
        output_file(args.trace, "--trace")
    if args.hpus != 1 or args.batch not in (None, 1) or len(args.prompt) != 1:
        raise UserError("--program runs one prompt on one HPU card (--hpus 1, one --prompt)")
    compiled = CompiledModel(args.program)
    model, tokenizer, label = load_model(args.model)
    c = model.config
    chat = not args.raw and "<|im_start|>" in tokenizer.special
    ids = tokenizer.chat_prompt(args.prompt[0]) if chat else tokenizer.encode(args.prompt[0])
    if not ids:
        raise UserError("--prompt must not be empty")
    compiled.bucket(len(ids))  # ProgramError when the prompt is longer than compiled
    rtl = {"simulator": args.simulator} if args.backend == "rtl" else {}
    mpe_options = rtl if args.backend == "rtl" else {"kernel": "direct"}
    max_k = 1 << max(6, (compiled.max_columns() - 1).bit_length())
    mpe = SparseMpeDevice(
        SparseMpeParams(max_k=max_k, max_batch=compiled.table["card"]["tile"]),
        backend=args.backend,
        **mpe_options,
    )
    params = hpu_params_for(c)
    memory = int(args.hpu_memory_mib * 2**20) // 64 * 64
    card = HpuDevice(params, memory_bytes=memory, backend=args.backend, **rtl)
    attention = HpuAttention(c, [card])
    hpu_clock = engine_clock(params, load_board("u55c"))
    runner = ProgramRunner(compiled, model, mpe, attention, hpu_clock_mhz=hpu_clock["clock_mhz"])
    stop = tuple(i for i in (c.eos_id, tokenizer.special.get("<|im_end|>")) if i is not None)
    tokens, step_s = [], []
    try:
        runner.start(0, len(ids) + args.tokens)
        started = time.perf_counter()
        hidden = runner.prefill(0, ids)
        prefill_s = time.perf_counter() - started
        position = len(ids)
        for _ in range(args.tokens):
            token = int(np.argmax(runner.logits(hidden)))
            tokens.append(token)
            if token in stop or len(tokens) == args.tokens:
                break
            started = time.perf_counter()
            hidden = runner.step(0, token, position)
            step_s.append(time.perf_counter() - started)
            position += 1
    finally:
        attention.close()
        mpe.close()
    stats = runner.stats
    text = tokenizer.decode(tokens, skip_special=True)
    steps = runner.run_cycles[1:]  # the prefill is the first run
    seconds = {}
    for e in runner.timeline:
        if e["phase"] == "decode":
            seconds[e["unit"]] = seconds.get(e["unit"], 0.0) + e["end_s"] - e["start_s"]
    modelled_ms = 1e3 * sum(seconds.values()) / max(1, len(steps))
    if args.trace is not None:
        runner.write_trace(args.trace, {"model": label, "program": str(args.program)})
    outcome = {
        "model": label,
        "program": str(args.program),
        "backend": args.backend,
        "prompt_tokens": len(ids),
        "tokens": tokens,
        "text": text,
        "prefill_s": prefill_s,
        "decode_s_per_step": float(np.mean(step_s)) if step_s else None,
        "step_cycles": steps,
        "modelled_ms_per_step": modelled_ms if steps else None,
        "clock_mhz": {"sparse-mpe": 300.0, "hpu": hpu_clock["clock_mhz"]},
        "trace": None if args.trace is None else str(args.trace),
        "saturations": dict(card.total_saturations),
        "op_count": stats.count,
        "op_cycles": stats.cycles,
        "host_seconds": {k: v for k, v in stats.seconds.items() if k not in ("MATMUL", "ATTEND")},
        "mpe_utilization": stats.useful_macs
        / max(1, stats.cycles.get("MATMUL", 0) * 2 * mpe.params.chains * mpe.params.stages),
    }
    if args.json:
        print(json.dumps(outcome, indent=2))
        return 0
    print(f"model {label}, program {args.program}, backend {args.backend}")
    print(f"{args.prompt[0]!r} -> {text!r}")
    print(f"prefill {prefill_s:.2f} s ({len(ids)} tokens); decode {len(step_s)} steps")
    for number, cycles in enumerate(steps[:4], start=1):
        print(
            f"  step {number}: cycles " + ", ".join(f"{k} {v}" for k, v in sorted(cycles.items()))
        )
    if steps:
        print(
            f"modelled decode step {modelled_ms:.3f} ms (sparse-mpe and element-wise unit at 300 "
            "MHz, the board's default: this engine configuration has no timing estimate; HPU at "
            f"{hpu_clock['clock_mhz']:g} MHz, {hpu_clock['clock_source']}; ops in sequence)"
        )
    saturated = ", ".join(f"{n} {where}" for where, n in sorted(card.total_saturations.items()))
    print(f"values the HPU saturated (clipped to their format): {saturated or 'none'}")
    if args.trace is not None:
        print(f"trace: {args.trace}")
    for op, n in sorted(stats.count.items()):
        print(f"  {op:<11} {n:>7} instructions, {stats.cycles.get(op, 0):>12} engine cycles")
    return 0
