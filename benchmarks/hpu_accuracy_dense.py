"""Dense HPU accuracy, measured the way the decode runtime runs: every step, layer and head.

Run: ``python benchmarks/hpu_accuracy_dense.py [--texts execmodel [license]] [--prompt-tokens 32]
[--tokens 1024] [--model smollm2-135m] [--set q_bits=16 ...] [--json out.json]``.

What runs. Each text is tokenized (no chat template); its first ``--prompt-tokens`` tokens are
the prompt (the prefill), and the next ``--tokens`` tokens are fed one by one by teacher forcing
(:meth:`~tandem.host.system.decode.Decoder.generate` with ``forced=``), so the runs below see
the same tokens. The texts are one batch of the runtime (two sub-batches, one golden HPU card).

* The runtime's own :class:`~tandem.host.system.decode.HpuAttention` runs every decode
  attention on the golden model (bit-exact with the RTL), with its own quantization: key
  smoothing from the prefill's keys per (layer, KV head) (``HpuAttention.start``), K / s and V
  int8 (``--set kv_bits=16 --set lanes=16``: int16) with binary16 per-token scales, q * s int16
  (``--set q_bits=8`` for int8).
* :class:`DenseProbe` wraps it. Each ``attend`` (one layer of a sub-batch) also appends the
  step's float k and v to float caches it keeps alongside, and computes, for every sequence
  and query head, float32 ``scaled_dot_product_attention`` on the unquantized q, K and V of
  that step (the reference, :class:`~tandem.host.system.decode.TorchAttention`'s math) and
  the same attention in float64 with one input quantized at a time, the runtime's way (the
  prefill's smoothing factors, the same ``quantize_rows`` calls, so the same integers and
  scales the card holds).
* A second decode of the same tokens with :class:`~tandem.host.system.decode.TorchAttention`
  (float32 cache, SDPA everywhere) gives the logits the offloaded run's are compared with.

Relative L2 error of an output vector y against r: ``||y - r||_2 / ||r||_2``, one value per
(text, decode step, layer, query head). The components, each against the float32 reference:

* ``total``: the HPU's output (what the runtime uses);
* ``K``: float attention with only K quantized (smoothing, int8, per-token scale, unsmoothed);
* ``V``: only V quantized; ``q``: only q quantized (int16 by default);
* ``q, K, V``: all three quantized, float arithmetic;
* ``engine``: the HPU's output against float64 attention on exactly its quantized inputs (the
  fixed-point datapath alone: binary16 score scale, exp2 table, rounding, 1/l).

Printed: per layer the mean, p99 and max of ``total`` over every step and head; the same over
all; the worst (text, layer, head, position); per component the mean, p99 and max; top-1
agreement of the two runs' logits (and each run's top-1 accuracy on the text's next token),
mean KL and max logit error. The default (one text, 1024 steps) costs about four minutes of
one core (ten minutes of wall time on the shared, loaded 2-core machine); docs/hpu.md's figures
are ``--texts execmodel license`` (twice that). ``--tokens`` and ``--texts`` set the length.

The texts are English prose every Python installation ships, so nothing is downloaded:
``execmodel`` is the "Execution model" chapter of the Python Language Reference
(``pydoc_data.topics``, 2212 SmolLM2 tokens), ``license`` Python's ``LICENSE.txt`` (the
history of the software, then the license terms; 3768 tokens). ``--texts`` also takes file
paths. The model is SmolLM2-135M (``tandem model fetch smollm2-135m``; skipped when absent),
Gemma 3 270M (``--model gemma3-270m``, ``tandem model fetch gemma3-270m``; its sliding-window
layers attend over their last 512 positions on the card and in the reference alike),
any Llama or Gemma 3 GGUF path, or ``tiny`` / ``tiny-gemma`` (random weights, for a quick check).
"""

import argparse
import json
import math
import sys

import numpy as np
from tandem.host.hpu.params import KEY_SMOOTHING_STRENGTH
from tandem.host.system.texts import TEXTS, load_text

from tandem.bench import Figures, add_benchmark_options, skip

