"""SparseMpeDevice (sparse-mpe): bit-exact with the golden function called directly, cycles
from the engine's documented cycle behaviour, clear errors."""

import numpy as np
import pytest
from tandem.host.sparse_dsp import SparseMpeParams, mpe_golden
from tandem.host.sparse_dsp.device import SparseMpeDevice, mpe_cycles
from tandem.mappings.nm import (
    NMError,
    NMPacked,
    NMPattern,
    mpe_streams,
    pack_nm,
    prune_magnitude,
    quantize_per_channel,
)

from .device_checks import assert_backend_choice_is_checked, assert_closed_device_refuses


def _nm_matrix(rows, cols, pattern, seed, pair_rows=False):
    rng = np.random.default_rng(seed)
    dense = rng.integers(-128, 128, (rows, cols))
    return prune_magnitude(dense, pattern, pair_rows=pair_rows).astype(np.int8)


@pytest.mark.parametrize("pattern", ["2:4", "1:8", "16:16"])
def test_sparse_gemv_and_gemm_equal_w_at_x_and_the_golden(pattern):
    nm = NMPattern.parse(pattern)
    w = _nm_matrix(24, 72, nm, seed=1, pair_rows=True)
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, 72).astype(np.int8)
    xs = rng.integers(-128, 128, (72, 5)).astype(np.int8)
    dev = SparseMpeDevice()
    dev.load(w, pattern)
    y = dev.gemv(x)
    assert y.dtype == np.int32
    assert np.array_equal(y, w.astype(np.int64) @ x.astype(np.int64))
    streams = mpe_streams(dev.params, pack_nm(w, nm), x, "mv")
    direct = streams.unpack(mpe_golden(dev.params, streams.cfg, streams.act_beats, streams.w_beats))
    assert np.array_equal(y, direct)
    assert dev.last_cycles == mpe_cycles(streams) > 0
    ys = dev.gemm(xs)  # batch 5 > max_batch 2: three requests
    assert np.array_equal(ys, w.astype(np.int64) @ xs.astype(np.int64))
    assert dev.calls == 2 and dev.total_cycles > dev.last_cycles


def test_sparse_device_loads_the_packed_npz_of_tandem_pack(tmp_path):
    nm = NMPattern(2, 4)
    w = _nm_matrix(10, 40, nm, seed=3)
    pack_nm(w, nm).save(tmp_path / "w.npz")
    dev = SparseMpeDevice(SparseMpeParams(max_k=128))
    packed = dev.load(tmp_path / "w.npz")
    assert packed.shape == (10, 40) and dev.shape == (10, 40)
    x = np.arange(-20, 20, dtype=np.int8)
    assert np.array_equal(dev.gemv(x), w.astype(np.int64) @ x.astype(np.int64))


@pytest.mark.parametrize(
    "shape, mode, pair_rows, pattern, cycles",
    [
        ((576, 576), "mv", False, "2:4", 10385),
        ((576, 576), "mv", True, "2:4", 5201),
        ((576, 576), "mm", False, "2:4", 10385),
        ((576, 576), "mv", False, "16:16", 10389),
        ((576, 576), "mm", False, "16:16", 20757),
        ((1024, 1024), "mv", True, "1:16", 2065),
        ((1024, 1024), "mv", True, "4:8", 16401),
    ],
)
def test_mpe_cycle_model_reproduces_the_rtl_figures_of_the_docs(
    shape, mode, pair_rows, pattern, cycles
):
    """docs/sparse_dsp.md, "Performance (RTL simulation)": Verilator cycles, default engine."""
    nm = NMPattern.parse(pattern)
    w = _nm_matrix(*shape, nm, seed=0, pair_rows=pair_rows)
    w[w == 0] = 1 if nm.dense else 0  # dense rows always pair
    x = np.zeros(shape[1], np.int8) if mode == "mv" else np.zeros((shape[1], 2), np.int8)
    streams = mpe_streams(SparseMpeParams(), pack_nm(w, nm), x, mode)
    assert mpe_cycles(streams) == cycles


#: Engines of the several-token-pair figures: the RTL tests' (tests/test_sparse_dsp_device_rtl.py),
#: one long chain with three token pairs, three short chains with four.
MPE_SMALL = {"chains": 2, "stages": 4, "max_k": 256, "max_batch": 4}
MPE_LONG = {"chains": 1, "stages": 8, "max_k": 128, "max_batch": 6}
MPE_SHORT = {"chains": 3, "stages": 2, "max_k": 128, "max_batch": 8, "act_bytes": 8}


@pytest.mark.parametrize(
    "engine, shape, pattern, tokens, cycles",
    [
        (MPE_SMALL, (24, 96), "2:4", 3, 349),
        (MPE_SMALL, (64, 256), "1:8", 4, 653),
        (MPE_SMALL, (4, 16), "1:8", 3, 27),
        (MPE_SMALL, (40, 64), "1:8", 1, 102),  # passes shorter than their results
        (MPE_LONG, (12, 64), "1:16", 6, 97),
        (MPE_LONG, (30, 128), "2:4", 6, 855),
        (MPE_SHORT, (30, 128), "16:16", 8, 2753),
        (MPE_SHORT, (5, 16), "1:16", 8, 63),
    ],
)
def test_mpe_cycle_model_is_exact_for_several_token_pairs(engine, shape, pattern, tokens, cycles):
    """Icarus cycles of GEMM requests of 1 to 4 token pairs (first weight beat to last result):
    each further pair's capture stalls the pipeline until the serializer is empty."""
    nm = NMPattern.parse(pattern)
    w = _nm_matrix(*shape, nm, seed=0)
    x = np.zeros((shape[1], tokens), np.int8)
    streams = mpe_streams(SparseMpeParams(**engine), pack_nm(w, nm), x, "mm")
    assert mpe_cycles(streams) == cycles


