"""The native harness's HBM mode (``sim/native/hbm.h``) against the Python model it copies.

The C++ pseudo-channel model, compiled alone, grants exactly the beats
:class:`~tandem.sim.hpu.hbm.HbmModel` grants for the same requests, cycle by cycle, and ends
with the same buckets and counters. On an ``hpu`` engine in the native harness with the mode
on, results stay those of the golden model, no channel serves more than its bucket allows,
and the ports' long-run rates are the ones :class:`~tandem.sim.hpu.hbm.HbmParams` gives: a
port alone in its channel, two sharing one, a port reading another's channel.
"""

import ctypes
import shutil
import subprocess
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from tandem.host.hpu import quantize_rows, score_scale
from tandem.host.hpu.device import Attend, HpuDevice
from tandem.mappings.hpu.channels import ChannelGeometry
from tandem.sim.hpu.hbm import HbmModel, HbmParams

from .rtl import need, route_options
from .test_hpu_device import P as DEVICE_ENGINE

HEADER = Path(__file__).parents[1] / "sim" / "native" / "hbm.h"


@pytest.fixture(scope="module")
def native_hbm(tmp_path_factory):
    """The C++ model alone as a ctypes library (the harness's flags: a fused multiply-add
    would show here)."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    folder = tmp_path_factory.mktemp("hbm")
    (folder / "hbm.cpp").write_text('#define TANDEM_HBM_STANDALONE\n#include "hbm.h"\n')
    command = [compiler, "-O3", "-march=native", "-fPIC", "-shared", f"-I{HEADER.parent}"]
    subprocess.run(
        [*command, "hbm.cpp", "-o", "libhbm.so"], cwd=folder, check=True, capture_output=True
    )
    lib = ctypes.CDLL(str(folder / "libhbm.so"))
    vp, i32, i64, u64, f64 = (
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.c_uint64,
        ctypes.c_double,
    )
    i32p, u64p, i64p, u8p, f64p = (
        np.ctypeslib.ndpointer(dtype, flags="C")
        for dtype in (np.int32, np.uint64, np.int64, np.uint8, np.float64)
    )
    signatures = {
        "tn_hbm_new": (vp, [i32, u64, i32, f64, f64, f64, i64, i64, i32, f64]),
        "tn_hbm_free": (None, [vp]),
        "tn_hbm_port": (i32, [vp, i32p, i32]),
        "tn_hbm_grant": (None, [vp, i64, i32, i32p, u64p, u8p]),
        "tn_hbm_state": (u64, [vp, i64p, f64p]),
        "tn_hbm_reset": (None, [vp]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


class CModel:
    """The C++ model with :class:`HbmModel`'s interface (what the comparison calls)."""

    def __init__(self, lib, params: HbmParams):
        reference = HbmModel(params)  # cap and start as NativeModel.set_hbm passes them
        self.lib, self.params = lib, params
        self.h = lib.tn_hbm_new(
            params.channels,
            params.channel_bytes,
            params.beat_bytes,
            params.fill_bytes_per_cycle,
            reference.cap,
            float(reference.tokens[0]),
            params.refresh_interval,
            params.refresh_cycles,
            params.latency,
            params.lateral_factor,
        )

    def port(self, channels) -> int:
        home = np.array(sorted(channels), np.int32)
        return self.lib.tn_hbm_port(self.h, home, len(home))

    def grant(self, cycle: int, wants) -> list[bool]:
        ports = np.array([w[0] for w in wants], np.int32)
        addresses = np.array([w[1] for w in wants], np.uint64)
        out = np.zeros(len(wants), np.uint8)
        self.lib.tn_hbm_grant(self.h, cycle, len(wants), ports, addresses, out)
        return out.astype(bool).tolist()

    def state(self):
        served = np.zeros(self.params.channels, np.int64)
        tokens = np.zeros(self.params.channels, np.float64)
        beats = self.lib.tn_hbm_state(self.h, served, tokens)
        return served, tokens, int(beats)

    def close(self):
        self.lib.tn_hbm_free(self.h)


