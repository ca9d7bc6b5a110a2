"""cocotb driver and monitor for Amaranth stream ports (``<name>__valid/__ready/__payload``).

Modelled on cocotbext-axi's stream source and sink: a background coroutine per port, a
``send``/``recv`` API, and pause generators for random valid gaps (source) and random
backpressure (sink). Both sample the handshake on the rising edge, so a transfer is counted
exactly when ``valid`` and ``ready`` were both high at that edge.

A source never drops ``valid`` while a payload is waiting: a pause only delays the *next*
payload, as the stream rules require of a producer.
"""

import itertools
from collections import deque
from collections.abc import Iterable, Iterator

import cocotb
from cocotb.triggers import Event, RisingEdge
from tandem.host.common import bits

__all__ = [
    "StreamSink",
    "StreamSource",
    "pack_fields",
    "random_pause",
    "to_signed",
    "unpack_fields",
]


def random_pause(rng, probability: float) -> Iterator[bool]:
    """Endless pause pattern: each cycle paused with ``probability`` (numpy Generator ``rng``)."""
    if not 0.0 <= probability < 1.0:
        raise ValueError(f"pause probability must be in [0, 1), not {probability!r}")
    while True:
        for paused in rng.random(1024) < probability:
            yield bool(paused)


def to_signed(value: int, width: int) -> int:
    """Two's-complement reading of a ``width``-bit unsigned integer."""
    return value - (1 << width) if value >> (width - 1) & 1 else value


class _StreamPort:
    def __init__(self, dut, name: str, clock, reset=None):
        self.name = name
        self.clock = clock
        self.reset = reset
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.width = len(self.payload)
        self.transfers = 0
        self._pause: Iterator[bool] = itertools.repeat(False)
        self._task = None

    def set_pause_generator(self, generator: Iterable[bool] | None) -> None:
        """Use ``generator`` (one bool per cycle, True = pause) from now on; None = never."""
        self._pause = iter(generator) if generator is not None else itertools.repeat(False)

    def _in_reset(self) -> bool:
        return self.reset is not None and self.reset.value == 1

    def start(self):
        if self._task is None:
            self._task = cocotb.start_soon(self._run())
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


class StreamSource(_StreamPort):
    """Drives a design's input stream ``<name>``; payloads are Python ints (signed allowed)."""

    def __init__(self, dut, name: str, clock, reset=None):
        super().__init__(dut, name, clock, reset)
        self.queue: deque[int] = deque()
        self._idle = Event()
        self._idle.set()
        self.valid.value = 0
        self.start()

    def send(self, payload: int) -> None:
        """Queue one payload."""
        self.queue.append(int(payload))
        self._idle.clear()

    def send_all(self, payloads: Iterable[int]) -> None:
        """Queue many payloads."""
        for payload in payloads:
            self.send(payload)

    def clear(self) -> None:
        """Drop queued payloads and release the port (used on reset)."""
        self.queue.clear()
        self.valid.value = 0
        self._idle.set()

    async def wait(self) -> None:
        """Return when every queued payload has been accepted."""
        await self._idle.wait()

    async def _run(self) -> None:
        mask = (1 << self.width) - 1
        driving = False
        while True:
            await RisingEdge(self.clock)
            if self._in_reset():
                driving = False
                self.valid.value = 0
                continue
            if driving and self.ready.value == 1:
                self.queue.popleft()
                self.transfers += 1
                driving = False
            if not driving:
                if self.queue and not next(self._pause):
                    self.payload.value = self.queue[0] & mask
                    self.valid.value = 1
                    driving = True
                else:
                    self.valid.value = 0
                    if not self.queue:
                        self._idle.set()


class StreamSink(_StreamPort):
    """Takes a design's output stream ``<name>``; ``signed`` decides how payloads are read."""

    def __init__(self, dut, name: str, clock, reset=None, *, signed: bool = False):
        super().__init__(dut, name, clock, reset)
        self.signed = signed
        self.queue: deque[int] = deque()
        self._arrived = Event()
        self.ready.value = 0
        self._ready_driven = False
        self.start()

    def empty(self) -> bool:
        """True when no received payload is waiting."""
        return not self.queue

    async def recv(self) -> int:
        """The next payload, waiting for it if needed."""
        while not self.queue:
            self._arrived.clear()
            await self._arrived.wait()
        return self.queue.popleft()

    async def recv_n(self, count: int) -> list[int]:
        """The next ``count`` payloads."""
        return [await self.recv() for _ in range(count)]

    async def _run(self) -> None:
        while True:
            await RisingEdge(self.clock)
            if self._in_reset():
                self.ready.value = 0
                self._ready_driven = False
                continue
            # Compare with what we drove, not the port: it reads Z in Icarus until first driven.
            if self._ready_driven and self.valid.value == 1:
                raw = self.payload.value.to_unsigned()
                self.queue.append(to_signed(raw, self.width) if self.signed else raw)
                self.transfers += 1
                self._arrived.set()
            self._ready_driven = not next(self._pause)
            self.ready.value = int(self._ready_driven)


def pack_fields(fields, widths) -> int:
    """One payload from integers (signed allowed), first field in the least significant bits.

    The positional form of :func:`tandem.host.common.bits.pack` that the testbenches use:
    ``fields`` are the values, ``widths`` raw fields (a value fits when either its signed or
    its unsigned reading does; anything else is a ``ValueError``). This is how Amaranth lays
    out ``data.StructLayout`` fields (in declaration order) and ``data.ArrayLayout`` elements
    (index 0 lowest).
    """
    return bits.pack(widths, fields)


def unpack_fields(payload: int, widths, *, signed: bool = True) -> list[int]:
    """Fields of a payload, first field in the least significant bits (signed by default).

    The positional form of :func:`tandem.host.common.bits.unpack`.
    """
    return list(bits.unpack(bits.as_fields(widths, signed=signed), payload).values())
