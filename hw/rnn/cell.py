"""``rnn`` cell: a row block's gates and old state into its new c and h (LSTM or GRU)."""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2
from tandem.host.common import bits
from tandem.host.rnn import STATE_BITS, RnnParams, clamp_is_exact, out_fields

from ..common.fixed import clamp, clamp_changes, round_shift_right, saturate, saturate_changes
from .activations import rom_signature, table_read, table_value
from .beats import checked, gates_layout, tag_layout

__all__ = ["Cell"]


class Cell(wiring.Component):
    """Cell update, tanh, and the new h: written to the h memory and sent on ``o``.

    Stages from a row block's arrival on ``i``: (1) LSTM ``c' = sat(f c + i g)``; GRU
    ``n = clamp(n_x + r n_h)``; (2) the LSTM writes c', tanh table read of c' (rounded to
    ``state_frac`` and clamped) or of n; (3) interpolate; (4) LSTM ``h' = sat16(o tanh(c'))``,
    GRU ``h' = sat16((1 - z) n + z h)``: at the end of this cycle h' is written (``written``;
    a GRU also writes it to the state memory, where it keeps h) and enters ``o``. ``o.sat`` is
    sticky: cleared by ``start``, raised from the beat whose results saturated a counted place
    (c, h, the tanh input where the clamp is not exact, or ``i.sat``) onwards. Every register
    moves on ``i.ready``, which is ``~o.valid | o.ready``.

    Parameters
    ----------
    params : RnnParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.gates_layout`))
    tanh_rd : In(ReadPort.Signature(...)).array(units_per_block)
        Read ports of the tanh :func:`.activations.activation_rom`.
    state_wr, h_wr : In(WritePort.Signature(...))
        The state memory (c; a GRU's h) and the h memory (one lane enable per h value).
    o : Out(stream.Signature(out layout))
        :func:`tandem.host.rnn.out_fields`: h, c (GRU: zeros), sat.
    start : In(1)
        A sequence starts: clears the sticky ``sat``.
    written, busy : Out(1)
        A result is written this cycle; one is in the last stage or on ``o``.
    """

    def __init__(self, params: RnnParams):
        self.params = p = checked(params)
        ub, nb = p.units_per_block, p.batch
        super().__init__(
            {
                "i": In(stream.Signature(gates_layout(p))),
                "tanh_rd": In(rom_signature(p)).array(ub),
                "state_wr": In(
                    WritePort.Signature(
                        addr_width=ceil_log2(nb * p.max_row_blocks), shape=unsigned(ub * p.c_bits)
                    )
                ),
                "h_wr": In(
                    WritePort.Signature(
                        addr_width=ceil_log2(2 * nb * p.h_words),
                        shape=unsigned(p.h_word * STATE_BITS),
                        granularity=STATE_BITS,
                    )
                ),
                "o": Out(stream.Signature(bits.layout(out_fields(p)))),
                "start": In(1),
                "written": Out(1),
                "busy": Out(1),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        ub, cb, gw = p.units_per_block, p.c_bits, p.gate_frac + 1
        gru = p.cell == "gru"
        exact_tanh = clamp_is_exact(p, "tanh")
        en = Signal()
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]

        # control: valid, tag and the saturations so far of the beat in stages 1..3
        valid = [Signal(name=f"cell_valid{k}") for k in (1, 2, 3)]
        tag = [Signal(tag_layout(p), name=f"cell_tag{k}") for k in (1, 2, 3)]
        sat = [Signal(name=f"cell_sat{k}") for k in (1, 2, 3)]
        with m.If(en):
            m.d.sync += [valid[0].eq(self.i.valid), tag[0].eq(self.i.payload.tag)]
            m.d.sync += [valid[k].eq(valid[k - 1]) for k in (1, 2)]
            m.d.sync += [tag[k].eq(tag[k - 1]) for k in (1, 2)]

        c_new, n_pre, o_gate, flags = self._update(m, en)
        with m.If(en):
            m.d.sync += sat[0].eq(self.i.payload.sat | (Cat(*flags).any() if flags else 0))
        if not gru:
            m.d.comb += [
                self.state_wr.addr.eq(tag[0].b * p.max_row_blocks + tag[0].row),
                self.state_wr.data.eq(Cat(*c_new)),
                self.state_wr.en.eq(en & valid[0]),
            ]

        # stages 2 and 3: tanh of c' (rounded to state_frac, clamped) or of n
        tanh_out, flags = [], []
        for u in range(ub):
            if gru:
                operand = n_pre[u]
            else:
                c_in = round_shift_right(c_new[u], p.cell_frac - p.state_frac, "half_up")
                operand = clamp(c_in, p.act_max)
                if not exact_tanh:
                    flags.append(clamp_changes(c_in, p.act_max))
            port = self.tanh_rd[u]
            neg, rem = table_read(m, p, operand, port, en, f"tc{u}")
            value = Signal(signed(gw + 1), name=f"tc{u}_y")
            with m.If(en):
                m.d.sync += value.eq(table_value(p, "tanh", neg, rem, port.data))
            tanh_out.append(value)
        c_hold = [[Signal(signed(cb), name=f"c_hold{k}_{u}") for u in range(ub)] for k in (0, 1)]
        o_hold = [
            [Signal(signed(gw + 1), name=f"o_hold{k}_{u}") for u in range(ub)] for k in (0, 1)
        ]
        with m.If(en):
            m.d.sync += [
                sat[1].eq(sat[0] | (Cat(*flags).any() if flags else 0)),
                sat[2].eq(sat[1]),
            ]
            for u in range(ub):
                m.d.sync += [
                    c_hold[0][u].eq(c_new[u]),
                    c_hold[1][u].eq(c_hold[0][u]),
                    o_hold[0][u].eq(o_gate[u]),
                    o_hold[1][u].eq(o_hold[0][u]),
                ]
        c_final, o_final = c_hold[1], o_hold[1]

        # stage 4: h'; written, counted and sent at its end
        if gru:  # o_final = z and c_final = the old h
            align = p.gate_frac - p.state_frac
            one = 1 << p.gate_frac
            h_raw = [
                (one - z) * n + z * (h << align) for z, n, h in zip(o_final, tanh_out, c_final)
            ]
        else:
            h_raw = [o * y for o, y in zip(o_final, tanh_out, strict=True)]
        h_round = [
            round_shift_right(raw, 2 * p.gate_frac - p.state_frac, "half_up") for raw in h_raw
        ]
        h_new = [saturate(value, signed(STATE_BITS)) for value in h_round]
        h_flags = [saturate_changes(value, signed(STATE_BITS)) for value in h_round]
        beat_sat = Signal()
        m.d.comb += beat_sat.eq(sat[2] | Cat(*h_flags).any())
        write = Signal()
        m.d.comb += [write.eq(en & valid[2]), self.written.eq(write)]
        self._write(m, tag[2], h_new, write)
        sat_seen = Signal()  # a counted place saturated in this sequence
        with m.If(self.start):
            m.d.sync += sat_seen.eq(0)
        with m.If(write):
            m.d.sync += sat_seen.eq(sat_seen | beat_sat)
        with m.If(en):
            m.d.sync += [
                self.o.valid.eq(valid[2]),
                self.o.payload.h.eq(Cat(*h_new)),
                self.o.payload.c.eq(0 if gru else Cat(*c_final)),
                self.o.payload.sat.eq(sat_seen | beat_sat),
            ]
        m.d.comb += self.busy.eq(self.o.valid | valid[2])
        return m

    def _update(self, m, en):
        """Stage 1: c' (LSTM) or n's clamped pre-activation (GRU), the output gate (z) and the
        old state carried on; returns them and the flags of counted saturations."""
        p = self.params
        ub, cb, gw = p.units_per_block, p.c_bits, p.gate_frac + 1
        gru = p.cell == "gru"
        exact_tanh = clamp_is_exact(p, "tanh")
        sum_frac = p.gate_frac + max(p.gate_frac, p.cell_frac)
        c_new = [Signal(signed(cb), name=f"c_new_{u}") for u in range(ub)]
        n_pre = [Signal(signed(p.act_bits), name=f"n_pre_{u}") for u in range(ub)]
        o_gate = [Signal(signed(gw + 1), name=f"o_gate_{u}") for u in range(ub)]
        flags = []
        for u in range(ub):
            g = self.i.payload.gates[u]
            c_old = Mux(self.i.payload.tag.step0, 0, self.i.payload.state[u])
            with m.If(en):
                if gru:  # c_new keeps the old h
                    n_sum = g.n_x + round_shift_right(g.r * g.n_h, p.gate_frac, "half_up")
                    m.d.sync += [
                        n_pre[u].eq(clamp(n_sum, p.act_max)),
                        c_new[u].eq(c_old),
                        o_gate[u].eq(g.z),
                    ]
                    if not exact_tanh:
                        flags.append(clamp_changes(n_sum, p.act_max))
                else:  # c has cell_frac fraction bits
                    fc = (g.f * c_old) << (sum_frac - p.gate_frac - p.cell_frac)
                    ig = (g.i * g.g) << (sum_frac - 2 * p.gate_frac)
                    c_sum = round_shift_right(fc + ig, sum_frac - p.cell_frac, "half_up")
                    m.d.sync += [c_new[u].eq(saturate(c_sum, signed(cb))), o_gate[u].eq(g.o)]
                    flags.append(saturate_changes(c_sum, signed(cb)))
        return c_new, n_pre, o_gate, flags

    def _write(self, m, tag, h_new, write):
        """Stage 4: the new h into the h memory (its units' lanes of the h word) and, for a
        GRU, into the state memory."""
        p = self.params
        ub, nb, hw = p.units_per_block, p.batch, p.h_word
        unit0 = tag.row * ub
        groups = hw // ub
        m.d.comb += [
            self.h_wr.addr.eq(tag.par * (nb * p.h_words) + tag.b * p.h_words + unit0 // hw),
            self.h_wr.data.eq(Cat(*(h_new * groups))),
        ]
        if groups > 1:
            group = (unit0 % hw) // ub
            for g in range(groups):
                for u in range(ub):
                    m.d.comb += self.h_wr.en[g * ub + u].eq(write & (group == g))
        else:
            m.d.comb += self.h_wr.en.eq(Mux(write, (1 << hw) - 1, 0))
        if p.cell == "gru":  # the unit's h is its state: kept where an LSTM keeps c
            m.d.comb += [
                self.state_wr.addr.eq(tag.b * p.max_row_blocks + tag.row),
                self.state_wr.data.eq(Cat(*h_new)),
                self.state_wr.en.eq(write),
            ]
