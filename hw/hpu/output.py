"""``hpu`` output: each finished request's ``o / l`` per query, in result beats."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu.codec import result_layout

from ..common.fixed import round_shift_right, saturate
from ..common.reciprocal import leading_one
from .beats import TAG_BITS, checked, normalized_layout

__all__ = ["Output"]


class Output(wiring.Component):
    """Emits the V side's snapshot of a finished request as result beats, query by query.

    With ``l = m * 2**e`` and the normalizer's ``1/m``, each element leaves as
    ``y = round(o' * (1/m))`` with ``o' = o >> (e + const)`` clamped to one DSP48E2 operand
    (``out_operand_bits``): one multiplier per lane. In partial mode ``o`` leaves as it is,
    with an extra beat per query holding m (in the score format) and l. Four stages: PRE holds
    a beat's words of ``o`` (or its raw words), SH their ``o'``, MUL the products ``o' * (1/m)``,
    the result register their rounding and saturation. All move when the result register is
    free, so backpressure on ``result_o`` stalls them together.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    snapshot : In(signed(o_bits)).array(gqa_group, row_elems)
    snapshot_valid : In(1)
    snapshot_tag : In(TAG_BITS)
        The V side's finished request: ``o`` per query, its sequence id and partial flag.
    i : In(stream.Signature(:func:`.beats.normalized_layout`))
        The same request's (m, l) and reciprocals, from the :class:`~.normalizer.Normalizer`.
    release : Out(1)
        The request's last beat is issued: the snapshot may be overwritten.
    result_o : Out(stream.Signature(:func:`tandem.host.hpu.codec.result_layout`))
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "snapshot": In(signed(p.o_bits)).array(p.gqa_group, p.row_elems),
                "snapshot_valid": In(1),
                "snapshot_tag": In(TAG_BITS),
                "i": In(stream.Signature(normalized_layout(p))),
                "release": Out(1),
                "result_o": Out(stream.Signature(result_layout(p))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        groups = p.gqa_group
        recip_bits = p.reciprocal.out_bits
        snap_valid, snap_tag = self.snapshot_valid, self.snapshot_tag
        snapshot = [[self.snapshot[g][i] for i in range(p.row_elems)] for g in range(groups)]
        recips = [Signal(recip_bits, name=f"r{g}") for g in range(groups)]
        # The shift of o to o' above its least (out_o_shift_min): 0..position_bits.
        o_shifts = [Signal(range(p.position_bits + 1), name=f"o_shift{g}") for g in range(groups)]
        out_max = [Signal(signed(p.max_bits), name=f"out_m{g}") for g in range(groups)]
        out_sum = [Signal(p.l_bits, name=f"out_l{g}") for g in range(groups)]
        out_query = Signal(range(groups))
        out_chunk = Signal(range(p.row_beats + 1))
        partial = snap_tag[32]

        # The output is four stages: PRE holds a beat's words of o (or its raw words), SH their
        # o' = o >> shift, clamped into one multiplier operand, MUL the products o' * (1/m),
        # the result register their rounding and saturation. All move when the result
        # register is free, so backpressure stalls them together.
        pre = self._output_stages(m)

        with m.FSM(name="control"):
            with m.State("IDLE"):
                with m.If(snap_valid & self.i.valid):
                    m.d.comb += self.i.ready.eq(1)
                    for g in range(groups):
                        stats = self.i.payload.stats[g].as_value()
                        # o' = o >> (l's exponent + offset): the exponent 1/m leaves out. (A
                        # cycle of its own made short requests wait on the output.)
                        msb = leading_one(m, stats[p.max_bits :], name=f"l_msb{g}")
                        o_shift = msb - (p.prob_frac_bits - 1)
                        m.d.sync += [
                            out_max[g].eq(stats[: p.max_bits]),
                            out_sum[g].eq(stats[p.max_bits :]),
                            recips[g].eq(self.i.payload.recips[g]),
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
                m.d.comb += self.release.eq(out_done)
                with m.If(out_done):
                    m.next = "IDLE"
        return m

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
