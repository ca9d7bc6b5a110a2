"""Cost model of the two engines, from their parameter sets and the board file.

Per tile, with T the tile edge and F the feature count (see :mod:`tandem.host.spmm` for the
engines' documented cycle behaviour, which the RTL follows and
``benchmarks/spmm_cost_model.py`` measures):

* dense, on ``systolic``: ``ceil(T/R) * ceil(F/C) * T`` cycles, whatever the density;
* sparse, on ``sparse-engine``: ``ceil(F/L) * (distinct columns + non-zeros)`` cycles.

Each engine runs its tiles back to back and pays its pipeline fill once. The engines run
concurrently and share the board's fastest memory; its bandwidth at the board's default clock
gives a third bound, the cycles needed to move every byte both engines read and write. The
makespan is the largest of the three. The board also bounds the multipliers: ``R * C + L``
must fit its DSP count.
"""

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from tandem.host.spmm.golden import SparseEngineParams, SystolicParams, check_formats_match

from tandem.boards import Board
from tandem.config import ParamError
from tandem.errors import UserError

from .tiling import TileStats

__all__ = ["CostModel", "TileCosts", "Totals"]


@dataclass(frozen=True)
class Totals:
    """Predicted cycles of one assignment of tiles to engines."""

    systolic_cycles: int
    sparse_cycles: int
    memory_cycles: int

    @property
    def makespan(self) -> int:
        """Cycles until both engines are done and every byte has moved."""
        return max(self.systolic_cycles, self.sparse_cycles, self.memory_cycles)


@dataclass(frozen=True)
class TileCosts:
    """Every tile's cost on the sparse engine, stored compactly.

    A tile with one non-zero has one row and one column, so all such tiles cost the same
    (``single_cycles``, ``single_bytes``); on large power-law graphs they are most tiles. The
    others are listed: ``multi`` (their indices, increasing) with their ``multi_cycles`` and
    ``multi_bytes`` (int64). :attr:`cycles` and :attr:`bytes` expand to ``(count,)`` arrays.
    """

    count: int
    multi: np.ndarray
    multi_cycles: np.ndarray
    multi_bytes: np.ndarray
    single_cycles: int
    single_bytes: int

    @property
    def singles(self) -> int:
        """Tiles with one non-zero."""
        return self.count - int(self.multi.size)

    @cached_property
    def cycles(self) -> np.ndarray:
        """``(count,)`` sparse-engine cycles of every tile."""
        return self._expand(self.single_cycles, self.multi_cycles)

    @cached_property
    def bytes(self) -> np.ndarray:
        """``(count,)`` sparse-engine bytes of every tile."""
        return self._expand(self.single_bytes, self.multi_bytes)

    def _expand(self, single: int, multi: np.ndarray) -> np.ndarray:
        out = np.full(self.count, single, np.int64)
        out[self.multi] = multi
        return out

    @cached_property
    def total_cycles(self) -> int:
        """Sparse-engine cycles of all tiles (summed once, reused by every plan)."""
        return int(self.multi_cycles.sum()) + self.singles * self.single_cycles

    @cached_property
    def total_bytes(self) -> int:
        """Sparse-engine bytes of all tiles."""
        return int(self.multi_bytes.sum()) + self.singles * self.single_bytes

    def sums(self, picked: np.ndarray) -> tuple[int, int]:
        """Sparse-engine ``(cycles, bytes)`` of the tiles where the ``(count,)`` mask is True."""
        chosen = int(np.count_nonzero(picked))
        in_multi = picked[self.multi]
        singles = chosen - int(np.count_nonzero(in_multi))
        return (  # sums with where=: no copy of the picked values
            int(np.sum(self.multi_cycles, where=in_multi)) + singles * self.single_cycles,
            int(np.sum(self.multi_bytes, where=in_multi)) + singles * self.single_bytes,
        )


