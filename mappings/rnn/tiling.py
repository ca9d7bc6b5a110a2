"""Tiling of the gate matrices ``[W | U]`` and the tile program of one time step.

The gate matrix of an LSTM, ``[W | U]``, is ``4H x (X + H)`` (a GRU's has the same four rows
per unit: r, z, n_x, n_h). Its rows are *interleaved by
unit*: packed row ``4u + g`` is gate ``g`` (PyTorch order i, f, g, o) of hidden unit ``u``, so a
row block of ``tile_rows`` rows holds all four gates of ``tile_rows / 4`` consecutive units and
finishes those units' ``c`` and ``h`` by itself. Columns are split into ``x`` column blocks
(``W``, reading the input) and ``h`` column blocks (``U``, reading the previous hidden state),
``tile_cols`` wide; partial blocks at the edges are zero-padded.

One *entry* of the program is one tile: (row block, x or h column block). The engine
accumulates consecutive entries of the same row block (``first`` .. ``last``) in place, so a
row block's entries are contiguous. The order is row-block major; inside a row block the ``x``
tiles come first (they read nothing the previous step produces: they are the work that fills
the wait for h), then the ``h`` tiles in the order the previous step produced h.

Dependencies are per ``h`` slice: an ``h`` tile of step t reading column block j waits (flag
``wait``) until row block ``need`` of step t-1 has written h for every batch element, where
``need`` is the last row block whose units fall in column block j — not until the whole h
vector exists. The naive program (:func:`build_program` with ``naive=True``) makes every
entry wait for the last row block: each step starts only once all of h is there.

Nothing here knows about cycles; :mod:`tandem.mappings.rnn.schedule` runs the timing model.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["FIELDS", "GATES", "TileProgram", "build_program", "ceil_div", "packed_rows"]

#: Gates per hidden unit (LSTM: i, f, g, o in PyTorch's order).
GATES = 4
#: The per-entry fields of a tile program, in the order the engine's payload lays them out.
FIELDS = ("src", "col", "row", "first", "last", "wait", "need", "end")

SRC_X = 0
SRC_H = 1


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive integers."""
    return -(-a // b)


@dataclass(frozen=True)
class TileProgram:
    """The tile program of one time step (the engine repeats it every step).

    Attributes
    ----------
    input_size, hidden_size
        X and H of the cell.
    tile_rows, tile_cols
        Tile shape: gate rows x ``[x | h]`` columns per MAC array pass.
    naive
        True for the no-overlap program (every entry waits for all of h).
    src, col, row, first, last, wait, need, end
        One int64 array per field, one element per entry (see the module docstring).
    """

    input_size: int
    hidden_size: int
    tile_rows: int
    tile_cols: int
    naive: bool
    src: np.ndarray
    col: np.ndarray
    row: np.ndarray
    first: np.ndarray
    last: np.ndarray
    wait: np.ndarray
    need: np.ndarray
    end: np.ndarray
    cell: str = "lstm"

    @property
    def units_per_block(self) -> int:
        """Hidden units finished by one row block."""
        return self.tile_rows // GATES

    @property
    def row_blocks(self) -> int:
        return ceil_div(self.hidden_size, self.units_per_block)

    @property
    def x_blocks(self) -> int:
        return ceil_div(self.input_size, self.tile_cols)

    @property
    def h_blocks(self) -> int:
        return ceil_div(self.hidden_size, self.tile_cols)

    @property
    def entries(self) -> int:
        """Tiles per time step."""
        return len(self.src)

    @property
    def useful_macs(self) -> int:
        """Multiply-accumulates of one step for one batch element, padding excluded (a GRU's
        n_x and n_h rows hold zeros in their U and W halves: 3H (X + H) useful)."""
        gates = 3 if self.cell == "gru" else GATES
        return gates * self.hidden_size * (self.input_size + self.hidden_size)

    @property
    def array_macs(self) -> int:
        return self.tile_rows * self.tile_cols

    def fields(self) -> dict[str, np.ndarray]:
        """Field name to array, in :data:`FIELDS` order."""
        return {name: getattr(self, name) for name in FIELDS}


def packed_rows(hidden_size: int, tile_rows: int) -> np.ndarray:
    """PyTorch gate-matrix row of every packed row (``-1`` for padding rows).

    Packed row ``4u + g`` is PyTorch row ``g * H + u`` (gate blocks i, f, g, o).
    """
    units = ceil_div(hidden_size, tile_rows // GATES) * (tile_rows // GATES)
    u = np.repeat(np.arange(units), GATES)
    g = np.tile(np.arange(GATES), units)
    rows = g * hidden_size + u
    rows[u >= hidden_size] = -1
    return rows


def build_program(
    input_size: int,
    hidden_size: int,
    tile_rows: int,
    tile_cols: int,
    *,
    naive: bool = False,
    cell: str = "lstm",
) -> TileProgram:
    """The tile program of one step of an LSTM (or GRU) with the given sizes and tile shape.

    A GRU uses the same four packed rows per unit: r, z, n_x (``W_in x + b_in``) and n_h
    (``U_hn h + b_hn``), kept apart for PyTorch's ``linear_before_reset``.
    """
    if tile_rows % GATES or tile_rows <= 0:
        raise ValueError(f"tile_rows must be a positive multiple of {GATES}, not {tile_rows}")
    if tile_cols <= 0:
        raise ValueError(f"tile_cols must be positive, not {tile_cols}")
    if input_size <= 0 or hidden_size <= 0:
        raise ValueError("input and hidden sizes must be positive")
    ub = tile_rows // GATES
    n_rows = ceil_div(hidden_size, ub)
    n_x = ceil_div(input_size, tile_cols)
    n_h = ceil_div(hidden_size, tile_cols)
    per_row = n_x + n_h
    # The last row block whose units fall into h column block j.
    top_unit = np.minimum((np.arange(n_h) + 1) * tile_cols, hidden_size)
    need_h = np.minimum(ceil_div_array(top_unit, ub) - 1, n_rows - 1)

    row = np.repeat(np.arange(n_rows), per_row)
    src = np.tile(np.r_[np.full(n_x, SRC_X), np.full(n_h, SRC_H)], n_rows)
    col = np.tile(np.r_[np.arange(n_x), np.arange(n_h)], n_rows)
    k = np.tile(np.arange(per_row), n_rows)
    first = (k == 0).astype(np.int64)
    last = (k == per_row - 1).astype(np.int64)
    if naive:
        wait = np.ones_like(row)
        need = np.full_like(row, n_rows - 1)
    else:
        wait = (src == SRC_H).astype(np.int64)
        need = np.where(src == SRC_H, np.tile(np.r_[np.zeros(n_x, np.int64), need_h], n_rows), 0)
    end = np.zeros_like(row)
    end[-1] = 1
    return TileProgram(
        input_size=input_size,
        hidden_size=hidden_size,
        tile_rows=tile_rows,
        tile_cols=tile_cols,
        naive=naive,
        src=src.astype(np.int64),
        col=col.astype(np.int64),
        row=row.astype(np.int64),
        first=first,
        last=last,
        wait=wait.astype(np.int64),
        need=need.astype(np.int64),
        end=end,
        cell=cell,
    )


def ceil_div_array(a: np.ndarray, b: int) -> np.ndarray:
    """Element-wise ``ceil(a / b)``."""
    return -(-np.asarray(a, dtype=np.int64) // b)
