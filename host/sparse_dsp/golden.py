"""``sparse-dsp-chain`` and ``sparse-mpe``: N:M sparse int8 matrix engine (FlightLLM-style).

Parameters, run-time configuration words, the packed-DSP arithmetic and the bit-exact golden
models. The packer that turns a weight matrix into the engines' streams lives in
:mod:`tandem.mappings.nm`; the gateware in :mod:`tandem.hw.sparse_dsp`; the design is described in
``docs/sparse_dsp.md``.

Two int8 products per DSP48E2
-----------------------------
Each stage multiplies a 27-bit packed operand by an 18-bit one, like the DSP48E2's pre-adder
output ``AD`` times ``B``::

    AD = hi * 2**18 + lo          (hi, lo int8; fits the 27-bit pre-adder: -2**25 - 128 ...)
    P  = AD * b = (hi*b) * 2**18 + lo*b

``b`` is the operand the two products share. In matrix-vector mode (decode) it is the
activation the sparse MUX picks, and ``hi``/``lo`` are the weights of two output rows that share
that column (a *row pair*, see :func:`tandem.mappings.nm.mv_units`). In matrix-matrix mode
(prefill) it is the weight, and ``hi``/``lo`` are the activations of two tokens that the same
index picks. A cascade adds the ``P`` of up to :data:`CASCADE_MAX_PRODUCTS` stages, so it holds
``H * 2**18 + L`` with ``L`` the sum of up to eight ``lo*b`` terms.

Separating the lanes (the overflow-adjust path)
-----------------------------------------------
The usual sign correction reads ``L`` as the low 18 bits taken as signed, ``[-2**17, 2**17)``.
An int8 product lies in ``[-16256, 16384]`` (``-128 * 127`` and ``-128 * -128``), so seven
products always fit but eight products of ``-128 * -128`` give ``L = 2**17``, which the sign
correction reads as ``-2**17`` and which corrupts both lanes. The reduction node therefore
reads ``L`` in the window ``[LOW_FLOOR, LOW_FLOOR + 2**18)`` with ``LOW_FLOOR = 8 * -16256``:
eight products span ``8 * 32640 + 1 = 261121 <= 2**18`` values, so the window is exact for any
cascade of up to eight products (:func:`split_lanes`). Nine products would not fit any 18-bit
window, so a DSP cascade is capped at four DSP groups (eight stages); longer dot products are
summed over time in the reduction node's two 32-bit lane accumulators.
"""

import functools
from dataclasses import dataclass

import numpy as np
from tandem.host.common.arith import wrap

from tandem.config import ParamError, Params, param

__all__ = [
    "CASCADE_MAX_PRODUCTS",
    "LANE_SHIFT",
    "LOW_FLOOR",
    "MODE_MM",
    "MODE_MV",
    "SparseDspChainParams",
    "SparseMpeParams",
    "chain_config_fields",
    "chain_golden",
    "mpe_config_fields",
    "mpe_golden",
    "pack_pair",
    "packed_matmul",
    "split_lanes",
    "split_lanes_naive",
]

LANE_SHIFT = 18
"""Bit position of the high lane in the packed operand and in ``P``."""
CASCADE_MAX_PRODUCTS = 8
"""Most products one DSP cascade may add before its lanes are separated (4 DSP groups)."""
PRODUCT_MIN, PRODUCT_MAX = -128 * 127, 128 * 128
LOW_FLOOR = CASCADE_MAX_PRODUCTS * PRODUCT_MIN
"""Lower end of the window the low lane is read in: ``-130048``."""
MODE_MV, MODE_MM = 0, 1
"""Configuration ``mode`` values: matrix-vector (decode) and matrix-matrix (prefill)."""
SEGMENT_CHOICES = (2, 4, 8)
"""Cascade segment lengths in stages (1, 2 or 4 DSP groups): ``seg_log2`` 0, 1, 2."""


def pack_pair(hi, lo) -> np.ndarray:
    """The 27-bit packed operand ``hi * 2**18 + lo`` of two int8 values (int64)."""
    return np.asarray(hi, dtype=np.int64) * (1 << LANE_SHIFT) + np.asarray(lo, dtype=np.int64)


