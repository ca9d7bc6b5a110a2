"""``reciprocal``: 1/x for positive fixed-point x — parameters, seed table and golden model.

Method. Normalize x = m * 2**(p - in_frac_bits) with m in [1, 2) held with ``work_frac_bits``
fraction bits (p is the position of x's leading one; the shift is exact when
``in_bits - 1 <= work_frac_bits`` and truncates the bits below otherwise). The top
``seed_bits`` fraction bits of m index a table of 1/m at each segment's midpoint. Each of
``newton_steps`` Newton-Raphson steps computes y <- y * (2 - m*y), with both products rounded
half up to ``work_frac_bits``; each step roughly doubles the number of correct bits. The
result y * 2**(in_frac_bits - p) is rounded half up into an unsigned output with
``out_frac_bits`` fraction bits and saturates at the output's largest value; x = 0 saturates
too (the unit's answer to a division by zero).

Error against float64 (``python benchmarks/fixed_point_error.py`` measures it over every
non-zero input whose reciprocal fits the output; figures in docs/results.md): set by the 2**-16
output LSB where 1/x is small, and by the 16-bit working precision where 1/x >= 2.
"""

from dataclasses import dataclass
from functools import cache

import numpy as np
from tandem.host.common.fixed import saturate, shift_round_half_up

from tandem.config import ParamError, Params, param

__all__ = [
    "ReciprocalParams",
    "leading_one",
    "reciprocal_golden",
    "reciprocal_reference",
    "reciprocal_seed_table",
]


@dataclass(frozen=True)
class ReciprocalParams(Params):
    """Number formats, seed table and iteration count of the ``reciprocal`` unit.

    The input is unsigned, ``in_bits`` wide with ``in_frac_bits`` fraction bits. The output is
    unsigned, ``out_bits`` wide with ``out_frac_bits`` fraction bits, saturating.
    """

    design = "reciprocal"

    in_bits: int = param(16, "width of the unsigned input x", min=2, max=40)
    in_frac_bits: int = param(8, "fraction bits of the input x", min=0, max=32)
    out_bits: int = param(24, "width of the unsigned output 1/x (saturates)", min=2, max=40)
    out_frac_bits: int = param(16, "fraction bits of the output", min=0, max=40)
    seed_bits: int = param(6, "normalized-input bits that index the seed table", min=1, max=12)
    newton_steps: int = param(2, "Newton-Raphson iterations after the table look-up", min=0, max=4)
    work_frac_bits: int = param(
        16,
        "fraction bits of the internal mantissa and estimate (17x18 products fit a DSP48E2)",
        min=4,
        max=30,
    )
    mantissa_only: int = param(
        0,
        "1: the output is 1/m of the normalized input m = x * 2**-msb in [1, 2), in (0.5, 1], "
        "leaving the exponent 2**-msb to the caller (no variable output shift); 0: 1/x",
        choices=(0, 1),
    )
    multipliers: str = param(
        "dsp",
        "where the Newton-Raphson products go: 'dsp' (a DSP48E2 each) or 'fabric' (LUT "
        "adder trees, three more stages a step: for a unit that serves a few inputs a "
        "request, where a DSP48E2 would sit idle)",
        choices=("dsp", "fabric"),
    )

    def check(self) -> None:
        if self.in_frac_bits > self.in_bits:
            raise ParamError(
                "in_frac_bits",
                f"in_frac_bits must not exceed in_bits ({self.in_bits}), not {self.in_frac_bits!r}",
            )
        if self.out_frac_bits > self.out_bits:
            raise ParamError(
                "out_frac_bits",
                f"out_frac_bits must not exceed out_bits ({self.out_bits}), "
                f"not {self.out_frac_bits!r}",
            )
        if self.in_bits + self.work_frac_bits > 62:
            raise ParamError(
                "work_frac_bits",
                f"in_bits + work_frac_bits must be at most 62 (int64 golden model), "
                f"not {self.in_bits} + {self.work_frac_bits!r}",
            )
        if self.seed_bits > self.work_frac_bits:
            raise ParamError(
                "seed_bits",
                f"seed_bits must not exceed work_frac_bits ({self.work_frac_bits}), "
                f"not {self.seed_bits!r}",
            )

    @property
    def left_shift(self) -> int:
        """Constant left shift that makes the final variable shift non-negative."""
        return max(0, self.in_frac_bits + self.out_frac_bits - self.work_frac_bits)

    def final_shift(self, msb):
        """Right shift applied to ``y << left_shift`` for an input whose leading one is ``msb``
        (a constant with ``mantissa_only``: every input scales as if its msb were
        ``in_frac_bits``)."""
        if self.mantissa_only:
            msb = self.in_frac_bits
        return self.work_frac_bits + msb - self.in_frac_bits - self.out_frac_bits + self.left_shift

    def input_range(self) -> np.ndarray:
        """Every representable input (for exhaustive checks)."""
        return np.arange(0, 1 << self.in_bits, dtype=np.int64)


