"""The golden backend's cycle model of the HPU against the RTL's simulated cycles, and its fit.

The golden backend reports the cycles of a batch of requests from a model
(:func:`tandem.host.hpu.cycles.call_cycles`, the one cycle model with its co-simulation
memory :data:`~tandem.host.hpu.cycles.COSIM_MEMORY`)::

    cycles(batch) = FILL + sum over requests of (max(D, R, O * S) + GAP) + DRAIN

This script runs the same batches through :class:`tandem.host.hpu.device.HpuDevice` on both
backends (bit-identical results are checked), prints model against RTL cycles per batch, and
fits ``FILL`` and ``GAP`` (integers minimizing the largest relative error over all batches; the
fitted pair is what :data:`~tandem.host.hpu.cycles.FILL_CYCLES` and
:data:`~tandem.host.hpu.cycles.GAP_CYCLES` should hold). The batches mix lengths 1-250, batch
sizes 1-8, appends and partial requests, on two engine configurations (``--configs``): the
co-simulation tests' ``hd32-g2`` and the default engine; the fit is over both at once, since
the constants serve every configuration. The default engine in Icarus takes several minutes.

Run: ``python benchmarks/decode_cycles.py [--simulator icarus|verilator] [--set key=value]
[--configs hd32-g2 default] [--figures FILE]``
"""

import argparse
import sys

import numpy as np
from tandem.host.hpu import HpuParams, quantize_rows, score_scale
from tandem.host.hpu.cycles import FILL_CYCLES, GAP_CYCLES, drain_cycles, request_cycles
from tandem.host.hpu.device import Attend, HpuDevice

from tandem.bench import Figures, add_benchmark_options
from tandem.config import resolve_params
from tandem.errors import UserError

#: Engine configurations: the co-simulation tests' engine and the default one (both short).
CONFIGS = {
    "hd32-g2": {
        "head_dim": 32,
        "lanes": 16,
        "mem_data_bits": 128,
        "kv_bits": 8,
        "gqa_group": 2,
        "max_seq_len": 256,
    },
    "default": {"max_seq_len": 256},
}
#: Batches: (context lengths, append?, partial?) per request.
CASES = [
    [(1, False, False)],
    [(16, False, False)],
    [(64, True, False)],
    [(250, False, False)],
    [(250, True, True)],
    [(8, True, False)] * 8,
    [(33, True, False), (97, False, True), (5, True, False)],
    [(128, True, False)] * 4,
    [(200, False, False), (3, True, True), (64, True, False), (17, False, False)],
    [(40, True, True)] * 6,
]


def run_cases(device: HpuDevice, params: HpuParams, seed: int) -> list[tuple[list, int]]:
    """Each case as one attend_many call: (results, cycles)."""
    rng = np.random.default_rng(seed)

    def rows(n, bits=8):
        return quantize_rows(rng.standard_normal((n, params.head_dim)), bits)

    out = []
    for case in CASES:
        calls = []
        for length, append, partial in case:
            stored = length - 1 if append else length
            seq = device.allocate(length + 1)
            if stored:
                device.write_kv(seq, 0, *rows(stored), *rows(stored))
            q, qs = rows(params.gqa_group, 16)
            new = (*rows(1), *rows(1)) if append else None
            calls.append(Attend(seq, 0, q, score_scale(qs, params.head_dim), new, partial))
        results = device.attend_many(calls)
        out.append((results, device.last_cycles))
        for call in calls:
            device.free(call.seq)
    return out


def fit(rows: list[tuple[int, int, int]]) -> tuple[int, int]:
    """Integer ``(FILL, GAP)`` that minimize the largest relative error of
    ``FILL + busy + n * GAP`` against the RTL over (rtl, busy, n) rows (a grid search; the
    tolerance the co-simulation test asserts is a largest error, so that is what is fitted)."""
    rtl = np.array([r for r, _, _ in rows], dtype=float)
    busy = np.array([b for _, b, _ in rows], dtype=float)
    n = np.array([k for _, _, k in rows], dtype=float)
    fills, gaps = np.meshgrid(np.arange(0, 201), np.arange(0, 41), indexing="ij")
    model = fills[..., None] + busy + n * gaps[..., None]
    worst = np.abs(model / rtl - 1).max(axis=-1)
    i, j = np.unravel_index(np.argmin(worst), worst.shape)
    return int(fills[i, j]), int(gaps[i, j])


