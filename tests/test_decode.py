"""Decode runtime: tokenizer, Llama forward, HPU attention vs torch, placement, timeline, CLI.

Runtime tests use a tiny random Llama (same code path as SmolLM2); the real-model test runs
only where the GGUF file is found (``tandem model fetch smollm2-135m``).
"""

import itertools
import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tandem.host.common.errors import CapacityError  # noqa: E402
from tandem.host.hpu import HpuParams  # noqa: E402
from tandem.host.hpu.device import HpuDevice  # noqa: E402
from tandem.host.system.decode import (  # noqa: E402
    TINY,
    Decoder,
    HpuAttention,
    Llama,
    TorchAttention,
    chrome_trace,
    logit_agreement,
    schedule,
)
from tandem.host.system.model import (  # noqa: E402
    MODELS,
    ModelError,
    Tokenizer,
    byte_tokenizer,
    fetch_model,
    find_model,
    load_gguf,
    random_llama,
)

from tandem.cli import main  # noqa: E402

PARAMS = HpuParams.for_model(TINY, kv_bits=8, mem_data_bits=128, max_seq_len=256)


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny matrices on a shared machine: torch's thread pool costs far more than it saves.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    return Llama(TINY, random_llama(TINY, 0), "cpu")


def prompts():
    tok = byte_tokenizer()
    return [tok.encode("hello world"), tok.encode("attention on cards"), tok.encode("abc")]


def devices(n=1, memory=1 << 20):
    return [HpuDevice(PARAMS, memory_bytes=memory, name=f"hpu{i}") for i in range(n)]


# --- tokenizer -----------------------------------------------------------------------------
def test_byte_tokenizer_round_trip():
    tok = byte_tokenizer()
    text = "héllo, wörld 123 \n\t~"
    ids = tok.encode(text)
    assert len(ids) == len(text.encode("utf-8"))
    assert tok.decode(ids) == text


def test_bpe_merges_and_special_tokens():
    plain = byte_tokenizer()
    chars = [plain.byte_char[b] for b in range(256)]
    merges = ["h e", "l l", "he ll", "hell o", "Ġ w"]
    tokens = chars + ["he", "ll", "hell", "hello", "Ġw", "<|im_start|>"]
    types = [1] * (len(tokens) - 1) + [3]
    tok = Tokenizer(tokens, merges, types)
    ids = tok.encode("<|im_start|>hello world12")
    assert ids[:2] == [tokens.index("<|im_start|>"), tokens.index("hello")]
    assert ids[2] == tokens.index("Ġw")  # the space is part of the next word (GPT-2 split)
    assert ids[-2:] == [tokens.index("1"), tokens.index("2")]  # digits one by one
    assert tok.decode(ids) == "<|im_start|>hello world12"
    assert tok.decode(ids, skip_special=True) == "hello world12"


# --- GPU side ------------------------------------------------------------------------------
def test_decode_steps_match_full_forward(tiny):
    """Prefill + KV-cached decode steps give the logits of one causal pass over all tokens."""
    ids = prompts()[0]
    result = Decoder(tiny, TorchAttention(TINY)).generate([ids], 5, keep_logits=True)
    full = ids + result.tokens[0][:-1]
    with torch.no_grad():
        for step in range(1, 5):
            logits, _, _ = tiny.prefill(full[: len(ids) + step])
            np.testing.assert_allclose(result.logits[step - 1, 0], logits, rtol=1e-4, atol=1e-3)


# --- HPU attention -------------------------------------------------------------------------
def test_hpu_attention_matches_torch(tiny):
    ps = prompts()
    reference = Decoder(tiny, TorchAttention(TINY)).generate(ps, 10, keep_logits=True)
    att = HpuAttention(TINY, devices())
    got = Decoder(tiny, att).generate(ps, 10, keep_logits=True, forced=reference.tokens)
    report = logit_agreement(reference.logits, got.logits)
    assert report["positions"] == 9 * 3
    assert report["agreement"] >= 0.95, report
    assert report["mean_kl"] < 1e-2, report
    assert got.tokens == reference.tokens  # forced
    # Every layer's attention of every step ran on the card: one batch per layer and
    # sub-batch per step, cycles recorded for each.
    hpu_tasks = [t for t in got.tasks if t["kind"] == "hpu"]
    assert len(hpu_tasks) == 9 * 2 * TINY.n_layers
    assert all(t["cycles"]["hpu0"] > 0 for t in hpu_tasks)
    assert att.devices[0].free_bytes == att.devices[0].capacity_bytes  # freed at the end


