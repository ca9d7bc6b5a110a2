"""Fixed-point building blocks for gateware, bit-exact with :mod:`tandem.host.common.fixed`.

These return Amaranth expressions; the caller registers them where its pipeline needs a cut.
The rounding modes carry the same names and meanings as in :mod:`tandem.host.common.fixed`.
"""

from amaranth.hdl import Const, Module, Mux, Shape, Signal, Value, signed
from tandem.host.common.fixed import ROUNDING_MODES, value_range

__all__ = [
    "clamp",
    "clamp_changes",
    "constant_product",
    "fabric_product",
    "multiply",
    "partial_products",
    "round_shift_right",
    "saturate",
    "saturate_changes",
    "shift_add_product",
]


def round_shift_right(value: Value, shift: "int | Value", rounding: str = "half_up") -> Value:
    """``value / 2**shift`` rounded as named; ``shift`` is a constant or an unsigned signal.

    The result is one bit wider than ``value`` where rounding can carry, so rounding up never
    wraps; narrow it with :func:`saturate`.
    """
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {', '.join(ROUNDING_MODES)}, not {rounding!r}")
    value = Value.cast(value)
    if isinstance(shift, int):
        if shift < 0:
            raise ValueError(f"shift must be non-negative, not {shift!r}")
        if shift == 0:
            return value
        half = 1 << (shift - 1)
        floor = value >> shift
        if rounding == "floor":
            return floor
        if rounding == "half_up":
            return (value + half) >> shift
        remainder = value.as_unsigned()[:shift]
        up = (remainder > half) | ((remainder == half) & floor[0])
        return floor + up
    shift = Value.cast(shift)
    floor = value >> shift
    if rounding == "floor":
        return floor
    half = (Const(1, 1) << shift) >> 1
    if rounding == "half_up":
        return (value + half) >> shift
    remainder = (value - (floor << shift)).as_unsigned()
    up = (remainder > half) | ((remainder == half) & (shift != 0) & floor[0])
    return floor + up


def saturate(value: Value, shape: Shape) -> Value:
    """Clamp ``value`` into the range of ``shape`` and narrow it to that shape."""
    shape = Shape.cast(shape)
    lo, hi = value_range(shape.width, shape.signed)
    value = Value.cast(value)
    clamped = Mux(value > hi, hi, Mux(value < lo, lo, value))
    return (
        clamped.as_signed()[: shape.width].as_signed() if shape.signed else clamped[: shape.width]
    )


def saturate_changes(value: Value, shape: Shape) -> Value:
    """Whether :func:`saturate` changes ``value`` (it lies outside the range of ``shape``)."""
    shape = Shape.cast(shape)
    lo, hi = value_range(shape.width, shape.signed)
    value = Value.cast(value)
    return (value > hi) | (value < lo)


def clamp(value: Value, limit: int) -> Value:
    """``value`` clamped into ``[-limit, limit]`` (a symmetric range, unlike :func:`saturate`)."""
    return Mux(value > limit, limit, Mux(value < -limit, -limit, value))


def clamp_changes(value: Value, limit: int) -> Value:
    """Whether :func:`clamp` changes ``value``."""
    return (value > limit) | (value < -limit)


#: Bits of a partial product's chunk of the wide operand (:func:`partial_products`): the
#: DSP48E2's B port is 18 bits signed, so 17 unsigned bits.
CHUNK_BITS = 17


def constant_product(value, constant: int):
    """``value * constant`` as a sum of ``value``'s shifts, one per set bit of ``constant``
    (a non-negative int): yosys maps a product by a constant with several set bits to a
    DSP48E2, where a layout's address (a few set bits) needs an adder or two."""
    assert constant >= 0
    value = Value.cast(value)
    terms = [value << i for i in range(constant.bit_length()) if constant >> i & 1]
    return sum(terms[1:], terms[0]) if terms else Const(0, 1)


#: Products by a factor of at most this many bits are shifts and adds (:func:`multiply`): yosys
#: gives even a 2-bit product a DSP48E2 of its own.
SHIFT_ADD_BITS = 4


def multiply(value, factor):
    """``value * factor``: :func:`shift_add_product` where ``factor`` has at most
    :data:`SHIFT_ADD_BITS` bits, a multiplier (a DSP48E2 after yosys) otherwise."""
    if len(Value.cast(factor)) <= SHIFT_ADD_BITS:
        return shift_add_product(factor, value)
    return factor * value


