"""Device memory of the ``hpu`` testbench: one byte buffer behind the engine's three AXI4 ports.

The subordinate models are cocotbext-axi's :class:`~cocotbext.axi.AxiRamRead` (one per read
port) and :class:`~cocotbext.axi.AxiRamWrite`, all given the same ``bytearray`` as their memory,
so what the engine writes through ``w_axi`` is what ``k_axi`` and ``v_axi`` read back, and the
testbench fills and inspects the same buffer through a numpy view (:attr:`DeviceMemory.view`).

What this module adds to cocotbext-axi
--------------------------------------
Read latency without serializing bursts
    cocotbext-axi answers a read burst as soon as it takes it, two cycles after the address
    handshake (:data:`MODEL_LATENCY`), and has no latency setting. Delaying its data path would
    hold every later burst behind the delayed one. Instead :class:`_LatencyLine` takes the
    place of the model's AR channel: it accepts addresses at once (so ``arready`` stays high
    and any number of bursts can be in flight), time-stamps each, and hands it to the
    unchanged cocotbext-axi read process only when its latency has passed. Bursts issued
    back to back therefore come back back to back, each ``latency`` cycles after its address:
    a 100-cycle latency with enough bursts in flight still streams one beat per cycle.
    Latency is fixed or drawn per burst; data of one port stays in order (all IDs are 0).
Backpressure
    Random pauses (:func:`tandem.sim.stream.random_pause`) on AR, R, AW, W and B through
    cocotbext-axi's pause generators.
Records
    A monitor per port samples the handshakes at every rising edge, independently of the
    models: every AR burst (address, beats, cycle), R beats and the cycles of the first
    address and the last data beat, the largest number of bursts in flight, AW bursts and
    W beats (with strobes) and B responses, plus protocol errors (wrong ``arsize``, bursts
    crossing 4 KiB, addresses outside the memory) as messages the testbench asserts on.
Expected image
    :attr:`DeviceMemory.image` is what memory must hold: the initial fill plus everything
    the host wrote and everything the engine is expected to write; :meth:`first_difference`
    compares it with the real buffer ("nothing lost, nothing stray").
Reset
    The models watch the design's reset: cocotbext-axi then kills its read and write
    processes and drops queued beats, and the latency line drops the addresses it holds
    (they carry an epoch number, so one released during the reset is discarded too).
"""

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.queue import Queue
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiRamRead, AxiRamWrite, AxiReadBus, AxiWriteBus
from tandem.sim.stream import random_pause

__all__ = [
    "MODEL_LATENCY",
    "ArRecord",
    "DeviceMemory",
    "ReadPort",
    "WritePort",
]

#: Cycles from an AR handshake to the first R handshake of cocotbext-axi's read model when it
#: adds no delay: the address is taken at edge t, the beat queued at once, driven after edge
#: t + 1 and taken at edge t + 2 (measured by the testbench's own latency check).
MODEL_LATENCY = 2
AXI_BOUNDARY = 4096
BURST_INCR = 1


def _high(signal) -> bool:
    """True when ``signal`` reads exactly 1 (X and Z, as Icarus shows before reset, read 0)."""
    return str(signal.value) == "1"


def _cycle(period_ns: float) -> int:
    """Clock cycles since time zero."""
    return round(get_sim_time("ns") / period_ns)


def _quiet(name: str) -> None:
    # cocotbext-axi logs a banner per model and a line per burst at INFO; thousands of bursts
    # would swamp the simulation log and slow the run.
    logging.getLogger(name).setLevel(logging.WARNING)


@dataclass(frozen=True)
class ArRecord:
    """One read address handshake seen on a port."""

    address: int
    beats: int
    cycle: int


@dataclass
class _Pending:
    transaction: object
    release_cycle: int
    epoch: int


