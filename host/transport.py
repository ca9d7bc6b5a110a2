"""Transports: how an :class:`~tandem.host.devices.HpuDevice` reaches its engine.

A transport is the thin layer under the device API. It owns the device memory and executes
batches of :class:`~tandem.host.hpu.HpuRequest` the way the card does: every request appends
its new token (when it carries one) to memory and returns its result; a batch is one transfer
of packed descriptors, answered in order. Everything above it (allocation, the KV layout,
quantization, placement across cards) is shared by every backend, so a script runs unchanged
on either and gets bit-identical results.

Backends
--------
``golden`` (:class:`GoldenTransport`)
    A numpy image of device memory and :func:`~tandem.host.hpu.hpu_golden`. Fast; cycles come
    from the cycle model :func:`call_cycles`.
``rtl`` (:class:`tandem.host.transport_rtl.RtlTransport`)
    The generated Verilog in Verilator or Icarus under cocotb, in a subprocess; cycles are
    simulated clock cycles.

Cycle model of the engine (golden backend)
------------------------------------------
The engine overlaps requests (docs/hpu.md, "How a request flows"): the descriptor parser, the
two read ports and the result stream each work on their own request, so a batch is bound by
the busiest of the three per request, plus the pipeline's fill once per batch::

    cycles(batch) = FILL + sum over requests of max(D, R, O) + GAP
    D = descriptor beats  = header_beats + (2 row_beats if append) + G * q_beats
    R = read beats / port = the beats of KvLayout.read_bursts (scale blocks + rows)
    O = result beats      = G * (row_beats + 1 if partial else row_beats)

``FILL`` covers the memory latency of the first burst, the K and V pipelines and the output
(:data:`FILL_CYCLES`); ``GAP`` the turn-around between two requests (:data:`GAP_CYCLES`).
Both are fitted to the RTL: ``python benchmarks/decode_cycles.py`` runs ten batches (1-8
requests, lengths 1-250, appends and partial requests) on both backends for two engines (the
co-simulation tests' ``hd32-g2`` and the default one) and picks the integers that minimize the
largest relative error over both: FILL 41, GAP 4, within 10.3 % of Icarus on ``hd32-g2`` and
9.3 % on the default engine. A fit to one engine alone gets 7-8 % on it but up to 32 % on the
other: what is left is structure the model does not have (a lone request overlaps its
descriptor, reads and results less than ``max(D, R, O)`` assumes; the turn-around depends on
the pipeline depths). The RTL co-simulation test checks the model stays within 15 %.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .hpu import HpuParams, HpuRequest, HpuResult, hpu_golden, pack_descriptor
from .hpu.cycles import call_cycles

__all__ = [
    "CallResult",
    "GoldenTransport",
    "Transport",
]


@dataclass
class CallResult:
    """What one :meth:`Transport.run` returns: results in request order and cycles taken."""

    results: list[HpuResult]
    cycles: int


def _as_emitted(result: HpuResult, request: HpuRequest) -> HpuResult:
    """``result`` reduced to what the engine emits (as :func:`unpack_results` rebuilds it).

    Full mode carries only ``y``; partial mode only ``(m, l, o)``. Both backends return this
    form, so their results compare field by field.
    """
    empty = np.zeros(0, dtype=np.int64)
    if request.partial:
        return HpuResult(request.seq_id, result.m, result.l, result.o, None)
    return HpuResult(request.seq_id, empty, empty, empty, result.y)


class Transport(ABC):
    """The device memory and engine behind an :class:`~tandem.host.devices.HpuDevice`.

    Parameters
    ----------
    params
        The engine's parameters.
    memory_bytes
        Size of device memory in bytes (addresses ``0 .. memory_bytes - 1``).
    """

    backend = "abstract"

    def __init__(self, params: HpuParams, memory_bytes: int):
        self.params = params
        self.memory_bytes = int(memory_bytes)

    def _check_span(self, address: int, size: int) -> None:
        if address < 0 or size < 0 or address + size > self.memory_bytes:
            raise ValueError(
                f"device memory access {address:#x}+{size} outside 0..{self.memory_bytes:#x}"
            )

    @abstractmethod
    def write(self, address: int, data) -> None:
        """Host write of the bytes ``data`` (bytes or uint8 array) at ``address``."""

    @abstractmethod
    def read(self, address: int, size: int) -> np.ndarray:
        """Host read of ``size`` bytes at ``address`` (a uint8 array)."""

    @abstractmethod
    def run(self, requests: list[HpuRequest]) -> CallResult:
        """Send ``requests`` as one batch of descriptors and return their results in order."""

    def close(self) -> None:  # noqa: B027 (optional for transports with nothing to release)
        """Release the backend (stop a simulator); the transport is unusable afterwards."""


class GoldenTransport(Transport):
    """Device memory as a numpy array, requests through :func:`hpu_golden`.

    Executes each request exactly as the engine does: reads the K and V rows of positions
    ``0 .. n_mem - 1`` at the request's base from memory (:meth:`KvLayout.read_rows`), writes
    the appended token's rows and scales to memory, and computes the result bit-exactly.
    """

    backend = "golden"

    def __init__(self, params: HpuParams, memory_bytes: int):
        super().__init__(params, memory_bytes)
        self.memory = np.zeros(self.memory_bytes, dtype=np.uint8)

    def write(self, address: int, data) -> None:
        data = (
            np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        )
        self._check_span(address, len(data))
        self.memory[address : address + len(data)] = data

    def read(self, address: int, size: int) -> np.ndarray:
        self._check_span(address, size)
        return self.memory[address : address + size].copy()

    def run(self, requests: list[HpuRequest]) -> CallResult:
        p = self.params
        layout = p.layout
        results = []
        for r in requests:
            pack_descriptor(p, r)  # the same checks the descriptor packing applies
            self._check_span(r.base, layout.region_bytes(r.length))
            n_mem = r.length - (1 if r.append else 0)
            k, ks = layout.read_rows(self.memory, r.base, 0, n_mem, value=False)
            v, vs = layout.read_rows(self.memory, r.base, 0, n_mem, value=True)
            if r.append:
                nk = np.asarray(r.new_k, dtype=np.int64).reshape(1, p.head_dim)
                nv = np.asarray(r.new_v, dtype=np.int64).reshape(1, p.head_dim)
                nks = np.array([r.new_k_scale], dtype=np.float16)
                nvs = np.array([r.new_v_scale], dtype=np.float16)
                layout.write_rows(self.memory, r.base, n_mem, nk, nks, value=False)
                layout.write_rows(self.memory, r.base, n_mem, nv, nvs, value=True)
                k, ks = np.concatenate([k, nk]), np.concatenate([ks, nks])
                v, vs = np.concatenate([v, nv]), np.concatenate([vs, nvs])
            full = hpu_golden(p, r.q, r.q_scale, k, ks, v, vs, r.partial)
            results.append(_as_emitted(full, r))
        return CallResult(results, call_cycles(p, requests))
