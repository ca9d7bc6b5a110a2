"""``hpu-card``: channel ownership, parameters, golden model, and the dispatcher and the result
merger alone in Amaranth's simulator under seeded random gaps and backpressure.

* ownership: engine ``e`` owns a contiguous run of channels, as even as the counts allow, and
  :func:`~tandem.mappings.hpu.channels.engine_of` agrees with the run's first addresses;
* golden: :func:`~tandem.host.hpu.card.hpu_card_golden` gives, per engine, each routed
  request's :func:`~tandem.host.hpu.hpu_golden` in descriptor order, appends land in memory;
* dispatcher: every engine receives exactly the descriptor beats of the requests whose base
  it owns, in order, nothing lost or duplicated; ``desc_i`` waits for the target engine only;
* merger: each engine's beats leave in order, a request's beats contiguous, each tagged with
  its engine; an offered beat stays offered and unchanged until taken.

The whole card against the golden model, in Verilator and Icarus: ``test_hpu_card_rtl.py``.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator
from tandem.host.common import bits
from tandem.host.hpu import descriptor_beats
from tandem.host.hpu.card import (
    HpuCardParams,
    card_result_fields,
    decode_card_result,
    hpu_card_golden,
    route,
    split_card_results,
)
from tandem.host.hpu.codec import HpuResults, result_fields
from tandem.hw.hpu.card import Dispatcher, HpuCard, ResultMerger
from tandem.mappings.hpu.channels import ChannelGeometry, ChannelSpace, engine_bases, engine_of
from tandem.mappings.hpu.kv_layout import BLOCK_BYTES

from tandem.config import ParamError

from .test_hpu import SMALL, golden_for, make_sequence, request_for, store
from .test_hpu_control_blocks import _Source

#: A small card: 2 engines over 4 channels of 32 KiB (engine 0: channels 0 and 1, its K spans
#: in channel 0 and its V spans 32 KiB above, in channel 1).
CARD = dict(SMALL, gqa_group=2, max_seq_len=64, engines=2, channels=4, memory_bytes=128 << 10)


def card(**overrides):
    """:data:`CARD` with ``overrides``; ``engines`` brings two channels of 32 KiB per engine."""
    engines = overrides.get("engines", CARD["engines"])
    sized = {"channels": 2 * engines, "memory_bytes": 2 * engines * (32 << 10)}
    return HpuCardParams(**{**CARD, **sized, **overrides})


def key_channels(p):
    """The channels that hold K spans (regions start there)."""
    space = ChannelSpace(p.geometry, p.layout.value_offset)
    return [c for c in range(p.geometry.channels) if space.holds_keys(c)]


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


# --- ownership and parameters ----------------------------------------------------------------
@pytest.mark.parametrize("channels, engines", [(32, 16), (32, 1), (32, 32), (32, 5), (7, 3)])
def test_each_engine_owns_a_contiguous_even_run_of_channels(channels, engines):
    geometry = ChannelGeometry(channels, 4096)
    bases = engine_bases(geometry, engines)
    assert bases[0] == 0 and list(bases) == sorted(set(bases))
    owner = engine_of(geometry, engines, np.arange(channels) * 4096)
    assert owner.tolist() == [c * engines // channels for c in range(channels)]
    counts = np.bincount(owner, minlength=engines)
    assert counts.max() - counts.min() <= 1
    # Every byte of a channel belongs to the channel's engine; past the memory, the last one.
    assert engine_of(geometry, engines, channels * 4096 - 1) == engines - 1
    assert engine_of(geometry, engines, 10 * channels * 4096) == engines - 1
    if engines == 16:
        assert bases[1] == 2 * 4096  # the U55C's count: a pair of channels per engine


def test_engine_counts_are_checked():
    geometry = ChannelGeometry(4, 4096)
    with pytest.raises(ValueError, match=r"engines must be in 1..4 \(the channels\), not 5"):
        engine_bases(geometry, 5)
    with pytest.raises(ParamError, match=r"channels must be a multiple of 2 \* engines \(6: "):
        HpuCardParams(memory_bytes=1 << 16, channels=4, engines=3)
    with pytest.raises(ParamError, match=r"memory_bytes must be a multiple of 256 \(64 bytes per"):
        HpuCardParams(memory_bytes=128, channels=4, engines=2)
    with pytest.raises(ParamError, match=r"half an engine's channels \(32768 bytes; 0 says"):
        HpuCardParams(**dict(CARD, value_offset=4096))
    with pytest.raises(ParamError, match=r"room for one region of max_seq_len tokens \(4224 "):
        HpuCardParams(**dict(CARD, memory_bytes=4 * 4096))
    with pytest.raises(ParamError, match=r"at most 2\*\*addr_bits \(65536\), not 131072"):
        HpuCardParams(addr_bits=16, memory_bytes=1 << 17)
    with pytest.raises(ParamError, match="engines must be between 1 and 32, not 0"):
        HpuCardParams(engines=0)


def test_engine_params_are_the_card_params_less_its_own():
    p = HpuCardParams(**CARD)
    assert type(p.engine).__name__ == "HpuParams"
    own = {k: v for k, v in p.to_dict().items() if k in p.engine.to_dict()}
    assert p.engine.to_dict() == {**own, "value_offset": 32 << 10}  # the split layout
    assert HpuCardParams(**dict(CARD, value_offset=32 << 10)).engine == p.engine
    assert p.layout == p.engine.layout and p.layout.split
    assert p.engine_bases == (0, 64 << 10)
    assert route(p, [0, (64 << 10) - 64, 64 << 10, 1 << 20]).tolist() == [0, 0, 1, 1]
    fields = card_result_fields(p)
    assert fields[:-1] == result_fields(p.engine) and fields[-1].name == "engine"
    values = {"data": [-3] * p.lanes, "tag": 7, "last": 1, "error": 0, "engine": 1}
    payload = bits.pack(fields, values)
    assert decode_card_result(p, payload) == ([-3] * p.lanes, 7, 1, 1, 0)
    flagged = bits.pack(fields, {**values, "error": 1})
    assert decode_card_result(p, flagged) == ([-3] * p.lanes, 7, 1, 1, 1)


# --- golden model ----------------------------------------------------------------------------
def _requests(p, rng, count, memory=None):
    """``count`` random requests spread over the card's channels (whole inside one engine's),
    their sequences stored in ``memory``; ``(requests, [(seq, n)])``."""
    region = p.layout.region_bytes(p.max_seq_len)
    channel = p.geometry.channel_bytes
    keys = key_channels(p)
    requests, used = [], []
    for i in range(count):
        c = keys[i % len(keys)]  # every K channel, so every engine, gets requests
        base = c * channel + int(rng.integers(0, (channel - region) // BLOCK_BYTES)) * BLOCK_BYTES
        n = int(rng.integers(1, p.max_seq_len + 1))
        seq = make_sequence(p, n, rng)
        append = bool(rng.random() < 0.5)
        if memory is not None:
            store(p, memory, base, seq, n - 1 if append else n)
        partial = bool(rng.random() < 0.3)
        requests.append(
            request_for(seq, seq_id=100 + i, base=base, n=n, append=append, partial=partial)
        )
        used.append((seq, n))
    return requests, used


def test_golden_is_each_engines_hpu_golden_in_descriptor_order():
    p = HpuCardParams(**CARD)
    rng = np.random.default_rng(4)
    memory = np.zeros(p.memory_bytes, dtype=np.uint8)
    # Regions placed apart so that no request reads another's (each its own region).
    requests, used = [], []
    region = p.layout.region_bytes(p.max_seq_len)
    channel = p.geometry.channel_bytes
    starts = [c * channel + offset for c in key_channels(p) for offset in (0, 3 * region)]
    for i, base in enumerate(starts):
        n = int(rng.integers(1, p.max_seq_len + 1))
        seq = make_sequence(p, n, rng)
        append = i % 2 == 0
        store(p, memory, base, seq, n - 1 if append else n)
        requests.append(
            request_for(seq, seq_id=i, base=base, n=n, append=append, partial=i % 3 == 0)
        )
        used.append((seq, n))
    engines = route(p, [r.base for r in requests])
    assert set(engines.tolist()) == {0, 1}
    out = hpu_card_golden(p, memory, requests)
    assert len(out) == p.engines
    for e, results in enumerate(out):
        assert isinstance(results, HpuResults)
        chosen = np.flatnonzero(engines == e)
        assert results.seq_id.tolist() == [requests[i].seq_id for i in chosen]
        for got, i in zip(results, chosen, strict=True):
            seq, n = used[i]
            want = golden_for(p.engine, seq, n, requests[i].partial)
            if requests[i].partial:
                np.testing.assert_array_equal(got.o, want.o)
                np.testing.assert_array_equal(got.l, want.l)
            else:
                np.testing.assert_array_equal(got.y, want.y)
    # The appended tokens are in memory: the same requests without appends read them.
    for r in requests:
        r.new_k = None
    again = hpu_card_golden(p, memory, requests)
    for first, second in zip(out, again, strict=True):
        np.testing.assert_array_equal(first.y, second.y)


def test_golden_refuses_a_region_past_its_engines_channels():
    p = HpuCardParams(**CARD)
    memory = np.zeros(p.memory_bytes, dtype=np.uint8)
    seq = make_sequence(p, 40, np.random.default_rng(1))
    base = (32 << 10) - BLOCK_BYTES  # engine 0's last K block: 40 tokens run into its V channel
    request = request_for(seq, seq_id=1, base=base, n=40, append=False)
    with pytest.raises(ValueError, match="past engine 0's K channels"):
        hpu_card_golden(p, memory, [request])


# --- dispatcher ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [
        {},  # 128-bit beats: 4 header beats, the base in beat 0
        {"mem_data_bits": 64, "lanes": 8, "engines": 3},  # 8 header beats, base in beat 1
        {"mem_data_bits": 512, "lanes": 64, "head_dim": 64, "engines": 4},  # one header beat
    ],
)
def test_dispatcher_routes_every_descriptor_whole_to_the_owner_of_its_base(overrides):
    p = card(**overrides)
    rng = np.random.default_rng(7)
    requests, _ = _requests(p, rng, 14)
    owners = route(p, [r.base for r in requests])
    assert len(set(owners.tolist())) == p.engines  # every engine gets some
    want = [[] for _ in range(p.engines)]
    for r, e in zip(requests, owners, strict=True):
        want[e].extend(descriptor_beats(p.engine, r))
    dut = Dispatcher(p.engine, p.engine_bases)
    source = _Source(
        dut.desc_i, [b for r in requests for b in descriptor_beats(p.engine, r)], rng, 0.3
    )
    got = [[] for _ in range(p.engines)]
    offered = [None] * p.engines  # a beat offered and not taken must stay offered, unchanged
    stalls = {"desc_waits": 0}

    async def bench(ctx):
        for _ in range(4000):
            source.drive(ctx)
            readies = [bool(rng.random() < 0.6) for _ in range(p.engines)]
            for e in range(p.engines):
                ctx.set(dut.o[e].ready, readies[e])
            for e in range(p.engines):
                valid = ctx.get(dut.o[e].valid)
                payload = ctx.get(dut.o[e].payload)
                if offered[e] is not None:
                    assert valid and payload == offered[e], f"engine {e} withdrew a beat"
                offered[e] = None
                if valid and readies[e]:
                    got[e].append(payload)
                elif valid:
                    offered[e] = payload
            if source.offering and not ctx.get(dut.desc_i.ready):
                stalls["desc_waits"] += 1
            source.sample(ctx)
            await ctx.tick()
            source.apply()
            if not source.items and sum(map(len, got)) == sum(map(len, want)):
                break

    _run(dut, bench)
    assert got == want
    assert stalls["desc_waits"] > 0  # the engines' backpressure reached desc_i


# --- merger ----------------------------------------------------------------------------------
@pytest.mark.parametrize("engines", [1, 3])
def test_merger_keeps_requests_whole_and_each_engines_order(engines):
    p = card(engines=engines)
    rng = np.random.default_rng(11)
    layout = result_fields(p.engine)
    # Per engine, 6 requests of 1..5 beats; each beat's data names (engine, request, beat);
    # every other request carries the error flag.
    sent = []
    for e in range(engines):
        beats = []
        for r in range(6):
            count = int(rng.integers(1, 6))
            for b in range(count):
                values = {"data": [e, r, b] + [0] * (p.lanes - 3), "tag": 1000 * e + r}
                values["error"] = r % 2
                beats.append(bits.pack(layout, dict(values, last=int(b == count - 1))))
        sent.append(beats)
    dut = ResultMerger(p)
    # The payloads are packed integers: drive each input's payload as its raw bits.
    ports = [
        SimpleNamespace(valid=i.valid, ready=i.ready, payload=i.payload.as_value()) for i in dut.i
    ]
    sources = [_Source(ports[e], sent[e], rng, 0.4) for e in range(engines)]
    received = []
    offered = None
    total = sum(map(len, sent))

    async def bench(ctx):
        nonlocal offered
        for _ in range(3000):
            for s in sources:
                s.drive(ctx)
            ready = bool(rng.random() < 0.6)
            ctx.set(dut.o.ready, ready)
            valid = ctx.get(dut.o.valid)
            payload = ctx.get(dut.o.payload.as_value())
            if offered is not None:
                assert valid and payload == offered, "the merger withdrew or changed a beat"
            offered = None
            if valid and ready:
                received.append(decode_card_result(p, payload))
            elif valid:
                offered = payload
            for s in sources:
                s.sample(ctx)
            await ctx.tick()
            for s in sources:
                s.apply()
            if len(received) == total:
                break

    _run(dut, bench)
    assert len(received) == total
    per_engine = [[] for _ in range(engines)]
    under_way = None  # the engine whose request has started and not ended
    for words, tag, last, engine, error in received:
        assert words[0] == engine and tag // 1000 == engine  # tagged with the right engine
        if under_way is not None:
            assert engine == under_way, "a request's beats were interleaved with another's"
        under_way = None if last else engine
        values = {"data": words, "tag": tag, "last": last, "error": error}
        per_engine[engine].append(bits.pack(layout, values))
    assert per_engine == sent  # nothing lost, nothing reordered
    # Round robin: with every engine busy, the merger changes engines between requests.
    engines_in_order = [engine for _, _, last, engine, _ in received if last]
    assert engines == 1 or len(set(engines_in_order[: 2 * engines])) > 1


def test_card_has_one_set_of_ports_per_engine():
    for overrides, ports in (
        ({"engines": 3}, ("k_axi", "v_axi", "w_axi")),
        ({"read_ports": 1}, ("kv_axi", "w_axi")),
    ):
        p = card(**overrides)
        gateware = HpuCard(p)
        names = set(gateware.signature.members)
        Fragment.get(gateware, None)  # elaborated: no UnusedElaboratable warning
        want = {f"{port}_{e}" for port in ports for e in range(p.engines)}
        assert names == want | {"desc_i", "result_o"}


def test_result_beats_go_back_to_their_requests():
    """Beats of two engines interleaved at request boundaries: each request gets its own beats
    in order, the flagged one is named, and a stray or missing beat is an error."""
    p = HpuCardParams(**CARD)
    fields = card_result_fields(p)
    base1 = p.engine_bases[1]
    bases = [0, base1, 4096, base1 + 4096]  # engines 0, 1, 0, 1

    def beat(engine, request, index, last, error=0):
        data = [request, index] + [0] * (p.lanes - 2)
        values = {"data": data, "tag": request, "last": last, "error": error, "engine": engine}
        return bits.pack(fields, values)

    payloads = [
        beat(1, 1, 0, 0), beat(1, 1, 1, 1),  # engine 1's first request, whole
        beat(0, 0, 0, 1, error=1),
        beat(1, 3, 0, 1),
        beat(0, 2, 0, 0), beat(0, 2, 1, 0), beat(0, 2, 2, 1),
    ]  # fmt: skip
    results, failed = split_card_results(p, bases, payloads)
    assert [[w[:2] for w in r] for r in results] == [
        [[0, 0]],
        [[1, 0], [1, 1]],
        [[2, 0], [2, 1], [2, 2]],
        [[3, 0]],
    ]
    assert failed == [0]
    with pytest.raises(ValueError, match="1 requests without their last result beat"):
        split_card_results(p, bases, payloads[:-1])
    with pytest.raises(ValueError, match="from engine 1, which has no request"):
        split_card_results(p, bases[:1], payloads[:1])
