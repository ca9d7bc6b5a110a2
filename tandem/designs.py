"""Registrations of the designs that ship with tandem: one entry per design."""

from tandem.host.exp2 import Exp2Params, exp2_golden
from tandem.host.reciprocal import ReciprocalParams, reciprocal_golden
from tandem.hw.common.exp2 import Exp2
from tandem.hw.common.reciprocal import Reciprocal

from .registry import Design, register

register(
    Design(
        name="exp2",
        summary="2**x for x <= 0 in fixed point (softmax core): table + linear interpolation",
        params=Exp2Params,
        generator=Exp2,
        golden=exp2_golden,
        testbench="tandem.sim.common.exp2_tb",
    )
)

register(
    Design(
        name="reciprocal",
        summary="1/x for positive fixed-point x: seed table + Newton-Raphson, saturating",
        params=ReciprocalParams,
        generator=Reciprocal,
        golden=reciprocal_golden,
        testbench="tandem.sim.common.reciprocal_tb",
    )
)