@cache
def _seed_table(seed_bits: int, work_frac_bits: int) -> tuple[int, ...]:
    segments = 1 << seed_bits
    midpoint = 1.0 + (np.arange(segments) + 0.5) / segments
    return tuple(int(v) for v in np.rint((1 << work_frac_bits) / midpoint))


def reciprocal_seed_table(params: ReciprocalParams) -> np.ndarray:
    """1/m at the midpoint of each of the ``2**seed_bits`` segments of [1, 2), W fraction bits.

    The gateware's ROM and the golden model both read this array (read-only, shared).
    """
    return _seed_array(params.seed_bits, params.work_frac_bits)


@cache
def _seed_array(seed_bits: int, work_frac_bits: int) -> np.ndarray:
    table = np.array(_seed_table(seed_bits, work_frac_bits), dtype=np.int64)
    table.flags.writeable = False
    return table


def leading_one(x, bits: int) -> np.ndarray:
    """Position of the most significant set bit of each ``x`` (0 for x = 0)."""
    x = np.asarray(x, dtype=np.int64)
    if bits > 53:  # beyond float64's exact integers: count thresholds
        thresholds = np.int64(1) << np.arange(1, bits, dtype=np.int64)
        return (x[..., None] >= thresholds).sum(axis=-1).astype(np.int64)
    # frexp's exponent is exact below 2**53; larger values cap at bits - 1 either way.
    _, exponent = np.frexp(x.astype(np.float64))
    msb = np.minimum(exponent.astype(np.int64) - 1, bits - 1)
    return np.where(x > 0, msb, 0)


def reciprocal_golden(params: ReciprocalParams, x) -> np.ndarray:
    """Bit-exact model of the ``reciprocal`` gateware.

    Parameters
    ----------
    params
        The unit's parameters.
    x
        Unsigned fixed-point inputs (``in_frac_bits`` fraction bits), any shape.

    Returns
    -------
    numpy.ndarray
        Unsigned fixed-point 1/x (``out_frac_bits`` fraction bits), same shape, int64.
    """
    x = np.asarray(x, dtype=np.int64)
    w = params.work_frac_bits
    msb = leading_one(x, params.in_bits)
    # Exact when msb <= w; wider inputs drop their bits below w fraction bits (floor).
    mantissa = (x << w) >> msb
    index = (mantissa >> (w - params.seed_bits)) & ((1 << params.seed_bits) - 1)
    y = reciprocal_seed_table(params)[index]
    # Every shift below lies in 0 .. 62 (in_bits + work_frac_bits <= 62): unchecked rounding.
    for _ in range(params.newton_steps):
        error = shift_round_half_up(mantissa * y, w)
        y = shift_round_half_up(y * ((2 << w) - error), w)
    result = shift_round_half_up(y << params.left_shift, params.final_shift(msb))
    result = saturate(result, params.out_bits, signed=False)
    return np.where(x == 0, (1 << params.out_bits) - 1, result)


def reciprocal_reference(params: ReciprocalParams, x) -> np.ndarray:
    """float64 1/x for fixed-point inputs (inf for x = 0)."""
    real = np.asarray(x, dtype=np.float64) / float(1 << params.in_frac_bits)
    with np.errstate(divide="ignore"):
        return 1.0 / real
