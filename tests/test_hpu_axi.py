"""hpu: the engine's AXI4 managers as a subordinate expects them, in Amaranth's simulator.

A read or write response other than OKAY flags the request's result (and the host raises);
a base that is not a multiple of 64 bytes is flagged, writes nothing and issues no burst across
4 KiB; ARVALID, AWVALID and WVALID are low in every cycle that reset is high.
"""

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator
from tandem.host.common.errors import MemoryResponseError
from tandem.host.hpu import HpuParams, descriptor_beats, pack_descriptor, result_words
from tandem.host.hpu.codec import pack_header, unpack_header
from tandem.host.hpu.rtl_backend import check_failed
from tandem.hw.hpu.engine import Hpu
from tandem.mappings.hpu.kv_layout import AXI_BOUNDARY
from tandem.sim.hpu.amaranth_sim import run_hpu

from .test_hpu import SMALL, golden_for, make_sequence, request_for, store

SLVERR, DECERR = 2, 3
PARAMS = {
    "two_ports": HpuParams(**SMALL, gqa_group=2),
    "one_port": HpuParams(**SMALL, gqa_group=2, read_ports=1, max_outstanding=3),
}


def check_result(params, run, index, request, gold):
    """Request ``index`` of ``run`` came back unflagged, as the golden model says."""
    assert run.errors[index] is False, f"request {index}: error flag {run.errors[index]}"
    words = [w for w, _, _ in run.beats[index]]
    assert words == result_words(params, gold, request.partial), f"request {index}"


def check_bursts(params, run):
    """Every read and write burst starts on a beat and stays within its 4 KiB."""
    for port, bursts in [*run.read_bursts.items(), ("w", run.write_bursts)]:
        for address, beats in bursts:
            assert address % params.beat_bytes == 0, f"{port}: burst at {address:#x}"
            end = address % AXI_BOUNDARY + beats * params.beat_bytes
            assert end <= AXI_BOUNDARY, f"{port}: {beats} beats at {address:#x} cross 4 KiB"


@pytest.mark.parametrize("name", PARAMS)
@pytest.mark.parametrize("resp", [SLVERR, DECERR])
def test_read_error_on_one_beat_flags_that_request_only(name, resp):
    p = PARAMS[name]
    rng = np.random.default_rng(40)
    memory = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    a, b = make_sequence(p, 45, rng), make_sequence(p, 40, rng)
    store(p, memory, 0x0, a, 44)
    store(p, memory, 0x8000, b, 39)
    requests = [
        request_for(a, seq_id=1, base=0x0, n=45),
        request_for(b, seq_id=2, base=0x8000, n=40),
        request_for(b, seq_id=3, base=0x8000, n=40, append=False),
    ]
    # A beat of the first request's V part, in its second page.
    bad = p.layout.page_bytes + p.layout.part_bytes + 2 * p.beat_bytes
    run = run_hpu(p, memory, requests, rresp=lambda _port, address: resp * (address == bad))
    assert run.errors[0] is True  # every beat of the request carries the flag
    check_result(p, run, 1, requests[1], golden_for(p, b, 40))
    check_result(p, run, 2, requests[2], golden_for(p, b, 40))


@pytest.mark.parametrize("name", PARAMS)
def test_write_error_flags_the_appending_request(name):
    p = PARAMS[name]
    rng = np.random.default_rng(41)
    memory = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    a, b = make_sequence(p, 30, rng), make_sequence(p, 33, rng)
    store(p, memory, 0x0, a, 29)
    store(p, memory, 0x8000, b, 32)
    requests = [
        request_for(a, seq_id=1, base=0x0, n=30),  # its writes answer SLVERR
        request_for(b, seq_id=2, base=0x8000, n=33),
        request_for(b, seq_id=3, base=0x8000, n=33, append=False),  # reads b's appended row
    ]
    run = run_hpu(p, memory, requests, bresp=lambda address: SLVERR * (address < 0x8000))
    assert run.errors[0] is True
    check_result(p, run, 1, requests[1], golden_for(p, b, 33))
    check_result(p, run, 2, requests[2], golden_for(p, b, 33))


@pytest.mark.parametrize("name", PARAMS)
def test_misaligned_base_by_4k_is_flagged_and_never_crosses_4k(name):
    """Base 0x0FF8 lies 8 bytes below 4 KiB: read rounded down, flagged, nothing written.
    The engine serves the next request, whose region (at 0x1FC0) spans a 4 KiB boundary."""
    p = PARAMS[name]
    rng = np.random.default_rng(42)
    memory = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    a, b = make_sequence(p, 50, rng), make_sequence(p, 70, rng)
    store(p, memory, 0x1FC0, b, 69)
    misaligned = request_for(a, seq_id=1, base=0x0, n=50)
    data = pack_descriptor(p, misaligned)
    header = unpack_header(p, data)
    header["base"] = 0x0FF8
    raw = pack_header(p, header) + data[len(pack_header(p, header)) :]
    step = p.beat_bytes
    beats = [int.from_bytes(raw[i : i + step], "little") for i in range(0, len(raw), step)]
    aligned = request_for(b, seq_id=2, base=0x1FC0, n=70)
    expected = memory.copy()
    store(p, expected, 0x1FC0, b, 70)  # only the second request's append lands
    run = run_hpu(
        p,
        memory,
        [misaligned, aligned],
        descriptors=[beats, descriptor_beats(p, aligned)],
        read_latency=2,
    )
    assert run.errors[0] is True
    check_result(p, run, 1, aligned, golden_for(p, b, 70))
    check_bursts(p, run)
    assert any(a % AXI_BOUNDARY == 0 for bursts in run.read_bursts.values() for a, _ in bursts)
    assert np.array_equal(memory, expected)


