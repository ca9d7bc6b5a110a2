"""Thread pools of the numeric libraries a tandem process uses: one place decides them.

A tandem process can hold three pools at once: OpenBLAS under numpy and scipy (the golden
models' exact integer sums in float64), torch's OpenMP pool (the GPU side on the CPU and the
compiler's calibration) and, in libraries that link it, MKL. Each sizes itself to every core
of the machine and, by default, keeps its idle workers spinning for a while after each parallel
region (OpenBLAS about 2**28 cycles, libgomp until ``GOMP_SPINCOUNT`` runs out). Two pools side
by side, or another program on the same cores, then turn idle spinning into stolen time: the
work waits for cores that spinning threads hold. :func:`configure_threads` sizes every pool to
one budget (``--threads``, by default the cores no other process is running on) and makes idle
workers sleep at once. It sets the environment the libraries read when they load, so the
``tandem`` command calls it before anything imports numpy or torch; pools already loaded (a
Python session that imported numpy first) are resized through threadpoolctl and torch's own
setter.

Golden calls that run inside a host loop also hold the BLAS to one thread
(:func:`one_blas_thread`): the products are small enough that one thread loses nothing, and
waking a pool for each of them costs more than the product.
"""

import math
import os
import sys
import time
from functools import cache

__all__ = [
    "available_cores",
    "configure_threads",
    "free_cores",
    "one_blas_thread",
    "thread_budget",
]

#: Environment variables that size a pool; each gets the budget.
_COUNT_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: Environment variables that make idle workers sleep instead of spinning. OpenBLAS spins for
#: 2**N cycles (N clamped to 4..30, default 28); libgomp and Intel's OpenMP honour the policy.
_SLEEP_VARIABLES = {
    "OMP_WAIT_POLICY": "PASSIVE",
    "OPENBLAS_THREAD_TIMEOUT": "4",
    "KMP_BLOCKTIME": "0",
}

_budget: int | None = None


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:  # cgroup v2: "max 100000" or "<quota> <period>"
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def _other_runnable() -> int | None:
    """Runnable tasks other than this one, from ``/proc/loadavg`` (None where it cannot tell).

    The median of three samples 5 ms apart, so that a task that wakes for an instant does not
    count as a busy core.
    """
    samples = []
    for attempt in range(3):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        samples.append(running - 1)  # this process is one of them
        if attempt < 2:
            time.sleep(0.005)
    return sorted(samples)[1]


def free_cores() -> int:
    """The cores no other process is running on now (at least one).

    Read from the kernel's count of runnable tasks; where that is not available, from the
    one-minute load average.
    """
    cores = available_cores()
    busy = _other_runnable()
    if busy is None:
        try:
            busy = round(os.getloadavg()[0])
        except OSError:
            busy = 0
    return max(1, min(cores, cores - max(0, busy)))


def configure_threads(threads: int | None = None) -> int:
    """Size every numeric thread pool of this process to one budget and stop idle spinning.

    Parameters
    ----------
    threads
        Threads for torch, BLAS and OpenMP together, at most :func:`available_cores`; None: a
        variable the user set (``OMP_NUM_THREADS``) wins, else :func:`free_cores`.

    Returns
    -------
    int
        The budget now in force.
    """
    global _budget
    if threads is not None:
        cores = available_cores()
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cores:
            raise ValueError(f"threads must be an integer in 1..{cores}, not {threads!r}")
        budget = threads
    else:
        preset = os.environ.get("OMP_NUM_THREADS", "")
        budget = int(preset) if preset.isdigit() and int(preset) > 0 else free_cores()
    if budget == _budget:
        return budget  # in force already: resizing a pool that is in use is not free
    for name in _COUNT_VARIABLES:
        os.environ[name] = str(budget)
    for name, value in _SLEEP_VARIABLES.items():
        os.environ.setdefault(name, value)
    # Pools that loaded before this call keep their first size unless told.
    if "numpy" in sys.modules or "scipy" in sys.modules:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=budget)
        _blas_libraries.cache_clear()
    torch = sys.modules.get("torch")
    # Only a change: torch's setter rebuilds its OpenMP pool even at the same size.
    if (
        torch is not None
        and hasattr(torch, "set_num_threads")
        and torch.get_num_threads() != budget
    ):
        torch.set_num_threads(budget)
    _budget = budget
    return budget


def thread_budget() -> int:
    """The budget :func:`configure_threads` set, or the free cores where it was not called."""
    return _budget if _budget is not None else free_cores()


@cache
def _blas_libraries() -> tuple:
    """The loaded BLAS libraries' controllers, found once (milliseconds) after numpy loaded."""
    import numpy  # noqa: F401  (loads numpy's BLAS, so that it is found)
    from threadpoolctl import ThreadpoolController

    return tuple(ThreadpoolController().select(user_api="blas").lib_controllers)


class _OneBlasThread:
    """Context manager: the BLAS libraries on one thread inside, their counts restored after.

    Two foreign calls per library on the way in and out (about a microsecond each), where
    threadpoolctl's own ``limit`` re-reads every library's state (tens of microseconds): the
    golden HPU backend enters it once per batch, every layer of every decode step.
    """

    def __enter__(self):
        self._restore = []
        for library in _blas_libraries():
            threads = library.get_num_threads()
            if threads != 1:
                library.set_num_threads(1)
                self._restore.append((library, threads))
        return self

    def __exit__(self, *exc) -> None:
        for library, threads in self._restore:
            library.set_num_threads(threads)


def one_blas_thread() -> _OneBlasThread:
    """A context manager that limits the loaded BLAS libraries to one thread."""
    return _OneBlasThread()
