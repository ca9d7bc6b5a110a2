"""The sparse DSP engines' beat streams, built from a packed N:M matrix, and their unpacking.

Work units
----------
A cascade segment computes one *unit* per row pass: in matrix-vector mode (``mv``) a row pair
whose two weights share one activation (so the two rows must share their indices:
:func:`mv_units` pairs rows 2i and 2i+1 when they do and runs a row alone otherwise, its
second lane idle); in matrix-matrix mode (``mm``) one row, whose weight is shared by two tokens.

Schedule
--------
A segment of ``L`` stages (1, 2 or 4 DSP groups) gives stage ``j`` the groups ``j, j + L,
j + 2L, ...`` of its unit's row: one *step* covers ``L`` consecutive groups, and takes ``n``
beats, one slot of every group per beat, so the stage's activation window (the group's ``m``
columns) stays put for ``n`` beats. A row takes ``row_steps = ceil(groups / L)`` steps; a chain
of ``S`` stages runs ``S / L`` units side by side, ``chains`` chains run more; a *pass* covers
``chains * S / L`` units. Dense-equivalent work per beat: ``2 * S * m / n`` MACs per chain.
"""

from dataclasses import dataclass

import numpy as np
from tandem.host.common import bits
from tandem.host.sparse_dsp.golden import (
    MODE_MM,
    MODE_MV,
    SparseDspChainParams,
    SparseMpeParams,
    chain_config_fields,
    mpe_config_fields,
)

from .packer import NMError, NMPacked

__all__ = [
    "FILL_BEYOND_STAGES",
    "ChainStreams",
    "MpeStreams",
    "chain_streams",
    "choose_segment",
    "mm_units",
    "mpe_streams",
    "mv_units",
    "pack_config",
    "request_cycles",
]

MODES = {"mv": MODE_MV, "mm": MODE_MM}


def pack_config(fields, cfg: dict) -> int:
    """The configuration word as an integer (first field in the least significant bits).

    ``fields`` are ``(name, width)`` pairs (unsigned); a value that does not fit is an
    :class:`NMError`.
    """
    fields = bits.as_fields(fields)
    try:
        return bits.pack(fields, {f.name: cfg[f.name] for f in fields})
    except ValueError as error:
        raise NMError(f"configuration {error}") from None


def _group_nonzero(packed: NMPacked) -> np.ndarray:
    """Non-zero mask of the dense matrix by group [rows, groups, m]."""
    m = packed.pattern.m
    mask = np.zeros((packed.shape[0], packed.groups * m), dtype=bool)
    np.put_along_axis(mask, packed.columns(), packed.values != 0, axis=1)
    return mask.reshape(packed.shape[0], packed.groups, m)


def mv_units(packed: NMPacked) -> np.ndarray:
    """Row pairs of the matrix-vector mode, [units, 2] (``-1``: idle lane).

    Rows ``2i`` and ``2i + 1`` share a unit when, in every group, their non-zeros together use
    at most N columns (then one index stream serves both; prune with
    ``prune_magnitude(..., pair_rows=True)`` to get that). Otherwise each row runs alone.
    """
    rows = packed.shape[0]
    nz = _group_nonzero(packed)
    units = []
    for r in range(0, rows, 2):
        joint = r + 1 < rows and (nz[r] | nz[r + 1]).sum(axis=-1).max() <= packed.pattern.n
        if joint:
            units.append((r, r + 1))
        else:
            units.append((r, -1))
            if r + 1 < rows:
                units.append((r + 1, -1))
    return np.asarray(units, dtype=np.int64).reshape(-1, 2)


def mm_units(packed: NMPacked) -> np.ndarray:
    """Units of the matrix-matrix mode: one row each, [rows, 2]."""
    rows = packed.shape[0]
    return np.stack([np.arange(rows), np.full(rows, -1)], axis=1).astype(np.int64)


