"""Cycle model of the ``hpu`` engine: the one model the golden backend and the performance
model read.

The engine overlaps requests (docs/hpu.md, "How a request flows"): the descriptor parser, the
two read ports and the result stream each work on their own request, so a batch is bound by
the busiest of the three per request, plus what its memory adds::

    cycles(batch) = FILL + sum over requests of (max(D, R, O * S) + GAP) + DRAIN + STALLS
    D = descriptor beats  = header_beats + (2 row_beats if append) + G * q_beats
    R = read beats / port = the beats of KvLayout.read_bursts (scale blocks + rows)
    O = result beats      = G * (row_beats + 1 if partial else row_beats)
    S = out_beat_cycles   (the output's cycles per result beat)
    DRAIN = the last request's O * S beyond max(D, R, O * S) (its results leave after its
            reads; co-simulation memory only, the measured one's FILL holds it)
    STALLS = sum R * (1 / e(sum R) - 1)

(:func:`request_beats`, :func:`request_cycles`, :func:`batch_cycles`). ``FILL``, ``GAP`` and
the stream efficiency ``e`` describe the memory behind the read ports (a :class:`Memory`);
there are two, with their provenance:

* :data:`COSIM_MEMORY`, the default (the golden backend, :func:`call_cycles`): the
  co-simulation's memory, which answers every beat after a fixed latency. ``FILL`` covers the
  memory latency of the first burst, the K and V pipelines and the output
  (:data:`FILL_CYCLES`); ``GAP`` the turn-around between two requests (:data:`GAP_CYCLES`);
  ``e = 1`` (the latency of later bursts is inside ``FILL``/``GAP``). Both are fitted to the
  RTL: ``python benchmarks/decode_cycles.py`` runs ten batches (1-8 requests, lengths 1-250,
  appends and partial requests) on both backends for two engines (the co-simulation tests'
  ``hd32-g2`` and the default one) and picks the integers that minimize the largest relative
  error over both (it prints that error for each engine). A fit to one engine alone fits it
  better and the other worse: what is left is structure the model does not have
  (a lone request overlaps its descriptor, reads and results less than ``max(D, R, O)``
  assumes; the turn-around depends on the pipeline depths). Fit them again whenever the
  engine's pipeline changes; the RTL co-simulation test checks
  the model stays within 15 %.
* :meth:`Memory.measured` (the performance model, :mod:`tandem.host.system.perf`): a memory
  with a read latency of ``L`` cycles, from the stream efficiency the RTL reached in
  simulation at that latency (``constraints/measured/hpu_stream_efficiency.yaml``, written by
  ``python benchmarks/hpu_stream_efficiency.py``). ``FILL`` = a lone request's cycles outside
  its read window (mean over the measured lengths), ``GAP = 0``, and ``e`` the measured
  efficiency of one request of ``sum R`` beats per port: a batch streams as one long request
  (``k`` queued requests of ``n`` tokens reach the efficiency of one of ``k * n`` tokens), so
  the latency stalls are those of the whole batch. At the co-simulation's latency (2 cycles)
  this memory predicts the golden backend's decode-step cycles within 10 %
  (``benchmarks/perf_crosscheck.py``).

The golden backend and the performance model share this one model, so a decode step's cycles
from :func:`call_cycles` and the performance model's per-call cycles are the same sums.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS

from .codec import HpuRequest
from .params import HpuParams

__all__ = [
    "COSIM_MEMORY",
    "FILL_CYCLES",
    "FIT_LATENCY_CYCLES",
    "GAP_CYCLES",
    "Memory",
    "RequestBeats",
    "batch_cycles",
    "call_cycles",
    "drain_cycles",
    "request_beats",
    "request_cycles",
]

#: Pipeline fill of one batch: first read's memory latency, K side, FIFO, V side, output
#: (fitted to the RTL by benchmarks/decode_cycles.py).
FILL_CYCLES = 49
#: Turn-around cycles between two requests of a batch (fitted likewise).
GAP_CYCLES = 14
#: Read latency of the memory FILL and GAP were fitted on (the co-simulation memory,
#: cocotbext-axi's read model: :data:`tandem.sim.hpu.memory.MODEL_LATENCY`).
FIT_LATENCY_CYCLES = 2


@dataclass(frozen=True)
class Memory:
    """What the memory behind the read ports adds to a batch's busy cycles.

    Parameters
    ----------
    fill
        Cycles once per batch (``FILL``).
    gap
        Cycles per request (``GAP``).
    efficiency
        Stream efficiency of a batch reading ``beats`` beats per port (``e``); None: 1, no
        stalls beyond ``fill`` and ``gap``.
    name
        What the memory is, for reports.
    drain
        Add the last request's result cycles (``DRAIN``): ``fill`` was fitted without them.
        With the output's multipliers shared (``out_beat_cycles``) they are up to a few tens
        of cycles, too many to sit in one constant for every engine.
    """

    fill: float
    gap: float = 0
    efficiency: Callable[[float], float] | None = None
    name: str = ""
    drain: bool = False

    @classmethod
    def measured(cls, stream, latency: int) -> "Memory":
        """The memory of a measured stream efficiency (``perf.StreamEfficiency``) at ``latency``.

        ``fill`` = ``stream.fill_cycles(latency)``, ``gap`` 0, ``e`` =
        ``stream.efficiency(beats, latency)`` (see the module docstring).
        """
        return cls(
            fill=stream.fill_cycles(latency),
            gap=0,
            efficiency=lambda beats: float(stream.efficiency(beats, latency)),
            name=f"measured stream efficiency at read latency {latency}",
        )


#: The co-simulation memory the FILL/GAP fit describes (the golden backend's).
COSIM_MEMORY = Memory(
    FILL_CYCLES, GAP_CYCLES, None, "co-simulation memory (FILL/GAP fit)", drain=True
)


class RequestBeats(NamedTuple):
    """Beats of requests on the engine's three interfaces (arrays, one entry per request)."""

    descriptor: np.ndarray
    """``D``: beats of the packed descriptor on ``desc_i``."""
    read: np.ndarray
    """``R``: beats one read port carries (scale blocks and rows)."""
    result: np.ndarray
    """``O``: result beats on ``result_o``."""


