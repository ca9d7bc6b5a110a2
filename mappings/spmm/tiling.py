"""T x T tiles of the reordered adjacency and their statistics, vectorized over the non-zeros.

Every non-zero gets a key, ``(tile row, tile column, row in tile, column in tile)`` packed so
that sorting the keys (numpy's SIMD sort) groups the non-zeros by tile in row-major order
inside each tile. The keys are not sorted in one piece:

* **Buckets.** The tile rows are cut into buckets of a few consecutive tile rows each, about
  :data:`BUCKET` non-zeros. Inside a bucket a key only needs the tile row's offset from the
  bucket's first one, so it fits 32 bits (``b + 2s`` bits of tile column and in-tile fields,
  ``T = 2**s``, the rest for the offset; a bucket holds at most as many tile rows as fit).
  Every CSR row goes, whole, to the next free place of its bucket: a stable scatter whose
  destinations are counted per row, not per non-zero.
* **Sort.** Each bucket is sorted on its own: 32-bit keys, in a core's cache, several times
  faster per key than one sort of 64-bit keys over main memory. Buckets in order are the
  sorted matrix.
* **Scan.** Runs of consecutive sorted buckets (about :data:`CHUNK` keys) are scanned while
  in cache, with no Python loop over tiles or non-zeros:

  - tile starts: neighbouring keys differ in a bit at or above ``2s`` (one XOR, one
    comparison), or a bucket starts;
  - non-zeros per tile: distances between the starts;
  - a tile with one non-zero (on large power-law graphs, nine tiles in ten) has one row and
    one column: nothing more is computed or stored for it (:class:`TileStats` lists the
    others);
  - a tile with two to four: its keys are compared directly (a new row where a key's XOR
    with the one before has a bit at or above ``s``, a new column where no key before it
    has the same low ``s`` bits);
  - larger tiles: distinct rows by ``reduceat`` over the row-change flags; distinct columns
    by OR of one-hot 64-bit column masks per tile, then a population count (``T / 64``
    words for tiles wider than 64).

Threads take blocks of CSR rows for the scatter, then runs of buckets for the sort and the
scan: the same result with any number.
"""

import itertools
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import scipy.sparse as sp

from .graph import Ordering
from .parallel import DEFAULT_THREADS, chunks, run_all, split

__all__ = ["BUCKET", "CHUNK", "TileStats", "tile_keys", "tile_stats"]

BUCKET = 1 << 16
"""Non-zeros per bucket (a bucket holds whole tile rows, so it can hold more)."""

_SMALL = 4
"""Tiles of up to this many non-zeros get their distinct rows and columns by comparing keys
directly; larger ones by ``reduceat`` (a few tens of nanoseconds per tile)."""

