"""Timing estimate: the longest register-to-register path of a mapped netlist, and an Fmax.

Method. yosys 0.70 has no usable timing for Xilinx cells: ``sta`` needs timing annotations
the ``synth_xilinx`` cell library does not carry, and ``ltp -noff`` counts cells between
yosys's own flip-flop types, so every mapped cell (an FDRE, a CARRY4, a DSP48E2 with its
internal registers) weighs the same and the FDREs are not even excluded. So tandem reads the
netlist ``synth_xilinx`` already wrote (``write_json`` at the end of the same yosys run) and
walks it in Python: a longest path, by the delays below, over the cell graph between
sequential endpoints. Endpoints: the flip-flops (FDRE/FDSE/FDCE/FDPE, latches), the clocked
side of SRLs and LUT RAMs (their address inputs stay combinational), block RAM and UltraRAM,
and each DSP48E2's internal registers where its parameters enable them (AREG/BREG/CREG/DREG,
MREG, PREG, the control-input registers). A DSP48E2 is split into its input, multiplier and
ALU stages, so a path can end at an enabled MREG or pass through an unregistered multiplier.
A carry cell's outputs depend only on its own lower bits and its carry-in, so a path through a
64-bit adder is as long as the bits it crosses. One clock; the design's input and output
ports are not endpoints (synthesis is out of context, the ports are unconstrained).

Delay model. Per-level figures for UltraScale+ at the -2 speed grade (:data:`ULTRASCALE_PLUS_2`),
the boards' grade (U280/U55C are -2L parts run at the -2 figures; the VCK190/VHK158 Versal
parts get the same UltraScale+ model, as the resource mapping does). The data sheet (AMD
DS923, "Virtex UltraScale+ FPGA Data Sheet: DC and AC Switching Characteristics") gives the
block figures (DSP48E2 and block RAM Fmax, clock-to-out and setup of the hard blocks); it does
not give routing, and routing is most of a fabric path. The CLB figures are the ones Vivado's
timing reports show for -2 parts; they and the net delay are stated from memory, not re-read.
Stated uncertainty: +-25 % on the path delay (placement, fan-out and congestion; SLR crossings
on the multi-die U280/U55C add about 1 ns and are not modelled), so
:attr:`TimingEstimate.fmax_range_mhz` spans 1/(1.25 d) to 1/(0.75 d).
"""

import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ULTRASCALE_PLUS_2", "DelayModel", "TimingEstimate", "estimate_timing", "speed_grade"]


@dataclass(frozen=True)
class DelayModel:
    """Delays in ns of one family and speed grade; see the module docstring for the sources."""

    name: str
    source: str
    uncertainty: float  # relative, on the path delay
    ff_clk_to_q: float  # FDRE C->Q (Tcko)
    ff_setup: float  # D/CE/R setup (Tdck and friends)
    lut: float  # any LUT input to O (Tilo)
    net: float  # one general-routing net, average (not in the data sheet; dominates)
    muxf: float  # MUXF7/MUXF8 I0/I1/S to O
    carry_entry: float  # CARRY8 S/DI to CO/O, entering the chain
    carry_per_8_bits: float  # CI to CO7 of each further CARRY8 (a CARRY4 counts half)
    lutram_clk_to_out: float  # SRL/LUT RAM write clock to output
    lutram_setup: float
    bram_clk_to_out: float  # RAMB36E2/RAMB18E2 DOUT, no output register
    bram_clk_to_out_reg: float  # with DOA_REG/DOB_REG
    bram_setup: float
    uram_clk_to_out: float  # URAM288 DOUT, no output register
    uram_clk_to_out_reg: float
    uram_setup: float
    dsp_in_setup: float  # DSP48E2 A/B/C/D and control pins to the enabled input register
    dsp_reg_to_out: float  # an internal DSP48E2 register's clock-to-out into the next stage
    dsp_stage_setup: float  # setup at MREG/PREG
    dsp_mult: float  # A/B (or the pre-adder) through the 27x18 multiplier
    dsp_alu: float  # M/C/PCIN through the ALU to P
    dsp_p_clk_to_out: float  # PREG to the P pins (Tdspcko_P)
    clock_uncertainty: float  # jitter and skew, one figure
    block_fmax_mhz: dict[str, float] = field(default_factory=dict)  # data-sheet Fmax of blocks

    def table(self) -> list[tuple[str, float]]:
        """The figures as (name, ns) rows, for documentation and reports."""
        skip = {"name", "source", "uncertainty", "block_fmax_mhz"}
        return [(k, v) for k, v in self.__dict__.items() if k not in skip]


