"""Devices of the other accelerators: the sparse matrix engine, the SpMM engines, the LSTM/GRU
engine.

Each class is the host API of one design, in the style of :class:`~tandem.host.devices.HpuDevice`:
small, synchronous, numpy in and out, with the cycles of every call::

    mpe = SparseMatrixDevice()                     # sparse-mpe, backend="golden"
    mpe.load(w_int8, "2:4")                        # or mpe.load("packed.npz") from `tandem pack nm`
    y = mpe.gemv(x_int8)                           # int32 [rows] == W @ x (decode)
    Y = mpe.gemm(X_int8)                           # int32 [rows, batch] == W @ X (prefill)

    gcn = SpmmDevice(features=16)                  # systolic + sparse-engine, vck190 cost model
    gcn.load(adjacency)                            # GCN-normalized CSR; maps it (tandem map spmm)
    acc = gcn.aggregate(features_int)              # wrap(A_q @ X_q) in node order
    r = gcn.gcn_layer(x, w)                        # X·W on torch, A·(XW) on the engines
    gcn.last_engine_cycles                         # {"systolic": ..., "sparse-engine": ..., ...}

    lstm = RnnDevice(RnnParams(batch=2))           # rnn
    lstm.load(torch_lstm.state_dict())             # or lstm.load("lstm_x8_h16.program.npz")
    h, c = lstm.run(lstm.quantize(x))              # (T, B, H) int trajectories

    gru = RnnDevice(RnnParams(cell="gru"))         # the same engine built with cell="gru"
    gru.load(torch_gru.state_dict())               # or a `tandem map rnn --cell gru` program
    h, c = gru.run(gru.quantize(x))                # c is None: a GRU has no cell state

Backends
--------
Every device reaches its engine through an :class:`EngineTransport`, the layer everything above
is written against (the role :class:`~tandem.host.transport.Transport` plays for the HPU).
``backend="golden"`` (default) runs the design's bit-exact numpy model and reports the cycles
of the design's documented cycle behaviour (its performance model); ``backend="rtl"`` runs the
generated Verilog in Verilator (default) or Icarus (``simulator="icarus"``) under cocotb in a
subprocess and reports simulated cycles (:mod:`tandem.host.accel_transport_rtl`): the same
host-side encoders send the same beats to :mod:`tandem.sim.cosim.stream_server` over a Unix
socket, so a script gets bit-identical results on either backend by changing one argument::

    mpe = SparseMatrixDevice(backend="rtl", simulator="verilator")   # or "icarus"
    gcn = SpmmDevice(features=16, backend="rtl")   # two simulators, one per engine

The simulator starts on the first call (building the Verilog once per parameters, cached in
``~/.cache/tandem/sim``) and stops on :meth:`close`, at the end of a ``with`` block or at
exit; a simulator failure or death raises :class:`~tandem.host.transport_rtl.CosimError`, a
call longer than ``timeout_s`` :class:`~tandem.host.transport_rtl.CosimTimeoutError`. Options
``simulator``, ``timeout_s``, ``start_timeout_s``, ``cache_dir`` and ``run_dir`` go to the RTL
transport. On RTL, ``SpmmDevice``'s ``memory`` cycles stay the cost model's (the engines' RTL
has no memory system); ``systolic`` and ``sparse-engine`` are simulated.

Every device keeps ``last_cycles`` (the most recent call), ``total_cycles`` and ``calls``.
Malformed calls raise :class:`ValueError` with one line naming the bad value; what the packer
or mapper rejects raises their :class:`~tandem.errors.UserError` subclasses.
"""

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tandem.mappings.nm import NMPacked, NMPattern, mpe_streams, pack_nm
from tandem.mappings.nm.engine import FILL_BEYOND_STAGES, MpeStreams, request_cycles
from tandem.mappings.rnn.schedule import sequence_cycles
from tandem.mappings.rnn.tiling import TileProgram, build_program, packed_rows

from .rnn import QuantLstm, RnnParams, quantize_lstm, quantize_state, rnn_golden
from .sparse_dsp import SparseMpeParams, mpe_golden
from .spmm import (
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
    "BACKENDS",
    "EngineCall",
    "EngineTransport",
    "GoldenMpeTransport",
    "GoldenRnnTransport",
    "GoldenSpmmTransport",
    "RnnDevice",
    "RnnRequest",
    "SparseMatrixDevice",
    "SpmmDevice",
    "SpmmRequest",
    "SpmmStreams",
    "make_engine_transport",
    "mpe_cycles",
    "spmm_streams",
    "unpack_lstm_tiles",
]

