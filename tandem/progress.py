"""Progress of long steps, on stderr (results stay on stdout).

The library functions that can take minutes (:func:`tandem.sim.runner.run_regression`,
:func:`tandem.synth.synthesize`) take an optional ``progress`` callable and call it with one
line per step; the CLI passes :func:`stderr_progress`, Python callers may pass their own (or
nothing, and stay silent).
"""

import sys
import time
from collections.abc import Callable

__all__ = ["Progress", "stderr_progress"]

#: What a long-running function calls with each step's line.
Progress = Callable[[str], None]


def stderr_progress(command: str) -> Progress:
    """A :data:`Progress` that prints ``tandem COMMAND: LINE (N s)`` to stderr, ``N`` the
    seconds since it was made (so each line says how long the work has taken so far)."""
    start = time.perf_counter()

    def report(line: str) -> None:
        seconds = time.perf_counter() - start
        print(f"tandem {command}: {line} ({seconds:.0f} s)", file=sys.stderr, flush=True)

    return report
