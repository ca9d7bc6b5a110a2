"""The ``rnn`` engine's components, each alone in Amaranth's simulator against numpy.

The whole engine is checked bit- and cycle-exact against the golden model and the scheduler in
``test_rnn.py``; these tests pin each component's own contract (:mod:`tandem.hw.rnn.beats`):
the dispatcher's beat order and operands, the MAC array's sums, the activations' tables and
clamp flags, the cell's c and h and sticky saturation flag, under random gaps and backpressure.
"""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator
from tandem.host.common.fixed import round_shift_right, saturate
from tandem.host.rnn import (
    STATE_BITS,
    RnnParams,
    clamp_is_exact,
    cmd_payload,
    sigmoid_fixed,
    tanh_fixed,
    tile_beats,
    weight_beats,
    x_beats,
)
from tandem.hw.rnn.activations import Activations, activation_rom, lane_kind
from tandem.hw.rnn.beats import GATE_NAMES
from tandem.hw.rnn.cell import Cell
from tandem.hw.rnn.dispatcher import Dispatcher
from tandem.hw.rnn.loader import Loader
from tandem.hw.rnn.mac_array import MacArray
from tandem.mappings.rnn.tiling import build_program
from tandem.sim.amaranth_sim import run_scenario


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) else value


def _word(values, bits: int) -> int:
    return sum((int(v) & ((1 << bits) - 1)) << (k * bits) for k, v in enumerate(values))


class _Harness(wiring.Component):
    """``dut`` with memories on its memory ports and its other inputs held constant; ``i`` and
    ``o`` are the dut's."""

    def __init__(self, dut, memories=None, constants=None):
        self._dut, self._memories, self._constants = dut, memories or {}, constants or {}
        members = dut.signature.members
        super().__init__({"i": members["i"], "o": members["o"]})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self._dut
        wiring.connect(m, wiring.flipped(self.i), dut.i)
        wiring.connect(m, dut.o, wiring.flipped(self.o))
        for name, memory in self._memories.items():
            m.submodules[name] = memory
            ports = getattr(dut, name)
            for port in ports if isinstance(ports, list) else [ports]:
                if name.endswith("_wr"):
                    made = memory.write_port(granularity=port.signature.granularity)
                else:
                    made = memory.read_port()
                wiring.connect(m, made, port)
        m.d.comb += [getattr(dut, name).eq(value) for name, value in self._constants.items()]
        return m


def _tag(rng, p):
    return {
        "row": int(rng.integers(p.max_row_blocks)),
        "b": int(rng.integers(p.batch)),
        "par": int(rng.integers(2)),
        "step0": int(rng.integers(2)),
    }


def _tag_of(payload):
    return {k: int(getattr(payload.tag, k)) for k in ("row", "b", "par", "step0")}


