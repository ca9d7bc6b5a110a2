"""HpuDevice on an ``hpu-card``: the golden card (each request as its engine computes it,
cycles from the card cycle model) and the RTL card in Verilator and Icarus (the card on its
shared HBM model, through ``tandem.sim.cosim.card_server``), bit for bit the same; the RTL card
in the native harness (``tandem.sim.native.server.CardServer``) with the cocotb card's cycles."""

import numpy as np
import pytest
from tandem.host.hpu import HpuRequest, quantize_rows, score_scale
from tandem.host.hpu.card import GoldenCardBackend, HpuCardParams, card_call_cycles, route
from tandem.host.hpu.device import Attend, HpuDevice
from tandem.sim.hpu.hbm import HbmParams

from .rtl import need
from .test_hpu_device import P as DEVICE_ENGINE

#: Two engines of the co-simulation tests' small engine over four 64 KiB channels: engine 0's
#: K spans in channel 0, its V spans in channel 1.
CARD = HpuCardParams(**DEVICE_ENGINE.to_dict(), engines=2, channels=4, memory_bytes=256 << 10)


def card_script(dev: HpuDevice, seed: int):
    """Three sequences of two KV heads (every head a region, the regions spread over both
    engines), written, then three decode steps of appending calls (one partial per step) and
    a host read of the appended rows."""
    rng = np.random.default_rng(seed)

    def rows(n, bits=8, scale=1.0):
        return quantize_rows(rng.standard_normal((n, CARD.head_dim)) * scale, bits)

    seqs = [dev.allocate(120, heads=2, group=2) for _ in range(3)]
    for i, seq in enumerate(seqs):
        for head in range(2):
            n = 40 + 23 * i + head
            dev.write_kv(seq, head, *rows(n), *rows(n))
    out = []
    for step in range(3):
        calls = []
        for i, seq in enumerate(seqs):
            for head in range(2):
                q, qs = rows(CARD.gqa_group, 16, scale=4.0)
                new = (*rows(1), *rows(1))
                partial = (i + head + step) % 5 == 0
                calls.append(Attend(seq, head, q, score_scale(qs, CARD.head_dim), new, partial))
        out.append((dev.attend_many(calls), dev.last_cycles, dev.last_channel_bytes.copy()))
    out.append(([dev.read_kv(seq, 1) for seq in seqs], 0, None))
    return seqs, out


def test_the_card_device_places_by_engine_and_answers_as_one_engine():
    card = HpuDevice(CARD, memory_bytes=CARD.memory_bytes)
    assert isinstance(card.backend, GoldenCardBackend) and card.placement == "channels"
    engine = HpuDevice(
        CARD.engine, memory_bytes=CARD.memory_bytes, placement="channels", channels=4
    )
    seqs, got = card_script(card, 3)
    _, want = card_script(engine, 3)
    bases = np.concatenate([s.bases for s in seqs])
    assert sorted(set(route(CARD, bases).tolist())) == [0, 1]  # both engines get regions
    assert set(card.geometry.channel_of(bases).tolist()) == {0, 2}  # K channels only
    for (results, cycles, channel_bytes), (expected, *_) in zip(got[:-1], want[:-1]):
        for a, b in zip(results, expected, strict=True):
            for name in ("m", "l", "o", "y"):
                x, y = getattr(a, name), getattr(b, name)
                assert (x is None and y is None) or np.array_equal(x, y), name
        # Every channel read: K spans in 0 and 2, V spans (as many bytes) in 1 and 3.
        assert (channel_bytes > 0).all() and channel_bytes[1] == channel_bytes[0]
        assert cycles > 0
    for a, b in zip(got[-1][0], want[-1][0], strict=True):
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
    # A batch's cycles are the card cycle model's on the card's HBM model.
    hbm = HbmParams.of_board(CARD.geometry, CARD.beat_bytes)
    q = np.zeros((CARD.gqa_group, CARD.head_dim), int)
    channel = CARD.geometry.channel_bytes
    requests = [
        HpuRequest(i, base, length, q, np.ones(CARD.gqa_group))
        for i, (base, length) in enumerate([(0, 200), (2 * channel, 90), (4096, 150)])
    ]
    call = card.backend.run(requests)
    assert call.cycles == round(card_call_cycles(CARD, requests, hbm).total) > 0
    with pytest.raises(ValueError, match="past engine 0's K channels"):
        card.backend.run([HpuRequest(0, channel - 64, 40, q, np.ones(CARD.gqa_group))])


