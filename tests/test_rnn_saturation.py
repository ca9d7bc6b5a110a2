"""The RNN's cell state and saturation (issue 20): a cell state wide enough for long sequences of
trained models, every saturation counted and reported, the engine's sticky flag equal to the
golden model's counts, nn.LSTMCell / nn.GRUCell state_dicts."""

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tandem.host.common.errors import SaturationWarning
from tandem.host.rnn import (
    RnnParams,
    clamp_is_exact,
    gru_golden,
    lstm_golden,
    quantize_lstm,
    quantize_state,
    saturation_flags,
    torch_lstm_reference,
)
from tandem.host.rnn.device import RnnDevice
from tandem.mappings.rnn.tiling import build_program
from tandem.mappings.rnn.writer import load_program
from tandem.sim.rnn.amaranth_driver import run_sequences

from tandem.cli import main
from tandem.config import ParamError

FIXTURE = Path(__file__).parent / "data" / "rnn_silero_vad.npz"
#: The cell state before issue 20: int16 with 12 fraction bits, +-8.
OLD_CELL = {"cell_bits": 16, "cell_frac": 12}


def _growing_lstm(x_size=6, h_size=10, units=(0, 1, 2), cell=False):
    """An LSTM whose ``units`` have i, f and g biased towards +1: their c grows by about one
    a step, as a trained model's counting cells do on long inputs."""
    torch.manual_seed(7)
    module = (torch.nn.LSTMCell if cell else torch.nn.LSTM)(x_size, h_size)
    bias = module.bias_ih if cell else module.bias_ih_l0
    with torch.no_grad():
        for u in units:
            bias[[u, h_size + u, 2 * h_size + u]] = 6.0
    return module


def test_cell_state_beyond_the_old_range_does_not_clip():
    """|c| reaches 20 in 24 steps: the default cell state holds it (no saturation, c within
    1e-2 of float32 torch); the old int16 format (+-8) clips it, and says so."""
    module = _growing_lstm()
    x = np.random.default_rng(0).standard_normal((24, 2, 6))
    href, cref = torch_lstm_reference(module, x)
    assert np.abs(cref).max() > 20
    p = RnnParams(max_input=8, max_hidden=16)
    model = quantize_lstm(p, module.state_dict())
    h, c, sat = lstm_golden(p, model, quantize_state(p, x), saturations=True)
    assert not any(v.any() for v in sat.values()), {k: int(v.sum()) for k, v in sat.items()}
    assert np.abs(c * 2.0**-p.cell_frac - cref).max() < 1e-2
    assert np.abs(h * 2.0**-p.state_frac - href).max() < 2e-3
    old = RnnParams(max_input=8, max_hidden=16, **OLD_CELL)
    model = quantize_lstm(old, module.state_dict())
    _, c_old, sat_old = lstm_golden(old, model, quantize_state(old, x), saturations=True)
    assert sat_old["c"].sum() > 0 and np.abs(c_old).max() == 2**15 - 1


def test_cell_state_parameters_are_checked():
    with pytest.raises(ParamError, match="cell_frac must be at least state_frac"):
        RnnParams(cell_frac=10)
    with pytest.raises(ParamError, match="integer bit"):
        RnnParams(cell_bits=16, cell_frac=15)
    assert RnnParams().c_bits == 27 and RnnParams(cell="gru").c_bits == 16


def test_default_activation_clamps_are_exact_and_narrow_ones_are_counted():
    """At +-16 sigmoid and tanh are 1.0 in the table already, so a clamp there changes no
    output and is not a saturation; at +-8 sigmoid is not, and clamps of its lanes count."""
    assert clamp_is_exact(RnnParams(), "sigmoid") and clamp_is_exact(RnnParams(), "tanh")
    narrow = RnnParams(max_input=8, max_hidden=16, act_range_bits=3)
    assert not clamp_is_exact(narrow, "sigmoid")
    module = _growing_lstm()
    with torch.no_grad():
        module.bias_hh_l0[10:20] = 12.0  # f gates beyond +8 (and beyond +-16 with bias_ih)
    x = np.random.default_rng(1).standard_normal((5, 2, 6))
    for params, counted in ((RnnParams(max_input=8, max_hidden=16), False), (narrow, True)):
        model = quantize_lstm(params, module.state_dict())
        _, _, sat = lstm_golden(params, model, quantize_state(params, x), saturations=True)
        assert (sat["act"].sum() > 0) == counted


