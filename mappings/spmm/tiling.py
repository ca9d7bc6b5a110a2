"""T x T tiles of the reordered adjacency and their statistics, vectorized over the non-zeros.

Every non-zero gets one 64-bit key, ``(tile row, tile column, row in tile, column in tile)``
packed so that sorting the keys (numpy's SIMD sort) groups the non-zeros by tile in row-major
order inside each tile.

The keys are not sorted in one piece. They are written into *buckets*, runs of whole tile
rows holding about :data:`BUCKET` non-zeros each: every CSR row goes, whole, to the next free
place of its bucket (a stable scatter whose destinations are counted per row, not per
non-zero). Every key of a bucket is below every key of the next, so the buckets sorted one
by one are the sorted keys; and a bucket is sorted and then scanned while it sits in a core's
cache, instead of one pass over main memory per step. Buckets are independent, so threads
take them in turns. From a bucket's sorted keys, with no Python loop over tiles or non-zeros:

* tile starts: neighbouring keys differ in a bit at or above ``2s`` (``T = 2**s``): one XOR,
  one comparison;
* non-zeros per tile: distances between the starts;
* a tile with one non-zero (on large power-law graphs, nine tiles in ten) has one row and one
  column: nothing more is computed or stored for it (:class:`TileStats` lists the others);
* a tile with two: the XOR of its two keys says whether they share a row (no bit at or above
  ``s``) or a column (no bit below ``s``);
* larger tiles: distinct rows by ``reduceat`` over the row-change flags (a change of a bit at
  or above ``s``); distinct columns by OR of one-hot 64-bit column masks per tile, then a
  population count (``T / 64`` words for tiles wider than 64).
"""

import itertools
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import scipy.sparse as sp

from .graph import Ordering
from .parallel import DEFAULT_THREADS, chunks, run_all, split

__all__ = ["CHUNK", "TileStats", "tile_keys", "tile_stats"]

_GATHER = 1 << 16
"""Non-zeros per block of the key gather."""

CHUNK = 1 << 17
"""Sorted keys scanned at once (cut at tiles): 1 MB of keys, which with the scan's
temporaries stays in a core's 2 MB L2 cache, so each step of the scan reads the cache, not
main memory."""


@dataclass(frozen=True)
class TileStats:
    """The non-empty tiles, sorted by (tile row, tile column).

    A tile with one non-zero has one row and one column. Only the other tiles are listed
    with their statistics (``multi``); :attr:`nnz`, :attr:`rows` and :attr:`cols` expand
    them to every tile on demand.

    Attributes
    ----------
    tile
        Tile edge T (a power of two).
    bands
        Tiles per side: ``ceil(size / T)``.
    tile_id
        ``(m,)`` int64 position of each non-empty tile, packed: ``(tile row << b) | tile
        column`` with ``b`` the bits of a tile index (:attr:`index_bits`), so ids increase
        with (tile row, tile column); :attr:`tile_row` and :attr:`tile_col` unpack them.
    multi
        ``(k,)`` int64 indices of the tiles with more than one non-zero, increasing.
    multi_nnz, multi_rows, multi_cols
        ``(k,)`` int64 non-zeros, distinct rows and distinct columns of those tiles.
    """

    tile: int
    bands: int
    tile_id: np.ndarray
    multi: np.ndarray
    multi_nnz: np.ndarray
    multi_rows: np.ndarray
    multi_cols: np.ndarray

    @classmethod
    def from_arrays(cls, tile, bands, tile_row, tile_col, nnz, rows, cols) -> "TileStats":
        """From per-tile ``(m,)`` arrays of non-zeros, distinct rows and distinct columns."""
        nnz = np.asarray(nnz, np.int64)
        multi = np.flatnonzero(nnz > 1)
        tile_id = np.asarray(tile_row, np.int64) << _index_bits(bands)
        tile_id |= np.asarray(tile_col, np.int64)
        return cls(
            tile=tile,
            bands=bands,
            tile_id=tile_id,
            multi=multi,
            multi_nnz=nnz[multi],
            multi_rows=np.asarray(rows, np.int64)[multi],
            multi_cols=np.asarray(cols, np.int64)[multi],
        )

    @property
    def count(self) -> int:
        """Non-empty tiles."""
        return int(self.tile_id.size)

    @property
    def index_bits(self) -> int:
        """Bits of a tile row or column index in :attr:`tile_id`."""
        return _index_bits(self.bands)

    @cached_property
    def tile_row(self) -> np.ndarray:
        """``(m,)`` int32 tile row of every non-empty tile."""
        return (self.tile_id >> self.index_bits).astype(np.int32)

    @cached_property
    def tile_col(self) -> np.ndarray:
        """``(m,)`` int32 tile column of every non-empty tile."""
        return (self.tile_id & ((1 << self.index_bits) - 1)).astype(np.int32)

    @property
    def singles(self) -> int:
        """Tiles with one non-zero."""
        return self.count - int(self.multi.size)

    @property
    def total(self) -> int:
        """All tiles, empty ones included."""
        return self.bands * self.bands

    @cached_property
    def nnz(self) -> np.ndarray:
        """``(m,)`` int64 non-zeros of every tile."""
        return self._expand(self.multi_nnz)

    @cached_property
    def rows(self) -> np.ndarray:
        """``(m,)`` int64 distinct rows of every tile."""
        return self._expand(self.multi_rows)

    @cached_property
    def cols(self) -> np.ndarray:
        """``(m,)`` int64 distinct columns of every tile."""
        return self._expand(self.multi_cols)

    @property
    def density(self) -> np.ndarray:
        """Non-zeros per tile over T * T."""
        return self.nnz / float(self.tile * self.tile)

    def nnz_sum(self, mask: np.ndarray) -> int:
        """Non-zeros of the tiles where the ``(m,)`` mask is True (without :attr:`nnz`)."""
        return int(np.count_nonzero(mask)) + int((self.multi_nnz[mask[self.multi]] - 1).sum())

    def _expand(self, values: np.ndarray) -> np.ndarray:
        out = np.ones(self.count, np.int64)
        out[self.multi] = values
        return out


