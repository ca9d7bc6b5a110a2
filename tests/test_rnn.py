"""rnn: activation tables, golden model vs torch.nn.LSTM and nn.GRU, tiling, cycle model,
schedule files, CLI, and the gateware in Amaranth's simulator (bit-exact and cycle-exact)."""

import numpy as np
import pytest
import torch
from tandem.host.rnn import (
    RnnParams,
    activation_tables,
    dependency_latency,
    gru_golden,
    lstm_accuracy,
    lstm_golden,
    pack_tiles,
    quantize_lstm,
    quantize_state,
    sigmoid_fixed,
    tanh_fixed,
)
from tandem.mappings.rnn.schedule import (
    candidate_shapes,
    choose_shape,
    issue_times,
    predict,
    sequence_cycles,
)
from tandem.mappings.rnn.tiling import build_program, packed_rows
from tandem.mappings.rnn.writer import load_program, program_arrays, write_schedule
from tandem.sim.rnn.amaranth_driver import run_sequences

from tandem.cli import main


def _lstm(x_size, h_size, seed=0, scale=1.0):
    torch.manual_seed(seed)
    module = torch.nn.LSTM(x_size, h_size)
    if scale != 1.0:
        with torch.no_grad():
            for p in module.parameters():
                p.mul_(scale)
    return module


# --- activation tables -------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [{}, {"act_segment_bits": 7}, {"gate_frac": 12}])
def test_activations_match_float_over_the_whole_input_range(overrides):
    p = RnnParams(**overrides)
    a = np.arange(-p.act_max - 5, p.act_max + 6)  # every input, and some beyond the clamp
    real = np.clip(a, -p.act_max, p.act_max) / 2.0**p.state_frac
    lsb = 2.0**-p.gate_frac
    sig = sigmoid_fixed(p, a) * lsb
    tnh = tanh_fixed(p, a) * lsb
    # Error bound: secant error of one segment (curvature) / 2 plus table and output rounding.
    width = 2.0**p.act_range_bits / 2**p.act_segment_bits
    bound_sig = 0.1 * width**2 / 16 + 2 * lsb
    bound_tanh = 0.77 * width**2 / 16 + 2 * lsb
    assert np.abs(sig - 1 / (1 + np.exp(-real))).max() < bound_sig
    assert np.abs(tnh - np.tanh(real)).max() < bound_tanh
    # Monotonic up to one LSB where a segment's raised base meets the next segment's.
    assert np.diff(sigmoid_fixed(p, a)).min() >= -1 and np.diff(tanh_fixed(p, a)).min() >= -1
    assert np.array_equal(tanh_fixed(p, -a), -tanh_fixed(p, a))
    assert sigmoid_fixed(p, [0])[0] == 1 << (p.gate_frac - 1)


def test_default_activation_error_is_a_few_lsb():
    p = RnnParams()
    a = np.arange(-p.act_max, p.act_max + 1)
    real = a / 2.0**p.state_frac
    err_s = np.abs(sigmoid_fixed(p, a) / 2.0**p.gate_frac - 1 / (1 + np.exp(-real)))
    err_t = np.abs(tanh_fixed(p, a) / 2.0**p.gate_frac - np.tanh(real))
    assert err_s.max() < 1e-4 and err_t.max() < 2e-4
    base, slope = activation_tables(p)["tanh"]
    assert len(base) == 1 << p.act_segment_bits and slope.min() >= 0


# --- golden model and accuracy -------------------------------------------------------------
@pytest.mark.parametrize("weight_bits", [16, 8])
def test_accuracy_against_torch_lstm_over_100_steps(weight_bits):
    p = RnnParams(max_input=128, max_hidden=128, weight_bits=weight_bits)
    module = _lstm(96, 128)
    x = np.random.default_rng(3).standard_normal((100, 3, 96))
    err = lstm_accuracy(p, module, x)
    assert err["h_max"] < 0.02, err
    if weight_bits == 16:
        assert err["h_max"] < 2e-3 and err["c_max"] < 3e-3, err
    assert err["h_mean"] < err["h_max"] and err["c_mean"] < err["c_max"]


def test_accuracy_with_larger_weights_and_saturating_gates():
    p = RnnParams(max_input=32, max_hidden=48)
    module = _lstm(32, 48, seed=5, scale=4.0)
    x = 2.0 * np.random.default_rng(4).standard_normal((100, 2, 32))
    err = lstm_accuracy(p, module, x)
    assert err["h_max"] < 0.02, err


