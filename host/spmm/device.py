"""``SpmmDevice``: the host API of the two SpMM engines of a GCN layer, and its golden and RTL
backends.

::

    gcn = SpmmDevice(features=16)                  # systolic + sparse-engine, vck190 cost model
    gcn.load(adjacency)                            # GCN-normalized CSR; maps it (tandem map spmm)
    acc = gcn.aggregate(features_int)              # wrap(A_q @ X_q) in node order
    r = gcn.gcn_layer(x, w)                        # X·W on torch, A·(XW) on the engines
    gcn.last_engine_cycles                         # {"systolic": ..., "sparse-engine": ..., ...}

A request (:class:`SpmmRequest`) is one aggregation of a mapping. ``backend="golden"``
(:class:`GoldenSpmmBackend`) sums each engine's tiles exactly (or, with ``streams=True``, runs
every tile's beat stream through the engines' golden models) and reports the mapping's cost
model; ``backend="rtl"`` (:class:`RtlSpmmBackend`) runs both engines' Verilog, one simulator
each, side by side, with :class:`SpmmCodec` sending every tile as its engine's stream
(:func:`spmm_streams`); their cycles are simulated, the memory bound stays the cost model's
(the engines' RTL has no memory system) and the makespan is the largest of the three.
"""

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from tandem.host.backend.backend import Backend, Call
from tandem.host.backend.cosim import RtlStreamBackend, StreamCodec, StreamJob
from tandem.host.backend.device import Device
from tandem.host.common.arith import wrap
from tandem.host.common.checks import flag, instance, int_array, integer, positive_int, real_array

from .golden import (
    GcnResult,
    SparseEngineParams,
    SystolicParams,
    gpu_transform,
    mapped_spmm,
    quantize_adjacency,
    quantize_features,
    sparse_engine_golden,
    sparse_tile_stream,
    systolic_golden,
    systolic_tile_stream,
)

__all__ = [
    "GoldenSpmmBackend",
    "RtlSpmmBackend",
    "SpmmCodec",
    "SpmmDevice",
    "SpmmRequest",
    "SpmmStreams",
    "spmm_streams",
]


@dataclass
class SpmmRequest:
    """One aggregation: ``mapping`` of ``adjacency``, integer ``features`` (n, F)."""

    mapping: object
    adjacency: object
    features: np.ndarray
    streams: bool = False


@dataclass
class SpmmStreams:
    """Every tile of a mapping as its engine's beat stream, tiles back to back per engine.

    Each engine walks its tiles in the mapping's order (:meth:`Mapping.engine_orders`), so
    one stream per engine covers the whole aggregation and its run takes the cost model's
    ``tiles + fill`` cycles. Tiles are T x T (the node order is padded to whole tiles).

    Attributes
    ----------
    systolic
        ``(a, x, last)`` of :func:`~tandem.host.spmm.golden.systolic_tile_stream`,
        concatenated over the dense tiles; ``None`` when no tile is dense.
    sparse
        ``(kind, row, col, value, x, row_end)`` of
        :func:`~tandem.host.spmm.golden.sparse_tile_stream` over every pass of every sparse
        tile; ``None`` when no tile is sparse.
    dense_rows
        Tile row of each dense tile, in stream order.
    sparse_base, sparse_lane
        Per sparse-engine output beat: first (padded) node position of its tile row, first
        feature of its pass.
    """

    mapping: object
    features: int
    systolic: tuple | None
    sparse: tuple | None
    dense_rows: np.ndarray
    sparse_base: np.ndarray
    sparse_lane: np.ndarray

    @property
    def systolic_outputs(self) -> int:
        """Output rows the systolic array sends (R per block)."""
        return 0 if self.systolic is None else int(self.systolic[2].sum()) * self.params[0].rows

    @property
    def sparse_outputs(self) -> int:
        """Output beats the sparse engine sends (one per row segment and pass)."""
        return int(self.sparse_base.size)

    @property
    def params(self) -> tuple:
        """``(SystolicParams, SparseEngineParams)`` of the mapping."""
        return self.mapping.model.systolic, self.mapping.model.sparse

    def gather(self, systolic_rows, sparse_rows, sparse_sums) -> np.ndarray:
        """``wrap(A_q @ X_q)`` in node order from the engines' output beats.

        ``systolic_rows`` ``(blocks * R, C)`` as :func:`~tandem.host.spmm.golden.systolic_golden`
        returns them, ``sparse_rows`` ``(M,)`` and ``sparse_sums`` ``(M, L)`` as
        :func:`~tandem.host.spmm.golden.sparse_engine_golden` does.
        """
        sysp, spp = self.params
        order, t, f = self.mapping.ordering, self.mapping.stats.tile, self.features
        bands = self.mapping.stats.bands
        wide = math.ceil(f / sysp.cols) * sysp.cols
        wide = max(wide, spp.passes(f) * spp.lanes)
        out = np.zeros((bands * t, wide), np.int64)
        n = self.dense_rows.size
        if n:
            rb, cb = math.ceil(t / sysp.rows), math.ceil(f / sysp.cols)
            blocks = np.asarray(systolic_rows, np.int64).reshape(n, rb, cb, sysp.rows, sysp.cols)
            parts = blocks.transpose(0, 1, 3, 2, 4).reshape(n, rb * sysp.rows, cb * sysp.cols)
            view = out.reshape(bands, t, wide)
            np.add.at(view[:, :, : cb * sysp.cols], self.dense_rows, parts[:, :t])
        if self.sparse_base.size:
            rows = self.sparse_base + np.asarray(sparse_rows, np.int64)
            cols = self.sparse_lane[:, None] + np.arange(spp.lanes)
            np.add.at(out, (rows[:, None], cols), np.asarray(sparse_sums, np.int64))
        return wrap(out[: order.size, :f], sysp.acc_bits)[order.position]


