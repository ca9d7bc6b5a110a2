"""``hpu`` K side: q·k of every query per K row, the score, the running max, exp2 and l.

Three components in pipeline order, each a stream that never stalls once a row beat is taken:
:class:`QueryDot` (row beats into each query's dot product and the row's scale factors),
:class:`ScoreScale` (dot products into scores) and :class:`OnlineSoftmax` (the running max,
``p`` and ``l``, into the row FIFO and the (m, l) queue); :class:`KSide` connects them.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.exp2 import Exp2
from ..common.fixed import fabric_product, partial_products
from ..common.pipeline import sideband
from .arith import (
    decode_scale,
    registered,
    shift_amounts,
    shift_by_split,
    shift_halves,
)
from .beats import (
    DESCRIPTOR_SLOTS,
    REQUEST_QUEUE_DEPTH,
    ROW_FIFO_DEPTH,
    checked,
    query_write_layout,
    row_beat_layout,
    row_entry_layout,
    stats_layout,
)
from .query_products import packs_queries, query_memories, query_products

__all__ = [
    "KSide",
    "OnlineSoftmax",
    "QueryDot",
    "ScoreScale",
    "row_dot_layout",
    "score_latency",
    "score_layout",
    "score_phases",
    "score_units",
]


def row_dot_layout(params) -> data.StructLayout:
    """A K row's dot product with each query, and the factors that make it a score: the
    product of the query's and the row's scale mantissas and the shift amounts of their
    exponents (:func:`.arith.shift_amounts`), with the row's request-boundary flags."""
    p = params
    groups = p.gqa_group
    max_left = 10 + 10 + p.score_frac_bits
    return data.StructLayout(
        {
            "dot": data.ArrayLayout(signed(p.dot_bits), groups),
            "mant": data.ArrayLayout(unsigned(22), groups),
            "left": data.ArrayLayout(unsigned(max_left.bit_length()), groups),
            "right": data.ArrayLayout(unsigned(6), groups),
            "up": data.ArrayLayout(unsigned(1), groups),
            "first_row": 1,
            "last_row": 1,
        }
    )


def score_layout(params) -> data.StructLayout:
    """A K row's score with each query, in the score format, with the row's flags."""
    p = params
    return data.StructLayout(
        {
            "score": data.ArrayLayout(signed(p.score_bits), p.gqa_group),
            "first_row": 1,
            "last_row": 1,
        }
    )


