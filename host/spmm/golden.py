"""SpMM engines of the GCN aggregation ``A · (X · W)``: parameters, cycle behaviour, golden models.

Two engines run side by side (H-GCN, FPL 2022): ``systolic``, an output-stationary R x C
systolic array for dense tiles of the adjacency, and ``sparse-engine``, a streaming engine for
sparse tiles. ``tandem map spmm`` decides which tile goes where with a cost model built from the
cycle behaviour documented here (:meth:`SystolicParams.tile_cycles`,
:meth:`SparseEngineParams.tile_cycles`); ``benchmarks/spmm_cost_model.py`` checks it against
the cycles the RTL takes in simulation.

Number formats (both engines)
-----------------------------
adjacency value ``a``
    signed ``a_bits`` fixed point with ``a_frac`` fraction bits (``round(a * 2**a_frac)``); the
    GCN-normalized adjacency lies in (0, 1]. A value that does not fit raises ``ValueError``
    (:func:`quantize_adjacency`): the adjacency is loaded once, and a clipped value would be
    wrong in every layer.
feature ``x``
    signed ``x_bits`` integer (the host quantizes ``X · W`` with one scale per layer, from its
    largest magnitude, so no feature clips).
accumulator
    signed ``acc_bits``, two's-complement wrap; products and sums are exact until the wrap.
    The result of a tile is ``wrap(A_tile @ X_block)``; a row's partial sums from several
    tiles are added by the host (wrapping is a ring homomorphism, so the order does not matter).

``systolic`` stream protocol
----------------------------
Input ``i``: one *k-step* per beat, ``{a: R values, x: C values, last}``. A *block* is the
run of beats up to and including one with ``last``: it computes the R x C output block
``out[r, c] = sum_k a_k[r] * x_k[c]``. Blocks must be at least R beats long (the rows of one
block leave while the next block computes). Output ``o``: R beats per block, row 0 first, each
``C`` accumulators. A T x T tile times a T x F feature block is ``ceil(T/R) * ceil(F/C)``
blocks of ``T`` beats each (:func:`systolic_tile_stream`).

Cycle behaviour: one beat per cycle, back to back across blocks and tiles; a run of ``N``
beats takes ``N + fill_cycles`` cycles from the first beat in to the last row out.

``sparse-engine`` stream protocol
---------------------------------
Input ``i`` beats are ``{kind, row, col, value, x: L values, row_end}``:

* ``kind = LOAD``: write the L features ``x`` into the feature buffer at ``col``;
* ``kind = NZ``: one non-zero ``value`` at (``row``, ``col``) of the tile: gather the buffered
  features of ``col``, multiply, accumulate into the open output row. ``row_end`` closes the
  row: the engine emits ``{row, L sums}`` and the next non-zero starts from zero.

A tile is sent as COO in row-major (CSR) order, so ``row_end`` marks the last non-zero of each
row (the CSR row pointer, as a flag). The running row sum lives in a register that every
non-zero reads back in the next cycle: consecutive non-zeros of one output row (the
read-after-write hazard of a scatter-accumulate) never stall. Per pass over ``L`` feature
lanes the host sends one LOAD per distinct column of the tile, then the non-zeros.

Cycle behaviour: one beat per cycle, so a tile pass costs ``distinct columns + non-zeros``
cycles and a run of ``N`` beats ``N + fill_cycles``.
"""

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from tandem.host.common.arith import wrap
from tandem.host.common.fixed import check_fit, value_range

from tandem.config import ParamError, Params, param

__all__ = [
    "GcnResult",
    "SparseBeat",
    "SparseEngineParams",
    "SystolicParams",
    "check_formats_match",
    "gcn_layer",
    "gpu_transform",
    "mapped_spmm",
    "quantize_adjacency",
    "quantize_features",
    "sparse_engine_golden",
    "sparse_tile_golden",
    "sparse_tile_stream",
    "systolic_decode",
    "systolic_golden",
    "systolic_tile_golden",
    "systolic_tile_stream",
]