BACKENDS = ("golden", "rtl")

#: Cycles of ``sparse-mpe`` from a pass's last result capture to its last result taken, beyond
#: the captured token pair's results and the chain's stages: the chain's ``stages + 4`` beats
#: to the result bank plus one serializer register. Measured on Icarus with 2, 4 and 8 stages
#: and on Verilator with 4 and 8 (see :func:`mpe_cycles`).
MPE_FILL_BEYOND_STAGES = FILL_BEYOND_STAGES


# --- transports ----------------------------------------------------------------------------
@dataclass
class EngineCall:
    """What :meth:`EngineTransport.run` returns: the engine's raw result and its cycles.

    ``cycles`` is an int, or for the two SpMM engines a dict of per-engine cycles.
    """

    result: object
    cycles: object


class EngineTransport(ABC):
    """How a device reaches its engine: one request in, the engine's raw result and cycles out.

    Everything above (packing, mapping, tiling, unpacking, batching) is shared by every
    backend, so a script runs unchanged on any of them.
    """

    backend = "abstract"
    design = "abstract"

    @abstractmethod
    def run(self, request) -> EngineCall:
        """Run one request (a design-specific object, see the golden transports)."""

    def close(self) -> None:  # noqa: B027 (optional for transports with nothing to release)
        """Release the backend; the transport is unusable afterwards."""


def mpe_cycles(streams: MpeStreams) -> int:
    """Modelled ``sparse-mpe`` cycles of one request, first weight beat to last result.

    Cycle-exact with the RTL (hw/sparse_dsp/mpe.py) when the weight stream never waits and the
    results are taken as they come. The weight stream issues one beat per cycle, each held for
    every token pair, ``B = steps * n * P`` beats per pass for ``P`` token pairs. A pass's
    last slot closes its row once per token pair, on ``P`` consecutive beats; each closing
    beat loads the result serializer with that pair's ``Rp = 2 * chains * segments`` results,
    which leave one per cycle. A closing beat that finds the serializer still full stalls the
    whole pipeline (weight stream included) until it empties, so two captures are at least
    ``Rp + 1`` cycles apart: the ``P - 1`` later captures of a pass cost ``Rp + 1`` each, and
    the next pass's first capture comes ``B - P + 1`` beats after the previous one, or
    ``Rp + 1`` cycles when the serializer is still busy. Hence::

        cycles = (B - P + 1) + passes * (P - 1) * (Rp + 1)
                 + (passes - 1) * max(B - P + 1, Rp + 1) + Rp + stages + 5

    (``5``: :data:`MPE_FILL_BEYOND_STAGES`). With one token pair (GEMV, GEMM of up to two
    tokens) and passes longer than their results this is
    ``passes * B + Rp + stages + 5``. The activation load before the first weight beat is not
    counted (as in the benchmark).
    """
    p, lay, cfg = streams.params, streams.layout, streams.cfg
    # One formula, also the packer's choice of segment length (mappings/nm/engine.py).
    return request_cycles(p.stages, p.chains, lay.segs, lay.steps, cfg["n"], lay.pairs, lay.passes)


class GoldenMpeTransport(EngineTransport):
    """``sparse-mpe`` through :func:`~tandem.host.sparse_dsp.mpe_golden`.

    A request is an :class:`~tandem.mappings.nm.engine.MpeStreams`; the result is the
    engine's int32 result stream in output order; cycles from :func:`mpe_cycles`.
    """

    backend, design = "golden", "sparse-mpe"

    def __init__(self, params: SparseMpeParams):
        self.params = params

    def run(self, request: MpeStreams) -> EngineCall:
        out = mpe_golden(self.params, request.cfg, request.act_beats, request.w_beats)
        return EngineCall(out, mpe_cycles(request))


@dataclass
class SpmmRequest:
    """One aggregation: ``mapping`` of ``adjacency``, integer ``features`` (n, F)."""

    mapping: object
    adjacency: object
    features: np.ndarray
    streams: bool = False


