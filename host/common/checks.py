"""Argument checks every device applies to what the host hands it.

Each raises ``ValueError`` with one line that names the argument and quotes the bad value, and
returns the value in the form the device goes on with (a Python ``int``, an int64 or float64
array), so a device checks everything first and changes its state only after all checks passed.
"""

import numbers

import numpy as np

__all__ = [
    "flag",
    "instance",
    "int_array",
    "integer",
    "label",
    "positive_int",
    "real_array",
]


def integer(value, name: str, lo: int | None = None, hi: int | None = None, what: str = "") -> int:
    """``value`` as an ``int``, checked: an integer (``int`` or numpy integer, not ``bool``, not
    a float even when integral) in ``lo .. hi`` (either bound None: open); ``what`` follows
    the range in the message (``" (max_seq_len)"``)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if hi is None:
            raise ValueError(f"{name} must be at least {lo}, not {value}")
        if lo is None:
            raise ValueError(f"{name} must be at most {hi}{what}, not {value}")
        raise ValueError(f"{name} must be in {lo}..{hi}{what}, not {value}")
    return value


def positive_int(value, name: str) -> int:
    """``value`` as an ``int`` of at least 1 (see :func:`integer`)."""
    return integer(value, name, lo=1)


def flag(value, name: str) -> bool:
    """``value`` as a ``bool``; only ``True``/``False`` (also numpy's) are flags."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def label(value, name: str = "name") -> str:
    """``value``, checked to be a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, not {value!r}")
    return value


def instance(value, cls: type, name: str):
    """``value``, checked to be a ``cls``."""
    if not isinstance(value, cls):
        raise ValueError(f"{name} must be a {cls.__name__}, not {type(value).__name__}")
    return value


def _array(values, name: str) -> np.ndarray:
    try:
        return np.asarray(values)
    except (ValueError, TypeError) as exc:  # ragged nesting
        raise ValueError(f"{name} must be a rectangular array ({exc})") from None


def int_array(values, name: str, bits: int, *, ndim: tuple[int, ...] | None = None) -> np.ndarray:
    """``values`` as int64, checked: integer dtype, the signed ``bits``-bit range, ``ndim``.

    Raises ``ValueError`` with one line naming ``name`` when ``values`` are not integers (the
    host must quantize first), have a number of dimensions not in ``ndim`` (any when None) or
    leave the range ``-2**(bits-1) .. 2**(bits-1) - 1`` (then quoting the largest or smallest
    value and where it is).
    """
    array = _array(values, name)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers (quantize first), not {array.dtype}")
    if ndim is not None and array.ndim not in ndim:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndim))} dimensions, not shape {array.shape}"
        )
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if array.size and (int(array.min()) < lo or int(array.max()) > hi):
        flat = array.reshape(-1)
        i = int(np.argmax(flat)) if int(array.max()) > hi else int(np.argmin(flat))
        index = ", ".join(str(int(j)) for j in np.unravel_index(i, array.shape))
        where = f" at [{index}]" if array.ndim else ""
        raise ValueError(f"{name} must be int{bits} ({lo}..{hi}), not {flat[i]}{where}")
    return array.astype(np.int64)


def real_array(values, name: str, *, ndim: tuple[int, ...] | None = None) -> np.ndarray:
    """``values`` as float64, checked: real numbers (integer or float dtype; not bool, complex,
    strings or objects), all finite, ``ndim`` dimensions (any when None)."""
    array = _array(values, name)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be real numbers, not {array.dtype}")
    if ndim is not None and array.ndim not in ndim:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndim))} dimensions, not shape {array.shape}"
        )
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite (found NaN or infinity)")
    return array
