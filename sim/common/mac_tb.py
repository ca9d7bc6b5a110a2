"""cocotb regression of ``mac`` against :func:`tandem.host.common.arith.mac_golden`."""

import cocotb
import numpy as np
from tandem.sim.stream import pack_fields
from tandem.sim.tb import StreamTestbench, run_stream_check


def _stimulus(tb, count: int, group_probability: float):
    p = tb.params
    a = tb.rng.integers(-(1 << (p.a_bits - 1)), 1 << (p.a_bits - 1), count)
    b = tb.rng.integers(-(1 << (p.b_bits - 1)), 1 << (p.b_bits - 1), count)
    last = tb.rng.random(count) < group_probability
    last[-1] = True
    payloads = [pack_fields((x, y, int(z)), (p.a_bits, p.b_bits, 1)) for x, y, z in zip(a, b, last)]
    return a, b, last, payloads


@cocotb.test()
async def extreme_products(dut):
    """Most-negative operands (largest product and its sign), single-element groups, wraps."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p = tb.params
    lo_a, lo_b = -(1 << (p.a_bits - 1)), -(1 << (p.b_bits - 1))
    a = np.array([lo_a, lo_a, lo_a, -1, (1 << (p.a_bits - 1)) - 1, lo_a] * 8)
    b = np.array([lo_b, lo_b, 1, -1, lo_b, (1 << (p.b_bits - 1)) - 1] * 8)
    last = np.zeros(len(a), dtype=bool)
    last[[0, 5, 6, 20, len(a) - 1]] = True
    payloads = [pack_fields((x, y, int(z)), (p.a_bits, p.b_bits, 1)) for x, y, z in zip(a, b, last)]
    await run_stream_check(tb, "extreme_products", payloads, tb.design.golden(p, a, b, last))


@cocotb.test()
async def random_dot_products(dut):
    """Random dot products of random lengths under random gaps and backpressure."""
    tb = StreamTestbench(dut)
    await tb.reset()
    a, b, last, payloads = _stimulus(tb, 1500, 0.1)
    await run_stream_check(
        tb,
        "random_dot_products",
        payloads,
        tb.design.golden(tb.params, a, b, last),
        valid_gaps=0.3,
        backpressure=0.5,
    )
