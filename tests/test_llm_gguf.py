"""A Llama-architecture GGUF other than SmolLM2's: written, read back, compiled and run.

The model is random, of a shape SmolLM2 and ``tiny`` do not have (3 layers, dim 192, 6 query
and 2 KV heads: head_dim 32, GQA group 3; hidden 320; a 265-token BPE vocabulary with merges
and a control token; RoPE base 500000), its tensors in F32, F16, BF16 and Q8_0.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")

from tandem.host.system.model import (  # noqa: E402
    LlamaConfig,
    Tokenizer,
    load_gguf,
    random_llama,
    write_gguf,
)

from tandem.cli import main  # noqa: E402

MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "r e"]
TYPES = ("Q8_0", "F16", "F32", "BF16")
#: Largest |error| of a round trip over the largest |weight| of the tensor, per type.
TOLERANCE = {"F32": 0.0, "F16": 1e-3, "BF16": 1 / 128, "Q8_0": 1 / 200}


def small_bpe() -> Tokenizer:
    """Byte tokens, eight merges and ``<|endoftext|>`` (a control token, id 0)."""
    chars = Tokenizer([], []).byte_char
    tokens = [
        "<|endoftext|>",
        *(chars[b] for b in range(256)),
        *(m.replace(" ", "") for m in MERGES),
    ]
    return Tokenizer(tokens, MERGES, [3] + [1] * (len(tokens) - 1))


CONFIG = LlamaConfig(
    n_layers=3, dim=192, n_heads=6, n_kv_heads=2, hidden=320, vocab=265,
    rope_theta=500000.0, eps=1e-6, bos_id=0, eos_id=0,
)  # fmt: skip


def tensor_types(weights) -> dict[str, str]:
    """Norms F32; the matrices cycle through Q8_0, F16, F32 and BF16."""
    matrices = [n for n, w in weights.items() if w.dim() == 2]
    return {n: TYPES[i % len(TYPES)] for i, n in enumerate(matrices)}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    torch.set_num_threads(1)
    weights = random_llama(CONFIG, seed=3)
    types = tensor_types(weights)
    path = tmp_path_factory.mktemp("gguf") / "random-llama.gguf"
    write_gguf(path, CONFIG, weights, small_bpe(), tensor_types=types)
    return path, weights, types


@pytest.fixture(scope="module")
def compiled(model_file, tmp_path_factory):
    path = model_file[0]
    out = tmp_path_factory.mktemp("program") / "prog"
    argv = ["compile", str(path), "-o", str(out), "--max-prefill", "32", "--tile", "4",
            "--calibration-tokens", "128"]  # fmt: skip
    assert main(argv) == 0
    return out


def test_load_gguf_reads_back_the_config_weights_and_tokenizer(model_file):
    path, weights, types = model_file
    config, got, tokenizer = load_gguf(path)
    eps = float(np.float32(1e-6))
    assert config == LlamaConfig(**{**CONFIG.__dict__, "eps": eps, "context_length": 2048})
    assert (config.head_dim, config.gqa_group) == (32, 3)
    assert set(got) == set(weights)
    assert {t.tensor_type.name for t in gguf.GGUFReader(path).tensors} == {*TYPES}
    for name, want in weights.items():
        kind = types.get(name, "F32")
        error = (got[name] - want).abs().max() / want.abs().max()
        assert got[name].shape == want.shape and got[name].dtype == torch.float32, name
        assert error <= TOLERANCE[kind], (name, kind, float(error))
    # F32 q/k come back exactly: the writer's RoPE row permutation is load_gguf's inverse.
    exact = [n for n in ("blk.0.attn_q.weight", "blk.1.attn_k.weight") if types[n] == "F32"]
    assert len(exact) == 2
    assert all(torch.equal(got[n], weights[n]) for n in exact)
    bpe = small_bpe()
    assert tokenizer.tokens == bpe.tokens and tokenizer.special == {"<|endoftext|>": 0}
    text = "<|endoftext|>the rain in there 42"
    assert tokenizer.encode(text) == bpe.encode(text)
    assert tokenizer.encode(" the")[0] == bpe.ids["Ġthe"]
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tied_embeddings_stay_tied(tmp_path):
    config = LlamaConfig(n_layers=1, dim=64, n_heads=2, n_kv_heads=1, hidden=128, vocab=265)
    weights = random_llama(config, seed=1)
    del weights["output.weight"]  # as SmolLM2: the LM head is the embedding
    write_gguf(tmp_path / "tied.gguf", config, weights, small_bpe())
    _, got, _ = load_gguf(tmp_path / "tied.gguf")
    assert "output.weight" not in got and set(got) == set(weights)


def test_cli_compile_writes_the_summary(compiled):
    summary = json.loads((compiled / "summary.json").read_text())
    assert sum(summary["pattern_counts"].values()) == 3 * 7
    assert summary["buckets"][-1] == [17, 32]
    assert (compiled / "decode.bin").stat().st_size > 0


def _float_hidden(model, ids):
    c = model.config
    x = model.embed(ids)
    positions = torch.arange(len(ids))
    for layer in range(c.n_layers):
        q, k, v = (t.transpose(0, 1) for t in model.attn_in(layer, x, positions))
        o = torch.nn.functional.scaled_dot_product_attention(
            q,
            k.repeat_interleave(c.gqa_group, 0),
            v.repeat_interleave(c.gqa_group, 0),
            is_causal=True,
        )
        x = model.attn_out(layer, x, o.transpose(0, 1))
    return x.detach().numpy()


def test_program_tracks_the_float_model_on_the_golden_devices(model_file, compiled):
    from tandem.host.hpu import HpuParams
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.sparse_dsp.device import SparseMpeDevice
    from tandem.host.sparse_dsp.golden import SparseMpeParams
    from tandem.host.system.decode import HpuAttention, load_model_weights
    from tandem.mappings.llm.runner import CompiledModel, ProgramRunner

    model, tokenizer, _ = load_model_weights(str(model_file[0]), device="cpu")
    program = CompiledModel(compiled)
    params = HpuParams.for_model(model.config, max_seq_len=256)
    assert (params.head_dim, params.gqa_group) == (32, 3)
    card = HpuDevice(params, memory_bytes=1 << 20)
    mpe = SparseMpeDevice(
        SparseMpeParams(max_k=512, max_batch=program.table["card"]["tile"]), kernel="direct"
    )
    runner = ProgramRunner(program, model, mpe, HpuAttention(model.config, [card]))
    ids = tokenizer.encode("the rain in there, and the other one")
    runner.start(0, 64)
    got = runner.prefill(0, ids, every_position=True)
    want = _float_hidden(model, ids)
    error = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert error < 0.05, error
    # A decode step after the prefill gives the next position's row of a longer prefill.
    step = runner.step(0, ids[-1], len(ids))
    assert np.linalg.norm(step - _float_hidden(model, ids + ids[-1:])[-1]) < 0.05 * np.linalg.norm(
        step
    )


def test_cli_runs_the_program_and_the_hpu_decode(model_file, compiled, capsys):
    path = str(model_file[0])
    capsys.readouterr()
    argv = ["cosim", "decode", "--program", str(compiled), "--model", path, "--prompt",
            "the rain", "--tokens", "3", "--json"]  # fmt: skip
    assert main(argv) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["model"] == "random-llama.gguf" and outcome["prompt_tokens"] == 6
    assert 1 <= len(outcome["tokens"]) <= 3 and outcome["op_cycles"]["ATTEND"] > 0
    argv = ["cosim", "decode", "--model", path, "--prompt", "the rain", "--tokens", "4",
            "--compare", "--json"]  # fmt: skip
    assert main(argv) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert len(outcome["sequences"][0]["tokens"]) == 4
    assert outcome["compare"]["agreement"] >= 0.75, outcome["compare"]


def _write(path, arch="llama", drop=(), tokenizer_model=None, extra_tensor=None):
    """A one-layer GGUF written with gguf's writer directly, to break it on purpose."""
    config = LlamaConfig(n_layers=1, dim=64, n_heads=2, n_kv_heads=1, hidden=128, vocab=256)
    writer = gguf.GGUFWriter(path, arch)
    if "metadata" not in drop:
        writer.add_block_count(1)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    if tokenizer_model:
        writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list([Tokenizer([], []).byte_char[b] for b in range(256)])
    for name, tensor in random_llama(config).items():
        if name not in drop:
            writer.add_tensor(name, tensor.numpy())
    if extra_tensor:
        writer.add_tensor(extra_tensor, np.ones(16, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    "broken, message",
    [
        ({"arch": "qwen2"}, "architecture 'qwen2', expected 'llama'"),
        ({"drop": ("blk.0.ffn_up.weight",)}, "missing tensor blk.0.ffn_up.weight"),
        ({"drop": ("metadata",)}, "no llama.block_count in the metadata"),
        ({"tokenizer_model": "llama"}, "tokenizer 'llama'; only GPT-2 byte-level BPE"),
        ({"extra_tensor": "rope_freqs.weight"}, "rope_freqs.weight: only plain RoPE"),
    ],
)
@pytest.mark.parametrize("command", ["compile", "decode"])
def test_a_gguf_tandem_cannot_run_is_one_line_and_status_2(
    broken, message, command, tmp_path, capsys
):
    path = str(_write(tmp_path / "broken.gguf", **broken))
    out = tmp_path / "out"
    argv = (
        ["compile", path, "-o", str(out)]
        if command == "compile"
        else ["cosim", "decode", "--model", path, "--prompt", "hi"]
    )
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tandem: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_head_dim_the_hpu_lacks_is_a_compile_error(tmp_path, capsys):
    config = LlamaConfig(n_layers=1, dim=64, n_heads=4, n_kv_heads=2, hidden=128, vocab=265)
    path = write_gguf(tmp_path / "hd16.gguf", config, random_llama(config), small_bpe())
    capsys.readouterr()
    assert main(["compile", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == "tandem: error: the HPU cannot serve this model: head_dim must be one of 32, " \
        "64, 128, 256, not 16\n"  # fmt: skip
    assert not (tmp_path / "out").exists()
