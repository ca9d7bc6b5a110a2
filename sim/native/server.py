"""The native path's server: the cocotb servers' protocol answered by a native harness.

:mod:`tandem.sim.cosim.launch` runs :func:`serve` instead of a cocotb simulation when the
host asks for the native path (``harness="native"``). It answers exactly the messages of
:mod:`tandem.sim.cosim.stream_server` (``run`` of steps on stream ports) and
:mod:`tandem.sim.cosim.hpu_server` (``write``, ``read``, ``run`` of descriptors), with the
same meaning, results and cycle counts, but each message crosses into C++ a few times and the
clock, the stream drivers and monitors and the AXI4 memory run there
(:class:`~tandem.sim.native.model.NativeModel`). The ``hpu`` server also answers
``("hbm", HbmParams, {read port: home channels})``, which paces its read ports by HBM
pseudo-channels (:meth:`~tandem.sim.native.model.NativeModel.set_hbm`), and
``("hbm_bytes",)``, the bytes each channel served and the beats since the last such call.
:class:`CardServer` answers :mod:`tandem.sim.cosim.card_server`'s messages for ``hpu-card``:
its read ports paced by the card's HBM model from the start, each engine's ports homed on that
engine's channels, as the cocotb card server paces them.
The process holds the simulation: a crash inside it (a C++ fault, a Verilog ``$fatal``) ends
the process, which the host reports as :class:`~tandem.host.common.errors.CosimError`.
"""

import socket
from multiprocessing.connection import Connection

import numpy as np
from tandem.host.common import bits

from .model import NativeModel, fields_to_words, ints_to_words, words_to_fields, words_to_ints

__all__ = ["CardServer", "HpuServer", "StreamServer", "serve"]

#: Edges of reset at start and after a failed request, as the cocotb testbenches hold it.
RESET_CYCLES = 2


class StreamServer:
    """The stream server's ``run`` message on a native model (see ``stream_server``)."""

    def __init__(self, model: NativeModel, design: str):
        self.model = model
        self.design = design
        streams = model.streams
        self.inputs = [name for name, s in streams.items() if s["direction"] == "sink"]
        self.outputs = [name for name, s in streams.items() if s["direction"] == "source"]
        self.enabled: set[str] = set()
        model.reset(RESET_CYCLES)

    def _port(self, name: str, names: list[str]) -> str:
        if name not in names:
            raise ValueError(f"{self.design} has no stream {name!r} here (has {names})")
        return name

    def _payloads(self, name: str, spec) -> np.ndarray:
        """The beats of a ``send``/``load`` step as ``(n, words)`` uint32."""
        words, width = self.model.words(name), self.model.width(name)
        if isinstance(spec, tuple) and spec and spec[0] == "fields":
            _, widths, rows = spec
            rows = np.asarray(rows, np.int64)
            if rows.size == 0:
                return np.zeros((0, words), np.uint32)
            return fields_to_words(widths, rows.reshape(len(rows), -1), words, width)
        return ints_to_words(spec, words, width)

    def run(self, steps, budget: int):
        model = self.model
        begin = model.cycle
        deadline = begin + int(budget)
        for step in steps:  # monitors first: no output beat may pass unseen
            if step[0] == "recv":
                name = self._port(step[1], self.outputs)
                if name not in self.enabled:
                    model.enable(name)
                    self.enabled.add(name)
        start, outputs = begin, []
        for step in steps:
            op = step[0]
            if op in ("send", "load"):
                name = self._port(step[1], self.inputs)
                beats = self._payloads(name, step[2])
                model.send(name, beats)
                if op == "load" and not model.until_sent(name, deadline):
                    raise TimeoutError(
                        f"{name}: {len(beats)} beats: not done within the budget of the request"
                    )
            elif op == "start":
                start = model.cycle
            elif op == "command":
                name = self._port(step[1], self.inputs)
                model.command(name, int(step[2]))
                if not model.until_sent(name, deadline):
                    raise TimeoutError(
                        f"{name}: command not taken within the budget of the request"
                    )
                start = model.last_transfer(name) - 1  # the command's transfer cycle counts
            elif op == "recv":
                name, count = step[1], int(step[2])
                if not model.until_received(name, count, deadline):
                    raise TimeoutError(
                        f"{name}: {count} beats: not done within the budget of the request"
                    )
                words = model.take(name, count)
                if len(step) > 3:
                    beats = words_to_fields(words, step[3]).reshape(-1, len(step[3]))
                else:
                    stream = model.streams[name]
                    signed = int(stream["payload_width"]) if stream["payload_signed"] else None
                    beats = words_to_ints(words, signed_width=signed)
                outputs.append(beats)
            else:
                raise ValueError(f"unknown step {op!r}")
        cycles = model.cycle - start
        model.run(1)  # one more edge: an extra output beat would show now
        for name in self.inputs:
            if model.pending(name):
                raise RuntimeError(f"{name}: {model.pending(name)} beats were never taken")
        for name in self.outputs:
            if model.received(name):
                raise RuntimeError(f"{name}: {model.received(name)} output beats nobody expected")
        return outputs, cycles

    def handle(self, message) -> tuple:
        if message[0] != "run":
            raise ValueError(f"unknown operation {message[0]!r}")
        return self.run(message[1], message[2])

    def recover(self) -> None:
        self.model.reset(RESET_CYCLES)
        for name in self.outputs:
            self.model.take(name)


