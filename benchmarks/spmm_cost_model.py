"""Cost-model error: predicted vs RTL-simulated cycles of both SpMM engines across densities.

Runs the cocotb ``cost_model_sweep`` of ``systolic`` and ``sparse-engine`` (defined only when
these plusargs are given): one T x T tile per density, each from an idle engine, F features.
Predicted = the engine's ``tile_cycles`` + ``fill_cycles`` (what ``tandem map spmm`` uses).

    python benchmarks/spmm_cost_model.py                    # Verilator, default engines
    python benchmarks/spmm_cost_model.py --simulator icarus --tile 32 --features 24
"""

import argparse
import sys
import tempfile


def main(argv=None) -> int:
    from tandem.sim.runner import run_regression

    from tandem.bench import Figures, add_benchmark_options
    from tandem.registry import get_design

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument("--tile", type=int, default=64)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--densities", default="0.001,0.005,0.02,0.05,0.1,0.2,0.4,0.7,1.0")
    add_benchmark_options(parser, seed=True)
    args = parser.parse_args(argv)
    figures = Figures("spmm-cost-model", config=vars(args) | {"figures": None})
    plusargs = (
        f"+tandem_spmm_densities={args.densities}",
        f"+tandem_spmm_tile={args.tile}",
        f"+tandem_spmm_features={args.features}",
    )
    worst = 0.0
    for name, overrides in (("systolic", {}), ("sparse-engine", {"tile": args.tile})):
        design = get_design(name)
        params = design.params(**overrides)
        with tempfile.TemporaryDirectory() as run_dir:
            result = run_regression(
                design,
                params,
                simulator=args.simulator,
                seed=args.seed,
                run_dir=run_dir,
                testcase="cost_model_sweep",
                plusargs=plusargs,
            )
        if not result.passed or not result.tests:
            print(result.summary())
            return 1
        points = result.tests[0].figures["points"]
        print(
            f"{name} ({args.simulator}, T={args.tile}, F={args.features}, "
            f"{', '.join(f'{k}={v}' for k, v in params.to_dict().items())})"
        )
        print(f"  {'density':>9}{'predicted':>11}{'measured':>10}{'error %':>9}")
        engine_worst = 0.0
        for p in points:
            error = 100.0 * (p["predicted"] - p["measured"]) / p["measured"]
            engine_worst = max(engine_worst, abs(error))
            print(f"  {p['density']:>9.4f}{p['predicted']:>11}{p['measured']:>10}{error:>9.2f}")
        worst = max(worst, engine_worst)
        figures.add(
            "largest cost-model error",
            engine_worst,
            "%",
            design=name,
            reference=10.0,
            reference_label="target (GNNBuilder: 36 %)",
            higher_is_better=False,
            note=f"{len(points)} tiles, densities {args.densities}, T={args.tile}, "
            f"F={args.features}, {args.simulator} RTL",
        )
    print(f"largest |error|: {worst:.2f} % (target 10 %; GNNBuilder reports 36 %)")
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
