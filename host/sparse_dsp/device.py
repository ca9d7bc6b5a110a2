"""``SparseMpeDevice``: the host API of the ``sparse-mpe`` N:M sparse matrix engine, and its
golden and RTL backends.

::

    mpe = SparseMpeDevice()                        # backend="golden"; or backend="rtl"
    mpe.load(w_int8, "2:4")                        # or mpe.load("packed.npz") from `tandem pack nm`
    y = mpe.gemv(x_int8)                           # int32 [rows] == W @ x (decode)
    Y = mpe.gemm(X_int8)                           # int32 [rows, batch] == W @ X (prefill)

A request is the engine's streams for one pass over the matrix
(:class:`~tandem.mappings.nm.engine.MpeStreams`, built by the packer's
:func:`~tandem.mappings.nm.mpe_streams`). ``backend="golden"`` (:class:`GoldenMpeBackend`) runs
:func:`~tandem.host.sparse_dsp.golden.mpe_golden` and counts :func:`mpe_cycles`;
``backend="rtl"`` (:class:`RtlMpeBackend`) sends the same beats to the generated Verilog
through :class:`MpeCodec` and counts simulated cycles.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from tandem.host.backend.backend import Backend, Call
from tandem.host.backend.cosim import RtlStreamBackend, StreamCodec, StreamJob
from tandem.host.backend.device import Device
from tandem.host.common.checks import instance, int_array
from tandem.host.common.fixed import check_fit
from tandem.mappings.nm import NMPacked, NMPattern, mpe_streams, pack_nm
from tandem.mappings.nm.engine import (
    FILL_BEYOND_STAGES,
    MpeStreams,
    mv_units,
    product_cycles,
    request_cycles,
)

from .golden import SparseMpeParams, mpe_golden

__all__ = [
    "MPE_FILL_BEYOND_STAGES",
    "GoldenMpeBackend",
    "MpeCodec",
    "MpeProduct",
    "RtlMpeBackend",
    "SparseMpeDevice",
    "mpe_cycles",
]

#: Cycles of ``sparse-mpe`` from a pass's last result capture to its last result taken, beyond
#: the captured token pair's results and the chain's stages: the chain's ``stages + 4`` beats
#: to the result bank plus one serializer register. Measured on Icarus with 2, 4 and 8 stages
#: and on Verilator with 4 and 8 (see :func:`mpe_cycles`).
MPE_FILL_BEYOND_STAGES = FILL_BEYOND_STAGES


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


@dataclass
class MpeProduct:
    """A request of the ``direct`` golden kernel: ``W @ x`` without the engine's beats."""

    packed: NMPacked
    x: np.ndarray  # int8 [cols] (mv) or [cols, batch] (mm)
    mode: str
    units: int  # len(mv_units(packed)) in mv mode, rows in mm mode


class GoldenMpeBackend(Backend):
    """``sparse-mpe`` through its golden model.

    Parameters
    ----------
    params
        The engine's parameters.
    kernel
        ``"streams"`` (default): a request is an :class:`~tandem.mappings.nm.engine.MpeStreams`
        run beat by beat through :func:`~tandem.host.sparse_dsp.golden.mpe_golden`, the
        engine's result stream in output order. ``"direct"``: a request is an
        :class:`MpeProduct`, its result ``W @ x`` in int64 (what the engine's exact
        accumulators give: ``acc_bits`` is checked to hold a row of ``max_k`` products) and its
        cycles from the same formula (:func:`~tandem.mappings.nm.engine.product_cycles`); no
        beats are built, which is what makes a whole model's decode fast
        (``tests/test_sparse_dsp_device.py`` checks both kernels agree).
    """

    name = "golden"
    options = ("kernel",)

    def __init__(self, params: SparseMpeParams, kernel: str = "streams"):
        if kernel not in ("streams", "direct"):
            raise ValueError(f"kernel must be 'streams' or 'direct', not {kernel!r}")
        self.params = params
        self.kernel = kernel

    def run(self, requests: list) -> Call:
        if self.kernel == "direct":
            results = [_direct_product(r) for r in requests]
            cycles = sum(
                product_cycles(self.params, r.packed, r.mode, _batch(r), r.units) for r in requests
            )
        else:
            results = [mpe_golden(self.params, r.cfg, r.act_beats, r.w_beats) for r in requests]
            cycles = sum(mpe_cycles(r) for r in requests)
        return Call(results, cycles, {"sparse-mpe": cycles})


def _batch(request: MpeProduct) -> int:
    return 1 if request.x.ndim == 1 else request.x.shape[1]


def _direct_product(request: MpeProduct) -> np.ndarray:
    # float64 holds every partial sum exactly (|sum| < max_k * 2**14 < 2**53)
    w = request.packed.dense().astype(np.float64)
    return (w @ request.x.astype(np.float64)).astype(np.int64)


