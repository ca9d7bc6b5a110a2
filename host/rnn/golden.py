"""``rnn``: LSTM on a tiled MAC array — parameters, formats, tables, golden model, packing.

The engine (``hw/rnn``) runs the tile program of :mod:`tandem.mappings.rnn.tiling` once per time
step; this module describes every number format and holds the bit-exact golden model. Beside
it, and re-exported here: :mod:`~tandem.host.rnn.params` (:class:`RnnParams`),
:mod:`~tandem.host.rnn.activations` (the sigmoid and tanh tables),
:mod:`~tandem.host.rnn.quantize` (``state_dict`` to :class:`QuantLstm`) and
:mod:`~tandem.host.rnn.packing` (tiles and beats).

Number formats
--------------
State (x, h)
    int16 with ``state_frac`` fraction bits (default 12: range +-8, LSB 2.4e-4). Inputs x are
    quantized by the host (:func:`quantize_state`), saturating (and counted).
Cell state (c, LSTM)
    ``cell_bits`` wide with ``cell_frac`` fraction bits (default 27 and 16: range +-1024, LSB
    1.5e-5). With ``f <= 1`` and ``|i * g| <= 1``, ``|c_t| <= t``: no sequence of up to 1023
    steps can saturate it, whatever the weights; trained models stay far below (silero VAD's
    cell reaches 52 on speech). 27 bits is the DSP48E2's wide multiplier port, so ``c * f``
    stays one DSP.
Weights
    int8 or int16 (``weight_bits``) with one power-of-two scale for the whole ``[W | U]``:
    ``w_q = round(w * 2**w_frac)``. ``w_frac`` is chosen by :func:`quantize_lstm` (largest that
    fits the largest weight, so no weight saturates) and sent to the engine with each sequence.
    Weights beyond ``weight_bits`` even at ``w_frac`` 0, and biases beyond
    :attr:`RnnParams.bias_limit`, raise ``ValueError``.
Accumulator
    ``acc = bias_q + sum(w_q * s_q)``: exact, ``acc_bits`` wide, ``w_frac + state_frac``
    fraction bits. ``bias_q = round((b_ih + b_hh) * 2**(w_frac + state_frac))``.
Activation input
    ``a = clamp(round_half_up(acc / 2**w_frac), +-(2**(act_range_bits + state_frac) - 1))``:
    ``state_frac`` fraction bits, range +-2**act_range_bits (default +-16).
Activations
    sigmoid and tanh are piecewise linear over ``|a|`` in ``2**act_segment_bits`` uniform
    segments (:func:`activation_tables`; the ROMs of the gateware hold the same arrays), with
    symmetry for negative inputs: ``sigmoid(-a) = 1 - sigmoid(a)``, ``tanh(-a) = -tanh(a)``.
    Outputs have ``gate_frac`` fraction bits (1.0 is exact).
Cell update
    With ``S = gate_frac + max(gate_frac, cell_frac)`` (the fraction bits of the sum):
    ``c' = sat(round_half_up((f*c << (S - gate_frac - cell_frac)) + (i*g << (S - 2*gate_frac)),
    S - cell_frac), cell_bits)``; tanh reads ``round_half_up(c', cell_frac - state_frac)``
    (an activation input, clamped like one) and ``h' = sat16(round_half_up(o * tanh(c'),
    2*gate_frac - state_frac))``.
Saturation
    Every place that limits a value is counted (``saturations=True`` of the golden functions;
    :class:`~tandem.host.rnn.device.RnnDevice` reports them): ``x`` (host quantization), ``c``,
    ``h``, and ``act``, activation inputs clamped to +-2**act_range_bits where the clamp changes
    a result: GRU's ``n_x`` and ``n_h`` (``n_h`` is scaled by r after the clamp), and sigmoid or
    tanh lanes only when the table's end is not the function's limit (:func:`clamp_is_exact`; at
    the default range both are, so a clamp there changes no output). The accumulator is exact
    (``acc_bits``), so it never saturates. The engine raises a sticky flag with each output
    (``out_fields``'s ``sat``) when any counted place of this sequence has saturated so far.

Because every accumulation is exact integer arithmetic, the golden model does not depend on the
tile order: it is a plain quantized LSTM, vectorized over the batch and the units, and the RTL
must match it bit for bit whatever program it runs.

Cycle behaviour of the engine (what :mod:`tandem.mappings.rnn.schedule` models) is described in
``hw/rnn/engine.py``; :func:`dependency_latency` is its one timing constant.
"""

