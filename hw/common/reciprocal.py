"""``reciprocal`` gateware: 1/x for positive fixed point.

Method: :mod:`tandem.host.common.reciprocal`.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from tandem.host.common.reciprocal import ReciprocalParams, reciprocal_seed_table

from .fixed import fabric_product, partial_products, round_shift_right, saturate
from .pipeline import stall_all_pipeline

__all__ = ["Reciprocal", "leading_one"]

#: Bits of a group of the two-stage leading one (:class:`Reciprocal`'s first two stages).
LEADING_ONE_GROUP = 8


def leading_one(m: Module, value, name: str = "msb") -> Signal:
    """Position of ``value``'s most significant set bit (0 when ``value`` is 0), combinational."""
    position = Signal(range(max(len(value), 2)), name=name)
    for bit in range(len(value)):  # later assignments win: the highest set bit
        with m.If(value[bit]):
            m.d.comb += position.eq(bit)
    return position


class Reciprocal(wiring.Component):
    """1/x for unsigned fixed-point x, saturating. One result per cycle.

    Stages: (0, 1) find the leading one (each 8-bit group's first, then the highest group's);
    (2) normalize x to m in [1, 2); (3) read the seed 1/m; then four stages per Newton-Raphson
    step (m*y; 2 - m*y; y*(2 - m*y) as partial products; their sum, rounded: one multiplier
    or wide add per cycle), seven with ``multipliers="fabric"`` (m*y and y*(2 - m*y) as adder
    trees over three stages each); (last) scale by the exponent (not with
    ``mantissa_only``: 1/m), round and saturate. Latency ``5 + 4 * newton_steps`` cycles
    (``5 + 7 * newton_steps`` in fabric).

    Parameters
    ----------
    params : ReciprocalParams
        Formats and iteration count; the seed ROM holds
        :func:`tandem.host.common.reciprocal.reciprocal_seed_table`, as the golden model does.

    Attributes
    ----------
    i : In(stream.Signature(unsigned(params.in_bits)))
        x, ``params.in_frac_bits`` fraction bits.
    o : Out(stream.Signature(unsigned(params.out_bits)))
        1/x, ``params.out_frac_bits`` fraction bits; all ones when it does not fit (or x = 0).
    """

    def __init__(self, params: ReciprocalParams):
        if not isinstance(params, ReciprocalParams):
            raise TypeError(f"params must be a ReciprocalParams, not {params!r}")
        self.params = params
        self.LATENCY = 5 + (7 if params.multipliers == "fabric" else 4) * params.newton_steps
        super().__init__(
            {
                "i": In(stream.Signature(unsigned(params.in_bits))),
                "o": Out(stream.Signature(unsigned(params.out_bits))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        w = p.work_frac_bits
        m = Module()
        enable = stall_all_pipeline(m, self.i, self.o, self.LATENCY, name="recip")

        def stage(signal_or_width, value, name):
            reg = Signal(signal_or_width, name=name)
            with m.If(enable):
                m.d.sync += reg.eq(value)
            return reg

        msb_shape = range(max(p.in_bits, 2))
        # Stages 0 and 1: the leading one, over two cycles: each 8-bit group's own leading one
        # and whether it has one, then the highest group's (over the whole width in one
        # cycle, it was the unit's longest path).
        x = self.i.payload
        groups = range(0, p.in_bits, LEADING_ONE_GROUP)
        x0 = stage(p.in_bits, x, "x0")
        group_any = [stage(1, x[g : g + LEADING_ONE_GROUP] != 0, f"any0_{g}") for g in groups]
        group_msb = [
            stage(
                range(LEADING_ONE_GROUP),
                leading_one(m, x[g : g + LEADING_ONE_GROUP], f"msb_in_{g}"),
                f"msb0_{g}",
            )
            for g in groups
        ]
        msb = Signal(msb_shape, name="msb_of_groups")
        for g, found, within in zip(groups, group_any, group_msb):  # the highest group's wins
            with m.If(found):
                m.d.comb += msb.eq(g + within)
        x1 = stage(p.in_bits, x0, "x1")
        msb1 = stage(msb_shape, msb, "msb1")
        zero1 = stage(1, ~Cat(*group_any).any(), "zero1")

        # Stage 2: normalize: (x << w) >> msb, exact while msb <= w, truncating for inputs
        # wider than w + 1 bits.
        mantissa = stage(w + 1, (x1 << w) >> msb1, "mantissa2")
        msb = stage(msb_shape, msb1, "msb2")
        zero = stage(1, zero1, "zero2")

        # Stage 3: the seed ROM's read (its own cycle: the normalizing shifter before it and
        # the ROM's LUTs made the unit's longest path).
        seeds = reciprocal_seed_table(p)
        m.submodules.seed_rom = rom = Memory(
            shape=unsigned(w + 1), depth=len(seeds), init=seeds.tolist()
        )
        port = rom.read_port(domain="sync")
        m.d.comb += [port.addr.eq(mantissa[w - p.seed_bits : w]), port.en.eq(enable)]
        mantissa = stage(w + 1, mantissa, "mantissa3")
        msb = stage(msb_shape, msb, "msb3")
        zero = stage(1, zero, "zero3")
        estimate = port.data

        # Newton-Raphson: y <- y * (2 - m*y), four stages per step, so that no cycle holds
        # more than one multiplier or one wide add: m*y; 2 - m*y (rounded); y * (2 - m*y);
        # its rounding.
        # With fabric multipliers, each product's adder tree takes two more stages (m*y) and
        # one more (y * (2 - m*y)): seven a step.
        y_width = w + 2
        fabric = p.multipliers == "fabric"
        for step in range(p.newton_steps):
            tag = f"nr{step}"
            if fabric:
                my = fabric_product(m, mantissa, estimate, f"{tag}_my", 2, enable)
                y_held = estimate
                for part in "xy":
                    y_held = stage(y_width, y_held, f"{tag}_y_{part}")
            else:
                my = mantissa * estimate
                y_held = estimate
            product = stage(2 * w + 4, my, f"{tag}_my")
            y_held = stage(y_width, y_held, f"{tag}_y")
            correction = stage(
                w + 3, (2 << w) - round_shift_right(product, w), f"{tag}_two_minus_my"
            )
            y_held = stage(y_width, y_held, f"{tag}_y_b")
            if fabric:
                scaled = fabric_product(m, correction, y_held, f"{tag}_y2my", 2, enable)
            else:
                # y * (2 - m*y) as registered partial products (the DSP48E2's 27 x 18 does
                # not hold 18 x 19 bits: summed in the same cycle, it was the unit's longest
                # path), summed with the rounding the next.
                scaled = partial_products(m, correction, y_held, f"{tag}_y2my", enable)
            estimate = stage(y_width, round_shift_right(scaled, w), f"{tag}_y_next")
            # The mantissa, msb and zero flag beside the step's stages.
            for part in "abcdxyz"[: 7 if fabric else 4]:
                mantissa = stage(w + 1, mantissa, f"{tag}_m_{part}")
                msb = stage(msb_shape, msb, f"{tag}_msb_{part}")
                zero = stage(1, zero, f"{tag}_zero_{part}")

        # Last stage: y * 2**(in_frac - msb) into the output format.
        shift_amount = Signal(range(p.final_shift(p.in_bits - 1) + 1), name="final_shift")
        if p.mantissa_only:  # 1/m: the exponent is the caller's
            m.d.comb += shift_amount.eq(p.final_shift(p.in_frac_bits))
        else:
            m.d.comb += shift_amount.eq(msb + p.final_shift(0))
        shifted = round_shift_right(estimate << p.left_shift, shift_amount)
        out_max = (1 << p.out_bits) - 1
        result = stage(
            p.out_bits,
            Mux(zero, out_max, saturate(shifted, unsigned(p.out_bits))),
            "result",
        )
        m.d.comb += self.o.payload.eq(result)
        return m