class MpeCodec(StreamCodec):
    """``sparse-mpe``'s RTL side: configuration word and activations, then the weight beats.

    Cycles run from the first weight beat offered to the last result taken, as
    ``tandem.sim.sparse_dsp.mpe_tb`` and :func:`mpe_cycles` count them.
    """

    def __init__(self, params: SparseMpeParams):
        self.params = params

    def engine_params(self) -> dict:
        return {"sparse-mpe": self.params}

    def encode(self, request: MpeStreams) -> dict[str, StreamJob]:
        # Rows of fields, packed by the server (vectorized there: thousands of weight beats
        # per request), exactly as MpeStreams.weight_payload and act_payload pack them.
        p = self.params
        slot = [8, 8, p.index_bits]  # w0, w1 (int8) and idx of one stage
        n_weights, n_acts = len(request.w_beats), len(request.act_beats)
        weights = ("fields", slot * (p.chains * p.stages), request.w_beats.reshape(n_weights, -1))
        acts = ("fields", [8] * p.act_bytes, request.act_beats.reshape(n_acts, -1))
        count = request.outputs
        steps = [
            ("send", "cfg_i", [request.config_word]),
            ("load", "act_i", acts),
            ("start",),
            ("send", "w_i", weights),
            ("recv", "o", count),
        ]
        beats = n_weights * request.cfg["pairs"] + n_acts + count
        return {"sparse-mpe": StreamJob(steps, beats)}

    def decode(self, request, outputs, cycles):
        (results,) = outputs["sparse-mpe"]
        return np.asarray(results, np.int64), dict(cycles)


class RtlMpeBackend(RtlStreamBackend):
    """``sparse-mpe`` on RTL: :class:`MpeCodec` over one simulator."""

    def __init__(self, params: SparseMpeParams, **options):
        super().__init__(MpeCodec(params), **options)


