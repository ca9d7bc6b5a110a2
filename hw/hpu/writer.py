"""``hpu`` writer: the appended token's k and v rows and scales into the KV cache."""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetSignal, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu.codec import header_layout
from tandem.mappings.hpu.kv_layout import AXI_BOUNDARY, BLOCK_BYTES

from ..common.axi import BURST_INCR, RESP_OKAY, AxiWriteManager
from ..common.fixed import constant_product
from .beats import ERROR_FIFO_DEPTH, checked

__all__ = ["Writer"]


class Writer(wiring.Component):
    """Writes the appended token of a request: its k row, its v row (``head_dim`` elements
    strobed, the row's padding left alone), then the two scales into their page's scale block.

    ``start`` hands the writer a descriptor slot's ``header`` and ``body``; it writes only when
    the header's append flag is set (it takes two cycles either way: the flag is registered
    with the slot's fields at ``start``, the state moves on the next cycle, and the flag is
    decided the cycle after, as the page's offset is formed; the page's address follows).

    Every request puts one bit on ``error_o`` once its writes are acknowledged: set when its
    ``base`` is not a multiple of 64 bytes or a write response was not OKAY. A misaligned
    request writes nothing (its rows would land beside the region the host meant, and a row's
    burst could cross 4 KiB); the readers read it rounded down, and the flag voids its result.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    w_axi : Out(AxiWriteManager)
    start : In(1)
        Take ``header`` and ``body`` this cycle (only while ``ready``).
    header : In(:func:`tandem.host.hpu.codec.header_layout`)
    body : In(unsigned(2 * row_elems * kv_bits))
        The new k row, then the new v row.
    ready : Out(1)
        No start is pending: a ``start`` can be taken.
    idle : Out(1)
        No write is pending or unacknowledged.
    error_o : Out(stream.Signature(1))
        Each request's error flag, in request order (up to ``ERROR_FIFO_DEPTH`` held).
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "w_axi": Out(AxiWriteManager(addr_bits=p.addr_bits, data_bits=p.mem_data_bits)),
                "start": In(1),
                "header": In(header_layout(p)),
                "body": In(unsigned(2 * p.row_elems * p.kv_bits)),
                "ready": Out(1),
                "idle": Out(1),
                "error_o": Out(stream.Signature(1)),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        axi = self.w_axi
        beat_bytes = p.beat_bytes
        w = SimpleNamespace()  # the signals the FSM's states share
        w.offset = Signal(5, name="w_offset")
        w.page_base = Signal(p.addr_bits, name="w_page_base")
        w.data_k = Signal(p.row_elems * p.kv_bits, name="w_k")
        w.data_v = Signal(p.row_elems * p.kv_bits, name="w_v")
        row_used_bytes = p.head_dim * p.kv_bits // 8  # the rest of a row is padding
        w.scales = Signal(data.StructLayout({"k": 16, "v": 16}), name="w_scales")
        outstanding = Signal(range(8), name="w_outstanding")
        w.beat = Signal(range(p.row_beats + 1), name="w_beat")
        w.aw_valid = Signal(name="w_aw_valid")
        w.w_valid = Signal(name="w_w_valid")
        m.d.comb += [
            axi.awid.eq(0),
            axi.awsize.eq((beat_bytes - 1).bit_length()),
            axi.awburst.eq(BURST_INCR),
            axi.bready.eq(1),
            # Low while reset is high, as AXI4 asks of a manager (A3.1.2), whatever state the
            # FSM held before it.
            axi.awvalid.eq(w.aw_valid & ~ResetSignal("sync")),
            axi.wvalid.eq(w.w_valid & ~ResetSignal("sync")),
        ]
        aw_fire = axi.awvalid & axi.awready
        b_fire = axi.bvalid & axi.bready
        m.d.sync += outstanding.eq(outstanding + aw_fire - b_fire)
        w.failed, w.due = self._error_flags(m, outstanding, b_fire)
        w.row_strobes = Array(
            Const(
                sum(1 << j for j in range(beat_bytes) if b * beat_bytes + j < row_used_bytes),
                beat_bytes,
            )
            for b in range(p.row_beats)
        )
        scale_byte = Signal(range(BLOCK_BYTES), name="w_scale_byte")
        m.d.comb += scale_byte.eq(w.offset * 2)
        w.in_beat = Signal(range(beat_bytes), name="w_scale_lane")
        m.d.comb += w.in_beat.eq(scale_byte % beat_bytes)
        w.scale_beat_addr = w.page_base + (scale_byte - w.in_beat)
        # The K row's address is registered with the page's base (from the same registered
        # operands), so each burst's length comes from a register: from the page's base
        # through the address adders into the burst's end was the writer's longest path.
        w.row_offset = Signal(p.addr_bits, name="w_row_offset")
        w.row_addr = Signal(p.addr_bits, name="w_row_addr")
        w.pending = Signal(name="w_pending")
        # A row's beats go out in bursts that end at a 4 KiB boundary (AXI4 A3.4.1): a row
        # wider than a beat can straddle one (128-byte rows, offset 31 of a page at 0: bytes
        # 4032-4159), and at most one, a row being shorter than 4 KiB. ``beat`` counts the
        # row's beats written, ``burst_last`` is the last beat of the burst in flight: the
        # beat before the boundary in the row's first burst, the row's last in its second.
        w.burst_last = Signal(range(p.row_beats), name="w_burst_last")
        # The slot's fields are registered first, the page's offset formed the next cycle and
        # its address the one after (a header mux, a multiply and an add in one cycle was the
        # engine's longest path; the multiplier and the add in one, the writer's).
        w.base = Signal(p.addr_bits, name="w_base")
        w.page = Signal(p.position_bits - 5, name="w_page")
        w.page_offset = Signal(p.addr_bits, name="w_page_offset")
        w.append = Signal(name="w_append")
        with m.FSM(name="writer"):
            self._request_states(m, w)
            self._row_states(m, w, "K", "V_AW", 0, w.data_k)
            self._row_states(m, w, "V", "KS_AW", p.layout.value_shift, w.data_v)
            self._scale_states(m, w, "KS", "VS_AW", 0, w.scales.k)
            self._scale_states(m, w, "VS", "IDLE", p.layout.value_shift, w.scales.v)
        m.d.comb += [self.idle.eq((outstanding == 0) & ~w.pending), self.ready.eq(~w.pending)]
        return m

    def _error_flags(self, m, outstanding, b_fire):
        """The request's flag: set by a misaligned base at its start and by any failed write
        response; it goes out once the request's last write is answered (``due``). The next
        request starts only after its reads, which wait for the writer to be idle: never
        while one is due. Returns the flag and ``due``."""
        axi = self.w_axi
        failed = Signal(name="w_failed")
        due = Signal(name="w_due")
        push = due & (outstanding == 0)
        m.submodules.errors = errors = fifo.SyncFIFO(width=1, depth=ERROR_FIFO_DEPTH)
        m.d.comb += [
            errors.w_en.eq(push),
            errors.w_data.eq(failed),
            self.error_o.valid.eq(errors.r_rdy),
            self.error_o.payload.eq(errors.r_data),
            errors.r_en.eq(self.error_o.ready),
        ]
        with m.If(push):
            m.d.sync += [due.eq(0), failed.eq(0)]
        with m.If(b_fire & (axi.bresp != RESP_OKAY)):
            m.d.sync += failed.eq(1)
        return failed, due

    def _request_states(self, m, w) -> None:
        """IDLE (a start's fields registered), PAGE (the page's and the row's offsets; a
        request without an append ends here) and PAGE_BASE (the page's and the K row's
        addresses)."""
        p = self.params
        header, body = self.header, self.body
        # A start's fields are registered in its cycle; the state follows the cycle after,
        # from pending (the start itself, out of the scheduler's slot muxes, into the
        # state's next-state logic was the engine's longest path). Every request goes
        # through PAGE, which ends one without an append (deciding on the append flag out
        # of the header mux in the start's cycle would put it on that path).
        with m.State("IDLE"):
            with m.If(self.start):
                position = Signal(p.position_bits, name="w_position")
                m.d.comb += position.eq(header.length - 1)
                block_bits = (BLOCK_BYTES - 1).bit_length()
                misaligned = header.base[:block_bits].any()
                m.d.sync += [
                    w.pending.eq(1),
                    w.failed.eq(misaligned),
                    w.offset.eq(position[:5]),
                    w.base.eq(Cat(Const(0, block_bits), header.base[block_bits : p.addr_bits])),
                    w.page.eq(position[5:]),
                    w.data_k.eq(body[0 : p.row_elems * p.kv_bits]),
                    w.data_v.eq(body[p.row_elems * p.kv_bits : 2 * p.row_elems * p.kv_bits]),
                    w.scales.k.eq(header.new_k_scale),
                    w.scales.v.eq(header.new_v_scale),
                    w.append.eq(header.append & ~misaligned),
                ]
            with m.If(w.pending):
                m.next = "PAGE"
        with m.State("PAGE"):
            m.d.sync += [
                w.page_offset.eq(constant_product(w.page, p.layout.page_stride)),
                w.row_offset.eq(BLOCK_BYTES + constant_product(w.offset, p.layout.row_bytes)),
            ]
            with m.If(w.append):
                m.next = "PAGE_BASE"
            with m.Else():
                m.d.sync += [w.pending.eq(0), w.due.eq(1)]
                m.next = "IDLE"
        with m.State("PAGE_BASE"):
            m.d.sync += [
                w.page_base.eq(w.base + w.page_offset),
                w.row_addr.eq(w.base + w.page_offset + w.row_offset),
                w.beat.eq(0),
            ]
            m.next = "K_AW"

    def _row_states(self, m, w, name, next_state, part, data_row) -> None:
        """``name``_AW and ``name``_W: a row's beats (``data_row``) at ``part`` past the row's
        address, in bursts split at a 4 KiB boundary; then ``next_state``."""
        p = self.params
        axi = self.w_axi
        beat = w.beat
        beat_shift = (p.beat_bytes - 1).bit_length()
        boundary_beats = AXI_BOUNDARY // p.beat_bytes
        with m.State(name + "_AW"):
            burst_end = Signal(range(p.row_beats), name=f"w_{name.lower()}_burst_end")
            m.d.comb += [
                w.aw_valid.eq(1),
                axi.awaddr.eq(w.row_addr + part + (beat << beat_shift)),
                axi.awlen.eq(burst_end - beat),
            ]
            if p.row_beats > 1:
                # Beats from the row's start to the next boundary, 0 for a whole 4 KiB:
                # (-start) mod 4 KiB, the part's offset folded into the constant.
                to_boundary = Signal(range(boundary_beats), name=f"w_{name.lower()}_to_boundary")
                m.d.comb += to_boundary.eq(
                    ((-part) % AXI_BOUNDARY - w.row_addr[:12])[beat_shift:12]
                )
                splits = (to_boundary != 0) & (to_boundary < p.row_beats)
                m.d.comb += burst_end.eq(
                    Mux((beat == 0) & splits, to_boundary - 1, p.row_beats - 1)
                )
            else:
                m.d.comb += burst_end.eq(0)
            with m.If(axi.awready):
                m.d.sync += w.burst_last.eq(burst_end)
                m.next = name + "_W"
        with m.State(name + "_W"):
            m.d.comb += [
                w.w_valid.eq(1),
                axi.wdata.eq(data_row.word_select(beat, p.mem_data_bits)),
                axi.wstrb.eq(w.row_strobes[beat]),
                axi.wlast.eq(beat == w.burst_last),
            ]
            with m.If(axi.wready):
                m.d.sync += beat.eq(beat + 1)
                with m.If(beat == p.row_beats - 1):
                    m.d.sync += beat.eq(0)
                    m.next = next_state
                with m.Elif(beat == w.burst_last):
                    m.next = name + "_AW"

    def _scale_states(self, m, w, name, next_state, part, half) -> None:
        """``name``_AW and ``name``_W: one scale (``half``, two bytes) into its page's scale
        block at ``part`` past the page's base; then ``next_state``."""
        axi = self.w_axi
        with m.State(name + "_AW"):
            m.d.comb += [
                w.aw_valid.eq(1),
                axi.awaddr.eq(w.scale_beat_addr + part),
                axi.awlen.eq(0),
            ]
            with m.If(axi.awready):
                m.next = name + "_W"
        with m.State(name + "_W"):
            m.d.comb += [
                w.w_valid.eq(1),
                axi.wdata.eq(half << (w.in_beat * 8)),
                axi.wstrb.eq(Const(3, self.params.beat_bytes) << w.in_beat),
                axi.wlast.eq(1),
            ]
            with m.If(axi.wready):
                m.next = next_state
                if next_state == "IDLE":
                    m.d.sync += [w.pending.eq(0), w.due.eq(1)]
