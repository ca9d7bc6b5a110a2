"""The suite's pages: ``bench.md`` (:func:`markdown_summary`) and the results page
(:func:`results_page`, :func:`write_results`) of a run's summary (:func:`read_summary`)."""

import json
from pathlib import Path
from typing import Any

from ..errors import UserError
from .figures import Figure, Provenance


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.3g}"
    if magnitude >= 100:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _reference_cell(figure: dict[str, Any]) -> str:
    reference = figure.get("reference")
    if reference is None:
        return ""
    text = f"{_fmt(reference)} ({figure.get('reference_label') or 'reference'})"
    # Only the fields the comparison reads: a saved figure's provenance need not be one this
    # version knows.
    met = Figure(
        name=figure["name"],
        value=figure["value"],
        reference=reference,
        higher_is_better=figure.get("higher_is_better", True),
    ).meets_reference()
    if met is not None:
        text += " met" if met else " **not met**"
    return text


def markdown_summary(summary: dict[str, Any]) -> str:
    """``bench.json``'s content as Markdown: a status table, then one figure table per script."""
    mode = "quick" if summary["quick"] else "full"
    lines = [
        f"# tandem benchmarks ({mode})",
        "",
        f"{summary['started_utc']}, {summary['seconds']:.0f} s in all, Python "
        f"{summary['machine']['python']}, {summary['machine']['cpus']} CPUs.",
        "",
        "| benchmark | designs | status | seconds | command |",
        "|---|---|---|---|---|",
    ]
    for entry in summary["benchmarks"]:
        status = entry["status"]
        if entry.get("reason"):
            status += f": {entry['reason']}"
        lines.append(
            f"| {entry['name']} | {', '.join(entry['designs']) or 'all'} | {status} | "
            f"{entry.get('seconds', 0):.0f} | `{entry.get('command', entry['script'])}` |"
        )
    for entry in summary["benchmarks"]:
        if not entry["figures"]:
            continue
        lines += [
            "",
            f"## {entry['name']}",
            "",
            entry["what"] + ".",
            "",
            "| figure | value | unit | reference | conditions |",
            "|---|---|---|---|---|",
        ]
        for figure in entry["figures"]:
            name = figure["name"]
            if figure.get("design"):
                name = f"{figure['design']}: {name}"
            lines.append(
                f"| {name} | {_fmt(figure['value'])} | {figure['unit']} | "
                f"{_reference_cell(figure)} | {figure.get('note', '')} |"
            )
    return "\n".join(lines) + "\n"


#: The longest table cell of the results page: longer text goes into a numbered note under the
#: table, so that the tables stay readable in review diffs and narrow terminals.
MAX_CELL = 200
#: The results page's table of whole-system figures (:attr:`Benchmark.system`).
SYSTEM = "system"


def _cell(text: str) -> str:
    """``text`` on one line with its pipes escaped: one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


class _Notes:
    """The numbered notes under one table of the results page; equal notes share a number."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, tuple[str, ...]]] = []

    def number(self, text: str, items: tuple[str, ...] = ()) -> int:
        note = (" ".join(text.split()), tuple(" ".join(i.split()) for i in items))
        if note not in self.notes:
            self.notes.append(note)
        return self.notes.index(note) + 1

    def fit(self, text: str) -> str:
        """``text`` as a cell; when longer than :data:`MAX_CELL`, its start and a note."""
        cell = _cell(text)
        if len(cell) <= MAX_CELL:
            return cell
        mark = f" ... [note {self.number(text)}]"
        cut = cell[: MAX_CELL - len(mark)]
        cut = cut[: cut.rfind(" ")] if " " in cut else cut
        return cut.rstrip("\\") + mark

    def lines(self) -> list[str]:
        out = []
        for number, (text, items) in enumerate(self.notes, 1):
            out.append(f"{number}. {text}")
            out += [f"   - {item}" for item in items]
        return ["", "Notes:", "", *out] if out else []


def _how_cell(entry: dict[str, Any], figure: dict[str, Any], notes: _Notes) -> str:
    provenance = figure.get("provenance") or entry.get("provenance") or "not stated"
    if provenance != Provenance.MODELLED:
        return _cell(provenance)
    assumptions = figure.get("assumptions") or []
    if not assumptions:
        return "modelled; assumptions not stated"
    inline = _cell("modelled: " + "; ".join(assumptions))
    if len(inline) <= MAX_CELL:
        return inline
    return f"modelled; assumptions: note {notes.number('Assumptions:', tuple(assumptions))}"


