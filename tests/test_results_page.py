"""docs/results.md, the results page ``tandem bench --results`` writes: its structure (a
header with the commit, date, machine and tools; every figure with a value, how it was
obtained and the command that reproduces it), a quick subset regenerated here against the
committed page, and README.md's headline figures found in it.

The page is the source of every published figure: when a README figure differs from the
page's, README.md is what is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tandem.bench import MAX_CELL, Provenance, results_page, run_suite

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "results.md"
SYSTEM_TITLE = "System (performance model, host runtime)"
STATUSES = ("ok", "skipped", "failed", "timeout", "not run")
#: A value cell: a number as the page writes it (``0.9391``, ``42,812``, ``1.69e-05``), a
#: space and a unit.
VALUE = re.compile(r"(-?[\d,]*\.?\d+(?:e[+-]\d+)?) (\S.*)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def _sections(page: str) -> dict[str, list[str]]:
    """The page's lines by ``## `` section (the header under ``""``)."""
    sections: dict[str, list[str]] = {"": []}
    title = ""
    for line in page.splitlines():
        if line.startswith("## "):
            title = line[3:]
            sections[title] = []
        else:
            sections[title].append(line)
    return sections


def _table(lines: list[str]) -> list[list[str]]:
    """The rows of the first table in ``lines`` (header and rule left out)."""
    rows = [_cells(line) for line in lines if line.startswith("|")]
    return rows[2:]


def figure_rows(page: str) -> dict[str, list[list[str]]]:
    """Every figure table's rows, by section title (the Scripts table left out)."""
    return {
        title: _table(lines)
        for title, lines in _sections(page).items()
        if title not in ("", "Scripts") and any(line.startswith("| figure |") for line in lines)
    }


def check_structure(page: str) -> dict[str, list[list[str]]]:
    """Assert what every results page holds and return its figure rows by table."""
    header = _sections(page)[""]
    assert header[0] == "# tandem results"
    fields = {m[1]: m[2] for m in (re.match(r"- \*\*(\w+)\*\*: (.*)", h) for h in header) if m}
    assert {"Run", "Commit", "Date", "Machine", "Tools"} <= set(fields), fields
    assert re.match(r"`tandem bench( --quick)?( --only [\w -]+)? --results FILE`", fields["Run"])
    assert re.match(
        r"`[0-9a-f]{7,}`, working tree (clean|with uncommitted changes)", fields["Commit"]
    )
    assert re.match(r"started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, \d+ s in all", fields["Date"])
    machine = fields["Machine"]
    assert re.match(r"\d+ cores, ", machine) and "load average (1, 5, 15 min)" in machine
    for tool in ("python", "amaranth", "cocotb", "verilator", "iverilog", "numpy", "torch"):
        assert re.search(rf"\b{tool} \S", fields["Tools"]), tool

    scripts = _table(_sections(page)["Scripts"])
    assert scripts
    for row in scripts:
        name, _, status, started, seconds, load, count, command = row
        assert status.split(":")[0] in STATUSES, row
        assert started == "not recorded" or re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:]+Z", started)
        assert re.fullmatch(r"\d+", seconds) and re.fullmatch(r"\d+", count), row
        assert load == "not recorded" or re.fullmatch(r"[\d.]+ to [\d.]+ of \d+", load), row
        assert command.startswith("`") and command.endswith("`"), row

    provenances = {p.value for p in Provenance} | {"not stated"}
    tables = figure_rows(page)
    assert tables, "no figure tables"
    for title, rows in tables.items():
        notes = "\n".join(_sections(page)[title])
        for row in rows:
            assert len(row) == 6, row
            name, value, _, _, how, command = row
            assert name and VALUE.fullmatch(value), row
            assert how in provenances or how.startswith("modelled"), row
            if how.startswith("modelled"):
                assert how != "modelled; assumptions not stated", row
            # A benchmark script, or the tandem command that measures the figure (a stored
            # synthesis names its tandem synth command).
            assert command.startswith(("`python benchmarks/", "`tandem ")) or re.fullmatch(
                r"note \d+", command
            ), row
            for number in re.findall(r"note (\d+)", " ".join(row)):
                assert re.search(rf"^{number}\. ", notes, re.M), (title, number)
    for line in page.splitlines():
        if line.startswith("|"):
            assert max(len(c) for c in _cells(line)) <= MAX_CELL, line
    return tables


