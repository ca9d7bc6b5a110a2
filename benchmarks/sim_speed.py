"""Simulation speed of every design: simulated cycles per second in Verilator and in Icarus, and
how much faster the golden model is than the RTL on the same work.

The work is each design's own cocotb regression (what ``tandem sim DESIGN`` runs), with a
fixed seed, so both simulators simulate the same cycles on the same stimulus. For each
simulator the script reports

* simulated cycles: cocotb's simulated time of every test over the 10 ns clock, reset and idle
  cycles included;
* simulator seconds: cocotb's wall time of the tests (the build and the simulator's start-up
  are excluded; the build is cached anyway), so cycles/s is what a user waiting for a
  regression sees, cocotb's Python drivers and scoreboards included;
* golden seconds: the time the golden model took to compute the outputs the scoreboards
  compared with the RTL's (every testbench wraps that call in
  :func:`tandem.sim.measure.timed_golden`); the golden speed-up is simulator seconds over
  golden seconds.

``--quick`` runs one representative test (its line-rate or streaming test) of the designs whose
regression is long, instead of the whole regression, and changes the parameters some designs
name for quick runs: the HPU with ``max_seq_len=512``, the configuration
``hpu_stream_efficiency.py`` builds in ``tandem bench --quick``, so the two share one Verilator
build. Both come from the design's registry entry
(:attr:`~tandem.registry.Design.quick_test`, :attr:`~tandem.registry.Design.quick_overrides`).

Run: ``python benchmarks/sim_speed.py [--quick] [--designs hpu rnn ...]
[--simulators verilator icarus] [--figures FILE]``
"""

import argparse
import sys
import time
from pathlib import Path

from tandem.sim.runner import run_regression

from tandem.bench import BENCHMARK_OUT, Figures, add_benchmark_options, skip
from tandem.errors import UserError
from tandem.registry import all_designs, get_design


def measure(design_name: str, simulator: str, quick: bool, seed: int, out: Path) -> dict:
    """Run one design's regression in one simulator; return its speed figures."""
    design = get_design(design_name)
    testcase = design.quick_test if quick else None
    start = time.perf_counter()
    overrides = design.quick_overrides if quick else {}
    result = run_regression(
        design,
        design.params(**overrides),
        simulator=simulator,
        seed=seed,
        testcase=testcase,
        run_dir=out / f"{design_name}-{simulator}",
    )
    total = time.perf_counter() - start
    if not result.passed:
        raise RuntimeError(f"{design_name} failed in {simulator}; see {result.log_file}")
    return {
        "design": design_name,
        "simulator": simulator,
        "tests": len(result.tests),
        "cycles": result.sim_cycles,
        "sim_s": result.sim_wall_s,
        "golden_s": result.golden_s,
        "total_s": total,
        "build_cached": result.build_cached,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", nargs="+", help="default: every registered design")
    parser.add_argument(
        "--simulators", nargs="+", choices=("verilator", "icarus"), default=["verilator", "icarus"]
    )
    add_benchmark_options(
        parser, quick="one test per design", seed=True, out=BENCHMARK_OUT / "sim_speed"
    )
    args = parser.parse_args(argv)
    try:
        names = args.designs or [d.name for d in all_designs()]
        for name in names:
            get_design(name)
        from tandem.sim.toolchain import prepare

        simulators = []
        for simulator in args.simulators:
            try:
                prepare(simulator)
                simulators.append(simulator)
            except UserError as exc:
                print(f"note: {simulator} left out: {exc}")
        if not simulators:
            return skip("no simulator is installed")
    except UserError as exc:
        print(f"sim_speed: error: {exc}", file=sys.stderr)
        return 2

    figures = Figures("sim-speed", config={"quick": args.quick, "seed": args.seed})
    print(
        f"{'design':<17} {'simulator':<9} {'tests':>5} {'cycles':>10} {'sim s':>8} "
        f"{'cycles/s':>10} {'golden s':>9} {'golden x':>9}"
    )
    for name in names:
        for simulator in simulators:
            try:
                row = measure(name, simulator, args.quick, args.seed, args.out)
            except RuntimeError as exc:  # a failing regression: its log says why
                print(f"sim_speed: {exc}", file=sys.stderr)
                return 1
            rate = row["cycles"] / row["sim_s"] if row["sim_s"] else 0.0
            speedup = row["sim_s"] / row["golden_s"] if row["golden_s"] else 0.0
            print(
                f"{name:<17} {simulator:<9} {row['tests']:>5} {row['cycles']:>10} "
                f"{row['sim_s']:>8.2f} {rate:>10.0f} {row['golden_s']:>9.4f} {speedup:>9.0f}"
            )
            work = "one test" if args.quick else f"{row['tests']} tests"
            note = f"{simulator}, default parameters, {work}, {row['cycles']} cycles"
            figures.add(
                f"{simulator} cycles/s",
                rate,
                "cycles/s",
                design=name,
                note=note,
                higher_is_better=None,
            )
            if row["golden_s"]:
                figures.add(
                    f"golden model speed-up over {simulator}",
                    speedup,
                    "x",
                    design=name,
                    note=f"{row['golden_s']:.4f} s golden vs {row['sim_s']:.2f} s in "
                    f"{simulator} on the same work",
                    higher_is_better=None,
                )
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