class SparseBeat(IntEnum):
    """``kind`` of a ``sparse-engine`` input beat."""

    LOAD = 0
    NZ = 1


def _check_formats(p) -> None:
    if p.a_frac >= p.a_bits:
        raise ParamError("a_frac", f"a_frac must be below a_bits ({p.a_bits}), not {p.a_frac}")
    if p.acc_bits < p.a_bits + p.x_bits:
        raise ParamError(
            "acc_bits",
            f"acc_bits must hold one product (a_bits + x_bits = {p.a_bits + p.x_bits}), "
            f"not {p.acc_bits}",
        )


@dataclass(frozen=True)
class SystolicParams(Params):
    """Output-stationary R x C systolic array for dense adjacency tiles.

    PE (r, c) keeps the accumulator of output ``(r, c)`` of the current block; adjacency
    values flow right along the rows, features flow down the columns, both skewed at the
    edge so that step k meets in PE (r, c) at cycle ``k + r + c``.
    """

    design = "systolic"

    rows: int = param(8, "R: PE rows (output rows of one block)", min=1, max=64)
    cols: int = param(8, "C: PE columns (output features of one block)", min=1, max=64)
    a_bits: int = param(16, "width of the signed fixed-point adjacency values", min=2, max=27)
    a_frac: int = param(14, "fraction bits of the adjacency values", min=0, max=26)
    x_bits: int = param(16, "width of the signed integer features", min=2, max=24)
    acc_bits: int = param(48, "width of the wrapping accumulators", min=4, max=64)

    def check(self) -> None:
        _check_formats(self)

    @property
    def fill_cycles(self) -> int:
        """Cycles a run takes beyond one per input beat: skew, array, deskew, output register.

        Counted from the cycle the first beat is offered to the cycle the last row is taken:
        the last beat's step reaches PE (r, c) after ``r + c + 1`` cycles, the column deskew
        lines the row up after ``C - 1 - c`` more, the output register adds one, and the R
        rows of the last block leave one per cycle: ``R + C + 1``.
        """
        return self.rows + self.cols + 1

    def blocks_per_tile(self, tile: int, features: int) -> int:
        """R x C output blocks of one T x T tile times a T x F feature block."""
        return math.ceil(tile / self.rows) * math.ceil(features / self.cols)

    def tile_cycles(self, tile: int, features: int) -> int:
        """Cycles of one dense tile: ``ceil(T/R) * ceil(F/C)`` blocks of ``T`` beats."""
        return self.blocks_per_tile(tile, features) * tile

    def tile_bytes(self, tile: int, features: int) -> int:
        """Bytes one tile moves: every beat's R + C operands, every block's R x C results."""
        beat = (self.rows * self.a_bits + self.cols * self.x_bits + 7) // 8
        result = (self.rows * self.cols * self.acc_bits + 7) // 8
        return self.blocks_per_tile(tile, features) * (tile * beat + result)


@dataclass(frozen=True)
class SparseEngineParams(Params):
    """Streaming sparse engine: COO non-zeros in, gathered feature rows, row sums out."""

    design = "sparse-engine"

    lanes: int = param(8, "L: features processed per non-zero (one multiplier each)", min=1, max=64)
    tile: int = param(
        64,
        "largest tile edge T: feature buffer depth, row/col index range",
        min=2,
        max=4096,
        power_of_two=True,
    )
    a_bits: int = param(16, "width of the signed fixed-point adjacency values", min=2, max=27)
    a_frac: int = param(14, "fraction bits of the adjacency values", min=0, max=26)
    x_bits: int = param(16, "width of the signed integer features", min=2, max=24)
    acc_bits: int = param(48, "width of the wrapping accumulators", min=4, max=64)

    def check(self) -> None:
        _check_formats(self)

    @property
    def index_bits(self) -> int:
        """Width of the ``row`` and ``col`` fields."""
        return max(1, (self.tile - 1).bit_length())

    @property
    def fill_cycles(self) -> int:
        """Cycles a run takes beyond one per input beat: input, buffer read, multiply, sum.

        Counted like :attr:`SystolicParams.fill_cycles`, first beat offered to last row taken.
        """
        return 5

    def passes(self, features: int) -> int:
        """Passes over a tile to cover ``features`` output features, L per pass."""
        return math.ceil(features / self.lanes)

    def tile_cycles(self, nnz, columns, features: int):
        """Cycles of sparse tiles: ``passes * (distinct columns + non-zeros)`` (vectorized)."""
        return self.passes(features) * (np.asarray(columns, np.int64) + np.asarray(nnz, np.int64))

    def tile_bytes(self, nnz, columns, rows, features: int):
        """Bytes sparse tiles move: LOAD and NZ beats in, one sum row out per row segment."""
        nz_beat = (2 * self.index_bits + self.a_bits + 7) // 8
        load_beat = (self.index_bits + self.lanes * self.x_bits + 7) // 8
        out_beat = (self.index_bits + self.lanes * self.acc_bits + 7) // 8
        per_pass = (
            np.asarray(nnz, np.int64) * nz_beat
            + np.asarray(columns, np.int64) * load_beat
            + np.asarray(rows, np.int64) * out_beat
        )
        return self.passes(features) * per_pass


