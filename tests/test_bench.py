"""tandem bench: the figures format, the suite runner (ok, failed, skipped, timed out), its
summaries, and the scripts it lists."""

import json
import re
import subprocess
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from tandem.sim.runner import _parse_results_xml

from tandem.bench import (
    BENCHMARK_OUT,
    BENCHMARKS,
    MAX_CELL,
    SKIP_EXIT,
    Benchmark,
    Figure,
    Figures,
    Provenance,
    add_benchmark_options,
    add_figures_option,
    markdown_summary,
    results_page,
    run_suite,
    write_results,
)
from tandem.cli import main
from tandem.registry import get_design

ROOT = Path(__file__).resolve().parent.parent


def test_figures_round_trip(tmp_path):
    figures = Figures("demo", config={"quick": True})
    figures.add("efficiency", 0.9995, reference=0.73, reference_label="HPU paper", design="hpu")
    figures.add("error", 0.02, "%", reference=1.0, reference_label="target", higher_is_better=False)
    figures.add("speed", 1200, "cycles/s", higher_is_better=None)
    figures.add(
        "speed-up",
        2.2,
        "x",
        provenance=Provenance.MODELLED,
        assumptions=("GPU at its data sheet's peaks (constraints/gpus/l40s.yaml)",),
        command="python benchmarks/perf_paper.py",
    )
    figures.write(tmp_path / "f.json")
    back = Figures.read(tmp_path / "f.json")
    assert back == figures
    assert [f.meets_reference() for f in back.figures] == [True, True, None, None]
    assert back.figures[3].provenance == "modelled"
    assert back.figures[3].assumptions == [
        "GPU at its data sheet's peaks (constraints/gpus/l40s.yaml)"
    ]


