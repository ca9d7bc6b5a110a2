"""The split KV layout (``value_offset``): a region's K parts in one span, its V parts in
another ``value_offset`` above, as an ``hpu-card`` engine stores them so that its K port and
its V port each stream from pseudo-channels of their own. Layout arithmetic, the engine in
Amaranth's simulator against the golden model, the allocator and the device."""

import numpy as np
import pytest
from tandem.host.hpu import HpuParams, read_port_bursts
from tandem.host.hpu.device import HpuDevice
from tandem.mappings.hpu.channels import ChannelGeometry, ChannelSpace, request_channel_bytes
from tandem.mappings.hpu.kv_layout import AXI_BOUNDARY, BLOCK_BYTES, PAGE_TOKENS, KvLayout
from tandem.sim.hpu.amaranth_sim import run_hpu

from tandem.config import ParamError

from .test_hpu import SMALL, golden_for, make_sequence, request_for, store
from .test_hpu_device import P as DEVICE_ENGINE
from .test_hpu_device import query, tokens

OFFSET = 0x8000


def test_addresses_of_the_split_layout():
    interleaved, split = KvLayout(32), KvLayout(32, value_offset=OFFSET)
    part = interleaved.part_bytes
    assert (interleaved.page_stride, interleaved.value_shift) == (2 * part, part)
    assert (split.page_stride, split.value_shift) == (part, OFFSET)
    assert split.page_bytes == interleaved.page_bytes  # a page's bytes, both parts
    for position in (0, 31, 32, 100):
        page, offset = divmod(position, PAGE_TOKENS)
        k_row = 0x1000 + page * part + BLOCK_BYTES + offset * split.row_bytes
        assert split.row_address(0x1000, position) == k_row
        assert split.row_address(0x1000, position, value=True) == k_row + OFFSET
        assert split.scale_address(0x1000, position, value=True) == (
            0x1000 + OFFSET + page * part + 2 * offset
        )
    assert split.region_bytes(33) == 2 * part
    assert split.region_end(0x1000, 33) == 0x1000 + OFFSET + 2 * part
    assert interleaved.region_end(0x1000, 33) == 0x1000 + 2 * interleaved.page_bytes
    with pytest.raises(ValueError, match="value_offset must be a non-negative multiple of 64"):
        KvLayout(32, value_offset=100)


@pytest.mark.parametrize("elem_bytes", [1, 2])
def test_every_reader_and_writer_of_the_layout_agrees(elem_bytes):
    """Rows written token by token, read back by every path (per token, per region), and the
    bursts of each part read exactly the bytes of that part's span."""
    layout = KvLayout(64, elem_bytes, value_offset=OFFSET)
    rng = np.random.default_rng(5)
    memory = np.zeros(4 * OFFSET, dtype=np.uint8)
    bases, n = np.array([0x0, 0x3000]), 70
    top = 1 << (8 * elem_bytes - 1)
    k = rng.integers(-top, top, (2, n, 64))
    v = rng.integers(-top, top, (2, n, 64))
    ks, vs = (rng.random((2, n)).astype(np.float16) for _ in range(2))
    positions = np.arange(n)
    layout.write_kv_tokens(
        memory,
        np.repeat(bases, n),
        np.tile(positions, 2),
        k.reshape(-1, 64),
        ks.reshape(-1),
        v.reshape(-1, 64),
        vs.reshape(-1),
    )
    # Every byte lies in a K span or a V span, none between.
    written = np.flatnonzero(memory)
    spans = [
        (b + shift, b + shift + layout.region_bytes(n)) for b in bases for shift in (0, OFFSET)
    ]
    assert all(any(lo <= a < hi for lo, hi in spans) for a in written)
    got = layout.read_regions(memory, bases, [n, n])
    for want, have in zip((k, ks, v, vs), got, strict=True):
        np.testing.assert_array_equal(have, want)
    one = layout.read_kv_tokens(memory, bases[1], positions)
    np.testing.assert_array_equal(one[2], v[1])
    np.testing.assert_array_equal(one[1], ks[1])
    v_bursts = layout.read_bursts(0x3000, n, value=True, beat_bytes=64, max_beats=16)
    assert min(b.address for b in v_bursts) == 0x3000 + OFFSET
    assert sum(b.beats for b in v_bursts) * 64 == 3 * BLOCK_BYTES + n * layout.row_bytes
    for b in v_bursts:
        assert b.address % AXI_BOUNDARY + 64 * b.beats <= AXI_BOUNDARY


def test_value_offset_is_checked():
    span = SMALL["max_seq_len"] // PAGE_TOKENS * KvLayout(32).part_bytes  # K span, 256 tokens
    assert HpuParams(**SMALL, value_offset=span).layout.split
    with pytest.raises(ParamError, match=rf"at least the K span of max_seq_len tokens \({span}"):
        HpuParams(**SMALL, value_offset=span - 64)
    with pytest.raises(ParamError, match="value_offset must be 0 or a multiple of 64"):
        HpuParams(**SMALL, value_offset=span + 1)
    with pytest.raises(ParamError, match=r"below 2\*\*addr_bits \(65536\)"):
        HpuParams(**SMALL, addr_bits=16, value_offset=1 << 16)


