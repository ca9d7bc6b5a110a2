"""``rnn``: LSTM on a tiled MAC array — parameters, formats, tables, golden model, packing.

The engine (``hw/rnn``) runs the tile program of :mod:`tandem.mappings.rnn.tiling` once per time
step; this module owns every number format and the bit-exact golden model.

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

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from tandem.host.common import bits
from tandem.host.common.fixed import (
    check_fit,
    clip_counted,
    round_shift_right,
    saturate,
    value_range,
)
from tandem.mappings.rnn.tiling import GATES, TileProgram, ceil_div, packed_rows

from tandem.config import ParamError, Params, param

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

#: Width of x and h (and of a GRU's c lanes, which hold h).
STATE_BITS = 16
#: Places where the engine and the host limit a value (see the module docstring).
SATURATION_PLACES = ("x", "act", "c", "h")
#: Cycles from issuing a row block's last tile (for one batch element) to the cycle its h is
#: written, not counting the adder tree (one register per level): operand read, multiply,
#: accumulate, rescale, table read, interpolate, cell update, tanh read, interpolate, h = o*tanh.
ISSUE_TO_WRITE = 9


def dependency_latency(tile_cols: int) -> int:
    """Smallest gap in cycles between issuing a row block's last tile and issuing a tile that
    reads the h it produces: the write takes ``ISSUE_TO_WRITE + log2(tile_cols)`` cycles, and
    the reader issues the cycle after the write."""
    return ISSUE_TO_WRITE + int(math.log2(tile_cols)) + 1


@dataclass(frozen=True)
class RnnParams(Params):
    """Array shape, capacity and number formats of the ``rnn`` engine.

    The MAC array computes one ``tile_rows x tile_cols`` tile times one ``tile_cols`` operand
    vector per cycle. ``max_input`` and ``max_hidden`` size the on-chip memories (weights, tile
    program, x, h and c); a sequence may use any X <= max_input and H <= max_hidden.
    """

    design = "rnn"

    cell: str = param(
        "lstm",
        "recurrent cell: lstm, or gru (PyTorch gate order r, z, n; linear_before_reset)",
        choices=("lstm", "gru"),
    )
    tile_rows: int = param(
        8,
        "gate rows per tile: 4 gates of tile_rows/4 hidden units",
        min=4,
        max=256,
        power_of_two=True,
    )
    tile_cols: int = param(
        8,
        "[x | h] columns per tile (dot-product length per cycle)",
        min=1,
        max=256,
        power_of_two=True,
    )
    batch: int = param(
        2, "sequences run side by side (one per cycle through each tile)", min=1, max=16
    )
    max_input: int = param(64, "largest input size X the memories hold", min=1, max=4096)
    max_hidden: int = param(64, "largest hidden size H the memories hold", min=1, max=4096)
    weight_bits: int = param(16, "weight width (int8 or int16)", choices=(8, 16))
    weight_source: str = param(
        "memory",
        "tile weights: 'memory' (on chip, loaded once through tile_i) or 'stream' (w_i, one "
        "tile per program entry every step, e.g. from HBM)",
        choices=("memory", "stream"),
    )
    state_frac: int = param(12, "fraction bits of the int16 x and h", min=8, max=13)
    cell_bits: int = param(
        27,
        "width of the LSTM cell state c (27: c*f on one DSP48E2; |c| <= steps, see docs/rnn.md)",
        min=16,
        max=27,
    )
    cell_frac: int = param(16, "fraction bits of the LSTM cell state c", min=8, max=25)
    gate_frac: int = param(14, "fraction bits of sigmoid/tanh outputs", min=8, max=14)
    act_segment_bits: int = param(
        9,
        "log2 of the piecewise-linear segments of sigmoid and tanh over |a| < range",
        min=4,
        max=12,
    )
    act_range_bits: int = param(
        4, "activation inputs are clamped to +-2**act_range_bits", min=3, max=5
    )
    max_steps: int = param(65535, "longest sequence one command may run", min=1, max=65535)

    def check(self) -> None:
        if self.gate_frac < self.state_frac:
            raise ParamError(
                "gate_frac",
                f"gate_frac must be at least state_frac ({self.state_frac}), "
                f"not {self.gate_frac!r}",
            )
        if self.cell_frac < self.state_frac:
            raise ParamError(
                "cell_frac",
                f"cell_frac must be at least state_frac ({self.state_frac}), "
                f"not {self.cell_frac!r}",
            )
        if self.cell_bits - self.cell_frac < 2:
            raise ParamError(
                "cell_frac",
                f"cell_frac must leave c an integer bit (at most cell_bits - 2 = "
                f"{self.cell_bits - 2}), not {self.cell_frac!r}",
            )
        if self.act_segment_bits > self.act_range_bits + self.state_frac:
            raise ParamError(
                "act_segment_bits",
                f"act_segment_bits must not exceed act_range_bits + state_frac "
                f"({self.act_range_bits + self.state_frac}), not {self.act_segment_bits!r}",
            )

    # --- derived sizes -------------------------------------------------------------------
    @property
    def tile_bits(self) -> int:
        """Bits of one tile's weights."""
        return self.tile_rows * self.tile_cols * self.weight_bits

    @property
    def units_per_block(self) -> int:
        """Hidden units one row block finishes (``tile_rows / 4``)."""
        return self.tile_rows // GATES

    @property
    def h_word(self) -> int:
        """Elements per word of the h memory: ``max(tile_cols, units_per_block)``."""
        return max(self.tile_cols, self.units_per_block)

    @property
    def max_row_blocks(self) -> int:
        return ceil_div(self.max_hidden, self.units_per_block)

    @property
    def max_x_blocks(self) -> int:
        return ceil_div(self.max_input, self.tile_cols)

    @property
    def max_h_blocks(self) -> int:
        return ceil_div(self.max_hidden, self.tile_cols)

    @property
    def h_words(self) -> int:
        """h memory words per (buffer, batch element)."""
        return ceil_div(self.max_hidden, self.h_word)

    @property
    def max_entries(self) -> int:
        """Depth of the tile program and weight memories: tiles of one step at full size."""
        return self.max_row_blocks * (self.max_x_blocks + self.max_h_blocks)

    @property
    def col_bits(self) -> int:
        return max(1, (max(self.max_x_blocks, self.max_h_blocks) - 1).bit_length())

    @property
    def row_bits(self) -> int:
        return max(1, (self.max_row_blocks - 1).bit_length())

    @property
    def acc_bits(self) -> int:
        """Accumulator width: exact for max_input + max_hidden products plus the bias."""
        terms = self.max_input + self.max_hidden
        return self.weight_bits + STATE_BITS + (terms - 1).bit_length() + 1

    @property
    def bias_limit(self) -> int:
        """Biases (``w_frac + state_frac`` fraction bits) lie strictly within +-bias_limit,
        ``2**(acc_bits - 3)``: a sum's products take at most half of the accumulator's range,
        so a bias within a quarter of it keeps every sum exact."""
        return 1 << (self.acc_bits - 3)

    @property
    def c_bits(self) -> int:
        """Width of one c lane in the c memory and the ``o`` stream: ``cell_bits`` for an
        LSTM; a GRU keeps its h there (``STATE_BITS``)."""
        return STATE_BITS if self.cell == "gru" else self.cell_bits

    @property
    def act_bits(self) -> int:
        """Width of the signed activation input."""
        return 1 + self.act_range_bits + self.state_frac

    @property
    def act_max(self) -> int:
        """Largest activation input magnitude (inputs are clamped to +-act_max)."""
        return (1 << (self.act_range_bits + self.state_frac)) - 1

    @property
    def rem_bits(self) -> int:
        """Magnitude bits below the segment index: the interpolation variable."""
        return self.act_range_bits + self.state_frac - self.act_segment_bits

    @property
    def w_frac_bits(self) -> int:
        """Width of the ``w_frac`` command field."""
        return 5

    @property
    def latency(self) -> int:
        """:func:`dependency_latency` of this array."""
        return dependency_latency(self.tile_cols)

    @property
    def write_stage(self) -> int:
        """Cycles from a tile's issue to the h write of its row block (last tiles only)."""
        return self.latency - 1

    @property
    def step_bits(self) -> int:
        return max(1, self.max_steps.bit_length())


