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
HBM timing (optional)
    With an :class:`HbmMemory` (a shared :class:`~tandem.sim.hpu.hbm.HbmModel` and the
    cocotb process that serves it), the read ports are not cocotbext-axi models: its read
    process queues a whole burst's beats at once and has no per-beat hook, so an R beat could
    not wait for its pseudo-channel. Instead one process serves every read port attached to
    the :class:`HbmMemory`, of every :class:`DeviceMemory` sharing it (the card's engines):
    each cycle it takes the AR handshakes (``arready`` high apart from pauses), and offers the
    model the next beat of every port whose burst's latency has passed; a granted beat is
    driven with its data from the buffer and held until ``rready``. Bursts of a port return
    in order (all IDs are 0), any number in flight. Off by default: the cocotbext-axi models
    and their timing stay as they are.
Reset
    The models watch the design's reset: cocotbext-axi then kills its read and write
    processes and drops queued beats, and the latency line drops the addresses it holds
    (they carry an epoch number, so one released during the reset is discarded too).
"""

import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.queue import Queue
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiRamRead, AxiRamWrite, AxiReadBus, AxiWriteBus
from tandem.sim.stream import random_pause

from .hbm import HbmModel

__all__ = [
    "MODEL_LATENCY",
    "ArRecord",
    "DeviceMemory",
    "HbmMemory",
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


class _HbmPort:
    """One read port served by an :class:`HbmMemory`: its bursts waiting and the beat it drives."""

    def __init__(self, bus, mem, beat_bytes: int, index: int, latency: int):
        self.ar, self.r = bus.ar, bus.r
        self.mem = mem
        self.beat_bytes = beat_bytes
        self.index = index
        self.latency: Callable[[], int] = lambda: latency
        self.bursts: deque[list[int]] = deque()  # [next beat address, beats left, due cycle]
        self.presenting = False
        self.arready = 0
        self.rng = None
        self.ar_pause = self.r_pause = 0.0
        self.r.rvalid.value = 0
        self.ar.arready.value = 0

    def clear(self) -> None:
        self.bursts.clear()
        self.presenting = False
        self.r.rvalid.value = 0
        self.arready = 0
        self.ar.arready.value = 0

    def sample(self, cycle: int) -> None:
        """The handshakes of the edge at ``cycle``."""
        if self.presenting and _high(self.r.rready):
            self.presenting = False
            burst = self.bursts[0]
            burst[0] += self.beat_bytes
            burst[1] -= 1
            if not burst[1]:
                self.bursts.popleft()
        if self.arready and _high(self.ar.arvalid):
            address, beats = int(self.ar.araddr.value), int(self.ar.arlen.value) + 1
            # Same ID: data returns in address order, so a burst waits for the one before.
            due = cycle + max(1, self.latency()) - 1
            if self.bursts:
                due = max(due, self.bursts[-1][2])
            self.bursts.append([address, beats, due])

    def want(self, cycle: int) -> int | None:
        """Address of the beat this port would drive now, None when none is due."""
        if self.presenting or not self.bursts or self.bursts[0][2] > cycle:
            return None
        if self.r_pause and self.rng.random() < self.r_pause:
            return None
        return self.bursts[0][0]

    def drive(self, granted: bool) -> None:
        """Drive the next beat (granted) or nothing; set ``arready`` for the next edge."""
        if granted:
            address, beats, _ = self.bursts[0]
            beat = self.mem[address : address + self.beat_bytes]
            self.r.rdata.value = int.from_bytes(beat, "little")
            self.r.rlast.value = int(beats == 1)
            if hasattr(self.r, "rresp"):
                self.r.rresp.value = 0
            if hasattr(self.r, "rid"):
                self.r.rid.value = 0
            self.r.rvalid.value = 1
            self.presenting = True
        elif not self.presenting:
            self.r.rvalid.value = 0
        pause = self.ar_pause and self.rng.random() < self.ar_pause
        self.arready = 0 if pause else 1
        self.ar.arready.value = self.arready


class HbmMemory:
    """The card's HBM for cocotb memories: an :class:`~tandem.sim.hpu.hbm.HbmModel` and the one
    process that paces every attached read port by it (module docstring).

    Give the same object to every :class:`DeviceMemory` of a card, so their ports draw on one
    set of pseudo-channels.

    Parameters
    ----------
    model
        The channels' state (shared, deterministic).
    clock, reset
        The design's clock and active-high reset.
    period_ns
        Clock period.
    """

    def __init__(self, model: HbmModel, clock, reset, period_ns: float = 10.0):
        self.model = model
        self.params = model.params
        self.clock = clock
        self.reset = reset
        self.period_ns = period_ns
        self.ports: list[_HbmPort] = []
        self.held = False
        self.first_cycle: int | None = None
        cocotb.start_soon(self._run())

    def attach(self, bus, mem, beat_bytes: int, channels) -> _HbmPort:
        """Serve the read port ``bus`` from ``mem``; its own channels are ``channels``."""
        if beat_bytes != self.params.beat_bytes:
            raise ValueError(
                f"the HBM model has {self.params.beat_bytes}-byte beats, the port {beat_bytes}"
            )
        port = _HbmPort(bus, mem, beat_bytes, self.model.port(channels), self.params.latency)
        self.ports.append(port)
        return port

    def channel_bytes(self):
        """Bytes each channel served since the last :meth:`clear_counters` (int64 [channels])."""
        return self.model.bytes.copy()

    def clear_counters(self) -> None:
        self.model.bytes[:] = 0
        self.model.beats = 0

    async def _run(self) -> None:
        edge = RisingEdge(self.clock)
        while True:
            await edge
            if self.held or _high(self.reset):
                for port in self.ports:
                    port.clear()
                continue
            cycle = _cycle(self.period_ns)
            wants, asking = [], []
            for port in self.ports:
                port.sample(cycle)
                address = port.want(cycle)
                if address is not None:
                    wants.append((port.index, address))
                    asking.append(port)
            granted = dict.fromkeys(asking, False)
            if wants:
                for port, ok in zip(asking, self.model.grant(cycle, wants), strict=True):
                    granted[port] = ok
            for port in self.ports:
                port.drive(granted.get(port, False))


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
    hbm, channels
        When given, the port is served by ``hbm`` (:class:`HbmMemory`) instead of a
        cocotbext-axi model, its own channels ``channels``.
    """

    def __init__(
        self,
        dut,
        name: str,
        clock,
        reset,
        mem,
        beat_bytes: int,
        period_ns: float,
        hbm: "HbmMemory | None" = None,
        channels=(),
    ):
        self.name = name
        self.clock = clock
        self.reset = reset
        self.beat_bytes = beat_bytes
        self.period_ns = period_ns
        self.size = len(mem)
        bus = AxiReadBus.from_prefix(dut, name, bus_separator="__")
        _quiet(f"cocotb.{dut._name}.{name}")
        self.hbm = hbm.attach(bus, mem, beat_bytes, channels) if hbm is not None else None
        if self.hbm is None:
            self.model = AxiRamRead(bus, clock, reset, mem=mem)
            self.line = _LatencyLine(self.model.ar_channel, clock, period_ns)
            # The read process looks its AR channel up on every burst, so the swap takes
            # effect before it takes the first address (it starts at the next scheduling
            # point).
            self.model.ar_channel = self.line
        self.ar, self.r = bus.ar, bus.r
        self.stats = _PortStats()
        self._rng: np.random.Generator | None = None
        cocotb.start_soon(self._monitor())

    # --- configuration -----------------------------------------------------------------
    def set_latency(self, latency: int | tuple[int, int], rng=None) -> None:
        """Cycles from each AR handshake to its first R beat: fixed, or ``(lo, hi)`` uniform.

        Values below :data:`MODEL_LATENCY` mean "as fast as the model answers" (with an HBM
        model: below 1).
        """
        if self.hbm is not None:
            if isinstance(latency, tuple):
                if rng is None:
                    raise ValueError("a random latency needs a numpy Generator")
                lo, hi = latency
                self.hbm.latency = lambda: int(rng.integers(lo, hi + 1))
            else:
                self.hbm.latency = lambda: int(latency)
            return
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
        if self.hbm is not None:
            self.hbm.rng, self.hbm.ar_pause, self.hbm.r_pause = rng, ar, r
            return
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
    hbm, channels
        Pace the read ports by a shared HBM model (:class:`HbmMemory`; None: cocotbext-axi's
        models, one beat a cycle after the latency), ``channels`` being the ports' own
        pseudo-channels (reading others pays the lateral penalty).

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
        hbm: HbmMemory | None = None,
        channels=(),
    ):
        self.rng = rng
        self.beat_bytes = beat_bytes
        self.data = bytearray(size)
        self.view = np.frombuffer(self.data, dtype=np.uint8)
        if fill_rng is not None:
            self.view[:] = fill_rng.integers(0, 256, size, dtype=np.uint8)
        self.image = self.view.copy()
        self.hbm = hbm
        self.read = {
            name: ReadPort(dut, name, clock, reset, self.data, beat_bytes, period_ns, hbm, channels)
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
        if self.hbm is not None:
            self.hbm.held = held
        for port in self.read.values():
            if port.hbm is None:
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
