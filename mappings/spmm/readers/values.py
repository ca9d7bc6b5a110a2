"""Checks of the numbers a text reader parsed (numbers, finite, indices in range) and the square
matrix they make."""

import numpy as np
import scipy.sparse as sp

from .limits import _fail, _number_text, _show


def _numbers(path, numbers, lines, dtype, what: str) -> np.ndarray:
    """All tokens of ``lines`` as ``dtype``; a bad token is reported with its line."""
    tokens = " ".join(lines).split()
    try:
        return np.array(tokens, dtype=dtype)
    except (ValueError, OverflowError):
        for number, line in zip(numbers, lines):
            for token in line.split():
                try:
                    np.array(token, dtype=dtype)
                except (ValueError, OverflowError):
                    raise _fail(path, number, f"{what} {_show(token)} is not a number") from None
        raise


def _check_finite(path, values, line_of) -> None:
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise _fail(path, line_of(bad[0]), f"value {float(values[bad[0]])!r} is not finite")


def _check_range(path, index, n, line_of, what, base) -> None:
    bad = np.flatnonzero(~((index >= base) & (index < n + base)))
    if bad.size:
        raise _fail(
            path,
            line_of(bad[0]),
            f"{what} index {_number_text(index[bad[0]])} out of range {base}..{n + base - 1}",
        )


def _square(path, rows, cols, values, n) -> sp.csr_matrix:
    if n == 0:
        raise _fail(path, None, "empty graph (no nodes)")
    matrix = sp.csr_matrix((values, (rows, cols)), shape=(n, n), dtype=np.float64)
    matrix.sum_duplicates()
    return matrix
