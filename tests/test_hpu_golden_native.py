"""The compiled twin of the HPU golden model against the numpy specification, bit for bit:
results, saturation counts and errors, over parameter sets that saturate every format, and
inside the golden backend the decode runtime uses."""

import numpy as np
import pytest
from tandem.host.hpu import HpuParams, hpu_golden_batch
from tandem.host.hpu.device import HpuDevice
from tandem.host.hpu.golden_backend import GoldenHpuBackend
from tandem.host.hpu.golden_native import hpu_golden_batch_native, native_golden

from .test_hpu_golden_batch import random_request

BUILT = native_golden()
pytestmark = pytest.mark.skipif(
    BUILT.library is None, reason=f"the compiled twin cannot be built here: {BUILT.reason}"
)

#: Narrow formats: scores, weights and outputs saturate; the dot needs int64 (q_bits 16,
#: head_dim 128).
NARROW = {
    "head_dim": 128,
    "gqa_group": 2,
    "score_int_bits": 4,
    "score_frac_bits": 4,
    "prob_frac_bits": 8,
    "weight_bits": 10,
    "weight_frac_bits": 8,
    "out_bits": 8,
    "out_frac_bits": 4,
}

PARAMETER_SETS = [
    {},
    {"head_dim": 32, "gqa_group": 1, "q_bits": 8},
    {"head_dim": 128, "gqa_group": 8, "max_seq_len": 512},
    NARROW,
    {"head_dim": 64, "score_frac_bits": 4, "prob_frac_bits": 8, "out_bits": 8, "out_frac_bits": 6},
    # int16 K and V: the exact integer score, w * v of 16-bit values; Gemma 3's 256-wide heads
    {"kv_bits": 16, "lanes": 16, "gqa_group": 3},
    {**NARROW, "kv_bits": 16, "lanes": 16},
    {"kv_bits": 16, "lanes": 16, "head_dim": 256, "gqa_group": 4, "max_seq_len": 512},
    {"kv_bits": 8, "lanes": 32, "head_dim": 256, "gqa_group": 1, "q_bits": 8},
]


def batch_of(rng, p: HpuParams, lengths, width: int):
    """A padded batch of random requests (garbage in the padding)."""
    requests = [random_request(rng, p, n, int(rng.integers(0, 5))) for n in lengths]
    count = len(lengths)
    kv_top, kv_type = 1 << (p.kv_bits - 1), np.int16 if p.kv_bits == 16 else np.int8
    k = rng.integers(-kv_top, kv_top, (count, width, p.head_dim)).astype(kv_type)
    v = rng.integers(-kv_top, kv_top, (count, width, p.head_dim)).astype(kv_type)
    k_scale = np.abs(rng.normal(0, 1, (count, width))).astype(np.float16)
    v_scale = np.abs(rng.normal(0, 100, (count, width))).astype(np.float16)
    for i, (_, _, ki, ksi, vi, vsi) in enumerate(requests):
        n = lengths[i]
        k[i, :n], v[i, :n], k_scale[i, :n], v_scale[i, :n] = ki, vi, ksi, vsi
    q = np.zeros((count, p.gqa_group, p.head_dim), np.int64)
    q_scale = np.zeros((count, p.gqa_group), np.float16)
    for i, request in enumerate(requests):
        q[i], q_scale[i] = request[0], request[1]
    return q, q_scale, k, k_scale, v, v_scale, np.asarray(lengths)


def assert_same(a, b, where=""):
    for name in ("m", "l", "o", "y"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), f"{name} {where}"
    assert a.saturated.keys() == b.saturated.keys()
    for place in a.saturated:
        assert np.array_equal(a.saturated[place], b.saturated[place]), f"{place} {where}"


