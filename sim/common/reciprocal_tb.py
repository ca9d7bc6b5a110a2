"""cocotb regression of ``reciprocal`` against its golden model.

Golden model: :func:`tandem.host.common.reciprocal.reciprocal_golden`.
"""

import cocotb
import numpy as np
from tandem.sim.tb import (
    StreamTestbench,
    run_line_rate_check,
    run_reset_check,
    run_stream_check,
)

RANDOM_COUNT = 2000


def corner_inputs(params) -> np.ndarray:
    """Zero, one LSB, every power of two and its neighbours, seed-segment edges, the maximum."""
    top = (1 << params.in_bits) - 1
    powers = np.int64(1) << np.arange(params.in_bits, dtype=np.int64)
    one = np.int64(1) << params.in_frac_bits
    segments = one + (
        np.arange(1 << params.seed_bits, dtype=np.int64)
        << max(params.in_frac_bits - params.seed_bits, 0)
    )
    values = np.concatenate([[0, 1, 2, 3, top, top - 1], powers, powers - 1, powers + 1, segments])
    return np.unique(np.clip(values, 0, top))


@cocotb.test()
async def corner_cases_at_line_rate(dut):
    """Corner inputs back to back: bit-exact, and one result per cycle."""
    tb = StreamTestbench(dut)
    await tb.reset()
    x = corner_inputs(tb.params)
    await run_line_rate_check(tb, "corner_cases_at_line_rate", x, tb.design.golden(tb.params, x))


@cocotb.test()
async def random_with_gaps_and_backpressure(dut):
    """Random inputs, log-uniform over the range, with random valid gaps and backpressure."""
    tb = StreamTestbench(dut)
    await tb.reset()
    msb = tb.rng.integers(0, tb.params.in_bits, RANDOM_COUNT)
    x = (np.int64(1) << msb) + tb.rng.integers(0, np.int64(1) << msb)
    await run_stream_check(
        tb,
        "random_with_gaps_and_backpressure",
        x,
        tb.design.golden(tb.params, x),
        valid_gaps=0.3,
        backpressure=0.4,
    )


@cocotb.test()
async def reset_mid_stream(dut):
    """Reset while the pipeline is full: nothing stale comes out afterwards."""
    tb = StreamTestbench(dut)
    await tb.reset()
    top = (1 << tb.params.in_bits) - 1
    x = tb.rng.integers(1, top + 1, 200)
    await run_reset_check(tb, "reset_mid_stream", range(1, 60), x)