#: Error components, in the order they are printed (see the module docstring).
COMPONENTS = ("total", "K", "V", "q", "q, K, V", "engine")
#: Targets for the densely sampled relative L2 error (mean, max).
TARGET_MEAN, TARGET_MAX = 0.01, 0.03


#: KV formats the decomposition can simulate in float (``--simulate-format``).
SIMULATED_FORMATS = (None, "fp8", "fp16")
#: Largest finite OCP fp8 e4m3 magnitude.
E4M3_MAX = 448.0


def _e4m3(x):
    """``x`` rounded to the nearest OCP fp8 e4m3 value (3 mantissa bits, exponents -6..8,
    subnormals down to 2**-9), saturating at +-448."""
    magnitude = np.abs(x)
    exponent = np.maximum(np.floor(np.log2(np.maximum(magnitude, 2.0**-9))), -6.0)
    step = 2.0 ** (exponent - 3)
    return np.sign(x) * np.minimum(np.round(magnitude / step) * step, E4M3_MAX)


def _simulated(x, kv_format: str):
    """Rows ``x`` [..., d] stored in ``kv_format`` and read back, as float64."""
    if kv_format == "fp16":
        return x.astype(np.float16).astype(np.float64)
    top = np.abs(x).max(axis=-1, keepdims=True)
    scale = np.where(top > 0, top / E4M3_MAX, 1.0)
    return _e4m3(x / scale) * scale


def _rel_l2(y, r):
    """``||y - r|| / ||r||`` along the last axis."""
    return np.linalg.norm(y - r, axis=-1) / np.linalg.norm(r, axis=-1)


def _softmax_scores(q, k):
    """Float64 softmax of ``q k^T / sqrt(d)``: q [Hkv, G, d], k [Hkv, T, d] -> [Hkv, G, T]."""
    s = (q @ k.transpose(0, 2, 1)) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def _variants(q, qq, k, kq, v, vq):
    """Float64 attention with one input quantized at a time, and with all three.

    ``q, k, v`` are the float inputs ([Hkv, G, d], [Hkv, T, d]), ``qq, kq, vq`` their quantized
    copies. Returns ``(K alone, V alone, q alone, all)``, each [Hkv, G, d]. The queries go in
    stacked (both against K, both against the quantized K) so that each cache is read twice,
    not four times.
    """
    g = q.shape[1]
    both = np.concatenate([q, qq], axis=1)
    p_k = _softmax_scores(both, k)  # (q, K), (qq, K)
    p_kq = _softmax_scores(both, kq)  # (q, Kq), (qq, Kq)
    with_v = np.concatenate([p_kq[:, :g], p_k[:, g:]], axis=1) @ v  # K alone, q alone
    with_vq = np.concatenate([p_k[:, :g], p_kq[:, g:]], axis=1) @ vq  # V alone, all
    return with_v[:, :g], with_vq[:, :g], with_v[:, g:], with_vq[:, g:]