class GoldenSpmmTransport(EngineTransport):
    """``systolic`` + ``sparse-engine`` on their golden models.

    ``streams=False`` runs :func:`~tandem.host.spmm.mapped_spmm` (each engine's tiles summed
    exactly, vectorized: the path :func:`~tandem.host.spmm.gcn_layer` takes);
    ``streams=True`` sends every tile as its engine's beat stream through
    :func:`~tandem.host.spmm.systolic_golden` or :func:`~tandem.host.spmm.sparse_engine_golden`
    (slower, for checks): the streams of :func:`spmm_streams`, which the RTL backend sends.
    Cycles are the mapping's predicted ones (the cost model).
    """

    backend, design = "golden", "systolic+sparse-engine"

    def run(self, request: SpmmRequest) -> EngineCall:
        mapping = request.mapping
        if request.streams:
            acc = _stream_spmm(mapping, request.adjacency, request.features)
        else:
            acc, _ = mapped_spmm(
                mapping, request.adjacency, request.features, mapping.model.systolic
            )
        totals = mapping.plan.totals
        cycles = {
            "systolic": int(totals.systolic_cycles),
            "sparse-engine": int(totals.sparse_cycles),
            "memory": int(totals.memory_cycles),
            "makespan": int(totals.makespan),
        }
        return EngineCall(acc, cycles)


@dataclass
class SpmmStreams:
    """Every tile of a mapping as its engine's beat stream, tiles back to back per engine.

    Each engine walks its tiles in the mapping's order (:meth:`Mapping.engine_orders`), so
    one stream per engine covers the whole aggregation and its run takes the cost model's
    ``tiles + fill`` cycles. Tiles are T x T (the node order is padded to whole tiles).

    Attributes
    ----------
    systolic
        ``(a, x, last)`` of :func:`~tandem.host.spmm.systolic_tile_stream`, concatenated over
        the dense tiles; ``None`` when no tile is dense.
    sparse
        ``(kind, row, col, value, x, row_end)`` of :func:`~tandem.host.spmm.sparse_tile_stream`
        over every pass of every sparse tile; ``None`` when no tile is sparse.
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

        ``systolic_rows`` ``(blocks * R, C)`` as :func:`~tandem.host.spmm.systolic_golden`
        returns them, ``sparse_rows`` ``(M,)`` and ``sparse_sums`` ``(M, L)`` as
        :func:`~tandem.host.spmm.sparse_engine_golden` does.
        """
        from tandem.host.common.arith import wrap

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


@dataclass
class RnnRequest:
    """One engine command: ``model`` and ``program``, ``x`` (T, params.batch, X) int16."""

    model: QuantLstm
    program: TileProgram
    x: np.ndarray


class GoldenRnnTransport(EngineTransport):
    """``rnn`` through :func:`~tandem.host.rnn.lstm_golden` (``cell = "gru"``:
    :func:`~tandem.host.rnn.gru_golden`); cycles from the scheduler's model.

    Every command starts from zero state (as the engine does) and runs ``params.batch``
    sequences; the result is ``(h, c)`` as the engine's output stream carries them (a GRU's c
    is zeros). Cycles are :func:`~tandem.mappings.rnn.schedule.sequence_cycles`, command
    transfer to last output, which the RTL matches exactly for both cells (tests/test_rnn.py).
    """

    backend, design = "golden", "rnn"

    def __init__(self, params: RnnParams):
        self.params = params

    def run(self, request: RnnRequest) -> EngineCall:
        h, c = rnn_golden(self.params, (request.model, request.x))
        steps, batch = request.x.shape[:2]
        cycles, _ = sequence_cycles(request.program, batch, steps)
        return EngineCall((h, c), int(cycles))


_GOLDEN = {
    "sparse-mpe": GoldenMpeTransport,
    "spmm": lambda params: GoldenSpmmTransport(),
    "rnn": GoldenRnnTransport,
}


def make_engine_transport(design: str, backend: str, params=None, **options) -> EngineTransport:
    """The transport of ``design`` (``"sparse-mpe"``, ``"spmm"``, ``"rnn"``) on ``backend``.

    ``options`` go to the RTL transports (:mod:`tandem.host.accel_transport_rtl`):
    ``simulator``, ``timeout_s``, ``start_timeout_s``, ``cache_dir``, ``run_dir``.
    """
    if backend == "golden":
        if options:
            raise ValueError(f"the golden backend takes no options, got {sorted(options)}")
        return _GOLDEN[design](params)
    if backend == "rtl":
        from . import accel_transport_rtl as rtl

        transports = {
            "sparse-mpe": rtl.RtlMpeTransport,
            "spmm": rtl.RtlSpmmTransport,
            "rnn": rtl.RtlRnnTransport,
        }
        return transports[design](params, **options)
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


