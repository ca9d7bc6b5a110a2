"""``hpu`` gateware: decode attention over a KV cache in device memory.

The engine connects its components, each in its own module with its own contract:
:class:`.parser.Parser` (descriptor beats into slots), :class:`.scheduler.Scheduler` (when a
slot's reads, write and K side start), :class:`.reader.Reader` (per read port),
:class:`.writer.Writer`, a :class:`.sequencer.Sequencer` per side,
:class:`.k_side.KSide`, :class:`.scheduler.VRequestQueue`, :class:`.v_side.VSide`,
:class:`.normalizer.Normalizer` and :class:`.output.Output`; the stream payloads are the
layouts of :mod:`.beats`.

Number formats and the arithmetic every stage performs: :mod:`tandem.host.hpu` (the golden
model, bit-exact with this file). KV layout and read bursts: :mod:`tandem.mappings.hpu.kv_layout`.

Dataflow of one request::

    desc_i ─► parser ─► (pending request) ─► control ─┬─► writer ─► w_axi (new k, v, scales)
                                                      ├─► K reader ─► k_axi ─► K FIFO ─┐
                                                      └─► V reader ─► v_axi ─► V FIFO ─┼─┐
    K FIFO ─► K sequencer ─► q·k (groups × lanes MACs) ─► score ─► max/exp2 ─► l ─► row FIFO │ │
    V FIFO ─► V sequencer ─► slice ─► w = p·v_scale ─► o = o≫shift + w·v (groups × lanes) ◄──┘─┘
    l ─► 1/m of l = m·2**e (reciprocal) ─┐
    o ─► o' = o ≫ (e + c), clamped to 27 bits ─► o'·(1/m) (one DSP48E2 per lane) ─► result_o

* The K side never waits for the V side: it runs ahead into the row FIFO (per-row shift and p
  of every query), and only stops when that FIFO could overflow. The V side consumes one row
  of the FIFO per V row. So both read ports stream at one beat per cycle.
* Each page starts with its scale block; the sequencers keep the 32 scales of the current
  page in a register and hand each row its own.
* The appended token never goes through memory on the read side: after the stored rows the
  sequencers take the new k and v straight from the descriptor, so reads never race the
  writer. Before a request's reads start, the previous request's writes must be acknowledged
  (the next request of the same sequence reads them).
* The running max is an integer in log2 units, so the rescale of ``l`` and ``o`` is a rounded
  right shift by the octaves a row grows it (0 when it does not): ``alpha = 2**-shift``, no
  multiplier. ``o`` is a shift register of ``row_beats`` chunks per query that moves one
  chunk per V beat, so every chunk passes the shifters and the w·v multipliers once per row.
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu import HpuParams
from tandem.host.hpu.codec import header_layout, result_layout

from ..common.axi import AxiReadManager, AxiWriteManager
from ..common.pipeline import RegisterSlice
from .beats import TAG_BITS, row_beat_layout
from .k_side import KSide
from .normalizer import Normalizer
from .output import Output
from .parser import Parser
from .reader import Reader
from .scheduler import Scheduler, VRequestQueue
from .sequencer import Sequencer
from .v_side import VSide
from .writer import Writer

__all__ = ["Hpu"]


class Hpu(wiring.Component):
    """Decode-attention engine: one request per descriptor, results in descriptor order.

    Parameters
    ----------
    params : HpuParams
        Shape, memory interface and formats.

    Attributes
    ----------
    desc_i : In(stream.Signature(unsigned(mem_data_bits)))
        Descriptor bytes (:func:`tandem.host.hpu.pack_descriptor`), byte b in bits 8b..8b+7;
        the header beats are read through :func:`tandem.host.hpu.codec.header_layout`.
    result_o : Out(stream.Signature(result_layout))
        :func:`tandem.host.hpu.codec.result_layout`: ``data`` (``lanes`` signed words of
        ``word_bits``), ``tag`` (the sequence id), ``last`` (final beat of a request) and
        ``error`` (the request met a memory response other than OKAY or a base not a multiple
        of 64 bytes: its data are void); beats as :func:`tandem.host.hpu.result_words`.
    k_axi, v_axi : Out(AxiReadManager)
        Read managers for the K and V parts of the pages (``read_ports = 2``).
    kv_axi : Out(AxiReadManager)
        The one read manager with ``read_ports = 1``: a page's K part, then its V part.
    w_axi : Out(AxiWriteManager)
        Write manager for the appended token.
    """

    LATENCY = None  # depends on the sequence length

    def __init__(self, params: HpuParams):
        if not isinstance(params, HpuParams):
            raise TypeError(f"params must be an HpuParams, not {params!r}")
        self.params = p = params
        self.result_layout = result_layout(p)
        read = AxiReadManager(addr_bits=p.addr_bits, data_bits=p.mem_data_bits)
        super().__init__(
            {
                "desc_i": In(stream.Signature(unsigned(p.mem_data_bits))),
                "result_o": Out(stream.Signature(self.result_layout)),
                **{name: Out(read) for name in p.read_port_names},
                "w_axi": Out(AxiWriteManager(addr_bits=p.addr_bits, data_bits=p.mem_data_bits)),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        u = SimpleNamespace()  # the components
        m.submodules.parser = u.parser = Parser(p)
        m.submodules.scheduler = u.scheduler = Scheduler(p)
        m.submodules.writer = u.writer = Writer(p)
        m.submodules.k_sequencer = u.k_sequencer = Sequencer(p, name="k")
        m.submodules.k_side = u.k_side = KSide(p)
        m.submodules.v_requests = u.v_requests = VRequestQueue(p)
        m.submodules.v_sequencer = u.v_sequencer = Sequencer(p, name="v", gapless=False)
        # The V beats reach the V side through a register slice, with their request's tag
        # (the next request's may be out by then): the V side's gate's ready otherwise ran
        # through the V sequencer into the V read FIFO, the engine's longest path.
        v_slice_layout = data.StructLayout({"beat": row_beat_layout(p), "tag": TAG_BITS})
        m.submodules.v_slice = u.v_slice = RegisterSlice(v_slice_layout)
        m.submodules.v_side = u.v_side = VSide(p)
        m.submodules.normalizer = u.normalizer = Normalizer(p)
        m.submodules.output = u.output = Output(p)
        if p.read_ports == 2:
            m.submodules.k_reader = k_reader = Reader(p, parts=(False,), name="k")
            m.submodules.v_reader = v_reader = Reader(p, parts=(True,), name="v")
            readers = {k_reader: self.k_axi, v_reader: self.v_axi}
            k_beats, v_beats = k_reader.k_o, v_reader.v_o
        else:
            m.submodules.kv_reader = kv_reader = Reader(p, parts=(False, True), name="kv")
            readers = {kv_reader: self.kv_axi}
            k_beats, v_beats = kv_reader.k_o, kv_reader.v_o
        slots = self._slot_headers(m, u)
        self._connect_streams(m, u, readers, k_beats, v_beats, slots.read_header)
        self._connect_control(m, u, readers, slots)
        return m

    def _slot_headers(self, m, u):
        """The descriptor slots, seen by pointer: returns the registered headers of the slots
        the read and K pointers name, the K slot's stored rows and k and v rows, the
        registered starts, and ``header(slot)`` and ``body(slot, start, stop)``."""
        p = self.params
        parser, scheduler = u.parser, u.scheduler
        layout = header_layout(p)
        bodies = [Cat(*beats) for beats in parser.bodies]
        row_bits = p.row_elems * p.kv_bits

        def header(slot):
            return data.View(layout, Array(h.as_value() for h in parser.headers)[slot])

        def body(slot, start, stop):
            return Array(b[start:stop] for b in bodies)[slot]

        # The headers of the slots the read and K pointers name, and the K slot's stored rows,
        # are registers following them (the muxes and the subtraction were on the engine's
        # longest paths). A slot's header holds from its last beat until its release, and the
        # slot is full a cycle after that beat at the earliest; each side's next start waits a
        # cycle after a start (readers_busy, k_free), when the register may hold the slot before.
        slots = SimpleNamespace(header=header, body=body, row_bits=row_bits)
        slots.read_header = read_header = Signal(layout, name="read_header")
        slots.k_header = k_header = Signal(layout, name="k_header")
        slots.k_rows = k_rows = Signal(p.position_bits, name="k_rows")
        slots.read_started = read_started = Signal(name="read_started")
        slots.k_started = k_started = Signal(name="k_started")
        slot_k_header = header(scheduler.k_slot)
        m.d.sync += [
            read_header.eq(header(scheduler.read_slot)),
            k_header.eq(slot_k_header),
            k_rows.eq(slot_k_header.length - slot_k_header.append),
            read_started.eq(scheduler.read_start),
            k_started.eq(scheduler.k_start),
        ]
        slots.k_body = body(scheduler.k_slot, 0, 2 * row_bits)
        return slots

    def _connect_streams(self, m, u, readers, k_beats, v_beats, read_header) -> None:
        """The streams between the components, in pipeline order, and the error flags."""
        v_slice, v_side, output = u.v_slice, u.v_side, u.output
        wiring.connect(m, wiring.flipped(self.desc_i), u.parser.desc_i)
        wiring.connect(m, u.parser.query_w, u.k_side.query_w)
        wiring.connect(m, k_beats, u.k_sequencer.i)
        wiring.connect(m, v_beats, u.v_sequencer.i)
        wiring.connect(m, u.k_sequencer.o, u.k_side.i)
        m.d.comb += [
            v_slice.i.valid.eq(u.v_sequencer.o.valid),
            v_slice.i.payload.beat.eq(u.v_sequencer.o.payload),
            v_slice.i.payload.tag.eq(u.v_requests.tag),
            u.v_sequencer.o.ready.eq(v_slice.i.ready),
            v_side.i.valid.eq(v_slice.o.valid),
            v_side.i.payload.eq(v_slice.o.payload.beat),
            v_side.tag.eq(v_slice.o.payload.tag),
            v_slice.o.ready.eq(v_side.i.ready),
        ]
        wiring.connect(m, u.k_side.rows_o, v_side.rows_i)
        wiring.connect(m, u.k_side.stats_o, u.normalizer.i)
        wiring.connect(m, u.normalizer.o, output.i)
        # Each request's error flags, one from each reader and one from the writer, all in
        # request order: the output takes one of each with the request's (m, l).
        flags = [reader.error_o for reader in readers] + [u.writer.error_o]
        all_flags = Cat(*(f.valid for f in flags)).all()
        m.d.comb += [
            output.error_i.valid.eq(all_flags),
            output.error_i.payload.eq(Cat(*(f.payload for f in flags)).any()),
            *(f.ready.eq(output.error_i.ready & all_flags) for f in flags),
        ]
        wiring.connect(m, output.result_o, wiring.flipped(self.result_o))
        wiring.connect(m, u.writer.w_axi, wiring.flipped(self.w_axi))
        for reader, port in readers.items():
            wiring.connect(m, reader.axi, wiring.flipped(port))
            m.d.comb += [
                reader.start.eq(u.scheduler.read_start),
                reader.header.eq(read_header),
            ]

    def _connect_control(self, m, u, readers, slots) -> None:
        """The control signals between the components: slot releases, the scheduler's inputs,
        and each side's start with its request's fields."""
        p = self.params
        parser, scheduler, k_side, output = u.parser, u.scheduler, u.k_side, u.output
        k_sequencer, v_requests, v_sequencer, v_side = (
            u.k_sequencer,
            u.v_requests,
            u.v_sequencer,
            u.v_side,
        )
        header, body, row_bits = slots.header, slots.body, slots.row_bits
        k_header, k_rows = slots.k_header, slots.k_rows
        m.d.comb += [
            parser.release.eq(k_side.bank_done),
            scheduler.full.eq(parser.full),
            scheduler.release.eq(k_side.bank_done),
            scheduler.readers_busy.eq(Cat(*(r.busy for r in readers)).any() | slots.read_started),
            scheduler.writes_idle.eq(u.writer.idle),
            scheduler.writer_ready.eq(u.writer.ready),
            scheduler.k_free.eq(k_sequencer.free & ~slots.k_started),
            scheduler.v_room.eq(v_requests.room),
            scheduler.stats_taken.eq(output.i.valid & output.i.ready),
            u.writer.start.eq(scheduler.write_start),
            u.writer.header.eq(header(scheduler.write_slot)),
            u.writer.body.eq(body(scheduler.write_slot, 0, 2 * row_bits)),
            # The K side: its sequencer's stored rows, then the slot's own k row.
            k_sequencer.start.eq(scheduler.k_start),
            k_sequencer.rows.eq(k_rows),
            k_sequencer.append.eq(k_header.append),
            k_sequencer.new_row.eq(body(scheduler.k_bank, 0, row_bits)),
            k_sequencer.new_scale.eq(header(scheduler.k_bank).new_k_scale),
            k_side.bank.eq(scheduler.k_bank),
            *(
                k_side.query_scales[s][g].eq(h.score_scale[g])
                for s, h in enumerate(parser.headers)
                for g in range(p.gqa_group)
            ),
            # The V side starts each request after the K side has.
            v_requests.push.eq(scheduler.k_start),
            v_requests.request.new_v.eq(slots.k_body[row_bits:]),
            v_requests.request.new_v_scale.eq(k_header.new_v_scale),
            v_requests.request.rows.eq(k_rows),
            v_requests.request.append.eq(k_header.append),
            v_requests.request.seq_id.eq(k_header.seq_id),
            v_requests.request.partial.eq(k_header.partial),
            v_requests.seq_free.eq(v_sequencer.free),
            v_sequencer.start.eq(v_requests.start),
            v_sequencer.rows.eq(v_requests.rows),
            v_sequencer.append.eq(v_requests.append),
            v_sequencer.new_row.eq(v_requests.new_v),
            v_sequencer.new_scale.eq(v_requests.new_v_scale),
            # The output emits the V side's snapshot.
            output.snapshot_valid.eq(v_side.snapshot_valid),
            output.snapshot_tag.eq(v_side.snapshot_tag),
            v_side.release.eq(output.release),
        ]
        for g in range(p.gqa_group):
            for i in range(p.row_elems):
                m.d.comb += output.snapshot[g][i].eq(v_side.snapshot[g][i])
