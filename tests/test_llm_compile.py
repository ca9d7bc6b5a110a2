"""tandem compile: instruction set, programs, compiler and the program runner on devices."""

import json
import subprocess
import sys

import numpy as np
import pytest
from tandem.mappings.llm import isa
from tandem.mappings.llm import program as prog
from tandem.mappings.llm.compiler import (
    ACT_LIMIT,
    CompileError,
    CompileOptions,
    quantize_activations,
    split_digits,
)
from tandem.mappings.nm import NMPattern, check_nm, pack_nm, prune_magnitude
from tandem.mappings.nm.engine import mv_units

SMOL = prog.CardShape(30, 576, 9, 3, 64, 1536, 16)


# --- instruction set -------------------------------------------------------------------------
def test_fields_fit_one_word_and_every_opcode_has_a_unit():
    assert sum(bits for _, bits, _ in isa.FIELDS) <= 8 * isa.WORD_BYTES
    assert set(isa.UNIT) == set(isa.Op)
    assert (1 << dict((n, b) for n, b, _ in isa.FIELDS)["opcode"]) > max(isa.Op)


def test_encode_decode_round_trip_of_random_instructions():
    rng = np.random.default_rng(1)
    widths = {name: bits for name, bits, _ in isa.FIELDS if name != "opcode"}
    program = [
        isa.Instruction(
            isa.Op(int(rng.integers(0, len(isa.Op)))),
            **{name: int(rng.integers(0, 1 << bits)) for name, bits in widths.items()},
        )
        for _ in range(200)
    ]
    image = isa.encode_program(program)
    assert len(image) == 200 * isa.WORD_BYTES
    assert isa.decode_program(image) == program


def test_a_field_that_does_not_fit_is_an_error():
    with pytest.raises(ValueError, match="field tokens = 4096 does not fit 12 bits"):
        isa.Instruction(isa.Op.MATMUL, tokens=4096).encode()
    with pytest.raises(ValueError, match="unknown opcode"):
        isa.Instruction.decode(63)
    with pytest.raises(ValueError, match="whole 16-byte words"):
        isa.decode_program(b"\0" * 17)


# --- programs ----------------------------------------------------------------------------------
def test_buckets_cover_every_length_once():
    for longest in (1, 2, 3, 100, 2048):
        covered = [n for lo, hi in prog.buckets(longest) for n in range(lo, hi + 1)]
        assert covered == list(range(1, longest + 1))
    assert len(prog.buckets(2048)) == 12


@pytest.mark.parametrize("wide", [(), ((0, "mlp_out"), (1, "attn_in"))])
def test_unrolled_count_is_the_length_of_the_unrolled_program(wide):
    shape = prog.CardShape(2, 64, 4, 2, 16, 128, 4, wide)
    for length in (1, 2, 3, 4, 5, 17, 64):
        assert len(prog.prefill_program(shape, length)) == prog.unrolled_instructions(shape, length)


def test_spilled_buckets_count_their_loads_and_stores(monkeypatch):
    monkeypatch.setattr(prog, "ACTIVATION_BUFFER_BYTES", 20_000)
    shape = prog.CardShape(2, 64, 4, 2, 16, 128, 4)
    for length in (61, 64):
        assert not prog.bucket_plan(shape, length)["resident"]
        program = prog.prefill_program(shape, length)
        assert len(program) == prog.unrolled_instructions(shape, length)
        stores = [i for i in program if i.op == isa.Op.STORE and i.tensor == prog.SPILL]
        assert len(stores) == 2 * -(-length // 4)


def test_template_loops_once_per_layer_over_its_body():
    template = prog.prefill_template(SMOL, 257, 512)
    loops = [i for i, inst in enumerate(template) if inst.op == isa.Op.LOOP]
    assert len(loops) == SMOL.n_layers
    body = len(prog.layer_body(SMOL, 0, 0, 0, False))
    assert template[loops[1]].count == body  # layer 0's also loads the embeddings
    assert template[loops[0]].count == body + 1
    assert all(i.tokens == 0 for i in template if i.op == isa.Op.MATMUL)


def test_bucketed_storage_is_over_100x_smaller_than_per_length():
    compiled = prog.compile_programs(SMOL, 2048)
    assert compiled.storage_bytes_per_length / compiled.storage_bytes > 100
    assert compiled.instructions * isa.WORD_BYTES == compiled.storage_bytes


def test_buffers_live_at_the_same_time_never_share_bytes():
    for tokens in (1, 16):
        plan = prog.allocate(SMOL, tokens, tokens)
        body = prog.layer_body(SMOL, 0, tokens, 0, tokens == 1)
        life = {}
        for step, inst in enumerate(body):
            for index in prog._reads(inst) + [inst.dst]:
                name = prog.BUFFER_NAMES[index]
                life.setdefault(name, [step, step])[1] = step
        size = {n: b * tokens for n, b in prog.buffer_bytes_per_token(SMOL).items()}
        names = sorted(life)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if life[a][1] < life[b][0] or life[b][1] < life[a][0]:
                    continue
                lo_a, lo_b = plan["offsets"][a], plan["offsets"][b]
                assert lo_a + size[a] <= lo_b or lo_b + size[b] <= lo_a, (a, b)


# --- quantization -------------------------------------------------------------------------------
def test_sixteen_bit_digits_rebuild_the_value():
    q = np.arange(-ACT_LIMIT[16], ACT_LIMIT[16] + 1)
    hi, lo = split_digits(q)
    assert hi.dtype == lo.dtype == np.int8
    np.testing.assert_array_equal(256 * hi.astype(np.int64) + lo, q)


def test_activation_quantization_is_per_token_and_symmetric():
    x = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0]])
    q, scale = quantize_activations(x)
    np.testing.assert_array_equal(q, [[64, -127, 32], [0, 0, 0]])
    np.testing.assert_allclose(scale, [1 / 127, 1.0])
    q16, _ = quantize_activations(x, 16)
    assert q16.dtype == np.int32 and abs(q16).max() == ACT_LIMIT[16]


