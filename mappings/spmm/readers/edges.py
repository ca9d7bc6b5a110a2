"""Edge lists: integer or named nodes, optionally weighted; the fast path and the walk."""

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import limits
from .block_checks import integer_lines, layout_ok
from .limits import EXACT, INT64_MAX, check_size, graph_error, show
from .text import TextBuffer, blocks_or_none, map_blocks, read_special_file, walk_lines
from .values import check_finite, checked_numbers, square_matrix


def read_edge_list(path, *, threads: int = 1) -> sp.csr_matrix:
    """Edge list: ``u v`` or ``u v weight`` per line, ``#`` or ``%`` comments, undirected.

    Node names may be integers or any other token (WormNet uses gene names); they are numbered
    in sorted order of their names (numerically when every name is an integer, which must then
    be non-negative and fit 64 bits). ``u v`` and ``v u`` are one edge; the last weight wins.
    ``threads`` check and parse the blocks.
    """
    path = Path(path)
    data = read_special_file(path)
    with TextBuffer(path, data=data) as text:
        edges = _edges_fast(path, text, threads)
    if edges is None:
        try:
            with TextBuffer(path, data=data) as text:
                edges = _edges_walk(path, text, names=False)
        except _NamesError:
            with TextBuffer(path, data=data) as text:
                edges = _edges_walk(path, text, names=True)
    u, v, weights, n = edges
    return _dedupe_undirected(path, u, v, weights, n)


def _first_width(text: TextBuffer) -> int:
    """Fields of the first data line, which stays unread (0 when there is none)."""
    text.skip(b"#%")
    return len(text.peek().split())


def _edges_fast(path, text: TextBuffer, threads: int = 1):
    """``(u, v, weights, n)`` with nodes renumbered, or None for the walk."""
    width = _first_width(text)
    if width not in (2, 3):
        return None
    us, vs, ws, count = [], [], [], 0
    for table in map_blocks(blocks_or_none(text), lambda block: _edge_block(block, width), threads):
        if table is None:
            return None
        ends = table[:, :2]
        if width == 3:
            ends = ends.astype(np.int64)
            ws.append(table[:, 2].copy())
        us.append(ends[:, 0].copy())
        vs.append(ends[:, 1].copy())
        count += len(table)
        if count > limits.MAX_NONZEROS:
            check_size(path, None, 0, count)
    if not count:
        return None
    u, v = np.concatenate(us), np.concatenate(vs)
    del us, vs
    weights = np.concatenate(ws) if width == 3 else None
    if weights is not None and not np.isfinite(weights).all():
        return None
    names, u, v = _renumber(u, v)
    check_size(path, None, names, 0)
    return u, v, weights, names


def _edge_block(block: bytes | None, width: int) -> np.ndarray | None:
    """The ``(lines, width)`` table of a block of an edge list (int64 ids, or float64 with the
    weights), or None when the block is not in the fast path's layout."""
    if block is None:
        return None
    if width == 2:
        ends = integer_lines(block, 2, True)
        if ends is None or (ends.size and ends.max() > INT64_MAX):
            return None  # an id beyond 64 bits: the walk names it
        return ends.view(np.int64)
    if not layout_ok(block, 3, True, True):
        return None
    table = np.fromstring(block, np.float64, sep=" ")
    if table.size % 3:
        return None
    table = table.reshape(-1, 3)
    return None if table.size and table[:, :2].max() >= EXACT else table


