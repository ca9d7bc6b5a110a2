"""``backend="rtl"``: the same device script and the same decode on RTL and golden backends.

The engine configuration is the one ``tests/test_hpu_rtl.py`` calls ``hd32-g2``, so within one
pytest run both share the simulator build (the ``sim_cache`` fixture). Verilator runs the
script and a tiny-model decode; Icarus runs the script.
"""

import os
import signal

import numpy as np
import pytest
from tandem.host.common.errors import CosimError, CosimTimeoutError, DeviceClosedError
from tandem.host.hpu import HpuParams, quantize_rows, score_scale
from tandem.host.hpu.cycles import call_cycles
from tandem.host.hpu.device import Attend, HpuDevice

from .rtl import ROUTES, need, route_options

P = HpuParams(head_dim=32, lanes=16, mem_data_bits=128, kv_bits=8, gqa_group=2, max_seq_len=256)
MEMORY = 1 << 18


def device_script(dev: HpuDevice, seed: int):
    """Prefill writes, appending batches (full and partial), a split sequence, host reads."""
    rng = np.random.default_rng(seed)

    def rows(n, bits=8, scale=1.0):
        return quantize_rows(rng.standard_normal((n, P.head_dim)) * scale, bits)

    seq = dev.allocate(100, heads=2)
    other = dev.allocate(40, heads=1)
    for head, n in ((0, 31), (1, 64)):
        k, ks = rows(n, scale=np.exp(rng.normal(0, 0.5)))
        dev.write_kv(seq, head, k, ks, *rows(n))
    dev.write_kv(other, 0, *rows(33), *rows(33))
    out = []
    for _ in range(3):
        calls = []
        for head in (0, 1):
            q, qs = rows(P.gqa_group, 16, scale=4.0)
            calls.append(
                Attend(seq, head, q, score_scale(qs, P.head_dim), (*rows(1), *rows(1)), head == 1)
            )
        q, qs = rows(P.gqa_group, 16)
        calls.append(Attend(other, 0, q, score_scale(qs, P.head_dim), partial=True))
        out.append((dev.attend_many(calls), dev.last_cycles))
    out.append((dev.read_kv(seq, 0), 0))
    return out


def assert_same(golden, rtl):
    for (g_results, _), (r_results, _) in zip(golden[:-1], rtl[:-1]):
        for g, r in zip(g_results, r_results):
            for name in ("m", "l", "o", "y"):
                a, b = getattr(g, name), getattr(r, name)
                assert (a is None and b is None) or np.array_equal(a, b), name
    for a, b in zip(golden[-1][0], rtl[-1][0]):  # the engine's appends landed the same
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def rtl_device(route, cache, run_dir, **options):
    return HpuDevice(
        P,
        memory_bytes=MEMORY,
        backend="rtl",
        **route_options(route),
        cache_dir=cache,
        run_dir=run_dir,
        **options,
    )


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ROUTES)
def test_rtl_backend_bit_identical(simulator, sim_cache, tmp_path, seed):
    need(simulator)
    golden = device_script(HpuDevice(P, memory_bytes=MEMORY), seed)
    with rtl_device(simulator, sim_cache, tmp_path) as dev:
        assert not dev.backend.started  # lazy: nothing runs before the first call
        rtl = device_script(dev, seed)
        assert dev.backend.started
    assert not dev.backend.started  # closed: the simulator is gone
    assert_same(golden, rtl)
    for (_, modelled), (_, simulated) in zip(golden[:-1], rtl[:-1]):
        # The golden backend's cycle model (fitted by benchmarks/decode_cycles.py) stays
        # within 15 % of the RTL.
        assert simulated > 0 and abs(modelled - simulated) <= 0.15 * simulated, (
            modelled,
            simulated,
        )
    with pytest.raises(DeviceClosedError, match="closed"):  # the device refuses, as on golden
        dev.allocate(32)
    with pytest.raises(CosimError, match="closed"):  # and so does its backend
        dev.backend.memory.read(0, 64)


@pytest.mark.rtl
def test_native_and_cocotb_count_the_same_cycles(sim_cache, tmp_path, seed):
    """The native harness and cocotb on the same Verilated engine: the same cycles, call by
    call (the HPU's cycle model is within 15 %, so only this compares the two exactly)."""
    need("native")
    cycles, records = {}, {}
    for route in ("native", "verilator"):
        with rtl_device(route, sim_cache, tmp_path / route) as dev:
            cycles[route] = [c for _, c in device_script(dev, seed)[:-1]]
            dev.backend.set_read_latency(40)  # and a slower memory: the same read windows
            seq = dev.allocate(200)
            zeros = np.zeros((200, P.head_dim), int)
            dev.write_kv(seq, 0, zeros, np.ones(200), zeros, np.ones(200))
            q = np.zeros((P.gqa_group, P.head_dim), int)
            dev.attend_many([Attend(seq, 0, q, np.ones(P.gqa_group))] * 3)
            cycles[route].append(dev.last_cycles)
            records[route] = dev.backend.read_records()
            assert 0.5 < dev.backend.stream_efficiency() <= 1.0
    assert cycles["native"] == cycles["verilator"], cycles
    assert records["native"] == records["verilator"], records


