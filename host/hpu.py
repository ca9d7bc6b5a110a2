"""``hpu``: decode attention over a KV cache in device memory — parameters, formats, golden model.

One request covers one sequence and one KV head: ``G = gqa_group`` query vectors attend over
the ``length`` tokens of the sequence. The engine appends the new token's k and v (when the
request carries them), reads every other K and V row once, and runs a one-pass online softmax.

Number formats (every width below is a parameter or derived from one)
----------------------------------------------------------------------
``k``, ``v``
    int8 per element, one IEEE binary16 scale per token (``k_real = k * k_scale``).
``q``
    int8 or int16 (``q_bits``) per element. Its per-vector scale is folded, by the host, into
    one binary16 *score scale* per query: ``c = q_scale * log2(e) / sqrt(head_dim)``
    (:func:`score_scale`), so that scores come out in log2 units and softmax needs only 2**x.
Scales in hardware
    A binary16 value is ``mant * 2**exp`` with ``mant = (1 << 10) | fraction`` (no implicit
    one when the exponent field is 0) and ``exp = max(field, 1) - 25``. The sign bit is
    ignored; the host rejects negative, infinite and NaN scales.
Dot product
    ``dot = sum(q * k)`` exact in ``q_bits + 8 + log2(row elements)`` bits.
Score
    ``s = dot * c * k_scale`` as a signed fixed-point number with ``score_frac_bits``
    fraction bits and ``score_int_bits`` integer bits, rounded half up, saturating.
Online softmax (per row)
    ``m`` is the running maximum (starts at the most negative score). For each row
    ``e = exp2(-|s - m|)`` (one ``exp2`` unit per query); if ``s > m`` the max grows and
    ``alpha = e, p = 1`` else ``alpha = 1, p = e``. ``alpha`` and ``p`` are unsigned with
    ``prob_frac_bits`` fraction bits; 1.0 is exact, so rows that do not grow the max leave
    ``l`` and ``o`` untouched by the rescale. ``l <- round(l * alpha) + p``.
Value weight
    ``w = p * v_scale`` unsigned, ``weight_bits`` wide with ``weight_frac_bits`` fraction bits,
    rounded half up, saturating (v scales above ``2**(weight_bits - weight_frac_bits)``
    saturate).
Accumulator
    ``o <- round(o * alpha) + w * v`` per element, signed, ``o_bits`` wide: exact integer
    products, never overflows (the width covers ``max_seq_len`` tokens).
Result
    Full mode: ``y = o / l`` using ``reciprocal`` on ``l`` (``recip_frac_bits`` fraction bits)
    then one multiply, rounded half up to ``out_frac_bits`` and saturated to ``out_bits``.
    Partial mode: ``(m, l, o)`` for the request's slice of the sequence, merged on the host
    exactly as FlashDecoding does (:func:`merge_partials`).

The golden model is bit-exact with the gateware and vectorized over tokens: between two rows
that grow the running maximum, ``l`` and ``o`` are plain integer sums, so only the (usually
few) rows that grow it are handled one at a time.
"""

import math
import struct
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from tandem.mappings.kv_layout import BLOCK_BYTES, PAGE_TOKENS, KvLayout

from tandem.config import ParamError, Params, param

from .exp2 import Exp2Params, exp2_golden
from .fixed import round_shift_right, saturate
from .reciprocal import ReciprocalParams, reciprocal_golden

__all__ = [
    "HEADER_BYTES",
    "HpuParams",
    "HpuRequest",
    "HpuResult",
    "decode_result",
    "decode_scales",
    "descriptor_beats",
    "hpu_golden",
    "key_smoothing",
    "merge_partials",
    "pack_descriptor",
    "quantize_rows",
    "read_port_bursts",
    "request_beats",
    "score_scale",
    "unpack_results",
]

#: Bytes of the descriptor header (one 64-byte block, little-endian; see pack_descriptor).
HEADER_BYTES = 64
LOG2_E = 1.0 / math.log(2.0)