# --- activation tables ---------------------------------------------------------------------
@cache
def _tables(segment_bits: int, range_bits: int, state_frac: int, gate_frac: int):
    segments = 1 << segment_bits
    width = (1 << range_bits) / segments  # real width of one segment
    out = {}
    for name, fn in (("sigmoid", lambda v: 1.0 / (1.0 + np.exp(-v))), ("tanh", np.tanh)):
        x0 = np.arange(segments) * width
        y0, y1 = fn(x0), fn(x0 + width)
        slope = y1 - y0
        # Both functions are concave on x >= 0: the secant lies below the curve. Raise the base
        # by half the largest gap so the error is split evenly above and below.
        t = np.linspace(0.0, 1.0, 65)
        gap = (fn(x0[:, None] + t[None, :] * width) - (y0[:, None] + slope[:, None] * t)).max(1)
        base = y0 + gap / 2
        base[0] = y0[0]  # f(0) exact, so sigmoid(0) = 1/2 and tanh stays odd through 0
        scale = float(1 << gate_frac)
        out[name] = (
            tuple(int(v) for v in np.rint(base * scale)),
            tuple(int(v) for v in np.rint(slope * scale)),
        )
    return out


def activation_tables(params: RnnParams) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"sigmoid": (base, slope), "tanh": (base, slope)}``, ``2**act_segment_bits`` entries
    each, ``gate_frac`` fraction bits: the ROM contents of the gateware and the golden's tables.

    Segment ``s`` covers magnitudes ``[s, s + 1) * 2**rem_bits`` (input LSBs); inside it the
    function is ``base[s] + slope[s] * rem / 2**rem_bits``.
    """
    raw = _tables(
        params.act_segment_bits, params.act_range_bits, params.state_frac, params.gate_frac
    )
    return {
        k: (np.array(b, dtype=np.int64), np.array(s, dtype=np.int64)) for k, (b, s) in raw.items()
    }


def _pwl(params: RnnParams, name: str, a) -> tuple[np.ndarray, np.ndarray]:
    a = np.clip(np.asarray(a, dtype=np.int64), -params.act_max, params.act_max)
    mag = np.abs(a)
    base, slope = activation_tables(params)[name]
    index = mag >> params.rem_bits
    rem = mag & ((1 << params.rem_bits) - 1)
    y = base[index] + round_shift_right(slope[index] * rem, params.rem_bits, "half_up")
    return a, y


def clamp_is_exact(params: RnnParams, name: str) -> bool:
    """Whether clamping an input of ``name`` (``"sigmoid"`` or ``"tanh"``) to +-act_max leaves
    its output as it would be unclamped: true when the table already gives the function's
    limit (1.0, exactly) at act_max, so every larger input would give it too. Clamps of such
    lanes are not saturations."""
    fixed = sigmoid_fixed if name == "sigmoid" else tanh_fixed
    return int(fixed(params, params.act_max)) == 1 << params.gate_frac


def sigmoid_fixed(params: RnnParams, a) -> np.ndarray:
    """Fixed-point sigmoid: ``a`` with ``state_frac`` fraction bits -> ``gate_frac`` bits."""
    a, y = _pwl(params, "sigmoid", a)
    return np.where(a < 0, (1 << params.gate_frac) - y, y)


def tanh_fixed(params: RnnParams, a) -> np.ndarray:
    """Fixed-point tanh: ``a`` with ``state_frac`` fraction bits -> ``gate_frac`` bits."""
    a, y = _pwl(params, "tanh", a)
    return np.where(a < 0, -y, y)


# --- quantized model -----------------------------------------------------------------------
@dataclass(frozen=True)
class QuantLstm:
    """One quantized LSTM (or GRU) layer, rows in PyTorch order.

    LSTM: ``w`` (4H, X) and ``u`` (4H, H), gate blocks i, f, g, o; ``bias`` (4H,) is
    ``b_ih + b_hh``. GRU (``cell = "gru"``): ``w`` (3H, X) and ``u`` (3H, H), gate blocks
    r, z, n; ``bias`` is ``b_ih`` and ``bias_h`` is ``b_hh`` (kept apart because n needs
    ``W_in x + b_in`` and ``W_hn h + b_hn`` separately). Weights are ``weight_bits`` integers
    with ``w_frac`` fraction bits; biases have ``w_frac + state_frac``.
    """

    w: np.ndarray
    u: np.ndarray
    bias: np.ndarray
    w_frac: int
    cell: str = "lstm"
    bias_h: np.ndarray | None = None

    @property
    def input_size(self) -> int:
        return self.w.shape[1]

    @property
    def hidden_size(self) -> int:
        return self.u.shape[1]


def _as_numpy(tensor) -> np.ndarray:
    if hasattr(tensor, "detach"):
        tensor = tensor.detach().cpu().double().numpy()
    return np.asarray(tensor, dtype=np.float64)


def layer_suffix(state_dict, layer: int = 0) -> str:
    """The suffix of layer ``layer``'s keys: ``_l{layer}`` in an ``nn.LSTM`` / ``nn.GRU``
    ``state_dict``, none in an ``nn.LSTMCell`` / ``nn.GRUCell``'s (``weight_ih``, ...; one
    layer, so ``layer`` must be 0)."""
    if f"weight_ih_l{layer}" not in state_dict and "weight_ih" in state_dict:
        if layer:
            raise ValueError(f"an nn.LSTMCell/nn.GRUCell state_dict has layer 0 only, not {layer}")
        return ""
    return f"_l{layer}"


def quantize_lstm(params: RnnParams, state_dict, layer: int = 0) -> QuantLstm:
    """Quantize layer ``layer`` of a ``torch.nn.LSTM`` (or ``nn.LSTMCell``; GRU and GRUCell
    with ``cell = "gru"``) ``state_dict`` (tensors or arrays).

    Reads ``weight_ih_l{layer}``, ``weight_hh_l{layer}`` and, when present, ``bias_ih_l{layer}``
    and ``bias_hh_l{layer}`` (summed in float64 before rounding); a cell's keys have no
    ``_l{layer}`` (:func:`layer_suffix`). A weight beyond ``weight_bits`` even at ``w_frac`` 0,
    or a bias beyond :attr:`RnnParams.bias_limit`, raises ``ValueError`` naming it and the
    range: weights are loaded once, and a clipped one would be wrong in every step.
    """
    key = layer_suffix(state_dict, layer)
    try:
        w = _as_numpy(state_dict["weight_ih" + key])
        u = _as_numpy(state_dict["weight_hh" + key])
    except KeyError as exc:
        raise ValueError(f"state_dict has no {exc.args[0]!r} (an nn.LSTM layer {layer})") from None
    if f"weight_hr{key or '_l0'}" in state_dict:
        raise ValueError("LSTMs with projections (proj_size > 0) are not supported")
    hidden = u.shape[1]
    gates = 3 if params.cell == "gru" else GATES
    if w.shape[0] != gates * hidden or u.shape[0] != gates * hidden:
        raise ValueError(
            f"weight shapes {w.shape}, {u.shape} are not those of a {params.cell.upper()}"
        )
    if hidden > params.max_hidden or w.shape[1] > params.max_input:
        raise ValueError(
            f"LSTM of X={w.shape[1]}, H={hidden} exceeds max_input={params.max_input}, "
            f"max_hidden={params.max_hidden}"
        )
    parts = {
        name: _as_numpy(state_dict[name + key])
        if name + key in state_dict
        else np.zeros(gates * hidden)
        for name in ("bias_ih", "bias_hh")
    }
    bias = parts["bias_ih"] + parts["bias_hh"]
    if params.cell == "gru":
        bias = parts["bias_ih"]
    largest = max(np.abs(w).max(), np.abs(u).max(), 1e-30)
    qmax = (1 << (params.weight_bits - 1)) - 1
    # The largest w_frac at which the largest weight fits, so that no weight saturates; where
    # even w_frac 0 cannot hold the largest, check_fit raises (w_frac is never negative).
    w_frac = int(np.clip(math.floor(math.log2(qmax / largest)), 0, (1 << params.w_frac_bits) - 1))
    bias_limit = params.bias_limit
    largest_bias = max(np.abs(bias).max(), np.abs(parts["bias_hh"]).max())
    while w_frac > 0 and largest_bias * 2.0 ** (w_frac + params.state_frac) >= bias_limit:
        w_frac -= 1

    def fixed(name, real, frac, limits, fmt):
        scale = 2.0**frac
        q = check_fit(np.rint(real * scale), *limits, name=name, fmt=fmt, real=real, unit=1 / scale)
        return q.astype(np.int64)

    weights = (-qmax - 1, qmax), f"weight_bits={params.weight_bits} at w_frac {w_frac}"
    wq = fixed(f"weight_ih{key}", w, w_frac, *weights)
    uq = fixed(f"weight_hh{key}", u, w_frac, *weights)
    bias_frac = w_frac + params.state_frac
    biases = (
        (1 - bias_limit, bias_limit - 1),
        f"bias_limit 2**{params.acc_bits - 3} (acc_bits={params.acc_bits}) at w_frac {w_frac}",
    )
    if params.cell == "gru":
        bq = fixed(f"bias_ih{key}", bias, bias_frac, *biases)
        bh = fixed(f"bias_hh{key}", parts["bias_hh"], bias_frac, *biases)
        return QuantLstm(w=wq, u=uq, bias=bq, w_frac=w_frac, cell="gru", bias_h=bh)
    bq = fixed(f"(bias_ih{key} + bias_hh{key})", bias, bias_frac, *biases)
    return QuantLstm(w=wq, u=uq, bias=bq, w_frac=w_frac)


def quantize_state(params: RnnParams, x, *, saturations: bool = False):
    """Float x (any shape) to int16 with ``state_frac`` fraction bits, rounded, saturating.

    With ``saturations=True`` returns ``(q, count)``, ``count`` the number of values that
    saturated (beyond +-2**(15 - state_frac))."""
    bound = 2.0**40 / 2.0**params.state_frac  # far beyond int16: saturates the same way
    x = np.clip(np.asarray(x, dtype=np.float64), -bound, bound)
    q = np.rint(x * 2.0**params.state_frac).astype(np.int64)
    out, count = clip_counted(q, *value_range(STATE_BITS, True))
    return (out, count) if saturations else out


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


# --- packing: tiles, beats, outputs ---------------------------------------------------------
def pack_tiles(params: RnnParams, model: QuantLstm, program: TileProgram):
    """Tiles ``(entries, tile_rows, tile_cols)`` and biases ``(row_blocks, tile_rows)``.

    Tile ``e`` holds the weights entry ``e`` of ``program`` multiplies: its row block's packed
    rows (unit-interleaved, see :func:`tandem.mappings.rnn.tiling.packed_rows`) times its x or
    h column block, zero-padded.
    """
    tr, tc = program.tile_rows, program.tile_cols
    if (tr, tc) != (params.tile_rows, params.tile_cols):
        raise ValueError(
            f"program tile {tr}x{tc} does not match the engine's "
            f"{params.tile_rows}x{params.tile_cols}"
        )
    nx_in, nh_in = program.input_size, program.hidden_size
    if (model.input_size, model.hidden_size) != (nx_in, nh_in):
        raise ValueError("program and model sizes differ")
    rows = packed_rows(nh_in, tr)
    valid = rows >= 0
    nx, nh = program.x_blocks, program.h_blocks
    wpad = np.zeros((len(rows), nx * tc), np.int64)
    upad = np.zeros((len(rows), nh * tc), np.int64)
    bias = np.zeros(len(rows), np.int64)
    if params.cell == "gru":
        # Packed rows per unit: r, z (W and U), n_x (W_in, b_in), n_h (U_hn, b_hn).
        unit = np.arange(len(rows)) // GATES
        slot = np.arange(len(rows)) % GATES
        live = unit < nh_in
        src = np.minimum(slot, 2) * nh_in + unit  # torch row of r, z, n
        use_w = live & (slot != 3)
        use_u = live & (slot != 2)
        wpad[use_w, :nx_in] = model.w[src[use_w]]
        upad[use_u, :nh_in] = model.u[src[use_u]]
        bias[use_w] = model.bias[src[use_w]]
        rz = live & (slot < 2)
        bias[rz] += model.bias_h[src[rz]]
        nh_rows = live & (slot == 3)
        bias[nh_rows] = model.bias_h[src[nh_rows]]
    else:
        wpad[valid, :nx_in] = model.w[rows[valid]]
        upad[valid, :nh_in] = model.u[rows[valid]]
        bias[valid] = model.bias[rows[valid]]
    wt = wpad.reshape(program.row_blocks, tr, nx, tc).transpose(0, 2, 1, 3)
    ut = upad.reshape(program.row_blocks, tr, nh, tc).transpose(0, 2, 1, 3)
    tiles = np.where(
        (program.src == 0)[:, None, None],
        wt[program.row, np.minimum(program.col, nx - 1)],
        ut[program.row, np.minimum(program.col, nh - 1)],
    )
    return tiles, bias.reshape(program.row_blocks, tr)


def tile_fields(params: RnnParams) -> list[tuple[str, int]]:
    """Payload layout of the ``tile_i`` stream, least significant field first."""
    p = params
    weights = [("weights", p.tile_bits)] if p.weight_source == "memory" else []
    return weights + [
        ("bias", p.tile_rows * p.acc_bits),
        ("src", 1),
        ("col", p.col_bits),
        ("row", p.row_bits),
        ("first", 1),
        ("last", 1),
        ("wait", 1),
        ("need", p.row_bits),
        ("end", 1),
    ]


def cmd_fields(params: RnnParams) -> list[tuple[str, int]]:
    """Payload layout of the ``cmd_i`` stream."""
    p = params
    return [
        ("steps", p.step_bits),
        ("x_blocks", p.max_x_blocks.bit_length()),
        ("row_blocks", p.max_row_blocks.bit_length()),
        ("w_frac", p.w_frac_bits),
    ]


def out_fields(params: RnnParams) -> list[tuple[str, int]]:
    """Payload layout of the ``o`` stream: h then c of one row block's units (``c_bits``
    each), then the sequence's sticky saturation flag (:func:`saturation_flags`)."""
    ub = params.units_per_block
    return [("h", ub * STATE_BITS), ("c", ub * params.c_bits), ("sat", 1)]


