"""Argument checks every device applies to what the host hands it."""

import numpy as np

__all__ = ["int_array"]


def int_array(values, name: str, bits: int, *, ndim: tuple[int, ...] | None = None) -> np.ndarray:
    """``values`` as int64, checked: integer dtype, the signed ``bits``-bit range, ``ndim``.

    Raises ``ValueError`` with one line naming ``name`` when ``values`` are not integers (the
    host must quantize first), have a number of dimensions not in ``ndim`` (any when None) or
    leave the range ``-2**(bits-1) .. 2**(bits-1) - 1``.
    """
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers (quantize first), not {array.dtype}")
    if ndim is not None and array.ndim not in ndim:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndim))} dimensions, not shape {array.shape}"
        )
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if array.size and (array.min() < lo or array.max() > hi):
        raise ValueError(f"{name} must be int{bits} ({lo}..{hi})")
    return array.astype(np.int64)