@dataclass(frozen=True)
class HpuParams(Params):
    """Shape, memory interface and number formats of the ``hpu`` attention engine.

    Memory: K and V rows are read through ``read_ports`` AXI4 read masters of
    ``mem_data_bits`` (``8 * lanes``: one beat is one cycle's worth of int8 elements), in
    bursts of at most ``max_burst_beats`` beats with up to ``max_outstanding`` bursts in flight
    per port. With one port, K and V share its bandwidth, so a request takes twice the cycles
    of two ports. See :mod:`tandem.mappings.kv_layout` for the layout and
    :func:`read_port_bursts` for the bursts each port issues.
    """

    design = "hpu"

    head_dim: int = param(64, "elements per query, key and value vector", choices=(32, 64, 128))
    lanes: int = param(
        32,
        "int8 elements of K or V consumed per cycle per read port",
        min=8,
        max=64,
        power_of_two=True,
    )
    gqa_group: int = param(
        3, "query vectors per KV head (grouped-query attention; 1 = multi-head)", min=1, max=8
    )
    max_seq_len: int = param(
        4096, "longest sequence (tokens) one request may cover", min=1, max=131072
    )
    mem_data_bits: int = param(
        256,
        "data width of every AXI4 port in bits; must equal 8 * lanes",
        choices=(64, 128, 256, 512),
    )
    read_ports: int = param(
        2,
        "AXI4 read masters: 2 (k_axi reads K, v_axi reads V) or 1 (kv_axi reads a page's K "
        "part, then its V part)",
        choices=(1, 2),
    )
    max_outstanding: int = param(
        16, "read bursts in flight per port before the address channel waits", min=1, max=64
    )
    max_burst_beats: int = param(
        16, "longest read burst in beats (AXI4 allows 256)", min=1, max=256, power_of_two=True
    )
    addr_bits: int = param(32, "AXI address width", min=16, max=64)
    q_bits: int = param(
        16,
        "query element width: int16 (default: smoothed queries need the range) or int8",
        choices=(8, 16),
    )
    score_int_bits: int = param(
        9,
        "integer bits of a score in log2 units (saturating; exp2 underflows long before)",
        min=4,
        max=16,
    )
    score_frac_bits: int = param(10, "fraction bits of a score in log2 units", min=4, max=16)
    prob_frac_bits: int = param(
        16, "fraction bits of the softmax weights p, alpha and of the sum l", min=8, max=20
    )
    weight_bits: int = param(
        26,
        "width of the unsigned value weight w = p * v_scale (w * v fits one 27x18 DSP)",
        min=10,
        max=26,
    )
    weight_frac_bits: int = param(
        24,
        "fraction bits of w (v scales up to 2**(weight_bits - weight_frac_bits) fit)",
        min=8,
        max=30,
    )
    out_bits: int = param(24, "width of each signed full-mode output element", min=8, max=32)
    out_frac_bits: int = param(16, "fraction bits of each full-mode output element", min=0, max=30)

    def check(self) -> None:
        if self.mem_data_bits != 8 * self.lanes:
            raise ParamError(
                "mem_data_bits",
                f"mem_data_bits must be 8 * lanes ({8 * self.lanes}) so that one beat feeds one "
                f"cycle, not {self.mem_data_bits!r}",
            )
        if self.out_frac_bits >= self.out_bits:
            raise ParamError(
                "out_frac_bits",
                f"out_frac_bits must be below out_bits ({self.out_bits}), "
                f"not {self.out_frac_bits!r}",
            )
        if self.weight_frac_bits + self.recip_frac_bits < self.out_frac_bits:
            raise ParamError(
                "out_frac_bits",
                f"out_frac_bits must not exceed weight_frac_bits + reciprocal fraction bits, "
                f"not {self.out_frac_bits!r}",
            )

    # --- derived sizes -------------------------------------------------------------------
    @cached_property
    def layout(self) -> KvLayout:
        """The KV layout (:class:`tandem.mappings.kv_layout.KvLayout`) for ``head_dim``."""
        return KvLayout(self.head_dim)

    @property
    def beat_bytes(self) -> int:
        """Bytes per memory (and descriptor) beat."""
        return self.mem_data_bits // 8

    @property
    def read_port_names(self) -> tuple[str, ...]:
        """Names of the AXI4 read ports, in the order of :func:`read_port_bursts`."""
        return ("k_axi", "v_axi") if self.read_ports == 2 else ("kv_axi",)

    @property
    def row_elems(self) -> int:
        """Elements per stored row, padding included (padding meets zero query elements)."""
        return self.layout.row_bytes

    @property
    def row_beats(self) -> int:
        """Beats per K or V row."""
        return self.row_elems // self.lanes

    @property
    def scale_beats(self) -> int:
        """Beats per 64-byte scale block."""
        return BLOCK_BYTES // self.beat_bytes

    @property
    def q_beats(self) -> int:
        """Descriptor beats per query vector (``row_elems`` elements of ``q_bits``)."""
        return self.row_elems * self.q_bits // self.mem_data_bits

    @property
    def header_beats(self) -> int:
        """Descriptor beats of the 64-byte header."""
        return HEADER_BYTES // self.beat_bytes

    @property
    def position_bits(self) -> int:
        """Bits of a token count 0..max_seq_len."""
        return self.max_seq_len.bit_length()

    @property
    def dot_bits(self) -> int:
        """Signed width of an exact q.k dot product."""
        return self.q_bits + 8 + (self.row_elems - 1).bit_length()

    @property
    def score_bits(self) -> int:
        """Signed width of a score."""
        return 1 + self.score_int_bits + self.score_frac_bits

    @property
    def l_bits(self) -> int:
        """Unsigned width of the running sum l (at most max_seq_len * 1.0)."""
        return self.prob_frac_bits + self.position_bits

    @property
    def o_bits(self) -> int:
        """Signed width of an accumulator element: sum of max_seq_len products w * v."""
        return self.weight_bits + 8 + self.position_bits

    @property
    def word_bits(self) -> int:
        """Width of one element of a result beat (o, y, m or l, sign-extended)."""
        return self.o_bits

    @property
    def recip_frac_bits(self) -> int:
        """Fraction bits of 1/l; l >= 1, so 1/l keeps 16 significant bits up to max_seq_len."""
        return 16 + self.position_bits

    @property
    def score_min(self) -> int:
        """Most negative score: the running maximum's start value."""
        return -(1 << (self.score_bits - 1))

    @cached_property  # validated once: the golden model reads it on every request
    def exp2(self) -> Exp2Params:
        """The ``exp2`` unit: input -|s - m| saturates at -32, far below p's resolution."""
        return Exp2Params(
            in_int_bits=5,
            in_frac_bits=self.score_frac_bits,
            out_frac_bits=self.prob_frac_bits,
            lut_bits=min(6, self.score_frac_bits),
            lut_frac_bits=self.prob_frac_bits + 4,
        )

    @cached_property
    def reciprocal(self) -> ReciprocalParams:
        """The ``reciprocal`` unit computing 1/l."""
        return ReciprocalParams(
            in_bits=self.l_bits,
            in_frac_bits=self.prob_frac_bits,
            out_bits=self.recip_frac_bits + 1,
            out_frac_bits=self.recip_frac_bits,
            seed_bits=6,
            newton_steps=2,
            work_frac_bits=min(24, 62 - self.l_bits),
        )

    @property
    def out_shift(self) -> int:
        """Right shift from o * (1/l) to the output format."""
        return self.weight_frac_bits + self.recip_frac_bits - self.out_frac_bits


