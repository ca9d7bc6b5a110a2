"""``hpu`` wire formats: requests, descriptors on ``desc_i``, result beats on ``result_o``.

The host packs a :class:`HpuRequest` into descriptor bytes (:func:`pack_descriptor`); the
engine's result beats come back as words (:func:`decode_result`) and are rebuilt into an
:class:`HpuResult` (:func:`unpack_results`). Both backends of the device go through here.

The descriptor header and the result beat are field lists (:data:`HEADER_FIELDS`,
:func:`result_fields`): the host packs and unpacks through them
(:mod:`tandem.host.common.bits`), and the gateware views its header registers and its result
payload through the Amaranth layouts built from the same lists (:func:`header_layout`,
:func:`result_layout`).
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from tandem.host.common import bits

from .params import HEADER_BYTES, HpuParams, check_scales

__all__ = [
    "HEADER_FIELDS",
    "HeaderField",
    "HpuBatch",
    "HpuRequest",
    "HpuResult",
    "HpuResults",
    "decode_result",
    "descriptor_beats",
    "header_fields",
    "header_layout",
    "pack_descriptor",
    "pack_header",
    "read_port_bursts",
    "result_error",
    "result_fields",
    "result_layout",
    "result_words",
    "unpack_header",
    "unpack_results",
]


# --- the descriptor header and the result beat as field lists ----------------------------
class HeaderField(NamedTuple):
    """One field of the descriptor header.

    Attributes
    ----------
    name : str
        The field's name (in :func:`pack_header`'s values and the gateware's view).
    offset : int
        Bit offset in the header; byte ``b`` of the header is bits ``8b + 7 .. 8b``.
    width : int
        Bits of one element.
    kind : str
        ``"uint"`` (unsigned integer), ``"flag"`` (one bit) or ``"binary16"`` (IEEE half
        float; the host passes floats, the gateware sees the 16 bits).
    per_query : bool
        One element per query of the GQA group (``gqa_group`` of them, element g at
        ``offset + g * width``).
    """

    name: str
    offset: int
    width: int
    kind: str
    per_query: bool = False


#: The 64-byte descriptor header (little-endian): ``seq_id`` u32 at byte 0, ``length`` u32 at
#: byte 4, ``base`` u64 at byte 8, the flags byte 16 (bit 0 ``append``, bit 1 ``partial``),
#: the new token's k and v scales binary16 at bytes 20 and 22, the score scale of query g
#: binary16 at byte ``24 + 2 g``. Every other bit is zero.
HEADER_FIELDS = (
    HeaderField("seq_id", 0, 32, "uint"),
    HeaderField("length", 32, 32, "uint"),
    HeaderField("base", 64, 64, "uint"),
    HeaderField("append", 128, 1, "flag"),
    HeaderField("partial", 129, 1, "flag"),
    HeaderField("new_k_scale", 160, 16, "binary16"),
    HeaderField("new_v_scale", 176, 16, "binary16"),
    HeaderField("score_scale", 192, 16, "binary16", per_query=True),
)


def header_fields(params: HpuParams) -> tuple[bits.Field, ...]:
    """:data:`HEADER_FIELDS` as a :mod:`~tandem.host.common.bits` field list for ``params``."""
    return tuple(
        bits.Field(f.name, f.width, False, params.gqa_group if f.per_query else None, f.offset)
        for f in HEADER_FIELDS
    )


def header_layout(params: HpuParams):
    """The header as an Amaranth ``data.FlexibleLayout`` of ``8 * HEADER_BYTES`` bits.

    Every field of :data:`HEADER_FIELDS` at its offset (``score_scale`` an ``ArrayLayout`` of
    ``gqa_group`` 16-bit elements); the gateware views its header beats, concatenated (beat 0
    lowest), through it.
    """
    return bits.layout(header_fields(params), size=8 * HEADER_BYTES)


def _binary16_bits(name: str, values) -> np.ndarray:
    return check_scales(name, values).astype("<f2").view("<u2").astype(np.int64)


def pack_header(params: HpuParams, values: dict) -> bytes:
    """The 64 header bytes of ``values`` (``{field name: value}``, every field of the list).

    ``binary16`` fields take floats (non-negative, finite; ``score_scale`` ``gqa_group`` of
    them), the others integers in range.
    """
    raw = {}
    for field in HEADER_FIELDS:
        value = values[field.name]
        if field.kind == "binary16":
            value = _binary16_bits(field.name, value)
            value = value if field.per_query else int(value.reshape(-1)[0])
        raw[field.name] = value
    return bits.pack(header_fields(params), raw).to_bytes(HEADER_BYTES, "little")


def unpack_header(params: HpuParams, data: bytes) -> dict:
    """Field values of a descriptor's header (its first ``HEADER_BYTES`` bytes).

    Integers for ``uint`` and ``flag`` fields, ``numpy.float16`` for ``binary16`` ones
    (``score_scale``: an array of ``gqa_group``).
    """
    if len(data) < HEADER_BYTES:
        raise ValueError(f"a descriptor header is {HEADER_BYTES} bytes, not {len(data)}")
    raw = bits.unpack(header_fields(params), int.from_bytes(data[:HEADER_BYTES], "little"))
    out = {}
    for field in HEADER_FIELDS:
        value = raw[field.name]
        if field.kind == "binary16":
            value = np.asarray(value, dtype="<u2").view(np.float16)
            value = value if field.per_query else value[()]
        out[field.name] = value
    return out


def result_fields(params: HpuParams) -> tuple[bits.Field, ...]:
    """The ``result_o`` payload: ``data`` (``lanes`` signed words of ``word_bits``, word 0
    lowest), ``tag`` (u32, the sequence id), ``last`` (final beat of a request) and ``error``
    (on every beat of a request that failed in memory: a read or write response other than
    OKAY, or a ``base`` not a multiple of 64 bytes; its data are void)."""
    return (
        bits.Field("data", params.word_bits, True, params.lanes),
        bits.Field("tag", 32),
        bits.Field("last", 1),
        bits.Field("error", 1),
    )


def result_layout(params: HpuParams):
    """The ``result_o`` payload as an Amaranth ``data.StructLayout`` (:func:`result_fields`)."""
    return bits.layout(result_fields(params))


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
    score_scale
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
    score_scale: np.ndarray
    new_k: np.ndarray | None = None
    new_v: np.ndarray | None = None
    new_k_scale: float = 0.0
    new_v_scale: float = 0.0
    partial: bool = False

    @property
    def append(self) -> bool:
        return self.new_k is not None


@dataclass
class HpuBatch:
    """A batch of requests as arrays, one entry per request (what one descriptor transfer
    carries): the golden backend computes on it at once, the RTL backend packs each request.

    Attributes
    ----------
    seq_id, base, length
        int64 [R], as in :class:`HpuRequest`.
    q
        int64 [R, gqa_group, head_dim].
    score_scale
        float16 [R, gqa_group] score scales.
    append
        bool [R]: the request carries a new token.
    new_k, new_v
        int64 [R, head_dim] (zeros where not appending).
    new_k_scale, new_v_scale
        float16 [R] (zeros where not appending).
    partial
        bool [R].
    """

    seq_id: np.ndarray
    base: np.ndarray
    length: np.ndarray
    q: np.ndarray
    score_scale: np.ndarray
    append: np.ndarray
    new_k: np.ndarray
    new_v: np.ndarray
    new_k_scale: np.ndarray
    new_v_scale: np.ndarray
    partial: np.ndarray

    def __len__(self) -> int:
        return len(self.length)

    def __getitem__(self, index: int) -> HpuRequest:
        """Request ``index`` as an :class:`HpuRequest`."""
        i = index
        request = HpuRequest(
            int(self.seq_id[i]),
            int(self.base[i]),
            int(self.length[i]),
            self.q[i],
            self.score_scale[i],
            partial=bool(self.partial[i]),
        )
        if self.append[i]:
            request.new_k, request.new_v = self.new_k[i], self.new_v[i]
            request.new_k_scale = float(self.new_k_scale[i])
            request.new_v_scale = float(self.new_v_scale[i])
        return request

    def requests(self) -> list[HpuRequest]:
        """Every request, in order."""
        return [self[i] for i in range(len(self))]

    @classmethod
    def of(cls, params: HpuParams, requests) -> "HpuBatch":
        """``requests`` (an :class:`HpuBatch` or a list of :class:`HpuRequest`) as a batch."""
        if isinstance(requests, HpuBatch):
            return requests
        p, count = params, len(requests)
        append = np.array([r.append for r in requests], dtype=bool)
        new_k = np.zeros((count, p.head_dim), dtype=np.int64)
        new_v = np.zeros((count, p.head_dim), dtype=np.int64)
        for i, r in enumerate(requests):
            if r.append:
                new_k[i] = np.reshape(r.new_k, p.head_dim)
                new_v[i] = np.reshape(r.new_v, p.head_dim)
        q = [np.asarray(r.q, dtype=np.int64).reshape(p.gqa_group, p.head_dim) for r in requests]
        score_scale = [np.reshape(r.score_scale, p.gqa_group) for r in requests]
        return cls(
            seq_id=np.array([r.seq_id for r in requests], dtype=np.int64),
            base=np.array([r.base for r in requests], dtype=np.int64),
            length=np.array([r.length for r in requests], dtype=np.int64),
            q=np.stack(q) if count else np.zeros((0, p.gqa_group, p.head_dim), np.int64),
            score_scale=np.array(score_scale, dtype=np.float16).reshape(count, p.gqa_group),
            append=append,
            new_k=new_k,
            new_v=new_v,
            new_k_scale=np.array([r.new_k_scale for r in requests], dtype=np.float16),
            new_v_scale=np.array([r.new_v_scale for r in requests], dtype=np.float16),
            partial=np.array([r.partial for r in requests], dtype=bool),
        )


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
    for bursts, shift in ((k_bursts, 0), (v_bursts, layout.value_shift)):  # K, then V
        for burst in bursts:
            page = (burst.address - base - shift) // layout.page_stride
            by_page.setdefault(page, []).append(burst)
    return {"kv_axi": [b for page in sorted(by_page) for b in by_page[page]]}


def pack_descriptor(params: HpuParams, request: HpuRequest) -> bytes:
    """The bytes of ``request`` on the descriptor stream, beat after beat.

    The header (:data:`HEADER_FIELDS`, 64 bytes, :func:`pack_header`). Then, when appending,
    the new k row and the new v row (``row_elems`` elements of ``kv_bits`` each, zero-padded);
    then the ``gqa_group`` queries, ``row_elems`` elements of ``q_bits`` each, zero-padded.
    """
    p = params
    if not 1 <= request.length <= p.max_seq_len:
        raise ValueError(f"length must be in 1..{p.max_seq_len}, not {request.length}")
    p.layout.check_base(request.base)
    q = np.asarray(request.q, dtype=np.int64).reshape(p.gqa_group, p.head_dim)
    score_scale = check_scales("score_scale", request.score_scale).reshape(p.gqa_group)
    header = {
        "seq_id": request.seq_id,
        "length": request.length,
        "base": request.base,
        "append": int(request.append),
        "partial": int(request.partial),
        "new_k_scale": request.new_k_scale,
        "new_v_scale": request.new_v_scale,
        "score_scale": score_scale,
    }
    out = [pack_header(p, header)]
    if request.append:
        out.append(_row_bytes(request.new_k, p.row_elems, p.kv_bits))
        out.append(_row_bytes(request.new_v, p.row_elems, p.kv_bits))
    for g in range(p.gqa_group):
        out.append(_row_bytes(q[g], p.row_elems, p.q_bits))
    return b"".join(out)


def descriptor_beats(params: HpuParams, request: HpuRequest) -> list[int]:
    """``request``'s descriptor as ``desc_i`` payloads: byte b of a beat in bits 8b+7:8b."""
    data = pack_descriptor(params, request)
    step = params.beat_bytes
    return [int.from_bytes(data[i : i + step], "little") for i in range(0, len(data), step)]