def _command_cell(entry: dict[str, Any], figure: dict[str, Any], notes: _Notes) -> str:
    command = figure.get("command") or entry.get("command") or entry["script"]
    cell = f"`{_cell(command)}`"
    if len(cell) <= MAX_CELL:
        return cell
    return f"note {notes.number(f'Command: `{command}`')}"


def _group_of(entry: dict[str, Any], figure: dict[str, Any]) -> str:
    """The table a figure goes in: the system's, or its design's. A figure's ``design`` may
    name a variant of one of its script's designs (``"hpu (channels placement)"``): the
    design it starts with."""
    if entry.get("system"):
        return SYSTEM
    label, designs = figure.get("design", ""), entry["designs"]
    if label and (label in designs or not designs):
        return label
    if label and label.split()[0] in designs:
        return label.split()[0]
    return ", ".join(designs) or "all designs"


def _groups_of(entry: dict[str, Any]) -> list[str]:
    if entry.get("system"):
        return [SYSTEM]
    return list(entry["designs"]) or ["all designs"]


def _status(entry: dict[str, Any]) -> str:
    status, reason = entry["status"], entry.get("reason") or ""
    if reason.startswith(f"{status}: "):  # a skipped script's own line says "skipped: ..."
        return reason
    return f"{status}: {reason}" if reason else status


def _run_command(summary: dict[str, Any]) -> str:
    words = ["tandem", "bench"]
    if summary["quick"]:
        words.append("--quick")
    if summary.get("only"):
        words += ["--only", *summary["only"]]
    return " ".join([*words, "--results", "FILE"])


def _commit_text(commit: dict[str, Any] | None) -> str:
    if commit is None:
        return "not recorded (not a git checkout, or a run before it was recorded)"
    state = {True: "with uncommitted changes", False: "clean", None: "state unknown"}
    return f"`{commit['hash']}`, working tree {state[commit.get('dirty')]}"


def _load_text(value: list[float] | None) -> str:
    return " / ".join(f"{v:.2f}" for v in value) if value else "not recorded"


def _entry_load(entry: dict[str, Any]) -> str:
    """A script's 1-minute load average at its start and end, and the machine's cores."""
    start, end = entry.get("load_start"), entry.get("load_end")
    if not start or not end:
        return "not recorded"
    cores = f" of {entry['cpus']}" if entry.get("cpus") else ""
    return f"{start[0]:.1f} to {end[0]:.1f}{cores}"


def _updates_lines(summary: dict[str, Any]) -> list[str]:
    updates = summary.get("updates") or []
    if not updates:
        return []
    lines = [
        f"- **Re-runs**: {len(updates)} later run(s) replaced some scripts' entries; each entry "
        "of the Scripts table has its own start time and load"
    ]
    for update in updates:
        tools = update.get("tools")
        changed = [
            f"{k} {v}" for k, v in (tools or {}).items() if summary.get("tools", {}).get(k) != v
        ]
        tools_text = f"; tools that differ: {', '.join(changed)}" if changed else ""
        quick = " --quick" if summary["quick"] else ""
        command = f"tandem bench{quick} --only {' '.join(update['only'])} --update bench.json"
        load = _load_text(update.get("load_start"))
        lines.append(
            f"  - `{command}`: started {update['started_utc']}, {update['seconds']:.0f} s, "
            f"commit {_commit_text(update.get('commit'))}, load average {load} at the start"
            f"{tools_text}"
        )
    return lines


def _header(summary: dict[str, Any]) -> list[str]:
    commit_text = _commit_text(summary.get("commit"))
    machine = summary["machine"]

    def load(key: str) -> str:
        return _load_text(machine.get(key))

    tools = summary.get("tools")
    tools_text = ", ".join(f"{k} {v}" for k, v in tools.items()) if tools else "not recorded"
    mode = "quick: every script with its small arguments" if summary["quick"] else "full"
    return [
        "# tandem results",
        "",
        "Every figure tandem publishes, as `tandem bench` measured it: one table per design,",
        "then the whole system (performance model, host runtime). Each row says how the figure",
        "was obtained, a modelled one with its assumptions, and the command that reproduces it.",
        "",
        f"- **Run**: `{_run_command(summary)}` ({mode}); "
        "`tandem bench --from-json bench.json --results FILE` writes this page again from the "
        "run's saved bench.json",
        f"- **Commit**: {commit_text}",
        f"- **Date**: started {summary['started_utc']}, {summary['seconds']:.0f} s in all"
        + (" (the first run; see Re-runs)" if summary.get("updates") else ""),
        f"- **Machine**: {machine.get('cpus')} cores, {machine.get('platform', 'unknown')}; "
        f"load average (1, 5, 15 min) {load('load_start')} at the start, "
        f"{load('load_end')} at the end",
        f"- **Tools**: {tools_text}",
        *_updates_lines(summary),
        *_not_run_lines(summary),
    ]