def spmm_streams(mapping, adjacency, features) -> SpmmStreams:
    """The beat streams of both engines for ``wrap(A_q @ X_q)`` (see :class:`SpmmStreams`)."""
    import scipy.sparse as sp

    sysp, spp = mapping.model.systolic, mapping.model.sparse
    stats, order = mapping.stats, mapping.ordering
    t, f, size = stats.tile, features.shape[1], stats.bands * stats.tile
    coo = adjacency.tocoo()
    permuted = sp.csr_matrix(
        (quantize_adjacency(coo.data, sysp), (order.position[coo.row], order.position[coo.col])),
        shape=(size, size),
        dtype=np.int64,
    )
    x = np.zeros((size, f), np.int64)
    x[order.position] = features

    def tile(k):
        i, j = int(stats.tile_row[k]), int(stats.tile_col[k])
        return (
            i,
            permuted[i * t : (i + 1) * t, j * t : (j + 1) * t].toarray(),
            x[j * t : (j + 1) * t],
        )

    dense_order, sparse_order = mapping.engine_orders()
    systolic = [systolic_tile_stream(sysp, *tile(k)[1:]) for k in dense_order]
    sparse, base, lane = [], [], []
    for k in sparse_order:
        i, block, xb = tile(k)
        r, c = np.nonzero(block)
        for lane0 in range(0, f, spp.lanes):
            beats = sparse_tile_stream(spp, r, c, block[r, c], xb, lane0)
            sparse.append(beats)
            ends = int(beats[5].sum())
            base.append(np.full(ends, i * t, np.int64))
            lane.append(np.full(ends, lane0, np.int64))

    def joined(streams):
        return tuple(np.concatenate(part) for part in zip(*streams)) if streams else None

    return SpmmStreams(
        mapping=mapping,
        features=f,
        systolic=joined(systolic),
        sparse=joined(sparse),
        dense_rows=stats.tile_row[dense_order].astype(np.int64),
        sparse_base=np.concatenate(base) if base else np.zeros(0, np.int64),
        sparse_lane=np.concatenate(lane) if lane else np.zeros(0, np.int64),
    )


def _stream_spmm(mapping, adjacency, features) -> np.ndarray:
    """``wrap(A_q @ X_q)`` with every tile run as a beat stream through its engine's golden."""
    streams = spmm_streams(mapping, adjacency, features)
    sysp, spp = streams.params
    rows = (
        systolic_golden(sysp, *streams.systolic)
        if streams.systolic is not None
        else np.zeros((0, sysp.cols), np.int64)
    )
    if streams.sparse is not None:
        out_rows, sums = sparse_engine_golden(spp, *streams.sparse)
    else:
        out_rows, sums = np.zeros(0, np.int64), np.zeros((0, spp.lanes), np.int64)
    return streams.gather(rows, out_rows, sums)


def _cost_cycles(mapping) -> dict[str, int]:
    totals = mapping.plan.totals
    return {
        "systolic": int(totals.systolic_cycles),
        "sparse-engine": int(totals.sparse_cycles),
        "memory": int(totals.memory_cycles),
        "makespan": int(totals.makespan),
    }