def _summary() -> dict:
    """A small saved run: one design's figures, a modelled system figure, a failed script."""

    def entry(name, designs, figures, **extra):
        return {
            "name": name,
            "script": f"benchmarks/{name}.py",
            "designs": designs,
            "what": f"what {name} measures",
            "status": "ok",
            "seconds": 2.0,
            "started_utc": "2026-01-02T03:04:05Z",
            "load_start": [1.5, 1.0, 0.5],
            "load_end": [2.3, 1.0, 0.5],
            "cpus": 2,
            "command": f"python benchmarks/{name}.py --quick",
            "figures": figures,
            **extra,
        }

    def fig(name, value, unit, provenance, **extra):
        return {
            "name": name,
            "value": value,
            "unit": unit,
            "provenance": provenance,
            "command": "python benchmarks/exp.py --quick",
            **extra,
        }

    return {
        "quick": True,
        "only": [],
        "started_utc": "2026-01-02T03:04:05Z",
        "seconds": 9.0,
        "commit": {"hash": "abc1234", "dirty": False},
        "machine": {
            "python": "3.11.7",
            "platform": "Linux-test",
            "cpus": 2,
            "load_start": [1.5, 1.0, 0.5],
            "load_end": [2.3, 1.0, 0.5],
        },
        "tools": {
            t: "1.0"
            for t in ("python", "amaranth", "cocotb", "verilator", "iverilog", "numpy", "torch")
        },
        "benchmarks": [
            entry(
                "exp",
                ["exp2"],
                [
                    fig("max error", 0.9391, "LSB", Provenance.GOLDEN_EVERY_INPUT, design="exp2"),
                    fig("mean error", 0.25, "LSB", Provenance.GOLDEN_EVERY_INPUT, design="exp2"),
                ],
            ),
            entry(
                "perf",
                ["hpu"],
                [
                    fig(
                        "tokens/s, GPU + 4 cards over GPU alone",
                        2.2,
                        "x",
                        Provenance.MODELLED,
                        assumptions=["GPU at its data sheet's peaks"],
                        design="hpu",
                    ),
                ],
                system=True,
            ),
            entry("broken", ["rnn"], [], status="failed", reason="exit 1"),
        ],
    }


def test_page_of_a_small_saved_run():
    """A page regenerated from a small saved summary has the structure the committed one
    must have, with each figure in its design's table or the system's."""
    page = results_page(_summary())
    tables = check_structure(page)
    assert list(tables) == ["exp2", SYSTEM_TITLE]
    assert [r[:2] for r in tables["exp2"]] == [
        ["max error", "0.9391 LSB"],
        ["mean error", "0.25 LSB"],
    ]
    assert tables[SYSTEM_TITLE][0][4] == "modelled: GPU at its data sheet's peaks"
    assert "| 2026-01-02T03:04:05Z | 2 | 1.5 to 2.3 of 2 | 2 |" in page
    assert "- broken (`benchmarks/broken.py`): failed: exit 1" in page


@pytest.fixture(scope="module")
def committed() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_committed_page_structure(committed):
    tables = check_structure(committed)
    assert len(tables) >= 5 and SYSTEM_TITLE in tables
    assert "**Run**: `tandem bench --quick --results FILE`" in committed


def test_quick_subset_regenerates_to_the_committed_rows(tmp_path, committed):
    """Two scripts whose figures are exact (every input of a golden model) run again: their
    rows are the committed page's rows, byte for byte."""
    summary = run_suite(
        quick=True,
        only=["fixed-point", "rnn-activation"],
        out_dir=tmp_path,
        benchmarks_dir=ROOT / "benchmarks",
        timeout_s=300,
    )
    assert [e["status"] for e in summary["benchmarks"]] == ["ok", "ok"]
    fresh = figure_rows(results_page(summary))
    page = figure_rows(committed)
    assert set(fresh) == {"exp2", "reciprocal", "rnn"}
    for title, rows in fresh.items():
        for row in rows:
            assert row in page[title], (title, row)


