"""Where an HPU card keeps its KV regions: the sequences it holds and its free memory.

A sequence (:class:`SeqAlloc`) is ``heads`` KV regions of ``capacity`` tokens each, reserved for
its whole capacity at allocation (a region grows in place: a token's address follows from its
position), so appends never fail for lack of memory.

Memory is a row of HBM pseudo-channels (:class:`~tandem.mappings.hpu.channels.ChannelGeometry`:
``channels`` of ``memory_bytes / channels``, the U55C's 32 by default). :class:`KvSpace` is the
free memory of one card under one of :data:`PLACEMENTS`. With ``"contiguous"`` a sequence's
regions lie one after another in the first free span that holds them all; with ``"channels"``
each region lies whole inside one channel, spread so that the regions one decode call reads
(one layer's KV heads of every sequence, ``allocate(..., group=kv_heads)``) load every channel
evenly (:class:`~tandem.mappings.hpu.channels.ChannelSpace`).
"""

from dataclasses import dataclass, field

import numpy as np
from tandem.mappings.hpu.channels import ChannelGeometry, ChannelSpace
from tandem.mappings.hpu.kv_layout import KvLayout
from tandem.mappings.hpu.placement import CardSpace

__all__ = ["PLACEMENTS", "KvSpace", "SeqAlloc"]

#: How a card places a sequence's regions (see the module docstring).
PLACEMENTS = ("contiguous", "channels")


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


class KvSpace:
    """The free memory of one card, and where a new sequence's regions go.

    Parameters
    ----------
    geometry
        The memory's pseudo-channels.
    layout
        The KV layout the engine reads (a split layout needs ``placement="channels"``).
    placement
        One of :data:`PLACEMENTS`.
    """

    def __init__(self, geometry: ChannelGeometry, layout: KvLayout, placement: str):
        if layout.split and placement != "channels":
            raise ValueError(
                f"a split KV layout (value_offset {layout.value_offset}) needs "
                f"placement='channels', not {placement!r}"
            )
        #: Free spans ``(start, size)`` of the contiguous allocator, in address order.
        self.free = [(0, geometry.memory_bytes)]
        #: The channel-aware allocator (``placement="channels"``), else None.
        self.channels = None
        if placement == "channels":
            self.channels = ChannelSpace(geometry, layout.value_offset)

    @property
    def spans(self) -> list[int]:
        """Sizes in bytes of the free spans, in address order (what the first-fit allocator
        chooses from; the placement of :mod:`tandem.mappings.hpu.placement` reads it). By
        channel, no span crosses into another channel."""
        if self.channels is not None:
            return self.channels.spans
        return [size for _, size in self.free]

    def card_space(self, slots: int) -> CardSpace:
        """This free memory as the placement model keeps it (a copy), with ``slots`` free
        sequence slots."""
        channels = None if self.channels is None else self.channels.copy()
        return CardSpace(self.spans, slots, channels)

    def take(self, region: int, heads: int, group: int) -> np.ndarray | None:
        """Reserve ``heads`` regions of ``region`` bytes, whose call groups are ``h // group``;
        their first bytes, int64 [heads], or None (nothing reserved) where they do not fit."""
        if self.channels is not None:
            try:
                return self.channels.take(region, heads, group)
            except ValueError:
                return None
        need = heads * region
        for i, (start, size) in enumerate(self.free):
            if size >= need:
                self.free[i] = (start + need, size - need)
                if self.free[i][1] == 0:
                    del self.free[i]
                return start + np.arange(heads, dtype=np.int64) * region
        return None

    def give(self, seq: SeqAlloc) -> None:
        """Return ``seq``'s regions to the free memory."""
        if self.channels is not None:
            self.channels.give(seq.bases, seq.region_bytes, seq.group)
            return
        spans = sorted([*self.free, (seq.start, seq.nbytes)])
        merged = [spans[0]]
        for start, size in spans[1:]:
            last_start, last_size = merged[-1]
            if last_start + last_size == start:
                merged[-1] = (last_start, last_size + size)
            else:
                merged.append((start, size))
        self.free = merged