#: One payload from named field values, LSB-first as Amaranth lays out structs
#: (:func:`tandem.host.common.bits.pack`; every field needs a value, in range).
pack_fields = bits.pack
#: Field values of one payload (:func:`tandem.host.common.bits.unpack`; unsigned fields).
unpack_fields = bits.unpack


def tile_beats(params: RnnParams, program: TileProgram, tiles, biases) -> list[int]:
    """``tile_i`` payloads: one per program entry (weights row-major, the entry's bias block
    on ``first`` entries)."""
    p = params
    entries = program.entries
    if not entries:
        return []
    # tile_fields with the weights and the bias as arrays of their elements (element 0
    # lowest, as pack_array lays them out): one vectorized pack of every entry.
    fields, columns = [], []
    if p.weight_source == "memory":
        fields.append(bits.Field("weights", p.weight_bits, True, p.tile_rows * p.tile_cols))
        columns.append(np.asarray(tiles, np.int64).reshape(entries, -1))
    fields.append(bits.Field("bias", p.acc_bits, True, p.tile_rows))
    columns.append(np.asarray(biases, np.int64)[np.asarray(program.row)].reshape(entries, -1))
    for name, width in tile_fields(p)[len(fields) :]:
        fields.append(bits.Field(name, width))
        columns.append(np.asarray(getattr(program, name), np.int64).reshape(entries, 1))
    return bits.pack_rows(fields, np.concatenate(columns, axis=1))