class _LatencyLine:
    """Stands in for an ``AxiRamRead``'s AR channel and delays each address by its latency.

    The cocotbext-axi read process only calls ``recv()`` and ``clear()`` on its AR channel;
    everything else (the bus, pause generators) is the wrapped sink's.
    """

    def __init__(self, sink, clock, period_ns: float):
        self.sink = sink
        self.bus = sink.bus
        self.clock = clock
        self.period_ns = period_ns
        self.extra: Callable[[], int] = lambda: 0
        self._held: Queue = Queue()
        self._released: Queue = Queue()
        self._last_release = 0
        self._epoch = 0
        cocotb.start_soon(self._take())
        cocotb.start_soon(self._release())

    def _cycle(self) -> int:
        return _cycle(self.period_ns)

    async def _take(self) -> None:
        # Drains the sink as soon as it captures an address, so the sink never fills (arready
        # stays high apart from pauses) and the time stamp is the handshake's own cycle.
        while True:
            transaction = await self.sink.recv()
            # Same ID, so data returns in address order: a short latency drawn after a long one
            # waits for it.
            release = max(self._last_release, self._cycle() + self.extra())
            self._last_release = release
            self._held.put_nowait(_Pending(transaction, release, self._epoch))

    async def _release(self) -> None:
        edge = RisingEdge(self.clock)
        while True:
            pending = await self._held.get()
            while self._cycle() < pending.release_cycle:
                await edge
            if pending.epoch == self._epoch:
                self._released.put_nowait(pending.transaction)

    async def recv(self):
        return await self._released.get()

    def clear(self) -> None:
        """Drop every address not yet answered (the read model calls this on reset)."""
        self._epoch += 1
        self._last_release = 0
        self.sink.clear()
        for queue in (self._held, self._released):
            while not queue.empty():
                queue.get_nowait()

    def set_pause_generator(self, generator) -> None:
        self.sink.set_pause_generator(generator)


@dataclass
class _PortStats:
    ar: list[ArRecord] = field(default_factory=list)
    r_beats: int = 0
    r_bursts_done: int = 0
    first_ar_cycle: int | None = None
    first_rvalid_cycle: int | None = None
    last_r_cycle: int | None = None
    in_flight_max: int = 0
    errors: list[str] = field(default_factory=list)


