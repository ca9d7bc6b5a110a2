"""GraphError and the limits every reader checks: nodes and non-zeros a graph may have,
the longest line, what a number may be."""

import numpy as np

from tandem.errors import UserError

#: Most nodes a graph may have: 2**25 (about 4.4 GB in the mapper at 130 bytes a node).
MAX_NODES = 1 << 25
#: Most non-zeros (stored entries after symmetric expansion): 2**27 (about 6 GB in the mapper).
MAX_NONZEROS = 1 << 27

MAX_LINE = 1 << 16  # longest line of a Matrix Market file or an edge list
MAX_METIS_LINE = 1 << 30  # a METIS vertex line lists up to n neighbours (and weights)
INT64_MAX = np.iinfo(np.int64).max
EXACT = 1 << 53  # integers below this are exact in float64
DEFLATE_RATIO = 1032  # the most bytes deflate unpacks from one


class GraphError(UserError):
    """A graph file could not be read; the message names the file and the line."""


class LongLineError(GraphError):
    """A line longer than the reader allows, found by :meth:`TextBuffer.blocks` (which does not
    count lines: the line walk names it)."""


def graph_error(path, line, message) -> GraphError:
    where = f"{path}:{line}" if line is not None else f"{path}"
    return GraphError(f"{where}: {message}")


def show(text: str, limit: int = 60) -> str:
    """``repr`` of a line or token, cut to ``limit`` characters (a message stays one line)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def number_text(x: float) -> str:
    """An index read as a float, as the integer it is (or nan/inf)."""
    return str(int(x)) if np.isfinite(x) else repr(float(x))


def check_size(path, line, nodes: int, nonzeros: int) -> None:
    if nodes > MAX_NODES:
        raise graph_error(
            path, line, f"{nodes} nodes: more than the {MAX_NODES} the mapper holds in 8 GB"
        )
    if nonzeros > MAX_NONZEROS:
        raise graph_error(
            path,
            line,
            f"{nonzeros} non-zeros: more than the {MAX_NONZEROS} the mapper holds in 8 GB",
        )
