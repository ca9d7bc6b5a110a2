"""``hpu-card`` gateware: several ``hpu`` engines behind one descriptor and one result stream.

::

    desc_i ─► Dispatcher ─┬─► engine 0 (Hpu) ─┬─► ResultMerger ─► RegisterSlice ─► result_o
                          ├─► engine 1 (Hpu) ─┤
                          └─► ...             ┘
    engine e's AXI ports: k_axi_e, v_axi_e (or kv_axi_e), w_axi_e

The :class:`Dispatcher` reads each request's header, picks the engine that owns its KV base
address (:func:`tandem.mappings.hpu.channels.engine_bases`, the host's
:func:`tandem.host.hpu.card.route`) and passes the whole descriptor to it. The
:class:`ResultMerger` joins the engines' result streams at request boundaries, round robin,
and tags each beat with its engine (:func:`tandem.host.hpu.card.card_result_fields`).
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.hpu.card import HpuCardParams, card_result_layout
from tandem.host.hpu.codec import HEADER_FIELDS, header_layout, result_layout

from ..common.axi import AxiReadManager, AxiWriteManager
from ..common.pipeline import RegisterSlice
from .beats import body_beats, checked
from .engine import Hpu

__all__ = ["Dispatcher", "HpuCard", "ResultMerger"]


class Dispatcher(wiring.Component):
    """Splits the descriptor stream into requests and sends each whole to its engine.

    A request's header (``header_beats`` beats) is taken into a register first, since the
    base address and the append flag (which sets the body's length) may lie in any of its
    beats; then the header goes to the engine that owns the base (the last engine whose first
    address in ``bases`` is at or below it), then the body beats pass straight through.
    ``desc_i.ready`` is high while the header is taken, low while it is sent, and the target
    engine's ``ready`` while the body passes: a request waits for its own engine only, and the
    requests behind it wait with it. Each request costs ``header_beats`` cycles on top of its
    beats.

    Parameters
    ----------
    params : HpuParams
        The engines' parameters.
    bases : tuple of int
        First address of each engine's channels, ascending, ``bases[0] == 0``.

    Attributes
    ----------
    desc_i : In(stream.Signature(unsigned(mem_data_bits)))
        The card's descriptor beats (:func:`tandem.host.hpu.descriptor_beats`, request after
        request).
    o : Out(stream.Signature(unsigned(mem_data_bits))).array(len(bases))
        Engine ``e``'s descriptor beats.
    """

    def __init__(self, params, bases):
        self.params = p = checked(params)
        self.bases = tuple(int(b) for b in bases)
        if not self.bases or self.bases[0] != 0 or list(self.bases) != sorted(set(self.bases)):
            raise ValueError(f"bases must ascend from 0, not {bases!r}")
        beat = stream.Signature(unsigned(p.mem_data_bits))
        super().__init__({"desc_i": In(beat), "o": Out(beat).array(len(self.bases))})

    def elaborate(self, platform):
        p = self.params
        m = Module()
        header = Signal(header_layout(p), name="header")
        beat = Signal(range(max(p.header_beats, 2)), name="header_beat")
        body_left = Signal(range(body_beats(p) + 1), name="body_left")
        target = Signal(range(len(self.bases)), name="target")
        take = self.desc_i.valid & self.desc_i.ready
        # The last engine whose first address is at or below the base: comparisons against
        # constants, no division by the channel size, registered as the beat holding the base
        # is taken (from the header register, the compare and the engine select were the
        # card's longest path). The base's 64 bits lie in one beat of 64 bits or more.
        base_field = next(f for f in HEADER_FIELDS if f.name == "base")
        base_beat, base_lo = divmod(base_field.offset, p.mem_data_bits)
        incoming_base = self.desc_i.payload[base_lo : base_lo + base_field.width]
        # The beat offered to the target engine, and whether that engine takes it.
        valid = Signal(name="out_valid")
        payload = Signal(p.mem_data_bits, name="out_payload")
        ready = Signal(name="out_ready")
        for e, port in enumerate(self.o):
            m.d.comb += [port.valid.eq(valid & (target == e)), port.payload.eq(payload)]
            with m.If(target == e):
                m.d.comb += ready.eq(port.ready)
        header_word = header.as_value().word_select(beat, p.mem_data_bits)
        with m.FSM():
            with m.State("HEADER_IN"):
                m.d.comb += self.desc_i.ready.eq(1)
                with m.If(take):
                    m.d.sync += header_word.eq(self.desc_i.payload)
                    with m.If(beat == base_beat):
                        m.d.sync += target.eq(sum(incoming_base >= b for b in self.bases[1:]))
                    with m.If(beat == p.header_beats - 1):
                        m.d.sync += beat.eq(0)
                        m.next = "HEADER_OUT"
                    with m.Else():
                        m.d.sync += beat.eq(beat + 1)
            with m.State("HEADER_OUT"):
                m.d.comb += [valid.eq(1), payload.eq(header_word)]
                with m.If(ready):
                    with m.If(beat == p.header_beats - 1):
                        rows = 2 * p.row_beats  # the new k and v rows come only with an append
                        body = body_beats(p)
                        m.d.sync += [
                            beat.eq(0),
                            body_left.eq(Mux(header.append, body, body - rows)),
                        ]
                        m.next = "BODY"
                    with m.Else():
                        m.d.sync += beat.eq(beat + 1)
            with m.State("BODY"):
                m.d.comb += [
                    valid.eq(self.desc_i.valid),
                    payload.eq(self.desc_i.payload),
                    self.desc_i.ready.eq(ready),
                ]
                with m.If(take):
                    m.d.sync += body_left.eq(body_left - 1)
                    with m.If(body_left == 1):
                        m.next = "HEADER_IN"
        return m


class ResultMerger(wiring.Component):
    """Joins the engines' result streams into one, a request at a time, round robin.

    When no request is under way, the next engine after the last one served (cyclically) that
    offers a beat is chosen; the merger then stays with it until the beat with ``last`` has
    passed, so a request's beats are contiguous and each engine's requests keep their order.
    Once a beat is offered on ``o`` it stays offered, unchanged, until taken. ``o.valid``
    follows the inputs' ``valid`` without waiting for ``o.ready``; an input's ``ready`` is
    ``o.ready`` while it is chosen.

    Parameters
    ----------
    params : HpuCardParams

    Attributes
    ----------
    i : In(stream.Signature(result_layout)).array(engines)
        Each engine's results (:func:`tandem.host.hpu.codec.result_layout`).
    o : Out(stream.Signature(card_result_layout))
        :func:`tandem.host.hpu.card.card_result_layout`: an engine's beat and its ``engine``.
    """

    def __init__(self, params: HpuCardParams):
        if not isinstance(params, HpuCardParams):
            raise TypeError(f"params must be an HpuCardParams, not {params!r}")
        self.params = p = params
        super().__init__(
            {
                "i": In(stream.Signature(result_layout(p.engine))).array(p.engines),
                "o": Out(stream.Signature(card_result_layout(p))),
            }
        )

    def elaborate(self, platform):
        n = self.params.engines
        m = Module()
        inputs = list(self.i)
        held = Signal(name="held")  # a request under way, or a beat offered and not taken
        current = Signal(range(n), name="current")  # the engine chosen while held
        previous = Signal(range(n), name="previous")  # the last engine served
        pick = Signal(range(n), name="pick")
        grant = Signal(range(n), name="grant")
        # Round robin: the first engine offering a beat after ``previous``, cyclically.
        with m.Switch(previous):
            for last in range(n):
                with m.Case(last):
                    for e in reversed([(last + 1 + k) % n for k in range(n)]):
                        with m.If(inputs[e].valid):
                            m.d.comb += pick.eq(e)
        m.d.comb += grant.eq(Mux(held, current, pick))
        out = self.o
        with m.Switch(grant):
            for e, port in enumerate(inputs):
                with m.Case(e):
                    m.d.comb += [
                        out.valid.eq(port.valid),
                        port.ready.eq(out.ready),
                        out.payload.engine.eq(e),
                    ]
                    for name, _ in port.payload.shape():
                        m.d.comb += out.payload[name].eq(port.payload[name])
        with m.If(out.valid):
            done = out.ready & out.payload.last
            m.d.sync += [held.eq(~done), current.eq(grant)]
            with m.If(done):
                m.d.sync += previous.eq(grant)
        return m


class HpuCard(wiring.Component):
    """``engines`` decode-attention engines behind one descriptor and one result stream.

    Parameters
    ----------
    params : HpuCardParams
        The engines' parameters, their count and the card's pseudo-channels.

    Attributes
    ----------
    desc_i : In(stream.Signature(unsigned(mem_data_bits)))
        Descriptors of any engine's requests, one after another
        (:func:`tandem.host.hpu.descriptor_beats`); each goes to the engine that owns its base
        address (:func:`tandem.host.hpu.card.route`).
    result_o : Out(stream.Signature(card_result_layout))
        Every engine's result beats (:func:`tandem.host.hpu.card.card_result_fields`: an
        engine's beat and ``engine``): each engine's in its descriptors' order, a request's
        beats contiguous, engines taken in turn at request boundaries.
    k_axi_<e>, v_axi_<e> : Out(AxiReadManager)
        Engine ``e``'s read managers (``kv_axi_<e>`` with ``read_ports = 1``).
    w_axi_<e> : Out(AxiWriteManager)
        Engine ``e``'s write manager.
    """

    LATENCY = None  # depends on the sequence length

    def __init__(self, params: HpuCardParams):
        if not isinstance(params, HpuCardParams):
            raise TypeError(f"params must be an HpuCardParams, not {params!r}")
        self.params = p = params
        e = p.engine
        read = AxiReadManager(addr_bits=e.addr_bits, data_bits=e.mem_data_bits)
        write = AxiWriteManager(addr_bits=e.addr_bits, data_bits=e.mem_data_bits)
        ports = {}
        for index in range(p.engines):
            ports.update({f"{name}_{index}": Out(read) for name in e.read_port_names})
            ports[f"w_axi_{index}"] = Out(write)
        super().__init__(
            {
                "desc_i": In(stream.Signature(unsigned(e.mem_data_bits))),
                "result_o": Out(stream.Signature(card_result_layout(p))),
                **ports,
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        m.submodules.dispatcher = dispatcher = Dispatcher(p.engine, p.engine_bases)
        m.submodules.merger = merger = ResultMerger(p)
        # The merger's output mux and the engines' ready fan-out end at registers.
        m.submodules.result_slice = result_slice = RegisterSlice(card_result_layout(p))
        wiring.connect(m, wiring.flipped(self.desc_i), dispatcher.desc_i)
        for index in range(p.engines):
            engine = Hpu(p.engine)
            m.submodules[f"engine_{index}"] = engine
            wiring.connect(m, dispatcher.o[index], engine.desc_i)
            wiring.connect(m, engine.result_o, merger.i[index])
            for name in (*p.engine.read_port_names, "w_axi"):
                port = getattr(self, f"{name}_{index}")
                wiring.connect(m, getattr(engine, name), wiring.flipped(port))
        wiring.connect(m, merger.o, result_slice.i)
        wiring.connect(m, result_slice.o, wiring.flipped(self.result_o))
        return m
