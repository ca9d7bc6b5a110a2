"""``tandem compile``: a Llama-architecture model into weights and instruction programs.

The flow, after FlightLLM (FPGA'24, arXiv 2401.03868, section 5):

1. **Calibration**: a float forward pass over calibration text records the input of every
   linear layer and every layer's keys (:func:`calibrate`).
2. **Weights**: every linear layer is pruned to an N:M pattern and quantized to int8 with one
   scale per output channel. The pattern is chosen per layer: the sparsest candidate whose
   relative output error on the calibration inputs (int8 activations included) stays within
   the budget; dense is always a candidate. Pruning ranks weights by magnitude or, with
   ``criterion="activation"``, by magnitude times the input channel's calibration norm
   (Wanda). Rows are pruned in pairs so that decode's matrix-vector mode fills both lanes of
   every DSP48E2 (docs/sparse_dsp.md).
3. **Programs** (:mod:`~tandem.mappings.llm.program`): one decode program, and one
   parameterized prefill template per bucket of prompt lengths (length-adaptive compilation).
4. ``DIR/summary.json``: instructions, storage (bucketed against every length compiled
   separately), compile time, the pattern and error of every layer.
"""

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tandem.mappings.nm import NMPattern, pack_nm, prune_magnitude, quantize_per_channel

from tandem.args import output_dir
from tandem.errors import UserError

from . import program as prog
from .program import LINEARS

__all__ = [
    "LINEARS",
    "CompileOptions",
    "LayerChoice",
    "calibrate",
    "choose_pattern",
    "compile_model",
    "quantize_activations",
]

#: Default candidate patterns, sparsest first (FlightLLM's M = 16 with N in 4, 8, 16).
DEFAULT_PATTERNS = ("4:16", "8:16", "16:16")


class CompileError(UserError, ValueError):
    """A model, option or output folder the compiler cannot take: one line (exit status 2 in
    the CLI; a ``ValueError`` to Python callers)."""


