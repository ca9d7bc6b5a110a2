"""METIS ``.graph`` files: header, vertex lines, the fast path and the walk."""

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import limits
from .block_checks import NL, SP, TAB, line_skeleton, parse_integers
from .limits import EXACT, MAX_METIS_LINE, check_size, graph_error, show
from .text import TextBuffer, blocks_or_none, decode_text, map_blocks, read_special_file, walk_text
from .values import check_finite, check_range, checked_numbers


def read_metis(path, *, threads: int = 1) -> sp.csr_matrix:
    """METIS graph: header ``n m [fmt [ncon]]``, then line i lists vertex i's neighbours.

    ``fmt`` digits say whether lines carry vertex sizes (100), vertex weights (010, ``ncon``
    of them) and edge weights (001). ``%`` lines are comments. Vertex numbers are 1-based.
    ``threads`` check and parse the blocks.
    """
    path = Path(path)
    data = read_special_file(path)
    with TextBuffer(path, MAX_METIS_LINE, data) as text:
        header_at, n, m, fmt, ncon = _metis_header(path, text)
        lines = _metis_fast(text, threads)
    if lines is None:
        with TextBuffer(path, MAX_METIS_LINE, data) as text:
            _metis_header(path, text)
            lines = _metis_walk(path, text)
    numbers, counts, values = lines
    return _metis_matrix(path, header_at, n, m, fmt, ncon, numbers, counts, values)


def _metis_header(path, text: TextBuffer):
    while True:
        raw = text.next_line()
        if raw is None:
            raise graph_error(path, None, "empty file (no header line)")
        line = decode_text(path, text.lines_read, raw)
        if line.strip() and not line.lstrip().startswith("%"):
            break
    header_at = text.lines_read
    header = line.split()
    if not 2 <= len(header) <= 4 or not all(h.isascii() and h.isdigit() for h in header):
        raise graph_error(path, header_at, f"header must be 'n m [fmt [ncon]]', not {show(line)}")
    n, m = int(header[0]), int(header[1])
    fmt = header[2].zfill(3) if len(header) > 2 else "000"
    if any(ch not in "01" for ch in fmt) or len(fmt) != 3:
        raise graph_error(path, header_at, f"fmt must be three 0/1 digits, not {show(header[2])}")
    ncon = int(header[3]) if len(header) > 3 else 1
    if n == 0:
        raise graph_error(path, header_at, "empty graph (n = 0)")
    check_size(path, header_at, n, 2 * m)
    return header_at, n, m, fmt, ncon


def _metis_fast(text: TextBuffer, threads: int = 1):
    """``(line numbers, fields per line, values)`` of the vertex lines when every block is
    integers and blanks only (no comments), else None."""
    first, numbers, counts, values, total = text.lines_read + 1, [], [], [], 0
    for parsed in map_blocks(blocks_or_none(text), _metis_block, threads):
        if parsed is None:
            return None
        per_line, ints = parsed
        if ints.size and ints.max() >= EXACT:
            return None
        numbers.append(np.arange(first, first + per_line.size, dtype=np.int64))
        counts.append(per_line)
        values.append(ints.astype(np.float64))
        first += per_line.size
        total += ints.size
        _metis_limit(text.path, total)
    return _metis_arrays(numbers, counts, values)