class GoldenSpmmBackend(Backend):
    """``systolic`` + ``sparse-engine`` on their golden models.

    ``streams=False`` runs :func:`~tandem.host.spmm.golden.mapped_spmm` (each engine's tiles
    summed exactly, vectorized: the path :func:`~tandem.host.spmm.golden.gcn_layer` takes);
    ``streams=True`` sends every tile as its engine's beat stream through
    :func:`~tandem.host.spmm.golden.systolic_golden` or
    :func:`~tandem.host.spmm.golden.sparse_engine_golden` (slower, for checks): the streams of
    :func:`spmm_streams`, which the RTL backend sends. Cycles are the mapping's predicted ones
    (the cost model): per engine, the memory bound and the makespan.
    """

    name = "golden"

    def __init__(self, params):
        self.params = params

    def run(self, requests: list[SpmmRequest]) -> Call:
        results, total, per_engine = [], 0, {}
        for request in requests:
            mapping = request.mapping
            if request.streams:
                acc = _stream_spmm(mapping, request.adjacency, request.features)
            else:
                acc, _ = mapped_spmm(
                    mapping, request.adjacency, request.features, mapping.model.systolic
                )
            results.append(acc)
            cycles = _cost_cycles(mapping)
            total += cycles["makespan"]
            for name, n in cycles.items():
                per_engine[name] = per_engine.get(name, 0) + n
        return Call(results, total, per_engine)


class SpmmCodec(StreamCodec):
    """The SpMM engines' RTL side: every tile of a mapping as its engine's beat stream.

    Each engine runs all of its tiles as one stream (:func:`spmm_streams`, the mapping's
    schedule); cycles per engine run from its first beat offered to its last row taken.
    """

    def __init__(self, params):
        self.params = tuple(params)
        self._streams = None

    def engine_params(self) -> dict:
        return {p.design: p for p in self.params}

    def encode(self, request: SpmmRequest) -> dict[str, StreamJob]:
        mapping = request.mapping
        sysp, spp = mapping.model.systolic, mapping.model.sparse
        streams = spmm_streams(mapping, request.adjacency, request.features)
        self._streams = streams
        jobs = {}
        if streams.systolic is not None:
            a, x, last = streams.systolic
            widths = [sysp.a_bits] * sysp.rows + [sysp.x_bits] * sysp.cols + [1]
            rows = np.concatenate([a, x, last[:, None].astype(np.int64)], axis=1)
            count = streams.systolic_outputs
            steps = [
                ("start",),
                ("send", "i", ("fields", widths, rows)),
                ("recv", "o", count, [sysp.acc_bits] * sysp.cols),
            ]
            jobs["systolic"] = StreamJob(steps, len(rows) + count)
        if streams.sparse is not None:
            kind, row, col, value, x, row_end = streams.sparse
            ib = spp.index_bits
            widths = [1, ib, ib, spp.a_bits] + [spp.x_bits] * spp.lanes + [1]
            fields = [kind, row, col, value]
            rows = np.column_stack([*fields, x, row_end.astype(np.int64)]).astype(np.int64)
            count = streams.sparse_outputs
            steps = [
                ("start",),
                ("send", "i", ("fields", widths, rows)),
                ("recv", "o", count, [ib] + [spp.acc_bits] * spp.lanes),
            ]
            jobs["sparse-engine"] = StreamJob(steps, len(rows) + count)
        return jobs

    def decode(self, request: SpmmRequest, outputs, cycles):
        mapping, streams = request.mapping, self._streams
        sysp, spp = mapping.model.systolic, mapping.model.sparse
        engine_cycles = {name: int(cycles.get(name, 0)) for name in ("systolic", "sparse-engine")}
        systolic_rows = (
            outputs["systolic"][0] if "systolic" in outputs else np.zeros((0, sysp.cols), np.int64)
        )
        if "sparse-engine" in outputs:
            beats = outputs["sparse-engine"][0]
            out_rows, sums = beats[:, 0] & ((1 << spp.index_bits) - 1), beats[:, 1:]
        else:
            out_rows, sums = np.zeros(0, np.int64), np.zeros((0, spp.lanes), np.int64)
        acc = streams.gather(systolic_rows, out_rows, sums)
        engine_cycles["memory"] = int(mapping.plan.totals.memory_cycles)
        engine_cycles["makespan"] = max(engine_cycles.values())
        return acc, engine_cycles


class RtlSpmmBackend(RtlStreamBackend):
    """``systolic`` + ``sparse-engine`` on RTL, one simulator per engine, run side by side.

    Parameters
    ----------
    params
        ``(SystolicParams, SparseEngineParams)``.
    **options
        As :class:`~tandem.host.backend.cosim.RtlStreamBackend`; with ``run_dir``, each
        engine logs into a subfolder named after its design.
    """

    def __init__(self, params, **options):
        super().__init__(SpmmCodec(params), **options)


