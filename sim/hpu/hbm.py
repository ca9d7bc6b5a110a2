"""Timing model of an HBM card's pseudo-channels, as the engines' read ports see them.

Pure Python, no simulator: the cocotb device memory (:mod:`tandem.sim.hpu.memory`) asks it,
once per clock cycle, which of the read beats waiting on the card's ports may go out, and the
card's cycle model (:func:`tandem.host.hpu.card.card_call_cycles`) reads the rates it implies.

What it models
--------------
A pseudo-channel is a shared resource. Every R beat of every port that reads an address inside
channel ``c`` spends channel ``c``'s bandwidth, whichever port or engine asks: a deterministic
token bucket per channel fills at the channel's rate (bytes per engine cycle) and a beat goes
out only when its channel holds its bytes. Two ports streaming from one channel therefore share
its rate (round robin between them), and a port streaming alone from its channel gets all of
it, at most one beat a cycle.

The rate of a channel, :attr:`HbmParams.peak_bytes_per_cycle` times
:attr:`HbmParams.sustained_fraction`, is split in two parts:

* refresh: every ``refresh_interval`` cycles a channel stops for ``refresh_cycles`` (all-bank
  refresh; HBM2 tREFI 3.9 us and tRFC about 350 ns for 8 Gb dies, a JEDEC-style assumption,
  not a measurement of the U55C's stacks). Channels refresh staggered, channel ``c`` at offset
  ``c * refresh_interval // channels``, so the card never stops as a whole;
* what is left (row misses, read-to-read turn-arounds, the controller): the bucket's fill rate
  outside refresh, :attr:`HbmParams.stream_efficiency`, chosen so that the two multiply to the
  sustained fraction.

A port reading an address outside its own channels (PG276: through the HBM switch's lateral
connections) spends ``1 / lateral_factor`` times the beat's bytes of that channel, so it gets
``lateral_factor`` of the rate it would get at home. Each burst's first beat waits ``latency``
cycles after its address (:attr:`HbmParams.latency`).

Simulated engines have narrower ports than the real one (a 16-byte beat stands for the U55C's
64-byte AXI beat): :meth:`HbmParams.of_board` keeps the channel's rate in beats per cycle, the
quantity the engines' timing depends on, by scaling the bytes with the port width.
"""

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "BOARD_BEAT_BYTES",
    "REFRESH_INTERVAL_NS",
    "REFRESH_NS",
    "HbmModel",
    "HbmParams",
]

#: The beat of the engine's AXI ports on the U55C (``mem_data_bits`` 512): at 300 MHz one beat a
#: cycle asks for more than a pseudo-channel gives.
BOARD_BEAT_BYTES = 64
#: HBM2 average refresh interval tREFI (JEDEC JESD235, normal temperature range).
REFRESH_INTERVAL_NS = 3900.0
#: HBM2 all-bank refresh cycle time tRFC for 8 Gb dies (about 350 ns; an assumption in the
#: JEDEC style, the stacks' own figure is not published for the U55C).
REFRESH_NS = 350.0