def test_sparse_device_errors_are_one_clear_line():
    dev = SparseMpeDevice()
    with pytest.raises(ValueError, match="no weights loaded"):
        dev.gemv(np.zeros(4, np.int8))
    with pytest.raises(ValueError, match="needs pattern"):
        dev.load(np.zeros((4, 8), np.int8))
    with pytest.raises(NMError, match=r"row 0, columns 0\.\.3"):
        dev.load(np.ones((4, 8), np.int8), "2:4")
    with pytest.raises(NMError, match="exceeds the engine's max_m"):
        dev.load(np.zeros((4, 64), np.int8), "1:32")
    dev.load(np.zeros((4, 8), np.int8), "2:4")
    with pytest.raises(ValueError, match="x has 5 elements, the matrix has 8 columns"):
        dev.gemv(np.zeros(5, np.int8))
    with pytest.raises(ValueError, match="quantize first"):
        dev.gemv(np.zeros(8))
    with pytest.raises(ValueError, match="int8"):
        dev.gemm(np.full((8, 2), 300))
    with pytest.raises(ValueError, match="exceed max_k"):
        SparseMpeDevice(SparseMpeParams(max_k=128)).load(np.zeros((2, 200), np.int8), "2:4")


@pytest.mark.parametrize("kernel", ["streams", "direct"])
def test_packed_values_outside_int8_raise_instead_of_wrapping(kernel, tmp_path):
    """An NMPacked (or packed .npz) whose values leave int8 would wrap in the weight beats
    (300 reads as 44): load names the value and the range; indices must lie below M; a dense
    matrix beyond int8 names its value too."""
    nm = NMPattern(2, 4)
    packed = pack_nm(_nm_matrix(4, 16, nm, seed=5), nm)
    dev = SparseMpeDevice(SparseMpeParams(max_k=128), kernel=kernel)
    dev.load(packed)
    wide = packed.values.astype(np.int16)
    wide[2, 3] = 300
    bad = NMPacked(wide, packed.indices, nm, packed.shape)
    with pytest.raises(
        ValueError,
        match=r"packed values\[2, 3\] = 300 does not fit int8, "
        r"range -128\.\.127",
    ):
        dev.load(bad)
    bad.save(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="= 300 does not fit int8"):
        dev.load(tmp_path / "bad.npz")
    far = NMPacked(packed.values, packed.indices + 4, nm, packed.shape)
    with pytest.raises(ValueError, match=r"packed indices\[0, 0\] = \d does not fit 2:4 indices"):
        dev.load(far)
    with pytest.raises(ValueError, match="packed values must be integers"):
        dev.load(NMPacked(packed.values * 0.5, packed.indices, nm, packed.shape))
    assert dev.packed is packed
    dense = _nm_matrix(4, 16, nm, seed=5).astype(np.int64)
    dense[dense != 0] = -129
    with pytest.raises(NMError, match=r"int8 range -128\.\.127, not -129 at \[0, \d+\]"):
        dev.load(dense, nm)


def test_backend_choice_is_checked_and_rtl_starts_lazily():
    assert_backend_choice_is_checked(SparseMpeDevice)


def test_a_closed_golden_device_refuses_calls_like_an_rtl_one():
    rng = np.random.default_rng(0)
    mpe = SparseMpeDevice()
    mpe.load(
        prune_magnitude(rng.integers(-128, 128, (8, 16)), NMPattern(2, 4)).astype(np.int8), "2:4"
    )
    assert_closed_device_refuses(mpe, lambda: mpe.gemv(np.ones(16, np.int8)))


@pytest.mark.parametrize(
    "shape, pattern, pair_rows",
    [((64, 128), "2:4", True), ((63, 200), "4:16", False), ((40, 96), "16:16", False)],
)
def test_direct_kernel_equals_the_streams_kernel(shape, pattern, pair_rows):
    """The direct golden kernel (no beats) gives the beat-level model's results and cycles,
    in both modes, also for row pairs that do not share their columns."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal(shape)
    p = NMPattern.parse(pattern)
    pruned = w if p.dense else prune_magnitude(w, p, pair_rows=pair_rows)
    q, _ = quantize_per_channel(pruned)
    params = SparseMpeParams(max_k=256, max_batch=4)
    streams, direct = SparseMpeDevice(params), SparseMpeDevice(params, kernel="direct")
    for dev in (streams, direct):
        dev.load(q, pattern)
    x = rng.integers(-128, 128, shape[1]).astype(np.int8)
    np.testing.assert_array_equal(direct.gemv(x), streams.gemv(x))
    assert direct.last_cycles == streams.last_cycles
    xs = rng.integers(-128, 128, (shape[1], 7)).astype(np.int8)
    np.testing.assert_array_equal(direct.gemm(xs), streams.gemm(xs))
    assert direct.last_cycles == streams.last_cycles
    with pytest.raises(ValueError, match="kernel must be"):
        SparseMpeDevice(params, kernel="fast")
