"""Compare what the design produced with what its golden model predicts."""

from collections.abc import Sequence

import numpy as np

__all__ = ["Scoreboard", "first_mismatch"]


def first_mismatch(expected: Sequence[int], actual: Sequence[int]) -> int | None:
    """Index of the first differing element (or of the length difference), None if equal."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    common = min(len(expected), len(actual))
    differ = np.nonzero(expected[:common] != actual[:common])[0]
    if differ.size:
        return int(differ[0])
    return None if len(expected) == len(actual) else common


class Scoreboard:
    """Bit-exact comparison of a design's outputs against its golden model.

    Parameters
    ----------
    name
        What is being checked, for messages.
    inputs
        Stimulus, reported beside a mismatch when outputs correspond one to one with inputs.
    expected
        Golden-model outputs, in order.
    """

    def __init__(self, name: str, expected: Sequence[int], inputs: Sequence[int] | None = None):
        self.name = name
        self.expected = np.asarray(expected, dtype=np.int64)
        # Packed payloads can be wider than 64 bits: keep them as Python ints.
        self.inputs = None if inputs is None else [int(v) for v in inputs]

    def check(self, actual: Sequence[int]) -> None:
        """Raise ``AssertionError`` naming the first mismatch: index, input, expected, actual."""
        actual = np.asarray(actual, dtype=np.int64)
        index = first_mismatch(self.expected, actual)
        if index is None:
            return
        if index >= min(len(self.expected), len(actual)):
            raise AssertionError(
                f"{self.name}: expected {len(self.expected)} outputs, got {len(actual)}"
            )
        wrong = int(np.count_nonzero(self.expected[: len(actual)] != actual[: len(self.expected)]))
        stimulus = ""
        if self.inputs is not None and len(self.inputs) == len(self.expected):
            stimulus = f" (input {self.inputs[index]:#x})"
        raise AssertionError(
            f"{self.name}: first mismatch at index {index}{stimulus}: expected "
            f"{int(self.expected[index])}, got {int(actual[index])}; {wrong} of "
            f"{len(self.expected)} differ"
        )
