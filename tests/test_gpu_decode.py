"""The GPU-side decode benchmark (benchmarks/gpu_decode.py) and `--torch-device`: what runs
without a GPU (the bytes a step reads, one eager step on the CPU, the stored measurement's
figures, the one-line error for a missing GPU)."""

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from tandem.host.system.perf import load_model_shape

from tandem.bench import Provenance
from tandem.cli import main

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent


def _benchmark():
    spec = importlib.util.spec_from_file_location("gpu_decode", ROOT / "benchmarks/gpu_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _benchmark()


@pytest.fixture(scope="module")
def smollm2(bench):
    return bench.llama_on_gpu("smollm2-135m", "float32", torch.device("cpu"))


def test_step_bytes_are_the_weights_a_step_reads(bench, smollm2):
    """The formula over the shape equals the built model's tensors (tied head: the embedding
    read whole once more; of the embedding itself only the batch's rows), plus the K/V."""
    shape = load_model_shape("smollm2-135m")
    weights = sum(t.numel() for name, t in smollm2.w.items() if name != "token_embd.weight")
    batch, context, c = 3, 40, smollm2.config
    expected = (weights + (batch + c.vocab) * c.dim) * 4
    assert bench.step_bytes(shape, 4, batch, context, "gpu-side") == expected
    kv = 2 * c.n_layers * batch * context * c.n_kv_heads * c.head_dim * 4
    assert bench.step_bytes(shape, 4, batch, context, "gpu-alone") == expected + kv


@pytest.mark.parametrize("mode", ["gpu-alone", "gpu-side"])
def test_eager_step_is_a_decode_step(bench, smollm2, mode):
    """One step of the benchmark on the CPU: next tokens from the LM head, positions moved on,
    and in gpu-alone the new K/V written into the cache's last slot."""
    step = bench.DecodeStep(smollm2, 2, 6, mode)
    before = [k.clone() for k, _ in step.caches]
    with torch.inference_mode():
        step()
    assert step.positions.tolist() == [6, 6]
    assert step.ids.shape == (2,) and int(step.ids.max()) < smollm2.config.vocab
    for old, (new, _) in zip(before, step.caches):
        assert torch.equal(old[:, :, :-1], new[:, :, :-1]) and not torch.equal(old, new)


def test_stored_measurement_is_reported_without_a_gpu(bench, tmp_path, monkeypatch):
    """Without CUDA the script reports the stored record: one figure per row, measured on a
    GPU, each the row's bytes over its CUDA-graph step time and the data-sheet bandwidth, and
    every row's bytes those its shape must read."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    data = yaml.safe_load(bench.STORED.read_text())
    out = tmp_path / "figures.json"
    assert bench.main(["--figures", str(out)]) == 0
    figures = json.loads(out.read_text())["figures"]
    assert len(figures) == len(data["rows"]) > 0
    for row, figure in zip(data["rows"], figures):
        element = {"bfloat16": 2, "float16": 2, "float32": 4}[row["dtype"]]
        shape = load_model_shape(row["model"])
        expected = bench.step_bytes(shape, element, row["batch"], row["context"], row["mode"])
        assert row["bytes"] == expected
        share = row["bytes"] / (row["graph_ms"] * 1e-3) / 1e9 / data["peak_gbps"]
        assert figure["value"] == pytest.approx(share, abs=1e-4)
        assert figure["provenance"] == Provenance.GPU
        assert data["gpu"] in figure["note"]


def test_no_stored_measurement_skips(bench, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--stored", str(tmp_path / "none.yaml")]) == 3
    assert "no CUDA GPU" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_torch_device_cuda_without_a_gpu_is_one_line(capsys):
    argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hi", "--torch-device", "cuda"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU" in err[0]


def test_torch_device_is_in_the_outcome(capsys):
    argv = ["cosim", "decode", "--model", "tiny", "--prompt", "hi", "--tokens", "2"]
    assert main([*argv, "--torch-device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu_side_device"] == "cpu"
