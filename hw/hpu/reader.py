"""``hpu`` reader: burst addresses and read data of a request's pages, for one read port."""

from types import SimpleNamespace

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
        axi, parts, name = self.axi, self.parts, self.name
        fifos = self._data_fifos(m)
        r = SimpleNamespace()  # the burst plan's and the request's registers
        r.active = Signal(name=f"{name}_ar_active")
        r.page_addr = Signal(p.addr_bits, name=f"{name}_page_addr")
        r.addr = Signal(p.addr_bits, name=f"{name}_addr")
        r.part = Signal(range(len(parts)), name=f"{name}_part")
        r.rows_left = Signal(p.position_bits, name=f"{name}_rows_left")
        span_bits = (p.scale_beats + PAGE_TOKENS * p.row_beats).bit_length()
        r.span_left = Signal(span_bits, name=f"{name}_span_left")
        outstanding = Signal(range(p.max_outstanding + 1), name=f"{name}_outstanding")
        beat_shift = (p.beat_bytes - 1).bit_length()
        r.offsets = [p.layout.value_shift if value else 0 for value in parts]
        # Each burst is planned the cycle before it is offered: its length (at most
        # max_burst_beats, never across 4 KiB, never past the part's span) and whether it ends
        # the span are registered from addr and span_left, so a burst's address update starts
        # from registers (computed in the cycle of the update, the chain was the engine's
        # longest path). A port thus issues at most one burst every two cycles, which keeps up
        # with the data as long as bursts average two beats or more.
        planned = Signal(name=f"{name}_planned")
        r.beats = Signal(range(p.max_burst_beats + 1), name=f"{name}_beats")
        r.span_end = Signal(name=f"{name}_span_end")
        to_boundary = Signal(range(AXI_BOUNDARY // p.beat_bytes + 1), name=f"{name}_to_boundary")
        m.d.comb += to_boundary.eq((AXI_BOUNDARY - r.addr[:12]) >> beat_shift)
        limit = Mux(r.span_left < p.max_burst_beats, r.span_left, p.max_burst_beats)
        length = Mux(to_boundary < limit, to_boundary, limit)
        self._next_page(m, r)
        m.d.comb += [
            axi.arid.eq(0),
            axi.arsize.eq(beat_shift),
            axi.arburst.eq(BURST_INCR),
            axi.araddr.eq(r.addr),
            axi.arlen.eq(r.beats - 1),
            # Low while reset is high, as AXI4 asks of a manager (A3.1.2), whatever the
            # registers held before it.
            axi.arvalid.eq(
                r.active & planned & (outstanding < p.max_outstanding) & ~ResetSignal("sync")
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
                r.beats.eq(length),
                # span_left == length, without the mux chain of length in front of it.
                r.span_end.eq((r.span_left <= p.max_burst_beats) & (r.span_left <= to_boundary)),
            ]
        # The request's last burst: the end of its last part of its last page.
        request_end = r.span_end & (r.part == len(parts) - 1) & (r.next_rows == 0)
        # A request with no stored rows issues no burst; its flag follows the bursts before it.
        empty = Signal(name=f"{name}_empty")
        # The flag of the request whose R beats arrive (the oldest in flight) so far.
        failed = Signal(name=f"{name}_failed")
        self._advance(m, r, planned, empty, ar_fire)
        ends = self._route_read_data(m, fifos, ar_fire, r_last, r.part, request_end)
        self._error_flags(m, r_last & ends, empty, failed, outstanding)
        m.d.comb += self.busy.eq(r.active | empty)
        return m

    def _next_page(self, m, r) -> None:
        """The values of the page after this one and this page's span, registered: they
        follow rows_left and page_addr, which change only on an update, and an update is
        always at least a cycle after the one before (the plan's cycle)."""
        p, name = self.params, self.name
        page_rows = Mux(r.rows_left > PAGE_TOKENS, PAGE_TOKENS, r.rows_left)
        r.next_rows = Signal.like(r.rows_left, name=f"{name}_next_rows")
        r.next_span = Signal.like(r.span_left, name=f"{name}_next_span")
        r.this_span = Signal.like(r.span_left, name=f"{name}_this_span")
        r.next_page = Signal.like(r.page_addr, name=f"{name}_next_page")
        r.next_addr = Signal.like(r.addr, name=f"{name}_next_addr")  # its first part's start
        r.last_part_addr = Signal.like(r.addr, name=f"{name}_last_part_addr")
        # The next page's rows, min(max(rows_left - 32, 0), 32), with no subtraction before
        # the comparisons: between 33 and 64 it is rows_left's low six bits less 32, that is
        # with bit 5 flipped (the chain through the subtraction was the engine's longest path).
        assert PAGE_TOKENS == 32
        rows_left = r.rows_left
        next_page_rows = Mux(
            rows_left > 2 * PAGE_TOKENS,
            PAGE_TOKENS,
            Mux(rows_left > PAGE_TOKENS, Cat(rows_left[:5], ~rows_left[5]), 0),
        )
        this_page_rows = Mux(
            rows_left > PAGE_TOKENS, PAGE_TOKENS, rows_left[: PAGE_TOKENS.bit_length()]
        )
        m.d.sync += [
            r.next_rows.eq(rows_left - page_rows),
            r.next_span.eq(p.scale_beats + next_page_rows * p.row_beats),
            r.this_span.eq(p.scale_beats + this_page_rows * p.row_beats),
            r.next_page.eq(r.page_addr + p.layout.page_stride),
            r.next_addr.eq(r.page_addr + (p.layout.page_stride + r.offsets[0])),
            r.last_part_addr.eq(r.page_addr + r.offsets[-1]),
        ]

    def _advance(self, m, r, planned, empty, ar_fire) -> None:
        """A request's start (its first page's first part) and each burst's update of the
        address and span (on the span's end, the page's next part or the next page)."""
        p, parts = self.params, self.parts
        header = self.header
        beat_shift = (p.beat_bytes - 1).bit_length()
        with m.If(self.start):
            rows = header.length - header.append
            # Rounded down to 64 bytes, so every burst starts on a beat and stops at 4 KiB.
            block_bits = (BLOCK_BYTES - 1).bit_length()
            base = Cat(Const(0, block_bits), header.base[block_bits : p.addr_bits])
            m.d.sync += [
                planned.eq(0),
                r.active.eq(header.length != header.append),  # rows != 0, without the subtraction
                empty.eq(header.length == header.append),
                r.rows_left.eq(rows),
                r.page_addr.eq(base),
                r.addr.eq(base + r.offsets[0]),
                r.part.eq(0),
                # The page's span without the subtraction in front of the comparison: rows >
                # PAGE_TOKENS is length > PAGE_TOKENS + append, and below that only the low
                # bits of length - append count (it was the engine's longest path).
                r.span_left.eq(
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
                r.addr.eq(r.addr + (r.beats << beat_shift)),
                r.span_left.eq(r.span_left - r.beats),
            ]
            with m.If(r.span_end):
                with m.If(r.part != len(parts) - 1):
                    # The page's next (and last) part: same rows, the part's own offset.
                    m.d.sync += [
                        r.part.eq(r.part + 1),
                        r.addr.eq(r.last_part_addr),
                        r.span_left.eq(r.this_span),
                    ]
                with m.Else():
                    m.d.sync += [
                        r.rows_left.eq(r.next_rows),
                        r.active.eq(r.next_rows != 0),
                        r.page_addr.eq(r.next_page),
                        r.addr.eq(r.next_addr),
                        r.part.eq(0),
                        r.span_left.eq(r.next_span),
                    ]

    def _error_flags(self, m, burst_done, empty, failed, outstanding) -> None:
        """Each request's error flag into ``error_o``: ``burst_done`` is the oldest request's
        last beat, ``failed`` its flag so far; an empty request's goes once no burst is in
        flight (never in one cycle: a burst in flight keeps outstanding above 0)."""
        axi, name = self.axi, self.name
        m.submodules[f"{name}_errors"] = errors = fifo.SyncFIFO(width=1, depth=ERROR_FIFO_DEPTH)
        beat_failed = axi.rvalid & axi.rready & (axi.rresp != RESP_OKAY)
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
