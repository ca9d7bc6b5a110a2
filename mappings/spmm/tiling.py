"""T x T tiles of the reordered adjacency and their statistics, vectorized over the non-zeros.

Every non-zero gets one 64-bit key, ``(tile id, row in tile, column in tile)`` packed so that
sorting the keys (numpy's SIMD sort) groups the non-zeros by tile in row-major order inside
each tile. From the sorted keys, with no Python loop over tiles or non-zeros:

* non-zeros per tile: distances between group starts;
* distinct rows per tile: changes of ``(tile, row)``;
* distinct columns per tile: OR of one-hot 64-bit column masks per tile (``reduceat``), then
  a population count; tiles wider than 64 use ``T / 64`` words.
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .graph import Ordering

__all__ = ["TileStats", "tile_keys", "tile_stats"]


@dataclass(frozen=True)
class TileStats:
    """The non-empty tiles, sorted by (tile row, tile column).

    Attributes
    ----------
    tile
        Tile edge T (a power of two).
    bands
        Tiles per side: ``ceil(size / T)``.
    tile_row, tile_col
        ``(m,)`` int32 position of each non-empty tile.
    nnz, rows, cols
        ``(m,)`` int64 non-zeros, distinct rows and distinct columns of each tile.
    """

    tile: int
    bands: int
    tile_row: np.ndarray
    tile_col: np.ndarray
    nnz: np.ndarray
    rows: np.ndarray
    cols: np.ndarray

    @property
    def count(self) -> int:
        """Non-empty tiles."""
        return int(self.nnz.size)

    @property
    def total(self) -> int:
        """All tiles, empty ones included."""
        return self.bands * self.bands

    @property
    def density(self) -> np.ndarray:
        """Non-zeros per tile over T * T."""
        return self.nnz / float(self.tile * self.tile)


def _shift(tile: int) -> int:
    if tile < 2 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= 2, not {tile!r}")
    return tile.bit_length() - 1


def tile_keys(adjacency: sp.csr_matrix, ordering: Ordering, tile: int) -> np.ndarray:
    """Sorted ``(tile id, row in tile, column in tile)`` keys of every non-zero, int64."""
    s = _shift(tile)
    bands = -(-ordering.size // tile)
    if bands >= 1 << ((63 - 2 * s) // 2):
        raise ValueError(f"{ordering.size} nodes in tiles of {tile} do not fit 64-bit keys")
    position = ordering.position
    if adjacency.shape[0] != position.size:
        raise ValueError(f"{adjacency.shape[0]} nodes but an ordering of {position.size}")
    # The key's fields do not overlap, so it is the sum of a row part and a column part:
    # ((tile row * bands) << 2s) + (row in tile << s) + (tile column << 2s) + column in tile.
    # Both parts are per node; the non-zeros only repeat one and gather the other.
    mask = tile - 1
    row_part = ((position >> s) * bands) << (2 * s)
    row_part |= (position & mask) << s
    col_part = (position >> s) << (2 * s)
    col_part |= position & mask
    key = np.repeat(row_part, np.diff(adjacency.indptr))
    key += col_part[adjacency.indices]
    key.sort()
    return key


def tile_stats(adjacency: sp.csr_matrix, ordering: Ordering, tile: int) -> TileStats:
    """Statistics of every non-empty tile of ``adjacency`` reordered by ``ordering``."""
    key = tile_keys(adjacency, ordering, tile)
    return stats_from_keys(key, tile, -(-ordering.size // tile))


def stats_from_keys(key: np.ndarray, tile: int, bands: int) -> TileStats:
    """:class:`TileStats` from sorted keys (see :func:`tile_keys`)."""
    s = _shift(tile)
    if key.size == 0:
        empty = np.zeros(0, np.int64)
        return TileStats(
            tile, bands, empty.astype(np.int32), empty.astype(np.int32), empty, empty, empty
        )
    # Neighbouring sorted keys differ in a bit at or above 2s exactly where a new tile starts,
    # and at or above s where a new (tile, row) starts: one XOR, two comparisons.
    change = key[1:] ^ key[:-1]
    new_tile = np.empty(key.size, bool)
    new_tile[0] = True
    np.greater_equal(change, 1 << (2 * s), out=new_tile[1:])
    new_row = np.empty(key.size, bool)
    new_row[0] = True
    np.greater_equal(change, 1 << s, out=new_row[1:])
    del change
    starts = np.flatnonzero(new_tile)
    del new_tile
    ids = key[starts] >> (2 * s)
    nnz = np.diff(np.r_[starts, key.size])
    rows = np.add.reduceat(new_row, starts, dtype=np.int64)
    del new_row
    # Distinct columns: OR of one-hot masks per tile, 64 columns per word.
    local_col = key & (tile - 1)
    cols = np.zeros(starts.size, np.int64)
    one = np.uint64(1)
    for word in range(max(1, tile // 64)):  # at most T/64 passes, never per tile
        if tile > 64:
            bits = one << (local_col & 63).astype(np.uint64)
            bits[(local_col >> 6) != word] = 0
        else:
            bits = local_col.view(np.uint64)  # reuse the buffer: 1 << column, in place
            np.left_shift(one, bits, out=bits)
        cols += np.bitwise_count(np.bitwise_or.reduceat(bits, starts))
        del bits
    return TileStats(
        tile=tile,
        bands=bands,
        tile_row=(ids // bands).astype(np.int32),
        tile_col=(ids % bands).astype(np.int32),
        nnz=nnz.astype(np.int64),
        rows=rows,
        cols=cols,
    )