def measure(params: HpuParams, simulator: str, seed: int) -> list[tuple[int, int, int, int]]:
    """(RTL cycles, model's busy part, requests, modelled cycles) of every case on one engine;
    raises ValueError when the backends' results differ."""
    memory = 1 << 20
    golden = run_cases(HpuDevice(params, memory_bytes=memory), params, seed)
    with HpuDevice(params, memory_bytes=memory, backend="rtl", simulator=simulator) as device:
        rtl = run_cases(device, params, seed)
    rows = []
    for case, (g_res, modelled), (r_res, simulated) in zip(CASES, golden, rtl):
        for a, b in zip(g_res, r_res):
            for name in ("m", "l", "o", "y"):
                x, y = getattr(a, name), getattr(b, name)
                if not ((x is None and y is None) or np.array_equal(x, y)):
                    raise ValueError(f"RTL and golden results differ ({name})")
        # The model's busy part, sum of max(D, R, O * S) and the last request's DRAIN: what
        # FILL and GAP are fitted around.
        lengths, appends, partials = zip(*case)
        busy = int(request_cycles(params, lengths, append=appends, partial=partials).sum())
        busy += drain_cycles(params, lengths, append=appends, partial=partials)
        if modelled != FILL_CYCLES + busy + len(case) * GAP_CYCLES:
            raise ValueError("the golden backend does not report the cycle model's cycles")
        rows.append((simulated, busy, len(case), modelled))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="icarus")
    parser.add_argument(
        "--configs",
        nargs="+",
        choices=sorted(CONFIGS),
        default=sorted(CONFIGS),
        help="engine configurations to run (the fit is over all of them together)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="change every configuration"
    )
    add_benchmark_options(parser, seed=True)
    args = parser.parse_args(argv)
    try:
        configs = {
            name: resolve_params(
                HpuParams,
                None,
                [f"{k}={v}" for k, v in CONFIGS[name].items()] + args.set,
                design="hpu",
            )
            for name in args.configs
        }
    except UserError as exc:
        print(f"decode_cycles: error: {exc}", file=sys.stderr)
        return 2
    measured = {}
    for name, params in configs.items():
        try:
            measured[name] = measure(params, args.simulator, args.seed)
        except ValueError as exc:
            print(f"decode_cycles: {name}: {exc}", file=sys.stderr)
            return 1
    fill, gap = fit([(r, b, n) for rows in measured.values() for r, b, n, _ in rows])
    figures = Figures(
        "decode-cycles",
        config={
            "simulator": args.simulator,
            "configs": {k: v.to_dict() for k, v in configs.items()},
        },
    )
    note = f"{len(CASES)} batches, 1-8 requests, lengths 1-250, {args.simulator} RTL"
    for name, rows in measured.items():
        print(f"{name}: hpu {configs[name]}, {args.simulator}")
        print(f"  {'batch':<34} {'RTL':>7} {'model':>7} {'model/RTL':>9} {'refit/RTL':>9}")
        worst_before = worst_after = 0.0
        for case, (simulated, busy, n, modelled) in zip(CASES, rows):
            refit = fill + busy + n * gap
            worst_before = max(worst_before, abs(modelled / simulated - 1))
            worst_after = max(worst_after, abs(refit / simulated - 1))
            label = ", ".join(
                f"{length}{'+a' if append else ''}{'p' if partial else ''}"
                for length, append, partial in case[:3]
            ) + (f" ... x{len(case)}" if len(case) > 3 else "")
            print(
                f"  {label:<34} {simulated:>7} {modelled:>7} {modelled / simulated:>9.3f} "
                f"{refit / simulated:>9.3f}"
            )
        print(
            f"  model (FILL {FILL_CYCLES}, GAP {GAP_CYCLES}): largest error "
            f"{100 * worst_before:.1f} %; joint fit (FILL {fill}, GAP {gap}): "
            f"{100 * worst_after:.1f} %"
        )
        figures.add(
            f"largest |model / RTL - 1| of the golden backend's cycles, {name}",
            100 * worst_before,
            "%",
            design="hpu",
            higher_is_better=False,
            note=note + f", FILL {FILL_CYCLES} GAP {GAP_CYCLES}",
        )
        figures.add(
            f"largest |joint fit / RTL - 1|, {name}",
            100 * worst_after,
            "%",
            design="hpu",
            higher_is_better=False,
            note=note + f", FILL {fill} GAP {gap}",
        )
    print(f"minimax fit over {', '.join(measured)}: FILL {fill}, GAP {gap}")
    figures.write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
