"""N:M patterns, the value/index packer, magnitude pruning, int8 quantization, PyTorch 2:4.

A matrix ``W`` [rows, cols] is N:M sparse when every *group* of M consecutive columns of a row
(columns ``g*M .. g*M + M - 1``) holds at most N non-zeros. Packed, each row keeps N *slots*
per group: slot ``k`` holds a value and the index (``0 .. M-1``) of its column inside group
``k // N``. Slots of a group are in ascending column order; a group with fewer than N non-zeros
fills its spare slots with zeros at the lowest unused indices, so packing is deterministic. The
last group of a row whose ``cols`` is not a multiple of M is padded with zero columns.

This is also PyTorch's 2:4 semi-structured convention (``nn.Linear.weight`` [out, in], groups of
four along ``in``), so :func:`from_torch_semi_structured` and :func:`to_torch_semi_structured`
convert losslessly between the two.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tandem.host.common.fixed import clip_counted

from tandem.errors import UserError

__all__ = [
    "MAX_M",
    "NMError",
    "NMPacked",
    "NMPattern",
    "as_matrix",
    "check_nm",
    "from_torch_semi_structured",
    "pack_nm",
    "prune_magnitude",
    "quantize_per_channel",
    "to_torch_semi_structured",
]


#: Largest M of a pattern: an index within a group is stored as a uint8.
MAX_M = 256


class NMError(UserError):
    """A matrix or a pattern that the packer cannot take (one line, CLI exit status 2)."""


@dataclass(frozen=True)
class NMPattern:
    """An N:M pattern: at most ``n`` non-zeros in every ``m`` consecutive columns of a row.

    ``m`` is a power of two (2 or more), ``n`` divides ``m``; ``n == m`` is dense.
    """

    n: int
    m: int

    def __post_init__(self):
        if not isinstance(self.m, int) or self.m < 2 or self.m & (self.m - 1):
            raise NMError(f"pattern {self.n}:{self.m}: M must be a power of two >= 2")
        if self.m > MAX_M:
            raise NMError(
                f"pattern {self.n}:{self.m}: M must be at most {MAX_M} (indices are uint8)"
            )
        if not isinstance(self.n, int) or self.n < 1 or self.m % self.n:
            raise NMError(f"pattern {self.n}:{self.m}: N must divide M")

    @classmethod
    def parse(cls, text: str) -> "NMPattern":
        """Read ``"N:M"`` (``"2:4"``, ``"16:16"``)."""
        parts = str(text).split(":")
        try:
            n, m = (int(p) for p in parts)
        except ValueError:
            raise NMError(f"pattern {text!r}: expected N:M, for example 2:4") from None
        return cls(n, m)

    def check_supported(self, max_m: int) -> None:
        """Raise :class:`NMError` unless an engine with ``max_m`` can run this pattern."""
        if self.m > max_m:
            raise NMError(f"pattern {self}: M = {self.m} exceeds the engine's max_m {max_m}")

    @property
    def dense(self) -> bool:
        return self.n == self.m

    @property
    def m_log2(self) -> int:
        return self.m.bit_length() - 1

    def __str__(self) -> str:
        return f"{self.n}:{self.m}"


@dataclass
class NMPacked:
    """A packed N:M matrix: value and index streams, row-major, ``groups * n`` slots per row.

    Attributes
    ----------
    values : numpy.ndarray
        int8 [rows, groups * n].
    indices : numpy.ndarray
        uint8 [rows, groups * n], each ``< m``.
    pattern : NMPattern
    shape : tuple of int
        (rows, cols) of the dense matrix.
    scales : numpy.ndarray or None
        float32 [rows]: per-output-channel scales when the matrix came from
        :func:`quantize_per_channel` (``W_float ~= values * scales[:, None]``).
    """

    values: np.ndarray
    indices: np.ndarray
    pattern: NMPattern
    shape: tuple[int, int]
    scales: np.ndarray | None = field(default=None)

    @property
    def groups(self) -> int:
        """Groups per row, including a padded last group."""
        return -(-self.shape[1] // self.pattern.m)

    @property
    def nonzeros(self) -> int:
        return int(np.count_nonzero(self.values))

    def columns(self) -> np.ndarray:
        """Column of every slot [rows, groups * n]."""
        n, m = self.pattern.n, self.pattern.m
        slot = np.arange(self.values.shape[1])
        return (slot // n) * m + self.indices.astype(np.int64)

    def dense_padded(self) -> np.ndarray:
        """The dense int8 matrix with its last group padded: [rows, groups * m]."""
        out = np.zeros((self.shape[0], self.groups * self.pattern.m), dtype=np.int8)
        np.put_along_axis(out, self.columns(), self.values, axis=1)
        return out

    def dense(self) -> np.ndarray:
        """The dense int8 matrix [rows, cols]."""
        return self.dense_padded()[:, : self.shape[1]]

    def save(self, path: str | Path, **extra: np.ndarray) -> None:
        """Write an ``.npz``: values, indices, n, m, shape, scales (if any) and ``extra``."""
        arrays = {
            "values": self.values,
            "indices": self.indices,
            "n": np.int64(self.pattern.n),
            "m": np.int64(self.pattern.m),
            "shape": np.asarray(self.shape, dtype=np.int64),
            **extra,
        }
        if self.scales is not None:
            arrays["scales"] = self.scales
        np.savez(path, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> "NMPacked":
        """Read a file written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as data:
            scales = data["scales"] if "scales" in data.files else None
            return cls(
                values=data["values"],
                indices=data["indices"],
                pattern=NMPattern(int(data["n"]), int(data["m"])),
                shape=tuple(int(s) for s in data["shape"]),
                scales=scales,
            )