def test_activation_aware_pruning_keeps_weights_that_meet_large_inputs():
    w = np.array([[1.0, 0.9, 0.1, 0.2]])
    pattern = NMPattern(2, 4)
    np.testing.assert_array_equal(prune_magnitude(w, pattern), [[1.0, 0.9, 0, 0]])
    importance = np.array([1.0, 0.01, 100.0, 1.0])
    np.testing.assert_array_equal(
        prune_magnitude(w, pattern, importance=importance), [[1.0, 0, 0.1, 0]]
    )
    np.testing.assert_array_equal(
        prune_magnitude(w, pattern, importance=np.ones(4)), prune_magnitude(w, pattern)
    )


@pytest.mark.parametrize("pattern", ["16:16", "2:4"])
def test_gptq_lowers_the_calibration_error_and_keeps_the_pattern(pattern):
    from tandem.mappings.llm.compiler import layer_error, quantize_weights, solve_layer

    rng = np.random.default_rng(3)
    mix = rng.standard_normal((48, 48))
    x = rng.standard_normal((400, 48)) @ mix  # correlated inputs: where compensation pays
    w = rng.standard_normal((32, 48))
    p = NMPattern.parse(pattern)
    pruned = w if p.dense else prune_magnitude(w, p, pair_rows=True)
    q0, s0 = quantize_weights(pruned, 8)
    q1, s1, clipped = solve_layer(w, x, p, 8)
    # the compensation pushes some weights past the row's peak: each is counted and ends at
    # the width's limit
    assert 0 < clipped <= np.count_nonzero(np.abs(q1) == 127)
    assert q1.dtype == np.int8 and np.abs(q1).max() <= 127
    if not p.dense:
        check_nm(q1, p)
        assert (mv_units(pack_nm(q1, p))[:, 1] >= 0).all()  # row pairs share their columns
    reference = x @ w.T
    assert layer_error(q1, s1, x, 8, reference) < layer_error(q0, s0, x, 8, reference)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"patterns": ("3:4",)}, "N must divide M"),
        ({"budget": 0}, "--budget"),
        ({"criterion": "random"}, "--criterion"),
        ({"tile": 3}, "--tile"),
        ({"activation_bits": (4,)}, "--activation-bits"),
        ({"method": "fast"}, "--method"),
        ({"weight_group": 24}, "--weight-group"),
        ({"weight_group": -16}, "--weight-group"),
    ],
)
def test_bad_options_are_one_line_user_errors(options, message):
    from tandem.errors import UserError

    with pytest.raises(UserError, match=message):
        CompileOptions(**options)
    assert issubclass(CompileError, UserError)