class QueryDot(wiring.Component):
    """Stages KA (the accepted row beat and each query's chunk for it, read from its bank so
    KB's products start from registers), KB (``groups x lanes`` products; with packed queries
    KM after it, :func:`.query_products.query_products`), K1 and KS (their
    sum, with the scales decoded beside it) and KC (a row's beats summed into its dot product;
    beside it the row's scale factors).

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.row_beat_layout`))
        K row beats; ``i.ready`` is ``room``.
    room : In(1)
        The consumer can take every row in flight.
    bank : In(range(DESCRIPTOR_SLOTS))
        The descriptor slot whose queries the beats meet.
    query_w : In(stream.Signature(:func:`.beats.query_write_layout`, always_ready=True))
        Query beats into the query memory (a slot's, while the beats meet another slot's).
    query_scales : In(unsigned(16)).array(DESCRIPTOR_SLOTS, gqa_group)
        Every slot's binary16 score scales.
    o : Out(stream.Signature(:func:`row_dot_layout`, always_ready=True))
        One per row, five cycles after its last beat is taken (six with packed queries: KM).
    bank_done : Out(DESCRIPTOR_SLOTS)
        The last beat reading that slot's queries has left the stages that read them.
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(row_beat_layout(p))),
                "room": In(1),
                "bank": In(range(DESCRIPTOR_SLOTS)),
                "query_w": In(stream.Signature(query_write_layout(p), always_ready=True)),
                "query_scales": In(unsigned(16)).array(DESCRIPTOR_SLOTS, p.gqa_group),
                "o": Out(stream.Signature(row_dot_layout(p), always_ready=True)),
                "bank_done": Out(DESCRIPTOR_SLOTS),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(self.room)
        b, b_q_scales, b_products = self._products(m)
        s, s_partial, mant_products, s_exp = self._sums(m, b, b_q_scales, b_products)
        self._row_dot(m, s, s_partial, mant_products, s_exp)
        return m

    def _products(self, m):
        """KA, KB and (with packed queries) KM. Returns the last one's sideband (the beat's
        flags, scale, bank and index), each query's scale of the bank and the products."""
        p = self.params
        kb = self.i.payload
        # KA: the accepted row beat, and each query's chunk for it (read from its bank here, so
        # KB's products start from registers).
        take = self.i.valid & self.i.ready
        a_valid = registered(m, "ka_valid", take)
        beat = {
            "data": kb.data,
            "beat": kb.beat,
            "last_beat": kb.last_beat,
            "scale": kb.scale,
            "first_row": kb.first_row,
            "last_row": kb.last_row,
            "bank": self.bank,
            "beat_index": kb.beat,
        }
        a = sideband(m, "ka", beat, take)
        a_chunk = query_memories(p, m, self.query_w, self.bank, kb.beat, take)
        # KB: lanes products per query (the multipliers' output registers).
        b = sideband(
            m,
            "kb",
            {
                "valid": a_valid,
                "first": a["beat"] == 0,
                **{key: a[key] for key in ("last_beat", "scale", "first_row", "last_row", "bank")},
                "beat": a["beat_index"],
            },
        )
        # Each query's scale of the bank, registered here (read in K1, the bank's mux sat
        # in front of the exponents' decode and sum).
        b_q_scales = [
            registered(
                m,
                f"kb_q_scale{g}",
                Array(self.query_scales[s][g] for s in range(DESCRIPTOR_SLOTS))[a["bank"]],
            )
            for g in range(p.gqa_group)
        ]
        b_products = query_products(p, m, a_chunk, a["data"])
        if packs_queries(p):
            # KM: the packed products' correction (one more stage, below); the rest follows.
            b = sideband(m, "km", b)
            b_q_scales = [registered(m, f"km_q_scale{g}", s) for g, s in enumerate(b_q_scales)]
        return b, b_q_scales, b_products

    def _sums(self, m, b, b_q_scales, b_products):
        """K1 and KS: the products summed, over two stages (groups of up to eight products in
        K1, their sums in KS: in one stage, 32 lanes' tree was the engine's longest path).
        Beside them the row's scale factors: KB reads the queries' scales of the bank, K1
        decodes both scales, KS registers the exponent's sum. Returns KS's sideband, each
        query's partial dot product, each unit's mantissa product and each query's
        exponent."""
        p = self.params
        groups, lanes = p.gqa_group, p.lanes
        flags = ("valid", "first", "last_beat", "first_row", "last_row", "bank")
        t = sideband(m, "k1", {key: b[key] for key in (*flags, "beat")})
        group = min(8, lanes)
        t_sums = [
            [
                registered(m, f"k1_sum{g}_{j}", sum(row[j : j + group]))
                for j in range(0, lanes, group)
            ]
            for g, row in enumerate(b_products)
        ]
        b_k_mant, b_k_exp = decode_scale(m, b["scale"], "k_scale")
        t_k_mant = registered(m, "k1_k_mant", b_k_mant)
        fabric = p.scaling_multipliers == "fabric"
        units = score_units(p)
        t_q_mant, t_exp, q_mants = [], [], []
        for g in range(groups):
            q_mant, q_exp = decode_scale(m, b_q_scales[g], f"q_scale{g}")
            q_mants.append(q_mant)
            if not fabric:
                t_q_mant.append(registered(m, f"k1_q_mant{g}", q_mant))
            t_exp.append(registered(m, f"k1_exp{g}", q_exp + b_k_exp + p.score_frac_bits))
        if fabric:
            # Each unit's query mantissa for the beat's phase (below), picked here: the
            # product's adder tree starts at K1, its cut registers are KS's.
            t_q_mant = [
                registered(m, f"k1_q_mant_unit{u}", _phase_pick(p, u, q_mants, b["beat"]))
                for u in range(units)
            ]
        s = sideband(
            m,
            "ks",
            {
                **{key: t[key] for key in flags},
                **({} if fabric else {"k_mant": t_k_mant}),
                "beat": t["beat"],
            },
        )
        if fabric:
            mant_products = [
                fabric_product(m, t_q_mant[u], t_k_mant, f"ks_mant_product{u}", 1)
                for u in range(units)
            ]
        else:
            # Each unit's query mantissa for the beat's phase (below), picked here from K1's.
            s_q_mant = [
                registered(m, f"ks_q_mant_unit{u}", _phase_pick(p, u, t_q_mant, t["beat"]))
                for u in range(units)
            ]
            mant_products = [s_q_mant[u] * s["k_mant"] for u in range(units)]
        s_exp = [registered(m, f"ks_exp{g}", t_exp[g]) for g in range(groups)]
        partial_bits = p.q_bits + p.kv_bits + (lanes - 1).bit_length()
        s_partial = [Signal(signed(partial_bits), name=f"ks_partial{g}") for g in range(groups)]
        for g in range(groups):
            m.d.sync += s_partial[g].eq(sum(t_sums[g]))
        return s, s_partial, mant_products, s_exp

    def _row_dot(self, m, s, s_partial, mant_products, s_exp) -> None:
        """KC: the beats of a row accumulated into the dot product, and the row's scale
        factors, into ``o``'s registers."""
        p = self.params
        groups = p.gqa_group
        row_end = s["valid"] & s["last_beat"]
        out = self.o.payload
        c_valid = registered(m, "kc_valid", row_end)
        m.d.sync += [out.first_row.eq(s["first_row"]), out.last_row.eq(s["last_row"])]
        c_bank = registered(m, "kc_bank", s["bank"])
        dot_acc = [Signal(signed(p.dot_bits), name=f"kc_acc{g}") for g in range(groups)]
        c_dot = out.dot
        for g in range(groups):
            total = Mux(s["first"], s_partial[g], dot_acc[g] + s_partial[g])
            with m.If(s["valid"]):
                m.d.sync += [dot_acc[g].eq(total), c_dot[g].eq(total)]
        # Beside the accumulation, the mantissa product q_mant * k_mant and the shift amounts
        # of the exponent q_exp + k_exp + score_frac_bits (they depend on the scales alone), so
        # S1 is one multiplication. The row's scale is on each of its beats, so the queries'
        # mantissa products take turns on score_units(p) multipliers, one phase a beat:
        # query g's is formed on the beat of its phase (_unit_queries), before the row's end.
        c_mant, c_left, c_right, c_up = out.mant, out.left, out.right, out.up
        max_left = 10 + 10 + p.score_frac_bits
        for u in range(score_units(p)):
            for phase, g in enumerate(_unit_queries(p, u)):
                with m.If(s["valid"] & (s["beat"] == phase)):
                    m.d.sync += c_mant[g].eq(mant_products[u])
        for g in range(groups):
            left, right, up = shift_amounts(s_exp[g], max_left)
            with m.If(row_end):
                m.d.sync += [
                    c_left[g].eq(left),
                    c_right[g].eq(right),
                    c_up[g].eq(up),
                ]
        # The last read of a query bank happens here.
        m.d.comb += [
            self.o.valid.eq(c_valid),
            *(
                self.bank_done[b].eq(c_valid & out.last_row & (c_bank == b))
                for b in range(DESCRIPTOR_SLOTS)
            ),
        ]