# --- binary16 scales ---------------------------------------------------------------------
def decode_scales(scales) -> tuple[np.ndarray, np.ndarray]:
    """``(mant, exp)`` int64 arrays with ``scale = mant * 2**exp``, as the gateware decodes.

    The sign bit is ignored, like in the gateware.
    """
    bits = np.asarray(scales, dtype=np.float16).view(np.uint16).astype(np.int64)
    field = (bits >> 10) & 0x1F
    mant = (bits & 0x3FF) | np.where(field != 0, 1 << 10, 0)
    return mant, np.maximum(field, 1) - 25


def _check_scales(name: str, scales) -> np.ndarray:
    scales = np.asarray(scales, dtype=np.float16)
    if not np.all(np.isfinite(scales)) or np.any(scales < 0) or np.any(np.signbit(scales)):
        raise ValueError(f"{name} must be finite, non-negative binary16 values")
    return scales


def score_scale(q_scale, head_dim: int) -> np.ndarray:
    """The binary16 score scale ``q_scale * log2(e) / sqrt(head_dim)`` the descriptor carries."""
    return np.asarray(np.asarray(q_scale, np.float64) * LOG2_E / math.sqrt(head_dim), np.float16)


def key_smoothing(keys, floor: float = 1e-3) -> np.ndarray:
    """Per-channel factors ``s`` that flatten K's channels before per-token quantization.

    ``s[c] = max_t |K[t, c]|`` (at least ``floor``). The host stores ``K / s`` and sends
    ``q * s``: the scores are unchanged, but every channel of ``K / s`` spans [-1, 1], so one
    int8 scale per token no longer spends its range on a few large channels (SmoothQuant's
    idea, applied to attention). On SmolLM2-135M it cuts the worst output error from 5.5 % to
    2 % (``python benchmarks/hpu_error.py``). Compute it once per (layer, KV head) from the
    cache the prefill produced.
    """
    return np.maximum(np.abs(np.asarray(keys, dtype=np.float64)).max(axis=0), floor)


