"""Bad inputs of the LLM flow: ``tandem compile``, ``tandem cosim decode --program``, their
Python API (``CompileOptions``, ``compile_model``, ``CompiledModel``, ``ProgramRunner``) and
``merge_partials``.

The CLI refuses each with one line and exit status 2, before any long work, writing nothing;
the API raises a ``ValueError`` naming the bad value. Everything runs on the random ``tiny``
model and programs compiled for it here (no network, no fetched weights).
"""

import argparse
import json
import shutil
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tandem.host.hpu import HpuParams, merge_partials  # noqa: E402
from tandem.host.hpu.codec import HpuResult  # noqa: E402
from tandem.host.system.decode import TINY, load_model_weights  # noqa: E402
from tandem.mappings.llm.compiler import CompileError, CompileOptions, compile_model  # noqa: E402
from tandem.mappings.llm.runner import CompiledModel, ProgramError, ProgramRunner  # noqa: E402

from tandem.cli import build_parser, main  # noqa: E402

SMALL = {"patterns": ("2:4", "16:16"), "budget": 0.2, "max_prefill": 16, "tile": 4}


def _compile(model, tokenizer, out, **options):
    from tandem.host.system.texts import load_text

    return compile_model(
        model,
        tokenizer,
        out,
        CompileOptions(**{**SMALL, **options}),
        text=load_text("execmodel"),
        model_label="tiny",
        log=lambda *a: None,
    )


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    model, tokenizer, _ = load_model_weights("tiny", device="cpu")
    return model, tokenizer


@pytest.fixture(scope="module")
def program(tiny, tmp_path_factory):
    """A program compiled for ``--model tiny`` (read-only: tests copy it to change it)."""
    out = tmp_path_factory.mktemp("program") / "tiny"
    _compile(*tiny, out)
    return out


def refused(argv, capsys, piece: str) -> str:
    """Run ``tandem argv`` in-process: exit 2, one ``tandem: error:`` line holding ``piece``."""
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("tandem: error: ") and len(err.strip().splitlines()) == 1, err
    assert piece in err, err
    assert captured.out == ""
    return err


def files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- tandem compile -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "where, piece",
    [
        ("afile/out", "afile is a file, not a folder"),
        ("afile", "is a file, not a folder"),
        ("/proc/tandem-out", "cannot create it in /proc"),
        ("x" * 300, "a name longer than 255 bytes"),
    ],
)
def test_compile_into_a_folder_it_cannot_write_is_one_line(where, piece, tmp_path, capsys):
    (tmp_path / "afile").write_text("mine\n")
    out = where if where.startswith("/") else tmp_path / where
    before = files(tmp_path)
    refused(["compile", "tiny", "-o", out, "--max-prefill", "8"], capsys, piece)
    assert files(tmp_path) == before
    assert (tmp_path / "afile").read_text() == "mine\n"


def test_a_folder_that_cannot_be_written_is_a_compile_error(tiny, tmp_path, monkeypatch):
    """The write check asks the file system: a folder it refuses is one line naming -o."""
    import os

    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    (tmp_path / "locked").mkdir()
    with pytest.raises(CompileError, match=r"-o .*locked: cannot write into"):
        _compile(*tiny, tmp_path / "locked")


def test_another_architecture_is_refused_by_name(tiny, tmp_path, capsys):
    from tandem.host.system.gemma import TINY_GEMMA, Gemma, random_gemma
    from tandem.host.system.model import find_model

    refused(["compile", "tiny-gemma", "-o", tmp_path / "g"], capsys, "architecture 'gemma3'")
    gguf = find_model("gemma3-270m")
    if gguf is not None:  # the real file: refused from its header, before it loads
        refused(["compile", gguf, "-o", tmp_path / "g"], capsys, "architecture 'gemma3'")
    gemma = Gemma(TINY_GEMMA, random_gemma(TINY_GEMMA, 0), "cpu")
    with pytest.raises(ValueError, match="architecture Gemma, expected Llama"):
        _compile(gemma, tiny[1], tmp_path / "g")
    assert files(tmp_path) == []


