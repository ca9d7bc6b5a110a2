"""HBM pseudo-channels (mappings/hpu/channels.py): geometry, bytes per channel, the
channel-aware allocator, HpuDevice's placement and channel counters, and the runtime on it."""

import numpy as np
import pytest
from tandem.host.common.errors import CapacityError
from tandem.host.hpu import HpuParams, quantize_rows, score_scale
from tandem.host.hpu.device import Attend, HpuDevice
from tandem.mappings.hpu.channels import (
    ChannelGeometry,
    ChannelSpace,
    read_spans,
    request_channel_bytes,
)
from tandem.mappings.hpu.kv_layout import PAGE_TOKENS, KvLayout
from tandem.mappings.hpu.placement import NoRoomError, place

P = HpuParams(head_dim=32, lanes=16, mem_data_bits=128, kv_bits=8, gqa_group=2, max_seq_len=256)
PAGE = P.layout.page_bytes  # 2 * (64 + 32 * 64) = 4224


def test_geometry():
    u55c = ChannelGeometry.of_board("u55c")
    assert (u55c.channels, u55c.channel_bytes) == (32, 512 << 20)
    assert u55c.memory_bytes == 16 << 30
    assert ChannelGeometry.scaled(16 << 30) == u55c
    small = ChannelGeometry.scaled(64 << 20)
    assert (small.channels, small.channel_bytes) == (32, 2 << 20)
    assert small.channel_of([0, (2 << 20) - 1, 2 << 20, (64 << 20) - 1]).tolist() == [0, 0, 1, 31]
    # Uneven: 64-byte channels rounded up, the last one short.
    odd = ChannelGeometry.scaled(1000 * 64, 3)
    assert (odd.channels, odd.channel_bytes, odd.channel_range(2)) == (
        3,
        334 * 64,
        (668 * 64, 332 * 64),
    )
    assert ChannelGeometry.scaled(128, 32).channels == 2  # 64 bytes a channel at least


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ChannelGeometry(0, 64), "channels must be a positive integer, not 0"),
        (lambda: ChannelGeometry(2, 100), "channel_bytes must be a positive multiple of 64"),
        (lambda: ChannelGeometry(4, 64, 64), "memory_bytes must reach into the last"),
        (lambda: ChannelGeometry(4, 64, 512), "memory_bytes must reach into the last"),
        (lambda: ChannelGeometry.scaled(32, 4), "memory_bytes must be at least 64"),
        (lambda: ChannelGeometry.scaled(1 << 20, 0), "channels must be a positive integer"),
    ],
)
def test_bad_geometry(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_span_bytes_across_boundaries():
    geometry = ChannelGeometry(4, 128)
    got = geometry.span_bytes([0, 100, 64, 300], [64, 100, 0, 212])
    # [0, 64) -> ch0; [100, 200) -> 28 in ch0, 72 in ch1; empty; [300, 512) -> 84 ch2, 128 ch3
    assert got.tolist() == [92, 72, 84, 128]


@pytest.mark.parametrize(("channels", "channel_bytes"), [(4096, 64), (64, 4096), (4, 1 << 20)])
def test_request_bytes_match_read_bursts(channels, channel_bytes):
    rng = np.random.default_rng(0)
    layout = KvLayout(P.head_dim)
    geometry = ChannelGeometry(channels, channel_bytes)
    bases = rng.integers(0, (geometry.memory_bytes - 4 * PAGE) // 64, 20) * 64
    rows = rng.integers(0, 100, 20)
    expected = np.zeros(geometry.channels, dtype=np.int64)
    for base, n in zip(bases.tolist(), rows.tolist()):
        for value in (False, True):
            for burst in layout.read_bursts(
                base, n, value=value, beat_bytes=P.beat_bytes, max_beats=16
            ):
                size = burst.beats * P.beat_bytes
                expected += geometry.span_bytes([burst.address], [size])
    assert request_channel_bytes(geometry, layout, bases, rows).tolist() == expected.tolist()
    _, sizes = read_spans(layout, bases, rows)
    assert sizes.sum() == expected.sum()


def test_channel_space_spreads_each_group():
    region = 5 * PAGE
    space = ChannelSpace(ChannelGeometry(8, 64 * PAGE))
    # Three sequences of 4 layers x 3 KV heads: each layer's regions go round the channels in
    # one cyclic order, so any run of sequences loads the channels within one region.
    allocs = [space.take(region, 12, 3) for _ in range(3)]
    channel = [space.geometry.channel_of(b) for b in allocs]
    for layer in range(4):
        heads = slice(3 * layer, 3 * layer + 3)
        for first in range(3):
            for last in range(first + 1, 4):
                count = np.bincount(
                    np.concatenate([c[heads] for c in channel[first:last]]), minlength=8
                )
                assert count.max() - count.min() <= 1, (layer, first, last, count)
    # One sequence's layers rotate over every channel; regions never straddle a boundary.
    assert sorted(set(channel[0].tolist())) == list(range(8))
    for bases in allocs:
        assert (
            space.geometry.channel_of(bases + region - 1) == space.geometry.channel_of(bases)
        ).all()
    before = space.free_bytes
    for bases in allocs:
        space.give(bases, region, 3)
    assert before == 8 * 64 * PAGE - 36 * region
    assert space.spans == [64 * PAGE] * 8 and all(not load.any() for load in space.loads.values())


def test_channel_space_fits_or_takes_nothing():
    space = ChannelSpace(ChannelGeometry(2, 3 * PAGE))
    assert space.regions_fit(2 * PAGE) == 2 and space.regions_fit(PAGE) == 6
    space.take(2 * PAGE, 2, 2)
    with pytest.raises(ValueError, match="3 regions of 4224 bytes do not fit"):
        space.take(PAGE, 3, 1)  # one page left in each channel
    assert space.spans == [PAGE, PAGE]  # nothing taken
    space.take(PAGE, 2, 2)
    assert space.spans == []


def test_device_channel_placement():
    dev = HpuDevice(P, memory_bytes=32 * 8 * PAGE, placement="channels")  # 8 pages a channel
    geometry = dev.geometry
    assert (geometry.channels, geometry.channel_bytes) == (32, 8 * PAGE)
    a = dev.allocate(64, heads=32, group=32)  # 2 pages per region
    assert sorted(geometry.channel_of(a.bases).tolist()) == list(range(32))
    assert [a.base(h) for h in range(3)] == a.bases[:3].tolist()
    assert dev.free_bytes == dev.capacity_bytes - a.nbytes == dev.capacity_bytes - 64 * PAGE
    assert dev.largest_free == 6 * PAGE and dev.tokens_fit(heads=32) == 6 * PAGE_TOKENS
    # 64 regions of 3 pages: two fit in a channel's 6 free pages.
    assert dev.tokens_fit(heads=64) == 3 * PAGE_TOKENS
    b = dev.allocate(dev.tokens_fit(heads=64), heads=64, group=32)
    with pytest.raises(CapacityError, match="do not fit the free spans of its 32 channels"):
        dev.allocate(32, heads=1)
    dev.free(b)
    dev.free(a)
    assert dev.free_spans == [8 * PAGE] * 32
    with pytest.raises(ValueError, match="placement must be one of contiguous, channels"):
        HpuDevice(P, placement="pages")
    with pytest.raises(ValueError, match="channels"):
        HpuDevice(P, channels=0)


def _fill(dev, seq, rng, n):
    for head in range(seq.heads):
        k, ks = quantize_rows(rng.standard_normal((n, P.head_dim)))
        v, vs = quantize_rows(rng.standard_normal((n, P.head_dim)))
        dev.write_kv(seq, head, k, ks, v, vs)


def _calls(seq, rng, new=False):
    calls = []
    for head in range(seq.heads):
        q, qs = quantize_rows(rng.standard_normal((P.gqa_group, P.head_dim)), P.q_bits)
        token = None
        if new:
            k, ks = quantize_rows(rng.standard_normal((1, P.head_dim)))
            v, vs = quantize_rows(rng.standard_normal((1, P.head_dim)))
            token = (k[0], ks[0], v[0], vs[0])
        calls.append(Attend(seq, head, q, score_scale(qs, P.head_dim), token))
    return calls


def test_channel_counters_by_hand():
    rng = np.random.default_rng(2)
    dev = HpuDevice(P, memory_bytes=4 * 2 * PAGE, channels=4)  # contiguous; 2 pages a channel
    seq = dev.allocate(64, heads=1)  # base 0: pages 0 and 1 in channel 0
    _fill(dev, seq, rng, 40)
    dev.attend_many(_calls(seq, rng, new=True))  # reads 40 rows: page 0 whole, 8 of page 1
    part = P.layout.part_bytes
    k0, k1 = 64 + 32 * 64, 64 + 8 * 64  # K (and V) bytes of page 0 and page 1
    assert dev.last_channel_bytes.tolist() == [2 * k0 + 2 * k1, 0, 0, 0]
    dev.attend_many(_calls(seq, rng))  # 41 rows, no append
    assert dev.last_channel_bytes.tolist() == [2 * k0 + 2 * (k1 + 64), 0, 0, 0]
    assert dev.total_channel_bytes.tolist() == [4 * k0 + 4 * k1 + 128, 0, 0, 0]
    assert part == k0


def test_balanced_placement_gives_equal_counts():
    devices = {
        policy: HpuDevice(P, memory_bytes=8 * 4 * PAGE, channels=8, placement=policy)
        for policy in ("contiguous", "channels")
    }
    results = {}
    for policy, dev in devices.items():
        seqs = [dev.allocate(32, heads=8, group=4) for _ in range(2)]  # 2 layers x 4 heads
        for seq in seqs:
            _fill(dev, seq, np.random.default_rng(4), 20)
        # One call: layer 0 (heads 0..3) of both sequences.
        calls = [c for seq in seqs for c in _calls(seq, np.random.default_rng(5))[:4]]
        results[policy] = [r.y for r in dev.attend_many(calls)]
        counts = dev.last_channel_bytes
        if policy == "channels":
            assert (counts == counts[0]).all() and counts[0] == 2 * (64 + 20 * 64)
        else:
            assert (counts > 0).sum() == 2  # 8 regions of one page: two channels of four
        assert counts.sum() == 8 * 2 * (64 + 20 * 64)
    for a, b in zip(results["contiguous"], results["channels"], strict=True):
        np.testing.assert_array_equal(a, b)


def test_placement_model_follows_channel_devices():
    layout = P.layout
    dev = HpuDevice(P, memory_bytes=4 * 6 * PAGE, channels=4, placement="channels")
    cards = [dev.card_space()]
    kw = {"layout": layout, "heads": 4, "max_seq_len": 256, "group": 2}
    for capacity in (64, 32, 100, 64, 40):
        try:
            decided = place(capacity, cards, **kw)
        except NoRoomError:
            assert dev.tokens_fit(heads=4) < min(capacity, 256)
            continue
        for s in decided:
            dev.allocate(s.tokens, 4, group=2)
        assert cards[0].spans == dev.free_spans and cards[0].slots == dev.free_sequences
        loads = dev.card_space().channels.loads
        assert {g: v.tolist() for g, v in cards[0].channels.loads.items()} == {
            g: v.tolist() for g, v in loads.items()
        }


def test_runtime_on_channel_cards_matches_contiguous():
    torch = pytest.importorskip("torch")
    from tandem.host.system.decode import (
        TINY,
        Decoder,
        HpuAttention,
        Llama,
        logit_agreement,
    )
    from tandem.host.system.model import byte_tokenizer, random_llama

    torch.set_num_threads(1)
    tiny = Llama(TINY, random_llama(TINY, 0), "cpu")
    params = HpuParams.for_model(TINY, kv_bits=8, mem_data_bits=128, max_seq_len=256)
    tok = byte_tokenizer()
    prompts = [tok.encode("hello world"), tok.encode("attention on cards"), tok.encode("abc")]
    one = HpuAttention(TINY, [HpuDevice(params, memory_bytes=1 << 20)])
    reference = Decoder(tiny, one).generate(prompts, 6, keep_logits=True)
    card = HpuDevice(params, memory_bytes=1 << 20, placement="channels")
    same = Decoder(tiny, HpuAttention(TINY, [card])).generate(prompts, 6, keep_logits=True)
    assert same.tokens == reference.tokens
    np.testing.assert_array_equal(np.asarray(same.logits), np.asarray(reference.logits))
    # A call reads 3 sequences x 2 KV heads, each on a channel of its own; layer 1's
    # regions start two channels on: 8 channels in all.
    assert (card.total_channel_bytes > 0).sum() == 8
    cards = [
        HpuDevice(params, memory_bytes=1 << 20, name=f"hpu{i}", placement="channels")
        for i in range(2)
    ]
    split = HpuAttention(TINY, cards, max_slice_tokens=8)  # split-KV over both cards
    got = Decoder(tiny, split).generate(prompts, 6, keep_logits=True, forced=reference.tokens)
    report = logit_agreement(reference.logits, got.logits)
    assert report["agreement"] == 1.0 and report["max_logit_error"] < 0.5, report
    assert all(c.total_channel_bytes.sum() > 0 for c in cards)


def test_benchmark_replays_the_device_counters():
    """benchmarks/hpu_channel_balance.py's bytes per call equal the cards' own counters over
    a decode step of the runtime, split-KV sequences (partial requests) included."""
    import importlib.util
    from pathlib import Path

    torch = pytest.importorskip("torch")
    from tandem.host.system.decode import TINY, HpuAttention

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "hpu_channel_balance.py"
    spec = importlib.util.spec_from_file_location("hpu_channel_balance", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    params = HpuParams.for_model(TINY, kv_bits=8, mem_data_bits=128, max_seq_len=256)
    cards = [
        HpuDevice(params, memory_bytes=1 << 20, name=f"hpu{i}", placement=policy)
        for i, policy in enumerate(("channels", "contiguous", "channels"))
    ]
    # 16-token slices: the new token (position 20) lies in each sequence's second slice, the
    # first one answers in partial mode.
    attention = HpuAttention(TINY, cards, smoothing=False, max_slice_tokens=16)
    gen = torch.Generator().manual_seed(0)
    hkv, d, batch = TINY.n_kv_heads, TINY.head_dim, 5
    for b in range(batch):
        keys = [torch.randn(hkv, 20, d, generator=gen) for _ in range(TINY.n_layers)]
        attention.start(b, keys, keys, 64)
    expected = bench.call_bytes(attention, 21)
    got = []
    for seqs in ([0, 1, 2], [3, 4]):  # the runtime's sub-batches: ceil(B/2) and the rest
        for layer in range(TINY.n_layers):
            q = torch.randn(len(seqs), TINY.n_heads, d, generator=gen)
            k = torch.randn(len(seqs), hkv, d, generator=gen)
            attention.attend(layer, seqs, q, k, k)
            ran = sorted(int(name[3:]) for name in attention.last_cycles)
            got += [cards[c].last_channel_bytes.tolist() for c in ran]
    assert got == [e.tolist() for e in expected]
    assert len(got) > 2 * TINY.n_layers  # several cards per call


def test_cosim_decode_reports_the_channels_each_placement_loads(capsys):
    """``tandem cosim decode --json`` reports the bytes each pseudo-channel of the cards read;
    the channel-aware placement (the default) touches more channels, more evenly, than the
    contiguous one on the same decode."""
    import json

    from tandem.cli import main

    reports = {}
    for placement in ("channels", "contiguous"):
        argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hello there", "--batch", "8"]
        assert main([*argv, "--tokens", "3", "--placement", placement, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["placement"] == placement
        reports[placement] = out["channel_bytes"]
    spread, packed = reports["channels"], reports["contiguous"]
    assert spread["channels"] == packed["channels"] == len(spread["per_card"][0])
    assert sum(map(sum, spread["per_card"])) == sum(map(sum, packed["per_card"]))  # same reads
    assert spread["touched"] > packed["touched"]
    assert spread["busiest_over_mean"] < packed["busiest_over_mean"]
