"""cocotb side of the stream engines' RTL backend: any design with stream ports, served to a host.

:class:`tandem.host.backend.cosim.RtlStreamBackend` starts the simulator of ``sparse-mpe``,
``systolic``, ``sparse-engine`` or ``rnn`` (one per engine) through
:mod:`tandem.sim.cosim.launch`; this module's single test connects back
(:func:`tandem.sim.cosim.link.serve`) and runs the host's requests on the ports the manifest
lists, with the testbenches' stream driver and monitor (:class:`~tandem.sim.stream.StreamSource`,
:class:`~tandem.sim.stream.StreamSink`) and no gaps or backpressure. The host encodes every
beat with the datapath's codec (:class:`~tandem.host.sparse_dsp.device.MpeCodec`,
:class:`~tandem.host.spmm.device.SpmmCodec`, :class:`~tandem.host.rnn.device.RnnCodec`, which
use the same encoders as the designs' testbenches), so this server knows no design:

``("run", steps, budget)`` -> ``("ok", outputs, cycles)``
    ``steps`` run in order:

    ``("send", port, payloads)``
        queue beats on an input port (they go out in the background);
    ``("load", port, payloads)``
        queue beats and wait until the engine has taken them all;
    ``("start",)``
        the cycle count starts now (the next beats are offered from this cycle);
    ``("command", port, payload)``
        offer one beat until taken; the count starts with that transfer's cycle, included;
    ``("recv", port, count)`` / ``("recv", port, count, widths)``
        wait for ``count`` output beats; with ``widths`` each beat is unpacked into signed
        fields (first field lowest, :func:`~tandem.sim.stream.unpack_fields`) and the
        beats come back as an int64 array ``(count, len(widths))``, else as a list of ints
        (signed as the manifest says). Each ``recv`` appends to ``outputs``.

    ``payloads`` are a list of ints, or ``("fields", widths, rows)``: an int array whose rows
    are packed into one beat each (:func:`~tandem.sim.stream.pack_fields`). ``cycles`` runs
    from the count's start to the cycle the last beat of the last ``recv`` was taken.
    Every wait shares ``budget`` cycles; past it the request fails with a ``TimeoutError``.
    Beats left unsent or unexpected output beats are errors too. After any error the engine
    is reset (queued beats dropped) so the next request starts clean.
``("close",)`` -> ``("ok",)``, then the test ends and the simulator exits.
"""

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge, SimTimeoutError, with_timeout
from tandem.sim.stream import pack_fields, unpack_fields
from tandem.sim.tb import CLOCK_PERIOD_NS, StreamTestbench, evaluate_combinational

from . import link


def _payloads(spec) -> list[int]:
    if isinstance(spec, tuple) and spec and spec[0] == "fields":
        _, widths, rows = spec
        return [pack_fields(row, widths) for row in np.asarray(rows, np.int64).tolist()]
    return [int(v) for v in spec]


class _Server(StreamTestbench):
    def __init__(self, dut):
        super().__init__(dut)
        evaluate_combinational(dut)
        streams = self.manifest["streams"]
        self.inputs = [name for name, s in streams.items() if s["direction"] == "sink"]
        self.outputs = [name for name, s in streams.items() if s["direction"] == "source"]
        # Idle handshakes until a port gets its driver or monitor (created on first use).
        for name in self.inputs:
            getattr(dut, f"{name}__valid").value = 0
        for name in self.outputs:
            getattr(dut, f"{name}__ready").value = 0

    def _port(self, name: str, names: list[str]) -> str:
        if name not in names:
            raise ValueError(f"{self.design.name} has no stream {name!r} here (has {names})")
        return name

    async def _until(self, coroutine, deadline: int, what: str):
        remaining = max(deadline - self.now_cycles(), 1)
        try:
            return await with_timeout(coroutine, remaining * CLOCK_PERIOD_NS, "ns")
        except SimTimeoutError:
            raise TimeoutError(f"{what}: not done within the budget of the request") from None

    async def _command(self, name: str, payload: int, deadline: int) -> int:
        """Offer ``payload`` on ``name`` until taken; returns the transfer's cycle."""
        dut = self.dut
        valid, ready = getattr(dut, f"{name}__valid"), getattr(dut, f"{name}__ready")
        getattr(dut, f"{name}__payload").value = payload
        valid.value = 1
        while True:
            await RisingEdge(self.clock)
            if ready.value == 1:
                break
            if self.now_cycles() > deadline:
                valid.value = 0
                raise TimeoutError(f"{name}: command not taken within the budget of the request")
        valid.value = 0
        return self.now_cycles()

    async def run(self, steps, budget: int):
        begin = self.now_cycles()
        deadline = begin + int(budget)
        for step in steps:  # monitors first: no output beat may pass unseen
            if step[0] == "recv":
                self.sink(self._port(step[1], self.outputs))
        start, outputs = begin, []
        for step in steps:
            op = step[0]
            if op in ("send", "load"):
                source = self.source(self._port(step[1], self.inputs)).start()
                beats = _payloads(step[2])
                source.send_all(beats)
                if op == "load":
                    await self._until(source.wait(), deadline, f"{step[1]}: {len(beats)} beats")
            elif op == "start":
                start = self.now_cycles()
            elif op == "command":
                start = await self._command(self._port(step[1], self.inputs), step[2], deadline)
                start -= 1  # the command's transfer cycle counts
            elif op == "recv":
                name, count = step[1], int(step[2])
                sink = self.sink(name)
                beats = await self._until(sink.recv_n(count), deadline, f"{name}: {count} beats")
                if len(step) > 3:
                    fields = [unpack_fields(b, step[3]) for b in beats]
                    beats = np.array(fields, np.int64).reshape(-1, len(step[3]))
                outputs.append(beats)
            else:
                raise ValueError(f"unknown step {op!r}")
        cycles = self.now_cycles() - start
        await RisingEdge(self.clock)  # one more edge: an extra output beat would show now
        for name, source in self._sources.items():
            if source.queue:
                raise RuntimeError(f"{name}: {len(source.queue)} beats were never taken")
            source.stop()  # no coroutine per cycle while idle
        for name, sink in self._sinks.items():
            if sink.queue:
                raise RuntimeError(f"{name}: {len(sink.queue)} output beats nobody expected")
        return outputs, cycles

    async def recover(self) -> None:
        await self.reset()
        for source in self._sources.values():
            source.stop()
        await link.settle()


@cocotb.test()
async def serve(dut):
    """Serve the host process's stream requests until it closes the connection."""
    server = _Server(dut)
    await server.reset()
    await link.settle()

    async def handle(message):
        if message[0] != "run":
            raise ValueError(f"unknown operation {message[0]!r}")
        return await server.run(message[1], message[2])

    await link.serve(handle, server.recover)
