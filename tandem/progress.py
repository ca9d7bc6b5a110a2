"""Progress of long steps, on stderr (results stay on stdout).

The library functions that can take minutes (:func:`tandem.sim.runner.run_regression`,
:func:`tandem.synth.synthesize`, :func:`tandem.bench.run_suite`, :func:`tandem.sweep.run_sweep`)
take an optional ``progress`` callable and call it with one line (or one entry) per step; the
CLI passes :func:`stderr_progress`, Python callers may pass their own (or nothing, and stay
silent). Work made of many like items (the points of a sweep, the scripts of the suite) counts
them with :func:`counted`: ``[done/total]`` on each finished item's line.
"""

import sys
import time
from collections.abc import Callable

__all__ = ["Progress", "counted", "stderr_progress"]

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


def counted(progress: Progress, total: int) -> Progress:
    """A :data:`Progress` that passes each line to ``progress`` as ``[done/total] LINE``,
    ``done`` the number of lines so far: one call per finished item of ``total``."""
    done = 0

    def report(line: str) -> None:
        nonlocal done
        done += 1
        progress(f"[{done}/{total}] {line}")

    return report