def quantize_rows(x, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row quantization of ``x`` [..., d] to ``bits``-bit integers.

    Returns ``(values int64, scales float16)``; the scale is ``max|x| / (2**(bits-1) - 1)``
    rounded to binary16, and values are ``x / scale`` rounded to nearest and clipped.
    """
    x = np.asarray(x, dtype=np.float64)
    top = (1 << (bits - 1)) - 1
    scales = (np.abs(x).max(axis=-1) / top).astype(np.float16)
    safe = np.where(scales > 0, scales.astype(np.float64), 1.0)
    values = np.clip(np.rint(x / safe[..., None]), -top, top).astype(np.int64)
    return values, scales


# --- requests, descriptors and results ---------------------------------------------------
@dataclass
class HpuRequest:
    """One decode-attention request for one sequence and one KV head.

    Attributes
    ----------
    seq_id
        Tag echoed on every result beat.
    base
        Byte address of the sequence's KV region (64-byte aligned).
    length
        Tokens attended over, the new one included when ``append``.
    q
        Integer queries [gqa_group, head_dim].
    q_scale
        binary16 score scale per query (see :func:`score_scale`).
    new_k, new_v, new_k_scale, new_v_scale
        The new token (position ``length - 1``) when ``append``; else ``None``.
    partial
        Return ``(m, l, o)`` instead of ``o / l``.
    """

    seq_id: int
    base: int
    length: int
    q: np.ndarray
    q_scale: np.ndarray
    new_k: np.ndarray | None = None
    new_v: np.ndarray | None = None
    new_k_scale: float = 0.0
    new_v_scale: float = 0.0
    partial: bool = False

    @property
    def append(self) -> bool:
        return self.new_k is not None


def _row_bytes(values, elems: int, bits: int) -> bytes:
    padded = np.zeros(elems, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64).reshape(-1)
    padded[: len(values)] = values
    return padded.astype("<i1" if bits == 8 else "<i2").tobytes()


def read_port_bursts(params: HpuParams, base: int, rows: int) -> dict[str, list]:
    """The read bursts each port issues for ``rows`` stored rows of the region at ``base``.

    Returns ``{port name: [Burst, ...]}`` in issue order. Two ports: ``k_axi`` reads the K part
    of every page, ``v_axi`` the V part. One port: ``kv_axi`` reads a page's K part, then its
    V part, then the next page. Bursts never cross a page part, so grouping by page is exact.
    """
    p = params
    layout = p.layout

    def part(value):
        return layout.read_bursts(
            base, rows, value=value, beat_bytes=p.beat_bytes, max_beats=p.max_burst_beats
        )

    k_bursts, v_bursts = part(False), part(True)
    if p.read_ports == 2:
        return {"k_axi": k_bursts, "v_axi": v_bursts}
    by_page: dict[int, list] = {}
    for burst in k_bursts + v_bursts:  # K before V within each page
        by_page.setdefault((burst.address - base) // layout.page_bytes, []).append(burst)
    return {"kv_axi": [b for page in sorted(by_page) for b in by_page[page]]}


def request_beats(params: HpuParams, contexts, *, append: bool = True, partial: bool = False):
    """``(R, D, O)``: read beats per port, descriptor beats and result beats per request.

    ``contexts`` are sequence lengths including the new token (arrays allowed). ``R`` counts
    the beats one read port carries: the K (or V) part of every page with two ports, both parts
    with one. ``D`` equals ``len(pack_descriptor(...)) / beat_bytes`` and ``R`` the beats of
    :func:`read_port_bursts`; the engine's cycle models (the golden transport, the performance
    model) read these counts from here.
    """
    p = params
    t = np.asarray(contexts, dtype=np.int64)
    n = t - 1 if append else t
    pages = -(-n // PAGE_TOKENS)
    reads = (pages * p.scale_beats + n * p.row_beats) * (2 // p.read_ports)
    desc = p.header_beats + (2 * p.row_beats if append else 0) + p.gqa_group * p.q_beats
    out = p.gqa_group * (p.row_beats + (1 if partial else 0))
    return reads, np.full_like(t, desc), np.full_like(t, out)


def pack_descriptor(params: HpuParams, request: HpuRequest) -> bytes:
    """The bytes of ``request`` on the descriptor stream, beat after beat.

    Header (64 bytes, little-endian): ``seq_id`` u32 at 0, ``length`` u32 at 4, ``base`` u64 at
    8, flags u8 at 16 (bit 0 append, bit 1 partial), new k scale and new v scale binary16 at 20
    and 22, score scale of query g binary16 at ``24 + 2 g``. Then, when appending, the new k
    row and the new v row (``row_elems`` int8 each, zero-padded); then the ``gqa_group``
    queries, ``row_elems`` elements of ``q_bits`` each, zero-padded.
    """
    p = params
    if not 1 <= request.length <= p.max_seq_len:
        raise ValueError(f"length must be in 1..{p.max_seq_len}, not {request.length}")
    p.layout.check_base(request.base)
    q = np.asarray(request.q, dtype=np.int64).reshape(p.gqa_group, p.head_dim)
    q_scale = _check_scales("q_scale", request.q_scale).reshape(p.gqa_group)
    flags = int(request.append) | (int(request.partial) << 1)
    header = struct.pack("<IIQB3x", request.seq_id, request.length, request.base, flags)
    new_scales = np.array([request.new_k_scale, request.new_v_scale], dtype=np.float16)
    _check_scales("new k/v scale", new_scales)
    header += new_scales.astype("<f2").tobytes() + q_scale.astype("<f2").tobytes()
    out = [header.ljust(HEADER_BYTES, b"\0")]
    if request.append:
        out.append(_row_bytes(request.new_k, p.row_elems, 8))
        out.append(_row_bytes(request.new_v, p.row_elems, 8))
    for g in range(p.gqa_group):
        out.append(_row_bytes(q[g], p.row_elems, p.q_bits))
    return b"".join(out)


def descriptor_beats(params: HpuParams, request: HpuRequest) -> list[int]:
    """``request``'s descriptor as ``desc_i`` payloads: byte b of a beat in bits 8b+7:8b."""
    data = pack_descriptor(params, request)
    step = params.beat_bytes
    return [int.from_bytes(data[i : i + step], "little") for i in range(0, len(data), step)]


