"""cocotb regression of ``systolic`` against :func:`tandem.host.spmm.systolic_golden`.

Tiles go in as the beats of :func:`~tandem.host.spmm.systolic_tile_stream`; every output row
is compared bit-exactly with the golden model, and the tile results also with
``wrap(A_tile @ X_block)``. Cycle counts are recorded for the cost-model benchmark.
"""

import cocotb
import numpy as np
from tandem.host.common.bits import Field, pack_rows
from tandem.host.spmm import (
    systolic_decode,
    systolic_golden,
    systolic_tile_golden,
    systolic_tile_stream,
)
from tandem.sim.tb import StreamTestbench, timed_golden

from .common import DENSITIES, FEATURES, TILE, plusarg_floats, random_tile, run_fields_check


def _payloads(p, a, x, last):
    fields = [Field("a", p.a_bits, True, p.rows), Field("x", p.x_bits, True, p.cols), ("last", 1)]
    rows = np.concatenate([np.asarray(a), np.asarray(x), np.asarray(last)[:, None]], axis=1)
    return pack_rows(fields, rows.astype(np.int64))


async def _check_tiles(tb, name, tiles, features, **pauses):
    """Stream ``tiles`` (list of (A_tile, X_block)) back to back; check; return the figures."""
    p = tb.params
    streams = [systolic_tile_stream(p, a, x) for a, x in tiles]
    a = np.concatenate([s[0] for s in streams])
    x = np.concatenate([s[1] for s in streams])
    last = np.concatenate([s[2] for s in streams])
    rows = timed_golden(systolic_golden)(p, a, x, last)
    # The stream golden and the tile-level golden must agree too.
    offset = 0
    for (a_tile, x_block), s in zip(tiles, streams):
        count = int(s[2].sum()) * p.rows
        got = systolic_decode(p, rows[offset : offset + count], a_tile.shape[0], features)
        assert np.array_equal(got, systolic_tile_golden(p, a_tile, x_block)), name
        offset += count
    return await run_fields_check(
        tb, name, _payloads(p, a, x, last), rows, [p.acc_bits] * p.cols, **pauses
    )


def _features(tb, rng, tile, features):
    p = tb.params
    return rng.integers(-(1 << (p.x_bits - 1)), 1 << (p.x_bits - 1), (tile, features))


def _tile_edge(p):
    return 2 * p.rows


@cocotb.test()
async def fully_dense_tile(dut):
    """Every entry non-zero, features past a block boundary (F = C + 1)."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, _tile_edge(tb.params)
    f = p.cols + 1
    a = tb.rng.integers(-(1 << (p.a_bits - 1)), 1 << (p.a_bits - 1), (t, t))
    await _check_tiles(tb, "fully_dense_tile", [(a, _features(tb, tb.rng, t, f))], f)


@cocotb.test()
async def single_nonzero_and_empty_rows(dut):
    """A tile with one non-zero, then one whose every other row is empty."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, _tile_edge(tb.params)
    one = np.zeros((t, t), np.int64)
    one[t - 1, 0] = (1 << (p.a_bits - 1)) - 1
    holes = random_tile(tb.rng, t, 0.5, p.a_bits)
    holes[::2] = 0
    tiles = [(one, _features(tb, tb.rng, t, p.cols)), (holes, _features(tb, tb.rng, t, p.cols))]
    await _check_tiles(tb, "single_nonzero_and_empty_rows", tiles, p.cols)


@cocotb.test()
async def maximum_values(dut):
    """Most negative operands everywhere: the largest products, summed to the wrap."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, _tile_edge(tb.params)
    a = np.full((t, t), -(1 << (p.a_bits - 1)))
    x = np.full((t, p.cols), -(1 << (p.x_bits - 1)))
    x[:, 0] = (1 << (p.x_bits - 1)) - 1
    await _check_tiles(tb, "maximum_values", [(a, x)], p.cols)


@cocotb.test()
async def random_backpressure(dut):
    """Tiles of random densities back to back under random valid gaps and backpressure."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, _tile_edge(tb.params)
    f = 2 * p.cols - 1
    tiles = [
        (random_tile(tb.rng, t, d, p.a_bits), _features(tb, tb.rng, t, f)) for d in (0.05, 0.5, 1.0)
    ]
    await _check_tiles(tb, "random_backpressure", tiles, f, valid_gaps=0.3, backpressure=0.5)


@cocotb.test()
async def line_rate(dut):
    """Back-to-back tiles: N beats take exactly N + fill_cycles cycles (the cost model)."""
    tb = StreamTestbench(dut)
    await tb.reset()
    p, t = tb.params, _tile_edge(tb.params)
    tiles = [
        (random_tile(tb.rng, t, d, p.a_bits), _features(tb, tb.rng, t, p.cols)) for d in (0.1, 0.9)
    ]
    figures = await _check_tiles(tb, "line_rate", tiles, p.cols)
    predicted = sum(p.tile_cycles(t, p.cols) for _ in tiles) + p.fill_cycles
    # The dense work the array did: every (row, column, feature) product of every tile.
    macs = sum(a.shape[0] * a.shape[1] * x.shape[1] for a, x in tiles)
    tb.record("line_rate", predicted=predicted, macs=macs)
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
            a = random_tile(tb.rng, t, density, p.a_bits)
            figures = await _check_tiles(
                tb, "cost_model_sweep", [(a, _features(tb, tb.rng, t, f))], f
            )
            points.append(
                {
                    "density": float(np.count_nonzero(a)) / (t * t),
                    "measured": figures["cycles"],
                    "predicted": p.tile_cycles(t, f) + p.fill_cycles,
                }
            )
        tb.record("cost_model_sweep", points=points)
