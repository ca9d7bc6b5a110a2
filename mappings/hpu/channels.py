"""HBM pseudo-channels of an HPU card: where an address lies, what a request reads from each,
and where the allocator puts KV regions so that one decode call reads every channel evenly.

An HBM card's memory is a row of pseudo-channels, each a contiguous range of
``channel_bytes`` (the U55C: 32 of 512 MiB, ``constraints/boards/u55c.yaml``). A port streams
from one channel at a time, so a call whose regions sit in a few channels draws only those
channels' share of the card's bandwidth, however many engine ports it has.

:class:`ChannelGeometry` is that row: the real board's (:meth:`ChannelGeometry.of_board`) or
the same count scaled down to the small memories the simulated devices use
(:meth:`ChannelGeometry.scaled`). :func:`read_spans` and :func:`request_channel_bytes` count
the bytes a request's bursts (:meth:`~tandem.mappings.hpu.kv_layout.KvLayout.read_bursts`)
take from each channel.

:class:`ChannelSpace` is the channel-aware allocator that :class:`~tandem.host.hpu.device.
HpuDevice` runs with ``placement="channels"`` and that the placement model
(:class:`~tandem.mappings.hpu.placement.CardSpace`) copies. Rule, for the ``heads`` regions of
one allocation, in head order: each region lies whole inside one channel; region ``h`` belongs
to call group ``g = h // group`` (the regions one call reads of a sequence: one layer's KV
heads); it goes to the channel, among those with a free span that holds it, with the fewest
bytes of group ``g`` already (over every allocation on the card; in the split layout, first
the run of channels one engine reads with the fewest, then its channel with the fewest), ties
to the first channel counting cyclically from ``(g * group) % channels``; inside that channel,
to the first free span that holds it (first fit). The fixed cyclic order keeps any run of
sequences in allocation order within one region per channel of even for each group (a
sub-batch is such a run), and the rotating start spreads one sequence's layers over every
channel.

With the split KV layout (:attr:`KvLayout.value_offset
<tandem.mappings.hpu.kv_layout.KvLayout.value_offset>` a whole number ``k`` of channels), the
channels come in runs of ``k`` K channels followed by ``k`` V channels: regions are placed in K
channels only, and each region's V span lies ``value_offset`` above it, in the V channel that
mirrors its K channel. An engine's K port then streams from one channel while its V port
streams from another. With the interleaved layout a page's K and V parts lie side by side, so
they share a channel.

A card of several engines (``hpu-card``) gives each engine a contiguous run of channels
(:func:`engine_bases`, :func:`engine_of`): its ports reach those channels only, so the card's
dispatcher sends a request to the engine that owns its base address, and the golden model
routes by the same function.
"""

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from .kv_layout import BLOCK_BYTES, PAGE_TOKENS, KvLayout

__all__ = [
    "ChannelGeometry",
    "ChannelSpace",
    "board_channels",
    "engine_bases",
    "engine_of",
    "read_spans",
    "request_channel_bytes",
]


@cache
def board_channels(board: str = "u55c") -> tuple[int, int]:
    """``(channels, channel_bytes)`` of the first (fastest) memory of ``board``'s file."""
    from tandem.boards import load_board  # the constraints package; not needed for arithmetic

    memory = load_board(board).memory[0]
    channels = int(memory["channels"])
    total = round(float(memory["capacity_gib"]) * (1 << 30))
    return channels, total // channels


