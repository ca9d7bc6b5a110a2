"""``tandem cosim decode``: the command line of the decode runtime
(:mod:`tandem.host.system.decode`).

:func:`add_arguments` declares its options and :func:`run` carries them out, one named step
after another: every flag is checked before any work; the model loads and fixes the HPU
engine's shape; the cards are built; the batch decodes; the outcome is printed as a short
report, or as JSON with ``--json`` (the same figures).
"""

import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path

from tandem.host.common.errors import CapacityError
from tandem.host.common.threads import configure_threads
from tandem.host.hpu import HpuParams
from tandem.host.hpu.card import HpuCardParams
from tandem.host.hpu.device import HpuDevice
from tandem.host.hpu.params import kv_sets
from tandem.host.system.decode import (
    Decoder,
    DecodeResult,
    HpuAttention,
    channel_report,
    chrome_trace,
    compare_with_torch,
    load_model_weights,
    schedule,
)
from tandem.host.system.llama import import_torch

from tandem.args import MAX_CLOCK_MHZ, MAX_SEED, host_memory_bytes, integer, output_file, real
from tandem.config import ParamError, resolve_params
from tandem.errors import UserError
from tandem.progress import stderr_progress

__all__ = ["add_arguments", "run", "torch_device"]


def add_arguments(parser) -> None:
    """Options of ``tandem cosim decode``."""
    parser.add_argument("--prompt", action="append", required=True, help="prompt (repeatable)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens to generate per prompt")
    parser.add_argument("--batch", type=int, help="sequences (prompts reused in turn)")
    parser.add_argument("--hpus", type=int, default=1, help="HPU cards (default 1)")
    parser.add_argument("--backend", choices=("golden", "rtl"), default="golden")
    parser.add_argument(
        "--simulator",
        choices=("verilator", "icarus"),
        default="verilator",
        help="HDL simulator (default verilator; icarus is the second, slower one)",
    )
    parser.add_argument(
        "--harness",
        choices=("native", "cocotb"),
        help="how the RTL simulator is driven: native (C++ clock, port models and memory; "
        "the default with verilator) or cocotb (a Python call per clock edge; icarus's only one)",
    )
    parser.add_argument(
        "--waves",
        type=Path,
        metavar="FILE.fst",
        help="record the RTL's waves (native harness); with several cards, one file per card "
        "named FILE-hpuN.fst",
    )
    parser.add_argument("--trace", type=Path, help="write a Chrome/Perfetto trace JSON here")
    parser.add_argument(
        "--program",
        type=Path,
        metavar="DIR",
        help="run a `tandem compile` output: every linear layer on sparse-mpe, every attention "
        "on the HPU, the GPU side only for embeddings, LM head and sampling",
    )
    parser.add_argument(
        "--model",
        default="smollm2-135m",
        help="smollm2-135m or gemma3-270m (see `tandem model fetch`), a Llama or Gemma 3 .gguf "
        "path, or 'tiny' / 'tiny-gemma' (random)",
    )
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--raw", action="store_true", help="no chat template around the prompt")
    parser.add_argument(
        "--clock-mhz",
        type=float,
        default=None,
        help="HPU clock for the timeline (default: the timing estimate of the synthesized "
        "engine on U55C where there is one, else the board's 300 MHz; the output says which)",
    )
    parser.add_argument("--hpu-memory-mib", type=float, default=64.0, help="memory per card")
    parser.add_argument(
        "--engines",
        type=int,
        default=0,
        help="each card an hpu-card of this many engines behind one descriptor stream (its "
        "32 pseudo-channels split between them, K and V in channels of their own; cycles from "
        "the card); 0, the default: one hpu engine per card",
    )
    parser.add_argument(
        "--placement",
        choices=("channels", "contiguous"),
        default="channels",
        help="where the cards put KV regions: each whole inside a pseudo-channel, spread so that "
        "one call reads every channel evenly (channels, the default), or a sequence's regions "
        "one after another (contiguous)",
    )
    parser.add_argument(
        "--max-slice-tokens",
        type=int,
        help="split sequences across cards in slices of at most this many tokens (default: no "
        "limit, as many as a card holds)",
    )
    parser.add_argument(
        "--compare", action="store_true", help="also decode with torch attention and compare"
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="threads of torch, BLAS and OpenMP together (default: the cores no other process "
        "is running on)",
    )
    parser.add_argument(
        "--torch-device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="where the GPU side (torch) runs: auto, the default, takes CUDA when torch sees a "
        "GPU and the CPU otherwise",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="HPU parameter (head_dim and gqa_group come from the model)",
    )
    parser.add_argument(
        "--kv-bits",
        type=int,
        choices=(8, 16),
        help="the cards' KV format: int16 (default) or int8 K and V (the same ports with twice "
        "the lanes, unless --set lanes=... says otherwise)",
    )


