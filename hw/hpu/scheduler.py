"""``hpu`` scheduler: when each parsed request's reads, write, K side and V side start."""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from .beats import DESCRIPTOR_SLOTS, REQUEST_QUEUE_DEPTH, TAG_BITS, checked, v_request_layout

__all__ = ["Scheduler", "VRequestQueue"]


class Scheduler(wiring.Component):
    """Takes each full descriptor slot, in turn, through its reads, its write and its K side.

    Three pointers go round the slots: ``read_slot`` (the readers' next request), ``write_slot``
    (the writer's) and ``k_slot`` (the K side's).

    * Reads start as soon as both readers are free, so the next request's memory latency hides
      behind the current request's last rows; they wait for every earlier append to be
      written and acknowledged (``writes_idle``): a later request may read the appended token.
    * The write of a slot's appended token starts once its reads have (the next cycle at the
      earliest), the writer being free.
    * The K side starts once the slot's write has (the next cycle at the earliest), its
      sequencer is free (``k_free``), the V
      side's request queue has room (``v_room``) and fewer than ``REQUEST_QUEUE_DEPTH``
      requests started on the K side wait for the output to take their (m, l)
      (``stats_taken`` counts them out), so the queues between never overflow.

    A slot's flags clear with ``release`` (the K side's last read of its queries), which also
    empties it in the :class:`~.parser.Parser`.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    full, release : In(DESCRIPTOR_SLOTS)
        The parser's full slots; slots the K side is done with.
    readers_busy, writes_idle, writer_ready, k_free, v_room, stats_taken : In(1)
        Bursts of the readers' request remain to be issued; no write is pending or
        unacknowledged; the writer can take a slot; the K sequencer can start; the V request
        queue has room; the output takes a request's (m, l) this cycle.
    read_start, write_start, k_start : Out(1)
        The readers, the writer, the K side take their pointer's slot this cycle.
    read_slot, write_slot, k_slot : Out(range(DESCRIPTOR_SLOTS))
        The slot each takes next.
    k_bank : Out(range(DESCRIPTOR_SLOTS))
        The slot of the K side's running request (its queries' bank).
    """

    def __init__(self, params):
        self.params = checked(params)
        slot = range(DESCRIPTOR_SLOTS)
        super().__init__(
            {
                "full": In(DESCRIPTOR_SLOTS),
                "release": In(DESCRIPTOR_SLOTS),
                "readers_busy": In(1),
                "writes_idle": In(1),
                "writer_ready": In(1),
                "k_free": In(1),
                "v_room": In(1),
                "stats_taken": In(1),
                "read_start": Out(1),
                "write_start": Out(1),
                "k_start": Out(1),
                "read_slot": Out(slot),
                "write_slot": Out(slot),
                "k_slot": Out(slot),
                "k_bank": Out(slot),
            }
        )

    def elaborate(self, platform):
        m = Module()
        full = self.full
        read = Signal(DESCRIPTOR_SLOTS)  # read bursts started
        written = Signal(DESCRIPTOR_SLOTS)  # the writer has taken the appended token
        k_started = Signal(DESCRIPTOR_SLOTS)
        read_ptr, write_ptr, k_ptr = self.read_slot, self.write_slot, self.k_slot
        read_start, write_start, start_k = self.read_start, self.write_start, self.k_start
        # Requests started on the K side whose (m, l) the output has not taken yet.
        # As a thermometer code (bit i: more than i), so a start or a take moves it by a
        # shift: no adder behind k_start, the end of a long decision (an adder there was the
        # engine's longest path).
        k_reserved = Signal(REQUEST_QUEUE_DEPTH, name="k_reserved")
        k_queue_full = k_reserved[-1]

        def advance(ptr):
            return Mux(ptr == DESCRIPTOR_SLOTS - 1, 0, ptr + 1)

        m.d.comb += [
            read_start.eq(
                full.bit_select(read_ptr, 1)
                & ~read.bit_select(read_ptr, 1)
                & (write_ptr == read_ptr)
                & self.writes_idle
                & ~self.readers_busy
            ),
            # Each decision reads the slot's registered flags only, not the decision before
            # it this cycle: chained, the three were the engine's longest path.
            write_start.eq(
                full.bit_select(write_ptr, 1)
                & read.bit_select(write_ptr, 1)
                & ~written.bit_select(write_ptr, 1)
                & self.writer_ready
            ),
            start_k.eq(
                full.bit_select(k_ptr, 1)
                & written.bit_select(k_ptr, 1)
                & ~k_started.bit_select(k_ptr, 1)
                & self.k_free
                & self.v_room
                & ~k_queue_full
            ),
        ]
        with m.If(start_k):
            m.d.sync += self.k_bank.eq(k_ptr)
        for slot in range(DESCRIPTOR_SLOTS):
            with m.If(read_start & (read_ptr == slot)):
                m.d.sync += read[slot].eq(1)
            with m.If(write_start & (write_ptr == slot)):
                m.d.sync += written[slot].eq(1)
            with m.If(start_k & (k_ptr == slot)):
                m.d.sync += k_started[slot].eq(1)
            with m.If(self.release[slot]):
                m.d.sync += [read[slot].eq(0), written[slot].eq(0), k_started[slot].eq(0)]
        with m.If(read_start):
            m.d.sync += read_ptr.eq(advance(read_ptr))
        with m.If(write_start):
            m.d.sync += write_ptr.eq(advance(write_ptr))
        with m.If(start_k):
            m.d.sync += k_ptr.eq(advance(k_ptr))
        taken = self.stats_taken
        with m.If(start_k & ~taken):
            m.d.sync += k_reserved.eq(Cat(1, k_reserved[:-1]))
        with m.Elif(taken & ~start_k):
            m.d.sync += k_reserved.eq(k_reserved[1:])
        return m