class _Device:
    """Shared bookkeeping: backend, cycle counters, lifetime."""

    design = "abstract"

    def __init__(self, params, backend: str, name: str, options: dict):
        self.params = params
        self.backend = backend
        self.name = name
        self.transport = make_engine_transport(self.design, backend, params, **options)
        #: Cycles of the most recent call, and of every call since creation.
        self.last_cycles = 0
        self.total_cycles = 0
        self.calls = 0

    def _count(self, cycles: int) -> None:
        self.last_cycles = int(cycles)
        self.total_cycles += int(cycles)
        self.calls += 1

    def close(self) -> None:
        """Stop the backend; the device is unusable afterwards."""
        self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _int_array(values, name: str, bits: int, ndim: tuple[int, ...]) -> np.ndarray:
    """``values`` as int64, checked: integer dtype, signed ``bits`` range, ``ndim`` allowed."""
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers (quantize first), not {array.dtype}")
    if array.ndim not in ndim:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndim))} dimensions, not shape {array.shape}"
        )
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if array.size and (array.min() < lo or array.max() > hi):
        raise ValueError(f"{name} must be int{bits} ({lo}..{hi})")
    return array.astype(np.int64)


# --- sparse-mpe ----------------------------------------------------------------------------
class SparseMatrixDevice(_Device):
    """The ``sparse-mpe`` N:M sparse int8 matrix engine (docs/sparse_dsp.md).

    Parameters
    ----------
    params
        Engine parameters (default :class:`~tandem.host.sparse_dsp.SparseMpeParams()`).
    backend
        ``"golden"`` (default) or ``"rtl"`` (the Verilog in a simulator, see the module
        docstring).
    name
        Label in messages.
    **options
        For ``backend="rtl"``: ``simulator``, ``timeout_s``, ``start_timeout_s``,
        ``cache_dir``, ``run_dir`` (:class:`~tandem.host.transport_rtl.CosimClient`).

    Notes
    -----
    ``gemv`` uses the matrix-vector mode (row pairs sharing indices fill both DSP lanes, see
    ``prune_magnitude(..., pair_rows=True)``); ``gemm`` the matrix-matrix mode, ``max_batch``
    tokens per request, larger batches as several requests. ``last_cycles`` is the cycles of
    the requests, first weight beat to last result: modelled (:func:`mpe_cycles`, exact while
    a request holds at most one token pair) on golden, simulated on RTL.
    """

    design = "sparse-mpe"

    def __init__(
        self,
        params: SparseMpeParams | None = None,
        *,
        backend: str = "golden",
        name: str = "mpe0",
        **options,
    ):
        super().__init__(SparseMpeParams() if params is None else params, backend, name, options)
        self.packed: NMPacked | None = None

    def load(self, weights, pattern: str | NMPattern | None = None) -> NMPacked:
        """Load N:M weights: an :class:`~tandem.mappings.nm.NMPacked`, a packed ``.npz`` path
        (as ``tandem pack nm`` writes it), or a dense int8 matrix [rows, cols] with ``pattern``.

        Returns the packed matrix; raises :class:`~tandem.mappings.nm.NMError` (a UserError)
        when the matrix is not N:M or the engine cannot hold it.
        """
        if isinstance(weights, (str, Path)):
            if pattern is not None:
                raise ValueError("a packed .npz carries its pattern; do not pass pattern")
            try:
                packed = NMPacked.load(weights)
            except (OSError, KeyError, ValueError) as exc:
                raise ValueError(f"{weights}: not a packed N:M .npz ({exc})") from None
        elif isinstance(weights, NMPacked):
            packed = weights
        else:
            if pattern is None:
                raise ValueError("a dense weight matrix needs pattern (for example '2:4')")
            if not isinstance(pattern, NMPattern):
                pattern = NMPattern.parse(pattern)
            packed = pack_nm(weights, pattern)
        packed.pattern.check_supported(self.params.max_m)
        cols_padded = packed.groups * packed.pattern.m
        if cols_padded > self.params.max_k:
            raise ValueError(
                f"{packed.shape[1]} columns (padded to {cols_padded}) exceed max_k "
                f"{self.params.max_k} of {self.name}"
            )
        self.packed = packed
        return packed

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, cols) of the loaded matrix."""
        return self._loaded().shape

    def _loaded(self) -> NMPacked:
        if self.packed is None:
            raise ValueError(f"{self.name}: no weights loaded (call load first)")
        return self.packed

    def _result(self, y: np.ndarray) -> np.ndarray:
        return y.astype(np.int32) if self.params.acc_bits <= 32 else y

    def gemv(self, x) -> np.ndarray:
        """``W @ x`` for one int8 vector ``x`` [cols] (decode): int32 [rows]."""
        packed = self._loaded()
        x = _int_array(x, "x", 8, (1,))
        if x.shape[0] != packed.shape[1]:
            raise ValueError(
                f"x has {x.shape[0]} elements, the matrix has {packed.shape[1]} columns"
            )
        streams = mpe_streams(self.params, packed, x, "mv")
        call = self.transport.run(streams)
        self._count(call.cycles)
        return self._result(streams.unpack(call.result))

    def gemm(self, x) -> np.ndarray:
        """``W @ X`` for int8 ``X`` [cols, batch] (prefill): int32 [rows, batch].

        Batches above ``max_batch`` run as several requests; ``last_cycles`` is their sum.
        """
        packed = self._loaded()
        x = _int_array(x, "x", 8, (2,))
        if x.shape[0] != packed.shape[1]:
            raise ValueError(f"X has {x.shape[0]} rows, the matrix has {packed.shape[1]} columns")
        if x.shape[1] == 0:
            raise ValueError("X has no columns (batch 0)")
        chunk = self.params.max_batch
        parts, cycles = [], 0
        for start in range(0, x.shape[1], chunk):
            streams = mpe_streams(self.params, packed, x[:, start : start + chunk], "mm")
            call = self.transport.run(streams)
            cycles += call.cycles
            parts.append(streams.unpack(call.result))
        self._count(cycles)
        return self._result(np.concatenate(parts, axis=1))

    def __repr__(self) -> str:
        loaded = "empty" if self.packed is None else f"{self.shape} at {self.packed.pattern}"
        return f"SparseMatrixDevice({self.name!r}, backend={self.backend!r}, {loaded})"


# --- systolic + sparse-engine ----------------------------------------------------------------
class SpmmDevice(_Device):
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
    ``last_cycles`` is the makespan of the last call and ``last_engine_cycles`` the per-engine
    cycles (``systolic``, ``sparse-engine``, ``memory``, ``makespan``): the cost model's on
    golden; on RTL the two engines' simulated cycles (each runs its tiles as one stream, the
    two side by side), the cost model's memory bound, and the largest of the three.
    """

    design = "spmm"

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

        systolic = SystolicParams() if systolic is None else systolic
        sparse = SparseEngineParams() if sparse is None else sparse
        if features < 1:
            raise ValueError(f"features must be at least 1, not {features}")
        self.model = CostModel(
            systolic, sparse, load_board(board), sparse.tile if tile is None else tile, features
        )
        super().__init__((systolic, sparse), backend, name, options)
        self.mapping = None
        self.adjacency = None
        self.last_engine_cycles: dict = {}

    @property
    def features(self) -> int:
        return self.model.features

    def load(self, adjacency, *, normalize: bool = False, reorder: str = "partition", mapping=None):
        """Map ``adjacency`` (square scipy sparse) onto the engines; returns the Mapping.

        ``normalize=True`` applies the GCN normalization first (self loops, D^-1/2 A D^-1/2);
        ``mapping`` reuses one made earlier by :func:`~tandem.mappings.spmm.mapper.map_adjacency`
        for this adjacency (its cost model must have this device's F).
        """
        import scipy.sparse as sp
        from tandem.mappings.spmm.graph import gcn_normalize
        from tandem.mappings.spmm.mapper import map_adjacency

        if not sp.issparse(adjacency) or adjacency.ndim != 2:
            raise ValueError(
                f"adjacency must be a scipy sparse matrix, not {type(adjacency).__name__}"
            )
        if adjacency.shape[0] != adjacency.shape[1]:
            raise ValueError(f"adjacency must be square, not {adjacency.shape}")
        a = gcn_normalize(adjacency) if normalize else sp.csr_matrix(adjacency)
        a.sum_duplicates()
        a.sort_indices()
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
        if self.mapping is None:
            raise ValueError(f"{self.name}: no adjacency loaded (call load first)")
        return self.mapping

    def aggregate(self, features, *, streams: bool = False) -> np.ndarray:
        """``wrap(A_q @ X_q)`` (int64, node order) for integer ``features`` (n, F).

        ``streams=True`` runs every tile as its engine's beat stream (slower; same result);
        the RTL backend always does.
        """
        mapping = self._loaded()
        systolic = mapping.model.systolic
        x = _int_array(features, "features", systolic.x_bits, (2,))
        if x.shape != (mapping.nodes, self.features):
            raise ValueError(f"features must be ({mapping.nodes}, {self.features}), not {x.shape}")
        call = self.transport.run(SpmmRequest(mapping, self.adjacency, x, streams))
        self.last_engine_cycles = call.cycles
        self._count(call.cycles["makespan"])
        return call.result

    def gcn_layer(self, x, w, *, device: str | None = None, streams: bool = False) -> GcnResult:
        """``A_hat · (X · W)``: ``X · W`` on torch (``device``), the aggregation on the engines.

        Bit-exact with :func:`tandem.host.spmm.gcn_layer` on the same mapping (same transform,
        same quantization; the aggregation goes through this device's backend).
        """
        mapping = self._loaded()
        x, w = np.asarray(x), np.asarray(w)
        if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
            raise ValueError(f"x {x.shape} and w {w.shape} do not multiply")
        if x.shape[0] != mapping.nodes or w.shape[1] != self.features:
            raise ValueError(
                f"x must have {mapping.nodes} rows and w {self.features} columns, "
                f"not {x.shape} and {w.shape}"
            )
        systolic = mapping.model.systolic
        xw, used = gpu_transform(x, w, device)
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
        return f"SpmmDevice({self.name!r}, backend={self.backend!r}, F={self.features}, {loaded})"


