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
    from tandem.host.system.decode import load_model_weights
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
    _llama_only(args.model)
    say = (lambda *a, **k: None) if args.json else print
    model, tokenizer, label = load_model_weights(args.model, device="cpu")
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


def _llama_only(name: str) -> None:
    """Refuse a model of another architecture by its name, before it loads (seconds)."""
    from tandem.host.system.model import MODELS, find_model, gguf_architecture

    from .compiler import CompileError

    if name in ("tiny", "tiny-gemma"):
        architecture = "llama" if name == "tiny" else "gemma3"
    else:
        path = find_model(name) if name in MODELS else Path(name)
        architecture = None if path is None else gguf_architecture(path)
    if architecture not in (None, "llama"):  # None: the loader says what the file is
        raise CompileError(
            f"{name}: architecture {architecture!r}, expected 'llama' (tandem compile takes "
            "Llama-architecture models only)"
        )


def _bits(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UserError(f"{flag} takes 8 and/or 16, not {text!r}") from None


def run_program(args) -> int:
    """``tandem cosim decode --program DIR``: decode on the compiled program.

    Every option of ``tandem cosim decode`` is honoured or refused in one line, and every
    value checked, before the program and the model load.
    """
    import numpy as np
    from tandem.host.common.errors import CapacityError
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.sparse_dsp.device import SparseMpeDevice
    from tandem.host.sparse_dsp.golden import SparseMpeParams
    from tandem.host.system.decode import HpuAttention, channel_report, load_model_weights
    from tandem.host.system.decode_cli import torch_device
    from tandem.host.system.model import LlamaConfig
    from tandem.host.system.perf import engine_clock

    from tandem.boards import load_board

    from .runner import CompiledModel, ProgramRunner

    flags = _program_flags(args)
    compiled = CompiledModel(args.program)
    model, tokenizer, label = load_model_weights(args.model, torch_device(args.torch_device))
    c = model.config
    if not isinstance(c, LlamaConfig):
        raise UserError(
            f"--model {args.model}: a compiled program runs a Llama-architecture model, not "
            f"{type(model).__name__}"
        )
    try:
        params = flags["hpu"].replace(head_dim=c.head_dim, gqa_group=c.gqa_group)
    except (UserError, ValueError) as exc:
        raise UserError(f"the HPU cannot serve this model: {exc}") from None
    chat = not args.raw and "<|im_start|>" in tokenizer.special
    ids = tokenizer.chat_prompt(args.prompt[0]) if chat else tokenizer.encode(args.prompt[0])
    if not ids:
        raise UserError("--prompt must not be empty")
    compiled.bucket(len(ids))  # ProgramError when the prompt is longer than compiled
    capacity = _capacity(args, params, c, len(ids), flags["memory"])
    hpu_clock = engine_clock(params, load_board("u55c"), args.clock_mhz)
    if args.clock_mhz is not None:
        hpu_clock["clock_source"] = "--clock-mhz"
    rtl = {"simulator": args.simulator, "harness": flags["harness"]}
    rtl = rtl if args.backend == "rtl" else {}
    max_k = 1 << max(6, (compiled.max_columns() - 1).bit_length())
    mpe = SparseMpeDevice(
        SparseMpeParams(max_k=max_k, max_batch=compiled.table["card"]["tile"]),
        backend=args.backend,
        **(rtl or {"kernel": "direct"}),
    )
    attention = None
    try:
        card = HpuDevice(
            params,
            memory_bytes=flags["memory"],
            backend=args.backend,
            placement=args.placement,
            **rtl,
        )
        attention = HpuAttention(c, [card])
        runner = ProgramRunner(
            compiled, model, mpe, attention, hpu_clock_mhz=hpu_clock["clock_mhz"]
        )
        # --compare decodes every token asked for, as the runtime's --compare does.
        ends = (c.eos_id, tokenizer.special.get("<|im_end|>"))
        stop = () if args.compare else tuple(i for i in ends if i is not None)
        pick = _sampler(flags["temperature"], args.seed)
        tokens, step_s, kept, prefill_s = _decode_tokens(args, runner, ids, capacity, stop, pick)
    except CapacityError as exc:
        raise UserError(f"HPU memory: {exc} (raise --hpu-memory-mib)") from None
    finally:
        if attention is not None:
            attention.close()
        mpe.close()
    report = _compare(model, ids, tokens, kept) if args.compare else None
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
        "placement": args.placement,
        "channel_bytes": channel_report([card]),
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
        "compare": report,
    }
    if args.json:
        print(json.dumps(outcome, indent=2))
        return 0
    _print_program_outcome(args, outcome, step_s, hpu_clock, card, stats)
    return 0


