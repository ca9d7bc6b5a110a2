"""``hpu`` parser: descriptor beats into the engine's descriptor slots."""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu.codec import header_layout

from .beats import DESCRIPTOR_SLOTS, body_beats, checked, query_write_layout

__all__ = ["Parser"]


class Parser(wiring.Component):
    """Fills the descriptor slots in turn, beat by beat, and marks each ``full`` once parsed.

    A slot stays full (``desc_i`` waits when the next slot to fill still is) until ``release``
    names it: the K side has read its queries for the last time. The header and the new k and
    v rows stay here, in registers; the query beats leave on ``query_w`` as they arrive, for
    the K side's query memory (a memory maps to LUTRAM, a few times smaller than a register
    per bit read through a mux of every slot and chunk). A request
    without an append has no k/v rows in its descriptor: its queries go where those of a
    request with one do.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    desc_i : In(stream.Signature(unsigned(mem_data_bits)))
        Descriptor beats (:func:`tandem.host.hpu.descriptor_beats`).
    headers : Out(:func:`tandem.host.hpu.codec.header_layout`).array(DESCRIPTOR_SLOTS)
        Every slot's header, as registers.
    bodies : Out(unsigned(mem_data_bits)).array(DESCRIPTOR_SLOTS, 2 * row_beats)
        Every slot's new k row, then new v row, as registers.
    query_w : Out(stream.Signature(:func:`.beats.query_write_layout`, always_ready=True))
        The query beats, one per descriptor beat that holds one.
    full : Out(DESCRIPTOR_SLOTS)
        Slot ``s`` holds a parsed request (bit ``s``).
    release : In(DESCRIPTOR_SLOTS)
        Slots to empty this cycle.
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "desc_i": In(stream.Signature(unsigned(p.mem_data_bits))),
                "headers": Out(header_layout(p)).array(DESCRIPTOR_SLOTS),
                "bodies": Out(unsigned(p.mem_data_bits)).array(DESCRIPTOR_SLOTS, 2 * p.row_beats),
                "query_w": Out(stream.Signature(query_write_layout(p), always_ready=True)),
                "full": Out(DESCRIPTOR_SLOTS),
                "release": In(DESCRIPTOR_SLOTS),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        beat_bits = p.mem_data_bits
        beats = body_beats(p)
        rows = 2 * p.row_beats  # the new k and v rows' beats, before the queries
        fill_ptr = Signal(range(DESCRIPTOR_SLOTS), name="fill_slot")
        beat_index = Signal(range(p.header_beats + beats + 1))
        headers = self.headers
        m.d.comb += self.desc_i.ready.eq(~self.full.bit_select(fill_ptr, 1))
        # The body's beat index (past the k and v rows where the request has no append) is a
        # register, set as the header's last beat arrives: formed from beat_index and the
        # slot's append flag, its decode into the body registers' enables was the engine's
        # longest path. The flag is read from the beat that brings it.
        append_offset = header_layout(p)["append"].offset
        append_beat, append_bit = divmod(append_offset, beat_bits)
        append_seen = Signal(name="append_seen")
        body_index = Signal(range(beats + rows + 1), name="body_index")
        take = self.desc_i.valid & self.desc_i.ready
        incoming = self.desc_i.payload[append_bit]
        with m.If(take & (beat_index == append_beat)):
            m.d.sync += append_seen.eq(incoming)
        append_flag = incoming if append_beat == p.header_beats - 1 else append_seen
        with m.If(take):
            with m.If(beat_index == p.header_beats - 1):
                m.d.sync += body_index.eq(Mux(append_flag, 0, rows))
            with m.Else():
                m.d.sync += body_index.eq(body_index + 1)
        query = self.query_w.payload
        m.d.comb += [
            query.slot.eq(fill_ptr),
            query.beat.eq(body_index - rows),
            query.data.eq(self.desc_i.payload),
        ]
        with m.If(take):
            m.d.sync += beat_index.eq(beat_index + 1)
            for slot in range(DESCRIPTOR_SLOTS):
                header = headers[slot].as_value()
                body = self.bodies[slot]
                with m.If(fill_ptr == slot):
                    with m.Switch(beat_index):
                        for b in range(p.header_beats):
                            with m.Case(b):
                                m.d.sync += header.word_select(b, beat_bits).eq(self.desc_i.payload)
                    with m.If(beat_index >= p.header_beats), m.Switch(body_index):
                        for b in range(rows):
                            with m.Case(b):
                                m.d.sync += body[b].eq(self.desc_i.payload)
            m.d.comb += self.query_w.valid.eq((beat_index >= p.header_beats) & (body_index >= rows))
            with m.If((beat_index >= p.header_beats) & (body_index == beats - 1)):
                m.d.sync += [
                    self.full.bit_select(fill_ptr, 1).eq(1),
                    fill_ptr.eq(Mux(fill_ptr == DESCRIPTOR_SLOTS - 1, 0, fill_ptr + 1)),
                    beat_index.eq(0),
                ]
        for slot in range(DESCRIPTOR_SLOTS):
            with m.If(self.release[slot]):
                m.d.sync += self.full[slot].eq(0)
        return m
