"""cocotb side of the ``hpu`` RTL backend: the engine serving a host process over a socket.

:class:`tandem.host.hpu.rtl_backend.RtlHpuBackend` starts the simulator through
:mod:`tandem.sim.cosim.launch`; this module's single test connects back to the host's Unix
socket (``+tandem_cosim_socket=PATH``, through :func:`tandem.sim.cosim.link.serve`) and serves
its transactions until the host says ``close`` or goes away. Messages are pickled tuples
(:class:`multiprocessing.connection.Connection` framing), one reply per request:

``("write", address, data)`` -> ``("ok",)``
    Host write into device memory (the PCIe copy of the KV cache after prefill).
``("read", address, size)`` -> ``("ok", data)``
    Host read of device memory.
``("run", [descriptor bytes, ...])`` -> ``("ok", [[beat words, ...], ...], cycles, failed)``
    The descriptors of one batch go to ``desc_i`` back to back; each request's result beats
    are collected up to its ``last`` beat; then the engine's writes are waited for. ``cycles``
    counts from the first descriptor beat offered to the last result beat taken; ``failed``
    lists the requests (indices into the batch) whose result carried the ``error`` flag.
``("latency", cycles)`` -> ``("ok",)``
    Cycles from each AR handshake to its first R beat from now on (2: the model's minimum).
``("records",)`` -> ``("ok", {port: {"r_beats", "first_ar", "last_r", "bursts"}})``
    The read ports' handshakes during the last ``run`` (cycles of the first AR and the last
    R beat, from the batch's start), for stream-efficiency measurements.
``("close",)`` -> ``("ok",)``, then the test ends and the simulator exits.

Any exception becomes ``("error", "Type: message")``; a result that does not arrive within
a cycle budget (every beat stalled 40 times) is such an error, so a hung engine surfaces on
the host as an exception rather than a hang. Device memory is the testbench's
:class:`~tandem.sim.hpu.memory.DeviceMemory` (cocotbext-axi RAM models, 2-cycle latency).
"""

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge, SimTimeoutError, with_timeout
from tandem.host.hpu import decode_result
from tandem.host.hpu.codec import result_error, unpack_header
from tandem.sim.hpu.memory import DeviceMemory
from tandem.sim.stream import StreamSink
from tandem.sim.tb import CLOCK_PERIOD_NS, StreamTestbench, evaluate_combinational

from . import link

MEMORY = "tandem_cosim_memory"


class _Server(StreamTestbench):
    def __init__(self, dut, memory_bytes: int):
        super().__init__(dut)
        evaluate_combinational(dut)
        p = self.p = self.params
        self.desc = self.source("desc_i")
        self.results = StreamSink(dut, "result_o", self.clock, self.reset_signal, signed=False)
        self._sinks["result_o"] = self.results
        self.memory = DeviceMemory(
            dut,
            self.clock,
            self.reset_signal,
            size=memory_bytes,
            beat_bytes=p.beat_bytes,
            rng=np.random.default_rng(0),
            period_ns=CLOCK_PERIOD_NS,
        )
        self.memory.hold_in_reset(True)  # until the first reset (see DeviceMemory)
        self.records: dict = {}

    async def start(self) -> None:
        await self.reset()
        self.memory.hold_in_reset(False)
        await link.settle()

    def _check(self, address: int, size: int) -> None:
        if address < 0 or size < 0 or address + size > self.memory.size:
            raise ValueError(f"access {address:#x}+{size} outside device memory")

    async def run(self, descriptors: list[bytes]):
        p = self.p
        step = p.beat_bytes
        work = 0  # beats on the busiest interfaces, for the cycle budget
        for data in descriptors:
            beats = [
                int.from_bytes(data[i : i + step], "little") for i in range(0, len(data), step)
            ]
            self.desc.send_all(beats)
            length = unpack_header(p, data)["length"]
            work += len(beats) + p.layout.region_bytes(length) // step + p.gqa_group * p.row_beats
        start = self.now_cycles()
        results, failed = [], []
        budget = 5000 + 40 * work
        for index in range(len(descriptors)):
            words_of_request = []
            while True:
                remaining = max(start + budget - self.now_cycles(), 1)
                try:
                    raw = await with_timeout(self.results.recv(), remaining * CLOCK_PERIOD_NS, "ns")
                except SimTimeoutError:
                    raise TimeoutError(
                        f"request {index} of {len(descriptors)}: no result beat within {budget} "
                        f"cycles ({len(words_of_request)} beats so far)"
                    ) from None
                words, _tag, last = decode_result(p, raw)
                words_of_request.append(words)
                if last:
                    if result_error(p, raw):
                        failed.append(index)
                    break
            results.append(words_of_request)
        cycles = self.now_cycles() - start
        for _ in range(5000):  # the appended rows must be in memory before the host reads it
            if self.memory.idle():
                break
            await RisingEdge(self.clock)
        else:
            raise TimeoutError("engine writes not answered 5000 cycles after the last result")
        self.records = {  # cycles counted from the batch's start, as `cycles` is
            name: {
                "r_beats": port.stats.r_beats,
                "first_ar": (port.stats.first_ar_cycle or start) - start,
                "last_r": (port.stats.last_r_cycle or start) - start,
                "bursts": len(port.stats.ar),
            }
            for name, port in self.memory.read.items()
        }
        errors = self.memory.errors()
        self.memory.clear_records()  # also after errors: reported once, not on every request
        if errors:
            raise RuntimeError("AXI protocol errors: " + "; ".join(errors[:3]))
        return results, cycles, failed


@cocotb.test()
async def serve(dut):
    """Serve the host process's transactions until it closes the connection."""
    server = _Server(dut, int(cocotb.plusargs[MEMORY]))
    await server.start()

    async def handle(message):
        op = message[0]
        if op == "write":
            _, address, data = message
            server._check(address, len(data))
            server.memory.view[address : address + len(data)] = np.frombuffer(data, dtype=np.uint8)
            return ()
        if op == "read":
            _, address, size = message
            server._check(address, size)
            return (server.memory.view[address : address + size].tobytes(),)
        if op == "run":
            return await server.run(message[1])
        if op == "latency":
            server.memory.set_read_latency(int(message[1]))
            return ()
        if op == "records":
            return (server.records,)
        raise ValueError(f"unknown operation {op!r}")

    await link.serve(handle)
