"""``rnn`` activations: a row block's pre-activations into its units' gates.

Tables: :func:`tandem.host.rnn.activation_tables` (the golden model reads the same ones).
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory, ReadPort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2
from tandem.host.rnn import RnnParams, activation_tables, clamp_is_exact

from ..common.fixed import clamp, clamp_changes, round_shift_right
from .beats import GATE_NAMES, checked, gates_layout, sums_layout, tag_layout

__all__ = ["Activations", "activation_rom", "lane_kind", "table_read", "table_value"]


def activation_rom(params: RnnParams, kind: str) -> Memory:
    """The ``kind`` (``"sigmoid"`` or ``"tanh"``) table: one word per segment, its base in the
    low ``gate_frac + 1`` bits and its slope above."""
    gw = params.gate_frac + 1
    base, slope = activation_tables(params)[kind]
    init = [int(b) | (int(s) << gw) for b, s in zip(base, slope, strict=True)]
    return Memory(shape=unsigned(2 * gw), depth=len(init), init=init)


def rom_signature(params: RnnParams) -> ReadPort.Signature:
    """Signature of a read port of :func:`activation_rom`."""
    return ReadPort.Signature(
        addr_width=params.act_segment_bits, shape=unsigned(2 * (params.gate_frac + 1))
    )


def lane_kind(params: RnnParams, slot: int) -> str | None:
    """The table of a unit's gate row ``slot`` (0..3), or None where it passes through (a
    GRU's n_x and n_h, which the cell combines before their tanh)."""
    if params.cell == "gru":
        return None if slot >= 2 else "sigmoid"
    return "tanh" if slot == 2 else "sigmoid"


def table_read(m: Module, params: RnnParams, value, port, enable, name: str):
    """First stage of a table activation of ``value`` (clamped to +-act_max): reads the segment
    of ``|value|`` from ``port``; returns the registered sign and in-segment remainder."""
    p = params
    mag = Mux(value < 0, -value, value).as_unsigned()[: p.act_bits - 1]
    neg = Signal(name=f"{name}_neg")
    rem = Signal(max(p.rem_bits, 1), name=f"{name}_rem")
    m.d.comb += [port.en.eq(enable), port.addr.eq(mag >> p.rem_bits)]
    with m.If(enable):
        m.d.sync += neg.eq(value < 0)
        if p.rem_bits:
            m.d.sync += rem.eq(mag[: p.rem_bits])
    return neg, rem


def table_value(params: RnnParams, kind: str, neg, rem, word):
    """Second stage: the segment's base plus its slope times the remainder, from the table
    ``word``; negative inputs mirror it (sigmoid(-a) = 1 - sigmoid(a), tanh is odd)."""
    p = params
    gw = p.gate_frac + 1
    base, slope = word[:gw], word[gw:]
    # Without remainder bits a segment is one input value: its base alone (as the golden model).
    y = base + round_shift_right(slope * rem, p.rem_bits, "half_up") if p.rem_bits else base
    return Mux(neg, (1 << p.gate_frac) - y, y) if kind == "sigmoid" else Mux(neg, -y, y)