class VRequestQueue(wiring.Component):
    """The requests the K side has started and the V side has not, in order.

    The V side starts each request later than the K side: ``push`` (the K side's start)
    queues what the V side needs of it (:func:`.beats.v_request_layout`); the V sequencer
    starts the queue's head when it is ``seq_free`` (a push reaches the head one or two
    cycles later, the buffered FIFO's latency), and the head's appended v row, its scale and
    its tag are held from then on while that request runs.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    push : In(1)
    request : In(:func:`.beats.v_request_layout`)
    room : Out(1)
        A ``push`` this cycle is taken.
    seq_free : In(1)
        The V sequencer can start a request.
    start : Out(1)
        The V sequencer starts the head this cycle.
    rows, append : Out
        The head's stored rows and append flag (valid with ``start``).
    new_v, new_v_scale, tag : Out
        The running request's appended v row, its scale, and its sequence id and partial flag
        (:data:`.beats.TAG_BITS`).
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "push": In(1),
                "request": In(v_request_layout(p)),
                "room": Out(1),
                "seq_free": In(1),
                "start": Out(1),
                "rows": Out(unsigned(p.position_bits)),
                "append": Out(1),
                "new_v": Out(unsigned(p.row_elems * p.kv_bits)),
                "new_v_scale": Out(16),
                "tag": Out(TAG_BITS),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        layout = v_request_layout(p)
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(
            width=layout.size, depth=REQUEST_QUEUE_DEPTH
        )
        head = data.View(layout, queue.r_data)
        m.d.comb += [
            queue.w_data.eq(self.request.as_value()),
            queue.w_en.eq(self.push),
            self.room.eq(queue.w_rdy),
            self.start.eq(queue.r_rdy & self.seq_free),
            queue.r_en.eq(self.start),
            self.rows.eq(head.rows),
            self.append.eq(head.append),
        ]
        with m.If(self.start):
            m.d.sync += [
                self.new_v.eq(head.new_v),
                self.new_v_scale.eq(head.new_v_scale),
                self.tag.eq(Cat(head.seq_id, head.partial)),
            ]
        return m
