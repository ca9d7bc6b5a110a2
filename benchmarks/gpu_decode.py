"""The GPU side of decode on a real GPU: step time and the share of the GPU's memory bandwidth.

Run: ``python benchmarks/gpu_decode.py [--quick] [--record FILE]`` on a machine with CUDA;
without one it reports the measurement stored in ``constraints/measured/gpu_decode.yaml``
(``--stored FILE``), and skips where there is none.

Each point builds the runtime's :class:`~tandem.host.system.llama.Llama` at a model's shape
(``constraints/models``; random weights, created on the GPU: timing does not depend on their
values) and times decode steps of a batch at a context, in two modes:

- ``gpu-alone``: the whole step on the GPU, attention included (scaled_dot_product_attention
  over a preallocated KV cache of the context's length; the baseline the performance model
  calls "GPU alone").
- ``gpu-side``: the step as the HPU runtime splits it: the projections, RoPE, the MLP and the
  LM head on the GPU, attention left to the cards (not timed here).

A step's bytes are what it must read: every weight matrix once and, in ``gpu-alone``, every K
and V entry of the batch's context. Printed per point: the median step time of ``--steps``
steps (after warm-up), the bytes over that time, and that rate over the GPU's data-sheet
memory bandwidth (the ``decode efficiency`` the performance model assumes for the GPU). Every
point is timed twice in one run, quiet and beside one CPU-bound process (users share
machines; a decode step at batch 1 is bound by the CPU that launches its kernels), and the
loaded / quiet ratio is printed. PyTorch eager mode, as the runtime runs it: no CUDA graphs,
no fused kernels beyond torch's own.
"""

import argparse
import datetime
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tandem.bench import Figures, Provenance, add_benchmark_options, skip

ROOT = Path(__file__).resolve().parent.parent
STORED = ROOT / "constraints" / "measured" / "gpu_decode.yaml"

#: Data-sheet memory bandwidth of the GPU measured here (not one of constraints/gpus, which
#: hold the others' figures), GB/s, with the source; other GPUs take --peak-gbps.
PEAK_GBPS = {"H200": (4800.0, "NVIDIA H200 Tensor Core GPU data sheet: 4.8 TB/s HBM3e")}
#: The points of the full run: (model, dtype, batch, context). Llama-2-7B at the GPU's own
#: precision, in the HPU paper's batches; SmolLM2-135M in float32, as the runtime decodes it.
FULL_POINTS = [
    *(("llama-2-7b", "bfloat16", b, t) for b in (1, 16, 48) for t in (512, 2048)),
    *(("smollm2-135m", "float32", b, t) for b in (1, 64) for t in (512, 2048)),
]
#: The performance model's GPU decode efficiency (constraints/gpus/a100-80gb.yaml: TensorRT-LLM's
#: published A100 LLaMA-7B decode over the roofline), which a GPU-alone step is shown against.
MODEL_DECODE_EFFICIENCY = 0.78
QUICK_POINTS = [("llama-2-7b", "bfloat16", 16, 2048), ("smollm2-135m", "float32", 64, 2048)]
MODES = ("gpu-alone", "gpu-side")


def _torch():
    import torch

    return torch


def llama_on_gpu(model: str, dtype_name: str, device, seed: int = 0):
    """The runtime's Llama at ``model``'s shape with random weights made on ``device``."""
    from tandem.host.system.llama import Llama
    from tandem.host.system.model import LlamaConfig
    from tandem.host.system.perf import load_model_shape

    torch = _torch()
    shape = load_model_shape(model)
    config = LlamaConfig(
        n_layers=shape.layers,
        dim=shape.hidden,
        n_heads=shape.heads,
        n_kv_heads=shape.kv_heads,
        hidden=shape.intermediate,
        vocab=shape.vocab,
    )
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device=device).manual_seed(seed)

    def tensor(*size, scale=1.0):
        return torch.randn(*size, generator=gen, device=device, dtype=dtype) * scale

    c, kv = config, config.n_kv_heads * config.head_dim
    weights = {
        "token_embd.weight": tensor(c.vocab, c.dim),
        "output_norm.weight": 1 + tensor(c.dim, scale=0.1),
    }
    if not shape.tied_embeddings:
        weights["output.weight"] = tensor(c.vocab, c.dim, scale=c.dim**-0.5)
    for i in range(c.n_layers):
        p = f"blk.{i}."
        for name, (rows, cols) in {
            "attn_q": (c.dim, c.dim),
            "attn_k": (kv, c.dim),
            "attn_v": (kv, c.dim),
            "attn_output": (c.dim, c.dim),
            "ffn_gate": (c.hidden, c.dim),
            "ffn_up": (c.hidden, c.dim),
            "ffn_down": (c.dim, c.hidden),
        }.items():
            weights[p + name + ".weight"] = tensor(rows, cols, scale=cols**-0.5)
        weights[p + "attn_norm.weight"] = 1 + tensor(c.dim, scale=0.1)
        weights[p + "ffn_norm.weight"] = 1 + tensor(c.dim, scale=0.1)
    return Llama(config, weights, device=device, dtype=dtype)


