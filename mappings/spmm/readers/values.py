"""Checks of the numbers a text reader parsed (numbers, finite, indices in range) and the square
matrix they make."""

import numpy as np
import scipy.sparse as sp

from .limits import graph_error, number_text, show


def checked_numbers(path, numbers, lines, dtype, what: str) -> np.ndarray:
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
                    raise graph_error(
                        path, number, f"{what} {show(token)} is not a number"
                    ) from None
        raise


def check_finite(path, values, line_of) -> None:
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise graph_error(path, line_of(bad[0]), f"value {float(values[bad[0]])!r} is not finite")


def check_range(path, index, n, line_of, what, base) -> None:
    bad = np.flatnonzero(~((index >= base) & (index < n + base)))
    if bad.size:
        raise graph_error(
            path,
            line_of(bad[0]),
            f"{what} index {number_text(index[bad[0]])} out of range {base}..{n + base - 1}",
        )


def square_matrix(path, rows, cols, values, n) -> sp.csr_matrix:
    if n == 0:
        raise graph_error(path, None, "empty graph (no nodes)")
    matrix = sp.csr_matrix((values, (rows, cols)), shape=(n, n), dtype=np.float64)
    matrix.sum_duplicates()
    return matrix
