"""RnnDevice (rnn, LSTM and GRU cells): bit-exact with the golden functions called directly,
cycles from the scheduler, clear errors."""

import numpy as np
import pytest
import torch
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
from tandem.mappings.rnn.schedule import sequence_cycles
from tandem.mappings.rnn.tiling import build_program
from tandem.mappings.rnn.writer import program_arrays, write_npz

from .device_checks import assert_backend_choice_is_checked, assert_closed_device_refuses


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


def test_weights_and_biases_that_do_not_fit_raise_instead_of_clipping(tmp_path):
    """An LSTM weight of 1e6 fits int16 at no w_frac: load names it and the range rather than
    saturating it to 32767; so for a bias beyond bias_limit, a QuantLstm or .npz whose
    integers leave the engine's formats, and a GRU's bias_hh. Nothing is loaded."""
    params = RnnParams(max_input=8, max_hidden=8)
    dev = RnnDevice(params)
    state = {k: v.numpy().copy() for k, v in _lstm(4, 6).state_dict().items()}
    model = dev.load(state)
    big = dict(state, weight_hh_l0=state["weight_hh_l0"].copy())
    big["weight_hh_l0"][5, 2] = 1e6
    with pytest.raises(
        ValueError,
        match=r"weight_hh_l0\[5, 2\] = 1000000 does not fit "
        r"weight_bits=16 at w_frac 0, range -32768\.\.32767",
    ):
        dev.load(big)
    with pytest.raises(ValueError, match=r"weight_bits=8 at w_frac 0, range -128\.\.127"):
        quantize_lstm(RnnParams(max_input=8, max_hidden=8, weight_bits=8), big)
    bias = dict(state, bias_ih_l0=np.full(24, 1e12))
    with pytest.raises(
        ValueError, match=r"\(bias_ih_l0 \+ bias_hh_l0\)\[0\] = 1e\+12 .*bias_limit"
    ):
        dev.load(bias)
    wide = QuantLstm(model.w * 2000, model.u, model.bias, model.w_frac)
    with pytest.raises(
        ValueError, match=r"weights w\[\d+, \d+\] = -?\d+ does not fit weight_bits=16"
    ):
        dev.load(wide)
    with pytest.raises(ValueError, match=r"bias\[0\] = .* range"):
        dev.load(QuantLstm(model.w, model.u, model.bias + params.bias_limit, model.w_frac))
    with pytest.raises(ValueError, match=r"w_frac must be in 0\.\.31, not 32"):
        dev.load(QuantLstm(model.w, model.u, model.bias, 32))
    program = build_program(4, 6, params.tile_rows, params.tile_cols)
    tiles, biases = pack_tiles(params, wide, program)
    arrays = dict(program_arrays(program), tiles=tiles, biases=biases, w_frac=np.array(8))
    write_npz(tmp_path / "wide.program.npz", arrays)
    with pytest.raises(ValueError, match="does not fit weight_bits=16"):
        dev.load(tmp_path / "wide.program.npz")
    assert dev.model is model  # every rejected load left the loaded model
    gru = {k: v.numpy().copy() for k, v in _gru(4, 6).state_dict().items()}
    gru["bias_hh_l0"][7] = -1e12
    with pytest.raises(ValueError, match=r"bias_hh_l0\[7\] = -1e\+12"):
        RnnDevice(RnnParams(cell="gru", max_input=8, max_hidden=8)).load(gru)


def test_backend_choice_is_checked_and_rtl_starts_lazily():
    assert_backend_choice_is_checked(RnnDevice)


def test_a_closed_golden_device_refuses_calls_like_an_rtl_one():
    rnn = RnnDevice(RnnParams(max_input=8, max_hidden=12, tile_rows=8, tile_cols=4))
    rnn.load(QuantLstm(np.zeros((16, 4), int), np.zeros((16, 4), int), np.zeros(16, int), 8))
    assert_closed_device_refuses(rnn, lambda: rnn.run(np.zeros((2, 1, 4), np.int16)))


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
