"""``rnn`` program loader: ``tile_i`` beats into the program, weight and bias memories."""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In
from amaranth.utils import ceil_log2
from tandem.host.common import bits
from tandem.host.rnn import RnnParams, tile_fields

from .beats import ENTRY_FIELDS, checked, entry_layout

__all__ = ["Loader"]


class Loader(wiring.Component):
    """Writes one program entry per ``tile_i`` beat, and its weights (``weight_source =
    "memory"``); the first entry of a row block also writes the block's biases.

    Addresses count from 0 and restart after the entry with ``end`` set. Beats are taken only
    while ``idle`` (between sequences).

    Parameters
    ----------
    params : RnnParams

    Attributes
    ----------
    tile_i : In(stream.Signature(tile layout))
        :func:`tandem.host.rnn.tile_fields`.
    idle : In(1)
        No sequence is running.
    prog_wr, w_wr, bias_wr : In(WritePort.Signature(...))
        The program memory (:func:`.beats.entry_layout`), the weight memory (on-chip weights
        only) and the bias memory (one word of ``tile_rows`` accumulators per row block).
    """

    def __init__(self, params: RnnParams):
        self.params = p = checked(params)
        entry_addr = ceil_log2(p.max_entries)
        ports = {
            "tile_i": In(stream.Signature(bits.layout(tile_fields(p)))),
            "idle": In(1),
            "prog_wr": In(WritePort.Signature(addr_width=entry_addr, shape=entry_layout(p))),
            "bias_wr": In(
                WritePort.Signature(
                    addr_width=ceil_log2(p.max_row_blocks),
                    shape=unsigned(p.tile_rows * p.acc_bits),
                )
            ),
        }
        if p.weight_source == "memory":
            ports["w_wr"] = In(
                WritePort.Signature(addr_width=entry_addr, shape=unsigned(p.tile_bits))
            )
        super().__init__(ports)

    def elaborate(self, platform):
        on_chip = self.params.weight_source == "memory"
        m = Module()
        load_addr = Signal(range(self.params.max_entries))
        tile = self.tile_i.payload
        m.d.comb += [
            self.tile_i.ready.eq(self.idle),
            self.prog_wr.addr.eq(load_addr),
            self.bias_wr.addr.eq(tile.row),
            self.bias_wr.data.eq(tile.bias),
        ]
        m.d.comb += [getattr(self.prog_wr.data, n).eq(getattr(tile, n)) for n in ENTRY_FIELDS]
        if on_chip:
            m.d.comb += [self.w_wr.addr.eq(load_addr), self.w_wr.data.eq(tile.weights)]
        with m.If(self.tile_i.valid & self.tile_i.ready):
            m.d.comb += [self.prog_wr.en.eq(1), self.bias_wr.en.eq(tile.first)]
            if on_chip:
                m.d.comb += self.w_wr.en.eq(1)
            m.d.sync += load_addr.eq(Mux(tile.end, 0, load_addr + 1))
        return m
