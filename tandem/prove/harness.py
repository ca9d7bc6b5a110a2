"""The formal harness of ``tandem prove``: the design's valid/ready channels (stream ports and AXI
channels) and internal buffers, the assertions of the stream and AXI rules on them, the
assumptions on its inputs, and the rewrites of its RTLIL text (assertion labels, cut
multipliers)."""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Channel:
    """A valid/ready channel of the top component."""

    name: str
    output: bool
    valid: Any
    ready: Any
    payload: Any  # a Value (all payload members concatenated), or None


@dataclass(frozen=True)
class _Check:
    """One assertion: ``ok`` must be high in every cycle."""

    ident: str
    target: str
    prop: str
    ok: Any


def _unflipped(signature):
    from amaranth.lib import wiring

    return signature.flip() if isinstance(signature, wiring.FlippedSignature) else signature


def _channels(component) -> list[_Channel]:
    """Every valid/ready channel of ``component``: stream ports, then ``<x>valid``/``<x>ready``
    member pairs of other interfaces (AXI), in signature order."""
    from amaranth.hdl import Cat, Value
    from amaranth.lib import stream, wiring

    streams = {
        path
        for path, member in component.signature.members.flatten()
        if member.is_signature and isinstance(_unflipped(member.signature), stream.Signature)
    }
    groups: dict[tuple, dict[str, tuple[Any, Any]]] = {}
    for path, member, value in component.signature.flatten(component):
        groups.setdefault(tuple(path[:-1]), {})[path[-1]] = (member, Value.cast(value))
    channels = []
    for parent, leaves in groups.items():
        if parent in streams:
            channels.append(
                _Channel(
                    ".".join(map(str, parent)),
                    leaves["valid"][0].flow == wiring.Out,
                    leaves["valid"][1],
                    leaves["ready"][1],
                    leaves["payload"][1] if "payload" in leaves else None,
                )
            )
            continue
        for leaf, (member, valid) in leaves.items():
            if not (isinstance(leaf, str) and leaf.endswith("valid")):
                continue
            prefix = leaf[: -len("valid")]
            if f"{prefix}ready" not in leaves:
                continue
            payload = [
                v
                for name, (_, v) in leaves.items()
                if isinstance(name, str)
                and name.startswith(prefix)
                and name not in (leaf, f"{prefix}ready")
            ]
            channels.append(
                _Channel(
                    ".".join(map(str, (*parent, prefix))),
                    member.flow == wiring.Out,
                    valid,
                    leaves[f"{prefix}ready"][1],
                    Cat(*payload) if payload else None,
                )
            )
    return channels


def _axi_pairs(component) -> list[tuple[str, tuple, tuple, Any]]:
    """``(name, (xvalid, xready), (yvalid, yready), ylast)`` of every AXI request channel
    ``x`` (``ar``, ``aw``) and its response channel ``y`` (``r``, ``b``; ``blast`` is 1)."""
    from amaranth.hdl import Const, Value

    groups: dict[tuple, dict[str, Any]] = {}
    for path, _, value in component.signature.flatten(component):
        groups.setdefault(tuple(path[:-1]), {})[path[-1]] = Value.cast(value)
    pairs = []
    for parent, leaves in groups.items():
        for request, response in (("ar", "r"), ("aw", "b")):
            names = [f"{request}valid", f"{request}ready", f"{response}valid", f"{response}ready"]
            if all(n in leaves for n in names):
                pairs.append(
                    (
                        ".".join(map(str, (*parent, response))),
                        (leaves[names[0]], leaves[names[1]]),
                        (leaves[names[2]], leaves[names[3]]),
                        leaves.get(f"{response}last", Const(1, 1)),
                    )
                )
    return pairs


