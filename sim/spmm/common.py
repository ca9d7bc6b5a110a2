"""Shared pieces of the SpMM testbenches: the output check and the tile-sample plusargs.

The cost-model sweep of ``benchmarks/spmm_cost_model.py`` is defined only when the runner
passes ``+tandem_spmm_densities=0.01,0.1,...`` (with ``+tandem_spmm_tile=T`` and
``+tandem_spmm_features=F``), so ordinary regressions do not run it.
"""

import cocotb
import numpy as np
from tandem.host.common import bits

__all__ = [
    "DENSITIES",
    "FEATURES",
    "TILE",
    "plusarg_floats",
    "random_tile",
    "run_fields_check",
]

DENSITIES = "tandem_spmm_densities"
TILE = "tandem_spmm_tile"
FEATURES = "tandem_spmm_features"


def plusarg_floats(name: str) -> list[float]:
    """Comma-separated numbers of plusarg ``name``."""
    return [float(item) for item in str(cocotb.plusargs[name]).split(",")]


def random_tile(rng, tile: int, density: float, a_bits: int) -> np.ndarray:
    """A T x T integer tile with about ``density`` of its entries non-zero (at least one)."""
    mask = rng.random((tile, tile)) < density
    if not mask.any():
        mask[rng.integers(tile), rng.integers(tile)] = True
    values = rng.integers(1, 1 << (a_bits - 1), (tile, tile))
    return np.where(mask, values, 0)


async def run_fields_check(
    tb,
    test_name,
    inputs,
    expected,
    widths,
    *,
    valid_gaps=0.0,
    backpressure=0.0,
    unsigned_first=False,
):
    """Stream packed ``inputs``; compare every output beat field by field with ``expected``.

    The engines' output beats are wider than 64 bits (L or C accumulators), so beats are
    unpacked into their fields and compared as an ``(outputs, fields)`` int64 array; a
    mismatch names the beat, the field, the expected and the actual value. ``unsigned_first``
    reads the first field (a row index) as unsigned. Records and returns ``cycles`` (first
    input offered to last output taken), ``transfers`` and ``throughput``.
    """
    from cocotb.triggers import with_timeout
    from tandem.sim.stream import random_pause
    from tandem.sim.tb import CLOCK_PERIOD_NS

    source, sink = tb.source("i"), tb.sink("o")
    source.set_pause_generator(random_pause(tb.rng, valid_gaps) if valid_gaps else None)
    sink.set_pause_generator(random_pause(tb.rng, backpressure) if backpressure else None)
    expected = np.asarray(expected, np.int64).reshape(-1, len(widths))
    start = tb.now_cycles()
    source.send_all(int(v) for v in inputs)
    limit = (len(expected) + len(inputs)) * 40 + 1000
    raw = await with_timeout(sink.recv_n(len(expected)), limit * CLOCK_PERIOD_NS, "ns")
    cycles = tb.now_cycles() - start
    fields = bits.as_fields(widths, signed=True)
    if unsigned_first:
        fields = (fields[0]._replace(signed=False), *fields[1:])
    actual = bits.unpack_rows(fields, raw)
    wrong = np.argwhere(actual != expected)
    if wrong.size:
        beat, fld = (int(v) for v in wrong[0])
        raise AssertionError(
            f"{tb.design.name}.{test_name}: first mismatch at output {beat}, field {fld}: "
            f"expected {int(expected[beat, fld])}, got {int(actual[beat, fld])}; "
            f"{len(np.unique(wrong[:, 0]))} of {len(expected)} outputs differ"
        )
    figures = {
        "cycles": cycles,
        "transfers": len(expected),
        "throughput": round(len(expected) / max(cycles, 1), 4),
    }
    tb.record(test_name, **figures)
    return figures