def test_a_failed_compile_leaves_nothing_behind(tiny, tmp_path, monkeypatch):
    real_savez = np.savez

    def full_disk(*args, **kwargs):
        real_savez(*args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(CompileError, match="cannot write the output: No space left on device"):
        _compile(*tiny, tmp_path / "new" / "deep" / "out")
    assert files(tmp_path) == []
    monkeypatch.setattr(np, "savez", real_savez)
    _compile(*tiny, tmp_path / "former")
    before = {p: (tmp_path / "former" / p).read_bytes() for p in files(tmp_path / "former")}
    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(CompileError, match="No space left on device"):
        _compile(*tiny, tmp_path / "former", budget=0.5)
    after = {p: (tmp_path / "former" / p).read_bytes() for p in files(tmp_path / "former")}
    assert after == before


def test_a_recompile_leaves_no_file_of_the_former_one(tiny, tmp_path):
    _compile(*tiny, tmp_path / "out", max_prefill=16)
    _compile(*tiny, tmp_path / "out", max_prefill=4)
    _compile(*tiny, tmp_path / "fresh", max_prefill=4)
    assert files(tmp_path / "out") == files(tmp_path / "fresh")
    CompiledModel(tmp_path / "out")


@pytest.mark.parametrize(
    "options, piece",
    [
        ({"tile": "16"}, "--tile must be an integer, not '16'"),
        ({"tile": 4.0}, "--tile must be an integer"),
        ({"max_prefill": True}, "--max-prefill must be an integer"),
        ({"budget": "0.1"}, "--budget must be a number"),
        ({"patterns": "2:4"}, "--patterns must be N:M strings"),
        ({"patterns": ("3:4",)}, "N must divide M"),
        ({"activation_bits": 8}, "--activation-bits must be 8 and/or 16"),
        ({"weight_bits": ("8",)}, "--weight-bits must be 8 and/or 16"),
        ({"criterion": None}, "--criterion must be a string"),
    ],
)
def test_compile_options_of_the_wrong_type_are_value_errors(options, piece):
    with pytest.raises(ValueError, match=piece):
        CompileOptions(**options)


# --- CompiledModel on damaged folders ----------------------------------------------------------
def _table(change):
    def edit(folder):
        table = json.loads((folder / "program.json").read_text())
        change(table)
        (folder / "program.json").write_text(json.dumps(table))

    return edit


def _weights(change):
    def edit(folder):
        with np.load(folder / "weights.npz") as data:
            arrays = {k: data[k] for k in data.files}
        change(arrays)
        np.savez(folder / "weights.npz", **arrays)

    return edit


def _truncate(name, keep):
    def edit(folder):
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: keep if keep >= 0 else len(data) + keep])

    return edit


def _set(key, value):
    return lambda arrays: arrays.__setitem__(key, value(arrays[key]))


