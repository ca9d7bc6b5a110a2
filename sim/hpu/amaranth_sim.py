"""Run the ``hpu`` gateware in Amaranth's simulator against a Python AXI memory.

A fast, dependency-free check of the engine (no Verilog, no cocotb) used by the unit tests
for every ``gqa_group`` and mode; the cocotb testbench in :mod:`tandem.sim.hpu` is the full
regression in Verilator and Icarus. One testbench coroutine plays every peer each cycle: the
descriptor source, the result sink, two AXI read subordinates with a fixed read latency and a
write subordinate, all over one ``numpy`` byte array.
"""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from amaranth.sim import Simulator
from tandem.host.hpu import HpuParams, HpuRequest, decode_result, descriptor_beats
from tandem.host.hpu.codec import result_error
from tandem.hw.hpu.engine import Hpu

__all__ = ["AmaranthRun", "run_hpu"]


@dataclass
class AmaranthRun:
    """Outcome of :func:`run_hpu`: result beats per request, bursts seen and cycle counts."""

    beats: list[list[tuple[list[int], int, int]]]
    read_bursts: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    cycles: int = 0
    first_read: int | None = None
    last_read: int | None = None
    read_beats: int = 0
    #: Cycles in which each read port accepted a data beat, by port name without ``_axi``
    #: ("k", "v", or "kv" with one read port); ``read_bursts`` uses the same keys.
    read_cycles: dict[str, list[int]] = field(default_factory=dict)
    #: Each request's ``error`` flag, or None where its beats disagreed (a fault).
    errors: list[bool | None] = field(default_factory=list)
    #: The write bursts, ``(address, beats)`` in the order their addresses were taken.
    write_bursts: list[tuple[int, int]] = field(default_factory=list)


def run_hpu(
    params: HpuParams,
    memory: np.ndarray,
    requests: list[HpuRequest],
    *,
    read_latency: int = 0,
    result_backpressure: float = 0.0,
    seed: int = 0,
    max_cycles: int = 200_000,
    descriptors: list[list[int]] | None = None,
    rresp: Callable[[str, int], int] | None = None,
    bresp: Callable[[int], int] | None = None,
) -> AmaranthRun:
    """Send the descriptors of ``requests`` and collect every request's result beats.

    ``memory`` (uint8, byte-addressed) is read and written in place. ``descriptors`` replaces
    the requests' descriptor beats (one list per request; ``requests`` then only counts
    them), to send what the host would refuse. ``rresp(port, address)`` and
    ``bresp(address)`` give the response of a read beat and of a write burst (OKAY, 0, where
    not given).
    """
    p = params
    dut = Hpu(p)
    rng = np.random.default_rng(seed)
    if descriptors is None:
        descriptors = [descriptor_beats(p, r) for r in requests]
    desc_beats = deque(beat for beats in descriptors for beat in beats)
    port_names = [name.removesuffix("_axi") for name in p.read_port_names]
    run = AmaranthRun(
        beats=[[] for _ in requests],
        errors=[None for _ in requests],
        read_bursts={name: [] for name in port_names},
        read_cycles={name: [] for name in port_names},
    )
    reads = _ReadSubordinates(
        {name: getattr(dut, f"{name}_axi") for name in port_names},
        memory, p.beat_bytes, read_latency, rresp, run,
    )  # fmt: skip
    writes = _WriteSubordinate(dut.w_axi, memory, p.beat_bytes, bresp, run)

    async def bench(ctx):
        flags = []  # the error flags of the running request's beats
        request = 0
        for cycle in range(max_cycles):
            # Drive this cycle's outputs of the peers.
            ctx.set(dut.desc_i.valid, 1 if desc_beats else 0)
            if desc_beats:
                ctx.set(dut.desc_i.payload, desc_beats[0])
            sink_ready = rng.random() >= result_backpressure
            ctx.set(dut.result_o.ready, int(sink_ready))
            reads.drive(ctx, cycle)
            writes.drive(ctx)
            # Sample the engine's side of every handshake.
            desc_fire = bool(desc_beats) and ctx.get(dut.desc_i.ready)
            result_fire = sink_ready and ctx.get(dut.result_o.valid)
            if result_fire:
                payload = ctx.get(dut.result_o.payload.as_value())
                words, tag, last = decode_result(p, payload)
                run.beats[request].append((words, tag, last))
                flags.append(result_error(p, payload))
                if last:
                    run.errors[request] = flags[0] if len(set(flags)) == 1 else None
                    flags = []
                    request += 1
            read_handshakes = reads.sample(ctx)
            write_handshakes = writes.sample(ctx)
            await ctx.tick()
            # Apply the handshakes that happened at this edge.
            if desc_fire:
                desc_beats.popleft()
            reads.apply(cycle, *read_handshakes)
            writes.apply(*write_handshakes)
            if request == len(requests):
                run.cycles = cycle + 1
                return
        raise TimeoutError(f"hpu did not finish {len(requests)} requests in {max_cycles} cycles")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return run


