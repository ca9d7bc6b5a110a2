"""Decode performance model: a GPU alone against a GPU plus ``N`` HPU cards (``tandem perf``).

Everything below is a formula over figures that come from files: the model's shape
(``constraints/models/*.yaml``), the GPU's and the board's data-sheet figures
(``constraints/gpus``, ``constraints/boards``), the HPU engine's parameters
(:class:`~tandem.host.hpu.HpuParams`, the KV layout of
:class:`~tandem.mappings.hpu.kv_layout.KvLayout`) and the stream efficiency the engine's RTL
reached in simulation (``constraints/measured/hpu_stream_efficiency.yaml``, written from
``python benchmarks/hpu_stream_efficiency.py``). Nothing is fitted to the paper's results.

Symbols
-------
``L`` layers, ``d`` hidden size, ``H`` query heads, ``Hkv`` KV heads, ``dh`` head dim,
``G = H / Hkv``, ``I`` MLP intermediate size, ``V`` vocabulary, ``w`` bytes per weight and per
GPU KV element (``dtype_bytes``), ``B`` batch, ``t`` a sequence's context in tokens (the new
token included), ``BW`` the GPU's memory bandwidth, ``F`` its dense FP16/BF16 tensor peak.

Model
-----
Linear weights per layer ``Pl = d*H*dh + 2*d*Hkv*dh + H*dh*d + 3*d*I`` (q, k, v, o and the
SwiGLU gate, up, down), norms ``2*d``; parameters ``P = L*(Pl + 2d) + V*d (+ V*d untied) + d``;
weight bytes ``W = P*w``. GPU KV bytes per token ``2*L*Hkv*dh*w``.
Useful FLOPs of one decode step: ``2*B*(L*Pl + V*d) + sum_b 4*L*H*dh*t_b``.

Decode steps
------------
``--input Tin --output Tout``: step ``s = 0 .. Tout-1`` attends over ``t = Tin + s + 1``
tokens for every sequence, and produces ``B`` tokens. Throughput is
``B*Tout / sum_s step(s)``; ``step_ms`` is the mean step time; the time split is the mean per
step. Prefill and the KV move to the cards after it are not part of decode and are left out.

GPU roofline
------------
Each kernel group takes ``max(bytes / BW, flops / F) / eta`` at the data-sheet peaks over the
GPU's decode efficiency ``eta`` (``decode_efficiency`` in ``constraints/gpus``: a production
serving stack's published decode throughput over this roofline of the same setup; the file
names the measurement), for the GPU work of both systems:

* linear layers of one layer for ``b`` sequences:
  bytes ``Pl*w + b*w*(3d + H*dh + 2*Hkv*dh + H*dh + 3I)`` (weights once, activations in and
  out), flops ``2*b*Pl``;
* embedding + LM head: bytes ``V*d*w``, flops ``2*b*V*d``;
* GPU attention of one layer: bytes ``b*2*t*Hkv*dh*w`` (K and V read once), flops
  ``b*4*H*dh*t``.

GPU alone: ``step = head(B) + L * (linear(B) + attention(B, t))``.
Memory: ``W + B * (Tin + Tout) * 2*L*Hkv*dh*w <= GPU memory`` (KV reserved for the whole
sequence, as the runtime reserves it), else ``oom``.

HPU card
--------
Every card runs ``engines`` copies of the ``hpu`` engine (default: one per pair of HBM
pseudo-channels, ``channels // read_ports``, but no more than fit:
``min over r of floor(0.8 * capacity_r / used_r)`` for r in LUT, FF, DSP, BRAM, URAM, with
``used_r`` from a synthesis of the same engine configuration in
``constraints/measured/hpu_resources.yaml``; unchecked when there is none), at clock ``f``:
``--hpu-clock-mhz``, else that synthesis's timing estimate where it is below the board's
default clock, else the board's default (:func:`engine_clock`; ``clock_source`` says which).
KV lives on the cards in the engine's format (int8
rows padded to 64 bytes and one binary16 scale per token, pages of 32 tokens:
``KvLayout.region_bytes``), one region per (layer, KV head) of every sequence; sequences are
placed as the runtime places them (:func:`place_sequences`, one placement in
:mod:`tandem.mappings.hpu.placement`): equal sequences that fit a card go round-robin. Card memory:
``ceil(B/N) * L * Hkv * region_bytes(Tin + Tout) <= card HBM``, else ``oom``.

One request = one (sequence, KV head, layer). Per request, in memory beats of ``lanes``
bytes per read port (K on one port, V on the other):

* ``R = ceil(n/32) * scale_beats + n * row_beats``, ``n = t - 1`` rows read (the new token
  comes in the descriptor) — the bursts :meth:`KvLayout.read_bursts` issues;
* ``D = header_beats + 2*row_beats + G*q_beats`` descriptor beats (:func:`pack_descriptor`);
* ``O = G * row_beats`` result beats.

One call = the requests one card gets for one (sub-batch, layer). Its time:

* bandwidth: ``bytes / (call KV bandwidth * e)``, the call's KV bandwidth from the pseudo-channels
  its regions lie in (:func:`call_channel_rates`: the regions allocated as the card's allocator
  places them, ``--placement``; a call takes the longer of its busiest channel's bytes at the
  channel's sustained rate, the board's ``sustained_fraction`` of its peak, and all its bytes at
  the engines' ports, one beat a cycle each), ``bytes = sum 2*R*lanes + 2*(row + 2)`` (reads and
  the appended rows and scales), ``e = e_RTL(Rc)`` the stream efficiency the RTL benchmark
  measured for one request of ``Rc`` beats per port at the configured read latency, where ``Rc``
  is the read beats of the busiest engine in this call (``ceil(requests / engines) * R``),
  interpolated in ``log2`` and held constant outside the measured range. A call counts as one long
  request because that is what the RTL measured: ``k`` requests of ``n`` tokens queued back to
  back reach the efficiency of one request of ``k * n`` tokens (the data file's ``queued`` column
  for 8 requests equals its ``alone`` column at 8 times the length; the memory latency is paid
  once per call, not once per request);
* compute: ``sum max(R, D, O) / (engines * f)``: each engine consumes one beat per port per
  cycle, ``lanes`` elements of a K row times all ``G`` queries and ``lanes`` elements of a V
  row, and takes and emits one descriptor or result beat per cycle;
* ``hpu = max(bandwidth, compute) + fill / f``: ``fill`` = the cycles of a lone request
  outside its read window (descriptor in, pipeline out), measured by the same benchmark.

The bound of the card (``bandwidth`` or ``compute``) is the larger term.

PCIe per call: down ``sum D * lanes`` bytes (descriptors: queries, new k/v, header), up
``G * dh * 4`` bytes per request (results in 32-bit words). Every card's traffic crosses its
own link and, together, the GPU's link; a transfer takes the slower of the two
(``max(sum_cards bytes / GPU link, max_card bytes / card link)``) plus ``pcie_latency_us``
(default 0: not modelled). Links are full duplex: down and up are separate resources.

Sub-batch ping-pong
-------------------
The batch splits into two sub-batches (``ceil(B/2)``, ``floor(B/2)``; one when ``B = 1``).
Per layer and sub-batch ``s``: the GPU's linear work ``g_s = linear(b_s)``, the descriptors
down ``pd_s``, the busiest card's attention ``h_s``, the results up ``pu_s``. Sub-batch ``s``
must finish ``g_s -> pd_s -> h_s -> pu_s`` before its next layer's GPU work, while the other
sub-batch keeps the GPU (or the cards) busy. In steady state one layer takes::

    T = max(sum_s g_s, sum_s h_s, sum_s pd_s, sum_s pu_s, max_s (g_s + pd_s + h_s + pu_s))

(each resource's load, or one sub-batch's dependency chain, whichever is longer), and

    step = makespan of the task graph + head(B)

The step is computed event by event (vectorized over the decode steps): on each resource the
tasks run in order (layer by layer, the first sub-batch first), each starting when its
resource is free and its predecessor in the chain is done. The difference to ``L * T`` is the
fill and drain that cannot overlap: when the GPU sets ``T``, the last sub-batch's
``pd + h + pu`` trails its last GPU work; when the cards set it, the first sub-batch's
``g + pd`` precedes their first work. Each layer's GPU work is one task per sub-batch (its
projections and MLP together). The LM head runs after the last layer and is not overlapped.
Memory on the GPU: ``W`` only (the KV is on the cards).

Figures
-------
``mfu`` = useful FLOPs per step / (step time * ``F``) (the GPU's peak for both systems: the
cards add no GEMM throughput). ``tokens_per_s_per_w`` = tokens/s / (GPU TDP + ``N`` * board
power): nameplate maxima, not measured power. ``bottleneck`` names the term that sets the
step (for the GPU alone the largest of weights/compute/attention; with HPUs the term of ``T``).

The per-request beats ``D``, ``R``, ``O`` and the per-call cycles come from the engine's one
cycle model, :mod:`tandem.host.hpu.cycles` (the golden backend reads the same module).

The runtime cross-check (:func:`hpu_step_cycles`) predicts the accelerator cycles of one
decode step of :mod:`tandem.host.system.decode` (one engine per card, the engine's own ports as its
memory): the sequences are placed as the runtime places them (:func:`place_sequences`, split
sequences included: every card holding an active slice gets a partial request), and each call
takes :func:`tandem.host.hpu.cycles.batch_cycles` with the measured memory at the read
latency, ``fill + sum max(R, D, O) + sum R * (1 / e_RTL(sum R) - 1)`` (the beats, the slower
of descriptor and result streams where they exceed the reads, and the read-latency stalls of
the whole call), summed over layers and sub-batches. With ``memory=COSIM_MEMORY`` it gives the
golden backend's cycles exactly.
"""