def _metis_block(block: bytes | None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(numbers per line, the numbers)`` of a block of integers and blanks (any number of
    spaces and tabs, blank lines too: a vertex without neighbours), else None."""
    if block is None:
        return None
    found = line_skeleton(block, len(block))
    if found is None:
        return None
    s, g, p, q = found
    nl = s == NL
    if not (nl | (s == SP) | (s == TAB)).all():
        return None
    # A number ends right before each skeleton byte that follows a digit; a line's count is
    # how many of them come up to its end.
    count = np.cumsum(g)
    ends = np.flatnonzero(nl)[1 : None if not block.endswith(b"\n") else -1]
    per_line = np.diff(count[ends], prepend=0)
    token = g[1:]
    values = parse_integers(block, p[1:][token], (p[1:] - q[:-1])[token] - 1)
    return None if values is None else (per_line, values)


def _metis_limit(path, total: int) -> None:
    """A bound on the numbers of a METIS file: edges twice (and weights), vertex weights."""
    limit = 4 * limits.MAX_NONZEROS + 4 * limits.MAX_NODES
    if total > limit:
        raise graph_error(path, None, f"more than {limit} numbers: beyond the limits of the mapper")


def _metis_arrays(numbers, counts, values):
    def cat(parts, dtype):
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    return cat(numbers, np.int64), cat(counts, np.int64), cat(values, np.float64)


def _metis_walk(path, text: TextBuffer):
    """As :func:`_metis_fast`, by walking the lines (comments skipped, blank lines kept)."""
    total, numbers, counts, values = 0, [], [], []
    for first, lines in walk_text(path, text):
        keep = [k for k, line in enumerate(lines) if not line.lstrip().startswith("%")]
        texts = [lines[k] for k in keep]
        line_numbers = [first + k for k in keep]
        values.append(checked_numbers(path, line_numbers, texts, np.float64, "entry"))
        counts.append(np.array([len(t.split()) for t in texts], np.int64))
        numbers.append(np.array(line_numbers, np.int64))
        total += values[-1].size
        _metis_limit(path, total)
    return _metis_arrays(numbers, counts, values)


def _metis_matrix(path, header_at, n, m, fmt, ncon, numbers, counts, values):
    has_size, has_vwgt, has_ewgt = fmt[0] == "1", fmt[1] == "1", fmt[2] == "1"
    skip = int(has_size) + (ncon if has_vwgt else 0)
    # Trailing blank lines after the last vertex are not vertices.
    lines = numbers.size
    while lines > n and counts[lines - 1] == 0:
        lines -= 1
    if lines != n:
        where = int(numbers[lines - 1]) if lines else header_at
        raise graph_error(path, where, f"header says {n} vertices, file has {lines} lines")
    numbers, counts = numbers[:n], counts[:n]
    values = values[: int(counts.sum())]
    per_edge = 2 if has_ewgt else 1
    bad = np.flatnonzero((counts < skip) | ((counts - skip) % per_edge != 0))
    if bad.size:
        raise graph_error(
            path,
            int(numbers[bad[0]]),
            f"vertex line has {counts[bad[0]]} fields, which does not fit fmt {fmt}",
        )
    ends = np.cumsum(counts)

    def line_of_value(k):
        return int(numbers[np.searchsorted(ends, k, side="right")])

    if skip == 0 and per_edge == 1:
        neighbors, nb_counts = values, counts
        weights = None

        def line_of_nb(k):
            return line_of_value(k)

    else:
        start = ends - counts
        # Position of every field inside its line; the fields past the vertex weights are edges.
        pos = np.arange(values.size) - np.repeat(start, counts)
        edge_pos = pos - skip
        is_neighbor = (edge_pos >= 0) & (edge_pos % per_edge == 0)
        neighbors = values[is_neighbor]
        nb_counts = (counts - skip) // per_edge
        weights = values[(edge_pos >= 0) & (edge_pos % per_edge == 1)] if has_ewgt else None
        nb_ends = np.cumsum(nb_counts)

        def line_of_nb(k):
            return int(numbers[np.searchsorted(nb_ends, k, side="right")])

    frac = np.flatnonzero(neighbors != np.floor(neighbors))
    if frac.size:
        raise graph_error(
            path, line_of_nb(frac[0]), f"neighbour {float(neighbors[frac[0]])!r} is not an integer"
        )
    check_range(path, neighbors, n, line_of_nb, "neighbour", 1)
    if weights is not None:
        check_finite(path, weights, line_of_nb)
    check_finite(path, values, line_of_value)
    if neighbors.size != 2 * m:
        # METIS counts each undirected edge once and lists it on both ends.
        raise graph_error(
            path,
            header_at,
            f"header says {m} edges, the vertex lines list {neighbors.size} ends "
            f"({neighbors.size / 2:g} edges)",
        )
    # Rows are the vertex lines in order: the CSR is built directly (the same arrays, row by
    # row, that the COO route gives, so the same sums), without a row index per entry.
    index = np.int32 if n < 2**31 and neighbors.size < 2**31 else np.int64
    indptr = np.zeros(n + 1, index)
    np.cumsum(nb_counts, out=indptr[1:])
    indices = neighbors.astype(index)
    indices -= 1
    data = weights.astype(np.float64) if weights is not None else np.ones(neighbors.size)
    matrix = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    matrix.sum_duplicates()
    return matrix
