"""``exp2`` gateware: 2**x for x <= 0, one result per cycle.

Method: :mod:`tandem.host.common.exp2`.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from tandem.host.common.exp2 import Exp2Params, exp2_table

from .fixed import multiply, round_shift_right
from .pipeline import stall_all_pipeline

__all__ = ["Exp2"]


class Exp2(wiring.Component):
    """2**x for x <= 0 in fixed point. One result per cycle, latency :attr:`LATENCY` cycles.

    Stages: (1) split x into shift and fraction, read the segment's base and slope from ROM
    (addressed by x's own bits: the clamp of x > 0 to 0 is applied to the base the next
    cycle, so the ROM's address starts from a register); (2) slope times the in-segment
    remainder; (3) base plus the rounded product; (4) right shift by the integer part into the
    output format, and the rounding bit; (5) the rounding carry. (With the clamp before the ROM
    and the rounding shift in one stage, those were the HPU K side's longest paths.)

    Parameters
    ----------
    params : Exp2Params
        Number formats and table size; the ROM contents come from
        :func:`tandem.host.common.exp2.exp2_table`, the same tables the golden model reads.

    Attributes
    ----------
    i : In(stream.Signature(signed(params.in_width)))
        x, ``params.in_frac_bits`` fraction bits.
    o : Out(stream.Signature(unsigned(params.out_width)))
        2**x, ``params.out_frac_bits`` fraction bits.
    """

    LATENCY = 5

    def __init__(self, params: Exp2Params):
        if not isinstance(params, Exp2Params):
            raise TypeError(f"params must be an Exp2Params, not {params!r}")
        self.params = params
        super().__init__(
            {
                "i": In(stream.Signature(signed(params.in_width))),
                "o": Out(stream.Signature(unsigned(params.out_width))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        enable = stall_all_pipeline(m, self.i, self.o, self.LATENCY, name="exp2")

        base_table, slope_table = exp2_table(p)
        mantissa_width = p.lut_frac_bits + 1
        slope_width = max(int(slope_table.max()).bit_length(), 1)
        m.submodules.base_rom = base_rom = Memory(
            shape=unsigned(mantissa_width), depth=len(base_table), init=base_table.tolist()
        )
        m.submodules.slope_rom = slope_rom = Memory(
            shape=unsigned(slope_width), depth=len(slope_table), init=slope_table.tolist()
        )
        base_port = base_rom.read_port(domain="sync")
        slope_port = slope_rom.read_port(domain="sync")

        # Stage 1: x = -shift + fraction; positive x is clamped to 0.
        x = self.i.payload
        fraction = Signal(p.in_frac_bits)
        m.d.comb += fraction.eq(Mux(x[-1], x[: p.in_frac_bits], 0))
        integer_part = x[p.in_frac_bits :].as_signed()
        shift_bits = p.in_int_bits + 1
        remainder1 = Signal(max(p.rem_bits, 1))
        shift1 = Signal(shift_bits)
        clamped1 = Signal()  # x > 0: the segment is 0's, whatever the ROM read
        m.d.comb += [
            base_port.addr.eq(x[p.rem_bits : p.in_frac_bits]),
            slope_port.addr.eq(x[p.rem_bits : p.in_frac_bits]),
            base_port.en.eq(enable),
            slope_port.en.eq(enable),
        ]
        with m.If(enable):
            m.d.sync += [shift1.eq(Mux(x[-1], -integer_part, 0)), clamped1.eq(~x[-1])]
            if p.rem_bits:
                m.d.sync += remainder1.eq(fraction[: p.rem_bits])

        # Stage 2: slope * remainder (the only multiply; shifts and adds for a remainder of a
        # few bits, where yosys would take a DSP48E2).
        product2 = Signal(slope_width + max(p.rem_bits, 1))
        base2 = Signal(mantissa_width)
        shift2 = Signal(shift_bits)
        with m.If(enable):
            m.d.sync += [
                product2.eq(multiply(slope_port.data, remainder1) if p.rem_bits else 0),
                base2.eq(Mux(clamped1, int(base_table[0]), base_port.data)),
                shift2.eq(shift1),
            ]

        # Stage 3: mantissa in [1, 2) with lut_frac_bits fraction bits.
        mantissa3 = Signal(mantissa_width + 1)
        shift3 = Signal(range(p.max_shift + 1))
        total_shift = shift2 + (p.lut_frac_bits - p.out_frac_bits)
        with m.If(enable):
            m.d.sync += [
                mantissa3.eq(base2 + round_shift_right(product2, p.rem_bits)),
                shift3.eq(Mux(total_shift > p.max_shift, p.max_shift, total_shift)),
            ]

        # Stage 4: scale by 2**-shift, half up: (v + 2**(s-1)) >> s is v >> s plus bit s-1 of
        # v (s >= 1), so the shift and the bit come first and the carry in stage 5.
        # One shifter gives both: bit 0 of (2 v) >> s is bit s-1 of v, 0 where s = 0.
        floor4 = Signal(mantissa_width + 1)
        round4 = Signal()
        halves = Cat(Const(0, 1), mantissa3) >> shift3
        with m.If(enable):
            m.d.sync += [floor4.eq(halves[1:]), round4.eq(halves[0])]
        # Stage 5: the rounding carry, into the output format.
        result = Signal(unsigned(p.out_width))
        with m.If(enable):
            m.d.sync += result.eq(floor4 + round4)
        m.d.comb += self.o.payload.eq(result)
        return m
