"""Where the HPU's KV cache lives in device memory: the one layout every side reads.

The golden model, the gateware's address generator, the cocotb testbench and the host runtime
all take addresses from :class:`KvLayout`, so a change here changes all of them together.

Layout of one (sequence, KV head) region, starting at a 64-byte aligned ``base``::

    page 0: [K scales: 64 B][K rows 0..31][V scales: 64 B][V rows 0..31]
    page 1: [K scales: 64 B][K rows 32..63][V scales: 64 B][V rows 32..63]
    ...

* Tokens are stored contiguously by position in pages of :data:`PAGE_TOKENS` = 32 tokens, so
  the address of any token follows from its position alone and a sequence grows without
  knowing its final length.
* A row holds one token's ``head_dim`` elements (int8, or little-endian int16 with
  ``elem_bytes=2``: the ``kv_bits`` of :class:`~tandem.host.hpu.params.HpuParams`), zero-padded
  to ``row_bytes`` (a multiple of 64), so every row is 64-byte aligned.
* A scale block holds the 32 per-token scales of its page as IEEE binary16, little-endian,
  token ``t`` at byte ``2 * (t % 32)``: one 64-byte block, read in the same burst as the rows
  it scales ("beside the rows").
* K part first, V part second, so the engine reads each with one run of bursts per page.

With ``value_offset`` set (the split layout of a card, where an engine's K port and V port
each own a pseudo-channel), the K parts of a region lie page after page from ``base`` and each
V part ``value_offset`` bytes above its K part::

    base:                 [K scales][K rows 0..31][K scales][K rows 32..63]...
    base + value_offset:  [V scales][V rows 0..31][V scales][V rows 32..63]...

so a region's K and V are two spans of :meth:`KvLayout.region_bytes` each, in different
channels.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["BLOCK_BYTES", "PAGE_TOKENS", "Burst", "KvLayout"]

#: Bytes in one aligned block: HBM's interleave granule and the row alignment.
BLOCK_BYTES = 64
#: Tokens per page: one 64-byte block of binary16 scales.
PAGE_TOKENS = BLOCK_BYTES // 2
#: AXI bursts must not cross a 4 KiB boundary.
AXI_BOUNDARY = 4096


@dataclass(frozen=True)
class Burst:
    """One AXI read burst: start byte address and number of beats."""

    address: int
    beats: int


@dataclass(frozen=True)
class KvLayout:
    """Address arithmetic of the KV cache for one head dimension.

    Parameters
    ----------
    head_dim
        Elements per K or V row.
    elem_bytes
        Bytes per element: 1 (int8) or 2 (int16, little-endian).
    value_offset
        0 (a page's V part right after its K part) or the bytes from each K part to its V part
        in the split layout (a positive multiple of 64).
    """

    head_dim: int
    elem_bytes: int = 1
    value_offset: int = 0

    def __post_init__(self):
        if self.elem_bytes not in (1, 2):
            raise ValueError(f"elem_bytes must be 1 or 2, not {self.elem_bytes!r}")
        if self.value_offset < 0 or self.value_offset % BLOCK_BYTES:
            raise ValueError(
                f"value_offset must be a non-negative multiple of {BLOCK_BYTES}, "
                f"not {self.value_offset!r}"
            )

    @property
    def dtype(self) -> np.dtype:
        """numpy type of a stored element: int8 or little-endian int16."""
        return np.dtype(np.int8) if self.elem_bytes == 1 else np.dtype("<i2")

    @property
    def row_bytes(self) -> int:
        """Bytes per stored row: ``head_dim`` elements rounded up to 64 bytes."""
        return -(-self.head_dim * self.elem_bytes // BLOCK_BYTES) * BLOCK_BYTES

    @property
    def row_elems(self) -> int:
        """Elements per stored row, padding included."""
        return self.row_bytes // self.elem_bytes

    @property
    def part_bytes(self) -> int:
        """Bytes of the K (or V) part of a page: one scale block and 32 rows."""
        return BLOCK_BYTES + PAGE_TOKENS * self.row_bytes

    @property
    def page_bytes(self) -> int:
        """Bytes per page (K part and V part)."""
        return 2 * self.part_bytes

    @property
    def split(self) -> bool:
        """Whether K parts and V parts lie in two spans ``value_offset`` apart."""
        return self.value_offset > 0

    @property
    def page_stride(self) -> int:
        """Bytes from one page's K part to the next page's: a page, or a part when split."""
        return self.part_bytes if self.split else self.page_bytes

    @property
    def value_shift(self) -> int:
        """Bytes from a K part (row, scale) to its V part (row, scale)."""
        return self.value_offset if self.split else self.part_bytes

    @property
    def token_bytes(self) -> int:
        """Bytes one token takes in a region: its K and V rows and their two scales."""
        return self.page_bytes // PAGE_TOKENS

    def region_bytes(self, length: int) -> int:
        """Bytes from ``base`` a region of ``length`` tokens spans (whole pages); in the split
        layout its V parts span as many bytes from ``base + value_offset``."""
        return -(-length // PAGE_TOKENS) * self.page_stride

    def region_end(self, bases, lengths):
        """One past the last byte the regions at ``bases`` of ``lengths`` tokens take (their V
        span's end in the split layout); arrays allowed."""
        lengths = np.asarray(lengths)
        end = np.asarray(bases) + -(-lengths // PAGE_TOKENS) * self.page_stride
        return end + (self.value_offset if self.split else 0)

    def _part_base(self, base: int, position, value: bool):
        page = np.asarray(position) // PAGE_TOKENS
        return base + page * self.page_stride + (self.value_shift if value else 0)

    def row_address(self, base: int, position, *, value: bool = False):
        """Byte address of the K (or, with ``value=True``, V) row of ``position``."""
        offset = np.asarray(position) % PAGE_TOKENS
        return self._part_base(base, position, value) + BLOCK_BYTES + offset * self.row_bytes

    def scale_address(self, base: int, position, *, value: bool = False):
        """Byte address of the binary16 K (or V) scale of ``position``."""
        offset = np.asarray(position) % PAGE_TOKENS
        return self._part_base(base, position, value) + 2 * offset

    def check_base(self, base: int) -> None:
        """Raise ``ValueError`` unless ``base`` is a non-negative multiple of 64."""
        if base < 0 or base % BLOCK_BYTES:
            raise ValueError(f"KV base address must be a multiple of {BLOCK_BYTES}, not {base:#x}")

    def read_bursts(
        self, base: int, rows: int, *, value: bool, beat_bytes: int, max_beats: int
    ) -> list[Burst]:
        """The bursts that read the K (or V) part of the first ``rows`` tokens, in order.

        Each page contributes its scale block and its first ``min(32, rows left)`` rows as one
        contiguous span, cut into bursts of at most ``max_beats`` beats that never cross a
        4 KiB boundary. The gateware issues exactly these; the performance model counts them.
        """
        bursts = []
        for first in range(0, rows, PAGE_TOKENS):
            count = min(PAGE_TOKENS, rows - first)
            address = int(self._part_base(base, first, value))
            end = address + BLOCK_BYTES + count * self.row_bytes
            while address < end:
                to_boundary = AXI_BOUNDARY - address % AXI_BOUNDARY
                beats = min(max_beats, (end - address) // beat_bytes, to_boundary // beat_bytes)
                bursts.append(Burst(address, beats))
                address += beats * beat_bytes
        return bursts

    def write_rows(self, memory, base: int, start: int, rows, scales, *, value: bool) -> None:
        """Store integer ``rows`` [n, head_dim] and binary16 ``scales`` [n] from ``start`` on.

        ``memory`` is a writable uint8 buffer (numpy array, bytearray or mmap) indexed by byte
        address. Vectorized over rows.
        """
        rows = np.asarray(rows).reshape(-1, self.head_dim)
        self.write_tokens(memory, base, start + np.arange(len(rows)), rows, scales, value=value)

    def write_tokens(self, memory, bases, positions, rows, scales, *, value: bool) -> None:
        """Store one row [head_dim] and binary16 scale per (``bases``, ``positions``) pair.

        ``bases`` and ``positions`` broadcast together (several regions at once); ``rows`` is
        [..., head_dim] and ``scales`` [...] in their broadcast shape. Only the row's
        ``head_dim`` elements and the scale's two bytes are written.
        """
        view = _bytes(memory)
        bases, positions = np.broadcast_arrays(np.asarray(bases), np.asarray(positions))
        rows = self._elements(rows).reshape(-1, self.head_dim)
        scales = np.asarray(scales, dtype=np.float16).reshape(-1)
        row_at = self.row_address(bases, positions, value=value).reshape(-1)
        width = self.head_dim * self.elem_bytes
        view[row_at[:, None] + np.arange(width)] = rows.view(np.uint8).reshape(-1, width)
        scale_at = self.scale_address(bases, positions, value=value).reshape(-1)
        scale_bytes = scales.astype("<f2").view(np.uint8).reshape(-1, 2)
        view[scale_at[:, None] + np.arange(2)] = scale_bytes

    def write_kv_tokens(self, memory, bases, positions, k, k_scale, v, v_scale) -> None:
        """:meth:`write_tokens` of K and V rows at once (addresses computed once): ``k``,
        ``v`` [count, head_dim] and binary16 scales [count] at 1-D ``bases``, ``positions``."""
        view = _bytes(memory)
        bases, positions = np.asarray(bases), np.asarray(positions)
        offset = positions % PAGE_TOKENS
        k_part = bases + positions // PAGE_TOKENS * self.page_stride
        k_row = k_part + BLOCK_BYTES + offset * self.row_bytes
        rows = np.stack([self._elements(k), self._elements(v)])
        starts = np.stack([k_row, k_row + self.value_shift])
        width = self.head_dim * self.elem_bytes
        view[starts[..., None] + np.arange(width)] = rows.view(np.uint8).reshape(
            *starts.shape, width
        )
        words = view[: view.size - view.size % 2].view("<u2")
        scale_word = k_part // 2 + offset
        scales = np.stack([np.asarray(k_scale, "<f2"), np.asarray(v_scale, "<f2")])
        words[np.stack([scale_word, scale_word + self.value_shift // 2])] = scales.view("<u2")

    def read_rows(self, memory, base: int, start: int, count: int, *, value: bool):
        """``(rows [count, head_dim], scales float16 [count])`` stored from ``start`` on."""
        return self.read_tokens(memory, base, start + np.arange(count), value=value)

    def read_tokens(self, memory, bases, positions, *, value: bool):
        """``(rows [..., head_dim], scales float16 [...])`` at (``bases``, ``positions``).

        ``bases`` and ``positions`` broadcast together, so one call reads the rows of many
        regions. Only the part asked for is read (``memory`` may hold the K span alone).
        """
        view = _bytes(memory)
        bases, positions = np.broadcast_arrays(np.asarray(bases), np.asarray(positions))
        width = self.head_dim * self.elem_bytes
        row_at = self.row_address(bases, positions, value=value).reshape(-1)
        rows = view[row_at[:, None] + np.arange(width)].view(self.dtype)
        scale_at = self.scale_address(bases, positions, value=value).reshape(-1)
        scales = view[scale_at[:, None] + np.arange(2)].view("<f2").astype(np.float16)
        return rows.reshape(*bases.shape, self.head_dim), scales.reshape(bases.shape)

    def read_kv_tokens(self, memory, bases, positions):
        """``(k, k_scale, v, v_scale)`` at (``bases``, ``positions``), addresses computed once
        and K and V gathered together (the golden backend reads a whole batch this way)."""
        view = _bytes(memory)
        bases, positions = np.broadcast_arrays(np.asarray(bases), np.asarray(positions))
        shape = bases.shape
        offset = (positions % PAGE_TOKENS).reshape(-1)
        k_part = (bases + positions // PAGE_TOKENS * self.page_stride).reshape(-1)
        per_row = self.row_bytes // BLOCK_BYTES
        v_blocks = self.value_shift // BLOCK_BYTES  # from a K row (or scale) to its V one
        blocks = view[: view.size - view.size % self.row_bytes].reshape(-1, BLOCK_BYTES)
        row_block = (k_part + BLOCK_BYTES + offset * self.row_bytes) // BLOCK_BYTES
        index = np.stack([row_block, row_block + v_blocks])  # [2, count]
        if per_row > 1:
            index = index[..., None] + np.arange(per_row)
        rows = blocks[index].reshape(2, -1, self.row_bytes)
        rows = rows[..., : self.head_dim * self.elem_bytes].view(self.dtype)
        words = view[: view.size - view.size % 2].view("<u2")
        scale_word = k_part // 2 + offset
        scales = words[np.stack([scale_word, scale_word + v_blocks * BLOCK_BYTES // 2])]
        scales = scales.view("<f2").astype(np.float16)
        k, v = rows.reshape(2, *shape, self.head_dim)
        k_scale, v_scale = scales.reshape(2, *shape)
        return k, k_scale, v, v_scale

    def read_regions(self, memory, bases, lengths):
        """``(k, k_scale, v, v_scale)`` of the first ``lengths[r]`` tokens of the regions at
        ``bases[r]``: int8 rows [R, N, head_dim] and binary16 scales [R, N] with
        ``N = max(lengths)``, zero beyond each region's length.

        Reads each region's pages as one contiguous span (a region stores its tokens in
        position order, page after page), so no per-token address is computed: what the
        golden backend reads for a batch of attention requests. Rows come as the stored
        type (int8, or int16 with ``elem_bytes=2``).
        """
        view = _bytes(memory)
        bases = np.asarray(bases, dtype=np.int64).reshape(-1)
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        count, d = len(bases), self.head_dim
        longest = int(lengths.max()) if count else 0
        pages = -(-longest // PAGE_TOKENS)
        rows = np.zeros((count, 2, pages, PAGE_TOKENS, self.row_bytes), dtype=np.uint8)
        scales = np.zeros((count, 2, pages, PAGE_TOKENS), dtype="<u2")
        scale_words = BLOCK_BYTES // 2
        for r, (base, length) in enumerate(zip(bases.tolist(), lengths.tolist())):
            used = -(-length // PAGE_TOKENS)
            if self.split:
                k, v = (
                    view[at : at + used * self.part_bytes]
                    for at in (base, base + self.value_offset)
                )
                span = np.stack([k, v]).reshape(2, used, self.part_bytes).transpose(1, 0, 2)
            else:
                span = view[base : base + used * self.page_bytes]
                span = span.reshape(used, 2, self.part_bytes)
            rows[r, :, :used] = (
                span[:, :, BLOCK_BYTES:].reshape(used, 2, PAGE_TOKENS, -1).transpose(1, 0, 2, 3)
            )
            scales[r, :, :used] = (
                span[:, :, :BLOCK_BYTES].view("<u2")[..., :scale_words].transpose(1, 0, 2)
            )
        width = d * self.elem_bytes
        rows = rows.reshape(count, 2, pages * PAGE_TOKENS, self.row_bytes)[:, :, :longest, :width]
        scales = scales.reshape(count, 2, pages * PAGE_TOKENS)[:, :, :longest].view("<f2")
        beyond = np.arange(longest) >= lengths[:, None]  # [R, N]: rows past a region's end
        if beyond.any():
            rows = np.where(beyond[:, None, :, None], 0, rows)
            scales = np.where(beyond[:, None, :], 0, scales)
        rows = np.ascontiguousarray(rows).view(self.dtype)
        return rows[:, 0], scales[:, 0], rows[:, 1], scales[:, 1]

    def _elements(self, rows) -> np.ndarray:
        """``rows`` as the stored element type, checked to fit it (no silent wrap-around)."""
        values = np.asarray(rows)
        info = np.iinfo(self.dtype)
        if values.size and (values.min() < info.min or values.max() > info.max):
            raise ValueError(
                f"KV elements must fit {8 * self.elem_bytes} bits ({info.min}..{info.max})"
            )
        return np.ascontiguousarray(values, dtype=self.dtype)


def _bytes(memory) -> np.ndarray:
    """``memory`` (numpy uint8 array, bytearray or mmap) as a uint8 array view."""
    return np.frombuffer(memory, dtype=np.uint8) if not isinstance(memory, np.ndarray) else memory
