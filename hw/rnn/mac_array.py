"""``rnn`` MAC array: one tile times one operand vector per cycle, accumulated per row block."""

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2
from tandem.host.rnn import STATE_BITS, RnnParams

from ..common.adder_tree import adder_tree
from .beats import beat_layout, checked, sums_layout, tag_layout

__all__ = ["MacArray"]


class MacArray(wiring.Component):
    """``tile_rows`` dot products of ``tile_cols`` terms per beat, summed into a row block.

    Stages from a beat's arrival on ``i`` (``lv = log2(tile_cols)``): products, then ``lv``
    adder-tree levels, then the accumulate (the first tile of a row block starts from the
    block's bias, read the cycle before; batch elements rotate through a B-deep accumulator
    ring). A row block's last beat leaves on ``o`` ``lv + 2`` cycles after it arrived; other
    beats leave nothing. Every register moves on ``o.ready``, which is ``i.ready``: the whole
    pipeline stalls together.

    Parameters
    ----------
    params : RnnParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.beat_layout`))
    bias_rd : In(ReadPort.Signature(...))
        The bias memory: one word of ``tile_rows`` accumulators per row block.
    o : Out(stream.Signature(:func:`.beats.sums_layout`))
    """

    def __init__(self, params: RnnParams):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(beat_layout(p))),
                "bias_rd": In(
                    ReadPort.Signature(
                        addr_width=ceil_log2(p.max_row_blocks),
                        shape=unsigned(p.tile_rows * p.acc_bits),
                    )
                ),
                "o": Out(stream.Signature(sums_layout(p))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        tr, tc, nb, wb, ab = p.tile_rows, p.tile_cols, p.batch, p.weight_bits, p.acc_bits
        lv = ceil_log2(tc)
        en = self.o.ready
        m.d.comb += [self.i.ready.eq(en), self.bias_rd.en.eq(en)]

        # ctrl[k]: the beat k cycles after its arrival; ctrl[lv + 1] accumulates
        ctrl_layout = data.StructLayout({"valid": 1, "first": 1, "last": 1, "tag": tag_layout(p)})
        ctrl = [Signal(ctrl_layout, name=f"mac_ctrl{k}") for k in range(lv + 2)]
        beat = self.i.payload
        m.d.comb += [
            ctrl[0].valid.eq(self.i.valid),
            ctrl[0].first.eq(beat.first),
            ctrl[0].last.eq(beat.last),
            ctrl[0].tag.eq(beat.tag),
        ]
        with m.If(en):
            m.d.sync += [ctrl[k + 1].eq(ctrl[k]) for k in range(lv + 1)]

        # products, then one adder tree per row
        sums = []
        for r in range(tr):
            row = []
            for k in range(tc):
                weight = beat.weights[(r * tc + k) * wb : (r * tc + k + 1) * wb].as_signed()
                prod = Signal(signed(wb + STATE_BITS), name=f"prod_{r}_{k}")
                with m.If(en):
                    m.d.sync += prod.eq(weight * beat.operand[k])
                row.append(prod)
            sums.append(adder_tree(m, row, en, name=f"sum_{r}_l"))

        # accumulate: the bias or this batch element's running sum
        ca = ctrl[lv + 1]
        m.d.comb += self.bias_rd.addr.eq(ctrl[lv].tag.row)
        ring = [[Signal(signed(ab), name=f"ring{j}_{r}") for r in range(tr)] for j in range(nb)]
        acc_new = []
        for r in range(tr):
            bias_r = self.bias_rd.data[r * ab : (r + 1) * ab].as_signed()
            value = Signal(signed(ab), name=f"acc_{r}")
            m.d.comb += value.eq(Mux(ca.first, bias_r, ring[nb - 1][r]) + sums[r])
            acc_new.append(value)
        with m.If(en & ca.valid):
            for r in range(tr):
                m.d.sync += ring[0][r].eq(acc_new[r])
                for j in range(1, nb):
                    m.d.sync += ring[j][r].eq(ring[j - 1][r])
        # only row blocks' last beats go on
        with m.If(en):
            m.d.sync += [self.o.valid.eq(ca.valid & ca.last), self.o.payload.tag.eq(ca.tag)]
            m.d.sync += [self.o.payload.pre[r].eq(acc_new[r]) for r in range(tr)]
        return m