import numpy as np
from tandem.host.common.fixed import (
    round_shift_right,
    saturate,
)
from tandem.mappings.rnn.tiling import GATES, TileProgram

from .activations import activation_tables, clamp_is_exact, sigmoid_fixed, tanh_fixed
from .packing import (
    cmd_fields,
    cmd_payload,
    decode_outputs,
    out_fields,
    pack_fields,
    pack_tiles,
    tile_beats,
    tile_fields,
    unpack_fields,
    weight_beats,
    x_beats,
)
from .params import ISSUE_TO_WRITE, SATURATION_PLACES, STATE_BITS, RnnParams, dependency_latency
from .quantize import QuantLstm, layer_suffix, quantize_lstm, quantize_state

__all__ = [
    "ISSUE_TO_WRITE",
    "SATURATION_PLACES",
    "STATE_BITS",
    "QuantLstm",
    "RnnParams",
    "activation_tables",
    "clamp_is_exact",
    "cmd_fields",
    "cmd_payload",
    "decode_outputs",
    "dependency_latency",
    "gru_golden",
    "layer_suffix",
    "lstm_accuracy",
    "lstm_golden",
    "out_fields",
    "pack_fields",
    "pack_tiles",
    "quantize_lstm",
    "quantize_state",
    "rnn_golden",
    "saturation_flags",
    "sigmoid_fixed",
    "tanh_fixed",
    "tile_beats",
    "tile_fields",
    "torch_lstm_reference",
    "unpack_fields",
    "weight_beats",
    "x_beats",
]


# --- golden model --------------------------------------------------------------------------
def _limit(value, bits: int, counts=None):
    """``value`` saturated to a signed ``bits``-wide integer; adds each saturated value to
    ``counts`` (same shape, when given)."""
    out = saturate(value, bits, True)
    if counts is not None:
        counts += out != value
    return out


def _clamp(params: RnnParams, value, counts=None):
    """An activation input clamped to +-act_max; counted in ``counts`` when given (the caller
    passes it only for clamps that can change a result)."""
    out = np.clip(value, -params.act_max, params.act_max)
    if counts is not None:
        counts += out != value
    return out


def _new_counts(places, shape) -> dict[str, np.ndarray]:
    return {place: np.zeros(shape, np.uint8) for place in places}


def lstm_golden(params: RnnParams, model: QuantLstm, x, h0=None, c0=None, *, saturations=False):
    """Bit-exact model of the engine, vectorized over the batch and the units.

    Parameters
    ----------
    x
        ``(T, B, X)`` int16 inputs (``state_frac`` fraction bits).
    h0, c0
        ``(B, H)`` initial state (default zeros: what the engine starts every sequence with);
        ``c0`` has ``cell_frac`` fraction bits.
    saturations
        Also return the saturated values of every step, batch element and unit.

    Returns
    -------
    h, c
        ``(T, B, H)`` int64 arrays: the hidden (``state_frac`` fraction bits) and cell state
        (``cell_frac``) after every step.
    sat
        With ``saturations=True``: ``{"act", "c", "h"}`` uint8 ``(T, B, H)`` counts of each
        unit's saturated values per step (``act``: its gate inputs and tanh(c) input, counted
        only where the clamp is not exact, see :func:`clamp_is_exact`).
    """
    p = params
    x = np.asarray(x, dtype=np.int64)
    steps, batch, _ = x.shape
    hidden = model.hidden_size
    h = np.zeros((batch, hidden), np.int64) if h0 is None else np.asarray(h0, np.int64).copy()
    c = np.zeros((batch, hidden), np.int64) if c0 is None else np.asarray(c0, np.int64).copy()
    hs = np.empty((steps, batch, hidden), np.int64)
    cs = np.empty((steps, batch, hidden), np.int64)
    sat = _new_counts(("act", "c", "h"), (steps, batch, hidden)) if saturations else None
    lossy = {k: saturations and not clamp_is_exact(p, k) for k in ("sigmoid", "tanh")}
    wt, ut = model.w.T.copy(), model.u.T.copy()
    sum_frac = p.gate_frac + max(p.gate_frac, p.cell_frac)
    fc_shift = sum_frac - p.gate_frac - p.cell_frac
    ig_shift = sum_frac - 2 * p.gate_frac
    out_shift = 2 * p.gate_frac - p.state_frac
    for t in range(steps):
        act = sat["act"][t] if saturations else None
        acc = x[t] @ wt + h @ ut + model.bias
        a = round_shift_right(acc, model.w_frac, "half_up")
        gates = [a[:, k * hidden : (k + 1) * hidden] for k in range(GATES)]
        kinds = ("sigmoid", "sigmoid", "tanh", "sigmoid")  # i, f, g, o
        i, f, g, o = (
            _pwl_out(p, kind, _clamp(p, part, act if lossy[kind] else None))
            for kind, part in zip(kinds, gates, strict=True)
        )
        total = ((f * c) << fc_shift) + ((i * g) << ig_shift)
        c = _limit(
            round_shift_right(total, sum_frac - p.cell_frac, "half_up"),
            p.cell_bits,
            sat["c"][t] if saturations else None,
        )
        c_in = _clamp(
            p,
            round_shift_right(c, p.cell_frac - p.state_frac, "half_up"),
            act if lossy["tanh"] else None,
        )
        h = _limit(
            round_shift_right(o * tanh_fixed(p, c_in), out_shift, "half_up"),
            STATE_BITS,
            sat["h"][t] if saturations else None,
        )
        hs[t], cs[t] = h, c
    return (hs, cs, sat) if saturations else (hs, cs)


