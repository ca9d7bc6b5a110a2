"""``HpuDevice``: the host API of one HPU card, and its golden and RTL backends.

:class:`HpuDevice` is one HPU card: device memory that holds KV caches in the layout of
:class:`~tandem.mappings.hpu.kv_layout.KvLayout`, and the attention engine. Its API is small and
synchronous::

    dev = HpuDevice(HpuParams(), memory_bytes=64 << 20, backend="golden")  # or "rtl"
    seq = dev.allocate(tokens=1024, heads=3)       # one KV region per head, 1024 tokens each
    dev.write_kv(seq, head, k, k_scale, v, v_scale)  # int8 (kv_bits) rows, binary16 scales
    dev.append(seq, head, k1, k1_scale, v1, v1_scale)  # host write of one more token
    y = dev.attend(seq, head, q, score_scale, new=(k, ks, v, vs))  # engine appends, then attends
    dev.write_kv_real(seq, head, k_float, v_float, smoothing=s)   # float in, quantized inside
    y = dev.attend_real(seq, head, q_float, new=(k1, v1), smoothing=s)  # float out
    results = dev.attend_many([Attend(seq, head, q, score_scale, new=...), ...])  # one transfer
    dev.free(seq)
    dev.close()

Capacity is counted in bytes (``capacity_bytes``, ``free_bytes``) and in sequences
(``max_sequences``, ``free_sequences``). A sequence's regions are reserved for its whole
capacity at allocation (a region grows in place: a token's address follows from its
position), so appends never fail for lack of memory.

Memory is a row of HBM pseudo-channels (:class:`~tandem.mappings.hpu.channels.ChannelGeometry`:
``channels`` of ``memory_bytes / channels``, the U55C's 32 by default). With
``placement="contiguous"`` (default) a sequence's regions lie one after another in the first
free span that holds them all; with ``placement="channels"`` each region lies whole inside one
channel, spread so that the regions one decode call reads (one layer's KV heads of every
sequence, ``allocate(..., group=kv_heads)``) load every channel evenly
(:class:`~tandem.mappings.hpu.channels.ChannelSpace`). ``last_channel_bytes`` and
``total_channel_bytes`` count the bytes each call's requests read per channel, on the host from
the descriptors, for every backend alike.

Backends (:class:`~tandem.host.backend.device.Device`): ``backend="golden"`` (default) is
:class:`GoldenHpuBackend`, a numpy image of device memory and one
:func:`~tandem.host.hpu.golden.hpu_golden_batch` call per batch; ``backend="rtl"`` is
:class:`RtlHpuBackend`, the generated Verilog in Verilator (default) or Icarus under cocotb in
a subprocess (:mod:`tandem.sim.cosim.hpu_server`). Both return bit-identical results for the
same calls; ``dev.last_cycles`` is modelled engine cycles (golden,
:func:`~tandem.host.hpu.cycles.call_cycles`) or simulated cycles (rtl).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
from tandem.host.backend.backend import Backend, Call, MemoryPort, check_span
from tandem.host.backend.cosim import CosimClient
from tandem.host.backend.device import Device
from tandem.host.common.checks import (
    flag,
    instance,
    int_array,
    integer,
    positive_int,
    real_array,
)
from tandem.host.common.errors import CapacityError, MemoryResponseError
from tandem.mappings.hpu.channels import ChannelGeometry, ChannelSpace, request_channel_bytes
from tandem.mappings.hpu.kv_layout import BLOCK_BYTES, PAGE_TOKENS
from tandem.mappings.hpu.placement import CardSpace

from .card import GoldenCardBackend, HpuCardParams
from .codec import (
    HpuBatch,
    HpuRequest,
    HpuResult,
    HpuResults,
    pack_descriptor,
    unpack_results,
)
from .golden_backend import GOLDEN_KERNELS, GoldenHpuBackend
from .params import HpuParams, check_scales, quantize_rows, score_scale

__all__ = [
    "GOLDEN_KERNELS",
    "PLACEMENTS",
    "Attend",
    "AttendBatch",
    "GoldenCardBackend",
    "GoldenHpuBackend",
    "HpuDevice",
    "RtlHpuBackend",
    "SeqAlloc",
    "check_failed",
    "emitted",
]


@dataclass
class SeqAlloc:
    """One allocated sequence: ``heads`` KV regions of ``capacity`` tokens each.

    Attributes
    ----------
    handle
        Device-unique number (also the high part of the result tag).
    capacity
        Tokens each region holds.
    heads
        Number of (layer, KV head) regions.
    start
        First byte of head 0's region (of the whole allocation when it is contiguous).
    region_bytes
        Bytes of one region.
    lengths
        Tokens stored per head.
    bases
        First byte of each head's region, int64 [heads] (default: contiguous from ``start``);
        head ``h`` starts at :meth:`base`.
    group
        Regions one call reads together (the allocation's call groups are ``h // group``).
    """

    handle: int
    capacity: int
    heads: int
    start: int
    region_bytes: int
    lengths: np.ndarray = field(repr=False)
    freed: bool = False
    bases: np.ndarray | None = field(default=None, repr=False)
    group: int | None = None

    def __post_init__(self):
        if self.bases is None:
            self.bases = self.start + np.arange(self.heads, dtype=np.int64) * self.region_bytes
        if self.group is None:
            self.group = self.heads

    def base(self, head: int) -> int:
        """Byte address of head ``head``'s region."""
        if not 0 <= head < self.heads:
            raise IndexError(f"head {head} out of range 0..{self.heads - 1}")
        return int(self.bases[head])

    @property
    def nbytes(self) -> int:
        """Bytes reserved for this sequence."""
        return self.heads * self.region_bytes


@dataclass
class Attend:
    """One attention call for :meth:`HpuDevice.attend_many`.

    ``q`` are the ``gqa_group`` integer queries [G, head_dim], ``score_scale`` their binary16
    score scales (``score_scale(q_scale, head_dim)``, not the queries' own scale); ``new`` is
    ``(k, k_scale, v, v_scale)`` of a token the engine appends first (``kv_bits`` row,
    binary16 scale) or None; ``partial`` asks for ``(m, l, o)``.
    """

    seq: SeqAlloc
    head: int
    q: np.ndarray
    score_scale: np.ndarray
    new: tuple | None = None
    partial: bool = False


@dataclass
class AttendBatch:
    """Many attention calls as arrays: the vectorized form of a list of :class:`Attend`, for
    :meth:`HpuDevice.attend_batch`. Call ``i`` is head ``heads[i]`` of ``seqs[i]``.

    Attributes
    ----------
    seqs
        The calls' sequences (:class:`SeqAlloc` of this device), a list of R.
    heads
        Head index of each call [R].
    q
        Integer queries [R, gqa_group, head_dim] (``q_bits`` wide).
    score_scale
        binary16 score scales [R, gqa_group].
    partial
        bool [R]: return ``(m, l, o)`` instead of ``y``.
    append
        bool [R]: the engine appends the call's new token first (all False when None).
    new_k, new_v
        Integer rows (``kv_bits``) [R, head_dim] of the appended tokens (read where ``append``).
    new_k_scale, new_v_scale
        binary16 scales [R] of the appended tokens.
    """

    seqs: list
    heads: np.ndarray
    q: np.ndarray
    score_scale: np.ndarray
    partial: np.ndarray
    append: np.ndarray | None = None
    new_k: np.ndarray | None = None
    new_k_scale: np.ndarray | None = None
    new_v: np.ndarray | None = None
    new_v_scale: np.ndarray | None = None


def emitted(result: HpuResult, request: HpuRequest) -> HpuResult:
    """``result`` reduced to what the engine emits (as :func:`unpack_results` rebuilds it).

    Full mode carries only ``y``; partial mode only ``(m, l, o)``. Both backends return this
    form, so their results compare field by field.
    """
    empty = np.zeros(0, dtype=np.int64)
    if request.partial:
        return HpuResult(request.seq_id, result.m, result.l, result.o, None)
    return HpuResult(request.seq_id, empty, empty, empty, result.y)


def check_failed(requests: list[HpuRequest], failed: list[int]) -> None:
    """Raise :class:`~tandem.host.common.errors.MemoryResponseError` naming the first of the
    requests whose result came back with the ``error`` flag (indices in ``failed``)."""
    if not failed:
        return
    first = requests[failed[0]]
    others = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    raise MemoryResponseError(
        f"request {failed[0]} of {len(requests)} (seq_id {first.seq_id}, base {first.base:#x}, "
        f"length {first.length}){others}: the engine's memory answered an access with an "
        "error (an AXI RRESP/BRESP other than OKAY); the result is void"
    )


#: How :class:`HpuDevice` places a sequence's regions (see the module docstring).
PLACEMENTS = ("contiguous", "channels")


class _CosimMemory(MemoryPort):
    """Device memory inside the simulator, through the server's ``write``/``read`` messages."""

    def __init__(self, client: "RtlHpuBackend", size: int):
        self.client = client
        self.size = int(size)

    def write(self, address: int, data) -> None:
        data = bytes(np.asarray(data, dtype=np.uint8)) if isinstance(data, np.ndarray) else data
        check_span(self.size, address, len(data))
        self.client._call("write", int(address), bytes(data))

    def read(self, address: int, size: int) -> np.ndarray:
        check_span(self.size, address, size)
        (data,) = self.client._call("read", int(address), int(size))
        return np.frombuffer(data, dtype=np.uint8).copy()


class RtlHpuBackend(CosimClient, Backend):
    """The ``hpu`` engine as RTL in Verilator or Icarus, served by
    :mod:`tandem.sim.cosim.hpu_server`.

    Host writes and reads of device memory are messages to the server (its AXI4 memory
    model); a batch is its packed descriptors (:func:`pack_descriptor`), whose result beats
    come back as words and are rebuilt with :func:`unpack_results`: bit for bit what the
    engine emitted, with the batch's simulated clock cycles.

    Parameters
    ----------
    params
        The engine's parameters, or a card's (:class:`~tandem.host.hpu.card.HpuCardParams`:
        the ``hpu-card`` design on the card's HBM model, served by
        :mod:`tandem.sim.cosim.card_server` on the cocotb harness, the card's default, or by
        :class:`~tandem.sim.native.server.CardServer` with ``harness="native"``, with the same
        results and cycles).
    memory_bytes
        Size of device memory in bytes.
    simulator, timeout_s, start_timeout_s, cache_dir, run_dir, harness, waves, progress
        As :class:`~tandem.host.backend.cosim.CosimClient`.
    """

    name = "rtl"

    def __init__(
        self,
        params: HpuParams,
        memory_bytes: int,
        *,
        simulator: str = "verilator",
        timeout_s: float = 120.0,
        start_timeout_s: float = 900.0,
        cache_dir: str | Path | None = None,
        run_dir: str | Path | None = None,
        harness: str | None = None,
        waves: str | Path | None = None,
        progress=None,
    ):
        if isinstance(params, HpuCardParams) and harness is None:
            # Both harnesses serve the card alike; cocotb stays its default so that a card run
            # with no harness named is the one its regression (sim/hpu/card_tb.py) checks.
            harness = "cocotb"
        CosimClient.__init__(
            self,
            simulator=simulator,
            timeout_s=timeout_s,
            start_timeout_s=start_timeout_s,
            cache_dir=cache_dir,
            run_dir=run_dir,
            harness=harness,
            waves=waves,
            progress=progress,
        )
        self.params = params
        self.memory = _CosimMemory(self, memory_bytes)

    def _launch_args(self) -> list[str]:
        return [
            "--design",
            "hpu-card" if isinstance(self.params, HpuCardParams) else "hpu",
            "--params",
            json.dumps(self.params.to_dict()),
            "--memory",
            str(self.memory.size),
        ]

    def run(self, requests: HpuBatch | list[HpuRequest]) -> Call:
        self.submit(requests)
        return self.collect()

    def submit(self, requests: HpuBatch | list[HpuRequest]) -> None:
        """Send the batch's descriptors to the simulator without waiting for its results."""
        p = self.params
        if isinstance(requests, HpuBatch):
            requests = requests.requests()
        for r in requests:
            check_span(self.memory.size, r.base, int(p.layout.region_end(0, r.length)))
        descriptors = [pack_descriptor(p, r) for r in requests]
        self._requests = requests
        if descriptors:
            self._send("run", descriptors)

    def collect(self) -> Call:
        """Wait for the results of the batch :meth:`submit` sent."""
        p, requests = self.params, self._requests
        self._requests = None
        partial = [r.partial for r in requests]
        if not requests:
            return Call(HpuResults.of(p, [], partial), 0, {})
        beats, cycles, failed = self._receive("run")
        check_failed(requests, failed)
        results = [
            emitted(unpack_results(p, words, r.partial, r.seq_id), r)
            for words, r in zip(beats, requests, strict=True)
        ]
        return Call(HpuResults.of(p, results, partial), int(cycles), {"hpu": int(cycles)})

    _requests: list | None = None

    def set_read_latency(self, cycles: int) -> None:
        """Cycles from each read address to its first data beat in the simulated memory from
        now on (2, the default, is the memory model's minimum)."""
        self._call("latency", int(cycles))

    def read_records(self) -> dict[str, dict]:
        """The read ports' figures of the last batch: ``{port: {"r_beats", "first_ar",
        "last_r", "bursts"}}`` (cycles of the first address and the last data beat)."""
        (records,) = self._call("records")
        return records

    def stream_efficiency(self) -> float:
        """R bytes of the last batch over its read window's capacity (every port moving a
        beat on every cycle from the first address to the last data beat)."""
        records = self.read_records()
        first = min(r["first_ar"] for r in records.values())
        last = max(r["last_r"] for r in records.values())
        beats = sum(r["r_beats"] for r in records.values())
        return beats / ((last - first + 1) * len(records)) if beats else 0.0


class HpuDevice(Device):
    """One HPU card: KV memory management and the attention engine.

    Parameters
    ----------
    params
        Engine parameters (default :class:`HpuParams()`), or a card's
        (:class:`~tandem.host.hpu.card.HpuCardParams`: its engines behind one descriptor
        stream, the golden backend :class:`GoldenCardBackend`, the RTL backend the
        ``hpu-card`` design; ``memory_bytes`` and ``channels`` are then the card's).
    memory_bytes
        Device memory in bytes (the U55C has 16 GiB; the default 64 MiB suits simulation).
    max_sequences
        Sequence slots (allocations) the device serves at once.
    backend
        ``"golden"`` or ``"rtl"``.
    name
        Label in traces and messages.
    placement
        ``"contiguous"`` (default for an engine): a sequence's regions one after another,
        first fit; ``"channels"`` (default, and the only choice, for a split KV layout such
        as a card's): each region inside one pseudo-channel, spread over the channels
        (module docstring).
    channels
        Pseudo-channels of the memory (default the U55C's, from its board file), each
        ``memory_bytes / channels`` (:meth:`ChannelGeometry.scaled`).
    **options
        For ``backend="rtl"``: ``simulator`` (``"verilator"`` or ``"icarus"``), ``timeout_s``,
        ``start_timeout_s``, ``cache_dir``, ``run_dir`` (see :class:`RtlHpuBackend`).

    Notes
    -----
    No host value is clipped silently. Integer K/V rows and queries must fit ``kv_bits`` and
    ``q_bits`` (others raise ``ValueError``). Float rows (:meth:`write_kv_real`,
    :meth:`attend_real`) get one binary16 scale each from their own largest magnitude, so no
    element clips; a row too large for any binary16 scale raises ``ValueError`` naming it and
    the range. The engine's own saturations (``score``, ``weight``, ``output``) are counted in
    ``last_saturations`` and ``total_saturations`` on the golden backend.
    """

    backends: ClassVar[dict] = {}  # filled below the backend classes

    def __init__(
        self,
        params: HpuParams | None = None,
        *,
        memory_bytes: int = 64 << 20,
        max_sequences: int = 256,
        backend: str = "golden",
        name: str = "hpu0",
        placement: str | None = None,
        channels: int | None = None,
        **options,
    ):
        params = instance(HpuParams() if params is None else params, HpuParams, "params")
        memory_bytes = integer(memory_bytes, "memory_bytes")
        if isinstance(params, HpuCardParams):
            # The card's memory and channels decide which engine owns which address.
            if memory_bytes != params.memory_bytes or channels not in (None, params.channels):
                raise ValueError(
                    f"an hpu-card device has its parameters' memory ({params.memory_bytes} "
                    f"bytes, {params.channels} channels), not {memory_bytes} bytes and "
                    f"{channels} channels"
                )
            channels = params.channels
        if placement is None:  # a card's engines read the split layout: by channel only
            placement = "channels" if params.layout.split else "contiguous"
        if memory_bytes % BLOCK_BYTES:
            raise ValueError(
                f"memory_bytes must be a multiple of {BLOCK_BYTES}, not {memory_bytes}"
            )
        page = int(params.layout.region_end(0, 1))
        if memory_bytes < page:
            raise ValueError(f"memory_bytes must hold one page ({page} bytes), not {memory_bytes}")
        integer(memory_bytes, "memory_bytes", hi=1 << params.addr_bits, what=" (2**addr_bits)")
        if not isinstance(placement, str) or placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")
        if channels is not None:
            channels = positive_int(channels, "channels")
        self.capacity_bytes = memory_bytes
        self.max_sequences = positive_int(max_sequences, "max_sequences")
        #: The memory's pseudo-channels.
        self.geometry = ChannelGeometry.scaled(memory_bytes, channels)
        self.placement = placement
        super().__init__(params, backend=backend, name=name, options=options)
        self._free: list[tuple[int, int]] = [(0, self.capacity_bytes)]  # (start, size)
        #: The channel-aware allocator (``placement="channels"``), else None.
        if params.layout.split and placement != "channels":
            raise ValueError(
                f"a split KV layout (value_offset {params.layout.value_offset}) needs "
                f"placement='channels', not {placement!r}"
            )
        self._space = None
        if placement == "channels":
            self._space = ChannelSpace(self.geometry, params.layout.value_offset)
        #: Bytes read per pseudo-channel, int64 [channels]: the last call's and every call's.
        self.last_channel_bytes = np.zeros(self.geometry.channels, dtype=np.int64)
        self.total_channel_bytes = np.zeros(self.geometry.channels, dtype=np.int64)
        self._channel_bytes: np.ndarray | None = None  # of the batch in flight
        self._allocs: dict[int, SeqAlloc] = {}
        self._next_handle = 0

    def _make_backend(self, kind: str, options: dict):
        backend = self.backends[kind]
        if backend is GoldenHpuBackend and isinstance(self.params, HpuCardParams):
            backend = GoldenCardBackend
        return backend(self.params, self.capacity_bytes, **options)

    # --- capacity ------------------------------------------------------------------------
    @property
    def free_bytes(self) -> int:
        """Bytes not reserved by any sequence."""
        return sum(self.free_spans)

    @property
    def free_spans(self) -> list[int]:
        """Sizes in bytes of the free spans, in address order (what the first-fit allocator
        chooses from; the placement of :mod:`tandem.mappings.hpu.placement` reads it). By
        channel, no span crosses into another channel."""
        if self._space is not None:
            return self._space.spans
        return [size for _, size in self._free]

    @property
    def largest_free(self) -> int:
        """The largest contiguous free span in bytes (what one region can get by channel, what
        one whole allocation can get contiguous)."""
        return max(self.free_spans, default=0)

    def card_space(self) -> CardSpace:
        """This card's free memory as the placement model keeps it
        (:class:`~tandem.mappings.hpu.placement.CardSpace`; a copy: changing it changes
        nothing here)."""
        space = None if self._space is None else self._space.copy()
        return CardSpace(self.free_spans, self.free_sequences, space)

    @property
    def free_sequences(self) -> int:
        """Sequence slots left."""
        return self.max_sequences - len(self._allocs)

    def bytes_for(self, tokens: int, heads: int = 1) -> int:
        """Bytes an allocation of ``heads`` regions of ``tokens`` tokens reserves."""
        tokens, heads = self._tokens(tokens), positive_int(heads, "heads")
        return heads * self.params.layout.region_bytes(tokens)

    def tokens_fit(self, heads: int = 1) -> int:
        """Most tokens (whole pages, at most ``max_seq_len``) one new allocation can hold."""
        heads = positive_int(heads, "heads")
        return self.card_space().tokens_fit(self.params.layout, heads, self.params.max_seq_len)

    # --- allocation ----------------------------------------------------------------------
    def allocate(self, tokens: int, heads: int = 1, *, group: int | None = None) -> SeqAlloc:
        """Reserve ``heads`` KV regions of ``tokens`` tokens each.

        ``group`` is how many of the regions one call reads together (a model's KV heads per
        layer, regions ``h // group`` being one layer; default ``heads``): by channel, each
        group's regions spread over the channels. Contiguous: the first free span that holds
        every region. Raises :class:`CapacityError` when no slot or no room is free.
        """
        self._check_open()
        p = self.params
        tokens, heads = self._tokens(tokens), positive_int(heads, "heads")
        group = heads if group is None else positive_int(group, "group")
        if self.free_sequences == 0:
            raise CapacityError(f"{self.name}: all {self.max_sequences} sequence slots are in use")
        region = p.layout.region_bytes(tokens)
        need = heads * region
        if self._space is not None:
            try:
                bases = self._space.take(region, heads, group)
            except ValueError:
                raise CapacityError(
                    f"{self.name}: {heads} regions of {region} bytes ({tokens} tokens) do not "
                    f"fit the free spans of its {self.geometry.channels} channels "
                    f"({self.free_bytes} free bytes)"
                ) from None
            return self._register(tokens, heads, int(bases[0]), region, bases, group)
        for i, (start, size) in enumerate(self._free):
            if size >= need:
                self._free[i] = (start + need, size - need)
                if self._free[i][1] == 0:
                    del self._free[i]
                break
        else:
            raise CapacityError(
                f"{self.name}: {need} bytes needed for {heads} x {tokens} tokens, largest free "
                f"span {self.largest_free} of {self.free_bytes} free bytes"
            )
        return self._register(tokens, heads, start, region, None, group)

    def _register(self, tokens: int, heads: int, start: int, region: int, bases, group: int):
        """A new :class:`SeqAlloc` of the allocated regions (``bases`` None: contiguous)."""
        lengths = np.zeros(heads, dtype=np.int64)
        alloc = SeqAlloc(
            self._next_handle, tokens, heads, start, region, lengths, bases=bases, group=group
        )
        self._allocs[alloc.handle] = alloc
        self._next_handle += 1
        return alloc

    def _tokens(self, tokens) -> int:
        return integer(tokens, "tokens", 1, self.params.max_seq_len, " (max_seq_len)")

    def free(self, seq: SeqAlloc) -> None:
        """Release ``seq``'s memory and slot."""
        self._own(seq)
        del self._allocs[seq.handle]
        seq.freed = True
        if self._space is not None:
            self._space.give(seq.bases, seq.region_bytes, seq.group)
            return
        spans = sorted([*self._free, (seq.start, seq.nbytes)])
        merged = [spans[0]]
        for start, size in spans[1:]:
            last_start, last_size = merged[-1]
            if last_start + last_size == start:
                merged[-1] = (last_start, last_size + size)
            else:
                merged.append((start, size))
        self._free = merged

    def _own(self, seq: SeqAlloc) -> None:
        self._check_open()
        if not isinstance(seq, SeqAlloc):
            raise ValueError(f"seq must be a SeqAlloc (from allocate), not {type(seq).__name__}")
        if seq.freed or self._allocs.get(seq.handle) is not seq:
            raise ValueError(f"{self.name}: sequence {seq.handle} is not allocated on this device")

    def _head(self, seq: SeqAlloc, head) -> int:
        """``head`` of the allocated ``seq``, checked (a negative index is no head)."""
        return integer(head, "head", 0, seq.heads - 1, f" (sequence {seq.handle}'s heads)")

    # --- host writes ---------------------------------------------------------------------
    def write_kv(self, seq: SeqAlloc, head: int, k, k_scale, v, v_scale, start: int = 0) -> None:
        """Write integer ``k``, ``v`` [n, head_dim] (``kv_bits`` wide: int8 by default) and
        binary16 scales [n] from position ``start``.

        The usual call comes once after prefill with ``start=0``; the head's length becomes
        ``start + n``.
        """
        self._own(seq)
        head = self._head(seq, head)
        start = integer(start, "start")
        layout, d = self.params.layout, self.params.head_dim
        bits = self.params.kv_bits
        k = int_array(k, "k", bits, ndim=(2,))
        v = int_array(v, "v", bits, ndim=(2,))
        if k.shape[1] != d or v.shape[1] != d:
            raise ValueError(f"k and v must be [n, {d}] (head_dim), not {k.shape} and {v.shape}")
        n = len(k)
        k_scale, v_scale = _scales(k_scale, "k_scale"), _scales(v_scale, "v_scale")
        if len(v) != n or k_scale.size != n or v_scale.size != n:
            raise ValueError("k, v, k_scale and v_scale must cover the same tokens")
        if start < 0 or start > seq.lengths[head] or start + n > seq.capacity:
            raise ValueError(
                f"positions {start}..{start + n - 1} do not fit head {head} "
                f"(length {seq.lengths[head]}, capacity {seq.capacity})"
            )
        if n == 0:
            return
        base = seq.base(head)
        # Read-modify-write of the touched pages: writes land in bytes (rows, scales) the
        # layout owns and leave the rest of each page as it was.
        first = (start // PAGE_TOKENS) * layout.page_stride
        last = layout.region_bytes(start + n)
        # One span (K and V parts of each page), or the K span and the V span of the split
        # layout, each read, written into and written back.
        parts = [(0, ((k, k_scale, False), (v, v_scale, True)))]
        if layout.split:
            parts = [(0, parts[0][1][:1]), (layout.value_offset, parts[0][1][1:])]
        for shift, rows in parts:
            span = self.backend.memory.read(base + shift + first, last - first)
            for x, x_scale, value in rows:
                layout.write_rows(span, -first - shift, start, x, x_scale, value=value)
            self.backend.memory.write(base + shift + first, span)
        seq.lengths[head] = max(seq.lengths[head], start + n)

    def append(self, seq: SeqAlloc, head: int, k, k_scale, v, v_scale) -> None:
        """Host write of one token (or several rows) at the end of head ``head``.

        ``k`` and ``v`` are one row [head_dim] or rows [n, head_dim]; the scales one value
        (a scalar for one row) per row.
        """
        self._own(seq)
        head = self._head(seq, head)
        d = self.params.head_dim
        bits = self.params.kv_bits
        k, v = (_token_rows(x, name, d, bits) for x, name in ((k, "k"), (v, "v")))
        k_scale, v_scale = _scales(k_scale, "k_scale"), _scales(v_scale, "v_scale")
        self.write_kv(seq, head, k, k_scale, v, v_scale, start=int(seq.lengths[head]))

    def read_kv(self, seq: SeqAlloc, head: int):
        """``(k, k_scale, v, v_scale)`` stored for head ``head`` (host read, for checks)."""
        self._own(seq)
        head = self._head(seq, head)
        layout = self.params.layout
        n = int(seq.lengths[head])
        base, size = seq.base(head), layout.region_bytes(max(n, 1))
        if layout.split:
            k, ks = layout.read_rows(self.backend.memory.read(base, size), 0, 0, n, value=False)
            v_span = self.backend.memory.read(base + layout.value_offset, size)
            v, vs = layout.read_rows(v_span, -layout.value_offset, 0, n, value=True)
            return k, ks, v, vs
        span = self.backend.memory.read(base, size)
        k, ks = layout.read_rows(span, 0, 0, n, value=False)
        v, vs = layout.read_rows(span, 0, 0, n, value=True)
        return k, ks, v, vs

    # --- float inputs --------------------------------------------------------------------
    def write_kv_real(self, seq: SeqAlloc, head: int, k, v, *, smoothing=None, start: int = 0):
        """Write float keys and values [n, head_dim], quantized as the decode runtime does.

        Keys are divided by the per-channel ``smoothing`` factors [head_dim] (from
        :func:`~tandem.host.hpu.params.key_smoothing` of the prefill's keys; None: no
        smoothing), then keys and values go to ``kv_bits`` integers with one binary16 scale per
        token
        (:func:`~tandem.host.hpu.params.quantize_rows`) and to :meth:`write_kv`. Pass the same
        ``smoothing`` to :meth:`attend_real`. No element clips; a row too large for a binary16
        scale raises ``ValueError`` and writes nothing.
        """
        d = self.params.head_dim
        factors = self._smoothing(smoothing)
        k = real_array(k, "k", ndim=(2,))
        v = real_array(v, "v", ndim=(2,))
        if k.shape[1] != d or v.shape[1] != d:
            raise ValueError(f"k and v must be [n, {d}] (head_dim), not {k.shape} and {v.shape}")
        bits = self.params.kv_bits
        ki, ks = quantize_rows(k / factors, bits, name="k / smoothing")
        vi, vs = quantize_rows(v, bits, name="v")
        self.write_kv(seq, head, ki, ks, vi, vs, start=start)

    def attend_real(self, seq: SeqAlloc, head: int, q, new=None, *, smoothing=None):
        """Attention of float queries over head ``head``'s tokens, in float: the engine's
        result for ``q`` [gqa_group, head_dim], after appending the float token
        ``new = (k, v)`` ([head_dim] each) when given; float64 [gqa_group, head_dim].

        Quantized as the decode runtime does: ``q * smoothing`` to ``q_bits`` integers per
        query, whose scale becomes the score scale (``score_scale(q_scale, head_dim)``); the
        new key divided by ``smoothing`` and both new rows to ``kv_bits`` integers with one
        binary16 scale. No element clips; a row too large for a binary16 scale raises
        ``ValueError`` and appends nothing.
        """
        p = self.params
        factors = self._smoothing(smoothing)
        q = real_array(q, "q", ndim=(2,))
        if q.shape != (p.gqa_group, p.head_dim):
            raise ValueError(f"q must be [{p.gqa_group}, {p.head_dim}], not {q.shape}")
        token = None
        if new is not None:
            if not isinstance(new, (tuple, list)) or len(new) != 2:
                raise ValueError("new must be (k, v) of one token or None")
            k, v = (real_array(x, name, ndim=(1,)) for x, name in zip(new, ("new k", "new v")))
            if k.shape != (p.head_dim,) or v.shape != (p.head_dim,):
                raise ValueError(f"new k and v must be [{p.head_dim}], not {k.shape} and {v.shape}")
            ki, ks = quantize_rows(k / factors, p.kv_bits, name="new k / smoothing")
            vi, vs = quantize_rows(v, p.kv_bits, name="new v")
            token = (ki, ks, vi, vs)
        qi, qs = quantize_rows(q * factors, p.q_bits, name="q * smoothing")
        result = self.attend(seq, head, qi, score_scale(qs, p.head_dim), new=token)
        return result.real(p)

    def _smoothing(self, smoothing) -> np.ndarray:
        """Key smoothing factors [head_dim] (ones for None), checked: finite and positive."""
        d = self.params.head_dim
        if smoothing is None:
            return np.ones(d)
        factors = real_array(smoothing, "smoothing", ndim=(1,))
        if factors.shape != (d,) or np.any(factors <= 0):
            raise ValueError(f"smoothing must be {d} positive factors (head_dim)")
        return factors

    # --- attention -----------------------------------------------------------------------
    def attend(
        self, seq: SeqAlloc, head: int, q, score_scale, new=None, partial: bool = False
    ) -> HpuResult:
        """Attention of the G queries of one head over its tokens (after appending ``new``)."""
        return self.attend_many([Attend(seq, head, q, score_scale, new, partial)])[0]

    def attend_many(self, calls: list[Attend]) -> list[HpuResult]:
        """Run ``calls`` as one batch of descriptors (one transfer); results in order.

        A head may appear more than once; each call sees the tokens the earlier ones appended.
        """
        self._check_open()
        if not isinstance(calls, (list, tuple)):
            raise ValueError(f"calls must be a list of Attend, not {type(calls).__name__}")
        count = len(calls)
        if not count:
            return []
        p = self.params
        for index, call in enumerate(calls):
            _check_call(index, call)
        q = _stacked([c.q for c in calls], p.head_dim, p.q_bits, "q", p.gqa_group)
        score_scale = _stacked_scales([c.score_scale for c in calls], "score_scale", p.gqa_group)
        append = np.array([c.new is not None for c in calls], dtype=bool)
        new_k = np.zeros((count, p.head_dim), dtype=np.int64)
        new_v = np.zeros((count, p.head_dim), dtype=np.int64)
        new_k_scale = np.zeros(count, dtype=np.float16)
        new_v_scale = np.zeros(count, dtype=np.float16)
        if append.any():
            adding = [c.new for c, a in zip(calls, append, strict=True) if a]
            bits = p.kv_bits
            new_k[append] = _stacked([n[0] for n in adding], p.head_dim, bits, "new k", 1)[:, 0]
            new_v[append] = _stacked([n[2] for n in adding], p.head_dim, bits, "new v", 1)[:, 0]
            new_k_scale[append] = _stacked_scales([n[1] for n in adding], "new k_scale", 1)[:, 0]
            new_v_scale[append] = _stacked_scales([n[3] for n in adding], "new v_scale", 1)[:, 0]
        seqs = [c.seq for c in calls]
        for seq in seqs:
            self._own(seq)
        heads = [self._head(c.seq, c.head) for c in calls]
        partial = np.array([bool(c.partial) for c in calls], dtype=bool)
        batch = AttendBatch(seqs, heads, q, score_scale, partial, append, new_k, new_k_scale)
        batch.new_v, batch.new_v_scale = new_v, new_v_scale
        self._start_attend(batch)
        return list(self.collect_batch())

    def attend_batch(self, batch: "AttendBatch") -> HpuResults:
        """Run the calls of ``batch`` (arrays, see :class:`AttendBatch`) as one batch of
        descriptors; the vectorized form of :meth:`attend_many`, for runtimes that issue many
        calls per step (the decode runtime's one batch per card and layer).
        """
        self.submit_batch(batch)
        return self.collect_batch()

    def submit_batch(self, batch: "AttendBatch") -> None:
        """Check ``batch`` and start it, as :meth:`attend_batch` does, without waiting for
        its results: :meth:`collect_batch` returns them. In between the host may start
        batches on other cards; on the RTL backend each card simulates in its own process,
        so the cards then work at the same time (one batch in flight per card)."""
        self._check_open()
        if not isinstance(batch, AttendBatch):
            raise ValueError(f"batch must be an AttendBatch, not {type(batch).__name__}")
        p = self.params
        seqs = batch.seqs
        if not isinstance(seqs, (list, tuple)):
            raise ValueError(f"batch.seqs must be a list of SeqAlloc, not {type(seqs).__name__}")
        count = len(seqs)
        for seq in {id(s): s for s in seqs}.values():
            self._own(seq)
        heads = int_array(batch.heads, "batch.heads", 64, ndim=(1,))
        limit = np.fromiter((s.heads for s in seqs), np.int64, count)
        if heads.shape != (count,):
            raise ValueError(f"batch.heads must hold {count} heads (one per seq), not {heads.size}")
        outside = (heads < 0) | (heads >= limit)
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise ValueError(
                f"batch.heads[{i}] must be in 0..{limit[i] - 1} (sequence {seqs[i].handle}'s "
                f"heads), not {heads[i]}"
            )
        g, d = p.gqa_group, p.head_dim
        q = _shaped(int_array(batch.q, "batch.q", p.q_bits), "batch.q", (count, g, d))
        score_scale = _scale_rows(batch.score_scale, "batch.score_scale", (count, g))
        partial = _flags(batch.partial, "batch.partial", count)
        append = _flags(batch.append, "batch.append", count)
        if append.any():
            bits = p.kv_bits
            new_k = _shaped(int_array(batch.new_k, "batch.new_k", bits), "batch.new_k", (count, d))
            new_v = _shaped(int_array(batch.new_v, "batch.new_v", bits), "batch.new_v", (count, d))
            new_k_scale = _scale_rows(batch.new_k_scale, "batch.new_k_scale", (count,))
            new_v_scale = _scale_rows(batch.new_v_scale, "batch.new_v_scale", (count,))
        else:
            new_k = new_v = np.zeros((count, d), dtype=np.int64)
            new_k_scale = new_v_scale = np.zeros(count, dtype=np.float16)
        checked = AttendBatch(list(seqs), heads.tolist(), q, score_scale, partial, append)
        checked.new_k, checked.new_k_scale = new_k, new_k_scale
        checked.new_v, checked.new_v_scale = new_v, new_v_scale
        self._start_attend(checked)

    def _start_attend(self, batch: "AttendBatch") -> None:
        """Start the checked ``batch`` (owned sequences, heads in range, arrays of the right
        shapes and ranges) as one :class:`HpuBatch` on the backend; lengths advance when
        :meth:`collect_batch` has its results."""
        if self._in_flight or self._lengths is not None:
            raise RuntimeError(f"{self.name}: a batch is in flight; collect it first")
        seqs, heads, count = batch.seqs, batch.heads, len(batch.seqs)
        if not count:
            self._lengths = {}  # nothing to run: collect_batch returns no result
            return
        seq_id = np.empty(count, dtype=np.int64)
        base = np.empty(count, dtype=np.int64)
        rows = np.empty(count, dtype=np.int64)
        length = np.empty(count, dtype=np.int64)
        lengths: dict[tuple[int, int], int] = {}
        for index, (seq, head, adds) in enumerate(zip(seqs, heads, batch.append.tolist())):
            key = (seq.handle, head)
            now = lengths.get(key)
            if now is None:
                now = int(seq.lengths[head])
            if adds:
                if now >= seq.capacity:
                    raise CapacityError(
                        f"{self.name}: head {head} of sequence {seq.handle} is full "
                        f"({seq.capacity} tokens)"
                    )
                now += 1
            if now == 0:
                raise ValueError(f"head {head} of sequence {seq.handle} holds no token")
            lengths[key] = now
            seq_id[index] = (seq.handle * seq.heads + head) & 0xFFFFFFFF
            base[index] = seq.bases[head]
            length[index] = now
            rows[index] = now - adds  # the appended token comes in the descriptor
        self._submit(
            HpuBatch(
                seq_id=seq_id,
                base=base,
                length=length,
                q=batch.q,
                score_scale=batch.score_scale,
                append=batch.append,
                new_k=batch.new_k,
                new_v=batch.new_v,
                new_k_scale=batch.new_k_scale,
                new_v_scale=batch.new_v_scale,
                partial=batch.partial,
            )
        )
        self._lengths = lengths
        self._channel_bytes = request_channel_bytes(self.geometry, self.params.layout, base, rows)

    def collect_batch(self) -> HpuResults:
        """The results of the batch :meth:`submit_batch` started (the sequences' lengths
        advance only now, when it succeeded)."""
        self._check_open()
        lengths, self._lengths = self._lengths, None
        if lengths is None:
            raise RuntimeError(f"{self.name}: no batch in flight")
        if not lengths:
            self.last_channel_bytes = np.zeros(self.geometry.channels, dtype=np.int64)
            return HpuResults.of(self.params, [], [])
        results = self._collect()
        for (handle, head), now in lengths.items():
            self._allocs[handle].lengths[head] = now
        self.last_channel_bytes = self._channel_bytes
        self.total_channel_bytes = self.total_channel_bytes + self._channel_bytes
        return results

    #: Lengths the batch in flight gives its (sequence, head) pairs; None: no batch.
    _lengths: dict | None = None

    def __repr__(self) -> str:
        return (
            f"HpuDevice({self.name!r}, backend={self.backend.name!r}, "
            f"{len(self._allocs)} sequences, "
            f"{self.free_bytes}/{self.capacity_bytes} bytes free)"
        )


HpuDevice.backends = {"golden": GoldenHpuBackend, "rtl": RtlHpuBackend}


def _check_call(index: int, call) -> None:
    """The parts of one :class:`Attend` that are not arrays: its type, ``new``, ``partial``."""
    if not isinstance(call, Attend):
        raise ValueError(f"calls[{index}] must be an Attend, not {type(call).__name__}")
    if call.new is not None and (not isinstance(call.new, (tuple, list)) or len(call.new) != 4):
        raise ValueError(f"calls[{index}].new must be (k, k_scale, v, v_scale) or None")
    flag(call.partial, f"calls[{index}].partial")


def _stacked(arrays: list, head_dim: int, bits: int, name: str, rows: int) -> np.ndarray:
    """Each of ``arrays`` as ``rows`` rows of ``head_dim`` integers ([rows, head_dim], or
    [head_dim] for one row), checked, stacked: int64 [len(arrays), rows, head_dim] (one check
    for the whole batch; per item for its message)."""
    count = len(arrays)
    try:
        stack = np.asarray(arrays)
    except (ValueError, TypeError):  # ragged
        stack = None
    shapes = [(count, rows, head_dim)] + ([(count, head_dim)] if rows == 1 else [])
    if stack is None or stack.dtype == object or stack.shape not in shapes:
        for values in arrays:
            _token_rows(values, name, head_dim, bits, rows)
    return int_array(stack, name, bits).reshape(count, rows, head_dim)


def _token_rows(values, name: str, head_dim: int, bits: int = 8, rows: int | None = None):
    """``values`` as int64 [n, head_dim] (one row may come as [head_dim]), checked against the
    signed ``bits``-bit range; exactly ``rows`` rows unless None."""
    array = int_array(values, name, bits, ndim=(1, 2))
    shape = array.shape
    if array.ndim == 1:
        array = array[None]
    if array.shape[1] != head_dim or (rows is not None and len(array) != rows):
        want = f"{rows} rows" if rows is not None else "rows"
        raise ValueError(f"{name} must have {want} of {head_dim}, not shape {shape}")
    return array


def _scales(values, name: str) -> np.ndarray:
    """``values`` as binary16 [n] (a scalar is one value), checked: real, finite, >= 0."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError):
        array = np.asarray(None)  # ragged: rejected below
    if array.dtype.kind not in "iuf" or array.ndim > 1:
        raise ValueError(
            f"{name} must be real numbers [n], not {array.dtype} of shape {array.shape}"
        )
    with np.errstate(over="ignore"):  # too large for binary16: inf, rejected
        return check_scales(name, array.reshape(-1))


def _stacked_scales(scales: list, name: str, per_call: int) -> np.ndarray:
    """Each of ``scales`` as ``per_call`` binary16 values, checked, stacked: [len, per_call]."""
    count = len(scales)
    try:
        stack = np.asarray(scales)
    except (ValueError, TypeError):  # ragged
        stack = None
    shapes = [(count, per_call)] + ([(count,)] if per_call == 1 else [])
    if stack is None or stack.dtype.kind not in "iuf" or stack.shape not in shapes:
        for index, values in enumerate(scales):
            got = _scales(values, f"{name} of calls[{index}]")
            if got.size != per_call:
                raise ValueError(
                    f"{name} of calls[{index}] must hold {per_call} values, not {got.size}"
                )
    with np.errstate(over="ignore"):
        return check_scales(name, stack).reshape(count, per_call)


def _shaped(array: np.ndarray, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` reshaped to ``shape``; one line naming ``name`` when its size does not fit."""
    if array.size != int(np.prod(shape)):
        raise ValueError(f"{name} must have shape {shape}, not {array.shape}")
    return array.reshape(shape)


def _scale_rows(values, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``values`` as binary16 of ``shape``, checked: real, finite, non-negative."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError):  # ragged
        array = np.asarray(None)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be real numbers, not {array.dtype}")
    with np.errstate(over="ignore"):  # too large for binary16: inf, rejected
        return _shaped(check_scales(name, array), name, shape)


def _flags(values, name: str, count: int) -> np.ndarray:
    """``values`` as bool [count]: booleans only (None means all False)."""
    if values is None:
        return np.zeros(count, dtype=bool)
    array = np.asarray(values)
    if array.dtype != bool or array.shape != (count,):
        raise ValueError(f"{name} must be {count} booleans, not {array.dtype} {array.shape}")
    return array