#: UltraScale+ -2 speed grade. Hard-block figures: AMD DS923 (data sheet, memory): DSP48E2
#: Fmax 775 MHz fully pipelined, RAMB36E2 737 MHz, URAM288 650 MHz at -2 (VCCINT 0.85 V); the
#: DSP stage delays are chosen so that a fully pipelined DSP48E2 closes at that Fmax
#: (0.20 + 0.95 + 0.12 = 1.27 ns). CLB figures: typical of Vivado timing reports of -2
#: UltraScale+ parts (memory). Net: an average routed net, 0.35 ns (0.2-0.6 ns seen); a
#: dedicated connection (carry cascade, LUT into its slice's carry or MUXF, DSP cascade) 0.
ULTRASCALE_PLUS_2 = DelayModel(
    name="UltraScale+ -2",
    source=(
        "AMD DS923 -2 block figures (DSP48E2 775 MHz, RAMB36 737 MHz, URAM 650 MHz) and "
        "Vivado-report CLB/net delays, from memory; routing dominates"
    ),
    uncertainty=0.25,
    ff_clk_to_q=0.09,
    ff_setup=0.05,
    lut=0.10,
    net=0.35,
    muxf=0.10,
    carry_entry=0.25,
    carry_per_8_bits=0.05,
    lutram_clk_to_out=0.90,
    lutram_setup=0.30,
    bram_clk_to_out=0.90,
    bram_clk_to_out_reg=0.35,
    bram_setup=0.40,
    uram_clk_to_out=1.10,
    uram_clk_to_out_reg=0.40,
    uram_setup=0.50,
    dsp_in_setup=0.25,
    dsp_reg_to_out=0.20,
    dsp_stage_setup=0.12,
    dsp_mult=0.95,
    dsp_alu=0.70,
    dsp_p_clk_to_out=0.35,
    clock_uncertainty=0.10,
    block_fmax_mhz={"DSP48E2": 775.0, "RAMB36E2": 737.0, "RAMB18E2": 737.0, "URAM288": 650.0},
)


@dataclass
class TimingEstimate:
    """The longest register-to-register path and the Fmax it allows."""

    logic_levels: int  # LUTs and MUXF7/8 on the path (Vivado counts carry cells too; not here)
    carry_length: int  # carry cells on the path (yosys 0.70 maps CARRY4 on xcup too)
    dsp_on_path: int  # DSP48E2s the path starts in, passes through or ends in
    path_ns: float | None
    fmax_mhz: float | None
    fmax_range_mhz: list[float] | None
    limit: str  # "path", a block's data-sheet Fmax, or "no register-to-register path"
    start: str
    end: str
    path: list[str]  # cell types from start to end
    model: str
    notes: list[str] = field(default_factory=list)
    #: The design's names of the registers the path starts and ends at (the nets their
    #: outputs drive, as the generated Verilog names them; "" where synthesis kept none).
    start_signal: str = ""
    end_signal: str = ""
    #: The slowest paths by the register they end at, one row per register (bits of one
    #: signal together), slowest first: ``{"signal", "path_ns", "fmax_mhz"}``; where to cut
    #: next when pipelining.
    worst_endpoints: list[dict[str, Any]] = field(default_factory=list)


#: Rows of :attr:`TimingEstimate.worst_endpoints`.
WORST_ENDPOINTS = 8