@pytest.mark.parametrize("read_ports", [2, 1])
def test_engine_reads_and_appends_both_spans_as_the_golden_model(read_ports):
    """The gateware in Amaranth's simulator over a split memory: results as the golden
    model's, the appended rows in both spans, and (two ports) the K port reading only K spans
    and the V port only V spans."""
    options = {"max_outstanding": 3} if read_ports == 1 else {}
    p = HpuParams(**SMALL, gqa_group=2, value_offset=OFFSET, read_ports=read_ports, **options)
    rng = np.random.default_rng(46)
    memory = rng.integers(0, 256, 4 * OFFSET, dtype=np.uint8)
    expected = memory.copy()
    requests = []
    for i, (base, n) in enumerate([(0x0, 45), (0x2000, 33), (0x5000, 1)]):
        seq = make_sequence(p, n, rng)
        store(p, memory, base, seq, n - 1)
        store(p, expected, base, seq, n)
        requests.append((request_for(seq, seq_id=i, base=base, n=n), golden_for(p, seq, n)))
    run = run_hpu(p, memory, [r for r, _ in requests], read_latency=3)
    for i, (request, gold) in enumerate(requests):
        assert run.errors[i] is False
        want = [w for w, _, _ in run.beats[i]]
        from tandem.host.hpu import result_words

        assert want == result_words(p, gold, request.partial), f"request {i}"
    assert np.array_equal(memory, expected)
    issued = {name: [tuple(b) for b in bursts] for name, bursts in run.read_bursts.items()}
    planned = {}
    for request, _ in requests:
        rows = request.length - 1
        for name, bursts in read_port_bursts(p, request.base, rows).items():
            planned.setdefault(name.removesuffix("_axi"), []).extend(
                (b.address, b.beats) for b in bursts
            )
    assert issued == planned
    if read_ports == 2:
        assert all(a < OFFSET for a, _ in issued["k"])
        assert all(a >= OFFSET for a, _ in issued["v"])


def test_allocator_places_regions_in_key_channels_and_alternates_engines():
    """Two engines of 4 channels each (K channels 0-1 and 4-5): one call group's regions go to
    both engines in turn and never start in a V channel; the V channels' bytes show up in the
    per-channel counts exactly as the K channels' do."""
    geometry = ChannelGeometry(8, OFFSET)
    space = ChannelSpace(geometry, 2 * OFFSET)
    assert [space.holds_keys(c) for c in range(8)] == [True, True, False, False] * 2
    layout = KvLayout(32, value_offset=2 * OFFSET)
    region = layout.region_bytes(64)
    bases = space.take(region, 4, 4)
    channels = geometry.channel_of(bases).tolist()
    assert channels == [0, 4, 1, 5]
    assert space.free_bytes == 8 * OFFSET - 2 * 4 * region
    counted = request_channel_bytes(geometry, layout, bases, [64] * 4)
    np.testing.assert_array_equal(counted[[2, 3, 6, 7]], counted[[0, 1, 4, 5]])
    assert (counted > 0).all()
    space.give(bases, region, 4)
    assert space.free_bytes == 8 * OFFSET
    with pytest.raises(ValueError, match="a split KV layout needs value_offset a whole number"):
        ChannelSpace(geometry, OFFSET + 64)
    with pytest.raises(ValueError, match="a multiple of 2k"):
        ChannelSpace(ChannelGeometry(6, OFFSET), 4 * OFFSET)


def test_device_on_the_split_layout():
    """HpuDevice with a split layout: writes and reads both spans, attends as the golden
    model does, places by channel by default and refuses contiguous placement."""
    p = DEVICE_ENGINE.replace(value_offset=1 << 17)
    with pytest.raises(ValueError, match="needs placement='channels'"):
        HpuDevice(p, memory_bytes=1 << 18, placement="contiguous")
    assert HpuDevice(p, memory_bytes=1 << 18, channels=2).placement == "channels"
    dev = HpuDevice(p, memory_bytes=1 << 18, placement="channels", channels=2)
    rng = np.random.default_rng(6)
    seq = dev.allocate(100, heads=2)
    assert (dev.geometry.channel_of(seq.bases) == 0).all()
    k, ks, v, vs = tokens(rng, 40)
    dev.write_kv(seq, 1, k, ks, v, vs)
    got = dev.read_kv(seq, 1)
    np.testing.assert_array_equal(got[0], k)
    np.testing.assert_array_equal(got[2], v)
    q, c = query(rng, p)
    new = tokens(rng, 1)
    result = dev.attend(seq, 1, q, c, new=new)
    from tandem.host.hpu import hpu_golden

    want = hpu_golden(
        p, q, c, *(np.concatenate([x, y]) for x, y in zip((k, ks, v, vs), new, strict=True))
    )
    np.testing.assert_array_equal(result.y, want.y)
    np.testing.assert_array_equal(dev.read_kv(seq, 1)[2], np.concatenate([v, new[2]]))
    assert dev.last_channel_bytes[1] == dev.last_channel_bytes[0] > 0  # K and V channels