def shift_add_product(small, other):
    """``small * other`` as a sum of ``other``'s shifts, one per bit of ``small`` (the top one
    subtracted where ``small`` is signed): no ``$mul`` cell, so no DSP48E2, for a ``small`` of
    a few bits."""
    terms = _shifted_terms(small, other)
    # A balanced tree: log2(bits) adders deep, not one per bit.
    while len(terms) > 1:
        terms = [sum(terms[i : i + 2]) for i in range(0, len(terms), 2)]
    return terms[0]


def partial_products(m: Module, wide, narrow, name: str, enable=None):
    """``wide * narrow`` over two pipeline stages: ``wide`` is cut into 17-bit chunks (the
    top one signed where ``wide`` is), each chunk's product with ``narrow`` (unsigned, at most
    26 bits: the DSP48E2's A port) is one multiplier and is registered (its output register),
    and the returned sum of the shifted partial products is the second stage's
    (combinational) value. A product too wide for one DSP48E2 otherwise leaves the multipliers
    through fabric adders in the same cycle (the HPU K side's score, 38 x 22 bits, was that
    engine's longest path). Registers load while ``enable`` (always when None)."""
    wide, narrow = Value.cast(wide), Value.cast(narrow)
    assert not narrow.shape().signed and len(narrow) <= 26
    chunks = [wide[low : low + CHUNK_BITS] for low in range(0, len(wide), CHUNK_BITS)]
    total = 0
    for j, chunk in enumerate(chunks):
        top = j == len(chunks) - 1 and wide.shape().signed
        chunk = chunk.as_signed() if top else chunk.as_unsigned()
        partial = Signal(signed(len(chunk) + len(narrow) + 1), name=f"{name}_partial{j}")
        if enable is None:
            m.d.sync += partial.eq(multiply(narrow, chunk))
        else:
            with m.If(enable):
                m.d.sync += partial.eq(multiply(narrow, chunk))
        total = total + (partial << (j * CHUNK_BITS))
    return total


def fabric_product(m: Module, value, factor, name: str, cuts: int, enable=None):
    """``value * factor`` in fabric (LUTs and carry chains, no DSP48E2): one shift of
    ``value`` per bit of ``factor`` (the top one subtracted where ``factor`` is signed),
    summed in a balanced adder tree that ``cuts`` pipeline registers (loaded while ``enable``,
    always when None) split into ``cuts + 1`` even parts; returns the last part's
    (combinational) sum, for the caller to register. For products formed once per row or
    result, where a DSP48E2 would serve a MAC: pass the narrower operand as ``factor`` (one
    adder input per bit). More cuts add registers; yosys maps a product split into more parts
    to fewer LUTs (``tandem synth`` reports a design's LUTs)."""
    value, factor = Value.cast(value), Value.cast(factor)
    terms = _shifted_terms(factor, value)
    # A sum of some of the terms fits the product's width and a sign bit: the adders stay
    # that wide (Amaranth widens every sum by one bit).
    width = len(value) + len(factor) + 1
    levels = (len(terms) - 1).bit_length()
    at = sorted({-(-levels * (c + 1) // (cuts + 1)) for c in range(cuts)})
    assert len(at) == cuts, f"{cuts} cuts in {levels} adder levels"
    level = 0
    for stage, cut in enumerate(at):
        while level < cut:
            terms = [_narrowed(sum(terms[i : i + 2]), width) for i in range(0, len(terms), 2)]
            level += 1
        held = []
        for j, term in enumerate(terms):
            reg = Signal.like(term, name=f"{name}_cut{stage}_{j}")
            if enable is None:
                m.d.sync += reg.eq(term)
            else:
                with m.If(enable):
                    m.d.sync += reg.eq(term)
            held.append(reg)
        terms = held
    while len(terms) > 1:
        terms = [_narrowed(sum(terms[i : i + 2]), width) for i in range(0, len(terms), 2)]
    return terms[0]


def _narrowed(value, width: int):
    """``value`` cut to ``width`` signed bits where it is wider (its value fits them)."""
    return value[:width].as_signed() if len(value) > width else value


def _shifted_terms(small, other):
    """One term per bit of ``small``: ``other << i`` where bit ``i`` is set, else 0, the top
    one negated where ``small`` is signed (their sum is ``small * other``)."""
    small, other = Value.cast(small), Value.cast(other)
    terms = []
    for i in range(len(small)):
        term = Mux(small[i], other << i, 0)
        negative = i == len(small) - 1 and small.shape().signed
        terms.append(-term if negative else term)
    return terms