def test_int16_kv_format_brings_hpu_attention_closer_to_torch(tiny):
    """The runtime quantizes K and V to the card's ``kv_bits``: int16 rows cut the logits'
    divergence from float attention well below int8's, on the same forced tokens."""
    ps = prompts()
    reference = Decoder(tiny, TorchAttention(TINY)).generate(ps, 8, keep_logits=True)
    kl = {}
    for bits in (8, 16):
        params = HpuParams.for_model(TINY, kv_bits=bits, mem_data_bits=128, max_seq_len=256)
        assert params.lanes == 128 // bits
        att = HpuAttention(TINY, [HpuDevice(params, memory_bytes=1 << 20)])
        got = Decoder(tiny, att).generate(ps, 8, keep_logits=True, forced=reference.tokens)
        kl[bits] = logit_agreement(reference.logits, got.logits)["mean_kl"]
    assert kl[16] < kl[8] / 4, kl


def test_split_sequences_merge_partials(tiny):
    """Sequences split over cards in 8-token slices give the same tokens as one card."""
    ps = prompts()
    one = Decoder(tiny, HpuAttention(TINY, devices())).generate(ps, 8, keep_logits=True)
    cards = devices(3)
    split = HpuAttention(TINY, cards, max_slice_tokens=8)
    got = Decoder(tiny, split).generate(ps, 8, keep_logits=True, forced=one.tokens)
    report = logit_agreement(one.logits, got.logits)
    assert report["agreement"] == 1.0, report
    assert report["max_logit_error"] < 0.5, report
    assert all(c.calls > 0 for c in cards)  # every card served slices


def test_placement_by_free_capacity(tiny):
    p = PARAMS
    heads = TINY.n_layers * TINY.n_kv_heads
    big, small = devices(1, memory=8 * heads * p.layout.page_bytes)[0], None
    small = HpuDevice(p, memory_bytes=4 * heads * p.layout.page_bytes, name="hpu1")
    att = HpuAttention(TINY, [small, big])
    keys = [torch.zeros(TINY.n_kv_heads, 20, TINY.head_dim)] * TINY.n_layers
    att.start(0, keys, keys, 64)  # 2 pages: to the card with more room
    assert att.seqs[0].slices[0].device == 1
    att.start(1, keys, keys, 64)  # now 6 free pages on big, 4 on small: big again
    att.start(2, keys, keys, 64)  # 4 and 4: the first
    assert [att.seqs[s].slices[0].device for s in (1, 2)] == [1, 0]
    att.start(3, keys, keys, 160)  # 5 pages: 4 free on big, 2 on small: split 4 + 1
    assert [(sl.device, sl.capacity) for sl in att.seqs[3].slices] == [(1, 128), (0, 32)]
    free_small = small.free_bytes
    with pytest.raises(CapacityError):
        att.start(4, keys, keys, 64)  # 1 page left anywhere
    assert small.free_bytes == free_small  # the slice taken before the failure is given back
    for s in range(4):
        att.finish(s)
    assert big.free_bytes == big.capacity_bytes and small.free_bytes == small.capacity_bytes


# --- timeline ------------------------------------------------------------------------------
def synthetic_tasks(layers=3, steps=2, gpu_s=1e-5, hpu_cycles=2000):
    tasks = []
    for step in range(1, steps + 1):
        for sb in (0, 1):
            for layer in range(layers):
                tasks.append(
                    dict(
                        step=step,
                        subbatch=sb,
                        layer=layer,
                        kind="gpu",
                        seconds=gpu_s,
                        sequences=1,
                        cycles={},
                    )
                )
                tasks.append(
                    dict(
                        step=step,
                        subbatch=sb,
                        layer=layer,
                        kind="hpu",
                        seconds=0.0,
                        sequences=1,
                        cycles={"hpu0": hpu_cycles},
                    )
                )
            tasks.append(
                dict(
                    step=step,
                    subbatch=sb,
                    layer=layers,
                    kind="gpu",
                    seconds=gpu_s,
                    sequences=1,
                    cycles={},
                )
            )
    return tasks


