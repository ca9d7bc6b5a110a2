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

import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml
from tandem.host.hpu import HpuParams
from tandem.host.hpu.cycles import Memory, batch_cycles, request_beats, request_cycles
from tandem.mappings.hpu.placement import CardSpace, Slice, place_batch

from tandem.boards import Board, Gpu, load_board, load_gpu
from tandem.errors import UserError, did_you_mean

__all__ = [
    "EFFICIENCY_FILE",
    "ModelShape",
    "StreamEfficiency",
    "decode_projection",
    "engine_clock",
    "hpu_call_cycles",
    "hpu_params_for_model",
    "hpu_step_cycles",
    "load_efficiency",
    "load_model",
    "model_names",
    "paper_comparison",
    "pingpong_step",
    "place_sequences",
    "request_beats",
    "step_requests",
    "synthesized_engine",
]

#: Measured stream efficiency of the hpu RTL (package data of ``tandem.constraints``).
EFFICIENCY_FILE = "measured/hpu_stream_efficiency.yaml"
#: Synthesized resources of hpu engine configurations (package data of ``tandem.constraints``).
RESOURCES_FILE = "measured/hpu_resources.yaml"
#: Share of a card's LUT/FF/DSP/BRAM/URAM the engines may take: the rest is for the platform's
#: shell (PCIe DMA, HBM subsystem) and for routing; 80 % is a usual ceiling for a design that
#: still closes timing, an assumption, not a measurement.
ENGINE_RESOURCE_SHARE = 0.8
#: Bytes per result element sent back over PCIe (out_bits <= 32 packed in 32-bit words).
RESULT_ELEM_BYTES = 4
#: The HPU paper's claims (Rhee et al., arXiv 2504.16112) for Llama-2-7B, 1K in / 1K out,
#: 4 HPUs beside an L40S; printed next to the model's figures, never used by it.
PAPER = {
    "model": "llama-2-7b",
    "gpu": "l40s",
    "hpus": 4,
    "hpu_board": "u55c",
    "input": 1024,
    "output": 1024,
    "speedup": 4.1,
    "tokens_per_s_per_w_ratio": 4.6,
}


