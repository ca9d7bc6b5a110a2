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
    """Reads a beat's operand and weight words, then ``tile_rows`` dot products of
    ``tile_cols`` terms, summed into the beat's row block.

    Stages from a beat's transfer on ``i`` (``lv = log2(tile_cols)``): the x, h and weight
    words are read at the transfer edge; (1) the operand vector (x, the beat's slice of the h
    word, or zeros) times the tile, one product per weight; ``lv`` adder-tree levels; the
    accumulate (the first tile of a row block starts from the block's bias, read the cycle
    before; batch elements rotate through a B-deep accumulator ring). A row block's last beat
    leaves on ``o`` ``lv + 3`` cycles after its transfer; other beats leave nothing. Every
    register moves on ``o.ready``, which is ``i.ready``: the whole pipeline stalls together.

    Parameters
    ----------
    params : RnnParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.beat_layout`))
    x_rd, h_rd, w_rd, bias_rd : In(ReadPort.Signature(...))
        The x memory, the h memory, the weight memory (on-chip weights only) and the bias
        memory (one word of ``tile_rows`` accumulators per row block).
    o : Out(stream.Signature(:func:`.beats.sums_layout`))
    """

    def __init__(self, params: RnnParams):
        self.params = p = checked(params)
        ports = {
            "i": In(stream.Signature(beat_layout(p))),
            "x_rd": In(
                ReadPort.Signature(
                    addr_width=ceil_log2(2 * p.batch * p.max_x_blocks),
                    shape=unsigned(p.tile_cols * STATE_BITS),
                )
            ),
            "h_rd": In(
                ReadPort.Signature(
                    addr_width=ceil_log2(2 * p.batch * p.h_words),
                    shape=unsigned(p.h_word * STATE_BITS),
                )
            ),
            "bias_rd": In(
                ReadPort.Signature(
                    addr_width=ceil_log2(p.max_row_blocks),
                    shape=unsigned(p.tile_rows * p.acc_bits),
                )
            ),
            "o": Out(stream.Signature(sums_layout(p))),
        }
        if p.weight_source == "memory":
            ports["w_rd"] = In(
                ReadPort.Signature(addr_width=ceil_log2(p.max_entries), shape=unsigned(p.tile_bits))
            )
        super().__init__(ports)

    def elaborate(self, platform):
        p = self.params
        m = Module()
        tr, tc, nb, wb, ab = p.tile_rows, p.tile_cols, p.batch, p.weight_bits, p.acc_bits
        lv = ceil_log2(tc)
        on_chip = p.weight_source == "memory"
        en = self.o.ready
        m.d.comb += self.i.ready.eq(en)
        beat = self.i.payload
        reads = [(self.x_rd, beat.x_addr), (self.h_rd, beat.h_addr)]
        if on_chip:
            reads.append((self.w_rd, beat.w_addr))
            w_word = self.w_rd.data
        else:  # batch element 0 of an entry brings its tile; the others reuse it
            w_word = Signal(p.tile_bits)
            with m.If(self.i.valid & en & (beat.tag.b == 0)):
                m.d.sync += w_word.eq(beat.weights)
        for port, addr in reads:
            m.d.comb += [port.en.eq(en), port.addr.eq(addr)]

        # ctrl[k]: the beat k cycles after its transfer; ctrl[lv + 2] accumulates
        slice_count = p.h_word // tc
        ctrl_layout = data.StructLayout(
            {
                "valid": 1,
                "src": 1,
                "zero": 1,
                "slice": range(max(slice_count, 2)),
                "first": 1,
                "last": 1,
                "tag": tag_layout(p),
            }
        )
        ctrl = [Signal(ctrl_layout, name=f"ctrl{k}") for k in range(lv + 3)]
        m.d.comb += ctrl[0].valid.eq(self.i.valid & en)
        m.d.comb += [
            getattr(ctrl[0], n).eq(getattr(beat, n))
            for n in ("src", "zero", "slice", "first", "last", "tag")
        ]
        with m.If(en):
            m.d.sync += [ctrl[k + 1].eq(ctrl[k]) for k in range(lv + 2)]

        # stage 1: operands (x, the beat's slice of the h word, or zeros), products, adder trees
        c1 = ctrl[1]
        operand = []
        for k in range(tc):
            h_k = self.h_rd.data.word_select(k, STATE_BITS)
            for s in range(1, slice_count):
                h_k = Mux(c1.slice == s, self.h_rd.data.word_select(s * tc + k, STATE_BITS), h_k)
            x_k = self.x_rd.data.word_select(k, STATE_BITS)
            operand.append(Mux(c1.zero, 0, Mux(c1.src, h_k, x_k).as_signed()))
        sums = []
        for r in range(tr):
            row = []
            for k in range(tc):
                weight = w_word[(r * tc + k) * wb : (r * tc + k + 1) * wb].as_signed()
                prod = Signal(signed(wb + STATE_BITS), name=f"prod_{r}_{k}")
                with m.If(en):
                    m.d.sync += prod.eq(weight * operand[k])
                row.append(prod)
            sums.append(adder_tree(m, row, en, name=f"sum_{r}_l"))

        # accumulate: the bias or this batch element's running sum
        ca = ctrl[lv + 2]
        m.d.comb += [self.bias_rd.en.eq(en), self.bias_rd.addr.eq(ctrl[lv + 1].tag.row)]
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
