"""RTL co-simulation speed: the native C++ harness against cocotb, on the same Verilated design.

Every design a host device drives runs one workload through ``backend="rtl"`` twice in one
run: with ``harness="cocotb"`` (a Python call per clock edge, cocotbext-axi memory) and with
``harness="native"`` (clock, stream drivers and monitors and AXI memory in C++,
:mod:`tandem.sim.native`). Both must return the same results with the same cycle counts; the
script reports simulated cycles per wall-clock second of each and their ratio (the issue's
target: 100x), and the golden backend's time on the same calls.

Workloads (default parameters unless said):

* ``hpu``: SmolLM2-135M's attention (head_dim 64, 3 queries per KV head, 32 lanes), one
  sequence of ``--context`` tokens (default 1000) in 3 KV heads, 3 decode calls.
* ``rnn``: an LSTM 64 -> 64, 16 steps of batch 2.
* ``sparse-mpe``: a 2:4 int8 layer 64 x 256, GEMM on 8 tokens.
* ``systolic`` + ``sparse-engine``: one GCN layer on a 766-node graph (``SpmmDevice``).

Wall time counts the calls only: each device makes one call first (which builds or loads the
simulator) that is not timed. Each path runs ``--runs`` times (default 3, a fresh device each
time) and the fastest run counts: on a shared machine the others' load only ever slows a run
down.

Run: ``python benchmarks/native_speed.py [--quick] [--designs hpu rnn ...] [--context 1000]
[--runs 3]``
"""

import argparse
import sys
import time

import numpy as np

from tandem.bench import Figures, add_benchmark_options, skip
from tandem.errors import UserError

DESIGNS = ("hpu", "rnn", "sparse-mpe", "spmm")


def _hpu(options, context: int):
    from tandem.host.hpu import HpuParams, quantize_rows, score_scale
    from tandem.host.hpu.device import Attend, HpuDevice

    p = HpuParams(
        head_dim=64, lanes=32, gqa_group=3, max_seq_len=4096, mem_data_bits=256, kv_bits=8
    )
    dev = HpuDevice(p, memory_bytes=64 << 20, **options)
    rng = np.random.default_rng(0)

    def rows(n, bits=8):
        return quantize_rows(rng.standard_normal((n, p.head_dim)), bits)

    seq = dev.allocate(context + 16, heads=3)
    for head in range(3):
        dev.write_kv(seq, head, *rows(context), *rows(context))

    def call():
        calls = []
        for head in range(3):
            q, qs = rows(p.gqa_group, 16)
            calls.append(Attend(seq, head, q, score_scale(qs, p.head_dim), (*rows(1), *rows(1))))
        results = dev.attend_many(calls)
        return [r.y for r in results]

    return dev, call, 3


def _rnn(options, context: int):
    import torch
    from tandem.host.rnn import RnnParams
    from tandem.host.rnn.device import RnnDevice

    torch.manual_seed(0)
    dev = RnnDevice(RnnParams(), **options)
    dev.load(torch.nn.LSTM(64, 64).state_dict())
    x = dev.quantize(np.random.default_rng(0).standard_normal((16, 2, 64)))
    return dev, lambda: dev.run(x)[0], 2


def _sparse_mpe(options, context: int):
    from tandem.host.sparse_dsp import SparseMpeParams
    from tandem.host.sparse_dsp.device import SparseMpeDevice
    from tandem.mappings.nm import NMPattern, prune_magnitude

    rng = np.random.default_rng(0)
    dev = SparseMpeDevice(SparseMpeParams(), **options)
    w = prune_magnitude(rng.integers(-128, 128, (64, 256)), NMPattern(2, 4), pair_rows=True)
    dev.load(w.astype(np.int8), "2:4")
    xs = rng.integers(-128, 128, (256, 8)).astype(np.int8)
    return dev, lambda: dev.gemm(xs), 2


