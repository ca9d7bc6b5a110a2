"""The documentation and the sources' comments say what is true now, not how it came to be.

Development history (which round or session changed what, the figure before a change, issue
numbers, commit hashes) belongs in ``git log`` and CHANGELOG.md. This test scans README.md,
docs/*.md, and the comments and docstrings of the Python, C and YAML sources for history
phrases, and README.md and docs/*.md for Markdown table cells too long to read.

Run ``python tests/test_history_words.py`` to list every hit with its file and line.
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("host", "hw", "sim", "mappings", "tandem", "benchmarks", "tools", "constraints")
SOURCE_SUFFIXES = (".py", ".c", ".h", ".yaml", ".yml")
MAX_CELL = 200

# Each pattern names a way of telling history. They are written so that the same words in
# their technical senses do not match: "round to nearest", "rounding", "round robin", "a stop
# bit", "before the clock edge", "no longer than" and "the previous beat" stay legal.
HISTORY = [
    (
        r"\b(this|last|previous|next|earlier|later|the last|the previous|an earlier|two|three|"
        r"several|these|those)( (two|three|few))? rounds?('s)?\b"
        r"(?! (to|off|up|down|half|robin|trips?)\b)",
        "a development round",
    ),
    (
        r"\brounds? of (pipeline|cuts|changes|work|fixes|retiming|measurements?)\b",
        "a development round",
    ),
    (r"\b(this|last|previous|earlier|that|one|a) (session|stop)\b(?! bits?\b)", "a session"),
    (r"(?<!for the )\blast time\b", "last time"),
    (r"\bissues? #?\d+\b", "an issue number"),
    (r"\bcommit [0-9a-f]{7,40}\b", "a commit hash"),
    (r"\bat commit\b", "a commit"),
    (r"\bpreviously\b", "previously"),
    (r"\bused to (be|take|give|run|read|write|hold|have)\b", "used to"),
    (r"\bno longer\b(?! than)", "no longer"),
    (r"\bsuperseded\b", "superseded"),
    (r"\bre-?measured\b", "re-measured"),
    (r"\bre-?fit(ted|s)?\b", "a refit"),
    (
        r"\bbefore (the|this|that|its) (change|refit|fix|rewrite|split|retiming)\b",
        "before a change",
    ),
    (r"\bbefore (issue|commit)\b", "before a change"),
    (
        r"\bbefore (this|the last|the previous|an earlier|these|those) ([\w`']+ ){0,3}?"
        r"(rounds?|sessions?|changes?|rewrites?|splits?|stages|cuts|fixes|registers)\b",
        "before a change",
    ),
    (r"\bbefore (the |its )?(\w+ )?(split|retiming|rewrites?)\b", "before a change"),
    (r"\(before\)|\b(was|were) ([\w`'.]+ ){0,4}before(?=[,;.)]|\s*\n)", "before (history)"),
    (r"\b(default|history|figure|figures) before\b", "before (history)"),
    (r"\bbefore that[,:;.]", "before that"),
    (r"\b\d[\d.,]* ?[kM]? ?(MHz|LUTs?|DSPs?|DSP48E2s?|x|%) before\b", "a figure before"),
    (r"\bbecame\b", "became"),
    (r"\bhad (drifted|been|taken|given)\b", "had been"),
    (r"\btook ([\w`'\u00b7]+ ){1,3}from [\d.]+ to\b", "took it from ... to"),
    (r"\b\d[\d.,]*( \w+)? now\b", "a figure now"),
    (r"\b(was|were) formerly\b|\bformerly\b", "formerly"),
    (r"\(was [^)]{1,80}\)", "(was ...)"),
    (r"\b(as|than) before\b", "as before"),
    (r"\bthe new default\b|\bnow the default\b", "a changed default"),
    (r"\b(an|the) earlier (round|session|version|run|measurement|figure)s?\b", "an earlier one"),
    (r"\buntil (this|the last|recently)\b", "until recently"),
]
HISTORY = [(re.compile(p, re.IGNORECASE), why) for p, why in HISTORY]


def history_hits(text: str) -> list[tuple[int, str, str]]:
    """Every history phrase in ``text``, as (line number, phrase, kind), in order."""
    hits = []
    for pattern, why in HISTORY:
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            hits.append((line, " ".join(match.group(0).split()), why))
    return sorted(hits)


def _python_prose(source: str) -> str:
    """The comments and docstrings of Python ``source``, at their own lines, the rest blank.

    A docstring is a string token that is a statement of its own (after a newline, an indent
    or a dedent, or first in the file); strings inside expressions (messages, keys) are code.
    """
    lines = source.count("\n") + 1
    out = [""] * (lines + 1)
    previous = tokenize.NEWLINE
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    for tok in tokens:
        if tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING
            and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL)
        ):
            for offset, part in enumerate(tok.string.split("\n")):
                out[tok.start[0] - 1 + offset] += " " + part
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok.type
    return "\n".join(out)


def _c_prose(source: str) -> str:
    """The comments of C ``source``, at their own lines, the rest blank."""
    out = []
    position = 0
    for match in re.finditer(r"//[^\n]*|/\*.*?\*/", source, re.DOTALL):
        out.append("\n" * source.count("\n", position, match.start()))
        out.append(match.group(0))
        position = match.end()
    return "".join(out)


def prose_of(path: Path) -> str:
    """The text of ``path`` that is prose: all of Markdown and YAML, comments and docstrings
    of code."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return _python_prose(text)
    if path.suffix in (".c", ".h"):
        return _c_prose(text)
    return text


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def scanned_files() -> list[Path]:
    files = documents()
    for folder in SOURCE_DIRS:
        files += sorted(
            p
            for p in (ROOT / folder).rglob("*")
            if p.suffix in SOURCE_SUFFIXES and p.is_file() and "__pycache__" not in p.parts
        )
    return files


