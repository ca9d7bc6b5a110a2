"""Matrix Market (``.mtx``) files: the fast path through ``scipy.io.mmread`` and the walk."""

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .block_checks import layout_ok
from .limits import DEFLATE_RATIO, GraphError, LongLineError, check_size, graph_error, show
from .text import TextBuffer, blocks_or_none, decode_text, map_blocks, read_special_file, walk_lines
from .values import check_finite, check_range, checked_numbers, square_matrix

_MM_HEADER = re.compile(r"%%matrixmarket\s+matrix\s+(\S+)\s+(\S+)\s+(\S+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class _MtxHeader:
    n: int
    entries: int
    field: str
    symmetry: str
    size_line: int
    plain: bool  # written as mmread reads it (exact banner, '%' comments, no blank lines)

    @property
    def width(self) -> int:
        return 2 if self.field == "pattern" else 3


def _header_line(path, text: TextBuffer) -> str | None:
    raw = text.next_line()
    return None if raw is None else decode_text(path, text.lines_read, raw)


def _mtx_header(path, text: TextBuffer) -> _MtxHeader:
    first = _header_line(path, text)
    if first is None:
        raise graph_error(path, None, "empty file")
    header = _MM_HEADER.match(first.strip())
    if not header:
        raise graph_error(
            path, 1, "not a Matrix Market file (expected '%%MatrixMarket matrix ...')"
        )
    layout, field, symmetry = (g.lower() for g in header.groups())
    plain = first == f"%%MatrixMarket matrix {layout} {field} {symmetry}"
    if layout != "coordinate":
        raise graph_error(path, 1, f"only the 'coordinate' layout is supported, not {show(layout)}")
    if field not in ("real", "integer", "pattern", "double"):
        raise graph_error(
            path, 1, f"field {show(field)} is not supported (real, integer or pattern)"
        )
    if symmetry not in ("general", "symmetric", "skew-symmetric"):
        raise graph_error(path, 1, f"symmetry {show(symmetry)} is not supported")
    while True:
        line = _header_line(path, text)
        if line is None:
            raise graph_error(path, text.lines_read, "missing size line")
        plain = plain and (line.startswith("%") or line == line.strip())
        line = line.strip()
        if line and not line.startswith("%"):
            break
    number = text.lines_read
    size = line.split()
    if len(size) != 3 or not all(s.isascii() and s.isdigit() for s in size):
        raise graph_error(path, number, f"size line must be 'rows cols entries', not {show(line)}")
    n_rows, n_cols, entries = (int(s) for s in size)
    if n_rows != n_cols:
        raise graph_error(path, number, f"adjacency must be square, not {n_rows} x {n_cols}")
    if n_rows == 0 or entries == 0:
        raise graph_error(path, number, "empty graph (no entries)")
    head = _MtxHeader(n_rows, entries, field, symmetry, number, plain and field != "double")
    check_size(path, number, n_rows, entries * (1 if symmetry == "general" else 2))
    # An entry takes at least two bytes a field ("1 1\n"), and deflate packs at most 1032
    # bytes into one: a file this short lies (and mmread would allocate for the promise).
    room = text.size * (DEFLATE_RATIO if text.gzip else 1)
    if entries * 2 * head.width - 1 > room:
        kind = "gzip file" if text.gzip else "file"
        raise graph_error(
            path,
            number,
            f"size line promises {entries} entries, more than a {kind} of {text.size} bytes holds",
        )
    return head


class _CheckedBody:
    """A Matrix Market stream for ``scipy.io.mmread``: a canonical header, then the blocks of
    the file's body that pass :func:`layout_ok`; it ends early (and says so) at one that does
    not, or on an I/O error (kept in ``error``: raising into the C++ reader is not safe).

    mmread asks for 1 KiB at a time, so :meth:`read` is kept short."""

    def __init__(self, head: _MtxHeader, blocks):
        field = "pattern" if head.field == "pattern" else "real"  # integers read as float64
        self._buf = (
            f"%%MatrixMarket matrix coordinate {field} {head.symmetry}\n"
            f"{head.n} {head.n} {head.entries}\n"
        ).encode()
        self._pos, self._end = 0, len(self._buf)
        self._blocks, self._width = blocks, head.width
        self.rejected, self.error = False, None

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        pos = self._pos
        if pos < self._end and size > 0:
            self._pos = pos + size
            return self._buf[pos : pos + size]
        return self._next(size)

    def _next(self, size: int) -> bytes:
        if self._pos < self._end:  # read() or read(-1): the rest of the block
            out, self._pos = self._buf[self._pos :], self._end
            return out
        if self._blocks is None:
            return b""
        try:
            block = next(self._blocks, None)
        except GraphError as exc:
            block, self.error = None, exc
        if block is not None and not layout_ok(block, self._width, self._width == 3, False):
            block, self.rejected = None, True
        if block is None:
            self._blocks = None
            return b""
        self._buf, self._pos, self._end = block, 0, len(block)
        return self.read(size)


def _mtx_fast(path: Path, head: _MtxHeader, text: TextBuffer, threads: int = 1):
    """``(rows, cols, values)`` (symmetry expanded) by ``scipy.io.mmread``, or None when any
    block fails the layout checks, mmread refuses the file, or a value is not finite.

    A plain file with a plain header of real or pattern entries is checked first and then
    handed to mmread by name (its C++ reader is faster than a Python stream); anything else
    (gzip, an integer field, which mmread would read as int64, another header) goes through
    :class:`_CheckedBody`.
    """
    from scipy.io import mmread

    by_name = (
        text.regular
        and head.plain
        and head.field in ("real", "pattern")
        and not text.gzip
        and not path.name.lower().endswith((".gz", ".bz2"))
    )
    if by_name:

        def passes(block) -> bool:
            return block is not None and layout_ok(block, head.width, head.width == 3, False)

        if not all(map_blocks(blocks_or_none(text), passes, threads)):
            return None
        body = None
        source = str(path)
    else:
        body = source = _CheckedBody(head, text.blocks())
    try:
        coo = mmread(source)
    except Exception:  # any refusal: the walk names the line (or reads what mmread would not)
        coo = None
    if body is not None:
        if body.error is not None and not isinstance(body.error, LongLineError):
            raise body.error
        if body.rejected or body.error:
            return None
    if coo is None or coo.shape != (head.n, head.n) or not np.isfinite(coo.data).all():
        return None
    return coo.row, coo.col, coo.data


def _mtx_walk(path, head: _MtxHeader, text: TextBuffer):
    """``(rows, cols, values)`` (0-based, file order, symmetry not expanded) by walking the lines
    after the size line; names the first bad line."""
    width, count, last = head.width, 0, None
    parts = []
    for numbers, lines in walk_lines(path, text, "%"):
        if not lines:
            continue
        take = min(len(lines), head.entries - count)
        if take > 0:
            parts.append(_mtx_entries(path, numbers[:take], lines[:take], width, head.n))
        count += len(lines)
        last = numbers[-1]
    if count != head.entries:
        raise graph_error(
            path,
            last if last is not None else text.lines_read,
            f"size line promises {head.entries} entries, file has {count}",
        )
    rows, cols, vals = (np.concatenate(p) for p in zip(*parts))
    return rows, cols, vals


def _mtx_entries(path, numbers, lines, width, n):
    values = checked_numbers(path, numbers, lines, np.float64, "entry")
    if values.size != len(lines) * width:
        for number, line in zip(numbers, lines):
            if len(line.split()) != width:
                raise graph_error(path, number, f"expected {width} fields, got {show(line)}")
    table = values.reshape(len(lines), width)

    def line_of(k):
        return numbers[k]

    rows_f, cols_f = table[:, 0], table[:, 1]
    for what, idx in (("row", rows_f), ("column", cols_f)):
        frac = np.flatnonzero(idx != np.floor(idx))
        if frac.size:
            raise graph_error(
                path, line_of(frac[0]), f"{what} index {float(idx[frac[0]])!r} is not an integer"
            )
    check_range(path, rows_f, n, line_of, "row", 1)
    check_range(path, cols_f, n, line_of, "column", 1)
    vals = np.ones(len(lines)) if width == 2 else table[:, 2].copy()
    check_finite(path, vals, line_of)
    return rows_f.astype(np.int64) - 1, cols_f.astype(np.int64) - 1, vals


def read_mtx(path, *, threads: int = 1) -> sp.csr_matrix:
    """Matrix Market coordinate file (real, integer or pattern; general, symmetric or
    skew-symmetric): ``scipy.io.mmread`` on checked blocks, the line walk for the rest;
    ``threads`` check the blocks of a plain file."""
    path = Path(path)
    data = read_special_file(path)
    with TextBuffer(path, data=data) as text:
        head = _mtx_header(path, text)
        fast = _mtx_fast(path, head, text, threads)
    if fast is not None:
        rows, cols, vals = fast
    else:
        with TextBuffer(path, data=data) as text:
            head = _mtx_header(path, text)
            rows, cols, vals = _mtx_walk(path, head, text)
        if head.symmetry != "general":
            off = rows != cols
            sign = -1.0 if head.symmetry == "skew-symmetric" else 1.0
            rows, cols, vals = (
                np.r_[rows, cols[off]],
                np.r_[cols, rows[off]],
                np.r_[vals, sign * vals[off]],
            )
    return square_matrix(path, rows, cols, vals, head.n)