# --- compiler and runner on the tiny model --------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from tandem.host.system.decode import TINY, Llama
    from tandem.host.system.model import byte_tokenizer, random_llama
    from tandem.host.system.texts import load_text
    from tandem.mappings.llm.compiler import compile_model

    torch.set_num_threads(1)
    model = Llama(TINY, random_llama(TINY, 0), "cpu")
    tokenizer = byte_tokenizer()
    text = load_text("execmodel")
    root = tmp_path_factory.mktemp("compiled")
    options = CompileOptions(patterns=("2:4", "16:16"), budget=0.2, max_prefill=64, tile=4)
    summary = compile_model(
        model, tokenizer, root / "a", options, text=text, model_label="tiny", log=lambda *a: None
    )
    compile_model(
        model, tokenizer, root / "b", options, text=text, model_label="tiny", log=lambda *a: None
    )
    wide = CompileOptions(patterns=("16:16",), activation_bits=(16,), max_prefill=64, tile=4)
    compile_model(
        model, tokenizer, root / "wide", wide, text=text, model_label="tiny", log=lambda *a: None
    )
    w16 = CompileOptions(
        patterns=("2:4",), activation_bits=(16,), weight_bits=(16,), max_prefill=64, tile=4
    )
    compile_model(
        model, tokenizer, root / "w16", w16, text=text, model_label="tiny", log=lambda *a: None
    )
    grouped = CompileOptions(
        patterns=("16:16",), activation_bits=(16,), weight_group=16, max_prefill=64, tile=4
    )
    compile_model(
        model, tokenizer, root / "g16", grouped, text=text, model_label="tiny", log=lambda *a: None
    )
    return model, root, summary


def test_compile_writes_the_same_files_every_time(tiny):
    _, root, summary = tiny
    names = sorted(p.name for p in (root / "a").iterdir())
    assert names == sorted(p.name for p in (root / "b").iterdir())
    for name in names:
        if name != "summary.json":  # it holds compile_s
            assert (root / "a" / name).read_bytes() == (root / "b" / name).read_bytes(), name
    assert not list(root.glob("*.tmp-compile"))
    assert summary["storage_bytes"] < summary["storage_bytes_per_length"]
    assert sum(summary["pattern_counts"].values()) == 2 * 7
    for layer, error in summary["layer_errors"].items():
        pattern = summary["patterns"][layer]
        bits = summary["activation_bits"][layer]
        assert summary["candidate_errors"][layer][f"{pattern}/a{bits}"] == error
        chosen_ok = error <= 0.2 or error == min(summary["candidate_errors"][layer].values())
        assert chosen_ok


def _runner(model, directory, **mpe_options):
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.hpu.params import HpuParams
    from tandem.host.sparse_dsp.device import SparseMpeDevice
    from tandem.host.sparse_dsp.golden import SparseMpeParams
    from tandem.host.system.decode import HpuAttention
    from tandem.mappings.llm.runner import CompiledModel, ProgramRunner

    hpu_options = mpe_options.pop("hpu", {})
    params = HpuParams(
        head_dim=32, lanes=16, mem_data_bits=128, kv_bits=8, gqa_group=2, max_seq_len=256
    )
    card = HpuDevice(params, memory_bytes=1 << 18, **hpu_options)
    mpe = SparseMpeDevice(
        SparseMpeParams(chains=2, stages=4, max_k=256, max_batch=4), **mpe_options
    )
    compiled = CompiledModel(directory)
    return ProgramRunner(compiled, model, mpe, HpuAttention(model.config, [card]))


def _float_hidden(model, ids):
    import torch

    c = model.config
    x = model.embed(ids)
    positions = torch.arange(len(ids))
    for layer in range(c.n_layers):
        q, k, v = model.attn_in(layer, x, positions)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        o = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(2, 0), v.repeat_interleave(2, 0), is_causal=True
        )
        x = model.attn_out(layer, x, o.transpose(0, 1))
    return x.detach().numpy()


def test_prefill_rows_equal_decode_steps_bit_for_bit(tiny):
    """Teacher forcing through one prefill gives every token the hidden state that a decode
    step of that token computes, with both golden kernels of the matrix engine."""
    model, root, _ = tiny
    ids = list(b"compiled programs!")
    whole = _runner(model, root / "a", kernel="direct")
    whole.start(0, 64)
    rows = whole.prefill(0, ids, every_position=True)
    stepped = _runner(model, root / "a", kernel="streams")
    stepped.start(0, 64)
    last = stepped.prefill(0, ids[:10])
    np.testing.assert_array_equal(last, rows[9])
    for position in range(10, len(ids)):
        np.testing.assert_array_equal(stepped.step(0, ids[position], position), rows[position])
    assert stepped.stats.count["MATMUL"] > 0 and stepped.stats.cycles["MATMUL"] > 0
    assert stepped.stats.cycles["ATTEND"] > 0