_FF = {"FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"}
_LUTS = {f"LUT{n}" for n in range(1, 7)} | {"INV"}  # an INV is a LUT1 to Vivado
_MUXF = {"MUXF7", "MUXF8", "MUXF9"}
_CARRY = {"CARRY4": 4, "CARRY8": 8}
_SRL = {"SRL16E", "SRLC16E", "SRLC32E", "SRL16", "SRLC16"}
_BRAM = {"RAMB36E2", "RAMB18E2", "RAMB36E1", "RAMB18E1"}
_URAM = {"URAM288", "URAM288_BASE"}
_DSP = {"DSP48E2"}
_CLOCKS = {"C", "CLK", "WCLK", "G", "CLKARDCLK", "CLKBWRCLK", "CLKA", "CLKB"}
# LUT RAM / SRL inputs that select the output combinationally (read address).
_ASYNC_ADDR = re.compile(r"^(A\d?|ADDR[A-H]|DPRA\d?)$")
_DSP_MULT_PINS = {"A": "AREG", "B": "BREG", "D": "DREG", "ACIN": "AREG", "BCIN": "BREG"}
_DSP_ALU_PINS = {
    "C": "CREG",
    "OPMODE": "OPMODEREG",
    "ALUMODE": "ALUMODEREG",
    "CARRYIN": "CARRYINREG",
    "CARRYINSEL": "CARRYINSELREG",
    "PCIN": None,
    "CARRYCASCIN": None,
    "MULTSIGNIN": None,
}
_DSP_DEDICATED = {"ACIN", "BCIN", "PCIN", "CARRYCASCIN", "MULTSIGNIN"}


def speed_grade(part: str) -> str | None:
    """The speed grade in a Xilinx part name: ``xcu55c-fsvh2892-2L-e`` -> ``-2``."""
    found = re.search(r"-(\d)[A-Z]*(?:-|$)", part.split("-", 1)[1] if "-" in part else "")
    return f"-{found.group(1)}" if found else None


def _param(cell: dict[str, Any], name: str, default: int = 0) -> int:
    value = cell.get("parameters", {}).get(name)
    if value is None:
        return default
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text, 2) if text and set(text) <= {"0", "1"} else default


def _top_module(netlist: dict[str, Any]) -> dict[str, Any]:
    modules = netlist["modules"]
    for module in modules.values():
        top = module.get("attributes", {}).get("top")
        if top not in (None, 0, "0") and int(str(top), 2 if set(str(top)) <= {"0", "1"} else 10):
            return module
    (module,) = [m for m in modules.values() if "blackbox" not in m.get("attributes", {})]
    return module


class _Graph:
    """Timing nodes (net bits, or tuples for endpoints and DSP stages) and weighted arcs."""

    def __init__(self) -> None:
        self.arcs: dict[Any, list[tuple[Any, float, int]]] = defaultdict(list)
        self.launch: dict[Any, tuple[float, int]] = {}
        self.captures: list[Any] = []

    def arc(self, src: Any, dst: Any, delay: float, cell: int) -> None:
        if isinstance(src, str):  # "0", "1", "x", "z": constants start no path
            return
        self.arcs[src].append((dst, delay, cell))

    def start(self, node: Any, delay: float, cell: int) -> None:
        if isinstance(node, str):
            return
        if node not in self.launch or self.launch[node][0] < delay:
            self.launch[node] = (delay, cell)