@dataclass(frozen=True)
class CostModel:
    """Cycles and bytes of tiles on either engine.

    Parameters
    ----------
    systolic, sparse
        The engines' parameter sets (the same ones the RTL and golden models read).
    board
        Target board: clock and memory bandwidth.
    tile, features
        Tile edge T and feature count F of the layer.
    """

    systolic: SystolicParams
    sparse: SparseEngineParams
    board: Board
    tile: int
    features: int

    def __post_init__(self) -> None:
        check_formats_match(self.systolic, self.sparse)
        if self.tile > self.sparse.tile:
            raise ParamError(
                "tile",
                f"tile {self.tile} exceeds the sparse engine's feature buffer "
                f"(sparse-engine tile = {self.sparse.tile})",
            )
        if self.tile < self.systolic.rows:
            raise ParamError(
                "tile", f"tile {self.tile} is shorter than the systolic rows ({self.systolic.rows})"
            )
        if self.features < 1:
            raise UserError(f"--features must be at least 1, not {self.features}")
        dsp = self.board.capacity("dsp")
        needed = self.systolic.rows * self.systolic.cols + self.sparse.lanes
        if dsp is not None and needed > dsp:
            raise UserError(
                f"systolic {self.systolic.rows}x{self.systolic.cols} plus {self.sparse.lanes} "
                f"sparse lanes need {needed} multipliers; {self.board.name} has {dsp} DSPs"
            )

    @property
    def clock_mhz(self) -> float:
        """Clock of both engines: the board's default clock."""
        return float(self.board.default_clock_mhz)

    @property
    def bytes_per_cycle(self) -> float:
        """Bytes per engine clock of the board's fastest memory."""
        bandwidth = float(self.board.memory[0]["bandwidth_gb_s"]) * 1e9
        return bandwidth / (self.clock_mhz * 1e6)

    @property
    def dense_cycles(self) -> int:
        """Cycles of one tile on the systolic array."""
        return self.systolic.tile_cycles(self.tile, self.features)

    @property
    def dense_bytes(self) -> int:
        """Bytes one dense tile moves."""
        return self.systolic.tile_bytes(self.tile, self.features)

    def sparse_cycles(self, stats: TileStats) -> np.ndarray:
        """Cycles of every tile of ``stats`` on the sparse engine."""
        return self.sparse.tile_cycles(stats.nnz, stats.cols, self.features)

    def sparse_bytes(self, stats: TileStats) -> np.ndarray:
        """Bytes every tile of ``stats`` moves on the sparse engine."""
        return self.sparse.tile_bytes(stats.nnz, stats.cols, stats.rows, self.features)

    def break_even_density(self) -> float:
        """Density at which a tile with one non-zero per column costs the same on both engines.

        The fixed-threshold baseline sends tiles at or above it to the systolic array.
        """
        passes = self.sparse.passes(self.features)
        nnz = self.dense_cycles / passes - self.tile  # cols = T once a tile has T non-zeros
        return float(min(1.0, max(nnz, 1) / (self.tile * self.tile)))

    def tile_costs(self, stats: TileStats) -> TileCosts:
        """Sparse-engine cycles and bytes of every tile, computed once for many plans.

        The engine's formulas run once for all one-non-zero tiles and once per other tile
        (:class:`TileCosts`, which shares ``stats.multi``).
        """
        nnz, cols, rows = stats.multi_nnz, stats.multi_cols, stats.multi_rows
        one = np.ones(1, np.int64)
        return TileCosts(
            count=stats.count,
            multi=stats.multi,
            multi_cycles=self.sparse.tile_cycles(nnz, cols, self.features),
            multi_bytes=self.sparse.tile_bytes(nnz, cols, rows, self.features),
            single_cycles=int(self.sparse.tile_cycles(one, one, self.features)[0]),
            single_bytes=int(self.sparse.tile_bytes(one, one, one, self.features)[0]),
        )

    def totals(
        self, stats: TileStats, dense: np.ndarray, costs: "TileCosts | None" = None
    ) -> Totals:
        """Predicted cycles when the tiles where ``dense`` is True go to the systolic array.

        ``costs`` (from :meth:`tile_costs` of the same ``stats``) saves recomputing them.
        """
        dense = np.asarray(dense, bool)
        if costs is None:
            costs = self.tile_costs(stats)
        n_dense = int(np.count_nonzero(dense))
        n_sparse = dense.size - n_dense
        dense_cycles, dense_bytes = costs.sums(dense)
        sparse_cycles = costs.total_cycles - dense_cycles
        moved = n_dense * self.dense_bytes + costs.total_bytes - dense_bytes
        return Totals(
            systolic_cycles=n_dense * self.dense_cycles
            + (self.systolic.fill_cycles if n_dense else 0),
            sparse_cycles=int(sparse_cycles) + (self.sparse.fill_cycles if n_sparse else 0),
            memory_cycles=math.ceil(moved / self.bytes_per_cycle),
        )

    def microseconds(self, cycles: int) -> float:
        """``cycles`` at the board clock, in microseconds."""
        return cycles / self.clock_mhz
