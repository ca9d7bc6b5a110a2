"""Parameters and golden models of the arithmetic helpers every datapath reuses.

* ``adder-tree``: sum of ``n_inputs`` signed words, one register per tree level.
* ``mac``: signed multiply-accumulate shaped like a DSP48E2 (27x18 multiply, 48-bit
  accumulator, A/B, M and P registers), so the multiply maps onto exactly one DSP48E2.
"""

from dataclasses import dataclass

import numpy as np

from tandem.config import Params, param

__all__ = [
    "AdderTreeParams",
    "MacParams",
    "adder_tree_golden",
    "mac_golden",
    "wrap",
]


def wrap(value, bits: int) -> np.ndarray:
    """Two's-complement wrap of integers to ``bits`` bits (what a fixed-width register keeps)."""
    value = np.asarray(value, dtype=np.int64)
    if bits >= 64:
        return value
    mask = (1 << bits) - 1
    half = 1 << (bits - 1)
    return ((value & mask) ^ half) - half


@dataclass(frozen=True)
class AdderTreeParams(Params):
    """A pipelined adder tree: ``n_inputs`` signed words in, their exact sum out.

    The output is ``in_bits + ceil(log2(n_inputs))`` bits wide, so it never overflows. Latency is
    ``ceil(log2(n_inputs))`` cycles (one register per level).
    """

    design = "adder-tree"

    n_inputs: int = param(8, "number of words summed per transfer", min=2, max=256)
    in_bits: int = param(16, "width of each signed input word", min=2, max=48)

    @property
    def levels(self) -> int:
        """Tree depth: ceil(log2(n_inputs))."""
        return (self.n_inputs - 1).bit_length()

    @property
    def out_bits(self) -> int:
        """Width of the signed sum."""
        return self.in_bits + self.levels


def adder_tree_golden(params: AdderTreeParams, words) -> np.ndarray:
    """Exact sums of ``words`` (shape ``(..., n_inputs)``), int64."""
    words = np.asarray(words, dtype=np.int64)
    if words.shape[-1] != params.n_inputs:
        raise ValueError(f"expected {params.n_inputs} words per row, got {words.shape[-1]}")
    return words.sum(axis=-1)


@dataclass(frozen=True)
class MacParams(Params):
    """Signed multiply-accumulate in the shape of one DSP48E2.

    Each input transfer carries ``a`` (signed ``a_bits``), ``b`` (signed ``b_bits``) and
    ``last``; the accumulator adds ``a*b`` and, on ``last``, emits the sum and restarts from
    zero. The accumulator is ``acc_bits`` wide and wraps in two's complement, like the DSP's P
    register; size it (or the dot-product length) so that it cannot overflow where exactness
    matters. Latency three cycles: A/B registers, M register, P register.
    """

    design = "mac"

    a_bits: int = param(27, "width of the signed multiplicand a (DSP48E2 A: 27)", min=2, max=27)
    b_bits: int = param(18, "width of the signed multiplier b (DSP48E2 B port: 18)", min=2, max=18)
    acc_bits: int = param(48, "width of the wrapping accumulator (DSP48E2 P: 48)", min=2, max=48)


def mac_golden(params: MacParams, a, b, last) -> np.ndarray:
    """Accumulated ``a*b`` over each group that ``last`` closes, wrapped to ``acc_bits``.

    Elements after the final ``last`` form an unfinished group and produce no output.
    """
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    last = np.asarray(last, dtype=bool)
    products = wrap(a * b, params.acc_bits)
    ends = np.nonzero(last)[0]
    if ends.size == 0:
        return np.zeros(0, dtype=np.int64)
    running = np.cumsum(products)
    at_end = running[ends]
    before = np.concatenate([[0], at_end[:-1]])
    return wrap(at_end - before, params.acc_bits)