def _port_names(model: NativeModel) -> list[str]:
    return [port["name"] for port in model.manifest["ports"]]


class _MemoryServer:
    """What the ``hpu`` and ``hpu-card`` servers share: device memory reads and writes,
    descriptors in, result beats out up to each request's ``last`` beat."""

    #: What the engine or card is called in messages, and the result beats it waits for.
    unit = "engine"
    awaited = "result"

    def __init__(self, model: NativeModel, result_fields):
        self.model = model
        # The `last` flag's bit in a result beat: each request's results end with one.
        offsets = {field.name: offset for field, offset in bits.field_offsets(result_fields)}
        self.last_bit = offsets["last"]
        self.records: dict = {}

    def _reset(self) -> None:
        """The first reset, as the cocotb server: its sink exists before it, and the memory
        models stay idle until it is over."""
        model = self.model
        model.enable("result_o")
        model.hold_memory(True)
        model.reset(RESET_CYCLES)
        model.hold_memory(False)

    def _check(self, address: int, size: int) -> None:
        if address < 0 or size < 0 or address + size > len(self.model.memory):
            raise ValueError(f"access {address:#x}+{size} outside device memory")

    def _send(self, descriptors: list[bytes], work: int) -> int:
        """Send the descriptors' beats, wait (a budget of ``work``) for every request's last
        result beat; the cycles from the first descriptor beat."""
        model, step = self.model, self.p.beat_bytes
        beats = []
        for data in descriptors:
            beats += [
                int.from_bytes(data[i : i + step], "little") for i in range(0, len(data), step)
            ]
        model.send("desc_i", beats)
        self.start = model.cycle
        budget = 5000 + 40 * work
        if not model.until_marked("result_o", self.last_bit, len(descriptors), self.start + budget):
            raise TimeoutError(
                f"{len(descriptors)} requests: not every {self.awaited} within {budget} "
                f"cycles ({model.received('result_o')} beats so far)"
            )
        return model.cycle - self.start

    def _finish(self) -> None:
        """Wait for the memory writes to be answered."""
        model = self.model
        if not model.until_memory_idle(model.cycle + 5000):
            raise TimeoutError(f"{self.unit} writes not answered 5000 cycles after the last result")

    def _check_errors(self) -> None:
        """Clear the AXI records; raise on AXI protocol errors."""
        self.model.clear_records()
        errors = self.model.errors()
        if errors:
            raise RuntimeError("AXI protocol errors: " + "; ".join(errors[:3]))

    def handle(self, message) -> tuple:
        op = message[0]
        memory = self.model.memory
        if op == "write":
            _, address, data = message
            self._check(address, len(data))
            memory[address : address + len(data)] = np.frombuffer(data, dtype=np.uint8)
            return ()
        if op == "read":
            _, address, size = message
            self._check(address, size)
            return (memory[address : address + size].tobytes(),)
        if op == "run":
            return self.run(message[1])
        if op == "records":
            return (self.records,)
        return self.handle_more(op, message)

    def handle_more(self, op: str, message) -> tuple:
        """The messages of one server only."""
        raise ValueError(f"unknown operation {op!r}")

    def recover(self) -> None:
        pass  # as the cocotb server: the engine is not reset after a failed request


class HpuServer(_MemoryServer):
    """The ``hpu`` server's messages on a native model (see ``hpu_server``)."""

    def __init__(self, model: NativeModel, params):
        from tandem.host.hpu.codec import result_fields

        super().__init__(model, result_fields(params))
        self.p = params
        self.read_ports = [
            n[: -len("__araddr")] for n in _port_names(model) if n.endswith("__araddr")
        ]
        self._reset()

    def run(self, descriptors: list[bytes]):
        from tandem.host.hpu import decode_result
        from tandem.host.hpu.codec import result_error, unpack_header

        model, p = self.model, self.p
        step = p.beat_bytes
        work = 0
        for data in descriptors:
            length = unpack_header(p, data)["length"]
            work += len(data) // step + p.layout.region_bytes(length) // step
            work += p.gqa_group * p.row_beats
        cycles = self._send(descriptors, work)
        start = self.start
        raw = words_to_ints(model.take("result_o"))
        results, request, failed = [], [], []
        for payload in raw:
            words, _tag, last = decode_result(p, payload)
            request.append(words)
            if last:
                if result_error(p, payload):
                    failed.append(len(results))
                results.append(request)
                request = []
        if request or len(results) != len(descriptors):
            raise RuntimeError(f"{len(results)} results for {len(descriptors)} requests")
        self._finish()
        self.records = {  # cycles counted from the batch's start, as `cycles` is
            name: {
                "r_beats": r["r_beats"],
                "first_ar": r["first_ar"] - start,
                "last_r": r["last_r"] - start,
                "bursts": len(r["bursts"]),
            }
            for name, r in model.axi_records().items()
            if name in self.read_ports
        }
        self._check_errors()
        return results, cycles, failed

    def handle_more(self, op: str, message) -> tuple:
        if op == "latency":
            self.model.set_read_latency(int(message[1]))
            return ()
        if op == "hbm":  # ("hbm", HbmParams, {read port: home channels} or None)
            self.model.set_hbm(message[1], message[2] if len(message) > 2 else None)
            return ()
        if op == "hbm_bytes":  # -> (bytes per channel, beats) since "hbm" or the last call
            served, beats = self.model.hbm_channel_bytes()
            self.model.clear_hbm_counters()
            return (served.tolist(), beats)
        return super().handle_more(op, message)


