"""``hpu`` sequencer: one side's page beats into row beats, each with its row's scale."""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS

from .beats import checked, row_beat_layout

__all__ = ["Sequencer"]


class Sequencer(wiring.Component):
    """Splits one side's (K or V) stream of page beats into row beats.

    The stored rows (``rows`` of them, latched at ``start``) come page by page from ``i``,
    each page's scale block first: the sequencer keeps the page's 32 scales in a register and
    hands each row its own. After them, when ``append`` (latched at ``start``), the appended
    row comes from ``new_row`` with ``new_scale``: it never goes through memory, so reads
    never race the writer. ``new_row`` and ``new_scale`` must hold while it runs.

    Parameters
    ----------
    params : HpuParams
    name : str
        The side's name (``k`` or ``v``), prefixing its signals.
    gapless : bool
        ``free`` rises with the request's last beat, so the next request's first beat can
        follow it at once; otherwise ``free`` is a register (idle) and requests are a cycle
        apart, which keeps the start's logic off the take's (on the V side, the take, the
        free, the request queue's start and the sequencer's registers were the engine's
        longest path).

    Attributes
    ----------
    i : In(stream.Signature(unsigned(mem_data_bits)))
        The side's page beats, from the :class:`~.reader.Reader`.
    start : In(1)
        Start a request (only while ``free``).
    rows : In(unsigned(position_bits))
    append : In(1)
    new_row : In(unsigned(row_elems * kv_bits))
    new_scale : In(16)
    o : Out(stream.Signature(:func:`.beats.row_beat_layout`))
        Row beats. Scale beats are taken from ``i`` without waiting for ``o.ready``.
    free : Out(1)
        A ``start`` this cycle is allowed: idle, or (``gapless``) taking the request's last
        beat, so requests follow each other with no gap.
    """

    def __init__(self, params, *, name: str, gapless: bool = True):
        self.params = p = checked(params)
        self.name = name
        self.gapless = gapless
        super().__init__(
            {
                "i": In(stream.Signature(unsigned(p.mem_data_bits))),
                "start": In(1),
                "rows": In(unsigned(p.position_bits)),
                "append": In(1),
                "new_row": In(unsigned(p.row_elems * p.kv_bits)),
                "new_scale": In(16),
                "o": Out(stream.Signature(row_beat_layout(p))),
                "free": Out(1),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        name = self.name
        data_fifo = self.i
        new_row, new_scale = self.new_row, self.new_scale
        beat_bytes = p.beat_bytes
        active = Signal(name=f"{name}_seq_active")
        append = Signal(name=f"{name}_seq_append")
        first_row = Signal(name=f"{name}_first_row")
        injecting = Signal(name=f"{name}_injecting")
        rows_left = Signal(p.position_bits, name=f"{name}_seq_rows_left")
        # rows_left == 1, kept beside it: the compare sat on the gate's path into take.
        one_left = Signal(name=f"{name}_seq_one_left")
        scale_index = Signal(range(p.scale_beats + 1), name=f"{name}_scale_index")
        row_in_page = Signal(range(PAGE_TOKENS), name=f"{name}_row_in_page")
        beat = Signal(range(p.row_beats), name=f"{name}_beat")
        scales = [Signal(8 * beat_bytes, name=f"{name}_scales{b}") for b in range(p.scale_beats)]
        scale_words = Cat(*scales)

        in_scales = scale_index < p.scale_beats
        available = Mux(injecting, 1, data_fifo.valid)
        take = Signal(name=f"{name}_take")
        is_row = Signal(name=f"{name}_is_row")
        m.d.comb += [
            is_row.eq(injecting | ~in_scales),
            take.eq(active & available & (self.o.ready | ~is_row)),
            # Not gated by data_fifo.valid (a stream's ready may rise without it): from
            # registers only, it stays off the FIFO's valid-to-level path.
            data_fifo.ready.eq(active & ~injecting & (self.o.ready | ~is_row)),
        ]
        row_data = Signal(p.mem_data_bits, name=f"{name}_row_data")
        row_scale = Signal(16, name=f"{name}_row_scale")
        last_beat = Signal(name=f"{name}_last_beat")
        last_row = Signal(name=f"{name}_last_row")
        m.d.comb += [
            row_data.eq(
                Mux(injecting, new_row.word_select(beat, p.mem_data_bits), data_fifo.payload)
            ),
            row_scale.eq(Mux(injecting, new_scale, scale_words.word_select(row_in_page, 16))),
            last_beat.eq(beat == p.row_beats - 1),
            last_row.eq(injecting | (one_left & ~append)),
        ]
        with m.If(self.start):
            rows = self.rows
            m.d.sync += [
                active.eq(1),
                append.eq(self.append),
                first_row.eq(1),
                injecting.eq(rows == 0),
                rows_left.eq(rows),
                one_left.eq(rows == 1),
                scale_index.eq(0),
                row_in_page.eq(0),
                beat.eq(0),
            ]
        with m.Elif(take):
            with m.If(~is_row):
                with m.Switch(scale_index):
                    for b in range(p.scale_beats):
                        with m.Case(b):
                            m.d.sync += scales[b].eq(data_fifo.payload)
                m.d.sync += scale_index.eq(scale_index + 1)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)
                with m.If(last_beat):
                    m.d.sync += [beat.eq(0), first_row.eq(0)]
                    with m.If(injecting):
                        m.d.sync += [active.eq(0), injecting.eq(0)]
                    with m.Else():
                        m.d.sync += [
                            rows_left.eq(rows_left - 1),
                            one_left.eq(rows_left == 2),
                            row_in_page.eq(row_in_page + 1),
                        ]
                        with m.If((row_in_page == PAGE_TOKENS - 1) | one_left):
                            m.d.sync += [row_in_page.eq(0), scale_index.eq(0)]
                        with m.If(one_left):
                            m.d.sync += [active.eq(append), injecting.eq(append)]
        out = self.o
        m.d.comb += [
            out.valid.eq(active & available & is_row),
            out.payload.data.eq(row_data),
            out.payload.scale.eq(row_scale),
            out.payload.beat.eq(beat),
            out.payload.last_beat.eq(last_beat),
            out.payload.first_row.eq(first_row),
            out.payload.last_row.eq(last_row),
            self.free.eq(
                ~active | (take & is_row & last_beat & last_row) if self.gapless else ~active
            ),
        ]
        return m