class SparseMpeDevice(Device):
    """The ``sparse-mpe`` N:M sparse int8 matrix engine (docs/sparse_dsp.md).

    Parameters
    ----------
    params
        Engine parameters (default :class:`~tandem.host.sparse_dsp.golden.SparseMpeParams()`).
    backend
        ``"golden"`` (default) or ``"rtl"`` (the Verilog in a simulator, see the module
        docstring).
    name
        Label in messages.
    **options
        For ``backend="rtl"``: ``simulator``, ``timeout_s``, ``start_timeout_s``,
        ``cache_dir``, ``run_dir`` (:class:`~tandem.host.backend.cosim.CosimClient`). For
        ``backend="golden"``: ``kernel`` (``"streams"`` or ``"direct"``,
        :class:`GoldenMpeBackend`).

    Notes
    -----
    No value is clipped silently: weights (dense, packed or from a ``.npz``) and activations
    are int8 integers, and any other value raises (``NMError`` from the packer, else
    ``ValueError``) naming it and the range; the engine's accumulators hold every sum exactly
    (``acc_bits`` is checked against ``max_k``), so nothing saturates.

    ``gemv`` uses the matrix-vector mode (row pairs sharing indices fill both DSP lanes, see
    ``prune_magnitude(..., pair_rows=True)``); ``gemm`` the matrix-matrix mode, ``max_batch``
    tokens per request, larger batches as several requests. ``last_cycles`` is the cycles of
    the requests, first weight beat to last result: modelled (:func:`mpe_cycles`, exact while
    a request holds at most one token pair) on golden, simulated on RTL.
    """

    backends: ClassVar[dict] = {}  # filled below the backend classes

    def __init__(
        self,
        params: SparseMpeParams | None = None,
        *,
        backend: str = "golden",
        name: str = "mpe0",
        **options,
    ):
        super().__init__(
            instance(SparseMpeParams() if params is None else params, SparseMpeParams, "params"),
            backend=backend,
            name=name,
            options=options,
        )
        self.packed: NMPacked | None = None
        # mv units per matrix loaded so far (direct kernel): a program reloads its matrices
        self._units: dict[int, tuple[NMPacked, int]] = {}

    def load(self, weights, pattern: str | NMPattern | None = None) -> NMPacked:
        """Load N:M weights: an :class:`~tandem.mappings.nm.NMPacked`, a packed ``.npz`` path
        (as ``tandem pack nm`` writes it), or a dense int8 matrix [rows, cols] with ``pattern``.

        Returns the packed matrix; raises :class:`~tandem.mappings.nm.NMError` (a UserError)
        when the matrix is not N:M or the engine cannot hold it, and ``ValueError`` when a
        packed value is not int8 or an index not below M (the beats would wrap it silently).
        """
        if isinstance(weights, (str, Path)):
            if pattern is not None:
                raise ValueError("a packed .npz carries its pattern; do not pass pattern")
            try:
                packed = NMPacked.load(weights)
            except (OSError, KeyError, ValueError) as exc:
                raise ValueError(f"{weights}: not a packed N:M .npz ({exc})") from None
        elif isinstance(weights, NMPacked):
            if pattern is not None and _pattern(pattern) != weights.pattern:
                raise ValueError(f"the weights are packed {weights.pattern}, not {pattern}")
            packed = weights
        else:
            if pattern is None:
                raise ValueError("a dense weight matrix needs pattern (for example '2:4')")
            pattern = _pattern(pattern)
            shape = np.shape(weights) if isinstance(weights, np.ndarray) else None
            if shape is not None and len(shape) == 2 and 0 in shape:
                raise ValueError(f"weights must have rows and columns, not shape {shape}")
            packed = pack_nm(weights, pattern)  # NMError names what is not N:M int8
        _check_packed(packed)
        packed.pattern.check_supported(self.params.max_m)
        cols_padded = packed.groups * packed.pattern.m
        if cols_padded > self.params.max_k:
            raise ValueError(
                f"{packed.shape[1]} columns (padded to {cols_padded}) exceed max_k "
                f"{self.params.max_k} of {self.name}"
            )
        self.packed = packed
        return packed

    def _direct(self) -> bool:
        return getattr(self.backend, "kernel", None) == "direct"

    def _product(self, x, mode: str) -> MpeProduct:
        packed = self._loaded()
        if mode == "mm":
            return MpeProduct(packed, x, mode, packed.shape[0])
        known = self._units.get(id(packed))
        if known is None or known[0] is not packed:
            known = self._units[id(packed)] = (packed, len(mv_units(packed)))
        return MpeProduct(packed, x, mode, known[1])

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
        x = int_array(x, "x", 8, ndim=(1,))
        if x.shape[0] != packed.shape[1]:
            raise ValueError(
                f"x has {x.shape[0]} elements, the matrix has {packed.shape[1]} columns"
            )
        self._check_open()
        if self._direct():
            (result,) = self._run([self._product(x, "mv")])
            return self._result(result)
        streams = mpe_streams(self.params, packed, x, "mv")
        (result,) = self._run([streams])
        return self._result(streams.unpack(result))

    def gemm(self, x) -> np.ndarray:
        """``W @ X`` for int8 ``X`` [cols, batch] (prefill): int32 [rows, batch].

        Batches above ``max_batch`` run as several requests; ``last_cycles`` is their sum.
        """
        packed = self._loaded()
        x = int_array(x, "x", 8, ndim=(2,))
        if x.shape[0] != packed.shape[1]:
            raise ValueError(f"X has {x.shape[0]} rows, the matrix has {packed.shape[1]} columns")
        if x.shape[1] == 0:
            raise ValueError("X has no columns (batch 0)")
        self._check_open()
        chunk = self.params.max_batch
        if self._direct():
            parts = self._run(
                [self._product(x[:, i : i + chunk], "mm") for i in range(0, x.shape[1], chunk)]
            )
            return self._result(np.concatenate(parts, axis=1))
        requests = [
            mpe_streams(self.params, packed, x[:, start : start + chunk], "mm")
            for start in range(0, x.shape[1], chunk)
        ]
        results = self._run(requests)  # one batch: last_cycles is the requests' sum
        parts = [streams.unpack(result) for streams, result in zip(requests, results, strict=True)]
        return self._result(np.concatenate(parts, axis=1))

    def __repr__(self) -> str:
        loaded = "empty" if self.packed is None else f"{self.shape} at {self.packed.pattern}"
        return f"SparseMpeDevice({self.name!r}, backend={self.backend.name!r}, {loaded})"


def _check_packed(packed: NMPacked) -> None:
    """The streams of ``packed`` checked against the engine's formats (a packed ``.npz`` or an
    NMPacked built elsewhere did not come through ``pack_nm``): int8 values, indices below M;
    one line naming the first that does not fit."""
    streams = (("packed values", packed.values), ("packed indices", packed.indices))
    for name, array in streams:
        if np.asarray(array).dtype.kind not in "iu":
            raise ValueError(f"{name} must be integers, not {np.asarray(array).dtype}")
    check_fit(packed.values, -128, 127, name="packed values", fmt="int8")
    m = packed.pattern.m
    check_fit(packed.indices, 0, m - 1, name="packed indices", fmt=f"{packed.pattern} indices")


def _pattern(pattern) -> NMPattern:
    """``pattern`` (an :class:`NMPattern` or ``"N:M"``) as an NMPattern; NMError when bad."""
    if isinstance(pattern, NMPattern):
        return pattern
    if not isinstance(pattern, str):
        raise ValueError(f"pattern must be 'N:M' or an NMPattern, not {pattern!r}")
    return NMPattern.parse(pattern)


SparseMpeDevice.backends = {"golden": GoldenMpeBackend, "rtl": RtlMpeBackend}