@dataclass
class _Setup:
    """What the checked flags and the loaded model decide before the decode."""

    model: object
    tokenizer: object
    label: str
    params: HpuParams
    memory_bytes: int
    hpus: int
    harness: str
    engines: int
    clock_source: str
    texts: list[str]
    prompts: list[list[int]]


def run(args) -> int:
    """``tandem cosim decode``: generate, print text, tokens/s and accelerator cycles."""
    setup = _setup(args)
    devices = _devices(args, setup)
    result = _decode(args, setup, devices)
    _report(args, setup, devices, result)
    return 0


def _setup(args) -> _Setup:
    """Every flag checked, then the model loaded and the cards' parameters fixed for it."""
    hpus, mib, harness = _check_flags(args)
    params, memory_bytes = _engine_params(args, hpus, mib)
    if args.threads is not None:
        configure_threads(args.threads)
    model, tokenizer, label = load_model_weights(args.model, torch_device(args.torch_device))
    c = model.config
    try:
        params = HpuParams.for_model(c, base=params)
    except Exception as exc:
        raise UserError(f"the HPU cannot serve this model: {exc}") from None
    if args.clock_mhz is None:  # the clock the performance model takes for this engine
        from tandem.host.system.perf import engine_clock

        from tandem.boards import load_board

        chosen = engine_clock(params, load_board("u55c"))
        args.clock_mhz, clock_source = chosen["clock_mhz"], chosen["clock_source"]
    else:
        clock_source = "--clock-mhz"
    engines = integer(args.engines, "--engines", 0, 16, " (a U55C's 32 channels hold 16)")
    if engines:
        params, memory_bytes, harness = _card_params(args, engines, params, memory_bytes, harness)
    page = params.layout.page_bytes
    if memory_bytes < page:
        raise UserError(
            f"HPU memory: --hpu-memory-mib {mib:g} holds less than one KV page of this model "
            f"({page} bytes)"
        )
    texts, prompts = _prompts(args, tokenizer, c, params, hpus, memory_bytes, mib)
    return _Setup(
        model, tokenizer, label, params, memory_bytes, hpus, harness, engines, clock_source,
        texts, prompts,
    )  # fmt: skip


def torch_device(choice: str):
    """The torch device ``--torch-device`` names (None: the runtime's default)."""
    if choice == "auto":
        return None
    if choice == "cuda" and not import_torch().cuda.is_available():
        raise UserError("--torch-device cuda: torch sees no CUDA GPU here (--torch-device cpu)")
    return choice


def _check_flags(args) -> tuple[int, float, str]:
    """Every flag that needs no model checked; ``(hpus, MiB per card, RTL harness)``."""
    integer(args.tokens, "--tokens", 1)
    for text in args.prompt:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # undecodable bytes of argv arrive as surrogates
            raise UserError(f"--prompt is not valid UTF-8 (character {exc.start})") from None
    if args.compare and args.tokens < 2:
        raise UserError(
            "--compare needs --tokens 2 or more: it compares the decode steps after the first "
            "token, which the prefill gives"
        )
    hpus = integer(args.hpus, "--hpus", 1)
    if args.batch is not None:
        integer(args.batch, "--batch", 1)
    temperature = real(args.temperature, "--temperature", 0.0)
    if 0 < temperature < 1e-30:  # logits / temperature overflows float32 below that
        raise UserError(f"--temperature must be 0 (greedy) or at least 1e-30, not {temperature:g}")
    if args.clock_mhz is not None:
        real(args.clock_mhz, "--clock-mhz", 0.0, MAX_CLOCK_MHZ, above=True, why=" (an FPGA clock)")
    mib = real(args.hpu_memory_mib, "--hpu-memory-mib", 0.0, above=True)
    integer(args.seed, "--seed", 0, MAX_SEED)
    if args.max_slice_tokens is not None and args.max_slice_tokens < 1:
        raise UserError(
            f"--max-slice-tokens must be at least 1 (leave it out for no limit), not "
            f"{args.max_slice_tokens}"
        )
    if args.trace is not None:
        output_file(args.trace, "--trace")
    harness = args.harness or ("native" if args.simulator == "verilator" else "cocotb")
    if args.backend != "rtl" and (args.harness or args.waves):
        raise UserError("--harness and --waves need --backend rtl")
    if args.backend != "rtl" and args.simulator != "verilator":
        raise UserError(f"--simulator {args.simulator} needs --backend rtl (the golden model runs)")
    if harness == "native" and args.simulator != "verilator":
        raise UserError(f"--harness native runs verilator, not --simulator {args.simulator}")
    if args.waves is not None:
        if harness != "native":
            raise UserError("--waves needs the native harness (--harness native)")
        output_file(args.waves, "--waves")
    if args.threads is not None:
        integer(args.threads, "--threads", 1, os.cpu_count() or 1, " (this machine's CPUs)")
    return hpus, mib, harness


