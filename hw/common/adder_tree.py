"""Pipelined adder tree. Parameters and golden model: :mod:`tandem.host.common.arith`."""

from amaranth.hdl import Module, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.common.arith import AdderTreeParams

from .pipeline import stall_all_pipeline

__all__ = ["AdderTree", "adder_tree"]


def adder_tree(m: Module, values, enable, *, name: str = "sum_l") -> Value:
    """Exact sum of the signed ``values``, one register per tree level, moving on ``enable``.

    Each level's words are one bit wider than the previous level's, so the sum never overflows;
    an odd word at a level passes to the next level unchanged. Registers are named
    ``<name><level>_<index>`` (levels from 1). Returns the last level's register (the value
    itself when there is only one).
    """
    level = [Value.cast(v) for v in values]
    if not level:
        raise ValueError("an adder tree needs at least one value")
    depth = 0
    while len(level) > 1:
        depth += 1
        width = max(len(v) for v in level) + 1
        nxt = []
        for k in range(0, len(level), 2):
            reg = Signal(signed(width), name=f"{name}{depth}_{k // 2}")
            pair = level[k] + level[k + 1] if k + 1 < len(level) else level[k]
            with m.If(enable):
                m.d.sync += reg.eq(pair)
            nxt.append(reg)
        level = nxt
    return level[0]


class AdderTree(wiring.Component):
    """Exact sum of ``n_inputs`` signed words per transfer; one register per tree level.

    Odd words at a level pass to the next level unchanged, so any ``n_inputs`` works. Width grows
    by one bit per level, so the sum never overflows (:func:`adder_tree`).

    Attributes
    ----------
    i : In(stream.Signature(data.ArrayLayout(signed(in_bits), n_inputs)))
    o : Out(stream.Signature(signed(out_bits)))
    """

    def __init__(self, params: AdderTreeParams):
        if not isinstance(params, AdderTreeParams):
            raise TypeError(f"params must be an AdderTreeParams, not {params!r}")
        self.params = params
        self.LATENCY = params.levels
        super().__init__(
            {
                "i": In(
                    stream.Signature(data.ArrayLayout(signed(params.in_bits), params.n_inputs))
                ),
                "o": Out(stream.Signature(signed(params.out_bits))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        enable = stall_all_pipeline(m, self.i, self.o, self.LATENCY, name="tree")
        total = adder_tree(m, [self.i.payload[k] for k in range(p.n_inputs)], enable)
        m.d.comb += self.o.payload.eq(total)
        return m
