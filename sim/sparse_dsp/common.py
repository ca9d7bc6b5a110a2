"""Stimulus shared by the ``sparse-dsp-chain`` and ``sparse-mpe`` testbenches."""

import numpy as np
from tandem.mappings.nm import NMPattern, pack_nm, prune_magnitude

__all__ = ["all_patterns", "make_problem"]


def all_patterns(max_m: int) -> list[NMPattern]:
    """Every N:M pattern with M a power of two up to ``max_m`` and N dividing M (dense too)."""
    out, m = [], 2
    while m <= max_m:
        out += [NMPattern(n, m) for n in range(1, m + 1) if m % n == 0]
        m *= 2
    return out


def make_problem(rng, rows: int, cols: int, pattern: NMPattern, batch: int, kind: str = "random"):
    """A packed N:M matrix and activations with their exact ``W @ x`` (int64).

    ``batch`` 0 gives a vector ``x`` [cols]; otherwise ``x`` is [cols, batch].
    ``kind``: ``"random"`` (uniform int8, -128 included; row pairs share their pattern),
    ``"per-row"`` (each row its own pattern, so matrix-vector rows run alone), ``"extreme"``
    (every weight and activation -128: the largest low-lane sums and the longest carries).
    """
    if kind == "extreme":
        w = np.full((rows, cols), -128, dtype=np.int64)
        x = np.full((cols, max(batch, 1)), -128, dtype=np.int64)
    else:
        w = rng.integers(-128, 128, (rows, cols))
        x = rng.integers(-128, 128, (cols, max(batch, 1)))
    w = prune_magnitude(w, pattern, pair_rows=kind != "per-row").astype(np.int8)
    x = x[:, 0] if batch == 0 else x
    return pack_nm(w, pattern), x, w.astype(np.int64) @ x
