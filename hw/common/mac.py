"""Signed multiply-accumulate shaped like one DSP48E2.

Golden model: :mod:`tandem.host.common.arith`.
"""

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.common.arith import MacParams

__all__ = ["Mac"]


class Mac(wiring.Component):
    """Accumulates ``a*b`` and emits the sum on ``last``; one input per cycle.

    The registers sit where a DSP48E2 has them (A/B input registers, M after the multiplier,
    P as the accumulator) and share one clock enable, so yosys ``synth_xilinx`` folds the
    multiply, its pipeline registers and the accumulator into a single DSP48E2.

    Attributes
    ----------
    i : In(stream.Signature(data.StructLayout({"a": ..., "b": ..., "last": 1})))
        ``a`` signed ``a_bits``, ``b`` signed ``b_bits``; ``last`` closes a group.
    o : Out(stream.Signature(signed(acc_bits)))
        The accumulated sum of one group (wrapped to ``acc_bits``).
    """

    LATENCY = 3

    def __init__(self, params: MacParams):
        if not isinstance(params, MacParams):
            raise TypeError(f"params must be a MacParams, not {params!r}")
        self.params = params
        layout = data.StructLayout(
            {"a": signed(params.a_bits), "b": signed(params.b_bits), "last": 1}
        )
        super().__init__(
            {
                "i": In(stream.Signature(layout)),
                "o": Out(stream.Signature(signed(params.acc_bits))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        # Only group ends leave the pipeline, so the output slot is free on every other cycle.
        enable = Signal()
        m.d.comb += [enable.eq(~self.o.valid | self.o.ready), self.i.ready.eq(enable)]

        a = Signal(signed(p.a_bits))
        b = Signal(signed(p.b_bits))
        valid1, last1 = Signal(), Signal()
        product = Signal(signed(p.a_bits + p.b_bits))
        valid2, last2 = Signal(), Signal()
        accumulator = Signal(signed(p.acc_bits))
        valid3, last3 = Signal(), Signal()
        restart = Signal(init=1)  # the next product starts a new group

        with m.If(enable):
            m.d.sync += [
                a.eq(self.i.payload.a),
                b.eq(self.i.payload.b),
                valid1.eq(self.i.valid),
                last1.eq(self.i.payload.last),
                product.eq(a * b),
                valid2.eq(valid1),
                last2.eq(last1),
                valid3.eq(valid2),
                last3.eq(last2),
            ]
            with m.If(valid2):
                m.d.sync += [
                    accumulator.eq(Mux(restart, 0, accumulator) + product),
                    restart.eq(last2),
                ]
        m.d.comb += [self.o.valid.eq(valid3 & last3), self.o.payload.eq(accumulator)]
        return m