# --- rnn -------------------------------------------------------------------------------------
def unpack_lstm_tiles(program: TileProgram, tiles, biases, w_frac: int) -> QuantLstm:
    """The :class:`~tandem.host.rnn.QuantLstm` that :func:`~tandem.host.rnn.pack_tiles` packed.

    Inverse of ``pack_tiles``: every program entry's tile goes back to its rows (unit-
    interleaved) and its x or h column block; padding is dropped. A GRU program
    (``program.cell == "gru"``) gives a GRU model: packed rows r and z go back to ``w`` and
    ``u`` with their summed bias in ``bias`` (``bias_h`` zero there, which the engine and
    :func:`~tandem.host.rnn.gru_golden` cannot tell apart), ``n_x`` to ``w`` and ``bias``,
    ``n_h`` to ``u`` and ``bias_h``; tiles with weights where a GRU holds zeros (``U`` of
    ``n_x``, ``W`` of ``n_h``) raise ``ValueError``.
    """
    tr, tc = program.tile_rows, program.tile_cols
    tiles = np.asarray(tiles, np.int64)
    biases = np.asarray(biases, np.int64)
    if tiles.shape != (program.entries, tr, tc):
        raise ValueError(f"tiles must be {(program.entries, tr, tc)}, not {tiles.shape}")
    if biases.shape != (program.row_blocks, tr):
        raise ValueError(f"biases must be {(program.row_blocks, tr)}, not {biases.shape}")
    rb, nx, nh = program.row_blocks, program.x_blocks, program.h_blocks
    wt = np.zeros((rb, nx, tr, tc), np.int64)
    ut = np.zeros((rb, nh, tr, tc), np.int64)
    xs = program.src == 0
    wt[program.row[xs], program.col[xs]] = tiles[xs]
    ut[program.row[~xs], program.col[~xs]] = tiles[~xs]
    wpad = wt.transpose(0, 2, 1, 3).reshape(rb * tr, nx * tc)
    upad = ut.transpose(0, 2, 1, 3).reshape(rb * tr, nh * tc)
    bpad = biases.reshape(-1)
    # The npz writer stores the scalar as a one-element array.
    w_frac = np.asarray(w_frac).reshape(-1)
    if w_frac.size != 1:
        raise ValueError(f"w_frac must be one integer, not {w_frac.size} values")
    x_size, hidden = program.input_size, program.hidden_size
    if program.cell == "gru":
        return _unpack_gru(wpad[:, :x_size], upad[:, :hidden], bpad, hidden, int(w_frac[0]))
    rows = packed_rows(hidden, tr)
    valid = rows >= 0
    gates = 4 * hidden
    w = np.zeros((gates, x_size), np.int64)
    u = np.zeros((gates, hidden), np.int64)
    bias = np.zeros(gates, np.int64)
    w[rows[valid]] = wpad[valid, :x_size]
    u[rows[valid]] = upad[valid, :hidden]
    bias[rows[valid]] = bpad[valid]
    return QuantLstm(w=w, u=u, bias=bias, w_frac=int(w_frac[0]))