class DenseProbe:
    """Attention backend for :class:`~tandem.host.system.decode.Decoder` that measures another.

    It passes every call on to ``inner`` (the backend under test, normally
    :class:`~tandem.host.system.decode.HpuAttention`) and returns what ``inner`` returns, so
    the decode runs exactly as it would without the probe. Alongside it keeps the float K
    and V of every sequence and layer (the prefill's, then each step's new rows) and their
    quantized copies, and at every call records the errors of :data:`COMPONENTS` for every
    sequence and query head into :attr:`records`.

    Parameters
    ----------
    inner
        The attention backend under test (``start``, ``attend``, ``finish``, ``last_cycles``).
    config
        The model's shapes.
    q_bits, kv_bits
        Widths of the quantized q and of K and V in the decomposition; the runtime's are
        ``params.q_bits`` and ``params.kv_bits``.
    simulate
        None, or a KV format the engine does not take (``"fp8"``: OCP e4m3 with one
        per-token scale mapping the row's largest magnitude to 448; ``"fp16"``: IEEE binary16
        elements, no scale) in which the decomposition's K and V are quantized instead, in
        float: what that format would cost in accuracy, beside the card's own ``total``.
    smoothing
        Key smoothing as ``HpuAttention(smoothing=...)``: factors from the prefill's keys.
    """

    def __init__(
        self,
        inner,
        config,
        *,
        q_bits: int,
        kv_bits: int = 8,
        simulate: str | None = None,
        smoothing: bool = True,
        strength: float = KEY_SMOOTHING_STRENGTH,
    ):
        if simulate not in SIMULATED_FORMATS:
            raise ValueError(f"simulate must be one of {SIMULATED_FORMATS}, not {simulate!r}")
        self.simulate = simulate
        self.inner = inner
        self.config = config
        self.q_bits, self.kv_bits, self.smoothing = q_bits, kv_bits, smoothing
        self.strength = strength
        self._seq: dict[int, dict] = {}
        self._rows: list[np.ndarray] = []
        self.name = getattr(inner, "name", "probe")

    @property
    def last_cycles(self) -> dict:
        return self.inner.last_cycles

    def _quantized(self, x, factors=None):
        """Dequantized copy of rows ``x`` [..., d] as the runtime stores them."""
        from tandem.host.hpu import quantize_rows

        if self.simulate is not None:
            f = 1.0 if factors is None else factors
            return _simulated(x / f, self.simulate) * f
        if factors is None:
            values, scales = quantize_rows(x, self.kv_bits)
            return values * scales.astype(np.float64)[..., None]
        values, scales = quantize_rows(x / factors, self.kv_bits)
        return values * scales.astype(np.float64)[..., None] * factors

    def start(self, seq: int, keys, values, capacity: int) -> None:
        """Start ``inner``, and keep the float and quantized prefill caches of ``seq``."""
        from tandem.host.hpu import key_smoothing

        self.inner.start(seq, keys, values, capacity)
        c = self.config
        k = np.stack([x.detach().cpu().double().numpy() for x in keys])  # [L, Hkv, T, d]
        v = np.stack([x.detach().cpu().double().numpy() for x in values])
        length = k.shape[2]
        if self.smoothing:  # as HpuAttention.start: once per (layer, KV head), prefill keys
            factors = np.stack(
                [[key_smoothing(h, strength=self.strength) for h in layer] for layer in k]
            )
        else:
            factors = np.ones((c.n_layers, c.n_kv_heads, c.head_dim))
        state = getattr(self.inner, "seqs", {}).get(seq)
        if state is not None and not np.array_equal(state.factors, factors):
            raise AssertionError("the probe's smoothing factors differ from the runtime's")
        shape = (c.n_layers, c.n_kv_heads, capacity, c.head_dim)
        cache = {name: np.zeros(shape) for name in ("k", "v", "kq", "vq")}
        cache["k"][:, :, :length], cache["v"][:, :, :length] = k, v
        cache["kq"][:, :, :length] = self._quantized(k, factors[:, :, None, :])
        cache["vq"][:, :, :length] = self._quantized(v)
        self._seq[seq] = {
            "cache": cache,
            "factors": factors,
            "length": np.full(c.n_layers, length),
            "prompt": length,
        }

    def attend(self, layer: int, seqs: list[int], q, k_new, v_new):
        """``inner.attend``, then the errors of every sequence and query head of the call."""
        import torch
        from tandem.host.hpu import quantize_rows

        out = self.inner.attend(layer, seqs, q, k_new, v_new)
        c = self.config
        g, hkv, d = c.gqa_group, c.n_kv_heads, c.head_dim
        got = out.detach().cpu().double().numpy().reshape(len(seqs), hkv, g, d)
        qs = q.detach().cpu().double().numpy().reshape(len(seqs), hkv, g, d)
        ks = k_new.detach().cpu().double().numpy()
        vs = v_new.detach().cpu().double().numpy()
        for i, s in enumerate(seqs):
            st = self._seq[s]
            cache, f = st["cache"], st["factors"][layer]  # f [Hkv, d]
            t = int(st["length"][layer])
            cache["k"][layer, :, t], cache["v"][layer, :, t] = ks[i], vs[i]
            cache["kq"][layer, :, t] = self._quantized(ks[i], f)
            cache["vq"][layer, :, t] = self._quantized(vs[i])
            st["length"][layer] = t + 1
            window = c.attention_window(layer)  # a sliding-window layer sees its last ones
            lo = 0 if window is None else max(0, t + 1 - window)
            k, v = cache["k"][layer, :, lo : t + 1], cache["v"][layer, :, lo : t + 1]
            kq, vq = cache["kq"][layer, :, lo : t + 1], cache["vq"][layer, :, lo : t + 1]
            # The reference: TorchAttention's float32 SDPA on the unquantized inputs.
            k32, v32 = torch.from_numpy(k).float(), torch.from_numpy(v).float()
            ref = torch.nn.functional.scaled_dot_product_attention(
                q[i].detach().cpu().float()[:, None],
                k32.repeat_interleave(g, 0),
                v32.repeat_interleave(g, 0),
            )[:, 0]
            ref = ref.double().numpy().reshape(hkv, g, d)
            qi, qscale = quantize_rows(qs[i] * f[:, None, :], self.q_bits)
            qq = qi * qscale.astype(np.float64)[..., None] / f[:, None, :]
            k_alone, v_alone, q_alone, quant = _variants(qs[i], qq, k, kq, v, vq)
            errors = {
                "total": _rel_l2(got[i], ref),
                "K": _rel_l2(k_alone, ref),
                "V": _rel_l2(v_alone, ref),
                "q": _rel_l2(q_alone, ref),
                "q, K, V": _rel_l2(quant, ref),
                "engine": _rel_l2(got[i], quant),
            }
            rows = np.empty((g * hkv, 4 + len(COMPONENTS)))
            rows[:, 0], rows[:, 1], rows[:, 2] = s, t, layer
            rows[:, 3] = np.arange(g * hkv)  # query head h reads KV head h // g
            for j, name in enumerate(COMPONENTS):
                rows[:, 4 + j] = errors[name].reshape(-1)
            self._rows.append(rows)
        return out

    def finish(self, seq: int) -> None:
        self.inner.finish(seq)
        self._seq.pop(seq, None)

    def close(self) -> None:
        self.inner.close()

    @property
    def records(self) -> dict[str, np.ndarray]:
        """Every measurement so far: ``seq``, ``position`` (of the query token), ``layer``,
        ``head`` (query head) and one array per component, all of one length."""
        rows = np.concatenate(self._rows) if self._rows else np.empty((0, 4 + len(COMPONENTS)))
        out = {
            name: rows[:, j].astype(np.int64)
            for j, name in enumerate(("seq", "position", "layer", "head"))
        }
        out.update({name: rows[:, 4 + j] for j, name in enumerate(COMPONENTS)})
        return out