def _axi_managers(component) -> list[tuple[str, Any, tuple | None]]:
    """``(name, valid, burst)`` of every AXI manager channel the design drives (``ar``, ``aw``,
    ``w``): ``burst`` is ``(addr, len, size)`` where the channel has all three, else None."""
    from amaranth.hdl import Value
    from amaranth.lib import wiring

    groups: dict[tuple, dict[str, tuple[Any, Any]]] = {}
    for path, member, value in component.signature.flatten(component):
        groups.setdefault(tuple(path[:-1]), {})[path[-1]] = (member, Value.cast(value))
    managers = []
    for parent, leaves in groups.items():
        for prefix in ("ar", "aw", "w"):
            names = (f"{prefix}valid", f"{prefix}ready")
            if not all(n in leaves for n in names) or leaves[names[0]][0].flow != wiring.Out:
                continue
            fields = [f"{prefix}{field}" for field in ("addr", "len", "size")]
            burst = None
            if prefix != "w" and all(f in leaves for f in fields):
                burst = tuple(leaves[f][1] for f in fields)
            managers.append((".".join(map(str, (*parent, prefix))), leaves[names[0]][1], burst))
    return managers


def _buffers(fragment, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str, Any]]:
    """``(name, kind, object)`` of every FIFO and result serializer below ``fragment``."""
    from amaranth.lib.fifo import FIFOInterface

    from tandem.hw.sparse_dsp.chain import ResultSerializer

    for index, (sub, name, _) in enumerate(fragment.subfragments):
        here = (*path, name if name is not None else f"#{index}")
        origins = getattr(sub, "origins", None) or ()
        found = False
        for origin in origins:
            if isinstance(origin, FIFOInterface):
                yield ".".join(here), "fifo", origin
                found = True
                break
            if isinstance(origin, ResultSerializer):
                yield ".".join(here), "serializer", origin
                found = True
                break
        if not found:
            yield from _buffers(sub, here)


def build_harness(component):
    """The formal harness around ``component``: ``(elaboratable, ports, checks, covers)``.

    Every check's assertion is ``ok | skip``, ``skip`` a top-level input, so one netlist serves
    every subset of the checks (the solver sets ``skip`` of the others to 1).
    """
    from amaranth.hdl import (
        Assert,
        Assume,
        Elaboratable,
        Fragment,
        Module,
        ResetSignal,
        Signal,
        Value,
    )

    fragment = Fragment.get(component, None)
    channels = _channels(component)
    buffers = list(_buffers(fragment))

    class Prebuilt(Elaboratable):
        def elaborate(self, platform):
            return fragment

    m = Module()
    m.submodules.dut = Prebuilt()
    counter = iter(range(1 << 30))

    def past(value, name):
        value = Value.cast(value)
        reg = Signal(len(value), name=f"past_{name}", reset_less=True)
        m.d.sync += reg.eq(value)
        return reg

    def sanitize(name):
        return re.sub(r"\W", "_", name)

    started = Signal(name="started", reset_less=True)  # low only in the initial state
    m.d.sync += started.eq(1)
    after_reset = past(ResetSignal("sync"), "rst")

    def held(valid, ready, payload, name):
        """``(pending, kept)``: a beat was offered and not taken last cycle; it still is."""
        pending = started & past(valid, f"{name}_valid") & ~past(ready, f"{name}_ready")
        # A reset abandons the beat: from the cycle rst rises (an AXI manager's valid drops
        # then) to the cycle after it falls.
        pending = pending & ~after_reset & ~ResetSignal("sync")
        kept = valid
        if payload is not None:
            payload = Value.cast(payload).as_unsigned()  # a signed one would sign-extend
            kept = kept & (payload == past(payload, f"{name}_payload"))
        return pending, kept

    checks: list[_Check] = []
    # "valid is never high" (a buffer: "never full"): the counterexample is the first beat
    covers: list[_Check] = []

    def check(target, prop, ok, into=checks):
        into.append(_Check(f"p{next(counter)}", target, prop, ok))

    for channel in channels:
        name = sanitize(channel.name)
        pending, kept = held(channel.valid, channel.ready, channel.payload, name)
        if channel.output:
            check(channel.name, "hold", ~pending | kept)
            check(channel.name, "reset", (started & ~after_reset) | ~channel.valid)
            check(channel.name, "first-valid", ~channel.valid, into=covers)
        else:
            m.d.comb += Assume(~pending | kept)
    for name, valid, burst in _axi_managers(component):
        check(name, "axi-reset", ~ResetSignal("sync") | ~valid)
        if burst is not None:
            addr, length, size = burst
            end = addr[:12] + ((length + 1) << size)  # the burst's last byte + 1, in its 4 KiB
            check(name, "axi-4k", ~valid | (end <= 4096))
    for name, request, response, last in _axi_pairs(component):
        # An AXI subordinate answers requests: a read data beat (write response) only while a
        # burst is outstanding, counted from the last reset (the subordinate resets with the
        # design). Without this, a free rlast with nothing outstanding would wrap the design's
        # own count of bursts in flight.
        outstanding = Signal(16, name=f"{sanitize(name)}_outstanding")
        taken = request[0] & request[1]
        done = response[0] & response[1] & last
        m.d.sync += outstanding.eq(outstanding + taken - done)
        m.d.comb += Assume(~response[0] | (outstanding != 0))
    for name, kind, obj in buffers:
        if kind == "fifo":
            pending, kept = held(obj.w_en, obj.w_rdy, obj.w_data, sanitize(f"fifo_{name}"))
            check(f"fifo {name}", "no-overflow", ~pending | kept)
            check(f"fifo {name}", "first-full", obj.w_rdy, into=covers)
        else:
            check(f"buffer {name}", "no-overflow", ~(obj.capture & obj.busy))
            check(f"buffer {name}", "first-full", ~obj.busy, into=covers)

    # The design's ports keep their Verilog names; direction None: Amaranth infers it (inputs
    # are the signals nothing drives), which keeps the private PortDirection out of here.
    ports = {
        "__".join(map(str, path)): (Value.cast(value), None)
        for path, _, value in component.signature.flatten(component)
    }
    for c in checks + covers:
        ok = Signal(name=f"ok_{c.ident}")
        skip = Signal(name=f"skip_{c.ident}")
        m.d.comb += [ok.eq(c.ok), Assert(ok | skip, c.ident)]  # see label_asserts
        ports[f"skip_{c.ident}"] = (skip, None)
    return m, ports, checks, covers