def _not_run_lines(summary: dict[str, Any]) -> list[str]:
    names = [e["name"] for e in summary["benchmarks"] if e["status"] == "not run"]
    if not names:
        return []
    return [
        f"- **Not run**: the run stopped before {len(names)} of its "
        f"{len(summary['benchmarks'])} scripts: {', '.join(names)}; their figures are not on "
        "this page (`tandem bench --only NAME... --update bench.json` adds them)"
    ]


def results_page(summary: dict[str, Any]) -> str:
    """The results page of a run (what ``bench.json`` holds) as Markdown.

    A header (the run's command, commit, date, machine with its load, tool versions), a table
    of every script with its status (a skipped or failed one with its reason), then one table
    of figures per design and one for the system. Each figure's row: the figure, its value and
    unit, its target or paper figure, its conditions, how it was obtained (a modelled one
    with its assumptions) and the command that reproduces it. No cell is longer than
    :data:`MAX_CELL` characters: longer text goes into numbered notes under its table. The
    page depends on ``summary`` alone, so the same ``bench.json`` gives the same bytes.

    Parameters
    ----------
    summary
        What :func:`run_suite` returns (or a ``bench.json`` it wrote, also one written before
        figures carried their provenance: those say "not stated").

    Returns
    -------
    str
        The page.
    """
    lines = _header(summary)
    notes = _Notes()
    lines += [
        "",
        "## Scripts",
        "",
        "Load: the 1-minute load average when the script started and ended, of the machine's",
        "cores; a figure measured as wall time on a loaded machine is slower than on a quiet one.",
        "",
        "| script | designs | status | started (UTC) | seconds | load | figures | command |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry in summary["benchmarks"]:
        designs = SYSTEM if entry.get("system") else ", ".join(entry["designs"]) or "all"
        started = entry.get("started_utc") or "not recorded"
        lines.append(
            f"| {entry['name']} | {_cell(designs)} | {notes.fit(_status(entry))} | {started} | "
            f"{entry.get('seconds', 0):.0f} | {_entry_load(entry)} | {len(entry['figures'])} | "
            f"`{_cell(entry.get('command', entry['script']))}` |"
        )
    lines += notes.lines()

    rows: dict[str, list[tuple[dict, dict]]] = {}
    missing: dict[str, list[dict]] = {}
    for entry in summary["benchmarks"]:
        for figure in entry["figures"]:
            rows.setdefault(_group_of(entry, figure), []).append((entry, figure))
        if entry["status"] != "ok":
            for group in _groups_of(entry):
                missing.setdefault(group, []).append(entry)
    groups = sorted((set(rows) | set(missing)) - {SYSTEM})
    if SYSTEM in rows or SYSTEM in missing:
        groups.append(SYSTEM)
    for group in groups:
        notes = _Notes()
        title = "System (performance model, host runtime)" if group == SYSTEM else group
        lines += ["", f"## {title}", ""]
        if group in rows:
            lines += [
                "| figure | value | target or paper | conditions | how obtained | command |",
                "|---|---|---|---|---|---|",
            ]
        for entry, figure in rows.get(group, []):
            name = figure["name"]
            if figure.get("design") and figure["design"] != group:
                name = f"{figure['design']}: {name}"
            lines.append(
                f"| {notes.fit(name)} | {_fmt(figure['value'])} {_cell(figure['unit'])} | "
                f"{notes.fit(_reference_cell(figure))} | {notes.fit(figure.get('note', ''))} | "
                f"{_how_cell(entry, figure, notes)} | {_command_cell(entry, figure, notes)} |"
            )
        if group in missing:
            lines += ["", "Not measured in this run:", ""]
            lines += [
                f"- {e['name']} (`{e['script']}`): {' '.join(_status(e).split())}"
                for e in missing[group]
            ]
        lines += notes.lines()
    return "\n".join(lines) + "\n"


def write_results(summary: dict[str, Any], path: str | Path) -> Path:
    """Write :func:`results_page` of ``summary`` to ``path`` (UTF-8) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results_page(summary), encoding="utf-8")
    return path


def read_summary(path: str | Path) -> dict[str, Any]:
    """A saved ``bench.json``, checked to be one (:class:`~tandem.errors.UserError` if not)."""
    try:
        summary = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} is not JSON: {exc}") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("benchmarks"), list):
        raise UserError(f"{path} is not a bench.json (no list of benchmarks)")
    return summary
