"""cocotb regression of ``adder-tree`` against its golden model.

Golden model: :func:`tandem.host.common.arith.adder_tree_golden`.
"""

import cocotb
import numpy as np
from tandem.sim.stream import pack_fields
from tandem.sim.tb import StreamTestbench, run_line_rate_check, run_stream_check


def _packed(params, rows) -> list[int]:
    return [pack_fields(row, [params.in_bits] * params.n_inputs) for row in rows]


@cocotb.test()
async def extremes_and_random(dut):
    """All-minimum and all-maximum rows (the widest carries), then random rows, under stress."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p = tb.params
    lo, hi = -(1 << (p.in_bits - 1)), (1 << (p.in_bits - 1)) - 1
    rows = tb.rng.integers(lo, hi + 1, (500, p.n_inputs))
    rows[0], rows[1], rows[2] = lo, hi, 0
    rows[3] = np.where(np.arange(p.n_inputs) % 2 == 0, lo, hi)
    await run_stream_check(
        tb,
        "extremes_and_random",
        _packed(p, rows),
        tb.design.golden(p, rows),
        valid_gaps=0.3,
        backpressure=0.4,
    )


@cocotb.test()
async def line_rate(dut):
    """Back-to-back rows: one sum per cycle after the pipeline fills."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p = tb.params
    rows = tb.rng.integers(-(1 << (p.in_bits - 1)), 1 << (p.in_bits - 1), (300, p.n_inputs))
    await run_line_rate_check(tb, "line_rate", _packed(p, rows), tb.design.golden(p, rows))
