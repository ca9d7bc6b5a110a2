"""``exp2``: 2**x for x <= 0 in fixed point — parameters, lookup table and golden model.

Method. Write x = -k + f with integer k >= 0 and fraction f in [0, 1) (the two's-complement
split of x into its integer and fraction fields, so no negation is needed). Then
2**x = 2**f * 2**-k. The fraction's top ``lut_bits`` bits pick one of 2**lut_bits segments of
2**f on [1, 2); inside a segment 2**f is a line ``base + slope * r`` in the remaining fraction
bits r. ``slope`` is the segment's secant and ``base`` is lowered by half the secant's largest
overshoot, which halves the worst-case interpolation error (a one-line minimax fit). The
result, in [1, 2) with ``lut_frac_bits`` fraction bits, is shifted right by k + the format
change, rounding half up, into an unsigned output with ``out_frac_bits`` fraction bits and one
integer bit, so that 2**0 = 1.0 is exact.

Positive inputs are outside the function's domain; they are clamped to 0 (result 1.0), which is
what a softmax that subtracts its running maximum needs. Inputs below the output's resolution
give 0.

Error against float64 (``python benchmarks/fixed_point_error.py``, default parameters, all
65,537 inputs x <= 0): max abs error 0.94 output LSB (1.43e-05); over results >= 2**-8, mean
abs error 0.26 LSB and max relative error 1.9e-03 (set by the 2**-16 output LSB at the small
end). Relative error reaches 1 only where the result underflows to zero.
"""

from dataclasses import dataclass
from functools import cache

import numpy as np
from tandem.host.common.fixed import shift_round_half_up

from tandem.config import ParamError, Params, param

__all__ = ["Exp2Params", "exp2_golden", "exp2_reference", "exp2_table"]


@dataclass(frozen=True)
class Exp2Params(Params):
    """Number formats and table size of the ``exp2`` unit.

    The input x is a signed two's-complement number with ``in_int_bits`` integer bits and
    ``in_frac_bits`` fraction bits (total width ``1 + in_int_bits + in_frac_bits``), covering
    [-2**in_int_bits, 2**in_int_bits). The output is unsigned, ``out_frac_bits + 1`` bits wide,
    with ``out_frac_bits`` fraction bits, in [0, 1].
    """

    design = "exp2"

    in_int_bits: int = param(8, "integer bits of the signed input x", min=1, max=16)
    in_frac_bits: int = param(8, "fraction bits of the input x", min=1, max=20)
    out_frac_bits: int = param(
        16, "fraction bits of the unsigned output; output width is out_frac_bits + 1", min=2, max=30
    )
    lut_bits: int = param(
        6, "input fraction bits that index the table: 2**lut_bits linear segments", min=1, max=12
    )
    lut_frac_bits: int = param(
        20, "fraction bits of the table entries (base and slope of each segment)", min=4, max=40
    )

    def check(self) -> None:
        if self.lut_bits > self.in_frac_bits:
            raise ParamError(
                "lut_bits",
                f"lut_bits must not exceed in_frac_bits ({self.in_frac_bits}), "
                f"not {self.lut_bits!r}",
            )
        if self.lut_frac_bits < self.out_frac_bits:
            raise ParamError(
                "lut_frac_bits",
                f"lut_frac_bits must be at least out_frac_bits ({self.out_frac_bits}), "
                f"not {self.lut_frac_bits!r}",
            )

    @property
    def in_width(self) -> int:
        """Width of the signed input."""
        return 1 + self.in_int_bits + self.in_frac_bits

    @property
    def out_width(self) -> int:
        """Width of the unsigned output."""
        return self.out_frac_bits + 1

    @property
    def rem_bits(self) -> int:
        """Input fraction bits below the table index: the interpolation variable."""
        return self.in_frac_bits - self.lut_bits

    @property
    def max_shift(self) -> int:
        """Right shifts at or beyond this flush the result to zero."""
        return self.lut_frac_bits + 2

    def input_range(self) -> np.ndarray:
        """Every representable input, in increasing order (for exhaustive checks)."""
        lo = -(1 << (self.in_width - 1))
        return np.arange(lo, -lo, dtype=np.int64)


@cache
def _table(lut_bits: int, lut_frac_bits: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    segments = 1 << lut_bits
    start = np.arange(segments) / segments
    lo, hi = 2.0**start, 2.0 ** (start + 1.0 / segments)
    slope = hi - lo
    # 2**f is convex, so the secant lies above it; its largest gap on each segment is at
    # t* = log2(slope * segments / ln 2) from the segment start.
    t = np.log2(slope * segments / np.log(2.0)) - start
    overshoot = lo + slope * t * segments - 2.0 ** (start + t)
    base = lo - overshoot / 2
    scale = float(1 << lut_frac_bits)
    base_q = np.rint(base * scale).astype(np.int64)
    slope_q = np.rint(slope * scale).astype(np.int64)
    return tuple(int(v) for v in base_q), tuple(int(v) for v in slope_q)


def exp2_table(params: Exp2Params) -> tuple[np.ndarray, np.ndarray]:
    """``(base, slope)`` integer tables, ``2**lut_bits`` entries each, ``lut_frac_bits`` fraction.

    The gateware's ROMs and the golden model both read these arrays.
    """
    return _table_arrays(params.lut_bits, params.lut_frac_bits)


@cache
def _table_arrays(lut_bits: int, lut_frac_bits: int) -> tuple[np.ndarray, np.ndarray]:
    base, slope = _table(lut_bits, lut_frac_bits)
    arrays = np.array(base, dtype=np.int64), np.array(slope, dtype=np.int64)
    for array in arrays:
        array.flags.writeable = False  # shared by every caller
    return arrays


def exp2_golden(params: Exp2Params, x) -> np.ndarray:
    """Bit-exact model of the ``exp2`` gateware.

    Parameters
    ----------
    params
        The unit's parameters.
    x
        Signed fixed-point inputs (integers, ``in_frac_bits`` fraction bits), any shape.

    Returns
    -------
    numpy.ndarray
        Unsigned fixed-point results (``out_frac_bits`` fraction bits), same shape, int64.
    """
    x = np.minimum(np.asarray(x, dtype=np.int64), 0)
    base, slope = exp2_table(params)
    fraction = x & ((1 << params.in_frac_bits) - 1)
    shift = -(x >> params.in_frac_bits)
    index = fraction >> params.rem_bits
    remainder = fraction & ((1 << params.rem_bits) - 1)
    # Shifts lie in 0 .. max_shift <= 62 by construction: the unchecked rounding shift.
    mantissa = base[index] + shift_round_half_up(slope[index] * remainder, params.rem_bits)
    total = np.minimum(shift + (params.lut_frac_bits - params.out_frac_bits), params.max_shift)
    return shift_round_half_up(mantissa, total)


def exp2_reference(params: Exp2Params, x) -> np.ndarray:
    """float64 value of 2**x for the fixed-point inputs ``x`` (clamped to <= 0 like the unit)."""
    real = np.minimum(np.asarray(x, dtype=np.int64), 0) / float(1 << params.in_frac_bits)
    return np.exp2(real)