def weight_beats(params: RnnParams, tiles) -> list[int]:
    """``w_i`` payloads of one step (``weight_source = "stream"``): one tile per program entry,
    weights row-major; send them again for every step."""
    return [bits.pack_array(tile, params.weight_bits) for tile in tiles]


def x_beats(params: RnnParams, program: TileProgram, x) -> list[int]:
    """``x_i`` payloads for ``x`` of shape ``(T, B, X)``: step, batch, column block order."""
    x = np.asarray(x, dtype=np.int64)
    steps, batch, width = x.shape
    tc = params.tile_cols
    padded = np.zeros((steps, batch, program.x_blocks * tc), np.int64)
    padded[:, :, :width] = x
    blocks = padded.reshape(steps, batch, program.x_blocks, tc)
    return [
        bits.pack_array(blocks[t, b, j], STATE_BITS)
        for t in range(steps)
        for b in range(batch)
        for j in range(program.x_blocks)
    ]


def cmd_payload(params: RnnParams, program: TileProgram, steps: int, w_frac: int) -> int:
    """``cmd_i`` payload that runs ``steps`` steps of ``program``."""
    if not 1 <= steps <= params.max_steps:
        raise ValueError(f"steps must be 1..{params.max_steps}, not {steps}")
    return pack_fields(
        cmd_fields(params),
        {
            "steps": steps,
            "x_blocks": program.x_blocks,
            "row_blocks": program.row_blocks,
            "w_frac": w_frac,
        },
    )