def random_params(rng) -> HbmParams:
    geometry = ChannelGeometry.scaled(int(rng.choice([64 << 10, 1 << 20])), int(rng.integers(1, 9)))
    interval = int(rng.integers(20, 400))
    overrides = dict(
        refresh_interval=interval,
        refresh_cycles=int(rng.integers(0, interval // 12 + 1)),
        lateral_factor=float(rng.choice([1.0, 0.5, 0.3, 0.77])),
        bucket_beats=float(rng.choice([1.0, 2.0, 3.5])),
        sustained_fraction=float(rng.uniform(0.6, 0.9)),
        peak_bytes_per_cycle=float(rng.uniform(2.0, 40.0)),
    )
    return HbmParams.of_board(geometry, int(rng.choice([16, 64])), **overrides)


@pytest.mark.parametrize("seed", range(6))
def test_c_model_grants_what_the_python_model_grants(native_hbm, seed):
    rng = np.random.default_rng(seed)
    p = random_params(rng)
    python, native = HbmModel(p), CModel(native_hbm, p)
    try:
        ports = int(rng.integers(1, 7))
        for _ in range(ports):
            home = rng.choice(p.channels, int(rng.integers(0, p.channels + 1)), replace=False)
            assert python.port(home.tolist()) == native.port(home.tolist())
        # A few busy channels (contention) and the odd address past the last channel.
        busy = rng.choice(p.channels, min(p.channels, 2), replace=False)
        cycle = int(rng.integers(0, 3000))
        granted = 0
        for step in range(4000):
            cycle += int(rng.choice([0, 1, 1, 1, 1, 2, 5, 40]))  # repeats and gaps too
            wants = []
            for port in rng.permutation(ports)[: int(rng.integers(0, ports + 1))].tolist():
                channel = int(rng.choice(busy)) if rng.random() < 0.8 else None
                if channel is None:
                    address = int(rng.integers(0, (p.channels + 1) * p.channel_bytes))
                else:
                    address = channel * p.channel_bytes + int(rng.integers(0, p.channel_bytes))
                wants.append((port, address))
            want = python.grant(cycle, wants)
            assert native.grant(cycle, wants) == want, (step, cycle, wants)
            granted += sum(want)
            if step == 2000:
                python.reset()
                native_hbm.tn_hbm_reset(native.h)
        served, tokens, beats = native.state()
        assert np.array_equal(served, python.bytes)
        assert np.array_equal(tokens, python.tokens)  # bit for bit, not approximately
        assert beats == python.beats
        assert granted > 500  # the buckets were the limit, not the requests
    finally:
        native.close()


def test_c_model_refresh_and_rates_match_the_formulas(native_hbm):
    """Long streams on the C++ model alone: the rates of :meth:`HbmParams.port_beats_per_cycle`
    (as tests/test_hbm_model.py checks them on the Python model)."""
    p = HbmParams.of_board(ChannelGeometry.scaled(128 << 10, 4), 16)
    cycles = 20 * p.refresh_interval
    model = CModel(native_hbm, p)
    alone, shared_a, shared_b, lateral = (
        model.port([0]),
        model.port([1]),
        model.port([1]),
        model.port([3]),
    )
    got = np.zeros(4, np.int64)
    ports = [(alone, 0), (shared_a, 1 << 15), (shared_b, (1 << 15) + 4096), (lateral, 2 << 15)]
    for t in range(cycles):
        got += model.grant(t, ports)
    model.close()
    rates = got / cycles
    assert rates[0] == pytest.approx(p.port_beats_per_cycle(1), rel=0.01)
    assert rates[1] == pytest.approx(p.port_beats_per_cycle(2), rel=0.01)
    assert abs(got[1] - got[2]) <= 1
    assert rates[3] == pytest.approx(p.port_beats_per_cycle(1, lateral=True), rel=0.01)


# --- the HBM mode on an hpu engine in the native harness ---------------------------------

#: tests/test_hpu_device_rtl.py's engine in the split layout: a region's K parts in the lower
#: half of memory, its V parts ``value_offset`` above, so with two channels each port streams
#: from its own and with one channel they share it.
MEMORY = 1 << 18
P = DEVICE_ENGINE.replace(value_offset=MEMORY // 2)


def hbm_params(channels: int, **overrides) -> HbmParams:
    """The U55C's channels over the engine's memory in ``channels`` ranges."""
    geometry = ChannelGeometry(channels, MEMORY // channels)
    return HbmParams.of_board(geometry, P.beat_bytes, **overrides)


def script(dev: HpuDevice, rng, tokens: int = 256, calls: int = 3, after=None):
    """Write one long sequence, attend to it ``calls`` times (the last appending a token),
    calling ``after(dev)`` after each call."""

    def rows(n, bits=8, scale=1.0):
        return quantize_rows(rng.standard_normal((n, P.head_dim)) * scale, bits)

    seq = dev.allocate(tokens, heads=1)
    dev.write_kv(seq, 0, *rows(tokens - 1), *rows(tokens - 1))
    out = []
    for call in range(calls):
        q, qs = rows(P.gqa_group, 16, scale=4.0)
        new = (*rows(1), *rows(1)) if call == calls - 1 else None
        out.append(dev.attend_many([Attend(seq, 0, q, score_scale(qs, P.head_dim), new)])[0])
        if after is not None:
            after(dev)
    return out


def native_device(cache, run_dir) -> HpuDevice:
    return HpuDevice(
        P,
        memory_bytes=MEMORY,
        backend="rtl",
        placement="channels",
        channels=2,
        **route_options("native"),
        cache_dir=cache,
        run_dir=run_dir,
    )


def rates(dev: HpuDevice) -> dict[str, float]:
    """R beats per cycle of each read port over its window (first address to last beat)."""
    records = dev.backend.read_records()
    return {name: r["r_beats"] / (r["last_r"] - r["first_ar"] + 1) for name, r in records.items()}


@pytest.mark.rtl
def test_hbm_mode_keeps_results_and_paces_the_ports(sim_cache, tmp_path):
    need("native")
    golden = script(HpuDevice(P, memory_bytes=MEMORY, placement="channels", channels=2),
                    np.random.default_rng(5))  # fmt: skip
    with native_device(sim_cache, tmp_path) as dev:
        # Buckets, refresh, latency and lateral reads all in play: V reads its channel as a
        # stranger.
        params = hbm_params(2)
        dev.backend._call("hbm", params, {"k_axi": [0], "v_axi": [0]})
        counted = []  # per call: bytes per channel, beats, cycles

        def count(dev):
            served, beats = dev.backend._call("hbm_bytes")
            counted.append((np.array(served), beats, dev.last_cycles))

        got = script(dev, np.random.default_rng(5), after=count)
    for want, have in zip(golden, got, strict=True):
        for name in ("m", "l", "o", "y"):
            a, b = getattr(want, name), getattr(have, name)
            assert (a is None and b is None) or np.array_equal(a, b), name
    cap = HbmModel(params).cap
    for served, beats, cycles in counted:
        assert beats * P.beat_bytes == served.sum() > 0
        assert served[0] > 0 and served[1] > 0  # K from channel 0, V from channel 1
        # A bucket serves at most what it held (its cap) plus what it gained in the call's
        # cycles: the fill outside refresh, so the sustained rate but for at most one
        # refresh the window cut short.
        fill = params.fill_bytes_per_cycle
        assert np.all(served <= cap + fill * cycles), (served, cycles)
        sustained = params.sustained_bytes_per_cycle * cycles
        assert np.all(served <= sustained + cap + fill * params.refresh_cycles), (served, cycles)
        assert beats <= 2 * cycles  # at most a beat a cycle a port


@pytest.mark.rtl
def test_hbm_mode_rates_follow_the_channels(sim_cache, tmp_path):
    """One long request per case; latency 1 and refresh every 117 cycles (10 of them) so the
    window spans several refreshes and the rates are the long-run ones."""
    need("native")
    short = dict(latency=1, refresh_interval=117, refresh_cycles=10)
    cases = {  # name: (channels, homes, expected beats per cycle of each port)
        "alone": (2, {"k_axi": [0], "v_axi": [1]}, lambda p: p.port_beats_per_cycle(1)),
        "shared": (1, {"k_axi": [0], "v_axi": [0]}, lambda p: p.port_beats_per_cycle(2)),
        "lateral": (
            2,
            {"k_axi": [1], "v_axi": [0]},
            lambda p: p.port_beats_per_cycle(1, lateral=True),
        ),
    }
    measured = {}
    with native_device(sim_cache, tmp_path) as dev:
        for name, (channels, homes, expected) in cases.items():
            params = hbm_params(channels, **short)
            dev.backend._call("hbm", params, homes)
            script(dev, np.random.default_rng(7), calls=1)
            dev.backend._call("hbm_bytes")
            measured[name] = (rates(dev), expected(params))
    for name, (got, want) in measured.items():
        for port, rate in got.items():
            assert rate == pytest.approx(want, rel=0.02), (name, port, rate, want)


def replay(params: HbmParams, homes, ars, first: int, last: int):
    """R beats of each read port, cycle by cycle, as ``sim/hpu/memory.py``'s ``HbmMemory``
    serves them (its ``_HbmPort`` steps, a design always ready for data), given each port's
    address handshakes ``ars`` (``(cycle, address, beats)``); and the Python model."""
    model = HbmModel(params)
    ports = []
    for home, taken in zip(homes, ars, strict=True):
        ports.append({"index": model.port(home), "ars": deque(map(tuple, taken)),
                      "bursts": deque(), "presenting": False, "beats": []})  # fmt: skip
    for cycle in range(first, last):
        wants, asking = [], []
        for port in ports:
            bursts = port["bursts"]
            if port["presenting"]:  # taken at this edge
                port["beats"].append(cycle)
                bursts[0][0] += params.beat_bytes
                bursts[0][1] -= 1
                if not bursts[0][1]:
                    bursts.popleft()
                port["presenting"] = False
            if port["ars"] and port["ars"][0][0] == cycle:
                _, address, beats = port["ars"].popleft()
                due = cycle + max(1, params.latency) - 1
                if bursts:
                    due = max(due, bursts[-1][2])
                bursts.append([address, beats, due])
            if not port["presenting"] and bursts and bursts[0][2] <= cycle:
                wants.append((port["index"], bursts[0][0]))
                asking.append(port)
        if wants:
            for port, ok in zip(asking, model.grant(cycle, wants), strict=True):
                port["presenting"] = ok
    return [port["beats"] for port in ports], model


@pytest.mark.rtl
def test_hbm_mode_serves_the_beats_the_cocotb_memory_would(sim_cache):
    """The engine's own address handshakes, replayed through the cocotb memory's HBM steps and
    the Python model: the same R beats (count, cycle of the last) and bytes per channel.

    The replay takes every beat the cycle it is offered, so the cases keep K and V at equal
    rates (the engine then never holds ``rready`` low; with one port slower than the other
    it throttles the faster one).
    """
    need("native")
    from tandem.host.hpu.codec import pack_descriptor
    from tandem.sim.native.build import build_native
    from tandem.sim.native.model import NativeModel
    from tandem.sim.native.server import HpuServer

    from tandem.registry import get_design

    golden = HpuDevice(P, memory_bytes=MEMORY, placement="channels", channels=2)
    batches = []
    run = golden.backend.run
    golden.backend.run = lambda requests: (batches.append(requests), run(requests))[1]
    script(golden, np.random.default_rng(3), calls=1)  # the engine reads before it appends
    (batch,) = batches
    requests = batch.requests() if hasattr(batch, "requests") else batch
    descriptors = [pack_descriptor(P, r) for r in requests]
    image = np.frombuffer(golden.backend.memory.read(0, MEMORY), np.uint8)
    library, manifest = build_native(get_design("hpu"), P, cache_dir=sim_cache)
    cases = [  # channels, homes, overrides
        (2, {"k_axi": [0], "v_axi": [1]}, dict(refresh_interval=300, refresh_cycles=25)),
        (1, {"k_axi": [0], "v_axi": [0]}, {}),  # both share channel 0
        (2, {"k_axi": [1], "v_axi": [0]}, {}),  # both lateral
    ]
    for channels, homes, overrides in cases:
        model = NativeModel(library, manifest, memory_bytes=MEMORY)
        try:
            server = HpuServer(model, P)
            model.clear_records = lambda: None  # keep every handshake of the run
            params = hbm_params(channels, **overrides)
            model.set_hbm(params, homes)
            model.memory[:] = image
            server.run(descriptors)
            records = model.axi_records()
            served, beats = model.hbm_channel_bytes()
            names = model.read_ports()
        finally:
            model.close()
        ars = [records[name]["bursts"].tolist() for name in names]
        first = min(a[0][0] for a in ars)
        last = max(records[name]["last_r"] for name in names) + 2
        got, python = replay(params, [homes[n] for n in names], ars, first, last)
        for name, beats_at in zip(names, got, strict=True):
            assert len(beats_at) == records[name]["r_beats"] > 0, (homes, name)
            assert beats_at[-1] == records[name]["last_r"], (homes, name)
        assert np.array_equal(served, python.bytes), homes
        assert beats == python.beats, homes
