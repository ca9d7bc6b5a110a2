"""The RTL backend of one ``hpu`` engine or card: the generated Verilog in Verilator (default) or
Icarus, in a subprocess (:mod:`tandem.sim.cosim.hpu_server`, the card's
:mod:`tandem.sim.cosim.card_server`), bit for bit what the golden backend
(:mod:`tandem.host.hpu.golden_backend`) returns, with simulated clock cycles.
:class:`~tandem.host.hpu.device.HpuDevice` runs it as ``backend="rtl"``.
"""

import json
from pathlib import Path

import numpy as np
from tandem.host.backend.backend import Backend, Call, MemoryPort, check_span
from tandem.host.backend.cosim import CosimClient
from tandem.host.common.errors import MemoryResponseError

from .card import HpuCardParams
from .codec import HpuBatch, HpuRequest, HpuResult, HpuResults, pack_descriptor, unpack_results
from .params import HpuParams

__all__ = ["RtlHpuBackend", "check_failed", "emitted"]


def emitted(result: HpuResult, request: HpuRequest) -> HpuResult:
    """``result`` reduced to what the engine emits (as :func:`unpack_results` rebuilds it).

    Full mode carries only ``y``; partial mode only ``(m, l, o)``. Both backends return this
    form, so their results compare field by field.
    """
    empty = np.zeros(0, dtype=np.int64)
    if request.partial:
        return HpuResult(request.seq_id, result.m, result.l, result.o, None)
    return HpuResult(request.seq_id, empty, empty, empty, result.y)


def check_failed(requests: list[HpuRequest], failed: list[int]) -> None:
    """Raise :class:`~tandem.host.common.errors.MemoryResponseError` naming the first of the
    requests whose result came back with the ``error`` flag (indices in ``failed``)."""
    if not failed:
        return
    first = requests[failed[0]]
    others = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    raise MemoryResponseError(
        f"request {failed[0]} of {len(requests)} (seq_id {first.seq_id}, base {first.base:#x}, "
        f"length {first.length}){others}: the engine's memory answered an access with an "
        "error (an AXI RRESP/BRESP other than OKAY); the result is void"
    )


class _CosimMemory(MemoryPort):
    """Device memory inside the simulator, through the server's ``write``/``read`` messages."""

    def __init__(self, client: "RtlHpuBackend", size: int):
        self.client = client
        self.size = int(size)

    def write(self, address: int, data) -> None:
        data = bytes(np.asarray(data, dtype=np.uint8)) if isinstance(data, np.ndarray) else data
        check_span(self.size, address, len(data))
        self.client._call("write", int(address), bytes(data))

    def read(self, address: int, size: int) -> np.ndarray:
        check_span(self.size, address, size)
        (data,) = self.client._call("read", int(address), int(size))
        return np.frombuffer(data, dtype=np.uint8).copy()


class RtlHpuBackend(CosimClient, Backend):
    """The ``hpu`` engine as RTL in Verilator or Icarus, served by
    :mod:`tandem.sim.cosim.hpu_server`.

    Host writes and reads of device memory are messages to the server (its AXI4 memory
    model); a batch is its packed descriptors (:func:`pack_descriptor`), whose result beats
    come back as words and are rebuilt with :func:`unpack_results`: bit for bit what the
    engine emitted, with the batch's simulated clock cycles.

    Parameters
    ----------
    params
        The engine's parameters, or a card's (:class:`~tandem.host.hpu.card.HpuCardParams`:
        the ``hpu-card`` design on the card's HBM model, served by
        :mod:`tandem.sim.cosim.card_server` on the cocotb harness, the card's default, or by
        :class:`~tandem.sim.native.server.CardServer` with ``harness="native"``, with the same
        results and cycles).
    memory_bytes
        Size of device memory in bytes.
    simulator, timeout_s, start_timeout_s, cache_dir, run_dir, harness, waves, progress
        As :class:`~tandem.host.backend.cosim.CosimClient`.
    """

    name = "rtl"

    def __init__(
        self,
        params: HpuParams,
        memory_bytes: int,
        *,
        simulator: str = "verilator",
        timeout_s: float = 120.0,
        start_timeout_s: float = 900.0,
        cache_dir: str | Path | None = None,
        run_dir: str | Path | None = None,
        harness: str | None = None,
        waves: str | Path | None = None,
        progress=None,
    ):
        if isinstance(params, HpuCardParams) and harness is None:
            # Both harnesses serve the card alike; cocotb stays its default so that a card run
            # with no harness named is the one its regression (sim/hpu/card_tb.py) checks.
            harness = "cocotb"
        CosimClient.__init__(
            self,
            simulator=simulator,
            timeout_s=timeout_s,
            start_timeout_s=start_timeout_s,
            cache_dir=cache_dir,
            run_dir=run_dir,
            harness=harness,
            waves=waves,
            progress=progress,
        )
        self.params = params
        self.memory = _CosimMemory(self, memory_bytes)

    def _launch_args(self) -> list[str]:
        return [
            "--design",
            "hpu-card" if isinstance(self.params, HpuCardParams) else "hpu",
            "--params",
            json.dumps(self.params.to_dict()),
            "--memory",
            str(self.memory.size),
        ]

    def run(self, requests: HpuBatch | list[HpuRequest]) -> Call:
        self.submit(requests)
        return self.collect()

    def submit(self, requests: HpuBatch | list[HpuRequest]) -> None:
        """Send the batch's descriptors to the simulator without waiting for its results."""
        p = self.params
        if isinstance(requests, HpuBatch):
            requests = requests.requests()
        for r in requests:
            check_span(self.memory.size, r.base, int(p.layout.region_end(0, r.length)))
        descriptors = [pack_descriptor(p, r) for r in requests]
        self._requests = requests
        if descriptors:
            self._send("run", descriptors)

    def collect(self) -> Call:
        """Wait for the results of the batch :meth:`submit` sent."""
        p, requests = self.params, self._requests
        self._requests = None
        partial = [r.partial for r in requests]
        if not requests:
            return Call(HpuResults.of(p, [], partial), 0, {})
        beats, cycles, failed = self._receive("run")
        check_failed(requests, failed)
        results = [
            emitted(unpack_results(p, words, r.partial, r.seq_id), r)
            for words, r in zip(beats, requests, strict=True)
        ]
        return Call(HpuResults.of(p, results, partial), int(cycles), {"hpu": int(cycles)})

    _requests: list | None = None

    def set_read_latency(self, cycles: int) -> None:
        """Cycles from each read address to its first data beat in the simulated memory from
        now on (2, the default, is the memory model's minimum)."""
        self._call("latency", int(cycles))

    def read_records(self) -> dict[str, dict]:
        """The read ports' figures of the last batch: ``{port: {"r_beats", "first_ar",
        "last_r", "bursts"}}`` (cycles of the first address and the last data beat)."""
        (records,) = self._call("records")
        return records

    def stream_efficiency(self) -> float:
        """R bytes of the last batch over its read window's capacity (every port moving a
        beat on every cycle from the first address to the last data beat)."""
        records = self.read_records()
        first = min(r["first_ar"] for r in records.values())
        last = max(r["last_r"] for r in records.values())
        beats = sum(r["r_beats"] for r in records.values())
        return beats / ((last - first + 1) * len(records)) if beats else 0.0
