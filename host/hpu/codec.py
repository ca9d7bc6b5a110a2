"""``hpu`` wire formats: requests, descriptors on ``desc_i``, result beats on ``result_o``.

The host packs a :class:`HpuRequest` into descriptor bytes (:func:`pack_descriptor`); the
engine's result beats come back as words (:func:`decode_result`) and are rebuilt into an
:class:`HpuResult` (:func:`unpack_results`). Both backends of the device go through here.
"""

import struct
from dataclasses import dataclass

import numpy as np

from .params import HEADER_BYTES, HpuParams, check_scales

__all__ = [
    "HpuRequest",
    "HpuResult",
    "decode_result",
    "descriptor_beats",
    "pack_descriptor",
    "read_port_bursts",
    "result_words",
    "unpack_results",
]


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
    q_scale = check_scales("q_scale", request.q_scale).reshape(p.gqa_group)
    flags = int(request.append) | (int(request.partial) << 1)
    header = struct.pack("<IIQB3x", request.seq_id, request.length, request.base, flags)
    new_scales = np.array([request.new_k_scale, request.new_v_scale], dtype=np.float16)
    check_scales("new k/v scale", new_scales)
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
