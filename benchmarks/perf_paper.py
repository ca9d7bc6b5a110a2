"""The performance model next to the HPU paper's claims (Llama-2-7B, L40S, 4 x U55C, 1K/1K).

Run: ``python benchmarks/perf_paper.py [--out DIR]``

Projects decode for the paper's setup (:data:`tandem.host.system.perf.PAPER`) with
:func:`tandem.host.system.perf.decode_projection` at batches 1..128 and prints, next to the paper's
measured claims (up to 4.1x tokens/s over the GPU alone, which runs out of memory at large batches;
4.6x tokens/s/W), the model's best-against-best ratios, and how they move with the assumptions the
model states: the read latency of the measured stream efficiency (2 or 100 cycles), the engine
clock (as shipped: the timing estimate of the synthesized engine, ``tandem synth``; and every 25 MHz
from 200 MHz to the board's 300 MHz), engines per card, a fixed PCIe latency per
transfer and where the cards place KV regions (by pseudo-channel, as shipped, or one sequence's
regions one after another). Nothing is fitted to the paper. Writes ``perf_paper.json`` and
``perf_paper.png`` into ``--out`` (default ``build/benchmarks``).
"""

import argparse
import json
import sys

from tandem.host.system.perf import PAPER, decode_projection, paper_comparison, plot, table

from tandem.bench import Figures, Provenance, add_benchmark_options

BATCHES = (1, 8, 16, 32, 48, 64, 96, 128)
VARIANTS = (
    ("as shipped (latency 100, {clock}, {engines} engines/card)", {}),
    ("read latency 2", {"latency": 2}),
    # The engine clock from 200 MHz to the board's 300 MHz: the timing estimate the shipped row
    # takes is a logic-level count, not a routed clock, so the ratio is given across the range.
    *(
        (
            f"engine clock {mhz} MHz" + (" (the board's default)" if mhz == 300 else ""),
            {"clock_mhz": float(mhz)},
        )
        for mhz in (200, 225, 250, 275, 300)
    ),
    ("8 engines/card", {"engines": 8}),
    ("32 engines/card", {"engines": 32}),
    ("PCIe latency 5 us per transfer", {"pcie_latency_us": 5.0}),
    ("contiguous KV placement (a call reads a few pseudo-channels)", {"placement": "contiguous"}),
)

# What the projection rests on, each with the file its numbers come from (the formulas are
# host/system/perf/__init__.py's docstring); a variant's label names the one it changes.
ASSUMPTIONS = (
    f"{PAPER['model']}'s shape (constraints/models/{PAPER['model']}.yaml)",
    f"the GPU at its data-sheet bandwidth and FP16 peak over the decode efficiency its file "
    f"states with its source (constraints/gpus/{PAPER['gpu']}.yaml)",
    f"HBM pseudo-channels at the board's sustained fraction of peak, PCIe links, nameplate "
    f"power (constraints/boards/{PAPER['hpu_board']}.yaml)",
    "a call's KV bandwidth from the pseudo-channels its regions lie in, placed as the cards' "
    "allocator places them (mappings/hpu/channels.py), the busiest at its sustained rate",
    "the engine's stream efficiency as its RTL simulation measured it "
    "(constraints/measured/hpu_stream_efficiency.yaml)",
    "engine clock and engines per card from a yosys synthesis (constraints/measured/"
    "hpu_resources.yaml)",
    "tokens/s/W over nameplate power (GPU TDP + boards), not measured power",
    "prefill and the KV transfer after it left out; no PCIe latency per transfer unless named",
    "the formulas of host/system/perf/__init__.py's docstring",
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_benchmark_options(parser, out=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    setup = dict(
        input_tokens=PAPER["input"],
        output_tokens=PAPER["output"],
        hpus=PAPER["hpus"],
        hpu_board=PAPER["hpu_board"],
    )
    report = {"paper": PAPER, "variants": []}
    for label, extra in VARIANTS:
        rows = decode_projection(PAPER["model"], PAPER["gpu"], BATCHES, **setup, **extra)
        cmp = paper_comparison(rows)
        report["variants"].append({"label": label, "options": extra, "comparison": cmp})
        if not extra:  # the shipped assumptions: name the clock and engines they give
            hpu = next(r["hpu"] for r in rows if r.get("hpu"))
            clock = f"{hpu['clock_mhz']:g} MHz"
            if hpu["clock_source"].startswith("timing estimate"):
                clock += " estimated"
            label = label.format(clock=clock, engines=hpu["engines_per_card"])
            report["variants"][-1]["label"] = label
            print(table(rows))
            plot(rows, args.out / "perf_paper.png")
            report["rows"] = rows
    print()
    print(
        f"HPU paper (measured): up to {PAPER['speedup']}x tokens/s, "
        f"{PAPER['tokens_per_s_per_w_ratio']}x tokens/s/W"
    )
    print(f"{'model variant':<60} {'speed-up':>8} {'/paper':>7} {'tok/s/W':>8} {'/paper':>7}")
    for v in report["variants"]:
        c = v["comparison"]
        label = v["label"] + (" (do not fit)" if c.get("engines_fit") is False else "")
        print(
            f"{label:<60} {c['speedup']:>7.2f}x {c['speedup'] / PAPER['speedup']:>7.2f} "
            f"{c['tokens_per_s_per_w_ratio']:>7.2f}x "
            f"{c['tokens_per_s_per_w_ratio'] / PAPER['tokens_per_s_per_w_ratio']:>7.2f}"
        )
    first = report["variants"][0]["comparison"]
    print(
        f"GPU alone out of memory at batches {first['gpu_oom_batches']}; its best batch "
        f"{first['gpu_best_batch']}, GPU + HPUs best at {first['hpu_best_batch']}"
    )
    figures = Figures("perf-paper", config={"paper": PAPER})
    setting = (
        f"{PAPER['model']} on {PAPER['gpu']} + {PAPER['hpus']} {PAPER['hpu_board']} HPUs, "
        f"{PAPER['input']} in / {PAPER['output']} out, best batch of each system"
    )
    for v in report["variants"]:
        c = v["comparison"]
        shipped = not v["options"]
        figures.add(
            f"tokens/s speed-up over the GPU alone, {v['label']}"
            + (" (engines do not fit)" if c.get("engines_fit") is False else ""),
            c["speedup"],
            "x",
            design="hpu",
            reference=PAPER["speedup"] if shipped else None,
            reference_label="HPU paper" if shipped else "",
            note=setting,
            provenance=Provenance.MODELLED,
            assumptions=ASSUMPTIONS,
        )
        if shipped:
            figures.add(
                "tokens/s/W over the GPU alone",
                c["tokens_per_s_per_w_ratio"],
                "x",
                design="hpu",
                reference=PAPER["tokens_per_s_per_w_ratio"],
                reference_label="HPU paper",
                note=setting,
                provenance=Provenance.MODELLED,
                assumptions=ASSUMPTIONS,
            )
    figures.write(args.figures)
    path = args.out / "perf_paper.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path} and {args.out / 'perf_paper.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