def split_lanes(p) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``(low, high)`` lanes of a cascade sum of at most eight packed int8 products.

    ``low`` is read in the window ``[LOW_FLOOR, LOW_FLOOR + 2**18)`` and ``high = (p - low) /
    2**18``; this is what the gateware's reduction node computes.
    """
    p = np.asarray(p, dtype=np.int64)
    low = ((p - LOW_FLOOR) & ((1 << LANE_SHIFT) - 1)) + LOW_FLOOR
    return low, (p - low) >> LANE_SHIFT


def split_lanes_naive(p) -> tuple[np.ndarray, np.ndarray]:
    """The textbook sign correction (low lane read as signed 18 bits); wrong at ``L = 2**17``.

    Kept to show, in tests and docs, what the overflow-adjust window fixes.
    """
    p = np.asarray(p, dtype=np.int64)
    low = wrap(p, LANE_SHIFT)
    return low, (p - low) >> LANE_SHIFT


def _index_bits(max_m: int) -> int:
    return (max_m - 1).bit_length()


def _m_log2_bits(max_m: int) -> int:
    return max_m.bit_length().bit_length()  # holds log2(max_m)


@functools.cache
def onchip_ram_bytes() -> tuple[str, int]:
    """The board with the most on-chip RAM (36 Kb block RAMs and 288 Kb UltraRAMs) and its
    bytes: the most an engine's buffers can hold on any board tandem targets."""
    from tandem.boards import board_names, load_board

    sizes = []
    for name in board_names():
        board = load_board(name)
        bits = (board.capacity("bram36") or 0) * 36 * 1024 + (
            board.capacity("uram") or 0
        ) * 288 * 1024
        sizes.append((bits // 8, name))
    size, name = max(sizes)
    return name, size


@dataclass(frozen=True)
class SparseDspChainParams(Params):
    """One configurable sparse DSP chain.

    ``stages`` DSP48E2-shaped stages (27x18 multiply, 48-bit cascade) in DSP groups of two
    fixed-cascaded stages. A configuration word picks the mode (matrix-vector or -matrix), M of
    the N:M pattern (``2 .. max_m``) and how many groups one cascade segment spans (1, 2 or 4);
    each segment ends in a reduction node that separates the two int8 lanes and accumulates
    them over the beats of a row. One input beat carries, per stage, two int8 weights, one
    index and the stage's activation window(s) of ``max_m`` int8 values.
    """

    design = "sparse-dsp-chain"

    stages: int = param(8, "DSP48E2 stages in the chain, two per DSP group", min=2, max=64)
    max_m: int = param(
        16, "largest M of an N:M pattern (sparse MUX width)", min=16, max=64, power_of_two=True
    )
    acc_bits: int = param(32, "width of each lane's accumulator and result", min=20, max=48)

    def check(self) -> None:
        if self.stages % 2:
            raise ParamError("stages", f"stages must be even (DSP groups of 2), not {self.stages}")

    @property
    def groups(self) -> int:
        """DSP groups (of two stages)."""
        return self.stages // 2

    @property
    def index_bits(self) -> int:
        """Width of a sparse index (``log2(max_m)``)."""
        return _index_bits(self.max_m)

    @property
    def segment_choices(self) -> tuple[int, ...]:
        """Cascade segment lengths (stages) this chain supports: 2, 4, 8 where they divide it."""
        return tuple(s for s in SEGMENT_CHOICES if self.stages % s == 0)


@dataclass(frozen=True)
class SparseMpeParams(Params):
    """A sparse matrix engine: ``chains`` sparse DSP chains beside an activation buffer.

    A request is a configuration word, then the activations (``act_bytes`` int8 per beat, token
    by token, each token padded to whole buffer words), then the weight stream (one beat per
    step: two int8 values and an index per stage of every chain). Results leave as int32, one
    per beat, in the order of :func:`mpe_golden`.
    """

    design = "sparse-mpe"

    chains: int = param(2, "sparse DSP chains working in parallel", min=1, max=32)
    stages: int = param(8, "DSP48E2 stages per chain (two per DSP group)", min=2, max=64)
    max_m: int = param(
        16, "largest M of an N:M pattern (sparse MUX width)", min=16, max=64, power_of_two=True
    )
    max_k: int = param(
        1024,
        "activation buffer length per token (columns of W)",
        min=64,
        max=1 << 24,  # two tokens of 2**24 bytes fill the largest board's on-chip RAM
        power_of_two=True,
    )
    max_batch: int = param(2, "tokens of the matrix-matrix mode (even)", min=2, max=32)
    act_bytes: int = param(
        16,
        "int8 activations per beat of the activation stream",
        min=1,
        max=512,  # at most the widest buffer word: 8 stages x max_m 64
        power_of_two=True,
    )
    acc_bits: int = param(32, "width of each lane's accumulator and result", min=20, max=48)

    def check(self) -> None:
        if self.stages % 2:
            raise ParamError("stages", f"stages must be even (DSP groups of 2), not {self.stages}")
        if self.max_batch % 2:
            raise ParamError("max_batch", f"max_batch must be even, not {self.max_batch}")
        if self.max_k % self.word_bytes:
            raise ParamError(
                "max_k",
                f"max_k must be a multiple of the buffer word ({self.word_bytes} bytes), "
                f"not {self.max_k}",
            )
        if self.max_k * PRODUCT_MAX >= 1 << (self.acc_bits - 1):
            raise ParamError(
                "acc_bits",
                f"acc_bits {self.acc_bits} cannot hold a row of max_k = {self.max_k} products "
                f"of (-128)*(-128); use at least {(self.max_k * PRODUCT_MAX).bit_length() + 1}",
            )
        buffer, ram = self.max_k * self.max_batch, onchip_ram_bytes()
        if buffer > ram[1]:
            raise ParamError(
                "max_k",
                f"max_k {self.max_k} x max_batch {self.max_batch} = {buffer} bytes of "
                f"activation buffer exceed the on-chip RAM of the largest board ({ram[0]}: "
                f"{ram[1]} bytes of block RAM and UltraRAM)",
            )
        if self.act_bytes > self.word_bytes:
            raise ParamError(
                "act_bytes",
                f"act_bytes must be at most the buffer word ({self.word_bytes}), "
                f"not {self.act_bytes}",
            )

    @property
    def chain(self) -> SparseDspChainParams:
        """The parameters of each chain."""
        return SparseDspChainParams(stages=self.stages, max_m=self.max_m, acc_bits=self.acc_bits)

    @property
    def index_bits(self) -> int:
        return _index_bits(self.max_m)

    @property
    def segment_choices(self) -> tuple[int, ...]:
        return tuple(s for s in SEGMENT_CHOICES if self.stages % s == 0)

    @property
    def word_bytes(self) -> int:
        """Activation buffer word: the longest span one step reads (segment x ``max_m``)."""
        return max(s for s in SEGMENT_CHOICES if self.stages % s == 0) * self.max_m

    @property
    def words_per_token(self) -> int:
        return self.max_k // self.word_bytes

    @property
    def pairs(self) -> int:
        """Token pairs (accumulator slots) of the matrix-matrix mode."""
        return self.max_batch // 2


COUNT_BITS = 16


def chain_config_fields(params) -> list[tuple[str, int]]:
    """Fields of the chain's configuration word, least significant first: (name, width)."""
    return [("mode", 1), ("m_log2", _m_log2_bits(params.max_m)), ("seg_log2", 2)]


def mpe_config_fields(params: SparseMpeParams) -> list[tuple[str, int]]:
    """Fields of the engine's configuration word, least significant first: (name, width).

    ``n``: non-zeros per group; ``row_steps``: steps per row (groups / segment);
    ``passes``: row passes; ``pairs``: token pairs (matrix-matrix mode, else 1);
    ``k_words``: buffer words per token.
    """
    return chain_config_fields(params) + [
        ("n", params.max_m.bit_length()),
        ("row_steps", COUNT_BITS),
        ("passes", COUNT_BITS),
        ("pairs", max(1, params.pairs.bit_length())),
        ("k_words", COUNT_BITS),
    ]


def check_chain_config(params, cfg: dict) -> None:
    """Raise ``ValueError`` unless ``cfg`` is a configuration the chain supports."""
    if cfg["mode"] not in (MODE_MV, MODE_MM):
        raise ValueError(f"mode must be 0 (mv) or 1 (mm), not {cfg['mode']!r}")
    if not 1 <= cfg["m_log2"] <= params.max_m.bit_length() - 1:
        raise ValueError(f"m_log2 {cfg['m_log2']} out of range for max_m {params.max_m}")
    if (2 << cfg["seg_log2"]) not in params.segment_choices:
        raise ValueError(
            f"segment of {2 << cfg['seg_log2']} stages does not divide {params.stages} stages"
        )


def _segment_sums(params, cfg, w0, w1, sel0, sel1):
    """Cascade sums P [..., segments] of one beat shape [..., stages]; mirrors the gateware."""
    if cfg["mode"] == MODE_MV:
        hi, lo, b = w1, w0, sel0
    else:
        hi, lo, b = sel1, sel0, w0
    product = pack_pair(hi, lo) * np.asarray(b, dtype=np.int64)
    seg = 2 << cfg["seg_log2"]
    shape = product.shape[:-1] + (params.stages // seg, seg)
    return product.reshape(shape).sum(axis=-1)


def chain_golden(params: SparseDspChainParams, cfg: dict, beats: dict) -> np.ndarray:
    """Results of ``sparse-dsp-chain`` for a sequence of beats, in output order (int64).

    Parameters
    ----------
    cfg
        Configuration word fields (``mode``, ``m_log2``, ``seg_log2``).
    beats
        ``w0``, ``w1``, ``idx`` [T, stages]; ``win0``, ``win1`` [T, stages, max_m]; ``last``
        [T]. A row (dot product) ends at each beat with ``last``.

    Returns
    -------
    numpy.ndarray
        For every row, for every segment ``s``: ``low`` then ``high`` lane, wrapped to
        ``acc_bits``. Beats after the final ``last`` produce nothing.
    """
    check_chain_config(params, cfg)
    mask = (1 << cfg["m_log2"]) - 1
    idx = np.asarray(beats["idx"], dtype=np.int64) & mask
    sel0 = np.take_along_axis(np.asarray(beats["win0"], np.int64), idx[..., None], -1)[..., 0]
    sel1 = np.take_along_axis(np.asarray(beats["win1"], np.int64), idx[..., None], -1)[..., 0]
    p = _segment_sums(params, cfg, beats["w0"], beats["w1"], sel0, sel1)
    lanes = np.stack(split_lanes(p), axis=-1)  # [T, segments, 2]
    last = np.asarray(beats["last"], dtype=bool)
    ends = np.nonzero(last)[0]
    if ends.size == 0:
        return np.zeros(0, dtype=np.int64)
    running = np.cumsum(lanes, axis=0)[ends]
    before = np.concatenate([np.zeros_like(running[:1]), running[:-1]])
    return wrap(running - before, params.acc_bits).reshape(-1)


def packed_matmul(values, indices, n: int, m: int, x) -> np.ndarray:
    """Exact ``W @ X`` from N:M value and index streams (int64), vectorized.

    ``values`` and ``indices`` are [rows, groups * n]: slot ``k`` of a row belongs to group
    ``k // n`` and multiplies column ``(k // n) * m + index``. ``x`` is [cols] or [cols, batch];
    columns past the end of ``x`` (padding of the last group) read as zero.
    """
    values = np.asarray(values, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    vector = x.ndim == 1
    x2 = x[:, None] if vector else x
    groups = values.shape[1] // n
    padded = np.zeros((groups * m, x2.shape[1]), dtype=np.int64)
    padded[: min(len(x2), groups * m)] = x2[: groups * m]
    cols = (np.arange(values.shape[1]) // n) * m + indices
    y = np.einsum("rk,rkb->rb", values, padded[cols])
    return y[:, 0] if vector else y


def mpe_golden(params: SparseMpeParams, cfg: dict, act_beats, w_beats) -> np.ndarray:
    """Results of ``sparse-mpe`` for one request, in output order (int64).

    Parameters
    ----------
    cfg
        Configuration word fields (:func:`mpe_config_fields`).
    act_beats
        [beats, act_bytes] int8: token 0's ``k_words`` words, then token 1's, ...
    w_beats
        [passes * row_steps * n, chains, stages, 3] (``w0``, ``w1``, ``idx``), in step order
        (pass, step, slot).

    Returns
    -------
    numpy.ndarray
        For each pass, each token pair ``q``, each chain, each segment: the ``low`` lane then
        the ``high`` lane (matrix-vector: rows of the unit's pair; matrix-matrix: tokens
        ``2q``, ``2q + 1``), wrapped to ``acc_bits``.
    """
    check_chain_config(params, cfg)
    m, n = 1 << cfg["m_log2"], cfg["n"]
    seg = 2 << cfg["seg_log2"]
    steps, passes, pairs = cfg["row_steps"], cfg["passes"], cfg["pairs"]
    tokens = 2 * pairs if cfg["mode"] == MODE_MM else 1
    per_token = cfg["k_words"] * params.word_bytes
    acts = np.asarray(act_beats, dtype=np.int64).reshape(-1)
    if acts.size != tokens * per_token:
        raise ValueError(f"expected {tokens * per_token} activations, got {acts.size}")
    x = acts.reshape(tokens, per_token)
    w = np.asarray(w_beats, dtype=np.int64).reshape(
        passes, steps, n, params.chains, params.stages, 3
    )
    jj = np.arange(params.stages) % seg
    step = np.arange(steps)[:, None]
    col_base = (step * seg + jj) * m  # [steps, stages]
    cols = col_base[None, :, None, None, :] + (w[..., 2] & (m - 1))  # [P, steps, n, C, S]
    out = []
    for q in range(pairs):
        if cfg["mode"] == MODE_MM:
            sel0, sel1 = x[2 * q][cols], x[2 * q + 1][cols]
        else:
            sel0 = sel1 = x[0][cols]
        p = _segment_sums(params, cfg, w[..., 0], w[..., 1], sel0, sel1)  # [P, steps, n, C, seg]
        low, high = split_lanes(p)
        out.append(np.stack([low.sum(axis=(1, 2)), high.sum(axis=(1, 2))], axis=-1))
    result = np.stack(out, axis=1)  # [passes, pairs, chains, segments, 2]
    return wrap(result, params.acc_bits).reshape(-1)
