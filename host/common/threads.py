"""Thread pools of the numeric libraries the golden models call.

The golden models use numpy's BLAS for exact integer sums in float64 (small matrix products,
every partial sum below 2**53). OpenBLAS runs a product above a size threshold on all cores
and its workers then spin for a while; in the decode runtime those spinning threads take the
cores torch's threads need for the GPU side, and the whole step slows down (measured with
``benchmarks/decode_speed.py``: the torch side of the golden HPU run took 2.6x as long as the
same work without golden calls). Golden calls that run inside a host loop hold the BLAS to one
thread instead; the products are small enough that one thread loses nothing.
"""

from functools import cache

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread"]


@cache
def _blas_libraries() -> tuple:
    """The loaded BLAS libraries' controllers, found once (milliseconds) after numpy loaded."""
    import numpy  # noqa: F401  (loads numpy's BLAS, so that it is found)

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