def check_formats_match(systolic: SystolicParams, sparse: SparseEngineParams) -> None:
    """Both engines must read the same adjacency and feature formats and sum alike."""
    for key in ("a_bits", "a_frac", "x_bits", "acc_bits"):
        if getattr(systolic, key) != getattr(sparse, key):
            raise ParamError(
                key,
                f"{key} differs between systolic ({getattr(systolic, key)}) and "
                f"sparse-engine ({getattr(sparse, key)}); both engines must share it",
            )


def quantize_adjacency(values, params, *, at=None) -> np.ndarray:
    """Adjacency values to signed ``a_bits`` fixed point with ``a_frac`` fraction bits (round
    half even), int64.

    A value that does not fit raises ``ValueError`` naming it and the range (``at(i)`` gives
    where value ``i`` sits, for the message); nothing saturates.
    """
    values = np.asarray(values, np.float64)
    scaled = np.rint(values * (1 << params.a_frac))
    q = check_fit(
        scaled,
        *value_range(params.a_bits, True),
        name="adjacency value" if at else "adjacency values",
        fmt=f"a_bits={params.a_bits}, a_frac={params.a_frac}",
        real=values,
        unit=2.0**-params.a_frac,
        at=at,
    )
    return q.astype(np.int64)


# ---------------------------------------------------------------------------------------------
# systolic


def systolic_golden(params: SystolicParams, a, x, last) -> np.ndarray:
    """Output rows of the ``systolic`` stream: ``(blocks * R, C)`` int64, row 0 of block 0 first.

    ``a`` is ``(N, R)``, ``x`` ``(N, C)``, ``last`` ``(N,)``; beats after the final ``last``
    form no block. Raises ``ValueError`` for a block shorter than R beats.
    """
    a = np.asarray(a, np.int64).reshape(-1, params.rows)
    x = np.asarray(x, np.int64).reshape(-1, params.cols)
    last = np.asarray(last, bool)
    ends = np.flatnonzero(last)
    if ends.size == 0:
        return np.zeros((0, params.cols), np.int64)
    starts = np.concatenate([[0], ends[:-1] + 1])
    if np.any(ends - starts + 1 < params.rows):
        raise ValueError(f"every block needs at least rows={params.rows} beats")
    used = ends[-1] + 1
    products = wrap(a[:used, :, None] * x[:used, None, :], params.acc_bits)
    sums = np.add.reduceat(products, starts, axis=0)  # (blocks, R, C)
    return wrap(sums, params.acc_bits).reshape(-1, params.cols)


