"""scipy sparse ``.npz`` files, checked before they are unpacked."""

import zipfile
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import limits
from .limits import GraphError, check_size

_NPZ_MEMBERS = {
    "format.npy",
    "shape.npy",
    "data.npy",
    "indices.npy",
    "indptr.npy",
    "row.npy",
    "col.npy",
    "offsets.npy",
}


def read_npz(path) -> sp.csr_matrix:
    """scipy sparse matrix saved with ``scipy.sparse.save_npz`` (real values; complex ones are
    refused rather than losing their imaginary parts)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except FileNotFoundError:
        raise GraphError(f"{path}: cannot read (no such file)") from None
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise GraphError(f"{path}: not a scipy sparse .npz file ({exc})") from None
    # data, indices and row/col of every non-zero plus indptr: a bound before unpacking.
    if unpacked > 24 * limits.MAX_NONZEROS + 8 * limits.MAX_NODES + (1 << 20):
        raise GraphError(
            f"{path}: {unpacked} bytes unpacked, more than a graph within the limits "
            f"({limits.MAX_NODES} nodes, {limits.MAX_NONZEROS} non-zeros) needs"
        )
    try:
        matrix = sp.load_npz(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise GraphError(f"{path}: not a scipy sparse .npz file ({exc})") from None
    if matrix.ndim != 2:
        raise GraphError(f"{path}: not a matrix ({matrix.ndim} dimensions)")
    n_rows, n_cols = matrix.shape
    if n_rows != n_cols:
        raise GraphError(f"{path}: adjacency must be square, not {n_rows} x {n_cols}")
    if n_rows == 0:
        raise GraphError(f"{path}: empty graph (no nodes)")
    check_size(path, None, n_rows, matrix.nnz)
    kind = matrix.dtype.kind
    if kind == "c":
        raise GraphError(
            f"{path}: complex values ({matrix.dtype}) are not supported: an adjacency is real"
        )
    if kind not in "biuf":
        raise GraphError(f"{path}: values of type {matrix.dtype} are not numbers")
    if matrix.format in ("csr", "csc"):
        try:
            matrix.check_format(full_check=True)
        except ValueError as exc:
            raise GraphError(f"{path}: broken {matrix.format} arrays ({exc})") from None
    matrix = sp.csr_matrix(matrix, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(matrix.data))
    if bad.size:
        row = int(np.searchsorted(matrix.indptr, bad[0], side="right") - 1)
        col = int(matrix.indices[bad[0]])
        raise GraphError(
            f"{path}: entry ({row}, {col}) is {float(matrix.data[bad[0]])!r}, not finite"
        )
    matrix.sum_duplicates()
    return matrix