def stats(values) -> dict[str, float]:
    """Mean, 99th percentile and max of ``values``."""
    values = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(values.mean()),
        "p99": float(np.percentile(values, 99)),
        "max": float(values.max()),
    }


def summarize(records: dict[str, np.ndarray], names: list[str]) -> dict:
    """Per layer, overall and per component statistics, and the worst (text, layer, head, step)."""
    total = records["total"]
    worst = int(np.argmax(total))
    return {
        "measurements": len(total),
        "per_layer": {
            int(layer): stats(total[records["layer"] == layer])
            for layer in np.unique(records["layer"])
        },
        "per_text": {
            names[int(s)]: stats(total[records["seq"] == s]) for s in np.unique(records["seq"])
        },
        "overall": stats(total),
        "components": {name: stats(records[name]) for name in COMPONENTS},
        "worst": {
            "text": names[int(records["seq"][worst])],
            "layer": int(records["layer"][worst]),
            "head": int(records["head"][worst]),
            "position": int(records["position"][worst]),
            **{name: float(records[name][worst]) for name in COMPONENTS},
        },
    }


def measure(
    model,
    prompts,
    forced,
    params,
    *,
    smoothing=True,
    strength=None,
    torch_logits=True,
    simulate=None,
):
    """Teacher-forced decode of ``forced`` after ``prompts`` on HPU attention, probed densely.

    ``forced[b]`` are the tokens that follow prompt b: the prefill "predicts" the first, decode
    step s feeds ``forced[b][s - 1]`` (``len(forced[b]) - 1`` decode steps). One golden card
    holds every sequence. Returns ``(probe, hpu_result, torch_result)``; ``torch_result`` (the
    same tokens with :class:`~tandem.host.system.decode.TorchAttention`) is None unless
    ``torch_logits``.
    """
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.system.decode import Decoder, HpuAttention, TorchAttention

    c = model.config
    steps = min(len(f) for f in forced)
    heads = c.n_layers * c.n_kv_heads
    need = sum(heads * params.layout.region_bytes(len(p) + steps) for p in prompts)
    memory = max(need + (1 << 20), 1 << 20) // 64 * 64
    if strength is None:
        strength = KEY_SMOOTHING_STRENGTH
    hpu = HpuAttention(
        c,
        [HpuDevice(params, memory_bytes=memory)],
        smoothing=smoothing,
        smoothing_strength=strength,
    )
    probe = DenseProbe(
        hpu,
        c,
        q_bits=params.q_bits,
        kv_bits=params.kv_bits,
        simulate=simulate,
        smoothing=smoothing,
        strength=strength,
    )
    try:
        got = Decoder(model, probe).generate(prompts, steps, forced=forced, keep_logits=True)
    finally:
        probe.close()
    reference = None
    if torch_logits:
        reference = Decoder(model, TorchAttention(c)).generate(
            prompts, steps, forced=forced, keep_logits=True
        )
    return probe, got, reference


