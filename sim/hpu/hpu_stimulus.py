"""Stimulus of the ``hpu`` testbenches (pure numpy; usable outside a simulator): KV tokens and
queries of several kinds, and the partial-mode merge check."""

import numpy as np
from tandem.host.hpu import (
    HpuParams,
    HpuResult,
    merge_partials,
    quantize_rows,
    score_scale,
)

#: Partial-mode check: two slices merged on the host (float64, :func:`merge_partials`) must
#: match the full-mode output within ``MERGE_ABS_LSB`` output LSBs plus ``MERGE_REL`` times
#: the query's largest output magnitude. The two paths round differently (per-slice rescales,
#: the exp2 unit versus an exact float merge, the reciprocal): over 300 random golden-model
#: trials the worst gap was 1.7e-4 of the largest magnitude, so 2**-11 leaves a 3x margin.
MERGE_ABS_LSB = 4
MERGE_REL = 2.0**-11

#: Token kinds of :func:`make_tokens`.
KINDS = ("gauss", "ramp", "extreme")


# --- stimulus (pure numpy; usable outside a simulator) -------------------------------------
def make_tokens(rng, params: HpuParams, count: int, kind: str = "gauss", direction=None, at=0):
    """``(k, k_scale, v, v_scale)`` for ``count`` new tokens (int64 rows, binary16 scales).

    ``gauss`` draws normal rows with a per-token magnitude spread over a factor ~8, so scales
    differ between tokens. ``ramp`` makes keys line up more and more with ``direction`` as the
    position ``at + i`` grows, so a query along ``direction`` grows the running maximum on
    most rows (the rescale path). ``extreme`` adds most negative elements (-128 with int8
    ``kv_bits``), zero and subnormal scales,
    key scales large enough to saturate scores and value scales that saturate the weight.
    """
    d = params.head_dim
    magnitude = np.exp(rng.normal(0.0, 0.7, (count, 1)))
    k_real = rng.standard_normal((count, d)) * magnitude
    v_real = rng.standard_normal((count, d)) * np.exp(rng.normal(0.0, 0.7, (count, 1)))
    if kind == "ramp":
        position = (at + np.arange(count))[:, None] / max(params.max_seq_len, 1)
        k_real = 0.3 * k_real + (0.5 + 6.0 * position) * np.asarray(direction)[None, :]
    k, k_scale = quantize_rows(k_real, params.kv_bits)
    v, v_scale = quantize_rows(v_real, params.kv_bits)
    if kind == "extreme":
        lowest = -(1 << (params.kv_bits - 1))
        k[rng.random(k.shape) < 0.05] = lowest
        v[rng.random(v.shape) < 0.05] = lowest
        for scales, big in ((k_scale, (4.0, 60.0, 1000.0)), (v_scale, (3.0, 8.0, 300.0))):
            pick = rng.random(count)
            scales[pick < 0.05] = 0.0
            scales[(pick >= 0.05) & (pick < 0.1)] = np.float16(6e-8)  # smallest subnormal
            scales[(pick >= 0.1) & (pick < 0.15)] = np.float16(3e-5)  # subnormal
            chosen = (pick >= 0.15) & (pick < 0.25)
            scales[chosen] = rng.choice(big, int(chosen.sum())).astype(np.float16)
    elif kind not in KINDS:
        raise ValueError(f"unknown token kind {kind!r}; choose one of {KINDS}")
    return k, k_scale, v, v_scale


def make_query(rng, params: HpuParams, kind: str = "gauss", direction=None):
    """``(q, c)``: integer queries [gqa_group, head_dim] and their binary16 score scales.

    The temperature (query magnitude) is drawn per query from 0.3 (flat softmax) to 16 (one
    token takes nearly all the weight).
    """
    g, d = params.gqa_group, params.head_dim
    temperature = rng.choice([0.3, 1.0, 4.0, 16.0], size=(g, 1))
    q_real = rng.standard_normal((g, d))
    if kind == "ramp":
        q_real = 0.3 * q_real + np.asarray(direction)[None, :] * np.sqrt(d)
    q, q_scale = quantize_rows(q_real * temperature, params.q_bits)
    if kind == "extreme":
        q[rng.random(q.shape) < 0.05] = -(1 << (params.q_bits - 1))
        q_scale[0] = np.float16(rng.choice([8.0, 0.0, 6e-8]))
    return q, score_scale(q_scale, d)


def merge_error(params: HpuParams, partials, full: HpuResult) -> tuple[float, float]:
    """``(worst error, its allowance)`` in output LSBs of merged partials against full mode."""
    merged = merge_partials(params, partials) * (1 << params.out_frac_bits)
    y = np.asarray(full.y, dtype=np.float64)
    allowance = MERGE_ABS_LSB + MERGE_REL * np.abs(y).max(axis=1, keepdims=True)
    excess = np.abs(merged - y) - allowance
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    return float(np.abs(merged - y)[worst]), float(np.broadcast_to(allowance, y.shape)[worst])
