"""tandem bench: the figures format, the suite runner (ok, failed, skipped, timed out), its
summaries, and the scripts it lists."""

import json
import textwrap
from pathlib import Path

import pytest
from tandem.sim.runner import _parse_results_xml

from tandem.bench import BENCHMARKS, SKIP_EXIT, Benchmark, Figures, markdown_summary, run_suite
from tandem.cli import main
from tandem.registry import get_design

ROOT = Path(__file__).resolve().parent.parent


def test_figures_round_trip(tmp_path):
    figures = Figures("demo", config={"quick": True})
    figures.add("efficiency", 0.9995, reference=0.73, reference_label="HPU paper", design="hpu")
    figures.add("error", 0.02, "%", reference=1.0, reference_label="target", higher_is_better=False)
    figures.add("speed", 1200, "cycles/s", higher_is_better=None)
    figures.write(tmp_path / "f.json")
    back = Figures.read(tmp_path / "f.json")
    assert back == figures
    assert [f.meets_reference() for f in back.figures] == [True, True, None]


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
        Benchmark("good", "good.py", ("mac",), "a good one", quick_args=("--small",)),
        Benchmark("bad", "bad.py", ("mac",), "a failing one"),
        Benchmark("absent", "absent.py", (), "a skipped one"),
        Benchmark("slow", "slow.py", (), "a slow one"),
    )
    monkeypatch.setattr("tandem.bench.BENCHMARKS", suite)
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


def test_every_listed_script_exists_and_takes_figures():
    assert SKIP_EXIT not in (0, 1, 2)
    names = [b.name for b in BENCHMARKS]
    assert len(names) == len(set(names))
    for bench in BENCHMARKS:
        source = (ROOT / "benchmarks" / bench.script).read_text()
        assert "add_figures_option(parser)" in source, bench.script
        for design in bench.designs:
            get_design(design)  # a registered design


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