def _unpack_gru(wpad, upad, bpad, hidden: int, w_frac: int) -> QuantLstm:
    """GRU rows from packed rows ``4u + slot`` (slots r, z, n_x, n_h; see ``pack_tiles``)."""
    packed = np.arange(wpad.shape[0])
    unit, slot = packed // 4, packed % 4
    live = unit < hidden
    if wpad[live & (slot == 3)].any() or upad[live & (slot == 2)].any():
        raise ValueError("tiles are not a GRU's: n_x rows must have no U, n_h rows no W")
    torch_row = np.minimum(slot, 2) * hidden + unit  # r, z, n blocks of PyTorch's order
    w = np.zeros((3 * hidden, wpad.shape[1]), np.int64)
    u = np.zeros((3 * hidden, upad.shape[1]), np.int64)
    bias = np.zeros(3 * hidden, np.int64)
    bias_h = np.zeros(3 * hidden, np.int64)
    with_w, with_u = live & (slot != 3), live & (slot != 2)
    w[torch_row[with_w]] = wpad[with_w]
    u[torch_row[with_u]] = upad[with_u]
    bias[torch_row[with_w]] = bpad[with_w]
    n_h = live & (slot == 3)
    bias_h[torch_row[n_h]] = bpad[n_h]
    return QuantLstm(w=w, u=u, bias=bias, w_frac=w_frac, cell="gru", bias_h=bias_h)