# --- README's headline figures ---------------------------------------------------------------

#: A number as README writes it: ``0.94``, ``168,832``, ``42.8k``, ``2.20`` (of ``2.20x``).
NUMBER = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(k?)(?![\d])")


def _headline_rows() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Headline figures", 1)[1].split("\n## ", 1)[0]
    rows = [_cells(line) for line in section.splitlines() if line.startswith("|")][2:]
    assert rows, "README.md has no Headline figures table"
    return [(re.sub(r"\[(.*?)\]\(.*?\)", r"\1", r[0]), r[1]) for r in rows]


def _page_values(page: str) -> list[float]:
    return [value for value, _, _ in _page_figures(page)]


def _page_figures(page: str) -> list[tuple[float, str, str]]:
    """(value, unit, the row's words) of every figure on the page."""
    figures = []
    for title, rows in figure_rows(page).items():
        for row in rows:
            match = VALUE.fullmatch(row[1])
            words = " ".join([title, row[0], row[3]]).lower()
            figures.append((float(match[1].replace(",", "")), match[2], words))
    return figures


def _shown_as(value: float, text: str, thousands: bool, percent: bool) -> bool:
    """Whether ``value`` (as the page holds it) reads ``text`` at the README's precision."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    wanted = float(text.replace(",", ""))
    for scale in (1.0, 100.0) if percent else (1.0,):
        shown = value * scale / (1000.0 if thousands else 1.0)
        if f"{shown:.{decimals}f}" == f"{wanted:.{decimals}f}":
            return True
    return False


def _stems(text: str) -> set[str]:
    """The first five letters of each word of four letters or more: enough to tell a row by."""
    return {w[:5] for w in re.findall(r"[a-z][a-z0-9-]{3,}", text.lower())} - {"measu", "with"}


def _on_page(figures, label: str, text: str, k: str, unit: str) -> bool:
    """Whether a README number is a figure of the page with a compatible unit, in a row that
    shares a word with the README's label (so that a bare 1.00 is not any ratio of 1)."""
    percent = unit == "%"
    for value, page_unit, words in figures:
        units_fit = (
            page_unit == unit
            or (percent and page_unit == "ratio")
            or (unit in ("", "ratio") and page_unit == "ratio")
            or (unit and page_unit.lower().startswith(unit.lower()))
        )
        if (
            units_fit
            and _stems(label) & _stems(words)
            and _shown_as(value, text, bool(k), percent and page_unit == "ratio")
        ):
            return True
    return False


def test_readme_headline_figures_are_on_the_page(committed):
    figures = _page_figures(committed)
    missing = []
    for label, cell in _headline_rows():
        numbers = list(re.finditer(NUMBER.pattern + r"\s?(%|x|[A-Za-z][\w/]*)?", cell))
        assert numbers, (label, cell)
        for match in numbers:
            text, k, unit = match[1], match[2], match[3] or ""
            if not _on_page(figures, label, text, k, unit):
                missing.append(f"{label}: {text}{k} {unit} (in {cell!r})")
    assert not missing, "README figures not in docs/results.md:\n" + "\n".join(missing)


# --- figures in docstrings and comments --------------------------------------------------------