class ReadPort:
    """One read port: a cocotbext-axi ``AxiRamRead`` on the shared buffer, with latency.

    Parameters
    ----------
    dut, name
        The design and the port's prefix (``k_axi`` finds ``k_axi__araddr`` and so on).
    clock, reset
        The design's clock and active-high reset.
    mem
        The shared ``bytearray``.
    beat_bytes
        Bytes per data beat (``arsize`` must be its log2).
    period_ns
        Clock period, to count cycles from simulation time.
    """

    def __init__(self, dut, name: str, clock, reset, mem, beat_bytes: int, period_ns: float):
        self.name = name
        self.clock = clock
        self.reset = reset
        self.beat_bytes = beat_bytes
        self.period_ns = period_ns
        self.size = len(mem)
        bus = AxiReadBus.from_prefix(dut, name, bus_separator="__")
        _quiet(f"cocotb.{dut._name}.{name}")
        self.model = AxiRamRead(bus, clock, reset, mem=mem)
        self.line = _LatencyLine(self.model.ar_channel, clock, period_ns)
        # The read process looks its AR channel up on every burst, so the swap takes effect
        # before it takes the first address (it starts at the next scheduling point).
        self.model.ar_channel = self.line
        self.ar, self.r = bus.ar, bus.r
        self.stats = _PortStats()
        self._rng: np.random.Generator | None = None
        cocotb.start_soon(self._monitor())

    # --- configuration -----------------------------------------------------------------
    def set_latency(self, latency: int | tuple[int, int], rng=None) -> None:
        """Cycles from each AR handshake to its first R beat: fixed, or ``(lo, hi)`` uniform.

        Values below :data:`MODEL_LATENCY` mean "as fast as the model answers".
        """
        if isinstance(latency, tuple):
            lo, hi = (max(0, v - MODEL_LATENCY) for v in latency)
            if rng is None:
                raise ValueError("a random latency needs a numpy Generator")
            self.line.extra = lambda: int(rng.integers(lo, hi + 1))
        else:
            extra = max(0, int(latency) - MODEL_LATENCY)
            self.line.extra = lambda: extra

    def set_backpressure(self, rng, ar: float = 0.0, r: float = 0.0) -> None:
        """Pause ``arready`` and ``rvalid`` randomly with the given probabilities per cycle."""
        self.line.set_pause_generator(random_pause(rng, ar) if ar else None)
        self.model.r_channel.set_pause_generator(random_pause(rng, r) if r else None)

    # --- records -----------------------------------------------------------------------
    def clear_records(self) -> None:
        """Forget every recorded handshake (after a reset, or between measurements)."""
        self.stats = _PortStats()

    @property
    def bursts(self) -> list[tuple[int, int]]:
        """``(address, beats)`` of every AR handshake since the last clear, in order."""
        return [(a.address, a.beats) for a in self.stats.ar]

    @property
    def in_flight(self) -> int:
        """Bursts whose address was taken and whose last beat was not."""
        return len(self.stats.ar) - self.stats.r_bursts_done

    async def _monitor(self) -> None:
        ar, r = self.ar, self.r
        size_code = (self.beat_bytes - 1).bit_length()
        edge = RisingEdge(self.clock)
        while True:
            await edge
            if _high(self.reset):
                continue
            cycle = _cycle(self.period_ns)
            stats = self.stats
            # Data first: a burst completing at the edge where a new address is taken frees its
            # slot, as an engine counting completions in the same cycle would see it.
            if stats.first_rvalid_cycle is None and _high(r.rvalid):
                stats.first_rvalid_cycle = cycle
            if _high(r.rvalid) and _high(r.rready):
                stats.r_beats += 1
                stats.last_r_cycle = cycle
                if _high(r.rlast):
                    stats.r_bursts_done += 1
            if _high(ar.arvalid) and _high(ar.arready):
                address, beats = int(ar.araddr.value), int(ar.arlen.value) + 1
                stats.ar.append(ArRecord(address, beats, cycle))
                if stats.first_ar_cycle is None:
                    stats.first_ar_cycle = cycle
                self._check_ar(address, beats, size_code, cycle)
                stats.in_flight_max = max(stats.in_flight_max, self.in_flight)

    def _check_ar(self, address: int, beats: int, size_code: int, cycle: int) -> None:
        ar, errors = self.ar, self.stats.errors
        where = f"{self.name} AR at cycle {cycle} (address {address:#x}, {beats} beats)"
        if int(ar.arsize.value) != size_code:
            errors.append(f"{where}: arsize {int(ar.arsize.value)}, expected {size_code}")
        if int(ar.arburst.value) != BURST_INCR:
            errors.append(f"{where}: arburst {int(ar.arburst.value)}, expected INCR (1)")
        if int(ar.arid.value) != 0:
            errors.append(f"{where}: arid {int(ar.arid.value)}, expected 0")
        if address % self.beat_bytes:
            errors.append(f"{where}: address not aligned to the {self.beat_bytes}-byte beat")
        end = address + beats * self.beat_bytes
        if address // AXI_BOUNDARY != (end - 1) // AXI_BOUNDARY:
            errors.append(f"{where}: crosses a 4 KiB boundary")
        if end > self.size:
            errors.append(f"{where}: beyond the {self.size}-byte memory")


@dataclass
class _WriteStats:
    aw: list[ArRecord] = field(default_factory=list)
    w_beats: list[tuple[int, int]] = field(default_factory=list)  # (strobe, last)
    b_count: int = 0
    errors: list[str] = field(default_factory=list)