class _ReadSubordinates:
    """The AXI read subordinates of :func:`run_hpu`: every read port answers its bursts from
    ``memory`` ``read_latency`` cycles after their address, recording them in ``run``."""

    def __init__(self, ports: dict, memory, beat_bytes: int, read_latency: int, rresp, run):
        self.ports, self.memory, self.beat_bytes = ports, memory, beat_bytes
        self.read_latency, self.rresp, self.run = read_latency, rresp, run
        self.pending = {name: deque() for name in ports}  # (ready_cycle, address, beats)
        self.r_valid = {}

    def drive(self, ctx, cycle: int) -> None:
        """Set every port's ``arready`` and this cycle's read beat, where one is due."""
        for name, port in self.ports.items():
            ctx.set(port.arready, 1)
            queue = self.pending[name]
            valid = bool(queue) and queue[0][0] <= cycle
            self.r_valid[name] = valid
            ctx.set(port.rvalid, int(valid))
            if valid:
                _, address, beats = queue[0]
                word = self.memory[address : address + self.beat_bytes]
                ctx.set(port.rdata, int.from_bytes(word, "little"))
                ctx.set(port.rlast, int(beats == 1))
                ctx.set(port.rresp, self.rresp(name, address) if self.rresp else 0)

    def sample(self, ctx) -> tuple[dict, dict]:
        """``(ar, r_fire)``: the read addresses ``(address, beats)`` offered per port, and
        whether each port took its read beat."""
        ar = {}
        r_fire = {}
        for name, port in self.ports.items():
            if ctx.get(port.arvalid):
                ar[name] = (ctx.get(port.araddr), ctx.get(port.arlen) + 1)
            r_fire[name] = self.r_valid[name] and ctx.get(port.rready)
        return ar, r_fire

    def apply(self, cycle: int, ar: dict, r_fire: dict) -> None:
        """Queue the bursts addressed at this edge and retire the beats taken."""
        run = self.run
        for name, (address, beats) in ar.items():
            self.pending[name].append((cycle + 1 + self.read_latency, address, beats))
            run.read_bursts[name].append((address, beats))
            if run.first_read is None:
                run.first_read = cycle
        for name in self.ports:
            if r_fire[name]:
                ready_at, address, beats = self.pending[name].popleft()
                run.read_beats += 1
                run.read_cycles[name].append(cycle)
                run.last_read = cycle
                if beats > 1:
                    self.pending[name].appendleft((ready_at, address + self.beat_bytes, beats - 1))


class _WriteSubordinate:
    """The AXI write subordinate of :func:`run_hpu`: writes every burst's strobed bytes into
    ``memory`` and answers each burst, recording the bursts in ``run``."""

    def __init__(self, axi, memory, beat_bytes: int, bresp, run):
        self.axi, self.memory, self.beat_bytes, self.bresp, self.run = (
            axi, memory, beat_bytes, bresp, run
        )  # fmt: skip
        self.bursts = deque()  # [address, beats] of the bursts whose data is awaited
        self.beat = 0
        self.b_pending = deque()  # each answered burst's response

    def drive(self, ctx) -> None:
        """Set ``awready``, ``wready`` and the pending write response."""
        ctx.set(self.axi.awready, 1)
        ctx.set(self.axi.wready, int(bool(self.bursts)))
        ctx.set(self.axi.bvalid, int(bool(self.b_pending)))
        if self.b_pending:
            ctx.set(self.axi.bresp, self.b_pending[0])

    def sample(self, ctx) -> tuple:
        """``(aw, w, b_fire)``: the write address ``(address, beats)`` offered (or None), the
        data beat ``(wdata, wstrb, wlast)`` taken (or None), and whether the response was."""
        aw = None
        if ctx.get(self.axi.awvalid):
            aw = (ctx.get(self.axi.awaddr), ctx.get(self.axi.awlen) + 1)
        w = None
        if self.bursts and ctx.get(self.axi.wvalid):
            w = (ctx.get(self.axi.wdata), ctx.get(self.axi.wstrb), ctx.get(self.axi.wlast))
        b_fire = bool(self.b_pending) and ctx.get(self.axi.bready)
        return aw, w, b_fire

    def apply(self, aw, w, b_fire) -> None:
        """Take the address, write the data beat and retire the response of this edge."""
        beat_bytes = self.beat_bytes
        if aw is not None:
            self.bursts.append(list(aw))
            self.run.write_bursts.append(aw)
        if w is not None:
            w_data, w_strb, w_last = w
            address = self.bursts[0][0] + self.beat * beat_bytes
            chunk = w_data.to_bytes(beat_bytes, "little")
            for j in range(beat_bytes):
                if (w_strb >> j) & 1:
                    self.memory[address + j] = chunk[j]
            self.beat += 1
            if self.beat == self.bursts[0][1]:
                assert w_last, "wlast missing on the last beat of a write burst"
                burst_address = self.bursts.popleft()[0]
                self.beat = 0
                self.b_pending.append(self.bresp(burst_address) if self.bresp else 0)
        if b_fire:
            self.b_pending.popleft()
