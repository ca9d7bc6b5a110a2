"""Graph and sparse-matrix readers: Matrix Market, edge lists, METIS ``.graph``, scipy ``.npz``.

Every reader returns a square ``scipy.sparse.csr_matrix`` (float64, duplicates summed) and
raises :class:`GraphError` (a :class:`~tandem.errors.UserError`: one line, exit status 2)
naming the file and, for text formats, the line: malformed lines, indices out of range, NaN or
infinite values, empty graphs, binary or non-UTF-8 text, broken gzip data, sizes beyond the
limits below. Text files may be gzip-compressed (recognized by their first bytes, whatever
their name).

Limits, from what the mapper holds in its 8 GB target (``docs/spmm.md``, "Mapper speed": 4.4 GB
for 104.6 M non-zeros, i.e. about 45 bytes a non-zero, and about 130 bytes a node measured with
16 M mostly isolated nodes): :data:`MAX_NONZEROS` = 2**27 (134 M non-zeros, about 6 GB in the
mapper) and :data:`MAX_NODES` = 2**25 (33.5 M nodes, about 4.4 GB). A file whose header
promises more is refused before anything is allocated.

Two paths read a text file:

* **Fast**: the file is read in blocks of about 1 MiB of whole lines. Each block is checked in
  numpy (no per-line Python; see "fast-path block checks" below): one pass over every byte
  finds the bytes that are not digits, and the rest runs on that skeleton. Only the standard
  layout passes: one space (or, in edge lists, one tab) between fields, integers where indices
  go, numbers written so that C and Python read them alike. Checked blocks are parsed without
  a Python loop: Matrix Market by ``scipy.io.mmread`` (fast_matrix_market; a plain file with a
  standard header by its name, anything else through a stream with a canonical header), integer
  edge lists and METIS by numpy (eight digits a 64-bit word, at the skeleton's positions),
  weighted edge lists by ``numpy.fromstring``. The checks come before mmread, not after: what it
  returns gives no sign of what it misread (``1.0abc`` as 1.0, ``1 2 3 4`` as ``1 2 3``, ``1 2.5``
  as row 1, column 2, value .5), and a NUL byte after a value crashes it. With ``threads`` > 1
  the blocks are checked (and parsed) on that many threads: numpy releases the GIL in its
  loops. Memory: a few blocks, and the arrays of the result. A pipe is read once into memory
  (the walk may need it again).
* **Walk**: anything the fast path does not accept (other spacing, comments between entries,
  ``1.0`` as an index, NaN, a bad token, a lying header, ...) is read again by walking its
  lines, block by block, with Python's ``float``/``int`` on every token: it either names the
  first bad line or returns the same matrix (values parsed the same way, to the bit). Slower
  (about 1 s a million entries) but its memory is bounded the same way.
"""

import gzip
import io
import os
import re
import stat
import zipfile
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from tandem.errors import UserError

from .parallel import check_threads

__all__ = [
    "FORMATS",
    "MAX_NODES",
    "MAX_NONZEROS",
    "GraphError",
    "read_edge_list",
    "read_graph",
    "read_metis",
    "read_mtx",
    "read_npz",
]

FORMATS = ("mtx", "edges", "metis", "npz")

#: Most nodes a graph may have: 2**25 (about 4.4 GB in the mapper at 130 bytes a node).
MAX_NODES = 1 << 25
#: Most non-zeros (stored entries after symmetric expansion): 2**27 (about 6 GB in the mapper).
MAX_NONZEROS = 1 << 27

_BLOCK = 1 << 20  # bytes read at a time
_MAX_LINE = 1 << 16  # longest line of a Matrix Market file or an edge list
_MAX_METIS_LINE = 1 << 30  # a METIS vertex line lists up to n neighbours (and weights)
_INT64_MAX = np.iinfo(np.int64).max
_EXACT = 1 << 53  # integers below this are exact in float64
_DEFLATE_RATIO = 1032  # the most bytes deflate unpacks from one


class GraphError(UserError):
    """A graph file could not be read; the message names the file and the line."""


class _LongLineError(GraphError):
    """A line longer than the reader allows, found by :meth:`_Text.blocks` (which does not count
    lines: the line walk names it)."""


def _fail(path, line, message) -> GraphError:
    where = f"{path}:{line}" if line is not None else f"{path}"
    return GraphError(f"{where}: {message}")