def decode_result(params: HpuParams, payload: int) -> tuple[list[int], int, int]:
    """``(words, tag, last)`` of one ``result_o`` payload (:func:`result_fields`)."""
    fields = bits.unpack(result_fields(params), payload)
    return fields["data"], fields["tag"], fields["last"]


def result_error(params: HpuParams, payload: int) -> bool:
    """The ``error`` flag of one ``result_o`` payload (:func:`result_fields`)."""
    return bool(bits.unpack(result_fields(params), payload)["error"])


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


@dataclass
class HpuResults:
    """What a batch of R requests returns, as arrays (integers in the formats of
    :class:`HpuParams`): what :meth:`HpuDevice.attend_batch` gives and both backends produce.

    A full-mode request's engine output is its ``y`` row; a partial one's its ``m``, ``l`` and
    ``o`` rows. The fields a request's mode does not emit are zero, so the golden and the RTL
    backend's results compare array by array. Indexing gives one request's
    :class:`HpuResult` in the emitted form (``y`` None in partial mode, empty ``m``, ``l``,
    ``o`` in full mode).

    Attributes
    ----------
    seq_id
        int64 [R], the requests' tags.
    partial
        bool [R].
    m, l
        int64 [R, gqa_group].
    o, y
        int64 [R, gqa_group, head_dim].
    """

    seq_id: np.ndarray
    partial: np.ndarray
    m: np.ndarray
    l: np.ndarray  # noqa: E741 (the running sum's name in every softmax paper)
    o: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.seq_id)

    def __getitem__(self, index: int) -> HpuResult:
        seq_id = int(self.seq_id[index])
        if self.partial[index]:
            return HpuResult(seq_id, self.m[index], self.l[index], self.o[index], None)
        return HpuResult(seq_id, _NOTHING, _NOTHING, _NOTHING, self.y[index])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def real(self, params: HpuParams) -> np.ndarray:
        """Full-mode outputs as float64 [R, gqa_group, head_dim] (zero rows for partial ones)."""
        return self.y / float(1 << params.out_frac_bits)

    @classmethod
    def of(cls, params: HpuParams, results: list[HpuResult], partial) -> "HpuResults":
        """Emitted per-request ``results`` (as :func:`unpack_results` rebuilds them) as arrays."""
        p, count = params, len(results)
        partial = np.asarray(partial, dtype=bool).reshape(count)
        m = np.zeros((count, p.gqa_group), dtype=np.int64)
        l_sum = np.zeros((count, p.gqa_group), dtype=np.int64)
        o = np.zeros((count, p.gqa_group, p.head_dim), dtype=np.int64)
        y = np.zeros((count, p.gqa_group, p.head_dim), dtype=np.int64)
        for i, (result, part) in enumerate(zip(results, partial, strict=True)):
            if part:
                m[i], l_sum[i], o[i] = result.m, result.l, result.o
            else:
                y[i] = result.y
        seq_id = np.array([r.seq_id for r in results], dtype=np.int64).reshape(count)
        return cls(seq_id, partial, m, l_sum, o, y)

    @classmethod
    def concat(cls, parts: list["HpuResults"]) -> "HpuResults":
        """The results of consecutive runs of one batch, in order."""
        if len(parts) == 1:
            return parts[0]
        fields = ("seq_id", "partial", "m", "l", "o", "y")
        return cls(*(np.concatenate([getattr(r, f) for r in parts]) for f in fields))


_NOTHING = np.zeros(0, dtype=np.int64)
_NOTHING.flags.writeable = False


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
