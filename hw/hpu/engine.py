"""``hpu`` gateware: decode attention over a KV cache in device memory.

Number formats and the arithmetic every stage performs: :mod:`tandem.host.hpu` (the golden
model, bit-exact with this file). KV layout and read bursts: :mod:`tandem.mappings.hpu.kv_layout`.

Dataflow of one request::

    desc_i ─► parser ─► (pending request) ─► control ─┬─► writer ─► w_axi (new k, v, scales)
                                                      ├─► K reader ─► k_axi ─► K FIFO ─┐
                                                      └─► V reader ─► v_axi ─► V FIFO ─┼─┐
    K FIFO ─► K sequencer ─► q·k (groups × lanes MACs) ─► score ─► max/exp2 ─► l ─► row FIFO │ │
    V FIFO ─► V sequencer ─► w = p·v_scale ─► o = o≫shift + w·v (groups × lanes) ◄──────────┘─┘
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
  multiplier. ``o`` is a ring of ``row_beats`` chunks per query that rotates by one chunk per
  V beat, so every chunk passes the shifters and the w·v multipliers once per row.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu import HpuParams
from tandem.host.hpu.codec import header_layout, result_layout
from tandem.mappings.hpu.kv_layout import AXI_BOUNDARY, BLOCK_BYTES, PAGE_TOKENS

from ..common.axi import BURST_INCR, AxiReadManager, AxiWriteManager
from ..common.exp2 import Exp2
from ..common.fixed import clamp, round_shift_right, saturate
from ..common.reciprocal import Reciprocal, leading_one

__all__ = ["Hpu"]

#: Depth of the per-port read-data FIFOs and of the row FIFO between the K and V sides.
DATA_FIFO_DEPTH = 32
ROW_FIFO_DEPTH = 64
#: Requests the K side may run ahead of the output (V requests queued, (m, l) results held).
REQUEST_QUEUE_DEPTH = 4
#: Descriptor slots: the K side's request, the next one, and one more being parsed, so a short
#: request between two long ones does not leave the read ports waiting for a descriptor.
DESCRIPTOR_SLOTS = 3


def shift_amounts(total, limit_shift: int):
    """``(left, right, non_negative)`` of :func:`shift_by_split` for the signed exponent
    ``total`` (at most ``limit_shift``): they depend on the exponent alone, so a pipeline
    registers them beside the product."""
    left = Mux(total > 0, total, 0).as_unsigned()[: limit_shift.bit_length()]
    right = Mux(-total > 62, 62, Mux(total < 0, -total, 0)).as_unsigned()[:6]
    return left, right, total >= 0


def shift_by_split(
    m: Module,
    product,
    left_amount,
    right_amount,
    non_negative,
    bits: int,
    is_signed: bool,
    name: str,
    enable,
):
    """``product * 2**total`` rounded half up and saturated, over two stages (the golden model
    computes the same value exactly in float64: ``_round_scaled`` in
    :mod:`tandem.host.hpu.golden`). Returns the second stage's (combinational) value.

    The amounts come from :func:`shift_amounts`; positive exponents shift left after clamping
    the product (which saturates anyway), negative ones round-shift right by at most 62 (every
    product the engine forms is below 2**52 in magnitude, so a longer shift would give 0 as
    well). The first stage registers the shifts (while ``enable``); since ``(x + 2**(r-1)) >> r
    == (x >> r) + bit r-1 of x`` for r >= 1, it keeps the floor and that bit, and the second
    stage adds them and saturates.
    """
    left = Signal(signed(bits + 2 + (1 << len(left_amount))), name=f"{name}_left")
    floor = Signal.like(Value.cast(product), name=f"{name}_floor")
    round_bit = Signal(name=f"{name}_round")
    up = Signal(name=f"{name}_up")
    below = Mux(right_amount == 0, 0, right_amount - 1)[: len(right_amount)]
    with m.If(enable):
        m.d.sync += [
            left.eq(clamp(product, 1 << bits) << left_amount),
            floor.eq(product >> right_amount),
            round_bit.eq((right_amount != 0) & (product >> below)[0]),
            up.eq(non_negative),
        ]
    shape = signed(bits) if is_signed else unsigned(bits)
    return saturate(Mux(up, left, floor + round_bit), shape)


def shift_halves(value, amount):
    """``value * 2**-amount`` with one fraction bit: ``floor`` (bits 1 and up, the value's
    signedness) and the rounding bit (bit 0: bit ``amount - 1`` of ``value``, 0 for
    ``amount`` 0), from one shifter. ``floor + round`` is the shift rounded half up
    (:func:`rounded`); past the value's width it is 0, as the golden model's shift of 62."""
    value = Value.cast(value)
    wide = Cat(Const(0, 1), value)
    return (wide.as_signed() if value.shape().signed else wide) >> amount


def rounded(halves):
    """The rounded-half-up shift of :func:`shift_halves`' result ``halves``."""
    floor = halves[1:]
    return (floor.as_signed() if halves.shape().signed else floor) + halves[0]


