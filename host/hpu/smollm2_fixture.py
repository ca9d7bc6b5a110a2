"""Loader for the SmolLM2-135M decode-attention fixture ``tests/data/smollm2_qkv.npz``.

The fixture holds real attention inputs (post-RoPE q and k, and v) captured from a float32
forward pass of SmolLM2-135M-Instruct over 4096 tokens of English text; it is made by
``python tools/hpu_fixture.py`` and described in ``tests/data/README.md``. The decode step
at sequence length n of layer ``layers[i]`` is::

    j = list(q_positions).index(n - 1)
    q[i, :, j]                    # [n_q_heads, head_dim], one query per head
    k[i, :, :n], v[i, :, :n]      # [n_kv_heads, n, head_dim]; q head h reads kv head h // gqa_group

and its reference output is ``torch.nn.functional.scaled_dot_product_attention`` with the default
scale ``1 / sqrt(head_dim)`` and no mask (the single query is the last position).
"""

from pathlib import Path

import numpy as np

__all__ = ["DEFAULT_PATH", "decode_cases", "load_smollm2_qkv"]

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "tests" / "data" / "smollm2_qkv.npz"


def load_smollm2_qkv(path: str | Path | None = None) -> dict[str, np.ndarray]:
    """Load the SmolLM2 q/k/v fixture.

    Parameters
    ----------
    path : str or Path, optional
        The ``.npz`` file. Default: ``tests/data/smollm2_qkv.npz`` in the repository that holds
        this module.

    Returns
    -------
    dict of str to numpy.ndarray
        ``q`` [layers, n_q_heads, len(q_positions), head_dim], ``k`` and ``v``
        [layers, n_kv_heads, n_tokens, head_dim], all float32 (stored as float16, so widening
        is exact); ``q_positions`` and ``layers`` (int64); the 0-d int64 arrays ``head_dim``
        and ``gqa_group``; and the 0-d string arrays ``prompt_source`` and ``model_sha256``
        (``str(d["prompt_source"])`` gives the text).

    Raises
    ------
    FileNotFoundError
        If the file does not exist; ``python tools/hpu_fixture.py`` makes it.
    """
    path = DEFAULT_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such fixture; make it with 'python tools/hpu_fixture.py' "
            "(see tests/data/README.md)"
        )
    with np.load(path, allow_pickle=False) as data:
        return {
            name: data[name].astype(np.float32) if data[name].dtype.kind == "f" else data[name]
            for name in data.files
        }


def decode_cases(fixture: dict, lengths=None):
    """Every decode step of the fixture: ``(layer, kv_head, n, q, k, v)`` as float64.

    ``q`` is [gqa_group, head_dim] (the query heads that share KV head ``kv_head``), ``k`` and
    ``v`` are [n, head_dim]. ``lengths`` restricts n to the given values.
    """
    group = int(fixture["gqa_group"])
    for li, layer in enumerate(fixture["layers"].tolist()):
        for kv in range(fixture["k"].shape[1]):
            for j, position in enumerate(fixture["q_positions"].tolist()):
                n = position + 1
                if lengths is not None and n not in lengths:
                    continue
                yield (
                    layer,
                    kv,
                    n,
                    fixture["q"][li, kv * group : (kv + 1) * group, j].astype(np.float64),
                    fixture["k"][li, kv, :n].astype(np.float64),
                    fixture["v"][li, kv, :n].astype(np.float64),
                )
