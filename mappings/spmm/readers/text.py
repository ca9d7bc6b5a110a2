"""Reading a text file (plain, gzip or a pipe) in blocks of whole lines, on threads, and
walking its lines; the checks of the numbers read."""

import gzip
import io
import os
import stat
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .limits import MAX_LINE, GraphError, LongLineError, graph_error

_BLOCK = 1 << 20  # bytes read at a time


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


class TextBuffer:
    """A text file (gunzipped when it starts with gzip's magic bytes), read in blocks.

    :meth:`next_line` hands out single lines (headers), then :meth:`blocks` the rest in blocks
    of whole lines. I/O and gzip errors become :class:`GraphError`.
    """

    def __init__(self, path: Path, max_line: int = MAX_LINE, data: bytes | None = None):
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
                raise graph_error(
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
            raise graph_error(
                self.path, self.lines_read + 1, f"line longer than {self.max_line} bytes"
            )
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
                    raise LongLineError(f"line longer than {self.max_line} bytes")
                if pending:
                    yield pending
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                pending += data
                if len(pending) > self.max_line:
                    raise LongLineError(f"line longer than {self.max_line} bytes")
                continue
            if len(data) - cut > self.max_line:
                raise LongLineError(f"line longer than {self.max_line} bytes")
            whole = data if cut == len(data) else memoryview(data)[:cut]
            yield pending + whole if pending else bytes(whole)
            pending = data[cut:]


_MAX_PIPE = 1 << 31


def read_special_file(path: Path) -> bytes | None:
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


def blocks_or_none(text: TextBuffer):
    """``text.blocks()``, then None after a too long line (for the walk to name it)."""
    try:
        yield from text.blocks()
    except LongLineError:
        yield None


def map_blocks(blocks, work, threads: int):
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


def decode_text(path, first_line: int, raw: bytes) -> str:
    """``raw`` as UTF-8; a bad byte or a NUL names its line (``first_line`` is raw's first)."""
    nul = raw.find(b"\0")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not 0 <= nul < exc.start:
            line = first_line + raw.count(b"\n", 0, exc.start)
            raise graph_error(path, line, "not a text file (invalid UTF-8)") from None
    if nul >= 0:
        raise graph_error(path, first_line + raw.count(b"\n", 0, nul), "not a text file (NUL byte)")
    return text


def walk_text(path, text: TextBuffer):
    """``(number of the first line, lines)`` of each block after the lines ``text`` handed out
    already, decoded; a bad byte or a too long line named by its line."""
    number = text.lines_read
    blocks = text.blocks()
    while True:
        try:
            raw = next(blocks)
        except StopIteration:
            return
        except LongLineError as exc:
            raise graph_error(path, number + 1, str(exc)) from None
        lines = decode_text(path, number + 1, raw).splitlines()
        yield number + 1, lines
        number += len(lines)


def walk_lines(path, text: TextBuffer, comment: str):
    """Blocks of ``(line numbers, stripped lines)``: the non-blank lines not starting with a
    character of ``comment``."""
    for first, lines in walk_text(path, text):
        numbers, kept = [], []
        for k, line in enumerate(lines):
            stripped = line.strip()
            if stripped and stripped[0] not in comment:
                numbers.append(first + k)
                kept.append(stripped)
        yield numbers, kept
