"""Error classes that decide how the CLI exits.

A :class:`UserError` is something the user can fix (a bad value, a missing file, an unknown
design); the CLI prints its message on one line and exits with status 2. A
:class:`VerificationError` means the hardware disagreed with its golden model, a
:class:`ToolError` that an external tool failed on valid input; exit status 1.
Anything else is a bug in tandem and keeps its traceback.
"""

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""

    exit_status = 2


class ToolError(RuntimeError):
    """An external tool (yosys) failed on valid input: one line naming its log, exit status 1."""

    exit_status = 1


class VerificationError(Exception):
    """The design under test disagreed with its golden model: exit status 1."""

    exit_status = 1


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