#: A measured-looking figure in prose: a number with %, MHz, LUTs, GB/s, tokens/s or ms, or a
#: ratio written ``2.5x`` (``576 x 576``, a shape, is not one).
PROSE_FIGURE = re.compile(
    r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)"
    r"(?:\s?(%|MHz|k? ?LUTs?|GB/s|tokens/s|ms)(?![\w/])|(x)(?![\w/]))"
)
#: Words just before a figure that make it a target, a tolerance or a default, not a result.
NOT_A_RESULT = re.compile(
    r"(target|within|[<>]=?|at most|up to|allowed|limit|default)[^.;]{0,25}$", re.IGNORECASE
)
#: Figures in prose that are not results, each with why it may stay: data-sheet constants with
#: their source, published figures with their paper, workloads, parameters and tolerances.
ALLOWED = {
    ("host/common/threads.py", "5 ms"): "a sampling interval, a parameter",
    ("host/system/perf/cards.py", "80 %"): "a utilization ceiling the model assumes, a parameter",
    ("sim/hpu/hbm.py", "300 MHz"): "the U55C HBM clock the model is built for (data sheet)",
    ("sim/hpu/hpu_stimulus.py", "3x"): "the margin a tolerance leaves, derived in the comment",
    ("sim/hpu/hpu_tb.py", "10 %"): "a testbench tolerance",
    ("sim/toolchain.py", "5.04x"): "a Verilator version series, not a ratio",
    ("mappings/llm/perf.py", "65.9 %"): "FlightLLM's published figure, cited",
    ("tandem/synth.py", "4 LUTs"): "what a RAM32M/RAM64M primitive occupies (UG574)",
    ("tandem/timing/models.py", "775 MHz"): "DS923 switching characteristics, cited",
    ("tandem/timing/models.py", "737 MHz"): "DS923 switching characteristics, cited",
    ("tandem/timing/models.py", "650 MHz"): "DS923 switching characteristics, cited",
    ("benchmarks/fpga_decode.py", "65.9 %"): "FlightLLM's published figure, cited",
    ("benchmarks/hpu_resources_data.py", "80 %"): "the board share engines may fill, a rule",
    ("benchmarks/perf_crosscheck.py", "10 %"): "the script's tolerance",
    ("benchmarks/perf_paper.py", "4.6x"): "the HPU paper's claim, cited",
    ("benchmarks/perf_paper.py", "25 MHz"): "the clock sweep's step, a parameter",
    ("benchmarks/perf_paper.py", "200 MHz"): "the clock sweep's range, a parameter",
    ("benchmarks/perf_paper.py", "300 MHz"): "the U55C's engine clock (data sheet)",
    ("benchmarks/pnr.py", "25 MHz"): "the ULX3S board's oscillator (board data sheet)",
    ("tools/rnn_fixture.py", "32 ms"): "the VAD model's audio chunk, the workload",
    ("benchmarks/rnn_long_sequence.py", "32 ms"): "the VAD model's audio chunk, the workload",
    ("benchmarks/rnn_long_sequence.py", "85 %"): "the training split, a parameter",
    ("benchmarks/shared_machine.py", "2x"): "the expected slow-down the target is built on",
}
#: Measured figures still in prose, in files that other work is rewriting: each is to move to
#: a benchmark (and so to docs/results.md) or out of the comment. Listed, not hidden.
MEASURED_NOT_ON_PAGE: dict[tuple[str, str], str] = {}


def prose_figures() -> list[tuple[str, int, str]]:
    """(file, line, figure) of every measured-looking figure in the sources' comments and
    docstrings (those that read as a target or tolerance left out)."""
    from .test_history_words import prose_of, scanned_files

    found = []
    for path in scanned_files():
        if path.suffix not in (".py", ".c", ".h"):
            continue
        relative = str(path.relative_to(ROOT))
        for number, line in enumerate(prose_of(path).splitlines(), 1):
            for match in PROSE_FIGURE.finditer(line):
                if not NOT_A_RESULT.search(line[: match.start()]):
                    found.append((relative, number, match.group(0)))
    return found


def test_figures_in_docstrings_come_from_the_results(committed):
    """A figure in a comment or docstring is on the results page, or is allowed with a
    reason (a data-sheet constant with its source, a target, a parameter)."""
    values = _page_values(committed)
    known = ALLOWED | MEASURED_NOT_ON_PAGE
    stray = []
    for path, line, text in prose_figures():
        if (path, text) in known:
            continue
        number = re.match(r"[\d,.]+", text).group(0).rstrip(".")
        percent, thousands = "%" in text, bool(re.search(r"\dk", text))
        if not any(_shown_as(v, number, thousands, percent) for v in values):
            stray.append(f"{path}:{line}: {text}")
    assert not stray, (
        "figures in comments or docstrings that docs/results.md does not hold (move them to a "
        "benchmark, or allow them in tests/test_results_page.py with a reason):\n"
        + "\n".join(stray)
    )
    seen = {(path, text) for path, _, text in prose_figures()}
    stale = sorted(set(known) - seen)
    assert not stale, f"allowed figures no longer in the sources: {stale}"