def _engine_params(args, hpus: int, mib: float) -> tuple[HpuParams, int]:
    """The engine's parameters from ``--set`` and ``--kv-bits`` (the model's shape comes
    later), and each card's memory in bytes, checked against the addresses and this host."""
    params = resolve_params(HpuParams, None, kv_sets(args.overrides, args.kv_bits), design="hpu")
    memory_bytes = int(mib * 2**20) // 64 * 64
    if memory_bytes > 1 << params.addr_bits:
        raise UserError(
            f"--hpu-memory-mib must be at most {2 ** (params.addr_bits - 20)} (what addr_bits "
            f"{params.addr_bits} addresses), not {mib:g}"
        )
    host = host_memory_bytes()
    if hpus * memory_bytes > host:
        raise UserError(
            f"--hpus {hpus} x --hpu-memory-mib {mib:g}: {hpus * memory_bytes} bytes of card "
            f"memory exceed this machine's {host} bytes"
        )
    return params, memory_bytes


def _card_params(args, engines: int, params: HpuParams, memory_bytes: int, harness: str):
    """``--engines``: each card an ``hpu-card`` of that many engines; ``(params, memory
    bytes, harness)`` of such a card."""
    if args.placement != "channels":
        raise UserError("--engines places KV by channel: leave out --placement contiguous")
    if args.backend == "rtl":  # the card's server runs under cocotb
        if args.harness == "native":
            raise UserError("--engines runs the RTL card on cocotb, not --harness native")
        harness = "cocotb"
    try:
        params = HpuCardParams(**params.to_dict(), engines=engines, memory_bytes=memory_bytes)
    except ParamError as exc:
        raise UserError(f"--engines {engines}: {exc}") from None
    return params, params.memory_bytes, harness


def _prompts(args, tokenizer, c, params: HpuParams, hpus: int, memory_bytes: int, mib: float):
    """``(texts, prompts)``: the batch's prompt texts and their tokens, checked against the
    cards' sequence slots, ``max_seq_len`` and memory."""
    slots = hpus * inspect.signature(HpuDevice).parameters["max_sequences"].default
    batch = args.batch or len(args.prompt)
    if batch > slots:
        raise UserError(
            f"--batch must be at most {slots} ({hpus} HPU card(s) of "
            f"{slots // hpus} sequence slots), not {batch}"
        )
    texts = [args.prompt[i % len(args.prompt)] for i in range(batch)]
    chat = not args.raw and "<|im_start|>" in tokenizer.special
    prompts = [tokenizer.chat_prompt(t) if chat else tokenizer.encode(t) for t in texts]
    if any(not p for p in prompts):
        raise UserError("--prompt must not be empty")
    longest = max(len(p) for p in prompts) + args.tokens
    if longest > params.max_seq_len * hpus and args.max_slice_tokens is None:
        raise UserError(f"{longest} tokens exceed max_seq_len {params.max_seq_len} x {hpus} cards")
    heads = c.n_layers * c.n_kv_heads
    need = sum(heads * params.layout.region_bytes(len(p) + args.tokens) for p in prompts)
    if need > hpus * memory_bytes:
        raise UserError(
            f"HPU memory: {batch} sequences of up to {longest} tokens need {need} bytes of KV "
            f"cache; {hpus} card(s) of --hpu-memory-mib {mib:g} hold {hpus * memory_bytes} "
            "(raise --hpu-memory-mib or --hpus)"
        )
    return texts, prompts


