"""The backend protocol: how a device reaches its engine, whatever runs the engine.

A :class:`Backend` takes a batch of requests (datapath-specific objects) and returns a
:class:`Call`: one result per request, in order, and the cycles the batch took. A backend with
device memory (the ``hpu``'s KV cache) also exposes a :class:`MemoryPort`. Everything above the
protocol (allocation, layouts, quantization, packing, mapping) is shared by every backend, so a
script runs unchanged on either and gets bit-identical results.

Two kinds implement it for every datapath:

``golden``
    The datapath's bit-exact numpy model, one vectorized call per batch; cycles from the
    datapath's cycle model (the one the performance model reads).
``rtl``
    The generated Verilog in Verilator or Icarus under cocotb, in a subprocess reached through
    :class:`~tandem.host.backend.cosim.CosimClient`; the datapath adds only a codec (requests
    to port beats, beats to results); cycles are simulated clock cycles.
"""

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

__all__ = ["BACKENDS", "ArrayMemory", "Backend", "Call", "MemoryPort", "check_span"]

#: The backend kinds every device offers.
BACKENDS = ("golden", "rtl")


@dataclass
class Call:
    """What :meth:`Backend.run` returns for one batch.

    Attributes
    ----------
    results
        One result per request, in request order: a list, or a sequence of arrays that
        indexes the same way (the HPU's :class:`~tandem.host.hpu.codec.HpuResults`).
    cycles
        Cycles of the batch: engine cycles, or for engines working side by side the largest.
    engine_cycles
        Cycles per engine (one entry, ``{design: cycles}``, for a single engine).
    saturations
        Values the datapath saturated, by place (``{"score": 3}``; places with none may be
        left out), or None where the backend cannot observe them.
    """

    results: Sequence
    cycles: int
    engine_cycles: Mapping[str, int] = field(default_factory=dict)
    saturations: Mapping[str, int] | None = None


def check_span(size: int, address: int, count: int) -> None:
    """Raise ``ValueError`` unless bytes ``address .. address + count - 1`` lie in ``size``."""
    if address < 0 or count < 0 or address + count > size:
        raise ValueError(f"device memory access {address:#x}+{count} outside 0..{size:#x}")


class MemoryPort(ABC):
    """Host access to a device's memory (the PCIe side of a card), bytes at byte addresses."""

    size: int

    @abstractmethod
    def write(self, address: int, data) -> None:
        """Host write of the bytes ``data`` (bytes or a uint8 array) at ``address``."""

    @abstractmethod
    def read(self, address: int, size: int) -> np.ndarray:
        """Host read of ``size`` bytes at ``address`` (a uint8 array)."""


class ArrayMemory(MemoryPort):
    """Device memory as a numpy uint8 array (the golden backends' memory)."""

    def __init__(self, size: int):
        self.size = int(size)
        self.array = np.zeros(self.size, dtype=np.uint8)

    def write(self, address: int, data) -> None:
        if not isinstance(data, np.ndarray):
            data = np.frombuffer(bytes(data), dtype=np.uint8)
        check_span(self.size, address, len(data))
        self.array[address : address + len(data)] = data

    def read(self, address: int, size: int) -> np.ndarray:
        check_span(self.size, address, size)
        return self.array[address : address + size].copy()


class Backend(ABC):
    """One engine (or a set working side by side) behind a device.

    Subclasses set :attr:`name` (``"golden"`` or ``"rtl"``) and implement :meth:`run`; those
    with device memory set :attr:`memory`. :meth:`close` releases what the backend holds (a
    simulator); the device refuses calls after it, on every backend alike.
    """

    name: ClassVar[str] = "abstract"
    #: Keyword options a golden backend accepts through its device (RTL backends take theirs
    #: by signature).
    options: ClassVar[tuple[str, ...]] = ()
    #: Device memory, for datapaths that have one.
    memory: MemoryPort | None = None

    @abstractmethod
    def run(self, requests: list) -> Call:
        """Run ``requests`` as one batch and return their results in order and the cycles."""

    def submit(self, requests: list) -> None:
        """Start ``requests`` as one batch; :meth:`collect` returns its :class:`Call`.

        Between the two the host may start batches on other backends, so that engines in
        separate simulator processes (several cards) work at the same time. Backends that
        compute in this process run the batch here.
        """
        self._submitted = self.run(requests)

    def collect(self) -> Call:
        """The :class:`Call` of the batch :meth:`submit` started."""
        call, self._submitted = self._submitted, None
        return call

    _submitted: Call | None = None

    @property
    def started(self) -> bool:
        """True while the backend holds a running process (an RTL simulator)."""
        return False

    def close(self) -> None:  # noqa: B027 (golden backends hold nothing to release)
        """Release the backend; it is unusable afterwards."""
