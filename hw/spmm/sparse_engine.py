"""Streaming sparse engine for sparse adjacency tiles.

Golden model and stream protocol: :mod:`tandem.host.spmm`.
"""

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from tandem.host.spmm import SparseBeat, SparseEngineParams

__all__ = ["SparseEngine"]


class SparseEngine(wiring.Component):
    """COO non-zeros in (row-major), gathered feature rows, one output row per row end.

    Pipeline, one beat per cycle, every stage on one enable (``~o.valid | o.ready``):

    1. input register; a LOAD writes its L features into the feature buffer (T x L words)
       at ``col``, a non-zero reads the buffer at ``col``;
    2. the buffer's registered read data arrives;
    3. L products ``value * x[l]`` are registered (a DSP's M register);
    4. the running row sum: ``sum = (restart ? 0 : acc) + product``. The next non-zero of the
       same row reads ``acc`` one cycle later, straight from the register, so back-to-back
       non-zeros of one output row (the read-after-write hazard) never stall. On ``row_end``
       the sum leaves through the output register and ``restart`` is set.

    A LOAD reaches stage 1 strictly before any later non-zero, so a non-zero always sees the
    features loaded ahead of it in the stream.

    Attributes
    ----------
    i : In(stream.Signature(StructLayout({"kind", "row", "col", "value", "x", "row_end"})))
        ``kind`` is :class:`~tandem.host.spmm.SparseBeat`; ``x`` is L x signed(x_bits).
    o : Out(stream.Signature(StructLayout({"row": index_bits, "sums": L x signed(acc_bits)})))
    """

    LATENCY = 4

    def __init__(self, params: SparseEngineParams):
        if not isinstance(params, SparseEngineParams):
            raise TypeError(f"params must be a SparseEngineParams, not {params!r}")
        self.params = params
        p = params
        in_layout = data.StructLayout(
            {
                "kind": 1,
                "row": unsigned(p.index_bits),
                "col": unsigned(p.index_bits),
                "value": signed(p.a_bits),
                "x": data.ArrayLayout(signed(p.x_bits), p.lanes),
                "row_end": 1,
            }
        )
        out_layout = data.StructLayout(
            {"row": unsigned(p.index_bits), "sums": data.ArrayLayout(signed(p.acc_bits), p.lanes)}
        )
        super().__init__(
            {"i": In(stream.Signature(in_layout)), "o": Out(stream.Signature(out_layout))}
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        enable = Signal()
        m.d.comb += [enable.eq(~self.o.valid | self.o.ready), self.i.ready.eq(enable)]

        row_layout = data.ArrayLayout(signed(p.x_bits), p.lanes)
        m.submodules.features = features = Memory(shape=row_layout, depth=p.tile, init=[])
        write = features.write_port()
        read = features.read_port(domain="sync")

        # Stage 1: the beat.
        s1 = Signal.like(self.i.payload, name="s1")
        s1_valid = Signal()
        with m.If(enable):
            m.d.sync += [s1.eq(self.i.payload), s1_valid.eq(self.i.valid)]
        is_nz1 = s1_valid & (s1.kind == SparseBeat.NZ)
        m.d.comb += [
            write.addr.eq(s1.col),
            write.data.eq(s1.x),
            write.en.eq(enable & s1_valid & (s1.kind == SparseBeat.LOAD)),
            read.addr.eq(s1.col),
            read.en.eq(enable),
        ]

        # Stage 2: buffered features of the column arrive from the read port.
        s2_valid, s2_end = Signal(), Signal()
        s2_row = Signal(unsigned(p.index_bits))
        s2_value = Signal(signed(p.a_bits))
        with m.If(enable):
            m.d.sync += [
                s2_valid.eq(is_nz1),
                s2_end.eq(s1.row_end),
                s2_row.eq(s1.row),
                s2_value.eq(s1.value),
            ]

        # Stage 3: products.
        s3_valid, s3_end = Signal(), Signal()
        s3_row = Signal(unsigned(p.index_bits))
        products = [Signal(signed(p.a_bits + p.x_bits), name=f"product{k}") for k in range(p.lanes)]
        with m.If(enable):
            m.d.sync += [s3_valid.eq(s2_valid), s3_end.eq(s2_end), s3_row.eq(s2_row)]
            m.d.sync += [products[k].eq(s2_value * read.data[k]) for k in range(p.lanes)]

        # Stage 4: running row sum and the output register.
        restart = Signal(init=1)
        acc = [Signal(signed(p.acc_bits), name=f"acc{k}") for k in range(p.lanes)]
        sums = [Signal(signed(p.acc_bits), name=f"sum{k}") for k in range(p.lanes)]
        m.d.comb += [sums[k].eq(Mux(restart, 0, acc[k]) + products[k]) for k in range(p.lanes)]
        out_valid = Signal()
        out = Signal.like(self.o.payload, name="out")
        with m.If(enable):
            m.d.sync += out_valid.eq(s3_valid & s3_end)
            with m.If(s3_valid):
                m.d.sync += [acc[k].eq(sums[k]) for k in range(p.lanes)]
                m.d.sync += restart.eq(s3_end)
                with m.If(s3_end):
                    m.d.sync += out.row.eq(s3_row)
                    m.d.sync += [out.sums[k].eq(sums[k]) for k in range(p.lanes)]
        m.d.comb += [self.o.valid.eq(out_valid), self.o.payload.eq(out)]
        return m
