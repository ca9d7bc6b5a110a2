"""The timing walk: the cell graph of a mapped netlist (Xilinx or ECP5 cells, with their delay
arcs) and its longest register-to-register path (:func:`estimate_timing`)."""

import re
from collections import defaultdict, deque
from typing import Any

from .models import (
    CALIBRATION_FILE,
    ULTRASCALE_PLUS_2,
    AnyModel,
    DelayModel,
    Ecp5DelayModel,
    TimingEstimate,
    measured_error,
)

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

# ECP5 (yosys synth_ecp5) cells.
_E_LUT = "LUT4"
_E_MUX = {"PFUMX", "L6MUX21"}
_E_COMB = {_E_LUT, "CCU2C"} | _E_MUX  # what drives a slice's own DI
_E_CLOCKS = {"CLK", "WCK", "CLKA", "CLKB", "CLK0", "CLK1", "CLK2", "CLK3"}
_E_UNTIMED = {"ALU54B"}
_E_BLOCKS = {"MULT18X18D", "DP16KD"}  # nextpnr-ecp5 times none of its ports either

#: Per family: cells counted as logic levels, carry cells, DSP cells, clock pins.
_FAMILY = {
    "xilinx": (_LUTS | _MUXF, set(_CARRY), _DSP, _CLOCKS),
    "ecp5": (_E_MUX | {_E_LUT}, {"CCU2C"}, {"MULT18X18D"}, _E_CLOCKS),
}


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


def _text_param(cell: dict[str, Any], name: str, default: str) -> str:
    return str(cell.get("parameters", {}).get(name, default)).strip().upper()


def _top_module(netlist: dict[str, Any]) -> dict[str, Any]:
    modules = netlist["modules"]
    for module in modules.values():
        top = module.get("attributes", {}).get("top")
        if top not in (None, 0, "0") and int(str(top), 2 if set(str(top)) <= {"0", "1"} else 10):
            return module
    (module,) = [m for m in modules.values() if "blackbox" not in m.get("attributes", {})]
    return module


class _Graph:
    """Timing nodes (net bits, or tuples for endpoints and DSP stages) and weighted arcs.

    Each arc keeps the part of its delay that is a routed net (``wire``), so the path's
    routing and the fan-outs of its nets can be read back.
    """

    def __init__(self, fanout: dict[int, int]) -> None:
        self.arcs: dict[Any, list[tuple[Any, float, int, float, bool]]] = defaultdict(list)
        self.launch: dict[Any, tuple[float, int]] = {}
        self.captures: list[Any] = []
        self.fanout = fanout

    def arc(
        self, src: Any, dst: Any, delay: float, cell: int, wire: float = 0.0, block: bool = False
    ) -> None:
        if isinstance(src, str):  # "0", "1", "x", "z": constants start no path
            return
        self.arcs[src].append((dst, delay + wire, cell, wire, block))

    def start(self, node: Any, delay: float, cell: int) -> None:
        if isinstance(node, str):
            return
        if node not in self.launch or self.launch[node][0] < delay:
            self.launch[node] = (delay, cell)


def estimate_timing(
    netlist: dict[str, Any], model: AnyModel = ULTRASCALE_PLUS_2, model_note: str = ""
) -> TimingEstimate:
    """The longest register-to-register path of a yosys ``write_json`` netlist (flattened).

    Parameters
    ----------
    netlist
        yosys JSON; the module marked ``top`` (else the only non-blackbox one) is walked.
    model
        The delays: a :class:`DelayModel` reads a ``synth_xilinx`` netlist, an
        :class:`Ecp5DelayModel` a ``synth_ecp5`` one.
    model_note
        Appended to the model's name in :attr:`TimingEstimate.model` (for example that a
        Versal board uses the UltraScale+ figures).
    """
    family = "ecp5" if isinstance(model, Ecp5DelayModel) else "xilinx"
    clocks = _FAMILY[family][3]
    module = _top_module(netlist)
    cells = list(module.get("cells", {}).items())
    driver_type: dict[int, str] = {}
    fanout: dict[int, int] = defaultdict(int)
    for _, cell in cells:
        dirs = cell.get("port_directions", {})
        for port, bits in cell.get("connections", {}).items():
            for bit in bits:
                if not isinstance(bit, int):
                    continue
                if dirs.get(port) == "output":
                    driver_type[bit] = cell["type"]
                elif port not in clocks:
                    fanout[bit] += 1
    g = _Graph(fanout)
    unknown: set[str] = set()
    captures_seen: set[Any] = set()

    def capture(
        src: Any, delay: float, index: int, pin: str, wire: float = 0.0, block: bool = False
    ) -> None:
        node = ("capture", index, pin)
        g.arc(src, node, delay, index, wire, block)
        if node not in captures_seen:
            captures_seen.add(node)
            g.captures.append(node)

    build = _ecp5_arcs if family == "ecp5" else _xilinx_arcs
    notes = build(g, cells, model, driver_type, capture, unknown)
    return _longest(g, cells, model, model_note, unknown, _register_names(module), family, notes)


