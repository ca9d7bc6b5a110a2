"""``hpu`` reader: burst addresses and read data of a request's pages, for one read port."""

from amaranth.hdl import Cat, Const, Module, Mux, ResetSignal, Signal, unsigned
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu.codec import header_layout
from tandem.mappings.hpu.kv_layout import AXI_BOUNDARY, BLOCK_BYTES, PAGE_TOKENS

from ..common.axi import BURST_INCR, RESP_OKAY, AxiReadManager
from .beats import DATA_FIFO_DEPTH, ERROR_FIFO_DEPTH, V_DATA_FIFO_DEPTH, checked

__all__ = ["Reader"]


class Reader(wiring.Component):
    """Burst address generator and read-data FIFOs for the given parts of a request's pages.

    ``parts`` lists the page parts this port reads, in order (``False`` = K, ``True`` = V):
    one part per port with two ports; both with one port, which reads a page's K part, then
    its V part, then the next page. Bursts stop at ``max_burst_beats``, at a 4 KiB boundary
    and at the part's end; at most ``max_outstanding`` are in flight. A queue of burst
    destinations routes the R beats (AXI returns the bursts of one ID in order) into one FIFO
    per part, whose read side is the part's stream.

    A request whose ``base`` is not a multiple of 64 bytes is read from ``base`` rounded down
    to one (the :class:`~.writer.Writer` flags it): its bursts keep their beat counts (the
    sequencers wait for every row, so reading nothing would stall the engine) and none
    crosses 4 KiB, which a burst from a misaligned address could. Every request puts one bit
    on ``error_o`` once its last data beat is in: set when any of its R beats carried a
    response other than OKAY (the beats go on as they came; the flag marks the result void).

    Parameters
    ----------
    params : HpuParams
    parts : tuple of bool
        The page parts this port reads.
    name : str
        The read port's name, prefixing its signals (``k``, ``v`` or ``kv``).

    Attributes
    ----------
    axi : Out(AxiReadManager)
    start : In(1)
        Take ``header``'s request (its stored rows from ``base``) this cycle (only while not
        ``busy``).
    header : In(:func:`tandem.host.hpu.codec.header_layout`)
    k_o, v_o : Out(stream.Signature(unsigned(mem_data_bits)))
        The page beats of each part read (scale block first, then the rows), one stream per
        part in ``parts``.
    error_o : Out(stream.Signature(1))
        Each request's error flag, in request order, once its reads are done (a request with
        no stored rows: once the bursts before it are). Holds up to ``ERROR_FIFO_DEPTH``.
    busy : Out(1)
        Bursts of the current request remain to be issued (or, for a request with no stored
        rows, the bursts before it are not done).
    """

    def __init__(self, params, *, parts: tuple[bool, ...], name: str):
        self.params = p = checked(params)
        self.parts, self.name = tuple(parts), name
        beats = stream.Signature(unsigned(p.mem_data_bits))
        super().__init__(
            {
                "axi": Out(AxiReadManager(addr_bits=p.addr_bits, data_bits=p.mem_data_bits)),
                "start": In(1),
                "header": In(header_layout(p)),
                **{f"{'v' if value else 'k'}_o": Out(beats) for value in self.parts},
                "error_o": Out(stream.Signature(1)),
                "busy": Out(1),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        axi, start, header, parts, name = self.axi, self.start, self.header, self.parts, self.name
        beat_bytes = p.beat_bytes
        layout = p.layout
        fifos = self._data_fifos(m)
        active = Signal(name=f"{name}_ar_active")
        page_addr = Signal(p.addr_bits, name=f"{name}_page_addr")
        addr = Signal(p.addr_bits, name=f"{name}_addr")
        part = Signal(range(len(parts)), name=f"{name}_part")
        rows_left = Signal(p.position_bits, name=f"{name}_rows_left")
        span_bits = (p.scale_beats + PAGE_TOKENS * p.row_beats).bit_length()
        span_left = Signal(span_bits, name=f"{name}_span_left")
        outstanding = Signal(range(p.max_outstanding + 1), name=f"{name}_outstanding")
        beat_shift = (beat_bytes - 1).bit_length()
        offsets = [layout.value_shift if value else 0 for value in parts]

        def page_span(rows):
            page_rows = Mux(rows > PAGE_TOKENS, PAGE_TOKENS, rows[: PAGE_TOKENS.bit_length()])
            return p.scale_beats + page_rows * p.row_beats

        # Each burst is planned the cycle before it is offered: its length (at most
        # max_burst_beats, never across 4 KiB, never past the part's span) and whether it ends
        # the span are registered from addr and span_left, so a burst's address update starts
        # from registers (computed in the cycle of the update, the chain was the engine's
        # longest path). A port thus issues at most one burst every two cycles, which keeps up
        # with the data as long as bursts average two beats or more.
        planned = Signal(name=f"{name}_planned")
        beats = Signal(range(p.max_burst_beats + 1), name=f"{name}_beats")
        span_end = Signal(name=f"{name}_span_end")
        to_boundary = Signal(range(AXI_BOUNDARY // beat_bytes + 1), name=f"{name}_to_boundary")
        m.d.comb += to_boundary.eq((AXI_BOUNDARY - addr[:12]) >> beat_shift)
        limit = Mux(span_left < p.max_burst_beats, span_left, p.max_burst_beats)
        length = Mux(to_boundary < limit, to_boundary, limit)
        # The values of the page after this one and this page's span, also registered: they
        # follow rows_left and page_addr, which change only on an update, and an update is
        # always at least a cycle after the one before (the plan's cycle).
        page_rows = Mux(rows_left > PAGE_TOKENS, PAGE_TOKENS, rows_left)
        next_rows = Signal.like(rows_left, name=f"{name}_next_rows")
        next_span = Signal.like(span_left, name=f"{name}_next_span")
        this_span = Signal.like(span_left, name=f"{name}_this_span")
        next_page = Signal.like(page_addr, name=f"{name}_next_page")
        next_addr = Signal.like(addr, name=f"{name}_next_addr")  # its first part's start
        last_part_addr = Signal.like(addr, name=f"{name}_last_part_addr")
        # The next page's rows, min(max(rows_left - 32, 0), 32), with no subtraction before
        # the comparisons: between 33 and 64 it is rows_left's low six bits less 32, that is
        # with bit 5 flipped (the chain through the subtraction was the engine's longest path).
        assert PAGE_TOKENS == 32
        next_page_rows = Mux(
            rows_left > 2 * PAGE_TOKENS,
            PAGE_TOKENS,
            Mux(rows_left > PAGE_TOKENS, Cat(rows_left[:5], ~rows_left[5]), 0),
        )
        m.d.sync += [
            next_rows.eq(rows_left - page_rows),
            next_span.eq(p.scale_beats + next_page_rows * p.row_beats),
            this_span.eq(page_span(rows_left)),
            next_page.eq(page_addr + layout.page_stride),
            next_addr.eq(page_addr + (layout.page_stride + offsets[0])),
            last_part_addr.eq(page_addr + offsets[-1]),
        ]

        m.d.comb += [
            axi.arid.eq(0),
            axi.arsize.eq(beat_shift),
            axi.arburst.eq(BURST_INCR),
            axi.araddr.eq(addr),
            axi.arlen.eq(beats - 1),
            # Low while reset is high, as AXI4 asks of a manager (A3.1.2), whatever the
            # registers held before it.
            axi.arvalid.eq(
                active & planned & (outstanding < p.max_outstanding) & ~ResetSignal("sync")
            ),
        ]
        ar_fire = axi.arvalid & axi.arready
        r_last = axi.rvalid & axi.rready & axi.rlast
        # A burst's end leaves the count a cycle later, from a register: the R handshake
        # depends on the data FIFO's room, and that chain into the counter's adder was the
        # engine's longest path. The count is one high for that cycle, which only holds the
        # next burst back when max_outstanding are in flight.
        ended = Signal(name=f"{name}_burst_ended")
        m.d.sync += [ended.eq(r_last), outstanding.eq(outstanding + ar_fire - ended)]
        with m.If(~planned):
            m.d.sync += [
                planned.eq(1),
                beats.eq(length),
                # span_left == length, without the mux chain of length in front of it.
                span_end.eq((span_left <= p.max_burst_beats) & (span_left <= to_boundary)),
            ]
        # The request's last burst: the end of its last part of its last page.
        request_end = span_end & (part == len(parts) - 1) & (next_rows == 0)
        # A request with no stored rows issues no burst; its flag follows the bursts before it.
        empty = Signal(name=f"{name}_empty")
        # The flag of the request whose R beats arrive (the oldest in flight) so far.
        failed = Signal(name=f"{name}_failed")
        with m.If(start):
            rows = header.length - header.append
            # Rounded down to 64 bytes, so every burst starts on a beat and stops at 4 KiB.
            block_bits = (BLOCK_BYTES - 1).bit_length()
            base = Cat(Const(0, block_bits), header.base[block_bits : p.addr_bits])
            m.d.sync += [
                planned.eq(0),
                active.eq(header.length != header.append),  # rows != 0, without the subtraction
                empty.eq(header.length == header.append),
                rows_left.eq(rows),
                page_addr.eq(base),
                addr.eq(base + offsets[0]),
                part.eq(0),
                # page_span(rows) without the subtraction in front of the comparison: rows >
                # PAGE_TOKENS is length > PAGE_TOKENS + append, and below that only the low
                # bits of length - append count (it was the engine's longest path).
                span_left.eq(
                    p.scale_beats
                    + Mux(
                        header.length > PAGE_TOKENS + header.append,
                        PAGE_TOKENS,
                        (header.length - header.append)[: PAGE_TOKENS.bit_length()],
                    )
                    * p.row_beats
                ),
            ]
        with m.Elif(ar_fire):
            m.d.sync += [
                planned.eq(0),
                addr.eq(addr + (beats << beat_shift)),
                span_left.eq(span_left - beats),
            ]
            with m.If(span_end):
                with m.If(part != len(parts) - 1):
                    # The page's next (and last) part: same rows, the part's own offset.
                    m.d.sync += [
                        part.eq(part + 1),
                        addr.eq(last_part_addr),
                        span_left.eq(this_span),
                    ]
                with m.Else():
                    m.d.sync += [
                        rows_left.eq(next_rows),
                        active.eq(next_rows != 0),
                        page_addr.eq(next_page),
                        addr.eq(next_addr),
                        part.eq(0),
                        span_left.eq(next_span),
                    ]
        ends = self._route_read_data(m, fifos, ar_fire, r_last, part, request_end)
        m.submodules[f"{name}_errors"] = errors = fifo.SyncFIFO(width=1, depth=ERROR_FIFO_DEPTH)
        beat_failed = axi.rvalid & axi.rready & (axi.rresp != RESP_OKAY)
        # The oldest request's last beat, or an empty request once no burst is in flight
        # (never in one cycle: a burst in flight keeps outstanding above 0).
        burst_done = r_last & ends
        empty_done = empty & (outstanding == 0)
        # The flag enters its FIFO a cycle later, from registers: the R handshake depends on
        # the data FIFO's room, and that chain into the flag FIFO's level was the engine's
        # longest path. The flag is read only after the request's last beat has gone through
        # the K or V side, many cycles on.
        push = Signal(name=f"{name}_error_push")
        push_failed = Signal(name=f"{name}_error_push_failed")
        m.d.sync += [
            push.eq(burst_done | empty_done),
            push_failed.eq(~empty_done & (failed | beat_failed)),
        ]
        m.d.comb += [
            errors.w_en.eq(push),
            errors.w_data.eq(push_failed),
            self.error_o.valid.eq(errors.r_rdy),
            self.error_o.payload.eq(errors.r_data),
            errors.r_en.eq(self.error_o.ready),
        ]
        with m.If(burst_done):
            m.d.sync += failed.eq(0)
        with m.Elif(beat_failed):
            m.d.sync += failed.eq(1)
        with m.If(empty_done):  # a start comes only while not busy: never in this cycle
            m.d.sync += empty.eq(0)
        m.d.comb += self.busy.eq(active | empty)
        return m

    def _data_fifos(self, m) -> list[fifo.SyncFIFOBuffered]:
        """One read-data FIFO per part in ``parts``, its read side the part's stream."""
        p = self.params
        fifos = []
        for value in self.parts:
            part_name = "v" if value else "k"
            m.submodules[f"{part_name}_data"] = data_fifo = fifo.SyncFIFOBuffered(
                width=p.mem_data_bits, depth=V_DATA_FIFO_DEPTH if value else DATA_FIFO_DEPTH
            )
            fifos.append(data_fifo)
            out = getattr(self, f"{part_name}_o")
            m.d.comb += [
                out.payload.eq(data_fifo.r_data),
                out.valid.eq(data_fifo.r_rdy),
                data_fifo.r_en.eq(out.ready),
            ]
        return fifos

    def _route_read_data(self, m, fifos, ar_fire, r_last, part, request_end):
        """R beats into their part's FIFO: ``ar_fire`` issues a burst of part ``part`` (the
        request's last when ``request_end``), ``r_last`` ends the oldest burst in flight.
        Returns whether that burst is its request's last."""
        axi = self.axi
        # One entry per burst in flight: which FIFO its beats go to and whether it ends its
        # request (AXI returns the bursts of one ID in order).
        m.submodules.destinations = destinations = fifo.SyncFIFO(
            width=len(fifos), depth=self.params.max_outstanding
        )
        # Room for a beat, registered from each FIFO's level the cycle before: R beats are
        # taken only where the level was at most depth - 2 (the FIFO takes at most one beat a
        # cycle, and its inner memory only fills while its output register is full, so it
        # has room a cycle on). From the FIFOs' levels through the R handshake into the
        # destination FIFO's count was the engine's longest path. The depths hold one entry
        # more than the beats they buffer for it.
        rooms = []
        for value, data_fifo in zip(self.parts, fifos, strict=True):
            room = Signal(init=1, name="v_room" if value else "k_room")
            m.d.sync += room.eq(data_fifo.level <= data_fifo.depth - 2)
            rooms.append(room)
        if len(fifos) == 1:
            target, room = 0, rooms[0]
        else:
            target = destinations.r_data[1]
            room = Mux(target, rooms[1], rooms[0])
        m.d.comb += [
            destinations.w_en.eq(ar_fire),
            destinations.w_data.eq(Cat(request_end, part)),
            axi.rready.eq(destinations.r_rdy & room),
            destinations.r_en.eq(r_last),
        ]
        for index, data_fifo in enumerate(fifos):
            m.d.comb += [
                data_fifo.w_en.eq(axi.rvalid & axi.rready & (target == index)),
                data_fifo.w_data.eq(axi.rdata),
            ]
        return destinations.r_data[0]