class WritePort:
    """The write port: a cocotbext-axi ``AxiRamWrite`` on the shared buffer, with a monitor."""

    def __init__(self, dut, name: str, clock, reset, mem, beat_bytes: int, period_ns: float):
        self.name = name
        self.clock = clock
        self.reset = reset
        self.beat_bytes = beat_bytes
        self.period_ns = period_ns
        self.size = len(mem)
        bus = AxiWriteBus.from_prefix(dut, name, bus_separator="__")
        _quiet(f"cocotb.{dut._name}.{name}")
        self.model = AxiRamWrite(bus, clock, reset, mem=mem)
        self.aw, self.w, self.b = bus.aw, bus.w, bus.b
        self.stats = _WriteStats()
        cocotb.start_soon(self._monitor())

    def set_backpressure(self, rng, aw: float = 0.0, w: float = 0.0, b: float = 0.0) -> None:
        """Pause ``awready``, ``wready`` and ``bvalid`` randomly with these probabilities."""
        self.model.aw_channel.set_pause_generator(random_pause(rng, aw) if aw else None)
        self.model.w_channel.set_pause_generator(random_pause(rng, w) if w else None)
        self.model.b_channel.set_pause_generator(random_pause(rng, b) if b else None)

    def clear_records(self) -> None:
        """Forget every recorded handshake."""
        self.stats = _WriteStats()

    @property
    def outstanding(self) -> int:
        """Write bursts whose address was taken and whose response was not."""
        return len(self.stats.aw) - self.stats.b_count

    async def _monitor(self) -> None:
        aw, w, b = self.aw, self.w, self.b
        size_code = (self.beat_bytes - 1).bit_length()
        edge = RisingEdge(self.clock)
        while True:
            await edge
            if _high(self.reset):
                continue
            cycle = _cycle(self.period_ns)
            stats = self.stats
            if _high(aw.awvalid) and _high(aw.awready):
                address, beats = int(aw.awaddr.value), int(aw.awlen.value) + 1
                stats.aw.append(ArRecord(address, beats, cycle))
                where = f"{self.name} AW at cycle {cycle} (address {address:#x}, {beats} beats)"
                if int(aw.awsize.value) != size_code:
                    stats.errors.append(f"{where}: awsize {int(aw.awsize.value)}")
                if int(aw.awburst.value) != BURST_INCR:
                    stats.errors.append(f"{where}: awburst {int(aw.awburst.value)}")
                end = address + beats * self.beat_bytes
                if address // AXI_BOUNDARY != (end - 1) // AXI_BOUNDARY or end > self.size:
                    stats.errors.append(f"{where}: crosses 4 KiB or leaves the memory")
            if _high(w.wvalid) and _high(w.wready):
                stats.w_beats.append((int(w.wstrb.value), int(_high(w.wlast))))
            if _high(b.bvalid) and _high(b.bready):
                stats.b_count += 1