@pytest.mark.parametrize("overrides", PARAMETER_SETS)
def test_twin_equals_the_numpy_model(overrides):
    p = HpuParams(**overrides)
    rng = np.random.default_rng(11)
    saturated = dict.fromkeys(("score", "weight", "output"), 0)
    for trial in range(12):
        count = int(rng.integers(1, 9))
        lengths = rng.integers(1, min(p.max_seq_len, 300) + 1, count)
        width = int(lengths.max()) + int(rng.integers(0, 4))
        inputs = batch_of(rng, p, lengths, width)
        expected = hpu_golden_batch(p, *inputs)
        assert_same(expected, hpu_golden_batch_native(p, *inputs), f"trial {trial}")
        for place, counts in expected.saturated.items():
            saturated[place] += int(counts.sum())
    if overrides.get("out_bits", 16) <= 8:  # the narrow sets exercise every saturation
        assert all(saturated.values()), saturated


def test_twin_on_an_empty_batch_and_long_sequences():
    p = HpuParams(max_seq_len=4096)
    rng = np.random.default_rng(12)
    assert_same(
        hpu_golden_batch(p, *batch_of(rng, p, [], 1)),
        hpu_golden_batch_native(p, *batch_of(rng, p, [], 1)),
    )
    inputs = batch_of(rng, p, [4096, 1, 2500], 4096)
    assert_same(hpu_golden_batch(p, *inputs), hpu_golden_batch_native(p, *inputs))


def test_twin_checks_its_inputs_as_the_numpy_model_does():
    p = HpuParams(head_dim=32, gqa_group=1, kv_bits=8, lanes=32)
    q = np.zeros((1, 1, 32), np.int64)
    k = np.zeros((1, 4, 32), np.int64)
    s = np.ones((1, 4), np.float16)
    for call in (hpu_golden_batch, hpu_golden_batch_native):
        with pytest.raises(ValueError, match="sequence lengths"):
            call(p, q, np.ones((1, 1)), k, s, k, s, [5])
        with pytest.raises(ValueError, match="k must be int8"):
            call(p, q, np.ones((1, 1)), k + 200, s, k, s, [4])
        with pytest.raises(ValueError, match="q must be int16"):
            call(p, q + (1 << 15), np.ones((1, 1)), k, s, k, s, [4])


@pytest.mark.parametrize("kv_bits", [8, 16])
def test_golden_backend_kernels_give_the_same_device_results(kv_bits):
    """A device's calls (appends, partial and full requests) on both kernels: same results,
    same memory, same saturation counters."""
    p = HpuParams(
        head_dim=32,
        gqa_group=2,
        max_seq_len=256,
        out_bits=8,
        out_frac_bits=4,
        kv_bits=kv_bits,
        lanes=256 // kv_bits,
    )
    rng = np.random.default_rng(13)
    runs = {}
    for kernel in ("numpy", "native"):
        dev = HpuDevice(p, memory_bytes=4 << 20, kernel=kernel)
        assert dev.backend.kernel == kernel
        seq = dev.allocate(200, heads=2)
        rng = np.random.default_rng(13)
        for head in range(2):
            k, v = rng.normal(0, 1, (2, 120, 32))
            dev.write_kv_real(seq, head, k, v)
        outputs = []
        for _ in range(5):
            for head in range(2):
                q = rng.normal(0, 3, (2, 32))
                new = tuple(rng.normal(0, 1, (2, 32)))
                outputs.append(dev.attend_real(seq, head, q, new=new))
        runs[kernel] = (outputs, dev.backend.memory.array.copy(), dict(dev.total_saturations))
        dev.close()
    (a_out, a_mem, a_sat), (b_out, b_mem, b_sat) = runs["numpy"], runs["native"]
    assert all(np.array_equal(x, y) for x, y in zip(a_out, b_out))
    assert np.array_equal(a_mem, b_mem) and a_sat == b_sat


def test_kernel_option_is_checked():
    with pytest.raises(ValueError, match="kernel must be one of"):
        GoldenHpuBackend(HpuParams(), 1 << 20, kernel="fast")
    with pytest.raises(ValueError, match="takes only kernel"):
        HpuDevice(HpuParams(), memory_bytes=1 << 20, simulator="verilator")
    auto = GoldenHpuBackend(HpuParams(), 1 << 20)
    assert auto.kernel == "native" and auto.kernel_note == ""