def _renumber(u: np.ndarray, v: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Non-negative integer names numbered in sorted order: ``(count, u, v)``."""
    top = int(max(u.max(), v.max()))
    if top < 2 * (u.size + v.size) + 1024:
        # Dense ids (the usual case): a table (5 bytes an id) instead of sorting every endpoint.
        present = np.zeros(top + 1, bool)
        present[u] = True
        present[v] = True
        number = np.cumsum(present, dtype=np.int32)  # node numbers fit: n <= 2 * MAX_NONZEROS
        number -= 1
        return int(number[-1]) + 1, number[u], number[v]
    names, inverse = np.unique(np.concatenate([u, v]), return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int32)
    return names.size, inverse[: u.size], inverse[u.size :]


class _NamesError(Exception):
    """A node name that is not an integer: every name is a string (the walk starts again)."""


def _edges_walk(path, text: TextBuffer, names: bool):
    """``(u, v, weights, n)`` by walking the lines; names the first bad line. With ``names``
    False the names must all be integers (else :class:`_NamesError`), kept as int64."""
    width, count, problem = None, 0, None
    ends, weights = [], []
    for numbers, lines in walk_lines(path, text, "#%"):
        if not lines:
            continue
        if width is None:
            width = len(lines[0].split())
        tokens = " ".join(lines).split()
        if width not in (2, 3) or len(tokens) != width * len(lines):
            for number, line in zip(numbers, lines):
                fields = len(line.split())
                if fields != width or fields not in (2, 3):
                    raise graph_error(
                        path, number, f"expected 'u v' or 'u v weight', got {show(line)}"
                    )
        table = np.array(tokens, dtype=object).reshape(len(lines), width)
        del tokens
        if names:
            ends.append(_name_bytes(path, numbers, table[:, :2]))
        else:
            ids, found = _integer_block(path, numbers, table[:, :2])
            problem = problem or found
            ends.append(ids)
        if width == 3:
            w = checked_numbers(path, numbers, [str(t) for t in table[:, 2]], np.float64, "weight")
            check_finite(path, w, lambda k, numbers=numbers: numbers[k])
            weights.append(w)
        count += len(lines)
        if count > limits.MAX_NONZEROS:
            check_size(path, numbers[-1], 0, count)
    if not count:
        raise graph_error(path, None, "empty graph (no edges)")
    if problem is not None:
        raise problem
    if names:
        strings = np.concatenate(ends)
        del ends
        unique, inverse = np.unique(strings, return_inverse=True)
        inverse = inverse.reshape(-1, 2).astype(np.int32)
        n, u, v = unique.size, inverse[:, 0], inverse[:, 1]
    else:
        table = np.concatenate(ends)
        del ends
        n, u, v = _renumber(table[:, 0], table[:, 1])
    check_size(path, None, n, 0)
    return u, v, (np.concatenate(weights) if width == 3 else None), n


_MAX_NAME = 256  # characters of a node name that is not an integer


def _check_names(path, numbers, pairs) -> None:
    """No node name longer than :data:`_MAX_NAME` (a block's names share one item size)."""
    if max(map(len, pairs.flat)) > _MAX_NAME:
        for k, name in enumerate(pairs.flat):
            if len(name) > _MAX_NAME:
                message = f"node name longer than {_MAX_NAME} characters"
                raise graph_error(path, numbers[k // 2], message)


def _name_bytes(path, numbers, pairs) -> np.ndarray:
    """Node names as UTF-8 bytes (which sort by code point, as the strings do)."""
    _check_names(path, numbers, pairs)
    encoded = [name.encode() for name in pairs.flat]
    return np.array(encoded, dtype=f"S{max(map(len, encoded))}").reshape(-1, 2)


def _integer_block(path, numbers, pairs):
    """``(int64 ids, first problem)`` of a block of names that are all integers (Python's
    ``int`` reading, as numpy's); the problem (an id beyond 64 bits or negative) counts only if
    every name of the file is an integer. Raises :class:`_NamesError` at the first other name.
    """
    ids = None
    if max(map(len, pairs.flat)) <= 40:  # else numpy's strings would take 4 bytes a character
        try:
            ids = pairs.astype(str).astype(np.int64)
        except ValueError:
            raise _NamesError from None
        except OverflowError:
            pass
    if ids is not None:
        negative = np.flatnonzero((ids < 0).any(axis=1))
        if not negative.size:
            return ids, None
        k = int(negative[0])
        return ids, graph_error(path, numbers[k], f"node id {int(ids[k].min())} is negative")
    problem, ids = None, np.zeros((len(pairs), 2), np.int64)
    for k, pair in enumerate(pairs):
        for j, name in enumerate(pair):
            try:
                value = int(name)
            except ValueError:
                raise _NamesError from None
            if -(2**63) <= value < 2**63:
                ids[k, j] = value
            elif problem is None:
                problem = graph_error(
                    path, numbers[k], f"node id {show(name)} does not fit 64 bits"
                )
        if problem is None and ids[k].min() < 0:
            problem = graph_error(path, numbers[k], f"node id {int(ids[k].min())} is negative")
    return ids, problem


def _dedupe_undirected(path, u, v, weights, n) -> sp.csr_matrix:
    """Symmetric adjacency where ``u v`` and ``v u`` name the same edge (last weight wins);
    ``weights`` None: every edge weighs 1."""
    if weights is None:
        # The pattern of both directions, every value 1: no need to find the last of each edge.
        # One direction, then the sum with its transpose: scipy sorts half the entries (rows
        # of half the length) and merges the two sorted halves.
        matrix = sp.csr_matrix((np.ones(u.size), (u, v)), shape=(n, n))
        matrix = matrix + matrix.T.tocsr()
        matrix.data[:] = 1.0
        check_size(path, None, n, matrix.nnz)
        return matrix
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    key = lo.astype(np.int64) * n + hi
    # The last line of each edge: a (faster, unstable) sort of the keys, then the largest line
    # index in each run of equal keys; kept in key order, as np.unique would give them.
    order = np.argsort(key)
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    del key
    keep = np.maximum.reduceat(order, starts)
    del order
    lo, hi, w = lo[keep], hi[keep], weights[keep]
    off = lo != hi
    check_size(path, None, n, lo.size + int(off.sum()))
    return square_matrix(path, np.r_[lo, hi[off]], np.r_[hi, lo[off]], np.r_[w, w[off]], n)