def _show(text: str, limit: int = 60) -> str:
    """``repr`` of a line or token, cut to ``limit`` characters (a message stays one line)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _number_text(x: float) -> str:
    """An index read as a float, as the integer it is (or nan/inf)."""
    return str(int(x)) if np.isfinite(x) else repr(float(x))


def _check_size(path, line, nodes: int, nonzeros: int) -> None:
    if nodes > MAX_NODES:
        raise _fail(
            path, line, f"{nodes} nodes: more than the {MAX_NODES} the mapper holds in 8 GB"
        )
    if nonzeros > MAX_NONZEROS:
        raise _fail(
            path,
            line,
            f"{nonzeros} non-zeros: more than the {MAX_NONZEROS} the mapper holds in 8 GB",
        )


# ---------------------------------------------------------------------------------- text files


_HEAP_PRIMER = 16 << 20  # more than a block's numpy temporaries, at most glibc's 32 MiB cap


def _keep_freed_pages() -> None:
    """Let glibc's malloc keep the memory freed after a block for the next one.

    Each block allocates and frees a few MB of numpy temporaries. Until it adapts, glibc maps
    an allocation above 128 KiB to fresh pages (every one a page fault) and gives freed memory
    above 128 KiB back to the kernel: a process's first large read then faults in every block
    anew. Freeing one mapped allocation raises both thresholds to its size (and twice that), as
    the first read's own frees do later; with another allocator this is one untouched
    allocation.
    """
    np.empty(_HEAP_PRIMER, np.uint8)  # mapped, never touched, freed at once


class _Text:
    """A text file (gunzipped when it starts with gzip's magic bytes), read in blocks.

    :meth:`next_line` hands out single lines (headers), then :meth:`blocks` the rest in blocks
    of whole lines. I/O and gzip errors become :class:`GraphError`.
    """

    def __init__(self, path: Path, max_line: int = _MAX_LINE, data: bytes | None = None):
        self.path, self.max_line, self.regular = path, max_line, data is None
        try:
            self._file = open(path, "rb") if data is None else io.BytesIO(data)  # noqa: SIM115
        except OSError as exc:
            raise GraphError(f"{path}: cannot read ({exc.strerror or exc})") from None
        try:
            magic = self._file.read(2)
            self._file.seek(0)
            self.size = os.fstat(self._file.fileno()).st_size if data is None else len(data)
        except OSError as exc:
            self._file.close()
            raise GraphError(f"{path}: cannot read ({exc.strerror or exc})") from None
        self.gzip = magic == b"\x1f\x8b"
        self._raw = gzip.GzipFile(fileobj=self._file, mode="rb") if self.gzip else self._file
        self.lines_read = 0  # lines handed out by next_line and skip
        self._buf, self._pos, self._eof = b"", 0, False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._file.close()

    def _read(self) -> bytes:
        if self._eof:
            return b""
        try:
            data = self._raw.read(_BLOCK)
        except (OSError, EOFError, zlib.error) as exc:
            if self.gzip:
                raise GraphError(f"{self.path}: broken gzip data ({exc})") from None
            raise GraphError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        if not data:
            self._eof = True
        return data

    def _line_end(self) -> int:
        """Index of the '\\n' ending the line at ``_pos`` (reading more as needed), or -1."""
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end >= 0:
                return end
            if len(self._buf) - self._pos > self.max_line:
                raise _fail(
                    self.path, self.lines_read + 1, f"line longer than {self.max_line} bytes"
                )
            if self._eof:
                return end
            data = self._read()
            self._buf, self._pos = self._buf[self._pos :] + data, 0

    def next_line(self) -> bytes | None:
        """The next line without its ``\\n`` (None at the end of the file)."""
        end = self._line_end()
        if end < 0:
            if self._pos >= len(self._buf):
                return None
            end = len(self._buf)
        line = self._buf[self._pos : end]
        if len(line) > self.max_line:
            raise _fail(self.path, self.lines_read + 1, f"line longer than {self.max_line} bytes")
        self._pos = end + 1
        self.lines_read += 1
        return line

    def skip(self, comment: bytes) -> None:
        """Skip blank lines and lines starting (after blanks) with a byte of ``comment``."""
        while self._pos < len(self._buf) or not self._eof:
            line = self.peek().strip()
            if line and line[0] not in comment:
                return
            if self.next_line() is None:
                return

    def peek(self) -> bytes:
        """The next line, left unread (b"" at the end of the file)."""
        end = self._line_end()
        return self._buf[self._pos : end if end >= 0 else len(self._buf)]

    def blocks(self):
        """The rest of the file in blocks of whole lines (the last may lack its ``\\n``)."""
        if self.size > 8 * _BLOCK:  # a few blocks fault in a few MB: not worth it
            _keep_freed_pages()
        pending = self._buf[self._pos :]
        self._buf, self._pos = b"", 0
        while True:
            data = self._read()
            if not data:
                if len(pending) - pending.rfind(b"\n") - 1 > self.max_line:
                    raise _LongLineError(f"line longer than {self.max_line} bytes")
                if pending:
                    yield pending
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                pending += data
                if len(pending) > self.max_line:
                    raise _LongLineError(f"line longer than {self.max_line} bytes")
                continue
            if len(data) - cut > self.max_line:
                raise _LongLineError(f"line longer than {self.max_line} bytes")
            whole = data if cut == len(data) else memoryview(data)[:cut]
            yield pending + whole if pending else bytes(whole)
            pending = data[cut:]


_MAX_PIPE = 1 << 31


def _special(path: Path) -> bytes | None:
    """The bytes of a pipe or a device, read once (a reader may read a file twice: the fast
    path, then the walk); None for a regular file or anything ``open`` will refuse."""
    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode) and not stat.S_ISCHR(os.stat(path).st_mode):
            return None
        with open(path, "rb") as pipe:
            data = pipe.read(_MAX_PIPE + 1)
    except OSError:
        return None
    if len(data) > _MAX_PIPE:
        raise GraphError(f"{path}: more than {_MAX_PIPE} bytes from a pipe; name the file instead")
    return data


def _blocks_or_none(text: _Text):
    """``text.blocks()``, then None after a too long line (for the walk to name it)."""
    try:
        yield from text.blocks()
    except _LongLineError:
        yield None


def _each(blocks, work, threads: int):
    """``work(block)`` for each block, in order; with ``threads`` > 1 on that many threads (the
    checks are numpy loops, which release the GIL), at most two a thread ahead of the caller,
    who may stop at any result."""
    if threads == 1:
        yield from map(work, blocks)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending = deque()
        try:
            for block in blocks:
                pending.append(pool.submit(work, block))
                if len(pending) > 2 * threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def _decode(path, first_line: int, raw: bytes) -> str:
    """``raw`` as UTF-8; a bad byte or a NUL names its line (``first_line`` is raw's first)."""
    nul = raw.find(b"\0")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not 0 <= nul < exc.start:
            line = first_line + raw.count(b"\n", 0, exc.start)
            raise _fail(path, line, "not a text file (invalid UTF-8)") from None
    if nul >= 0:
        raise _fail(path, first_line + raw.count(b"\n", 0, nul), "not a text file (NUL byte)")
    return text


def _walk(path, text: _Text):
    """``(number of the first line, lines)`` of each block after the lines ``text`` handed out
    already, decoded; a bad byte or a too long line named by its line."""
    number = text.lines_read
    blocks = text.blocks()
    while True:
        try:
            raw = next(blocks)
        except StopIteration:
            return
        except _LongLineError as exc:
            raise _fail(path, number + 1, str(exc)) from None
        lines = _decode(path, number + 1, raw).splitlines()
        yield number + 1, lines
        number += len(lines)


def _walk_lines(path, text: _Text, comment: str):
    """Blocks of ``(line numbers, stripped lines)``: the non-blank lines not starting with a
    character of ``comment``."""
    for first, lines in _walk(path, text):
        numbers, kept = [], []
        for k, line in enumerate(lines):
            stripped = line.strip()
            if stripped and stripped[0] not in comment:
                numbers.append(first + k)
                kept.append(stripped)
        yield numbers, kept


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


# ------------------------------------------------------------------------ fast-path block checks
#
# A block passes when the parser after it (fast_matrix_market, numpy.fromstring, the digit
# parser below) reads every line of it exactly as Python's int/float read its tokens. The C
# parsers read a number's longest prefix and skip the rest of the line, so ``1.0abc`` is 1.0,
# ``1 2 3 4`` is ``1 2 3``, ``1 2.5`` is row 1, column 2, value .5 (and a NUL byte after a value
# crashes mmread): what they return gives no sign of it, so the bytes are checked, with numpy
# only. One pass over every byte finds the bytes that are not digits; the rest runs on that
# skeleton, about a sixth of the block: each of its bytes with a flag saying whether a digit
# comes right before it, which is all the grammar needs to know of the digits.

_SP, _TAB, _NL, _CR, _DOT = 32, 9, 10, 13, 46


def _skeleton(block: bytes, end: int):
    """``(skeleton, digit before, positions, next start)`` of ``block[:end]``: its bytes that are
    not digits, between a line end before the block (position -1) and one after it (position
    ``end``); a token of digits lies between one's ``next start`` and the next one's position.

    A CR right before its line feed is that line's end (the feed is dropped, the next token
    starts after it); a lone CR makes the result None: it ends a line for the walk's
    ``str.splitlines``, not for C.
    """
    a = np.frombuffer(block, np.uint8, end)
    where = np.flatnonzero((a - np.uint8(48)) >= 10)
    m = where.size
    s = np.empty(m + 2, np.uint8)
    s[0] = s[-1] = _NL
    np.take(a, where, out=s[1:-1])
    p = np.empty(m + 2, np.int64)
    p[0], p[1:-1], p[-1] = -1, where, end
    q = p
    if block.find(b"\r", 0, end) >= 0:
        cr = s == _CR
        feed = np.zeros_like(cr)
        feed[1:] = cr[:-1]
        if not (s[feed] == _NL).all() or (p[feed] != p[cr] + 1).any():
            return None
        s[cr] = _NL
        q = p.copy()
        q[cr] += 1
        keep = ~feed
        s, p, q = s[keep], p[keep], q[keep]
    g = np.empty(s.size, bool)
    g[0] = False
    np.greater(p[1:] - q[:-1], 1, out=g[1:])
    return s, g, p, q


def _trimmed(block: bytes) -> int:
    """The length of ``block`` without the blank lines at its end (both parsers skip them)."""
    end = len(block)
    while end and block[end - 1] in b"\r\n":
        end -= 1
    return end


def _layout_ok(block: bytes, fields: int, real: bool, tabs: bool) -> bool:
    """Whether every line of ``block`` is ``fields`` fields, one blank between them, integers
    but for a last field that is a number written the way C and Python read alike when ``real``
    (``[sign] (digits [. [digits]] | . digits) [e [sign] digits]``).

    Blank lines are allowed (both parsers skip them) only at the end of the block.
    """
    end = _trimmed(block)
    if not end:
        return True
    if not real:
        return _integer_skeleton(block, end, fields, tabs) is not None
    found = _skeleton(block, end)
    if found is None:
        return False
    s, g = found[:2]
    if tabs:
        s[s == _TAB] = _SP
    sp, nl = s == _SP, s == _NL
    # Blanks only after a digit, at the start of a line (after its end or another blank), as
    # many as the lines need: every line then starts with exactly fields - 1 of them, and the
    # value's markers come after them.
    if int(np.count_nonzero(sp)) != (fields - 1) * (int(np.count_nonzero(nl)) - 1):
        return False
    if (sp & ~g).any() or (sp[1:] & ~(nl[:-1] | sp[:-1])).any():
        return False
    starts = nl[:-1]
    for k in range(1, fields):
        if starts[starts.size - k + 1 :].any() or (starts[: starts.size - k + 1] & ~sp[k:]).any():
            return False
    dot = s == _DOT
    e = (s | np.uint8(32)) == ord("e")
    sign = ((s - np.uint8(ord("+"))) & np.uint8(0xFD)) == 0  # '+' or '-'
    if not (sp | nl | dot | e | sign).all():
        return False
    # From the skeleton's third byte on (its first is the line end before the block, its second
    # the first line's first blank), each marker after what may come before it.
    prev_sp, prev_e, prev_dot = sp[1:-1], e[1:-1], dot[1:-1]
    lead_sign = sign[1:-1] & ~e[:-2]
    digits = g[2:] | (prev_dot & g[1:-1])  # a digit before it, or before the point before it
    bad = sign[2:] & (g[2:] | ~(prev_sp | prev_e))
    bad |= dot[2:] & ~(prev_sp | lead_sign)
    bad |= e[2:] & ~((prev_sp | lead_sign | prev_dot) & digits)
    bad |= nl[2:] & (nl[1:-1] | ~digits)
    return not bad.any()


def _integer_skeleton(block: bytes, end: int, fields: int, tabs: bool):
    """The skeleton's positions and next starts (see :func:`_skeleton`) when each line of
    ``block[:end]`` is ``fields`` integers with one blank between them, else None."""
    found = _skeleton(block, end)
    if found is None:
        return None
    s, g, p, q = found
    # Nothing but (fields - 1) blanks and a line end per line, each after a digit.
    if (s.size - 1) % fields or not g[1:].all():
        return None
    lines = s[1:].reshape(-1, fields)
    blanks = lines[:, :-1]
    sep = blanks == _SP
    if tabs:
        sep |= blanks == _TAB
    if not (sep.all() and (lines[:, -1] == _NL).all()):
        return None
    return p, q


def _integer_lines(block: bytes, fields: int, tabs: bool) -> np.ndarray | None:
    """The lines of ``block`` as a ``(lines, fields)`` uint64 table when each is ``fields``
    integers with one blank between them (None otherwise, or for more than 19 digits)."""
    end = _trimmed(block)
    if not end:
        return np.zeros((0, fields), np.uint64)
    found = _integer_skeleton(block, end, fields, tabs)
    if found is None:
        return None
    p, q = found
    lengths = p[1:] - q[:-1]
    lengths -= 1
    values = _integers(block, p[1:], lengths)
    return None if values is None else values.reshape(-1, fields)


# Eight ASCII digits in a little-endian word (the first digit in the lowest byte) become their
# number in a few multiplications and shifts of the whole array (SWAR: the word as eight lanes).
_EIGHT_ZEROS = np.uint64(0x3030303030303030)
_PAIRS = np.uint64(0x000000FF000000FF)
_HUNDREDS = np.uint64(100 + (1000000 << 32))
_ONES = np.uint64(1 + (10000 << 32))
#: The bytes of the last k of a word's eight, for k = 0..8.
_LAST_BYTES = np.array([(1 << 64) - (1 << (64 - 8 * k)) for k in range(9)], np.uint64)
_PAD = 24  # zero bytes before the block: a token's last 24 bytes are three words in it


def _eight_digits(words: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The numbers that the last ``min(length, 8)`` bytes of each word write in digits (in
    place: ``words`` becomes the result)."""
    keep = np.take(_LAST_BYTES, lengths, mode="clip")
    words &= keep
    keep &= _EIGHT_ZEROS
    words -= keep  # the other bytes stay 0: leading zeros of the number
    np.right_shift(words, np.uint64(8), out=keep)
    words *= np.uint64(10)
    words += keep  # two-digit numbers in bytes 0, 2, 4, 6
    np.right_shift(words, np.uint64(16), out=keep)
    keep &= _PAIRS
    keep *= _ONES
    words &= _PAIRS
    words *= _HUNDREDS
    words += keep
    words >>= np.uint64(32)
    return words


def _integers(block: bytes, ends: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
    """The integers (uint64) written in digits in ``block[end - length:end]`` for each token,
    or None when one has more than 19 digits (beyond what a uint64 is sure to hold)."""
    longest = int(lengths.max()) if lengths.size else 0
    if longest > 19:
        return None
    buffer = bytes(_PAD) + block + bytes(8)
    value = None
    for k in range(3):
        if longest <= 8 * k:
            break
        # Every byte offset read as a word: word i holds the 8 bytes before block[i - 8 * k].
        offset = _PAD - 8 * (k + 1)
        words = np.ndarray((len(block) + 1,), np.uint64, buffer, offset, (1,))
        part = _eight_digits(words[ends], lengths if not k else np.maximum(lengths - 8 * k, 0))
        if value is None:
            value = part
        else:
            part *= np.uint64(10 ** (8 * k))
            value += part
    return value if value is not None else np.zeros(0, np.uint64)


# ----------------------------------------------------------------------------- Matrix Market

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


def _header_line(path, text: _Text) -> str | None:
    raw = text.next_line()
    return None if raw is None else _decode(path, text.lines_read, raw)


def _mtx_header(path, text: _Text) -> _MtxHeader:
    first = _header_line(path, text)
    if first is None:
        raise _fail(path, None, "empty file")
    header = _MM_HEADER.match(first.strip())
    if not header:
        raise _fail(path, 1, "not a Matrix Market file (expected '%%MatrixMarket matrix ...')")
    layout, field, symmetry = (g.lower() for g in header.groups())
    plain = first == f"%%MatrixMarket matrix {layout} {field} {symmetry}"
    if layout != "coordinate":
        raise _fail(path, 1, f"only the 'coordinate' layout is supported, not {_show(layout)}")
    if field not in ("real", "integer", "pattern", "double"):
        raise _fail(path, 1, f"field {_show(field)} is not supported (real, integer or pattern)")
    if symmetry not in ("general", "symmetric", "skew-symmetric"):
        raise _fail(path, 1, f"symmetry {_show(symmetry)} is not supported")
    while True:
        line = _header_line(path, text)
        if line is None:
            raise _fail(path, text.lines_read, "missing size line")
        plain = plain and (line.startswith("%") or line == line.strip())
        line = line.strip()
        if line and not line.startswith("%"):
            break
    number = text.lines_read
    size = line.split()
    if len(size) != 3 or not all(s.isascii() and s.isdigit() for s in size):
        raise _fail(path, number, f"size line must be 'rows cols entries', not {_show(line)}")
    n_rows, n_cols, entries = (int(s) for s in size)
    if n_rows != n_cols:
        raise _fail(path, number, f"adjacency must be square, not {n_rows} x {n_cols}")
    if n_rows == 0 or entries == 0:
        raise _fail(path, number, "empty graph (no entries)")
    head = _MtxHeader(n_rows, entries, field, symmetry, number, plain and field != "double")
    _check_size(path, number, n_rows, entries * (1 if symmetry == "general" else 2))
    # An entry takes at least two bytes a field ("1 1\n"), and deflate packs at most 1032
    # bytes into one: a file this short lies (and mmread would allocate for the promise).
    room = text.size * (_DEFLATE_RATIO if text.gzip else 1)
    if entries * 2 * head.width - 1 > room:
        kind = "gzip file" if text.gzip else "file"
        raise _fail(
            path,
            number,
            f"size line promises {entries} entries, more than a {kind} of {text.size} bytes holds",
        )
    return head


class _CheckedBody:
    """A Matrix Market stream for ``scipy.io.mmread``: a canonical header, then the blocks of
    the file's body that pass :func:`_layout_ok`; it ends early (and says so) at one that does
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
        if block is not None and not _layout_ok(block, self._width, self._width == 3, False):
            block, self.rejected = None, True
        if block is None:
            self._blocks = None
            return b""
        self._buf, self._pos, self._end = block, 0, len(block)
        return self.read(size)


def _mtx_fast(path: Path, head: _MtxHeader, text: _Text, threads: int = 1):
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
            return block is not None and _layout_ok(block, head.width, head.width == 3, False)

        if not all(_each(_blocks_or_none(text), passes, threads)):
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
        if body.error is not None and not isinstance(body.error, _LongLineError):
            raise body.error
        if body.rejected or body.error:
            return None
    if coo is None or coo.shape != (head.n, head.n) or not np.isfinite(coo.data).all():
        return None
    return coo.row, coo.col, coo.data


def _mtx_walk(path, head: _MtxHeader, text: _Text):
    """``(rows, cols, values)`` (0-based, file order, symmetry not expanded) by walking the lines
    after the size line; names the first bad line."""
    width, count, last = head.width, 0, None
    parts = []
    for numbers, lines in _walk_lines(path, text, "%"):
        if not lines:
            continue
        take = min(len(lines), head.entries - count)
        if take > 0:
            parts.append(_mtx_entries(path, numbers[:take], lines[:take], width, head.n))
        count += len(lines)
        last = numbers[-1]
    if count != head.entries:
        raise _fail(
            path,
            last if last is not None else text.lines_read,
            f"size line promises {head.entries} entries, file has {count}",
        )
    rows, cols, vals = (np.concatenate(p) for p in zip(*parts))
    return rows, cols, vals


def _mtx_entries(path, numbers, lines, width, n):
    values = _numbers(path, numbers, lines, np.float64, "entry")
    if values.size != len(lines) * width:
        for number, line in zip(numbers, lines):
            if len(line.split()) != width:
                raise _fail(path, number, f"expected {width} fields, got {_show(line)}")
    table = values.reshape(len(lines), width)

    def line_of(k):
        return numbers[k]

    rows_f, cols_f = table[:, 0], table[:, 1]
    for what, idx in (("row", rows_f), ("column", cols_f)):
        frac = np.flatnonzero(idx != np.floor(idx))
        if frac.size:
            raise _fail(
                path, line_of(frac[0]), f"{what} index {float(idx[frac[0]])!r} is not an integer"
            )
    _check_range(path, rows_f, n, line_of, "row", 1)
    _check_range(path, cols_f, n, line_of, "column", 1)
    vals = np.ones(len(lines)) if width == 2 else table[:, 2].copy()
    _check_finite(path, vals, line_of)
    return rows_f.astype(np.int64) - 1, cols_f.astype(np.int64) - 1, vals


def read_mtx(path, *, threads: int = 1) -> sp.csr_matrix:
    """Matrix Market coordinate file (real, integer or pattern; general, symmetric or
    skew-symmetric): ``scipy.io.mmread`` on checked blocks, the line walk for the rest;
    ``threads`` check the blocks of a plain file."""
    path = Path(path)
    data = _special(path)
    with _Text(path, data=data) as text:
        head = _mtx_header(path, text)
        fast = _mtx_fast(path, head, text, threads)
    if fast is not None:
        rows, cols, vals = fast
    else:
        with _Text(path, data=data) as text:
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
    return _square(path, rows, cols, vals, head.n)


# --------------------------------------------------------------------------------- edge lists


def read_edge_list(path, *, threads: int = 1) -> sp.csr_matrix:
    """Edge list: ``u v`` or ``u v weight`` per line, ``#`` or ``%`` comments, undirected.

    Node names may be integers or any other token (WormNet uses gene names); they are numbered
    in sorted order of their names (numerically when every name is an integer, which must then
    be non-negative and fit 64 bits). ``u v`` and ``v u`` are one edge; the last weight wins.
    ``threads`` check and parse the blocks.
    """
    path = Path(path)
    data = _special(path)
    with _Text(path, data=data) as text:
        edges = _edges_fast(path, text, threads)
    if edges is None:
        try:
            with _Text(path, data=data) as text:
                edges = _edges_walk(path, text, names=False)
        except _NamesError:
            with _Text(path, data=data) as text:
                edges = _edges_walk(path, text, names=True)
    u, v, weights, n = edges
    return _dedupe_undirected(path, u, v, weights, n)


def _first_width(text: _Text) -> int:
    """Fields of the first data line, which stays unread (0 when there is none)."""
    text.skip(b"#%")
    return len(text.peek().split())


def _edges_fast(path, text: _Text, threads: int = 1):
    """``(u, v, weights, n)`` with nodes renumbered, or None for the walk."""
    width = _first_width(text)
    if width not in (2, 3):
        return None
    us, vs, ws, count = [], [], [], 0
    for table in _each(_blocks_or_none(text), lambda block: _edge_block(block, width), threads):
        if table is None:
            return None
        ends = table[:, :2]
        if width == 3:
            ends = ends.astype(np.int64)
            ws.append(table[:, 2].copy())
        us.append(ends[:, 0].copy())
        vs.append(ends[:, 1].copy())
        count += len(table)
        if count > MAX_NONZEROS:
            _check_size(path, None, 0, count)
    if not count:
        return None
    u, v = np.concatenate(us), np.concatenate(vs)
    del us, vs
    weights = np.concatenate(ws) if width == 3 else None
    if weights is not None and not np.isfinite(weights).all():
        return None
    names, u, v = _renumber(u, v)
    _check_size(path, None, names, 0)
    return u, v, weights, names


def _edge_block(block: bytes | None, width: int) -> np.ndarray | None:
    """The ``(lines, width)`` table of a block of an edge list (int64 ids, or float64 with the
    weights), or None when the block is not in the fast path's layout."""
    if block is None:
        return None
    if width == 2:
        ends = _integer_lines(block, 2, True)
        if ends is None or (ends.size and ends.max() > _INT64_MAX):
            return None  # an id beyond 64 bits: the walk names it
        return ends.view(np.int64)
    if not _layout_ok(block, 3, True, True):
        return None
    table = np.fromstring(block, np.float64, sep=" ")
    if table.size % 3:
        return None
    table = table.reshape(-1, 3)
    return None if table.size and table[:, :2].max() >= _EXACT else table


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


def _edges_walk(path, text: _Text, names: bool):
    """``(u, v, weights, n)`` by walking the lines; names the first bad line. With ``names``
    False the names must all be integers (else :class:`_NamesError`), kept as int64."""
    width, count, problem = None, 0, None
    ends, weights = [], []
    for numbers, lines in _walk_lines(path, text, "#%"):
        if not lines:
            continue
        if width is None:
            width = len(lines[0].split())
        tokens = " ".join(lines).split()
        if width not in (2, 3) or len(tokens) != width * len(lines):
            for number, line in zip(numbers, lines):
                fields = len(line.split())
                if fields != width or fields not in (2, 3):
                    raise _fail(path, number, f"expected 'u v' or 'u v weight', got {_show(line)}")
        table = np.array(tokens, dtype=object).reshape(len(lines), width)
        del tokens
        if names:
            ends.append(_name_bytes(path, numbers, table[:, :2]))
        else:
            ids, found = _integer_block(path, numbers, table[:, :2])
            problem = problem or found
            ends.append(ids)
        if width == 3:
            w = _numbers(path, numbers, [str(t) for t in table[:, 2]], np.float64, "weight")
            _check_finite(path, w, lambda k, numbers=numbers: numbers[k])
            weights.append(w)
        count += len(lines)
        if count > MAX_NONZEROS:
            _check_size(path, numbers[-1], 0, count)
    if not count:
        raise _fail(path, None, "empty graph (no edges)")
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
    _check_size(path, None, n, 0)
    return u, v, (np.concatenate(weights) if width == 3 else None), n


_MAX_NAME = 256  # characters of a node name that is not an integer


def _check_names(path, numbers, pairs) -> None:
    """No node name longer than :data:`_MAX_NAME` (a block's names share one item size)."""
    if max(map(len, pairs.flat)) > _MAX_NAME:
        for k, name in enumerate(pairs.flat):
            if len(name) > _MAX_NAME:
                message = f"node name longer than {_MAX_NAME} characters"
                raise _fail(path, numbers[k // 2], message)


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
        return ids, _fail(path, numbers[k], f"node id {int(ids[k].min())} is negative")
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
                problem = _fail(path, numbers[k], f"node id {_show(name)} does not fit 64 bits")
        if problem is None and ids[k].min() < 0:
            problem = _fail(path, numbers[k], f"node id {int(ids[k].min())} is negative")
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
        _check_size(path, None, n, matrix.nnz)
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
    _check_size(path, None, n, lo.size + int(off.sum()))
    return _square(path, np.r_[lo, hi[off]], np.r_[hi, lo[off]], np.r_[w, w[off]], n)


# ------------------------------------------------------------------------------------- METIS


def read_metis(path, *, threads: int = 1) -> sp.csr_matrix:
    """METIS graph: header ``n m [fmt [ncon]]``, then line i lists vertex i's neighbours.

    ``fmt`` digits say whether lines carry vertex sizes (100), vertex weights (010, ``ncon``
    of them) and edge weights (001). ``%`` lines are comments. Vertex numbers are 1-based.
    ``threads`` check and parse the blocks.
    """
    path = Path(path)
    data = _special(path)
    with _Text(path, _MAX_METIS_LINE, data) as text:
        header_at, n, m, fmt, ncon = _metis_header(path, text)
        lines = _metis_fast(text, threads)
    if lines is None:
        with _Text(path, _MAX_METIS_LINE, data) as text:
            _metis_header(path, text)
            lines = _metis_walk(path, text)
    numbers, counts, values = lines
    return _metis_matrix(path, header_at, n, m, fmt, ncon, numbers, counts, values)


def _metis_header(path, text: _Text):
    while True:
        raw = text.next_line()
        if raw is None:
            raise _fail(path, None, "empty file (no header line)")
        line = _decode(path, text.lines_read, raw)
        if line.strip() and not line.lstrip().startswith("%"):
            break
    header_at = text.lines_read
    header = line.split()
    if not 2 <= len(header) <= 4 or not all(h.isascii() and h.isdigit() for h in header):
        raise _fail(path, header_at, f"header must be 'n m [fmt [ncon]]', not {_show(line)}")
    n, m = int(header[0]), int(header[1])
    fmt = header[2].zfill(3) if len(header) > 2 else "000"
    if any(ch not in "01" for ch in fmt) or len(fmt) != 3:
        raise _fail(path, header_at, f"fmt must be three 0/1 digits, not {_show(header[2])}")
    ncon = int(header[3]) if len(header) > 3 else 1
    if n == 0:
        raise _fail(path, header_at, "empty graph (n = 0)")
    _check_size(path, header_at, n, 2 * m)
    return header_at, n, m, fmt, ncon


def _metis_fast(text: _Text, threads: int = 1):
    """``(line numbers, fields per line, values)`` of the vertex lines when every block is
    integers and blanks only (no comments), else None."""
    first, numbers, counts, values, total = text.lines_read + 1, [], [], [], 0
    for parsed in _each(_blocks_or_none(text), _metis_block, threads):
        if parsed is None:
            return None
        per_line, ints = parsed
        if ints.size and ints.max() >= _EXACT:
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
    found = _skeleton(block, len(block))
    if found is None:
        return None
    s, g, p, q = found
    nl = s == _NL
    if not (nl | (s == _SP) | (s == _TAB)).all():
        return None
    # A number ends right before each skeleton byte that follows a digit; a line's count is
    # how many of them come up to its end.
    count = np.cumsum(g)
    ends = np.flatnonzero(nl)[1 : None if not block.endswith(b"\n") else -1]
    per_line = np.diff(count[ends], prepend=0)
    token = g[1:]
    values = _integers(block, p[1:][token], (p[1:] - q[:-1])[token] - 1)
    return None if values is None else (per_line, values)


def _metis_limit(path, total: int) -> None:
    """A bound on the numbers of a METIS file: edges twice (and weights), vertex weights."""
    limit = 4 * MAX_NONZEROS + 4 * MAX_NODES
    if total > limit:
        raise _fail(path, None, f"more than {limit} numbers: beyond the limits of the mapper")


def _metis_arrays(numbers, counts, values):
    def cat(parts, dtype):
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    return cat(numbers, np.int64), cat(counts, np.int64), cat(values, np.float64)


def _metis_walk(path, text: _Text):
    """As :func:`_metis_fast`, by walking the lines (comments skipped, blank lines kept)."""
    total, numbers, counts, values = 0, [], [], []
    for first, lines in _walk(path, text):
        keep = [k for k, line in enumerate(lines) if not line.lstrip().startswith("%")]
        texts = [lines[k] for k in keep]
        line_numbers = [first + k for k in keep]
        values.append(_numbers(path, line_numbers, texts, np.float64, "entry"))
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
        raise _fail(path, where, f"header says {n} vertices, file has {lines} lines")
    numbers, counts = numbers[:n], counts[:n]
    values = values[: int(counts.sum())]
    per_edge = 2 if has_ewgt else 1
    bad = np.flatnonzero((counts < skip) | ((counts - skip) % per_edge != 0))
    if bad.size:
        raise _fail(
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
        raise _fail(
            path, line_of_nb(frac[0]), f"neighbour {float(neighbors[frac[0]])!r} is not an integer"
        )
    _check_range(path, neighbors, n, line_of_nb, "neighbour", 1)
    if weights is not None:
        _check_finite(path, weights, line_of_nb)
    _check_finite(path, values, line_of_value)
    if neighbors.size != 2 * m:
        # METIS counts each undirected edge once and lists it on both ends.
        raise _fail(
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


# --------------------------------------------------------------------------------------- npz

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
    if unpacked > 24 * MAX_NONZEROS + 8 * MAX_NODES + (1 << 20):
        raise GraphError(
            f"{path}: {unpacked} bytes unpacked, more than a graph within the limits "
            f"({MAX_NODES} nodes, {MAX_NONZEROS} non-zeros) needs"
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
    _check_size(path, None, n_rows, matrix.nnz)
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


# ----------------------------------------------------------------------------------- dispatch


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


def read_graph(path, fmt: str | None = None, *, threads: int = 1) -> sp.csr_matrix:
    """Read a graph or sparse matrix; ``fmt`` is one of :data:`FORMATS` or None (by suffix);
    ``threads`` check and parse the blocks of a text file.

    Suffixes: ``.mtx`` Matrix Market, ``.npz`` scipy sparse, ``.graph``/``.mgraph``/``.metis``
    METIS, anything else an edge list (optionally ``.gz`` on text formats).
    """
    path = Path(path)
    if fmt is None:
        fmt = _detect(path)
    readers = {"mtx": read_mtx, "edges": read_edge_list, "metis": read_metis}
    if fmt == "npz":
        return read_npz(path)
    if fmt not in readers:
        raise GraphError(f"unknown graph format {fmt!r}; known: {', '.join(FORMATS)}")
    return readers[fmt](path, threads=check_threads(threads))
