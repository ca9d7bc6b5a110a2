"""Placement of sequences on HPU cards (mappings/hpu/placement.py): by hand, against the
runtime's allocations (host/system/decode.py) and against the performance model."""

import pytest
from tandem.host.devices import CapacityError, HpuDevice
from tandem.host.hpu import HpuParams
from tandem.host.system.decode import HpuAttention
from tandem.host.system.model import LlamaConfig
from tandem.mappings.hpu.kv_layout import KvLayout
from tandem.mappings.hpu.placement import CardSpace, NoRoomError, Slice, place, place_batch

# head_dim 32, G 2: a page of one region is 2 * (64 + 32 * 64) = 4224 bytes.
CONFIG = LlamaConfig(n_layers=2, dim=128, n_heads=4, n_kv_heads=2, hidden=64, vocab=16)
HEADS = CONFIG.n_layers * CONFIG.n_kv_heads
LAYOUT = KvLayout(CONFIG.head_dim)
PAGE = HEADS * LAYOUT.page_bytes  # bytes of one page of every region of a sequence


def params(max_seq_len=512):
    return HpuParams(head_dim=CONFIG.head_dim, gqa_group=CONFIG.gqa_group, max_seq_len=max_seq_len)


def test_place_by_hand():
    cards = [CardSpace.empty(10 * PAGE), CardSpace.empty(10 * PAGE)]
    kw = {"layout": LAYOUT, "heads": HEADS, "max_seq_len": 512}
    # Ties go to the lowest index; 40 tokens take two pages.
    assert place(40, cards, **kw) == [Slice(0, 0, 40)]
    assert cards[0].spans == [8 * PAGE] and cards[0].slots == (1 << 62) - 1
    assert place(10, cards, **kw) == [Slice(1, 0, 10)]
    # 400 tokens: card 1 (9 pages) has more room than card 0 (8): 288 tokens there, the rest
    # (whole pages) on card 0.
    assert place(400, cards, **kw) == [Slice(1, 0, 288), Slice(0, 288, 112)]
    assert cards[0].spans == [4 * PAGE] and cards[1].spans == []
    # A failed placement leaves the cards as they were.
    with pytest.raises(NoRoomError, match="another slice of a 200-token sequence"):
        place(200, cards, **kw)
    assert cards[0].spans == [4 * PAGE] and cards[1].spans == []
    # max_seq_len and max_slice_tokens cut slices.
    fresh = [CardSpace.empty(100 * PAGE)]
    assert place(100, fresh, layout=LAYOUT, heads=HEADS, max_seq_len=64) == [
        Slice(0, 0, 64),
        Slice(0, 64, 36),
    ]
    assert place(70, fresh, **kw, max_slice_tokens=32) == [
        Slice(0, 0, 32),
        Slice(0, 32, 32),
        Slice(0, 64, 6),
    ]


def test_first_fit_and_slots():
    # Spans [3 pages, 5 pages]: the room is the largest span (5 pages); a 2-page slice takes
    # the first span that holds it (first fit), so the 5-page span stays the largest.
    card = CardSpace([3 * PAGE, 5 * PAGE], slots=2)
    assert card.tokens_fit(LAYOUT, HEADS, 512) == 160
    place(64, [card], layout=LAYOUT, heads=HEADS, max_seq_len=512)
    assert card.spans == [PAGE, 5 * PAGE] and card.slots == 1
    place(100, [card], layout=LAYOUT, heads=HEADS, max_seq_len=512)
    assert card.spans == [PAGE, PAGE] and card.slots == 0
    # No slot left: no room, even with free bytes.
    assert card.tokens_fit(LAYOUT, HEADS, 512) == 0
    with pytest.raises(NoRoomError):
        place(1, [card], layout=LAYOUT, heads=HEADS, max_seq_len=512)


def _runtime(memories, max_seq_len=512, max_slice_tokens=None, slots=256):
    devices = [
        HpuDevice(params(max_seq_len), memory_bytes=m, max_sequences=slots, name=f"hpu{i}")
        for i, m in enumerate(memories)
    ]
    return HpuAttention(CONFIG, devices, max_slice_tokens=max_slice_tokens)


@pytest.mark.parametrize(
    ("memories", "max_seq_len", "max_slice_tokens"),
    [
        ([40 * PAGE, 40 * PAGE, 40 * PAGE], 512, None),  # several cards, no split
        ([12 * PAGE, 9 * PAGE + 100], 512, None),  # splits from memory
        ([64 * PAGE, 64 * PAGE], 128, None),  # splits from max_seq_len
        ([64 * PAGE, 64 * PAGE, 64 * PAGE], 512, 48),  # splits from max_slice_tokens
    ],
)
def test_runtime_allocates_what_placement_decides(memories, max_seq_len, max_slice_tokens):
    attention = _runtime(memories, max_seq_len, max_slice_tokens)
    cards = [CardSpace.empty(m, slots=256) for m in memories]
    kw = {"layout": LAYOUT, "heads": HEADS, "max_seq_len": max_seq_len}
    capacities = [300, 40, 170, 33, 90, 260, 5]
    for capacity in capacities:
        try:
            expected = place(capacity, cards, **kw, max_slice_tokens=max_slice_tokens)
        except NoRoomError:
            with pytest.raises(CapacityError, match="no card has room"):
                attention._place(capacity)
            continue
        got = attention._place(capacity)
        assert [Slice(s.device, s.first, s.capacity) for s in got] == expected
        for card, device in zip(cards, attention.devices):
            assert card.spans == [size for _, size in device._free]
            assert card.slots == device.free_sequences


def test_runtime_failed_placement_frees_nothing_left():
    attention = _runtime([6 * PAGE, 6 * PAGE])
    attention._place(100)  # 4 pages on hpu0
    before = [list(d._free) for d in attention.devices]
    with pytest.raises(CapacityError, match="another slice of a 300-token sequence"):
        attention._place(300)  # 2 + 6 pages free, 10 needed
    assert [list(d._free) for d in attention.devices] == before


def test_runtime_placement_after_frees():
    # Fragmented cards: the runtime's free lists feed the placement.
    attention = _runtime([20 * PAGE, 20 * PAGE])
    first = [attention._place(c) for c in (64, 96, 64, 32)]
    for s in first[0] + first[2]:
        attention.devices[s.device].free(s.alloc)
    cards = [CardSpace([size for _, size in d._free], d.free_sequences) for d in attention.devices]
    expected = place_batch(
        [128, 64, 200], cards, layout=LAYOUT, heads=HEADS, max_seq_len=512
    )  # fmt: skip
    got = [attention._place(c) for c in (128, 64, 200)]
    assert [[Slice(s.device, s.first, s.capacity) for s in g] for g in got] == expected