def test_card_memory_and_placement_are_the_cards():
    with pytest.raises(ValueError, match="an hpu-card device has its parameters' memory"):
        HpuDevice(CARD, memory_bytes=1 << 20)
    with pytest.raises(ValueError, match="an hpu-card device has its parameters' memory"):
        HpuDevice(CARD, memory_bytes=CARD.memory_bytes, channels=8)
    with pytest.raises(ValueError, match="needs placement='channels'"):
        HpuDevice(CARD, memory_bytes=CARD.memory_bytes, placement="contiguous")


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_rtl_card_is_the_golden_card(simulator, sim_cache, tmp_path, seed):
    """The card script on the RTL card and on the golden card: the same results and appended
    rows bit for bit, and the card cycle model within 5 % of the RTL card's cycles."""
    need(simulator)
    _, golden = card_script(HpuDevice(CARD, memory_bytes=CARD.memory_bytes), seed)
    with HpuDevice(
        CARD,
        memory_bytes=CARD.memory_bytes,
        backend="rtl",
        simulator=simulator,
        cache_dir=sim_cache,
        run_dir=tmp_path,
    ) as dev:
        _, rtl = card_script(dev, seed)
        # The bytes the simulated HBM channels served in the last call, as the host counts them.
        assert dev.backend.read_records()["channel_bytes"] == rtl[-2][2].tolist()
    for (g_results, modelled, g_bytes), (r_results, simulated, r_bytes) in zip(
        golden[:-1], rtl[:-1]
    ):
        for a, b in zip(g_results, r_results, strict=True):
            for name in ("m", "l", "o", "y"):
                x, y = getattr(a, name), getattr(b, name)
                assert (x is None and y is None) or np.array_equal(x, y), name
        np.testing.assert_array_equal(g_bytes, r_bytes)
        assert abs(modelled - simulated) <= 0.05 * simulated, (modelled, simulated)
    for a, b in zip(golden[-1][0], rtl[-1][0], strict=True):
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))


def test_rtl_card_harness_is_cocotb_unless_native_is_named():
    """A card on the RTL backend starts nothing until its first call; its harness is cocotb
    unless the native one is asked for."""
    for harness, want in [(None, "cocotb"), ("cocotb", "cocotb"), ("native", "native")]:
        dev = HpuDevice(CARD, memory_bytes=CARD.memory_bytes, backend="rtl", harness=harness)
        assert dev.backend.harness == want and not dev.backend.started


@pytest.mark.rtl
def test_native_card_is_the_cocotb_card(sim_cache, tmp_path, seed):
    """The card script on the native harness: the golden card's results and appended rows bit
    for bit, and the cocotb card's cycles (Verilator) call for call, exactly: both pace the
    ports by the same HBM model with the same homes, and count from the same edges."""
    need("native")
    need("verilator")
    _, golden = card_script(HpuDevice(CARD, memory_bytes=CARD.memory_bytes), seed)
    runs = {}
    for harness in ("native", "cocotb"):
        with HpuDevice(
            CARD,
            memory_bytes=CARD.memory_bytes,
            backend="rtl",
            simulator="verilator",
            harness=harness,
            cache_dir=sim_cache,
            run_dir=tmp_path / harness,
        ) as dev:
            assert dev.backend.harness == harness
            _, runs[harness] = card_script(dev, seed)
            runs[harness].append(dev.backend.read_records())
    native, cocotb = runs["native"], runs["cocotb"]
    for (g_results, _, g_bytes), (n_results, n_cycles, n_bytes), (_, c_cycles, _) in zip(
        golden[:-1], native[:-2], cocotb[:-2], strict=True
    ):
        for a, b in zip(g_results, n_results, strict=True):
            for name in ("m", "l", "o", "y"):
                x, y = getattr(a, name), getattr(b, name)
                assert (x is None and y is None) or np.array_equal(x, y), name
        np.testing.assert_array_equal(g_bytes, n_bytes)
        assert n_cycles == c_cycles > 0, (n_cycles, c_cycles)
    for a, b in zip(golden[-1][0], native[-2][0], strict=True):
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
    # The last call's records: the bytes each channel served and each engine's read window.
    assert native[-1] == cocotb[-1]
    assert sum(native[-1]["channel_bytes"]) > 0