class CardServer(_MemoryServer):
    """The ``hpu-card`` server's messages on a native model (see ``card_server``).

    One device memory serves every engine's AXI ports: an engine reads and writes only its own
    channels, so the bytes each engine sees are those of the cocotb server's per-engine
    memories wherever a region lies. The read ports draw on one HBM model
    (:meth:`~tandem.sim.native.model.NativeModel.set_hbm`) at
    :meth:`HbmParams.of_board <tandem.sim.hpu.hbm.HbmParams.of_board>` of the card's channels
    and beat, each read port of engine ``e`` homed on the channels engine ``e``'s address range
    spans, as :class:`~tandem.sim.hpu.card_tb.CardTestbench` homes them.

    Parameters
    ----------
    model
        The ``hpu-card`` design's native model, with the card's memory.
    params : tandem.host.hpu.card.HpuCardParams
        The card's parameters.
    """

    unit = "card"
    awaited = "last result beat"

    def __init__(self, model: NativeModel, params):
        from tandem.host.hpu.card import card_result_fields, engine_channels
        from tandem.sim.hpu.hbm import HbmParams

        super().__init__(model, card_result_fields(params))
        self.card = params
        self.p = params.engine
        names = model.read_ports()
        self.engine_ports = [
            [f"{name}_{e}" for name in self.p.read_port_names] for e in range(params.engines)
        ]
        missing = [n for ports in self.engine_ports for n in ports if n not in names]
        if missing:
            raise ValueError(f"no read port {missing[0]!r} on the card (has {names})")
        homes = {}
        for ports, own in zip(self.engine_ports, engine_channels(params), strict=True):
            homes.update({port: list(own) for port in ports})
        # The cocotb card sets its HBM model up before its first reset, latency included. The
        # harness's read ports come engine by engine, each engine's in `read_port_names` order:
        # the cocotb card's order of attaching them, so a channel's round robin is the same.
        model.set_hbm(HbmParams.of_board(params.geometry, self.p.beat_bytes), homes)
        self._reset()

    def run(self, descriptors: list[bytes]):
        from tandem.host.hpu.card import split_card_results
        from tandem.host.hpu.codec import unpack_header

        model, card, p = self.model, self.card, self.p
        step = p.beat_bytes
        work = 0
        bases = []
        for data in descriptors:
            header = unpack_header(p, data)
            bases.append(header["base"])
            work += len(data) // step + 2 * p.layout.region_bytes(header["length"]) // step
        model.clear_records()
        model.clear_hbm_counters()
        cycles = self._send(descriptors, work)
        start = self.start
        results, failed = split_card_results(card, bases, words_to_ints(model.take("result_o")))
        self._finish()
        served, _beats = model.hbm_channel_bytes()
        ports = model.axi_records()
        windows = []
        for names in self.engine_ports:  # each engine's first AR and last R beat
            read = [ports[n] for n in names if len(ports[n]["bursts"])]
            windows.append(
                (min(r["first_ar"] for r in read) - start, max(r["last_r"] for r in read) - start)
                if read
                else None
            )
        self.records = {"channel_bytes": served.tolist(), "read_windows": windows}
        self._check_errors()
        return results, cycles, failed

    def handle_more(self, op: str, message) -> tuple:
        if op == "latency":
            raise ValueError("the card's read latency is its HBM model's")
        return super().handle_more(op, message)


def serve(socket_path: str, server) -> None:
    """Answer the host's messages on ``socket_path`` until it closes (``link.serve``'s
    protocol: ``("ok", *fields)`` or ``("error", "Type: message")``)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path)
    conn = Connection(sock.detach())
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            if message[0] == "close":
                conn.send(("ok",))
                return
            try:
                reply = ("ok", *server.handle(message))
            except Exception as exc:  # every failure goes back to the host as an exception
                reply = ("error", f"{type(exc).__name__}: {exc}")
                server.recover()
            conn.send(reply)
    finally:
        conn.close()