@pytest.mark.parametrize("value_offset", [0, 1 << 19])
@pytest.mark.parametrize("kv_bits", [8, 16])
def test_twin_reads_regions_in_place_as_read_regions_does(kv_bits, value_offset):
    """Random bytes as device memory (garbage beyond each region's length included): the
    twin's in-place read gives what ``read_regions`` then the numpy model give, in the
    interleaved layout and the split one (V spans ``value_offset`` above the K spans)."""
    from tandem.host.hpu.golden_native import hpu_golden_regions_native

    p = HpuParams(
        head_dim=64,
        gqa_group=3,
        max_seq_len=512,
        kv_bits=kv_bits,
        lanes=256 // kv_bits,
        value_offset=value_offset,
    )
    layout, rng = p.layout, np.random.default_rng(14)
    memory = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    # random binary16 scale patterns everywhere would hold inf and NaN: finite ones instead
    for start in range(0, memory.size, layout.part_bytes):
        scales = np.abs(rng.normal(0, 0.05, 32)).astype("<f2")
        memory[start : start + 64] = scales.view(np.uint8)
    for trial in range(6):
        count = int(rng.integers(1, 7))
        lengths = rng.integers(1, 300, count)
        top = memory.size - int(layout.region_end(0, 300))
        bases = rng.integers(0, top // 64, count) * 64
        q = rng.integers(-(1 << 15), 1 << 15, (count, 3, 64))
        score_scale = np.abs(rng.normal(0, 1e-4, (count, 3))).astype(np.float16)
        k, ks, v, vs = layout.read_regions(memory, bases, lengths)
        expected = hpu_golden_batch(p, q, score_scale, k, ks, v, vs, lengths)
        got = hpu_golden_regions_native(p, memory, bases, lengths, q, score_scale)
        assert_same(expected, got, f"trial {trial}")
    with pytest.raises(ValueError, match="outside"):
        hpu_golden_regions_native(p, memory, [memory.size - 64], [1], q[:1], score_scale[:1])
    with pytest.raises(ValueError, match="sequence lengths"):
        hpu_golden_regions_native(p, memory, [0], [513], q[:1], score_scale[:1])


@pytest.mark.parametrize("kv_bits", [8, 16])
def test_auto_kernel_runs_the_twin_for_every_format_and_head(kv_bits):
    """int8 and int16 rows, heads up to 256 (Gemma 3): ``auto`` runs the twin, with no note."""
    for head_dim in (32, 64, 128, 256):
        p = HpuParams(head_dim=head_dim, gqa_group=4, kv_bits=kv_bits, lanes=256 // kv_bits)
        auto = GoldenHpuBackend(p, 1 << 20)
        assert auto.kernel == "native" and auto.kernel_note == "", (head_dim, auto.kernel_note)


@pytest.mark.parametrize("which", [0, 1], ids=["params", "view"])
def test_ctypes_structs_lay_out_as_the_compiled_c_structs(which):
    """The ctypes classes and the C structs come from one field list: the compiler's sizeof
    and offsetof of every field are the ctypes class's."""
    import ctypes

    from tandem.host.hpu.golden_native import PARAM_FIELDS, VIEW_FIELDS, _Params, _View

    built = native_golden()
    if built.library is None:
        pytest.skip(built.reason)
    structure, fields = [(_Params, PARAM_FIELDS), (_View, VIEW_FIELDS)][which]
    offsets = np.zeros(len(fields), dtype=np.int64)
    size = built.library.hpu_golden_layout(which, offsets.ctypes.data)
    assert [name for name, _ in structure._fields_] == [f.name for f in fields]
    assert size == ctypes.sizeof(structure)
    assert offsets.tolist() == [getattr(structure, f.name).offset for f in fields]


def test_params_header_declares_every_field_once():
    from tandem.host.hpu.golden_native import PARAM_FIELDS, VIEW_FIELDS, params_header

    text = params_header()
    for field in PARAM_FIELDS + VIEW_FIELDS:
        assert text.count(f" {field.ctype} {field.name};") == 1
        assert text.count(f"X({field.name})") == 1