@dataclass(frozen=True)
class _Layout:
    """Field widths of the keys: ``b``, ``b``, ``s``, ``s`` bits from the top."""

    tile: int
    s: int
    bands: int
    b: int


def _index_bits(bands: int) -> int:
    """Bits of a tile row or tile column index in a key."""
    return max(1, (bands - 1).bit_length())


def _layout(ordering: Ordering, tile: int) -> _Layout:
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 2 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= 2, not {tile!r}")
    s = tile.bit_length() - 1
    bands = -(-ordering.size // tile)
    b = _index_bits(bands)
    if 2 * (b + s) > 63:
        raise ValueError(f"{ordering.size} nodes in tiles of {tile} do not fit 64-bit keys")
    return _Layout(tile, s, bands, b)


def tile_keys(
    adjacency: sp.csr_matrix, ordering: Ordering, tile: int, *, threads: int = DEFAULT_THREADS
) -> np.ndarray:
    """Sorted ``(tile row, tile column, row in tile, column in tile)`` keys of every non-zero.

    int64; the fields are ``b``, ``b``, ``s`` and ``s`` bits wide (``T = 2**s``, ``b`` the bits
    of a tile index), so sorting the keys sorts the non-zeros by tile in
    row-major order and, inside a tile, by row, then column, and every field is a shift and a
    mask away (no division).
    """
    lay = _layout(ordering, tile)
    s, bands, b = lay.s, lay.bands, lay.b
    position = ordering.position
    if adjacency.shape[0] != position.size:
        raise ValueError(f"{adjacency.shape[0]} nodes but an ordering of {position.size}")
    # The key's fields do not overlap, so it is the sum of a row part and a column part:
    # (tile row << b + 2s) + (row in tile << s) + (tile column << 2s) + column in tile.
    # Both parts are per node; the non-zeros only repeat one and gather the other.
    mask = tile - 1
    row_part = (position >> s) << (b + 2 * s)
    row_part |= (position & mask) << s
    col_part = (position >> s) << (2 * s)
    col_part |= position & mask
    if b + 2 * s <= 31:
        col_part = col_part.astype(np.int32)  # half the table the random gather reads
    counts = np.diff(adjacency.indptr)
    indices = adjacency.indices
    if threads == 1:
        key = np.repeat(row_part, counts)
        _add_gathered(key, col_part, indices)
        key.sort()
        return key
    # With threads: the key array is cut into one part per thread, each a run of whole tile
    # rows with about the same number of non-zeros. Every key of a part is below every key of
    # the next, so sorting each part (one thread each) sorts the array: the same keys as one
    # sort. Blocks of whole rows (CSR order) are keyed by the threads side by side; a key's
    # part is a comparison with the parts' first keys, and each block's keys of a part go to
    # the block's place in that part (non-zeros per block and part counted per row first).
    indptr = adjacency.indptr
    band = position >> s
    per_band = np.bincount(band, weights=counts, minlength=bands)  # exact below 2**53
    total = int(indptr[-1])
    targets = [total * k // threads for k in range(1, threads)]
    cuts = np.searchsorted(np.cumsum(per_band), targets) + 1  # first tile row of parts 2..
    first_keys = [None, *(int(c) << (b + 2 * s) for c in cuts), None]
    piece = 1 << 18  # non-zeros per block: its temporaries stay in cache
    edges = np.unique(
        np.r_[0, np.searchsorted(indptr, np.arange(piece, total, piece), "right") - 1, counts.size]
    )
    blocks = edges.size - 1
    block_of_row = np.repeat(np.arange(blocks), np.diff(edges))
    block_of_row *= threads
    block_of_row += np.searchsorted(cuts, band, side="right")  # (block, part) of each row
    per_block = np.bincount(block_of_row, weights=counts, minlength=blocks * threads)
    per_block = per_block.astype(np.int64).reshape(blocks, threads)
    del block_of_row
    # Where block i's keys of part k go: the part's start, then part k's keys of blocks < i.
    at = np.cumsum(per_block, axis=0) - per_block
    at += np.r_[0, np.cumsum(per_block.sum(axis=0))[:-1]]
    edges = edges.tolist()
    key = np.empty(total, np.int64)

    def fill(i):  # the CSR rows edges[i]:edges[i + 1]
        lo, hi = edges[i], edges[i + 1]
        keys = np.repeat(row_part[lo:hi], counts[lo:hi])
        _add_gathered(keys, col_part, indices[indptr[lo] : indptr[hi]])
        for k in range(threads):
            low, high = first_keys[k], first_keys[k + 1]
            if low is None:
                mine = keys < high
            elif high is None:
                mine = keys >= low
            else:
                mine = (keys >= low) & (keys < high)
            np.compress(mine, keys, out=key[at[i, k] : at[i, k] + per_block[i, k]])

    run_all(threads, [lambda i=i: fill(i) for i in range(blocks)])
    starts = [0, *np.cumsum(per_block.sum(axis=0)).tolist()]
    run_all(threads, [lambda k=k: key[starts[k] : starts[k + 1]].sort() for k in range(threads)])
    return key


def _add_gathered(keys: np.ndarray, table: np.ndarray, indices: np.ndarray) -> None:
    """``keys += table[indices]``, in blocks of :data:`_GATHER` (the slow part: the gather is
    random over the nodes). Small blocks keep the intp copy of the indices and the gathered
    values in cache; ``take`` with ``mode="clip"`` skips the bounds check (CSR indices are in
    range), about 1.5x faster than fancy indexing here."""
    gathered = np.empty(min(_GATHER, indices.size), table.dtype)
    for lo in range(0, indices.size, _GATHER):
        hi = min(lo + _GATHER, indices.size)
        here = gathered[: hi - lo]
        np.take(table, indices[lo:hi].astype(np.intp), out=here, mode="clip")
        keys[lo:hi] += here


def tile_stats(
    adjacency: sp.csr_matrix,
    ordering: Ordering,
    tile: int,
    *,
    threads: int = DEFAULT_THREADS,
    chunk: int = CHUNK,
) -> TileStats:
    """Statistics of every non-empty tile of ``adjacency`` reordered by ``ordering``.

    ``threads``: the key gather, the sort and the scan run on that many threads, on disjoint
    blocks (the same result with any number). ``chunk``: keys per scanned run (whole tiles;
    any positive value gives the same result).
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer, not {chunk!r}")
    lay = _layout(ordering, tile)
    key = tile_keys(adjacency, ordering, tile, threads=threads)
    runs = _tile_runs(key, lay, chunk)
    parts = run_all(
        threads,
        [
            partial(_scan_runs, key, runs[first : last + 1], lay)
            for first, last in split(len(runs) - 1, chunks(threads))
        ],
    )
    del key
    return _assemble([part for found in parts for part in found], lay, threads)


def _tile_runs(key: np.ndarray, lay: _Layout, chunk: int) -> list[int]:
    """Edges of runs of about ``chunk`` sorted keys, each cut at the start of a tile."""
    n = key.size
    if n == 0:
        return [0]
    # The first key of each run's tile: clear the in-tile bits of the key at the cut.
    at = np.arange(chunk, n, chunk)
    first_key = (key[at] >> (2 * lay.s)) << (2 * lay.s)
    return np.unique(np.r_[0, np.searchsorted(key, first_key, "left"), n]).tolist()


def _scan_runs(key: np.ndarray, edges: list[int], lay: _Layout) -> list:
    """The tiles of ``key[edges[i]:edges[i + 1]]`` for each i, in order (one thread)."""
    workspace = _Workspace()
    return [_scan_run(key[lo:hi], lay, workspace) for lo, hi in itertools.pairwise(edges)]


class _Workspace:
    """Temporaries of one thread's scans, grown as needed and reused (no page faults)."""

    def __init__(self):
        self._buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype) -> np.ndarray:
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = np.empty(max(size, 1 << 12), dtype)
        return buffer[:size]


@dataclass
class _Part:
    """The tiles of one scanned run of sorted keys (indices local to the run)."""

    tile_id: np.ndarray
    multi: np.ndarray
    multi_nnz: np.ndarray
    multi_rows: np.ndarray
    multi_cols: np.ndarray


def _scan_run(key: np.ndarray, lay: _Layout, workspace: _Workspace) -> _Part:
    n, s, tile = key.size, lay.s, lay.tile
    change = workspace.get("change", n - 1, np.int64)  # XOR of neighbouring keys
    np.bitwise_xor(key[1:], key[:-1], out=change)
    flag = workspace.get("flag", n, bool)
    flag[0] = True
    np.greater_equal(change, 1 << (2 * s), out=flag[1:])
    starts = np.flatnonzero(flag)
    tile_id = key[starts]
    tile_id >>= 2 * s  # (tile row, tile column): the key without the in-tile fields
    nnz = np.empty(starts.size, np.int64)
    np.subtract(starts[1:], starts[:-1], out=nnz[:-1])
    nnz[-1] = n - starts[-1]
    multi = np.flatnonzero(nnz > 1)
    multi_nnz = nnz[multi]
    first = starts[multi]
    del nnz, starts
    rows = np.empty(multi.size, np.int64)
    cols = np.empty(multi.size, np.int64)
    pair = multi_nnz == 2
    if pair.any():
        between = change[first[pair]]  # XOR of the tile's two keys
        rows[pair] = 1 + (between >= 1 << s)
        cols[pair] = 2 - ((between & (tile - 1)) == 0)
    big = np.flatnonzero(~pair)
    if big.size:
        # reduceat over (start, end) pairs of these tiles; the odd results reduce the gaps
        # between them (other tiles) and are dropped.
        lo = int(first[big[0]])
        bounds = np.empty(2 * big.size - 1, np.int64)
        bounds[0::2] = first[big]
        bounds[1::2] = bounds[0:-1:2] + multi_nnz[big[:-1]]
        hi = int(first[big[-1]] + multi_nnz[big[-1]])
        bounds -= lo
        new_row = flag[lo:hi]  # the tile starts are no longer needed: same buffer
        new_row[0] = True
        np.greater_equal(change[lo : hi - 1], 1 << s, out=new_row[1:])
        if tile <= 128:  # at most 128 rows per tile: one byte counts them
            distinct = np.add.reduceat(new_row.view(np.uint8), bounds, dtype=np.uint8)
        else:
            distinct = np.add.reduceat(new_row, bounds, dtype=np.int64)
        rows[big] = distinct[0::2]
        # Distinct columns: OR of one-hot masks per tile, 64 columns per word.
        keys = key[lo:hi]
        bits = workspace.get("bits", hi - lo, np.uint64)
        words = max(1, tile // 64)
        count = np.zeros(big.size, np.int64)
        for word in range(words):  # at most T/64 passes, never per tile
            np.bitwise_and(keys, min(tile, 64) - 1, out=bits.view(np.int64))
            np.left_shift(np.uint64(1), bits, out=bits)
            if words > 1:
                bits[(keys & (tile - 1)) >> 6 != word] = 0
            count += np.bitwise_count(np.bitwise_or.reduceat(bits, bounds)[0::2])
        cols[big] = count
    return _Part(tile_id, multi, multi_nnz, rows, cols)


def _assemble(parts: list[_Part], lay: _Layout, threads: int) -> TileStats:
    """One :class:`TileStats` from the runs' parts, in order."""
    offsets = np.cumsum([0] + [p.tile_id.size for p in parts]).tolist()
    tile_id = np.empty(offsets[-1], np.int64)

    def copy(first, last):
        for k in range(first, last):
            tile_id[offsets[k] : offsets[k + 1]] = parts[k].tile_id

    runs = split(len(parts), chunks(threads))
    run_all(threads, [lambda r=r: copy(*r) for r in runs])
    multi = np.concatenate([np.zeros(0, np.int64)] + [p.multi + o for p, o in zip(parts, offsets)])

    def joined(name):
        return np.concatenate([np.zeros(0, np.int64)] + [getattr(p, name) for p in parts])

    return TileStats(
        tile=lay.tile,
        bands=lay.bands,
        tile_id=tile_id,
        multi=multi,
        multi_nnz=joined("multi_nnz"),
        multi_rows=joined("multi_rows"),
        multi_cols=joined("multi_cols"),
    )