@dataclass(frozen=True)
class ChannelGeometry:
    """The pseudo-channels of a card's memory: ``channels`` ranges of ``channel_bytes``.

    Parameters
    ----------
    channels
        Number of pseudo-channels.
    channel_bytes
        Bytes per channel, a multiple of 64; channel ``c`` holds addresses
        ``c * channel_bytes`` up to the next channel.
    memory_bytes
        The memory's size (default ``channels * channel_bytes``); a smaller one leaves the
        last channels short (more than one channel's worth smaller is refused).
    """

    channels: int
    channel_bytes: int
    memory_bytes: int = 0

    def __post_init__(self):
        if not isinstance(self.channels, int) or self.channels < 1:
            raise ValueError(f"channels must be a positive integer, not {self.channels!r}")
        cb = self.channel_bytes
        if not isinstance(cb, int) or cb < BLOCK_BYTES or cb % BLOCK_BYTES:
            raise ValueError(f"channel_bytes must be a positive multiple of 64, not {cb!r}")
        full = self.channels * cb
        memory = self.memory_bytes or full
        if not isinstance(memory, int) or not full - cb < memory <= full:
            raise ValueError(
                f"memory_bytes must reach into the last of {self.channels} channels of {cb} "
                f"bytes ({full - cb + 1}..{full}), not {self.memory_bytes!r}"
            )
        object.__setattr__(self, "memory_bytes", memory)

    @classmethod
    def of_board(cls, board: str = "u55c") -> "ChannelGeometry":
        """The real card's geometry, from its board file (``constraints/boards/<board>.yaml``)."""
        channels, channel_bytes = board_channels(board)
        return cls(channels, channel_bytes)

    @classmethod
    def scaled(cls, memory_bytes: int, channels: int | None = None) -> "ChannelGeometry":
        """``channels`` (default the U55C's) channels over a memory of ``memory_bytes``.

        Each channel gets ``memory_bytes / channels`` rounded up to 64 bytes, the last ones
        what is left; a memory too small to give every channel 64 bytes has fewer channels.
        """
        if channels is None:
            channels = board_channels()[0]
        if not isinstance(memory_bytes, int) or memory_bytes < BLOCK_BYTES:
            raise ValueError(f"memory_bytes must be at least 64, not {memory_bytes!r}")
        if not isinstance(channels, int) or channels < 1:
            raise ValueError(f"channels must be a positive integer, not {channels!r}")
        per = -(-memory_bytes // (channels * BLOCK_BYTES)) * BLOCK_BYTES
        return cls(-(-memory_bytes // per), per, memory_bytes)

    def channel_of(self, address):
        """The channel of byte ``address`` (arrays allowed)."""
        return np.asarray(address) // self.channel_bytes

    def channel_range(self, channel: int) -> tuple[int, int]:
        """``(start, size)`` of ``channel``'s bytes."""
        start = channel * self.channel_bytes
        return start, min(self.channel_bytes, self.memory_bytes - start)

    def span_bytes(self, starts, sizes) -> np.ndarray:
        """Bytes per channel (int64 [channels]) of the spans ``[starts, starts + sizes)``."""
        starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        ends = starts + np.asarray(sizes, dtype=np.int64).reshape(-1)
        cb = self.channel_bytes
        first, last = starts // cb, (np.maximum(ends, starts + 1) - 1) // cb
        inside = first == last
        out = np.bincount(first[inside], ends[inside] - starts[inside], self.channels)
        out = out[: self.channels].astype(np.int64)
        if not inside.all():  # a span across channel boundaries: its overlap with each
            lo = np.arange(self.channels, dtype=np.int64) * cb
            s, e = starts[~inside, None], ends[~inside, None]
            out += (np.clip(e, lo, lo + cb) - np.clip(s, lo, lo + cb)).sum(axis=0)
        return out


def engine_bases(geometry: ChannelGeometry, engines: int) -> tuple[int, ...]:
    """The first address of each engine's channels on a card of ``engines`` engines.

    Engine ``e`` owns the channels ``c`` with ``c * engines // channels == e``: a contiguous
    run from channel ``ceil(e * channels / engines)``, the runs as even as the counts allow
    (the U55C's 32 channels and 16 engines: two each, one per read port). Raises
    ``ValueError`` unless ``1 <= engines <= channels``.
    """
    channels = geometry.channels
    if not isinstance(engines, int) or not 1 <= engines <= channels:
        raise ValueError(f"engines must be in 1..{channels} (the channels), not {engines!r}")
    return tuple(-(-e * channels // engines) * geometry.channel_bytes for e in range(engines))


def engine_of(geometry: ChannelGeometry, engines: int, address):
    """The engine that owns byte ``address`` (arrays allowed): the last one whose first
    address (:func:`engine_bases`) is at or below it; addresses past the memory go to the
    last engine, as the card's dispatcher sends them."""
    bases = np.asarray(engine_bases(geometry, engines), dtype=np.int64)
    return np.searchsorted(bases, np.asarray(address, dtype=np.int64), side="right") - 1


def read_spans(layout: KvLayout, bases, rows) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, sizes)`` of the contiguous spans the engine reads for requests at ``bases``
    reading their first ``rows`` tokens: per page, its K part's and its V part's scale block
    and rows, which :meth:`KvLayout.read_bursts` cuts into bursts (same bytes, vectorized)."""
    bases = np.asarray(bases, dtype=np.int64).reshape(-1)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    pages = -(-rows // PAGE_TOKENS)
    request = np.repeat(np.arange(len(bases)), pages)
    page = np.arange(int(pages.sum())) - np.repeat(np.cumsum(pages) - pages, pages)
    count = np.minimum(PAGE_TOKENS, rows[request] - page * PAGE_TOKENS)
    k_start = bases[request] + page * layout.page_stride
    size = BLOCK_BYTES + count * layout.row_bytes
    starts = np.stack([k_start, k_start + layout.value_shift], axis=1).reshape(-1)
    return starts, np.repeat(size, 2)


def request_channel_bytes(geometry: ChannelGeometry, layout: KvLayout, bases, rows) -> np.ndarray:
    """Bytes (int64 [channels]) that requests at ``bases`` reading ``rows`` tokens each take
    from each channel (K and V rows and their scale blocks)."""
    return geometry.span_bytes(*read_spans(layout, bases, rows))


@dataclass
class ChannelSpace:
    """The free memory of one card by channel, and the channel-aware allocation rule (module
    docstring).

    Parameters
    ----------
    geometry
        The card's channels.
    value_offset
        The KV layout's :attr:`~tandem.mappings.hpu.kv_layout.KvLayout.value_offset`: 0, or
        ``k`` whole channels with the channel count a multiple of ``2 k`` and every channel
        full size (the split layout: regions go to the K channels of each run of ``2 k``).

    Attributes
    ----------
    free
        Per channel, its free spans ``[start, size]`` in address order (none crosses into
        another channel); a V channel of the split layout has none (its bytes mirror its K
        channel's).
    loads
        Bytes of each call group's regions per channel: ``{group index: int64 [channels]}``.
    """

    geometry: ChannelGeometry
    value_offset: int = 0
    free: list[list[list[int]]] = field(default_factory=list)
    loads: dict[int, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        g = self.geometry
        if self.value_offset:
            k, rest = divmod(self.value_offset, g.channel_bytes)
            if (
                rest
                or not k
                or g.channels % (2 * k)
                or g.memory_bytes != g.channels * g.channel_bytes
            ):
                raise ValueError(
                    f"a split KV layout needs value_offset a whole number k of channels "
                    f"({g.channel_bytes} bytes each), {g.channels} channels a multiple of 2k, "
                    f"all full; not value_offset {self.value_offset}"
                )
        if not self.free:
            self.free = [
                [list(g.channel_range(c))] if self.holds_keys(c) else [] for c in range(g.channels)
            ]

    def holds_keys(self, channel: int) -> bool:
        """Whether regions (their K spans) may start in ``channel``."""
        if not self.value_offset:
            return True
        return (channel // (self.value_offset // self.geometry.channel_bytes)) % 2 == 0

    def copy(self) -> "ChannelSpace":
        """An independent copy (what a placement works on before it commits)."""
        free = [[list(span) for span in spans] for spans in self.free]
        loads = {g: v.copy() for g, v in self.loads.items()}
        return ChannelSpace(self.geometry, self.value_offset, free, loads)

    @property
    def spans(self) -> list[int]:
        """Sizes in bytes of the free spans, in address order."""
        return [size for spans in self.free for _, size in spans]

    @property
    def free_bytes(self) -> int:
        """Bytes not allocated (the V channels' mirror of the free K spans included)."""
        return sum(self.spans) * (2 if self.value_offset else 1)

    @property
    def largest(self) -> int:
        """The largest free span in bytes (at most one channel)."""
        return max(self.spans, default=0)

    def regions_fit(self, region_bytes: int) -> int:
        """How many regions of ``region_bytes`` fit, each whole inside one channel."""
        return sum(size // region_bytes for size in self.spans)

    def take(self, region_bytes: int, heads: int, group: int) -> np.ndarray:
        """Allocate ``heads`` regions of ``region_bytes``; their bases (int64 [heads]).

        Raises ``ValueError`` when they do not all fit, and takes nothing. A region taken
        from a span that holds it lowers :meth:`regions_fit` by exactly one, so the regions
        fit exactly when ``regions_fit(region_bytes) >= heads``, wherever each one goes.
        """
        if self.regions_fit(region_bytes) < heads:
            raise ValueError(f"{heads} regions of {region_bytes} bytes do not fit")
        channels = self.geometry.channels
        index = np.arange(channels)
        # A run: the channels one engine's ports read (the split layout's 2 k), else a channel.
        # Runs take regions in turn: a channel's rank puts the first K channel of every run
        # before the second of any.
        run_size = 2 * self.value_offset // self.geometry.channel_bytes or 1
        run = index // run_size
        rank = index % run_size * (channels // run_size) + run
        room = np.array([max((s for _, s in spans), default=0) for spans in self.free])
        bases = np.empty(heads, dtype=np.int64)
        for h in range(heads):
            g = h // group
            load = self.loads.setdefault(g, np.zeros(channels, dtype=np.int64))
            order = (rank - g * group) % channels
            run_load = np.bincount(run, load, channels // run_size)[run]
            fits = np.flatnonzero(room >= region_bytes)
            c = int(fits[np.lexsort((order[fits], load[fits], run_load[fits]))[0]])
            spans = self.free[c]
            span = next(s for s in spans if s[1] >= region_bytes)
            bases[h] = span[0]
            span[0] += region_bytes
            span[1] -= region_bytes
            if not span[1]:
                spans.remove(span)
            room[c] = max((s for _, s in spans), default=0)
            load[c] += region_bytes
        return bases

    def give(self, bases, region_bytes: int, group: int) -> None:
        """Return the regions at ``bases`` (in head order, as :meth:`take` gave them)."""
        for h, base in enumerate(np.asarray(bases).tolist()):
            c = int(self.geometry.channel_of(base))
            self.loads[h // group][c] -= region_bytes
            spans = sorted([*self.free[c], [base, region_bytes]])
            merged = [spans[0]]
            for start, size in spans[1:]:
                if merged[-1][0] + merged[-1][1] == start:
                    merged[-1][1] += size
                else:
                    merged.append([start, size])
            self.free[c] = merged