def step_bytes(shape, element_bytes: int, batch: int, context: int, mode: str) -> int:
    """Bytes one decode step of ``shape`` (a :class:`~tandem.host.system.perf.ModelShape`)
    must read: every weight matrix once (of the embedding, the batch's rows; a tied LM head
    reads the whole embedding) and, with attention on the GPU, the batch's K and V."""
    kv = shape.kv_heads * shape.head_dim
    layer = (
        2 * shape.hidden * shape.hidden  # q, o
        + 2 * kv * shape.hidden  # k, v
        + 3 * shape.intermediate * shape.hidden  # gate, up, down
        + 2 * shape.hidden  # the two norms
    )
    total = shape.layers * layer + shape.hidden  # + the output norm
    total += batch * shape.hidden + shape.vocab * shape.hidden  # embedding rows, LM head
    if mode == "gpu-alone":
        total += 2 * shape.layers * batch * context * kv
    return total * element_bytes


class DecodeStep:
    """One decode step of ``batch`` sequences attending over ``context`` tokens, on the GPU's
    Llama; shapes stay fixed from step to step (the new K and V take the cache's last slot), so
    that a step can be captured in a CUDA graph and no step pays for a first-seen shape."""

    def __init__(self, llama, batch: int, context: int, mode: str):
        torch = _torch()
        c = llama.config
        self.llama, self.mode = llama, mode
        self.ids = torch.zeros(batch, dtype=torch.long, device=llama.device)
        self.positions = torch.full_like(self.ids, context - 1)
        self.caches = []
        if mode == "gpu-alone":
            size = (batch, c.n_kv_heads, context, c.head_dim)
            self.caches = [
                (
                    torch.randn(size, device=llama.device, dtype=llama.dtype),
                    torch.randn(size, device=llama.device, dtype=llama.dtype),
                )
                for _ in range(c.n_layers)
            ]
        self.graph = None

    def eager(self):
        """The step as the runtime runs it: one kernel launch after another."""
        torch = _torch()
        m, c = self.llama, self.llama.config
        x = m.embed(self.ids)
        for layer in range(c.n_layers):
            q, k, v = m.attn_in(layer, x, self.positions)
            if self.mode == "gpu-alone":
                keys, values = self.caches[layer]
                keys[:, :, -1] = k
                values[:, :, -1] = v
                o = torch.nn.functional.scaled_dot_product_attention(
                    q[:, :, None], keys, values, enable_gqa=c.gqa_group > 1
                )[:, :, 0]
            else:
                o = q  # the cards' output takes q's place; only its shape matters here
            x = m.attn_out(layer, x, o)
        self.ids.copy_(m.logits(x).argmax(-1))
        self.positions += 1

    def capture(self) -> None:
        """Record :meth:`eager` once in a CUDA graph; :meth:`__call__` then replays it."""
        torch = _torch()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.eager()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.eager()

    def __call__(self):
        if self.graph is None:
            self.eager()
        else:
            self.graph.replay()