def systolic_tile_stream(params: SystolicParams, a_tile, x_block):
    """Beats that compute ``a_tile @ x_block`` (T x T times T x F): ``(a, x, last)``.

    Blocks run row block by row block, feature block by feature block (row block outer);
    rows past T and features past F are zero padding.
    """
    a_tile = np.asarray(a_tile, np.int64)
    x_block = np.asarray(x_block, np.int64)
    t, f = a_tile.shape[0], x_block.shape[1]
    rb, cb = math.ceil(t / params.rows), math.ceil(f / params.cols)
    a_pad = np.zeros((rb * params.rows, t), np.int64)
    a_pad[:t] = a_tile
    x_pad = np.zeros((t, cb * params.cols), np.int64)
    x_pad[:, :f] = x_block
    # a beats: for block (i, j), step k: a_pad[i*R:(i+1)*R, k]
    a_beats = a_pad.reshape(rb, params.rows, t).transpose(0, 2, 1)  # (rb, t, R)
    a_beats = np.broadcast_to(a_beats[:, None], (rb, cb, t, params.rows)).reshape(-1, params.rows)
    x_beats = x_pad.reshape(t, cb, params.cols).transpose(1, 0, 2)  # (cb, t, C)
    x_beats = np.broadcast_to(x_beats[None], (rb, cb, t, params.cols)).reshape(-1, params.cols)
    last = np.zeros((rb * cb, t), bool)
    last[:, -1] = True
    return a_beats, x_beats, last.reshape(-1)


def systolic_decode(params: SystolicParams, rows, tile: int, features: int) -> np.ndarray:
    """The T x F tile result from the output rows of :func:`systolic_tile_stream`'s blocks."""
    rb, cb = math.ceil(tile / params.rows), math.ceil(features / params.cols)
    blocks = np.asarray(rows, np.int64).reshape(rb, cb, params.rows, params.cols)
    full = blocks.transpose(0, 2, 1, 3).reshape(rb * params.rows, cb * params.cols)
    return full[:tile, :features]


def systolic_tile_golden(params: SystolicParams, a_tile, x_block) -> np.ndarray:
    """``wrap(a_tile @ x_block)``: what the array computes for one tile, exact, int64."""
    return wrap(_exact_matmul(a_tile, x_block), params.acc_bits)


def _exact_matmul(a, x) -> np.ndarray:
    a = np.asarray(a, np.int64)
    x = np.asarray(x, np.int64)
    # float64 is exact while every partial sum stays below 2**53 (BLAS speed); else int64.
    bound = float(np.abs(a).max(initial=0)) * float(np.abs(x).max(initial=0)) * a.shape[-1]
    if bound < 2.0**53:
        return (a.astype(np.float64) @ x.astype(np.float64)).astype(np.int64)
    return a @ x


# ---------------------------------------------------------------------------------------------
# sparse engine


def sparse_engine_golden(params: SparseEngineParams, kind, row, col, value, x, row_end):
    """Output beats of the ``sparse-engine`` stream: ``(rows, sums)``.

    ``rows`` is ``(M,)`` and ``sums`` ``(M, L)`` int64, one per NZ beat with ``row_end``, in
    stream order. ``x`` is ``(N, L)``. The feature buffer starts as zeros. Vectorized: each NZ
    beat reads the features of the latest LOAD of its column before it.
    """
    kind = np.asarray(kind, np.int64)
    col = np.asarray(col, np.int64)
    value = np.asarray(value, np.int64)
    x = np.asarray(x, np.int64).reshape(-1, params.lanes)
    row = np.asarray(row, np.int64)
    row_end = np.asarray(row_end, bool)
    n = kind.size
    is_load = kind == SparseBeat.LOAD
    is_nz = ~is_load
    # Latest LOAD of the same column before each beat: sort beats by (col, position) and
    # carry the last load index forward within each column group.
    order = np.lexsort((np.arange(n), col))
    load_pos = np.where(is_load[order], order, -1)
    group_start = np.r_[True, col[order][1:] != col[order][:-1]]
    marker = np.where(group_start | (load_pos >= 0), np.arange(n), 0)
    carried = load_pos[np.maximum.accumulate(marker)]
    source = np.empty(n, np.int64)
    source[order] = carried
    gathered = np.where((source >= 0)[:, None], x[np.maximum(source, 0)], 0)
    products = wrap(value[:, None] * gathered, params.acc_bits)
    nz_idx = np.flatnonzero(is_nz)
    ends_all = np.flatnonzero(is_nz & row_end)
    if ends_all.size == 0:
        return np.zeros(0, np.int64), np.zeros((0, params.lanes), np.int64)
    # A segment is the NZ beats after the previous row_end up to this one.
    nz_products = products[nz_idx]
    nz_end = row_end[nz_idx]
    seg_ends = np.flatnonzero(nz_end)
    seg_starts = np.concatenate([[0], seg_ends[:-1] + 1])
    sums = wrap(np.add.reduceat(nz_products, seg_starts, axis=0), params.acc_bits)
    return row[nz_idx[seg_ends]], sums


