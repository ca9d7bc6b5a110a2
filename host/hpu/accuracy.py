"""Accuracy of the ``hpu`` engine against float attention (``torch`` SDPA) on real inputs."""

import numpy as np
from tandem.host.hpu import HpuParams, hpu_golden, key_smoothing, quantize_rows, score_scale

__all__ = ["relative_errors"]


def relative_errors(params: HpuParams, q, k, v, smooth: bool = True):
    """Error of one decode step quantized the host's way and run through the golden model.

    Parameters
    ----------
    params
        Engine parameters.
    q, k, v
        Float queries [G, head_dim] and the step's keys and values [n, head_dim].
    smooth
        Apply :func:`tandem.host.hpu.key_smoothing` before quantizing K.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Per query: ``||y - r|| / ||r||`` and ``max|y - r| / max|r|`` against float32
        ``scaled_dot_product_attention`` on the unquantized inputs.
    """
    import torch  # the reference only; the golden model itself is numpy

    # The factors come from the keys in the cache at this step (the host's view). No key
    # outgrows factors taken from the keys themselves, so they flatten fully (strength 1); the
    # runtime, whose factors come from the prefill, keeps headroom (KEY_SMOOTHING_STRENGTH).
    factors = key_smoothing(k, strength=1.0) if smooth else np.ones(k.shape[-1])
    qi, qs = quantize_rows(q * factors, params.q_bits)
    ki, ks = quantize_rows(k / factors, params.kv_bits)
    vi, vs = quantize_rows(v, params.kv_bits)
    y = hpu_golden(params, qi, score_scale(qs, params.head_dim), ki, ks, vi, vs).real(params)
    group = len(q)
    ref = (
        torch.nn.functional.scaled_dot_product_attention(
            torch.tensor(q, dtype=torch.float32)[:, None],
            torch.tensor(k, dtype=torch.float32)[None].expand(group, -1, -1),
            torch.tensor(v, dtype=torch.float32)[None].expand(group, -1, -1),
        )[:, 0]
        .numpy()
        .astype(np.float64)
    )
    l2 = np.linalg.norm(y - ref, axis=-1) / np.linalg.norm(ref, axis=-1)
    elem = np.abs(y - ref).max(axis=-1) / np.abs(ref).max(axis=-1)
    return l2, elem
