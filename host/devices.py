"""Accelerator devices with interchangeable backends: the host API of the ``hpu`` card.

:class:`HpuDevice` is one HPU card: device memory that holds KV caches in the layout of
:class:`~tandem.mappings.hpu.kv_layout.KvLayout`, and the attention engine. Its API is small and
synchronous::

    dev = HpuDevice(HpuParams(), memory_bytes=64 << 20, backend="golden")  # or "rtl"
    seq = dev.allocate(tokens=1024, heads=3)       # one KV region per head, 1024 tokens each
    dev.write_kv(seq, head, k, k_scale, v, v_scale)  # int8 rows, binary16 scales (prefill)
    dev.append(seq, head, k1, k1_scale, v1, v1_scale)  # host write of one more token
    y = dev.attend(seq, head, q, q_scale, new=(k, ks, v, vs))  # engine appends, then attends
    results = dev.attend_many([Attend(seq, head, q, q_scale, new=...), ...])  # one transfer
    dev.free(seq)
    dev.close()

Capacity is counted in bytes (``capacity_bytes``, ``free_bytes``) and in sequences
(``max_sequences``, ``free_sequences``). A sequence's regions are reserved for its whole
capacity at allocation (a region grows in place: a token's address follows from its
position), so appends never fail for lack of memory.

Backends: ``backend="golden"`` (default) runs :func:`~tandem.host.hpu.hpu_golden` on a numpy
image of device memory; ``backend="rtl"`` runs the generated Verilog in Verilator (default) or
Icarus under cocotb in a subprocess (:mod:`tandem.host.transport_rtl`). Everything here sits
on the abstract :class:`~tandem.host.transport.Transport`, so both return bit-identical
results for the same calls; ``dev.last_cycles`` is modelled engine cycles (golden, see
:func:`~tandem.host.transport.call_cycles`) or simulated cycles (rtl).
"""

from dataclasses import dataclass, field

import numpy as np
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS

from .hpu import HpuParams, HpuRequest, HpuResult
from .transport import GoldenTransport, Transport

__all__ = [
    "BACKENDS",
    "Attend",
    "CapacityError",
    "DeviceError",
    "HpuDevice",
    "SeqAlloc",
    "make_transport",
]

BACKENDS = ("golden", "rtl")


class DeviceError(Exception):
    """A device cannot do what was asked (capacity, simulator failure)."""


class CapacityError(DeviceError):
    """Not enough free device memory or sequence slots."""


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
        First byte of the allocation; head ``h`` starts at :meth:`base`.
    region_bytes
        Bytes of one region.
    lengths
        Tokens stored per head.
    """

    handle: int
    capacity: int
    heads: int
    start: int
    region_bytes: int
    lengths: np.ndarray = field(repr=False)
    freed: bool = False

    def base(self, head: int) -> int:
        """Byte address of head ``head``'s region."""
        if not 0 <= head < self.heads:
            raise IndexError(f"head {head} out of range 0..{self.heads - 1}")
        return self.start + head * self.region_bytes

    @property
    def nbytes(self) -> int:
        """Bytes reserved for this sequence."""
        return self.heads * self.region_bytes


@dataclass
class Attend:
    """One attention call for :meth:`HpuDevice.attend_many`.

    ``q`` are the ``gqa_group`` integer queries [G, head_dim], ``q_scale`` their binary16 score
    scales; ``new`` is ``(k, k_scale, v, v_scale)`` of a token the engine appends first (int8
    row, binary16 scale) or None; ``partial`` asks for ``(m, l, o)``.
    """

    seq: SeqAlloc
    head: int
    q: np.ndarray
    q_scale: np.ndarray
    new: tuple | None = None
    partial: bool = False


def make_transport(backend: str, params: HpuParams, memory_bytes: int, **options) -> Transport:
    """The transport of ``backend`` (``"golden"`` or ``"rtl"``); ``options`` go to the RTL one."""
    if backend == "golden":
        if options:
            raise ValueError(f"the golden backend takes no options, got {sorted(options)}")
        return GoldenTransport(params, memory_bytes)
    if backend == "rtl":
        from .transport_rtl import RtlTransport

        return RtlTransport(params, memory_bytes, **options)
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