def long_cells(text: str, limit: int = MAX_CELL) -> list[tuple[int, int]]:
    """(line number, length) of every Markdown table cell in ``text`` over ``limit`` characters."""
    found = []
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code or not line.lstrip().startswith("|"):
            continue
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        found += [(number, len(c.strip())) for c in cells if len(c.strip()) > limit]
    return found


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", scanned_files(), ids=_relative)
def test_no_development_history(path):
    hits = history_hits(prose_of(path))
    assert not hits, "\n".join(
        f"{_relative(path)}:{n}: {phrase!r} ({why})" for n, phrase, why in hits
    )


@pytest.mark.parametrize("path", documents(), ids=_relative)
def test_no_table_cell_over_200_characters(path):
    cells = long_cells(path.read_text(encoding="utf-8"))
    assert not cells, "\n".join(
        f"{_relative(path)}:{n}: a cell of {size} characters" for n, size in cells
    )


def test_readme_is_a_short_guide():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


HISTORICAL = [
    "The figure was re-measured this round, unchanged.",
    "At commit 0fea063, before two rounds of pipeline stages, it was 238.7 MHz.",
    "At this session's load average of 5 the ratio could not be re-timed.",
    "With the multiplier rescale before issue 19 the error was 0.04 %.",
    "The refit before that: FILL 42, GAP 13.",
    "It took 3.1k LUTs (was 4.2k).",
    "Before the change the parser took 3.1k LUTs.",
    "This path previously used a DSP; it is no longer needed.",
    "Before this round: 114 DSP48E2.",
    "The last round's cuts moved the FIFO ready.",
    "As measured last time, see issue #12.",
    "The fabric products are the new default.",
    "Its longest path is the rounding shift (282 MHz before the ROM moved).",
]

TECHNICAL = [
    "Round to nearest, ties away from zero; the rounding carry is a stage of its own.",
    "Requests are served round robin, before the clock edge that samples them.",
    "The UART's stop bit ends each frame; a round trip takes two cycles.",
    "The FIFO holds no longer than its depth; the previous beat is kept.",
    "K is read before V, and the result is ready before the next request starts.",
    "See the issue tracker for open questions. The commit message says why.",
]


@pytest.mark.parametrize("text", HISTORICAL)
def test_the_scan_catches_history(text):
    assert history_hits(text), text


@pytest.mark.parametrize("text", TECHNICAL)
def test_the_scan_leaves_technical_prose(text):
    assert not history_hits(text), history_hits(text)


def test_the_scan_reads_comments_and_docstrings_not_code():
    source = (
        '"""Module docstring, measured this round."""\n'
        "x = 'previously'  # the comment says: no longer needed\n"
        "def f():\n"
        '    """Refit at commit abc1234."""\n'
        '    return "used to be"\n'
    )
    found = {(n, why) for n, _, why in history_hits(_python_prose(source))}
    assert found == {
        (1, "a development round"),
        (2, "no longer"),
        (4, "a refit"),
        (4, "a commit hash"),
        (4, "a commit"),
    }
    c_found = history_hits(_c_prose('int x; /* previously 3 */\nchar *s = "no longer";\n'))
    assert [(n, why) for n, _, why in c_found] == [(1, "previously")]


def test_the_cell_check_finds_a_long_cell():
    table = "| a | b |\n|---|---|\n| short | " + "x" * 201 + " |\n"
    assert long_cells(table) == [(3, 201)]
    assert long_cells("```\n| " + "x" * 300 + " |\n```\n") == []


if __name__ == "__main__":
    total = 0
    for path in scanned_files():
        for number, phrase, why in history_hits(prose_of(path)):
            print(f"{_relative(path)}:{number}: {phrase!r} ({why})")
            total += 1
    for path in documents():
        for number, size in long_cells(path.read_text(encoding="utf-8")):
            print(f"{_relative(path)}:{number}: a table cell of {size} characters")
            total += 1
    print(f"{total} hits", file=sys.stderr)
