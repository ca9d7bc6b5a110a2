"""``rnn``'s sigmoid and tanh: the piecewise-linear tables the engine's ROMs hold
(:func:`activation_tables`) and their bit-exact evaluation."""

from functools import cache

import numpy as np
from tandem.host.common.fixed import (
    round_shift_right,
)

from .params import RnnParams


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