class SpmmDevice(Device):
    """The two SpMM engines (``systolic`` and ``sparse-engine``) of a GCN layer (docs/spmm.md).

    Parameters
    ----------
    systolic, sparse
        Engine parameter sets (defaults: the designs' defaults); formats must match.
    features
        F, output features of the layer (the cost model and the mapping are per F).
    tile
        Tile edge T of the mapping (default: the sparse engine's ``tile``).
    board
        Board name whose clock and memory bandwidth the cost model uses.
    backend
        ``"golden"`` (default) or ``"rtl"`` (one simulator per engine, see the module
        docstring).
    name
        Label in messages.
    **options
        For ``backend="rtl"``: ``simulator``, ``timeout_s``, ``start_timeout_s``,
        ``cache_dir``, ``run_dir`` (each engine logs into a subfolder named after it).

    Notes
    -----
    No value is clipped silently. Adjacency values are loaded once and must fit ``a_bits``
    (:meth:`load` raises ``ValueError`` otherwise); :meth:`aggregate` takes ``x_bits``
    integers (others raise); :meth:`gcn_layer` scales ``X · W`` from its largest magnitude, so
    no feature clips. The engines never saturate (their sums wrap at ``acc_bits``).

    ``last_cycles`` is the makespan of the last call and ``last_engine_cycles`` the per-engine
    cycles (``systolic``, ``sparse-engine``, ``memory``, ``makespan``): the cost model's on
    golden; on RTL the two engines' simulated cycles (each runs its tiles as one stream, the
    two side by side), the cost model's memory bound, and the largest of the three.
    """

    backends: ClassVar[dict] = {}  # filled below the backend classes

    def __init__(
        self,
        systolic: SystolicParams | None = None,
        sparse: SparseEngineParams | None = None,
        *,
        features: int,
        tile: int | None = None,
        board: str = "vck190",
        backend: str = "golden",
        name: str = "spmm0",
        **options,
    ):
        from tandem.mappings.spmm.cost import CostModel

        from tandem.boards import load_board
        from tandem.errors import UserError

        systolic = SystolicParams() if systolic is None else systolic
        sparse = SparseEngineParams() if sparse is None else sparse
        instance(systolic, SystolicParams, "systolic")
        instance(sparse, SparseEngineParams, "sparse")
        features = positive_int(features, "features")
        if tile is not None:
            tile = integer(
                tile, "tile", systolic.rows, sparse.tile, " (systolic rows..sparse tile)"
            )
        if not isinstance(board, str):
            raise ValueError(f"board must be a board name, not {board!r}")
        try:  # an unknown board, formats that differ, too few DSPs: one line, as ValueError
            model = CostModel(
                systolic, sparse, load_board(board), sparse.tile if tile is None else tile, features
            )
        except UserError as exc:
            raise ValueError(str(exc)) from None
        super().__init__((systolic, sparse), backend=backend, name=name, options=options)
        self.model = model
        self.mapping = None
        self.adjacency = None

    @property
    def features(self) -> int:
        return self.model.features

    def load(self, adjacency, *, normalize: bool = False, reorder: str = "partition", mapping=None):
        """Map ``adjacency`` (square scipy sparse) onto the engines; returns the Mapping.

        ``normalize=True`` applies the GCN normalization first (self loops, D^-1/2 A D^-1/2);
        ``mapping`` reuses one made earlier by :func:`~tandem.mappings.spmm.mapper.map_adjacency`
        for this adjacency (its cost model must have this device's F). A value that does not
        fit ``a_bits`` with ``a_frac`` fraction bits (after the normalization) raises
        ``ValueError`` naming it, where it is and the range; nothing is clipped.
        """
        import scipy.sparse as sp
        from tandem.mappings.spmm.graph import gcn_normalize
        from tandem.mappings.spmm.mapper import Mapping, map_adjacency

        if not sp.issparse(adjacency) or adjacency.ndim != 2:
            raise ValueError(
                f"adjacency must be a scipy sparse matrix, not {type(adjacency).__name__}"
            )
        if adjacency.shape[0] != adjacency.shape[1]:
            raise ValueError(f"adjacency must be square, not {adjacency.shape}")
        if adjacency.shape[0] == 0:
            raise ValueError("adjacency has no node (shape (0, 0))")
        real_array(adjacency.data, "adjacency values")
        normalize = flag(normalize, "normalize")
        if mapping is not None:
            instance(mapping, Mapping, "mapping")
        a = gcn_normalize(adjacency) if normalize else sp.csr_matrix(adjacency)
        a.sum_duplicates()
        a.sort_indices()
        # Loaded once: a value beyond the format raises here, before the mapping's work.
        formats = (self.model if mapping is None else mapping.model).systolic
        quantize_adjacency(a.data, formats, at=lambda i: _position(a, i))
        if mapping is None:
            mapping = map_adjacency(a, self.model, reorder=reorder, source=self.name)
        elif mapping.nodes != a.shape[0] or mapping.model.features != self.features:
            raise ValueError(
                f"mapping is for {mapping.nodes} nodes and F={mapping.model.features}, not "
                f"{a.shape[0]} nodes and F={self.features}"
            )
        self.mapping, self.adjacency = mapping, a
        return mapping

    def _loaded(self):
        self._check_open()
        if self.mapping is None:
            raise ValueError(f"{self.name}: no adjacency loaded (call load first)")
        return self.mapping

    def aggregate(self, features, *, streams: bool = False) -> np.ndarray:
        """``wrap(A_q @ X_q)`` (int64, node order) for integer ``features`` (n, F).

        ``streams=True`` runs every tile as its engine's beat stream (slower; same result);
        the RTL backend always does.
        """
        mapping = self._loaded()
        streams = flag(streams, "streams")
        systolic = mapping.model.systolic
        x = int_array(features, "features", systolic.x_bits, ndim=(2,))
        if x.shape != (mapping.nodes, self.features):
            raise ValueError(f"features must be ({mapping.nodes}, {self.features}), not {x.shape}")
        (result,) = self._run([SpmmRequest(mapping, self.adjacency, x, streams)])
        return result

    def gcn_layer(self, x, w, *, device: str | None = None, streams: bool = False) -> GcnResult:
        """``A_hat · (X · W)``: ``X · W`` on torch (``device``), the aggregation on the engines.

        Bit-exact with :func:`tandem.host.spmm.golden.gcn_layer` on the same mapping (same
        transform, same quantization; the aggregation goes through this device's backend).
        """
        mapping = self._loaded()
        streams = flag(streams, "streams")
        x, w = real_array(x, "x"), real_array(w, "w")
        device = _torch_device(device)
        if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
            raise ValueError(f"x {x.shape} and w {w.shape} do not multiply")
        if x.shape[0] != mapping.nodes or w.shape[1] != self.features:
            raise ValueError(
                f"x must have {mapping.nodes} rows and w {self.features} columns, "
                f"not {x.shape} and {w.shape}"
            )
        limit = float(np.finfo(np.float32).max)
        for name, array in (("x", x), ("w", w)):
            if array.size and np.abs(array).max() > limit:
                raise ValueError(f"{name} exceeds float32's range (X · W runs in float32)")
        systolic = mapping.model.systolic
        xw, used = gpu_transform(x, w, device)
        if not np.isfinite(xw).all():
            raise ValueError("x · w overflows float32 (x or w too large)")
        features, scale = quantize_features(xw, systolic)
        acc = self.aggregate(features, streams=streams)
        output = acc.astype(np.float64) * (scale / (1 << systolic.a_frac))
        nonzeros = {
            "systolic": mapping.stats.nnz_sum(mapping.dense),
            "sparse-engine": mapping.stats.nnz_sum(~mapping.dense),
        }
        return GcnResult(output, acc, scale, features, used, nonzeros)

    def __repr__(self) -> str:
        loaded = "empty" if self.mapping is None else f"{self.mapping.nodes} nodes"
        return (
            f"SpmmDevice({self.name!r}, backend={self.backend.name!r}, F={self.features}, {loaded})"
        )


def _position(csr, index: int) -> str:
    """Where stored value ``index`` of ``csr`` (sorted, no duplicates) sits, for a message."""
    row = int(np.searchsorted(csr.indptr, index, side="right")) - 1
    return f" at ({row}, {int(csr.indices[index])})"


def _torch_device(device: str | None) -> str | None:
    """``device`` checked to name a torch device this machine has (None: CUDA if present)."""
    if device is None:
        return None
    import torch

    if not isinstance(device, str):
        raise ValueError(f"device must be a torch device name such as 'cpu', not {device!r}")
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"device {device!r} is not usable here ({reason})") from None
    return device


SpmmDevice.backends = {"golden": GoldenSpmmBackend, "rtl": RtlSpmmBackend}