def decode_scale(m: Module, bits, name: str):
    """binary16 scale -> (mantissa, exponent) signals, as :func:`tandem.host.hpu.decode_scales`."""
    mant = Signal(unsigned(11), name=f"{name}_mant")
    exp = Signal(signed(7), name=f"{name}_exp")
    field = bits[10:15]
    m.d.comb += [
        mant.eq(Cat(bits[0:10], field != 0)),
        exp.eq(Mux(field == 0, 1, field) - 25),
    ]
    return mant, exp


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
        ``word_bits``), ``tag`` (the sequence id) and ``last`` (final beat of a request);
        beats as :func:`tandem.host.hpu.result_words`.
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

    # ------------------------------------------------------------------------------------
    def elaborate(self, platform):
        p = self.params
        m = Module()
        groups = p.gqa_group
        beat_bits = p.mem_data_bits
        pos_shape = unsigned(p.position_bits)

        # ---- descriptor slots: two, used in turn. The parser fills one while the other's
        # request runs; each slot then goes through its reads, its write (the appended token)
        # and the K side's start, and is free again once the K pipeline has read its queries
        # for the last time. The queries stay in the slot: the K side reads them there. ----
        body_beats = 2 * p.row_beats + groups * p.q_beats
        header_regs = [
            [Signal(beat_bits, name=f"slot{s}_hdr{b}") for b in range(p.header_beats)]
            for s in range(DESCRIPTOR_SLOTS)
        ]
        body_regs = [
            [Signal(beat_bits, name=f"slot{s}_body{b}") for b in range(body_beats)]
            for s in range(DESCRIPTOR_SLOTS)
        ]
        # The header beats, concatenated (beat 0 lowest), seen through the header's layout:
        # a field may span two beats when beats are narrower than 64 bytes.
        hdr_layout = header_layout(p)
        assert hdr_layout.size == p.header_beats * beat_bits
        headers_flat = [Cat(*regs) for regs in header_regs]
        headers = [data.View(hdr_layout, flat) for flat in headers_flat]
        bodies = [Cat(*regs) for regs in body_regs]
        full = Signal(DESCRIPTOR_SLOTS)  # parsed, not yet released by the K side
        read = Signal(DESCRIPTOR_SLOTS)  # read bursts started
        written = Signal(DESCRIPTOR_SLOTS)  # the writer has taken the appended token
        k_started = Signal(DESCRIPTOR_SLOTS)
        fill_ptr, read_ptr, write_ptr, k_ptr = (
            Signal(range(DESCRIPTOR_SLOTS), name=f"{n}_slot")
            for n in ("fill", "read", "write", "k")
        )

        def advance(ptr):
            return Mux(ptr == DESCRIPTOR_SLOTS - 1, 0, ptr + 1)

        def pick(values, ptr):
            return Array(values)[ptr]

        def pick_header(ptr):
            return data.View(hdr_layout, pick(headers_flat, ptr))

        self._parser(m, header_regs, headers, body_regs, full, fill_ptr)

        def stored_rows(header):
            return (header.length - header.append)[: p.position_bits]

        row_bits = p.row_elems * p.kv_bits
        q_base = 2 * row_bits
        q_width = p.row_elems * p.q_bits
        q_banks = [
            [bodies[b][q_base + g * q_width : q_base + (g + 1) * q_width] for g in range(groups)]
            for b in range(DESCRIPTOR_SLOTS)
        ]
        q_scale_banks = [
            [headers[b].score_scale[g] for g in range(groups)] for b in range(DESCRIPTOR_SLOTS)
        ]

        # ---- readers: they start on the next slot as soon as they are free, so the next
        # request's memory latency hides behind the current request's last rows. Reads wait
        # for every earlier append to be written and acknowledged: a later request may read
        # the appended token. ----
        read_start = Signal()
        writes_idle = Signal()
        read_header = pick_header(read_ptr)
        if p.read_ports == 2:
            (k_fifo,), k_busy = self._reader(
                m, self.k_axi, read_start, read_header, parts=(False,), name="k"
            )
            (v_fifo,), v_busy = self._reader(
                m, self.v_axi, read_start, read_header, parts=(True,), name="v"
            )
        else:
            (k_fifo, v_fifo), k_busy = self._reader(
                m, self.kv_axi, read_start, read_header, parts=(False, True), name="kv"
            )
            v_busy = Const(0)
        m.d.comb += read_start.eq(
            full.bit_select(read_ptr, 1)
            & ~read.bit_select(read_ptr, 1)
            & (write_ptr == read_ptr)
            & writes_idle
            & ~k_busy
            & ~v_busy
        )

        # ---- writer: new k row, new v row, and their two scales ----
        write_start = Signal()
        write_header = pick_header(write_ptr)
        write_body = pick([body[:q_base] for body in bodies], write_ptr)
        writer_idle = self._writer(m, write_start, write_header, write_body, writes_idle)
        m.d.comb += write_start.eq(
            full.bit_select(write_ptr, 1)
            & (read.bit_select(write_ptr, 1) | (read_start & (read_ptr == write_ptr)))
            & ~written.bit_select(write_ptr, 1)
            & writer_idle
        )

        # ---- K stage start, and the V side's request queue (the V side starts each request
        # later than the K side) ----
        start_k = Signal()
        k_header = pick_header(k_ptr)
        k_body = pick([body[:q_base] for body in bodies], k_ptr)
        v_request = data.StructLayout(
            {
                "new_v": unsigned(row_bits),
                "new_v_scale": unsigned(16),
                "rows": pos_shape,
                "append": unsigned(1),
                "seq_id": unsigned(32),
                "partial": unsigned(1),
            }
        )
        m.submodules.v_requests = v_requests = fifo.SyncFIFOBuffered(
            width=v_request.size, depth=REQUEST_QUEUE_DEPTH
        )
        v_entry = data.View(v_request, Signal(v_request.size, name="v_request_in"))
        m.d.comb += [
            v_entry.new_v.eq(k_body[row_bits : 2 * row_bits]),
            v_entry.new_v_scale.eq(k_header.new_v_scale),
            v_entry.rows.eq(stored_rows(k_header)),
            v_entry.append.eq(k_header.append),
            v_entry.seq_id.eq(k_header.seq_id),
            v_entry.partial.eq(k_header.partial),
            v_requests.w_data.eq(v_entry.as_value()),
            v_requests.w_en.eq(start_k),
        ]

        # ---- K side: sequencer, dot products, scores, online softmax. At each request's
        # last row the final (m, l) of every query go to the `k_results` queue. ----
        row_fifo_width = groups * (p.shift_bits + p.prob_frac_bits + 1)
        m.submodules.row_fifo = row_fifo = fifo.SyncFIFOBuffered(
            width=row_fifo_width, depth=ROW_FIFO_DEPTH
        )
        stats_bits = p.max_bits + p.l_bits
        m.submodules.k_results = k_results = fifo.SyncFIFOBuffered(
            width=groups * stats_bits, depth=REQUEST_QUEUE_DEPTH
        )
        # Requests started on the K side whose (m, l) the output has not taken yet: bounded by
        # the queue depth, so the queue never overflows.
        k_reserved = Signal(range(REQUEST_QUEUE_DEPTH + 1))
        k_queue_full = Signal()  # k_reserved == REQUEST_QUEUE_DEPTH, kept beside it
        k_room = Signal()
        k_slot = Signal(range(DESCRIPTOR_SLOTS))  # the slot of the K sequencer's request
        with m.If(start_k):
            m.d.sync += k_slot.eq(k_ptr)
        new_k = pick([body[:row_bits] for body in bodies], k_slot)
        new_k_scale = pick_header(k_slot).new_k_scale
        k_beat = self._sequencer(
            m,
            "k",
            start_k,
            stored_rows(k_header),
            k_header.append,
            k_fifo,
            new_k,
            new_k_scale,
            k_room,
        )
        bank_done = self._k_side(
            m, k_beat, k_slot, q_banks, q_scale_banks, row_fifo, k_results, k_room
        )
        m.d.comb += start_k.eq(
            full.bit_select(k_ptr, 1)
            & (written.bit_select(k_ptr, 1) | (write_start & (write_ptr == k_ptr)))
            & ~k_started.bit_select(k_ptr, 1)
            & k_beat["free"]
            & v_requests.w_rdy
            & ~k_queue_full
        )

        # ---- slot bookkeeping ----
        for slot in range(DESCRIPTOR_SLOTS):
            with m.If(read_start & (read_ptr == slot)):
                m.d.sync += read[slot].eq(1)
            with m.If(write_start & (write_ptr == slot)):
                m.d.sync += written[slot].eq(1)
            with m.If(start_k & (k_ptr == slot)):
                m.d.sync += k_started[slot].eq(1)
            with m.If(bank_done[slot]):
                m.d.sync += [
                    full[slot].eq(0),
                    read[slot].eq(0),
                    written[slot].eq(0),
                    k_started[slot].eq(0),
                ]
        with m.If(read_start):
            m.d.sync += read_ptr.eq(advance(read_ptr))
        with m.If(write_start):
            m.d.sync += write_ptr.eq(advance(write_ptr))
        with m.If(start_k):
            m.d.sync += k_ptr.eq(advance(k_ptr))

        # ---- V side: weights and accumulators; each finished request is copied into the
        # output snapshot, so the next request accumulates while the last one is emitted ----
        accumulators = [
            [Signal(signed(p.o_bits), name=f"o{g}_{i}") for i in range(p.row_elems)]
            for g in range(groups)
        ]
        v_head = data.View(v_request, v_requests.r_data)
        new_v = Signal(p.row_elems * p.kv_bits)
        new_v_scale = Signal(16)
        v_tag = Signal(33)  # seq_id and the partial flag of the V side's request
        v_gate = Signal()
        start_v = Signal()
        v_beat = self._sequencer(
            m, "v", start_v, v_head.rows, v_head.append, v_fifo, new_v, new_v_scale, v_gate
        )
        m.d.comb += [start_v.eq(v_requests.r_rdy & v_beat["free"]), v_requests.r_en.eq(start_v)]
        with m.If(start_v):
            m.d.sync += [
                new_v.eq(v_head.new_v),
                new_v_scale.eq(v_head.new_v_scale),
                v_tag.eq(Cat(v_head.seq_id, v_head.partial)),
            ]
        snapshot = [
            [Signal(signed(p.o_bits), name=f"snap{g}_{i}") for i in range(p.row_elems)]
            for g in range(groups)
        ]
        snap_valid = Signal()
        snap_tag = Signal(33)
        self._v_side(
            m, v_beat, v_tag, row_fifo, accumulators, v_gate, snapshot, snap_valid, snap_tag
        )

        # ---- 1/l of every query, computed as soon as the K side has finished a request
        # (well before its V side has): one l per cycle into the pipelined reciprocal ----
        m.submodules.recip = recip = Reciprocal(p.reciprocal)
        m.submodules.stats = stats_fifo = fifo.SyncFIFOBuffered(
            width=groups * stats_bits, depth=REQUEST_QUEUE_DEPTH
        )
        recip_bits = p.reciprocal.out_bits
        m.submodules.recips = recip_fifo = fifo.SyncFIFOBuffered(
            width=groups * recip_bits, depth=REQUEST_QUEUE_DEPTH
        )
        feed_sums = [Signal(p.l_bits, name=f"feed_l{g}") for g in range(groups)]
        feed_index = Signal(range(groups), name="feed_index")
        feeding = Signal(name="feeding")
        last_feed = feeding & recip.i.ready & (feed_index == groups - 1)
        load = k_results.r_rdy & (~feeding | last_feed)
        m.d.comb += [
            recip.i.valid.eq(feeding),
            recip.i.payload.eq(Array(feed_sums)[feed_index]),
            k_results.r_en.eq(load),
            stats_fifo.w_en.eq(load),
            stats_fifo.w_data.eq(k_results.r_data),
            recip.o.ready.eq(1),
        ]
        with m.If(recip.i.valid & recip.i.ready):
            m.d.sync += feed_index.eq(feed_index + 1)
        with m.If(last_feed):
            m.d.sync += [feeding.eq(0), feed_index.eq(0)]
        with m.If(load):
            m.d.sync += [feeding.eq(1), feed_index.eq(0)]
            for g in range(groups):
                stats = k_results.r_data[g * stats_bits : (g + 1) * stats_bits]
                m.d.sync += feed_sums[g].eq(stats[p.max_bits :])
        collected = [Signal(recip_bits, name=f"collected_r{g}") for g in range(groups - 1)]
        collect_index = Signal(range(groups), name="collect_index")
        m.d.comb += [
            recip_fifo.w_en.eq(recip.o.valid & (collect_index == groups - 1)),
            recip_fifo.w_data.eq(Cat(*collected, recip.o.payload)),
        ]
        with m.If(recip.o.valid):
            m.d.sync += collect_index.eq(Mux(collect_index == groups - 1, 0, collect_index + 1))
            with m.Switch(collect_index):
                for g in range(groups - 1):
                    with m.Case(g):
                        m.d.sync += collected[g].eq(recip.o.payload)

        # ---- output: o * (1/l) of each query (or m, l, o in partial mode) ----
        recips = [Signal(recip_bits, name=f"r{g}") for g in range(groups)]
        # The shift of o to o' above its least (out_o_shift_min): 0..position_bits.
        o_shifts = [Signal(range(p.position_bits + 1), name=f"o_shift{g}") for g in range(groups)]
        out_max = [Signal(signed(p.max_bits), name=f"out_m{g}") for g in range(groups)]
        out_sum = [Signal(p.l_bits, name=f"out_l{g}") for g in range(groups)]
        out_query = Signal(range(groups))
        out_chunk = Signal(range(p.row_beats + 1))
        partial = snap_tag[32]
        take_stats = Signal()
        # The count's next value is a mux of k_reserved +- 1 (formed from the register alone)
        # rather than an adder behind start_k: start_k is the end of a long decision.
        with m.If(start_k & ~take_stats):
            m.d.sync += [
                k_reserved.eq(k_reserved + 1),
                k_queue_full.eq(k_reserved == REQUEST_QUEUE_DEPTH - 1),
            ]
        with m.Elif(take_stats & ~start_k):
            m.d.sync += [k_reserved.eq(k_reserved - 1), k_queue_full.eq(0)]
        m.d.comb += [stats_fifo.r_en.eq(take_stats), recip_fifo.r_en.eq(take_stats)]

        # The output is four stages: PRE holds a beat's words of o (or its raw words), SH their
        # o' = o >> shift, clamped into one multiplier operand, MUL the products o' * (1/m),
        # the result register their rounding and saturation. All move when the result
        # register is free, so backpressure stalls them together.
        pre = self._output_stages(m)

        with m.FSM(name="control"):
            with m.State("IDLE"):
                with m.If(snap_valid & stats_fifo.r_rdy & recip_fifo.r_rdy):
                    m.d.comb += take_stats.eq(1)
                    for g in range(groups):
                        stats = stats_fifo.r_data[g * stats_bits : (g + 1) * stats_bits]
                        # o' = o >> (l's exponent + offset): the exponent 1/m leaves out. (A
                        # cycle of its own made short requests wait on the output.)
                        msb = leading_one(m, stats[p.max_bits :], name=f"l_msb{g}")
                        o_shift = msb - (p.prob_frac_bits - 1)
                        m.d.sync += [
                            out_max[g].eq(stats[: p.max_bits]),
                            out_sum[g].eq(stats[p.max_bits :]),
                            recips[g].eq(recip_fifo.r_data[g * recip_bits : (g + 1) * recip_bits]),
                            o_shifts[g].eq(Mux(o_shift < 0, 0, o_shift)),
                        ]
                    m.d.sync += [out_query.eq(0), out_chunk.eq(0)]
                    m.next = "OUT"
            with m.State("OUT"):
                out_done = self._output(
                    m,
                    snapshot,
                    out_max,
                    out_sum,
                    recips,
                    o_shifts,
                    snap_tag[:32],
                    partial,
                    out_query,
                    out_chunk,
                    pre,
                )
                with m.If(out_done):
                    m.d.sync += snap_valid.eq(0)
                    m.next = "IDLE"
        return m

    # ------------------------------------------------------------------------------------
    def _parser(self, m, header_regs, headers, body_regs, full, fill_ptr):
        """Fill the descriptor slot ``fill_ptr`` beat by beat, then mark it ``full``.

        A request without an append has no k/v rows in its descriptor: its queries land at
        the same place in the slot as those of a request with one.
        """
        p = self.params
        body_beats = len(body_regs[0])
        beat_index = Signal(range(p.header_beats + body_beats + 1))
        append_flag = Array(header.append for header in headers)[fill_ptr]
        m.d.comb += self.desc_i.ready.eq(~full.bit_select(fill_ptr, 1))
        body_index = Signal(range(body_beats + 2 * p.row_beats + p.header_beats + 1))
        m.d.comb += body_index.eq(
            beat_index - p.header_beats + Mux(append_flag, 0, 2 * p.row_beats)
        )
        with m.If(self.desc_i.valid & self.desc_i.ready):
            m.d.sync += beat_index.eq(beat_index + 1)
            for slot in range(len(header_regs)):
                with m.If(fill_ptr == slot):
                    with m.Switch(beat_index):
                        for b in range(p.header_beats):
                            with m.Case(b):
                                m.d.sync += header_regs[slot][b].eq(self.desc_i.payload)
                    with m.If(beat_index >= p.header_beats), m.Switch(body_index):
                        for b in range(body_beats):
                            with m.Case(b):
                                m.d.sync += body_regs[slot][b].eq(self.desc_i.payload)
            with m.If((beat_index >= p.header_beats) & (body_index == body_beats - 1)):
                m.d.sync += [
                    full.bit_select(fill_ptr, 1).eq(1),
                    fill_ptr.eq(Mux(fill_ptr == len(header_regs) - 1, 0, fill_ptr + 1)),
                    beat_index.eq(0),
                ]

    # ------------------------------------------------------------------------------------
    def _writer(self, m, start, header, body_flat, writes_idle):
        """Write the appended token: k row, v row (head_dim elements strobed), then both scales.

        ``start`` hands the writer a descriptor slot (``header``, ``body_flat``); it
        writes only when the slot's append flag is set. Drives ``writes_idle`` (no write
        pending or unacknowledged) and returns a signal that is high while a ``start`` can be
        taken.
        """
        p = self.params
        axi = self.w_axi
        beat_bytes = p.beat_bytes
        layout = p.layout
        offset = Signal(5, name="w_offset")
        page_base = Signal(p.addr_bits, name="w_page_base")
        data_k = Signal(p.row_elems * p.kv_bits, name="w_k")
        data_v = Signal(p.row_elems * p.kv_bits, name="w_v")
        row_used_bytes = p.head_dim * p.kv_bits // 8  # the rest of a row is padding
        scales = Signal(data.StructLayout({"k": 16, "v": 16}), name="w_scales")
        outstanding = Signal(range(8), name="w_outstanding")
        beat = Signal(range(p.row_beats + 1), name="w_beat")
        m.d.comb += [
            axi.awid.eq(0),
            axi.awsize.eq((beat_bytes - 1).bit_length()),
            axi.awburst.eq(BURST_INCR),
            axi.bready.eq(1),
        ]
        aw_fire = axi.awvalid & axi.awready
        b_fire = axi.bvalid & axi.bready
        m.d.sync += outstanding.eq(outstanding + aw_fire - b_fire)
        row_strobes = Array(
            Const(
                sum(1 << j for j in range(beat_bytes) if b * beat_bytes + j < row_used_bytes),
                beat_bytes,
            )
            for b in range(p.row_beats)
        )
        scale_byte = Signal(range(BLOCK_BYTES), name="w_scale_byte")
        m.d.comb += scale_byte.eq(offset * 2)
        in_beat = Signal(range(beat_bytes), name="w_scale_lane")
        m.d.comb += in_beat.eq(scale_byte % beat_bytes)
        scale_beat_addr = page_base + (scale_byte - in_beat)
        row_addr = page_base + BLOCK_BYTES + offset * layout.row_bytes
        pending = Signal(name="w_pending")

        def row_states(name, next_state, part, data_row):
            with m.State(name + "_AW"):
                m.d.comb += [
                    axi.awvalid.eq(1),
                    axi.awaddr.eq(row_addr + part),
                    axi.awlen.eq(p.row_beats - 1),
                ]
                with m.If(axi.awready):
                    m.d.sync += beat.eq(0)
                    m.next = name + "_W"
            with m.State(name + "_W"):
                m.d.comb += [
                    axi.wvalid.eq(1),
                    axi.wdata.eq(data_row.word_select(beat, p.mem_data_bits)),
                    axi.wstrb.eq(row_strobes[beat]),
                    axi.wlast.eq(beat == p.row_beats - 1),
                ]
                with m.If(axi.wready):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == p.row_beats - 1):
                        m.next = next_state

        def scale_states(name, next_state, part, half):
            with m.State(name + "_AW"):
                m.d.comb += [
                    axi.awvalid.eq(1),
                    axi.awaddr.eq(scale_beat_addr + part),
                    axi.awlen.eq(0),
                ]
                with m.If(axi.awready):
                    m.next = name + "_W"
            with m.State(name + "_W"):
                m.d.comb += [
                    axi.wvalid.eq(1),
                    axi.wdata.eq(half << (in_beat * 8)),
                    axi.wstrb.eq(Const(3, beat_bytes) << in_beat),
                    axi.wlast.eq(1),
                ]
                with m.If(axi.wready):
                    m.next = next_state
                    if next_state == "IDLE":
                        m.d.sync += pending.eq(0)

        # The slot's fields are registered first, the page address formed the next cycle
        # (a header mux, a multiply and an add in one cycle was the engine's longest path).
        base = Signal(p.addr_bits, name="w_base")
        page = Signal(p.position_bits - 5, name="w_page")
        with m.FSM(name="writer"):
            with m.State("IDLE"), m.If(start & header.append):
                position = Signal(p.position_bits, name="w_position")
                m.d.comb += position.eq(header.length - 1)
                m.d.sync += [
                    pending.eq(1),
                    offset.eq(position[:5]),
                    base.eq(header.base[: p.addr_bits]),
                    page.eq(position[5:]),
                    data_k.eq(body_flat[0 : p.row_elems * p.kv_bits]),
                    data_v.eq(body_flat[p.row_elems * p.kv_bits : 2 * p.row_elems * p.kv_bits]),
                    scales.k.eq(header.new_k_scale),
                    scales.v.eq(header.new_v_scale),
                ]
                m.next = "PAGE"
            with m.State("PAGE"):
                m.d.sync += page_base.eq(base + page * layout.page_bytes)
                m.next = "K_AW"
            row_states("K", "V_AW", 0, data_k)
            row_states("V", "KS_AW", layout.part_bytes, data_v)
            scale_states("KS", "VS_AW", 0, scales.k)
            scale_states("VS", "IDLE", layout.part_bytes, scales.v)
        m.d.comb += writes_idle.eq((outstanding == 0) & ~pending)
        return ~pending

    # ------------------------------------------------------------------------------------
    def _reader(self, m, axi, start, header, *, parts: tuple[bool, ...], name: str):
        """Burst address generator and read-data FIFOs for the given parts of the pages.

        ``parts`` lists the page parts this port reads, in order (``False`` = K, ``True`` = V):
        one part per port with two ports; both with one port, which reads a page's K part,
        then its V part, then the next page. A queue of burst destinations routes the R beats
        (AXI returns the bursts of one ID in order). Returns one FIFO per part and a signal
        that is high while bursts of the current request remain to be issued.
        """
        p = self.params
        beat_bytes = p.beat_bytes
        layout = p.layout
        fifos = []
        for value in parts:
            m.submodules[f"{name}_{'v' if value else 'k'}_data"] = data_fifo = (
                fifo.SyncFIFOBuffered(width=p.mem_data_bits, depth=DATA_FIFO_DEPTH)
            )
            fifos.append(data_fifo)
        active = Signal(name=f"{name}_ar_active")
        page_addr = Signal(p.addr_bits, name=f"{name}_page_addr")
        addr = Signal(p.addr_bits, name=f"{name}_addr")
        part = Signal(range(len(parts)), name=f"{name}_part")
        rows_left = Signal(p.position_bits, name=f"{name}_rows_left")
        span_bits = (p.scale_beats + PAGE_TOKENS * p.row_beats).bit_length()
        span_left = Signal(span_bits, name=f"{name}_span_left")
        outstanding = Signal(range(p.max_outstanding + 1), name=f"{name}_outstanding")
        beat_shift = (beat_bytes - 1).bit_length()
        offsets = [layout.part_bytes if value else 0 for value in parts]

        def page_span(rows):
            page_rows = Mux(rows > PAGE_TOKENS, PAGE_TOKENS, rows)
            return p.scale_beats + page_rows * p.row_beats

        to_boundary = Signal(range(AXI_BOUNDARY // beat_bytes + 1), name=f"{name}_to_boundary")
        m.d.comb += to_boundary.eq((AXI_BOUNDARY - addr[:12]) >> beat_shift)
        beats = Signal(range(p.max_burst_beats + 1), name=f"{name}_beats")
        limit = Mux(span_left < p.max_burst_beats, span_left, p.max_burst_beats)
        m.d.comb += beats.eq(Mux(to_boundary < limit, to_boundary, limit))

        m.d.comb += [
            axi.arid.eq(0),
            axi.arsize.eq(beat_shift),
            axi.arburst.eq(BURST_INCR),
            axi.araddr.eq(addr),
            axi.arlen.eq(beats - 1),
            axi.arvalid.eq(active & (outstanding < p.max_outstanding)),
        ]
        ar_fire = axi.arvalid & axi.arready
        r_last = axi.rvalid & axi.rready & axi.rlast
        m.d.sync += outstanding.eq(outstanding + ar_fire - r_last)
        with m.If(start):
            rows = header.length - header.append
            base = header.base[: p.addr_bits]
            m.d.sync += [
                active.eq(rows != 0),
                rows_left.eq(rows),
                page_addr.eq(base),
                addr.eq(base + offsets[0]),
                part.eq(0),
                span_left.eq(page_span(rows)),
            ]
        with m.Elif(ar_fire):
            m.d.sync += [addr.eq(addr + (beats << beat_shift)), span_left.eq(span_left - beats)]
            with m.If(span_left == beats):
                with m.If(part != len(parts) - 1):
                    # The page's next part: same rows, the part's own offset.
                    m.d.sync += [
                        part.eq(part + 1),
                        addr.eq(page_addr + Array(offsets)[part + 1]),
                        span_left.eq(page_span(rows_left)),
                    ]
                with m.Else():
                    page_rows = Mux(rows_left > PAGE_TOKENS, PAGE_TOKENS, rows_left)
                    remaining = rows_left - page_rows
                    next_page = page_addr + layout.page_bytes
                    m.d.sync += [
                        rows_left.eq(remaining),
                        active.eq(remaining != 0),
                        page_addr.eq(next_page),
                        addr.eq(next_page + offsets[0]),
                        part.eq(0),
                        span_left.eq(page_span(remaining)),
                    ]
        if len(parts) == 1:
            (data_fifo,) = fifos
            m.d.comb += [
                axi.rready.eq(data_fifo.w_rdy),
                data_fifo.w_en.eq(axi.rvalid),
                data_fifo.w_data.eq(axi.rdata),
            ]
        else:
            # One entry per burst in flight: which FIFO its beats go to.
            m.submodules[f"{name}_destinations"] = destinations = fifo.SyncFIFO(
                width=1, depth=p.max_outstanding
            )
            target = destinations.r_data[0]
            room = Mux(target, fifos[1].w_rdy, fifos[0].w_rdy)
            m.d.comb += [
                destinations.w_en.eq(ar_fire),
                destinations.w_data.eq(part),
                axi.rready.eq(destinations.r_rdy & room),
                destinations.r_en.eq(r_last),
            ]
            for index, data_fifo in enumerate(fifos):
                m.d.comb += [
                    data_fifo.w_en.eq(axi.rvalid & axi.rready & (target == index)),
                    data_fifo.w_data.eq(axi.rdata),
                ]
        return fifos, active

    # ------------------------------------------------------------------------------------
    def _sequencer(
        self, m, name, start, start_rows, start_append, data_fifo, new_row, new_scale, gate
    ):
        """Split one side's stream into row beats, each with its row's scale.

        The stored rows (``start_rows`` of them, latched at ``start``) come page by page (scale
        block first) from ``data_fifo``; after them, when ``start_append``, the appended row
        comes from ``new_row``. A row beat moves only while ``gate`` is high. Returns a record
        of signals describing the beat offered this cycle, ``take_row``, and ``free``: high
        when a ``start`` this cycle is allowed (idle, or taking the request's last beat, so
        requests follow each other with no gap).
        """
        p = self.params
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
        available = Mux(injecting, 1, data_fifo.r_rdy)
        take = Signal(name=f"{name}_take")
        is_row = Signal(name=f"{name}_is_row")
        m.d.comb += [
            is_row.eq(injecting | ~in_scales),
            take.eq(active & available & (gate | ~is_row)),
            data_fifo.r_en.eq(take & ~injecting),
        ]
        row_data = Signal(p.mem_data_bits, name=f"{name}_row_data")
        row_scale = Signal(16, name=f"{name}_row_scale")
        last_beat = Signal(name=f"{name}_last_beat")
        last_row = Signal(name=f"{name}_last_row")
        m.d.comb += [
            row_data.eq(
                Mux(injecting, new_row.word_select(beat, p.mem_data_bits), data_fifo.r_data)
            ),
            row_scale.eq(Mux(injecting, new_scale, scale_words.word_select(row_in_page, 16))),
            last_beat.eq(beat == p.row_beats - 1),
            last_row.eq(injecting | (one_left & ~append)),
        ]
        with m.If(start):
            rows = start_rows
            m.d.sync += [
                active.eq(1),
                append.eq(start_append),
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
                            m.d.sync += scales[b].eq(data_fifo.r_data)
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
        take_row = take & is_row
        return {
            "take_row": take_row,
            "free": ~active | (take_row & last_beat & last_row),
            "data": row_data,
            "scale": row_scale,
            "beat": beat,
            "last_beat": last_beat,
            "first_row": first_row,
            "last_row": last_row,
        }

    # ------------------------------------------------------------------------------------
    def _k_side(self, m, kb, cur_bank, q_banks, q_scale_banks, row_fifo, k_results, room):
        """q.k per row for every query, the score, the running max, exp2, and l.

        Request boundaries travel down the pipeline as flags: a request's first row starts
        from the initial max and ``l = 0``, and its last row pushes the final (m, l) of every
        query into ``k_results``. Returns, per query bank, a one-cycle signal that the last
        beat using that bank has left the stages that read it.
        """
        p = self.params
        groups, lanes = p.gqa_group, p.lanes

        def stage(name, value, enable=None):
            """A register following ``value`` (only while ``enable``, when given)."""
            reg = Signal.like(value, name=name)
            if enable is None:
                m.d.sync += reg.eq(value)
            else:
                with m.If(enable):
                    m.d.sync += reg.eq(value)
            return reg

        # KA: the accepted row beat, and each query's chunk for it (read from its bank here, so
        # KB's products start from registers).
        take = kb["take_row"]
        a_valid = stage("ka_valid", take)
        a_data = stage("ka_data", kb["data"], take)
        a_beat = stage("ka_beat", kb["beat"], take)
        a_last_beat = stage("ka_last_beat", kb["last_beat"], take)
        a_scale = stage("ka_scale", kb["scale"], take)
        a_first_row = stage("ka_first_row", kb["first_row"], take)
        a_last_row = stage("ka_last_row", kb["last_row"], take)
        a_bank = stage("ka_bank", cur_bank, take)
        q_chunk_bits = lanes * p.q_bits
        a_chunk = []
        for g in range(groups):
            query = Array(bank[g] for bank in q_banks)[cur_bank]
            a_chunk.append(stage(f"ka_chunk{g}", query.word_select(kb["beat"], q_chunk_bits), take))
        # KB: lanes products per query (the multipliers' output registers).
        b_valid = stage("kb_valid", a_valid)
        b_first = stage("kb_first", a_beat == 0)
        b_last_beat = stage("kb_last_beat", a_last_beat)
        b_scale = stage("kb_scale", a_scale)
        b_first_row = stage("kb_first_row", a_first_row)
        b_last_row = stage("kb_last_row", a_last_row)
        b_bank = stage("kb_bank", a_bank)
        product_bits = p.q_bits + p.kv_bits
        e = p.kv_bits  # element width of K and V
        b_products = []
        for g in range(groups):
            row = []
            for i in range(lanes):
                product = Signal(signed(product_bits), name=f"kb_product{g}_{i}")
                m.d.sync += product.eq(
                    a_chunk[g][i * p.q_bits : (i + 1) * p.q_bits].as_signed()
                    * a_data[i * e : (i + 1) * e].as_signed()
                )
                row.append(product)
            b_products.append(row)
        # KS: the products summed (an adder tree of its own stage).
        s_valid = stage("ks_valid", b_valid)
        s_first = stage("ks_first", b_first)
        s_last_beat = stage("ks_last_beat", b_last_beat)
        s_scale = stage("ks_scale", b_scale)
        s_first_row = stage("ks_first_row", b_first_row)
        s_last_row = stage("ks_last_row", b_last_row)
        s_bank = stage("ks_bank", b_bank)
        partial_bits = p.q_bits + p.kv_bits + (lanes - 1).bit_length()
        s_partial = [Signal(signed(partial_bits), name=f"ks_partial{g}") for g in range(groups)]
        for g in range(groups):
            m.d.sync += s_partial[g].eq(sum(b_products[g]))
        # KC: accumulate the beats of a row into the dot product.
        row_end = s_valid & s_last_beat
        c_valid = stage("kc_valid", row_end)
        c_first_row = stage("kc_first_row", s_first_row)
        c_last_row = stage("kc_last_row", s_last_row)
        c_bank = stage("kc_bank", s_bank)
        dot_acc = [Signal(signed(p.dot_bits), name=f"kc_acc{g}") for g in range(groups)]
        c_dot = [Signal(signed(p.dot_bits), name=f"kc_dot{g}") for g in range(groups)]
        for g in range(groups):
            total = Mux(s_first, s_partial[g], dot_acc[g] + s_partial[g])
            with m.If(s_valid):
                m.d.sync += [dot_acc[g].eq(total), c_dot[g].eq(total)]
        # Beside the accumulation, the row's scale: the mantissa product q_mant * k_mant and
        # the shift amounts of the exponent c_exp + k_exp + score_frac_bits (they depend on
        # the scales alone), so S1 is one multiplication.
        k_mant, k_exp = decode_scale(m, s_scale, "k_scale")
        max_left = 10 + 10 + p.score_frac_bits
        c_mant = [Signal(22, name=f"kc_mant{g}") for g in range(groups)]
        c_left = [Signal(max_left.bit_length(), name=f"kc_left{g}") for g in range(groups)]
        c_right = [Signal(6, name=f"kc_right{g}") for g in range(groups)]
        c_up = [Signal(name=f"kc_up{g}") for g in range(groups)]
        for g in range(groups):
            q_scale = Array(bank[g] for bank in q_scale_banks)[s_bank]
            q_mant, q_exp = decode_scale(m, q_scale, f"q_scale{g}")
            left, right, up = shift_amounts(q_exp + k_exp + p.score_frac_bits, max_left)
            with m.If(row_end):
                m.d.sync += [
                    c_mant[g].eq(q_mant * k_mant),
                    c_left[g].eq(left),
                    c_right[g].eq(right),
                    c_up[g].eq(up),
                ]
        # S1: dot * (q_mant * k_mant). The last read of a query bank happened in KC.
        s1_valid = stage("s1_valid", c_valid)
        s1_first_row = stage("s1_first_row", c_first_row)
        s1_last_row = stage("s1_last_row", c_last_row)
        bank_done = [c_valid & c_last_row & (c_bank == b) for b in range(len(q_banks))]
        s1_product = [Signal(signed(p.dot_bits + 23), name=f"s1_product{g}") for g in range(groups)]
        s1_left = [stage(f"s1_left{g}", c_left[g]) for g in range(groups)]
        s1_right = [stage(f"s1_right{g}", c_right[g]) for g in range(groups)]
        s1_up = [stage(f"s1_up{g}", c_up[g]) for g in range(groups)]
        for g in range(groups):
            m.d.sync += s1_product[g].eq(c_dot[g] * c_mant[g])
        # SH: the product's shifts; S2: their rounding carry and saturation into the score
        # format (:func:`shift_by_split`).
        sh_valid = stage("sh_valid", s1_valid)
        sh_first_row = stage("sh_first_row", s1_first_row)
        sh_last_row = stage("sh_last_row", s1_last_row)
        shifted = [
            shift_by_split(
                m, s1_product[g], s1_left[g], s1_right[g], s1_up[g], p.score_bits, True,
                f"sh_score{g}", 1,
            )
            for g in range(groups)
        ]  # fmt: skip
        s2_valid = stage("s2_valid", sh_valid)
        s2_first_row = stage("s2_first_row", sh_first_row)
        s2_last_row = stage("s2_last_row", sh_last_row)
        scores = [Signal(signed(p.score_bits), name=f"s2_score{g}") for g in range(groups)]
        for g in range(groups):
            m.d.sync += scores[g].eq(shifted[g])
        # S3: the running max, an integer in log2 units, and the exp2 argument s - m; a
        # request's first row compares against the initial max (the golden model's max_start).
        # A score s > m grows it to ceil(s): the row's shift is ceil(s) - m, its exp2 argument
        # s - ceil(s) (the fraction's bits alone), both formed beside the comparison. A
        # request's first row shifts by the most, which clears l and o (the previous
        # request's): no mux to zero them on either side.
        octave = 1 << p.score_frac_bits
        top_shift = (1 << p.shift_bits) - 1
        running_max = [Signal(signed(p.max_bits), name=f"m{g}") for g in range(groups)]
        running_sum = [Signal(p.l_bits, name=f"l{g}") for g in range(groups)]
        exp2_units = []
        exp2_lo = -(1 << (p.exp2.in_width - 1))
        shift_line = []
        new_max = []
        for g in range(groups):
            m.submodules[f"exp2_{g}"] = unit = Exp2(p.exp2)
            exp2_units.append(unit)
            previous = Signal(signed(p.max_bits), name=f"s3_previous_max{g}")
            diff = Signal(signed(p.score_bits + 2), name=f"s3_diff{g}")
            fraction = scores[g][: p.score_frac_bits]
            ceiling = Signal(signed(p.max_bits), name=f"s3_ceil{g}")
            growth = Signal(signed(p.max_bits + 1), name=f"s3_growth{g}")
            grew = Signal(name=f"s3_grew{g}")
            m.d.comb += [
                previous.eq(Mux(s2_first_row, p.max_start, running_max[g])),
                diff.eq(scores[g] - (previous << p.score_frac_bits)),
                ceiling.eq((scores[g] >> p.score_frac_bits) + (fraction != 0)),
                growth.eq(ceiling - previous),
                grew.eq(diff > 0),
                unit.o.ready.eq(1),
            ]
            x = Signal(signed(p.exp2.in_width), name=f"s3_exp2_in{g}")
            shift_reg = Signal(p.shift_bits, name=f"s3_shift{g}")
            max_reg = Signal(signed(p.max_bits), name=f"s3_max{g}")
            with m.If(s2_valid):
                m.d.sync += [
                    x.eq(
                        Mux(
                            grew,
                            Mux(fraction == 0, 0, fraction - octave),
                            Mux(diff < exp2_lo, exp2_lo, diff),
                        )
                    ),
                    shift_reg.eq(
                        Mux(
                            s2_first_row | (grew & (growth > top_shift)),
                            top_shift,
                            Mux(grew, growth, 0),
                        )
                    ),
                    running_max[g].eq(Mux(grew, ceiling, previous)),
                    max_reg.eq(Mux(grew, ceiling, previous)),
                ]
            # Delay the shift and the row's max alongside the exp2 pipeline.
            shift_line.append(self._delay(m, shift_reg, unit.LATENCY, f"shift{g}"))
            new_max.append(self._delay(m, max_reg, unit.LATENCY, f"max{g}"))
            s3_valid = Signal(name=f"s3_valid{g}")
            m.d.sync += s3_valid.eq(s2_valid)
            m.d.comb += [unit.i.payload.eq(x), unit.i.valid.eq(s3_valid)]
        latency = exp2_units[0].LATENCY
        s3_last_row = stage("s3_last_row", s2_last_row, s2_valid)
        last_row = self._delay(m, s3_last_row, latency, "last_row")
        # S4: p = exp2(s - m) and l <- round(l * 2**-shift) + p; push the row's shift and p of
        # every query, and at a request's last row its final (m, l).
        push = exp2_units[0].o.valid
        entry = []
        stats = []
        for g in range(groups):
            prob = exp2_units[g].o.payload
            new_sum = Signal(p.l_bits, name=f"s4_l{g}")
            rescaled = rounded(shift_halves(running_sum[g], shift_line[g]))
            m.d.comb += new_sum.eq(rescaled + prob)
            with m.If(push):
                m.d.sync += running_sum[g].eq(new_sum)
            entry += [shift_line[g], prob[: p.prob_frac_bits + 1]]
            stats.append(Cat(new_max[g], new_sum))
        m.d.comb += [
            row_fifo.w_en.eq(push),
            row_fifo.w_data.eq(Cat(*entry)),
            k_results.w_en.eq(push & last_row),
            k_results.w_data.eq(Cat(*stats)),
        ]
        # Rows in flight between a take and its push, at most one per cycle; one more since
        # room is registered (the FIFO's level is a cycle old when the sequencer reads it).
        in_flight = 11 + latency
        m.d.sync += room.eq(row_fifo.level < ROW_FIFO_DEPTH - in_flight)
        return bank_done

    @staticmethod
    def _delay(m, value, cycles: int, name: str):
        """``value`` delayed by ``cycles`` registers (the fixed exp2 latency: it never stalls)."""
        line = value
        for stage in range(cycles):
            delayed = Signal.like(value, name=f"{name}_d{stage}")
            m.d.sync += delayed.eq(line)
            line = delayed
        return line

    # ------------------------------------------------------------------------------------
    def _v_side(self, m, vb, v_tag, row_fifo, accumulators, gate, snapshot, snap_valid, snap_tag):
        """w = p * v_scale per row and query; o <- round(o * 2**-shift) + w * v per element.

        A request's first row starts from ``o = 0`` (its shift, the largest, clears the ring).
        The cycle after its last update the accumulators are copied into ``snapshot`` (with the
        request's ``v_tag``) for the output, so the next request's rows can follow at once. A
        request's last beat is only taken (``gate``) while the snapshot is free and no copy into
        it is under way.
        """
        p = self.params
        groups = p.gqa_group
        word = p.prob_frac_bits + 1
        # Stages: vd (the row's scale, decoded, and its row-FIFO entry), vw (the row's
        # weights' products and exponents, the beat's data), vs (the weights' shifts), va
        # (their rounding and saturation; the update's products) and, where a row is two beats
        # or more, vb (the update's sum). A request's last beat in any keeps the snapshot busy.
        vd_valid = Signal(name="vd_valid")
        vd_end = Signal(name="vd_end")
        vw_valid = Signal(name="vw_valid")
        vw_end = Signal(name="vw_end")
        tail_busy = Signal(name="v_tail_busy")  # the last update's stage holds a request's end
        vs_valid = Signal(name="vs_valid")
        vs_end = Signal(name="vs_end")
        va_valid = Signal(name="va_valid")
        va_end = Signal(name="va_end")
        snap_copy = Signal(name="snap_copy")
        snap_busy = Signal(name="snap_busy")
        m.d.comb += [
            snap_busy.eq(
                snap_valid
                | snap_copy
                | tail_busy
                | (va_valid & va_end)
                | (vs_valid & vs_end)
                | (vw_valid & vw_end)
                | (vd_valid & vd_end)
            ),
            gate.eq(
                ((vb["beat"] != 0) | row_fifo.r_rdy)
                & ~(vb["last_beat"] & vb["last_row"] & snap_busy)
                # A request's first beat never follows the previous request's last one on the
                # next cycle: with the update over two stages, the ring then stays still while
                # the last update lands and the copy reads it.
                & ~(vb["first_row"] & (vb["beat"] == 0) & vd_valid & vd_end)
            ),
        ]
        first = vb["take_row"] & (vb["beat"] == 0)
        m.d.comb += row_fifo.r_en.eq(first)
        v_mant, v_exp = decode_scale(m, vb["scale"], "v_scale")
        # vd registers the decoded scale (out of the sequencer's mux of a page's 32 scales)
        # and the row's FIFO entry; w = p * v_scale's product and shift amounts are
        # registered in vw, the shift, rounding and saturation in vs and va (tandem synth's
        # timing estimate found each of these cuts on the engine's longest path).
        vd_first = Signal(name="vd_first")
        vd_mant = Signal.like(v_mant, name="vd_mant")
        vd_exp = Signal.like(v_exp, name="vd_exp")
        vd_entry = Signal(len(row_fifo.r_data), name="vd_entry")
        m.d.sync += vd_first.eq(first)
        with m.If(first):
            m.d.sync += [vd_mant.eq(v_mant), vd_exp.eq(v_exp), vd_entry.eq(row_fifo.r_data)]
        products = [Signal(word + 11, name=f"vw_product{g}") for g in range(groups)]
        max_left = 5 + p.w_frac_bits
        vw_left = Signal(max_left.bit_length(), name="vw_left")
        vw_right = Signal(6, name="vw_right")
        vw_up = Signal(name="vw_up")
        vw_shifts = [Signal(p.shift_bits, name=f"vw_shift{g}") for g in range(groups)]
        weights = [Signal(p.weight_bits, name=f"va_w{g}") for g in range(groups)]
        shifts = [Signal(p.shift_bits, name=f"va_shift{g}") for g in range(groups)]
        entry_bits = p.shift_bits + word
        with m.If(vd_first):
            total = vd_exp + (p.w_frac_bits - p.prob_frac_bits)
            m.d.sync += [
                x.eq(y) for x, y in zip((vw_left, vw_right, vw_up), shift_amounts(total, max_left))
            ]
            for g in range(groups):
                entry = vd_entry.word_select(g, entry_bits)
                shift, prob = entry[: p.shift_bits], entry[p.shift_bits :]
                m.d.sync += [vw_shifts[g].eq(shift), products[g].eq(prob * vd_mant)]
        vw_first = Signal(name="vw_first")
        m.d.sync += vw_first.eq(vd_first)
        # vs: the weights' shifts; va: their rounding carry and saturation.
        vs_first = Signal(name="vs_first")
        m.d.sync += vs_first.eq(vw_first)
        vs_shifts = [Signal(p.shift_bits, name=f"vs_shift{g}") for g in range(groups)]
        shifted = []
        with m.If(vw_first):
            m.d.sync += [vs_shifts[g].eq(vw_shifts[g]) for g in range(groups)]
        for g in range(groups):
            shifted.append(
                shift_by_split(
                    m, products[g], vw_left, vw_right, vw_up, p.weight_bits, False,
                    f"vs_w{g}", vw_first,
                )
            )  # fmt: skip
        with m.If(vs_first):
            for g in range(groups):
                m.d.sync += [shifts[g].eq(vs_shifts[g]), weights[g].eq(shifted[g])]
        # The row beat travels beside the weights' four stages (vd, vw, vs, va): its data, the
        # request's end and the tag, registered while the stage before holds a beat. (A
        # request's first row needs no flag: its shift clears the ring's old values.)
        beat = {"data": vb["data"], "end": vb["last_beat"] & vb["last_row"], "tag": v_tag}
        for prefix, valid, taken, end in (
            ("vd", vd_valid, vb["take_row"], vd_end),
            ("vw", vw_valid, vd_valid, vw_end),
            ("vs", vs_valid, vw_valid, vs_end),
            ("va", va_valid, vs_valid, va_end),
        ):
            held = {
                "data": Signal(p.mem_data_bits, name=f"{prefix}_data"),
                "end": end,
                "tag": Signal(33, name=f"{prefix}_tag"),
            }
            m.d.sync += valid.eq(taken)
            with m.If(taken):
                m.d.sync += [held[key].eq(beat[key]) for key in ("data", "end", "tag")]
            beat = held
        update = self._update_in_one if p.row_beats == 1 else self._update_in_two
        end_valid, end, end_tag = update(
            m,
            accumulators,
            va_valid,
            beat["data"],
            va_end,
            beat["tag"],
            shifts,
            weights,
        )
        # The copy happens the cycle after the last update; the next request's first update is
        # at the earliest on that same edge (the gate keeps a cycle between a request's last
        # beat and the next one's first), and reads nothing of the old ring.
        copy_tag = Signal(33, name="snap_copy_tag")
        m.d.sync += snap_copy.eq(end_valid & end)
        with m.If(end_valid & end):
            m.d.sync += copy_tag.eq(end_tag)
        with m.If(snap_copy):
            m.d.sync += [snap_valid.eq(1), snap_tag.eq(copy_tag)]
            for g in range(groups):
                for i in range(p.row_elems):
                    m.d.sync += snapshot[g][i].eq(accumulators[g][i])
        m.d.comb += tail_busy.eq(end_valid & end)

    def _update_in_one(self, m, accumulators, valid, data_, end, tag, shifts, weights):
        """``o <- round(o * 2**-shift) + w * v`` in one cycle (a row of one beat updates the
        same elements every cycle). Returns the last update's (valid, end, tag)."""
        p = self.params
        lanes = p.lanes
        with m.If(valid):
            for g, ring in enumerate(accumulators):
                for i in range(lanes):
                    updated = rounded(shift_halves(ring[i], shifts[g])) + (
                        weights[g] * data_.word_select(i, p.kv_bits).as_signed()
                    )
                    m.d.sync += ring[len(ring) - lanes + i].eq(updated)
                for j in range(len(ring) - lanes):
                    m.d.sync += ring[j].eq(ring[j + lanes])
        return valid, end, tag

    def _update_in_two(self, m, accumulators, valid, data_, end, tag, shifts, weights):
        """``o <- round(o * 2**-shift) + w * v`` over two stages: VA shifts the head (the floor
        and the rounding bit of :func:`shift_halves`), forms the products w * v and rotates
        the ring (its head to the tail, unchanged), VB adds them and writes the sum where the
        element sits after this cycle's rotation, one beat further when VA rotates again. An
        element comes back to the head ``row_beats >= 2`` beats after its update, so VB's write
        is there before VA reads it. Returns VB's (valid, end, tag)."""
        p = self.params
        lanes = p.lanes
        vb_valid = Signal(name="vb_valid")
        vb_end = Signal(name="vb_end")
        vb_tag = Signal(33, name="vb_tag")
        m.d.sync += vb_valid.eq(valid)
        with m.If(valid):
            m.d.sync += [vb_end.eq(end), vb_tag.eq(tag)]
        for g, ring in enumerate(accumulators):
            size = len(ring)
            scaled = [Signal(signed(p.o_bits + 1), name=f"vb_scaled{g}_{i}") for i in range(lanes)]
            added = [Signal(signed(p.o_bits), name=f"vb_wv{g}_{i}") for i in range(lanes)]
            with m.If(valid):
                for i in range(lanes):
                    m.d.sync += [
                        scaled[i].eq(shift_halves(ring[i], shifts[g])),
                        added[i].eq(weights[g] * data_.word_select(i, p.kv_bits).as_signed()),
                    ]
                for j in range(size):
                    m.d.sync += ring[j].eq(ring[(j + lanes) % size])
            with m.If(vb_valid):
                for i in range(lanes):
                    updated = rounded(scaled[i]) + added[i]
                    with m.If(valid):
                        m.d.sync += ring[size - 2 * lanes + i].eq(updated)
                    with m.Else():
                        m.d.sync += ring[size - lanes + i].eq(updated)
        return vb_valid, vb_end, vb_tag

    # ------------------------------------------------------------------------------------
    def _output_stages(self, m) -> dict:
        """PRE, SH, MUL and the result register. Returns PRE's registers and ``free`` (PRE may
        take a beat this cycle)."""
        p = self.params
        result = self.result_o
        lanes = p.lanes
        recip_bits = p.reciprocal.out_bits

        def stage(name):
            return {
                "valid": Signal(name=f"{name}_valid"),
                "raw": Signal(name=f"{name}_raw"),  # partial mode's o, or m and l: as they are
                "tag": Signal(32, name=f"{name}_tag"),
                "last": Signal(name=f"{name}_last"),
                "words": [Signal(signed(p.o_bits), name=f"{name}_word{i}") for i in range(lanes)],
            }

        pre, sh, mul = stage("pre"), stage("sh"), stage("mul")
        pre["shift"] = Signal(range(p.position_bits + 1), name="pre_shift")
        pre["recip"] = Signal(recip_bits, name="pre_recip")
        pre["free"] = Signal(name="pre_free")
        sh_recip = Signal(recip_bits, name="sh_recip")
        operand = signed(p.out_operand_bits)
        products = [
            Signal(signed(p.out_operand_bits + recip_bits + 1), name=f"mul_product{i}")
            for i in range(lanes)
        ]
        advance = ~result.valid | result.ready
        m.d.comb += pre["free"].eq(~pre["valid"] | advance)
        words = []
        for i in range(lanes):
            y = round_shift_right(products[i], p.out_product_shift)
            words.append(
                self._word(m, Mux(mul["raw"], mul["words"][i], saturate(y, signed(p.out_bits))))
            )
        with m.If(advance):
            for src, dst in ((pre, sh), (sh, mul)):
                m.d.sync += [dst[key].eq(src[key]) for key in ("valid", "raw", "tag", "last")]
            for i in range(lanes):
                # A floor shift: o' keeps OUT_GUARD_BITS of o / l below y's LSB. Its least
                # amount is a constant, so the shifter takes position_bits + 1 amounts.
                least = pre["words"][i] >> p.out_o_shift_min
                scaled = saturate(least >> pre["shift"], operand)
                m.d.sync += [
                    sh["words"][i].eq(Mux(pre["raw"], pre["words"][i], scaled)),
                    mul["words"][i].eq(sh["words"][i]),
                    products[i].eq(sh["words"][i][: p.out_operand_bits].as_signed() * sh_recip),
                ]
            m.d.sync += [
                sh_recip.eq(pre["recip"]),
                result.valid.eq(mul["valid"]),
                result.payload.tag.eq(mul["tag"]),
                result.payload.last.eq(mul["last"]),
                result.payload.data.eq(Cat(*words)),
                pre["valid"].eq(0),  # unless the sequencer loads PRE this cycle (later wins)
            ]
        return pre

    def _output(
        self,
        m,
        snapshot,
        running_max,
        running_sum,
        recips,
        o_shifts,
        seq_id,
        partial,
        out_query,
        out_chunk,
        pre,
    ):
        """Issue the result beats of the finished request into PRE, reading each beat's chunk
        of the snapshot through one mux (a rotating snapshot cost a LUT per bit for its
        second source, 10.6k LUTs in the default engine). Returns the signal that the
        request's last beat is issued this cycle."""
        p = self.params
        groups, lanes = p.gqa_group, p.lanes
        load = pre["free"]
        per_query = Mux(partial, p.row_beats + 1, p.row_beats)
        last = (out_query == groups - 1) & (out_chunk == per_query - 1)
        out_done = load & last
        chunks = Array(
            Array(Cat(*acc[c * lanes : (c + 1) * lanes]) for c in range(p.row_beats))
            for acc in snapshot
        )
        head = chunks[out_query][out_chunk]  # the stats beat's chunk index is past the end
        words = []
        for i in range(lanes):
            o = head[i * p.o_bits : (i + 1) * p.o_bits].as_signed()
            # Elements past head_dim (padding of 32-wide heads) leave as zero.
            in_head = out_chunk * lanes + i < p.head_dim
            words.append(Mux(in_head, o, 0))
        # Partial mode's extra beat per query: m in word 0 (in the score format), l in word 1.
        m_score = Array(running_max)[out_query] << p.score_frac_bits
        stats = [m_score, Array(running_sum)[out_query]]
        with m.If(load):
            m.d.sync += [pre["valid"].eq(1), pre["tag"].eq(seq_id), pre["last"].eq(last)]
            m.d.sync += [
                pre["shift"].eq(Array(o_shifts)[out_query]),
                pre["recip"].eq(Array(recips)[out_query]),
            ]
            with m.If(out_chunk < p.row_beats):
                m.d.sync += pre["raw"].eq(partial)
                m.d.sync += [reg.eq(w) for reg, w in zip(pre["words"], words, strict=True)]
            with m.Else():
                m.d.sync += pre["raw"].eq(1)
                m.d.sync += [reg.eq(0) for reg in pre["words"][len(stats) :]]
                m.d.sync += [reg.eq(v) for reg, v in zip(pre["words"], stats, strict=False)]
            with m.If(out_chunk == per_query - 1):
                m.d.sync += [out_chunk.eq(0), out_query.eq(out_query + 1)]
            with m.Else():
                m.d.sync += out_chunk.eq(out_chunk + 1)
        return out_done

    def _word(self, m, value):
        """``value`` sign- or zero-extended (by its own signedness) to one result word."""
        word = Signal(signed(self.params.word_bits))
        m.d.comb += word.eq(value)
        return word
