"""``rnn`` gateware: a tile dispatcher that runs an LSTM's or GRU's tile program on a MAC array.

Number formats and arithmetic: :mod:`tandem.host.rnn` (the golden model, bit-exact with this
file). Tile program and its dependencies: :mod:`tandem.mappings.rnn.tiling`. Timing model:
:mod:`tandem.mappings.rnn.schedule`, which models exactly the rules below.

Ports
-----
``tile_i``
    Loads the program, one beat per entry (tile): entry fields, the tile's weights and, on the
    first entry of a row block, its biases (:func:`tandem.host.rnn.tile_beats`). Accepted only
    between sequences. Addresses count from 0 and restart after the entry with ``end`` set.
    Program, weights and biases live in memories and survive ``rst``. With
    ``weight_source = "stream"`` the weights are not loaded here but arrive on ``w_i``.
``w_i`` (streamed weights only)
    One tile of weights per program entry, every step, in program order; batch element 0 of
    the entry takes it, the other batch elements reuse it.
``cmd_i``
    Starts a sequence: ``steps``, ``x_blocks``, ``row_blocks``, ``w_frac``. h and c start at 0.
``x_i``
    ``tile_cols`` int16 inputs per beat, in step, batch, column-block order; taken while a
    sequence runs, at most one step ahead of the step being dispatched.
``o``
    h and c (GRU: zeros) of one row block's ``tile_rows / 4`` units for one batch element, in
    step, row block, batch order, and ``sat``: a sticky flag, cleared by each command, raised
    from the beat whose results saturated a counted place (c, h, an activation input whose clamp
    changes a result; :func:`tandem.host.rnn.saturation_flags`) onwards. One register and an OR
    per stage: the limits compare the values anyway.

Cycle behaviour (what the scheduler models)
-------------------------------------------
* The dispatcher issues at most one *beat* per cycle: the current program entry for batch
  element ``b``; beats go entry by entry, batch 0..B-1 inside each entry, step after step.
* A beat issues when (1) the pipeline moves (``o`` is empty or being taken), (2) for an x
  tile, the x of its step has fully arrived, (3) for an entry with ``wait`` at step t >= 1,
  ``done >= (t - 1) * row_blocks * B + (need + 1) * B``, where ``done`` counts the
  (row block, batch element) results written so far in this sequence.
* Pipeline from issue at cycle i (``lv = log2(tile_cols)``): i+1 operand and weight words
  (memory read at the issue edge), products; i+2 .. i+1+lv adder tree, one register per
  level; i+2+lv accumulate (the first tile of a row block starts from the bias; batch
  elements rotate through a B-deep accumulator ring); i+3+lv rescale by ``w_frac`` and clamp;
  i+4+lv table read; i+5+lv interpolate (sigmoid i, f, o; tanh g), c read; i+6+lv cell update;
  i+7+lv c write, tanh(c) table read; i+8+lv interpolate; i+9+lv h = o * tanh(c). At the end
  of cycle i+9+lv h is written, ``done`` counts it and the result enters the output register,
  so a beat that waits for it can issue at i+10+lv: :func:`tandem.host.rnn.dependency_latency`.
* Every register of the pipeline moves on one enable, ``~o.valid | o.ready``: backpressure
  freezes the engine as a whole (the only timing the scheduler does not know, with a slow x).
* h is double-buffered by step parity (step t reads buffer (t-1) % 2 and writes t % 2), so a
  row block never overwrites h that a later row block of the same step still reads. c is read
  and written by the row block that owns it, a step apart.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from tandem.host.common import bits
from tandem.host.rnn import (
    ISSUE_TO_WRITE,
    STATE_BITS,
    RnnParams,
    activation_tables,
    clamp_is_exact,
    cmd_fields,
    out_fields,
    tile_fields,
)

from ..common.fixed import round_shift_right, saturate

__all__ = ["Rnn"]

_ENTRY_FIELDS = ("src", "col", "row", "first", "last", "wait", "need", "end")


def _clamp(value, limit: int):
    return Mux(value > limit, limit, Mux(value < -limit, -limit, value))


def _clamped(value, limit: int):
    """Whether :func:`_clamp` changes ``value``."""
    return (value > limit) | (value < -limit)


def _saturated(value, bits: int):
    """``value`` saturated to a signed ``bits``-wide integer, and whether that changed it."""
    top = (1 << (bits - 1)) - 1
    return saturate(value, signed(bits)), (value > top) | (value < -top - 1)


class Rnn(wiring.Component):
    """LSTM/GRU tile dispatcher + MAC array + activation units + cell/hidden update.

    GRU (``cell = "gru"``): the four rows of a unit are r, z, n_x, n_h; r and z lanes use the
    sigmoid table, n_x and n_h pass through, the cell stage forms ``n_x + r * n_h`` for the tanh
    table and ``h' = (1 - z) n + z h`` with the old h kept in the c memory.

    Parameters
    ----------
    params : RnnParams
    """

    LATENCY = None  # per sequence; the per-dependency latency is params.latency

    def __init__(self, params: RnnParams):
        if not isinstance(params, RnnParams):
            raise TypeError(f"params must be an RnnParams, not {params!r}")
        self.params = p = params
        self.tile_layout = bits.layout(tile_fields(p))
        self.cmd_layout = bits.layout(cmd_fields(p))
        self.out_layout = bits.layout(out_fields(p))
        ports = {
            "tile_i": In(stream.Signature(self.tile_layout)),
            "cmd_i": In(stream.Signature(self.cmd_layout)),
            "x_i": In(stream.Signature(unsigned(p.tile_cols * STATE_BITS))),
            "o": Out(stream.Signature(self.out_layout)),
        }
        if p.weight_source == "stream":
            ports["w_i"] = In(stream.Signature(unsigned(p.tile_bits)))
        super().__init__(ports)

    def elaborate(self, platform):
        p = self.params
        m = Module()
        tr, tc, nb = p.tile_rows, p.tile_cols, p.batch
        ub, hw = p.units_per_block, p.h_word
        lv = (tc - 1).bit_length()
        wb, ab = p.weight_bits, p.acc_bits
        entry_fields = [(n, w) for n, w in tile_fields(p) if n in _ENTRY_FIELDS]
        entry_layout = bits.layout(entry_fields)

        # --- memories -----------------------------------------------------------------------
        depth = p.max_entries
        m.submodules.prog_mem = prog_mem = Memory(shape=entry_layout, depth=depth, init=[])
        on_chip = p.weight_source == "memory"
        if on_chip:
            m.submodules.w_mem = w_mem = Memory(shape=unsigned(p.tile_bits), depth=depth, init=[])
        m.submodules.bias_mem = bias_mem = Memory(
            shape=unsigned(tr * ab), depth=p.max_row_blocks, init=[]
        )
        x_depth = 2 * nb * p.max_x_blocks
        m.submodules.x_mem = x_mem = Memory(shape=unsigned(tc * STATE_BITS), depth=x_depth, init=[])
        h_depth = 2 * nb * p.h_words
        m.submodules.h_mem = h_mem = Memory(shape=unsigned(hw * STATE_BITS), depth=h_depth, init=[])
        cb = p.c_bits  # an LSTM's c lanes: cell_bits; a GRU keeps h there
        m.submodules.c_mem = c_mem = Memory(
            shape=unsigned(ub * cb), depth=nb * p.max_row_blocks, init=[]
        )
        tables = activation_tables(p)
        gw = p.gate_frac + 1  # width of a table base or slope (both in [0, 1])

        def rom(name):
            base, slope = tables[name]
            init = [int(b_) | (int(s_) << gw) for b_, s_ in zip(base, slope)]
            mem = Memory(shape=unsigned(2 * gw), depth=len(init), init=init)
            m.submodules[f"{name}_rom"] = mem
            return mem

        sig_rom, tanh_rom = rom("sigmoid"), rom("tanh")

        prog_rd = prog_mem.read_port(domain="comb")
        bias_rd = bias_mem.read_port()
        x_rd = x_mem.read_port()
        h_rd = h_mem.read_port()
        c_rd = c_mem.read_port()
        prog_wr, bias_wr = prog_mem.write_port(), bias_mem.write_port()
        if on_chip:
            w_rd, w_wr = w_mem.read_port(), w_mem.write_port()
            w_data = w_rd.data
        else:
            w_data = Signal(p.tile_bits)  # the current entry's tile, held for its B beats
        x_wr = x_mem.write_port()
        h_wr = h_mem.write_port(granularity=STATE_BITS)
        c_wr = c_mem.write_port()

        # --- pipeline enable ----------------------------------------------------------------
        en = Signal()
        m.d.comb += en.eq(~self.o.valid | self.o.ready)
        for port in (bias_rd, x_rd, h_rd, c_rd) + ((w_rd,) if on_chip else ()):
            m.d.comb += port.en.eq(en)

        # --- control state ------------------------------------------------------------------
        steps = Signal(p.step_bits)
        x_blocks = Signal(p.max_x_blocks.bit_length())
        row_blocks = Signal(p.max_row_blocks.bit_length())
        w_frac = Signal(p.w_frac_bits)
        count_bits = p.step_bits + (p.max_row_blocks * nb).bit_length() + 1
        t = Signal(p.step_bits)
        pc = Signal(range(depth))
        b = Signal(range(nb))
        done = Signal(count_bits)
        cur_base = Signal(count_bits)
        prev_base = Signal(count_bits)
        x_step = Signal(p.step_bits + 1)
        x_col = Signal(range(max(p.max_x_blocks, 2)))
        x_b = Signal(range(nb))
        load_addr = Signal(range(depth))
        running = Signal()
        draining = Signal()
        sat_seen = Signal()  # a counted place saturated in this sequence
        idle = Signal()
        m.d.comb += idle.eq(~running & ~draining)

        # --- loader (between sequences) -----------------------------------------------------
        tile = self.tile_i.payload
        m.d.comb += [
            self.tile_i.ready.eq(idle),
            prog_wr.addr.eq(load_addr),
            bias_wr.addr.eq(tile.row),
            bias_wr.data.eq(tile.bias),
        ]
        m.d.comb += [getattr(prog_wr.data, n).eq(getattr(tile, n)) for n in _ENTRY_FIELDS]
        if on_chip:
            m.d.comb += [w_wr.addr.eq(load_addr), w_wr.data.eq(tile.weights)]
        with m.If(self.tile_i.valid & self.tile_i.ready):
            m.d.comb += [prog_wr.en.eq(1), bias_wr.en.eq(tile.first)]
            if on_chip:
                m.d.comb += w_wr.en.eq(1)
            m.d.sync += load_addr.eq(Mux(tile.end, 0, load_addr + 1))

        # --- command ------------------------------------------------------------------------
        cmd = self.cmd_i.payload
        m.d.comb += self.cmd_i.ready.eq(idle)
        with m.If(self.cmd_i.valid & self.cmd_i.ready):
            m.d.sync += [
                steps.eq(cmd.steps),
                x_blocks.eq(cmd.x_blocks),
                row_blocks.eq(cmd.row_blocks),
                w_frac.eq(cmd.w_frac),
                sat_seen.eq(0),
                t.eq(0),
                pc.eq(0),
                b.eq(0),
                done.eq(0),
                cur_base.eq(0),
                prev_base.eq(0),
                x_step.eq(0),
                x_col.eq(0),
                x_b.eq(0),
                running.eq(1),
            ]

        # --- x loader: at most one step ahead of the dispatcher ------------------------------
        x_take = Signal()
        m.d.comb += [
            x_take.eq(running & (x_step < steps) & (x_step <= t + 1)),
            self.x_i.ready.eq(x_take),
            x_wr.addr.eq(x_step[0] * (nb * p.max_x_blocks) + x_b * p.max_x_blocks + x_col),
            x_wr.data.eq(self.x_i.payload),
        ]
        with m.If(self.x_i.valid & x_take):
            m.d.comb += x_wr.en.eq(1)
            with m.If(x_col == x_blocks - 1):
                m.d.sync += x_col.eq(0)
                with m.If(x_b == nb - 1):
                    m.d.sync += [x_b.eq(0), x_step.eq(x_step + 1)]
                with m.Else():
                    m.d.sync += x_b.eq(x_b + 1)
            with m.Else():
                m.d.sync += x_col.eq(x_col + 1)

        # --- dispatcher -----------------------------------------------------------------------
        entry = prog_rd.data
        m.d.comb += prog_rd.addr.eq(pc)
        threshold = Signal(count_bits + 1)
        m.d.comb += threshold.eq(prev_base + (entry.need + 1) * nb)
        x_ok = (entry.src == 1) | (x_step > t)
        dep_ok = ~entry.wait | (t == 0) | (done >= threshold)
        issue = Signal()
        if on_chip:
            m.d.comb += issue.eq(running & en & x_ok & dep_ok)
        else:
            # A new entry (batch element 0) takes its tile from w_i; the others reuse it.
            w_ok = (b != 0) | self.w_i.valid
            m.d.comb += [
                issue.eq(running & en & x_ok & dep_ok & w_ok),
                self.w_i.ready.eq(issue & (b == 0)),
            ]
            with m.If(self.w_i.valid & self.w_i.ready):
                m.d.sync += w_data.eq(self.w_i.payload)
        h_prev = ~t[0]  # buffer parity of step t - 1
        h_word_of_col = (entry.col * tc) // hw if hw > tc else entry.col
        if on_chip:
            m.d.comb += w_rd.addr.eq(pc)
        m.d.comb += [
            x_rd.addr.eq(t[0] * (nb * p.max_x_blocks) + b * p.max_x_blocks + entry.col),
            h_rd.addr.eq(h_prev * (nb * p.h_words) + b * p.h_words + h_word_of_col),
        ]
        with m.If(issue):
            with m.If(b == nb - 1):
                m.d.sync += b.eq(0)
                with m.If(entry.end):
                    m.d.sync += [
                        pc.eq(0),
                        t.eq(t + 1),
                        prev_base.eq(cur_base),
                        cur_base.eq(cur_base + row_blocks * nb),
                    ]
                    with m.If(t + 1 == steps):
                        m.d.sync += [running.eq(0), draining.eq(1)]
                with m.Else():
                    m.d.sync += pc.eq(pc + 1)
            with m.Else():
                m.d.sync += b.eq(b + 1)

        # --- pipeline control, one record per stage ----------------------------------------
        slice_count = hw // tc
        ctrl_layout = data.StructLayout(
            {
                "valid": 1,
                "src": 1,
                "zero": 1,
                "slice": range(max(slice_count, 2)),
                "first": 1,
                "last": 1,
                "row": p.row_bits,
                "b": range(max(nb, 2)),
                "par": 1,
                "step0": 1,
            }
        )
        ctrl = [Signal(ctrl_layout, name=f"ctrl{k}") for k in range(ISSUE_TO_WRITE + lv + 1)]
        m.d.comb += [
            ctrl[0].valid.eq(issue),
            ctrl[0].src.eq(entry.src),
            ctrl[0].zero.eq((entry.src == 1) & (t == 0)),
            ctrl[0].first.eq(entry.first),
            ctrl[0].last.eq(entry.last),
            ctrl[0].row.eq(entry.row),
            ctrl[0].b.eq(b),
            ctrl[0].par.eq(t[0]),
            ctrl[0].step0.eq(t == 0),
        ]
        if slice_count > 1:
            m.d.comb += ctrl[0].slice.eq(entry.col % slice_count)
        with m.If(en):
            m.d.sync += [ctrl[k + 1].eq(ctrl[k]) for k in range(len(ctrl) - 1)]

        # --- stage 1: operands and products -----------------------------------------------
        c1 = ctrl[1]
        x_vec = [x_rd.data[k * STATE_BITS : (k + 1) * STATE_BITS].as_signed() for k in range(tc)]
        h_word = h_rd.data
        h_vec = []
        for k in range(tc):
            choices = [
                h_word[(s * tc + k) * STATE_BITS : (s * tc + k + 1) * STATE_BITS]
                for s in range(slice_count)
            ]
            value = choices[0]
            for s in range(1, slice_count):
                value = Mux(c1.slice == s, choices[s], value)
            h_vec.append(value.as_signed())
        operand = [Mux(c1.zero, 0, Mux(c1.src, h_vec[k], x_vec[k])) for k in range(tc)]
        weights = [
            [w_data[(r * tc + k) * wb : (r * tc + k + 1) * wb].as_signed() for k in range(tc)]
            for r in range(tr)
        ]
        level = []
        for r in range(tr):
            row = []
            for k in range(tc):
                prod = Signal(signed(wb + STATE_BITS), name=f"prod_{r}_{k}")
                with m.If(en):
                    m.d.sync += prod.eq(weights[r][k] * operand[k])
                row.append(prod)
            level.append(row)

        # --- stages 2 .. 1+lv: adder tree, one register per level ------------------------
        for depth_index in range(lv):
            nxt = []
            for r in range(tr):
                row = []
                for k in range(0, len(level[r]), 2):
                    a_, b_ = level[r][k], level[r][k + 1]
                    s_ = Signal(signed(len(a_) + 1), name=f"sum{depth_index}_{r}_{k // 2}")
                    with m.If(en):
                        m.d.sync += s_.eq(a_ + b_)
                    row.append(s_)
                nxt.append(row)
            level = nxt
        sums = [level[r][0] for r in range(tr)]

        # --- stage 2+lv: accumulate ------------------------------------------------------
        acc_stage = 2 + lv
        ca = ctrl[acc_stage]
        m.d.comb += bias_rd.addr.eq(ctrl[acc_stage - 1].row)
        ring = [[Signal(signed(ab), name=f"ring{j}_{r}") for r in range(tr)] for j in range(nb)]
        acc_new = []
        for r in range(tr):
            bias_r = bias_rd.data[r * ab : (r + 1) * ab].as_signed()
            value = Signal(signed(ab), name=f"acc_{r}")
            m.d.comb += value.eq(Mux(ca.first, bias_r, ring[nb - 1][r]) + sums[r])
            acc_new.append(value)
        with m.If(en & ca.valid):
            for r in range(tr):
                m.d.sync += ring[0][r].eq(acc_new[r])
                for j in range(1, nb):
                    m.d.sync += ring[j][r].eq(ring[j - 1][r])
        pre = [Signal(signed(ab), name=f"pre_{r}") for r in range(tr)]
        with m.If(en):
            m.d.sync += [pre[r].eq(acc_new[r]) for r in range(tr)]
        # Only row blocks' last tiles go on: the activation stages see valid & last.
        act_valid = [Signal(name=f"act_valid{k}") for k in range(ISSUE_TO_WRITE + lv + 1)]
        m.d.comb += act_valid[acc_stage].eq(ca.valid & ca.last)
        with m.If(en):
            m.d.sync += [
                act_valid[k + 1].eq(act_valid[k]) for k in range(acc_stage, len(act_valid) - 1)
            ]

        # --- stage 3+lv: rescale by w_frac and clamp -------------------------------------
        gru = p.cell == "gru"
        exact = {k: clamp_is_exact(p, k) for k in ("sigmoid", "tanh")}

        def counted(slot: int) -> bool:
            """Whether a clamp of this lane's activation input counts as a saturation."""
            if gru:
                return slot >= 2 or not exact["sigmoid"]  # n_x, n_h pass through
            return not exact["tanh" if slot == 2 else "sigmoid"]

        a_reg = [Signal(signed(p.act_bits), name=f"a_{r}") for r in range(tr)]
        # The sticky flag's pipeline: sat_k holds the saturations of the beat in stage k.
        sat_k = {k: Signal(name=f"sat{k}") for k in range(4, 10)}
        act_flags = []
        with m.If(en):
            for r in range(tr):
                scaled = round_shift_right(pre[r], w_frac, "half_up")
                m.d.sync += a_reg[r].eq(_clamp(scaled, p.act_max))
                if counted(r % 4):
                    act_flags.append(_clamped(scaled, p.act_max))
            m.d.sync += [
                sat_k[4].eq(Cat(*act_flags).any() if act_flags else 0),
                sat_k[5].eq(sat_k[4]),
            ]

        # --- stage 4+lv: table read; stage 5+lv: interpolate --------------------------
        def lookup(value, mem, prefix):
            """Table read of ``|value|`` now; returns (sign, registered rem, read port)."""
            port = mem.read_port()
            mag = Mux(value < 0, -value, value).as_unsigned()[: p.act_bits - 1]
            neg = Signal(name=f"{prefix}_neg")
            rem = Signal(max(p.rem_bits, 1), name=f"{prefix}_rem")
            m.d.comb += [port.en.eq(en), port.addr.eq(mag >> p.rem_bits)]
            with m.If(en):
                m.d.sync += neg.eq(value < 0)
                if p.rem_bits:
                    m.d.sync += rem.eq(mag[: p.rem_bits])
            return neg, rem, port

        def interpolate(neg, rem, port, kind, prefix):
            base = port.data[:gw]
            slope = port.data[gw:]
            y = (
                base + round_shift_right(slope * rem, p.rem_bits, "half_up")
                if p.rem_bits
                else base + slope
            )
            out = Signal(signed(gw + 1), name=f"{prefix}_y")
            value = Mux(neg, (1 << p.gate_frac) - y, y) if kind == "sigmoid" else Mux(neg, -y, y)
            with m.If(en):
                m.d.sync += out.eq(value)
            return out

        gates = []
        for r in range(tr):
            slot = r % 4
            if gru and slot >= 2:
                # n_x and n_h pass through (already clamped), two registers like a table lane.
                delayed = [Signal(signed(p.act_bits), name=f"g{r}_d{k}") for k in (0, 1)]
                with m.If(en):
                    m.d.sync += [delayed[0].eq(a_reg[r]), delayed[1].eq(delayed[0])]
                gates.append(delayed[1])
                continue
            kind = "tanh" if (slot == 2 and not gru) else "sigmoid"
            neg, rem, port = lookup(a_reg[r], tanh_rom if kind == "tanh" else sig_rom, f"g{r}")
            gates.append(interpolate(neg, rem, port, kind, f"g{r}"))

        # c (GRU: the unit's previous h) read at stage 5+lv (data at 6+lv).
        cr = ctrl[5 + lv]
        m.d.comb += c_rd.addr.eq(cr.b * p.max_row_blocks + cr.row)

        # --- stage 6+lv: cell update (GRU: n's pre-activation) -----------------------------
        align = p.gate_frac - p.state_frac
        out_shift = 2 * p.gate_frac - p.state_frac
        sum_frac = p.gate_frac + max(p.gate_frac, p.cell_frac)
        cg = ctrl[6 + lv]
        c_new = [Signal(signed(cb), name=f"c_new_{u}") for u in range(ub)]
        cell_flags = []
        n_pre = [Signal(signed(p.act_bits), name=f"n_pre_{u}") for u in range(ub)]
        o_gate = [Signal(signed(gw + 1), name=f"o_gate_{u}") for u in range(ub)]
        for u in range(ub):
            g0, g1, g2, g3 = gates[4 * u : 4 * u + 4]
            c_old = Mux(cg.step0, 0, c_rd.data[u * cb : (u + 1) * cb].as_signed())
            with m.If(en):
                if gru:  # g0 = r, g1 = z, g2 = n_x, g3 = n_h; c_new holds the old h
                    gated = round_shift_right(g0 * g3, p.gate_frac, "half_up")
                    m.d.sync += [
                        n_pre[u].eq(_clamp(g2 + gated, p.act_max)),
                        c_new[u].eq(c_old),
                        o_gate[u].eq(g1),
                    ]
                    if not exact["tanh"]:
                        cell_flags.append(_clamped(g2 + gated, p.act_max))
                else:  # g0 = i, g1 = f, g2 = g, g3 = o; c has cell_frac fraction bits
                    fc = (g1 * c_old) << (sum_frac - p.gate_frac - p.cell_frac)
                    ig = (g0 * g2) << (sum_frac - 2 * p.gate_frac)
                    value, flag = _saturated(
                        round_shift_right(fc + ig, sum_frac - p.cell_frac, "half_up"), cb
                    )
                    m.d.sync += [c_new[u].eq(value), o_gate[u].eq(g3)]
                    cell_flags.append(flag)

        # --- stage 7+lv: c write (LSTM), tanh read; 8+lv interpolate -------------------
        cc = ctrl[7 + lv]
        if not gru:
            m.d.comb += [
                c_wr.addr.eq(cc.b * p.max_row_blocks + cc.row),
                c_wr.data.eq(Cat(*c_new)),
                c_wr.en.eq(en & act_valid[7 + lv]),
            ]
        with m.If(en):
            m.d.sync += sat_k[6].eq(sat_k[5])
            m.d.sync += sat_k[7].eq(sat_k[6] | (Cat(*cell_flags).any() if cell_flags else 0))
        tanh_c, tanh_flags = [], []
        for u in range(ub):
            if gru:
                operand = n_pre[u]
            else:  # tanh reads c rounded to state_frac, clamped like an activation input
                c_in = round_shift_right(c_new[u], p.cell_frac - p.state_frac, "half_up")
                operand = _clamp(c_in, p.act_max)
                if not exact["tanh"]:
                    tanh_flags.append(_clamped(c_in, p.act_max))
            neg, rem, port = lookup(operand, tanh_rom, f"tc{u}")
            tanh_c.append(interpolate(neg, rem, port, "tanh", f"tc{u}"))
        with m.If(en):
            m.d.sync += sat_k[8].eq(sat_k[7] | (Cat(*tanh_flags).any() if tanh_flags else 0))
            m.d.sync += sat_k[9].eq(sat_k[8])
        c_hold = [Signal(signed(cb), name=f"c_hold{k}_{u}") for k in (0, 1) for u in range(ub)]
        o_hold = [Signal(signed(gw + 1), name=f"o_hold{k}_{u}") for k in (0, 1) for u in range(ub)]
        with m.If(en):
            for u in range(ub):
                m.d.sync += [
                    c_hold[u].eq(c_new[u]),
                    c_hold[ub + u].eq(c_hold[u]),
                    o_hold[u].eq(o_gate[u]),
                    o_hold[ub + u].eq(o_hold[u]),
                ]
        c_final = c_hold[ub:]
        o_later = o_hold[ub:]

        # --- stage 9+lv: h = o * tanh(c); write, count and emit at its end ------------
        ce = ctrl[9 + lv]
        if gru:  # h' = (1 - z) n + z h, with o_later = z and c_final = the old h
            h_raw = [
                ((1 << p.gate_frac) - o_later[u]) * tanh_c[u] + o_later[u] * (c_final[u] << align)
                for u in range(ub)
            ]
        else:
            h_raw = [o_later[u] * tanh_c[u] for u in range(ub)]
        h_sat = [
            _saturated(round_shift_right(raw, out_shift, "half_up"), STATE_BITS) for raw in h_raw
        ]
        h_new = [value for value, _ in h_sat]
        beat_sat = Signal()
        m.d.comb += beat_sat.eq(sat_k[9] | Cat(*(flag for _, flag in h_sat)).any())
        write = Signal()
        m.d.comb += write.eq(en & act_valid[9 + lv])
        unit0 = ce.row * ub
        groups = hw // ub
        m.d.comb += [
            h_wr.addr.eq(ce.par * (nb * p.h_words) + ce.b * p.h_words + unit0 // hw),
            h_wr.data.eq(Cat(*(h_new * groups))),
        ]
        if groups > 1:
            group = (unit0 % hw) // ub
            for g in range(groups):
                for u in range(ub):
                    m.d.comb += h_wr.en[g * ub + u].eq(write & (group == g))
        else:
            m.d.comb += h_wr.en.eq(Mux(write, (1 << hw) - 1, 0))
        if gru:  # the unit's h is its state: keep it where the LSTM keeps c
            m.d.comb += [
                c_wr.addr.eq(ce.b * p.max_row_blocks + ce.row),
                c_wr.data.eq(Cat(*h_new)),
                c_wr.en.eq(write),
            ]
        with m.If(write):
            m.d.sync += [done.eq(done + 1), sat_seen.eq(sat_seen | beat_sat)]
        with m.If(en):
            m.d.sync += [
                self.o.valid.eq(act_valid[9 + lv]),
                self.o.payload.h.eq(Cat(*h_new)),
                self.o.payload.c.eq(0 if gru else Cat(*c_final)),
                self.o.payload.sat.eq(sat_seen | beat_sat),
            ]

        # --- end of sequence: every result written and the output register empty ----------
        with m.If(draining & (done == cur_base) & ~self.o.valid & ~act_valid[9 + lv]):
            m.d.sync += draining.eq(0)
        return m