# --- MAC array -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape", [(8, 8, 2, "memory"), (16, 4, 3, "memory"), (32, 4, 2, "stream"), (4, 1, 1, "memory")]
)
def test_mac_array_reads_its_operands_and_sums_row_blocks_from_their_bias(shape):
    tr, tc, nb, source = shape
    p = RnnParams(
        tile_rows=tr, tile_cols=tc, batch=nb, max_input=16, max_hidden=16, weight_source=source
    )
    rng = np.random.default_rng(tr + tc)
    hw, slices, wb = p.h_word, p.h_word // tc, p.weight_bits
    mems = {
        "x_rd": rng.integers(-(1 << 15), 1 << 15, (2 * nb * p.max_x_blocks, tc)),
        "h_rd": rng.integers(-(1 << 15), 1 << 15, (2 * nb * p.h_words, hw)),
        "w_rd": rng.integers(-(1 << (wb - 1)), 1 << (wb - 1), (p.max_entries, tr, tc)),
        "bias_rd": rng.integers(-(1 << 30), 1 << 30, (p.max_row_blocks, tr)),
    }
    widths = {"x_rd": STATE_BITS, "h_rd": STATE_BITS, "w_rd": wb, "bias_rd": p.acc_bits}
    memories = {
        name: Memory(
            shape=values[0].size * widths[name],
            depth=len(values),
            init=[_word(v.reshape(-1), widths[name]) for v in values],
        )
        for name, values in mems.items()
        if name != "w_rd" or source == "memory"
    }
    beats, expected = [], []
    for _ in range(12):  # row blocks of 1..3 tiles, batch elements interleaved per tile
        row, tiles = int(rng.integers(p.max_row_blocks)), int(rng.integers(1, 4))
        acc = np.tile(mems["bias_rd"][row], (nb, 1))
        for k in range(tiles):
            w_addr = int(rng.integers(p.max_entries))
            w = mems["w_rd"][w_addr] if source == "memory" else rng.integers(-128, 128, (tr, tc))
            src, zero, part = int(rng.integers(2)), int(rng.random() < 0.2), rng.integers(slices)
            for b in range(nb):
                x_addr, h_addr = rng.integers(len(mems["x_rd"])), rng.integers(len(mems["h_rd"]))
                if zero:
                    operand = np.zeros(tc, np.int64)
                elif src:
                    operand = mems["h_rd"][h_addr][part * tc : (part + 1) * tc]
                else:
                    operand = mems["x_rd"][x_addr]
                acc[b] += w @ operand
                tag = {"row": row, "b": b, "par": k % 2, "step0": 0}
                beat = {
                    "tag": tag,
                    "first": int(k == 0),
                    "last": int(k == tiles - 1),
                    "src": src,
                    "zero": zero,
                    "slice": int(part),
                    "x_addr": int(x_addr),
                    "h_addr": int(h_addr),
                }
                if source == "memory":
                    beat["w_addr"] = w_addr
                else:  # batch element 0 brings the tile, the others reuse it
                    beat["weights"] = _word(w.reshape(-1), wb) if b == 0 else 0
                beats.append(beat)
                if k == tiles - 1:
                    expected.append((tag, acc[b].tolist()))
    dut = _Harness(MacArray(p), memories)
    out, _ = run_scenario(dut, beats, len(expected), valid_gaps=0.3, backpressure=0.3, seed=1)
    got = [(_tag_of(o), [int(v) for v in o.pre]) for o in out]
    assert got == expected


