"""Float error of the N:M int8 engine on a real layer: what pruning costs, what int8 costs."""

import numpy as np
from tandem.host.sparse_dsp.golden import SparseMpeParams, mpe_golden

from .engine import mpe_streams
from .packer import NMPattern, pack_nm, prune_magnitude, quantize_per_channel

__all__ = ["layer_errors"]


def _relative(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def layer_errors(w, x, pattern: NMPattern, *, pair_rows: bool = False) -> dict:
    """Relative L2 errors of the engine's output for ``W @ X`` with ``W`` pruned and quantized.

    The weights are magnitude-pruned to ``pattern`` and quantized per output channel to int8;
    the activations ``x`` [cols, tokens] per token (symmetric int8). The engine's exact integer
    result (the ``sparse-mpe`` golden model in matrix-matrix mode, checked equal to the int64
    product) is rescaled to float and compared with the float product of the unpruned layer
    (``engine_vs_dense``) and of the pruned float layer (``engine_vs_pruned``: what int8 costs);
    ``pruned_vs_dense`` is what pruning alone costs.
    """
    w = np.asarray(w, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    pruned = prune_magnitude(w, pattern, pair_rows=pair_rows)
    q, w_scale = quantize_per_channel(pruned)
    x_scale = np.abs(x).max(axis=0) / 127
    x_scale[x_scale == 0] = 1
    xq = np.rint(x / x_scale).astype(np.int64)
    batch = xq.shape[1] + xq.shape[1] % 2
    max_k = 1 << max(10, (w.shape[1] - 1).bit_length())
    params = SparseMpeParams(max_k=max_k, max_batch=max(2, batch), max_m=max(16, pattern.m))
    streams = mpe_streams(params, pack_nm(q, pattern), xq, "mm")
    y_int = streams.unpack(mpe_golden(params, streams.cfg, streams.act_beats, streams.w_beats))
    if not np.array_equal(y_int, q.astype(np.int64) @ xq):
        raise AssertionError("engine golden model differs from the int64 product")
    y = y_int * w_scale[:, None].astype(np.float64) * x_scale[None, :]
    return {
        "engine_vs_dense": _relative(y, w @ x),
        "engine_vs_pruned": _relative(y, pruned @ x),
        "pruned_vs_dense": _relative(pruned @ x, w @ x),
    }
