"""``hpu`` output: each finished request's ``o / l`` per query, in result beats.

Two components in pipeline order: :class:`ResultIssue` (which beat of the snapshot goes out
next, with its query's shift and reciprocal) and :class:`ResultScale` (``o'`` and the
products, rounded into result words); :class:`Output` connects them.
"""

import itertools

from amaranth.hdl import Array, Cat, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu.codec import result_layout

from ..common.fixed import fabric_product, round_shift_right, saturate
from ..common.reciprocal import leading_one
from .beats import TAG_BITS, checked, normalized_layout

__all__ = ["Output", "ResultIssue", "ResultScale", "issued_beat_layout"]


def issued_beat_layout(params) -> data.StructLayout:
    """A result beat, or with ``out_beat_cycles`` > 1 a part of one, before its division:
    ``out_lanes`` words of ``o`` (or, ``raw``, words that leave as they are: partial mode's
    ``o``, m and l), the request's sequence id, whether the beat is its last, whether its
    request failed in memory, its query's shift of ``o`` and reciprocal ``1/m``, and (in parts)
    which part it is."""
    p = params
    fields = {
        "words": data.ArrayLayout(signed(p.o_bits), p.out_lanes),
        "raw": 1,
        "tag": unsigned(32),
        "last": 1,
        "error": 1,
        "shift": range(p.position_bits + 1),
        "recip": unsigned(p.reciprocal.out_bits),
    }
    if p.out_beat_cycles > 1:
        fields["part"] = range(p.out_beat_cycles)  # which out_lanes words of the beat
    return data.StructLayout(fields)


