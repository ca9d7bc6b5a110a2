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
def _controller() -> ThreadpoolController:
    return ThreadpoolController()  # finds the loaded BLAS libraries once (milliseconds)


def one_blas_thread():
    """A context manager that limits the loaded BLAS libraries to one thread (a few µs)."""
    return _controller().limit(limits=1, user_api="blas")