class HpuDevice:
    """One HPU card: KV memory management and the attention engine.

    Parameters
    ----------
    params
        Engine parameters (default :class:`HpuParams()`).
    memory_bytes
        Device memory in bytes (the U55C has 16 GiB; the default 64 MiB suits simulation).
    max_sequences
        Sequence slots (allocations) the device serves at once.
    backend
        ``"golden"`` or ``"rtl"``.
    name
        Label in traces and messages.
    **options
        For ``backend="rtl"``: ``simulator`` (``"verilator"`` or ``"icarus"``), ``timeout_s``,
        ``cache_dir``, ``run_dir`` (see :class:`~tandem.host.transport_rtl.RtlTransport`).
    """

    def __init__(
        self,
        params: HpuParams | None = None,
        *,
        memory_bytes: int = 64 << 20,
        max_sequences: int = 256,
        backend: str = "golden",
        name: str = "hpu0",
        **options,
    ):
        self.params = HpuParams() if params is None else params
        if memory_bytes < self.params.layout.page_bytes:
            raise ValueError(f"memory_bytes must hold one page, not {memory_bytes}")
        if max_sequences < 1:
            raise ValueError(f"max_sequences must be at least 1, not {max_sequences}")
        self.name = name
        self.backend = backend
        self.capacity_bytes = int(memory_bytes)
        self.max_sequences = int(max_sequences)
        self.transport = make_transport(backend, self.params, self.capacity_bytes, **options)
        self._free: list[tuple[int, int]] = [(0, self.capacity_bytes)]  # (start, size)
        self._allocs: dict[int, SeqAlloc] = {}
        self._next_handle = 0
        #: Cycles of the most recent engine call, and of every call since creation.
        self.last_cycles = 0
        self.total_cycles = 0
        self.calls = 0

    # --- capacity ------------------------------------------------------------------------
    @property
    def free_bytes(self) -> int:
        """Bytes not reserved by any sequence."""
        return sum(size for _, size in self._free)

    @property
    def largest_free(self) -> int:
        """The largest contiguous free span in bytes (what one allocation can get)."""
        return max((size for _, size in self._free), default=0)

    @property
    def free_sequences(self) -> int:
        """Sequence slots left."""
        return self.max_sequences - len(self._allocs)

    def bytes_for(self, tokens: int, heads: int = 1) -> int:
        """Bytes an allocation of ``heads`` regions of ``tokens`` tokens reserves."""
        return heads * self.params.layout.region_bytes(tokens)

    def tokens_fit(self, heads: int = 1) -> int:
        """Most tokens (whole pages, at most ``max_seq_len``) one new allocation can hold."""
        if self.free_sequences == 0:
            return 0
        pages = self.largest_free // (heads * self.params.layout.page_bytes)
        return min(pages * PAGE_TOKENS, self.params.max_seq_len)

    # --- allocation ----------------------------------------------------------------------
    def allocate(self, tokens: int, heads: int = 1) -> SeqAlloc:
        """Reserve ``heads`` KV regions of ``tokens`` tokens each (first fit).

        Raises :class:`CapacityError` when no slot or no contiguous span is free.
        """
        p = self.params
        if not 1 <= tokens <= p.max_seq_len:
            raise ValueError(f"tokens must be in 1..{p.max_seq_len} (max_seq_len), not {tokens}")
        if heads < 1:
            raise ValueError(f"heads must be at least 1, not {heads}")
        if self.free_sequences == 0:
            raise CapacityError(f"{self.name}: all {self.max_sequences} sequence slots are in use")
        region = p.layout.region_bytes(tokens)
        need = heads * region
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
        alloc = SeqAlloc(
            self._next_handle, tokens, heads, start, region, np.zeros(heads, dtype=np.int64)
        )
        self._allocs[alloc.handle] = alloc
        self._next_handle += 1
        return alloc

    def free(self, seq: SeqAlloc) -> None:
        """Release ``seq``'s memory and slot."""
        self._own(seq)
        del self._allocs[seq.handle]
        seq.freed = True
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
        if seq.freed or self._allocs.get(seq.handle) is not seq:
            raise ValueError(f"{self.name}: sequence {seq.handle} is not allocated on this device")

    # --- host writes ---------------------------------------------------------------------
    def write_kv(self, seq: SeqAlloc, head: int, k, k_scale, v, v_scale, start: int = 0) -> None:
        """Write int8 ``k``, ``v`` [n, head_dim] and binary16 scales [n] from position ``start``.

        The usual call comes once after prefill with ``start=0``; the head's length becomes
        ``start + n``.
        """
        self._own(seq)
        layout = self.params.layout
        k = _int_rows(k, self.params.head_dim, 8, "k")
        v = _int_rows(v, self.params.head_dim, 8, "v")
        n = len(k)
        if len(v) != n or np.size(k_scale) != n or np.size(v_scale) != n:
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
        first = (start // PAGE_TOKENS) * layout.page_bytes
        last = layout.region_bytes(start + n)
        span = self.transport.read(base + first, last - first)
        layout.write_rows(span, -first, start, k, k_scale, value=False)
        layout.write_rows(span, -first, start, v, v_scale, value=True)
        self.transport.write(base + first, span)
        seq.lengths[head] = max(seq.lengths[head], start + n)

    def append(self, seq: SeqAlloc, head: int, k, k_scale, v, v_scale) -> None:
        """Host write of one token (or several rows) at the end of head ``head``."""
        k = np.asarray(k).reshape(-1, self.params.head_dim)
        self.write_kv(
            seq,
            head,
            k,
            np.reshape(k_scale, -1),
            np.asarray(v).reshape(-1, self.params.head_dim),
            np.reshape(v_scale, -1),
            start=int(seq.lengths[head]),
        )

    def read_kv(self, seq: SeqAlloc, head: int):
        """``(k, k_scale, v, v_scale)`` stored for head ``head`` (host read, for checks)."""
        self._own(seq)
        layout = self.params.layout
        n = int(seq.lengths[head])
        span = self.transport.read(seq.base(head), layout.region_bytes(max(n, 1)))
        k, ks = layout.read_rows(span, 0, 0, n, value=False)
        v, vs = layout.read_rows(span, 0, 0, n, value=True)
        return k, ks, v, vs

    # --- attention -----------------------------------------------------------------------
    def attend(
        self, seq: SeqAlloc, head: int, q, q_scale, new=None, partial: bool = False
    ) -> HpuResult:
        """Attention of the G queries of one head over its tokens (after appending ``new``)."""
        return self.attend_many([Attend(seq, head, q, q_scale, new, partial)])[0]

    def attend_many(self, calls: list[Attend]) -> list[HpuResult]:
        """Run ``calls`` as one batch of descriptors (one transfer); results in order.

        A head may appear more than once; each call sees the tokens the earlier ones appended.
        """
        p = self.params
        requests = []
        lengths = {}
        for call in calls:
            seq = call.seq
            self._own(seq)
            key = (seq.handle, call.head)
            length = lengths.get(key, int(seq.lengths[call.head]))
            request = HpuRequest(
                seq_id=(seq.handle * seq.heads + call.head) & 0xFFFFFFFF,
                base=seq.base(call.head),
                length=length,
                q=_int_rows(call.q, p.head_dim, p.q_bits, "q", rows=p.gqa_group),
                q_scale=np.asarray(call.q_scale, dtype=np.float16).reshape(p.gqa_group),
                partial=call.partial,
            )
            if call.new is not None:
                k, ks, v, vs = call.new
                if length >= seq.capacity:
                    raise CapacityError(
                        f"{self.name}: head {call.head} of sequence {seq.handle} is full "
                        f"({seq.capacity} tokens)"
                    )
                request.new_k = _int_rows(k, p.head_dim, 8, "new k", rows=1)[0]
                request.new_v = _int_rows(v, p.head_dim, 8, "new v", rows=1)[0]
                request.new_k_scale = float(np.float16(np.reshape(ks, -1)[0]))
                request.new_v_scale = float(np.float16(np.reshape(vs, -1)[0]))
                length += 1
                request.length = length
            if length == 0:
                raise ValueError(f"head {call.head} of sequence {seq.handle} holds no token")
            lengths[key] = length
            requests.append(request)
        if not requests:
            return []
        outcome = self.transport.run(requests)
        for (handle, head), length in lengths.items():
            self._allocs[handle].lengths[head] = length
        self.last_cycles = outcome.cycles
        self.total_cycles += outcome.cycles
        self.calls += 1
        return outcome.results

    # --- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the backend (the RTL simulator); the device is unusable afterwards."""
        self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"HpuDevice({self.name!r}, backend={self.backend!r}, {len(self._allocs)} sequences, "
            f"{self.free_bytes}/{self.capacity_bytes} bytes free)"
        )


def _int_rows(values, head_dim: int, bits: int, name: str, rows: int | None = None) -> np.ndarray:
    """``values`` as int64 [n, head_dim], checked against the signed ``bits``-bit range."""
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers (quantize first), not {array.dtype}")
    array = array.astype(np.int64).reshape(-1, head_dim)
    if rows is not None and len(array) != rows:
        raise ValueError(f"{name} must have {rows} rows of {head_dim}, not {len(array)}")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if array.size and (array.min() < lo or array.max() > hi):
        raise ValueError(f"{name} must be int{bits} ({lo}..{hi})")
    return array