def test_schedule_ping_pong(tmp_path):
    tasks = synthetic_tasks()  # 2000 cycles at 200 MHz = 10 us = the GPU work
    events = schedule(tasks, 200.0)
    serial = schedule(tasks, 200.0, overlap=False)
    span = max(e["end_s"] for e in events)
    span_serial = max(e["end_s"] for e in serial)
    assert span_serial == pytest.approx(sum(1e-5 for _ in tasks))
    assert span < 0.6 * span_serial  # GPU and card overlap nearly all the time
    for track in ("gpu", "hpu0"):
        spans = sorted((e["start_s"], e["end_s"]) for e in events if e["track"] == track)
        assert all(a[1] <= b[0] + 1e-12 for a, b in itertools.pairwise(spans))  # one at a time
    # Within a sub-batch the chain order holds: attention after its GPU work.
    for sb in (0, 1):
        chain = [e for e in events if e["subbatch"] == sb]
        chain.sort(key=lambda e: (e["step"], e["layer"], e["kind"] == "hpu"))
        assert all(a["end_s"] <= b["start_s"] + 1e-12 for a, b in itertools.pairwise(chain))
    path = chrome_trace(events, tmp_path / "t.json")
    data = json.loads(path.read_text())
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(events)
    names = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"GPU", "HPU hpu0"}


# --- command line --------------------------------------------------------------------------
def test_cli_decode_tiny(tmp_path, capsys):
    trace = tmp_path / "trace.json"
    argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hi", "--prompt", "cards"]
    status = main(argv + ["--tokens", "4", "--hpus", "2", "--trace", str(trace), "--compare"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "tokens/s of the simulation" in out
    assert "step   1: modelled cycles hpu0" in out
    assert "top-1 agreement" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["tid"] for e in events if e["ph"] == "X"} == {0, 1, 2}  # GPU and two cards


def test_cli_decode_json_is_the_outcome_as_data(capsys):
    argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hi", "--prompt", "cards"]
    assert main([*argv, "--tokens", "4", "--hpus", "2", "--json", "--compare"]) == 0
    data = json.loads(capsys.readouterr().out)  # nothing but the JSON on stdout
    assert [s["prompt"] for s in data["sequences"]] == ["hi", "cards"]
    assert all(len(s["tokens"]) == 4 for s in data["sequences"])
    assert data["decode_steps"] == len(data["step_cycles"]) == 3
    assert set(data["step_cycles"][0]) == {"hpu0", "hpu1"} and data["tokens_per_s"] > 0
    assert data["saturations"] == {} and 0 <= data["compare"]["agreement"] <= 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tokens", "0"], "--tokens must be at least 1"),
        (["--trace", "/no/such/dir/t.json"], "does not exist"),
        (["--set", "lanes=7"], "lanes"),
        (["--hpu-memory-mib", "0.01"], "HPU memory"),
        (["--kv-bits", "16", "--set", "lanes=32"], "kv_bits * lanes"),
    ],
)
def test_cli_decode_errors(extra, message, capsys):
    argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hi", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_cli_decode_on_hpu_cards(capsys):
    """``--engines 2``: each card an hpu-card of two engines. The same tokens as one engine per
    card (every engine computes what a lone engine does), the card's cycles (dispatcher, HBM
    model), and a card that cannot be built is one line."""
    argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hi", "--prompt", "cards"]
    argv += ["--tokens", "4", "--hpus", "2", "--json"]
    runs = {}
    for engines in (0, 2):
        assert main([*argv, "--engines", str(engines)]) == 0
        runs[engines] = json.loads(capsys.readouterr().out)
    assert [s["tokens"] for s in runs[2]["sequences"]] == [
        s["tokens"] for s in runs[0]["sequences"]
    ]
    assert runs[2]["engines_per_card"] == 2 and runs[2]["card_design"] == "hpu-card"
    assert runs[2]["step_cycles"] != runs[0]["step_cycles"]
    for extra, message in (
        (["--engines", "3"], "channels must be a multiple of 2 * engines"),
        (["--engines", "2", "--placement", "contiguous"], "--engines places KV by channel"),
        (["--engines", "2", "--backend", "rtl", "--harness", "native"], "not --harness native"),
    ):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_cli_decode_int16_kv(capsys):
    """``--kv-bits 16`` reaches the cards: int16 K and V on the same ports with half the lanes.
    The tiny model's head_dim 32 fills an int16 row's 64 bytes but only half an int8 one's
    (padding), so its rows take as many beats, and its queries (padded to the row) fewer."""
    argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hi", "--tokens", "3", "--json"]
    runs = {
        "int8": ["--kv-bits", "8"],
        "int16": ["--kv-bits", "16"],
        "int16 by --set": ["--set", "kv_bits=16", "--set", "lanes=16"],
    }
    cycles, tokens = {}, {}
    for name, extra in runs.items():
        assert main([*argv, *extra]) == 0
        data = json.loads(capsys.readouterr().out)
        cycles[name] = [step["hpu0"] for step in data["step_cycles"]]
        tokens[name] = data["sequences"][0]["tokens"]
    # The flag is the same engine as the explicit parameters, and not the int8 one.
    assert cycles["int16"] == cycles["int16 by --set"] != cycles["int8"], cycles
    assert tokens["int16"] == tokens["int16 by --set"]