def estimate_timing(
    netlist: dict[str, Any], model: DelayModel = ULTRASCALE_PLUS_2, model_note: str = ""
) -> TimingEstimate:
    """The longest register-to-register path of a yosys ``write_json`` netlist (flattened).

    Parameters
    ----------
    netlist
        yosys JSON; the module marked ``top`` (else the only non-blackbox one) is walked.
    model
        The delays.
    model_note
        Appended to the model's name in :attr:`TimingEstimate.model` (for example that a
        Versal board uses the UltraScale+ figures).
    """
    module = _top_module(netlist)
    cells = list(module.get("cells", {}).items())
    driver_type: dict[int, str] = {}
    for _, cell in cells:
        dirs = cell.get("port_directions", {})
        for port, bits in cell.get("connections", {}).items():
            if dirs.get(port) == "output":
                for bit in bits:
                    if isinstance(bit, int):
                        driver_type[bit] = cell["type"]
    m = model
    g = _Graph()
    unknown: set[str] = set()
    captures_seen: set[Any] = set()

    def capture(src: Any, delay: float, index: int, pin: str) -> None:
        node = ("capture", index, pin)
        g.arc(src, node, delay, index)
        if node not in captures_seen:
            captures_seen.add(node)
            g.captures.append(node)

    def net(bit: Any, pin: str, kind: str) -> float:
        """Routing delay into ``pin`` of a ``kind`` cell from the driver of ``bit``."""
        src = driver_type.get(bit) if isinstance(bit, int) else None
        if kind in _CARRY and (
            (pin in ("CI", "CI_TOP") and src in _CARRY) or (pin in ("S", "DI") and src in _LUTS)
        ):
            return 0.0
        if kind in _MUXF and pin in ("I0", "I1") and src in _LUTS | _MUXF:
            return 0.0
        if kind in _DSP and pin in _DSP_DEDICATED:
            return 0.0
        return m.net

    for index, (_, cell) in enumerate(cells):
        kind = cell["type"]
        conns = cell.get("connections", {})
        dirs = cell.get("port_directions", {})
        ins = {p: b for p, b in conns.items() if dirs.get(p) == "input" and p not in _CLOCKS}
        outs = {p: b for p, b in conns.items() if dirs.get(p) == "output"}
        if kind in _LUTS or kind in _MUXF:
            delay = m.lut if kind in _LUTS else m.muxf
            for pin, bits in ins.items():
                for b in bits:
                    for o in outs.get("O", []):
                        g.arc(b, o, net(b, pin, kind) + delay, index)
        elif kind in _CARRY:
            # O[i] and CO[i] depend on S/DI[0..i] and the carry-in.
            width = _CARRY[kind]
            per_cell = m.carry_per_8_bits * width / 8
            outputs = list(zip(outs.get("O", []), outs.get("CO", []), strict=False))
            for pin in ("CI", "CI_TOP", "CYINIT"):
                for b in ins.get(pin, []):
                    for o, co in outputs:
                        for y in (o, co):
                            g.arc(b, y, net(b, pin, kind) + per_cell, index)
            for pin in ("S", "DI"):
                for i, b in enumerate(ins.get(pin, [])):
                    for o, co in outputs[i:]:
                        for y in (o, co):
                            g.arc(b, y, net(b, pin, kind) + m.carry_entry, index)
        elif kind in _FF:
            for pin, bits in ins.items():
                for b in bits:
                    capture(b, m.net + m.ff_setup, index, pin)
            for b in outs.get("Q", []):
                g.start(b, m.ff_clk_to_q, index)
        elif kind in _SRL or (kind.startswith("RAM") and kind not in _BRAM):
            # SRLs and LUT RAMs: written on the clock, read through their address like a LUT.
            for pin, bits in ins.items():
                for b in bits:
                    if _ASYNC_ADDR.match(pin):
                        for y in (y for ys in outs.values() for y in ys):
                            g.arc(b, y, m.net + m.lut, index)
                    else:
                        capture(b, m.net + m.lutram_setup, index, pin)
            for bits in outs.values():
                for b in bits:
                    g.start(b, m.lutram_clk_to_out, index)
        elif kind in _BRAM or kind in _URAM:
            bram = kind in _BRAM
            setup = m.bram_setup if bram else m.uram_setup
            for pin, bits in ins.items():
                dedicated = pin.startswith("CAS")
                for b in bits:
                    capture(b, (0.0 if dedicated else m.net) + setup, index, pin)
            for port, bits in outs.items():
                side = "B" if "B" in port.replace("CLKB", "") and bram else "A"
                if bram:
                    reg = _param(cell, f"DO{side}_REG")
                    tco = m.bram_clk_to_out_reg if reg else m.bram_clk_to_out
                else:
                    reg = _param(cell, f"OREG_{side}") or str(
                        cell.get("parameters", {}).get(f"OREG_{side}", "")
                    ).upper() in ("TRUE",)
                    tco = m.uram_clk_to_out_reg if reg else m.uram_clk_to_out
                for b in bits:
                    g.start(b, tco, index)
        elif kind in _DSP:
            _dsp(g, cell, index, ins, outs, m, net, capture)
        elif kind in ("VCC", "GND") or kind.startswith("$scopeinfo"):
            pass
        else:
            unknown.add(kind)
            for bits in ins.values():
                for b in bits:
                    for y in (y for ys in outs.values() for y in ys):
                        g.arc(b, y, m.net + m.lut, index)
    return _longest(g, cells, m, model_note, unknown, _register_names(module))


