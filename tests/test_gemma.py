"""Gemma 3 (host/system/gemma.py): the float model, its tokenizer, its file, and the decode
runtime with attention on the HPU (sliding-window layers as rings on the card).

The tiny random model always runs; the cross-check against Hugging Face's Gemma 3 needs
``transformers`` and the real model's tests need ``tandem model fetch gemma3-270m`` (each is
skipped with the reason otherwise).
"""

import dataclasses
import hashlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tandem.host.hpu import HpuParams  # noqa: E402
from tandem.host.hpu.device import HpuDevice  # noqa: E402
from tandem.host.system.decode import (  # noqa: E402
    Decoder,
    HpuAttention,
    TorchAttention,
    logit_agreement,
)
from tandem.host.system.gemma import (  # noqa: E402
    TINY_GEMMA,
    Gemma,
    GemmaConfig,
    SpmTokenizer,
    load_gemma_gguf,
    random_gemma,
)
from tandem.host.system.model import byte_tokenizer, fetch_model, find_model  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return Gemma(TINY_GEMMA, random_gemma(TINY_GEMMA, 0), "cpu")


def _all_logits(model, ids):
    """Logits of every position of ``ids`` from the prefill's forward pass."""
    hidden = {}
    last = model.attn_out

    def keep(layer, x, o):
        out = hidden["x"] = last(layer, x, o)
        return out

    model.attn_out = keep
    try:
        with torch.no_grad():
            model.prefill(ids)
    finally:
        model.attn_out = last
    return model.logits(hidden["x"])


# --- the float model -----------------------------------------------------------------------
def test_config_layers_slide_and_global():
    c = GemmaConfig(n_layers=18, dim=640, n_heads=4, n_kv_heads=1, head_dim=256, hidden=2048,
                    vocab=10)  # fmt: skip
    assert [i for i in range(18) if c.is_global(i)] == [5, 11, 17]
    assert c.attention_window(0) == 512 and c.attention_window(5) is None and c.gqa_group == 4
    with pytest.raises(ValueError, match="n_kv_heads must divide"):
        dataclasses.replace(c, n_kv_heads=3)


def test_decode_steps_reproduce_the_prefill(tiny):
    """Teacher-forced decode on torch attention (windowed cache) gives the logits of one
    causal forward pass with the sliding-window mask, past the window (30 > 8 positions)."""
    ids = list(range(40, 71))
    full = _all_logits(tiny, ids)
    prompt, forced = ids[:5], [ids[5:]]
    got = Decoder(tiny, TorchAttention(tiny.config)).generate(
        [prompt], len(ids) - 5, forced=forced, keep_logits=True
    )
    # step s feeds ids[4 + s] (position 4 + s): the prefill's logits there
    assert torch.allclose(torch.from_numpy(got.logits[:, 0]), full[5:-1], atol=2e-4)
    # the window matters: without it the same weights predict other logits
    wide = Gemma(dataclasses.replace(tiny.config, window=64), tiny.w, "cpu")
    assert (_all_logits(wide, ids)[10:] - full[10:]).abs().max() > 1.0