# --- activations -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"cell": "gru"},
        {"act_range_bits": 3, "tile_rows": 16},  # sigmoid's clamp is not exact: counted
        {"act_range_bits": 3, "state_frac": 8, "act_segment_bits": 11},  # no remainder bits
    ],
)
def test_activations_match_the_tables_and_count_clamps(overrides):
    p = RnnParams(max_input=8, max_hidden=12, **overrides)
    rng = np.random.default_rng(len(overrides))
    w_frac, tr, ub, cb = 7, p.tile_rows, p.units_per_block, p.c_bits
    state = rng.integers(-(1 << (cb - 1)), 1 << (cb - 1), (p.batch * p.max_row_blocks, ub))
    state_mem = Memory(shape=ub * cb, depth=len(state), init=[_word(s, cb) for s in state])
    kinds = [lane_kind(p, r % 4) for r in range(tr)]
    memories = {"state_rd": state_mem}
    memories.update({f"{k}_rd": activation_rom(p, k) for k in ("sigmoid", "tanh") if k in kinds})
    dut = _Harness(Activations(p), memories, {"w_frac": w_frac})
    inputs, expected = [], []
    for _ in range(40):
        a = rng.integers(-p.act_max - 300, p.act_max + 300, tr)
        pre = (a << w_frac) + rng.integers(-(1 << (w_frac - 1)), 1 << (w_frac - 1), tr)
        tag = _tag(rng, p)
        inputs.append({"tag": tag, "pre": pre.tolist()})
        scaled = round_shift_right(pre, w_frac, "half_up")
        clamped = np.clip(scaled, -p.act_max, p.act_max)
        gates, counted = [], False
        for r, kind in enumerate(kinds):
            if kind is None:
                gates.append(int(clamped[r]))
            else:
                table = sigmoid_fixed if kind == "sigmoid" else tanh_fixed
                gates.append(int(table(p, [clamped[r]])[0]))
            exact = kind is not None and clamp_is_exact(p, kind)
            counted |= bool(scaled[r] != clamped[r]) and not exact
        old = state[tag["b"] * p.max_row_blocks + tag["row"]].tolist()
        expected.append((tag, int(counted), gates, old))
    out, _ = run_scenario(dut, inputs, len(inputs), valid_gaps=0.2, backpressure=0.3, seed=2)
    names = GATE_NAMES[p.cell]
    got = [
        (
            _tag_of(o),
            int(o.sat),
            [int(getattr(o.gates[r // 4], names[r % 4])) for r in range(tr)],
            [int(v) for v in o.state],
        )
        for o in out
    ]
    assert got == expected


# --- cell ----------------------------------------------------------------------------------
def _cell_golden(p, gates, old, step0):
    """h, c and whether a counted place saturated, for one unit (the golden model's formulas:
    :func:`tandem.host.rnn.lstm_golden`, :func:`tandem.host.rnn.gru_golden`)."""
    old = 0 if step0 else old
    out_shift = 2 * p.gate_frac - p.state_frac
    if p.cell == "gru":
        r, z, n_x, n_h = gates
        pre = n_x + int(round_shift_right(r * n_h, p.gate_frac, "half_up"))
        clamped = int(np.clip(pre, -p.act_max, p.act_max))
        n = int(tanh_fixed(p, [clamped])[0])
        one, align = 1 << p.gate_frac, p.gate_frac - p.state_frac
        raw = int(round_shift_right((one - z) * n + z * (old << align), out_shift, "half_up"))
        h = int(saturate(raw, STATE_BITS, True))
        counted = (clamped != pre and not clamp_is_exact(p, "tanh")) or h != raw
        return h, 0, counted
    i, f, g, o = gates
    sum_frac = p.gate_frac + max(p.gate_frac, p.cell_frac)
    total = ((f * old) << (sum_frac - p.gate_frac - p.cell_frac)) + (
        (i * g) << (sum_frac - 2 * p.gate_frac)
    )
    c_raw = int(round_shift_right(total, sum_frac - p.cell_frac, "half_up"))
    c = int(saturate(c_raw, p.cell_bits, True))
    c_in = int(round_shift_right(c, p.cell_frac - p.state_frac, "half_up"))
    clamped = int(np.clip(c_in, -p.act_max, p.act_max))
    raw = int(round_shift_right(o * int(tanh_fixed(p, [clamped])[0]), out_shift, "half_up"))
    h = int(saturate(raw, STATE_BITS, True))
    counted = c != c_raw or (clamped != c_in and not clamp_is_exact(p, "tanh")) or h != raw
    return h, c, counted


@pytest.mark.parametrize(
    "overrides", [{}, {"cell": "gru", "tile_rows": 16}, {"cell_bits": 18, "cell_frac": 14}]
)
def test_cell_matches_the_golden_formulas_and_keeps_sat_sticky(overrides):
    p = RnnParams(max_input=8, max_hidden=12, **overrides)
    rng = np.random.default_rng(3)
    ub, one = p.units_per_block, 1 << p.gate_frac
    names = GATE_NAMES[p.cell]
    state_mem = Memory(shape=ub * p.c_bits, depth=p.batch * p.max_row_blocks, init=[])
    h_mem = Memory(shape=p.h_word * STATE_BITS, depth=2 * p.batch * p.h_words, init=[])
    memories = {"tanh_rd": activation_rom(p, "tanh"), "state_wr": state_mem, "h_wr": h_mem}
    dut = _Harness(Cell(p), memories)
    inputs, expected, sticky = [], [], False
    limit = 1 << (p.c_bits - 1)
    for beat in range(40):
        tag = _tag(rng, p)
        units, old = [], rng.integers(-limit, limit, ub)
        if p.cell == "lstm" and beat % 3:  # mostly small c, so that h does not saturate
            old >>= 6
        h_u, c_u = [], []
        for u in range(ub):
            sig = rng.integers(0, one + 1, 3)
            if p.cell == "gru":
                act = rng.integers(-p.act_max, p.act_max + 1, 2)
                gates = [int(sig[0]), int(sig[1]), int(act[0]), int(act[1])]
            else:
                g = int(rng.integers(-one, one + 1))
                gates = [int(sig[0]), int(sig[1]), g, int(sig[2])]
            units.append(dict(zip(names, gates, strict=True)))
            h, c, counted = _cell_golden(p, gates, int(old[u]), tag["step0"])
            h_u.append(h)
            c_u.append(c)
            sticky |= bool(counted)
        sat_in = int(beat == 30)
        sticky |= bool(sat_in)
        payload = {"tag": tag, "sat": sat_in, "gates": units, "state": old.tolist()}
        inputs.append(payload)
        expected.append((_word(h_u, STATE_BITS), _word(c_u, p.c_bits), int(sticky)))
    out, _ = run_scenario(dut, inputs, len(inputs), valid_gaps=0.2, backpressure=0.3, seed=4)
    got = [(int(o.h), int(o.c), int(o.sat)) for o in out]
    assert got == expected
    flags = [s for _, _, s in expected]
    assert 0 < sum(flags) < len(flags)  # the flag rises within the run


# --- dispatcher and loader -------------------------------------------------------------------
async def _put_word(ctx, port, word: int) -> None:
    ctx.set(port.valid, 1)
    ctx.set(port.payload.as_value(), word)
    await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


class _Front(wiring.Component):
    """Loader and dispatcher on their memories, as the engine connects them."""

    def __init__(self, p):
        self._p = p
        self._loader, self._dispatcher = Loader(p), Dispatcher(p)
        self.x_mem = Memory(
            shape=p.tile_cols * STATE_BITS, depth=2 * p.batch * p.max_x_blocks, init=[]
        )
        members = {**self._loader.signature.members, **self._dispatcher.signature.members}
        names = ["tile_i", "cmd_i", "x_i", "o", "written", "busy", "idle", "w_i"]
        super().__init__({n: members[n] for n in names if n in members})

    def elaborate(self, platform):
        p, m = self._p, Module()
        m.submodules.loader = loader = self._loader
        m.submodules.dispatcher = dispatcher = self._dispatcher
        for name in ("tile_i", "cmd_i", "x_i", "w_i"):
            if name in self.signature.members:
                inner = getattr(loader if name == "tile_i" else dispatcher, name)
                wiring.connect(m, wiring.flipped(getattr(self, name)), inner)
        wiring.connect(m, dispatcher.o, wiring.flipped(self.o))
        m.d.comb += [
            dispatcher.written.eq(self.written),
            dispatcher.busy.eq(self.busy),
            self.idle.eq(dispatcher.idle),
            loader.idle.eq(dispatcher.idle),
        ]
        m.submodules.prog = prog = Memory(
            shape=loader.prog_wr.signature.shape, depth=p.max_entries, init=[]
        )
        wiring.connect(m, prog.write_port(), loader.prog_wr)
        prog_rd = prog.read_port(domain="comb")
        m.d.comb += [
            prog_rd.addr.eq(dispatcher.prog_rd.addr),
            dispatcher.prog_rd.data.eq(prog_rd.data),
        ]
        if p.weight_source == "memory":
            m.submodules.w = w = Memory(shape=p.tile_bits, depth=p.max_entries, init=[])
            wiring.connect(m, w.write_port(), loader.w_wr)
        m.submodules.bias = bias = Memory(
            shape=p.tile_rows * p.acc_bits, depth=p.max_row_blocks, init=[]
        )
        wiring.connect(m, bias.write_port(), loader.bias_wr)
        m.submodules.x_mem = self.x_mem
        wiring.connect(m, self.x_mem.write_port(), dispatcher.x_wr)
        return m


@pytest.mark.parametrize("shape", [(8, 4, 2, "memory"), (32, 4, 3, "memory"), (8, 8, 1, "stream")])
def test_loader_and_dispatcher_issue_the_program_with_its_operand_addresses(shape):
    tr, tc, nb, source = shape
    p = RnnParams(
        tile_rows=tr, tile_cols=tc, batch=nb, max_input=9, max_hidden=10, weight_source=source
    )
    program = build_program(9, 10, tr, tc)
    rng = np.random.default_rng(tr + nb)
    tiles = rng.integers(-(1 << 15), 1 << 15, (program.entries, tr, tc))
    biases = rng.integers(-(1 << 20), 1 << 20, (program.row_blocks, tr))
    steps, hw, slices = 3, p.h_word, p.h_word // tc
    x = rng.integers(-(1 << 15), 1 << 15, (steps, nb, 9))
    x_pad = np.zeros((steps, nb, program.x_blocks * tc), np.int64)
    x_pad[:, :, :9] = x
    expected = []
    for t in range(steps):
        for e in range(program.entries):
            col, src = int(program.col[e]), int(program.src[e])
            for b in range(nb):
                tag = {"row": int(program.row[e]), "b": b, "par": t % 2, "step0": int(t == 0)}
                flags = (int(program.first[e]), int(program.last[e]), src, int(src and t == 0))
                if src == 0:  # the x tile itself, as the x memory holds it when the beat issues
                    operand = _word(x_pad[t, b, col * tc : (col + 1) * tc], STATE_BITS)
                elif t == 0:
                    operand = None  # zeros: no h read
                else:  # h of step t - 1 (buffer (t - 1) % 2): the word and slice holding col
                    word = ((t - 1) % 2) * nb * p.h_words + b * p.h_words + col * tc // hw
                    operand = (word, col % slices if slices > 1 else 0)
                tile = _word(tiles[e].reshape(-1), p.weight_bits)
                expected.append((tag, flags, operand, e if source == "memory" else tile))
    dut = _Front(p)
    got, idle_after = [], []

    async def bench(ctx):
        for word in tile_beats(p, program, tiles, biases):
            await _put_word(ctx, dut.tile_i, word)
        await _put_word(ctx, dut.cmd_i, cmd_payload(p, program, steps, 5))
        xw = x_beats(p, program, x)
        ww = weight_beats(p, tiles) * steps if source == "stream" else []
        for _ in range(2000):
            ctx.set(dut.x_i.valid, bool(xw))
            ctx.set(dut.x_i.payload, xw[0] if xw else 0)
            if source == "stream":
                ctx.set(dut.w_i.valid, bool(ww))
                ctx.set(dut.w_i.payload, ww[0] if ww else 0)
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            beat = ctx.get(dut.o.payload) if ready and ctx.get(dut.o.valid) else None
            if beat is not None:
                if beat.src == 0:
                    operand = ctx.get(dut.x_mem.data[int(beat.x_addr)])
                elif beat.zero:
                    operand = None
                else:
                    operand = (int(beat.h_addr), int(beat.slice))
                weights = int(beat.w_addr) if source == "memory" else int(beat.weights)
                flags = (int(beat.first), int(beat.last), int(beat.src), int(beat.zero))
                got.append((_tag_of(beat), flags, operand, weights))
            x_fire = xw and ctx.get(dut.x_i.ready)
            w_fire = ww and ctx.get(dut.w_i.ready)
            await ctx.tick()
            if x_fire:
                xw.pop(0)
            if w_fire:
                ww.pop(0)
            ctx.set(dut.written, int(beat is not None and beat.last))  # as if written at once
            idle_after.append(ctx.get(dut.idle))
            if len(got) == len(expected) and idle_after[-1]:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == expected
    assert idle_after[-1] and not any(idle_after[:-2])