def test_figures_without_provenance_still_read(tmp_path):
    """JSON written before figures carried their provenance reads, with the fields empty."""
    old = {"benchmark": "old", "figures": [{"name": "max error", "value": 0.9, "unit": "LSB"}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    (figure,) = Figures.read(tmp_path / "old.json").figures
    assert (figure.provenance, figure.assumptions, figure.command) == ("", [], "")


def test_provenance_is_a_fixed_vocabulary():
    figures = Figures("demo")
    with pytest.raises(ValueError, match="provenance must be one of"):
        figures.add("x", 1.0, provenance="measured: by eye")
    with pytest.raises(ValueError, match="names its assumptions"):
        figures.add("x", 1.0, provenance=Provenance.MODELLED)
    with pytest.raises(ValueError, match="only a modelled figure has assumptions"):
        figures.add("x", 1.0, provenance=Provenance.RTL, assumptions=["a latency of 2"])
    assert figures.figures == []
    for bench in BENCHMARKS:  # every script of the suite states how its figures are obtained
        assert bench.provenance in set(Provenance), bench.name


def _fake_suite(tmp_path, monkeypatch):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    scripts = {
        "good.py": """
            import sys
            from tandem.bench import Figures
            path = sys.argv[sys.argv.index("--figures") + 1]
            f = Figures("good", config={"args": sys.argv[1:-2]})
            f.add("utilization", 0.5, reference=0.9, reference_label="target")
            f.write(path)
        """,
        "bad.py": """
            raise SystemExit("bad: the design did not close timing")
        """,
        "absent.py": """
            import sys
            from tandem.bench import skip
            sys.exit(skip("the SmolLM2 GGUF file is not cached"))
        """,
        "slow.py": """
            import time
            time.sleep(30)
        """,
    }
    for name, body in scripts.items():
        (folder / name).write_text(textwrap.dedent(body))
    suite = (
        Benchmark(
            "good",
            "good.py",
            ("mac",),
            "a good one",
            quick_args=("--small",),
            provenance=Provenance.RTL,
        ),
        Benchmark("bad", "bad.py", ("mac",), "a failing one"),
        Benchmark("absent", "absent.py", (), "a skipped one"),
        Benchmark("slow", "slow.py", (), "a slow one"),
    )
    monkeypatch.setattr("tandem.bench.suite.BENCHMARKS", suite)
    return folder


def test_suite_reports_every_outcome_and_goes_on(tmp_path, monkeypatch):
    folder = _fake_suite(tmp_path, monkeypatch)
    out = tmp_path / "out"
    summary = run_suite(quick=True, out_dir=out, benchmarks_dir=folder, timeout_s=3)
    status = {e["name"]: e["status"] for e in summary["benchmarks"]}
    assert status == {"good": "ok", "bad": "failed", "absent": "skipped", "slow": "timeout"}
    entries = {e["name"]: e for e in summary["benchmarks"]}
    assert entries["good"]["config"] == {"args": ["--small"]}
    assert entries["good"]["figures"][0]["value"] == 0.5
    # The suite fills in what the script left to its Benchmark entry.
    assert entries["good"]["figures"][0]["provenance"] == "measured: RTL simulation"
    assert entries["good"]["figures"][0]["command"] == "python benchmarks/good.py --small"
    assert entries["bad"]["reason"] == "bad: the design did not close timing"
    assert entries["absent"]["reason"] == "skipped: the SmolLM2 GGUF file is not cached"
    assert json.loads((out / "bench.json").read_text()) == summary
    md = (out / "bench.md").read_text()
    assert md == markdown_summary(summary)
    assert "| utilization | 0.5 | ratio | 0.9 (target) **not met** |" in md
    assert (out / "logs" / "bad.log").exists()


def test_cli_bench_exit_status_and_selection(tmp_path, monkeypatch, capsys):
    folder = _fake_suite(tmp_path, monkeypatch)
    args = ["bench", "--benchmarks", str(folder), "-o", str(tmp_path / "o")]
    assert main([*args, "--only", "good", "absent"]) == 0
    assert main([*args, "--only", "good", "bad"]) == 1
    assert main([*args, "--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark 'nope'" in err


def test_cli_bench_progress_on_stderr_json_on_stdout(tmp_path, monkeypatch, capsys):
    """[done/total] per benchmark on stderr; --json prints what bench.json holds, into
    build/bench of the working folder without -o."""
    folder = _fake_suite(tmp_path, monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["bench", "--benchmarks", str(folder), "--only", "good", "absent"]) == 0
    captured = capsys.readouterr()
    done = [line for line in captured.err.splitlines() if "] " in line]
    assert [line.split()[2] for line in done] == ["[1/2]", "[2/2]"]
    assert "good" in done[0] and "absent" in done[1] and "skipped" in done[1]
    assert "wrote build/bench/bench.json" in captured.out
    assert "[1/2]" not in captured.out

    args = ["bench", "--benchmarks", str(folder), "--only", "good", "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data == json.loads((work / "build" / "bench" / "bench.json").read_text())
    assert data["benchmarks"][0]["figures"][0]["value"] == 0.5
    assert "[1/1]" in captured.err

    assert main(["bench", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [b["name"] for b in listed] == ["good", "bad", "absent", "slow"]
    assert listed[0]["quick_args"] == ["--small"]


def test_update_reruns_some_scripts_into_a_saved_run(tmp_path, monkeypatch, capsys):
    """--only NAME --update bench.json replaces those entries and keeps the others as they
    were (their start time and load); the page says which entries a later run replaced."""
    folder = _fake_suite(tmp_path, monkeypatch)
    out = tmp_path / "out"
    saved = out / "bench.json"
    common = ["bench", "--benchmarks", str(folder), "--quick"]
    assert main([*common, "--only", "good", "bad", "absent", "-o", str(out)]) == 1
    first = json.loads(saved.read_text())
    entry = first["benchmarks"][0]
    assert len(entry["load_start"]) == 3 and len(entry["load_end"]) == 3
    assert entry["cpus"] >= 1 and entry["started_utc"].endswith("Z")
    capsys.readouterr()

    # The failing script is fixed and re-run alone; bad.py now writes a figure.
    (folder / "bad.py").write_text((folder / "good.py").read_text())
    page = tmp_path / "results.md"
    update = [*common, "--only", "bad", "slow", "--update", str(saved), "--timeout", "2"]
    assert main([*update, "--results", str(page)]) == 1  # slow times out
    captured = capsys.readouterr()
    assert "good " not in captured.out and "bad " in captured.out and "slow " in captured.out
    merged = json.loads(saved.read_text())
    assert [e["name"] for e in merged["benchmarks"]] == ["good", "bad", "absent", "slow"]
    assert merged["benchmarks"][0] == first["benchmarks"][0]  # kept as it was
    assert merged["benchmarks"][2] == first["benchmarks"][2]
    assert [e["status"] for e in merged["benchmarks"]] == ["ok", "ok", "skipped", "timeout"]
    assert merged["started_utc"] == first["started_utc"]
    (rerun,) = merged["updates"]
    assert rerun["only"] == ["bad", "slow"] and len(rerun["load_start"]) == 3
    assert (out / "bench.md").read_text() == markdown_summary(merged)
    text = page.read_text()
    assert text == results_page(merged)
    assert "**Re-runs**: 1 later run(s)" in text
    assert "`tandem bench --quick --only bad slow --update bench.json`: started " in text
    assert "(the first run; see Re-runs)" in text
    scripts = [_cells(line) for line in text.split("## Scripts")[1].split("\n## ")[0].splitlines()]
    rows = {row[0]: row for row in scripts if len(row) == 8 and row[0] != "script"}
    assert rows["good"][3] == first["benchmarks"][0]["started_utc"]
    assert rows["bad"][3] == merged["benchmarks"][1]["started_utc"]
    assert re.fullmatch(r"\d+\.\d to \d+\.\d of \d+", rows["good"][5])

    # A second re-run is listed too; a good re-run exits 0 whatever the kept entries say.
    (folder / "slow.py").write_text((folder / "good.py").read_text())
    assert main([*common, "--only", "slow", "--update", str(saved)]) == 0
    assert len(json.loads(saved.read_text())["updates"]) == 2


def test_a_script_that_times_out_leaves_no_children(tmp_path, monkeypatch):
    folder = _fake_suite(tmp_path, monkeypatch)
    (folder / "slow.py").write_text(
        textwrap.dedent(
            """
            import subprocess, sys, time
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            open(sys.argv[0] + ".pid", "w").write(str(child.pid))
            time.sleep(60)
            """
        )
    )
    # 10 s: on a loaded machine the script needs seconds to start Python and spawn its child.
    summary = run_suite(quick=True, only=["slow"], out_dir=tmp_path, benchmarks_dir=folder,
                        timeout_s=10)  # fmt: skip
    assert summary["benchmarks"][0]["status"] == "timeout"
    pid = int((folder / "slow.py.pid").read_text())
    state = Path(f"/proc/{pid}/stat")

    def gone() -> bool:
        try:
            return state.read_text().split(")")[1].split()[0] == "Z"
        except OSError:  # reaped: no /proc entry
            return True

    # SIGKILL is delivered at once but the kernel tears the process down asynchronously.
    deadline = time.monotonic() + 5
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(), f"the script's child {pid} outlived the script"


def test_a_stopped_run_keeps_what_it_measured(tmp_path, monkeypatch):
    """bench.json is written after every script: stopped after the second, it holds the two
    and lists the rest as not run, and its page says so."""
    folder = _fake_suite(tmp_path, monkeypatch)

    def stop(entry):
        if entry["name"] == "bad":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(quick=True, out_dir=tmp_path, benchmarks_dir=folder, progress=stop)
    saved = json.loads((tmp_path / "bench.json").read_text())
    status = [(e["name"], e["status"]) for e in saved["benchmarks"]]
    assert status == [("good", "ok"), ("bad", "failed"), ("absent", "not run"), ("slow", "not run")]
    page = results_page(saved)
    assert "- absent (`benchmarks/absent.py`): not run: the run stopped before this script" in page
    assert "**Not run**: the run stopped before 2 of its 4 scripts: absent, slow;" in page


def test_update_refuses_bad_combinations(tmp_path, monkeypatch, capsys):
    folder = _fake_suite(tmp_path, monkeypatch)
    out = tmp_path / "out"
    common = ["bench", "--benchmarks", str(folder)]
    assert main([*common, "--quick", "--only", "good", "-o", str(out)]) == 0
    saved = str(out / "bench.json")
    before = (out / "bench.json").read_bytes()
    capsys.readouterr()
    refused = {
        "name them with --only": [*common, "--quick", "--update", saved],
        "drop --output": [*common, "--quick", "--only", "good", "--update", saved, "-o", "x"],
        "is a quick run": [*common, "--only", "good", "--update", saved],
        "--from-json runs nothing": ["bench", "--from-json", saved, "--update", saved,
                                     "--results", str(tmp_path / "r.md")],
        "cannot read": [*common, "--quick", "--only", "good", "--update",
                        str(tmp_path / "none" / "bench.json")],
        "name a bench.json": [*common, "--quick", "--only", "good", "--update",
                              str(tmp_path / "r.md")],
        "unknown benchmark 'nope'": [*common, "--quick", "--only", "nope", "--update", saved],
    }  # fmt: skip
    for message, args in refused.items():
        assert main(args) == 2, message
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert (out / "bench.json").read_bytes() == before


def test_every_listed_script_exists_and_takes_figures():
    assert SKIP_EXIT not in (0, 1, 2)
    names = [b.name for b in BENCHMARKS]
    assert len(names) == len(set(names))
    for bench in BENCHMARKS:
        source = (ROOT / "benchmarks" / bench.script).read_text()
        assert re.search(r"add_(benchmark_options|figures_option)\(\s*parser\b", source), (
            bench.script
        )
        for design in bench.designs:
            get_design(design)  # a registered design


def test_benchmark_options_one_spelling_each():
    import argparse

    parser = argparse.ArgumentParser()
    add_benchmark_options(parser, quick="small", seed=True, json="rows here", out=True)
    args = parser.parse_args([])
    assert (args.quick, args.seed, args.json, args.out, args.figures) == (
        False, 1, None, BENCHMARK_OUT, None
    )  # fmt: skip
    args = parser.parse_args(["--quick", "--seed", "7", "--json", "r.json", "--out", "o"])
    assert (args.quick, args.seed, args.json, args.out) == (True, 7, Path("r.json"), Path("o"))
    lines = argparse.ArgumentParser()
    add_benchmark_options(lines, json_lines="one line per size", out=None, figures=False)
    args = lines.parse_args(["--json"])
    assert args.json is True and args.out is None and not hasattr(args, "figures")
    assert "nextpnr seed" in _help_of(seed=True, helps={"seed": "nextpnr seed"})
    only_figures = argparse.ArgumentParser()
    add_figures_option(only_figures)
    assert vars(only_figures.parse_args(["--figures", "f.json"])) == {"figures": Path("f.json")}
    with pytest.raises(ValueError, match="either a file"):
        add_benchmark_options(argparse.ArgumentParser(), json="a", json_lines="b")


def _help_of(**options) -> str:
    import argparse

    parser = argparse.ArgumentParser()
    add_benchmark_options(parser, **options)
    return parser.format_help()


def test_real_scripts_through_the_suite(tmp_path):
    """Two real, fast scripts run through the suite: their figures arrive with the values
    docs/fixed_point.md and docs/rnn.md state (exhaustive over every input, so exact)."""
    summary = run_suite(
        quick=True,
        only=["fixed-point", "rnn-activation"],
        out_dir=tmp_path,
        benchmarks_dir=ROOT / "benchmarks",
        timeout_s=120,
    )
    assert [e["status"] for e in summary["benchmarks"]] == ["ok", "ok"]
    figures = {
        (f["design"], f["name"], f["note"].split(",")[0]): f["value"]
        for e in summary["benchmarks"]
        for f in e["figures"]
    }
    assert figures[("exp2", "max error", "all x <= 0")] == pytest.approx(0.939, abs=5e-4)
    rel = figures[("reciprocal", "max relative error", "1/x >= 2 and fits")]
    assert rel == pytest.approx(1.69e-05, rel=1e-2)
    assert figures[("rnn", "sigmoid max error", "512 segments")] == pytest.approx(1.38, abs=5e-3)
    assert figures[("rnn", "tanh max error", "512 segments")] == pytest.approx(2.11, abs=5e-3)


def test_results_xml_gives_simulated_time_and_wall_time(tmp_path):
    path = tmp_path / "results.xml"
    path.write_text(
        '<testsuites><testsuite><testcase name="t" time="1.5"><properties>'
        '<property name="sim_time_unit" value="ns" />'
        '<property name="sim_time_duration" value="2000.0" />'
        '</properties></testcase><testcase name="u" time="0.5"><properties>'
        '<property name="sim_time_unit" value="us" />'
        '<property name="sim_time_duration" value="3" />'
        "</properties></testcase></testsuite></testsuites>"
    )
    t, u = _parse_results_xml(path)
    assert (t.sim_time_ns, t.wall_s, t.passed) == (2000.0, 1.5, True)
    assert (u.sim_time_ns, u.wall_s) == (3000.0, 0.5)


LONG_ASSUMPTIONS = [
    f"assumption {i}: a figure the model takes from a file, named with its source "
    f"(constraints/example_{i}.yaml)"
    for i in range(4)
]


def _summary() -> dict:
    """A bench.json of five scripts: RTL and modelled figures of one design (one of them of
    a variant of it), a synthesis figure of another, whole-system figures with long
    assumptions, a skipped script, and one whose figures carry no provenance or one this
    version does not know."""

    def fig(name, value, unit="ratio", **details):
        return asdict(Figure(name=name, value=value, unit=unit, **details))

    def entry(name, designs, figures, status="ok", **extra):
        return {
            "name": name,
            "script": f"benchmarks/{name}.py",
            "designs": designs,
            "what": f"what {name} measures",
            "status": status,
            "seconds": 3.0,
            "command": f"python benchmarks/{name}.py --quick",
            "figures": figures,
            **extra,
        }

    rtl = {"provenance": Provenance.RTL}
    return {
        "quick": True,
        "only": ["eff", "perf", "res", "gguf", "old"],
        "started_utc": "2026-01-02T03:04:05Z",
        "seconds": 12.3,
        "commit": {"hash": "abc1234", "dirty": True},
        "machine": {
            "python": "3.11.7",
            "platform": "Linux-test",
            "cpus": 2,
            "load_start": [1.0, 0.5, 0.25],
            "load_end": [2.0, 1.0, 0.5],
        },
        "tools": {"python": "3.11.7", "amaranth": "0.5.10", "verilator": "missing"},
        "benchmarks": [
            entry(
                "eff",
                ["hpu"],
                [
                    fig("stream efficiency | 2K", 0.97, reference=0.73,
                        reference_label="HPU paper", design="hpu", note="verilator", **rtl),
                    fig("card share of HBM peak", 0.7, design="hpu", note="u55c",
                        provenance=Provenance.MODELLED, assumptions=["a port per channel"]),
                    fig("x" * 250, 1.0, design="hpu", **rtl),
                    fig("channels touched", 3, "channels", design="hpu (channels placement)",
                        provenance=Provenance.COUNTERS),
                ],
                provenance=Provenance.RTL,
            ),
            entry(
                "perf",
                ["hpu"],
                [
                    fig(f"speed-up, variant {i}", 2.0 + i, "x", design="hpu",
                        provenance=Provenance.MODELLED, assumptions=LONG_ASSUMPTIONS,
                        command="python benchmarks/perf.py")
                    for i in range(2)
                ],
                provenance=Provenance.MODELLED,
                system=True,
            ),
            entry("res", [], [fig("LUT", 1200, "cells", design="rnn",
                                  provenance=Provenance.SYNTHESIS)]),
            entry(
                "gguf",
                ["hpu"],
                [],
                status="skipped",
                reason="skipped: the SmolLM2 GGUF file is not cached",
            ),
            entry("old", ["rnn"], [
                {"name": "max error", "value": 0.9, "unit": "LSB"},
                {"name": "speed", "value": 2.0, "unit": "x", "reference": 1.0,
                 "provenance": "measured: by a later tool"},
            ]),
        ],
    }  # fmt: skip


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def _figure_rows(page: str) -> dict[str, list[list[str]]]:
    """The figure tables' rows, by section title."""
    tables: dict[str, list[list[str]]] = {}
    section = None
    for line in page.splitlines():
        if line.startswith("## "):
            section = line[3:]
        elif line.startswith("| ") and section != "Scripts" and not line.startswith("| figure"):
            tables.setdefault(section, []).append(_cells(line))
    return tables


def test_results_page_from_a_saved_run(tmp_path):
    summary = _summary()
    page = results_page(summary)
    header = page.split("## Scripts")[0]
    assert "`tandem bench --quick --only eff perf res gguf old --results FILE`" in header
    assert "`abc1234`, working tree with uncommitted changes" in header
    assert "started 2026-01-02T03:04:05Z" in header
    assert "2 cores" in header and "1.00 / 0.50 / 0.25 at the start" in header
    assert "2.00 / 1.00 / 0.50 at the end" in header
    assert "amaranth 0.5.10, verilator missing" in header

    titles = [line[3:] for line in page.splitlines() if line.startswith("## ")]
    assert titles == ["Scripts", "hpu", "rnn", "System (performance model, host runtime)"]
    rows = _figure_rows(page)
    hpu, rnn, system = (rows[t] for t in titles[1:])
    assert [r[0] for r in hpu][:2] == ["stream efficiency \\| 2K", "card share of HBM peak"]
    assert hpu[0][1:3] == ["0.97 ratio", "0.73 (HPU paper) met"]
    # Provenance and the reproducing command on every row ("not stated" for the old figure).
    how = {p.value for p in Provenance} | {"not stated", "measured: by a later tool"}
    for row in hpu + rnn + system:
        assert len(row) == 6, row
        assert row[4] in how or row[4].startswith("modelled"), row
        assert row[5].startswith("`python benchmarks/"), row
    assert hpu[0][4:] == ["measured: RTL simulation", "`python benchmarks/eff.py --quick`"]
    assert hpu[1][4] == "modelled: a port per channel"
    assert [r[4] for r in rnn] == [
        "measured: synthesis (yosys)",
        "not stated",
        "measured: by a later tool",
    ]
    assert rnn[1][5] == "`python benchmarks/old.py --quick`"
    assert rnn[2][1:3] == ["2 x", "1 (reference) met"]
    # A figure of a variant of a design goes in the design's table, named with its variant.
    assert hpu[3][:2] == ["hpu (channels placement): channels touched", "3 channels"]
    assert len(hpu) == 4
    assert [r[0] for r in system] == ["hpu: speed-up, variant 0", "hpu: speed-up, variant 1"]
    assert [r[5] for r in system] == ["`python benchmarks/perf.py`"] * 2
    # Long assumptions go to one numbered note under the system table, shared by its rows.
    assert [r[4] for r in system] == ["modelled; assumptions: note 1"] * 2
    notes = page.split("## System")[1].split("Notes:")[1]
    assert notes.strip().splitlines() == ["1. Assumptions:"] + [
        f"   - {a}" for a in LONG_ASSUMPTIONS
    ]
    # So does the start of a long name; no cell anywhere is longer than MAX_CELL.
    assert hpu[2][0].startswith("xxx") and hpu[2][0].endswith("... [note 1]")
    assert "1. " + "x" * 250 in page.split("## hpu")[1].split("## rnn")[0]
    for line in page.splitlines():
        if line.startswith("|"):
            assert max(len(c) for c in _cells(line)) <= MAX_CELL, line
    # The skipped script is listed, with its reason, in the scripts table and its design's.
    assert (
        "| gguf | hpu | skipped: the SmolLM2 GGUF file is not cached | not recorded | 3 | "
        "not recorded | 0 |"
    ) in page
    hpu_section = page.split("## hpu")[1].split("## rnn")[0]
    assert "Not measured in this run:" in hpu_section
    assert "- gguf (`benchmarks/gguf.py`): skipped: the SmolLM2 GGUF file is not cached" in (
        hpu_section
    )

    # The same bench.json gives the same bytes, written twice or through the command line.
    (tmp_path / "bench.json").write_text(json.dumps(summary, indent=2) + "\n")
    first = write_results(summary, tmp_path / "a.md").read_bytes()
    assert first == page.encode()
    args = ["bench", "--from-json", str(tmp_path / "bench.json"), "--results"]
    assert main([*args, str(tmp_path / "b.md")]) == 0
    assert main([*args, str(tmp_path / "c.md")]) == 0
    assert (tmp_path / "b.md").read_bytes() == first == (tmp_path / "c.md").read_bytes()


def test_results_from_json_refuses_what_it_cannot_do(tmp_path, capsys):
    (tmp_path / "bench.json").write_text(json.dumps(_summary()))
    (tmp_path / "other.json").write_text(json.dumps({"figures": []}))
    saved = ["bench", "--from-json", str(tmp_path / "bench.json")]
    assert main(saved) == 2  # nothing to write
    assert main([*saved, "--quick", "--results", str(tmp_path / "r.md")]) == 2
    assert main(["bench", "--from-json", str(tmp_path / "none.json"), "--results", "r.md"]) == 2
    assert main(["bench", "--from-json", str(tmp_path / "other.json"), "--results", "r.md"]) == 2
    err = capsys.readouterr().err
    assert "give --results FILE" in err and "is not a bench.json" in err
    assert not (tmp_path / "r.md").exists()


def test_results_page_of_a_real_quick_run(tmp_path, capsys):
    """Two real scripts (one golden model over every input, one performance model) through
    ``tandem bench --results``: their figures arrive with their provenance,
    the model's with the files its assumptions come from, and the page rewrites to the same
    bytes from the run's bench.json."""
    out, page_path = tmp_path / "out", tmp_path / "results.md"
    only = ["--only", "fixed-point", "perf-paper"]
    assert main(["bench", *only, "--quick", "-o", str(out), "--results", str(page_path)]) == 0
    assert f"wrote {page_path}" in capsys.readouterr().out
    page = page_path.read_text()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-5", "--format=%h"], capture_output=True, text=True
    )
    commit = re.search(r"\*\*Commit\*\*: `([0-9a-f]+)`", page)
    assert commit and (head.returncode or commit.group(1) in head.stdout.split())
    assert "**Tools**: python " in page and "numpy " in page
    rows = _figure_rows(page)
    exp2 = {(r[0], r[3].split(",")[0]): r for r in rows["exp2"]}
    row = exp2[("max error", "all x <= 0")]
    assert row[1] == "0.9391 LSB"
    assert row[4:] == [
        "measured: golden model on every input",
        "`python benchmarks/fixed_point_error.py`",
    ]
    assert len(rows["reciprocal"]) == 6
    system = rows["System (performance model, host runtime)"]
    assert len(system) >= 2
    for row in system:
        assert row[0].startswith("hpu: tokens/s"), row
        assert row[4].startswith("modelled; assumptions: note "), row
        assert row[5] == "`python benchmarks/perf_paper.py`", row
    assert system[0][2].startswith("4.1 (HPU paper)")
    notes = page.split("## System")[1]
    assert "constraints/gpus/l40s.yaml" in notes and "constraints/models/llama-2-7b.yaml" in notes
    assert (
        main(
            [
                "bench",
                "--from-json",
                str(out / "bench.json"),
                "--results",
                str(tmp_path / "again.md"),
            ]
        )
        == 0
    )
    assert (tmp_path / "again.md").read_bytes() == page_path.read_bytes()
