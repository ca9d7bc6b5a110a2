"""Fast-path block checks: whether a block of lines has the standard layout, and its integers
parsed in numpy without a Python loop."""

import numpy as np

#
# A block passes when the parser after it (fast_matrix_market, numpy.fromstring, the digit
# parser below) reads every line of it exactly as Python's int/float read its tokens. The C
# parsers read a number's longest prefix and skip the rest of the line, so ``1.0abc`` is 1.0,
# ``1 2 3 4`` is ``1 2 3``, ``1 2.5`` is row 1, column 2, value .5 (and a NUL byte after a value
# crashes mmread): what they return gives no sign of it, so the bytes are checked, with numpy
# only. One pass over every byte finds the bytes that are not digits; the rest runs on that
# skeleton, about a sixth of the block: each of its bytes with a flag saying whether a digit
# comes right before it, which is all the grammar needs to know of the digits.

SP, TAB, NL, _CR, _DOT = 32, 9, 10, 13, 46


def line_skeleton(block: bytes, end: int):
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
    s[0] = s[-1] = NL
    np.take(a, where, out=s[1:-1])
    p = np.empty(m + 2, np.int64)
    p[0], p[1:-1], p[-1] = -1, where, end
    q = p
    if block.find(b"\r", 0, end) >= 0:
        cr = s == _CR
        feed = np.zeros_like(cr)
        feed[1:] = cr[:-1]
        if not (s[feed] == NL).all() or (p[feed] != p[cr] + 1).any():
            return None
        s[cr] = NL
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


def layout_ok(block: bytes, fields: int, real: bool, tabs: bool) -> bool:
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
    found = line_skeleton(block, end)
    if found is None:
        return False
    s, g = found[:2]
    if tabs:
        s[s == TAB] = SP
    sp, nl = s == SP, s == NL
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
    """The skeleton's positions and next starts (see :func:`line_skeleton`) when each line of
    ``block[:end]`` is ``fields`` integers with one blank between them, else None."""
    found = line_skeleton(block, end)
    if found is None:
        return None
    s, g, p, q = found
    # Nothing but (fields - 1) blanks and a line end per line, each after a digit.
    if (s.size - 1) % fields or not g[1:].all():
        return None
    lines = s[1:].reshape(-1, fields)
    blanks = lines[:, :-1]
    sep = blanks == SP
    if tabs:
        sep |= blanks == TAB
    if not (sep.all() and (lines[:, -1] == NL).all()):
        return None
    return p, q


def integer_lines(block: bytes, fields: int, tabs: bool) -> np.ndarray | None:
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
    values = parse_integers(block, p[1:], lengths)
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


def parse_integers(block: bytes, ends: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
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