class Activations(wiring.Component):
    """Rescale by ``w_frac``, clamp to +-act_max, and sigmoid or tanh of every gate row.

    Stages from a row block's arrival on ``i``: (1) rescale and clamp; (2) table read; (3)
    interpolate, and the unit's old state (c, or a GRU's h) read the cycle before arrives; the
    gates leave on ``o`` 3 cycles after arrival. ``sat`` says that a counted clamp changed a
    result (:func:`tandem.host.rnn.clamp_is_exact`: a clamp at the table's exact limit is not
    counted; a GRU's n_x and n_h always are). Every register moves on ``o.ready``.

    Parameters
    ----------
    params : RnnParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.sums_layout`))
    w_frac : In(w_frac_bits)
        The sequence's weight scale: pre-activations carry ``w_frac + state_frac`` fraction bits.
    state_rd : In(ReadPort.Signature(...))
        The state memory (the c memory; a GRU keeps h there), ``batch * max_row_blocks`` words.
    sigmoid_rd, tanh_rd : In(ReadPort.Signature(...)).array(...)
        One read port of :func:`activation_rom` per lane of that table.
    o : Out(stream.Signature(:func:`.beats.gates_layout`))
    """

    def __init__(self, params: RnnParams):
        self.params = p = checked(params)
        kinds = [lane_kind(p, r % 4) for r in range(p.tile_rows)]
        ports = {
            "i": In(stream.Signature(sums_layout(p))),
            "w_frac": In(p.w_frac_bits),
            "state_rd": In(
                ReadPort.Signature(
                    addr_width=ceil_log2(p.batch * p.max_row_blocks),
                    shape=unsigned(p.units_per_block * p.c_bits),
                )
            ),
            "o": Out(stream.Signature(gates_layout(p))),
        }
        for kind in ("sigmoid", "tanh"):
            if kind in kinds:
                ports[f"{kind}_rd"] = In(rom_signature(p)).array(kinds.count(kind))
        super().__init__(ports)

    def elaborate(self, platform):
        p = self.params
        m = Module()
        en = self.o.ready
        m.d.comb += self.i.ready.eq(en)
        exact = {k: clamp_is_exact(p, k) for k in ("sigmoid", "tanh")}
        names = GATE_NAMES[p.cell]
        ub, cb = p.units_per_block, p.c_bits

        # control: valid and tag of the beat in stages 1 and 2 (stage 3 is o)
        valid = [Signal(name=f"act_valid{k}") for k in (1, 2)]
        tag = [Signal(tag_layout(p), name=f"act_tag{k}") for k in (1, 2)]
        sat = [Signal(name=f"act_sat{k}") for k in (1, 2)]
        with m.If(en):
            m.d.sync += [
                valid[0].eq(self.i.valid),
                valid[1].eq(valid[0]),
                self.o.valid.eq(valid[1]),
                tag[0].eq(self.i.payload.tag),
                tag[1].eq(tag[0]),
                self.o.payload.tag.eq(tag[1]),
            ]

        # stage 1: rescale by w_frac and clamp
        a_reg = [Signal(signed(p.act_bits), name=f"a_{r}") for r in range(p.tile_rows)]
        flags = []
        with m.If(en):
            for r in range(p.tile_rows):
                scaled = round_shift_right(self.i.payload.pre[r], self.w_frac, "half_up")
                m.d.sync += a_reg[r].eq(clamp(scaled, p.act_max))
                kind = lane_kind(p, r % 4)
                if kind is None or not exact[kind]:
                    flags.append(clamp_changes(scaled, p.act_max))
            m.d.sync += [
                sat[0].eq(Cat(*flags).any() if flags else 0),
                sat[1].eq(sat[0]),
                self.o.payload.sat.eq(sat[1]),
            ]

        # stages 2 and 3: table read and interpolation, or two registers for pass-through lanes
        used = {"sigmoid": 0, "tanh": 0}
        for r in range(p.tile_rows):
            gate = getattr(self.o.payload.gates[r // 4], names[r % 4])
            kind = lane_kind(p, r % 4)
            if kind is None:
                delayed = Signal(signed(p.act_bits), name=f"g{r}_d0")
                with m.If(en):
                    m.d.sync += [delayed.eq(a_reg[r]), gate.eq(delayed)]
                continue
            port = getattr(self, f"{kind}_rd")[used[kind]]
            used[kind] += 1
            neg, rem = table_read(m, p, a_reg[r], port, en, f"g{r}")
            with m.If(en):
                m.d.sync += gate.eq(table_value(p, kind, neg, rem, port.data))

        # the units' old state, read in stage 2
        m.d.comb += [
            self.state_rd.en.eq(en),
            self.state_rd.addr.eq(tag[1].b * p.max_row_blocks + tag[1].row),
        ]
        m.d.comb += [
            self.o.payload.state[u].eq(self.state_rd.data[u * cb : (u + 1) * cb].as_signed())
            for u in range(ub)
        ]
        return m
