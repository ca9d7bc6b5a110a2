"""``hpu`` K side: q·k of every query per K row, the score, the running max, exp2 and l."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.exp2 import Exp2
from .arith import decode_scale, rounded, shift_amounts, shift_by_split, shift_halves
from .beats import (
    DESCRIPTOR_SLOTS,
    REQUEST_QUEUE_DEPTH,
    ROW_FIFO_DEPTH,
    checked,
    row_beat_layout,
    row_entry_layout,
    stats_layout,
)

__all__ = ["KSide"]


class KSide(wiring.Component):
    """The K side of the online softmax: for each K row and query, the score and ``p``.

    Each row beat of ``i`` meets a chunk of every query (``groups x lanes`` MACs); a row's
    beats sum to its dot product, scaled by the query's and the row's scales into the score
    format. The running max is an integer in log2 units, so a row that grows it rescales ``l``
    and ``o`` by a right shift (``alpha = 2**-shift``, no multiplier): each row leaves one
    entry on ``rows_o`` (every query's shift and ``p = exp2(s - m)``), and ``l`` takes
    ``round(l * 2**-shift) + p``. A request's first row starts from the initial max (its
    shift, the largest, clears ``l`` and, on the V side, ``o``); its last row leaves the final
    (m, l) of every query on ``stats_o``.

    The K side never waits for the V side: it runs ahead into the row FIFO and only stops
    taking row beats (``i.ready``) when that FIFO could overflow. ``stats_o`` never overflows
    while at most ``REQUEST_QUEUE_DEPTH`` requests are in flight (the
    :class:`~.scheduler.Scheduler` counts them). Stages: KA (the beat and each query's chunk),
    KB (products), KS (their sum), KC (the row's dot product and its scale's product and shift
    amounts), S1 (dot times the scales' mantissas), SH and S2 (shift, round, saturate), S3 (the
    running max and the exp2 argument), the exp2 units, S4 (``l`` and the entry's push).

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.row_beat_layout`))
        K row beats, from the K :class:`~.sequencer.Sequencer`.
    bank : In(range(DESCRIPTOR_SLOTS))
        The descriptor slot whose queries the beats meet.
    queries : In(unsigned(row_elems * q_bits)).array(DESCRIPTOR_SLOTS, gqa_group)
        Every slot's queries.
    query_scales : In(unsigned(16)).array(DESCRIPTOR_SLOTS, gqa_group)
        Every slot's binary16 score scales, one per query.
    rows_o : Out(stream.Signature(:func:`.beats.row_entry_layout`))
    stats_o : Out(stream.Signature(:func:`.beats.stats_layout`))
    bank_done : Out(DESCRIPTOR_SLOTS)
        The last beat reading that slot's queries has left the stages that read them.
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(row_beat_layout(p))),
                "bank": In(range(DESCRIPTOR_SLOTS)),
                "queries": In(unsigned(p.row_elems * p.q_bits)).array(
                    DESCRIPTOR_SLOTS, p.gqa_group
                ),
                "query_scales": In(unsigned(16)).array(DESCRIPTOR_SLOTS, p.gqa_group),
                "rows_o": Out(stream.Signature(row_entry_layout(p))),
                "stats_o": Out(stream.Signature(stats_layout(p))),
                "bank_done": Out(DESCRIPTOR_SLOTS),
            }
        )

    def elaborate(self, platform):

        p = self.params
        m = Module()
        groups, lanes = p.gqa_group, p.lanes
        kb = self.i.payload
        cur_bank = self.bank
        # The row FIFO to the V side and the queue of requests' final (m, l): their read
        # sides are this component's outputs.
        m.submodules.row_fifo = row_fifo = fifo.SyncFIFOBuffered(
            width=len(self.rows_o.payload.as_value()), depth=ROW_FIFO_DEPTH
        )
        m.submodules.k_results = k_results = fifo.SyncFIFOBuffered(
            width=len(self.stats_o.payload.as_value()), depth=REQUEST_QUEUE_DEPTH
        )
        for queue, out in ((row_fifo, self.rows_o), (k_results, self.stats_o)):
            m.d.comb += [
                out.payload.eq(queue.r_data),
                out.valid.eq(queue.r_rdy),
                queue.r_en.eq(out.ready),
            ]
        room = Signal(name="k_room")
        m.d.comb += self.i.ready.eq(room)

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
        take = self.i.valid & self.i.ready
        a_valid = stage("ka_valid", take)
        a_data = stage("ka_data", kb.data, take)
        a_beat = stage("ka_beat", kb.beat, take)
        a_last_beat = stage("ka_last_beat", kb.last_beat, take)
        a_scale = stage("ka_scale", kb.scale, take)
        a_first_row = stage("ka_first_row", kb.first_row, take)
        a_last_row = stage("ka_last_row", kb.last_row, take)
        a_bank = stage("ka_bank", cur_bank, take)
        q_chunk_bits = lanes * p.q_bits
        a_chunk = []
        for g in range(groups):
            query = Array(self.queries[b][g] for b in range(DESCRIPTOR_SLOTS))[cur_bank]
            a_chunk.append(stage(f"ka_chunk{g}", query.word_select(kb.beat, q_chunk_bits), take))
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
            q_scale = Array(self.query_scales[b][g] for b in range(DESCRIPTOR_SLOTS))[s_bank]
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
        m.d.comb += [
            self.bank_done[b].eq(c_valid & c_last_row & (c_bank == b))
            for b in range(DESCRIPTOR_SLOTS)
        ]
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
            shift_line.append(_delay(m, shift_reg, unit.LATENCY, f"shift{g}"))
            new_max.append(_delay(m, max_reg, unit.LATENCY, f"max{g}"))
            s3_valid = Signal(name=f"s3_valid{g}")
            m.d.sync += s3_valid.eq(s2_valid)
            m.d.comb += [unit.i.payload.eq(x), unit.i.valid.eq(s3_valid)]
        latency = exp2_units[0].LATENCY
        s3_last_row = stage("s3_last_row", s2_last_row, s2_valid)
        last_row = _delay(m, s3_last_row, latency, "last_row")
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
        return m


def _delay(m: Module, value, cycles: int, name: str):
    """``value`` delayed by ``cycles`` registers (the fixed exp2 latency: it never stalls)."""
    line = value
    for stage in range(cycles):
        delayed = Signal.like(value, name=f"{name}_d{stage}")
        m.d.sync += delayed.eq(line)
        line = delayed
    return line
