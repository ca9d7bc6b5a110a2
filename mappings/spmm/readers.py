"""Graph and sparse-matrix readers: Matrix Market, edge lists, METIS ``.graph``, scipy ``.npz``.

Every reader returns a square ``scipy.sparse.csr_matrix`` (float64, duplicates summed) and
raises :class:`GraphError` (a :class:`~tandem.errors.UserError`) naming the file and, for text
formats, the line: malformed lines, indices out of range, NaN or infinite values, empty graphs.
Text files may be gzip-compressed (``.gz``). Parsing is vectorized: the whole data section is
split once and converted by numpy; lines are only walked one by one to name a bad line.
"""

import gzip
import re
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from tandem.errors import UserError

__all__ = [
    "FORMATS",
    "GraphError",
    "read_edge_list",
    "read_graph",
    "read_metis",
    "read_mtx",
    "read_npz",
]

FORMATS = ("mtx", "edges", "metis", "npz")


class GraphError(UserError):
    """A graph file could not be read; the message names the file and the line."""


def _fail(path, line, message) -> GraphError:
    where = f"{path}:{line}" if line is not None else f"{path}"
    return GraphError(f"{where}: {message}")


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GraphError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise GraphError(f"{path}: broken gzip data ({exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise _fail(path, line, "not a text file (invalid UTF-8)") from None


def _detect(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = name.rsplit(".", 1)[-1] if "." in name else ""
    if suffix == "mtx":
        return "mtx"
    if suffix == "npz":
        return "npz"
    if suffix in ("graph", "mgraph", "metis"):
        return "metis"
    return "edges"


def read_graph(path, fmt: str | None = None) -> sp.csr_matrix:
    """Read a graph or sparse matrix; ``fmt`` is one of :data:`FORMATS` or None (by suffix).

    Suffixes: ``.mtx`` Matrix Market, ``.npz`` scipy sparse, ``.graph``/``.mgraph``/``.metis``
    METIS, anything else an edge list (optionally ``.gz`` on text formats).
    """
    path = Path(path)
    if fmt is None:
        fmt = _detect(path)
    readers = {"mtx": read_mtx, "edges": read_edge_list, "metis": read_metis, "npz": read_npz}
    if fmt not in readers:
        raise GraphError(f"unknown graph format {fmt!r}; known: {', '.join(FORMATS)}")
    return readers[fmt](path)


def _data_lines(text: str, comment: str, start: int = 0):
    """(line numbers, line strings) of the non-blank, non-comment lines from index ``start``."""
    lines = text.splitlines()
    numbers, kept = [], []
    for number in range(start, len(lines)):
        stripped = lines[number].strip()
        if stripped and not stripped.startswith(comment):
            numbers.append(number + 1)
            kept.append(stripped)
    return numbers, kept


def _numbers(path, numbers, lines, dtype, what: str) -> np.ndarray:
    """All tokens of ``lines`` as ``dtype``; a bad token is reported with its line."""
    tokens = " ".join(lines).split()
    try:
        return np.array(tokens, dtype=dtype)
    except ValueError:
        for number, line in zip(numbers, lines):
            for token in line.split():
                try:
                    np.array(token, dtype=dtype)
                except ValueError:
                    raise _fail(path, number, f"{what} {token!r} is not a number") from None
        raise


def _check_finite(path, values, line_of) -> None:
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise _fail(path, line_of(bad[0]), f"value {float(values[bad[0]])!r} is not finite")


def _check_range(path, index, n, line_of, what, base) -> None:
    bad = np.flatnonzero((index < base) | (index >= n + base))
    if bad.size:
        raise _fail(
            path,
            line_of(bad[0]),
            f"{what} index {int(index[bad[0]])} out of range {base}..{n + base - 1}",
        )


def _square(path, rows, cols, values, n) -> sp.csr_matrix:
    if n == 0:
        raise _fail(path, None, "empty graph (no nodes)")
    matrix = sp.csr_matrix((values, (rows, cols)), shape=(n, n), dtype=np.float64)
    matrix.sum_duplicates()
    return matrix


_MM_HEADER = re.compile(r"%%matrixmarket\s+matrix\s+(\w+)\s+(\w+)\s+(\w+)\s*$", re.IGNORECASE)


def read_mtx(path) -> sp.csr_matrix:
    """Matrix Market coordinate file (real, integer or pattern; general/symmetric/skew)."""
    path = Path(path)
    text = _read_text(path)
    lines = text.splitlines()
    if not lines:
        raise _fail(path, None, "empty file")
    header = _MM_HEADER.match(lines[0].strip())
    if not header:
        raise _fail(path, 1, "not a Matrix Market file (expected '%%MatrixMarket matrix ...')")
    layout, field, symmetry = (g.lower() for g in header.groups())
    if layout != "coordinate":
        raise _fail(path, 1, f"only the 'coordinate' layout is supported, not {layout!r}")
    if field not in ("real", "integer", "pattern", "double"):
        raise _fail(path, 1, f"field {field!r} is not supported (real, integer or pattern)")
    if symmetry not in ("general", "symmetric", "skew-symmetric"):
        raise _fail(path, 1, f"symmetry {symmetry!r} is not supported")
    numbers, data = _data_lines(text, "%", 1)
    if not data:
        raise _fail(path, len(lines), "missing size line")
    size = data[0].split()
    if len(size) != 3 or not all(s.isdigit() for s in size):
        raise _fail(path, numbers[0], f"size line must be 'rows cols entries', not {data[0]!r}")
    n_rows, n_cols, entries = (int(s) for s in size)
    if n_rows != n_cols:
        raise _fail(path, numbers[0], f"adjacency must be square, not {n_rows} x {n_cols}")
    if n_rows == 0 or entries == 0:
        raise _fail(path, numbers[0], "empty graph (no entries)")
    numbers, data = numbers[1:], data[1:]
    width = 2 if field == "pattern" else 3
    if len(data) != entries:
        raise _fail(
            path,
            numbers[-1] if numbers else len(lines),
            f"size line promises {entries} entries, file has {len(data)}",
        )
    values = _numbers(path, numbers, data, np.float64, "entry")
    if values.size != entries * width:
        for number, line in zip(numbers, data):
            if len(line.split()) != width:
                raise _fail(path, number, f"expected {width} fields, got {line!r}")
    table = values.reshape(entries, width)

    def line_of(k):
        return numbers[k]

    rows_f, cols_f = table[:, 0], table[:, 1]
    for what, idx in (("row", rows_f), ("column", cols_f)):
        frac = np.flatnonzero(idx != np.floor(idx))
        if frac.size:
            raise _fail(path, line_of(frac[0]), f"{what} index {idx[frac[0]]!r} is not an integer")
    rows, cols = rows_f.astype(np.int64), cols_f.astype(np.int64)
    _check_range(path, rows, n_rows, line_of, "row", 1)
    _check_range(path, cols, n_cols, line_of, "column", 1)
    vals = np.ones(entries) if field == "pattern" else table[:, 2]
    _check_finite(path, vals, line_of)
    rows -= 1
    cols -= 1
    if symmetry != "general":
        off = rows != cols
        sign = -1.0 if symmetry == "skew-symmetric" else 1.0
        rows, cols, vals = (
            np.r_[rows, cols[off]],
            np.r_[cols, rows[off]],
            np.r_[vals, sign * vals[off]],
        )
    return _square(path, rows, cols, vals, n_rows)


def read_edge_list(path) -> sp.csr_matrix:
    """Edge list: ``u v`` or ``u v weight`` per line, ``#`` or ``%`` comments, undirected.

    Node names may be integers or any other token (WormNet uses gene names); they are numbered
    in sorted order of their names (numerically when every name is an integer).
    """
    path = Path(path)
    text = _read_text(path)
    numbers, data = _data_lines(text, "#", 0)
    keep = [k for k, line in enumerate(data) if not line.startswith("%")]
    numbers, data = [numbers[k] for k in keep], [data[k] for k in keep]
    if not data:
        raise _fail(path, None, "empty graph (no edges)")
    tokens = " ".join(data).split()
    width = len(data[0].split())
    if width not in (2, 3) or len(tokens) != width * len(data):
        for number, line in zip(numbers, data):
            count = len(line.split())
            if count != width or count not in (2, 3):
                raise _fail(path, number, f"expected 'u v' or 'u v weight', got {line!r}")
    table = np.array(tokens, dtype=object).reshape(len(data), width)

    def line_of(k):
        return numbers[k]

    ends = table[:, :2].astype(str)
    try:
        ids = ends.astype(np.int64)
        if ids.min() < 0:
            bad = int(np.flatnonzero((ids < 0).any(axis=1))[0])
            raise _fail(path, line_of(bad), f"node id {int(ids[bad].min())} is negative")
        names, inverse = np.unique(ids, return_inverse=True)
    except ValueError:
        names, inverse = np.unique(ends, return_inverse=True)
    inverse = inverse.reshape(-1, 2)
    if width == 3:
        weights = _numbers(path, numbers, [str(w) for w in table[:, 2]], np.float64, "weight")
        _check_finite(path, weights, line_of)
    else:
        weights = np.ones(len(data))
    return _dedupe_undirected(path, inverse[:, 0], inverse[:, 1], weights, names.size)


def _dedupe_undirected(path, u, v, weights, n) -> sp.csr_matrix:
    """Symmetric adjacency where ``u v`` and ``v u`` name the same edge (last weight wins)."""
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    key = lo.astype(np.int64) * n + hi
    _, first = np.unique(key[::-1], return_index=True)
    keep = len(key) - 1 - first
    lo, hi, w = lo[keep], hi[keep], weights[keep]
    off = lo != hi
    return _square(path, np.r_[lo, hi[off]], np.r_[hi, lo[off]], np.r_[w, w[off]], n)


def read_metis(path) -> sp.csr_matrix:
    """METIS graph: header ``n m [fmt [ncon]]``, then line i lists vertex i's neighbours.

    ``fmt`` digits say whether lines carry vertex sizes (100), vertex weights (010, ``ncon``
    of them) and edge weights (001). ``%`` lines are comments. Vertex numbers are 1-based.
    """
    path = Path(path)
    text = _read_text(path)
    lines = text.splitlines()
    comment = [line.lstrip().startswith("%") for line in lines]
    content = [k for k, line in enumerate(lines) if not comment[k]]
    # The header is the first non-comment line; blank vertex lines are isolated vertices.
    header_at = next((k for k in content if lines[k].strip()), None)
    if header_at is None:
        raise _fail(path, None, "empty file (no header line)")
    header = lines[header_at].split()
    if not 2 <= len(header) <= 4 or not all(h.isdigit() for h in header):
        raise _fail(
            path, header_at + 1, f"header must be 'n m [fmt [ncon]]', not {lines[header_at]!r}"
        )
    n, m = int(header[0]), int(header[1])
    fmt = header[2].zfill(3) if len(header) > 2 else "000"
    if any(ch not in "01" for ch in fmt) or len(fmt) != 3:
        raise _fail(path, header_at + 1, f"fmt must be three 0/1 digits, not {header[2]!r}")
    ncon = int(header[3]) if len(header) > 3 else 1
    has_size, has_vwgt, has_ewgt = fmt[0] == "1", fmt[1] == "1", fmt[2] == "1"
    skip = int(has_size) + (ncon if has_vwgt else 0)
    if n == 0:
        raise _fail(path, header_at + 1, "empty graph (n = 0)")
    vertex_lines = [k for k in content if k > header_at]
    # Trailing blank lines after the last vertex are not vertices.
    while len(vertex_lines) > n and not lines[vertex_lines[-1]].strip():
        vertex_lines.pop()
    if len(vertex_lines) != n:
        where = vertex_lines[-1] + 1 if vertex_lines else header_at + 1
        raise _fail(path, where, f"header says {n} vertices, file has {len(vertex_lines)} lines")
    texts = [lines[k] for k in vertex_lines]
    counts = np.array([len(t.split()) for t in texts], np.int64)
    numbers_all = np.repeat(np.array(vertex_lines) + 1, counts)
    values = _numbers(path, [k + 1 for k in vertex_lines], texts, np.float64, "entry")
    per_edge = 2 if has_ewgt else 1
    bad = np.flatnonzero((counts < skip) | ((counts - skip) % per_edge != 0))
    if bad.size:
        raise _fail(
            path,
            vertex_lines[bad[0]] + 1,
            f"vertex line has {counts[bad[0]]} fields, which does not fit fmt {fmt}",
        )
    start = np.r_[0, np.cumsum(counts)[:-1]]
    # Position of every field inside its line; the fields past the vertex weights are edges.
    pos = np.arange(values.size) - np.repeat(start, counts)
    is_edge_field = pos >= skip
    edge_pos = pos - skip
    is_neighbor = is_edge_field & (edge_pos % per_edge == 0)
    neighbors = values[is_neighbor]
    owner = np.repeat(np.arange(n), counts)[is_neighbor]
    line_of_nb = numbers_all[is_neighbor]
    frac = np.flatnonzero(neighbors != np.floor(neighbors))
    if frac.size:
        raise _fail(
            path, line_of_nb[frac[0]], f"neighbour {neighbors[frac[0]]!r} is not an integer"
        )
    nb = neighbors.astype(np.int64)
    _check_range(path, nb, n, lambda k: line_of_nb[k], "neighbour", 1)
    if has_ewgt:
        weights = values[is_edge_field & (edge_pos % per_edge == 1)]
        _check_finite(path, weights, lambda k: line_of_nb[k])
    else:
        weights = np.ones(nb.size)
    _check_finite(path, values, lambda k: numbers_all[k])
    if nb.size != 2 * m:
        # METIS counts each undirected edge once and lists it on both ends.
        raise _fail(
            path,
            header_at + 1,
            f"header says {m} edges, the vertex lines list {nb.size} ends ({nb.size / 2:g} edges)",
        )
    return _square(path, owner, nb - 1, weights, n)


def read_npz(path) -> sp.csr_matrix:
    """scipy sparse matrix saved with ``scipy.sparse.save_npz``."""
    path = Path(path)
    try:
        matrix = sp.load_npz(path)
    except FileNotFoundError:
        raise GraphError(f"{path}: cannot read (no such file)") from None
    except (OSError, ValueError, KeyError) as exc:
        raise GraphError(f"{path}: not a scipy sparse .npz file ({exc})") from None
    matrix = sp.csr_matrix(matrix, dtype=np.float64)
    n_rows, n_cols = matrix.shape
    if n_rows != n_cols:
        raise GraphError(f"{path}: adjacency must be square, not {n_rows} x {n_cols}")
    if n_rows == 0:
        raise GraphError(f"{path}: empty graph (no nodes)")
    bad = np.flatnonzero(~np.isfinite(matrix.data))
    if bad.size:
        row = int(np.searchsorted(matrix.indptr, bad[0], side="right") - 1)
        col = int(matrix.indices[bad[0]])
        raise GraphError(
            f"{path}: entry ({row}, {col}) is {float(matrix.data[bad[0]])!r}, not finite"
        )
    matrix.sum_duplicates()
    return matrix
