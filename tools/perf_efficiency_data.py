"""Store the hpu RTL's measured stream efficiency as the performance model's data file.

Run: ``python tools/perf_efficiency_data.py [JSON] [--out FILE]``

Reads the report ``python benchmarks/hpu_stream_efficiency.py`` wrote (default
``build/benchmarks/hpu_stream_efficiency.json``) and writes
``constraints/measured/hpu_stream_efficiency.yaml``, which :mod:`tandem.host.system.perf` reads:
the engine configuration the figures were measured with, the command, and per read latency
and sequence length the read beats per port of one request, the efficiency of one request
alone and of the benchmark's queued batch, and the cycles of a lone request outside its read
window (``fill``). The output is byte-reproducible for the same report.
"""

import argparse
import json
import sys
from pathlib import Path

import yaml

DEFAULT_JSON = Path("build") / "benchmarks" / "hpu_stream_efficiency.json"
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "constraints" / "measured"
HEADER = """\
# Stream efficiency of the hpu engine's RTL, measured in simulation: the figures the
# performance model (tandem perf, host/system/perf/) uses for the HPU's achieved bandwidth
# (board peak x efficiency) and for the cycles of one decode step.
#
# Written by: python tools/perf_efficiency_data.py (from the JSON report of the command below)
# Measured by: {command}
# Definition: {definition}
# Columns per row: latency = read latency in cycles from an AR handshake to its first R beat
# (the memory model's minimum is {min_latency}, so a requested 0 is stored as {min_latency});
# tokens = sequence length; beats = read beats per port of one request; alone = efficiency
# of one request; queued = efficiency of {batch} requests queued back to back (a decode
# call), measured over the whole read window; fill = cycles of a lone request outside its
# read window (descriptor in, pipeline out) = request_cycles - read_cycles.
"""


def measuring_command(report: dict) -> str:
    """The benchmark's command line that made ``report``: its harness and the parameters that
    differ from the defaults (``max_seq_len`` follows the longest length by itself)."""
    from tandem.host.hpu import HpuParams

    defaults = HpuParams().to_dict()
    sets = [
        f" --set {key}={value}"
        for key, value in report["params"].items()
        if key != "max_seq_len" and defaults.get(key) != value
    ]
    harness = " --harness native" if report.get("harness") == "native" else ""
    return "python benchmarks/hpu_stream_efficiency.py" + harness + "".join(sets)


def convert(report: dict) -> dict:
    """The data file's content for the benchmark ``report``."""
    params = report["params"]
    beat_bytes = params["mem_data_bits"] // 8
    min_latency = report.get("model_min_latency", 2)
    batch = report["batch"]
    by = {(r["latency"], r["tokens"], r["batch"]): r for r in report["rows"]}
    rows = []
    for (latency, tokens, b), alone in sorted(by.items()):
        if b != 1:
            continue
        queued = by.get((latency, tokens, batch), alone)
        rows.append(
            {
                "latency": max(latency, min_latency),
                "tokens": tokens,
                "beats": alone["read_bytes"] // (2 * beat_bytes),
                "alone": round(alone["efficiency"], 6),
                "queued": round(queued["efficiency"], 6),
                "fill": alone["request_cycles"] - alone["read_cycles"],
            }
        )
    return {
        "design": report["design"],
        "command": measuring_command(report),
        "simulator": report["simulator"],
        "seed": report["seed"],
        "batch": batch,
        "definition": report["definition"],
        "params": params,
        "rows": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "hpu_stream_efficiency.yaml")
    args = parser.parse_args(argv)
    try:
        report = json.loads(args.report.read_text())
        data = convert(report)
    except (OSError, ValueError, KeyError) as exc:
        print(f"perf_efficiency_data: error: {args.report}: {exc}", file=sys.stderr)
        return 2
    header = HEADER.format(
        command=data["command"],
        definition=data["definition"],
        min_latency=report.get("model_min_latency", 2),
        batch=data["batch"],
    )
    text = header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