@dataclass(frozen=True)
class HbmParams:
    """Parameters of the pseudo-channels, with where each comes from (:attr:`sources`).

    Parameters
    ----------
    channels, channel_bytes
        The card's pseudo-channels: ``channels`` contiguous ranges of ``channel_bytes``
        (:class:`~tandem.mappings.hpu.channels.ChannelGeometry`).
    beat_bytes
        Bytes of one R beat of the ports.
    peak_bytes_per_cycle
        A channel's theoretical rate in bytes per engine cycle.
    sustained_fraction
        Measured sequential-read rate over the peak (refresh included).
    refresh_interval, refresh_cycles
        Cycles between the starts of two refreshes of a channel, and cycles each lasts.
    latency
        Cycles from a burst's address handshake to its first data beat (at least 1).
    lateral_factor
        Share of its rate a port keeps reading outside its own channels (0 < f <= 1).
    bucket_beats
        Beats a channel's bucket holds at most: how far an idle channel may run ahead.
    sources
        Where the figures come from, for reports.
    """

    channels: int
    channel_bytes: int
    beat_bytes: int
    peak_bytes_per_cycle: float
    sustained_fraction: float = 0.91
    refresh_interval: int = 1170
    refresh_cycles: int = 105
    latency: int = 32
    lateral_factor: float = 0.5
    bucket_beats: float = 2.0
    sources: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        def positive_int(name):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")

        for name in ("channels", "channel_bytes", "beat_bytes", "refresh_interval", "latency"):
            positive_int(name)
        if not isinstance(self.refresh_cycles, (int, np.integer)) or not (
            0 <= self.refresh_cycles < self.refresh_interval
        ):
            raise ValueError(
                f"refresh_cycles must be an integer in 0..refresh_interval - 1 "
                f"({self.refresh_interval - 1}), not {self.refresh_cycles!r}"
            )
        if not self.peak_bytes_per_cycle > 0:
            raise ValueError(
                f"peak_bytes_per_cycle must be positive, not {self.peak_bytes_per_cycle!r}"
            )
        if not 0 < self.sustained_fraction <= 1:
            raise ValueError(
                f"sustained_fraction must be in (0, 1], not {self.sustained_fraction!r}"
            )
        if not 0 < self.lateral_factor <= 1:
            raise ValueError(f"lateral_factor must be in (0, 1], not {self.lateral_factor!r}")
        if not self.bucket_beats >= 1:
            raise ValueError(f"bucket_beats must be at least 1, not {self.bucket_beats!r}")
        if self.stream_efficiency > 1:
            raise ValueError(
                f"refresh ({self.refresh_cycles} of every {self.refresh_interval} cycles) "
                f"leaves less than the sustained fraction {self.sustained_fraction!r}"
            )

    @classmethod
    def of_board(
        cls,
        geometry,
        beat_bytes: int,
        *,
        board: str = "u55c",
        clock_mhz: float | None = None,
        **overrides,
    ) -> "HbmParams":
        """The pseudo-channels of ``board``'s first memory for ports of ``beat_bytes``.

        ``geometry`` is the card's :class:`~tandem.mappings.hpu.channels.ChannelGeometry`
        (simulated cards scale the memory down, not the rates). The peak is the board's
        bandwidth over its channels at ``clock_mhz`` (default the board's default clock), in
        :data:`BOARD_BEAT_BYTES`-byte beats per cycle, times ``beat_bytes``; the sustained
        fraction is the board file's ``sustained_fraction``; refresh from
        :data:`REFRESH_INTERVAL_NS` and :data:`REFRESH_NS` at the clock. ``overrides`` replace
        any field.
        """
        from tandem.boards import load_board

        spec = load_board(board)
        memory = spec.memory[0]
        clock = float(clock_mhz or spec.default_clock_mhz)
        per_channel = float(memory["bandwidth_gb_s"]) / int(memory["channels"])  # GB/s
        peak_beats = per_channel * 1e3 / clock / BOARD_BEAT_BYTES  # beats per cycle
        values = dict(
            channels=geometry.channels,
            channel_bytes=geometry.channel_bytes,
            beat_bytes=beat_bytes,
            peak_bytes_per_cycle=peak_beats * beat_bytes,
            sustained_fraction=float(memory.get("sustained_fraction", 1.0)),
            refresh_interval=round(REFRESH_INTERVAL_NS * clock / 1e3),
            refresh_cycles=round(REFRESH_NS * clock / 1e3),
            sources={
                "peak": f"{board}: {memory['bandwidth_gb_s']} GB/s over {memory['channels']} "
                f"channels at {clock:g} MHz, {peak_beats:.4f} {BOARD_BEAT_BYTES}-byte beats "
                "per cycle per channel",
                "sustained_fraction": f"{board} board file (measured sequential reads)",
                "refresh": f"tREFI {REFRESH_INTERVAL_NS:g} ns, tRFC {REFRESH_NS:g} ns (HBM2, "
                "8 Gb dies, assumed)",
                "lateral_factor": "PG276: lateral switch traffic loses up to half",
                "latency": "32 cycles, about 107 ns at 300 MHz: Shuhai's page-hit read latency "
                "(Wang et al., FCCM 2020)",
            },
        )
        values.update(overrides)
        return cls(**values)

    @property
    def refresh_share(self) -> float:
        """Share of cycles a channel is refreshing."""
        return self.refresh_cycles / self.refresh_interval

    @property
    def stream_efficiency(self) -> float:
        """Fill rate outside refresh over the peak: ``sustained / (1 - refresh share)``."""
        return self.sustained_fraction / (1.0 - self.refresh_share)

    @property
    def fill_bytes_per_cycle(self) -> float:
        """Bytes a channel's bucket gains per cycle outside refresh."""
        return self.peak_bytes_per_cycle * self.stream_efficiency

    @property
    def sustained_bytes_per_cycle(self) -> float:
        """A channel's long-run rate in bytes per cycle (peak x sustained fraction)."""
        return self.peak_bytes_per_cycle * self.sustained_fraction

    def port_beats_per_cycle(self, sharing: int = 1, *, lateral: bool = False) -> float:
        """Long-run beats per cycle of one port streaming from a channel with ``sharing``
        ports streaming from it in all (at most one beat a cycle)."""
        rate = self.sustained_bytes_per_cycle / self.beat_bytes / max(sharing, 1)
        return min(1.0, rate * (self.lateral_factor if lateral else 1.0))