def score_units(params) -> int:
    """Multiplier sets that turn a row's G dot products into scores (and form the G mantissa
    products before them): a row takes ``row_beats`` cycles at least, so its G products take
    turns on ``ceil(G / row_beats)`` sets, one phase a cycle (:func:`score_phases`)."""
    return -(-params.gqa_group // params.row_beats)


def score_phases(params) -> int:
    """Phases of a row's score products: at most ``row_beats``, so a row's last phase leaves
    before the next row's first."""
    return -(-params.gqa_group // score_units(params))


def score_latency(params) -> int:
    """Cycles from a row's dot products to its scores (:class:`ScoreScale`): four, with more
    than one phase SQ's cycle and one per further phase, and one more with fabric
    multipliers."""
    phases = score_phases(params)
    fabric = params.scaling_multipliers == "fabric"  # the product takes S1B too
    return (4 if phases == 1 else 4 + phases) + fabric


def _phase_pick(params, unit: int, values, beat):
    """The value (of ``values``, one per query) of the unit's query for the phase ``beat``."""
    queries = _unit_queries(params, unit)
    phases = score_phases(params)
    if phases == 1:
        return values[queries[0]]
    return Array(values[g] for g in queries)[beat[: (phases - 1).bit_length()]]


def _unit_queries(params, unit: int) -> list[int]:
    """The queries whose score products a unit forms, in phase order: phase k's are
    ``k * units ... k * units + units - 1``."""
    units = score_units(params)
    return list(range(unit, params.gqa_group, units))


class ScoreScale(wiring.Component):
    """Stages S1 (dot times the scales' mantissas, as partial products), SP (their sum), SH
    (its shifts) and S2 (their rounding carry and saturation into the score format,
    :func:`.arith.shift_by_split`), on :func:`score_units` sets of multipliers and shifters.

    With more than one phase (:func:`score_phases`: a row's G queries take turns on the
    units), SQ first holds the row and gives each unit one query a cycle; S2 writes each
    phase's scores, and the row leaves with its last phase. Rows must come at least
    ``row_beats`` cycles apart, as :class:`QueryDot` gives them.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`row_dot_layout`, always_ready=True))
    o : Out(stream.Signature(:func:`score_layout`, always_ready=True))
        :attr:`LATENCY` cycles (:func:`score_latency`) after ``i``.
    """

    def __init__(self, params):
        self.params = p = checked(params)
        self.LATENCY = score_latency(p)
        super().__init__(
            {
                "i": In(stream.Signature(row_dot_layout(p), always_ready=True)),
                "o": Out(stream.Signature(score_layout(p), always_ready=True)),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        units, phases = score_units(p), score_phases(p)
        row = self.i.payload
        keys = ("dot", "mant", "left", "right", "up")
        if phases == 1:
            # Each query has its unit: S1 reads the row.
            q_valid, q_phase = self.i.valid, Const(0, 1)
            q_first_row, q_last_row = row.first_row, row.last_row
            unit_in = [{key: row[key][u] for key in keys} for u in range(units)]
        else:
            q_valid, q_phase, q_first_row, q_last_row, unit_in = self._turns(m, units, phases)
        # S1: dot * (q_mant * k_mant).
        flags = {
            "valid": q_valid,
            "phase": q_phase,
            "first_row": q_first_row,
            "last_row": q_last_row,
        }
        s1 = sideband(m, "s1", flags)
        s1_shift = [
            sideband(
                m, "s1", {key: unit_in[u][key] for key in ("left", "right", "up")}, suffix=f"{u}"
            )
            for u in range(units)
        ]
        if p.scaling_multipliers == "fabric":
            # The product's adder tree over S1, S1B and SP (its cut registers are S1's and
            # S1B's): the flags and shifts take S1B as well.
            products = [
                fabric_product(m, unit_in[u]["dot"], unit_in[u]["mant"], f"s1_product{u}", 2)
                for u in range(units)
            ]
            s1 = sideband(m, "s1b", s1)
            s1_shift = [sideband(m, "s1b", s1_shift[u], suffix=f"{u}") for u in range(units)]
        else:
            products = [
                partial_products(m, unit_in[u]["dot"], unit_in[u]["mant"], f"s1_product{u}")
                for u in range(units)
            ]
        # SP: the partial products' sum (in S1's cycle, the adders behind the multipliers were
        # the engine's longest path).
        sp = sideband(m, "sp", s1)
        sp_product = [Signal(signed(p.dot_bits + 23), name=f"sp_product{u}") for u in range(units)]
        sp_shift = [sideband(m, "sp", s1_shift[u], suffix=f"{u}") for u in range(units)]
        for u in range(units):
            m.d.sync += sp_product[u].eq(products[u])
        # SH: the product's shifts; S2: their rounding carry and saturation into the score
        # format (:func:`shift_by_split`), into the scores of the unit's query of the phase.
        sh = sideband(m, "sh", sp)
        shifted = [
            shift_by_split(
                m, sp_product[u], sp_shift[u]["left"], sp_shift[u]["right"], sp_shift[u]["up"],
                p.score_bits, True, f"sh_score{u}", 1,
            )
            for u in range(units)
        ]  # fmt: skip
        out = self.o.payload
        last_phase = sh["phase"] == phases - 1
        m.d.sync += [
            self.o.valid.eq(sh["valid"] & last_phase),
            out.first_row.eq(sh["first_row"]),
            out.last_row.eq(sh["last_row"]),
        ]
        for u in range(units):
            for phase, g in enumerate(_unit_queries(p, u)):
                with m.If(sh["phase"] == phase):
                    m.d.sync += out.score[g].eq(shifted[u])
        return m

    def _turns(self, m, units, phases):
        """SQ: the row held, and each unit's query of the phase registered, one phase a cycle
        from the row's arrival. Returns SQ's valid, phase, flags and the units' inputs."""
        p = self.params
        row = self.i.payload
        held = Signal.like(row, name="sq_row")
        count = Signal(range(phases), name="sq_count")  # phases still to give after this
        q_valid = Signal(name="sq_valid")
        q_phase = Signal(range(phases), name="sq_phase")
        q_first_row = Signal(name="sq_first_row")
        q_last_row = Signal(name="sq_last_row")
        unit_in = [
            {
                key: Signal.like(row[key][u], name=f"sq_{key}{u}")
                for key in ("dot", "mant", "left", "right", "up")
            }
            for u in range(units)
        ]
        m.d.sync += q_valid.eq(0)
        with m.If(self.i.valid):
            # Phase 0 from the row itself; the row is held for the later phases.
            m.d.sync += [
                held.eq(row),
                count.eq(phases - 1),
                q_valid.eq(1),
                q_phase.eq(0),
                q_first_row.eq(row.first_row),
                q_last_row.eq(row.last_row),
            ]
            for u in range(units):
                m.d.sync += [reg.eq(row[key][u]) for key, reg in unit_in[u].items()]
        with m.Elif(count != 0):
            m.d.sync += [count.eq(count - 1), q_valid.eq(1), q_phase.eq(q_phase + 1)]
            for u in range(units):
                queries = _unit_queries(p, u)
                for key, reg in unit_in[u].items():
                    # The next phase's query (phase q_phase + 1): its operands from the row.
                    choices = Array(held[key][g] for g in queries[1:] or queries)
                    m.d.sync += reg.eq(choices[q_phase])
        return q_valid, q_phase, q_first_row, q_last_row, unit_in


class OnlineSoftmax(wiring.Component):
    """Stages S3 (the running max, an integer in log2 units, and the exp2 argument), the exp2
    units, and S4 (``p`` and ``l``): one entry per row on ``rows_o`` (every query's shift
    of ``l`` and ``o`` and its ``p``), a request's final (m, l) on ``stats_o``.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`score_layout`, always_ready=True))
    rows_o : Out(stream.Signature(:func:`.beats.row_entry_layout`))
    stats_o : Out(stream.Signature(:func:`.beats.stats_layout`))
    room : Out(1)
        The row FIFO has room for every row :class:`QueryDot` may have in flight.
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(score_layout(p), always_ready=True)),
                "rows_o": Out(stream.Signature(row_entry_layout(p))),
                "stats_o": Out(stream.Signature(stats_layout(p))),
                "room": Out(1),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        groups = p.gqa_group
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
        # S3: the running max, an integer in log2 units, and the exp2 argument s - m; a
        # request's first row compares against the initial max (the golden model's max_start).
        # A score s > m grows it to ceil(s): the row's shift is ceil(s) - m, its exp2 argument
        # s - ceil(s) (the fraction's bits alone), both formed beside the comparison. A
        # request's first row shifts by the most, which clears l and o (the previous
        # request's): no mux to zero them on either side.
        # m returns to the initial max (the golden model's max_start) after a request's last
        # row, so a first row compares against m like any other (a mux in front of the
        # comparison was the K side's longest path).
        running_max = [
            Signal(signed(p.max_bits), name=f"m{g}", init=p.max_start) for g in range(groups)
        ]
        running_sum = [Signal(p.l_bits, name=f"l{g}") for g in range(groups)]
        queries = [self._max_and_exp2(m, g, running_max[g]) for g in range(groups)]
        latency = queries[0]["exp2"].LATENCY
        s3_last_row = registered(m, "s3_last_row", self.i.payload.last_row, self.i.valid)
        last_row = _delay(m, s3_last_row, latency, "last_row")
        self._push(m, queries, running_sum, last_row, row_fifo, k_results)
        # Rows in flight between a take and its push, at most one per cycle; one more since
        # room is registered (the FIFO's level is a cycle old when the sequencer reads it).
        in_flight = 9 + packs_queries(p) + score_latency(p) + latency
        m.d.sync += self.room.eq(row_fifo.level < ROW_FIFO_DEPTH - in_flight)
        return m

    def _max_and_exp2(self, m, g: int, running_max) -> dict:
        """S3 of query ``g`` (its running max ``running_max`` and exp2 argument) and its exp2
        unit. Returns the unit (``exp2``) and, delayed alongside it, the row's shift
        (``shift``), ``l``'s copy of it (``l_shift``) and the row's max (``max``)."""
        p = self.params
        scores = self.i.payload.score
        s2_valid, s2_first_row = self.i.valid, self.i.payload.first_row
        s2_last_row = self.i.payload.last_row
        octave = 1 << p.score_frac_bits
        top_shift = (1 << p.shift_bits) - 1
        exp2_lo = -(1 << (p.exp2.in_width - 1))
        m.submodules[f"exp2_{g}"] = unit = Exp2(p.exp2)
        previous = Signal(signed(p.max_bits), name=f"s3_previous_max{g}")
        diff = Signal(signed(p.score_bits + 2), name=f"s3_diff{g}")
        fraction = scores[g][: p.score_frac_bits]
        ceiling = Signal(signed(p.max_bits), name=f"s3_ceil{g}")
        growth = Signal(signed(p.max_bits + 1), name=f"s3_growth{g}")
        grew = Signal(name=f"s3_grew{g}")
        m.d.comb += [
            previous.eq(running_max),
            diff.eq(scores[g] - (previous << p.score_frac_bits)),
            ceiling.eq((scores[g] >> p.score_frac_bits) + (fraction != 0)),
            growth.eq(ceiling - previous),
            # s > m * 2**frac_bits, as ceil(s) > m, from the score's integer part and
            # whether it has a fraction (off the subtraction: a shorter loop through m).
            grew.eq(
                (scores[g] >> p.score_frac_bits > previous)
                | ((scores[g] >> p.score_frac_bits == previous) & (fraction != 0))
            ),
            unit.o.ready.eq(1),
        ]
        x = Signal(signed(p.exp2.in_width), name=f"s3_exp2_in{g}")
        # The row's shift is formed after S3's registers, from its growth (the clamp
        # behind the subtraction was the K side's longest path), as the delay line's
        # first stage takes it.
        growth_reg = Signal.like(growth, name=f"s3_growth_reg{g}")
        grew_reg = Signal(name=f"s3_grew_reg{g}")
        first_reg = Signal(name=f"s3_first_row{g}")
        row_shift = Signal(p.shift_bits, name=f"s3_shift{g}")
        m.d.comb += row_shift.eq(
            Mux(
                first_reg | (grew_reg & (growth_reg > top_shift)),
                top_shift,
                Mux(grew_reg, growth_reg, 0),
            )
        )
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
                growth_reg.eq(growth),
                grew_reg.eq(grew),
                first_reg.eq(s2_first_row),
                running_max.eq(Mux(s2_last_row, p.max_start, Mux(grew, ceiling, previous))),
                max_reg.eq(Mux(grew, ceiling, previous)),
            ]
        # Delay the shift and the row's max alongside the exp2 pipeline.
        shift = _delay(m, row_shift, unit.LATENCY, f"shift{g}")
        # l's own copy, clamped where l shifts to 0 anyway: a shorter shifter on l's
        # update, a cycle's loop.
        l_top = (1 << (p.l_bits + 1).bit_length()) - 1
        if l_top < top_shift:
            clamped = Mux(row_shift > l_top, l_top, row_shift)[: l_top.bit_length()]
            l_shift = _delay(m, clamped, unit.LATENCY, f"l_shift{g}")
        else:
            l_shift = shift
        new_max = _delay(m, max_reg, unit.LATENCY, f"max{g}")
        s3_valid = Signal(name=f"s3_valid{g}")
        m.d.sync += s3_valid.eq(s2_valid)
        m.d.comb += [unit.i.payload.eq(x), unit.i.valid.eq(s3_valid)]
        return {"exp2": unit, "shift": shift, "l_shift": l_shift, "max": new_max}

    def _push(self, m, queries, running_sum, last_row, row_fifo, k_results) -> None:
        """S4: ``p = exp2(s - m)`` and ``l <- round(l * 2**-shift) + p``; the row's entry (every
        query's shift and ``p``) pushed into the row FIFO, and at a request's last row its
        final (m, l) into the queue."""
        p = self.params
        push = queries[0]["exp2"].o.valid
        entry = []
        stats = []
        for g, query in enumerate(queries):
            prob = query["exp2"].o.payload
            new_sum = Signal(p.l_bits, name=f"s4_l{g}")
            # round(l * 2**-shift) + p in one adder: the rounding bit enters as the carry
            # into both operands' bit 0 (2a + r + 2b + r = 2(a + b + r)).
            halves = shift_halves(running_sum[g], query["l_shift"])
            m.d.comb += new_sum.eq((halves + Cat(halves[0], prob))[1:])
            with m.If(push):
                m.d.sync += running_sum[g].eq(new_sum)
            entry += [query["shift"], prob[: p.prob_frac_bits + 1]]
            # The final (m, l) is pushed the cycle after, from the l register (the new sum
            # straight into the queue's LUT RAM was the K side's longest path).
            stats.append(Cat(registered(m, f"s5_max{g}", query["max"]), running_sum[g]))
        m.d.comb += [
            row_fifo.w_en.eq(push),
            row_fifo.w_data.eq(Cat(*entry)),
            k_results.w_en.eq(registered(m, "s5_last_push", push & last_row)),
            k_results.w_data.eq(Cat(*stats)),
        ]


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
    KB (products), K1 and KS (their sum), KC (the row's dot product and its scale's product
    and shift amounts), S1 and SP (dot times the scales' mantissas), SH and S2 (shift, round,
    saturate), S3 (the running max and the exp2 argument), the exp2 units, S4 (``l`` and the
    entry's push).

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.row_beat_layout`))
        K row beats, from the K :class:`~.sequencer.Sequencer`.
    bank : In(range(DESCRIPTOR_SLOTS))
        The descriptor slot whose queries the beats meet.
    query_w : In(stream.Signature(:func:`.beats.query_write_layout`, always_ready=True))
        Every slot's query beats, as the descriptor brings them.
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
                "query_w": In(stream.Signature(query_write_layout(p), always_ready=True)),
                "query_scales": In(unsigned(16)).array(DESCRIPTOR_SLOTS, p.gqa_group),
                "rows_o": Out(stream.Signature(row_entry_layout(p))),
                "stats_o": Out(stream.Signature(stats_layout(p))),
                "bank_done": Out(DESCRIPTOR_SLOTS),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        m.submodules.dot = dot = QueryDot(p)
        m.submodules.score = score = ScoreScale(p)
        m.submodules.softmax = softmax = OnlineSoftmax(p)
        wiring.connect(m, wiring.flipped(self.i), dot.i)
        wiring.connect(m, dot.o, score.i)
        wiring.connect(m, score.o, softmax.i)
        wiring.connect(m, softmax.rows_o, wiring.flipped(self.rows_o))
        wiring.connect(m, softmax.stats_o, wiring.flipped(self.stats_o))
        m.d.comb += [
            dot.room.eq(softmax.room),
            dot.bank.eq(self.bank),
            self.bank_done.eq(dot.bank_done),
        ]
        wiring.connect(m, wiring.flipped(self.query_w), dot.query_w)
        for s in range(DESCRIPTOR_SLOTS):
            for g in range(p.gqa_group):
                m.d.comb += dot.query_scales[s][g].eq(self.query_scales[s][g])
        return m


def _delay(m: Module, value, cycles: int, name: str):
    """``value`` delayed by ``cycles`` registers (the fixed exp2 latency: it never stalls)."""
    line = value
    for stage in range(cycles):
        delayed = Signal.like(value, name=f"{name}_d{stage}")
        m.d.sync += delayed.eq(line)
        line = delayed
    return line
