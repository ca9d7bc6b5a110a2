"""cocotb regression of ``sparse-engine`` against :func:`tandem.host.spmm.sparse_engine_golden`.

Tiles go in as the beats of :func:`~tandem.host.spmm.sparse_tile_stream` (LOADs of the distinct
columns, then COO non-zeros in row-major order with ``row_end``); every output beat (row and L
sums) is compared bit-exactly with the golden model, and the scattered sums also with
``wrap(A_tile @ X_block)``. Cycle counts are recorded for the cost-model benchmark.
"""

import cocotb
import numpy as np
from tandem.host.common.arith import wrap
from tandem.host.common.bits import Field, pack_rows
from tandem.host.spmm import sparse_engine_golden, sparse_tile_golden, sparse_tile_stream
from tandem.sim.tb import StreamTestbench, timed_golden

from .common import DENSITIES, FEATURES, TILE, plusarg_floats, random_tile, run_fields_check


def _payloads(p, kind, row, col, value, x, row_end):
    ib = p.index_bits
    fields = [
        ("kind", 1),
        ("row", ib),
        ("col", ib),
        ("value", p.a_bits, True),
        Field("x", p.x_bits, True, p.lanes),
        ("row_end", 1),
    ]
    columns = [np.asarray(v, np.int64).reshape(len(kind), -1) for v in (kind, row, col, value)]
    columns += [np.asarray(x, np.int64), np.asarray(row_end, np.int64).reshape(-1, 1)]
    return pack_rows(fields, np.concatenate(columns, axis=1))


def _coo(a_tile):
    rows, cols = np.nonzero(a_tile)
    return rows, cols, a_tile[rows, cols]


async def _check(tb, name, entries, **pauses):
    """Stream tile passes back to back; ``entries`` is a list of (rows, cols, values, X)."""
    p = tb.params
    beats = []
    for rows, cols, values, x_block in entries:
        f = x_block.shape[1]
        passes = [
            sparse_tile_stream(p, rows, cols, values, x_block, lane0)
            for lane0 in range(0, f, p.lanes)
        ]
        beats += passes
        # The passes' golden outputs, scattered back, equal the tile product.
        out = np.zeros((x_block.shape[0], len(passes) * p.lanes), np.int64)
        for k, s in enumerate(passes):
            r, sums = timed_golden(sparse_engine_golden)(p, *s)
            np.add.at(out[:, k * p.lanes : (k + 1) * p.lanes], r, sums)
        want = sparse_tile_golden(p, rows, cols, values, x_block)
        assert np.array_equal(wrap(out[:, :f], p.acc_bits), want), name
    fields = [np.concatenate([b[i] for b in beats]) for i in range(6)]
    out_rows, sums = timed_golden(sparse_engine_golden)(p, *fields)
    expected = np.concatenate([out_rows[:, None], sums], axis=1)
    widths = [p.index_bits] + [p.acc_bits] * p.lanes
    figures = await run_fields_check(
        tb, name, _payloads(p, *fields), expected, widths, unsigned_first=True, **pauses
    )
    figures["beats"] = int(fields[0].size)
    return figures


def _features(tb, t, f):
    p = tb.params
    return tb.rng.integers(-(1 << (p.x_bits - 1)), 1 << (p.x_bits - 1), (t, f))


@cocotb.test()
async def fully_dense_tile(dut):
    """Every entry of the tile non-zero; two passes over the features."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, tb.params.tile
    a = tb.rng.integers(-(1 << (p.a_bits - 1)), 1 << (p.a_bits - 1), (t, t))
    a[a == 0] = 1
    await _check(tb, "fully_dense_tile", [(*_coo(a), _features(tb, t, 2 * p.lanes))])


@cocotb.test()
async def single_nonzero_and_empty_rows(dut):
    """One non-zero in the last row and column; a tile with empty rows (they emit nothing)."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, tb.params.tile
    one = np.zeros((t, t), np.int64)
    one[t - 1, t - 1] = -(1 << (p.a_bits - 1))
    holes = random_tile(tb.rng, t, 0.3, p.a_bits)
    holes[1::2] = 0
    entries = [(*_coo(one), _features(tb, t, p.lanes)), (*_coo(holes), _features(tb, t, p.lanes))]
    await _check(tb, "single_nonzero_and_empty_rows", entries)


@cocotb.test()
async def duplicate_hazards(dut):
    """Runs of one output row, repeated (row, col) entries, and a row split in two segments."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, tb.params.tile
    rows = np.array([0, 0, 0, 0, 3, 3, t - 1, t - 1, t - 1])
    cols = np.array([5 % t, 5 % t, 5 % t, 1, 2, 2, 0, t - 1, 0])
    values = tb.rng.integers(-(1 << (p.a_bits - 1)), 1 << (p.a_bits - 1), rows.size)
    x = _features(tb, t, p.lanes)
    # The same row again in a later segment of the stream: emitted twice, summed by the host.
    entries = [(rows, cols, values, x), (rows[:4], cols[:4], values[:4], x)]
    await _check(tb, "duplicate_hazards", entries)


@cocotb.test()
async def maximum_values(dut):
    """Most negative value and features on every non-zero of a dense row block."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, tb.params.tile
    a = np.full((t, t), -(1 << (p.a_bits - 1)))
    x = np.full((t, p.lanes), -(1 << (p.x_bits - 1)))
    await _check(tb, "maximum_values", [(*_coo(a), x)])


@cocotb.test()
async def random_backpressure(dut):
    """Tiles across the density range under random valid gaps and backpressure."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, tb.params.tile
    entries = [
        (*_coo(random_tile(tb.rng, t, d, p.a_bits)), _features(tb, t, p.lanes + 1))
        for d in (0.02, 0.2, 0.7)
    ]
    await _check(tb, "random_backpressure", entries, valid_gaps=0.3, backpressure=0.5)


@cocotb.test()
async def line_rate(dut):
    """Back to back: N beats take N + fill_cycles cycles, whatever the row structure."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, tb.params.tile
    entries = [
        (*_coo(random_tile(tb.rng, t, d, p.a_bits)), _features(tb, t, p.lanes)) for d in (0.05, 0.6)
    ]
    figures = await _check(tb, "line_rate", entries)
    predicted = (
        sum(
            int(p.tile_cycles(rows.size, np.unique(cols).size, p.lanes))
            for rows, cols, _, _ in entries
        )
        + p.fill_cycles
    )
    tb.record("line_rate", predicted=predicted)
    assert figures["cycles"] == predicted, (figures["cycles"], predicted)


if DENSITIES in cocotb.plusargs:

    @cocotb.test()
    async def cost_model_sweep(dut):
        """One tile per density, each from idle: measured vs predicted cycles."""
        tb = StreamTestbench(dut)
        p = tb.params
        t, f = int(cocotb.plusargs[TILE]), int(cocotb.plusargs[FEATURES])
        points = []
        for density in plusarg_floats(DENSITIES):
            await tb.reset()
            rows, cols, values = _coo(random_tile(tb.rng, t, density, p.a_bits))
            figures = await _check(
                tb, "cost_model_sweep", [(rows, cols, values, _features(tb, t, f))]
            )
            points.append(
                {
                    "density": rows.size / (t * t),
                    "measured": figures["cycles"],
                    "predicted": int(p.tile_cycles(rows.size, np.unique(cols).size, f))
                    + p.fill_cycles,
                }
            )
        tb.record("cost_model_sweep", points=points)