def decode_result(params: HpuParams, payload: int) -> tuple[list[int], int, int]:
    """``(words, tag, last)`` of one ``result_o`` payload (words signed, word 0 in the LSBs)."""
    width, lanes = params.word_bits, params.lanes
    mask, sign = (1 << width) - 1, 1 << (width - 1)
    words = []
    for i in range(lanes):
        word = (payload >> (i * width)) & mask
        words.append(word - (1 << width) if word & sign else word)
    tag = (payload >> (lanes * width)) & 0xFFFFFFFF
    last = (payload >> (lanes * width + 32)) & 1
    return words, tag, last


@dataclass
class HpuResult:
    """What one request returns (integers in the formats of :class:`HpuParams`).

    ``y`` [G, head_dim] in full mode, else ``None``; ``m`` [G], ``l`` [G] and ``o``
    [G, head_dim] always (the engine emits them only in partial mode).
    """

    seq_id: int
    m: np.ndarray
    l: np.ndarray  # noqa: E741 (the running sum's name in every softmax paper)
    o: np.ndarray
    y: np.ndarray | None

    def real(self, params: HpuParams) -> np.ndarray:
        """Full-mode output as float64 [G, head_dim]."""
        return self.y / float(1 << params.out_frac_bits)


def result_words(params: HpuParams, result: HpuResult, partial: bool) -> list[list[int]]:
    """Words of the result beats the engine emits for ``result``, beat by beat.

    Per query: ``row_beats`` beats of y (full) or o (partial), ``lanes`` elements each (the
    padding elements of 32-wide heads included); in partial mode one more beat with m in word 0
    and l in word 1.
    """
    p = params
    beats = []
    values = result.o if partial else result.y
    for g in range(p.gqa_group):
        row = np.zeros(p.row_elems, dtype=np.int64)
        row[: p.head_dim] = values[g]
        beats.extend(row.reshape(p.row_beats, p.lanes).tolist())
        if partial:
            beats.append([int(result.m[g]), int(result.l[g])] + [0] * (p.lanes - 2))
    return beats


