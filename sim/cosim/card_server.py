"""cocotb side of the ``hpu-card`` RTL backend: the card serving a host process over a socket.

The messages of :mod:`tandem.sim.cosim.hpu_server` (``write``, ``read``, ``run``, ``records``,
``close``; not ``latency``: the card's is its HBM model's), on the card: every engine's AXI
ports draw on one shared HBM model (:mod:`tandem.sim.hpu.hbm`: the card's pseudo-channels at
the U55C's per-channel rate scaled to the port width, refresh, latency), as the card
testbench's ``hbm_decode`` test runs it, so a batch's ``cycles`` are the card's on that memory.
``records`` gives the last batch's bytes per channel and each engine's read window.

A host write or read goes to the memory of the engine that owns each address
(:func:`~tandem.mappings.hpu.channels.engine_of`): each engine's memory model holds the whole
address range, and the engine reads only its own channels. ``run`` sends a batch's
descriptors in order; the card's result beats carry their engine, each engine's results come
in its descriptors' order, so each beat belongs to the oldest unfinished request routed to
its engine. The reply lists every request's beats in descriptor order.
"""

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge, SimTimeoutError, with_timeout
from tandem.host.hpu.card import decode_card_result, split_card_results
from tandem.host.hpu.codec import unpack_header
from tandem.sim.hpu.card_tb import CardTestbench
from tandem.sim.tb import CLOCK_PERIOD_NS

from . import link


class _CardServer:
    def __init__(self, dut):
        self.tb = tb = CardTestbench(dut, hbm=True)
        self.card, self.p = tb.card, tb.p
        self.size = self.card.memory_bytes
        self.bounds = [*self.card.engine_bases, self.size]
        self.records: dict = {}

    async def start(self) -> None:
        self.tb.set_traffic(latency=self.tb.hbm.params.latency)
        await self.tb.reset()
        await link.settle()

    def _pieces(self, address: int, size: int):
        """``(engine view, start, stop, offset)`` of each engine's share of an access."""
        if address < 0 or size < 0 or address + size > self.size:
            raise ValueError(f"access {address:#x}+{size} outside device memory")
        for e, side in enumerate(self.tb.engines):
            start, stop = max(address, self.bounds[e]), min(address + size, self.bounds[e + 1])
            if start < stop:
                yield side.memory.view, start, stop, start - address

    def write(self, address: int, data: bytes) -> None:
        raw = np.frombuffer(data, dtype=np.uint8)
        for view, start, stop, at in self._pieces(address, len(data)):
            view[start:stop] = raw[at : at + stop - start]

    def read(self, address: int, size: int) -> bytes:
        out = np.empty(size, dtype=np.uint8)
        for view, start, stop, at in self._pieces(address, size):
            out[at : at + stop - start] = view[start:stop]
        return out.tobytes()

    async def run(self, descriptors: list[bytes]):
        tb, p, step = self.tb, self.p, self.p.beat_bytes
        work = 0  # beats of the busiest interfaces, for the cycle budget
        bases = []
        for data in descriptors:
            beats = [
                int.from_bytes(data[i : i + step], "little") for i in range(0, len(data), step)
            ]
            tb.desc.send_all(beats)
            header = unpack_header(p, data)
            bases.append(header["base"])
            work += len(beats) + 2 * p.layout.region_bytes(header["length"]) // step
        for side in tb.engines:
            side.memory.clear_records()
        tb.hbm.clear_counters()
        start = tb.now_cycles()
        budget = 5000 + 40 * work
        payloads = []
        left = len(descriptors)  # last beats still to come
        while left:
            remaining = max(start + budget - tb.now_cycles(), 1)
            try:
                raw = await with_timeout(tb.results.recv(), remaining * CLOCK_PERIOD_NS, "ns")
            except SimTimeoutError:
                raise TimeoutError(
                    f"{left} of {len(descriptors)} requests without their last result beat "
                    f"within {budget} cycles"
                ) from None
            payloads.append(raw)
            left -= decode_card_result(self.card, raw)[2]
        cycles = tb.now_cycles() - start
        results, failed = split_card_results(self.card, bases, payloads)
        for _ in range(5000):  # the appended rows must be in memory before the host reads it
            if all(side.memory.idle() for side in tb.engines):
                break
            await RisingEdge(tb.clock)
        else:
            raise TimeoutError("card writes not answered 5000 cycles after the last result")
        self.records = {
            "channel_bytes": tb.hbm.channel_bytes().tolist(),
            # Each engine's first AR and last R beat, counted from the batch's start.
            "read_windows": [
                None if w is None else (w[0] - start, w[1] - start)
                for w in (side.memory.read_window() for side in tb.engines)
            ],
        }
        errors = [e for side in tb.engines for e in side.memory.errors()]
        for side in tb.engines:
            side.memory.clear_records()
        if errors:
            raise RuntimeError("AXI protocol errors: " + "; ".join(errors[:3]))
        return results, cycles, failed


@cocotb.test()
async def serve(dut):
    """Serve the host process's transactions until it closes the connection."""
    server = _CardServer(dut)
    await server.start()

    async def handle(message):
        op = message[0]
        if op == "write":
            server.write(message[1], message[2])
            return ()
        if op == "read":
            return (server.read(message[1], message[2]),)
        if op == "run":
            return await server.run(message[1])
        if op == "latency":
            raise ValueError("the card's read latency is its HBM model's")
        if op == "records":
            return (server.records,)
        raise ValueError(f"unknown operation {op!r}")

    await link.serve(handle)
