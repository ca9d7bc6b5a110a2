"""``hpu`` V side: the weights of every V row and the accumulators ``o`` of every query."""

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.fixed import fabric_product
from ..common.pipeline import sideband
from .arith import (
    decode_scale,
    registered,
    rounded,
    shift_amounts,
    shift_by_split,
    shift_halves,
)
from .beats import TAG_BITS, checked, row_beat_layout, row_entry_layout

__all__ = ["Accumulators", "RowWeights", "VSide", "weighted_beat_layout"]


def weighted_beat_layout(params) -> data.StructLayout:
    """A V row beat with its row's weight and shift for every query: the beat's data, whether
    it ends its request, the request's tag."""
    p = params
    return data.StructLayout(
        {
            "data": unsigned(p.mem_data_bits),
            "end": 1,
            "tag": unsigned(TAG_BITS),
            "shift": data.ArrayLayout(unsigned(p.shift_bits), p.gqa_group),
            "weight": data.ArrayLayout(unsigned(p.weight_bits), p.gqa_group),
        }
    )


class VSide(wiring.Component):
    """``w = p * v_scale`` per row and query; ``o <- round(o * 2**-shift) + w * v`` per element.

    Each V row's first beat takes the row's entry from ``rows_i`` (the K side's shift and
    ``p`` of every query). ``o`` is a shift register of ``row_beats`` chunks per query that moves
    one chunk per V beat, so every chunk passes the shifters and the ``w·v`` multipliers once
    per row. A request's first row starts from ``o = 0`` (its shift, the largest, clears
    the old values). The cycle after its last update the accumulators are copied into ``snapshot``
    (with the request's ``tag``) and ``snapshot_valid`` rises until ``release``, so the next
    request's rows can follow at once. A request's last beat is only taken (``i.ready``)
    while the snapshot is free and no copy into it is under way.

    Stages: vd (the row's scale, decoded, and its row entry), with fabric multipliers vx (the
    products' cut registers), vw (the weights' products and shift amounts, the beat's data),
    vs (the weights' shifts), va (their rounding and saturation; the update's products) and,
    where a row is two beats or more, vb (the update's sum).

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.row_beat_layout`))
        V row beats, from the V :class:`~.sequencer.Sequencer` (through the engine's register
        slice).
    tag : In(TAG_BITS)
        The sequence id and partial flag of the request of the beat on ``i``.
    rows_i : In(stream.Signature(:func:`.beats.row_entry_layout`))
        The K side's row entries, one per V row.
    snapshot : Out(signed(o_bits)).array(gqa_group, row_elems)
        ``o`` of every query of the last finished request.
    snapshot_valid : Out(1)
    snapshot_tag : Out(TAG_BITS)
    release : In(1)
        The output is done with the snapshot.
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(row_beat_layout(p))),
                "tag": In(TAG_BITS),
                "rows_i": In(stream.Signature(row_entry_layout(p))),
                "snapshot": Out(signed(p.o_bits)).array(p.gqa_group, p.row_elems),
                "snapshot_valid": Out(1),
                "snapshot_tag": Out(TAG_BITS),
                "release": In(1),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        m.submodules.weights = weights = RowWeights(p)
        m.submodules.accumulators = accumulators = Accumulators(p)
        wiring.connect(m, wiring.flipped(self.i), weights.i)
        wiring.connect(m, wiring.flipped(self.rows_i), weights.rows_i)
        wiring.connect(m, weights.o, accumulators.i)
        m.d.comb += [
            weights.tag.eq(self.tag),
            weights.snapshot_busy.eq(accumulators.busy),
            accumulators.release.eq(self.release),
            self.snapshot_valid.eq(accumulators.snapshot_valid),
            self.snapshot_tag.eq(accumulators.snapshot_tag),
        ]
        for g in range(p.gqa_group):
            for i in range(p.row_elems):
                m.d.comb += self.snapshot[g][i].eq(accumulators.snapshot[g][i])
        return m


class RowWeights(wiring.Component):
    """``w = p * v_scale`` of every query for each V row, beside the row's beats.

    Each row's first beat takes the row's entry from ``rows_i``. The beats leave on ``o``
    four cycles after they are taken (five with fabric multipliers: vx after vd), with their
    row's weights and shifts. A request's last beat is taken only while ``snapshot_busy`` is
    low and no other request's end is in these stages, and a request's first beat never right
    after the previous request's last.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.row_beat_layout`))
    tag : In(TAG_BITS)
    rows_i : In(stream.Signature(:func:`.beats.row_entry_layout`))
    snapshot_busy : In(1)
        The :class:`Accumulators` cannot take a request's end yet.
    o : Out(stream.Signature(:func:`weighted_beat_layout`, always_ready=True))
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(row_beat_layout(p))),
                "tag": In(TAG_BITS),
                "rows_i": In(stream.Signature(row_entry_layout(p))),
                "snapshot_busy": In(1),
                "o": Out(stream.Signature(weighted_beat_layout(p), always_ready=True)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        vb = self.i.payload
        # Stages: vd (the row's scale, decoded, and its row-FIFO entry), vw (the row's
        # weights' products and exponents, the beat's data), vs (the weights' shifts), va
        # (their rounding and saturation; the update's products) and, where a row is two beats
        # or more, vb (the update's sum). A request's last beat in any keeps the snapshot busy.
        vd_valid = Signal(name="vd_valid")
        vd_end = Signal(name="vd_end")
        vw_valid = Signal(name="vw_valid")
        vw_end = Signal(name="vw_end")
        vx_valid = Signal(name="vx_valid")  # fabric multipliers' extra stage
        vx_end = Signal(name="vx_end")
        vs_valid = Signal(name="vs_valid")
        vs_end = Signal(name="vs_end")
        va_valid, va_end = self.o.valid, self.o.payload.end
        take_row = self.i.valid & self.i.ready
        first = take_row & (vb.beat == 0)
        in_flight = {"vd": (vd_valid, vd_end), "vw": (vw_valid, vw_end), "vs": (vs_valid, vs_end)}
        fabric = self.params.scaling_multipliers == "fabric"
        if fabric:
            in_flight["vx"] = (vx_valid, vx_end)
        self._gate(m, take_row, first, in_flight)
        self._weights(m, first)
        stages = (
            ("vd", vd_valid, take_row, vd_end),
            *((("vx", vx_valid, vd_valid, vx_end),) if fabric else ()),
            ("vw", vw_valid, vx_valid if fabric else vd_valid, vw_end),
            ("vs", vs_valid, vw_valid, vs_end),
            ("va", va_valid, vs_valid, va_end),
        )
        self._carry_beat(m, stages, take_row)
        return m

    def _gate(self, m, take_row, first, in_flight) -> None:
        """The gate on row beats (``i.ready``) and the row FIFO's pop; ``in_flight`` holds
        the (valid, end) pair of each stage a request's end may be in before va."""
        p = self.params
        vb = self.i.payload
        row_fifo = self.rows_i
        gate = self.i.ready
        # A request's end in vd, vw, vs or va: a register of what it will be (the stages'
        # next values), so the gate starts from registers.
        ends = Signal(name="v_ends_in_flight")
        in_stages = take_row & vb.last_beat & vb.last_row
        for valid, end in in_flight.values():
            in_stages = in_stages | (valid & end)
        m.d.sync += ends.eq(in_stages)
        snap_busy = Signal(name="snap_busy")
        m.d.comb += [
            snap_busy.eq(self.snapshot_busy | ends),
            gate.eq(
                ((vb.beat != 0) | row_fifo.valid)
                & ~(vb.last_beat & vb.last_row & snap_busy)
                # A request's first beat never follows the previous request's last one on the
                # next cycle: with the update over two stages, the accumulators then hold still
                # while the last update lands and the copy reads them.
                & ~(vb.first_row & (vb.beat == 0) & in_flight["vd"][0] & in_flight["vd"][1])
            ),
        ]
        if p.row_beats == 1:
            m.d.comb += row_fifo.ready.eq(first)
        else:
            # The entry is registered (vd) as the row's first beat is taken, and popped the
            # cycle after: the next row's first beat is two cycles later at the earliest, when
            # the FIFO shows the next entry. (Popped at once, the FIFO's own logic sat behind
            # the gate on the engine's longest path.)
            popped = Signal(name="v_entry_popped")
            m.d.sync += popped.eq(first)
            m.d.comb += row_fifo.ready.eq(popped)

    def _weights(self, m, first) -> None:
        """vd, vx (fabric multipliers), vw, vs and va's weights: ``w = p * v_scale``, shifted,
        rounded and saturated, with each query's shift, into ``o``'s registers."""
        p = self.params
        groups = p.gqa_group
        word = p.prob_frac_bits + 1
        vb = self.i.payload
        entries = self.rows_i.payload.as_value()
        v_mant, v_exp = decode_scale(m, vb.scale, "v_scale")
        # vd registers the decoded scale (out of the sequencer's mux of a page's 32 scales)
        # and the row's FIFO entry; w = p * v_scale's product and shift amounts are
        # registered in vw, the shift, rounding and saturation in vs and va (tandem synth's
        # timing estimate found each of these cuts on the engine's longest path).
        vd_first = Signal(name="vd_first")
        vd_mant = Signal.like(v_mant, name="vd_mant")
        vd_exp = Signal.like(v_exp, name="vd_exp")
        vd_entry = Signal(len(entries), name="vd_entry")
        m.d.sync += vd_first.eq(first)
        with m.If(first):
            m.d.sync += [
                vd_mant.eq(v_mant),
                vd_exp.eq(v_exp),
                vd_entry.eq(entries),
            ]
        products = [Signal(word + 11, name=f"vw_product{g}") for g in range(groups)]
        max_left = 5 + p.w_frac_bits
        vw_left = Signal(max_left.bit_length(), name="vw_left")
        vw_right = Signal(6, name="vw_right")
        vw_up = Signal(name="vw_up")
        vw_shifts = [Signal(p.shift_bits, name=f"vw_shift{g}") for g in range(groups)]
        out = self.o.payload
        weights, shifts = out.weight, out.shift
        entry_bits = p.shift_bits + word
        fabric = p.scaling_multipliers == "fabric"
        if fabric:
            # vx: the products' adder trees in fabric take vx as well (their cut registers):
            # the exponent and the entry wait in vx beside them.
            vx_first = registered(m, "vx_first", vd_first)
            row_first = vx_first
            vx = sideband(m, "vx", {"exp": vd_exp, "entry": vd_entry}, vd_first)
            row_exp, row_entry = vx["exp"], vx["entry"]
            row_products = [
                fabric_product(
                    m, vd_entry.word_select(g, entry_bits)[p.shift_bits :], vd_mant,
                    f"vx_product{g}", 1, vd_first,
                )
                for g in range(groups)
            ]  # fmt: skip
        else:
            row_first, row_exp, row_entry = vd_first, vd_exp, vd_entry
        with m.If(row_first):
            total = row_exp + (p.w_frac_bits - p.prob_frac_bits)
            m.d.sync += [
                x.eq(y) for x, y in zip((vw_left, vw_right, vw_up), shift_amounts(total, max_left))
            ]
            for g in range(groups):
                entry = row_entry.word_select(g, entry_bits)
                shift, prob = entry[: p.shift_bits], entry[p.shift_bits :]
                product = row_products[g] if fabric else prob * vd_mant
                m.d.sync += [vw_shifts[g].eq(shift), products[g].eq(product)]
        vw_first = Signal(name="vw_first")
        m.d.sync += vw_first.eq(row_first)
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

    def _carry_beat(self, m, stages, take_row) -> None:
        """The row beat travels beside the weights' four ``stages`` (name, valid, the stage
        before's valid, end flag): its data, the request's end and the tag, registered while
        the stage before holds a beat; the last stage's registers are ``o``'s. (A request's
        first row needs no flag: its shift clears the old values.)"""
        vb, out = self.i.payload, self.o.payload
        beat = {"data": vb.data, "end": vb.last_beat & vb.last_row, "tag": self.tag}
        for prefix, valid, taken, end in stages:
            last = prefix == "va"
            held = {
                "data": out.data
                if last
                else Signal(self.params.mem_data_bits, name=f"{prefix}_data"),
                "end": end,
                "tag": out.tag if last else Signal(TAG_BITS, name=f"{prefix}_tag"),
            }
            m.d.sync += valid.eq(taken)
            with m.If(taken):
                m.d.sync += [held[key].eq(beat[key]) for key in ("data", "end", "tag")]
            beat = held


class Accumulators(wiring.Component):
    """``o <- round(o * 2**-shift) + w * v`` per element, and the snapshot of each finished
    request.

    ``o`` is a shift register of ``row_beats`` chunks per query that moves one chunk per
    beat, so every chunk passes the shifters and the ``w·v`` multipliers once per row: in one
    stage when a row is one beat, over two (va: shift and products, vb: sum) otherwise
    (:func:`_update_in_two`). The cycle after a request's last update the final chunks are
    copied into ``snapshot``.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`weighted_beat_layout`, always_ready=True))
    snapshot : Out(signed(o_bits)).array(gqa_group, row_elems)
    snapshot_valid, snapshot_tag : Out
    release : In(1)
    busy : Out(1)
        The snapshot is held, being copied, or a request's last update is under way (a
        register).
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(weighted_beat_layout(p), always_ready=True)),
                "snapshot": Out(signed(p.o_bits)).array(p.gqa_group, p.row_elems),
                "snapshot_valid": Out(1),
                "snapshot_tag": Out(TAG_BITS),
                "release": In(1),
                "busy": Out(1),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        groups = p.gqa_group
        snapshot, snap_valid, snap_tag = self.snapshot, self.snapshot_valid, self.snapshot_tag
        update = _update_in_one if p.row_beats == 1 else _update_in_two
        beat = self.i.payload
        end_valid, end, end_tag, finals = update(
            p, m, self.i.valid, beat.data, beat.end, beat.tag, beat.shift, beat.weight
        )
        # The copy happens the cycle after the last update; the next request's first update is
        # at the earliest on that same edge (the gate keeps a cycle between a request's last
        # beat and the next one's first), and reads nothing of the old values.
        snap_copy = Signal(name="snap_copy")
        copy_tag = Signal(TAG_BITS, name="snap_copy_tag")
        m.d.sync += snap_copy.eq(end_valid & end)
        with m.If(end_valid & end):
            m.d.sync += copy_tag.eq(end_tag)
        with m.If(snap_copy):
            m.d.sync += [snap_valid.eq(1), snap_tag.eq(copy_tag)]
            for g in range(groups):
                for i in range(p.row_elems):
                    m.d.sync += snapshot[g][i].eq(finals[g][i])
        with m.If(self.release):
            m.d.sync += snap_valid.eq(0)
        # busy is a register holding what the snapshot's state, the copy and the update's end
        # will be next cycle (what they are then, exactly: the input's end is the two-stage
        # update's next end; a one-stage update's end is still in RowWeights' last stage), so
        # the V side's gate starts from a register.
        m.d.sync += self.busy.eq(
            ((snap_valid | snap_copy) & ~self.release)
            | (end_valid & end)
            | (self.i.valid & self.i.payload.end)
        )
        return m


def _update_in_one(p, m, valid, data_, end, tag, shifts, weights):
    """``o <- round(o * 2**-shift) + w * v`` in one cycle (a row of one beat updates the
    same elements every cycle). Returns the last update's (valid, end, tag) and the
    accumulators, per query."""
    accumulators = []
    with m.If(valid):
        for g in range(p.gqa_group):
            ring = [Signal(signed(p.o_bits), name=f"o{g}_{i}") for i in range(p.lanes)]
            for i, element in enumerate(ring):
                updated = rounded(shift_halves(element, shifts[g])) + (
                    weights[g] * data_.word_select(i, p.kv_bits).as_signed()
                )
                m.d.sync += element.eq(updated)
            accumulators.append(ring)
    return valid, end, tag, accumulators


def _update_in_two(p, m, valid, data_, end, tag, shifts, weights):
    """``o <- round(o * 2**-shift) + w * v`` over two stages, with ``o`` a shift register of
    ``row_beats`` chunks per query that moves one chunk per beat: its head chunk, shifted (the
    floor and the rounding bit of :func:`shift_halves`), and the products w * v are VA's
    registers, which are the register's last chunk; their sum (VB) enters it at the tail.
    Every accumulator bit has one source. (A chunk pointer into chunks that stay in place
    needed a mux in front of the shifters; a ring whose tail took VB's sums, a second source
    on every bit.) After a row's last beat the chunks are in order: the register holds all but
    the last, whose final value is VB's sum. Returns VB's (valid, end, tag) (the cycle after
    the last beat, when nothing moves: the V side's gate keeps a cycle before the next
    request's first beat) and the final chunks, per query."""
    lanes = p.lanes
    vb_valid = registered(m, "vb_valid", valid)
    vb = sideband(m, "vb", {"end": end, "tag": tag}, valid)
    finals = []
    for g in range(p.gqa_group):
        held = [
            Signal(signed(p.o_bits), name=f"o{g}_{i}") for i in range((p.row_beats - 1) * lanes)
        ]
        scaled = [Signal(signed(p.o_bits + 1), name=f"vb_scaled{g}_{i}") for i in range(lanes)]
        added = [Signal(signed(p.o_bits), name=f"vb_wv{g}_{i}") for i in range(lanes)]
        sums = [rounded(scaled[i]) + added[i] for i in range(lanes)]
        with m.If(valid):
            for i in range(lanes):
                m.d.sync += [
                    scaled[i].eq(shift_halves(held[i], shifts[g])),
                    added[i].eq(weights[g] * data_.word_select(i, p.kv_bits).as_signed()),
                ]
            chain = held[lanes:] + sums
            m.d.sync += [element.eq(following) for element, following in zip(held, chain)]
        final = [Signal(signed(p.o_bits), name=f"vb_sum{g}_{i}") for i in range(lanes)]
        m.d.comb += [x.eq(y) for x, y in zip(final, sums)]
        finals.append(held + final)
    return vb_valid, vb["end"], vb["tag"], finals
