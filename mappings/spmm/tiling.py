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
    n = adjacency.shape[0]
    bands = -(-ordering.size // tile)
    if bands >= 1 << ((63 - 2 * s) // 2):
        raise ValueError(f"{ordering.size} nodes in tiles of {tile} do not fit 64-bit keys")
    position = ordering.position
    new_row = np.repeat(position, np.diff(adjacency.indptr))
    new_col = position[adjacency.indices]
    mask = tile - 1
    key = (new_row >> s) * bands
    key += new_col >> s
    key <<= 2 * s
    key |= (new_row & mask) << s
    key |= new_col & mask
    del new_row, new_col
    key.sort()
    assert n == position.size
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
    tile_id = key >> (2 * s)
    new_tile = np.empty(key.size, bool)
    new_tile[0] = True
    np.not_equal(tile_id[1:], tile_id[:-1], out=new_tile[1:])
    starts = np.flatnonzero(new_tile)
    ids = tile_id[starts]
    del tile_id
    nnz = np.diff(np.r_[starts, key.size])
    # Distinct rows: the sorted keys change (tile, row) at the first non-zero of each row.
    row_key = key >> s
    new_row = np.empty(key.size, bool)
    new_row[0] = True
    np.not_equal(row_key[1:], row_key[:-1], out=new_row[1:])
    del row_key
    rows = np.add.reduceat(new_row, starts, dtype=np.int64)
    del new_row
    # Distinct columns: OR of one-hot masks per tile, 64 columns per word.
    local_col = key & (tile - 1)
    cols = np.zeros(starts.size, np.int64)
    one = np.uint64(1)
    for word in range(max(1, tile // 64)):  # at most T/64 passes, never per tile
        in_word = (local_col >> 6) == word if tile > 64 else None
        bits = one << (local_col & 63).astype(np.uint64)
        if in_word is not None:
            bits[~in_word] = 0
        cols += np.bitwise_count(np.bitwise_or.reduceat(bits, starts)).astype(np.int64)
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