def unpack_results(params: HpuParams, beats, partial: bool, seq_id: int = 0) -> HpuResult:
    """Rebuild an :class:`HpuResult` from the word lists of one request's result beats."""
    p = params
    per_query = p.row_beats + (1 if partial else 0)
    if len(beats) != p.gqa_group * per_query:
        raise ValueError(f"expected {p.gqa_group * per_query} result beats, got {len(beats)}")
    words = np.asarray(beats, dtype=np.int64).reshape(p.gqa_group, per_query, p.lanes)
    values = words[:, : p.row_beats].reshape(p.gqa_group, p.row_elems)[:, : p.head_dim]
    if partial:
        return HpuResult(seq_id, words[:, -1, 0], words[:, -1, 1], values, None)
    return HpuResult(seq_id, np.zeros(0), np.zeros(0), np.zeros(0), values)


# --- golden model --------------------------------------------------------------------------
def _mul_round(a, b, shift: int) -> np.ndarray:
    """``round_half_up(a * b / 2**shift)`` exactly, whatever the width of the product.

    Used where products of the engine's wide accumulators can exceed 63 bits; Python integers
    keep them exact and the arrays involved are small (one accumulator row).
    """
    product = np.asarray(a, dtype=np.int64).astype(object) * np.asarray(b, dtype=np.int64)
    return np.asarray((product + (1 << (shift - 1))) >> shift, dtype=object)


def _scale_product(value, mant, exp, shift: int, bits: int, signed: bool):
    """``value * mant * 2**(exp + shift)`` rounded half up and saturated, like the gateware."""
    product = np.asarray(value, dtype=np.int64) * mant
    total = np.asarray(exp + shift, dtype=np.int64)
    lo, hi = -(1 << bits), 1 << bits
    left = np.clip(product, lo, hi) << np.clip(total, 0, None)
    right = round_shift_right(product, np.clip(-total, 0, 62))
    return saturate(np.where(total >= 0, left, right), bits, signed)