def _decode_tokens(args, runner, ids: list[int], capacity: int, stop, pick):
    """Prefill ``ids`` and decode up to ``--tokens`` tokens on ``runner``, stopping after a token
    in ``stop``; returns ``(tokens, step_s, kept, prefill_s)`` (``kept``: the logits of every
    token with ``--compare``, else None each)."""
    tokens, step_s, kept = [], [], []
    runner.start(0, capacity)
    started = time.perf_counter()
    hidden = runner.prefill(0, ids)
    prefill_s = time.perf_counter() - started
    position = len(ids)
    for _ in range(args.tokens):
        logits = runner.logits(hidden)
        kept.append(logits if args.compare else None)
        tokens.append(pick(logits))
        if tokens[-1] in stop or len(tokens) == args.tokens:
            break
        started = time.perf_counter()
        hidden = runner.step(0, tokens[-1], position)
        step_s.append(time.perf_counter() - started)
        position += 1
    return tokens, step_s, kept, prefill_s


def _print_program_outcome(args, outcome: dict, step_s, hpu_clock: dict, card, stats) -> None:
    """The text report of :func:`run_program` (without ``--json``)."""
    label, text, prompt_tokens = outcome["model"], outcome["text"], outcome["prompt_tokens"]
    prefill_s, steps, report = outcome["prefill_s"], outcome["step_cycles"], outcome["compare"]
    modelled_ms = outcome["modelled_ms_per_step"]
    print(f"model {label}, program {args.program}, backend {args.backend}")
    print(f"{args.prompt[0]!r} -> {text!r}")
    print(f"prefill {prefill_s:.2f} s ({prompt_tokens} tokens); decode {len(step_s)} steps")
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
    if report is not None:
        print(
            f"vs float torch (teacher forcing on these tokens): top-1 agreement "
            f"{report['agreement']:.1%}, mean KL {report['mean_kl']:.3g}, max |logit error| "
            f"{report['max_logit_error']:.3g} over {report['positions']} positions"
        )