def sparse_tile_stream(params: SparseEngineParams, rows, cols, values, x_block, lane0: int = 0):
    """Beats of one pass over a sparse tile: LOADs of its distinct columns, then its non-zeros.

    ``rows``, ``cols``, ``values`` are the tile's non-zeros (tile-local indices, integer
    values) in row-major order; ``x_block`` is T x F; the pass covers features
    ``lane0 .. lane0 + L - 1`` (zero past F). Returns ``(kind, row, col, value, x, row_end)``.
    """
    rows = np.asarray(rows, np.int64)
    cols = np.asarray(cols, np.int64)
    values = np.asarray(values, np.int64)
    if rows.size and np.any(np.diff(rows) < 0):
        raise ValueError("non-zeros must be in row-major order")
    x_block = np.asarray(x_block, np.int64)
    lanes = np.zeros((x_block.shape[0], params.lanes), np.int64)
    take = x_block[:, lane0 : lane0 + params.lanes]
    lanes[:, : take.shape[1]] = take
    distinct = np.unique(cols)
    nl, nn = distinct.size, rows.size
    kind = np.r_[np.full(nl, SparseBeat.LOAD), np.full(nn, SparseBeat.NZ)]
    row = np.r_[np.zeros(nl, np.int64), rows]
    col = np.r_[distinct, cols]
    value = np.r_[np.zeros(nl, np.int64), values]
    x = np.concatenate([lanes[distinct], np.zeros((nn, params.lanes), np.int64)])
    row_end = np.r_[np.zeros(nl, bool), np.r_[rows[1:] != rows[:-1], True] if nn else []]
    return kind, row, col, value, x, row_end.astype(bool)


def sparse_tile_golden(params: SparseEngineParams, rows, cols, values, x_block) -> np.ndarray:
    """``wrap(A_tile @ x_block)`` of a sparse tile given as COO (tile-local), exact, int64."""
    x_block = np.asarray(x_block, np.int64)
    out = np.zeros((x_block.shape[0], x_block.shape[1]), np.int64)
    np.add.at(
        out,
        np.asarray(rows, np.int64),
        np.asarray(values, np.int64)[:, None] * x_block[np.asarray(cols, np.int64)],
    )
    return wrap(out, params.acc_bits)


# ---------------------------------------------------------------------------------------------
# GCN layer host: X·W on the GPU (torch), A·(XW) on the engines through a mapping


@dataclass(frozen=True)
class GcnResult:
    """One GCN layer's aggregation ``A_hat · (X · W)``.

    Attributes
    ----------
    output
        ``(n, F)`` float64: ``accumulators * x_scale / 2**a_frac``.
    accumulators
        ``(n, F)`` int64, the engines' exact sums (wrapped to ``acc_bits``), in node order.
    x_scale
        Real value of one feature LSB (``max|X·W| / (2**(x_bits-1) - 1)``).
    features
        ``(n, F)`` int64 quantized ``X · W`` the engines read.
    device
        Where torch ran ``X · W`` (``"cuda"`` or ``"cpu"``).
    nonzeros
        Non-zeros each engine processed: ``{"systolic": ..., "sparse-engine": ...}``.
    """

    output: np.ndarray
    accumulators: np.ndarray
    x_scale: float
    features: np.ndarray
    device: str
    nonzeros: dict