def test_golden_is_vectorized_over_the_batch():
    p = RnnParams(max_input=16, max_hidden=24)
    model = quantize_lstm(p, _lstm(16, 24).state_dict())
    x = quantize_state(p, np.random.default_rng(0).standard_normal((7, 4, 16)))
    h, c = lstm_golden(p, model, x)
    for b in range(4):
        hb, cb = lstm_golden(p, model, x[:, b : b + 1])
        assert np.array_equal(hb[:, 0], h[:, b]) and np.array_equal(cb[:, 0], c[:, b])


def test_quantize_rejects_what_the_engine_cannot_hold():
    p = RnnParams(max_input=8, max_hidden=8)
    with pytest.raises(ValueError, match="exceeds"):
        quantize_lstm(p, _lstm(8, 16).state_dict())
    with pytest.raises(ValueError, match="weight_ih_l0"):
        quantize_lstm(p, {})


# --- tiling --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "x_size,h_size,rows,cols", [(24, 40, 8, 8), (5, 9, 32, 2), (20, 33, 16, 4)]
)
def test_tiles_cover_the_gate_matrix_once(x_size, h_size, rows, cols):
    p = RnnParams(tile_rows=rows, tile_cols=cols, max_input=x_size, max_hidden=h_size)
    model = quantize_lstm(p, _lstm(x_size, h_size).state_dict())
    program = build_program(x_size, h_size, rows, cols)
    tiles, biases = pack_tiles(p, model, program)
    order = packed_rows(h_size, rows)
    nr = program.row_blocks * rows
    w = np.zeros((nr, program.x_blocks * cols), np.int64)
    u = np.zeros((nr, program.h_blocks * cols), np.int64)
    seen = set()
    for e in range(program.entries):
        key = (program.row[e], program.src[e], program.col[e])
        assert key not in seen
        seen.add(key)
        target = u if program.src[e] else w
        r0, c0 = program.row[e] * rows, program.col[e] * cols
        target[r0 : r0 + rows, c0 : c0 + cols] = tiles[e]
    assert len(seen) == program.row_blocks * (program.x_blocks + program.h_blocks)
    valid = order >= 0
    assert np.array_equal(w[valid, :x_size], model.w[order[valid]])
    assert np.array_equal(u[valid, :h_size], model.u[order[valid]])
    assert not w[~valid].any() and not w[:, x_size:].any() and not u[:, h_size:].any()
    assert np.array_equal(biases.ravel()[valid], model.bias[order[valid]])
    # Every h tile waits for exactly the row block that finishes the last unit it reads.
    ub = rows // 4
    for e in np.flatnonzero(program.src == 1):
        top = min((program.col[e] + 1) * cols, h_size) - 1
        assert program.need[e] == top // ub and program.wait[e] == 1
    assert not program.wait[program.src == 0].any()
    naive = build_program(x_size, h_size, rows, cols, naive=True)
    assert naive.wait.all() and (naive.need == program.row_blocks - 1).all()


# --- cycle model ---------------------------------------------------------------------------
def _brute_force_issue(program, batch, steps):
    """One beat at a time, straight from the rules in the engine's docstring."""
    lat = dependency_latency(program.tile_cols)
    done, issue, cycle = {}, [], 0
    for t in range(steps):
        for e in range(program.entries):
            for b in range(batch):
                ready = cycle
                if program.wait[e] and t > 0:
                    ready = max(ready, done[(t - 1, program.need[e])])
                issue.append(ready)
                cycle = ready + 1
                if program.last[e] and b == batch - 1:
                    done[(t, program.row[e])] = ready + lat
    return np.array(issue).reshape(steps, -1)


@pytest.mark.parametrize("naive", [False, True])
@pytest.mark.parametrize("shape", [(24, 40, 8, 8, 2), (8, 8, 4, 16, 1), (64, 64, 64, 16, 1)])
def test_vectorized_issue_times_follow_the_rules(shape, naive):
    x_size, h_size, rows, cols, batch = shape
    program = build_program(x_size, h_size, rows, cols, naive=naive)
    assert np.array_equal(issue_times(program, batch, 5), _brute_force_issue(program, batch, 5))


def test_steady_state_extrapolation_matches_full_simulation():
    program = build_program(64, 128, 256, 16)
    lat = dependency_latency(16)
    total, period = sequence_cycles(program, 1, 50)
    times = issue_times(program, 1, 50)
    assert total == program.x_blocks + 1 + times[-1, -1] + lat + 1
    assert period == times[-1, 0] - times[-2, 0]


def test_overlap_beats_naive_and_shape_choice_explains_itself():
    choice = choose_shape(128, 128, 64, 64)
    assert (choice.tile_rows, choice.tile_cols) in candidate_shapes(64, 64)
    assert choice.prediction.utilization > choice.naive.utilization
    assert choice.prediction.utilization == max(c.utilization for c in choice.candidates)
    assert "stall" in choice.reason and "padding" in choice.reason
    for h_size in (256, 512, 1024, 4096):
        c = choose_shape(h_size, h_size, 64, 64)
        assert c.prediction.utilization >= 0.9, (h_size, c.reason)
        assert c.naive.cycles >= c.prediction.cycles


