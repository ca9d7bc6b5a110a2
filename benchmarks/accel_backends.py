"""Golden vs RTL backend of the stream-engine devices: cycles and wall-clock time per call.

Run: ``python benchmarks/accel_backends.py [--simulator verilator|icarus] [--quick]``. For
``SparseMpeDevice`` (GEMV and a 4-token GEMM), ``RnnDevice`` (an LSTM and a GRU sequence) and
``SpmmDevice`` (the aggregation of a power-law graph), the same call runs on
``backend="golden"`` and ``backend="rtl"``; the results must be bit-identical (exit status 1
otherwise). Printed per call: the golden backend's modelled cycles, the RTL's simulated cycles
and their ratio, the wall-clock time of one call on each backend (the RTL's after its
simulator started; the best of three) and the golden backend's speed-up. The engines are the
small configurations of the RTL tests (tests/test_sparse_dsp_device_rtl.py,
tests/test_rnn_device_rtl.py, tests/test_spmm_device_rtl.py), whose simulator builds the first
run makes (``--cache-dir``, default ``~/.cache/tandem/sim``).
"""

import argparse
import sys
import time

import numpy as np
import torch
from tandem.host.rnn import RnnParams
from tandem.host.rnn.device import RnnDevice
from tandem.host.sparse_dsp import SparseMpeParams
from tandem.host.sparse_dsp.device import SparseMpeDevice
from tandem.host.spmm import SparseEngineParams, SystolicParams, quantize_features
from tandem.host.spmm.device import SpmmDevice
from tandem.mappings.nm import NMPattern, prune_magnitude
from tandem.mappings.spmm.graph import gcn_normalize
from tandem.mappings.spmm.synthetic import power_law_graph

from tandem.bench import Figures, Provenance, add_benchmark_options, skip
from tandem.errors import UserError

MPE = SparseMpeParams(chains=2, stages=4, max_k=256, max_batch=4)
SYSTOLIC = SystolicParams(rows=4, cols=3, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
SPARSE = SparseEngineParams(lanes=3, tile=8, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
RNN = RnnParams(max_input=8, max_hidden=12, tile_rows=8, tile_cols=4, weight_source="stream")
GRU = RnnParams(cell="gru", max_input=12, max_hidden=20, tile_rows=8, tile_cols=4)


def timed(call, repeat: int = 3):
    """``(result, best seconds)`` of ``repeat`` calls."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - start)
    return result, best


def workloads(quick: bool):
    """``(design, label, make device(**kw), prepare(dev) -> call)`` of every measured call
    (the SpMM pair's under ``sparse-engine``, where the other SpMM benchmarks file theirs)."""
    rng = np.random.default_rng(0)
    rows, cols = (32, 128) if quick else (64, 256)
    w = prune_magnitude(rng.integers(-128, 128, (rows, cols)), NMPattern(2, 4), pair_rows=True)
    x = rng.integers(-128, 128, cols).astype(np.int8)
    xs = rng.integers(-128, 128, (cols, 4)).astype(np.int8)

    def mpe(kind):
        def prepare(dev):
            dev.load(w.astype(np.int8), "2:4")
            return (lambda: dev.gemv(x)) if kind == "gemv" else (lambda: dev.gemm(xs))

        return prepare

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(8, 12)
    steps = 10 if quick else 40
    seq = rng.standard_normal((steps, 2, 8))

    def rnn(module, inputs):
        def prepare(dev):
            dev.load(module.state_dict())
            xq = dev.quantize(inputs)
            return lambda: dev.run(xq)

        return prepare

    gru = torch.nn.GRU(8, 12)  # on the GRU engine of the RTL tests (X <= 12, H <= 20)
    gru_seq = np.random.default_rng(1).standard_normal((steps, 2, 8))

    nodes = 300 if quick else 766
    a = gcn_normalize(power_law_graph(nodes, 6 * nodes, seed=1))
    features, _ = quantize_features(rng.standard_normal((nodes, 5)), SYSTOLIC)

    def spmm(dev):
        dev.load(a)
        return lambda: dev.aggregate(features)

    def mpe_device(**kw):
        return SparseMpeDevice(MPE, **kw)

    return [
        ("sparse-mpe", f"sparse-mpe gemv {rows}x{cols} 2:4", mpe_device, mpe("gemv")),
        ("sparse-mpe", f"sparse-mpe gemm {rows}x{cols} 2:4, 4 tokens", mpe_device, mpe("gemm")),
        (
            "rnn",
            f"rnn LSTM X8 H12, {steps} steps x 2",
            lambda **kw: RnnDevice(RNN, **kw),
            rnn(lstm, seq),
        ),
        (
            "rnn",
            f"rnn GRU X8 H12, {steps} steps x 2",
            lambda **kw: RnnDevice(GRU, **kw),
            rnn(gru, gru_seq),
        ),
        (
            "sparse-engine",
            f"spmm aggregate, {nodes} nodes, {a.nnz} nnz, F 5",
            lambda **kw: SpmmDevice(SYSTOLIC, SPARSE, features=5, tile=8, **kw),
            spmm,
        ),
    ]


def cycles_of(dev) -> int | dict:
    return dict(dev.last_engine_cycles) if isinstance(dev, SpmmDevice) else dev.last_cycles


def same(a, b) -> bool:
    if isinstance(a, tuple):  # (h, c); a GRU's c is None on both backends
        return all(x is y is None or np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(a, b)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument("--cache-dir", help="simulator build cache (default ~/.cache/tandem/sim)")
    add_benchmark_options(parser, quick="smaller workloads")
    args = parser.parse_args(argv)
    from tandem.sim.toolchain import prepare

    try:
        prepare(args.simulator)
    except UserError as exc:
        return skip(str(exc))
    figures = Figures("accel-backends", config={"simulator": args.simulator, "quick": args.quick})
    options = {"simulator": args.simulator, "cache_dir": args.cache_dir}
    print(f"golden vs rtl ({args.simulator}); wall-clock: best of 3 calls, simulator warm")
    header = f"{'call':<44} {'golden cyc':>10} {'rtl cyc':>8} {'ratio':>6}"
    print(header + f" {'golden s':>9} {'rtl s':>8} {'speed-up':>9}  identical")
    status = 0
    for design, label, make, prepare_call in workloads(args.quick):
        golden = make()
        want, golden_s = timed(prepare_call(golden))
        with make(backend="rtl", **options) as dev:
            call = prepare_call(dev)
            call()  # starts the simulator (and builds it the first time)
            got, rtl_s = timed(call)
            modelled, simulated = cycles_of(golden), cycles_of(dev)
        identical = same(want, got)
        status |= not identical
        if isinstance(modelled, dict):
            for engine in ("systolic", "sparse-engine"):
                g, r = modelled[engine], simulated[engine]
                print(f"{'  ' + engine:<44} {g:>10} {r:>8} {g / r:>6.3f}")
            modelled, simulated = modelled["makespan"], simulated["makespan"]
        speedup = rtl_s / golden_s
        print(
            f"{label:<44} {modelled:>10} {simulated:>8} {modelled / simulated:>6.3f} "
            f"{golden_s:>9.4f} {rtl_s:>8.3f} {speedup:>8.0f}x  {identical}"
        )
        note = f"{label}, {args.simulator}"
        figures.add("model / RTL cycles", modelled / simulated, "ratio", design=design, note=note)
        figures.add("golden speed-up over RTL", speedup, "x", design=design, note=note,
                    provenance=Provenance.WALL_TIME)  # fmt: skip
    figures.write(args.figures)
    return status


if __name__ == "__main__":
    sys.exit(main())
