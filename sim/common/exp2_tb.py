"""cocotb regression of ``exp2`` against :func:`tandem.host.common.exp2.exp2_golden`."""

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
    """Zero, positives (clamped), the extremes, and both sides of every segment boundary."""
    step = 1 << params.rem_bits
    lo = -(1 << (params.in_width - 1))
    boundaries = -np.arange(0, 1 << params.in_frac_bits, step, dtype=np.int64)
    near_zero = np.concatenate([boundaries, boundaries - 1, boundaries + 1])
    scales = -np.arange(0, params.in_int_bits + 3) * (1 << params.in_frac_bits)
    values = np.concatenate([[0, 1, 2, -1, lo, lo + 1, -lo - 1], near_zero, scales, scales - 1])
    return np.clip(values, lo, -lo - 1)


@cocotb.test()
async def corner_cases_at_line_rate(dut):
    """Corner inputs back to back: bit-exact, and one result per cycle."""
    tb = StreamTestbench(dut)
    await tb.reset()
    x = corner_inputs(tb.params)
    await run_line_rate_check(tb, "corner_cases_at_line_rate", x, tb.design.golden(tb.params, x))


@cocotb.test()
async def random_with_gaps_and_backpressure(dut):
    """Random inputs over the whole range with random valid gaps and backpressure."""
    tb = StreamTestbench(dut)
    await tb.reset()
    lo = -(1 << (tb.params.in_width - 1))
    x = tb.rng.integers(lo, -lo, RANDOM_COUNT)
    # Half the draws near zero, where results are far from underflow.
    x[: RANDOM_COUNT // 2] = tb.rng.integers(-(4 << tb.params.in_frac_bits), 1, RANDOM_COUNT // 2)
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
    x = tb.rng.integers(-(2 << tb.params.in_frac_bits), 1, 200)
    await run_reset_check(tb, "reset_mid_stream", range(-1, -50, -1), x)
