"""A design whose golden model is off by one LSB at one input: the harness must report it."""

import numpy as np
from tandem.host.common.exp2 import Exp2Params, exp2_golden
from tandem.hw.common.exp2 import Exp2
from tandem.sim.common.exp2_tb import corner_cases_at_line_rate  # noqa: F401

from tandem.registry import Design, register


def _wrong_golden(params, x):
    out = exp2_golden(params, x)
    return np.where(np.asarray(x) == -1, out + 1, out)


BROKEN = register(
    Design(
        name="exp2-broken-golden",
        summary="test only",
        params=Exp2Params,
        generator=Exp2,
        golden=_wrong_golden,
        testbench="tests.broken_exp2_tb",
    )
)