def _devices(args, setup: _Setup) -> list[HpuDevice]:
    """The HPU cards, ``hpu0`` to ``hpuN-1``."""

    def rtl_options(card: int) -> dict:
        if args.backend != "rtl":
            return {}
        waves = args.waves
        if waves is not None and setup.hpus > 1:
            waves = waves.with_name(f"{waves.stem}-hpu{card}{waves.suffix or '.fst'}")
        progress = stderr_progress(f"cosim decode: hpu{card}")  # the first build: minutes
        return {"simulator": args.simulator, "harness": setup.harness, "waves": waves,
                "progress": progress}  # fmt: skip

    return [
        HpuDevice(
            setup.params,
            memory_bytes=setup.memory_bytes,
            backend=args.backend,
            name=f"hpu{i}",
            placement=args.placement,
            **rtl_options(i),
        )
        for i in range(setup.hpus)
    ]


def _decode(args, setup: _Setup, devices: list[HpuDevice]) -> DecodeResult:
    """The batch decoded with every attention on ``devices`` (closed after)."""
    c = setup.model.config
    attention = HpuAttention(c, devices, max_slice_tokens=args.max_slice_tokens)
    special = setup.tokenizer.special.get("<|im_end|>")
    stop = tuple(i for i in (c.eos_id, special) if i is not None)
    try:
        return Decoder(setup.model, attention).generate(
            setup.prompts,
            args.tokens,
            temperature=args.temperature,
            seed=args.seed,
            keep_logits=args.compare,
            stop_ids=() if args.compare else stop,
        )
    except CapacityError as exc:
        raise UserError(f"HPU memory: {exc} (raise --hpu-memory-mib or --hpus)") from None
    finally:
        attention.close()


def _report(args, setup: _Setup, devices: list[HpuDevice], result: DecodeResult) -> None:
    """The outcome: the short report (with ``--trace``, the trace; with ``--compare``, the
    comparison with torch attention), or with ``--json`` the same as one JSON object."""
    say = (lambda *a, **k: None) if args.json else print
    figures = _figures(args, devices, result)
    _say_outcome(args, say, setup, devices, result, figures)
    if args.trace is not None:
        _write_trace(args, figures["events"], setup.label)
        say(f"trace: {args.trace}")
    report = None
    if args.compare:
        report = compare_with_torch(setup.model, setup.prompts, result)
        say(
            f"vs torch attention (teacher forcing on these tokens): top-1 agreement "
            f"{report['agreement']:.1%}, mean KL {report['mean_kl']:.3g}, max |logit error| "
            f"{report['max_logit_error']:.3g}"
        )
    if args.json:
        print(json.dumps(_outcome(args, setup, devices, result, figures, report), indent=2))


def _figures(args, devices: list[HpuDevice], result: DecodeResult) -> dict:
    """The decode's figures: saturations over every card, rate, channel balance, the cards'
    cycle kind and the timeline with and without sub-batch ping-pong."""
    totals: dict[str, int] = {}
    for dev in devices:
        for where, count in dev.total_saturations.items():
            totals[where] = totals.get(where, 0) + count
    steps = len(result.step_cycles)
    events = schedule(result.tasks, args.clock_mhz)
    serial = schedule(result.tasks, args.clock_mhz, overlap=False)
    return {
        "saturations": totals,
        "steps": steps,
        "rate": result.decode_tokens / result.wall_s if result.wall_s > 0 else float("nan"),
        "channels": channel_report(devices),
        "cycle_kind": "simulated RTL" if args.backend == "rtl" else "modelled",
        "events": events,
        "span": max((e["end_s"] for e in events), default=0.0),
        "span_serial": max((e["end_s"] for e in serial), default=0.0),
        "hpu_busy": sum(e["end_s"] - e["start_s"] for e in events if e["kind"] == "hpu"),
    }