def _xilinx_arcs(g: _Graph, cells, m: DelayModel, driver_type, capture, unknown) -> list[str]:
    """Arcs of a ``synth_xilinx`` netlist's cells."""

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
        return m.net_delay(g.fanout.get(bit, 1)) if isinstance(bit, int) else m.net

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
                        g.arc(b, o, delay, index, net(b, pin, kind))
        elif kind in _CARRY:
            # O[i] and CO[i] depend on S/DI[0..i] and the carry-in.
            width = _CARRY[kind]
            per_cell = m.carry_per_8_bits * width / 8
            outputs = list(zip(outs.get("O", []), outs.get("CO", []), strict=False))
            for pin in ("CI", "CI_TOP", "CYINIT"):
                for b in ins.get(pin, []):
                    for o, co in outputs:
                        for y in (o, co):
                            g.arc(b, y, per_cell, index, net(b, pin, kind))
            for pin in ("S", "DI"):
                for i, b in enumerate(ins.get(pin, [])):
                    for o, co in outputs[i:]:
                        for y in (o, co):
                            g.arc(b, y, m.carry_entry, index, net(b, pin, kind))
        elif kind in _FF:
            for pin, bits in ins.items():
                for b in bits:
                    capture(b, m.ff_setup, index, pin, net(b, pin, kind))
            for b in outs.get("Q", []):
                g.start(b, m.ff_clk_to_q, index)
        elif kind in _SRL or (kind.startswith("RAM") and kind not in _BRAM):
            # SRLs and LUT RAMs: written on the clock, read through their address like a LUT.
            for pin, bits in ins.items():
                for b in bits:
                    if _ASYNC_ADDR.match(pin):
                        for y in (y for ys in outs.values() for y in ys):
                            g.arc(b, y, m.lut, index, net(b, pin, kind))
                    else:
                        capture(b, m.lutram_setup, index, pin, net(b, pin, kind))
            for bits in outs.values():
                for b in bits:
                    g.start(b, m.lutram_clk_to_out, index)
        elif kind in _BRAM or kind in _URAM:
            bram = kind in _BRAM
            setup = m.bram_setup if bram else m.uram_setup
            for pin, bits in ins.items():
                dedicated = pin.startswith("CAS")
                for b in bits:
                    capture(b, setup, index, pin, 0.0 if dedicated else net(b, pin, kind))
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
            for pin, bits in ins.items():
                for b in bits:
                    for y in (y for ys in outs.values() for y in ys):
                        g.arc(b, y, m.lut, index, net(b, pin, kind))
    return []


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
                    capture(b, m.dsp_in_setup, index, pin, net(b, pin, "DSP48E2"))
                else:
                    g.arc(b, after_inputs, first_delay, index, net(b, pin, "DSP48E2"))
            if reg and bits:
                g.start(after_inputs, m.dsp_reg_to_out + first_delay, index)
        elif pin in _DSP_ALU_PINS:
            reg_name = _DSP_ALU_PINS[pin]
            reg = _param(cell, reg_name) if reg_name else 0
            for b in bits:
                if reg:
                    capture(b, m.dsp_in_setup, index, pin, net(b, pin, "DSP48E2"))
                else:
                    g.arc(b, alu_node, 0.0, index, net(b, pin, "DSP48E2"))
            if reg and bits:
                g.start(alu_node, m.dsp_reg_to_out, index)
        else:  # clock enables and resets of the internal registers
            for b in bits:
                capture(b, m.dsp_in_setup, index, pin, net(b, pin, "DSP48E2"))
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