def test_matches_hugging_face_gemma3():
    """The same random weights in Hugging Face's Gemma3ForCausalLM (eager attention): logits
    agree over 20 positions, past the 8-position window, with a query_pre_attn_scalar other
    than head_dim and a logit soft cap."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    c = dataclasses.replace(TINY_GEMMA, query_pre_attn_scalar=16.0, final_softcap=5.0)
    hf_config = transformers.Gemma3TextConfig(
        vocab_size=c.vocab, hidden_size=c.dim, intermediate_size=c.hidden,
        num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads,
        num_key_value_heads=c.n_kv_heads, head_dim=c.head_dim, sliding_window=c.window,
        layer_types=["full_attention" if c.is_global(i) else "sliding_attention"
                     for i in range(c.n_layers)],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": c.rope_local_theta},
            "full_attention": {"rope_type": "default", "rope_theta": c.rope_theta},
        },
        query_pre_attn_scalar=int(c.query_pre_attn_scalar), final_logit_softcapping=c.final_softcap,
        attn_logit_softcapping=None, rms_norm_eps=c.eps, tie_word_embeddings=True,
    )  # fmt: skip
    hf_config._attn_implementation = "eager"
    torch.manual_seed(3)
    hf = transformers.Gemma3ForCausalLM(hf_config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 1 / p.shape[-1] ** 0.5))
    sd = {k.removeprefix("model."): v for k, v in hf.state_dict().items()}
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}  # fmt: skip
    w = {
        "token_embd.weight": sd["embed_tokens.weight"],
        "output_norm.weight": sd["norm.weight"] + 1,
    }
    for i in range(c.n_layers):
        for hf_name, name in names.items():
            t = sd[f"layers.{i}.{hf_name}.weight"]
            w[f"blk.{i}.{name}.weight"] = t + 1 if name.endswith("norm") else t  # GGUF: 1 + w
    ids = list(np.random.default_rng(0).integers(0, c.vocab, 20))
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0]
    got = _all_logits(Gemma(c, w, "cpu"), ids)
    assert (got - want).abs().max() < 1e-3 * want.abs().max(), (got - want).abs().max()


# --- the runtime ---------------------------------------------------------------------------
def test_hpu_runtime_keeps_windows_as_rings(tiny):
    """HpuAttention on the golden card against torch attention: a prompt longer than the
    window (the ring filled out of order at start) and one shorter (filled by appends, then
    overwritten from the host). int16 K/V: the logits agree closely; int8 within its error."""
    tok = byte_tokenizer()
    prompts = [tok.encode("a prompt of twenty chars"), tok.encode("abc")]
    steps = 20
    reference = Decoder(tiny, TorchAttention(tiny.config)).generate(
        prompts, steps, keep_logits=True
    )
    for bits, max_error in ((16, 0.05), (8, 2.0)):
        params = HpuParams.for_model(tiny.config, kv_bits=bits, max_seq_len=64)
        attention = HpuAttention(tiny.config, [HpuDevice(params, memory_bytes=1 << 20)])
        got = Decoder(tiny, attention).generate(
            prompts, steps, forced=reference.tokens, keep_logits=True
        )
        report = logit_agreement(reference.logits, got.logits)
        assert report["max_logit_error"] < max_error, (bits, report)
        if bits == 16:
            assert report["agreement"] == 1.0


def test_split_sequence_with_a_ring_is_refused(tiny):
    params = HpuParams.for_model(tiny.config, max_seq_len=64)
    cards = [HpuDevice(params, memory_bytes=1 << 20, name=f"hpu{i}") for i in range(2)]
    attention = HpuAttention(tiny.config, cards, max_slice_tokens=32)
    with pytest.raises(ValueError, match="must lie on one card"):
        Decoder(tiny, attention).generate([list(range(5))], 40)
    assert all(card.free_sequences == card.max_sequences for card in cards)


def test_benchmark_cli_runs_tiny_gemma(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "hpu_accuracy_dense.py"
    spec = importlib.util.spec_from_file_location("hpu_accuracy_dense", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--model", "tiny-gemma", "--tokens", "12", "--prompt-tokens", "10", "--set",
            "kv_bits=16", "--set", "lanes=16"]  # fmt: skip
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "3 layers x 4 query heads (1 KV, head_dim 32)" in out
    assert "top-1 agreement 100.00%" in out


# --- the tokenizer -------------------------------------------------------------------------
def test_spm_tokenizer_merges_by_score_with_byte_fallback():
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    pieces = ["<bos>", "<tag>", "\n\n", "▁", "a", "b", "c", "ab", "bc", "▁ab", "▁abc"]
    scores = [0, 0, 0, -1, -2, -3, -4, -10, -5, -6, -20]
    types = [3, 4, 4] + [1] * 8
    tok = SpmTokenizer(pieces + byte_tokens, scores + [0] * 256, types + [6] * 256,
                       bos_id=0, add_bos=True)  # fmt: skip
    ids = tok.encode("abc ab<tag>é\n\n")
    # "bc" (score -5) merges before "ab" (-10): a|bc; then "▁"+"ab" -> "▁ab"; é is two bytes
    assert [tok.tokens[i] for i in ids] == [
        "<bos>", "a", "bc", "▁ab", "<tag>", "<0xC3>", "<0xA9>", "\n\n"
    ]  # fmt: skip
    assert tok.decode(ids) == "<bos>abc ab<tag>é\n\n"
    assert tok.decode(ids, skip_special=True) == "abc ab<tag>é\n\n"


# --- the model file ------------------------------------------------------------------------
def test_fetch_joins_installed_chunks_and_checks_sha256(tmp_path, monkeypatch):
    from tandem.host.system import model

    data = b"GGUF" + bytes(range(200))
    site = tmp_path / "site"
    for i, start in enumerate((0, 90, 150)):
        pkg = site / f"fake_gem_part{i + 1}" / "data"
        pkg.mkdir(parents=True)
        (pkg.parent / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
        (pkg / f"Fake.gguf.part{i:02d}").write_bytes(data[start : (90, 150, None)[i]])
    monkeypatch.syspath_prepend(str(site))
    digest = hashlib.sha256(data).hexdigest()
    source = model._ModelSource("Fake.gguf", "fake-gem", "fake_gem", parts=3, sha256=digest)
    monkeypatch.setitem(model.MODELS, "fake-gem", source)
    assert find_model("fake-gem", tmp_path / "cache") is None  # chunks are not a file
    path = fetch_model("fake-gem", tmp_path / "cache", log=lambda *a: None)
    assert path.read_bytes() == data and find_model("fake-gem", tmp_path / "cache") == path
    monkeypatch.setitem(model.MODELS, "bad", dataclasses.replace(source, sha256="0" * 64))
    with pytest.raises(model.ModelError, match="sha256"):
        fetch_model("bad", tmp_path / "other", log=lambda *a: None)
    assert not (tmp_path / "other" / "Fake.gguf").exists()


def gemma_path():
    path = find_model("gemma3-270m")
    if path is None:
        pytest.skip("Gemma 3 270M is not fetched (tandem model fetch gemma3-270m)")
    return path


@pytest.fixture(scope="module")
def gemma270m():
    config, weights, tokenizer = load_gemma_gguf(gemma_path())
    return Gemma(config, weights, "cpu"), tokenizer


def test_real_gemma_config_matches_the_published_one(gemma270m):
    model, tokenizer = gemma270m
    c = model.config
    assert (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.hidden, c.vocab) == (
        18, 640, 4, 1, 256, 2048, 262144
    )  # fmt: skip
    assert (c.window, c.rope_theta, c.rope_local_theta, c.query_pre_attn_scalar) == (
        512, 1e6, 1e4, 256.0
    )  # fmt: skip
    assert c.final_softcap is None and math.isclose(c.eps, 1e-6, rel_tol=1e-6)
    ids = tokenizer.encode("Hello world, this is Gemma.")
    assert ids[0] == c.bos_id == 2 and tokenizer.decode(ids[1:]) == "Hello world, this is Gemma."


def test_real_gemma_perplexity_and_continuation(gemma270m):
    """Perplexity of the first 513 tokens of the "Execution model" text (of its first 1057
    tokens: 14.5; of "license"'s: 9.8, docs/hpu.md), and a greedy continuation."""
    from tandem.host.system.texts import load_text

    model, tokenizer = gemma270m
    torch.set_num_threads(1)
    ids = tokenizer.encode(load_text("execmodel"))[:513]
    logits = _all_logits(model, ids)
    nll = torch.nn.functional.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:]))
    assert 5 < math.exp(float(nll)) < 30, math.exp(float(nll))
    prompt = "Once upon a time, there was a little girl who"
    result = Decoder(model, TorchAttention(model.config)).generate([tokenizer.encode(prompt)], 12)
    # greedy: " loved to play with her dolls. She loved to play..."
    assert "play with her dolls" in tokenizer.decode(result.tokens[0])