def hpu_golden(params: HpuParams, q, q_scale, k, k_scale, v, v_scale, partial: bool = False):
    """Bit-exact model of the ``hpu`` engine for one request.

    Parameters
    ----------
    params
        The engine's parameters.
    q
        Integer queries [gqa_group, head_dim] (``q_bits`` wide).
    q_scale
        binary16 score scales [gqa_group] (:func:`score_scale`).
    k, v
        int8 rows [n, head_dim], position order, the appended token last.
    k_scale, v_scale
        binary16 per-token scales [n].
    partial
        Also leave ``y`` out (the engine returns ``(m, l, o)`` instead).

    Returns
    -------
    HpuResult
    """
    p = params
    q = np.asarray(q, dtype=np.int64).reshape(p.gqa_group, p.head_dim)
    k = np.asarray(k, dtype=np.int64).reshape(-1, p.head_dim)
    v = np.asarray(v, dtype=np.int64).reshape(-1, p.head_dim)
    n = len(k)
    if not 1 <= n <= p.max_seq_len:
        raise ValueError(f"sequence length must be in 1..{p.max_seq_len}, not {n}")
    one = 1 << p.prob_frac_bits
    c_mant, c_exp = decode_scales(q_scale)
    k_mant, k_exp = decode_scales(k_scale)
    v_mant, v_exp = decode_scales(v_scale)
    dots = q @ k.T  # [G, n], exact
    scores = _scale_product(
        dots,
        c_mant[:, None] * k_mant[None, :],
        c_exp[:, None] + k_exp[None, :],
        p.score_frac_bits,
        p.score_bits,
        True,
    )
    exp2_lo = -(1 << (p.exp2.in_width - 1))
    ms, ls, os_ = [], [], []
    for g in range(p.gqa_group):
        s = scores[g]
        previous = np.concatenate([[p.score_min], np.maximum.accumulate(s)[:-1]])
        grew = s > previous
        e = exp2_golden(p.exp2, np.maximum(-np.abs(s - previous), exp2_lo))
        alpha = np.where(grew, e, one)
        prob = np.where(grew, one, e)
        w = _scale_product(
            prob, v_mant, v_exp, p.weight_frac_bits - p.prob_frac_bits, p.weight_bits, False
        )
        contributions = w[:, None] * v  # [n, d]
        # Segments start at row 0 and at every row that grows the max; inside a segment
        # alpha is exactly 1.0, so l and o are plain sums there.
        starts = np.flatnonzero(grew | (np.arange(n) == 0))
        l_sums = np.add.reduceat(prob, starts)
        o_sums = np.add.reduceat(contributions, starts, axis=0)
        l_acc, o_acc = 0, np.zeros(p.head_dim, dtype=np.int64)
        for index, start in enumerate(starts):
            a = int(alpha[start])
            l_acc = ((l_acc * a + (one >> 1)) >> p.prob_frac_bits) + int(l_sums[index])
            if a != one:  # rescaling by exactly 1.0 is the identity
                o_acc = _mul_round(o_acc, a, p.prob_frac_bits).astype(np.int64)
            o_acc = o_acc + o_sums[index]
        ms.append(int(s.max()))
        ls.append(l_acc)
        os_.append(o_acc)
    m = np.maximum(np.array(ms, dtype=np.int64), p.score_min)
    l_final = np.array(ls, dtype=np.int64)
    o = np.stack(os_)
    y = None
    if not partial:
        r = reciprocal_golden(p.reciprocal, l_final)
        lo, hi = -(1 << (p.out_bits - 1)), (1 << (p.out_bits - 1)) - 1
        y = np.clip(_mul_round(o, r[:, None], p.out_shift), lo, hi).astype(np.int64)
    return HpuResult(0, m, l_final, o, y)


def merge_partials(params: HpuParams, partials) -> np.ndarray:
    """Merge ``(m, l, o)`` results of disjoint slices of one sequence, as FlashDecoding does.

    Returns the attention output as float64 [G, head_dim]: with ``M = max m_i``,
    ``sum_i o_i 2**(m_i - M) / sum_i l_i 2**(m_i - M)`` in real units.
    """
    p = params
    m = np.stack([r.m for r in partials]).astype(np.float64) / (1 << p.score_frac_bits)
    top = m.max(axis=0)
    factor = np.exp2(m - top)  # [parts, G]
    l_real = np.stack([r.l for r in partials]) / float(1 << p.prob_frac_bits)
    o_real = np.stack([r.o for r in partials]) / float(1 << p.weight_frac_bits)
    total_l = (factor * l_real).sum(axis=0)
    total_o = (factor[..., None] * o_real).sum(axis=0)
    return total_o / total_l[:, None]