def _unit_slots(packed: NMPacked, units: np.ndarray, mode: int, groups_padded: int):
    """w0, w1, idx of every unit [units, groups_padded * n] (padding: zero weights).

    A matrix-vector pair is repacked on the union of its two rows' non-zeros, with the same
    slot rule as :func:`~tandem.mappings.nm.pack_nm` (non-zeros, then the lowest free columns).
    """
    n, m = packed.pattern.n, packed.pattern.m
    slots = groups_padded * n
    dense = np.zeros((packed.shape[0] + 1, groups_padded, m), dtype=np.int64)  # last: zeros
    dense[:-1, : packed.groups] = packed.dense_padded().reshape(packed.shape[0], -1, m)
    a, b = dense[units[:, 0]], dense[units[:, 1]] if mode == MODE_MV else dense[-1:]
    used = (a != 0) | (b != 0)
    key = np.where(used, 0, m) + np.arange(m)
    chosen = np.sort(np.argsort(key, axis=-1, kind="stable")[..., :n], axis=-1)
    w0 = np.take_along_axis(a, chosen, axis=-1).reshape(len(units), slots)
    if mode == MODE_MV:
        w1 = np.take_along_axis(b, chosen, axis=-1).reshape(len(units), slots)
    else:
        w1 = np.zeros_like(w0)
    return w0, w1, chosen.reshape(len(units), slots)


def _beat_order(a: np.ndarray, passes: int, chains: int, segs: int, steps: int, seg: int, n: int):
    """[units, steps*seg*n] slots -> [passes*steps*n, chains, segs*seg] beats."""
    a = a.reshape(passes, chains, segs, steps, seg, n)
    return a.transpose(0, 3, 5, 1, 2, 4).reshape(passes * steps * n, chains, segs * seg)


#: Cycles of a request beyond its beats, results and stages (measured against the RTL).
FILL_BEYOND_STAGES = 5


def request_cycles(
    stages: int, chains: int, segs: int, steps: int, n: int, pairs: int, passes: int
) -> int:
    """``sparse-mpe`` cycles of one request, first weight beat to last result.

    Cycle-exact with the RTL when the weight stream never waits and results are taken as they
    come (:func:`tandem.host.sparse_dsp.device.mpe_cycles` explains the terms): ``B = steps * n *
    pairs`` beats per pass; each of a pass's ``pairs`` captures loads ``Rp = 2 * chains *
    segs`` results into a serializer that must empty before the next capture::

        (B - pairs + 1) + passes * (pairs - 1) * (Rp + 1)
        + (passes - 1) * max(B - pairs + 1, Rp + 1) + Rp + stages + 5
    """
    per_pair = 2 * chains * segs
    gap = steps * n * pairs - pairs + 1  # beats from one pass's last capture to the next's first
    return (
        gap
        + passes * (pairs - 1) * (per_pair + 1)
        + (passes - 1) * max(gap, per_pair + 1)
        + per_pair
        + stages
        + FILL_BEYOND_STAGES
    )


