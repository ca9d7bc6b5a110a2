"""``hpu-card``: several ``hpu`` engines behind one descriptor stream — parameters, result
format, routing and golden model.

The card (:class:`tandem.hw.hpu.card.HpuCard`) takes the descriptors of many head requests on
one stream and sends each to the engine that owns its KV base address: engine ``e`` owns a
contiguous run of HBM pseudo-channels (:func:`tandem.mappings.hpu.channels.engine_bases`), and
its AXI ports reach only those. Each engine computes exactly what a lone ``hpu`` engine does
(:func:`tandem.host.hpu.hpu_golden`); the card merges their result beats into one stream,
each beat tagged with its engine (:func:`card_result_fields`).

Order of results: each engine's results come in the order of its descriptors, and a request's
result beats are contiguous on ``result_o``; between engines the card takes, at each request
boundary, the next engine (round robin) that has a result beat ready. That interleaving
depends on timing, so :func:`hpu_card_golden` returns one list per engine and a scoreboard
compares each engine's results in order.
"""

from collections import deque
from dataclasses import dataclass, fields
from functools import cached_property
from itertools import pairwise
from typing import NamedTuple

import numpy as np
from tandem.host.backend.backend import ArrayMemory, Call
from tandem.host.common import bits
from tandem.mappings.hpu.channels import ChannelGeometry, engine_bases, engine_of
from tandem.mappings.hpu.kv_layout import BLOCK_BYTES, PAGE_TOKENS, KvLayout

from tandem.config import ParamError, param

from .codec import HpuBatch, HpuRequest, HpuResults, result_fields
from .golden_backend import GoldenHpuBackend
from .params import HpuParams

__all__ = [
    "CardCycles",
    "GoldenCardBackend",
    "HpuCardParams",
    "card_call_cycles",
    "card_result_fields",
    "card_result_layout",
    "check_card_batch",
    "decode_card_result",
    "engine_channels",
    "hpu_card_golden",
    "route",
    "split_card_results",
]