def _spmm(options, context: int):
    from pathlib import Path

    import scipy.sparse as sp
    from tandem.host.spmm import SparseEngineParams, SystolicParams
    from tandem.host.spmm.device import SpmmDevice
    from tandem.mappings.spmm.graph import gcn_normalize
    from tandem.mappings.spmm.readers import read_graph

    graph = Path(__file__).resolve().parents[1] / "tests" / "data" / "spmm_test.mgraph"
    a = sp.csr_matrix(gcn_normalize(read_graph(graph)))
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((a.shape[0], 8)), rng.standard_normal((8, 5))
    systolic = SystolicParams(rows=4, cols=3, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
    sparse = SparseEngineParams(lanes=3, tile=8, a_bits=10, a_frac=8, x_bits=9, acc_bits=26)
    dev = SpmmDevice(systolic, sparse, features=5, tile=8, **options)
    dev.load(a)
    return dev, lambda: dev.gcn_layer(x, w, device="cpu").accumulators, 1


WORKLOADS = {"hpu": _hpu, "rnn": _rnn, "sparse-mpe": _sparse_mpe, "spmm": _spmm}


def measure(name: str, options: dict, context: int, runs: int = 1) -> dict:
    """Run ``name``'s workload on one backend ``runs`` times: its results and cycles (the
    same every run, else an error) and the fastest run's wall and serving times."""
    first = _measure_once(name, options, context)
    wall, serve = [first["wall_s"]], [first["serve_s"]]
    for _ in range(runs - 1):
        run = _measure_once(name, options, context)
        if not (same(first["results"], run["results"]) and first["cycles"] == run["cycles"]):
            raise RuntimeError(f"{name}: two runs on {options or 'golden'} differ")
        wall.append(run["wall_s"])
        serve.append(run["serve_s"])
    return {**first, "wall_s": min(wall), "serve_s": min(serve)}


def _measure_once(name: str, options: dict, context: int) -> dict:
    dev, call, repeats = WORKLOADS[name](options, context)
    try:
        call()  # starts (and builds) the simulator; not timed
        results, cycles = [], 0
        served = getattr(dev.backend, "serve_s", 0.0)
        start = time.perf_counter()
        for _ in range(repeats):
            results.append(call())
            cycles += dev.last_cycles
        wall = time.perf_counter() - start
        served = getattr(dev.backend, "serve_s", 0.0) - served
    finally:
        dev.close()
    return {"results": results, "cycles": cycles, "wall_s": wall, "serve_s": served}


def same(a, b) -> bool:
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(np.asarray(a), np.asarray(b))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", nargs="+", choices=DESIGNS, default=list(DESIGNS))
    parser.add_argument(
        "--context", type=int, help="hpu sequence length (default 1000, --quick 256)"
    )
    parser.add_argument(
        "--runs", type=int, help="runs of each path; the fastest counts (default 3, --quick 1)"
    )
    add_benchmark_options(parser, quick="256 tokens of context, one run of each path")
    args = parser.parse_args(argv)
    if args.context is None:
        args.context = 256 if args.quick else 1000
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    try:
        from tandem.sim.toolchain import prepare

        prepare("verilator")
    except UserError as exc:
        return skip(str(exc))

    figures = Figures("native-speed", config={"context": args.context, "runs": args.runs})
    print(
        f"{'design':<11} {'cycles':>8} {'cocotb c/s':>11} {'native c/s':>11} {'sim x':>7} "
        f"{'end-to-end x':>12} {'native s':>9} {'golden s':>9} {'native/golden':>13}"
    )
    for name in args.designs:
        golden = measure(name, {}, args.context, args.runs)
        cocotb = measure(name, {"backend": "rtl", "harness": "cocotb"}, args.context, args.runs)
        native = measure(name, {"backend": "rtl", "harness": "native"}, args.context, args.runs)
        if not (
            same(golden["results"], native["results"])
            and same(cocotb["results"], native["results"])
        ):
            print(f"native_speed: {name}: results differ between the paths", file=sys.stderr)
            return 1
        if cocotb["cycles"] != native["cycles"]:
            print(
                f"native_speed: {name}: {cocotb['cycles']} cycles under cocotb, "
                f"{native['cycles']} native",
                file=sys.stderr,
            )
            return 1
        cycles = native["cycles"]
        sim = {k: cycles / r["serve_s"] for k, r in (("cocotb", cocotb), ("native", native))}
        ratio = sim["native"] / sim["cocotb"]
        end_to_end = cocotb["wall_s"] / native["wall_s"]
        over_golden = native["wall_s"] / golden["wall_s"]
        print(
            f"{name:<11} {cycles:>8} {sim['cocotb']:>11,.0f} {sim['native']:>11,.0f} "
            f"{ratio:>7.1f} {end_to_end:>12.1f} {native['wall_s']:>9.3f} "
            f"{golden['wall_s']:>9.4f} {over_golden:>13.0f}"
        )
        note = f"Verilator, {cycles} simulated cycles, the same results and cycles on both paths"
        figures.add("native simulator cycles/s", sim["native"], "cycles/s", design=name,
                    note=note, higher_is_better=None)  # fmt: skip
        figures.add("cocotb simulator cycles/s", sim["cocotb"], "cycles/s", design=name,
                    note=note, higher_is_better=None)  # fmt: skip
        figures.add("native simulator speed-up over cocotb", ratio, "x", design=name,
                    note=note + "; request sent to reply", reference=100.0,
                    reference_label="target", higher_is_better=True)  # fmt: skip
        figures.add("native end-to-end speed-up over cocotb", end_to_end, "x", design=name,
                    note=note + "; the host's encoding and decoding included",
                    higher_is_better=None)  # fmt: skip
        figures.add("native time over golden", over_golden, "x", design=name,
                    note="the same calls on the golden backend", higher_is_better=None)  # fmt: skip
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
