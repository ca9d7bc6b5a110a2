"""Fixed-point arithmetic in numpy, bit-exact with the gateware helpers in :mod:`tandem.hw.common`.

All functions work on integer arrays (``int64``) holding two's-complement fixed-point values
and are vectorized. Rounding modes are named the same way on both sides:

``"floor"``
    Drop the shifted-out bits (round toward minus infinity); what a plain ``>>`` does.
``"half_up"``
    Round to nearest, ties toward plus infinity: add half an output LSB, then floor.
``"half_even"``
    Round to nearest, ties to even (convergent rounding); unbiased for accumulations.
"""

from typing import Literal

import numpy as np

__all__ = [
    "ROUNDING_MODES",
    "Rounding",
    "from_fixed",
    "round_shift_right",
    "saturate",
    "to_fixed",
    "value_range",
]

Rounding = Literal["floor", "half_up", "half_even"]
ROUNDING_MODES: tuple[str, ...] = ("floor", "half_up", "half_even")


def value_range(bits: int, signed: bool) -> tuple[int, int]:
    """Inclusive ``(min, max)`` of a ``bits``-wide integer."""
    if signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def saturate(value, bits: int, signed: bool) -> np.ndarray:
    """Clamp ``value`` into the range of a ``bits``-wide signed or unsigned integer."""
    lo, hi = value_range(bits, signed)
    return np.clip(np.asarray(value, dtype=np.int64), lo, hi)


def round_shift_right(value, shift, rounding: Rounding = "half_up") -> np.ndarray:
    """Divide by ``2**shift`` and round; ``shift`` may be a scalar or an array, all >= 0.

    The result is the same integer the gateware's ``round_shift_right`` produces; widths are the
    caller's business (use :func:`saturate` to narrow).
    """
    value = np.asarray(value, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if np.any(shift < 0):
        raise ValueError("shift must be non-negative")
    if np.any(shift > 62):
        raise ValueError("shift must be at most 62 for int64 arithmetic")
    if rounding == "floor":
        return value >> shift
    half = (np.int64(1) << shift) >> 1
    if rounding == "half_up":
        return (value + half) >> shift
    if rounding == "half_even":
        floor = value >> shift
        remainder = value - (floor << shift)
        # Ties (remainder exactly half, shift > 0) go to the even neighbour.
        up = (remainder > half) | ((remainder == half) & (shift > 0) & ((floor & 1) == 1))
        return floor + up.astype(np.int64)
    raise ValueError(f"rounding must be one of {', '.join(ROUNDING_MODES)}, not {rounding!r}")


def to_fixed(
    real, frac_bits: int, bits: int, signed: bool = True, rounding: Rounding = "half_even"
) -> np.ndarray:
    """Quantize floats to fixed point with ``frac_bits`` fraction bits, saturating to ``bits``."""
    scaled = np.asarray(real, dtype=np.float64) * float(1 << frac_bits)
    if rounding == "floor":
        q = np.floor(scaled)
    elif rounding == "half_up":
        q = np.floor(scaled + 0.5)
    else:
        q = np.rint(scaled)
    lo, hi = value_range(bits, signed)
    return np.clip(q, lo, hi).astype(np.int64)


def from_fixed(value, frac_bits: int) -> np.ndarray:
    """Real value (float64) of fixed-point integers with ``frac_bits`` fraction bits."""
    return np.asarray(value, dtype=np.float64) / float(1 << frac_bits)