@dataclass(frozen=True)
class HpuCardParams(HpuParams):
    """An ``hpu-card``: ``engines`` identical ``hpu`` engines and the card memory they share.

    Every :class:`HpuParams` field sets each engine (:attr:`engine` is that parameter set);
    ``memory_bytes`` and ``channels`` give the card's pseudo-channels
    (:meth:`ChannelGeometry.scaled`, as :class:`~tandem.host.hpu.device.HpuDevice` builds
    them), which decide the engine a request goes to.

    The engines store their KV cache in the split layout: each engine owns ``2 k`` channels
    (``k = channels / (2 engines)``), the K spans of its regions in the first ``k`` and the
    V spans in the last ``k``, so its K port and its V port stream from channels of their
    own. ``value_offset`` is therefore ``k`` channels (:attr:`card_value_offset`); 0, the
    default, means that.
    """

    design = "hpu-card"

    engines: int = param(
        2,
        "hpu engines on the card, each owning a contiguous run of the pseudo-channels (a "
        "U55C fits 16: one per pair of channels)",
        min=1,
        max=32,
    )
    channels: int = param(
        32, "HBM pseudo-channels the card memory is split into (the U55C's 32)", min=1, max=64
    )
    memory_bytes: int = param(
        64 << 20,
        "bytes of card memory the channels split, at most 2**addr_bits (default: HpuDevice's "
        "default memory; the U55C's 16 GiB needs addr_bits 34)",
        min=BLOCK_BYTES,
    )

    def check(self) -> None:
        # The card's own fields first: they decide the value_offset the engines check.
        full = self.channels * BLOCK_BYTES
        if self.memory_bytes % full or self.memory_bytes > 1 << self.addr_bits:
            raise ParamError(
                "memory_bytes",
                f"memory_bytes must be a multiple of {full} (64 bytes per channel, every "
                f"channel the same size) of at most 2**addr_bits ({1 << self.addr_bits}), "
                f"not {self.memory_bytes!r}",
            )
        if self.channels % (2 * self.engines):
            raise ParamError(
                "channels",
                f"channels must be a multiple of 2 * engines ({2 * self.engines}: each engine's "
                f"K port and V port own as many channels), not {self.channels!r}",
            )
        if self.value_offset not in (0, self.card_value_offset):
            raise ParamError(
                "value_offset",
                f"value_offset of a card is half an engine's channels ({self.card_value_offset} "
                f"bytes; 0 says the same), not {self.value_offset!r}",
            )
        span = KvLayout(self.head_dim, self.kv_bits // 8).region_bytes(self.max_seq_len) // 2
        if self.card_value_offset < span:
            raise ParamError(
                "memory_bytes",
                f"memory_bytes must give each engine's K channels room for one region of "
                f"max_seq_len tokens ({span} bytes; they have {self.card_value_offset}), "
                f"not {self.memory_bytes!r}",
            )
        super().check()

    @property
    def card_value_offset(self) -> int:
        """Bytes from a K span to its V span: half of an engine's channels."""
        return self.channels // (2 * self.engines) * (self.memory_bytes // self.channels)

    @cached_property
    def engine(self) -> HpuParams:
        """The parameters of each engine (every field but the card's own; the split layout's
        ``value_offset``)."""
        own = {"engines", "channels", "memory_bytes"}
        fields = {k: v for k, v in self.to_dict().items() if k not in own}
        return HpuParams(**{**fields, "value_offset": self.card_value_offset})

    @property
    def layout(self):
        """The engines' KV layout (split: :attr:`card_value_offset`)."""
        return self.engine.layout

    @cached_property
    def geometry(self) -> ChannelGeometry:
        """The card memory's pseudo-channels."""
        return ChannelGeometry.scaled(self.memory_bytes, self.channels)

    @property
    def engine_bases(self) -> tuple[int, ...]:
        """First address of each engine's channels (:func:`engine_bases`)."""
        return engine_bases(self.geometry, self.engines)

    @property
    def engine_bits(self) -> int:
        """Width of a result beat's ``engine`` field (at least 1)."""
        return max(1, (self.engines - 1).bit_length())


def route(params: HpuCardParams, bases) -> np.ndarray:
    """The engine (int64, same shape) each KV base address in ``bases`` goes to."""
    return engine_of(params.geometry, params.engines, bases)


def engine_channels(params: HpuCardParams) -> list[range]:
    """The pseudo-channels each engine's ports reach: engine ``e``'s, from its first address
    (:attr:`HpuCardParams.engine_bases`) up to the next engine's (its ports' HBM homes)."""
    channel = params.geometry.channel_bytes
    bounds = (*params.engine_bases, params.memory_bytes)
    return [range(lo // channel, -(-hi // channel)) for lo, hi in pairwise(bounds)]


def split_card_results(
    params: HpuCardParams, bases, payloads
) -> tuple[list[list[list[int]]], list[int]]:
    """A transfer's result beats, as the card emitted them, back to its requests.

    Parameters
    ----------
    params
        The card.
    bases
        Each request's KV base address, in descriptor order (they decide the engines).
    payloads
        The ``result_o`` payloads in the order they came out.

    Returns
    -------
    tuple
        Per request in descriptor order, its beats' data words; and the indices of the
        requests whose result carried the ``error`` flag. Each engine's results come in its
        descriptors' order and a request's beats are contiguous (the merger's rule), so a beat
        belongs to the oldest unfinished request routed to its engine.

    Raises ``ValueError`` for a beat from an engine with no unfinished request, or when a
    request's last beat is missing.
    """
    waiting = [deque() for _ in range(params.engines)]
    for index, engine in enumerate(route(params, list(bases)).tolist()):
        waiting[engine].append(index)
    results: list[list[list[int]]] = [[] for _ in bases]
    failed = []
    for payload in payloads:
        words, _tag, last, engine, error = decode_card_result(params, payload)
        if not waiting[engine]:
            raise ValueError(f"a result beat from engine {engine}, which has no request")
        index = waiting[engine][0]
        results[index].append(words)
        if last:
            waiting[engine].popleft()
            if error:
                failed.append(index)
    if any(waiting):
        raise ValueError(f"{sum(map(len, waiting))} requests without their last result beat")
    return results, sorted(failed)


def card_result_fields(params: HpuCardParams) -> tuple[bits.Field, ...]:
    """The card's ``result_o`` payload: an engine's (:func:`~tandem.host.hpu.result_fields`:
    ``data``, ``tag``, ``last``), then ``engine``, the index of the engine that computed it."""
    return (*result_fields(params.engine), bits.Field("engine", params.engine_bits))


def card_result_layout(params: HpuCardParams):
    """:func:`card_result_fields` as an Amaranth ``data.StructLayout``."""
    return bits.layout(card_result_fields(params))


def decode_card_result(params: HpuCardParams, payload: int) -> tuple[list[int], int, int, int, int]:
    """``(words, tag, last, engine, error)`` of one card ``result_o`` payload; ``error`` is the
    engine's flag for a request that met a non-OKAY AXI response or a misaligned base."""
    fields = bits.unpack(card_result_fields(params), payload)
    return fields["data"], fields["tag"], fields["last"], fields["engine"], fields["error"]


class _CardMemory(ArrayMemory):
    """The card memory as an engine's golden backend sees it: the caller's array, shared."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.size = array.size


def check_card_batch(params: HpuCardParams, batch: HpuBatch) -> np.ndarray:
    """The engine of each request of ``batch`` (:func:`route`); ``ValueError`` where a
    request's region leaves its engine's K channels (its V span mirrors them), which the
    engine's ports do not reach beyond."""
    p = params
    engines = route(p, batch.base)
    ends = batch.base + -(-batch.length // PAGE_TOKENS) * p.layout.page_stride
    limits = np.asarray(p.engine_bases, dtype=np.int64) + p.card_value_offset
    outside = ends > limits[engines]
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise ValueError(
            f"request {i} (base {int(batch.base[i]):#x}, {int(batch.length[i])} tokens) ends at "
            f"{int(ends[i]):#x}, past engine {int(engines[i])}'s K channels "
            f"(up to {int(limits[engines[i]]):#x})"
        )
    return engines


def hpu_card_golden(
    params: HpuCardParams, memory: np.ndarray, requests: HpuBatch | list[HpuRequest]
) -> list[HpuResults]:
    """Bit-exact model of the card for one transfer of ``requests``: per engine, its results.

    Parameters
    ----------
    params
        The card's parameters.
    memory
        The card memory (uint8, ``memory_bytes`` or more): the KV regions the requests read.
        Appended tokens are written into it, as the engines write them.
    requests
        The requests in descriptor order.

    Returns
    -------
    list of HpuResults
        Element ``e``: the results of the requests routed to engine ``e`` (:func:`route` of
        their bases), in their descriptor order, in the form the engine emits them (what
        :class:`~tandem.host.hpu.golden_backend.GoldenHpuBackend` returns: one engine's golden model
        over its requests).

    Raises ``ValueError`` where a request's region leaves the channels of its engine (its
    ports do not reach them).
    """
    p = params
    batch = HpuBatch.of(p.engine, requests)
    memory = np.asarray(memory)
    if memory.dtype != np.uint8 or memory.ndim != 1:
        raise ValueError(f"memory must be a 1-D uint8 array, not {memory.dtype} {memory.shape}")
    engines = check_card_batch(p, batch)
    out = []
    for e in range(p.engines):
        backend = GoldenHpuBackend(p.engine, BLOCK_BYTES, kernel="numpy")
        backend.memory = _CardMemory(memory)
        chosen = engines == e
        mine = HpuBatch(**{f.name: getattr(batch, f.name)[chosen] for f in fields(HpuBatch)})
        out.append(backend.run(mine).results)
    return out


class CardCycles(NamedTuple):
    """Modelled cycles of one transfer of requests on the card (:func:`card_call_cycles`)."""

    total: float
    """From the first descriptor beat on ``desc_i`` to the last result beat."""
    engines: tuple[float, ...]
    """Per engine, when its last result beat is out (0 for an engine without requests)."""
    dispatcher: float
    """When the dispatcher has passed the last descriptor beat on."""
    read_beats_per_cycle: tuple[float, ...]
    """Per request, the rate each of its read ports streams at (beats per cycle)."""


def card_call_cycles(params: HpuCardParams, requests, hbm) -> CardCycles:
    """Modelled cycles of one transfer of ``requests`` on the card, its memory ``hbm``.

    Parameters
    ----------
    params
        The card.
    requests
        The requests (:class:`~tandem.host.hpu.HpuRequest`) in descriptor order.
    hbm
        The pseudo-channels (:class:`tandem.sim.hpu.hbm.HbmParams`): the rate a port gets from
        a channel it shares with others, and the read latency.

    Returns
    -------
    CardCycles

    Notes
    -----
    A deterministic walk over the requests in descriptor order, from the engine's cycle model
    (:mod:`tandem.host.hpu.cycles`, ``FILL``/``GAP`` fitted there; nothing is fitted here):

    * Dispatcher: a request costs ``header_beats`` cycles (header into its register) and then
      its ``D`` descriptor beats, one a cycle, into its engine; it waits until that engine
      has a free descriptor slot (``DESCRIPTOR_SLOTS`` = 3: the slot of the request three
      before on that engine frees when that request's reads end), and every later request
      waits with it (the dispatcher's head-of-line blocking).
    * Engine: a request's reads start when its descriptor starts arriving and the previous
      request's reads are done; they last ``max(D, R / r, O * S) + GAP`` cycles, ``r`` the
      beats per cycle of each read port. In the card's split layout the K port streams from
      the K channel of the request's base and the V port from its V channel, which no other
      engine reads (each engine owns its channels), so ``r = hbm.port_beats_per_cycle(1)``
      (a channel's sustained rate, refresh included, at most 1); where K and V share a
      channel (an interleaved layout), ``hbm.port_beats_per_cycle(2)``; with one port, ``r``
      of one port alone. ``FILL`` once per engine, plus the HBM latency beyond
      the co-simulation memory's (``hbm.latency - MODEL_LATENCY``, the first burst's wait;
      later bursts' latency is hidden by bursts in flight), and ``DRAIN`` of its last request.
    * Result merger: round robin at request boundaries, one beat a cycle; it only bounds the
      total by the sum of all result beats (a collision between engines' results costs
      nothing extra here).
    * The card's time is the latest of these.
    """

    # The gateware's own constant: the host side has no copy of it to drift.
    from tandem.hw.hpu.beats import DESCRIPTOR_SLOTS

    from .cycles import FILL_CYCLES, FIT_LATENCY_CYCLES, GAP_CYCLES, drain_cycles, request_beats

    p = params
    requests = list(requests)
    if not requests:
        return CardCycles(0.0, (0.0,) * p.engines, 0.0, ())
    contexts = np.array([r.length for r in requests], dtype=np.int64)
    append = np.array([r.append for r in requests], dtype=np.int64)
    partial = np.array([r.partial for r in requests], dtype=np.int64)
    beats = request_beats(p.engine, contexts, append=append, partial=partial)
    d, reads, o = (np.broadcast_to(x, contexts.shape) for x in beats)
    owners = route(p, [r.base for r in requests]).tolist()
    layout = p.layout
    rates = []
    for r in requests:
        if p.read_ports == 2:
            same = p.geometry.channel_of(r.base) == p.geometry.channel_of(
                r.base + layout.value_shift
            )
            rates.append(hbm.port_beats_per_cycle(2 if same else 1))
        else:
            rates.append(hbm.port_beats_per_cycle(1))
    t = 0.0  # dispatcher's time
    reads_end: list[list[float]] = [[] for _ in range(p.engines)]
    last: list[int | None] = [None] * p.engines
    for k, e in enumerate(owners):
        done = reads_end[e]
        slot_free = done[-DESCRIPTOR_SLOTS] if len(done) >= DESCRIPTOR_SLOTS else 0.0
        start = max(t + p.header_beats, slot_free)
        t = start + float(d[k])
        begin = max(start, done[-1] if done else 0.0)
        busy = max(float(d[k]), float(reads[k]) / rates[k], float(o[k]) * p.out_beat_cycles)
        done.append(begin + busy + GAP_CYCLES)
        last[e] = k
    fill = FILL_CYCLES + max(0, hbm.latency - FIT_LATENCY_CYCLES)
    engines = []
    for e in range(p.engines):
        if last[e] is None:
            engines.append(0.0)
            continue
        k = last[e]
        drain = drain_cycles(
            p.engine, contexts[k : k + 1], append=append[k : k + 1], partial=partial[k : k + 1]
        )
        engines.append(reads_end[e][-1] + fill + drain)
    merger = float(o.sum())
    total = max(max(engines), t, merger)
    return CardCycles(total, tuple(engines), t, tuple(rates))


class GoldenCardBackend(GoldenHpuBackend):
    """An ``hpu-card`` as its golden model: every request bit for bit as the engine that owns
    its base computes it (:func:`~tandem.host.hpu.card.hpu_card_golden`: each engine is an
    ``hpu`` engine), and the batch's cycles from the card cycle model
    (:func:`~tandem.host.hpu.card.card_call_cycles`) on the card's HBM model
    (:meth:`HbmParams.of_board <tandem.sim.hpu.hbm.HbmParams.of_board>`), as the card's RTL
    backend runs it.

    Parameters
    ----------
    params
        The card's parameters (:class:`~tandem.host.hpu.card.HpuCardParams`).
    memory_bytes
        The card memory (``params.memory_bytes``).
    kernel
        As :class:`GoldenHpuBackend`.
    """

    def __init__(self, params: HpuCardParams, memory_bytes: int, kernel: str = "auto"):
        from tandem.sim.hpu.hbm import HbmParams  # the timing model; pure Python

        super().__init__(params, memory_bytes, kernel)
        self.hbm = HbmParams.of_board(params.geometry, params.beat_bytes)

    def run(self, requests: HpuBatch | list[HpuRequest]) -> Call:
        p = self.params
        batch = HpuBatch.of(p, requests)
        check_card_batch(p, batch)
        call = super().run(batch)
        cycles = round(card_call_cycles(p, batch.requests(), self.hbm).total)
        return Call(call.results, cycles, {"hpu": cycles}, call.saturations)