def gpu_transform(x, w, device: str | None = None):
    """``X · W`` as a torch matmul in float32 (CUDA if present, else CPU); numpy float64 out."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    xt = torch.as_tensor(np.asarray(x, np.float32), device=device)
    wt = torch.as_tensor(np.asarray(w, np.float32), device=device)
    return (xt @ wt).cpu().numpy().astype(np.float64), device


def quantize_features(xw, params) -> tuple[np.ndarray, float]:
    """Symmetric per-layer quantization of ``X · W`` to signed ``x_bits`` integers.

    The scale is the largest magnitude over ``2**(x_bits-1) - 1``, so no feature clips; a NaN
    raises ``ValueError``.
    """
    top = (1 << (params.x_bits - 1)) - 1
    peak = float(np.abs(xw).max(initial=0.0))
    scale = peak / top if peak > 0 else 1.0
    q = check_fit(np.rint(xw / scale), -top, top, name="X · W", fmt=f"x_bits={params.x_bits}")
    return q.astype(np.int64), scale


def mapped_spmm(mapping, adjacency, features, systolic: SystolicParams) -> tuple[np.ndarray, dict]:
    """``wrap(A_q · X_q)`` computed engine by engine as the mapping assigns the tiles.

    ``adjacency`` is the normalized CSR matrix the mapping was made from, ``features`` the
    ``(n, F)`` integers. Each engine's tiles are summed exactly (scipy int64 sparse times
    dense) and wrapped like its accumulators; the host adds the two partial results. This is
    the vectorized equivalent of running every tile through :func:`systolic_tile_golden` or
    :func:`sparse_tile_golden` and adding the tile results (tests/test_spmm_engines.py checks
    that, tile by tile).
    """
    import scipy.sparse as sp

    stats, ordering = mapping.stats, mapping.ordering
    t = stats.tile
    coo = adjacency.tocoo()
    rows, cols = ordering.position[coo.row], ordering.position[coo.col]
    tile_key = (rows // t) * stats.bands + cols // t
    known = stats.tile_row.astype(np.int64) * stats.bands + stats.tile_col
    on_systolic = mapping.dense[np.searchsorted(known, tile_key)]
    values = quantize_adjacency(coo.data, systolic)
    x = np.zeros((ordering.size, features.shape[1]), np.int64)
    x[ordering.position] = features
    total = np.zeros_like(x)
    nonzeros = {}
    for name, mask in (("systolic", on_systolic), ("sparse-engine", ~on_systolic)):
        part = sp.csr_matrix(
            (values[mask], (rows[mask], cols[mask])), shape=(ordering.size,) * 2, dtype=np.int64
        )
        total += wrap(part @ x, systolic.acc_bits)
        nonzeros[name] = int(mask.sum())
    return wrap(total, systolic.acc_bits)[ordering.position], nonzeros


def gcn_layer(mapping, adjacency, x, w, *, device: str | None = None) -> GcnResult:
    """One GCN aggregation layer: ``X · W`` on the GPU, ``A_hat · (X W)`` on the engines.

    Parameters
    ----------
    mapping
        :class:`tandem.mappings.spmm.mapper.Mapping` of ``adjacency``; its cost model carries
        the engines' parameter sets (formats must match, see :func:`check_formats_match`).
    adjacency
        GCN-normalized adjacency (CSR), as given to the mapper.
    x, w
        Node features ``(n, d)`` and layer weights ``(d, F)``.
    device
        torch device for ``X · W`` (default CUDA if present, else CPU).

    The engines run on the golden backend (bit-exact models, vectorized). Error against a
    float reference, per output of row i: at most ``sum_j |a_ij| * x_scale / 2`` from the
    features plus ``nnz_i * 2**-(a_frac+1) * (max|XW| + x_scale / 2)`` from the adjacency
    (tests check this bound).
    """
    systolic = mapping.model.systolic
    check_formats_match(systolic, mapping.model.sparse)
    xw, used = gpu_transform(x, w, device)
    features, scale = quantize_features(xw, systolic)
    acc, nonzeros = mapped_spmm(mapping, adjacency, features, systolic)
    output = acc.astype(np.float64) * (scale / (1 << systolic.a_frac))
    return GcnResult(output, acc, scale, features, used, nonzeros)
