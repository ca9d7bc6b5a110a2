"""Bookkeeping of the dense HPU accuracy measurement (``benchmarks/hpu_accuracy_dense.py``).

On a tiny random Llama (no weights needed): every (sequence, decode step, layer, query head)
is measured exactly once; with nothing quantized the errors are ~0; an error planted at one
(sequence, layer, head, step) is reported there; the HPU run's decomposition adds up.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tandem.host.hpu import HpuParams  # noqa: E402
from tandem.host.system.decode import (  # noqa: E402
    TINY,
    Decoder,
    Llama,
    TorchAttention,
    logit_agreement,
)
from tandem.host.system.model import byte_tokenizer, random_llama  # noqa: E402

from tandem.bench import SKIP_EXIT  # noqa: E402

PARAMS = HpuParams.for_model(TINY, kv_bits=8, mem_data_bits=128, max_seq_len=256)
STEPS = 12


def _load_bench():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "hpu_accuracy_dense.py"
    spec = importlib.util.spec_from_file_location("hpu_accuracy_dense", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    return Llama(TINY, random_llama(TINY, 0), "cpu")


def texts():
    """Two prompts of different lengths and the STEPS + 1 tokens forced after each."""
    ids = byte_tokenizer().encode(bench.load_text("execmodel"))
    return [ids[:9], ids[100:105]], [ids[9 : 10 + STEPS], ids[105 : 106 + STEPS]]


def probed_decode(model, inner, **probe_options):
    prompts, forced = texts()
    probe = bench.DenseProbe(inner, model.config, **probe_options)
    Decoder(model, probe).generate(prompts, STEPS + 1, forced=forced)
    return probe.records, prompts


def test_every_step_layer_and_head_once(tiny):
    prompts, forced = texts()
    probe, got, reference = bench.measure(tiny, prompts, forced, PARAMS)
    records = probe.records
    c = TINY
    expected = {
        (s, len(p) + step, layer, head)
        for s, p in enumerate(prompts)
        for step in range(STEPS)
        for layer in range(c.n_layers)
        for head in range(c.n_heads)
    }
    keys = list(zip(*(records[k].tolist() for k in ("seq", "position", "layer", "head"))))
    assert len(keys) == len(expected) == 2 * STEPS * c.n_layers * c.n_heads
    assert set(keys) == expected
    summary = bench.summarize(records, ["a", "b"])
    assert sorted(summary["per_layer"]) == list(range(c.n_layers))
    assert summary["measurements"] == len(expected)
    assert set(summary["per_text"]) == {"a", "b"}
    # The HPU's error is the runtime's quantization plus a small engine error.
    total, quant, engine = records["total"], records["q, K, V"], records["engine"]
    assert 0 < total.max() < 0.1 and engine.max() < 0.01
    assert np.all(np.abs(total - quant) <= engine + 1e-6)
    # Both decodes kept one row of logits per step and sequence, over the same tokens.
    assert got.logits.shape == reference.logits.shape == (STEPS, 2, c.vocab)
    assert got.tokens == reference.tokens


def test_nothing_quantized_is_exact(tiny):
    # The backend under test is float32 SDPA itself, and the decomposition's K/V/q use 16 bits.
    records, _ = probed_decode(tiny, TorchAttention(TINY), q_bits=16, kv_bits=16)
    assert records["total"].max() < 1e-6
    for name in ("K", "V", "q", "q, K, V", "engine"):
        assert records[name].max() < 1e-3, name
    assert len(records["total"]) == 2 * STEPS * TINY.n_layers * TINY.n_heads


def test_simulated_formats_rank_as_their_precision(tiny):
    # fp16 rows are close to exact; fp8 e4m3 (3 mantissa bits) is coarser than int8 per token.
    errors = {}
    for fmt in ("fp16", "fp8", None):
        records, _ = probed_decode(tiny, TorchAttention(TINY), q_bits=16, kv_bits=8, simulate=fmt)
        errors[fmt] = float(records["q, K, V"].mean())
    assert errors["fp16"] < errors[None] / 20 < errors["fp8"] / 20, errors
    e4m3 = bench._e4m3(np.array([0.0, 1.0, 1.0625, 1.07, 448.0, 1e4, -3e-3, 2.0**-10]))
    assert e4m3.tolist() == [0.0, 1.0, 1.0, 1.125, 448.0, 448.0, -(2.0**-9) * 2, 0.0]
    with pytest.raises(ValueError, match="simulate"):
        bench.DenseProbe(TorchAttention(TINY), TINY, q_bits=16, simulate="fp4")


class _Planted(TorchAttention):
    """Float32 attention with the output of one (sequence, layer, query head, position) off."""

    def __init__(self, config, seq, layer, head, position, error):
        super().__init__(config)
        self.where, self.error = (seq, layer, head, position), error

    def attend(self, layer, seqs, q, k_new, v_new):
        out = super().attend(layer, seqs, q, k_new, v_new)
        seq, at_layer, head, position = self.where
        if layer == at_layer and seq in seqs:
            i = seqs.index(seq)
            if self.k[seq][layer].shape[1] - 1 == position:  # the query's own position
                out[i, head] *= 1 + self.error
        return out


def test_planted_error_is_found_where_it_is(tiny):
    prompts, _ = texts()
    position = len(prompts[1]) + 7
    inner = _Planted(TINY, seq=1, layer=1, head=2, position=position, error=0.05)
    records, _ = probed_decode(tiny, inner, q_bits=16, kv_bits=16)
    summary = bench.summarize(records, ["a", "b"])
    worst = summary["worst"]
    assert (worst["text"], worst["layer"], worst["head"], worst["position"]) == (
        "b",
        1,
        2,
        position,
    )
    assert worst["total"] == pytest.approx(0.05, rel=1e-4)
    assert np.sum(records["total"] > 1e-6) == 1
    assert summary["per_layer"][0]["max"] < 1e-6


def test_agreement_in_chunks_is_over_all_positions():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(10, 3, 50)).astype(np.float32)
    got = ref + rng.normal(scale=0.5, size=ref.shape).astype(np.float32)
    got[4, 1] = np.nan  # a finished sequence's row: left out, as logit_agreement does
    whole = logit_agreement(ref, got)
    assert bench.agreement_in_chunks(ref, got, steps=3) == pytest.approx(whole)


def test_stats():
    s = bench.stats(np.arange(101) / 100)
    assert s == pytest.approx({"mean": 0.5, "p99": 0.99, "max": 1.0})


def test_command_line(tmp_path, capsys, monkeypatch):
    figures = tmp_path / "figures.json"
    out = tmp_path / "out.json"
    args = ["--model", "tiny", "--tokens", "6", "--prompt-tokens", "5", "--texts", "execmodel"]
    assert bench.main([*args, "--figures", str(figures), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "overall: mean" in printed and "top-1 agreement" in printed
    names = {f["name"] for f in json.loads(figures.read_text())["figures"]}
    assert {"mean relative L2 error", "max relative L2 error"} <= names
    data = json.loads(out.read_text())
    assert len(data["records"]["total"]) == 6 * TINY.n_layers * TINY.n_heads
    # Bad flags and texts: one line, exit 2.
    for bad in (["--tokens", "0"], ["--texts", str(tmp_path / "missing.txt")]):
        assert bench.main(["--model", "tiny", *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err
    assert bench.main(["--model", "tiny", "--tokens", "100000"]) == 2
    assert "fewer than" in capsys.readouterr().err
    # Missing weights: a visible skip in the suite, an error by hand.
    import tandem.host.system.model as model

    monkeypatch.setattr(model, "find_model", lambda *a, **k: None)
    assert bench.main(["--figures", str(figures)]) == SKIP_EXIT
    assert "tandem model fetch smollm2-135m" in capsys.readouterr().err
    assert bench.main([]) == 2
