"""``rnn``'s quantized model: a torch LSTM or GRU ``state_dict`` quantized to the engine's weight
and bias formats (:class:`QuantLstm`, :func:`quantize_lstm`), and inputs to its state format."""

import math
from dataclasses import dataclass

import numpy as np
from tandem.host.common.fixed import (
    check_fit,
    clip_counted,
    value_range,
)
from tandem.mappings.rnn.tiling import GATES

from .params import STATE_BITS, RnnParams


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
