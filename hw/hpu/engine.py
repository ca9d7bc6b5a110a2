"""``hpu`` gateware: decode attention over a KV cache in device memory.

Number formats and the arithmetic every stage performs: :mod:`tandem.host.hpu` (the golden
model, bit-exact with this file). KV layout and read bursts: :mod:`tandem.mappings.kv_layout`.

Dataflow of one request::

    desc_i ─► parser ─► (pending request) ─► control ─┬─► writer ─► w_axi (new k, v, scales)
                                                      ├─► K reader ─► k_axi ─► K FIFO ─┐
                                                      └─► V reader ─► v_axi ─► V FIFO ─┼─┐
    K FIFO ─► K sequencer ─► q·k (groups × lanes MACs) ─► score ─► max/exp2 ─► l ─► row FIFO │ │
    V FIFO ─► V sequencer ─► w = p·v_scale ─► o = o·alpha + w·v (groups × lanes) ◄──────────┘─┘
    o, l ─► 1/l (reciprocal) ─► o·(1/l) ─► result_o

* The K side never waits for the V side: it runs ahead into the row FIFO (per-row alpha and p
  of every query), and only stops when that FIFO could overflow. The V side consumes one row
  of the FIFO per V row. So both read ports stream at one beat per cycle.
* Each page starts with its scale block; the sequencers keep the 32 scales of the current
  page in a register and hand each row its own.
* The appended token never goes through memory on the read side: after the stored rows the
  sequencers take the new k and v straight from the descriptor, so reads never race the
  writer. Before a request's reads start, the previous request's writes must be acknowledged
  (the next request of the same sequence reads them).
* The running max, and the rescale of ``l`` and ``o``, act per row (``alpha = 1.0`` exactly
  when a row does not grow the max). ``o`` is a ring of ``row_beats`` chunks per query that
  rotates by one chunk per V beat, so every chunk passes the multipliers once per row.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu import HpuParams
from tandem.mappings.kv_layout import AXI_BOUNDARY, BLOCK_BYTES, PAGE_TOKENS

from ..common.axi import BURST_INCR, AxiReadManager, AxiWriteManager
from ..common.exp2 import Exp2
from ..common.fixed import round_shift_right, saturate
from ..common.reciprocal import Reciprocal

__all__ = ["Hpu"]

#: Depth of the per-port read-data FIFOs and of the row FIFO between the K and V sides.
DATA_FIFO_DEPTH = 32
ROW_FIFO_DEPTH = 64


def _clamp(value, limit: int):
    """Clamp a signed value into [-limit, limit]."""
    return Mux(value > limit, limit, Mux(value < -limit, -limit, value))


def scale_shift(product, total, limit_shift: int, bits: int, is_signed: bool):
    """``product * 2**total`` rounded half up and saturated: the golden's ``_scale_product``.

    ``total`` is a signed exponent (at most ``limit_shift``); positive totals shift left after
    clamping the product (which saturates anyway), negative ones round-shift right by at most
    62 like the int64 golden model.
    """
    clamped = _clamp(product, 1 << bits)
    left_amount = Mux(total > 0, total, 0).as_unsigned()[: limit_shift.bit_length()]
    left = clamped << left_amount
    right_amount = Mux(-total > 62, 62, Mux(total < 0, -total, 0)).as_unsigned()[:6]
    right = round_shift_right(product, right_amount)
    shape = signed(bits) if is_signed else unsigned(bits)
    return saturate(Mux(total >= 0, left, right), shape)


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
        Descriptor bytes (:func:`tandem.host.hpu.pack_descriptor`), byte b in bits 8b..8b+7.
    result_o : Out(stream.Signature(result_layout))
        ``data`` (``lanes`` signed words of ``word_bits``), ``tag`` (the sequence id) and
        ``last`` (final beat of a request); beats as :func:`tandem.host.hpu.result_words`.
    k_axi, v_axi : Out(AxiReadManager)
        Read managers for the K and V parts of the pages.
    w_axi : Out(AxiWriteManager)
        Write manager for the appended token.
    """

    LATENCY = None  # depends on the sequence length

    def __init__(self, params: HpuParams):
        if not isinstance(params, HpuParams):
            raise TypeError(f"params must be an HpuParams, not {params!r}")
        self.params = p = params
        self.result_layout = data.StructLayout(
            {
                "data": unsigned(p.lanes * p.word_bits),
                "tag": unsigned(32),
                "last": unsigned(1),
            }
        )
        read = AxiReadManager(addr_bits=p.addr_bits, data_bits=p.mem_data_bits)
        super().__init__(
            {
                "desc_i": In(stream.Signature(unsigned(p.mem_data_bits))),
                "result_o": Out(stream.Signature(self.result_layout)),
                "k_axi": Out(read),
                "v_axi": Out(read),
                "w_axi": Out(AxiWriteManager(addr_bits=p.addr_bits, data_bits=p.mem_data_bits)),
            }
        )

    # ------------------------------------------------------------------------------------
    def elaborate(self, platform):
        p = self.params
        m = Module()
        self.m = m
        groups = p.gqa_group
        beat_bits = p.mem_data_bits
        pos_shape = unsigned(p.position_bits)

        # ---- descriptor parser: fills the pending request while the current one runs ----
        body_beats = 2 * p.row_beats + groups * p.q_beats
        header = [Signal(beat_bits, name=f"hdr{b}") for b in range(p.header_beats)]
        body = [Signal(beat_bits, name=f"body{b}") for b in range(body_beats)]
        pending = Signal()
        beat_index = Signal(range(p.header_beats + body_beats + 1))
        header_flat = Cat(*header)
        append_flag = header_flat[128]
        m.d.comb += self.desc_i.ready.eq(~pending)
        with m.If(self.desc_i.valid & self.desc_i.ready):
            m.d.sync += beat_index.eq(beat_index + 1)
            with m.Switch(beat_index):
                for b in range(p.header_beats):
                    with m.Case(b):
                        m.d.sync += header[b].eq(self.desc_i.payload)
            body_index = Signal(range(body_beats + 2 * p.row_beats + p.header_beats + 1))
            m.d.comb += body_index.eq(
                beat_index - p.header_beats + Mux(append_flag, 0, 2 * p.row_beats)
            )
            with m.If(beat_index >= p.header_beats), m.Switch(body_index):
                for b in range(body_beats):
                    with m.Case(b):
                        m.d.sync += body[b].eq(self.desc_i.payload)
            with m.If((beat_index >= p.header_beats) & (body_index == body_beats - 1)):
                m.d.sync += [pending.eq(1), beat_index.eq(0)]

        # ---- active request (copied from pending at the start) ----
        seq_id = Signal(32)
        length = Signal(pos_shape)
        append = Signal()
        partial = Signal()
        new_k_scale = Signal(16)
        new_v_scale = Signal(16)
        q_scales = [Signal(16, name=f"q_scale{g}") for g in range(groups)]
        new_k = Signal(p.row_elems * 8)
        new_v = Signal(p.row_elems * 8)
        queries = [Signal(p.row_elems * p.q_bits, name=f"q{g}") for g in range(groups)]

        start = Signal()  # one cycle: latch the pending request and start every unit
        row_bytes_flat = Cat(*body)
        m.d.comb += start.eq(0)
        with m.If(start):
            m.d.sync += [
                seq_id.eq(header_flat[0:32]),
                length.eq(header_flat[32:64]),
                append.eq(header_flat[128]),
                partial.eq(header_flat[129]),
                new_k_scale.eq(header_flat[160:176]),
                new_v_scale.eq(header_flat[176:192]),
                new_k.eq(row_bytes_flat[0 : p.row_elems * 8]),
                new_v.eq(row_bytes_flat[p.row_elems * 8 : 2 * p.row_elems * 8]),
                pending.eq(0),
            ]
            q_base = 2 * p.row_elems * 8
            q_width = p.row_elems * p.q_bits
            for g in range(groups):
                m.d.sync += [
                    q_scales[g].eq(header_flat[192 + 16 * g : 208 + 16 * g]),
                    queries[g].eq(
                        row_bytes_flat[q_base + g * q_width : q_base + (g + 1) * q_width]
                    ),
                ]

        # ---- writer: new k row, new v row, and their two scales ----
        writes_idle = self._writer(m, start, header_flat, row_bytes_flat)
        self._append_signal = append
        self._start_rows = (header_flat[32:64] - header_flat[128])[: p.position_bits]

        # ---- readers: they start on the pending request as soon as they are free, so the
        # next request's memory latency hides behind the current request's last rows ----
        read_start = Signal()
        prefetched = Signal()
        k_fifo, k_busy = self._reader(m, self.k_axi, read_start, header_flat, value=False, name="k")
        v_fifo, v_busy = self._reader(m, self.v_axi, read_start, header_flat, value=True, name="v")
        # Reads wait for acknowledged writes: a later request may read the appended token.
        m.d.comb += read_start.eq(pending & ~prefetched & ~k_busy & ~v_busy & writes_idle)
        with m.If(read_start):
            m.d.sync += prefetched.eq(1)

        # ---- K side: sequencer, dot products, scores, online softmax ----
        row_fifo_width = groups * 2 * (p.prob_frac_bits + 1)
        m.submodules.row_fifo = row_fifo = fifo.SyncFIFOBuffered(
            width=row_fifo_width, depth=ROW_FIFO_DEPTH
        )
        running_max = [Signal(signed(p.score_bits), name=f"m{g}") for g in range(groups)]
        running_sum = [Signal(p.l_bits, name=f"l{g}") for g in range(groups)]
        k_room = Signal()
        k_beat = self._sequencer(m, "k", start, k_fifo, new_k, new_k_scale, k_room)
        self._k_side(
            m, start, k_beat, queries, q_scales, running_max, running_sum, row_fifo, k_room
        )

        # ---- V side: weights and accumulators ----
        accumulators = [
            [Signal(signed(p.o_bits), name=f"o{g}_{i}") for i in range(p.row_elems)]
            for g in range(groups)
        ]
        v_ready_gate = Signal()
        v_beat = self._sequencer(m, "v", start, v_fifo, new_v, new_v_scale, v_ready_gate)
        rows_done = self._v_side(m, start, v_beat, row_fifo, accumulators, v_ready_gate)

        # ---- control and output ----
        m.submodules.recip = recip = Reciprocal(p.reciprocal)
        recips = [Signal(p.reciprocal.out_bits, name=f"r{g}") for g in range(groups)]
        feed = Signal(range(groups + 1))
        collected = Signal(range(groups + 1))
        out_query = Signal(range(groups))
        out_chunk = Signal(range(p.row_beats + 1))
        result = self.result_o
        m.d.comb += recip.o.ready.eq(1)

        with m.If(result.ready):
            m.d.sync += result.valid.eq(0)

        with m.FSM(name="control"):
            with m.State("IDLE"):
                with m.If(pending & writes_idle & (prefetched | read_start)):
                    m.d.comb += start.eq(1)
                    m.d.sync += prefetched.eq(0)
                    m.d.sync += [running_max[g].eq(p.score_min) for g in range(groups)]
                    m.d.sync += [running_sum[g].eq(0) for g in range(groups)]
                    m.d.sync += [acc.eq(0) for row in accumulators for acc in row]
                    m.next = "RUN"
            with m.State("RUN"), m.If((rows_done == length) & (length != 0)):
                m.d.sync += [feed.eq(0), collected.eq(0), out_query.eq(0), out_chunk.eq(0)]
                m.next = "RECIP"
            with m.State("RECIP"):
                m.d.comb += [
                    recip.i.valid.eq((feed < groups) & ~partial),
                    recip.i.payload.eq(Array(running_sum)[feed]),
                ]
                with m.If(recip.i.valid & recip.i.ready):
                    m.d.sync += feed.eq(feed + 1)
                with m.If(recip.o.valid):
                    m.d.sync += collected.eq(collected + 1)
                    with m.Switch(collected):
                        for g in range(groups):
                            with m.Case(g):
                                m.d.sync += recips[g].eq(recip.o.payload)
                with m.If(partial | (collected == groups)):
                    m.next = "OUT"
            with m.State("OUT"):
                self._output(
                    m,
                    accumulators,
                    running_max,
                    running_sum,
                    recips,
                    seq_id,
                    partial,
                    out_query,
                    out_chunk,
                )
                with m.If(self._out_done):
                    m.next = "IDLE"
        return m

    # ------------------------------------------------------------------------------------
    def _writer(self, m, start, header_flat, body_flat):
        """Write the appended token: k row, v row (head_dim bytes strobed), then both scales.

        Returns a signal that is high while no write is pending or unacknowledged.
        """
        p = self.params
        axi = self.w_axi
        beat_bytes = p.beat_bytes
        layout = p.layout
        offset = Signal(5, name="w_offset")
        page_base = Signal(p.addr_bits, name="w_page_base")
        data_k = Signal(p.row_elems * 8, name="w_k")
        data_v = Signal(p.row_elems * 8, name="w_v")
        scales = Signal(32, name="w_scales")
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
                sum(1 << j for j in range(beat_bytes) if b * beat_bytes + j < p.head_dim),
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

        with m.FSM(name="writer"):
            with m.State("IDLE"), m.If(start & header_flat[128]):
                position = Signal(p.position_bits, name="w_position")
                m.d.comb += position.eq(header_flat[32:64] - 1)
                m.d.sync += [
                    pending.eq(1),
                    offset.eq(position[:5]),
                    page_base.eq(
                        header_flat[64 : 64 + p.addr_bits] + position[5:] * layout.page_bytes
                    ),
                    data_k.eq(body_flat[0 : p.row_elems * 8]),
                    data_v.eq(body_flat[p.row_elems * 8 : 2 * p.row_elems * 8]),
                    scales.eq(header_flat[160:192]),
                ]
                m.next = "K_AW"
            row_states("K", "V_AW", 0, data_k)
            row_states("V", "KS_AW", layout.part_bytes, data_v)
            scale_states("KS", "VS_AW", 0, scales[0:16])
            scale_states("VS", "IDLE", layout.part_bytes, scales[16:32])
        idle = Signal(name="writes_idle")
        m.d.comb += idle.eq((outstanding == 0) & ~pending)
        return idle

    # ------------------------------------------------------------------------------------
    def _reader(self, m, axi, start, header_flat, *, value: bool, name: str):
        """Burst address generator and read-data FIFO for the K or V parts of the pages."""
        p = self.params
        beat_bytes = p.beat_bytes
        layout = p.layout
        m.submodules[f"{name}_data"] = data_fifo = fifo.SyncFIFOBuffered(
            width=p.mem_data_bits, depth=DATA_FIFO_DEPTH
        )
        active = Signal(name=f"{name}_ar_active")
        page_addr = Signal(p.addr_bits, name=f"{name}_page_addr")
        addr = Signal(p.addr_bits, name=f"{name}_addr")
        rows_left = Signal(p.position_bits, name=f"{name}_rows_left")
        span_bits = (p.scale_beats + PAGE_TOKENS * p.row_beats).bit_length()
        span_left = Signal(span_bits, name=f"{name}_span_left")
        outstanding = Signal(range(p.max_outstanding + 1), name=f"{name}_outstanding")
        beat_shift = (beat_bytes - 1).bit_length()

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
        part = layout.part_bytes if value else 0
        with m.If(start):
            rows = header_flat[32:64] - header_flat[128]
            first = header_flat[64 : 64 + p.addr_bits] + part
            m.d.sync += [
                active.eq(rows != 0),
                rows_left.eq(rows),
                page_addr.eq(first),
                addr.eq(first),
                span_left.eq(page_span(rows)),
            ]
        with m.Elif(ar_fire):
            m.d.sync += [addr.eq(addr + (beats << beat_shift)), span_left.eq(span_left - beats)]
            with m.If(span_left == beats):
                page_rows = Mux(rows_left > PAGE_TOKENS, PAGE_TOKENS, rows_left)
                remaining = rows_left - page_rows
                next_page = page_addr + layout.page_bytes
                m.d.sync += [
                    rows_left.eq(remaining),
                    active.eq(remaining != 0),
                    page_addr.eq(next_page),
                    addr.eq(next_page),
                    span_left.eq(page_span(remaining)),
                ]
        m.d.comb += [
            axi.rready.eq(data_fifo.w_rdy),
            data_fifo.w_en.eq(axi.rvalid),
            data_fifo.w_data.eq(axi.rdata),
        ]
        return data_fifo, active

    # ------------------------------------------------------------------------------------
    def _sequencer(self, m, name, start, data_fifo, new_row, new_scale, gate):
        """Split one side's stream into row beats, each with its row's scale.

        The stored rows come page by page (scale block first) from ``data_fifo``; after them
        the appended row comes from ``new_row``. A beat moves only while ``gate`` is high.
        Returns a record of signals describing the beat offered this cycle and ``take``.
        """
        p = self.params
        beat_bytes = p.beat_bytes
        active = Signal(name=f"{name}_seq_active")
        injecting = Signal(name=f"{name}_injecting")
        rows_left = Signal(p.position_bits, name=f"{name}_seq_rows_left")
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
            last_row.eq(injecting | ((rows_left == 1) & ~self._append_signal)),
        ]
        with m.If(start):
            rows = self._start_rows
            m.d.sync += [
                active.eq(1),
                injecting.eq(rows == 0),
                rows_left.eq(rows),
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
                    m.d.sync += beat.eq(0)
                    with m.If(injecting):
                        m.d.sync += [active.eq(0), injecting.eq(0)]
                    with m.Else():
                        m.d.sync += [rows_left.eq(rows_left - 1), row_in_page.eq(row_in_page + 1)]
                        with m.If((row_in_page == PAGE_TOKENS - 1) | (rows_left == 1)):
                            m.d.sync += [row_in_page.eq(0), scale_index.eq(0)]
                        with m.If(rows_left == 1):
                            m.d.sync += [
                                active.eq(self._append_signal),
                                injecting.eq(self._append_signal),
                            ]
        return {
            "take_row": take & is_row,
            "data": row_data,
            "scale": row_scale,
            "beat": beat,
            "last_beat": last_beat,
            "last_row": last_row,
        }

    # ------------------------------------------------------------------------------------
    def _k_side(self, m, start, kb, queries, q_scales, running_max, running_sum, row_fifo, room):
        """q.k per row for every query, the score, the running max, exp2, and l."""
        p = self.params
        groups, lanes = p.gqa_group, p.lanes
        one = 1 << p.prob_frac_bits

        # KA: the accepted row beat.
        a_valid = Signal(name="ka_valid")
        a_data = Signal(p.mem_data_bits, name="ka_data")
        a_beat = Signal(range(p.row_beats), name="ka_beat")
        a_last_beat = Signal(name="ka_last_beat")
        a_scale = Signal(16, name="ka_scale")
        m.d.sync += a_valid.eq(kb["take_row"])
        with m.If(kb["take_row"]):
            m.d.sync += [
                a_data.eq(kb["data"]),
                a_beat.eq(kb["beat"]),
                a_last_beat.eq(kb["last_beat"]),
                a_scale.eq(kb["scale"]),
            ]
        # KB: lanes products per query, summed.
        b_valid = Signal(name="kb_valid")
        b_first = Signal(name="kb_first")
        b_last_beat = Signal(name="kb_last_beat")
        b_scale = Signal(16, name="kb_scale")
        partial_bits = p.q_bits + 8 + (lanes - 1).bit_length()
        b_partial = [Signal(signed(partial_bits), name=f"kb_partial{g}") for g in range(groups)]
        m.d.sync += [
            b_valid.eq(a_valid),
            b_first.eq(a_beat == 0),
            b_last_beat.eq(a_last_beat),
            b_scale.eq(a_scale),
        ]
        q_chunk_bits = lanes * p.q_bits
        for g in range(groups):
            chunk = queries[g].word_select(a_beat, q_chunk_bits)
            products = [
                chunk[i * p.q_bits : (i + 1) * p.q_bits].as_signed()
                * a_data[i * 8 : (i + 1) * 8].as_signed()
                for i in range(lanes)
            ]
            m.d.sync += b_partial[g].eq(sum(products))
        # KC: accumulate the beats of a row into the dot product.
        c_valid = Signal(name="kc_valid")
        c_scale = Signal(16, name="kc_scale")
        dot_acc = [Signal(signed(p.dot_bits), name=f"kc_acc{g}") for g in range(groups)]
        c_dot = [Signal(signed(p.dot_bits), name=f"kc_dot{g}") for g in range(groups)]
        m.d.sync += [c_valid.eq(b_valid & b_last_beat), c_scale.eq(b_scale)]
        for g in range(groups):
            total = Mux(b_first, b_partial[g], dot_acc[g] + b_partial[g])
            with m.If(b_valid):
                m.d.sync += [dot_acc[g].eq(total), c_dot[g].eq(total)]
        # S1: dot * (c_mant * k_mant), exponent c_exp + k_exp + score_frac_bits.
        k_mant, k_exp = decode_scale(m, c_scale, "k_scale")
        s1_valid = Signal(name="s1_valid")
        m.d.sync += s1_valid.eq(c_valid)
        s1_product = [Signal(signed(p.dot_bits + 23), name=f"s1_product{g}") for g in range(groups)]
        s1_total = [Signal(signed(8), name=f"s1_total{g}") for g in range(groups)]
        for g in range(groups):
            c_mant, c_exp = decode_scale(m, q_scales[g], f"q_scale{g}")
            m.d.sync += [
                s1_product[g].eq(c_dot[g] * (c_mant * k_mant)),
                s1_total[g].eq(c_exp + k_exp + p.score_frac_bits),
            ]
        # S2: shift, round and saturate into the score format.
        s2_valid = Signal(name="s2_valid")
        m.d.sync += s2_valid.eq(s1_valid)
        scores = [Signal(signed(p.score_bits), name=f"s2_score{g}") for g in range(groups)]
        max_left = 10 + 10 + p.score_frac_bits
        for g in range(groups):
            m.d.sync += scores[g].eq(
                scale_shift(s1_product[g], s1_total[g], max_left, p.score_bits, True)
            )
        # S3: running max and the exp2 argument -|s - m|.
        exp2_units = []
        exp2_lo = -(1 << (p.exp2.in_width - 1))
        grew_line = []
        for g in range(groups):
            m.submodules[f"exp2_{g}"] = unit = Exp2(p.exp2)
            exp2_units.append(unit)
            diff = Signal(signed(p.score_bits + 1), name=f"s3_diff{g}")
            magnitude = Signal(signed(p.score_bits + 2), name=f"s3_neg_abs{g}")
            grew = Signal(name=f"s3_grew{g}")
            m.d.comb += [
                diff.eq(scores[g] - running_max[g]),
                magnitude.eq(Mux(diff > 0, -diff, diff)),
                grew.eq(diff > 0),
                unit.o.ready.eq(1),
            ]
            x = Signal(signed(p.exp2.in_width), name=f"s3_exp2_in{g}")
            grew_reg = Signal(name=f"s3_grew_reg{g}")
            with m.If(s2_valid):
                m.d.sync += [
                    x.eq(Mux(magnitude < exp2_lo, exp2_lo, magnitude)),
                    grew_reg.eq(grew),
                ]
                with m.If(grew):
                    m.d.sync += running_max[g].eq(scores[g])
            # Delay "grew" alongside the exp2 pipeline.
            line = grew_reg
            for stage in range(unit.LATENCY):
                delayed = Signal(name=f"grew{g}_d{stage}")
                m.d.sync += delayed.eq(line)
                line = delayed
            grew_line.append(line)
            s3_valid = Signal(name=f"s3_valid{g}")
            m.d.sync += s3_valid.eq(s2_valid)
            m.d.comb += [unit.i.payload.eq(x), unit.i.valid.eq(s3_valid)]
        # S4: alpha, p, l; push the row's alpha and p of every query.
        push = exp2_units[0].o.valid
        entry = []
        for g in range(groups):
            e = exp2_units[g].o.payload
            alpha = Mux(grew_line[g], e, one)
            prob = Mux(grew_line[g], one, e)
            with m.If(push):
                m.d.sync += running_sum[g].eq(
                    round_shift_right(running_sum[g] * alpha, p.prob_frac_bits) + prob
                )
            entry += [alpha[: p.prob_frac_bits + 1], prob[: p.prob_frac_bits + 1]]
        m.d.comb += [row_fifo.w_en.eq(push), row_fifo.w_data.eq(Cat(*entry))]
        # Rows in flight between a take and its push, at most one per cycle.
        in_flight = 8 + exp2_units[0].LATENCY
        m.d.comb += room.eq(row_fifo.level < ROW_FIFO_DEPTH - in_flight)

    # ------------------------------------------------------------------------------------
    def _v_side(self, m, start, vb, row_fifo, accumulators, gate):
        """w = p * v_scale per row and query; o <- round(o * alpha) + w * v per element."""
        p = self.params
        groups, lanes = p.gqa_group, p.lanes
        word = p.prob_frac_bits + 1
        m.d.comb += gate.eq((vb["beat"] != 0) | row_fifo.r_rdy)
        first = vb["take_row"] & (vb["beat"] == 0)
        m.d.comb += row_fifo.r_en.eq(first)
        v_mant, v_exp = decode_scale(m, vb["scale"], "v_scale")
        weights = [Signal(p.weight_bits, name=f"va_w{g}") for g in range(groups)]
        alphas = [Signal(word, name=f"va_alpha{g}") for g in range(groups)]
        max_left = 5 + p.weight_frac_bits
        with m.If(first):
            for g in range(groups):
                alpha = row_fifo.r_data[(2 * g) * word : (2 * g + 1) * word]
                prob = row_fifo.r_data[(2 * g + 1) * word : (2 * g + 2) * word]
                m.d.sync += [
                    alphas[g].eq(alpha),
                    weights[g].eq(
                        scale_shift(
                            prob * v_mant,
                            v_exp + (p.weight_frac_bits - p.prob_frac_bits),
                            max_left,
                            p.weight_bits,
                            False,
                        )
                    ),
                ]
        va_valid = Signal(name="va_valid")
        va_data = Signal(p.mem_data_bits, name="va_data")
        va_last_beat = Signal(name="va_last_beat")
        m.d.sync += va_valid.eq(vb["take_row"])
        with m.If(vb["take_row"]):
            m.d.sync += [va_data.eq(vb["data"]), va_last_beat.eq(vb["last_beat"])]
        rows_done = Signal(p.position_bits, name="rows_done")
        with m.If(start):
            m.d.sync += rows_done.eq(0)
        with m.Elif(va_valid & va_last_beat):
            m.d.sync += rows_done.eq(rows_done + 1)
        with m.If(va_valid):
            for g in range(groups):
                ring = accumulators[g]
                for i in range(lanes):
                    head = ring[i]
                    updated = round_shift_right(head * alphas[g], p.prob_frac_bits) + (
                        weights[g] * va_data[i * 8 : (i + 1) * 8].as_signed()
                    )
                    m.d.sync += ring[len(ring) - lanes + i].eq(updated)
                for j in range(len(ring) - lanes):
                    m.d.sync += ring[j].eq(ring[j + lanes])
        return rows_done

    # ------------------------------------------------------------------------------------
    def _output(
        self,
        m,
        accumulators,
        running_max,
        running_sum,
        recips,
        seq_id,
        partial,
        out_query,
        out_chunk,
    ):
        """Emit the result beats of the finished request; rotates each ring as it goes."""
        p = self.params
        groups, lanes = p.gqa_group, p.lanes
        result = self.result_o
        load = ~result.valid | result.ready
        per_query = Mux(partial, p.row_beats + 1, p.row_beats)
        last = (out_query == groups - 1) & (out_chunk == per_query - 1)
        self._out_done = load & last
        heads = Array(Cat(*acc[:lanes]) for acc in accumulators)
        head = heads[out_query]
        r = Array(recips)[out_query]
        words = []
        for i in range(lanes):
            o = head[i * p.o_bits : (i + 1) * p.o_bits].as_signed()
            y = saturate(round_shift_right(o * r, p.out_shift), signed(p.out_bits))
            # Elements past head_dim (padding of 32-wide heads) leave as zero.
            in_head = out_chunk * lanes + i < p.head_dim
            words.append(Mux(in_head, Mux(partial, o, y), 0))
        # Partial mode's extra beat per query: m in word 0, l in word 1.
        stats = [Array(running_max)[out_query], Array(running_sum)[out_query]]
        with m.If(load):
            m.d.sync += [
                result.valid.eq(1),
                result.payload.tag.eq(seq_id),
                result.payload.last.eq(last),
            ]
            with m.If(out_chunk < p.row_beats):
                m.d.sync += result.payload.data.eq(Cat(*[self._word(w) for w in words]))
                with m.Switch(out_query):
                    for g in range(groups):
                        with m.Case(g):
                            ring = accumulators[g]
                            for j in range(len(ring)):
                                m.d.sync += ring[j].eq(ring[(j + lanes) % len(ring)])
            with m.Else():
                m.d.sync += result.payload.data.eq(Cat(*[self._word(v) for v in stats]))
            with m.If(out_chunk == per_query - 1):
                m.d.sync += [out_chunk.eq(0), out_query.eq(out_query + 1)]
            with m.Else():
                m.d.sync += out_chunk.eq(out_chunk + 1)

    def _word(self, value):
        """``value`` sign- or zero-extended (by its own signedness) to one result word."""
        word = Signal(signed(self.params.word_bits))
        self.m.d.comb += word.eq(value)
        return word