@pytest.mark.rtl
@pytest.mark.parametrize("route", ["native", "verilator"])
def test_an_engine_read_outside_memory_is_an_error(route, sim_cache, tmp_path):
    """A descriptor (sent past the host's own span check) whose region ends beyond device
    memory: the memory model reports the engine's bursts as AXI protocol errors, the host
    gets CosimError, and the simulator serves the next request."""
    from tandem.host.common.errors import CosimError
    from tandem.host.hpu import HpuRequest
    from tandem.host.hpu.codec import pack_descriptor

    need(route)
    with rtl_device(route, sim_cache, tmp_path) as dev:
        q = np.zeros((P.gqa_group, P.head_dim), int)
        outside = HpuRequest(0, MEMORY - P.layout.page_bytes, 64, q, np.ones(P.gqa_group))
        with pytest.raises(CosimError, match=r"AXI protocol errors: .*beyond the"):
            dev.backend._call("run", [pack_descriptor(P, outside)])
        seq = dev.allocate(32)
        zeros = np.zeros((32, P.head_dim), int)
        dev.write_kv(seq, 0, zeros, np.ones(32), zeros, np.ones(32))
        (result,) = dev.attend_many([Attend(seq, 0, q, np.ones(P.gqa_group))])
        assert np.array_equal(result.y, np.zeros_like(result.y))


@pytest.mark.rtl
@pytest.mark.parametrize("route", ["native", "verilator"])
def test_rtl_backend_errors(route, sim_cache, tmp_path):
    need(route)
    dev = rtl_device(route, sim_cache, tmp_path / "a")
    seq = dev.allocate(256)
    zeros = np.zeros((256, 32), int)
    dev.write_kv(seq, 0, zeros, np.ones(256), zeros, np.ones(256))
    os.killpg(dev.backend.process_group, signal.SIGSTOP)  # a simulator that stopped answering
    dev.backend.timeout_s = 0.5
    q = np.zeros((P.gqa_group, P.head_dim), int)
    with pytest.raises(CosimTimeoutError, match="did not answer"):
        dev.attend_many([Attend(seq, 0, q, np.ones(P.gqa_group))])
    assert not dev.backend.started  # stopped, not hanging
    dev = rtl_device(route, sim_cache, tmp_path / "b")
    seq = dev.allocate(32)
    dev.read_kv(seq, 0)  # starts it
    dev.backend.kill()  # what a simulator crash looks like to the host
    with pytest.raises(CosimError, match="died"):
        dev.read_kv(seq, 0)
    dev.close()


@pytest.mark.rtl
def test_rtl_decode_same_tokens(sim_cache, tmp_path):
    """The tiny Llama generates the same tokens with every attention on RTL as on golden."""
    torch = pytest.importorskip("torch")
    from tandem.host.system.decode import TINY, Decoder, HpuAttention, Llama
    from tandem.host.system.model import byte_tokenizer, random_llama

    torch.set_num_threads(1)
    model = Llama(TINY, random_llama(TINY, 0), "cpu")
    tok = byte_tokenizer()
    prompts = [tok.encode("hpu"), tok.encode("rtl!")]
    golden = Decoder(model, HpuAttention(TINY, [HpuDevice(P, memory_bytes=MEMORY)]))
    want = golden.generate(prompts, 5, keep_logits=True)
    with rtl_device("native", sim_cache, tmp_path) as dev:
        got = Decoder(model, HpuAttention(TINY, [dev])).generate(prompts, 5, keep_logits=True)
    assert got.tokens == want.tokens
    np.testing.assert_array_equal(got.logits, want.logits)  # bit-identical attention
    assert all(c["hpu0"] > 0 for c in got.step_cycles)
    hpu_tasks = [t for t in got.tasks if t["kind"] == "hpu"]
    assert len(hpu_tasks) == 4 * 2 * TINY.n_layers  # 4 decode steps, 2 sub-batches


@pytest.mark.rtl
def test_rtl_decode_on_two_cards_in_parallel(sim_cache, tmp_path):
    """Sequences split over two RTL cards (32-token slices): each card's batch is started
    before either is waited for, and the tokens and logits are golden's bit for bit."""
    torch = pytest.importorskip("torch")
    from tandem.host.system.decode import TINY, Decoder, HpuAttention, Llama
    from tandem.host.system.model import byte_tokenizer, random_llama

    torch.set_num_threads(1)
    model = Llama(TINY, random_llama(TINY, 0), "cpu")
    prompt = byte_tokenizer().encode("a prompt that spans two cards of 32-token slices!")

    def cards(**options):
        return [HpuDevice(P, memory_bytes=MEMORY, name=f"hpu{i}", **options) for i in range(2)]

    golden = HpuAttention(TINY, cards(), max_slice_tokens=32)
    want = Decoder(model, golden).generate([prompt], 3, keep_logits=True)
    rtl = cards(backend="rtl", cache_dir=sim_cache, run_dir=tmp_path, timeout_s=300)
    attention = HpuAttention(TINY, rtl, max_slice_tokens=32)
    try:
        got = Decoder(model, attention).generate([prompt], 3, keep_logits=True)
        assert all(dev.backend.started and dev.backend.harness == "native" for dev in rtl)
    finally:
        attention.close()
    assert got.tokens == want.tokens
    np.testing.assert_array_equal(got.logits, want.logits)
    assert all(c["hpu0"] > 0 and c["hpu1"] > 0 for c in got.step_cycles)


def test_cycle_model_batches():
    """Without a simulator: the model grows with the batch (a smoke check of call_cycles)."""
    from tandem.host.hpu import HpuRequest

    q = np.zeros((P.gqa_group, P.head_dim), int)
    c = np.zeros(P.gqa_group)
    one = HpuRequest(0, 0, 64, q, c)
    assert call_cycles(P, [one, one]) > call_cycles(P, [one]) > 64 * P.row_beats