def _pwl_out(params: RnnParams, kind: str, a) -> np.ndarray:
    return sigmoid_fixed(params, a) if kind == "sigmoid" else tanh_fixed(params, a)


def gru_golden(params: RnnParams, model: QuantLstm, x, h0=None, *, saturations=False):
    """Bit-exact model of the engine with ``cell = "gru"`` (PyTorch's GRU,
    ``linear_before_reset``), vectorized over batch and units.

    ``r, z = sigmoid(rescale(W x + b_i + U h + b_h))``; ``n_x = rescale(W_n x + b_in)`` and
    ``n_h = rescale(U_n h + b_hn)`` each clamped like an activation input;
    ``n = tanh(clamp(n_x + round_half_up(r * n_h, gate_frac)))``;
    ``h' = sat16(round_half_up((1 - z) * n + z * (h << (gate_frac - state_frac)),
    2 * gate_frac - state_frac))``. Returns ``(h, zeros)`` of shape ``(T, B, H)``: a GRU has
    no c (the engine's c output carries zeros); with ``saturations=True`` also the counts of
    :func:`lstm_golden` (``act`` counts every ``n_x`` and ``n_h`` clamp, ``c`` stays zero).
    """
    p = params
    x = np.asarray(x, dtype=np.int64)
    steps, batch, _ = x.shape
    hid = model.hidden_size
    h = np.zeros((batch, hid), np.int64) if h0 is None else np.asarray(h0, np.int64).copy()
    hs = np.empty((steps, batch, hid), np.int64)
    sat = _new_counts(("act", "c", "h"), (steps, batch, hid)) if saturations else None
    lossy = {k: saturations and not clamp_is_exact(p, k) for k in ("sigmoid", "tanh")}
    wt, ut = model.w.T.copy(), model.u.T.copy()
    one = 1 << p.gate_frac
    align = p.gate_frac - p.state_frac
    out_shift = 2 * p.gate_frac - p.state_frac

    def act_in(acc, counts):
        return _clamp(p, round_shift_right(acc, model.w_frac, "half_up"), counts)

    for t in range(steps):
        act = sat["act"][t] if saturations else None
        sig = act if lossy["sigmoid"] else None
        ax = x[t] @ wt + model.bias
        ah = h @ ut + model.bias_h
        r = sigmoid_fixed(p, act_in(ax[:, :hid] + ah[:, :hid], sig))
        z = sigmoid_fixed(p, act_in(ax[:, hid : 2 * hid] + ah[:, hid : 2 * hid], sig))
        nx, nh = act_in(ax[:, 2 * hid :], act), act_in(ah[:, 2 * hid :], act)
        pre = _clamp(
            p,
            nx + round_shift_right(r * nh, p.gate_frac, "half_up"),
            act if lossy["tanh"] else None,
        )
        n = tanh_fixed(p, pre)
        h = _limit(
            round_shift_right((one - z) * n + z * (h << align), out_shift, "half_up"),
            STATE_BITS,
            sat["h"][t] if saturations else None,
        )
        hs[t] = h
    zeros = np.zeros_like(hs)
    return (hs, zeros, sat) if saturations else (hs, zeros)