def test_gru_counts_clamped_n_inputs():
    torch.manual_seed(2)
    module = torch.nn.GRU(5, 6)
    with torch.no_grad():
        module.bias_hh_l0[12] = 20.0  # unit 0's n_h beyond +-16: clamped before r scales it
    p = RnnParams(cell="gru", max_input=8, max_hidden=8)
    model = quantize_lstm(p, module.state_dict())
    x = quantize_state(p, np.random.default_rng(2).standard_normal((4, 3, 5)))
    h, _, sat = gru_golden(p, model, x, saturations=True)
    assert sat["act"][:, :, 0].min() >= 1 and not sat["act"][:, :, 1:].any()
    assert np.array_equal(h, gru_golden(p, model, x)[0])


def test_quantize_counts_clipped_inputs():
    p = RnnParams()
    q, clipped = quantize_state(p, [0.5, 9.0, -100.0, 7.9], saturations=True)
    assert clipped == 2 and q.tolist() == [2048, 32767, -32768, 32358]


def test_device_reports_saturations_by_place_and_warns_once():
    p = RnnParams(max_input=8, max_hidden=16, batch=2, **OLD_CELL)
    dev = RnnDevice(p)
    dev.load(_growing_lstm().state_dict())
    rng = np.random.default_rng(3)
    with pytest.warns(SaturationWarning, match="rnn0: the datapath saturated values"):
        x = dev.quantize(np.concatenate([rng.standard_normal((20, 3, 6)), np.full((1, 3, 6), 9)]))
    assert dev.last_saturations == {"x": 18} and dev.total_saturations == {"x": 18}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per device: the run saturates, silently now
        _, c = dev.run(x)
    assert set(dev.last_saturations) == {"c"}
    # Batch 3 on a batch-2 engine: the padding sequence of the second command is not counted.
    model = quantize_lstm(p, _growing_lstm().state_dict())
    _, _, sat = lstm_golden(p, model, x, saturations=True)
    assert dev.last_saturations["c"] == sat["c"].sum() > 0
    assert dev.total_saturations == {"x": 18, "c": int(sat["c"].sum())}
    assert np.allclose(dev.to_float(c, "c"), c / 4096.0)
    with pytest.raises(ValueError, match="which must be 'h' or 'c'"):
        dev.to_float(c, "x")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_unrepresentable_inputs_are_errors(bad):
    dev = RnnDevice(RnnParams(max_input=8, max_hidden=16))
    x = np.zeros((2, 1, 6))
    x[1, 0, 3] = bad
    with pytest.raises(ValueError, match=r"^x must be finite \(found NaN or infinity\)$"):
        dev.quantize(x)
    state = _growing_lstm().state_dict()
    state["weight_hh_l0"][0, 0] = bad
    with pytest.raises(ValueError, match="finite"):
        dev.load(state)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_cell_state_dicts_load_like_their_layers(kind, tmp_path, capsys):
    """nn.LSTMCell / nn.GRUCell keys have no _l0; the device, quantize_lstm, the torch
    reference and ``tandem map rnn --state-dict`` take them."""
    torch.manual_seed(5)
    cell = (torch.nn.LSTMCell if kind == "lstm" else torch.nn.GRUCell)(5, 7)
    layer = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(5, 7)
    layer.load_state_dict({f"{k}_l0": v for k, v in cell.state_dict().items()})
    p = RnnParams(cell=kind, max_input=8, max_hidden=8)
    x = np.random.default_rng(5).standard_normal((6, 2, 5))
    for a, b in zip(torch_lstm_reference(cell, x), torch_lstm_reference(layer, x), strict=True):
        assert np.allclose(a, b, atol=1e-6)  # torch's cell and layer kernels round apart
    outputs = []
    for module in (cell, layer):
        dev = RnnDevice(p)
        dev.load(module.state_dict())
        outputs.append(dev.run(dev.quantize(x)))
    assert np.array_equal(outputs[0][0], outputs[1][0])
    other = RnnDevice(RnnParams(cell="gru" if kind == "lstm" else "lstm"))
    found = "torch.nn.LSTMCell" if kind == "lstm" else "torch.nn.GRUCell"
    with pytest.raises(ValueError, match=f"a {found} state_dict"):
        other.load(cell.state_dict())
    with pytest.raises(ValueError, match="layer 0 only"):
        RnnDevice(p).load(cell.state_dict(), layer=1)
    path = tmp_path / "cell.pt"
    torch.save(cell.state_dict(), path)
    args = ["map", "rnn", "--array", "8x8", "--no-plot", "--state-dict", str(path)]
    assert main([*args, "--cell", kind, "-o", str(tmp_path)]) == 0
    assert f"{kind.upper()} X=5 H=7" in capsys.readouterr().out
    program, _ = load_program(tmp_path / f"{kind}_x5_h7.program.npz")
    shape = {"tile_rows": program.tile_rows, "tile_cols": program.tile_cols}
    dev = RnnDevice(RnnParams(cell=kind, max_input=8, max_hidden=8, **shape))
    packed = dev.load(tmp_path / f"{kind}_x5_h7.program.npz")
    direct = quantize_lstm(p, cell.state_dict())
    assert np.array_equal(packed.w, direct.w) and np.array_equal(packed.u, direct.u)