def _dsp(g: _Graph, cell, index, ins, outs, m: DelayModel, net, capture) -> None:
    """A DSP48E2 as stages: input registers -> multiplier -> MREG -> ALU -> PREG -> P."""
    mult_node, alu_node = ("dsp-m", index), ("dsp-alu", index)
    multiplies = str(cell.get("parameters", {}).get("USE_MULT", "MULTIPLY")).upper() != "NONE"
    after_inputs = mult_node if multiplies else alu_node
    first_delay = m.dsp_mult if multiplies else 0.0
    for pin, bits in ins.items():
        if pin in _DSP_MULT_PINS or pin == "INMODE":
            reg = _param(cell, _DSP_MULT_PINS.get(pin, "INMODEREG"))
            if pin == "D":
                reg = reg or _param(cell, "ADREG")
            for b in bits:
                if reg:
                    capture(b, net(b, pin, "DSP48E2") + m.dsp_in_setup, index, pin)
                else:
                    g.arc(b, after_inputs, net(b, pin, "DSP48E2") + first_delay, index)
            if reg and bits:
                g.start(after_inputs, m.dsp_reg_to_out + first_delay, index)
        elif pin in _DSP_ALU_PINS:
            reg_name = _DSP_ALU_PINS[pin]
            reg = _param(cell, reg_name) if reg_name else 0
            for b in bits:
                if reg:
                    capture(b, net(b, pin, "DSP48E2") + m.dsp_in_setup, index, pin)
                else:
                    g.arc(b, alu_node, net(b, pin, "DSP48E2"), index)
            if reg and bits:
                g.start(alu_node, m.dsp_reg_to_out, index)
        else:  # clock enables and resets of the internal registers
            for b in bits:
                capture(b, net(b, pin, "DSP48E2") + m.dsp_in_setup, index, pin)
    if multiplies:
        if _param(cell, "MREG"):
            capture(mult_node, m.dsp_stage_setup, index, "MREG")
            g.start(alu_node, m.dsp_reg_to_out, index)
        else:
            g.arc(mult_node, alu_node, 0.0, index)
    preg = _param(cell, "PREG", 1)
    for port, bits in outs.items():
        for b in bits:
            if preg or port in ("ACOUT", "BCOUT"):
                g.start(b, m.dsp_p_clk_to_out, index)
            else:
                g.arc(alu_node, b, m.dsp_alu, index)
    if preg:
        capture(alu_node, m.dsp_alu + m.dsp_stage_setup, index, "PREG")