_FILL = 1 << 16
"""Non-zeros per block of CSR rows keyed and scattered at once: temporaries in cache."""

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
    """Key fields for ``tile``; the whole (tile row, tile column, row, column) must fit 63
    bits, which also keeps node numbers below 2**32."""
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 2 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= 2, not {tile!r}")
    s = tile.bit_length() - 1
    bands = -(-ordering.size // tile)
    b = _index_bits(bands)
    if 2 * (b + s) > 63:
        raise ValueError(f"{ordering.size} nodes in tiles of {tile} do not fit 64-bit keys")
    return _Layout(tile, s, bands, b)


@dataclass
class _Buckets:
    """Every non-zero's key, bucket by bucket (see the module docstring).

    ``key[edges[i]:edges[i + 1]]`` holds bucket ``i``, whose tile rows start at
    ``first_band[i]``; a key is ``(tile row - first_band[i], tile column, row in tile, column in
    tile)``: the offset takes the bits ``b + 2s`` leave of ``key.dtype`` (uint32 when they
    leave some, else uint64), then ``b``, ``s``, ``s`` bits.
    """

    key: np.ndarray
    edges: np.ndarray
    first_band: np.ndarray

    @cached_property
    def bounds(self) -> list[int]:
        """:attr:`edges` as Python ints (for slicing)."""
        return self.edges.tolist()

    def bucket(self, i: int) -> np.ndarray:
        """Bucket ``i``'s keys."""
        return self.key[self.bounds[i] : self.bounds[i + 1]]


def _key_dtype(lay: _Layout) -> type:
    """uint32 keys when the tile column and in-tile fields leave room, else uint64."""
    return np.uint32 if lay.b + 2 * lay.s <= 32 else np.uint64


def _bucketed_keys(
    adjacency: sp.csr_matrix, ordering: Ordering, lay: _Layout, threads: int, bucket: int
) -> _Buckets:
    """Every non-zero's key in its bucket, unsorted inside (module docstring)."""
    position = ordering.position
    if adjacency.shape[0] != position.size:
        raise ValueError(f"{adjacency.shape[0]} nodes but an ordering of {position.size}")
    s, b, bands = lay.s, lay.b, lay.bands
    dtype = _key_dtype(lay)
    offset_bits = 8 * np.dtype(dtype).itemsize - (b + 2 * s)  # for the tile row's offset
    indptr, indices = adjacency.indptr, adjacency.indices
    counts = np.diff(indptr)
    total = int(indptr[-1])
    band = position >> s
    # Buckets: a new one every 2**offset_bits tile rows, and where the non-zeros so far pass
    # a multiple of ``bucket``.
    ends = np.cumsum(np.bincount(band, weights=counts, minlength=bands)).astype(np.int64)
    every = np.arange(0, bands, 1 << min(offset_bits, 62))
    full = np.searchsorted(ends, np.arange(bucket, total, bucket), "left") + 1
    first_band = np.unique(np.r_[every, full[full < bands]])
    edges = np.r_[0, ends[first_band[1:] - 1], total]
    bucket_of_band = np.repeat(np.arange(first_band.size), np.diff(np.r_[first_band, bands]))
    nb = first_band.size
    # Per node, in ranges of rows side by side: the key's row part (tile row offset, row in
    # tile) and column part (tile column, column in tile), whose sum is a non-zero's key (the
    # non-zeros repeat one and gather the other); and where its CSR row goes: rows by bucket,
    # CSR order inside, laid end to end. ``shift`` moves a row's CSR positions there.
    n = position.size
    row_part = np.empty(n, dtype)
    col_part = np.empty(n, dtype)  # the table the random gather reads: 4 bytes a node
    by_bucket = np.empty(n, np.int64)  # (bucket << 32) | row, sorted below
    shift = np.empty(n, np.int64)
    mask = lay.tile - 1
    pieces = split(n, threads)

    def parts(lo, hi):  # rows [lo, hi); returns their non-zeros per bucket
        here = band[lo:hi]
        mine = bucket_of_band[here]
        in_tile = position[lo:hi] & mask
        part = here - first_band[mine]
        part <<= b + 2 * s
        part |= in_tile << s
        row_part[lo:hi] = part
        part = here << (2 * s)
        part |= in_tile
        col_part[lo:hi] = part
        rows = by_bucket[lo:hi]
        np.left_shift(mine, 32, out=rows)
        rows |= np.arange(lo, hi)
        rows.sort()  # a stable order of the rows by bucket: row numbers break the ties
        return np.bincount(mine, weights=counts[lo:hi], minlength=nb).astype(np.int64)

    per_piece = np.array(run_all(threads, [partial(parts, *r) for r in pieces])).reshape(-1, nb)
    # Bucket k's rows of piece h start after its rows of the pieces before h; ``start`` also
    # takes away the piece's own non-zeros of the buckets before k, which ``place`` counts.
    start = edges[:-1] + np.cumsum(per_piece, axis=0) - per_piece
    start -= np.cumsum(per_piece, axis=1) - per_piece

    def place(h, lo, hi):  # rows [lo, hi) of piece h
        rows = by_bucket[lo:hi]
        bucket_of = rows >> 32
        rows &= (1 << 32) - 1
        sizes = counts[rows]
        run_up = np.cumsum(sizes)
        run_up -= sizes  # non-zeros of the piece's rows before each, in bucket order
        run_up += start[h][bucket_of]
        run_up -= indptr[rows]
        shift[rows] = run_up

    run_all(threads, [partial(place, h, *r) for h, r in enumerate(pieces)])
    key = np.empty(total, dtype)
    cuts = np.searchsorted(indptr, np.arange(_FILL, total, _FILL), "right") - 1
    rows = np.unique(np.r_[0, cuts, counts.size]).tolist()

    def fill(first, last):  # the row blocks rows[first:last + 1], each in cache
        for lo, hi in itertools.pairwise(rows[first : last + 1]):
            start, stop = int(indptr[lo]), int(indptr[hi])
            keys = np.repeat(row_part[lo:hi], counts[lo:hi])
            # The gather is random over the nodes: the slow part. ``take`` with
            # ``mode="clip"`` skips the bounds check (CSR indices are in range).
            keys += np.take(col_part, indices[start:stop].astype(np.intp), mode="clip")
            where = np.repeat(shift[lo:hi], counts[lo:hi])
            where += np.arange(start, stop)
            key[where] = keys

    blocks = len(rows) - 1
    run_all(threads, [partial(fill, *r) for r in split(blocks, 8 * chunks(threads))])
    return _Buckets(key, edges, first_band)


def tile_keys(
    adjacency: sp.csr_matrix, ordering: Ordering, tile: int, *, threads: int = DEFAULT_THREADS
) -> np.ndarray:
    """Sorted 64-bit ``(tile row, tile column, row in tile, column in tile)`` keys of every
    non-zero, the fields ``b``, ``b``, ``s`` and ``s`` bits wide (``T = 2**s``, ``b`` the bits
    of a tile index): the buckets' keys (module docstring) with the tile row put back.
    The same keys with any number of ``threads``."""
    lay = _layout(ordering, tile)
    buckets = _bucketed_keys(adjacency, ordering, lay, threads, BUCKET)
    edges = buckets.edges
    for i in range(edges.size - 1):
        buckets.bucket(i).sort()
    key = buckets.key.astype(np.int64)
    key += np.repeat(buckets.first_band << (lay.b + 2 * lay.s), np.diff(edges))
    return key


def tile_stats(
    adjacency: sp.csr_matrix,
    ordering: Ordering,
    tile: int,
    *,
    threads: int = DEFAULT_THREADS,
    bucket: int = BUCKET,
    chunk: int = CHUNK,
) -> TileStats:
    """Statistics of every non-empty tile of ``adjacency`` reordered by ``ordering``.

    ``threads``: the scatter, the sorts and the scans run on that many threads, on disjoint
    blocks (the same result with any number). ``bucket`` and ``chunk``: non-zeros per bucket
    and per scanned run (module docstring; any positive values give the same result).
    """
    for name, value in (("bucket", bucket), ("chunk", chunk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    lay = _layout(ordering, tile)
    buckets = _bucketed_keys(adjacency, ordering, lay, threads, bucket)
    # Runs of whole non-empty buckets with about ``chunk`` keys each.
    edges = buckets.edges
    full = np.flatnonzero(np.diff(edges) > 0)
    starts = edges[full]
    total = int(edges[-1])
    cuts = np.searchsorted(starts, np.arange(chunk, total, chunk), "left")
    runs = list(itertools.pairwise(np.unique(np.r_[0, cuts, full.size]).tolist()))
    tasks = [
        partial(_sort_and_scan, buckets, full, runs[lo:hi], lay)
        for lo, hi in split(len(runs), 4 * chunks(threads))
    ]
    parts = [part for found in run_all(threads, tasks) for part in found]
    del buckets
    return _assemble(parts, lay, threads)


def _sort_and_scan(buckets: _Buckets, full: np.ndarray, runs: list, lay: _Layout) -> list:
    """Sort each bucket of each run (``full[i:j]`` for ``(i, j)`` in ``runs``: indices of
    non-empty buckets), then scan the run (one thread)."""
    workspace = _Workspace()
    found = []
    for i, j in runs:
        mine = full[i:j]
        for k in mine.tolist():
            buckets.bucket(k).sort()
        lo, hi = buckets.bounds[mine[0]], buckets.bounds[mine[-1] + 1]
        starts = buckets.edges[mine] - lo
        found.append(
            _scan_run(buckets.key[lo:hi], lay, workspace, starts, buckets.first_band[mine])
        )
    return found


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


def _scan_run(
    key: np.ndarray,
    lay: _Layout,
    workspace: _Workspace,
    bucket_starts: np.ndarray,
    first_band: np.ndarray,
) -> _Part:
    """The tiles of a run of sorted buckets: ``key[bucket_starts[i]:]`` up to the next start
    is a bucket whose tile rows start at ``first_band[i]``."""
    n, s, tile = key.size, lay.s, lay.tile
    change = workspace.get(f"change{key.dtype}", n - 1, key.dtype)  # XOR of neighbours
    np.bitwise_xor(key[1:], key[:-1], out=change)
    flag = workspace.get("flag", n, bool)
    np.greater_equal(change, 1 << (2 * s), out=flag[1:])
    flag[bucket_starts] = True  # a bucket's first key starts a tile, whatever its bits
    starts = np.flatnonzero(flag)
    # (tile row, tile column): the key without the in-tile fields, the bucket's first tile
    # row added back.
    ids = key[starts]
    ids >>= 2 * s
    tile_id = ids.astype(np.int64)
    # Every bucket start is a tile start: a bucket's tiles begin at its place among them.
    first_tile = np.searchsorted(starts, bucket_starts).tolist() + [starts.size]
    for k, base in enumerate((first_band << lay.b).tolist()):
        tile_id[first_tile[k] : first_tile[k + 1]] += base
    nnz = np.empty(starts.size, np.int64)
    np.subtract(starts[1:], starts[:-1], out=nnz[:-1])
    nnz[-1] = n - starts[-1]
    multi = np.flatnonzero(nnz > 1)
    multi_nnz = nnz[multi]
    first = starts[multi]
    del nnz, starts
    rows = np.empty(multi.size, np.int64)
    cols = np.empty(multi.size, np.int64)
    # Tiles of up to _SMALL non-zeros, one size at a time: a tile's j-th key starts a new
    # row where its XOR with the one before has a bit at or above s; its column is new if no
    # key before it in the tile has the same low s bits. A few comparisons per tile.
    for size in range(2, _SMALL + 1):
        these = np.flatnonzero(multi_nnz == size)
        if these.size == 0:
            continue
        at = first[these]
        found = np.ones(these.size, np.int64)
        column = [key[at] & (tile - 1)]
        for j in range(1, size):
            found += change[at + (j - 1)] >= 1 << s
        rows[these] = found
        found = np.ones(these.size, np.int64)
        for j in range(1, size):
            column.append(key[at + j] & (tile - 1))
            new = column[j] != column[0]
            for earlier in column[1:j]:
                new &= column[j] != earlier
            found += new
        cols[these] = found
    big = np.flatnonzero(multi_nnz > _SMALL)
    if big.size:
        # reduceat over (start, end) pairs of these tiles; the odd results reduce the gaps
        # between them (other tiles) and are dropped.
        lo = int(first[big[0]])
        bounds = np.empty(2 * big.size - 1, np.int64)
        bounds[0::2] = first[big]
        bounds[1::2] = bounds[0:-1:2] + multi_nnz[big[:-1]]
        hi = int(first[big[-1]] + multi_nnz[big[-1]])
        bounds -= lo
        new_row = flag[lo:hi]  # the tile starts are not needed past here: same buffer
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