def work_cycles(params, units: int, groups: int, n: int, pairs: int) -> tuple[int, int]:
    """``(cycles, weight beats)`` of one request of ``units`` units (row pairs in the
    matrix-vector mode, rows in the matrix-matrix mode) over ``groups`` groups of N slots, for
    ``pairs`` token pairs: the segment choice, steps and passes of :func:`_layout`, then
    :func:`request_cycles`. The weight beats are those of one token pair's sweep."""
    chains = params.chains
    seg = choose_segment(params, groups, units, n, pairs, chains)
    segs = params.stages // seg
    steps = -(-groups // seg)
    passes = -(-units // (chains * segs))
    cycles = request_cycles(params.stages, chains, segs, steps, n, pairs, passes)
    return cycles, passes * steps * n


def product_cycles(
    params, packed: NMPacked, mode: str, batch: int, units: int | None = None
) -> int:
    """Cycles of the request :func:`mpe_streams` builds for ``packed`` and ``batch`` tokens,
    without building its beats (``units``: ``len(mv_units(packed))`` when known).

    Equals ``request_cycles`` of that request's layout (:func:`work_cycles`).
    """
    mode_id = MODES[mode]
    if units is None:
        units = len(mv_units(packed)) if mode_id == MODE_MV else packed.shape[0]
    pairs = -(-batch // 2) if mode_id == MODE_MM else 1
    return work_cycles(params, units, packed.groups, packed.pattern.n, pairs)[0]


def choose_segment(params, groups: int, units: int, n: int, pairs: int, chains: int = 1) -> int:
    """Cascade segment (2, 4 or 8 stages) with the fewest cycles (:func:`request_cycles`) for
    this work; ties: the longest."""
    best = None
    for seg in params.segment_choices:
        segs = params.stages // seg
        steps = -(-groups // seg)
        passes = -(-units // (chains * segs))
        cycles = request_cycles(params.stages, chains, segs, steps, n, pairs, passes)
        if best is None or cycles <= best[0]:
            best = (cycles, seg)
    return best[1]


def _tokens(x, mode: int, max_batch: int) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iu" or (x.size and (x.min() < -128 or x.max() > 127)):
        raise NMError("activations must be int8 integers")
    x = x.astype(np.int64)
    if mode == MODE_MV:
        if x.ndim == 2 and x.shape[1] == 1:
            x = x[:, 0]
        if x.ndim != 1:
            raise NMError(f"matrix-vector mode takes one activation vector, not shape {x.shape}")
        return x[:, None]
    if x.ndim != 2:
        raise NMError(f"matrix-matrix mode takes activations [cols, batch], not shape {x.shape}")
    if x.shape[1] > max_batch:
        raise NMError(f"batch {x.shape[1]} exceeds max_batch {max_batch}")
    if x.shape[1] % 2:
        x = np.concatenate([x, np.zeros((x.shape[0], 1), dtype=np.int64)], axis=1)
    return x


@dataclass
class _Layout:
    mode: int
    units: np.ndarray
    seg: int
    segs: int
    steps: int
    passes: int
    groups_padded: int
    pairs: int
    tokens: np.ndarray  # [cols, batch padded]
    rows: int
    batch: int
    useful_macs: int


def _layout(params, packed, x, mode, seg, chains) -> _Layout:
    if mode not in MODES:
        raise NMError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    mode_id = MODES[mode]
    packed.pattern.check_supported(params.max_m)
    tokens = _tokens(x, mode_id, getattr(params, "max_batch", 2))
    if tokens.shape[0] != packed.shape[1]:
        raise NMError(
            f"activations have {tokens.shape[0]} columns, the matrix has {packed.shape[1]}"
        )
    units = mv_units(packed) if mode_id == MODE_MV else mm_units(packed)
    groups = packed.groups
    pairs = tokens.shape[1] // 2 if mode_id == MODE_MM else 1
    if seg is None:
        seg = choose_segment(params, groups, len(units), packed.pattern.n, pairs, chains)
    if seg not in params.segment_choices:
        raise NMError(f"segment {seg} not one of {params.segment_choices}")
    segs = params.stages // seg
    steps = -(-groups // seg)
    passes = -(-len(units) // (chains * segs))
    pad_units = passes * chains * segs - len(units)
    units = np.concatenate([units, np.full((pad_units, 2), -1, dtype=np.int64)])
    batch = 1 if mode_id == MODE_MV else int(np.asarray(x).shape[1])
    return _Layout(
        mode=mode_id,
        units=units,
        seg=seg,
        segs=segs,
        steps=steps,
        passes=passes,
        groups_padded=steps * seg,
        pairs=pairs,
        tokens=tokens,
        rows=packed.shape[0],
        batch=batch,
        useful_macs=packed.values.size * batch,
    )


def _unpack(lay: _Layout, results, chains: int) -> np.ndarray:
    """Results in engine order [passes, pairs, chains, segs, 2] -> Y."""
    r = np.asarray(results, dtype=np.int64).reshape(lay.passes, lay.pairs, chains, lay.segs, 2)
    r = r.transpose(0, 2, 3, 1, 4).reshape(lay.passes * chains * lay.segs, lay.pairs, 2)
    if lay.mode == MODE_MV:
        y = np.zeros(lay.rows, dtype=np.int64)
        for lane in range(2):
            ok = lay.units[:, lane] >= 0
            y[lay.units[ok, lane]] = r[ok, 0, lane]
        return y
    y = np.zeros((lay.rows, 2 * lay.pairs), dtype=np.int64)
    ok = lay.units[:, 0] >= 0
    y[lay.units[ok, 0]] = r[ok].reshape(-1, 2 * lay.pairs)
    return y[:, : lay.batch]


@dataclass
class ChainStreams:
    """Input of ``sparse-dsp-chain`` for one matrix and one vector (or token pair).

    Attributes
    ----------
    cfg : dict
        Configuration word fields.
    beats : dict of numpy.ndarray
        ``w0``, ``w1``, ``idx`` [T, stages]; ``win0``, ``win1`` [T, stages, max_m]; ``last`` [T].
    """

    params: SparseDspChainParams
    cfg: dict
    beats: dict
    layout: _Layout

    @property
    def config_word(self) -> int:
        return pack_config(chain_config_fields(self.params), self.cfg)

    def beat_fields(self, t: int) -> tuple[list[int], list[int]]:
        """Values and widths of beat ``t``'s payload, in the chain's port layout order."""
        p, b = self.params, self.beats
        values, widths = [], []
        for j in range(p.stages):
            values += [b["w0"][t, j], b["w1"][t, j], b["idx"][t, j]]
            widths += [8, 8, p.index_bits]
        for key in ("win0", "win1"):
            values += list(b[key][t].reshape(-1))
            widths += [8] * (p.stages * p.max_m)
        values.append(int(b["last"][t]))
        widths.append(1)
        return values, widths

    def unpack(self, results) -> np.ndarray:
        """Y from the chain's results (``W @ x`` rows, or [rows, 2] for a token pair)."""
        return _unpack(self.layout, results, 1)


def chain_streams(
    params: SparseDspChainParams, packed: NMPacked, x, mode: str = "mv", seg: int | None = None
) -> ChainStreams:
    """Beats that make one ``sparse-dsp-chain`` compute ``W @ x`` (``mm``: x is [cols, 2])."""
    lay = _layout(params, packed, x, mode, seg, 1)
    if lay.pairs > 1:
        raise NMError("the chain takes one token pair; use sparse-mpe for larger batches")
    n, m = packed.pattern.n, packed.pattern.m
    w0, w1, idx = _unit_slots(packed, lay.units, lay.mode, lay.groups_padded)
    order = (lay.passes, 1, lay.segs, lay.steps, lay.seg, n)
    beats = {k: _beat_order(v, *order)[:, 0] for k, v in (("w0", w0), ("w1", w1), ("idx", idx))}
    t_count = lay.passes * lay.steps * n
    x_pad = np.zeros((lay.groups_padded * m, 2), dtype=np.int64)
    x_pad[: lay.tokens.shape[0], : lay.tokens.shape[1]] = lay.tokens
    step = np.arange(lay.steps)[:, None]
    group = step * lay.seg + (np.arange(params.stages) % lay.seg)  # [steps, stages]
    cols = group[..., None] * m + np.arange(m)  # [steps, stages, m]
    windows = []
    for lane in range(2):
        win = np.zeros((lay.steps, params.stages, params.max_m), dtype=np.int64)
        win[..., :m] = x_pad[cols, lane]
        # beat (pass, step, slot) -> window of its step
        windows.append(
            np.broadcast_to(win[None, :, None], (lay.passes, lay.steps, n) + win.shape[1:])
        )
    beats["win0"] = windows[0].reshape(t_count, params.stages, params.max_m)
    beats["win1"] = windows[1].reshape(t_count, params.stages, params.max_m)
    if lay.mode == MODE_MV:
        beats["win1"] = np.zeros_like(beats["win1"])
    last = np.zeros((lay.passes, lay.steps, n), dtype=bool)
    last[:, -1, -1] = True
    beats["last"] = last.reshape(-1)
    cfg = {"mode": lay.mode, "m_log2": packed.pattern.m_log2, "seg_log2": lay.seg.bit_length() - 2}
    return ChainStreams(params=params, cfg=cfg, beats=beats, layout=lay)


@dataclass
class MpeStreams:
    """One ``sparse-mpe`` request: configuration word, activation beats, weight beats.

    Attributes
    ----------
    cfg : dict
        Configuration word fields (:func:`tandem.host.sparse_dsp.mpe_config_fields`).
    act_beats : numpy.ndarray
        int8 [beats, act_bytes].
    w_beats : numpy.ndarray
        [beats, chains, stages, 3]: ``w0``, ``w1``, ``idx`` of every stage.
    """

    params: SparseMpeParams
    cfg: dict
    act_beats: np.ndarray
    w_beats: np.ndarray
    layout: _Layout

    @property
    def config_word(self) -> int:
        return pack_config(mpe_config_fields(self.params), self.cfg)

    @property
    def outputs(self) -> int:
        """Number of int32 results the engine sends."""
        return self.layout.passes * self.layout.pairs * self.params.chains * self.layout.segs * 2

    @property
    def useful_macs(self) -> int:
        """MACs the N:M format asks for: N slots per group of every real row, times batch.

        Weights that happen to be zero inside their N slots count (the format stores them);
        padding rows, groups and idle lanes do not.
        """
        return self.layout.useful_macs

    @property
    def dense_macs(self) -> int:
        """MACs of the same product done densely: rows x cols x batch."""
        rows, cols = self.layout.rows, self.layout.tokens.shape[0]
        return rows * cols * self.layout.batch

    def weight_payload(self, t: int) -> int:
        """Beat ``t`` of the weight stream as one integer (stage 0 of chain 0 lowest)."""
        p = self.params
        slot = [("w0", 8, True), ("w1", 8, True), ("idx", p.index_bits)]
        return bits.pack(slot * (p.chains * p.stages), self.w_beats[t].reshape(-1))

    def act_payload(self, t: int) -> int:
        """Beat ``t`` of the activation stream: int8 elements, element 0 lowest."""
        return bits.pack_array(self.act_beats[t], 8)

    def unpack(self, results) -> np.ndarray:
        """Y (``W @ x`` [rows], or [rows, batch]) from the engine's results."""
        return _unpack(self.layout, results, self.params.chains)


def mpe_streams(
    params: SparseMpeParams, packed: NMPacked, x, mode: str = "mv", seg: int | None = None
) -> MpeStreams:
    """The ``sparse-mpe`` request that computes ``W @ x`` (``mm``: ``x`` is [cols, batch])."""
    lay = _layout(params, packed, x, mode, seg, params.chains)
    n, m = packed.pattern.n, packed.pattern.m
    cols_padded = lay.groups_padded * m
    word = params.word_bytes
    k_words = -(-cols_padded // word)
    if k_words > params.words_per_token:
        raise NMError(
            f"{packed.shape[1]} columns (padded to {k_words * word}) exceed max_k {params.max_k}"
        )
    if lay.steps >= 1 << 16 or lay.passes >= 1 << 16:
        raise NMError("matrix too large for one request (16-bit step or pass count)")
    w0, w1, idx = _unit_slots(packed, lay.units, lay.mode, lay.groups_padded)
    order = (lay.passes, params.chains, lay.segs, lay.steps, lay.seg, n)
    w_beats = np.stack([_beat_order(a, *order) for a in (w0, w1, idx)], axis=-1)
    tokens = lay.tokens.shape[1] if lay.mode == MODE_MM else 1
    acts = np.zeros((tokens, k_words * word), dtype=np.int64)
    acts[:, : lay.tokens.shape[0]] = lay.tokens[:, :tokens].T
    cfg = {
        "mode": lay.mode,
        "m_log2": packed.pattern.m_log2,
        "seg_log2": lay.seg.bit_length() - 2,
        "n": n,
        "row_steps": lay.steps,
        "passes": lay.passes,
        "pairs": lay.pairs,
        "k_words": k_words,
    }
    return MpeStreams(
        params=params,
        cfg=cfg,
        act_beats=acts.reshape(-1, params.act_bytes).astype(np.int8),
        w_beats=w_beats.astype(np.int16),
        layout=lay,
    )