def time_steps(step: DecodeStep, steps: int, warmup: int = 3) -> float:
    """Median seconds of ``steps`` steps after ``warmup`` untimed ones (GPU synchronized)."""
    torch = _torch()
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            step()
        for _ in range(steps):
            step.llama.sync()
            start = time.perf_counter()
            step()
            step.llama.sync()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def competitor() -> subprocess.Popen:
    """One CPU-bound process, as a user's second job."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def quiet_and_loaded(step: DecodeStep, steps: int) -> tuple[float, float]:
    """Median step seconds alone, then beside one CPU-bound process."""
    quiet = time_steps(step, steps)
    busy = competitor()
    try:
        loaded = time_steps(step, steps)
    finally:
        busy.kill()
        busy.wait()
    return quiet, loaded


def measure(points, steps: int, peak_gbps: float) -> list[dict]:
    """Time every point in both modes, eager and as a CUDA graph, quiet and loaded: the rows
    of the stored record."""
    from tandem.host.system.perf import load_model_shape

    torch = _torch()
    rows = []
    built = {}
    for model, dtype, batch, context in points:
        key = (model, dtype)
        if key not in built:
            built.clear()
            torch.cuda.empty_cache()
            built[key] = llama_on_gpu(model, dtype, torch.device("cuda"))
        llama = built[key]
        for mode in MODES:
            with torch.inference_mode():
                step = DecodeStep(llama, batch, context, mode)
                eager, eager_loaded = quiet_and_loaded(step, steps)
                step.capture()
                graph, graph_loaded = quiet_and_loaded(step, steps)
            del step
            torch.cuda.empty_cache()
            size = llama.w["token_embd.weight"].element_size()
            moved = step_bytes(load_model_shape(model), size, batch, context, mode)
            row = {
                "model": model,
                "dtype": dtype,
                "batch": batch,
                "context": context,
                "mode": mode,
                "eager_ms": round(eager * 1e3, 4),
                "eager_ms_loaded": round(eager_loaded * 1e3, 4),
                "graph_ms": round(graph * 1e3, 4),
                "graph_ms_loaded": round(graph_loaded * 1e3, 4),
                "bytes": moved,
                "gbps": round(moved / graph / 1e9, 2),
                "of_peak": round(moved / graph / 1e9 / peak_gbps, 4),
            }
            rows.append(row)
            print(_row_line(row), file=sys.stderr, flush=True)
    return rows


def _row_line(r: dict) -> str:
    return (
        f"{r['model']:<13} {r['dtype']:<8} B={r['batch']:<3} T={r['context']:<5} "
        f"{r['mode']:<9} eager {r['eager_ms']:8.3f} ms (loaded {r['eager_ms_loaded']:8.3f}), "
        f"graph {r['graph_ms']:8.3f} ms (loaded {r['graph_ms_loaded']:8.3f}), "
        f"{r['gbps']:8.1f} GB/s, {r['of_peak']:.3f} of peak"
    )


def record(rows: list[dict], peak_gbps: float, peak_source: str, command: str) -> dict:
    """The stored measurement: the rows and what they ran on."""
    torch = _torch()
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "peak_gbps": peak_gbps,
        "peak_source": peak_source,
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
        "command": command,
        "rows": rows,
    }


def figures_of(data: dict, command: str) -> Figures:
    """The stored measurement as figures: each point's share of peak, with its step times."""
    figures = Figures(
        "gpu-decode",
        config={k: data[k] for k in ("gpu", "torch", "cuda", "date", "peak_gbps")},
    )
    for r in data["rows"]:
        what, reference = "GPU-side step of HPU decode", {}
        if r["mode"] == "gpu-alone":
            what = "GPU-alone decode step"
        if r["mode"] == "gpu-alone" and r["model"] == "llama-2-7b":
            reference = {
                "reference": MODEL_DECODE_EFFICIENCY,
                "reference_label": "the perf model's GPU decode efficiency: TensorRT-LLM, "
                "A100, FP16 (another GPU and software stack)",
            }
        figures.add(
            f"{what}: share of memory bandwidth, {r['model']} {r['dtype']}, batch {r['batch']}, "
            f"{r['context']} tokens",
            r["of_peak"],
            design="gpu (PyTorch)",
            note=(
                f"{data['gpu']}, torch {data['torch']}; one step a CUDA graph: {r['graph_ms']:.3f} "
                f"ms quiet, {r['graph_ms_loaded']:.3f} beside a CPU-bound process; eager: "
                f"{r['eager_ms']:.3f} / {r['eager_ms_loaded']:.3f} ms; {r['gbps']:.0f} GB/s "
                f"of {data['peak_gbps']:.0f} ({data['peak_source']}); measured {data['date']}"
            ),
            provenance=Provenance.GPU,
            command=command,
            **reference,
        )
    return figures


def _table(rows: list[dict]) -> str:
    head = (
        f"{'model':<13} {'dtype':<8} {'batch':<5} {'ctx':<5} {'mode':<9} {'eager ms':>9} "
        f"{'loaded':>9} {'graph ms':>9} {'loaded':>9} {'GB/s':>8} {'of peak':>8}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['model']:<13} {r['dtype']:<8} {r['batch']:<5} {r['context']:<5} "
            f"{r['mode']:<9} {r['eager_ms']:9.3f} {r['eager_ms_loaded']:9.3f} "
            f"{r['graph_ms']:9.3f} {r['graph_ms_loaded']:9.3f} "
            f"{r['gbps']:8.1f} {r['of_peak']:8.3f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per point")
    parser.add_argument(
        "--peak-gbps", type=float, help="the GPU's memory bandwidth (default: its data sheet's)"
    )
    parser.add_argument("--record", type=Path, help="write the measurement here (YAML)")
    parser.add_argument(
        "--stored",
        type=Path,
        default=STORED,
        help="without CUDA, report this stored measurement (default: %(default)s)",
    )
    add_benchmark_options(parser, quick="two points: Llama-2-7B batch 16 and SmolLM2 batch 64")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    try:
        torch = _torch()
        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    command = "python benchmarks/gpu_decode.py" + (" --quick" if args.quick else "")
    if not cuda:
        if not args.stored.is_file():
            return skip(f"no CUDA GPU and no stored measurement at {args.stored}")
        data = yaml.safe_load(args.stored.read_text())
        print(f"stored measurement ({args.stored}): {data['gpu']}, {data['date']}")
        print(_table(data["rows"]))
        figures_of(data, data["command"]).write(args.figures)
        return 0
    name = torch.cuda.get_device_name(0)
    known = next((v for k, v in PEAK_GBPS.items() if k in name), None)
    if args.peak_gbps is None and known is None:
        parser.error(f"no data-sheet bandwidth known for {name!r}: give --peak-gbps")
    peak, source = (args.peak_gbps, "--peak-gbps") if args.peak_gbps else known
    rows = measure(QUICK_POINTS if args.quick else FULL_POINTS, args.steps, peak)
    data = record(rows, peak, source, command)
    print(f"{data['gpu']}, torch {data['torch']}, CUDA {data['cuda']}; peak {peak:.0f} GB/s")
    print(_table(rows))
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(yaml.safe_dump(data, sort_keys=False))
    figures_of(data, command).write(args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