def _longest(
    g: _Graph, cells, m: DelayModel, model_note: str, unknown, names: dict[int, str]
) -> TimingEstimate:
    indegree: dict[Any, int] = defaultdict(int)
    nodes = set(g.arcs) | set(g.launch)
    for arcs in g.arcs.values():
        for dst, _, _ in arcs:
            indegree[dst] += 1
            nodes.add(dst)
    arrival: dict[Any, float] = {}
    pred: dict[Any, tuple[Any, int]] = {}
    for node, (delay, cell) in g.launch.items():
        arrival[node], pred[node] = delay, (None, cell)
    queue = deque(n for n in nodes if indegree[n] == 0)
    done = 0
    while queue:
        node = queue.popleft()
        done += 1
        here = arrival.get(node)
        for dst, delay, cell in g.arcs.get(node, ()):
            if here is not None and (dst not in arrival or arrival[dst] < here + delay):
                arrival[dst], pred[dst] = here + delay, (node, cell)
            indegree[dst] -= 1
            if indegree[dst] == 0:
                queue.append(dst)
    notes = []
    if done < len(nodes):
        notes.append(f"{len(nodes) - done} nodes on combinational loops were not timed")
    if unknown:
        notes.append("cells timed as one LUT level: " + ", ".join(sorted(unknown)))
    name = m.name + (f" ({model_note})" if model_note else "")
    model = f"{name}; {m.source}; +-{m.uncertainty:.0%} on the path delay"
    reached = [c for c in g.captures if c in arrival]
    if not reached:
        return TimingEstimate(
            0, 0, 0, None, None, None, "no register-to-register path", "", "", [], model, notes
        )
    end = max(reached, key=lambda c: arrival[c])
    path_cells: list[int] = []
    node: Any = end
    while node is not None:
        prev, cell = pred[node]
        if not path_cells or path_cells[-1] != cell:
            path_cells.append(cell)
        node = prev
    path_cells.reverse()
    types = [cells[i][1]["type"] for i in path_cells]
    # The start and end cells are registers; a DSP48E2 at either end is counted, a FF is not.
    inner = types[1:-1] if len(types) > 1 else []
    levels = sum(1 for t in inner if t in _LUTS or t in _MUXF)
    carry = sum(1 for t in inner if t in _CARRY)
    dsps = len({i for i in path_cells if cells[i][1]["type"] in _DSP})
    path_ns = arrival[end] + m.clock_uncertainty
    fmax = 1000.0 / path_ns
    limit = "path"
    used_blocks = {cell["type"] for _, cell in cells} & set(m.block_fmax_mhz)
    for block in sorted(used_blocks):
        if m.block_fmax_mhz[block] < fmax:
            fmax, limit = m.block_fmax_mhz[block], f"{block} data-sheet Fmax"
    low = 1000.0 / (path_ns * (1 + m.uncertainty))
    high = min(1000.0 / (path_ns * (1 - m.uncertainty)), fmax if limit != "path" else 1e9)
    worst: dict[str, float] = {}
    for node in sorted(reached, key=lambda c: -arrival[c]):
        signal = re.sub(r"\[\d+\]$", "", _signal_of(cells[node[1]][1], names)) or "?"
        if signal not in worst:
            worst[signal] = arrival[node] + m.clock_uncertainty
            if len(worst) == WORST_ENDPOINTS:
                break
    return TimingEstimate(
        worst_endpoints=[
            {"signal": sig, "path_ns": round(ns, 3), "fmax_mhz": round(1000.0 / ns, 1)}
            for sig, ns in worst.items()
        ],
        logic_levels=levels,
        carry_length=carry,
        dsp_on_path=dsps,
        path_ns=round(path_ns, 3),
        fmax_mhz=round(fmax, 1),
        fmax_range_mhz=[round(min(low, fmax), 1), round(high, 1)],
        limit=limit,
        start=f"{types[0]} {cells[path_cells[0]][0]}",
        end=f"{types[-1]} {cells[path_cells[-1]][0]}",
        path=types,
        model=model,
        notes=notes,
        start_signal=_signal_of(cells[path_cells[0]][1], names),
        end_signal=_signal_of(cells[path_cells[-1]][1], names),
    )


def _register_names(module: dict[str, Any]) -> dict[int, str]:
    """Net bit -> the design's name for it (``name[i]`` for a bit of a wider net), from
    ``netnames``: names synthesis or the generator made up (``$...``, ``\\$...``) and hidden
    ones left out."""
    names: dict[int, str] = {}
    for name, net in module.get("netnames", {}).items():
        # yosys's own ($...) and the generator's anonymous ones (Amaranth's $N, escaped)
        if name.lstrip("\\").startswith("$") or net.get("hide_name"):
            continue
        bits = net.get("bits", [])
        for i, bit in enumerate(bits):
            if isinstance(bit, int) and bit not in names:
                names[bit] = name if len(bits) == 1 else f"{name}[{i}]"
    return names


def _signal_of(cell: dict[str, Any], names: dict[int, str]) -> str:
    """The name of what a register cell drives: a flip-flop's Q, a DSP48E2's P, else its first
    named output bit."""
    dirs, connections = cell.get("port_directions", {}), cell.get("connections", {})
    ports = [p for p in ("Q", "P") if p in connections] + [
        p for p, d in dirs.items() if d == "output" and p not in ("Q", "P")
    ]
    for port in ports:
        for bit in connections.get(port, []):
            if isinstance(bit, int) and bit in names:
                return names[bit]
    return ""