def _ecp5_arcs(g: _Graph, cells, m: Ecp5DelayModel, driver_type, capture, unknown) -> list[str]:
    """Arcs of a ``synth_ecp5`` netlist's cells, as nextpnr-ecp5 times them.

    A LUT4 feeding a PFUMX, a PFUMX feeding an L6MUX21, a CCU2C's carry-out feeding the next
    one's carry-in and a LUT's output feeding its slice's flip-flop stay in the slice: no
    routed net. A MULT18X18D is timed by the register mode nextpnr picks for it (inputs
    registered only when both A and B are; ``ecp5/pack.cc``); its C, SOURCE and cascade pins,
    which nextpnr does not time, are left out. A TRELLIS_DPR16X4's write clock starts a path
    at its output (Trellis's WCK -> F), which nextpnr-ecp5 does not time.
    """
    notes: list[str] = []

    def net(bit: Any, kind: str, pin: str) -> float:
        """Routing delay into ``pin`` of a ``kind`` cell (with the hard-block term)."""
        if not isinstance(bit, int):
            return 0.0
        src = driver_type.get(bit)
        if (
            (kind == "PFUMX" and pin in ("ALUT", "BLUT") and src == _E_LUT)
            or (kind == "L6MUX21" and pin in ("D0", "D1") and src == "PFUMX")
            or (kind == "CCU2C" and pin == "CIN" and src == "CCU2C")
        ):
            return 0.0
        if kind == "TRELLIS_FF" and pin == "DI" and src in _E_COMB:
            return 0.0  # the slice's own F -> DI wire, in the setup (slice_internal)
        block = kind in _E_BLOCKS or src in _E_BLOCKS
        return m.net_delay(g.fanout.get(bit, 1)) + (m.net_block if block else 0.0)

    def arc(src, dst, delay, index, kind, pin) -> None:
        wire = net(src, kind, pin)
        block = isinstance(src, int) and (kind in _E_BLOCKS or driver_type.get(src) in _E_BLOCKS)
        g.arc(src, dst, delay, index, wire, block and wire > 0)

    def ends(src, delay, index, pin, kind) -> None:
        wire = net(src, kind, pin)
        block = isinstance(src, int) and (kind in _E_BLOCKS or driver_type.get(src) in _E_BLOCKS)
        capture(src, delay, index, pin, wire, block and wire > 0)

    def each(ins: dict[str, list], pins) -> list[tuple[str, Any]]:
        return [(p, b) for p in pins for b in ins.get(p, [])]

    untimed: set[str] = set()
    for index, (_, cell) in enumerate(cells):
        kind = cell["type"]
        conns = cell.get("connections", {})
        dirs = cell.get("port_directions", {})
        ins = {p: b for p, b in conns.items() if dirs.get(p) == "input" and p not in _E_CLOCKS}
        outs = {p: b for p, b in conns.items() if dirs.get(p) == "output"}
        out_bits = [y for ys in outs.values() for y in ys]

        def comb(pins, delay: float, targets=out_bits, _index=index, _ins=ins, _kind=kind):
            for pin, b in each(_ins, pins):
                for y in targets:
                    arc(b, y, delay, _index, _kind, pin)

        if kind == _E_LUT:
            comb(("A", "B", "C", "D"), m.lut)
        elif kind == "PFUMX":
            comb(("ALUT", "BLUT"), m.pfumx_data)
            comb(("C0",), m.pfumx_select)
        elif kind == "L6MUX21":
            comb(("D0", "D1"), m.l6mux_data)
            comb(("SD",), m.l6mux_select)
        elif kind == "CCU2C":
            s0, s1, cout = outs.get("S0", []), outs.get("S1", []), outs.get("COUT", [])
            bit0, bit1 = ("A0", "B0", "C0", "D0"), ("A1", "B1", "C1", "D1")
            comb(bit0, m.carry_lut, s0)
            comb(bit0, m.carry_lut_to_s1, s1)
            comb(bit1, m.carry_lut, s1)
            comb(bit0 + bit1, m.carry_lut_to_cout, cout)
            comb(("CIN",), m.carry_in_to_s0, s0)
            comb(("CIN",), m.carry_in_to_s1, s1)
            comb(("CIN",), m.carry_in_to_cout, cout)
        elif kind == "TRELLIS_FF":
            for pin, b in each(ins, ("DI", "M", "CE", "LSR")):
                setup = m.ff_lsr_setup if pin == "LSR" else m.ff_setup
                if pin == "DI" and isinstance(b, int) and driver_type.get(b) in _E_COMB:
                    setup += m.slice_internal
                ends(b, setup, index, pin, kind)
            for b in outs.get("Q", []):
                g.start(b, m.ff_clk_to_q, index)
        elif kind == "TRELLIS_DPR16X4":
            comb([p for p in ins if p.startswith("RAD")], m.lutram_read)
            for pin, bits in ins.items():
                if pin.startswith(("DI", "WAD", "WRE")):
                    setup = m.lutram_setup if pin == "WRE" else 0.0
                    for b in bits:
                        ends(b, setup, index, pin, kind)
            for b in out_bits:
                g.start(b, m.lutram_clk_to_out, index)
        elif kind == "MULT18X18D":
            _mult18(g, cell, index, ins, outs, m, arc, ends)
        elif kind == "DP16KD":
            for pin, bits in ins.items():
                if pin[:2] in ("AD", "DI", "CE", "OC", "WE", "CS", "RS"):
                    setup = m.ebr_rst_setup if pin.startswith("RST") else m.ebr_setup
                    for b in bits:
                        ends(b, setup, index, pin, kind)
            for port, bits in outs.items():
                side = "B" if port.startswith("DOB") else "A"
                reg = _text_param(cell, f"REGMODE_{side}", "NOREG") == "OUTREG"
                for b in bits:
                    g.start(b, m.ebr_clk_to_out_reg if reg else m.ebr_clk_to_out, index)
        elif kind in _E_UNTIMED:
            untimed.add(kind)
        elif kind in ("VCC", "GND", "$buf") or kind.startswith("$scopeinfo"):
            if kind == "$buf":
                comb(("A",), 0.0)
        else:
            unknown.add(kind)
            comb(list(ins), m.lut)
    if untimed:
        notes.append("not timed (nextpnr-ecp5 does not time them either): " + ", ".join(untimed))
    return notes


