"""Gateware pipeline blocks of ``hw/common``: the register slice, the sideband helper and the
two-stage product."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data
from amaranth.sim import Simulator
from tandem.hw.common.fixed import partial_products
from tandem.hw.common.pipeline import RegisterSlice, sideband


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_register_slice_passes_every_beat_in_order_and_its_ready_is_a_register(seed):
    rng = np.random.default_rng(seed)
    dut = RegisterSlice(unsigned(16))
    sent = [int(x) for x in rng.integers(0, 1 << 16, 300)]
    got, readies = [], []

    async def bench(ctx):
        pending = list(sent)
        offering = False
        for _ in range(2000):
            if not offering and pending and rng.random() < 0.8:
                offering = True
            ctx.set(dut.i.valid, offering)
            if offering:
                ctx.set(dut.i.payload, pending[0])
            taking = rng.random() < 0.6
            ctx.set(dut.o.ready, taking)
            fired = offering and ctx.get(dut.i.ready)
            readies.append((ctx.get(dut.i.ready), taking))
            if taking and ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload))
            await ctx.tick()
            if fired:
                pending.pop(0)
                offering = False

    _simulate(dut, bench)
    assert got == sent
    # i.ready is a register: it is low in some cycles o.ready is high (the skid drains),
    # which a ready formed from o.ready in the same cycle never is.
    assert any(taking and not ready for ready, taking in readies)


def test_register_slice_streams_at_full_rate():
    dut = RegisterSlice(unsigned(8))
    got = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for cycle in range(40):
            assert ctx.get(dut.i.ready)
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, cycle)
            if ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload))
            await ctx.tick()

    _simulate(dut, bench)
    assert got == list(range(39))  # one cycle behind, one beat a cycle


def test_chained_sideband_stages_delay_each_field_by_its_stage_under_enable_stalls():
    rng = np.random.default_rng(7)
    m = Module()
    enable = Signal()
    layout = data.StructLayout({"tag": 5, "value": signed(12)})
    fields = Signal(layout)
    stages = []
    for prefix in ("sa", "sb", "sc"):
        stages.append(sideband(m, prefix, stages[-1] if stages else fields, enable))
    assert [list(stage) for stage in stages] == [["tag", "value"]] * 3
    assert stages[2]["value"].name == "sc_value" and stages[2]["value"].shape() == signed(12)
    taken, got = [], []  # the beats of the cycles the stages advanced; every cycle's stages

    async def bench(ctx):
        for _ in range(300):
            advance = bool(rng.random() < 0.6)
            beat = (int(rng.integers(0, 32)), int(rng.integers(-2048, 2048)))
            ctx.set(enable, advance)
            ctx.set(fields.tag, beat[0])
            ctx.set(fields.value, beat[1])
            row = [(ctx.get(stage["tag"]), ctx.get(stage["value"])) for stage in stages]
            got.append((len(taken), row))
            if advance:
                taken.append(beat)
            await ctx.tick()

    _simulate(m, bench)
    # Stage n holds the group taken n + 1 advances ago, however long the stalls between.
    for advances, row in got:
        for n, held in enumerate(row):
            assert held == (taken[advances - 1 - n] if advances > n else (0, 0))
    assert len(taken) > 100


def test_sideband_without_enable_is_one_register_a_field():
    m = Module()
    a, b = Signal(4), Signal(signed(3))
    stage = sideband(m, "x", {"a": a, "b": b}, suffix="1")
    assert [reg.name for reg in stage.values()] == ["x_a1", "x_b1"]
    got = []

    async def bench(ctx):
        for cycle in range(10):
            ctx.set(a, cycle)
            ctx.set(b, -(cycle % 4))
            if cycle:
                got.append((ctx.get(stage["a"]), ctx.get(stage["b"])))
            await ctx.tick()

    _simulate(m, bench)
    assert got == [(cycle, -(cycle % 4)) for cycle in range(9)]


@pytest.mark.parametrize(
    "wide_shape, narrow_bits",
    [
        (signed(38), 22),  # chunks 17, 17, 4 (signed, shift and add)
        (signed(30), 22),
        (unsigned(19), 18),  # chunks 17, 2 (shift and add)
        (signed(17), 11),
        (signed(35), 20),  # chunks 17, 17, 1 (signed: 0 or -1)
        (unsigned(21), 5),
    ],
)
def test_partial_products_are_the_exact_product_two_cycles_on(wide_shape, narrow_bits):
    rng = np.random.default_rng(narrow_bits)
    lo = -(1 << (wide_shape.width - 1)) if wide_shape.signed else 0
    hi = (1 << (wide_shape.width - 1)) if wide_shape.signed else 1 << wide_shape.width
    cases = [
        (lo, (1 << narrow_bits) - 1),
        (hi - 1, (1 << narrow_bits) - 1),
        (0, 0),
        (-1 if lo else 1, 1),
    ]
    cases += [
        (int(a), int(b))
        for a, b in zip(rng.integers(lo, hi, 200), rng.integers(0, 1 << narrow_bits, 200))
    ]
    m = Module()
    wide, narrow = Signal(wide_shape), Signal(narrow_bits)
    product = Signal(signed(wide_shape.width + narrow_bits + 1))
    m.d.sync += product.eq(partial_products(m, wide, narrow, "p"))
    got = []

    async def bench(ctx):
        for cycle in range(len(cases) + 2):
            if cycle < len(cases):
                ctx.set(wide, cases[cycle][0])
                ctx.set(narrow, cases[cycle][1])
            if cycle >= 2:
                got.append(ctx.get(product))
            await ctx.tick()

    _simulate(m, bench)
    assert got == [a * b for a, b in cases]
