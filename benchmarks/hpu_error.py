"""Error of the ``hpu`` golden model (bit-exact with the RTL) on real SmolLM2-135M attention.

For every stored layer, KV head and decode length n in the fixture (1 ... 4096), the float q,
K and V are quantized the way the host does it (K, V int8 per token, q int8 or int16 per
vector, binary16 scales), run through :func:`tandem.host.hpu.hpu_golden`, and compared with
``torch.nn.functional.scaled_dot_product_attention`` in float32 on the unquantized inputs.

By default K is smoothed per channel first (:func:`tandem.host.hpu.key_smoothing`); pass
``--no-smoothing`` to see plain per-token int8.

Relative error of one output vector y against the reference r is ``||y - r||_2 / ||r||_2``;
the script prints its mean and max over all (layer, query head, length), and also the
element-wise error relative to each vector's largest element. Targets: mean < 1 %, max < 3 %.

Usage::

    python benchmarks/hpu_error.py [--set q_bits=16 ...] [--json out.json]
"""

import argparse
import json
import sys

import numpy as np
from tandem.host.hpu import HpuParams
from tandem.host.hpu.accuracy import relative_errors
from tandem.host.hpu.smollm2_fixture import decode_cases, load_smollm2_qkv

from tandem.bench import Figures, add_benchmark_options
from tandem.config import resolve_params
from tandem.errors import UserError


def measure(params: HpuParams, fixture: dict, smooth: bool) -> list[dict]:
    """One record per (layer, KV head, length): relative errors of the G outputs."""
    records = []
    for layer, kv, n, q, k, v in decode_cases(fixture):
        l2, elem = relative_errors(params, q, k, v, smooth)
        records.append(
            {
                "layer": layer,
                "kv_head": kv,
                "length": n,
                "rel_l2": l2.tolist(),
                "rel_elem_max": elem.tolist(),
            }
        )
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--no-smoothing",
        action="store_true",
        help="quantize K as it is (no per-channel key smoothing)",
    )
    add_benchmark_options(parser, json="write every record to this file")
    args = parser.parse_args(argv)
    try:
        params = resolve_params(HpuParams, None, args.set, design="hpu")
        params = params.replace(head_dim=64, gqa_group=3, max_seq_len=max(params.max_seq_len, 4096))
        fixture = load_smollm2_qkv()
    except (UserError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    records = measure(params, fixture, smooth=not args.no_smoothing)
    l2 = np.array([r["rel_l2"] for r in records]).ravel()
    elem = np.array([r["rel_elem_max"] for r in records]).ravel()
    print(
        f"SmolLM2-135M layers {fixture['layers'].tolist()}, 3 KV heads x 3 query heads, "
        f"lengths {records[0]['length']}..{records[-1]['length']}, q int{params.q_bits}, "
        f"key smoothing {'off' if args.no_smoothing else 'on'}"
    )
    print(f"{'layer':>5} {'length':>6} {'mean rel L2':>12} {'max rel L2':>11}")
    for layer in fixture["layers"].tolist():
        for n in sorted({r["length"] for r in records}):
            rows = [r for r in records if r["layer"] == layer and r["length"] == n]
            vals = np.array([r["rel_l2"] for r in rows]).ravel()
            print(f"{layer:>5} {n:>6} {vals.mean():>12.2e} {vals.max():>11.2e}")
    print(
        f"overall relative L2 error: mean {l2.mean():.2%}, max {l2.max():.2%} "
        f"(targets < 1 %, < 3 %)"
    )
    print(f"element-wise error / row max: mean {elem.mean():.2%}, max {elem.max():.2%}")
    note = (
        f"SmolLM2-135M layers {fixture['layers'].tolist()}, lengths {records[0]['length']}.."
        f"{records[-1]['length']}, q int{params.q_bits}, "
        f"key smoothing {'off' if args.no_smoothing else 'on'}, vs torch float32 SDPA"
    )
    figures = Figures("hpu-error", config=params.to_dict())
    for name, value, target in (
        ("mean relative L2 error", l2.mean(), 0.01),
        ("max relative L2 error", l2.max(), 0.03),
    ):
        figures.add(
            name,
            value,
            reference=target,
            reference_label="target",
            higher_is_better=False,
            design="hpu",
            note=note,
        )
    figures.add(
        "max element error / row max", elem.max(), design="hpu", note=note, higher_is_better=False
    )
    figures.write(args.figures)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"params": params.to_dict(), "records": records}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