def agreement_in_chunks(reference, test, steps: int = 64) -> dict:
    """:func:`~tandem.host.system.decode.logit_agreement` of [steps, batch, vocab] logits,
    ``steps`` decode steps at a time (its float64 copies of 1000+ steps of a 49k vocabulary
    would take gigabytes), combined as over all positions at once."""
    from tandem.host.system.decode import logit_agreement

    parts = [
        logit_agreement(reference[i : i + steps], test[i : i + steps])
        for i in range(0, len(reference), steps)
    ]
    positions = sum(p["positions"] for p in parts)
    return {
        "agreement": sum(p["agreement"] * p["positions"] for p in parts) / positions,
        "mean_kl": sum(p["mean_kl"] * p["positions"] for p in parts) / positions,
        "max_logit_error": max(p["max_logit_error"] for p in parts),
        "positions": positions,
    }


def _pct(x: float) -> str:
    return f"{x:.2%}"


def _print_table(label: str, rows: dict) -> None:
    """One line of mean, p99 and max per row of ``rows`` (``{name: stats}``)."""
    print(f"{label:>10} {'mean':>8} {'p99':>8} {'max':>8}")
    for name, s in rows.items():
        print(f"{name:>10} {_pct(s['mean']):>8} {_pct(s['p99']):>8} {_pct(s['max']):>8}")