# --- the engine's sticky saturation flag (Amaranth simulation) ---------------------------------
def _flag_case(kind: str):
    rng = np.random.default_rng(11)
    if kind == "lstm-narrow-cell":
        p = RnnParams(tile_rows=8, tile_cols=4, batch=2, max_input=6, max_hidden=10, **OLD_CELL)
        module, steps = _growing_lstm(units=(9,)), (12, 3)
    elif kind == "lstm-narrow-act":
        p = RnnParams(
            tile_rows=8, tile_cols=4, batch=2, max_input=6, max_hidden=10, act_range_bits=3
        )
        module, steps = _growing_lstm(units=()), (6, 3)
        with torch.no_grad():
            module.bias_hh_l0[13] = 8.5  # unit 3's f: near +8, x pushes it over now and then
    else:
        p = RnnParams(cell="gru", tile_rows=8, tile_cols=4, batch=2, max_input=6, max_hidden=10)
        torch.manual_seed(9)
        module, steps = torch.nn.GRU(6, 10), (6, 3)
        with torch.no_grad():
            module.bias_hh_l0[20 + 4] = 16.0  # unit 4's n_h at +16 (clamped), then swinging
            module.weight_hh_l0[20 + 4] *= 6.0
    model = quantize_lstm(p, module.state_dict())
    xs = [quantize_state(p, 2 * rng.standard_normal((t, 2, 6))) for t in steps]
    return p, model, xs


@pytest.mark.parametrize("kind", ["lstm-narrow-cell", "lstm-narrow-act", "gru"])
def test_gateware_sticky_flag_equals_the_golden_counts(kind):
    """Every output beat's flag equals the golden model's (raised from the first beat whose
    results saturated, cleared by the next command), with h and c still bit-exact."""
    p, model, xs = _flag_case(kind)
    program = build_program(6, 10, 8, 4, cell=p.cell)
    run = run_sequences(p, model, program, xs)
    raised = []
    for x, h, c, flags in zip(xs, run.h, run.c, run.sat, strict=True):
        hg, cg, sat = (gru_golden if p.cell == "gru" else lstm_golden)(
            p, model, x, saturations=True
        )
        assert np.array_equal(h, hg) and np.array_equal(c, cg)
        assert np.array_equal(flags, saturation_flags(p, program, sat))
        raised.append(bool(flags.any()))
    assert raised[0], "nothing saturated: the flag was checked on zeros only"
    assert not run.sat[0][0].all()  # the first beats are clean: the rise is where it happens


# --- a trained model on long real inputs -------------------------------------------------------
def test_trained_lstm_cell_600_steps_of_speech_within_target():
    """Silero VAD's trained nn.LSTMCell(128, 128) on 600 steps (19 s) of two speech clips
    (tests/data/README.md): |c| passes 40, nothing of c saturates, h within 0.02 of float32."""
    data = np.load(FIXTURE)
    cell = torch.nn.LSTMCell(128, 128)
    cell.load_state_dict({k: torch.from_numpy(data[k]) for k in cell.state_dict()})
    x = data["x"][:600].astype(np.float64)
    href, cref = torch_lstm_reference(cell, x)
    assert np.abs(cref).max() > 40
    dev = RnnDevice(RnnParams(max_input=128, max_hidden=128, tile_rows=16, tile_cols=16))
    dev.load(cell.state_dict())
    with pytest.warns(SaturationWarning):  # one input of the second clip is 8.1
        xq = dev.quantize(x)
    assert dev.last_saturations == {"x": 1}
    h, c = dev.run(xq)
    assert dev.last_saturations == {}
    assert np.abs(dev.to_float(h) - href).max() < 0.02
    assert np.abs(dev.to_float(c, "c") - cref).max() < 0.05
