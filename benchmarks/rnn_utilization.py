"""MAC utilization of the rnn engine: measured in RTL simulation and predicted by the scheduler.

Run: ``python benchmarks/rnn_utilization.py [--array 16x16] [--hidden 128 256 512 1024]
[--cycle-budget 2000000] [--simulator verilator]``.

For each H (X = H, batch 1, int8 weights streamed on ``w_i`` at one tile per cycle, as from
HBM: an on-chip weight memory of H = 1024 is 64 Mbit, more than Amaranth can elaborate here)
the scheduler picks the tile shape for the array;
the engine is generated with that shape (one build per shape, sized for the largest H) and the
cocotb test ``utilization`` runs the overlapped program and then the naive one (every step
waits for all of h) on the same engine and the same inputs, checks h and c bit for bit against
the golden model, and records the cycles from command to last output. The number of steps per H
is as many as ``--cycle-budget`` simulated cycles allow (at most ``--max-steps``, default 100);
the table says how many ran. The scheduler's prediction for the same steps sits beside the
measurement, then its prediction alone for H up to 4096 over 100 steps.
"""

import argparse
import sys
import time

from tandem.host.rnn import RnnParams
from tandem.hw.rnn.design import RNN_DESIGN
from tandem.mappings.rnn.schedule import choose_shape
from tandem.mappings.rnn.tiling import build_program
from tandem.sim.runner import run_regression

from tandem.bench import Figures, add_benchmark_options


def _array(text: str) -> tuple[int, int]:
    rows, _, cols = text.lower().partition("x")
    return int(rows), int(cols)


def _parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--array", type=_array, default=(16, 16), metavar="RxC")
    parser.add_argument(
        "--predict-arrays",
        type=_array,
        nargs="*",
        default=[(64, 64)],
        metavar="RxC",
        help="further arrays to print the scheduler's prediction for",
    )
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--predict-up-to", type=int, default=4096)
    parser.add_argument("--cycle-budget", type=int, default=2_000_000)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    add_benchmark_options(parser, seed=True)
    return parser.parse_args(argv)


def _measure_one(args, h: int, choice, cap: int):
    """``(result, steps, wall s)``: the ``utilization`` test at H = X = ``h`` on an engine of
    the chosen tile shape sized for H up to ``cap``."""
    params = RnnParams(
        tile_rows=choice.tile_rows,
        tile_cols=choice.tile_cols,
        batch=1,
        max_input=cap,
        max_hidden=cap,
        weight_bits=8,
        weight_source="stream",
    )
    per_step = choice.naive.cycles_per_step
    steps = max(2, min(args.max_steps, args.cycle_budget // (2 * per_step)))
    start = time.time()
    result = run_regression(
        RNN_DESIGN,
        params,
        simulator=args.simulator,
        seed=args.seed,
        testcase="utilization",
        plusargs=(f"+rnn_bench_steps={steps}", f"+rnn_input={h}", f"+rnn_hidden={h}"),
    )
    return result, steps, time.time() - start


def _report_one(args, h, shape, steps, wall, f, figures: Figures) -> bool:
    """One H's line of the table and its figures; whether it meets the targets."""
    measured = f["overlapped_utilization"]
    predicted = f["overlapped_predicted_utilization"]
    diff = (predicted - measured) / measured
    ok = abs(diff) <= 0.05 and (h < 256 or measured >= 0.9)
    note = (
        f"LSTM H = X = {h}, batch 1, int8 streamed, {shape[0]}x{shape[1]} tiles, {steps} "
        f"steps, {args.simulator} RTL"
    )
    figures.add(
        f"MAC utilization, H = {h}",
        measured,
        design="rnn",
        note=note,
        reference=0.9 if h >= 256 else None,
        reference_label="target" if h >= 256 else "",
    )
    figures.add(
        f"speed-up over the naive schedule, H = {h}",
        f["speedup"],
        "x",
        design="rnn",
        note=note,
    )
    figures.add(
        f"predicted / measured utilization, H = {h}",
        predicted / measured,
        design="rnn",
        note=note,
        higher_is_better=None,
    )
    print(
        f"{h:>5} {shape[0]:>3}x{shape[1]:<3} {steps:>5} | {measured:>15.4f} {predicted:>9.4f}"
        f" {diff:>+7.2%} | {f['naive_utilization']:>10.4f}"
        f" {f['naive_predicted_utilization']:>9.4f} | {f['speedup']:>7.3f}x | {wall:>6.0f}"
    )
    return ok


def _print_predictions(args, arrays) -> None:
    """The scheduler's prediction alone for H from 64 up to ``--predict-up-to``."""
    for arr in arrays:
        print()
        print(
            f"scheduler prediction, {args.max_steps} steps, X = H, batch 1, {arr[0]}x{arr[1]} array"
        )
        print(
            f"{'H':>5} {'tile':>7} {'cycles/step':>11} {'overlapped':>10} {'naive':>7}"
            f" {'speed-up':>8}  reason"
        )
        h = 64
        while h <= args.predict_up_to:
            c = choose_shape(h, h, arr[0], arr[1], 1, args.max_steps)
            program = build_program(h, h, c.tile_rows, c.tile_cols)
            reason = c.reason.split(";")[0].replace("chosen ", "")
            print(
                f"{h:>5} {c.tile_rows:>3}x{c.tile_cols:<3} {c.prediction.cycles_per_step:>11}"
                f" {c.prediction.utilization:>10.4f} {c.naive.utilization:>7.4f}"
                f" {c.naive.cycles / c.prediction.cycles:>7.3f}x  "
                f"{program.entries} tiles/step; {reason.split(': ', 1)[1]}"
            )
            h *= 2


def main(argv=None) -> int:
    args = _parse_args(argv)
    rows, cols = args.array

    choices = {h: choose_shape(h, h, rows, cols, 1, args.max_steps) for h in args.hidden}
    largest: dict[tuple[int, int], int] = {}
    for h, c in choices.items():
        shape = (c.tile_rows, c.tile_cols)
        largest[shape] = max(largest.get(shape, 0), h)

    print(f"LSTM, X = H, batch 1, int8 weights streamed, {rows}x{cols} MAC array, {args.simulator}")
    print(
        f"{'H':>5} {'tile':>7} {'steps':>5} | {'overlapped: RTL':>15} {'predicted':>9}"
        f" {'diff':>7} | {'naive: RTL':>10} {'predicted':>9} | {'speed-up':>8} | {'wall s':>6}"
    )
    ok = True
    figures = Figures(
        "rnn-utilization", config={"array": f"{rows}x{cols}", "simulator": args.simulator}
    )
    for h in args.hidden:
        c = choices[h]
        shape = (c.tile_rows, c.tile_cols)
        result, steps, wall = _measure_one(args, h, c, largest[shape])
        if not result.passed:
            print(result.summary(), file=sys.stderr)
            return 1
        ok &= _report_one(args, h, shape, steps, wall, result.tests[0].figures, figures)

    _print_predictions(args, [(rows, cols), *args.predict_arrays])
    print(
        "targets: utilization >= 0.90 from H = 256 up, prediction within 5% of RTL:",
        "met" if ok else "NOT met",
    )
    figures.write(args.figures)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