class Output(wiring.Component):
    """Emits the V side's snapshot of a finished request as result beats, query by query.

    With ``l = m * 2**e`` and the normalizer's ``1/m``, each element leaves as
    ``y = round(o' * (1/m))`` with ``o' = o >> (e + const)`` clamped to one DSP48E2 operand
    (``out_operand_bits``): ``out_lanes`` multipliers, which take ``out_beat_cycles`` cycles a
    beat (one a lane and a cycle by default). In partial mode ``o`` leaves as it is, with an
    extra beat per query holding m (in the score format) and l.

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
    error_i : In(stream.Signature(1))
        The same request's error flag (a memory response other than OKAY, a misaligned base),
        taken with ``i``; every beat of the request carries it.
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
                "error_i": In(stream.Signature(1)),
                "release": Out(1),
                "result_o": Out(stream.Signature(result_layout(p))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        m.submodules.issue = issue = ResultIssue(p)
        m.submodules.scale = scale = ResultScale(p)
        wiring.connect(m, wiring.flipped(self.i), issue.i)
        wiring.connect(m, wiring.flipped(self.error_i), issue.error_i)
        wiring.connect(m, issue.o, scale.i)
        wiring.connect(m, scale.o, wiring.flipped(self.result_o))
        m.d.comb += [
            issue.snapshot_valid.eq(self.snapshot_valid),
            issue.snapshot_tag.eq(self.snapshot_tag),
            self.release.eq(issue.release),
        ]
        for g in range(p.gqa_group):
            for i in range(p.row_elems):
                m.d.comb += issue.snapshot[g][i].eq(self.snapshot[g][i])
        return m


class ResultIssue(wiring.Component):
    """Takes a request's (m, l) and reciprocals once its snapshot is there, then offers its
    beats on ``o``: ``row_beats`` chunks per query (and the (m, l) beat in partial mode),
    each in ``out_beat_cycles`` parts of ``out_lanes`` words, each read from the snapshot
    through one mux (a rotating snapshot cost a LUT per bit for its second source, 10.6k
    LUTs in the default engine). Elements past ``head_dim`` leave as zero. Each query's shift
    of ``o`` is ``o' = o >> (l's exponent + offset)``, the exponent ``1/m`` leaves out, formed
    as the (m, l) are taken (a cycle of its own made short requests wait on the output).

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    snapshot, snapshot_valid, snapshot_tag, i, error_i, release
        As :class:`Output`'s.
    o : Out(stream.Signature(:func:`issued_beat_layout`))
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "snapshot": In(signed(p.o_bits)).array(p.gqa_group, p.row_elems),
                "snapshot_valid": In(1),
                "snapshot_tag": In(TAG_BITS),
                "i": In(stream.Signature(normalized_layout(p))),
                "error_i": In(stream.Signature(1)),
                "release": Out(1),
                "o": Out(stream.Signature(issued_beat_layout(p))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        groups, lanes = p.gqa_group, p.lanes
        recips = [Signal(p.reciprocal.out_bits, name=f"r{g}") for g in range(groups)]
        # The shift of o to o' above its least (out_o_shift_min): 0..position_bits.
        o_shifts = [Signal(range(p.position_bits + 1), name=f"o_shift{g}") for g in range(groups)]
        out_max = [Signal(signed(p.max_bits), name=f"out_m{g}") for g in range(groups)]
        out_sum = [Signal(p.l_bits, name=f"out_l{g}") for g in range(groups)]
        out_query = Signal(range(groups))
        out_chunk = Signal(range(p.row_beats + 1))
        partial = self.snapshot_tag[32]
        per_query = Mux(partial, p.row_beats + 1, p.row_beats)
        last = (out_query == groups - 1) & (out_chunk == per_query - 1)
        # With out_beat_cycles > 1 a beat leaves in parts of out_lanes words, out_part counting
        # them.
        parts, part_lanes = p.out_beat_cycles, p.out_lanes
        out_part = Signal(range(parts), name="out_part") if parts > 1 else None
        if out_part is not None:
            last &= out_part == parts - 1

        # The beat on offer, a register: its chunk of the snapshot, loaded through one mux of
        # every query's chunks in order (a mux per query, then one by query, cost twice the
        # LUTs) as the beat before it leaves; its part is picked after it. (The mux straight
        # into ResultScale, 128 parts in the reference engine, was the engine's longest path.)
        next_beat = Signal(range(groups * p.row_beats + 1), name="out_next_beat")
        beats = Array(
            Cat(*acc[c * lanes : (c + 1) * lanes])
            for acc in self.snapshot
            for c in range(p.row_beats)
        )
        held = Signal(lanes * p.o_bits, name="out_beat")
        head = held if out_part is None else held.word_select(out_part, part_lanes * p.o_bits)
        beat = self.o.payload
        error = Signal(name="out_error")
        fields = [
            beat.tag.eq(self.snapshot_tag[:32]),
            beat.last.eq(last),
            beat.error.eq(error),
            beat.shift.eq(Array(o_shifts)[out_query]),
            beat.recip.eq(Array(recips)[out_query]),
        ]
        first_element = out_chunk * lanes
        if out_part is not None:
            fields.append(beat.part.eq(out_part))
            first_element = first_element + out_part * part_lanes
        with m.If(out_chunk < p.row_beats):
            m.d.comb += beat.raw.eq(partial)
            for i in range(part_lanes):
                o = head[i * p.o_bits : (i + 1) * p.o_bits].as_signed()
                in_head = first_element + i < p.head_dim
                m.d.comb += beat.words[i].eq(Mux(in_head, o, 0))
        with m.Else():
            # Partial mode's extra beat per query: m in word 0 (in the score format), l in
            # word 1 (of its first part).
            m_score = Array(out_max)[out_query] << p.score_frac_bits
            stats = [m_score, Array(out_sum)[out_query]]
            if out_part is not None:
                stats = [Mux(out_part == 0, v, 0) for v in stats]
            m.d.comb += beat.raw.eq(1)
            m.d.comb += [beat.words[i].eq(v) for i, v in enumerate(stats)]

        with m.FSM(name="control"):
            with m.State("IDLE"):
                with m.If(self.snapshot_valid & self.i.valid & self.error_i.valid):
                    m.d.comb += [self.i.ready.eq(1), self.error_i.ready.eq(1)]
                    m.d.sync += error.eq(self.error_i.payload)
                    for g in range(groups):
                        stats = self.i.payload.stats[g]
                        # max(msb - (prob_frac_bits - 1), 0) for l's leading one msb: the
                        # leading one of l's bits from prob_frac_bits - 1 up.
                        top = stats.sum[p.prob_frac_bits - 1 :]
                        o_shift = leading_one(m, top, name=f"l_msb{g}")
                        m.d.sync += [
                            out_max[g].eq(stats.max),
                            out_sum[g].eq(stats.sum),
                            recips[g].eq(self.i.payload.recips[g]),
                            o_shifts[g].eq(o_shift),
                        ]
                    m.d.sync += [
                        out_query.eq(0),
                        out_chunk.eq(0),
                        held.eq(beats[0]),
                        next_beat.eq(1),
                    ]
                    if out_part is not None:
                        m.d.sync += out_part.eq(0)
                    m.next = "OUT"
            with m.State("OUT"):
                # The fields are driven here, not outside the FSM: with one query, shift would
                # be a bare copy of o_shift0, which yosys writes as an ``always @*`` that never
                # runs in Icarus while o_shift0 keeps its initial value (the beat read X).
                m.d.comb += [self.o.valid.eq(1), *fields]
                with m.If(self.o.ready):
                    beat_done = out_chunk < p.row_beats
                    if out_part is not None:
                        beat_done &= out_part == parts - 1
                    with m.If(beat_done):
                        m.d.sync += [held.eq(beats[next_beat]), next_beat.eq(next_beat + 1)]

                    def next_chunk():
                        with m.If(out_chunk == per_query - 1):
                            m.d.sync += [out_chunk.eq(0), out_query.eq(out_query + 1)]
                        with m.Else():
                            m.d.sync += out_chunk.eq(out_chunk + 1)

                    if out_part is None:
                        next_chunk()
                    else:
                        m.d.sync += out_part.eq(out_part + 1)
                        with m.If(out_part == parts - 1):
                            m.d.sync += out_part.eq(0)
                            next_chunk()
                    with m.If(last):
                        m.d.comb += self.release.eq(1)
                        m.next = "IDLE"
        return m


class ResultScale(wiring.Component):
    """Four stages (six with fabric multipliers) that move together when the result register
    is free, so backpressure on ``o`` stalls them all: PRE holds an issued beat, SH its
    ``o' = o >> shift`` clamped into one multiplier operand (a floor shift that keeps
    ``OUT_GUARD_BITS`` of ``o / l`` below y's LSB; its least amount is a constant, so the
    shifter takes ``position_bits + 1`` amounts), MUL the products ``o' * (1/m)`` (with fabric
    multipliers X1 and X2 before it, the adder trees' cut registers), the result register
    their rounding and saturation. Raw words pass unchanged. ``recip`` must lie in [1/2, 1)
    (the reciprocal of a mantissa in [1, 2), as the :class:`~.normalizer.Normalizer` gives):
    then an ``o'`` out of the operand's range saturates ``y``, so where it is, ``y`` saturates
    by ``o'``'s sign.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`issued_beat_layout`))
    o : Out(stream.Signature(:func:`tandem.host.hpu.codec.result_layout`))
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(issued_beat_layout(p))),
                "o": Out(stream.Signature(result_layout(p))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        result = self.o
        lanes = p.out_lanes  # the words of a beat's part (of the beat, with one part)
        parts = p.out_beat_cycles
        recip_bits = p.reciprocal.out_bits
        keys = ("valid", "raw", "tag", "last", "error") + (("part",) if parts > 1 else ())

        def stage(name):
            fields = {
                "valid": Signal(name=f"{name}_valid"),
                "raw": Signal(name=f"{name}_raw"),
                "tag": Signal(32, name=f"{name}_tag"),
                "last": Signal(name=f"{name}_last"),
                "error": Signal(name=f"{name}_error"),
                "words": [Signal(signed(p.o_bits), name=f"{name}_word{i}") for i in range(lanes)],
            }
            if parts > 1:
                fields["part"] = Signal(range(parts), name=f"{name}_part")
            return fields

        pre, sh, mul = stage("pre"), stage("sh"), stage("mul")
        # With fabric multipliers, the products' adder trees take two more stages (their cut
        # registers): the beat waits in X1 and X2 beside them.
        fabric = p.scaling_multipliers == "fabric"
        between = [stage("x1"), stage("x2")] if fabric else []
        pre_shift = Signal(range(p.position_bits + 1), name="pre_shift")
        pre_recip = Signal(recip_bits, name="pre_recip")
        sh_recip = Signal(recip_bits, name="sh_recip")
        products = [
            Signal(signed(p.out_operand_bits + recip_bits + 1), name=f"mul_product{i}")
            for i in range(lanes)
        ]
        advance = ~result.valid | result.ready
        m.d.comb += self.i.ready.eq(~pre["valid"] | advance)
        # o' is clamped to one multiplier operand, and a clamped o' saturates y (1/m is at
        # least 1/2): so SH keeps o >> shift whole, MUL multiplies its low bits and notes
        # whether it was out of the operand's range, and the result saturates y by o's sign
        # where it was (the clamp's compare in SH was its longest path).
        out_range = [Signal(name=f"mul_clamped{i}") for i in range(lanes)]
        y_max = (1 << (p.out_bits - 1)) - 1
        words = []
        for i in range(lanes):
            y = saturate(round_shift_right(products[i], p.out_product_shift), signed(p.out_bits))
            clamped = Mux(mul["words"][i] < 0, -y_max - 1, y_max)
            word = Signal(signed(p.word_bits), name=f"result_word{i}")
            m.d.comb += word.eq(Mux(mul["raw"], mul["words"][i], Mux(out_range[i], clamped, y)))
            words.append(word)
        chain = [pre, sh, *between, mul]
        with m.If(advance):
            for src, dst in itertools.pairwise(chain):
                m.d.sync += [dst[key].eq(src[key]) for key in keys]
            for i in range(lanes):
                least = pre["words"][i] >> p.out_o_shift_min
                scaled = sh["words"][i]
                operand = scaled[: p.out_operand_bits].as_signed()
                if fabric:
                    product = fabric_product(m, operand, sh_recip, f"mul_product{i}", 2, advance)
                    for src, dst in itertools.pairwise(chain[1:-1]):
                        m.d.sync += dst["words"][i].eq(src["words"][i])
                else:
                    product = operand * sh_recip
                held = chain[-2]["words"][i]  # o' as the product leaves its last stage
                top = held[p.out_operand_bits - 1 :]  # o' fits the operand: all sign bits
                fits = top.all() | ~top.any()
                m.d.sync += [
                    sh["words"][i].eq(Mux(pre["raw"], pre["words"][i], least >> pre_shift)),
                    mul["words"][i].eq(held),
                    out_range[i].eq(~fits),
                    products[i].eq(product),
                ]
            whole = parts == 1  # else each part writes its words below
            m.d.sync += [
                sh_recip.eq(pre_recip),
                *([result.valid.eq(mul["valid"])] if whole else []),
                result.payload.tag.eq(mul["tag"]),
                result.payload.last.eq(mul["last"]),
                result.payload.error.eq(mul["error"]),
                *([result.payload.data.eq(Cat(*words))] if whole else []),
                pre["valid"].eq(0),  # unless PRE takes a beat this cycle (later wins)
            ]
            if not whole:
                # Each part fills its words of the result register; the last part makes it
                # valid. Only a valid part writes (a bubble repeats the part before it, which
                # would write the same words again: nothing need rely on that).
                m.d.sync += result.valid.eq(mul["valid"] & (mul["part"] == parts - 1))
                width = lanes * p.word_bits
                data = Value.cast(result.payload.data)  # bits, not words
                for k in range(parts):
                    with m.If(mul["valid"] & (mul["part"] == k)):
                        m.d.sync += data[k * width : (k + 1) * width].eq(Cat(*words))
        beat = self.i.payload
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [
                pre["valid"].eq(1),
                pre["raw"].eq(beat.raw),
                pre["tag"].eq(beat.tag),
                pre["last"].eq(beat.last),
                pre["error"].eq(beat.error),
                pre_shift.eq(beat.shift),
                pre_recip.eq(beat.recip),
                *(reg.eq(word) for reg, word in zip(pre["words"], beat.words, strict=True)),
            ]
            if parts > 1:
                m.d.sync += pre["part"].eq(beat.part)
        return m