def _program_flags(args) -> dict:
    """Check every option of ``tandem cosim decode`` for program mode, before any work.

    Returns the values the run goes on with: ``hpu`` (the cards' parameters from ``--set`` and
    ``--kv-bits``, before the model gives head_dim and the GQA group), ``memory`` (bytes per
    card), ``temperature`` and ``harness``.
    """
    from tandem.host.hpu import HpuParams
    from tandem.host.hpu.params import kv_sets

    from tandem.args import MAX_CLOCK_MHZ, MAX_SEED, host_memory_bytes, integer, output_file, real
    from tandem.config import resolve_params

    one_card = {
        "--batch": args.batch not in (None, 1),
        "--hpus": args.hpus != 1,
        "--max-slice-tokens": args.max_slice_tokens is not None,
        "--engines": args.engines != 0,
    }
    for flag, given in one_card.items():
        if given:
            raise UserError(
                f"{flag} does not apply to --program (it runs one sequence on one card)"
            )
    if len(args.prompt) != 1:
        raise UserError(f"--program runs one --prompt, not {len(args.prompt)}")
    if args.waves is not None:
        raise UserError("--waves does not apply to --program (it simulates two engines)")
    if args.backend != "rtl" and (args.harness or args.simulator != "verilator"):
        raise UserError("--harness and --simulator need --backend rtl")
    harness = args.harness or ("native" if args.simulator == "verilator" else "cocotb")
    if harness == "native" and args.simulator != "verilator":
        raise UserError(f"--harness native runs verilator, not --simulator {args.simulator}")
    integer(args.tokens, "--tokens", 1)  # the model's context bounds it once the model loads
    temperature = real(args.temperature, "--temperature", 0.0)
    if 0 < temperature < 1e-30:  # logits / temperature overflows float32 below that
        raise UserError(f"--temperature must be 0 (greedy) or at least 1e-30, not {temperature:g}")
    integer(args.seed, "--seed", 0, MAX_SEED)
    if args.clock_mhz is not None:
        real(args.clock_mhz, "--clock-mhz", 0.0, MAX_CLOCK_MHZ, above=True, why=" (an FPGA clock)")
    if args.trace is not None:
        output_file(args.trace, "--trace")
    try:
        args.prompt[0].encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes of argv arrive as surrogates
        raise UserError(f"--prompt is not valid UTF-8 (character {exc.start})") from None
    hpu = resolve_params(HpuParams, None, kv_sets(args.overrides, args.kv_bits), design="hpu")
    mib = real(args.hpu_memory_mib, "--hpu-memory-mib", 0.0, above=True)
    memory = int(mib * 2**20) // 64 * 64
    most = min(1 << hpu.addr_bits, host_memory_bytes())
    if memory > most:
        raise UserError(
            f"--hpu-memory-mib must be at most {most / 2**20:g} (what addr_bits "
            f"{hpu.addr_bits} addresses and this machine holds), not {mib:g}"
        )
    return {"hpu": hpu, "memory": memory, "temperature": temperature, "harness": harness}


def _capacity(args, params, config, prompt: int, memory: int) -> int:
    """Tokens the sequence holds: the prompt and ``--tokens``, checked against the model's
    context, the positions a card holds of one sequence and the card's memory."""
    limits = [(params.max_seq_len, f"the {params.max_seq_len} positions an HPU card holds")]
    if config.context_length is not None:
        limits.append((config.context_length, f"the model's {config.context_length}-token context"))
    limit, what = min(limits)
    if prompt + args.tokens > limit:
        room = f"at most {limit - prompt}" if limit > prompt else "none: the prompt fills it"
        raise UserError(
            f"--tokens {args.tokens}: {prompt} prompt tokens and {args.tokens} more exceed "
            f"{what} ({room})"
        )
    need = config.n_layers * config.n_kv_heads * params.layout.region_bytes(prompt + args.tokens)
    if need > memory:
        raise UserError(
            f"HPU memory: {prompt + args.tokens} tokens need {need} bytes of KV cache; "
            f"--hpu-memory-mib {args.hpu_memory_mib:g} holds {memory} (raise it)"
        )
    return prompt + args.tokens


def _sampler(temperature: float, seed: int):
    """The next token of a logits row: argmax, or a draw at ``temperature`` (the runtime's
    rule: softmax of logits / temperature, torch's generator seeded with ``seed``)."""
    import numpy as np
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)

    def pick(logits) -> int:
        if temperature == 0:
            return int(np.argmax(logits))
        probs = torch.softmax(torch.as_tensor(logits, dtype=torch.float32) / temperature, -1)
        return int(torch.multinomial(probs, 1, generator=generator))

    return pick


def _compare(model, ids: list[int], tokens: list[int], logits: list) -> dict:
    """The program's logits against float torch on the same tokens (teacher forcing): the
    prompt's last position, then the runtime's decoder with torch attention forced to
    ``tokens``; :func:`~tandem.host.system.decode.logit_agreement` of the two."""
    import numpy as np
    import torch
    from tandem.host.system.decode import Decoder, TorchAttention, logit_agreement

    with torch.no_grad():
        reference = [model.prefill(ids)[0].float().cpu().numpy()]
    forced = Decoder(model, TorchAttention(model.config)).generate(
        [ids], len(tokens), forced=[tokens], keep_logits=True
    )
    if forced.logits is not None:
        reference += list(forced.logits[:, 0])
    return logit_agreement(np.stack(reference), np.stack(logits))
