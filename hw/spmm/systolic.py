"""Output-stationary R x C systolic array for dense adjacency tiles.

Golden model and stream protocol: :mod:`tandem.host.spmm`.
"""

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.spmm import SystolicParams

__all__ = ["Systolic"]


class Systolic(wiring.Component):
    """Output-stationary systolic array: one k-step per cycle in, one output row per cycle out.

    Row ``r`` of the adjacency operands enters ``r`` cycles late and column ``c`` of the
    features ``c`` cycles late, so step ``k`` meets in PE (r, c) at cycle ``k + r + c``. Each
    PE multiplies, accumulates, and on the block's last step hands its sum to a result
    register and restarts, so the next block streams in without a gap. The results of row
    ``r`` are deskewed (column ``c`` waits ``C - 1 - c`` cycles) and leave as one beat. Rows of
    one block are ready on consecutive cycles and blocks are at least R steps long, so at most
    one row is ready at a time and one output port suffices.

    Every register moves on one enable, ``~o.valid | o.ready``: backpressure freezes the whole
    array, bubbles included, and nothing is lost.

    Attributes
    ----------
    i : In(stream.Signature(StructLayout({"a": R x signed(a_bits), "x": C x signed(x_bits),
        "last": 1})))
        One k-step; ``last`` closes a block.
    o : Out(stream.Signature(ArrayLayout(signed(acc_bits), C)))
        One output row of a block; R beats per block, row 0 first.
    """

    def __init__(self, params: SystolicParams):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params = params
        layout = data.StructLayout(
            {
                "a": data.ArrayLayout(signed(params.a_bits), params.rows),
                "x": data.ArrayLayout(signed(params.x_bits), params.cols),
                "last": 1,
            }
        )
        super().__init__(
            {
                "i": In(stream.Signature(layout)),
                "o": Out(stream.Signature(data.ArrayLayout(signed(params.acc_bits), params.cols))),
            }
        )

    @property
    def LATENCY(self) -> int:  # noqa: N802  (the manifest reads this name)
        """Cycles from a block's last beat in to its first row out."""
        return self.params.cols + 1

    def elaborate(self, platform):
        p = self.params
        nr, nc = p.rows, p.cols
        m = Module()
        enable = Signal()
        m.d.comb += [enable.eq(~self.o.valid | self.o.ready), self.i.ready.eq(enable)]

        def delayed(value, shape, stages, name):
            """``value`` through ``stages`` registers that move on the enable."""
            for s in range(stages):
                reg = Signal(shape, name=f"{name}_d{s}")
                with m.If(enable):
                    m.d.sync += reg.eq(value)
                value = reg
            return value

        # Edge skew: row r (operand and its valid/last flags) waits r cycles, column c waits c.
        row_a, row_v, row_l = [], [], []
        for r in range(nr):
            row_a.append(delayed(self.i.payload.a[r], signed(p.a_bits), r, f"a{r}"))
            row_v.append(delayed(self.i.valid, 1, r, f"v{r}"))
            row_l.append(delayed(self.i.payload.last, 1, r, f"l{r}"))
        col_x = [delayed(self.i.payload.x[c], signed(p.x_bits), c, f"x{c}") for c in range(nc)]

        ready_rows = []  # (valid, [C sums]) per row, aligned
        x_in = col_x
        for r in range(nr):
            a_in, v_in, l_in = row_a[r], row_v[r], row_l[r]
            x_out = []
            results = []
            for c in range(nc):
                a_reg = Signal(signed(p.a_bits), name=f"pe{r}_{c}_a")
                x_reg = Signal(signed(p.x_bits), name=f"pe{r}_{c}_x")
                v_reg = Signal(name=f"pe{r}_{c}_v")
                l_reg = Signal(name=f"pe{r}_{c}_l")
                acc = Signal(signed(p.acc_bits), name=f"pe{r}_{c}_acc")
                restart = Signal(init=1, name=f"pe{r}_{c}_restart")
                res = Signal(signed(p.acc_bits), name=f"pe{r}_{c}_res")
                res_v = Signal(name=f"pe{r}_{c}_res_v")
                total = Signal(signed(p.acc_bits), name=f"pe{r}_{c}_sum")
                m.d.comb += total.eq(Mux(restart, 0, acc) + a_in * x_in[c])
                with m.If(enable):
                    m.d.sync += [
                        a_reg.eq(a_in),
                        x_reg.eq(x_in[c]),
                        v_reg.eq(v_in),
                        l_reg.eq(l_in),
                        res_v.eq(v_in & l_in),
                    ]
                    with m.If(v_in):
                        m.d.sync += [acc.eq(total), restart.eq(l_in)]
                        with m.If(l_in):
                            m.d.sync += res.eq(total)
                # Column c of a row finishes c cycles before column C-1: deskew it.
                results.append(
                    (
                        delayed(res, signed(p.acc_bits), nc - 1 - c, f"r{r}_{c}"),
                        delayed(res_v, 1, nc - 1 - c, f"rv{r}_{c}"),
                    )
                )
                x_out.append(x_reg)
                a_in, v_in, l_in = a_reg, v_reg, l_reg
            ready_rows.append((results[-1][1], [value for value, _ in results]))
            x_in = x_out

        out_valid = Signal()
        out_row = Signal(data.ArrayLayout(signed(p.acc_bits), nc))
        with m.If(enable):
            m.d.sync += out_valid.eq(0)
            for valid, values in ready_rows:
                with m.If(valid):
                    m.d.sync += out_valid.eq(1)
                    m.d.sync += [out_row[c].eq(values[c]) for c in range(nc)]
        m.d.comb += [self.o.valid.eq(out_valid), self.o.payload.eq(out_row)]
        return m