# --- model shapes ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelShape:
    """The shape of a Llama-architecture decoder (``constraints/models/<name>.yaml``)."""

    name: str
    full_name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    dtype_bytes: int
    max_context: int

    def __post_init__(self):
        for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise UserError(
                    f"model {self.name}: {key} must be a positive integer, not {value!r}"
                )
        if self.heads % self.kv_heads:
            raise UserError(
                f"model {self.name}: heads ({self.heads}) must be a multiple of kv_heads "
                f"({self.kv_heads})"
            )
        if self.dtype_bytes not in (1, 2, 4):
            raise UserError(
                f"model {self.name}: dtype_bytes must be 1, 2 or 4, not {self.dtype_bytes!r}"
            )

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head."""
        return self.heads // self.kv_heads

    @property
    def layer_linear_params(self) -> int:
        """``Pl``: weights of the q, k, v, o projections and the SwiGLU MLP of one layer."""
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return d * q + 2 * d * kv + q * d + 3 * d * self.intermediate

    @property
    def params(self) -> int:
        """All parameters (embedding, LM head unless tied, norms)."""
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * (self.layer_linear_params + 2 * self.hidden) + embed + self.hidden

    @property
    def weight_bytes(self) -> int:
        """``W``: bytes of every weight in ``dtype_bytes``."""
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """GPU KV cache bytes per token (K and V of every layer in ``dtype_bytes``)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def activation_elems(self) -> int:
        """Activation elements one token moves in and out of one layer's linear kernels."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 3 * self.hidden + q + 2 * kv + q + 3 * self.intermediate

    def linear_flops(self, batch) -> Any:
        """FLOPs of every linear layer and the LM head for ``batch`` tokens."""
        return 2 * batch * (self.layers * self.layer_linear_params + self.vocab * self.hidden)

    def attention_flops(self, contexts) -> Any:
        """FLOPs of decode attention (q·K and p·V) for sequences of ``contexts`` tokens."""
        return 4 * self.layers * self.heads * self.head_dim * np.asarray(contexts)


def _constraints_folder(kind: str):
    return resources.files("tandem.constraints") / kind


def model_names() -> list[str]:
    """Names of every model shape shipped in ``constraints/models``."""
    folder = _constraints_folder("models")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


@cache
def load_model(name: str) -> ModelShape:
    """The model shape called ``name`` (file stem in ``constraints/models``)."""
    names = model_names()
    if name not in names:
        raise UserError(
            f"unknown model {name!r}{did_you_mean(name, names)}; known: {', '.join(names)}"
        )
    data = yaml.safe_load((_constraints_folder("models") / f"{name}.yaml").read_text())
    fields = set(ModelShape.__dataclass_fields__)
    missing = sorted(fields - set(data))
    if missing:
        raise UserError(f"constraints/models/{name}.yaml: missing {', '.join(missing)}")
    return ModelShape(**{k: data[k] for k in fields})


# --- measured stream efficiency -------------------------------------------------------------
@dataclass(frozen=True)
class StreamEfficiency:
    """The hpu RTL's measured stream efficiency (``constraints/measured/...yaml``).

    ``rows`` hold, per read latency and sequence length, ``beats`` per read port of one
    request, the efficiency of one request alone (``alone``) and of ``batch`` requests queued
    back to back (``queued``), and ``fill`` = a lone request's cycles outside its read window.
    """

    params: dict
    command: str
    simulator: str
    seed: int
    source: str
    batch: int
    rows: tuple[dict, ...] = field(repr=False)

    @property
    def latencies(self) -> list[int]:
        """Read latencies (cycles) the benchmark measured."""
        return sorted({r["latency"] for r in self.rows})

    def _rows(self, latency: int) -> list[dict]:
        rows = sorted((r for r in self.rows if r["latency"] == latency), key=lambda r: r["beats"])
        if not rows:
            known = ", ".join(map(str, self.latencies))
            raise UserError(
                f"no stream efficiency measured at read latency {latency}; measured: {known}"
            )
        return rows

    def efficiency(self, beats, latency: int, queued: bool = False):
        """Efficiency for requests of ``beats`` beats per port, interpolated in log2(beats).

        Held at the end values outside the measured range.
        """
        rows = self._rows(latency)
        x = np.log2([r["beats"] for r in rows])
        y = [r["queued" if queued else "alone"] for r in rows]
        return np.interp(np.log2(np.maximum(np.asarray(beats, dtype=float), 1.0)), x, y)

    def fill_cycles(self, latency: int) -> float:
        """Cycles of a lone request outside its read window (mean over measured lengths)."""
        return float(np.mean([r["fill"] for r in self._rows(latency)]))


@cache
def load_efficiency() -> StreamEfficiency:
    """The measured stream efficiency shipped in :data:`EFFICIENCY_FILE`."""
    data = yaml.safe_load((resources.files("tandem.constraints") / EFFICIENCY_FILE).read_text())
    return StreamEfficiency(
        params={**HpuParams().to_dict(), **data["params"]},  # unnamed: the default
        command=data["command"],
        simulator=data["simulator"],
        seed=data["seed"],
        source=f"constraints/{EFFICIENCY_FILE}",
        batch=data["batch"],
        rows=tuple(data["rows"]),
    )


# --- the HPU engine -------------------------------------------------------------------------
def load_engine_resources() -> list[dict]:
    """The synthesized engine configurations of :data:`RESOURCES_FILE` (an empty list if none)."""
    path = resources.files("tandem.constraints") / RESOURCES_FILE
    if not path.is_file():
        return []
    return list(yaml.safe_load(path.read_text()).get("engines") or [])


def synthesized_engine(params: HpuParams) -> dict | None:
    """The stored synthesis of ``params`` (:data:`RESOURCES_FILE`): every parameter but
    ``max_seq_len`` (a few counter bits) equal; None when there is none. A parameter an
    entry does not name (stored before the parameter existed) has its default value."""
    defaults = HpuParams().to_dict()
    wanted = {k: v for k, v in params.to_dict().items() if k != "max_seq_len"}
    for entry in load_engine_resources():
        stored = {**defaults, **entry["params"]}
        if {k: v for k, v in stored.items() if k != "max_seq_len"} == wanted:
            return entry
    return None


def engine_clock(params: HpuParams, board: Board, clock_mhz: float | None = None) -> dict:
    """The clock the engines of ``params`` run at on ``board``, and where it comes from.

    ``clock_mhz`` when given; else the timing estimate of the stored synthesis of this
    configuration (``tandem synth``'s longest register-to-register path, :mod:`tandem.timing`)
    where it is below the board's default kernel clock, the board's default where the
    estimate reaches it; the board's default, saying so, when no synthesis of the
    configuration carries an estimate. Returns ``{"clock_mhz", "clock_source",
    "fmax_mhz"}`` (``fmax_mhz`` None without an estimate).
    """
    default = float(board.default_clock_mhz)
    if clock_mhz is not None:
        return {"clock_mhz": float(clock_mhz), "clock_source": "given", "fmax_mhz": None}
    entry = synthesized_engine(params)
    fmax = ((entry or {}).get("timing") or {}).get("fmax_mhz")
    if fmax is None:
        return {
            "clock_mhz": default,
            "clock_source": "board default (no timing estimate of this configuration)",
            "fmax_mhz": None,
        }
    if fmax < default:
        source = f"timing estimate ({entry['command']})"
        return {"clock_mhz": float(fmax), "clock_source": source, "fmax_mhz": float(fmax)}
    return {
        "clock_mhz": default,
        "clock_source": f"board default (the timing estimate, {fmax:.0f} MHz, reaches it)",
        "fmax_mhz": float(fmax),
    }


def engine_fit(params: HpuParams, board: Board) -> dict:
    """How many engines of ``params`` fit on ``board``, from a synthesis of that configuration.

    The configuration matches a stored synthesis when every parameter but ``max_seq_len`` (a
    few counter bits) is equal. Engines fit while each resource used stays within
    :data:`ENGINE_RESOURCE_SHARE` of the board's. Returns ``{"checked": False, "reason"}``
    when no synthesis matches.
    """
    entry = synthesized_engine(params)
    if entry is not None:
        limits = {}
        for name, used in entry["used"].items():
            capacity = board.capacity(name)
            if used and capacity is not None:
                limits[name] = int(capacity * ENGINE_RESOURCE_SHARE // used)
        if not limits:
            return {
                "checked": False,
                "reason": f"board {board.name} lists none of the resources the engine uses",
            }
        bound = min(limits, key=limits.get)
        return {
            "checked": True,
            "per_engine": dict(entry["used"]),
            "synthesized": f"{entry['command']} ({RESOURCES_FILE})",
            "share": ENGINE_RESOURCE_SHARE,
            "engines_fit": limits[bound],
            "bound_by": bound,
        }
    return {
        "checked": False,
        "reason": f"no synthesis of this engine configuration in constraints/{RESOURCES_FILE} "
        "(tandem synth hpu --json, then benchmarks/hpu_resources_data.py)",
    }


def card_kv_bandwidth(
    params: HpuParams,
    board: Board,
    efficiency: float,
    clock_mhz: float | None = None,
    engines: int | None = None,
) -> dict:
    """The KV bandwidth a card of ``engines`` engines draws, as a fraction of its HBM peak.

    Each engine port reaches one HBM pseudo-channel and moves at most one beat a cycle:
    ``min(beat bytes x clock, pseudo-channel sustained rate)``, the sustained rate being the
    data sheet's per-channel peak times the board's measured ``sustained_fraction`` (refresh,
    page and switch losses of sequential reads); the card's figure is that, summed over every
    port of the engines that run (``engines``, default as many as the HBM ports serve and the
    resources hold, :func:`engine_fit`), at most the card's sustained rate, times the measured
    stream ``efficiency`` (the engine's own port utilization), over the HBM peak. This is the
    figure to compare with a paper's share of HBM bandwidth, not ``efficiency`` alone. It
    assumes every port streams from a pseudo-channel of its own.
    """
    hbm = board.memory[0]
    peak = float(hbm["bandwidth_gb_s"])
    sustained = float(hbm["sustained_fraction"])
    channels = int(hbm["channels"])
    per_channel = peak * sustained / channels
    fit = engine_fit(params, board)
    limit, limited_by = max(1, channels // params.read_ports), "HBM ports"
    if fit["checked"] and fit["engines_fit"] < limit:
        limit, limited_by = max(1, fit["engines_fit"]), fit["bound_by"].upper()
    if engines is None:
        engines = limit
    else:
        limited_by = "given"
    timing = engine_clock(params, board, clock_mhz)
    clock, clock_source = timing["clock_mhz"], timing["clock_source"]
    port_gb_s = min(params.beat_bytes * clock * 1e6 / 1e9, per_channel)
    ports_gb_s = engines * params.read_ports * port_gb_s
    # More ports than pseudo-channels share them: the card draws at most the sustained rate.
    card_gb_s = min(ports_gb_s, peak * sustained) * efficiency
    return {
        "engines": engines,
        "engines_limited_by": limited_by,
        "resources_checked": fit["checked"],
        "clock_mhz": clock,
        "clock_source": clock_source,
        "port_gb_s": port_gb_s,
        "port_limited_by": "pseudo-channel" if port_gb_s == per_channel else "port width x clock",
        "card_limited_by": "HBM sustained rate"
        if ports_gb_s >= peak * sustained
        else "engine ports",
        "stream_efficiency": efficiency,
        "sustained_fraction": sustained,
        "card_gb_s": card_gb_s,
        "hbm_gb_s": peak,
        "hbm_fraction": card_gb_s / peak,
    }


def hpu_params_for_model(model: ModelShape, max_seq_len: int, **overrides) -> HpuParams:
    """The measured reference configuration with the model's head_dim and GQA group, in the
    default KV format (:class:`HpuParams`'s ``kv_bits``, with the lanes that fill the
    reference's ports: the stream efficiency is a property of beats, not of their format)."""
    ref = dict(load_efficiency().params)
    kv_bits = HpuParams().kv_bits
    ref.update(kv_bits=kv_bits, lanes=ref["mem_data_bits"] // kv_bits)
    ref.update(head_dim=model.head_dim, gqa_group=model.gqa_group, max_seq_len=max_seq_len)
    ref.update(overrides)
    try:
        return HpuParams(**ref)
    except (ValueError, TypeError) as exc:
        raise UserError(f"hpu engine for model {model.name}: {exc}") from None


#: Parameters the performance model may choose per card (the port width and the lanes that
#: fill it, and whether the scaling products take DSP48E2s or LUTs: the LUTs they take in
#: fabric can cost engines where LUTs bound them); every other parameter is the reference
#: configuration's.
CHOSEN_PARAMS = ("lanes", "mem_data_bits", "scaling_multipliers")


def _synth_family(board_name: str | None) -> str | None:
    """The yosys family a board's syntheses map to (``xcup`` where yosys has none)."""
    try:
        return load_board(board_name).yosys_family or "xcup"
    except (UserError, TypeError):
        return None


def best_engine(reference: HpuParams, board: Board, clock_mhz: float | None = None) -> dict:
    """The engine configuration that draws the most KV bandwidth from ``board``.

    The candidates are the stored syntheses for ``board``'s yosys family (:data:`RESOURCES_FILE`;
    the U55C's serve the U280, the same UltraScale+ mapping as ``tandem synth`` uses) that
    differ from ``reference`` only in :data:`CHOSEN_PARAMS` (so the same head, GQA group, KV
    format and number formats), each with as many engines as fit and its own timing estimate,
    or all at ``clock_mhz`` when given (:func:`card_kv_bandwidth` at stream efficiency 1, the
    same factor for all). Returns
    ``{"params", "choice", "candidates"}``: the winner (``reference`` itself where no
    synthesis matches), why, and every candidate's engines, clock and card bandwidth.
    """
    defaults = HpuParams().to_dict()
    wanted = {
        k: v for k, v in reference.to_dict().items() if k not in (*CHOSEN_PARAMS, "max_seq_len")
    }
    candidates = []
    for entry in load_engine_resources():
        stored = {**defaults, **entry["params"]}
        if _synth_family(entry.get("board")) != _synth_family(board.name):
            continue
        if {k: v for k, v in stored.items() if k in wanted} != wanted:
            continue
        params = reference.replace(**{k: stored[k] for k in CHOSEN_PARAMS})
        card = card_kv_bandwidth(params, board, 1.0, clock_mhz)
        candidates.append(
            {
                "params": params,
                "lanes": params.lanes,
                "mem_data_bits": params.mem_data_bits,
                "scaling_multipliers": params.scaling_multipliers,
                "engines": card["engines"],
                "engines_limited_by": card["engines_limited_by"],
                "clock_mhz": card["clock_mhz"],
                "card_gb_s": card["card_gb_s"],
            }
        )
    if not candidates:
        return {
            "params": reference,
            "choice": f"the reference configuration: no synthesis for {board.name} differs from it "
            f"only in {', '.join(CHOSEN_PARAMS)}",
            "candidates": [],
        }
    best = max(candidates, key=lambda c: c["card_gb_s"])
    return {
        "params": best["params"],
        "choice": f"the most card KV bandwidth of {len(candidates)} synthesized "
        f"configuration{'s' if len(candidates) > 1 else ''} of this head and format for "
        f"{board.name} ({', '.join(CHOSEN_PARAMS)} chosen)",
        "candidates": [{k: v for k, v in c.items() if k != "params"} for c in candidates],
    }


def hpu_call_cycles(
    params: HpuParams,
    contexts,
    *,
    latency: int = 2,
    efficiency: StreamEfficiency | None = None,
    append=True,
    partial=False,
    memory: Memory | None = None,
) -> float:
    """Predicted cycles of one call (a batch of requests) on one engine fed by its own ports.

    :func:`tandem.host.hpu.cycles.batch_cycles` with the measured memory at ``latency``
    (:meth:`Memory.measured` of ``efficiency``, default :func:`load_efficiency`) unless
    ``memory`` is given: ``fill + sum max(R, D, O) + sum R * (1 / e(sum R) - 1)`` over the
    requests of sequences ``contexts`` long (every beat, the descriptor or result stream where
    it is longer than the reads, and the read-latency stalls of the call, which streams as one
    request of all its beats; see the module docstring).
    """
    if memory is None:
        memory = Memory.measured(efficiency or load_efficiency(), latency)
    return batch_cycles(params, contexts, append=append, partial=partial, memory=memory)


#: Card memory the performance model assumes where none is given: more than any placement
#: takes, so that only ``max_seq_len`` splits sequences.
UNBOUNDED_BYTES = 1 << 62


def place_sequences(
    params: HpuParams,
    capacities,
    cards: int,
    *,
    heads: int = 1,
    card_bytes: int | None = None,
    max_slice_tokens: int | None = None,
) -> list[list[Slice]]:
    """The slices of each sequence as the runtime places them (:class:`HpuAttention`).

    :func:`tandem.mappings.hpu.placement.place_batch` on ``cards`` empty cards of
    ``card_bytes`` each (default unbounded), ``heads`` KV regions per token (layers x KV
    heads): in order, each sequence goes to the card with the most free memory (ties to the
    lowest index), split into whole pages where one card cannot hold it (memory,
    ``max_seq_len``, ``max_slice_tokens``). Sequences of equal capacity that fit go
    round-robin.
    """
    size = UNBOUNDED_BYTES if card_bytes is None else int(card_bytes)
    return place_batch(
        capacities,
        [CardSpace.empty(size) for _ in range(cards)],
        layout=params.layout,
        heads=heads,
        max_seq_len=params.max_seq_len,
        max_slice_tokens=max_slice_tokens,
    )


#: The KV placements a card's allocator runs (:class:`~tandem.host.hpu.device.HpuDevice`).
KV_PLACEMENTS = ("channels", "contiguous")


def call_channel_rates(
    params: HpuParams,
    board: Board,
    placement: list[list[Slice]],
    subbatches: list[range],
    *,
    layers: int,
    kv_heads: int,
    policy: str,
    port_gb_s: float,
    ports: int,
) -> list[dict]:
    """The KV bandwidth each sub-batch's calls draw from the card that holds most of them,
    from the pseudo-channels its regions really lie in.

    Each card's regions are allocated as its allocator does (``policy``: ``"channels"``,
    :class:`~tandem.mappings.hpu.channels.ChannelSpace`; ``"contiguous"``, a sequence's
    regions one after another), slices in sequence order, on the board's channel geometry.
    A call (one sub-batch, one layer) reads its regions' bytes in proportion to their sizes
    (equal contexts fill every region alike); it takes ``max(busiest channel's bytes /
    channel rate, bytes / (ports x port rate))`` (a channel delivers its sustained rate, a port
    its beat rate), so its bandwidth is ``bytes`` over that. Layers run one after another, so
    a sub-batch's figure is the harmonic mean over layers.

    Returns, per sub-batch: ``gb_s`` (that bandwidth), ``touched`` (channels the busiest card's
    calls read, mean over layers) and ``busiest_over_mean`` (its busiest channel's bytes over
    the mean, mean over layers).
    """
    from tandem.mappings.hpu.channels import ChannelGeometry, ChannelSpace

    hbm = board.memory[0]
    channels = int(hbm["channels"])
    geometry = ChannelGeometry(channels, round(float(hbm["capacity_gib"]) * GIB) // channels)
    channel_gb_s = float(hbm["bandwidth_gb_s"]) * float(hbm["sustained_fraction"])
    channel_gb_s /= channels
    heads = layers * kv_heads
    bases: dict[tuple[int, int], np.ndarray] = {}  # (sequence, slice) -> [heads] region bases
    sizes: dict[tuple[int, int], int] = {}
    spaces: dict[int, ChannelSpace] = {}
    offsets: dict[int, int] = {}
    for b, slices in enumerate(placement):
        for i, piece in enumerate(slices):
            region = params.layout.region_bytes(piece.tokens)
            if policy == "channels":
                space = spaces.setdefault(piece.card, ChannelSpace(geometry))
                try:
                    bases[b, i] = space.take(region, heads, kv_heads)
                except ValueError:
                    raise UserError(
                        f"the KV regions of {b + 1} sequences do not fit whole inside the "
                        f"{board.name}'s pseudo-channels (--placement contiguous packs them)"
                    ) from None
            else:
                start = offsets.get(piece.card, 0)
                bases[b, i] = start + region * np.arange(heads, dtype=np.int64)
                offsets[piece.card] = start + region * heads
            sizes[b, i] = region
    out = []
    for members in subbatches:
        per_card: dict[int, list[tuple[int, int]]] = {}
        for b in members:
            for i, piece in enumerate(placement[b]):
                per_card.setdefault(piece.card, []).append((b, i))
        card = max(per_card, key=lambda c: sum(sizes[k] for k in per_card[c]))
        keys = per_card[card]
        seconds_per_gb, touched, peaks = [], [], []
        for layer in range(layers):
            window = slice(layer * kv_heads, (layer + 1) * kv_heads)
            starts = np.concatenate([bases[k][window] for k in keys])
            spans = np.concatenate([np.full(kv_heads, sizes[k]) for k in keys])
            loads = geometry.span_bytes(starts, spans)
            share = loads.max() / loads.sum()
            seconds_per_gb.append(max(share / channel_gb_s, 1 / (ports * port_gb_s)))
            touched.append(np.count_nonzero(loads))
            peaks.append(share * channels)
        out.append(
            {
                "gb_s": float(layers / sum(seconds_per_gb)),
                "touched": float(np.mean(touched)),
                "busiest_over_mean": float(np.mean(peaks)),
            }
        )
    return out


def step_requests(contexts, placement: list[list[Slice]], members) -> dict[int, list[tuple]]:
    """``{card: [(length, append, partial)]}``: the requests of one (sub-batch, layer, KV head).

    As :meth:`HpuAttention.attend` sends them: every slice that starts at or before the new
    token's position ``t - 1`` gets a request, in partial mode when there are several; the
    slice holding the position appends the new token (``length = t - first``), the others
    (full) read their ``tokens``.
    """
    calls: dict[int, list[tuple]] = {}
    for b in members:
        position = int(contexts[b]) - 1
        active = [s for s in placement[b] if s.first <= position]
        partial = len(active) > 1
        for s in active:
            if s.holds(position):
                request = (position - s.first + 1, True, partial)
            else:
                request = (s.tokens, False, partial)
            calls.setdefault(s.card, []).append(request)
    return calls


def hpu_step_cycles(
    model: ModelShape,
    params: HpuParams,
    contexts,
    *,
    cards: int = 1,
    capacities=None,
    latency: int = 2,
    efficiency: StreamEfficiency | None = None,
    card_bytes: int | None = None,
    max_slice_tokens: int | None = None,
    memory: Memory | None = None,
) -> dict[str, float]:
    """Predicted accelerator cycles per card of one decode step of :mod:`tandem.host.system.decode`.

    Parameters
    ----------
    model, params
        The model's shape and the engine's parameters.
    contexts
        Each sequence's length including the token this step appends.
    cards
        HPU cards; sequences are placed as :func:`place_sequences` does.
    capacities
        Tokens reserved per sequence (prompt + new tokens; default ``contexts``), which
        decide the placement.
    latency
        Read latency (cycles) of the measured efficiency (the runtime's memory answers in 2).
    card_bytes, max_slice_tokens
        Each card's memory (default unbounded) and the runtime's cap on a slice, for the
        placement.
    memory
        The memory model (default: the measured one at ``latency``;
        :data:`~tandem.host.hpu.cycles.COSIM_MEMORY` gives the golden backend's cycles).

    Returns
    -------
    dict
        ``{"hpu<i>": cycles}`` for the cards that got work: as the runtime does, two
        sub-batches (the first ``ceil(B/2)`` sequences and the rest; one when B = 1), per
        sub-batch and layer one call per card holding sequences of it (:func:`step_requests`),
        ``Hkv`` requests per slice; each call :func:`hpu_call_cycles`.
    """
    contexts = [int(c) for c in contexts]
    batch = len(contexts)
    placement = place_sequences(
        params,
        capacities or contexts,
        cards,
        heads=model.layers * model.kv_heads,
        card_bytes=card_bytes,
        max_slice_tokens=max_slice_tokens,
    )
    if memory is None:
        memory = Memory.measured(efficiency or load_efficiency(), latency)
    half = (batch + 1) // 2
    subbatches = [list(range(half)), list(range(half, batch))] if batch > 1 else [[0]]
    cycles: dict[str, float] = {}
    for members in subbatches:
        for card, requests in sorted(step_requests(contexts, placement, members).items()):
            lengths, appends, partials = (np.repeat(x, model.kv_heads) for x in zip(*requests))
            per_layer = hpu_call_cycles(
                params, lengths, append=appends, partial=partials, memory=memory
            )
            name = f"hpu{card}"
            cycles[name] = cycles.get(name, 0.0) + model.layers * per_layer
    return cycles


# --- the projection -------------------------------------------------------------------------
GIB = 1 << 30


def _roofline(bytes_, flops, bw, peak):
    mem, comp = bytes_ / bw, flops / peak
    return np.maximum(mem, comp), mem, comp


def _gpu_linear(model: ModelShape, gpu_bw: float, peak: float, batch: int):
    """Seconds of one layer's linear kernels and of embedding + LM head for ``batch`` rows."""
    w = model.dtype_bytes
    layer_bytes = model.layer_linear_params * w + batch * w * model.activation_elems
    layer, layer_mem, layer_comp = _roofline(
        layer_bytes, 2 * batch * model.layer_linear_params, gpu_bw, peak
    )
    head, _, _ = _roofline(
        model.vocab * model.hidden * w, 2 * batch * model.vocab * model.hidden, gpu_bw, peak
    )
    return float(layer), float(head), bool(layer_comp > layer_mem)


def pingpong_step(layers: int, subbatches, head=0.0):
    """Seconds of one decode step under sub-batch ping-pong (module docstring, "Sub-batch").

    Parameters
    ----------
    layers
        ``L``.
    subbatches
        Per sub-batch ``(g, pd, h, pu)``: seconds of its GPU work, descriptors down, card
        attention and results up for one layer (scalars or arrays over decode steps).
    head
        Seconds of the work after the last layer (LM head), not overlapped.

    Returns
    -------
    step, terms, exposed
        The step time (makespan of the task graph, event by event, plus ``head``), the
        candidates of the steady-state period ``T`` by name (``gpu``, ``hpu``, ``pcie down``,
        ``pcie up``, ``dependency chain``) and ``step - head - L * T`` (fill and drain).
    """
    stages = [[np.asarray(x, dtype=float) for x in s] for s in subbatches]
    free = [0.0] * 4  # when each resource (GPU, link down, cards, link up) is next free
    done = [0.0] * len(stages)  # when each sub-batch's last task ended
    for _ in range(layers):
        for i, durations in enumerate(stages):
            t = done[i]
            for r, d in enumerate(durations):
                t = np.maximum(t, free[r]) + d
                free[r] = t
            done[i] = t
    makespan = np.maximum.reduce(np.broadcast_arrays(*done))
    chains = [sum(s) for s in stages]
    terms = {
        name: sum(s[r] for s in stages)
        for r, name in enumerate(("gpu", "pcie down", "hpu", "pcie up"))
    }
    terms["dependency chain"] = np.maximum.reduce(np.broadcast_arrays(*chains))
    period = np.maximum.reduce(np.broadcast_arrays(*terms.values()))
    return makespan + head, terms, makespan - layers * period


def _link_seconds(card_bytes: list[np.ndarray], gpu: Gpu, board: Board, latency_s: float):
    total = sum(card_bytes)
    worst = np.max(np.stack(card_bytes), axis=0)
    gpu_link = gpu.pcie["bandwidth_gb_s"] * 1e9
    card_link = board.pcie["bandwidth_gb_s"] * 1e9
    return np.maximum(total / gpu_link, worst / card_link) + latency_s


def decode_projection(
    model: str | ModelShape,
    gpu: str | Gpu,
    batches,
    *,
    input_tokens: int = 1024,
    output_tokens: int = 1024,
    hpus: int = 0,
    hpu_board: str | Board = "u55c",
    engines: int | None = None,
    clock_mhz: float | None = None,
    latency: int = 100,
    pcie_latency_us: float = 0.0,
    kv_bits: int | None = None,
    placement: str = "channels",
) -> list[dict]:
    """Project decode throughput for the GPU alone and, with ``hpus > 0``, GPU + HPUs.

    Parameters
    ----------
    model, gpu, hpu_board
        Names in ``constraints/`` (or loaded objects).
    batches
        Batch sizes (sequences decoded together).
    input_tokens, output_tokens
        Prompt length (already in the KV cache) and tokens generated per sequence.
    hpus
        HPU cards beside the GPU (0: only the GPU-alone rows).
    engines
        hpu engines per card (default: HBM channels // read ports).
    clock_mhz
        Engine clock (default: the board's default clock).
    latency
        Read latency (cycles) of the measured stream efficiency to use.
    pcie_latency_us
        Fixed latency added to every transfer (default 0).
    kv_bits
        The cards' KV format: 16 (int16 rows) or 8 (int8 rows: half the bytes per token, at
        the accuracy docs/hpu.md's table gives); None: :class:`HpuParams`'s default.
    placement
        Where the cards' allocators put KV regions (:data:`KV_PLACEMENTS`): ``"channels"``
        (the runtime's default) or ``"contiguous"``.

    Returns
    -------
    list of dict
        One row per (system, batch); see :mod:`tandem.host.system.perf` and ``docs/perf.md``.
    """
    m = load_model(model) if isinstance(model, str) else model
    g = load_gpu(gpu) if isinstance(gpu, str) else gpu
    batches = [int(b) for b in batches]
    if not batches or min(batches) < 1:
        raise UserError(f"batch sizes must be positive integers, not {batches}")
    if input_tokens < 1 or output_tokens < 1:
        raise UserError(
            f"--input and --output must be at least 1, not {input_tokens} and {output_tokens}"
        )
    capacity_tokens = input_tokens + output_tokens
    if capacity_tokens > m.max_context:
        raise UserError(
            f"--input + --output = {capacity_tokens} exceeds {m.name}'s context of "
            f"{m.max_context} tokens"
        )
    if hpus < 0:
        raise UserError(f"--hpus must be 0 or more, not {hpus}")
    if not pcie_latency_us >= 0 or math.isinf(pcie_latency_us):
        raise UserError(f"--pcie-latency-us must be 0 or more, not {pcie_latency_us}")
    if clock_mhz is not None and not (clock_mhz > 0 and math.isfinite(clock_mhz)):
        raise UserError(f"--hpu-clock-mhz must be positive, not {clock_mhz}")
    peak = (g.fp16_dense_tflops if m.dtype_bytes == 2 else g.bf16_dense_tflops) * 1e12
    gpu_bw = g.memory_bandwidth_gb_s * 1e9
    gpu_capacity = g.memory_gib * GIB
    contexts = input_tokens + 1 + np.arange(output_tokens)  # t of every decode step

    rows = []
    for b in batches:
        rows.append(_gpu_alone(m, g, b, contexts, input_tokens, output_tokens, peak, gpu_bw))
    if hpus == 0:
        return rows

    board = load_board(hpu_board) if isinstance(hpu_board, str) else hpu_board
    eff = load_efficiency()
    if latency not in eff.latencies:
        raise UserError(
            f"--hpu-latency {latency}: the stream efficiency was measured at read latencies "
            f"{', '.join(map(str, eff.latencies))} only"
        )
    params = hpu_params_for_model(m, max_seq_len=max(capacity_tokens, 1))
    if kv_bits is None:
        kv_bits = params.kv_bits
    if kv_bits not in (8, 16):
        raise UserError(f"--kv-bits must be 8 or 16, not {kv_bits}")
    if placement not in KV_PLACEMENTS:
        raise UserError(f"--placement must be one of {', '.join(KV_PLACEMENTS)}, not {placement!r}")
    if kv_bits != params.kv_bits:
        params = hpu_params_for_model(
            m,
            max_seq_len=max(capacity_tokens, 1),
            kv_bits=kv_bits,
            lanes=params.mem_data_bits // kv_bits,
        )
    chosen = best_engine(params, board, clock_mhz)
    params = chosen["params"]
    hbm = board.memory[0]
    fit = engine_fit(params, board)
    port_engines = max(1, int(hbm["channels"]) // params.read_ports)
    if engines is None:
        # One engine per pair of HBM ports, as many as the card's resources hold.
        engines, limited_by = port_engines, "HBM ports"
        if fit["checked"] and fit["engines_fit"] < engines:
            engines, limited_by = max(1, fit["engines_fit"]), fit["bound_by"].upper()
    else:
        limited_by = "--engines"
    if engines < 1:
        raise UserError(f"--engines must be at least 1, not {engines}")
    if fit["checked"]:
        fit["fits"] = engines <= fit["engines_fit"]
    if clock_mhz is not None and not clock_mhz > 0:
        raise UserError(f"--hpu-clock-mhz must be positive, not {clock_mhz}")
    timing = engine_clock(params, board, clock_mhz)
    clock = timing["clock_mhz"] * 1e6
    hw = {
        "board": board.name,
        "cards": hpus,
        "engines_per_card": engines,
        "engines_limited_by": limited_by,
        "resources": fit,
        "clock_mhz": clock / 1e6,
        # --hpu-clock-mhz, else the synthesized configuration's timing estimate (engine_clock)
        "clock_source": "--hpu-clock-mhz" if clock_mhz is not None else timing["clock_source"],
        "fmax_mhz": timing["fmax_mhz"],
        "hbm_gb_s": float(hbm["bandwidth_gb_s"]),
        "hbm_channels": int(hbm["channels"]),
        "sustained_fraction": float(hbm["sustained_fraction"]),
        "params": params.to_dict(),
        "config_choice": chosen["choice"],
        "config_candidates": chosen["candidates"],
        "efficiency": {
            "source": eff.source,
            "command": eff.command,
            "simulator": eff.simulator,
            "reference_params": eff.params,
            "read_latency_cycles": latency,
            "per": "call: one request of the busiest engine's read beats",
        },
        "kv_format": f"int{params.kv_bits} rows + binary16 scale per token (KvLayout)",
        "kv_bytes_per_token": params.layout.token_bytes,
    }
    for b in batches:
        rows.append(
            _gpu_hpu(
                m, g, board, params, eff, hw, b, contexts, input_tokens, output_tokens,
                peak=peak, gpu_bw=gpu_bw, gpu_capacity=gpu_capacity, hpus=hpus,
                engines=engines, clock=clock, latency=latency,
                pcie_latency_s=pcie_latency_us * 1e-6, kv_placement=placement,
            )
        )  # fmt: skip
    return rows


def _common(m: ModelShape, g: Gpu, system: str, b: int, tin: int, tout: int) -> dict:
    return {
        "system": system,
        "model": m.name,
        "gpu": g.name,
        "batch": b,
        "input": tin,
        "output": tout,
    }


def _finish(row, m, b, contexts, step_s, peak, power_w):
    tokens = b * len(contexts)
    total = float(np.sum(step_s))
    flops = float(np.sum(m.linear_flops(b) + b * m.attention_flops(contexts)))
    tps = tokens / total
    row.update(
        tokens_per_s=tps,
        step_ms=1e3 * total / len(contexts),
        mfu=flops / (total * peak),
        power_w=power_w,
        tokens_per_s_per_w=tps / power_w if power_w else None,
    )
    return row


def _oom(row, reason):
    row.update(
        oom=True,
        oom_reason=reason,
        tokens_per_s=None,
        step_ms=None,
        mfu=None,
        tokens_per_s_per_w=None,
        bottleneck=None,
        split_ms=None,
    )
    return row


def _gpu_rates(g: Gpu, gpu_bw: float, peak: float) -> tuple[float, float]:
    """The bandwidth and FLOP rate the GPU's decode kernels reach: the data sheet's times the
    GPU's ``decode_efficiency`` (a production stack's measured decode over this roofline)."""
    return gpu_bw * g.decode_efficiency, peak * g.decode_efficiency


def _gpu_alone(m, g, b, contexts, tin, tout, peak, gpu_bw):
    row = _common(m, g, "gpu", b, tin, tout)
    used = m.weight_bytes + b * (tin + tout) * m.kv_bytes_per_token
    capacity = g.memory_gib * GIB
    row["memory"] = {"gpu_used_gib": used / GIB, "gpu_capacity_gib": g.memory_gib}
    if used > capacity:
        return _oom(
            row,
            f"weights {m.weight_bytes / GIB:.1f} GiB + KV {b} x {tin + tout} tokens "
            f"{(used - m.weight_bytes) / GIB:.1f} GiB > {g.memory_gib} GiB of {g.name}",
        )
    gpu_bw, flops = _gpu_rates(g, gpu_bw, peak)
    layer, head, compute_bound = _gpu_linear(m, gpu_bw, flops, b)
    w = m.dtype_bytes
    attn, _, _ = _roofline(
        b * 2 * contexts * m.kv_heads * m.head_dim * w,
        b * 4 * m.heads * m.head_dim * contexts,
        gpu_bw,
        flops,
    )
    step = head + m.layers * (layer + attn)
    linear_ms = 1e3 * (head + m.layers * layer)
    attn_ms = 1e3 * m.layers * float(np.mean(attn))
    row["oom"] = False
    row["split_ms"] = {"gpu_linear": linear_ms, "gpu_attention": attn_ms, "pcie": 0.0, "hpu": 0.0}
    if attn_ms > linear_ms:
        row["bottleneck"] = "gpu attention (KV reads)"
    else:
        row["bottleneck"] = "gpu compute (GEMMs)" if compute_bound else "gpu weight reads"
    return _finish(row, m, b, contexts, step, peak, g.tdp_w)


def _gpu_hpu(
    m, g, board, params, eff, hw, b, contexts, tin, tout, *, peak, gpu_bw, gpu_capacity,
    hpus, engines, clock, latency, pcie_latency_s, kv_placement="channels",
):  # fmt: skip
    row = _common(m, g, "gpu+hpu", b, tin, tout)
    row["hpus"] = hpus
    row["hpu"] = hw
    per_card = -(-b // hpus)
    region = params.layout.region_bytes(tin + tout)
    card_used = per_card * m.layers * m.kv_heads * region
    card_capacity = float(board.memory[0]["capacity_gib"]) * GIB
    row["memory"] = {
        "gpu_used_gib": m.weight_bytes / GIB,
        "gpu_capacity_gib": g.memory_gib,
        "hpu_used_gib_per_card": card_used / GIB,
        "hpu_capacity_gib_per_card": card_capacity / GIB,
    }
    if m.weight_bytes > gpu_capacity:
        return _oom(row, f"weights {m.weight_bytes / GIB:.1f} GiB > {g.memory_gib} GiB of {g.name}")
    if card_used > card_capacity:
        return _oom(
            row,
            f"KV of {per_card} sequences x {tin + tout} tokens per card "
            f"{card_used / GIB:.1f} GiB > {card_capacity / GIB:.0f} GiB of {board.name} HBM",
        )
    half = (b + 1) // 2
    sizes = [half, b - half] if b > 1 else [1]
    gpu_bw, flops = _gpu_rates(g, gpu_bw, peak)
    desc, reads, _ = request_beats(params, contexts)
    busy = request_cycles(params, contexts)
    # What the engines can draw from the pseudo-channels each call's regions lie in: a port
    # one beat a cycle, a channel its sustained rate (call_channel_rates).
    kv = card_kv_bandwidth(params, board, 1.0, clock / 1e6, engines)
    fill_s = eff.fill_cycles(latency) / clock
    write_bytes = 2 * (params.row_elems + 2)
    result_bytes = m.gqa_group * m.head_dim * RESULT_ELEM_BYTES
    # The runtime's placement: equal sequences that fit go round-robin, whole.
    placement = place_sequences(
        params, [tin + tout] * b, hpus, heads=m.layers * m.kv_heads, card_bytes=card_capacity
    )
    subbatches = [range(f, f + n) for f, n in zip(np.cumsum([0, *sizes]), sizes)]
    rates = call_channel_rates(
        params, board, placement, subbatches, layers=m.layers, kv_heads=m.kv_heads,
        policy=kv_placement, port_gb_s=kv["port_gb_s"], ports=engines * params.read_ports,
    )  # fmt: skip
    parts, efficiencies = [], []
    for (first, size), rate in zip(zip(np.cumsum([0, *sizes]), sizes), rates):
        hbm_bw = rate["gb_s"] * 1e9
        # Sequences of this sub-batch on each card, requests = sequences x Hkv.
        on_card = [0] * hpus
        for b_ in range(first, first + size):
            for s in placement[b_]:
                on_card[s.card] += m.kv_heads
        busiest = max(on_card)
        e = eff.efficiency(-(-busiest // engines) * reads, latency)
        efficiencies.append(e)
        bw_s = busiest * (2 * reads * params.beat_bytes + write_bytes) / (hbm_bw * e)
        comp_s = busiest * busy / (engines * clock)
        hpu_s = np.maximum(bw_s, comp_s) + fill_s
        down = _link_seconds(
            [np.full(len(contexts), n * desc[0] * params.beat_bytes) for n in on_card],
            g, board, pcie_latency_s,
        )  # fmt: skip
        up = _link_seconds(
            [np.full(len(contexts), float(n * result_bytes)) for n in on_card],
            g, board, pcie_latency_s,
        )  # fmt: skip
        layer, _, compute_bound = _gpu_linear(m, gpu_bw, flops, size)
        parts.append(
            {"g": layer, "pd": down, "h": hpu_s, "pu": up, "bw": bw_s, "comp": comp_s,
             "compute_bound": compute_bound}
        )  # fmt: skip
    _, head, _ = _gpu_linear(m, gpu_bw, flops, b)
    step, terms, exposed = pingpong_step(
        m.layers, [(p["g"] + 0 * contexts, p["pd"], p["h"], p["pu"]) for p in parts], head
    )
    stack = np.stack(list(terms.values()))
    first = parts[0]
    # The term that sets T most often over the run names the bottleneck.
    winner = list(terms)[int(np.bincount(np.argmax(stack, axis=0), minlength=len(terms)).argmax())]
    card_bound = (
        "bandwidth"
        if np.sum(sum(p["bw"] for p in parts)) >= np.sum(sum(p["comp"] for p in parts))
        else "compute"
    )
    if winner == "gpu":
        winner = "gpu compute (GEMMs)" if first["compute_bound"] else "gpu weight reads"
    elif winner == "hpu":
        winner = f"hpu {card_bound}"
    row["oom"] = False
    row["bottleneck"] = winner
    row["hpu_bound"] = card_bound
    row["hpu_efficiency_mean"] = float(np.mean(efficiencies))
    row["hpu_kv"] = {  # the card's KV bandwidth at this batch's mean stream efficiency
        **card_kv_bandwidth(params, board, row["hpu_efficiency_mean"], clock / 1e6, engines),
        "clock_source": hw["clock_source"],
    }
    hbm_gb_s = float(board.memory[0]["bandwidth_gb_s"])
    row["hpu_channels"] = {  # what the calls' placement really draws, per sub-batch
        "placement": kv_placement,
        "calls": rates,
        "hbm_fraction": [r["gb_s"] * row["hpu_efficiency_mean"] / hbm_gb_s for r in rates],
    }
    ms = 1e3 * m.layers
    row["split_ms"] = {
        "gpu_linear": ms * float(np.mean(terms["gpu"])) + 1e3 * head,
        "gpu_attention": 0.0,
        "pcie": ms * float(np.mean(terms["pcie down"] + terms["pcie up"])),
        "hpu": ms * float(np.mean(terms["hpu"])),
        "not_overlapped": 1e3 * float(np.mean(exposed + head)),
    }
    power = g.tdp_w + hpus * board.power_w if board.power_w is not None else None
    return _finish(row, m, b, contexts, step, peak, power)


def paper_comparison(rows: list[dict]) -> dict:
    """The model's speed-up and tokens/s/W ratio next to the HPU paper's claims.

    ``speedup`` = best GPU+HPU tokens/s over the best GPU-alone tokens/s among the batches
    that fit (the paper compares against the GPU at its largest batch that does not run out of
    memory); ``tokens_per_s_per_w_ratio`` likewise for tokens/s/W.
    """
    gpu = [r for r in rows if r["system"] == "gpu" and not r["oom"]]
    hpu = [r for r in rows if r["system"] == "gpu+hpu" and not r["oom"]]
    if not gpu or not hpu:
        return {}
    best_gpu = max(gpu, key=lambda r: r["tokens_per_s"])
    best_hpu = max(hpu, key=lambda r: r["tokens_per_s"])
    out = {
        "gpu_best_batch": best_gpu["batch"],
        "gpu_oom_batches": [r["batch"] for r in rows if r["system"] == "gpu" and r["oom"]],
        "hpu_best_batch": best_hpu["batch"],
        "speedup": best_hpu["tokens_per_s"] / best_gpu["tokens_per_s"],
        "paper_speedup": PAPER["speedup"],
        "engines_fit": best_hpu["hpu"]["resources"].get("fits"),
    }
    if best_hpu["tokens_per_s_per_w"] and best_gpu["tokens_per_s_per_w"]:
        eff_gpu = max(r["tokens_per_s_per_w"] for r in gpu)
        eff_hpu = max(r["tokens_per_s_per_w"] for r in hpu)
        out["tokens_per_s_per_w_ratio"] = eff_hpu / eff_gpu
        out["paper_tokens_per_s_per_w_ratio"] = PAPER["tokens_per_s_per_w_ratio"]
    return out


# --- command line (``tandem perf decode``) --------------------------------------------------
def _batches(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(
            f"--batch must be comma-separated integers like 1,8,16, not {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise UserError(f"--batch must list positive integers, not {text!r}")
    return sorted(set(values))


def add_arguments(parser) -> None:
    """Options of ``tandem perf decode``."""
    from tandem.boards import board_names, gpu_names

    parser.add_argument("--model", required=True, help=f"model shape: {', '.join(model_names())}")
    parser.add_argument("--gpu", required=True, help=f"GPU: {', '.join(gpu_names())}")
    parser.add_argument("--hpus", type=int, default=0, help="HPU cards beside the GPU (default 0)")
    parser.add_argument(
        "--hpu-board",
        default="u55c",
        help=f"board of the HPU cards (default u55c): {', '.join(board_names())}",
    )
    parser.add_argument(
        "--batch", default="1,8,16,32,64", help="comma-separated batch sizes (default 1,8,16,32,64)"
    )
    parser.add_argument("--input", type=int, default=1024, help="prompt tokens (default 1024)")
    parser.add_argument("--output", type=int, default=1024, help="generated tokens (default 1024)")
    parser.add_argument(
        "--engines", type=int, help="hpu engines per card (default: HBM channels // read ports)"
    )
    parser.add_argument(
        "--hpu-clock-mhz", type=float, help="engine clock (default: the board's default clock)"
    )
    parser.add_argument(
        "--hpu-latency",
        type=int,
        default=100,
        help="read latency (cycles) of the measured stream efficiency to use (default 100)",
    )
    parser.add_argument(
        "--pcie-latency-us", type=float, default=0.0, help="fixed latency per transfer (default 0)"
    )
    parser.add_argument(
        "--kv-bits",
        type=int,
        default=HpuParams().kv_bits,
        choices=(8, 16),
        help="the cards' KV format: int16 (default) or int8 rows (half the bytes per token, "
        "about 25x the attention error)",
    )
    parser.add_argument(
        "--placement",
        choices=KV_PLACEMENTS,
        default="channels",
        help="where the cards put KV regions (as `tandem cosim decode --placement`): whole "
        "inside pseudo-channels, spread over all of them (channels, the default), or a "
        "sequence's regions one after another (contiguous)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of rows")
    parser.add_argument("--plot", metavar="FILE", help="draw tokens/s against batch (PNG)")


def _fmt(value, spec: str, suffix: str = "") -> str:
    width = int(spec.split(".")[0] or 0) + len(suffix)
    return "-".rjust(width) if value is None else format(value, spec) + suffix


def table(rows: list[dict]) -> str:
    """The rows as a short text table, with the speed-up where both systems fit."""
    gpu = {r["batch"]: r for r in rows if r["system"] == "gpu"}
    head = (
        f"{'system':<8} {'batch':>5} {'tokens/s':>9} {'step ms':>8} {'gpu lin':>8} "
        f"{'gpu attn':>8} {'pcie':>6} {'hpu':>7} {'MFU':>6} {'tok/s/W':>8} {'speedup':>7}  "
        "bottleneck / memory"
    )
    lines = [head]
    for r in rows:
        s = r["split_ms"] or {}
        base = gpu.get(r["batch"])
        speedup = None
        if r["system"] != "gpu" and base and not base["oom"] and not r["oom"]:
            speedup = r["tokens_per_s"] / base["tokens_per_s"]
        what = f"OOM: {r['oom_reason']}" if r["oom"] else r["bottleneck"]
        if r.get("hpu_bound") and not r["oom"]:
            what += f" (cards {r['hpu_bound']}-bound)"
        lines.append(
            f"{r['system']:<8} {r['batch']:>5} {_fmt(r['tokens_per_s'], '9.1f')} "
            f"{_fmt(r['step_ms'], '8.2f')} {_fmt(s.get('gpu_linear'), '8.2f')} "
            f"{_fmt(s.get('gpu_attention'), '8.2f')} {_fmt(s.get('pcie'), '6.2f')} "
            f"{_fmt(s.get('hpu'), '7.2f')} {_fmt(r['mfu'], '6.3f')} "
            f"{_fmt(r['tokens_per_s_per_w'], '8.3f')} {_fmt(speedup, '6.2f', 'x')}  {what}"
        )
    return "\n".join(lines)


def decode_figure(rows: list[dict]):
    """Tokens/s against batch for each system, as a matplotlib Figure.

    A batch that runs out of memory has no tokens/s: it is marked ``x`` in a strip of its own
    above the plot, at its batch, never drawn as 0 (or any) tokens/s.
    """
    from tandem.plots import log2_axis, subplots

    systems = [
        (system, marker, f"C{level}", [r for r in rows if r["system"] == system])
        for level, (system, marker) in enumerate((("gpu", "o"), ("gpu+hpu", "s")))
    ]
    systems = [(s, m, c, mine) for s, m, c, mine in systems if mine]
    names = {s: s if s == "gpu" else f"gpu + {mine[0]['hpus']} hpu" for s, _, _, mine in systems}
    short = [(s, c, mine) for s, _, c, mine in systems if any(r["oom"] for r in mine)]
    if short:
        fig, (strip, ax) = subplots(
            2, figsize=(6.4, 4.4), sharex=True, height_ratios=(0.5 + 0.4 * len(short), 7)
        )
        for level, (_, color, mine) in enumerate(short):
            oom = [r["batch"] for r in mine if r["oom"]]
            strip.plot(oom, [level] * len(oom), "x", color=color, markersize=8, mew=2)
        strip.set_ylim(-0.7, len(short) - 0.3)
        strip.set_yticks(range(len(short)), [names[s] for s, _, _ in short], fontsize=8)
        strip.tick_params(axis="x", labelbottom=False)
        strip.set_title("out of memory (no tokens/s)", fontsize=8, loc="left")
        strip.grid(True, axis="x", alpha=0.3)
    else:
        fig, ax = subplots(figsize=(6.4, 4.4))
    for system, marker, color, mine in systems:
        fits = [(r["batch"], r["tokens_per_s"]) for r in mine if not r["oom"]]
        if fits:
            ax.plot(*zip(*fits, strict=True), marker=marker, color=color, label=names[system])
    first = rows[0]
    batches = [r["batch"] for r in rows]
    log2_axis(ax, batches)
    ax.set_xlim(min(batches) / 1.4, max(batches) * 1.4)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch (sequences decoded together)")
    ax.set_ylabel("decode throughput (tokens/s)")
    fig.suptitle(
        f"{first['model']} on {first['gpu']}, {first['input']} in / {first['output']} out "
        "(performance model)",
        fontsize=11,
    )
    ax.grid(True, alpha=0.3)
    if ax.get_lines():
        ax.legend(loc="upper left", fontsize=8)
    return fig


def plot(rows: list[dict], path) -> None:
    """Draw :func:`decode_figure` to ``path`` (PNG, byte-reproducible: no metadata)."""
    import os
    from pathlib import Path

    from tandem.plots import save_png

    path = Path(path)
    fig = decode_figure(rows)
    tmp = path.with_name(path.name + ".tmp")
    try:
        save_png(fig, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write plot {path}: {exc.strerror}") from None


def _engines_text(hpu: dict) -> str:
    fit = hpu["resources"]
    text = f"{hpu['engines_per_card']} per card, limited by {hpu['engines_limited_by']}"
    if hpu.get("config_choice"):
        text = f"{hpu['config_choice']}; {text}"
    if not fit["checked"]:
        return text + f"; resources not checked: {fit['reason']}"
    per = fit["per_engine"]
    text += (
        f"; one engine uses {per['lut']:,} LUT, {per['ff']:,} FF, {per['dsp']:,} DSP, so "
        f"{fit['engines_fit']} fit in {fit['share']:.0%} of the card ({fit['bound_by'].upper()}"
        f"-bound; {fit['synthesized']})"
    )
    if not fit["fits"]:
        text += f"; WARNING: {hpu['engines_per_card']} engines do not fit"
    return text


def _describe(rows: list[dict]) -> str:
    hpu = next((r["hpu"] for r in rows if r["system"] == "gpu+hpu"), None)
    first = rows[0]
    g = load_gpu(first["gpu"])
    text = (
        f"{first['model']} decode, {first['input']} in / {first['output']} out, on {g.name} "
        f"({g.memory_gib} GiB, {g.memory_bandwidth_gb_s} GB/s, {g.fp16_dense_tflops} TFLOPS)"
    )
    if hpu:
        e = hpu["efficiency"]
        p = hpu["params"]
        mean = np.mean([r["hpu_efficiency_mean"] for r in rows if r.get("hpu_efficiency_mean")])
        text += (
            f"\n+ {hpu['cards']} x {hpu['board']}: {hpu['engines_per_card']} engines/card at "
            f"{hpu['clock_mhz']:g} MHz (lanes {p['lanes']}, head_dim {p['head_dim']}, "
            f"G {p['gqa_group']}), HBM {hpu['hbm_gb_s']:g} GB/s x stream efficiency "
            f"{mean:.3f} (mean)\n  engines: {_engines_text(hpu)}"
            f"\n  efficiency: RTL, read latency {e['read_latency_cycles']}, "
            f"per call, measured with lanes {e['reference_params']['lanes']} head_dim "
            f"{e['reference_params']['head_dim']} G {e['reference_params']['gqa_group']} "
            f"({e['simulator']}; {e['source']}; `{e['command']}`)"
        )
        calls = [c for r in rows if r.get("hpu_channels") for c in r["hpu_channels"]["calls"]]
        if calls:
            placement = next(r for r in rows if r.get("hpu_channels"))["hpu_channels"]["placement"]
            touched = [c["touched"] for c in calls]
            rates = [c["gb_s"] for c in calls]
            text += (
                f"\n  KV placement {placement}: a call reads {min(touched):g}-{max(touched):g} of "
                f"{hpu['hbm_channels']} pseudo-channels, {min(rates):.0f}-{max(rates):.0f} GB/s "
                f"(a channel sustains at most "
                f"{hpu['hbm_gb_s'] * hpu['sustained_fraction'] / hpu['hbm_channels']:.2f} GB/s)"
            )
    return text


#: Most HPU cards beside one GPU: a dual-socket host has at most 256 PCIe lanes (16 x16 slots);
#: 64 leaves room for PCIe switches.
MAX_HPUS = 64
#: Largest batch projected: the GPU + HPU rows place every sequence on a card one by one
#: (about 80 us each: 65536 take 5 s).
MAX_BATCH = 1 << 16
#: Longest fixed latency per transfer (us): a PCIe completion times out after at most 64 s
#: (PCI Express Base Specification, completion timeout range D).
MAX_PCIE_LATENCY_US = 64e6


def check_arguments(args) -> list[int]:
    """Every flag of ``tandem perf decode``, whether ``--hpus`` uses it or not, before any work;
    returns the batch sizes."""
    from tandem.args import MAX_CLOCK_MHZ, integer, output_file, real
    from tandem.boards import board_names

    load_model(args.model)
    load_gpu(args.gpu)
    board = load_board(args.hpu_board)
    integer(args.hpus, "--hpus", 0, MAX_HPUS, " (cards beside one GPU)")
    batches = _batches(args.batch)
    integer(max(batches), "--batch", 1, MAX_BATCH)
    integer(args.input, "--input", 1)
    integer(args.output, "--output", 1)
    if args.engines is not None:
        dsp = board.capacity("dsp") or max(
            load_board(name).capacity("dsp") or 0 for name in board_names()
        )
        integer(args.engines, "--engines", 1, dsp, f" (DSP slices of {board.name})")
    if args.hpu_clock_mhz is not None:
        real(args.hpu_clock_mhz, "--hpu-clock-mhz", 0.0, MAX_CLOCK_MHZ, above=True)
    latencies = load_efficiency().latencies
    if args.hpu_latency not in latencies:
        raise UserError(
            f"--hpu-latency {args.hpu_latency}: the stream efficiency was measured at read "
            f"latencies {', '.join(map(str, latencies))} only"
        )
    real(args.pcie_latency_us, "--pcie-latency-us", 0.0, MAX_PCIE_LATENCY_US, why=" (64 s)")
    if args.plot is not None:
        output_file(args.plot, "--plot")
    if args.hpus == 0:  # the GPU alone: a card's flag would be ignored, so it is refused
        card_flags = {
            "--hpu-board": args.hpu_board != "u55c",
            "--engines": args.engines is not None,
            "--hpu-clock-mhz": args.hpu_clock_mhz is not None,
            "--hpu-latency": args.hpu_latency != 100,
            "--pcie-latency-us": args.pcie_latency_us != 0.0,
            "--kv-bits": args.kv_bits != HpuParams().kv_bits,
            "--placement": args.placement != "channels",
        }
        given = [flag for flag, set_ in card_flags.items() if set_]
        if given:
            raise UserError(f"{', '.join(given)} describe HPU cards: give --hpus N (at least 1)")
    return batches


def run(args) -> int:
    """``tandem perf decode``: print the projection (table or JSON), draw the plot."""
    import json

    rows = decode_projection(
        args.model,
        args.gpu,
        check_arguments(args),
        input_tokens=args.input,
        output_tokens=args.output,
        hpus=args.hpus,
        hpu_board=args.hpu_board,
        engines=args.engines,
        clock_mhz=args.hpu_clock_mhz,
        latency=args.hpu_latency,
        pcie_latency_us=args.pcie_latency_us,
        kv_bits=args.kv_bits,
        placement=args.placement,
    )
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(_describe(rows))
    print(table(rows))
    cmp = paper_comparison(rows)
    if cmp:
        print(
            f"best gpu+hpu (batch {cmp['hpu_best_batch']}) / best gpu alone (batch "
            f"{cmp['gpu_best_batch']}): {cmp['speedup']:.2f}x tokens/s"
            + (
                f", {cmp['tokens_per_s_per_w_ratio']:.2f}x tokens/s/W"
                if "tokens_per_s_per_w_ratio" in cmp
                else ""
            )
        )
        same = all(
            str(rows[0].get(k, "")) == str(PAPER[k]) for k in ("model", "gpu", "input", "output")
        )
        hpu_rows = [r for r in rows if r["system"] == "gpu+hpu"]
        if same and hpu_rows and hpu_rows[0]["hpus"] == PAPER["hpus"]:
            print(
                f"HPU paper (arXiv 2504.16112, measured): up to {PAPER['speedup']}x tokens/s, "
                f"{PAPER['tokens_per_s_per_w_ratio']}x tokens/s/W; the GPU alone runs out of "
                "memory at large batches"
            )
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