from tandem.host.hpu.cycles import request_beats

from .cards import (
    CHOSEN_PARAMS,
    ENGINE_RESOURCE_SHARE,
    GIB,
    KV_PLACEMENTS,
    UNBOUNDED_BYTES,
    best_engine,
    call_channel_rates,
    card_kv_bandwidth,
    engine_clock,
    engine_fit,
    hpu_call_cycles,
    hpu_params_for_model,
    hpu_step_cycles,
    place_sequences,
    step_requests,
    synthesized_engine,
)
from .inputs import (
    EFFICIENCY_FILE,
    RESOURCES_FILE,
    ModelShape,
    StreamEfficiency,
    load_efficiency,
    load_engine_resources,
    load_model_shape,
    model_names,
)
from .model import RESULT_ELEM_BYTES, decode_projection, pingpong_step
from .paper import PAPER, paper_comparison
from .report import (
    MAX_BATCH,
    MAX_HPUS,
    MAX_PCIE_LATENCY_US,
    add_arguments,
    check_arguments,
    decode_figure,
    plot,
    run,
    table,
)

__all__ = [
    "CHOSEN_PARAMS",
    "EFFICIENCY_FILE",
    "ENGINE_RESOURCE_SHARE",
    "GIB",
    "KV_PLACEMENTS",
    "MAX_BATCH",
    "MAX_HPUS",
    "MAX_PCIE_LATENCY_US",
    "PAPER",
    "RESOURCES_FILE",
    "RESULT_ELEM_BYTES",
    "UNBOUNDED_BYTES",
    "ModelShape",
    "StreamEfficiency",
    "add_arguments",
    "best_engine",
    "call_channel_rates",
    "card_kv_bandwidth",
    "check_arguments",
    "decode_figure",
    "decode_projection",
    "engine_clock",
    "engine_fit",
    "hpu_call_cycles",
    "hpu_params_for_model",
    "hpu_step_cycles",
    "load_efficiency",
    "load_engine_resources",
    "load_model_shape",
    "model_names",
    "paper_comparison",
    "pingpong_step",
    "place_sequences",
    "plot",
    "request_beats",
    "run",
    "step_requests",
    "synthesized_engine",
    "table",
]
