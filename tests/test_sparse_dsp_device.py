"""Devices of sparse-mpe, the SpMM engines and rnn: bit-exact with the golden functions called
directly, cycles from the designs' documented cycle behaviour, clear errors."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from tandem.host.common.errors import DeviceClosedError
from tandem.host.rnn import (
    QuantLstm,
    RnnParams,
    gru_golden,
    lstm_golden,
    pack_tiles,
    quantize_lstm,
    quantize_state,
    torch_lstm_reference,
)
from tandem.host.rnn.device import RnnDevice, unpack_lstm_tiles
from tandem.host.sparse_dsp import SparseMpeParams, mpe_golden
from tandem.host.sparse_dsp.device import SparseMpeDevice, mpe_cycles
from tandem.host.spmm import SparseEngineParams, SystolicParams, gcn_layer
from tandem.host.spmm.device import SpmmDevice
from tandem.mappings.nm import NMError, NMPattern, mpe_streams, pack_nm, prune_magnitude
from tandem.mappings.rnn.schedule import sequence_cycles
from tandem.mappings.rnn.tiling import build_program
from tandem.mappings.rnn.writer import program_arrays, write_npz
from tandem.mappings.spmm.graph import gcn_normalize
from tandem.mappings.spmm.readers import read_graph

DATA = Path(__file__).parent / "data"


def _nm_matrix(rows, cols, pattern, seed, pair_rows=False):
    rng = np.random.default_rng(seed)
    dense = rng.integers(-128, 128, (rows, cols))
    return prune_magnitude(dense, pattern, pair_rows=pair_rows).astype(np.int8)


# --- sparse-mpe ----------------------------------------------------------------------------
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


#: Engines of the several-token-pair figures: the RTL tests' (tests/test_accel_devices_rtl.py),
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


@pytest.mark.parametrize("cls", [SparseMpeDevice, RnnDevice])
def test_backend_choice_is_checked_and_rtl_starts_lazily(cls):
    dev = cls(backend="rtl", simulator="icarus")  # no simulator needed until the first call
    assert dev.backend.name == "rtl" and not dev.backend.started
    dev.close()
    with pytest.raises(ValueError, match="unknown backend 'fpga'"):
        cls(backend="fpga")
    with pytest.raises(ValueError, match="golden backend takes no options"):
        cls(simulator="icarus")
    with pytest.raises(ValueError, match="simulator must be 'verilator' or 'icarus'"):
        cls(backend="rtl", simulator="xsim")


def test_a_closed_golden_device_refuses_calls_like_an_rtl_one():
    rng = np.random.default_rng(0)
    mpe = SparseMpeDevice()
    mpe.load(
        prune_magnitude(rng.integers(-128, 128, (8, 16)), NMPattern(2, 4)).astype(np.int8), "2:4"
    )
    rnn = RnnDevice(RnnParams(max_input=8, max_hidden=12, tile_rows=8, tile_cols=4))
    rnn.load(QuantLstm(np.zeros((16, 4), int), np.zeros((16, 4), int), np.zeros(16, int), 8))
    spmm = _spmm_device(4)
    spmm.load(sp.identity(8, format="csr"))
    calls = [
        (mpe, lambda: mpe.gemv(np.ones(16, np.int8))),
        (rnn, lambda: rnn.run(np.zeros((2, 1, 4), np.int16))),
        (spmm, lambda: spmm.aggregate(np.zeros((8, 4), np.int64))),
    ]
    for dev, call in calls:
        call()
        with dev:  # a context manager closes it
            pass
        assert dev.closed
        with pytest.raises(DeviceClosedError, match="the device is closed"):
            call()
        dev.close()  # closing twice is harmless


# --- systolic + sparse-engine ----------------------------------------------------------------
def _spmm_device(features):
    return SpmmDevice(
        SystolicParams(rows=4, cols=4),
        SparseEngineParams(lanes=4, tile=32),
        features=features,
        tile=32,
    )


def test_spmm_gcn_layer_is_bit_exact_with_gcn_layer_and_the_stream_goldens():
    a = gcn_normalize(read_graph(DATA / "spmm_test.mgraph"))
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((a.shape[0], 12)), rng.standard_normal((12, 6))
    dev = _spmm_device(6)
    mapping = dev.load(a)
    assert mapping.dense.any() and (~mapping.dense).any()
    result = dev.gcn_layer(x, w, device="cpu")
    direct = gcn_layer(mapping, a, x, w, device="cpu")
    assert np.array_equal(result.accumulators, direct.accumulators)
    assert np.array_equal(result.output, direct.output)
    assert result.nonzeros == direct.nonzeros and result.x_scale == direct.x_scale
    totals = mapping.plan.totals
    assert dev.last_engine_cycles == {
        "systolic": totals.systolic_cycles,
        "sparse-engine": totals.sparse_cycles,
        "memory": totals.memory_cycles,
        "makespan": totals.makespan,
    }
    assert dev.last_cycles == totals.makespan
    streamed = dev.aggregate(result.features, streams=True)  # every tile as beat streams
    assert np.array_equal(streamed, direct.accumulators)


def test_spmm_device_errors_and_rtl():
    import scipy.sparse as sp

    dev = _spmm_device(4)
    with pytest.raises(ValueError, match="no adjacency loaded"):
        dev.aggregate(np.zeros((3, 4), np.int64))
    with pytest.raises(ValueError, match="must be square"):
        dev.load(sp.csr_matrix(np.ones((3, 4))))
    dev.load(sp.csr_matrix(np.ones((3, 3))), normalize=True)
    with pytest.raises(ValueError, match=r"features must be \(3, 4\)"):
        dev.aggregate(np.zeros((3, 5), np.int64))
    with pytest.raises(ValueError, match="w 4 columns"):
        dev.gcn_layer(np.zeros((3, 2)), np.zeros((2, 5)))
    rtl = SpmmDevice(features=4, backend="rtl")
    assert set(rtl.backend.engines) == {"systolic", "sparse-engine"}
    assert not rtl.backend.started
    rtl.close()


# --- rnn -----------------------------------------------------------------------------------
def _lstm(x_size, h_size, seed=0):
    torch.manual_seed(seed)
    return torch.nn.LSTM(x_size, h_size)


def test_rnn_run_is_bit_exact_with_lstm_golden_and_cycles_follow_the_schedule():
    params = RnnParams(batch=2, max_input=16, max_hidden=16)
    module = _lstm(6, 10)
    rng = np.random.default_rng(0)
    x = quantize_state(params, rng.standard_normal((7, 3, 6)))
    dev = RnnDevice(params)
    dev.load(module.state_dict())
    h, c = dev.run(x)  # batch 3 > 2: two commands, the second padded
    model = quantize_lstm(params, module.state_dict())
    hg, cg = lstm_golden(params, model, x)
    assert h.shape == (7, 3, 10)
    assert np.array_equal(h, hg) and np.array_equal(c, cg)
    program = build_program(6, 10, params.tile_rows, params.tile_cols)
    assert dev.last_cycles == 2 * sequence_cycles(program, 2, 7)[0]


def test_rnn_device_loads_packed_tiles(tmp_path):
    params = RnnParams(batch=1, max_input=16, max_hidden=16, weight_bits=8)
    module = _lstm(5, 9, seed=1)
    model = quantize_lstm(params, module.state_dict())
    program = build_program(5, 9, params.tile_rows, params.tile_cols)
    tiles, biases = pack_tiles(params, model, program)
    back = unpack_lstm_tiles(program, tiles, biases, model.w_frac)
    for name in ("w", "u", "bias"):
        assert np.array_equal(getattr(back, name), getattr(model, name))
    arrays = program_arrays(program)
    arrays.update(tiles=tiles, biases=biases, w_frac=np.array(model.w_frac))
    write_npz(tmp_path / "l.program.npz", arrays)
    dev = RnnDevice(params)
    dev.load(tmp_path / "l.program.npz")
    x = quantize_state(params, np.random.default_rng(1).standard_normal((4, 1, 5)))
    h, c = dev.run(x)
    hg, cg = lstm_golden(params, model, x)
    assert np.array_equal(h, hg) and np.array_equal(c, cg)
    assert np.allclose(dev.to_float(h), h / 4096.0)


def test_rnn_device_errors(tmp_path):
    params = RnnParams(max_input=8, max_hidden=8)
    dev = RnnDevice(params)
    with pytest.raises(ValueError, match="no LSTM loaded"):
        dev.run(np.zeros((1, 1, 4), np.int16))
    with pytest.raises(ValueError, match="exceeds max_input=8"):
        dev.load(_lstm(4, 12).state_dict())
    dev.load(_lstm(4, 6).state_dict())
    with pytest.raises(ValueError, match="x has 5 inputs per step, the LSTM takes 4"):
        dev.run(np.zeros((2, 1, 5), np.int16))
    with pytest.raises(ValueError, match="3 dimensions"):
        dev.run(np.zeros((2, 4), np.int16))
    with pytest.raises(ValueError, match="quantize first"):
        dev.run(np.zeros((2, 1, 4)))
    program = build_program(4, 6, 8, 8)
    write_npz(tmp_path / "p.npz", program_arrays(program))
    with pytest.raises(ValueError, match="holds no weights"):
        dev.load(tmp_path / "p.npz")
    with pytest.raises(ValueError, match=r"state_dict, a \.program\.npz path or a QuantLstm"):
        dev.load(42)


# --- rnn, GRU cell -------------------------------------------------------------------------
GRU = RnnParams(cell="gru", batch=2, max_input=16, max_hidden=16)


def _gru(x_size, h_size, seed=0):
    torch.manual_seed(seed)
    return torch.nn.GRU(x_size, h_size)


def test_rnn_device_runs_a_gru_bit_exact_with_gru_golden_and_close_to_torch():
    module = _gru(6, 10)
    rng = np.random.default_rng(0)
    xf = rng.standard_normal((40, 3, 6))
    dev = RnnDevice(GRU)
    assert dev.cell == "gru"
    model = dev.load(module.state_dict())
    assert model.cell == "gru" and dev.program.cell == "gru"
    x = dev.quantize(xf)
    h, c = dev.run(x)  # batch 3 > 2: two commands, the second padded
    assert c is None  # a GRU has no cell state
    assert h.shape == (40, 3, 10)
    hg, _ = gru_golden(GRU, quantize_lstm(GRU, module.state_dict()), x)
    assert np.array_equal(h, hg)
    program = build_program(6, 10, GRU.tile_rows, GRU.tile_cols, cell="gru")
    assert dev.last_cycles == 2 * sequence_cycles(program, 2, 40)[0]
    # docs/rnn.md "Accuracy": GRU int16 weights, max |h - torch| 4.3e-4 over 100 steps.
    h_ref, _ = torch_lstm_reference(module, xf)
    error = np.abs(dev.to_float(h) - h_ref).max()
    assert error < 2e-3, error
    assert "GRU X=6 H=10" in repr(dev)


def test_rnn_device_loads_a_gru_program_file(tmp_path):
    params = RnnParams(cell="gru", batch=1, max_input=16, max_hidden=16, tile_cols=4)
    model = quantize_lstm(params, _gru(5, 9, seed=1).state_dict())
    program = build_program(5, 9, params.tile_rows, params.tile_cols, cell="gru")
    tiles, biases = pack_tiles(params, model, program)
    back = unpack_lstm_tiles(program, tiles, biases, model.w_frac)
    assert back.cell == "gru" and np.array_equal(back.w, model.w)
    assert np.array_equal(back.u, model.u)
    # r and z keep only the sum b_i + b_h (all the engine sees), n_x and n_h their own bias.
    assert np.array_equal(back.bias + back.bias_h, model.bias + model.bias_h)
    assert np.array_equal(back.bias[18:], model.bias[18:])
    for again, first in zip(pack_tiles(params, back, program), (tiles, biases), strict=True):
        assert np.array_equal(again, first)
    arrays = program_arrays(program)
    arrays.update(tiles=tiles, biases=biases, w_frac=np.array(model.w_frac))
    write_npz(tmp_path / "g.program.npz", arrays)
    dev = RnnDevice(params)
    dev.load(tmp_path / "g.program.npz")
    x = quantize_state(params, np.random.default_rng(1).standard_normal((6, 2, 5)))
    h, c = dev.run(x)
    assert c is None and np.array_equal(h, gru_golden(params, model, x)[0])
    bad = tiles.copy()
    bad[program.src == 0, 3] = 1  # W in an n_h row
    with pytest.raises(ValueError, match="not a GRU's"):
        unpack_lstm_tiles(program, bad, biases, model.w_frac)


def test_rnn_device_rejects_the_other_cell(tmp_path):
    gru, lstm = RnnDevice(GRU), RnnDevice(RnnParams(max_input=16, max_hidden=16))
    with pytest.raises(ValueError, match="no GRU loaded"):
        gru.run(np.zeros((1, 1, 4), np.int16))
    with pytest.raises(ValueError, match=r"torch.nn.LSTM state_dict, the engine runs GRU"):
        gru.load(_lstm(4, 6).state_dict())
    with pytest.raises(ValueError, match=r"torch.nn.GRU state_dict, the engine runs LSTM"):
        lstm.load(_gru(4, 6).state_dict())
    with pytest.raises(ValueError, match="a LSTM model, the engine runs GRU"):
        gru.load(quantize_lstm(RnnParams(), _lstm(4, 6).state_dict()))
    program = build_program(4, 6, 8, 8, cell="gru")
    model = quantize_lstm(GRU, _gru(4, 6).state_dict())
    arrays = program_arrays(program)
    tiles, biases = pack_tiles(GRU, model, program)
    arrays.update(tiles=tiles, biases=biases, w_frac=np.array(model.w_frac))
    write_npz(tmp_path / "g.npz", arrays)
    with pytest.raises(ValueError, match="a GRU program, the engine runs LSTM"):
        lstm.load(tmp_path / "g.npz")
    assert isinstance(gru.load(model), QuantLstm)
    with pytest.raises(ValueError, match="the GRU takes 4"):
        gru.run(np.zeros((2, 1, 5), np.int16))
