"""``hpu`` normalizer: ``1/m`` of each finished request's ``l = m * 2**e``, per query."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.reciprocal import Reciprocal
from .beats import REQUEST_QUEUE_DEPTH, checked, normalized_layout, stats_layout

__all__ = ["Normalizer"]


class Normalizer(wiring.Component):
    """Computes the reciprocal of every query's ``l`` as soon as the K side has finished a
    request (well before its V side has), one ``l`` per cycle into the pipelined
    :class:`~tandem.hw.common.reciprocal.Reciprocal` (``mantissa_only``: the mantissa's
    reciprocal; the exponent is left to the output's shift of ``o``).

    Takes a request's (m, l) from ``i`` while feeding the previous one's last ``l``, and holds
    up to ``REQUEST_QUEUE_DEPTH`` requests' (m, l) and reciprocals for the output.

    Parameters
    ----------
    params : HpuParams

    Attributes
    ----------
    i : In(stream.Signature(:func:`.beats.stats_layout`))
        A request's final (m, l) per query, from the K side. The producer keeps at most
        ``REQUEST_QUEUE_DEPTH`` requests between ``i`` and ``o`` (the
        :class:`~.scheduler.Scheduler` counts them): ``i.ready`` does not look at the queues'
        room.
    o : Out(stream.Signature(:func:`.beats.normalized_layout`))
        The same (m, l) and each ``l``'s reciprocal.
    """

    def __init__(self, params):
        self.params = p = checked(params)
        super().__init__(
            {
                "i": In(stream.Signature(stats_layout(p))),
                "o": Out(stream.Signature(normalized_layout(p))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        groups = p.gqa_group
        stats_bits = len(self.i.payload.as_value())
        recip_bits = p.reciprocal.out_bits
        m.submodules.recip = recip = Reciprocal(p.reciprocal)
        m.submodules.stats = stats_fifo = fifo.SyncFIFOBuffered(
            width=stats_bits, depth=REQUEST_QUEUE_DEPTH
        )
        m.submodules.recips = recip_fifo = fifo.SyncFIFOBuffered(
            width=groups * recip_bits, depth=REQUEST_QUEUE_DEPTH
        )
        feed_sums = [Signal(p.l_bits, name=f"feed_l{g}") for g in range(groups)]
        feed_index = Signal(range(groups), name="feed_index")
        feeding = Signal(name="feeding")
        last_feed = feeding & recip.i.ready & (feed_index == groups - 1)
        load = self.i.valid & self.i.ready
        m.d.comb += [
            recip.i.valid.eq(feeding),
            recip.i.payload.eq(feed_sums[0]),
            self.i.ready.eq(~feeding | last_feed),
            stats_fifo.w_en.eq(load),
            stats_fifo.w_data.eq(self.i.payload),
            recip.o.ready.eq(1),
        ]
        # The sums move down one place per l fed, so the unit reads the first (a register)
        # rather than a mux by feed_index (which sat on its first stage's longest path).
        with m.If(recip.i.valid & recip.i.ready):
            m.d.sync += feed_index.eq(feed_index + 1)
            m.d.sync += [feed_sums[g].eq(feed_sums[g + 1]) for g in range(groups - 1)]
        with m.If(last_feed):
            m.d.sync += [feeding.eq(0), feed_index.eq(0)]
        with m.If(load):
            m.d.sync += [feeding.eq(1), feed_index.eq(0)]
            for g in range(groups):
                m.d.sync += feed_sums[g].eq(self.i.payload[g].sum)
        collected = [Signal(recip_bits, name=f"collected_r{g}") for g in range(groups - 1)]
        collect_index = Signal(range(groups), name="collect_index")
        m.d.comb += [
            recip_fifo.w_en.eq(recip.o.valid & (collect_index == groups - 1)),
            recip_fifo.w_data.eq(Cat(*collected, recip.o.payload)),
        ]
        with m.If(recip.o.valid):
            m.d.sync += collect_index.eq(Mux(collect_index == groups - 1, 0, collect_index + 1))
            with m.Switch(collect_index):
                for g in range(groups - 1):
                    with m.Case(g):
                        m.d.sync += collected[g].eq(recip.o.payload)
        # The output takes a request's (m, l) and reciprocals together: neither queue pops
        # while the other is empty (its (m, l) can wait for its reciprocals).
        taken = self.o.valid & self.o.ready
        m.d.comb += [
            self.o.valid.eq(stats_fifo.r_rdy & recip_fifo.r_rdy),
            self.o.payload.stats.eq(stats_fifo.r_data),
            self.o.payload.recips.eq(recip_fifo.r_data),
            stats_fifo.r_en.eq(taken),
            recip_fifo.r_en.eq(taken),
        ]
        return m
