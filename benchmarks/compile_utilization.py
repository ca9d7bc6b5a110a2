"""sparse-mpe DSP utilization over whole SmolLM2 decode steps of a compiled program, on the RTL.

Run: ``python benchmarks/compile_utilization.py [--program DIR] [--steps 1] [--golden-only]``

The program (default: ``tandem compile smollm2-135m`` with its default options, compiled into a
temporary folder) prefills a short prompt on the golden devices, then runs ``--steps`` decode
steps with every linear layer on the sparse-mpe RTL (Verilator, native harness) and attention
on the golden HPU. Utilization = the MACs the N:M format asks for (N slots per group of every
row, times the tokens; 16-bit inputs count their two digits) / (simulated cycles x the engine's
MACs per cycle, two per DSP48E2), the cycles counted as the engine's request cycles (first
weight beat to last result); a second figure adds each request's activation load before its
weights. The same steps on the golden engine model give the modelled figure, which must
equal the RTL's cycles.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

TARGET = 0.9


def _runner(compiled, model, backend: str, **options):
    from tandem.host.hpu import HpuParams
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.sparse_dsp.device import SparseMpeDevice
    from tandem.host.sparse_dsp.golden import SparseMpeParams
    from tandem.host.system.decode import HpuAttention
    from tandem.mappings.llm.runner import ProgramRunner

    max_k = 1 << max(6, (compiled.max_columns() - 1).bit_length())
    params = SparseMpeParams(max_k=max_k, max_batch=compiled.table["card"]["tile"])
    extra = {"kernel": "direct"} if backend == "golden" else options
    mpe = SparseMpeDevice(params, backend=backend, **extra)
    card = HpuDevice(HpuParams.for_model(model.config), memory_bytes=64 << 20)
    return ProgramRunner(compiled, model, mpe, HpuAttention(model.config, [card]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", type=Path, help="a tandem compile folder")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--golden-only", action="store_true", help="no RTL (modelled only)")
    args = parser.parse_args(argv)
    import numpy as np
    import torch
    from tandem.host.system.decode import load_model_weights
    from tandem.host.system.texts import load_text
    from tandem.mappings.llm.compiler import CompileOptions, compile_model
    from tandem.mappings.llm.runner import CompiledModel

    from tandem.errors import UserError

    torch.set_grad_enabled(False)
    try:
        model, tokenizer, label = load_model_weights("smollm2-135m", device="cpu")
    except UserError as exc:
        print(f"compile_utilization: skipped: {exc}")
        return 0
    with tempfile.TemporaryDirectory() as workdir:
        directory = args.program
        if directory is None:
            directory = Path(workdir) / "program"
            compile_model(
                model, tokenizer, directory, CompileOptions(), text=load_text("execmodel"),
                model_label=label, log=lambda *a: None,
            )  # fmt: skip
        compiled = CompiledModel(directory)
        prompt = tokenizer.encode("The engine streams every weight once per token.")
        backends = ["golden"] if args.golden_only else ["golden", "rtl"]
        results = {}
        for backend in backends:
            runner = _runner(
                compiled, model, backend, simulator="verilator", harness="native", timeout_s=3600
            )
            runner.start(0, len(prompt) + args.steps + 1)
            hidden = runner.prefill(0, prompt)
            runner.stats = type(runner.stats)()  # count the decode steps only
            position, tokens = len(prompt), []
            started = time.perf_counter()
            for _ in range(args.steps):
                token = int(np.argmax(runner.logits(hidden)))
                tokens.append(token)
                hidden = runner.step(0, token, position)
                position += 1
            wall = time.perf_counter() - started
            p = runner.mpe.params
            cycles = runner.stats.cycles["MATMUL"]
            results[backend] = {
                "cycles": cycles,
                "utilization": runner.stats.useful_macs / (cycles * 2 * p.chains * p.stages),
                "with_loads": runner.stats.useful_macs
                / ((cycles + runner.stats.load_cycles) * 2 * p.chains * p.stages),
                "wall_s": wall,
                "tokens": tokens,
                "hidden": hidden,
                "ops": runner.stats.count["MATMUL"],
            }
            runner.attention.close()
            runner.mpe.close()
    patterns = ", ".join(f"{n} x {k}" for k, n in compiled.summary["pattern_counts"].items())
    print(f"{label}: {args.steps} decode step(s) of the compiled program ({patterns})")
    for backend, r in results.items():
        kind = "simulated" if backend == "rtl" else "modelled"
        print(
            f"  {backend:<6} {r['ops']} matrix ops, {r['cycles']} {kind} cycles, DSP utilization "
            f"{r['utilization']:.3f} (target {TARGET}); {r['with_loads']:.3f} counting the "
            f"activation loads between requests; {r['wall_s']:.1f} s"
        )
    if "rtl" in results:
        same = results["rtl"]["cycles"] == results["golden"]["cycles"] and np.array_equal(
            results["rtl"]["hidden"], results["golden"]["hidden"]
        )
        print(f"  RTL vs golden: cycles and hidden states {'identical' if same else 'DIFFER'}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