def _mult18(g: _Graph, cell, index, ins, outs, m: Ecp5DelayModel, arc, ends) -> None:
    """A MULT18X18D in the register mode nextpnr-ecp5 times it by (NONE, INPUT, OUTPUT, ALL)."""
    clocked = {
        reg: _text_param(cell, f"REG_{reg}_CLK", "NONE") != "NONE"
        for reg in ("INPUTA", "INPUTB", "OUTPUT")
    }
    inputs_registered = clocked["INPUTA"] and clocked["INPUTB"]
    output_registered = clocked["OUTPUT"]
    products = [b for port, bits in outs.items() if re.fullmatch(r"P\d+", port) for b in bits]
    data = [p for p in ins if re.fullmatch(r"[AB]\d+", p) or p.startswith("SIGNED")]
    control = [p for p in ins if re.fullmatch(r"(CE|RST)\d", p)]
    middle = ("mult", index)
    if inputs_registered:
        for pin in data:
            for b in ins[pin]:
                ends(b, m.mult_in_setup, index, pin, "MULT18X18D")
        g.start(middle, m.mult_out_clk_to_out if output_registered else m.mult_in_clk_to_out, index)
    elif output_registered:
        for pin in data:
            for b in ins[pin]:
                ends(b, m.mult_out_setup, index, pin, "MULT18X18D")
        g.start(middle, m.mult_out_clk_to_out, index)
    else:
        for pin in data:
            for b in ins[pin]:
                arc(b, middle, m.mult_comb, index, "MULT18X18D", pin)
    if inputs_registered or output_registered:
        for pin in control:
            for b in ins[pin]:
                ends(b, m.mult_ce_setup, index, pin, "MULT18X18D")
    for b in products:
        g.arc(middle, b, 0.0, index)