def decode_outputs(params: RnnParams, program: TileProgram, beats, steps: int):
    """``(h, c, sat)`` from the ``o`` payloads (step, row block, batch order): h and c of shape
    ``(T, B, H)`` and the sticky saturation flags ``(T, row_blocks, B)`` (bool, in the order of
    :func:`saturation_flags`)."""
    ub, batch, hidden = params.units_per_block, params.batch, program.hidden_size
    expected = steps * program.row_blocks * batch
    if len(beats) != expected:
        raise ValueError(f"expected {expected} output beats, got {len(beats)}")
    h = np.zeros((steps, batch, program.row_blocks * ub), np.int64)
    c = np.zeros_like(h)
    sat = np.zeros((steps, program.row_blocks, batch), bool)
    layout = out_fields(params)
    index = 0
    for t in range(steps):
        for k in range(program.row_blocks):
            for b in range(batch):
                f = unpack_fields(layout, int(beats[index]))
                h[t, b, k * ub : (k + 1) * ub] = bits.unpack_array(f["h"], STATE_BITS, ub)
                c[t, b, k * ub : (k + 1) * ub] = bits.unpack_array(f["c"], params.c_bits, ub)
                sat[t, k, b] = bool(f["sat"])
                index += 1
    return h[:, :, :hidden], c[:, :, :hidden], sat


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