class RnnDevice(_Device):
    """The ``rnn`` engine (docs/rnn.md): one quantized LSTM or GRU layer, whole sequences.

    Parameters
    ----------
    params
        Engine parameters (default :class:`~tandem.host.rnn.RnnParams()`); ``batch`` sequences
        run side by side per command; ``cell`` (``"lstm"`` or ``"gru"``) is the cell the
        engine is built for and the only one it loads.
    backend
        ``"golden"`` (default) or ``"rtl"`` (the Verilog in a simulator, see the module
        docstring).
    name
        Label in messages.
    **options
        For ``backend="rtl"``: ``simulator``, ``timeout_s``, ``start_timeout_s``,
        ``cache_dir``, ``run_dir`` (:class:`~tandem.host.transport_rtl.CosimClient`).

    Notes
    -----
    Like the engine, every sequence starts from zero ``h`` (and ``c``). A batch larger than
    ``params.batch`` runs as several commands, a smaller one is padded with zero sequences
    (the engine always runs ``params.batch``); ``last_cycles`` is the scheduler's predicted
    cycles of those commands (:func:`~tandem.mappings.rnn.schedule.sequence_cycles`, the same
    for both cells) on golden, their simulated cycles on RTL (equal: the model is
    cycle-exact). :meth:`run` returns ``(h, c)`` for an LSTM and ``(h, None)`` for a GRU,
    so ``h, c = dev.run(x)`` works for both cells and a GRU's missing c cannot be mistaken for
    a state.
    """

    design = "rnn"

    def __init__(
        self,
        params: RnnParams | None = None,
        *,
        backend: str = "golden",
        name: str = "rnn0",
        **options,
    ):
        super().__init__(RnnParams() if params is None else params, backend, name, options)
        self.model: QuantLstm | None = None
        self.program: TileProgram | None = None

    @property
    def cell(self) -> str:
        """``"lstm"`` or ``"gru"``: the cell the engine runs (``params.cell``)."""
        return self.params.cell

    @property
    def _kind(self) -> str:
        return self.params.cell.upper()

    def load(self, source, layer: int = 0) -> QuantLstm:
        """Load one layer of the engine's cell (``params.cell``).

        ``source`` is a ``torch.nn.LSTM`` or, for ``cell = "gru"``, ``torch.nn.GRU``
        ``state_dict`` (quantized with :func:`~tandem.host.rnn.quantize_lstm`), a
        ``.program.npz`` with weights as ``tandem map rnn --state-dict`` (``--cell gru``) writes
        it, or a :class:`~tandem.host.rnn.QuantLstm`. Returns the quantized model.
        """
        p = self.params
        if isinstance(source, (str, Path)):
            from tandem.mappings.rnn.writer import load_program

            try:
                program, arrays = load_program(source)
            except (OSError, KeyError, ValueError) as exc:
                raise ValueError(f"{source}: not a tile program .npz ({exc})") from None
            missing = {"tiles", "biases", "w_frac"} - set(arrays)
            if missing:
                raise ValueError(
                    f"{source}: holds no weights ({', '.join(sorted(missing))} missing); "
                    "write it with tandem map rnn --state-dict"
                )
            if (program.tile_rows, program.tile_cols) != (p.tile_rows, p.tile_cols):
                raise ValueError(
                    f"{source}: tiles are {program.tile_rows}x{program.tile_cols}, the engine's "
                    f"{p.tile_rows}x{p.tile_cols}"
                )
            if program.cell != p.cell:
                raise ValueError(
                    f"{source}: a {program.cell.upper()} program, the engine runs {self._kind} "
                    f"(RnnParams.cell={p.cell!r})"
                )
            model = unpack_lstm_tiles(program, arrays["tiles"], arrays["biases"], arrays["w_frac"])
        elif isinstance(source, QuantLstm):
            if source.cell != p.cell:
                raise ValueError(
                    f"a {source.cell.upper()} model, the engine runs {self._kind} "
                    f"(RnnParams.cell={p.cell!r})"
                )
            model, program = source, None
        elif hasattr(source, "keys"):
            self._check_state_dict(source, layer)
            model, program = quantize_lstm(p, source, layer), None
        else:
            raise ValueError(
                f"load takes a state_dict, a .program.npz path or a QuantLstm, not "
                f"{type(source).__name__}"
            )
        if model.input_size > p.max_input or model.hidden_size > p.max_hidden:
            raise ValueError(
                f"{self._kind} of X={model.input_size}, H={model.hidden_size} exceeds max_input="
                f"{p.max_input}, max_hidden={p.max_hidden}"
            )
        top = 1 << (p.weight_bits - 1)
        for name, array in (("w", model.w), ("u", model.u)):
            if array.size and (array.min() < -top or array.max() >= top):
                raise ValueError(f"weights {name} do not fit weight_bits={p.weight_bits}")
        if program is None:
            program = build_program(
                model.input_size, model.hidden_size, p.tile_rows, p.tile_cols, cell=p.cell
            )
        self.model, self.program = model, program
        return model

    def _check_state_dict(self, state_dict, layer: int) -> None:
        """One clear line when ``state_dict`` is the other cell's (4H vs 3H gate rows)."""
        key = f"weight_hh_l{layer}"
        if key not in state_dict:
            return  # quantize_lstm names the missing key
        shape = tuple(state_dict[key].shape)
        if len(shape) == 2 and shape[1] and shape[0] % shape[1] == 0:
            gates = shape[0] // shape[1]
            found = {3: "GRU", 4: "LSTM"}.get(gates)
            if found is not None and found != self._kind:
                raise ValueError(
                    f"a torch.nn.{found} state_dict, the engine runs {self._kind} "
                    f"(RnnParams.cell={self.params.cell!r})"
                )

    def quantize(self, x) -> np.ndarray:
        """Float inputs to the engine's int16 with ``state_frac`` fraction bits."""
        return quantize_state(self.params, x)

    def to_float(self, state) -> np.ndarray:
        """int16 h or c to float."""
        return np.asarray(state, np.float64) * 2.0**-self.params.state_frac

    def run(self, x) -> tuple[np.ndarray, np.ndarray | None]:
        """Run the sequences ``x`` (T, B, X) int16 from zero state.

        Returns
        -------
        h, c
            ``(T, B, H)`` int64 trajectories of h and c for an LSTM; for a GRU ``c`` is
            ``None``. Bit-exact with :func:`~tandem.host.rnn.lstm_golden` (GRU:
            :func:`~tandem.host.rnn.gru_golden`) on the loaded model.
        """
        p = self.params
        if self.model is None:
            raise ValueError(f"{self.name}: no {self._kind} loaded (call load first)")
        x = _int_array(x, "x", 16, (3,))
        steps, batch, width = x.shape
        if width != self.model.input_size:
            raise ValueError(
                f"x has {width} inputs per step, the {self._kind} takes {self.model.input_size}"
            )
        if not 1 <= steps <= p.max_steps:
            raise ValueError(f"steps must be 1..{p.max_steps} (max_steps), not {steps}")
        if batch < 1:
            raise ValueError("x holds no sequence (batch 0)")
        hs, cs, cycles = [], [], 0
        for start in range(0, batch, p.batch):
            chunk = np.zeros((steps, p.batch, width), np.int64)
            part = x[:, start : start + p.batch]
            chunk[:, : part.shape[1]] = part
            call = self.transport.run(RnnRequest(self.model, self.program, chunk))
            h, c = call.result
            hs.append(h[:, : part.shape[1]])
            cs.append(c[:, : part.shape[1]])
            cycles += call.cycles
        self._count(cycles)
        h = np.concatenate(hs, axis=1)
        return (h, None) if p.cell == "gru" else (h, np.concatenate(cs, axis=1))

    def __repr__(self) -> str:
        loaded = (
            "empty"
            if self.model is None
            else f"{self._kind} X={self.model.input_size} H={self.model.hidden_size}"
        )
        return f"RnnDevice({self.name!r}, backend={self.backend!r}, {loaded})"