DAMAGE = {
    "table a list": (lambda f: (f / "program.json").write_text("[1, 2]"), "format 'list'"),
    "table not JSON": (lambda f: (f / "program.json").write_bytes(b"\xff{"), "is not JSON"),
    "no summary": (lambda f: (f / "summary.json").unlink(), "summary.json: missing"),
    "card a number": (_table(lambda t: t.__setitem__("card", 5)), "card must have the fields"),
    "card huge": (
        _table(lambda t: t["card"].__setitem__("n_layers", 10**9)),
        "card n_layers must be in 1..255, not 1000000000",
    ),
    "card a string": (_table(lambda t: t["card"].__setitem__("dim", "128")), "card dim"),
    "no buckets": (_table(lambda t: t.__setitem__("prefill", {})), "prefill must map buckets"),
    "bucket tile 0": (
        _table(lambda t: t["prefill"]["9-16"].__setitem__("tile", 0)),
        "'prefill' is not what tandem compile writes",
    ),
    "bucket file elsewhere": (
        _table(lambda t: t["prefill"]["9-16"].__setitem__("file", "../../x.bin")),
        "'prefill' is not what tandem compile writes",
    ),
    "a tensor less": (_table(lambda t: t["tensors"].pop()), "'tensors' is not what"),
    "decode a word short": (_truncate("decode.bin", -16), "decode.bin is not the program"),
    "decode a byte short": (_truncate("decode.bin", -1), "whole 16-byte words"),
    "weights truncated": (_truncate("weights.npz", 5000), "weights.npz cannot be read"),
    "weights empty": (_truncate("weights.npz", 0), "weights.npz cannot be read"),
    "weights missing": (lambda f: (f / "weights.npz").unlink(), "weights.npz: missing"),
    "weights of another program": (
        lambda f: np.savez(f / "weights.npz", key_factors=np.ones(3)),
        "weights.npz does not match program.json (no blk.0.attn_q.pattern)",
    ),
    "values int16": (
        _weights(_set("blk.0.attn_q.values", lambda a: a.astype(np.int16))),
        "blk.0.attn_q must hold int8 values",
    ),
    "index past M": (
        _weights(_set("blk.1.ffn_up.indices", lambda a: a + 100)),
        "indices below",
    ),
    "scale NaN": (
        _weights(_set("blk.0.attn_k.scales", lambda a: np.where(a > 0, np.nan, a))),
        "blk.0.attn_k.scales holds NaN",
    ),
    "pattern 3:4": (
        _weights(_set("blk.0.attn_q.pattern", lambda a: np.array([3, 4]))),
        "N must divide M",
    ),
    "another shape": (
        _weights(_set("blk.0.ffn_down.shape", lambda a: np.array([3, 4]))),
        "blk.0.ffn_down is 3 x 4, the program's 128 x 256",
    ),
    "norm short": (
        _weights(_set("blk.1.ffn_norm", lambda a: a[:3])),
        "blk.1.ffn_norm must be (128,)",
    ),
    "key factors negative": (
        _weights(_set("key_factors", lambda a: -a)),
        "key_factors must be positive",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_compile_folder_is_a_value_error_naming_it(damage, program, tmp_path):
    edit, piece = DAMAGE[damage]
    folder = tmp_path / "damaged"
    shutil.copytree(program, folder)
    edit(folder)
    with pytest.raises(ProgramError, match="damaged: ") as info:
        CompiledModel(folder)
    assert piece in str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


@pytest.mark.parametrize("damage", ["table a list", "weights truncated", "decode a byte short"])
def test_a_damaged_program_in_the_cli_is_one_line(damage, program, tmp_path, capsys):
    edit, piece = DAMAGE[damage]
    folder = tmp_path / "damaged"
    shutil.copytree(program, folder)
    edit(folder)
    argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hi", "--program", folder]
    refused(argv, capsys, piece)


def test_not_a_folder_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ProgramError, match="not a tandem compile folder"):
        CompiledModel(tmp_path / "afile")


# --- ProgramRunner -----------------------------------------------------------------------------
def _runner(model, program):
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.sparse_dsp.device import SparseMpeDevice
    from tandem.host.sparse_dsp.golden import SparseMpeParams
    from tandem.host.system.decode import HpuAttention

    params = HpuParams(
        head_dim=32, lanes=16, mem_data_bits=128, kv_bits=8, gqa_group=2, max_seq_len=256
    )
    card = HpuDevice(params, memory_bytes=1 << 18)
    mpe = SparseMpeDevice(SparseMpeParams(chains=2, stages=4, max_k=256, max_batch=4))
    return ProgramRunner(CompiledModel(program), model, mpe, HpuAttention(TINY, [card]))


def test_runner_calls_out_of_order_are_value_errors(tiny, program):
    runner = _runner(tiny[0], program)
    with pytest.raises(ProgramError, match=r"sequence 0 is not started; call start\(0"):
        runner.step(0, 1, 0)
    with pytest.raises(ProgramError, match="sequence 3 is not started"):
        runner.prefill(3, [1, 2])
    with pytest.raises(ValueError, match="capacity must be an integer, not '4'"):
        runner.start(0, "4")
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        runner.start(0, 0)
    runner.start(0, 4)
    with pytest.raises(ProgramError, match="sequence 0 is already started"):
        runner.start(0, 4)
    with pytest.raises(ProgramError, match="the next runs at position 0, not 3"):
        runner.step(0, 1, 3)
    with pytest.raises(ProgramError, match="no room for 5 more"):
        runner.prefill(0, [1, 2, 3, 4, 5])
    with pytest.raises(ProgramError, match="at least one token"):
        runner.prefill(0, [])
    with pytest.raises(ProgramError, match="sequence of token ids, not str"):
        runner.prefill(0, "ab")
    with pytest.raises(ValueError, match=r"a token id must be in 0\.\.255 .*not 256"):
        runner.prefill(0, [1, 256])
    runner.prefill(0, [1, 2])
    with pytest.raises(ProgramError, match="the next runs at position 2, not 0"):
        runner.prefill(0, [1, 2])
    runner.step(0, 5, 2)
    runner.step(0, 6, 3)
    with pytest.raises(ProgramError, match="holds 4 of its 4 tokens: no room for 1 more"):
        runner.step(0, 7, 4)


def test_a_runner_refuses_a_model_of_another_architecture(program):
    from tandem.host.system.gemma import TINY_GEMMA, Gemma, random_gemma

    gemma = Gemma(TINY_GEMMA, random_gemma(TINY_GEMMA, 0), "cpu")
    with pytest.raises(ProgramError, match="runs a Llama-architecture model, not Gemma"):
        _runner(gemma, program)
    with pytest.raises(ProgramError, match="compiled must be a CompiledModel, not str"):
        ProgramRunner(str(program), gemma, None, None)


# --- tandem cosim decode --program: every option honoured or refused -----------------------------
#: How program mode treats each option of ``tandem cosim decode``. An option added to the
#: command fails test_every_decode_option_is_honoured_or_refused until it is placed here, with
#: a test below that shows it.
HONOURED = {
    "prompt", "tokens", "backend", "simulator", "harness", "trace", "program", "model",
    "temperature", "seed", "raw", "clock_mhz", "hpu_memory_mib", "compare", "threads", "json",
    "overrides", "kv_bits", "placement", "torch_device", "help",
}  # fmt: skip
REFUSED = {"batch", "hpus", "max_slice_tokens", "engines", "waves"}


def test_every_decode_option_is_honoured_or_refused():
    def children(parser) -> dict:
        (family,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return family.choices

    decode = children(children(build_parser())["cosim"])["decode"]
    assert {a.dest for a in decode._actions} - (HONOURED | REFUSED) == set()


C = ["cosim", "decode", "--model", "tiny", "--raw"]


@pytest.mark.parametrize(
    "extra, piece",
    [
        (["--batch", "2"], "--batch does not apply to --program"),
        (["--hpus", "2"], "--hpus does not apply to --program"),
        (["--max-slice-tokens", "4"], "--max-slice-tokens does not apply to --program"),
        (["--engines", "2"], "--engines does not apply to --program"),
        (["--waves", "w.fst"], "--waves does not apply to --program"),
        (["--prompt", "again"], "--program runs one --prompt, not 2"),
        (["--harness", "native"], "need --backend rtl"),
        (["--simulator", "icarus"], "need --backend rtl"),
        (["--backend", "rtl", "--simulator", "icarus", "--harness", "native"], "runs verilator"),
        (["--tokens", "0"], "--tokens must be at least 1"),
        (["--tokens", str(10**9)], "exceed the 4096 positions an HPU card holds (at most 4094)"),
        (["--set", "max_seq_len=8", "--tokens", "7"], "exceed the 8 positions"),
        (["--hpu-memory-mib", "nan"], "--hpu-memory-mib must be a finite number"),
        (["--hpu-memory-mib", "inf"], "--hpu-memory-mib must be a finite number"),
        (["--hpu-memory-mib", "0"], "--hpu-memory-mib must be above 0"),
        (["--hpu-memory-mib", "-1"], "--hpu-memory-mib must be above 0"),
        (["--hpu-memory-mib", "1e-5"], "HPU memory: 34 tokens need"),
        (["--hpu-memory-mib", "1e12"], "--hpu-memory-mib must be at most"),
        (["--temperature", "nan"], "--temperature must be a finite number"),
        (["--temperature", "1e-31"], "--temperature must be 0 (greedy) or at least 1e-30"),
        (["--seed", "-1"], "--seed must be at least 0"),
        (["--clock-mhz", "nan"], "--clock-mhz must be a finite number"),
        (["--clock-mhz", "0"], "--clock-mhz must be above 0"),
        (["--set", "nokey=1"], "unknown parameter 'nokey'"),
        (["--set", "lanes=3"], "lanes"),
        (["--trace", "{tmp}/missing/t.json"], "folder {tmp}/missing does not exist"),
        (["--model", "tiny-gemma"], "runs a Llama-architecture model, not Gemma"),
    ],
)
def test_bad_program_flags_are_one_line(extra, piece, program, tmp_path, capsys):
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    argv = [*C, "--prompt", "hi", "--program", program, *extra]
    refused(argv, capsys, piece.replace("{tmp}", str(tmp_path)))
    assert files(tmp_path) == []


def test_a_prompt_of_invalid_utf8_is_one_line(program, capsys):
    # Bytes that are not UTF-8 reach argv as lone surrogates (the file system's encoding).
    argv = [*C, "--prompt", "\udcff\udcfe", "--program", program]
    refused(argv, capsys, "--prompt is not valid UTF-8")


def test_a_prompt_longer_than_compiled_is_one_line(program, capsys):
    argv = [*C, "--prompt", "x" * 17, "--program", program]
    refused(argv, capsys, "a 17-token prompt exceeds the compiled 16-token maximum")


def _run_json(argv, capsys) -> dict:
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_temperature_seed_clock_and_kv_bits_are_honoured(program, capsys):
    base = [*C, "--prompt", "hi", "--program", program, "--tokens", "6", "--json"]
    greedy = _run_json(base, capsys)
    assert greedy["compare"] is None
    hot = [*base, "--temperature", "50"]
    draws = [_run_json([*hot, "--seed", str(s)], capsys)["tokens"] for s in (1, 1, 2)]
    assert draws[0] == draws[1] and draws[0] != draws[2]
    assert draws[0] != greedy["tokens"]
    clocked = _run_json([*base, "--clock-mhz", "123"], capsys)
    assert clocked["clock_mhz"]["hpu"] == 123.0
    assert clocked["tokens"] == greedy["tokens"]
    narrow = _run_json([*base, "--kv-bits", "8"], capsys)
    assert narrow["op_cycles"]["ATTEND"] != greedy["op_cycles"]["ATTEND"]
    assert greedy["placement"] == "channels"
    packed = _run_json([*base, "--placement", "contiguous"], capsys)
    assert packed["placement"] == "contiguous" and packed["tokens"] == greedy["tokens"]
    spread = greedy["channel_bytes"]["touched"]
    assert packed["channel_bytes"]["touched"] < spread  # one sequence's regions packed together


def test_tokens_are_bounded_by_the_model_context(tiny, tmp_path, capsys):
    """A GGUF's llama.context_length bounds --tokens, and the message says it is the model's."""
    from dataclasses import replace

    from tandem.host.system.model import load_gguf, random_llama, write_gguf

    config = replace(TINY, context_length=24)
    path = write_gguf(tmp_path / "short.gguf", config, random_llama(config, 0), tiny[1])
    assert load_gguf(path)[0].context_length == 24
    model, tokenizer, _ = load_model_weights(str(path), device="cpu")
    _compile(model, tokenizer, tmp_path / "short")
    argv = [*C, "--model", path, "--prompt", "hi", "--program", tmp_path / "short"]
    refused([*argv, "--tokens", "23"], capsys, "exceed the model's 24-token context (at most 22)")
    assert len(_run_json([*argv, "--tokens", "22", "--json"], capsys)["tokens"]) == 22


# --- --compare -----------------------------------------------------------------------------------
def test_compare_reports_agreement_with_float_torch(program, capsys):
    argv = [*C, "--prompt", "hi", "--program", program, "--tokens", "5"]
    outcome = _run_json([*argv, "--compare", "--json"], capsys)
    report = outcome["compare"]
    assert report["positions"] == len(outcome["tokens"]) == 5  # no stop: every token compared
    assert 0 <= report["agreement"] <= 1 and 0 <= report["mean_kl"] < 0.5
    capsys.readouterr()
    assert main([str(a) for a in [*argv, "--compare"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("vs float torch (teacher forcing on these tokens): top-1 agreement")


def test_compare_lines_up_each_position_with_the_float_model(tiny):
    """Logits of the float model itself, position by position, agree exactly; the same logits
    one position late do not (a comparison off by one would pass the first and fail here)."""
    from tandem.mappings.llm.cli import _compare

    model = tiny[0]
    ids, tokens = [5, 6, 7], [8, 9, 10, 11]
    with torch.no_grad():
        rows = [model.prefill(ids + tokens[:i])[0].float().numpy() for i in range(len(tokens) + 1)]
    same = _compare(model, ids, tokens, rows[:-1])
    assert same["positions"] == 4 and same["agreement"] == 1.0 and same["mean_kl"] < 1e-6
    late = _compare(model, ids, tokens, rows[1:])
    assert late["mean_kl"] > 100 * max(same["mean_kl"], 1e-9)


# --- merge_partials ------------------------------------------------------------------------------
P = HpuParams(head_dim=32, lanes=16, mem_data_bits=256, gqa_group=2)


def _part(m, l_value):
    g, d = P.gqa_group, P.head_dim
    return HpuResult(0, np.full(g, m), np.full(g, l_value), np.ones((g, d), np.int64), None)


@pytest.mark.parametrize(
    "partials, piece",
    [
        ([], "non-empty list of HpuResult"),
        (None, "non-empty list of HpuResult"),
        ([np.zeros(3)], r"partials\[0\] must be a partial-mode HpuResult .* not ndarray"),
        ([HpuResult(0, np.zeros(0), np.zeros(0), np.zeros(0), np.zeros((2, 32)))], "not Hpu"),
        ([_part(0, 0), _part(-5, 0)], "merge query 0's l to 0, not above 0"),
    ],
)
def test_merge_partials_refuses_what_is_not_partial_results(partials, piece):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division by zero on the way
        with pytest.raises(ValueError, match=piece):
            merge_partials(P, partials)


def test_merge_partials_merges_real_parts():
    merged = merge_partials(P, [_part(0, 1 << P.prob_frac_bits), _part(-1000, 0)])
    assert np.isfinite(merged).all() and merged.shape == (P.gqa_group, P.head_dim)
