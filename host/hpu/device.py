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


Memory is a row of HBM pseudo-channels; ``placement`` decides where a sequence's regions go
(:mod:`tandem.host.hpu.allocator`). ``last_channel_bytes`` and ``total_channel_bytes`` count the
bytes each call's requests read per channel, on the host from the descriptors, for every
backend alike.

Backends (:class:`~tandem.host.backend.device.Device`): ``backend="golden"`` (default) is
:class:`~tandem.host.hpu.golden_backend.GoldenHpuBackend`, a numpy image of device memory and one
:func:`~tandem.host.hpu.golden.hpu_golden_batch` call per batch; ``backend="rtl"`` is
:class:`~tandem.host.hpu.rtl_backend.RtlHpuBackend`, the generated Verilog in Verilator (default)
or Icarus under cocotb in a subprocess (:mod:`tandem.sim.cosim.hpu_server`). Both return
bit-identical results for the same calls; ``dev.last_cycles`` is modelled engine cycles (golden,
:func:`~tandem.host.hpu.cycles.call_cycles`) or simulated cycles (rtl). The calls' types
(:class:`Attend`, :class:`AttendBatch`, :class:`SeqAlloc`) are importable from here, beside the
device that takes them.
"""

from typing import ClassVar

import numpy as np
from tandem.host.backend.device import Device
from tandem.host.common.checks import instance, int_array, integer, positive_int, real_array
from tandem.host.common.errors import CapacityError
from tandem.mappings.hpu.channels import ChannelGeometry, request_channel_bytes
from tandem.mappings.hpu.kv_layout import BLOCK_BYTES, PAGE_TOKENS
from tandem.mappings.hpu.placement import CardSpace

from .allocator import PLACEMENTS, KvSpace, SeqAlloc
from .calls import Attend, AttendBatch, check_batch, scale_values, stack_calls, token_rows
from .card import GoldenCardBackend, HpuCardParams
from .codec import HpuBatch, HpuResult, HpuResults
from .golden_backend import GoldenHpuBackend
from .params import HpuParams, quantize_rows, score_scale
from .rtl_backend import RtlHpuBackend

__all__ = ["Attend", "AttendBatch", "HpuDevice", "SeqAlloc"]


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
        #: The free memory and where new regions go.
        self.space = KvSpace(self.geometry, params.layout, placement)
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
        """Sizes in bytes of the free spans, in address order (:attr:`KvSpace.spans
        <tandem.host.hpu.allocator.KvSpace.spans>`)."""
        return self.space.spans

    @property
    def largest_free(self) -> int:
        """The largest contiguous free span in bytes (what one region can get by channel, what
        one whole allocation can get contiguous)."""
        return max(self.free_spans, default=0)

    def card_space(self) -> CardSpace:
        """This card's free memory as the placement model keeps it
        (:class:`~tandem.mappings.hpu.placement.CardSpace`; a copy: changing it changes
        nothing here)."""
        return self.space.card_space(self.free_sequences)

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
        bases = self.space.take(region, heads, group)
        if bases is None and self.space.channels is not None:
            raise CapacityError(
                f"{self.name}: {heads} regions of {region} bytes ({tokens} tokens) do not "
                f"fit the free spans of its {self.geometry.channels} channels "
                f"({self.free_bytes} free bytes)"
            )
        if bases is None:
            raise CapacityError(
                f"{self.name}: {heads * region} bytes needed for {heads} x {tokens} tokens, "
                f"largest free span {self.largest_free} of {self.free_bytes} free bytes"
            )
        lengths = np.zeros(heads, dtype=np.int64)
        alloc = SeqAlloc(
            self._next_handle,
            tokens,
            heads,
            int(bases[0]),
            region,
            lengths,
            bases=bases,
            group=group,
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
        self.space.give(seq)

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
        k_scale, v_scale = scale_values(k_scale, "k_scale"), scale_values(v_scale, "v_scale")
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
        k, v = (token_rows(x, name, d, bits) for x, name in ((k, "k"), (v, "v")))
        k_scale, v_scale = scale_values(k_scale, "k_scale"), scale_values(v_scale, "v_scale")
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
        if not calls:
            return []
        batch = stack_calls(self.params, calls)
        for seq in batch.seqs:
            self._own(seq)
        batch.heads = [self._head(c.seq, c.head) for c in calls]
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
        seqs = batch.seqs
        if not isinstance(seqs, (list, tuple)):
            raise ValueError(f"batch.seqs must be a list of SeqAlloc, not {type(seqs).__name__}")
        for seq in {id(s): s for s in seqs}.values():
            self._own(seq)
        self._start_attend(check_batch(self.params, batch))

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
