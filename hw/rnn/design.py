"""The ``rnn`` design entry for the registry (``tandem generate|sim|synth rnn``).

``tandem/designs.py`` registers :data:`RNN_DESIGN`; importing this module registers it too, so
the cocotb testbench finds the design even in a process that imported nothing else.
"""

from tandem.host.rnn import RnnParams, rnn_golden

from tandem.registry import Design, register

from .engine import Rnn

__all__ = ["RNN_DESIGN"]

RNN_DESIGN = register(
    Design(
        name="rnn",
        summary="LSTM/GRU tile dispatcher (SHARP-style): W.x of the next step and U.h tiles "
        "overlap the wait for h on one MAC array",
        params=RnnParams,
        generator=Rnn,
        golden=rnn_golden,
        testbench="tandem.sim.rnn.rnn_tb",
    )
)