def _longest(
    g: _Graph,
    cells,
    m: AnyModel,
    model_note: str,
    unknown,
    names: dict[int, str],
    family: str,
    notes: list[str],
) -> TimingEstimate:
    level_cells, carry_cells, dsp_cells, _ = _FAMILY[family]
    indegree: dict[Any, int] = defaultdict(int)
    nodes = set(g.arcs) | set(g.launch)
    for arcs in g.arcs.values():
        for dst, *_ in arcs:
            indegree[dst] += 1
            nodes.add(dst)
    arrival: dict[Any, float] = {}
    pred: dict[Any, tuple[Any, int, float, bool]] = {}
    for node, (delay, cell) in g.launch.items():
        arrival[node], pred[node] = delay, (None, cell, 0.0, False)
    queue = deque(n for n in nodes if indegree[n] == 0)
    done = 0
    while queue:
        node = queue.popleft()
        done += 1
        here = arrival.get(node)
        for dst, delay, cell, wire, block in g.arcs.get(node, ()):
            if here is not None and (dst not in arrival or arrival[dst] < here + delay):
                arrival[dst], pred[dst] = here + delay, (node, cell, wire, block)
            indegree[dst] -= 1
            if indegree[dst] == 0:
                queue.append(dst)
    notes = list(notes)
    if done < len(nodes):
        notes.append(f"{len(nodes) - done} nodes on combinational loops were not timed")
    if unknown:
        notes.append("cells timed as one LUT level: " + ", ".join(sorted(unknown)))
    name = m.name + (f" ({model_note})" if model_note else "")
    error = measured_error(m)
    model = f"{name}; {m.source}; " + _error_text(m, error)
    reached = [c for c in g.captures if c in arrival]
    if not reached:
        return TimingEstimate(
            0, 0, 0, None, None, None, "no register-to-register path", "", "", [], model, notes
        )
    end = max(reached, key=lambda c: arrival[c])
    path_cells: list[int] = []
    fanouts: list[int] = []
    net_ns, block_nets = 0.0, 0
    node: Any = end
    while node is not None:
        prev, cell, wire, block = pred[node]
        if wire > 0 and prev is not None:
            fanouts.append(g.fanout.get(prev, 1))
            net_ns += wire
            block_nets += block
        if not path_cells or path_cells[-1] != cell:
            path_cells.append(cell)
        node = prev
    path_cells.reverse()
    fanouts.reverse()
    types = [cells[i][1]["type"] for i in path_cells]
    # The start and end cells are registers; a DSP at either end is counted, a FF is not.
    inner = types[1:-1] if len(types) > 1 else []
    levels = sum(1 for t in inner if t in level_cells)
    carry = sum(1 for t in inner if t in carry_cells)
    dsps = len({i for i in path_cells if cells[i][1]["type"] in dsp_cells})
    path_ns = arrival[end] + m.clock_uncertainty
    fmax = 1000.0 / path_ns
    limit = "path"
    used_blocks = {cell["type"] for _, cell in cells} & set(m.block_fmax_mhz)
    for block in sorted(used_blocks):
        if m.block_fmax_mhz[block] < fmax:
            fmax, limit = m.block_fmax_mhz[block], f"{block} data-sheet Fmax"
    fmax_range = None
    if error is not None:
        # Fmax error e = estimate / reference - 1 within +-worst: the reference lies in
        # [estimate / (1 + worst), estimate / (1 - worst)].
        worst_error = min(error["worst_percent"] / 100, 0.95)
        low = fmax / (1 + worst_error)
        high = min(1000.0 / path_ns / (1 - worst_error), fmax if limit != "path" else 1e9)
        fmax_range = [round(low, 1), round(max(high, fmax), 1)]
    notes.insert(0, f"estimate: {levels} logic levels; " + _error_text(m, error))
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
        fmax_range_mhz=fmax_range,
        limit=limit,
        start=f"{types[0]} {cells[path_cells[0]][0]}",
        end=f"{types[-1]} {cells[path_cells[-1]][0]}",
        path=types,
        model=model,
        notes=notes,
        start_signal=_signal_of(cells[path_cells[0]][1], names),
        end_signal=_signal_of(cells[path_cells[-1]][1], names),
        path_fanouts=fanouts,
        path_block_nets=block_nets,
        net_ns=round(net_ns, 3),
    )


def _error_text(m: AnyModel, error: dict[str, Any] | None) -> str:
    """The measured band that applies to ``m``, as the report quotes it."""
    if error is None:
        return f"method error not measured (no constraints/measured/{CALIBRATION_FILE})"
    text = (
        f"method error measured against nextpnr on ECP5: median {error['median_percent']:.1f} %, "
        f"worst {error['worst_percent']:.1f} % ({error['points']} design points, "
        f"nextpnr-ecp5 {error['nextpnr']}, "
    )
    if m.calibration == "fitted":
        return text + f"fitted net delays, {error['validation']})"
    text += "net delays not fitted"
    if isinstance(m, DelayModel):
        text += "; it measures the method: the UltraScale+ delays, another family, are not fitted"
    return text + ")"


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