class DeviceMemory:
    """The device memory the ``hpu`` engine reads and writes, and what it should hold.

    Parameters
    ----------
    dut
        The design (ports ``k_axi__*``, ``v_axi__*``, ``w_axi__*``).
    clock, reset
        Its clock and active-high reset (the models drop in-flight bursts while it is high).
    size
        Bytes of memory; addresses at or beyond it are protocol errors.
    beat_bytes
        Bytes per AXI data beat.
    rng
        numpy Generator for random latencies and pauses.
    fill_rng
        When given, fill the memory with random bytes from it first (so stray or missing
        writes show up); else memory starts zeroed.
    read_ports, write_port
        Port prefixes.
    period_ns
        Clock period.

    Attributes
    ----------
    data
        The ``bytearray`` every model serves.
    view
        Writable numpy ``uint8`` view of :attr:`data` (what the host would write over PCIe).
    image
        What memory must hold (numpy ``uint8``, same size).
    """

    def __init__(
        self,
        dut,
        clock,
        reset,
        *,
        size: int,
        beat_bytes: int,
        rng: np.random.Generator,
        fill_rng: np.random.Generator | None = None,
        read_ports: Iterable[str] = ("k_axi", "v_axi"),
        write_port: str = "w_axi",
        period_ns: float = 10.0,
    ):
        self.rng = rng
        self.beat_bytes = beat_bytes
        self.data = bytearray(size)
        self.view = np.frombuffer(self.data, dtype=np.uint8)
        if fill_rng is not None:
            self.view[:] = fill_rng.integers(0, 256, size, dtype=np.uint8)
        self.image = self.view.copy()
        self.read = {
            name: ReadPort(dut, name, clock, reset, self.data, beat_bytes, period_ns)
            for name in read_ports
        }
        self.write = WritePort(dut, write_port, clock, reset, self.data, beat_bytes, period_ns)

    @property
    def size(self) -> int:
        return len(self.data)

    # --- configuration -----------------------------------------------------------------
    def hold_in_reset(self, held: bool) -> None:
        """Keep every model and channel in reset (``True``) or let the design's reset rule.

        Icarus does not run ``always @*`` blocks at time zero, so the design's combinational
        outputs (``arvalid``, ``wvalid``...) read X until its first reset edge, and
        cocotbext-axi's channels fail on an X handshake. Hold them until the first reset is
        over; later resets come through the reset signal itself.
        """
        models = []
        for port in self.read.values():
            models += [port.model, port.line.sink, port.model.r_channel]
        w = self.write.model
        models += [w, w.aw_channel, w.w_channel, w.b_channel]
        for model in models:
            model.assert_reset(held)

    def set_read_latency(self, latency: int | tuple[int, int]) -> None:
        """Read latency of every read port: cycles, or ``(lo, hi)`` drawn per burst."""
        for port in self.read.values():
            port.set_latency(latency, self.rng)

    def set_backpressure(self, probability: float) -> None:
        """Random pauses with ``probability`` on every channel of every port (0 = none)."""
        for port in self.read.values():
            port.set_backpressure(self.rng, ar=probability, r=probability)
        self.write.set_backpressure(self.rng, aw=probability, w=probability, b=probability)

    # --- host access -------------------------------------------------------------------
    def host_write(self, writer: Callable[[np.ndarray], None]) -> None:
        """Apply ``writer(buffer)`` to memory and to the expected image (a host write)."""
        writer(self.view)
        writer(self.image)

    def expect_write(self, writer: Callable[[np.ndarray], None]) -> None:
        """Apply ``writer(buffer)`` to the expected image only (a write the engine must do)."""
        writer(self.image)

    def first_difference(self) -> int | None:
        """Lowest address where memory differs from the expected image, None when equal."""
        differ = np.flatnonzero(self.view != self.image)
        return int(differ[0]) if differ.size else None

    def differences(self) -> np.ndarray:
        """Every address where memory differs from the expected image."""
        return np.flatnonzero(self.view != self.image)

    # --- records -----------------------------------------------------------------------
    def clear_records(self) -> None:
        """Forget every recorded handshake on every port."""
        for port in self.read.values():
            port.clear_records()
        self.write.clear_records()

    def errors(self) -> list[str]:
        """Protocol errors seen on any port since the last clear."""
        found = [e for port in self.read.values() for e in port.stats.errors]
        return found + self.write.stats.errors

    def read_window(self) -> tuple[int, int] | None:
        """``(first AR cycle, last R cycle)`` over all read ports, None before any read."""
        stats = [p.stats for p in self.read.values() if p.stats.first_ar_cycle is not None]
        if not stats or any(s.last_r_cycle is None for s in stats):
            return None
        return min(s.first_ar_cycle for s in stats), max(s.last_r_cycle for s in stats)

    def read_bytes(self) -> int:
        """Bytes taken on every R channel since the last clear."""
        return sum(p.stats.r_beats for p in self.read.values()) * self.beat_bytes

    def stream_efficiency(self) -> float:
        """R-channel bytes / (cycles from the first AR through the last R x ports x beat).

        1.0 means every read port delivered a beat on every cycle of the window.
        """
        window = self.read_window()
        if window is None:
            return 0.0
        cycles = window[1] - window[0] + 1
        return self.read_bytes() / (cycles * len(self.read) * self.beat_bytes)

    def idle(self) -> bool:
        """No read burst in flight and every write answered."""
        return all(p.in_flight == 0 for p in self.read.values()) and self.write.outstanding == 0
