"""Fixed-point steps the ``hpu`` engine's K and V sides share: scaling a product by a power of
two over two pipeline stages, rounded right shifts with one fraction bit, and binary16 scales
decoded into mantissa and exponent. The golden model's counterparts are in
:mod:`tandem.host.hpu.golden`."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from tandem.host.common.fixed import value_range

from ..common.fixed import clamp_changes, saturate

__all__ = [
    "decode_scale",
    "registered",
    "rounded",
    "shift_amounts",
    "shift_by_split",
    "shift_halves",
]


def shift_amounts(total, limit_shift: int):
    """``(left, right, non_negative)`` of :func:`shift_by_split` for the signed exponent
    ``total`` (at most ``limit_shift``): they depend on the exponent alone, so a pipeline
    registers them beside the product."""
    left = Mux(total > 0, total, 0).as_unsigned()[: limit_shift.bit_length()]
    right = Mux(-total > 62, 62, Mux(total < 0, -total, 0)).as_unsigned()[:6]
    return left, right, total >= 0


def shift_by_split(
    m: Module,
    product,
    left_amount,
    right_amount,
    non_negative,
    bits: int,
    is_signed: bool,
    name: str,
    enable,
):
    """``product * 2**total`` rounded half up and saturated, over two stages (the golden model
    computes the same value exactly in float64: ``_round_scaled`` in
    :mod:`tandem.host.hpu.golden`). Returns the second stage's (combinational) value.

    The amounts come from :func:`shift_amounts`; positive exponents shift the product left
    (one out of ``[-2**bits, 2**bits]`` saturates whatever the shift: the first stage notes
    that beside the shift, rather than clamp the product before it, which was the V side's
    longest path), negative ones round-shift right by at most 62 (every
    product the engine forms is below 2**52 in magnitude, so a longer shift would give 0 as
    well). The first stage registers the shifts (while ``enable``); since ``(x + 2**(r-1)) >> r
    == (x >> r) + bit r-1 of x`` for r >= 1, it keeps the floor and that bit, and the second
    stage adds them and saturates.
    """
    product = Value.cast(product)
    left = Signal(signed(bits + 2 + (1 << len(left_amount))), name=f"{name}_left")
    over = Signal(name=f"{name}_over")  # |product| > 2**bits: a left shift saturates
    negative = Signal(name=f"{name}_negative")
    floor = Signal.like(product, name=f"{name}_floor")
    round_bit = Signal(name=f"{name}_round")
    up = Signal(name=f"{name}_up")
    # Within [-2**bits, 2**bits] the product fits bits + 2 signed bits.
    fitted = product[: bits + 2].as_signed() if len(product) > bits + 1 else product
    below_zero = Cat(Const(0, 1), product)
    below_zero = below_zero.as_signed() if product.shape().signed else below_zero
    with m.If(enable):
        m.d.sync += [
            left.eq(fitted << left_amount),
            over.eq(clamp_changes(product, 1 << bits)),
            negative.eq(product < 0),
            floor.eq(product >> right_amount),
            # Bit r - 1 of the product is bit r of the product with a zero below it (bit 0
            # for r = 0): no decrement of r in front of the select, which was the K side's
            # longest path.
            round_bit.eq((below_zero >> right_amount)[0]),
            up.eq(non_negative),
        ]
    shape = signed(bits) if is_signed else unsigned(bits)
    lo, hi = value_range(bits, is_signed)
    shifted = Mux(over, Mux(negative, lo, hi), saturate(left, shape))
    return Mux(up, shifted, saturate(floor + round_bit, shape))


def shift_halves(value, amount):
    """``value * 2**-amount`` with one fraction bit: ``floor`` (bits 1 and up, the value's
    signedness) and the rounding bit (bit 0: bit ``amount - 1`` of ``value``, 0 for
    ``amount`` 0), from one shifter. ``floor + round`` is the shift rounded half up
    (:func:`rounded`); past the value's width it is 0, as the golden model's shift of 62."""
    value = Value.cast(value)
    wide = Cat(Const(0, 1), value)
    return (wide.as_signed() if value.shape().signed else wide) >> amount


def rounded(halves):
    """The rounded-half-up shift of :func:`shift_halves`' result ``halves``."""
    floor = halves[1:]
    return (floor.as_signed() if halves.shape().signed else floor) + halves[0]


def decode_scale(m: Module, bits, name: str):
    """binary16 scale -> (mantissa, exponent) signals, as :func:`tandem.host.hpu.decode_scales`."""
    mant = Signal(unsigned(11), name=f"{name}_mant")
    exp = Signal(signed(7), name=f"{name}_exp")
    field = bits[10:15]
    m.d.comb += [
        mant.eq(Cat(bits[0:10], field != 0)),
        exp.eq(Mux(field == 0, 1, field) - 25),
    ]
    return mant, exp


def registered(m: Module, name: str, value, enable=None):
    """A register following ``value`` (only while ``enable``, when given): one pipeline stage."""
    reg = Signal.like(value, name=name)
    if enable is None:
        m.d.sync += reg.eq(value)
    else:
        with m.If(enable):
            m.d.sync += reg.eq(value)
    return reg
