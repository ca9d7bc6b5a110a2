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
    "check_fit",
    "clip_counted",
    "from_fixed",
    "mul_round_half_up",
    "mul_round_half_up_narrow",
    "round_shift_right",
    "saturate",
    "shift_round_half_up",
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
    if rounding == "half_up":
        return shift_round_half_up(value, shift)
    half = (np.int64(1) << shift) >> 1
    if rounding == "half_even":
        floor = value >> shift
        remainder = value - (floor << shift)
        # Ties (remainder exactly half, shift > 0) go to the even neighbour.
        up = (remainder > half) | ((remainder == half) & (shift > 0) & ((floor & 1) == 1))
        return floor + up.astype(np.int64)
    raise ValueError(f"rounding must be one of {', '.join(ROUNDING_MODES)}, not {rounding!r}")


def shift_round_half_up(value, shift) -> np.ndarray:
    """``round_shift_right(value, shift, "half_up")`` without argument checks, for hot paths
    whose shifts are known to lie in ``0 .. 62`` (int64 ``value``, scalar or array ``shift``)."""
    return (value + ((np.int64(1) << shift) >> 1)) >> shift


def to_fixed(
    real,
    frac_bits: int,
    bits: int,
    signed: bool = True,
    rounding: Rounding = "half_even",
    *,
    saturations: bool = False,
):
    """Quantize floats to fixed point with ``frac_bits`` fraction bits, saturating to ``bits``.

    With ``saturations=True`` returns ``(q, count)``, ``count`` the values that saturated.
    """
    scaled = np.asarray(real, dtype=np.float64) * float(1 << frac_bits)
    if rounding == "floor":
        q = np.floor(scaled)
    elif rounding == "half_up":
        q = np.floor(scaled + 0.5)
    else:
        q = np.rint(scaled)
    q, count = clip_counted(q, *value_range(bits, signed))
    q = q.astype(np.int64)
    return (q, count) if saturations else q


def clip_counted(value, lo, hi) -> tuple[np.ndarray, int]:
    """``value`` clipped to ``lo .. hi``, and how many values the clip changed (NaN counts).

    The host's quantizers limit values to their formats through here (or :func:`check_fit`),
    so that every clip either reaches a device's saturation counters or raises.
    """
    value = np.asarray(value)
    out = np.clip(value, lo, hi)
    return out, int(np.count_nonzero(out != value))


def check_fit(
    value, lo, hi, *, name: str, fmt: str, real=None, unit: float = 1.0, at=None
) -> np.ndarray:
    """``value`` (quantized, not yet limited) checked to lie in ``lo .. hi``: the policy for
    values that must fit their format instead of saturating.

    Raises ``ValueError`` with one line that names the first value outside (``real``'s element
    at the same position when given, else ``value``'s), where it is (``at(i)`` of its flat
    index when given, else its index), the format ``fmt`` and its range
    ``lo * unit .. hi * unit``, and how many values are outside.
    """
    out, count = clip_counted(value, lo, hi)
    if not count:
        return out
    value = np.asarray(value)
    i = int(np.flatnonzero(out.reshape(-1) != value.reshape(-1))[0])
    shown = (value if real is None else np.asarray(real)).reshape(-1)[i].item()
    if at is not None:
        where = at(i)
    elif value.ndim:
        where = f"[{', '.join(str(int(j)) for j in np.unravel_index(i, value.shape))}]"
    else:
        where = ""
    outside = "1 value" if count == 1 else f"{count} values"
    raise ValueError(
        f"{name}{where} = {_number(shown)} does not fit {fmt}, range {_number(lo * unit)}.."
        f"{_number(hi * unit)} ({outside} outside)"
    )


def _number(value) -> str:
    """``value`` for a message: integers below 1e9 exactly, others to six significant digits."""
    number = float(value)
    return str(int(number)) if number.is_integer() and abs(number) < 1e9 else f"{number:.6g}"


def from_fixed(value, frac_bits: int) -> np.ndarray:
    """Real value (float64) of fixed-point integers with ``frac_bits`` fraction bits."""
    return np.asarray(value, dtype=np.float64) / float(1 << frac_bits)


def mul_round_half_up(a, b, shift: int) -> np.ndarray:
    """``floor((a * b + 2**(shift - 1)) / 2**shift)`` exactly, as int64, for wide products.

    The gateware multiplies wide accumulators by unsigned factors (the HPU's ``o * alpha`` and
    ``o / l``) whose products can exceed 63 bits. With ``0 <= b < 2**31`` and
    ``|a| < 2**62`` the product is split at bit 32 into two int64 partial products, so the
    result is exact without Python integers; outside that range Python integers are used. The
    result must fit in int64 (the caller's widths guarantee it).
    """
    if shift < 1:
        raise ValueError(f"shift must be at least 1, not {shift}")
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.size == 0 or b.size == 0:
        return np.zeros(np.broadcast_shapes(a.shape, b.shape), dtype=np.int64)
    if b.min() < 0 or b.max() >= 1 << 31 or np.abs(a).max() >= 1 << 62:
        product = a.astype(object) * b
        return np.asarray((product + (1 << (shift - 1))) >> shift, dtype=np.int64)
    return mul_round_half_up_narrow(a, b, shift)


def mul_round_half_up_narrow(a, b, shift: int) -> np.ndarray:
    """:func:`mul_round_half_up` without its range checks, for callers whose widths guarantee
    ``0 <= b < 2**31`` and ``|a| < 2**62`` (int64 arrays)."""
    low = (a & 0xFFFFFFFF) * b  # < 2**63, non-negative
    # a * b = high * 2**32 + (low mod 2**32), high exact in int64
    high = (a >> 32) * b + (low >> 32)
    rest = low & 0xFFFFFFFF
    if shift <= 32:
        return (high << (32 - shift)) + ((rest + (1 << (shift - 1))) >> shift)
    # rest < 2**32 cannot carry into bit `shift` once the rounding half sits in `high`
    return (high + (1 << (shift - 33))) >> (shift - 32)