class HbmModel:
    """The card's pseudo-channels as shared, deterministic token buckets.

    One object serves every port of a card: each port registers with :meth:`port` (its own
    channels) and, once per cycle, :meth:`grant` answers which waiting beats go out.
    """

    def __init__(self, params: HbmParams):
        self.params = p = params
        self.tokens = np.full(p.channels, p.bucket_beats * p.beat_bytes, dtype=float)
        # Room for the dearest beat plus a cycle's fill, so that no fill is lost while a
        # bucket waits for one lateral beat's bytes.
        most = max(p.bucket_beats, 1.0 / p.lateral_factor) * p.beat_bytes
        self.cap = most + p.fill_bytes_per_cycle
        self.last_cycle: int | None = None
        self.homes: list[frozenset[int]] = []
        self.next_port = np.zeros(p.channels, dtype=np.int64)  # round-robin pointer
        self.bytes = np.zeros(p.channels, dtype=np.int64)  # bytes served per channel
        self.beats = 0

    def port(self, channels) -> int:
        """Register a port whose own channels are ``channels``; its index for :meth:`grant`."""
        home = frozenset(int(c) for c in channels)
        bad = [c for c in home if not 0 <= c < self.params.channels]
        if bad:
            raise ValueError(f"channel {bad[0]!r} not in 0..{self.params.channels - 1}")
        self.homes.append(home)
        return len(self.homes) - 1

    def channel_of(self, address: int) -> int:
        """The channel of byte ``address`` (the last one for addresses past it)."""
        return min(int(address) // self.params.channel_bytes, self.params.channels - 1)

    def refreshing(self, channel: int, cycle: int) -> bool:
        """Whether ``channel`` is in a refresh at ``cycle``."""
        p = self.params
        offset = channel * p.refresh_interval // p.channels
        return (cycle - offset) % p.refresh_interval < p.refresh_cycles

    def _active_cycles(self, channel: int, start: int, stop: int) -> int:
        """Cycles in ``[start, stop)`` in which ``channel`` is not refreshing."""
        p = self.params
        if stop <= start:
            return 0
        offset = channel * p.refresh_interval // p.channels

        def refreshing_before(t):  # refresh cycles in [offset - interval * k, t) counted from 0
            full, part = divmod(t - offset, p.refresh_interval)
            return full * p.refresh_cycles + min(part, p.refresh_cycles)

        return (stop - start) - (refreshing_before(stop) - refreshing_before(start))

    def _advance(self, cycle: int) -> None:
        if self.last_cycle is None:
            self.last_cycle = cycle - 1
        if cycle <= self.last_cycle:
            return
        for c in range(self.params.channels):
            gain = self._active_cycles(c, self.last_cycle + 1, cycle + 1)
            self.tokens[c] = min(self.cap, self.tokens[c] + gain * self.params.fill_bytes_per_cycle)
        self.last_cycle = cycle

    def cost(self, port: int, channel: int) -> float:
        """Bytes of ``channel``'s bucket one beat of ``port`` spends."""
        p = self.params
        lateral = channel not in self.homes[port]
        return p.beat_bytes / p.lateral_factor if lateral else float(p.beat_bytes)

    def grant(self, cycle: int, wants) -> list[bool]:
        """Which of the beats waiting at ``cycle`` go out.

        ``wants`` is a sequence of ``(port, address)``: one beat per port at most, the address
        of the beat. Cycles must not go backwards; a cycle not asked about still fills the
        buckets. Within a channel, waiting ports are served round robin.
        """
        self._advance(cycle)
        out = [False] * len(wants)
        by_channel: dict[int, list[int]] = {}
        for i, (_, address) in enumerate(wants):
            by_channel.setdefault(self.channel_of(address), []).append(i)
        n_ports = max(len(self.homes), 1)
        for c, waiting in by_channel.items():
            if self.refreshing(c, cycle):
                continue
            start = int(self.next_port[c])
            waiting.sort(key=lambda i: (wants[i][0] - start) % n_ports)
            for i in waiting:
                port = wants[i][0]
                cost = self.cost(port, c)
                if self.tokens[c] + 1e-9 < cost:
                    break
                self.tokens[c] -= cost
                self.bytes[c] += self.params.beat_bytes
                self.beats += 1
                out[i] = True
                self.next_port[c] = (port + 1) % n_ports
        return out

    def reset(self) -> None:
        """Full buckets, counters zero (the card's reset; the refresh schedule runs on)."""
        p = self.params
        self.tokens[:] = p.bucket_beats * p.beat_bytes
        self.bytes[:] = 0
        self.beats = 0