# ---- the harness as RTLIL ---------------------------------------------------------------------

_CHECK_CELL = re.compile(r'^([ \t]*)(cell \$check \S+\n\s*parameter \\FORMAT "(p\d+)"\n)', re.M)


def label_asserts(rtlil_text: str) -> str:
    """Give each check's assertion cell (its message is the check's ident) the ident as its
    ``src`` attribute, which yosys-smtbmc names when the assertion fails."""
    return _CHECK_CELL.sub(r'\1attribute \\src "\3"\n\1\2', rtlil_text)


_MUL_CELL = re.compile(r"^(\s*)cell \$mul (\S+)\n(.*?)^\s*end\n", re.M | re.S)


def _operand_is_constant(text: str) -> bool:
    """An RTLIL signal made of literals only (``5'10110``, ``{ 2'01 3'000 }``)."""
    tokens = text.replace("{", " ").replace("}", " ").split()
    return all(re.fullmatch(r"-?\d+'[01xzm-]*", t) for t in tokens)


def cut_multipliers(rtlil_text: str) -> tuple[str, int]:
    """Replace every ``$mul`` cell of two non-constant operands by a free value (``$anyseq``).

    Returns the new text and the number of cells cut.
    """
    count = 0

    def replace(match):
        nonlocal count
        indent, name, body = match.groups()
        connects = dict(re.findall(r"^\s*connect \\(\w+) (.*)$", body, re.M))
        if _operand_is_constant(connects["A"]) or _operand_is_constant(connects["B"]):
            return match.group(0)
        width = re.search(r"parameter \\Y_WIDTH (\d+)", body).group(1)
        count += 1
        return (
            f"{indent}cell $anyseq {name}\n"
            f"{indent}  parameter \\WIDTH {width}\n"
            f"{indent}  connect \\Y {connects['Y']}\n"
            f"{indent}end\n"
        )

    return _MUL_CELL.sub(replace, rtlil_text), count
