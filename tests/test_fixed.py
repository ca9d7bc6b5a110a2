from fractions import Fraction

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st
from tandem.host.common.fixed import round_shift_right, saturate, to_fixed
from tandem.hw.common import fixed as hw_fixed


def _exact(value: int, shift: int, rounding: str) -> int:
    q = Fraction(value, 1 << shift)
    floor = q.numerator // q.denominator
    rest = q - floor
    if rounding == "floor":
        return floor
    if rounding == "half_up":
        return floor + (rest >= Fraction(1, 2))
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2):
        return floor + 1
    return floor


@given(
    st.integers(-(2**40), 2**40),
    st.integers(0, 20),
    st.sampled_from(["floor", "half_up", "half_even"]),
)
def test_numpy_rounding_matches_exact_arithmetic(value, shift, rounding):
    assert int(round_shift_right(value, shift, rounding)) == _exact(value, shift, rounding)


def test_saturate_and_to_fixed():
    assert saturate([-200, -128, 5, 127, 300], 8, True).tolist() == [-128, -128, 5, 127, 127]
    assert saturate([-1, 256], 8, False).tolist() == [0, 255]
    assert to_fixed([0.5, -0.75, 100.0], 4, 8).tolist() == [8, -12, 127]


def _run_comb(build, inputs):
    """Evaluate a combinational circuit on every input tuple in the Amaranth simulator."""
    m = Module()
    ins, out = build(m)
    results = []

    async def bench(ctx):
        for values in inputs:
            for sig, v in zip(ins, values):
                ctx.set(sig, v)
            await ctx.delay(1e-9)
            results.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return results


@pytest.mark.parametrize("rounding", ["floor", "half_up", "half_even"])
@pytest.mark.parametrize("shift", [0, 1, 3, 7])
def test_gateware_constant_shift_is_bit_exact(rounding, shift):
    values = list(range(-300, 300, 7)) + [-512, 511, -2, -1, 0, 1, 2]

    def build(m):
        x = Signal(signed(10))
        y = Signal(signed(12))
        m.d.comb += y.eq(hw_fixed.round_shift_right(x, shift, rounding))
        return [x], y

    got = _run_comb(build, [(v,) for v in values])
    assert got == round_shift_right(values, shift, rounding).tolist()


@pytest.mark.parametrize("rounding", ["floor", "half_up", "half_even"])
@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(-512, 511), st.integers(0, 11)), min_size=1, max_size=30))
def test_gateware_variable_shift_is_bit_exact(rounding, cases):
    def build(m):
        x, s = Signal(signed(10)), Signal(unsigned(4))
        y = Signal(signed(12))
        m.d.comb += y.eq(hw_fixed.round_shift_right(x, s, rounding))
        return [x, s], y

    got = _run_comb(build, cases)
    values, shifts = zip(*cases)
    assert got == round_shift_right(values, shifts, rounding).tolist()


@pytest.mark.parametrize("shape", [signed(6), unsigned(6)])
def test_gateware_saturate_matches_numpy(shape):
    values = list(range(-100, 100, 3))

    def build(m):
        x = Signal(signed(9))
        y = Signal(shape)
        m.d.comb += y.eq(hw_fixed.saturate(x, shape))
        return [x], y

    got = _run_comb(build, [(v,) for v in values])
    assert got == saturate(values, 6, shape.signed).tolist()


def test_bad_rounding_mode_is_refused():
    with pytest.raises(ValueError, match="rounding must be one of"):
        round_shift_right(np.array([1]), 1, "nearest")