def test_programs_track_the_float_model_and_sixteen_bits_track_it_closer(tiny):
    model, root, _ = tiny
    ids = list(b"the float model")
    want = _float_hidden(model, ids)
    errors = {}
    for name in ("a", "wide", "w16", "g16"):
        runner = _runner(model, root / name, kernel="direct")
        runner.start(0, 64)
        got = runner.prefill(0, ids, every_position=True)
        errors[name] = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert errors["wide"] < errors["a"] < 0.2, errors
    assert errors["wide"] < 0.05, errors
    # A scale per 16 columns instead of per row: the same int8 weights track float closer.
    assert errors["g16"] < errors["wide"] * 0.8, errors


def test_grouped_weights_run_one_pass_per_column_block(tiny):
    """``weight_group``: MATMUL and DEQUANTIZE carry the block count; the engine runs one pass
    per block and the dequantized result is the sum of each block's product times its scales."""
    from tandem.mappings.llm.compiler import column_scales
    from tandem.mappings.llm.isa import Op
    from tandem.mappings.llm.runner import CompiledModel, column_block

    model, root, _ = tiny
    assert json.loads((root / "g16" / "summary.json").read_text())["weight_group"] == 16
    compiled = CompiledModel(root / "g16")
    matmuls = [i for i in compiled.decode if i.op == Op.MATMUL]
    assert matmuls and all(i.count == i.cols // 16 for i in matmuls)
    dequantize = [i for i in compiled.decode if i.op == Op.DEQUANTIZE]
    assert [i.count for i in dequantize] == [i.count for i in matmuls]
    packed = compiled.matrices[matmuls[0].tensor]
    blocks = matmuls[0].count
    assert packed.scales.shape == (packed.shape[0], blocks)
    x = np.random.default_rng(0).integers(-127, 128, packed.shape[1])
    dense = packed.dense().astype(np.float64) * column_scales(packed.scales, packed.shape[1])
    parts = [column_block(packed, b, blocks) for b in range(blocks)]
    width = packed.shape[1] // blocks
    summed = sum(
        (part.dense().astype(np.float64) @ x[b * width : (b + 1) * width]) * part.scales
        for b, part in enumerate(parts)
    )
    np.testing.assert_allclose(summed, dense @ x, rtol=1e-12)
    runner = _runner(model, root / "g16", kernel="direct")
    runner.start(0, 64)
    ids = list(b"blocks")
    rows = runner.prefill(0, ids, every_position=True)
    stepped = _runner(model, root / "g16", kernel="direct")
    stepped.start(0, 64)
    stepped.prefill(0, ids[:3])
    for position in range(3, len(ids)):
        np.testing.assert_array_equal(stepped.step(0, ids[position], position), rows[position])


def test_sixteen_bit_weights_are_exact_digit_matrices(tiny):
    """A 16-bit weight layer stores two int8 digit matrices of one pattern; the runner's
    256 * hi + lo equals the 16-bit weights times the input exactly."""
    from tandem.mappings.llm.compiler import split_digits
    from tandem.mappings.llm.runner import CompiledModel

    _, root, _ = tiny
    compiled = CompiledModel(root / "w16")
    assert set(compiled.matrices_lo) == set(compiled.matrices)
    summary = json.loads((root / "w16" / "summary.json").read_text())
    assert set(summary["weight_bits"].values()) == {16}
    for tensor, hi in list(compiled.matrices.items())[:3]:
        lo = compiled.matrices_lo[tensor]
        assert hi.pattern == lo.pattern == NMPattern(2, 4)
        w = 256 * hi.dense().astype(np.int64) + lo.dense()
        assert np.abs(w).max() <= ACT_LIMIT[16]
        again_hi, again_lo = split_digits(w)
        np.testing.assert_array_equal(again_hi, hi.dense())
        np.testing.assert_array_equal(again_lo, lo.dense())


def test_weights_that_do_not_match_the_program_are_a_user_error(tiny, tmp_path):
    import shutil

    from tandem.mappings.llm.runner import CompiledModel, ProgramError

    _, root, _ = tiny
    broken = tmp_path / "broken"
    shutil.copytree(root / "a", broken)
    np.savez(broken / "weights.npz", key_factors=np.ones(3))
    with pytest.raises(ProgramError, match=r"weights\.npz does not match program\.json"):
        CompiledModel(broken)


def test_a_prompt_longer_than_compiled_is_a_user_error(tiny):
    from tandem.mappings.llm.runner import ProgramError

    model, root, _ = tiny
    runner = _runner(model, root / "a", kernel="direct")
    with pytest.raises(ProgramError, match="exceeds the compiled 64-token maximum"):
        runner.prefill(0, [1] * 65)


def test_cli_compile_and_run(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "prog"
    done = subprocess.run(
        [sys.executable, "-m", "tandem", "compile", "tiny", "-o", str(out), "--max-prefill",
         "32", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["buckets"][-1] == [17, 32]
    done = subprocess.run(
        [sys.executable, "-m", "tandem", "cosim", "decode", "--program", str(out), "--model",
         "tiny", "--prompt", "hi", "--tokens", "3", "--raw", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert len(outcome["tokens"]) == 3 and outcome["op_cycles"]["MATMUL"] > 0
    assert len(outcome["step_cycles"]) == 2  # the first token comes from the prefill
    assert all(step["MPE"] > 0 and step["HPU"] > 0 for step in outcome["step_cycles"])
    assert outcome["modelled_ms_per_step"] > 0
    assert isinstance(outcome["saturations"], dict)


def test_trace_puts_every_unit_on_one_serial_timeline(tiny, tmp_path):
    model, root, _ = tiny
    runner = _runner(model, root / "a", kernel="direct")
    runner.start(0, 64)
    hidden = runner.prefill(0, list(b"trace"))
    runner.step(0, int(np.argmax(runner.logits(hidden))), 5)
    runner.write_trace(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"prefill 5", "decode"}
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {"MPE", "HPU", "ELEMENTWISE", "DMA"}
    ends = [e["ts"] + e["dur"] for e in spans]
    assert all(b["ts"] >= a - 1e-3 for a, b in zip(ends, spans[1:], strict=False))
    assert sum(runner.run_cycles[1].values()) == sum(
        e["args"]["cycles"] for e in spans if e["cat"] == "decode"
    )


def test_compile_never_replaces_a_folder_it_did_not_write(tmp_path):
    from tandem.mappings.llm.compiler import CompileError, check_output_folder

    keep = tmp_path / "work"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    with pytest.raises(CompileError, match="not a tandem compile output"):
        check_output_folder(keep)
    (tmp_path / "file").write_text("x")
    with pytest.raises(CompileError, match="not a folder"):
        check_output_folder(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    check_output_folder(tmp_path / "empty")
    check_output_folder(tmp_path / "missing")
    done = subprocess.run(
        [sys.executable, "-m", "tandem", "compile", "tiny", "-o", str(keep)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "not a tandem compile output" in done.stderr
    assert sorted(p.name for p in keep.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compile", "tiny", "-o", "X", "--patterns", "3:4"], "N must divide M"),
        (["compile", "tiny", "-o", "X", "--activation-bits", "8,x"], "--activation-bits"),
        (["compile", "tiny", "-o", "X", "--calibration-text", "/nonexistent"], "calibration"),
        (["cosim", "decode", "--program", "/nonexistent", "--prompt", "a"], "not a tandem"),
    ],
)
def test_cli_bad_input_is_one_line_and_status_2(argv, message, tmp_path):
    pytest.importorskip("torch")
    argv = [str(tmp_path / "X") if a == "X" else a for a in argv]
    done = subprocess.run(
        [sys.executable, "-m", "tandem", *argv], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "X").exists()


@pytest.mark.rtl
def test_program_on_rtl_is_golden_bit_for_bit(tiny, sim_cache, tmp_path):
    """Prefill and two decode steps with every matrix op on the sparse-mpe RTL and every
    attention on the HPU RTL (native harness): the golden hidden states bit for bit, the
    matrix engine's cycles equal to golden's model."""
    from .rtl import need

    need("native")
    model, root, _ = tiny
    ids = list(b"rtl run")
    golden = _runner(model, root / "a", kernel="direct")
    rtl_options = {
        "backend": "rtl",
        "simulator": "verilator",
        "harness": "native",
        "cache_dir": sim_cache,
        "timeout_s": 300,
    }
    rtl = _runner(
        model,
        root / "a",
        **rtl_options,
        run_dir=tmp_path / "mpe",
        hpu={**rtl_options, "run_dir": tmp_path / "hpu"},
    )
    try:
        for runner in (golden, rtl):
            runner.start(0, 64)
        np.testing.assert_array_equal(rtl.prefill(0, ids), golden.prefill(0, ids))
        for position, token in ((7, 5), (8, 9)):
            np.testing.assert_array_equal(
                rtl.step(0, token, position), golden.step(0, token, position)
            )
        assert rtl.stats.cycles["MATMUL"] == golden.stats.cycles["MATMUL"]
        assert rtl.stats.count == golden.stats.count
    finally:
        for runner in (golden, rtl):
            runner.attention.close()
            runner.mpe.close()