# --- model files ---------------------------------------------------------------------------
@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """An installed-looking package holding a fake GGUF (found, never imported)."""
    pkg = tmp_path / "site" / "fake_smol"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "Fake.gguf").write_bytes(b"GGUF" + bytes(60))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    from tandem.host.system import model

    monkeypatch.setitem(model.MODELS, "fake", model._ModelSource("Fake.gguf", "fake", "fake_smol"))
    return pkg


def test_fetch_from_installed_package(fake_package, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert find_model("fake", cache) == fake_package / "Fake.gguf"
    path = fetch_model("fake", cache)
    assert path == cache / "Fake.gguf" and path.read_bytes()[:4] == b"GGUF"
    assert find_model("fake", cache) == path
    assert "fake_smol" not in sys.modules
    assert main(["model", "fetch", "fake", "--cache-dir", str(cache)]) == 0
    assert "already cached" in capsys.readouterr().out
    assert list(cache.glob(".fetch-*")) == []  # no temporary left behind


def test_model_errors(fake_package, tmp_path, capsys):
    (fake_package / "Fake.gguf").write_bytes(b"NOPE")
    with pytest.raises(ModelError, match="not a GGUF file"):
        fetch_model("fake", tmp_path / "c")
    assert not (tmp_path / "c" / "Fake.gguf").exists()
    with pytest.raises(ModelError, match="not a GGUF"):
        load_gguf(fake_package / "Fake.gguf")
    assert main(["model", "fetch", "nosuch"]) == 2
    assert "unknown model 'nosuch'" in capsys.readouterr().err
    assert main(["cosim", "decode", "--prompt", "x", "--model", str(tmp_path / "x.gguf")]) == 2


# --- the real model ------------------------------------------------------------------------
def smollm2_path():
    path = find_model("smollm2-135m")
    if path is None:
        pytest.skip("SmolLM2-135M GGUF not found (tandem model fetch smollm2-135m)")
    pytest.importorskip("gguf")
    return path


def test_smollm2_hpu_decode():
    """SmolLM2-135M: tokenizer round trip; 6 tokens with HPU attention agree with torch."""
    config, weights, tok = load_gguf(smollm2_path())
    assert (config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim) == (30, 9, 3, 64)
    text = "The quick brown fox jumps over the lazy dog, 42 times."
    assert tok.decode(tok.encode(text)) == text
    assert MODELS["smollm2-135m"].file.endswith(".gguf")
    model = Llama(config, weights, "cpu")
    ps = [tok.chat_prompt("What is the capital of France?")]
    reference = Decoder(model, TorchAttention(config)).generate(ps, 6, keep_logits=True)
    att = HpuAttention(config, [HpuDevice(HpuParams.for_model(config))])
    got = Decoder(model, att).generate(ps, 6, keep_logits=True, forced=reference.tokens)
    report = logit_agreement(reference.logits, got.logits)
    assert report["agreement"] >= 0.8, report
    assert "Paris" in tok.decode(reference.tokens[0])