@pytest.mark.parametrize("base", [0x0, 0x1000, 0x2FC0])
def test_appended_row_across_4k_is_written_in_two_bursts(base):
    """128-byte rows on 16-byte beats: at base 0x0 (and 0x1000) the K row of a page's last
    token sits at bytes 4032-4159 of the region, across a 4 KiB boundary; at 0x2FC0 the V row
    of the first page's token 30 does. Each is written as two bursts split at the boundary,
    and lands as the host's layout puts it."""
    p = HpuParams(head_dim=64, lanes=8, mem_data_bits=128, kv_bits=16, max_seq_len=256)
    assert p.layout.row_bytes == 128
    rng = np.random.default_rng(45)
    memory = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    requests, expected = [], memory.copy()
    for i, n in enumerate([32, 31, 64]):
        seq = make_sequence(p, n, rng)
        region = base + 0x3000 * i
        store(p, memory, region, seq, n - 1)
        store(p, expected, region, seq, n)
        requests.append((request_for(seq, seq_id=i, base=region, n=n), golden_for(p, seq, n)))
    run = run_hpu(p, memory, [r for r, _ in requests], read_latency=2)
    for i, (request, gold) in enumerate(requests):
        check_result(p, run, i, request, gold)
    check_bursts(p, run)
    assert np.array_equal(memory, expected)
    split = [a for a, beats in run.write_bursts if a % AXI_BOUNDARY == 0 and beats < p.row_beats]
    assert split, "no row was split at a 4 KiB boundary"


def test_check_failed_names_the_request():
    p = PARAMS["two_ports"]
    rng = np.random.default_rng(43)
    seq = make_sequence(p, 10, rng)
    requests = [request_for(seq, seq_id=s, base=0x1000 * s, n=10) for s in range(3)]
    check_failed(requests, [])
    with pytest.raises(MemoryResponseError, match=r"request 1 of 3 \(seq_id 1, base 0x1000, "):
        check_failed(requests, [1, 2])


@pytest.mark.parametrize("name", PARAMS)
def test_valids_are_low_while_reset_is_high(name):
    """ARVALID, AWVALID and WVALID held high (their READY low), then reset: low at once."""
    p = PARAMS[name]
    rng = np.random.default_rng(44)
    seq = make_sequence(p, 40, rng)
    request = request_for(seq, seq_id=1, base=0x0, n=40)
    m = Module()
    m.domains.sync = domain = ClockDomain()
    m.submodules.dut = dut = Hpu(p)
    reads = [getattr(dut, name) for name in p.read_port_names]
    w = dut.w_axi
    seen = {"reset_cycles": 0}

    def valids(ctx):
        return [ctx.get(r.arvalid) for r in reads] + [ctx.get(w.awvalid), ctx.get(w.wvalid)]

    async def reset(ctx, cycles):
        ctx.set(domain.rst, 1)
        for _ in range(cycles):
            assert valids(ctx) == [0] * (len(reads) + 2)
            seen["reset_cycles"] += 1
            await ctx.tick()
        ctx.set(domain.rst, 0)

    async def send_until(ctx, beats, condition):
        """Offer what is left of ``beats`` until ``condition`` holds."""
        for _ in range(500):
            ctx.set(dut.desc_i.valid, int(bool(beats)))
            if beats:
                ctx.set(dut.desc_i.payload, beats[0])
            taken = beats and ctx.get(dut.desc_i.ready)
            if condition(ctx):
                ctx.set(dut.desc_i.valid, 0)
                return
            await ctx.tick()
            if taken:
                beats.pop(0)
        raise AssertionError("the engine never raised the VALIDs")

    async def bench(ctx):
        for r in reads:
            ctx.set(r.arready, 0)
        ctx.set(w.awready, 0)
        ctx.set(w.wready, 0)
        await reset(ctx, 2)
        # AR and AW offered, not taken.
        beats = list(descriptor_beats(p, request))
        await send_until(
            ctx, beats, lambda ctx: all(ctx.get(r.arvalid) for r in reads) and ctx.get(w.awvalid)
        )
        await reset(ctx, 3)
        # Again, then AW taken: W offered, not taken.
        beats = list(descriptor_beats(p, request))
        await send_until(ctx, beats, lambda ctx: ctx.get(w.awvalid))
        ctx.set(w.awready, 1)
        await ctx.tick()
        ctx.set(w.awready, 0)
        await send_until(ctx, beats, lambda ctx: ctx.get(w.wvalid))
        assert all(ctx.get(r.arvalid) for r in reads)
        await reset(ctx, 3)

    sim = Simulator(m)
    sim.add_clock(1e-8, domain="sync")
    sim.add_testbench(bench)
    sim.run()
    assert seen["reset_cycles"] == 8