def _say_outcome(args, say, setup: _Setup, devices, result: DecodeResult, f: dict) -> None:
    """The short report: model and cards, each sequence's text, saturations, channel balance,
    rate, the first decode steps' cycles and the timeline."""
    c, engines = setup.model.config, setup.engines
    backend = args.backend
    if backend == "golden":  # which golden kernel ran, and why numpy where the twin did not
        golden = devices[0].backend
        backend += (
            f" ({golden.kernel} kernel{': ' + golden.kernel_note if golden.kernel_note else ''})"
        )
    say(
        f"model {setup.label}: {c.n_layers} layers, {c.n_heads} query / {c.n_kv_heads} KV "
        f"heads, head_dim {c.head_dim}; GPU side on {setup.model.device}; {args.hpus} HPU "
        f"card(s){f' of {engines} engines (hpu-card)' if engines else ''}, backend "
        f"{backend}; sub-batches {result.subbatches}"
    )
    for b, ids in enumerate(result.tokens):
        text = setup.tokenizer.decode(ids, skip_special=True)
        say(f"[{b}] {setup.texts[b]!r} -> {text!r}")
    steps, channels = f["steps"], f["channels"]
    saturated = ", ".join(f"{n} {where}" for where, n in sorted(f["saturations"].items()))
    say(f"values the HPU saturated (clipped to their format): {saturated or 'none'}")
    say(
        f"KV bytes read per pseudo-channel ({args.placement} placement, {channels['channels']} "
        f"a card): busiest {channels['busiest_over_mean']:.2f}x the mean, least "
        f"{channels['least_over_mean']:.2f}x, {channels['touched']} of {channels['channels']} "
        "touched on the busiest card"
    )
    say(
        f"prefill {result.prefill_s:.2f} s (it gives each sequence's first token); {steps} decode "
        f"steps, {result.decode_tokens} more tokens in {result.wall_s:.2f} s: {f['rate']:.2f} "
        "tokens/s of the simulation"
    )
    for s, cycles in enumerate(result.step_cycles, start=1):
        if s <= 4 or s == steps:
            per_card = ", ".join(f"{k} {v}" for k, v in sorted(cycles.items()))
            say(f"  step {s:>3}: {f['cycle_kind']} cycles {per_card}")
        elif s == 5:
            say("  ...")
    if steps:
        say(
            f"timeline (GPU measured here, HPU at {args.clock_mhz:g} MHz, {setup.clock_source}): "
            f"{f['span'] / steps * 1e3:.3f}"
            f" ms/step with sub-batch ping-pong, {f['span_serial'] / steps * 1e3:.3f} ms/step "
            f"serial; HPU busy {f['hpu_busy'] / steps * 1e6:.1f} us/step over all cards"
        )


def _write_trace(args, events: list[dict], label: str) -> None:
    """The timeline as a Chrome/Perfetto trace at ``--trace``, written beside and renamed so
    that a failed write leaves no half trace."""
    tmp = args.trace.with_name(f".{args.trace.name}.tmp-{os.getpid()}")
    try:
        chrome_trace(
            events, tmp, {"model": label, "backend": args.backend, "clock_mhz": args.clock_mhz}
        )
        os.replace(tmp, args.trace)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write trace {args.trace}: {exc.strerror}") from None


def _outcome(args, setup: _Setup, devices, result: DecodeResult, f: dict, report) -> dict:
    """The outcome as data (``--json``)."""
    steps, engines = f["steps"], setup.engines
    return {
        "model": setup.label,
        "gpu_side_device": str(setup.model.device),
        "backend": args.backend,
        "golden_kernel": devices[0].backend.kernel if args.backend == "golden" else None,
        "hpus": args.hpus,
        "engines_per_card": engines or 1,
        "card_design": "hpu-card" if engines else "hpu",
        "subbatches": result.subbatches,
        "sequences": [
            {
                "prompt": setup.texts[b],
                "tokens": ids,
                "text": setup.tokenizer.decode(ids, skip_special=True),
            }
            for b, ids in enumerate(result.tokens)
        ],
        "prefill_s": result.prefill_s,
        "decode_steps": steps,
        "decode_tokens": result.decode_tokens,
        "decode_s": result.wall_s,
        "tokens_per_s": f["rate"],
        "cycle_kind": f["cycle_kind"],
        "step_cycles": result.step_cycles,
        "saturations": f["saturations"],
        "placement": args.placement,
        "channel_bytes": f["channels"],
        "clock_mhz": args.clock_mhz,
        "clock_source": setup.clock_source,
        "timeline_ms_per_step": f["span"] / steps * 1e3 if steps else None,
        "timeline_serial_ms_per_step": f["span_serial"] / steps * 1e3 if steps else None,
        "hpu_busy_us_per_step": f["hpu_busy"] / steps * 1e6 if steps else None,
        "trace": None if args.trace is None else str(args.trace),
        "compare": report if args.compare else None,
    }