def rnn_golden(params: RnnParams, inputs, *, saturations: bool = False):
    """Registry entry point: ``inputs = (model, x)``; ``(h, c)`` of every step (and the
    saturation counts of :func:`lstm_golden` with ``saturations=True``)."""
    model, x = inputs
    if params.cell == "gru":
        return gru_golden(params, model, x, saturations=saturations)
    return lstm_golden(params, model, x, saturations=saturations)


def saturation_flags(params: RnnParams, program: TileProgram, sat) -> np.ndarray:
    """The engine's sticky ``sat`` output bit of every ``o`` beat, ``(T, row_blocks, B)`` in
    stream order: whether any counted place (``act``, ``c``, ``h`` of ``sat``, the golden's
    counts) saturated in this sequence up to and including the beat's row block."""
    ub = params.units_per_block
    any_unit = sat["act"].astype(bool) | sat["c"].astype(bool) | sat["h"].astype(bool)
    steps, batch, hidden = any_unit.shape
    padded = np.zeros((steps, batch, program.row_blocks * ub), bool)
    padded[:, :, :hidden] = any_unit
    per_beat = padded.reshape(steps, batch, program.row_blocks, ub).any(axis=3)
    order = per_beat.transpose(0, 2, 1).reshape(-1)  # step, row block, batch
    return np.logical_or.accumulate(order).reshape(steps, program.row_blocks, batch)


# --- accuracy against torch ------------------------------------------------------------------
def torch_lstm_reference(module, x) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``h`` and ``c`` of every step from a single-layer ``torch.nn.LSTM`` (or
    ``nn.GRU``, ``nn.LSTMCell``, ``nn.GRUCell``; c is zeros for a GRU) run one step at a time;
    ``x`` is ``(T, B, X)``."""
    import torch

    cell = isinstance(module, (torch.nn.LSTMCell, torch.nn.GRUCell))
    with torch.no_grad():
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        if getattr(module, "batch_first", False):
            xt = xt.transpose(0, 1)
        state = None
        hs, cs = [], []
        for t in range(xt.shape[0]):
            if cell:
                state = module(xt[t], state)
                h, c = state if isinstance(state, tuple) else (state, None)
            else:
                _, state = module(xt[t : t + 1], state)
                lstm = isinstance(state, tuple)
                h, c = (state[0][-1], state[1][-1]) if lstm else (state[-1], None)
            hs.append(h.numpy().copy())
            cs.append(np.zeros_like(hs[-1]) if c is None else c.numpy().copy())
    return np.stack(hs), np.stack(cs)


def lstm_accuracy(params: RnnParams, module, x) -> dict[str, float]:
    """Max and mean abs error of h and c of the fixed-point engine against float32 torch.

    ``module`` is a one-layer ``torch.nn.LSTM`` or ``nn.LSTMCell`` (or ``torch.nn.GRU`` /
    ``nn.GRUCell`` with ``cell = "gru"``; c errors are then 0); its ``state_dict`` is quantized
    with
    :func:`quantize_lstm`, ``x`` (float, ``(T, B, X)``) with :func:`quantize_state`.
    """
    model = quantize_lstm(params, module.state_dict())
    hq, cq = rnn_golden(params, (model, quantize_state(params, x)))
    href, cref = torch_lstm_reference(module, x)
    dh = np.abs(hq * 2.0**-params.state_frac - href)
    dc = np.abs(cq * 2.0**-params.cell_frac - cref)
    return {
        "h_max": float(dh.max()),
        "h_mean": float(dh.mean()),
        "c_max": float(dc.max()),
        "c_mean": float(dc.mean()),
        "w_frac": model.w_frac,
    }