def _groups_view(w: np.ndarray, m: int) -> np.ndarray:
    rows, cols = w.shape
    groups = -(-cols // m)
    padded = np.zeros((rows, groups * m), dtype=w.dtype)
    padded[:, :cols] = w
    return padded.reshape(rows, groups, m)


def as_matrix(w, what: str = "weights") -> np.ndarray:
    """``w`` as a 2-D array, checked: at least one row and one column, real numbers (integers
    or finite floats); :class:`NMError` otherwise."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise NMError(f"{what} must be a 2-D matrix, not shape {w.shape}")
    if not w.size:
        raise NMError(f"{what} must have at least one row and one column, not shape {w.shape}")
    if w.dtype.kind not in "iuf":
        raise NMError(f"{what} must be real numbers, not {w.dtype}")
    if w.dtype.kind == "f" and not np.isfinite(w).all():
        raise NMError(f"{what} hold NaN or infinity")
    return w


def check_nm(w, pattern: NMPattern) -> None:
    """Raise :class:`NMError` naming the first group (row-major) with more than N non-zeros."""
    w = as_matrix(w)
    counts = np.count_nonzero(_groups_view(w, pattern.m), axis=-1)
    bad = counts > pattern.n
    if bad.any():
        row, group = np.unravel_index(int(np.argmax(bad)), bad.shape)
        lo = group * pattern.m
        hi = min(lo + pattern.m, w.shape[1]) - 1
        raise NMError(
            f"matrix is not {pattern}: row {row}, columns {lo}..{hi} (group {group}) hold "
            f"{counts[row, group]} non-zeros, the pattern allows {pattern.n}"
        )


def pack_nm(w, pattern: NMPattern, scales=None) -> NMPacked:
    """Pack an int8 N:M matrix into value and index streams.

    Raises
    ------
    NMError
        If ``w`` is not an integer matrix in int8 range, or not N:M (naming the first offending
        group).
    """
    w = as_matrix(w)
    if w.dtype.kind not in "iu":
        raise NMError(f"weights must be int8, not {w.dtype} (quantize them first)")
    if w.size and (w.min() < -128 or w.max() > 127):
        row, col = np.argwhere((w < -128) | (w > 127))[0]
        raise NMError(
            f"weights must be in int8 range -128..127, not {w[row, col]} at [{row}, {col}]"
        )
    check_nm(w, pattern)
    n, m = pattern.n, pattern.m
    g = _groups_view(w.astype(np.int8), m)
    col = np.arange(m)
    # Non-zeros first, then zeros at the lowest columns; keep n of them in column order.
    key = np.where(g != 0, 0, m) + col
    chosen = np.sort(np.argsort(key, axis=-1, kind="stable")[..., :n], axis=-1)
    values = np.take_along_axis(g, chosen, axis=-1)
    rows = w.shape[0]
    return NMPacked(
        values=values.reshape(rows, -1).astype(np.int8),
        indices=chosen.reshape(rows, -1).astype(np.uint8),
        pattern=pattern,
        shape=(rows, w.shape[1]),
        scales=None if scales is None else np.asarray(scales, dtype=np.float32),
    )


def prune_magnitude(
    w, pattern: NMPattern, *, pair_rows: bool = False, importance=None
) -> np.ndarray:
    """Zero all but the N largest-magnitude entries of every group (ties: lower column kept).

    Parameters
    ----------
    w
        Float or integer matrix [rows, cols]; the result has its dtype.
    pair_rows
        Choose one pattern for each pair of rows (2i, 2i+1), by the sum of their magnitudes,
        so that the matrix-vector mode can pack both rows of a pair into one DSP (they share
        the activation, so they must share the index). Each row is still N:M.
    importance
        Optional non-negative weight per column [cols]: entries are ranked by
        ``|w| * importance`` instead of ``|w|``. With the L2 norm of each input channel over
        calibration activations this is the activation-aware criterion of Wanda (Sun et al.,
        ICLR 2024), which keeps weights that meet large activations.
    """
    w = as_matrix(w)
    rows, cols = w.shape
    g = _groups_view(w, pattern.m)
    score = np.abs(g.astype(np.float64))
    if importance is not None:
        imp = np.asarray(importance, dtype=np.float64)
        if imp.shape != (cols,) or not np.isfinite(imp).all() or (imp < 0).any():
            raise NMError(f"importance must be {cols} finite non-negative values per column")
        score = score * _groups_view(imp[None, :], pattern.m)
    if pair_rows:
        pad = np.zeros((rows % 2,) + score.shape[1:])
        pairs = np.concatenate([score, pad]).reshape(-1, 2, *score.shape[1:]).sum(axis=1)
        score = np.repeat(pairs, 2, axis=0)[:rows]
    keep_cols = np.argsort(-score, axis=-1, kind="stable")[..., : pattern.n]
    mask = np.zeros(g.shape, dtype=bool)
    np.put_along_axis(mask, keep_cols, True, axis=-1)
    return np.where(mask, g, 0).reshape(rows, -1)[:, :cols].astype(w.dtype)


def quantize_per_channel(w) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-channel (per-row) int8 quantization of a float matrix.

    ``scale[r] = max|w[r]| / 127`` (1 for an all-zero row) and ``q = clip(round(w / scale),
    -127, 127)`` with round-half-even, so ``w ~= q * scale[:, None]`` and -128 is never used.

    Returns
    -------
    q : numpy.ndarray
        int8 [rows, cols].
    scales : numpy.ndarray
        float32 [rows].
    """
    w = as_matrix(w).astype(np.float64)
    if not np.isfinite(w).all():
        raise NMError("weights hold NaN or infinity")
    peak = np.abs(w).max(axis=1)
    scales = np.where(peak > 0, peak / 127.0, 1.0)
    q, clipped = clip_counted(np.rint(w / scales[:, None]), -127, 127)
    if clipped:  # only where a row's scale underflows to 0 (max|w| below 127 * 2**-1074)
        raise NMError(f"weights: {clipped} values do not fit int8 at their row's scale")
    return q.astype(np.int8), scales.astype(np.float32)


def _require_torch():
    try:
        import torch
        from torch.sparse import _semi_structured_conversions as conv
    except ImportError as exc:  # pragma: no cover - torch is in the dev extra
        raise NMError("PyTorch is needed for the 2:4 semi-structured format") from exc
    return torch, conv


def to_torch_semi_structured(packed: NMPacked):
    """PyTorch's 2:4 semi-structured (CUTLASS) form of a 2:4 matrix: ``(values, meta)``.

    ``values`` is int8 [rows, cols / 2] and ``meta`` the int32 metadata that
    ``torch.sparse.to_sparse_semi_structured`` produces on a GPU; both come from PyTorch's own
    conversion (``sparse_semi_structured_from_dense_cutlass``), which runs on the CPU.
    PyTorch needs rows a multiple of 32 and cols a multiple of 64 for int8.
    """
    if (packed.pattern.n, packed.pattern.m) != (2, 4):
        raise NMError(f"PyTorch semi-structured sparsity is 2:4, not {packed.pattern}")
    rows, cols = packed.shape
    if rows % 32 or cols % 64:
        raise NMError(
            f"PyTorch's int8 2:4 format needs rows % 32 == 0 and cols % 64 == 0, not {rows}x{cols}"
        )
    torch, conv = _require_torch()
    return conv.sparse_semi_structured_from_dense_cutlass(torch.from_numpy(packed.dense()))


def from_torch_semi_structured(values, meta=None) -> NMPacked:
    """Pack a PyTorch 2:4 matrix: either the CUTLASS ``(values, meta)`` pair or a dense tensor.

    A dense tensor is a 2:4-pruned weight as PyTorch's pruning leaves it (for example
    ``torch.ao.pruning.WeightNormSparsifier`` with ``sparse_block_shape=(1, 4)``,
    ``zeros_per_block=2``), int8.
    """
    torch, conv = _require_torch()
    if meta is not None:
        dense = conv.sparse_semi_structured_to_dense_cutlass(values, meta)
    else:
        dense = values
    dense = dense.detach().cpu().numpy() if isinstance(dense, torch.Tensor) else dense
    return pack_nm(np.asarray(dense), NMPattern(2, 4))