@dataclass(frozen=True)
class CompileOptions:
    """What ``tandem compile`` was asked for.

    Attributes
    ----------
    patterns
        Candidate N:M patterns; the sparsest within ``budget`` is chosen per layer. One
        pattern forces it everywhere (``("16:16",)``: dense int8; ``("2:4",)``: uniform 2:4).
    budget
        Largest relative L2 output error of a layer on the calibration inputs.
    criterion
        ``"magnitude"`` or ``"activation"`` (Wanda: ``|w| * ||x_col||``).
    calibration_tokens
        Tokens of calibration text.
    max_prefill
        Longest prompt the prefill templates serve.
    tile
        Tokens per prefill tile (one matrix-matrix request of the engine per tile).
    activation_bits
        Candidate activation widths, tried narrowest first for each pattern: 8 (one int8 per
        element) or 16 (two int8 digits, ``x = 256 * hi + lo``, that the engine multiplies as
        a token pair sharing each weight: twice the MACs and engine cycles of 8 bits, the same
        weight bytes).
    method
        ``"round"`` (default): pruning by ``criterion``, then round-to-nearest. ``"gptq"``: each
        layer pruned and quantized column by column with the error compensated in the later
        columns on the calibration inputs (:func:`solve_layer`). On SmolLM2 it halves the
        calibration text's layer error but not a held-out text's (2048 calibration tokens of
        Python's documentation, evaluated on its LICENSE: 2:4 layers 0.43 -> 0.39-0.46), so it
        is not the default.
    weight_bits
        Candidate weight widths, narrowest first (before the activation widths): 8, or 16 as
        two int8 digit matrices of the same pattern (``W = 256 * W_hi + W_lo`` with one scale
        per row), run one after the other: twice the weight bytes and the engine cycles.
    weight_group
        Columns per weight scale: 0 (default) for one scale per row; else a multiple of 16
        dividing every layer's columns (64: llama.cpp's Q8_0 has 32). The engine runs a
        matrix as one pass per column block, each with its own accumulators; the
        element-wise unit's ``DEQUANTIZE`` sums the blocks' results, each times its scale
        (``MATMUL``/``DEQUANTIZE`` ``count`` = blocks). Smaller groups follow the weights
        more closely, at one pass per block; ``benchmarks/compile_accuracy.py`` measures
        next-token agreement with float per row (``dense``) and per 64 columns (``dense-g64``).
    """

    patterns: tuple[str, ...] = DEFAULT_PATTERNS
    budget: float = 0.03
    criterion: str = "magnitude"
    calibration_tokens: int = 256
    max_prefill: int = 2048
    tile: int = 16
    activation_bits: tuple[int, ...] = (8, 16)
    weight_bits: tuple[int, ...] = (8,)
    method: str = "round"
    weight_group: int = 0

    def __post_init__(self):
        self._check_types()
        if not self.patterns:
            raise CompileError("--patterns: give at least one N:M pattern")
        for text in self.patterns:
            try:
                NMPattern.parse(text)
            except UserError as exc:
                raise CompileError(str(exc)) from None
        if self.criterion not in ("magnitude", "activation"):
            raise CompileError(
                f"--criterion must be magnitude or activation, not {self.criterion!r}"
            )
        if not 0 < self.budget < 1:
            raise CompileError(f"--budget must be in (0, 1), not {self.budget}")
        if not 8 <= self.calibration_tokens <= 8192:
            raise CompileError(
                f"--calibration-tokens must be in 8..8192, not {self.calibration_tokens}"
            )
        if not 1 <= self.max_prefill <= 4095:
            raise CompileError(f"--max-prefill must be in 1..4095, not {self.max_prefill}")
        if self.tile < 2 or self.tile % 2 or self.tile > 32:
            raise CompileError(f"--tile must be even and in 2..32, not {self.tile}")
        if not self.activation_bits or set(self.activation_bits) - {8, 16}:
            given = ",".join(map(str, self.activation_bits))
            raise CompileError(f"--activation-bits takes 8 and/or 16, not {given}")
        if self.method not in ("gptq", "round"):
            raise CompileError(f"--method must be gptq or round, not {self.method!r}")
        if not self.weight_bits or set(self.weight_bits) - {8, 16}:
            given = ",".join(map(str, self.weight_bits))
            raise CompileError(f"--weight-bits takes 8 and/or 16, not {given}")
        group = self.weight_group
        if isinstance(group, bool) or not isinstance(group, int) or group < 0 or group % 16:
            raise CompileError(f"--weight-group must be 0 or a multiple of 16, not {group!r}")
        if group > 65536:
            raise CompileError(f"--weight-group must be at most 65536, not {group}")

    def _check_types(self) -> None:
        """Every field of the type it is compared as (a string where a number belongs would
        raise ``TypeError`` inside a comparison)."""

        def number(value, integral: bool) -> bool:
            kinds = int if integral else (int, float)
            return isinstance(value, kinds) and not isinstance(value, bool)

        for name in ("calibration_tokens", "max_prefill", "tile", "weight_group"):
            value = getattr(self, name)
            if not number(value, True):
                raise CompileError(f"--{name.replace('_', '-')} must be an integer, not {value!r}")
        if not number(self.budget, False):
            raise CompileError(f"--budget must be a number, not {self.budget!r}")
        for name in ("criterion", "method"):
            if not isinstance(getattr(self, name), str):
                raise CompileError(f"--{name} must be a string, not {getattr(self, name)!r}")
        if not isinstance(self.patterns, (tuple, list)) or not all(
            isinstance(p, str) for p in self.patterns
        ):
            raise CompileError(
                f"--patterns must be N:M strings such as ('2:4',), not {self.patterns!r}"
            )
        for name in ("activation_bits", "weight_bits"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not all(number(b, True) for b in value):
                raise CompileError(f"--{name.replace('_', '-')} must be 8 and/or 16, not {value!r}")


@dataclass
class LayerChoice:
    """The pattern and activation width chosen for one linear layer, and the calibration
    error of each candidate."""

    layer: int
    name: str
    shape: tuple[int, int]
    pattern: str
    bits: int
    weight_bits: int
    error: float
    candidates: dict[str, float] = field(default_factory=dict)
    clipped: int = 0  # weights clipped to their width (``method="gptq"`` only)


#: Largest magnitude of a quantized activation per width. 16 bits stop at 127 * 256 + 127 so
#: that both digits of :func:`split_digits` are int8.
ACT_LIMIT = {8: 127, 16: 127 * 256 + 127}


def quantize_activations(x: np.ndarray, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-token quantization: ``(q [tokens, n], scale [tokens] float64)``.

    ``scale = max|x| / limit`` (1 for a zero token; ``limit`` 127 for 8 bits, 32639 for 16),
    round half to even: the element-wise unit's ``QUANTIZE``. ``q`` is int8 for 8 bits and
    int32 for 16 (:func:`split_digits` gives the engine's two int8 digits).
    """
    limit = ACT_LIMIT[bits]
    x = np.asarray(x, dtype=np.float64)
    peak = np.abs(x).max(axis=-1)
    scale = np.where(peak > 0, peak / limit, 1.0)
    q = np.clip(np.rint(x / scale[..., None]), -limit, limit)
    return q.astype(np.int8 if bits == 8 else np.int32), scale


def split_digits(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """16-bit activations as two int8 digits ``(hi, lo)`` with ``q = 256 * hi + lo``."""
    q = np.asarray(q, dtype=np.int64)
    hi = np.floor_divide(q + 128, 256)
    return hi.astype(np.int8), (q - 256 * hi).astype(np.int8)


def calibrate(model, ids) -> tuple[dict, list]:
    """Float forward pass over ``ids``: every linear layer's input, every layer's keys.

    Returns ``(inputs, keys)``: ``inputs[(layer, name)]`` float64 [T, in]; ``keys[layer]``
    [Hkv, T, head_dim] after RoPE.
    """
    import torch

    c = model.config
    inputs, keys = {}, []
    with torch.no_grad():
        x = model.embed(ids)
        positions = torch.arange(len(ids), device=model.device)
        for layer in range(c.n_layers):
            p = f"blk.{layer}."
            h = model._rmsnorm(x, model.w[p + "attn_norm.weight"])
            for name in ("attn_q", "attn_k", "attn_v"):
                inputs[(layer, name)] = h
            q, k, v = model.attn_in(layer, x, positions)
            q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
            keys.append(k.double().cpu().numpy())
            g = c.gqa_group
            o = torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(g, 0), v.repeat_interleave(g, 0), is_causal=True
            )
            o = o.transpose(0, 1).reshape(len(ids), -1)
            inputs[(layer, "attn_output")] = o
            x = x + o @ model.w[p + "attn_output.weight"].T
            h = model._rmsnorm(x, model.w[p + "ffn_norm.weight"])
            inputs[(layer, "ffn_gate")] = inputs[(layer, "ffn_up")] = h
            gate, up = h @ model.w[p + "ffn_gate.weight"].T, h @ model.w[p + "ffn_up.weight"].T
            act = torch.nn.functional.silu(gate) * up
            inputs[(layer, "ffn_down")] = act
            x = x + act @ model.w[p + "ffn_down.weight"].T
    inputs = {key: t.double().cpu().numpy() for key, t in inputs.items()}
    return inputs, keys


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def quantize_weights(w, bits: int, group: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric weights: ``(q, scales)``; int8 for 8 bits
    (:func:`~tandem.mappings.nm.quantize_per_channel`'s rule), int32 within +-32639 for 16 (two
    int8 digits by :func:`split_digits`). One scale per row (``scales`` [rows]) or, with
    ``group`` columns per scale, one per row and column block (``scales`` [rows, blocks])."""
    w = np.asarray(w, dtype=np.float64)
    rows, cols = w.shape
    if group:
        if cols % group:
            raise CompileError(f"--weight-group {group} does not divide a layer's {cols} columns")
        q, scales = quantize_weights(w.reshape(rows * (cols // group), group), bits)
        return q.reshape(rows, cols), scales.reshape(rows, cols // group)
    if bits == 8:
        return quantize_per_channel(w)
    if not np.isfinite(w).all():
        raise CompileError("weights hold NaN or infinity")
    q, scales = quantize_activations(w, 16)  # one scale per row, the same rule
    return q, scales.astype(np.float32)


def column_scales(scales: np.ndarray, cols: int) -> np.ndarray:
    """Per-row ``[rows]`` or per-block ``[rows, blocks]`` scales as ``[rows, cols]``."""
    scales = np.asarray(scales, dtype=np.float64)
    if scales.ndim == 1:
        return np.broadcast_to(scales[:, None], (len(scales), cols))
    return np.repeat(scales, cols // scales.shape[1], axis=1)


def layer_error(w_int: np.ndarray, scales, x: np.ndarray, bits: int, reference) -> float:
    """Relative L2 error of the quantized layer's output on ``x`` against ``reference``."""
    xq, xs = quantize_activations(x, bits)
    x_int = xq.astype(np.float64) * xs[:, None]
    w_real = w_int.astype(np.float64) * column_scales(scales, w_int.shape[1])
    return _relative(x_int @ w_real.T, reference)


def solve_layer(
    w, x, pattern: NMPattern, bits: int, *, block: int = 128, damp: float = 0.01, group: int = 0
):
    """Prune and quantize ``w`` [out, in] column by column, compensating each column's error in
    the columns not yet done (GPTQ, Frantar et al., ICLR 2023; with N:M masks chosen inside the
    sweep as SparseGPT does, Frantar and Alistarh, ICML 2023).

    The error measure is ``||(W - Q) X^T||`` on the calibration inputs ``x`` [T, in]: with
    ``H = X^T X`` (damped by ``damp`` x its mean diagonal) and the upper Cholesky factor ``U``
    of ``H^-1``, column ``j`` is quantized (or zeroed by the mask) and its error, divided by
    ``U[j, j]``, is subtracted from the later columns along ``U[j, j+1:]``. Masks are chosen per
    group of M columns when the sweep reaches the group, by ``w^2 / U[j, j]^2`` summed over
    each row pair (decode's matrix-vector mode needs pairs to share their columns). Scales are
    per row (or per row and ``group`` columns) from the original weights (``max |w| / limit``),
    fixed, as GPTQ keeps them (its "static groups").

    Returns ``(q, scales, clipped)``: ``q`` and ``scales`` as :func:`quantize_weights`
    gives them, ``clipped`` the number of weights whose compensated value fell outside the
    width and was clipped to it (reported per layer in ``summary.json``).
    """
    w = np.asarray(w, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    rows, cols = w.shape
    limit = ACT_LIMIT[bits]
    if group and cols % group:
        raise CompileError(f"--weight-group {group} does not divide a layer's {cols} columns")
    peak = np.abs(w.reshape(rows, -1, group or cols)).max(axis=2)
    scales = np.where(peak > 0, peak / limit, 1.0)  # [rows, blocks]
    per_column = column_scales(scales, cols)
    if not group:
        scales = scales[:, 0]
    h = x.T @ x
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    h[np.diag_indices(cols)] += damp * np.mean(np.diag(h))
    try:
        u = np.linalg.cholesky(np.linalg.inv(h)).T
    except np.linalg.LinAlgError:  # not positive definite after damping: plain rounding
        return (*quantize_weights(w, bits, group), 0)
    work = w.copy()
    work[:, dead] = 0.0
    q = np.zeros((rows, cols), dtype=np.int64)
    m = pattern.m
    block = max(m, block - block % m)
    keep = np.ones((rows, cols), dtype=bool)
    clipped = 0
    for b0 in range(0, cols, block):
        b1 = min(b0 + block, cols)
        wb = work[:, b0:b1].copy()
        errs = np.zeros_like(wb)
        ub = u[b0:b1, b0:b1]
        for j in range(b1 - b0):
            col = b0 + j
            if not pattern.dense and col % m == 0:
                width = min(m, b1 - b0 - j)
                score = wb[:, j : j + width] ** 2 / np.diag(ub)[j : j + width] ** 2
                pad = np.zeros((rows % 2, width))
                pairs = np.concatenate([score, pad]).reshape(-1, 2, width).sum(axis=1)
                score = np.repeat(pairs, 2, axis=0)[:rows]
                order = np.argsort(-score, axis=1, kind="stable")[:, : pattern.n]
                group = np.zeros((rows, width), dtype=bool)
                np.put_along_axis(group, order, True, axis=1)
                keep[:, col : col + width] = group
            column = wb[:, j]
            unclipped = np.rint(column / per_column[:, col])
            clipped += int(np.count_nonzero((np.abs(unclipped) > limit) & keep[:, col]))
            qi = np.clip(unclipped, -limit, limit) * keep[:, col]
            q[:, col] = qi
            err = (column - qi * per_column[:, col]) / ub[j, j]
            wb[:, j:] -= np.outer(err, ub[j, j:])
            errs[:, j] = err
        work[:, b1:] -= errs @ u[b0:b1, b1:]
    return q.astype(np.int8 if bits == 8 else np.int32), scales.astype(np.float32), clipped


def choose_pattern(w: np.ndarray, x: np.ndarray, options: CompileOptions):
    """Prune and quantize ``w`` [out, in] for calibration inputs ``x`` [T, in].

    Returns ``(pattern, activation bits, weight bits, quantized weights, scales, error, clipped
    weights, {"N:M/wW/aB": error})``: the sparsest candidate pattern, then the narrowest
    weights, then the narrowest activations, whose relative output error (quantized weights and
    per-token activations, against float) is within the budget; else the candidate with the
    least error.
    """
    reference = x @ w.T
    importance = np.linalg.norm(x, axis=0) if options.criterion == "activation" else None
    ranked = sorted((NMPattern.parse(t) for t in options.patterns), key=lambda p: p.n / p.m)
    errors, best = {}, None
    for pattern in ranked:
        pruned = None
        if options.method == "round" and not pattern.dense:
            pruned = prune_magnitude(w, pattern, pair_rows=True, importance=importance)
        for wbits in sorted(options.weight_bits):
            group = options.weight_group
            if options.method == "gptq":
                q, scales, clipped = solve_layer(w, x, pattern, wbits, group=group)
            else:  # round-to-nearest from the row's (or block's) own peak: nothing clips
                q, scales = quantize_weights(w if pruned is None else pruned, wbits, group)
                clipped = 0
            for bits in sorted(options.activation_bits):
                error = layer_error(q, scales, x, bits, reference)
                errors[_label(pattern, wbits, bits)] = error
                if best is None or error < best[5]:
                    best = (pattern, bits, wbits, q, scales, error, clipped)
                if error <= options.budget:
                    return pattern, bits, wbits, q, scales, error, clipped, errors
    return (*best, errors)


def _label(pattern, wbits: int, bits: int) -> str:
    return f"{pattern}/a{bits}" if wbits == 8 else f"{pattern}/w16/a{bits}"


def _key_factors(keys: list, strength: float) -> np.ndarray:
    """Static per-channel key smoothing [layers, Hkv, head_dim] from calibration keys."""
    from tandem.host.hpu.params import key_smoothing

    return np.stack([[key_smoothing(k, strength=strength) for k in layer] for layer in keys])


def compile_model(
    model,
    tokenizer,
    out_dir: Path,
    options: CompileOptions,
    *,
    text: str,
    model_label: str,
    log=print,
) -> dict:
    """Compile ``model`` into ``out_dir``; returns the summary (also ``summary.json``).

    ``out_dir`` receives ``weights.npz`` (packed int8 values, indices, channel scales, norm
    vectors, static key smoothing), ``decode.bin`` and ``prefill_<lo>_<hi>.bin`` (program
    images, :func:`~tandem.mappings.llm.isa.encode_program`), ``program.json`` (tensor table,
    buffers, buckets) and ``summary.json``. Files are written to a temporary folder first and
    moved in place, so a failed compile leaves nothing half-written.
    """
    from tandem.host.hpu.params import KEY_SMOOTHING_STRENGTH

    from tandem.generate import staged_output

    started = time.perf_counter()
    if not isinstance(options, CompileOptions):
        raise CompileError(f"options must be CompileOptions, not {type(options).__name__}")
    if not isinstance(text, str):
        raise CompileError(f"text must be a string, not {type(text).__name__}")
    out_dir = check_output_folder(out_dir)
    c = getattr(model, "config", None)
    _check_compilable(c, model, options, model_label)
    ids = tokenizer.encode(text)[: options.calibration_tokens]
    if len(ids) < 8:
        raise CompileError(f"calibration text gives {len(ids)} tokens; at least 8 are needed")
    log(f"calibrating on {len(ids)} tokens")
    inputs, keys = calibrate(model, ids)
    arrays: dict[str, np.ndarray] = {}
    choices: list[LayerChoice] = []
    wide, wide_weights = [], []
    for layer in range(c.n_layers):
        chosen = {}
        for name in LINEARS:
            w = model.w[f"blk.{layer}.{name}.weight"].double().cpu().numpy()
            chosen[name] = (w, *choose_pattern(w, inputs[(layer, name)], options))
        for group, names in prog.INPUT_GROUPS.items():
            # One quantization of a shared input: the widest its readers chose.
            bits = max(chosen[n][2] for n in names)
            if bits == 16:
                wide.append((layer, group))
            for name in names:
                w, pattern, own_bits, wbits, q, scales, error, clipped, errors = chosen[name]
                if own_bits != bits:
                    x = inputs[(layer, name)]
                    error = layer_error(q, scales, x, bits, x @ w.T)
                _store_weights(arrays, f"blk.{layer}.{name}", q, scales, pattern, wbits)
                if wbits == 16:
                    wide_weights.append((layer, name))
                choices.append(
                    LayerChoice(
                        layer,
                        name,
                        tuple(w.shape),
                        str(pattern),
                        bits,
                        wbits,
                        error,
                        errors,
                        clipped,
                    )
                )
        for norm in ("attn_norm", "ffn_norm"):
            arrays[f"blk.{layer}.{norm}"] = model.w[f"blk.{layer}.{norm}.weight"].cpu().numpy()
        log(
            f"layer {layer}: "
            + " ".join(
                f"{ch.name}={_label(ch.pattern, ch.weight_bits, ch.bits)}"
                for ch in choices[-len(LINEARS) :]
            )
        )
    arrays["key_factors"] = _key_factors(keys, KEY_SMOOTHING_STRENGTH)
    card = prog.CardShape.for_model(c, options.tile, wide, wide_weights, options.weight_group)
    compiled = prog.compile_programs(card, options.max_prefill)
    summary = _compile_summary(model_label, c, options, ids, compiled, arrays, choices, wide)
    try:
        with staged_output(out_dir, compiled.images, flag="-o") as staging:
            np.savez(staging / "weights.npz", **arrays)
            for name, image in compiled.images.items():
                (staging / name).write_bytes(image)
            (staging / "program.json").write_text(json.dumps(compiled.table, indent=1) + "\n")
            summary["compile_s"] = round(time.perf_counter() - started, 2)
            (staging / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    except UserError as exc:  # the folder could not be written: a ValueError to the API too
        raise CompileError(str(exc)) from None
    for stale in set(out_dir.glob("prefill_*.bin")) - {out_dir / n for n in compiled.images}:
        stale.unlink(missing_ok=True)  # a former compile's buckets beyond this one's
    return summary


def _check_compilable(c, model, options: CompileOptions, model_label: str) -> None:
    """Raise :class:`CompileError` unless ``model`` (config ``c``) is a Llama-architecture model
    the HPU serves and ``options.weight_group`` divides every layer's columns."""
    from tandem.host.hpu.params import HpuParams
    from tandem.host.system.model import LlamaConfig

    if not isinstance(c, LlamaConfig):
        # calibrate() and the programs are Llama's layer (RMSNorm, SwiGLU, one RoPE base).
        raise CompileError(
            f"{model_label}: architecture {type(model).__name__}, expected Llama (tandem "
            "compile takes Llama-architecture models only)"
        )
    try:  # ATTEND runs on the HPU: refuse a head_dim or GQA group it has no configuration for
        HpuParams.for_model(c)
    except UserError as exc:
        raise CompileError(f"the HPU cannot serve this model: {exc}") from None
    group = options.weight_group
    columns = {c.dim, c.hidden, c.n_heads * c.head_dim}
    if group and any(cols % group for cols in columns):
        raise CompileError(
            f"--weight-group {group} must divide every layer's columns "
            f"({', '.join(map(str, sorted(columns)))})"
        )


def _store_weights(arrays: dict, key: str, q, scales, pattern, wbits: int) -> None:
    """Put one linear's packed weights (two digit planes when ``wbits`` is 16), scales,
    pattern and shape into ``arrays`` under ``key``."""
    planes = split_digits(q) if wbits == 16 else (q,)
    for plane, suffix in zip(planes, ("", ".lo"), strict=False):
        packed = pack_nm(plane, pattern)  # scales: stored beside, [rows(, blocks)]
        arrays[key + suffix + ".values"] = packed.values
        arrays[key + suffix + ".indices"] = packed.indices
    arrays[key + ".scales"] = scales
    arrays[key + ".pattern"] = np.asarray([pattern.n, pattern.m], dtype=np.int64)
    arrays[key + ".shape"] = np.asarray(q.shape, dtype=np.int64)


def _compile_summary(model_label, c, options, ids, compiled, arrays, choices, wide) -> dict:
    """``summary.json`` of a compile (without ``compile_s``)."""
    weight_bytes = sum(
        int(v.nbytes) for k, v in arrays.items() if k.endswith((".values", ".indices", ".scales"))
    )
    dense_bytes = sum(ch.shape[0] * ch.shape[1] for ch in choices)
    summary = {
        "model": model_label,
        "config": asdict(c),
        "options": asdict(options),
        "calibration_tokens": len(ids),
        "instructions": compiled.instructions,
        "storage_bytes": compiled.storage_bytes,
        "storage_bytes_per_length": compiled.storage_bytes_per_length,
        "storage_ratio": compiled.storage_bytes_per_length / compiled.storage_bytes,
        "buckets": [list(b) for b in compiled.buckets],
        "on_chip_bytes": compiled.on_chip_bytes,
        "weight_bytes": weight_bytes,
        "dense_int8_weight_bytes": dense_bytes,
        "patterns": {f"{ch.layer}.{ch.name}": ch.pattern for ch in choices},
        "activation_bits": {f"{ch.layer}.{ch.name}": ch.bits for ch in choices},
        "weight_bits": {f"{ch.layer}.{ch.name}": ch.weight_bits for ch in choices},
        "wide_inputs": len(wide),
        "layer_errors": {f"{ch.layer}.{ch.name}": round(ch.error, 6) for ch in choices},
        "candidate_errors": {
            f"{ch.layer}.{ch.name}": {k: round(v, 6) for k, v in ch.candidates.items()}
            for ch in choices
        },
        "weight_group": options.weight_group,
        "clipped_weights": sum(ch.clipped for ch in choices),
        "clipped_per_layer": {f"{ch.layer}.{ch.name}": ch.clipped for ch in choices if ch.clipped},
        "pattern_counts": _counts(_label(ch.pattern, ch.weight_bits, ch.bits) for ch in choices),
    }
    return summary


def check_output_folder(out_dir) -> Path:
    """``out_dir`` as a folder a compile may write: one that can be created (or is), and that
    is missing, empty or a former compile's output (its ``program.json`` says so); anything
    else is a :class:`CompileError`."""
    try:
        out_dir = output_dir(out_dir, "-o")
        if not out_dir.exists() or not any(out_dir.iterdir()):
            return out_dir
    except UserError as exc:
        raise CompileError(str(exc)) from None
    except OSError as exc:  # a folder it may not list
        raise CompileError(f"-o {out_dir}: {exc.strerror}") from None
    try:
        table = json.loads((out_dir / "program.json").read_text())
        former = table.get("format") == "tandem-llm-program 1"
    except (OSError, ValueError, AttributeError):
        former = False
    if not former:
        raise CompileError(
            f"-o {out_dir}: a folder that is not a tandem compile output; give a new or empty one"
        )
    return out_dir


def _counts(patterns) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in patterns:
        counts[p] = counts.get(p, 0) + 1
    return dict(sorted(counts.items()))
