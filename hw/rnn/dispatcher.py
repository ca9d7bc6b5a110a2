"""``rnn`` dispatcher: runs a sequence's tile program, one beat per cycle, into the MAC array."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2
from tandem.host.common import bits
from tandem.host.rnn import STATE_BITS, RnnParams, cmd_fields

from .beats import beat_layout, checked, entry_layout

__all__ = ["Dispatcher"]


class Dispatcher(wiring.Component):
    """Issues the program's entries for every batch element and step, buffering x as it arrives.

    Takes a command on ``cmd_i`` while ``idle``, then offers at most one beat per cycle on
    ``o``: entry by entry, batch element 0..B-1 inside each entry, step after step. A beat is
    valid when the x of its step has fully arrived (x tiles), its weights are there (streamed:
    a ``w_i`` beat for batch element 0), and, for an entry with ``wait`` at step t >= 1,
    ``done >= (t - 1) * row_blocks * B + (need + 1) * B``, ``done`` counting the results the
    cell has ``written`` in this sequence; it issues when the pipeline moves (``o.ready``).
    x is written to the x memory at most one step ahead of the step being dispatched. A beat
    carries the addresses of its x tile, its h word (buffer ``(t - 1) % 2``) and slice, and
    its weights (:func:`.beats.beat_layout`): the MAC array reads them at the issue edge.

    Parameters
    ----------
    params : RnnParams

    Attributes
    ----------
    cmd_i : In(stream.Signature(cmd layout))
        ``steps``, ``x_blocks``, ``row_blocks``, ``w_frac`` (:func:`tandem.host.rnn.cmd_fields`).
    x_i : In(stream.Signature(unsigned(tile_cols * 16)))
        x tiles in step, batch, column-block order.
    w_i : In(stream.Signature(unsigned(tile_bits)))
        Streamed weights only: one tile per entry, every step; batch element 0 takes it.
    prog_rd : In(ReadPort.Signature(...))
        The program memory, read asynchronously.
    x_wr : In(WritePort.Signature(...))
        The x memory: ``2 * batch * max_x_blocks`` tiles, double-buffered by step parity.
    o : Out(stream.Signature(:func:`.beats.beat_layout`))
    written, busy : In(1)
        A result was written this cycle; one is still to be written or taken from ``o``.
    idle, start : Out(1)
        No sequence runs; a command is taken this cycle.
    w_frac : Out(w_frac_bits)
        The running sequence's weight scale.
    """

    def __init__(self, params: RnnParams):
        self.params = p = checked(params)
        entry_addr = ceil_log2(p.max_entries)
        ports = {
            "cmd_i": In(stream.Signature(bits.layout(cmd_fields(p)))),
            "x_i": In(stream.Signature(unsigned(p.tile_cols * STATE_BITS))),
            "prog_rd": In(ReadPort.Signature(addr_width=entry_addr, shape=entry_layout(p))),
            "x_wr": In(
                WritePort.Signature(
                    addr_width=ceil_log2(2 * p.batch * p.max_x_blocks),
                    shape=unsigned(p.tile_cols * STATE_BITS),
                )
            ),
            "o": Out(stream.Signature(beat_layout(p))),
            "written": In(1),
            "busy": In(1),
            "idle": Out(1),
            "start": Out(1),
            "w_frac": Out(p.w_frac_bits),
        }
        if p.weight_source == "stream":
            ports["w_i"] = In(stream.Signature(unsigned(p.tile_bits)))
        super().__init__(ports)

    def elaborate(self, platform):
        p = self.params
        m = Module()
        nb = p.batch
        on_chip = p.weight_source == "memory"
        en = self.o.ready  # the pipeline moves: a valid beat issues
        x_wr = self.x_wr
        steps = Signal(p.step_bits)
        x_blocks = Signal(p.max_x_blocks.bit_length())
        row_blocks = Signal(p.max_row_blocks.bit_length())
        count_bits = p.step_bits + (p.max_row_blocks * nb).bit_length() + 1
        t, pc, b = Signal(p.step_bits), Signal(range(p.max_entries)), Signal(range(nb))
        done, cur_base, prev_base = (Signal(count_bits, name=n) for n in ("done", "cur", "prev"))
        x_step = Signal(p.step_bits + 1)
        x_col, x_b = Signal(range(max(p.max_x_blocks, 2))), Signal(range(nb))
        running, draining = Signal(), Signal()
        m.d.comb += self.idle.eq(~running & ~draining)

        cmd = self.cmd_i.payload
        m.d.comb += [self.cmd_i.ready.eq(self.idle), self.start.eq(self.cmd_i.valid & self.idle)]
        with m.If(self.start):
            m.d.sync += [
                steps.eq(cmd.steps),
                x_blocks.eq(cmd.x_blocks),
                row_blocks.eq(cmd.row_blocks),
                self.w_frac.eq(cmd.w_frac),
                running.eq(1),
            ]
            m.d.sync += [s.eq(0) for s in (t, pc, b, done, cur_base, prev_base, x_step, x_col, x_b)]

        # x: at most one step ahead of the dispatcher
        x_take = Signal()
        m.d.comb += [
            x_take.eq(running & (x_step < steps) & (x_step <= t + 1)),
            self.x_i.ready.eq(x_take),
            x_wr.addr.eq(x_step[0] * (nb * p.max_x_blocks) + x_b * p.max_x_blocks + x_col),
            x_wr.data.eq(self.x_i.payload),
        ]
        with m.If(self.x_i.valid & x_take):
            m.d.comb += x_wr.en.eq(1)
            with m.If(x_col == x_blocks - 1):
                m.d.sync += x_col.eq(0)
                with m.If(x_b == nb - 1):
                    m.d.sync += [x_b.eq(0), x_step.eq(x_step + 1)]
                with m.Else():
                    m.d.sync += x_b.eq(x_b + 1)
            with m.Else():
                m.d.sync += x_col.eq(x_col + 1)

        # issue
        entry = self.prog_rd.data
        m.d.comb += self.prog_rd.addr.eq(pc)
        threshold = Signal(count_bits + 1)
        m.d.comb += threshold.eq(prev_base + (entry.need + 1) * nb)
        x_ok = (entry.src == 1) | (x_step > t)
        dep_ok = ~entry.wait | (t == 0) | (done >= threshold)
        issue = Signal()
        m.d.comb += issue.eq(self.o.valid & en)
        if on_chip:
            m.d.comb += self.o.valid.eq(running & x_ok & dep_ok)
        else:
            # A new entry (batch element 0) takes its tile from w_i; the others reuse it.
            w_ok = (b != 0) | self.w_i.valid
            m.d.comb += [
                self.o.valid.eq(running & x_ok & dep_ok & w_ok),
                self.w_i.ready.eq(issue & (b == 0)),
            ]
        with m.If(issue):
            with m.If(b == nb - 1):
                m.d.sync += b.eq(0)
                with m.If(entry.end):
                    m.d.sync += [
                        pc.eq(0),
                        t.eq(t + 1),
                        prev_base.eq(cur_base),
                        cur_base.eq(cur_base + row_blocks * nb),
                    ]
                    with m.If(t + 1 == steps):
                        m.d.sync += [running.eq(0), draining.eq(1)]
                with m.Else():
                    m.d.sync += pc.eq(pc + 1)
            with m.Else():
                m.d.sync += b.eq(b + 1)
        with m.If(self.written):
            m.d.sync += done.eq(done + 1)
        # end of sequence: every result written and taken
        with m.If(draining & (done == cur_base) & ~self.busy):
            m.d.sync += draining.eq(0)

        self._beat(m, entry, t, b, pc)
        return m

    def _beat(self, m, entry, t, b, pc):
        """The beat of the program ``entry`` for batch element ``b`` at step ``t``: where its
        results go, and the addresses of its operand and weight words."""
        p, tc, nb = self.params, self.params.tile_cols, self.params.batch
        beat = self.o.payload
        slice_count = p.h_word // tc
        h_prev = ~t[0]  # buffer parity of step t - 1
        h_word_of_col = (entry.col * tc) // p.h_word if p.h_word > tc else entry.col
        m.d.comb += [
            beat.tag.row.eq(entry.row),
            beat.tag.b.eq(b),
            beat.tag.par.eq(t[0]),
            beat.tag.step0.eq(t == 0),
            beat.first.eq(entry.first),
            beat.last.eq(entry.last),
            beat.src.eq(entry.src),
            beat.zero.eq((entry.src == 1) & (t == 0)),
            beat.x_addr.eq(t[0] * (nb * p.max_x_blocks) + b * p.max_x_blocks + entry.col),
            beat.h_addr.eq(h_prev * (nb * p.h_words) + b * p.h_words + h_word_of_col),
        ]
        if slice_count > 1:
            m.d.comb += beat.slice.eq(entry.col % slice_count)
        if p.weight_source == "memory":
            m.d.comb += beat.w_addr.eq(pc)
        else:
            m.d.comb += beat.weights.eq(self.w_i.payload)
