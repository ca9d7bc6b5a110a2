"""Where sequences go: which HPU card holds which tokens of each sequence's KV cache.

One placement, read by both sides: the decode runtime
(:class:`tandem.host.system.decode.HpuAttention`) allocates the slices :func:`place` decides,
and the performance model (:func:`tandem.host.system.perf.hpu_step_cycles`) counts the
requests they cause.

Rule: a sequence reserves its whole capacity (prompt + new tokens) for every one of its
``heads`` (layer, KV head) regions when it moves to the cards. Its tokens go, in order, to the
card with the most room (the largest contiguous free span; ties to the lowest index), as many
as that card holds (whole pages of :data:`~tandem.mappings.hpu.kv_layout.PAGE_TOKENS` tokens,
at most ``max_seq_len``, at most ``max_slice_tokens``); what is left goes to the next card
chosen the same way. A sequence that fits one card is one slice; a longer one is split into
slices of whole pages. A card without a free sequence slot or without room for one page has no
room. When no card has room for the next slice, the placement fails (:class:`NoRoomError`) and
nothing is taken.

Cards are modelled as their allocator keeps them (:class:`CardSpace`): the free spans in
address order and the free sequence slots; an allocation takes the first span that is large
enough (first fit), as :meth:`tandem.host.hpu.device.HpuDevice.allocate` does. A card whose
device places by pseudo-channel (``placement="channels"``) carries a copy of its
:class:`~tandem.mappings.hpu.channels.ChannelSpace`, the allocator itself: its regions go one
by one into the channels (each whole inside one), its room is its free bytes, and a slice fits
when every one of its ``heads`` regions finds a span.
"""

from dataclasses import dataclass, field

from .channels import ChannelSpace
from .kv_layout import PAGE_TOKENS, KvLayout

__all__ = ["CardSpace", "NoRoomError", "Slice", "place", "place_batch"]


class NoRoomError(Exception):
    """No card has room for the next slice of a sequence."""


@dataclass(frozen=True)
class Slice:
    """Tokens ``first .. first + tokens - 1`` of a sequence, held by card ``card``."""

    card: int
    first: int
    tokens: int

    def holds(self, position: int) -> bool:
        """Whether the token at ``position`` lies in this slice."""
        return self.first <= position < self.first + self.tokens


@dataclass
class CardSpace:
    """The free memory of one card as its allocator keeps it.

    Parameters
    ----------
    spans
        Sizes in bytes of the free spans, in address order.
    slots
        Free sequence slots (allocations the card still serves).
    channels
        The card's channel-aware allocator (a copy, changed by :meth:`take_regions`), or None
        for a contiguous allocator; ``spans`` then mirrors its free spans.
    """

    spans: list[int]
    slots: int = field(default=1 << 62)
    channels: ChannelSpace | None = None

    @classmethod
    def empty(cls, capacity_bytes: int, slots: int = 1 << 62) -> "CardSpace":
        """A card with nothing allocated."""
        return cls([int(capacity_bytes)], int(slots))

    def copy(self) -> "CardSpace":
        """An independent copy."""
        channels = None if self.channels is None else self.channels.copy()
        return CardSpace(list(self.spans), self.slots, channels)

    @property
    def largest(self) -> int:
        """The largest contiguous free span in bytes."""
        return max(self.spans, default=0)

    @property
    def room(self) -> int:
        """What :func:`place` ranks cards by: the largest free span (contiguous), or the free
        bytes (by channel: the regions spread over every channel)."""
        return self.largest if self.channels is None else sum(self.spans)

    def tokens_fit(self, layout: KvLayout, heads: int, max_seq_len: int) -> int:
        """Most tokens (whole pages, at most ``max_seq_len``) one new allocation can hold."""
        if self.slots <= 0:
            return 0
        if self.channels is None:
            pages = self.largest // (heads * layout.page_stride)
            return min(pages * PAGE_TOKENS, max_seq_len)
        # The most pages per region such that all `heads` regions find a span (regions_fit
        # falls as regions grow): a binary search.
        lo, hi = 0, min(-(-max_seq_len // PAGE_TOKENS), self.largest // layout.page_stride)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.channels.regions_fit(mid * layout.page_stride) >= heads:
                lo = mid
            else:
                hi = mid - 1
        return min(lo * PAGE_TOKENS, max_seq_len)

    def take_regions(self, region_bytes: int, heads: int, group: int) -> None:
        """Take ``heads`` regions of ``region_bytes`` (call groups of ``group``) and a slot, as
        the card's allocator does."""
        if self.channels is None:
            self.take(heads * region_bytes)
            return
        try:
            self.channels.take(region_bytes, heads, group)
        except ValueError as exc:
            raise NoRoomError(str(exc)) from None  # tokens_fit rules this out
        self.spans = self.channels.spans
        self.slots -= 1

    def take(self, nbytes: int) -> None:
        """Take ``nbytes`` from the first span large enough (first fit) and one slot."""
        for i, size in enumerate(self.spans):
            if size >= nbytes:
                if size == nbytes:
                    del self.spans[i]
                else:
                    self.spans[i] = size - nbytes
                self.slots -= 1
                return
        raise NoRoomError(f"no free span of {nbytes} bytes")  # tokens_fit rules this out


def place(
    capacity: int,
    cards: list[CardSpace],
    *,
    layout: KvLayout,
    heads: int,
    max_seq_len: int,
    max_slice_tokens: int | None = None,
    group: int | None = None,
) -> list[Slice]:
    """The slices of one sequence of ``capacity`` tokens (see the module docstring).

    Parameters
    ----------
    capacity
        Tokens the sequence reserves.
    cards
        The cards' free memory; updated in place to what is left after the placement (left
        as it was when the placement fails).
    layout
        The KV layout (bytes of a page).
    heads
        KV regions per token (layers x KV heads).
    max_seq_len
        The most tokens one region holds (the engine's ``max_seq_len``).
    max_slice_tokens
        Cap on the tokens of one slice (default none).
    group
        Regions one decode call reads of a sequence (its KV heads per layer; default
        ``heads``), for cards that place by channel.

    Returns
    -------
    list of Slice
        In token order.

    Raises
    ------
    NoRoomError
        When no card has room for the next slice.
    """
    work = [c.copy() for c in cards]
    slices, first = [], 0
    while first < capacity:
        fits = [c.tokens_fit(layout, heads, max_seq_len) for c in work]
        room = [c.room if f else -1 for c, f in zip(work, fits)]
        best = room.index(max(room))  # the most free memory; ties to the lowest index
        take = min(capacity - first, fits[best], max_slice_tokens or capacity)
        if take <= 0:
            raise NoRoomError(
                f"no card has room for another slice of a {capacity}-token sequence "
                f"({heads} KV regions per token)"
            )
        work[best].take_regions(layout.region_bytes(take), heads, group or heads)
        slices.append(Slice(best, first, take))
        first += take
    for card, after in zip(cards, work):
        card.spans, card.slots, card.channels = after.spans, after.slots, after.channels
    return slices


def place_batch(
    capacities,
    cards: list[CardSpace],
    *,
    layout: KvLayout,
    heads: int,
    max_seq_len: int,
    max_slice_tokens: int | None = None,
    group: int | None = None,
) -> list[list[Slice]]:
    """:func:`place` for each sequence in order, each seeing what the earlier ones took."""
    return [
        place(
            int(c),
            cards,
            layout=layout,
            heads=heads,
            max_seq_len=max_seq_len,
            max_slice_tokens=max_slice_tokens,
            group=group,
        )
        for c in capacities
    ]