def _parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--texts",
        nargs="+",
        default=["execmodel"],
        metavar="TEXT",
        help=f"built-in texts ({', '.join(TEXTS)}) or UTF-8 files (default: execmodel)",
    )
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=32,
        help="prefill tokens (smoothing factors come from them)",
    )
    parser.add_argument("--tokens", type=int, default=1024, help="teacher-forced decode steps")
    parser.add_argument(
        "--model",
        default="smollm2-135m",
        help="smollm2-135m, gemma3-270m, a Llama or Gemma 3 GGUF path, tiny or tiny-gemma",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-smoothing", action="store_true", help="quantize K as it is")
    parser.add_argument(
        "--simulate-format",
        choices=("fp8", "fp16"),
        help="quantize the decomposition's K and V in this format (float; the engine does not "
        "take it); the total stays the card's",
    )
    parser.add_argument(
        "--smoothing-strength",
        type=float,
        default=None,
        help="key smoothing's migration strength in 0..1 (default: the runtime's, "
        "KEY_SMOOTHING_STRENGTH)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (more only help on idle cores)"
    )
    add_benchmark_options(parser, json="write the summary and every record here")
    return parser.parse_args(argv)


def _load_texts(args) -> list | None:
    """The texts of ``--texts``; None (after saying why) when an option is out of range or a
    text cannot be read."""
    for flag, value in (
        ("--prompt-tokens", args.prompt_tokens),
        ("--tokens", args.tokens),
        ("--threads", args.threads),
    ):
        if value < 1:
            print(f"error: {flag} must be at least 1, not {value}", file=sys.stderr)
            return None
    strength = args.smoothing_strength
    if strength is not None and not 0.0 <= strength <= 1.0:  # NaN fails too
        print(f"error: --smoothing-strength must be in 0..1, not {strength}", file=sys.stderr)
        return None
    try:
        return [load_text(name) for name in args.texts]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _load_model(args, length: int):
    """``(model, tokenizer, label, params)``, or the exit code: a skip in the suite where the
    weights are not fetched, else 2 after saying why."""
    import torch
    from tandem.host.hpu import HpuParams
    from tandem.host.system.decode import load_model_weights
    from tandem.host.system.model import MODELS, find_model

    from tandem.config import resolve_params
    from tandem.errors import UserError

    if args.model in MODELS and find_model(args.model) is None:
        fetch = f"tandem model fetch {args.model}"
        if args.figures is not None:  # in the suite: missing weights are a skip, not an error
            return skip(f"{args.model} is not fetched; run: {fetch}")
        print(f"error: {args.model} is not fetched; run: {fetch}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    try:
        overrides = resolve_params(HpuParams, None, args.set, design="hpu")
        model, tokenizer, label = load_model_weights(args.model, "cpu")
        c = model.config
        params = overrides.replace(
            head_dim=c.head_dim,
            gqa_group=c.gqa_group,
            max_seq_len=max(overrides.max_seq_len, length),
        )
    except (UserError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return model, tokenizer, label, params


def _split_texts(args, texts, tokenizer, length: int):
    """``(prompts, forced)`` token ids of each text; None (after saying why) for a short one."""
    prompts, forced = [], []
    for name, text in zip(args.texts, texts):
        ids = tokenizer.encode(text)
        if len(ids) < length:
            print(
                f"error: text {name!r} has {len(ids)} tokens, fewer than --prompt-tokens + "
                f"--tokens = {length}",
                file=sys.stderr,
            )
            return None
        prompts.append(ids[: args.prompt_tokens])
        forced.append(ids[args.prompt_tokens : length])  # step s feeds forced[s - 1]
    return prompts, forced


def _print_report(args, label, c, params, length, smoothing, summary, agreement, accuracy):
    """The printed report: the run, the error tables, the worst case, the logits."""
    print(
        f"{label}: {c.n_layers} layers x {c.n_heads} query heads ({c.n_kv_heads} KV, head_dim "
        f"{c.head_dim}); texts {', '.join(args.texts)}: prompt {args.prompt_tokens} tokens, then "
        f"{args.tokens} teacher-forced decode steps each (query positions "
        f"{args.prompt_tokens}..{length - 2}); int{params.kv_bits} K/V, int{params.q_bits} q, "
        f"key smoothing {smoothing}"
    )
    print(
        f"every decode step x layer x query head: {summary['measurements']} relative L2 errors "
        "against float32 SDPA on the unquantized q, K, V"
    )
    _print_table("layer", summary["per_layer"])
    o = summary["overall"]
    print(
        f"overall: mean {_pct(o['mean'])}, p99 {_pct(o['p99'])}, max {_pct(o['max'])} (targets "
        f"mean < {TARGET_MEAN:.0%}, max < {TARGET_MAX:.0%})"
    )
    for name, s in summary["per_text"].items():
        print(f"  {name}: mean {_pct(s['mean'])}, p99 {_pct(s['p99'])}, max {_pct(s['max'])}")
    w = summary["worst"]
    print(
        f"worst: text {w['text']}, layer {w['layer']}, head {w['head']}, position "
        f"{w['position']}: {_pct(w['total'])} (K alone {_pct(w['K'])}, V alone {_pct(w['V'])}, "
        f"engine {_pct(w['engine'])})"
    )
    print("decomposition (one thing quantized at a time, float arithmetic; engine: HPU vs float")
    print("attention on its own quantized inputs):")
    if args.simulate_format:
        print(
            f"  K, V and 'q, K, V' with K and V in {args.simulate_format} (simulated in float; "
            "'engine' then compares the card with that simulation, not with its own inputs)"
        )
    _print_table("component", summary["components"])
    print(
        f"logits, HPU vs torch attention (teacher forcing, {agreement['positions']} positions): "
        f"top-1 agreement {agreement['agreement']:.2%}, mean KL {agreement['mean_kl']:.2e}, max "
        f"|logit error| {agreement['max_logit_error']:.3f}; top-1 = the text's next token: HPU "
        f"{accuracy['hpu']:.2%}, torch {accuracy['torch']:.2%}"
    )


def _figures(args, params, note: str, summary, agreement) -> Figures:
    """The suite's figures: the error targets, the components alone, the logits' agreement."""
    o = summary["overall"]
    figures = Figures("hpu-accuracy-dense", config=params.to_dict() | {"texts": args.texts})
    for name, value, target in (
        ("mean relative L2 error", o["mean"], TARGET_MEAN),
        ("max relative L2 error", o["max"], TARGET_MAX),
    ):
        figures.add(
            name,
            value,
            reference=target,
            reference_label="target",
            higher_is_better=False,
            design="hpu",
            note=note,
        )
    figures.add("p99 relative L2 error", o["p99"], design="hpu", note=note, higher_is_better=False)
    worst_layer = max(s["mean"] for s in summary["per_layer"].values())
    figures.add(
        "worst layer's mean relative L2 error",
        worst_layer,
        reference=TARGET_MEAN,
        reference_label="target",
        higher_is_better=False,
        design="hpu",
        note=note,
    )
    for name in ("K", "V", "engine"):
        figures.add(
            f"max relative L2 error, {name} alone",
            summary["components"][name]["max"],
            design="hpu",
            note=note,
            higher_is_better=False,
        )
    figures.add(
        "top-1 agreement with torch attention",
        agreement["agreement"],
        reference=0.99,
        reference_label="target",
        design="hpu",
        note=note,
    )
    return figures


def main(argv=None) -> int:
    args = _parse_args(argv)
    texts = _load_texts(args)
    if texts is None:
        return 2
    length = args.prompt_tokens + args.tokens + 1  # the last token is only predicted
    loaded = _load_model(args, length)
    if not isinstance(loaded, tuple):
        return loaded
    model, tokenizer, label, params = loaded
    c = model.config
    split = _split_texts(args, texts, tokenizer, length)
    if split is None:
        return 2
    prompts, forced = split
    probe, got, reference = measure(
        model,
        prompts,
        forced,
        params,
        smoothing=not args.no_smoothing,
        strength=args.smoothing_strength,
        simulate=args.simulate_format,
    )
    records = probe.records
    summary = summarize(records, list(args.texts))
    agreement = agreement_in_chunks(reference.logits, got.logits)
    # Decode step s predicts forced[s]: each run's top-1 accuracy on the text itself.
    truth = np.array([f[1:] for f in forced]).T  # [steps, batch]
    accuracy = {
        side: float((result.logits.argmax(-1) == truth).mean())
        for side, result in (("hpu", got), ("torch", reference))
    }
    strength = args.smoothing_strength
    if strength is None:
        strength = KEY_SMOOTHING_STRENGTH
    smoothing = "off" if args.no_smoothing else f"on (prefill keys, strength {strength:g})"
    _print_report(args, label, c, params, length, smoothing, summary, agreement, accuracy)
    note = (
        f"{label}, texts {'+'.join(args.texts)}, prompt {args.prompt_tokens} + "
        f"{args.tokens} decode steps, every step x layer x head, int{params.q_bits} q, "
        f"key smoothing {smoothing}, vs float32 SDPA"
    )
    _figures(args, params, note, summary, agreement).write(args.figures)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "params": params.to_dict(),
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "summary": summary,
                    "logits": agreement | {"top1_text": accuracy},
                    "records": {k: v.tolist() for k, v in records.items()},
                },
                handle,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