def test_prediction_figures_are_consistent():
    program = build_program(40, 40, 8, 8)
    pred = predict(program, 2, 10)
    assert pred.cycles_per_step == pred.beats_per_step + pred.stall_per_step
    assert 0 < pred.utilization <= pred.steady_utilization <= pred.padding_efficiency <= 1


# --- schedule files and CLI ---------------------------------------------------------------
def test_schedule_files_round_trip_and_are_reproducible(tmp_path):
    program = build_program(24, 40, 8, 8)
    arrays = program_arrays(program)
    a = write_schedule(tmp_path / "a", "s", {"x": 1}, arrays)
    b = write_schedule(tmp_path / "b", "s", {"x": 1}, arrays)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    loaded, rest = load_program(a[1])
    assert rest == {}
    for name, value in program.fields().items():
        assert np.array_equal(getattr(loaded, name), value)


def test_cli_map_rnn_prints_figures_and_writes_reproducible_files(tmp_path, capsys):
    module = _lstm(24, 40)
    sd = tmp_path / "lstm.pt"
    torch.save(module.state_dict(), sd)
    args = ["map", "rnn", "--cell", "lstm", "--array", "16x16", "--batch", "2"]
    assert main(args + ["--state-dict", str(sd), "-o", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "cycles/step" in out and "speed-up over naive" in out and "MAC util" in out
    assert main(args + ["--input", "24", "--hidden", "40", "-o", str(tmp_path / "b")]) == 0
    for suffix in ("schedule.yaml", "utilization.png"):
        name = f"lstm_x24_h40.{suffix}"
        if suffix == "utilization.png":
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    program, rest = load_program(tmp_path / "a" / "lstm_x24_h40.program.npz")
    assert rest["tiles"].shape == (program.entries, program.tile_rows, program.tile_cols)
    assert main(["map", "rnn", "--input", "0", "--hidden", "4", "-o", str(tmp_path)]) == 2
    assert main(["map", "rnn", "--hidden", "4", "-o", str(tmp_path)]) == 2


# --- gateware in Amaranth's simulator ------------------------------------------------------
SIM_SHAPES = {
    # x, h, tile rows, tile cols, batch: h not a multiple of the tile, wide and narrow tiles
    "x12-h8-8x4-b2": (12, 8, 8, 4, 2),
    "x24-h40-8x8-b2": (24, 40, 8, 8, 2),
    "x5-h9-32x2-b3": (5, 9, 32, 2, 3),
    "x8-h8-4x16-b1": (8, 8, 4, 16, 1),
}


def _sim_case(x_size, h_size, rows, cols, batch, **kw):
    p = RnnParams(
        tile_rows=rows, tile_cols=cols, batch=batch, max_input=x_size, max_hidden=h_size, **kw
    )
    model = quantize_lstm(p, _lstm(x_size, h_size, seed=x_size + h_size, scale=2.0).state_dict())
    return p, model


@pytest.mark.parametrize("name", sorted(SIM_SHAPES))
def test_gateware_is_bit_and_cycle_exact(name):
    x_size, h_size, rows, cols, batch = SIM_SHAPES[name]
    p, model = _sim_case(x_size, h_size, rows, cols, batch)
    rng = np.random.default_rng(1)
    xs = [quantize_state(p, 2 * rng.standard_normal((t, batch, x_size))) for t in (1, 6)]
    for naive in (False, True):
        program = build_program(x_size, h_size, rows, cols, naive=naive)
        run = run_sequences(p, model, program, xs)
        for x, h, c, cycles in zip(xs, run.h, run.c, run.cycles):
            hg, cg = lstm_golden(p, model, x)
            assert np.array_equal(h, hg) and np.array_equal(c, cg)
            assert cycles == sequence_cycles(program, batch, x.shape[0])[0]


@pytest.mark.parametrize("source", ["memory", "stream"])
def test_gateware_under_backpressure_gaps_and_reset_int8(source):
    p, model = _sim_case(20, 33, 16, 4, 2, weight_bits=8, weight_source=source)
    rng = np.random.default_rng(2)
    xs = [quantize_state(p, rng.standard_normal((t, 2, 20))) for t in (3, 1, 4)]
    program = build_program(20, 33, 16, 4)
    run = run_sequences(
        p, model, program, xs, x_gaps=0.5, backpressure=0.4, reset_between=True, seed=3
    )
    for x, h, c in zip(xs, run.h, run.c):
        hg, cg = lstm_golden(p, model, x)
        assert np.array_equal(h, hg) and np.array_equal(c, cg)


def test_streamed_weights_are_bit_and_cycle_exact():
    p, model = _sim_case(24, 40, 8, 8, 2, weight_source="stream")
    xs = [quantize_state(p, np.random.default_rng(5).standard_normal((4, 2, 24)))]
    for naive in (False, True):
        program = build_program(24, 40, 8, 8, naive=naive)
        run = run_sequences(p, model, program, xs)
        hg, cg = lstm_golden(p, model, xs[0])
        assert np.array_equal(run.h[0], hg) and np.array_equal(run.c[0], cg)
        assert run.cycles[0] == sequence_cycles(program, 2, 4)[0]


def test_generated_verilog_is_reproducible_and_lists_the_streams():
    from tandem.hw.rnn.design import RNN_DESIGN

    from tandem.generate import generate

    params = RnnParams(max_input=12, max_hidden=8, tile_cols=4, weight_source="stream")
    first, second = generate(RNN_DESIGN, params), generate(RNN_DESIGN, params)
    assert first.files() == second.files()
    streams = first.manifest["streams"]
    assert set(streams) == {"tile_i", "cmd_i", "x_i", "w_i", "o"}
    assert streams["w_i"]["payload_width"] == params.tile_bits


# --- GRU (PyTorch gate order, linear_before_reset) in the same engine ------------------------
def _gru(x_size, h_size, seed=0, scale=1.0):
    torch.manual_seed(seed)
    module = torch.nn.GRU(x_size, h_size)
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(scale)
    return module


@pytest.mark.parametrize("weight_bits", [16, 8])
def test_gru_accuracy_against_torch_over_100_steps(weight_bits):
    p = RnnParams(cell="gru", max_input=48, max_hidden=64, weight_bits=weight_bits)
    x = np.random.default_rng(3).standard_normal((100, 3, 48))
    err = lstm_accuracy(p, _gru(48, 64), x)
    assert err["h_max"] < (2e-3 if weight_bits == 16 else 0.02), err


def test_gru_tiles_keep_n_x_and_n_h_apart():
    p = RnnParams(cell="gru", tile_rows=8, tile_cols=4, max_input=6, max_hidden=5)
    model = quantize_lstm(p, _gru(6, 5).state_dict())
    program = build_program(6, 5, 8, 4, cell="gru")
    tiles, biases = pack_tiles(p, model, program)
    for e in range(program.entries):
        slots = np.arange(8) % 4
        zero_slot = 3 if program.src[e] == 0 else 2  # n_h has no W, n_x no U
        assert not tiles[e][slots == zero_slot].any()
    assert program.useful_macs == 3 * 5 * (6 + 5)
    # Bias of n_h rows is b_hn alone; r and z rows carry b_ih + b_hh.
    assert biases.ravel()[3] == model.bias_h[2 * 5]
    assert biases.ravel()[0] == model.bias[0] + model.bias_h[0]


@pytest.mark.parametrize("shape", [(12, 20, 8, 4, 2), (5, 9, 32, 2, 3)])
def test_gru_gateware_is_bit_and_cycle_exact(shape):
    x_size, h_size, rows, cols, batch = shape
    p = RnnParams(
        cell="gru",
        tile_rows=rows,
        tile_cols=cols,
        batch=batch,
        max_input=x_size,
        max_hidden=h_size,
    )
    model = quantize_lstm(p, _gru(x_size, h_size, seed=1, scale=2.0).state_dict())
    rng = np.random.default_rng(4)
    xs = [quantize_state(p, 2 * rng.standard_normal((t, batch, x_size))) for t in (1, 5)]
    for naive in (False, True):
        program = build_program(x_size, h_size, rows, cols, naive=naive, cell="gru")
        run = run_sequences(p, model, program, xs)
        for x, h, c, cycles in zip(xs, run.h, run.c, run.cycles):
            hg, _ = gru_golden(p, model, x)
            assert np.array_equal(h, hg) and not c.any()
            assert cycles == sequence_cycles(program, batch, x.shape[0])[0]


def test_cli_map_rnn_gru(tmp_path, capsys):
    sd = tmp_path / "gru.pt"
    torch.save(_gru(16, 24).state_dict(), sd)
    args = ["map", "rnn", "--array", "8x8", "--no-plot", "--state-dict", str(sd)]
    assert main(args + ["--cell", "gru", "-o", str(tmp_path)]) == 0
    assert "GRU X=16 H=24" in capsys.readouterr().out
    assert main(args + ["-o", str(tmp_path)]) == 2  # a GRU state_dict needs --cell gru
