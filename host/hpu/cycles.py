"""Cycle model of the ``hpu`` engine: the one model the golden backend and the performance
model read.

The engine overlaps requests (docs/hpu.md, "How a request flows"): the descriptor parser, the
two read ports and the result stream each work on their own request, so a batch is bound by
the busiest of the three per request, plus the pipeline's fill once per batch::

    cycles(batch) = FILL + sum over requests of max(D, R, O) + GAP
    D = descriptor beats  = header_beats + (2 row_beats if append) + G * q_beats
    R = read beats / port = the beats of KvLayout.read_bursts (scale blocks + rows)
    O = result beats      = G * (row_beats + 1 if partial else row_beats)

``FILL`` covers the memory latency of the first burst, the K and V pipelines and the output
(:data:`FILL_CYCLES`); ``GAP`` the turn-around between two requests (:data:`GAP_CYCLES`).
Both are fitted to the RTL: ``python benchmarks/decode_cycles.py`` runs ten batches (1-8
requests, lengths 1-250, appends and partial requests) on both backends for two engines (the
co-simulation tests' ``hd32-g2`` and the default one) and picks the integers that minimize the
largest relative error over both: FILL 41, GAP 4, within 10.3 % of Icarus on ``hd32-g2`` and
9.3 % on the default engine. A fit to one engine alone gets 7-8 % on it but up to 32 % on the
other: what is left is structure the model does not have (a lone request overlaps its
descriptor, reads and results less than ``max(D, R, O)`` assumes; the turn-around depends on
the pipeline depths). The RTL co-simulation test checks the model stays within 15 %.
"""

from typing import NamedTuple

import numpy as np
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS

from .codec import HpuRequest
from .params import HpuParams

__all__ = ["FILL_CYCLES", "GAP_CYCLES", "RequestBeats", "call_cycles", "request_beats"]

#: Pipeline fill of one batch: first read's memory latency, K side, FIFO, V side, output
#: (fitted to the RTL by benchmarks/decode_cycles.py).
FILL_CYCLES = 41
#: Turn-around cycles between two requests of a batch (fitted likewise).
GAP_CYCLES = 4


class RequestBeats(NamedTuple):
    """Beats of requests on the engine's three interfaces (arrays, one entry per request)."""

    descriptor: np.ndarray
    """``D``: beats of the packed descriptor on ``desc_i``."""
    read: np.ndarray
    """``R``: beats one read port carries (scale blocks and rows)."""
    result: np.ndarray
    """``O``: result beats on ``result_o``."""


def request_beats(
    params: HpuParams, contexts, *, append: bool = True, partial: bool = False
) -> RequestBeats:
    """``(D, R, O)``: descriptor beats, read beats per port and result beats per request.

    ``contexts`` are sequence lengths including the new token (arrays allowed). ``R`` counts
    the beats one read port carries: the K (or V) part of every page with two ports, both parts
    with one. ``D`` equals ``len(pack_descriptor(...)) / beat_bytes`` and ``R`` the beats of
    :func:`read_port_bursts`; the engine's cycle models (the golden transport, the performance
    model) read these counts from here.
    """
    p = params
    t = np.asarray(contexts, dtype=np.int64)
    n = t - 1 if append else t
    pages = -(-n // PAGE_TOKENS)
    reads = (pages * p.scale_beats + n * p.row_beats) * (2 // p.read_ports)
    desc = p.header_beats + (2 * p.row_beats if append else 0) + p.gqa_group * p.q_beats
    out = p.gqa_group * (p.row_beats + (1 if partial else 0))
    return RequestBeats(np.full_like(t, desc), reads, np.full_like(t, out))


def call_cycles(params: HpuParams, requests: list[HpuRequest]) -> int:
    """Modelled engine cycles of one batch (see the module docstring)."""
    if not requests:
        return 0
    lengths = np.array([r.length for r in requests], np.int64)
    appends = np.array([r.append for r in requests])
    partials = np.array([r.partial for r in requests])
    busiest = 0
    for append in (False, True):
        for partial in (False, True):
            chosen = (appends == append) & (partials == partial)
            if chosen.any():
                beats = request_beats(params, lengths[chosen], append=append, partial=partial)
                busiest += int(
                    np.maximum(np.maximum(beats.descriptor, beats.read), beats.result).sum()
                )
    return FILL_CYCLES + busiest + GAP_CYCLES * len(requests)