def request_beats(params: HpuParams, contexts, *, append=True, partial=False) -> RequestBeats:
    """``(D, R, O)``: descriptor beats, read beats per port and result beats per request.

    ``contexts`` are sequence lengths including the new token (arrays allowed); ``append`` and
    ``partial`` are flags, one for all or an array broadcast with ``contexts``. ``R`` counts
    the beats one read port carries: the K (or V) part of every page with two ports, both parts
    with one. ``D`` equals ``len(pack_descriptor(...)) / beat_bytes`` and ``R`` the beats of
    :func:`read_port_bursts`.
    """
    p = params
    t, append, partial = np.broadcast_arrays(
        np.asarray(contexts, dtype=np.int64),
        np.asarray(append, dtype=np.int64),
        np.asarray(partial, dtype=np.int64),
    )
    n = t - append
    pages = -(-n // PAGE_TOKENS)
    reads = (pages * p.scale_beats + n * p.row_beats) * (2 // p.read_ports)
    desc = p.header_beats + 2 * p.row_beats * append + p.gqa_group * p.q_beats
    out = p.gqa_group * (p.row_beats + partial)
    return RequestBeats(desc, reads, out)


def request_cycles(params: HpuParams, contexts, *, append=True, partial=False) -> np.ndarray:
    """``max(D, R, O * out_beat_cycles)`` of each request: its busy cycles (arguments of
    :func:`request_beats`; the output spends ``out_beat_cycles`` cycles on a result beat)."""
    beats = request_beats(params, contexts, append=append, partial=partial)
    results = beats.result * params.out_beat_cycles
    return np.maximum(np.maximum(beats.descriptor, beats.read), results)


def drain_cycles(params: HpuParams, contexts, *, append=True, partial=False) -> int:
    """``DRAIN``: what the last request's results add after its reads, which nothing overlaps
    (arguments of :func:`request_beats`): its ``max(D, R) + O * S`` less the
    ``max(D, R, O * S)`` the sum already counts."""
    contexts = np.asarray(contexts, dtype=np.int64)
    if contexts.size == 0:
        return 0
    beats = request_beats(params, contexts, append=append, partial=partial)
    d, r, o = (np.broadcast_to(x, contexts.shape).reshape(-1)[-1] for x in beats)
    results = int(o) * params.out_beat_cycles
    return max(int(d), int(r)) + results - max(int(d), int(r), results)


def batch_cycles(
    params: HpuParams, contexts, *, append=True, partial=False, memory: Memory = COSIM_MEMORY
) -> float:
    """Modelled cycles of one batch of requests on one engine (see the module docstring).

    Parameters
    ----------
    params
        The engine.
    contexts
        Each request's length, the appended token included.
    append, partial
        Flags, one for all or one per request.
    memory
        The memory behind the read ports (default :data:`COSIM_MEMORY`).

    Returns
    -------
    float
        0 for no request; an integer value with :data:`COSIM_MEMORY`.
    """
    contexts = np.asarray(contexts, dtype=np.int64)
    if contexts.size == 0:
        return 0.0
    busy = request_cycles(params, contexts, append=append, partial=partial)
    cycles = memory.fill + busy.sum() + memory.gap * busy.size
    if memory.drain:
        cycles += drain_cycles(params, contexts, append=append, partial=partial)
    if memory.efficiency is not None:
        reads = request_beats(params, contexts, append=append, partial=partial).read.sum()
        cycles += reads * (1.0 / memory.efficiency(reads) - 1.0)
    return float(cycles)


def call_cycles(params: HpuParams, requests: list[HpuRequest]) -> int:
    """Modelled engine cycles of one batch of requests with :data:`COSIM_MEMORY`."""
    if not requests:
        return 0
    return int(
        batch_cycles(
            params,
            [r.length for r in requests],
            append=[r.append for r in requests],
            partial=[r.partial for r in requests],
        )
    )
