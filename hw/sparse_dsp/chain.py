"""Configurable sparse DSP chain. Parameters and golden model: :mod:`tandem.host.sparse_dsp`.

:class:`ChainCore` is the datapath both designs share: per stage a sparse MUX, a DSP48E2-shaped
packed multiply (27-bit ``hi * 2**18 + lo`` times 8-bit ``b``, M register) and a 48-bit P
register on the cascade; at every DSP-group end a reduction node that separates the two int8
lanes (overflow-adjusted window, see the host module) and accumulates them per row.
:class:`ResultSerializer` sends the results of the active reduction nodes one per beat.
:class:`SparseDspChain` is the ``sparse-dsp-chain`` top: configuration word, beats, results.

Timing, in pipeline steps (every register moves on one enable): a beat enters at step 0; its
operands are registered at step 1; stage ``j`` sees them ``j`` steps later (the systolic skew a
DSP cascade needs, because ``P_j = P_{j-1} + M_j`` takes one register per stage), multiplies at
step ``2 + j`` and its P register holds the cascade sum at step ``3 + j``. The node at stage
``e`` accumulates at step ``3 + e`` and its result is delayed to step ``stages + 3`` so that all
nodes of a row present their results together.
"""

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from tandem.host.sparse_dsp import LANE_SHIFT, LOW_FLOOR, SparseDspChainParams

__all__ = ["ChainCore", "ResultSerializer", "SparseDspChain", "chain_config_layout", "index_bits"]


def chain_config_layout(max_m: int) -> data.StructLayout:
    """The chain's configuration word (same field order as ``chain_config_fields``)."""
    return data.StructLayout(
        {"mode": 1, "m_log2": unsigned(max_m.bit_length().bit_length()), "seg_log2": 2}
    )


def index_bits(count: int) -> int:
    """Bits of an index into ``count`` items (at least one)."""
    return max(1, (count - 1).bit_length())


def result_layout(acc_bits: int) -> data.StructLayout:
    return data.StructLayout({"lo": signed(acc_bits), "hi": signed(acc_bits)})


class ChainCore(wiring.Component):
    """The sparse DSP chain datapath, moving on ``en``.

    Parameters
    ----------
    params : SparseDspChainParams
    acc_slots : int
        Accumulators per lane and node (token pairs of the matrix-matrix mode).
    window : int
        Entries of an activation window.
    shared_window : bool
        One window for every stage (the engine's buffer word), each stage picking at its own
        ``base`` plus its index; otherwise one window per stage and ``base`` is zero.

    Attributes
    ----------
    en : In(1)
        Pipeline enable.
    cfg : In(chain_config_layout)
    valid, first, last, q : In
        The beat at step 0: it opens (``first``) or closes (``last``) a row of slot ``q``.
    w0, w1, idx : In(ArrayLayout(..., stages))
        Two int8 values and the sparse index of every stage.
    win0, win1 : In
        Activation windows (matrix-matrix: the two tokens; matrix-vector: ``win0`` only).
    res : Out(ArrayLayout(result_layout, stages // 2))
        Every node's result at step ``stages + 3`` (meaningful on ``tap_last``).
    tap_valid, tap_last : Out(1)
    busy : Out(1)
        A beat is in flight.
    """

    def __init__(self, params, *, acc_slots: int = 1, window: int, shared_window: bool = False):
        self.params = params
        self.acc_slots = acc_slots
        self.window = window
        self.shared_window = shared_window
        s = params.stages
        win = data.ArrayLayout(signed(8), window)
        win_port = win if shared_window else data.ArrayLayout(win, s)
        ports = {
            "en": In(1),
            "cfg": In(chain_config_layout(params.max_m)),
            "valid": In(1),
            "first": In(1),
            "last": In(1),
            "q": In(index_bits(acc_slots)),
            "w0": In(data.ArrayLayout(signed(8), s)),
            "w1": In(data.ArrayLayout(signed(8), s)),
            "idx": In(data.ArrayLayout(unsigned(params.index_bits), s)),
            "win0": In(win_port),
            "win1": In(win_port),
            "res": Out(data.ArrayLayout(result_layout(params.acc_bits), s // 2)),
            "tap_valid": Out(1),
            "tap_last": Out(1),
            "busy": Out(1),
        }
        if shared_window:
            ports["base"] = In(data.ArrayLayout(unsigned(index_bits(window)), s))
        super().__init__(ports)

    def elaborate(self, platform):
        p = self.params
        s = p.stages
        m = Module()
        en, cfg = self.en, self.cfg
        flag_layout = data.StructLayout(
            {"valid": 1, "first": 1, "last": 1, "q": index_bits(self.acc_slots)}
        )
        depth = s + 3
        flags = [Signal(flag_layout, name="flags0")]
        m.d.comb += [
            flags[0].valid.eq(self.valid),
            flags[0].first.eq(self.first),
            flags[0].last.eq(self.last),
            flags[0].q.eq(self.q),
        ]
        for t in range(1, depth + 1):
            reg = Signal(flag_layout, name=f"flags{t}")
            with m.If(en):
                m.d.sync += reg.eq(flags[t - 1])
            flags.append(reg)
        busy = Const(0)
        for reg in flags[1:]:
            busy = busy | reg.valid
        m.d.comb += [
            self.busy.eq(busy),
            self.tap_valid.eq(flags[depth].valid),
            self.tap_last.eq(flags[depth].last),
        ]

        mask = Signal(p.index_bits)
        m.d.comb += mask.eq((Const(1, p.index_bits + 1) << cfg.m_log2) - 1)
        mm = cfg.mode
        p_prev = None
        for j in range(s):
            index = self.idx[j] & mask
            if self.shared_window:
                address = self.base[j] + index
                sel0, sel1 = self.win0[address], self.win1[address]
            else:
                sel0, sel1 = self.win0[j][index], self.win1[j][index]
            # The sparse MUX output is the shared B operand in matrix-vector mode and the two
            # packed lanes in matrix-matrix mode (see tandem.host.sparse_dsp).
            hi = Signal(signed(8), name=f"hi_s{j}")
            lo = Signal(signed(8), name=f"lo_s{j}")
            b = Signal(signed(8), name=f"b_s{j}")
            with m.If(en):
                m.d.sync += [
                    hi.eq(Mux(mm, sel1, self.w1[j])),
                    lo.eq(Mux(mm, sel0, self.w0[j])),
                    b.eq(Mux(mm, self.w0[j], sel0)),
                ]
            for k in range(j):  # systolic skew
                nxt = [Signal(signed(8), name=f"{v.name}_d{k}") for v in (hi, lo, b)]
                with m.If(en):
                    m.d.sync += [nxt[0].eq(hi), nxt[1].eq(lo), nxt[2].eq(b)]
                hi, lo, b = nxt
            packed = Signal(signed(27), name=f"ad_s{j}")  # the DSP48E2 pre-adder output
            m.d.comb += packed.eq((hi << LANE_SHIFT) + lo)
            mreg = Signal(signed(35), name=f"m_s{j}")
            preg = Signal(signed(48), name=f"p_s{j}")
            with m.If(en):
                m.d.sync += mreg.eq(packed * b)
            if j == 0:
                cascade = Const(0, signed(48))
            elif j % 2:
                cascade = p_prev  # fixed cascade inside a DSP group
            else:
                # Configurable cascade between groups: broken where a segment starts.
                starts = Array(Const(int(j % (2 << seg) == 0)) for seg in range(4))
                cascade = Mux(starts[cfg.seg_log2], 0, p_prev)
            with m.If(en):
                m.d.sync += preg.eq(cascade + mreg)
            p_prev = preg
            if j % 2:
                self._reduction_node(m, j, preg, flags[3 + j], depth)
        return m

    def _reduction_node(self, m, e, preg, fl, depth):
        """Lane separation (overflow-adjusted) and per-row accumulation at stage ``e``."""
        p = self.params
        en = self.en
        mask18 = (1 << LANE_SHIFT) - 1
        shifted = Signal(LANE_SHIFT, name=f"lo_raw_n{e}")
        m.d.comb += shifted.eq((preg[:LANE_SHIFT] - LOW_FLOOR) & mask18)
        lo = Signal(signed(LANE_SHIFT + 1), name=f"lo_n{e}")
        m.d.comb += lo.eq(shifted + LOW_FLOOR)
        diff = Signal(signed(49), name=f"diff_n{e}")
        m.d.comb += diff.eq(preg - lo)
        hi = diff[LANE_SHIFT:48].as_signed()
        acc_lo = Array(
            Signal(signed(p.acc_bits), name=f"acc_lo_n{e}_q{q}") for q in range(self.acc_slots)
        )
        acc_hi = Array(
            Signal(signed(p.acc_bits), name=f"acc_hi_n{e}_q{q}") for q in range(self.acc_slots)
        )
        cur_lo = Signal(signed(p.acc_bits), name=f"cur_lo_n{e}")
        cur_hi = Signal(signed(p.acc_bits), name=f"cur_hi_n{e}")
        m.d.comb += [
            cur_lo.eq(Mux(fl.first, 0, acc_lo[fl.q]) + lo),
            cur_hi.eq(Mux(fl.first, 0, acc_hi[fl.q]) + hi),
        ]
        result = Signal(result_layout(p.acc_bits), name=f"res_n{e}")
        with m.If(en):
            with m.If(fl.valid):
                m.d.sync += [acc_lo[fl.q].eq(cur_lo), acc_hi[fl.q].eq(cur_hi)]
            m.d.sync += [result.lo.eq(cur_lo), result.hi.eq(cur_hi)]
        # Align every node's result to step ``depth`` (the last node needs no delay).
        for k in range(depth - (4 + e)):
            nxt = Signal(result_layout(p.acc_bits), name=f"res_n{e}_d{k}")
            with m.If(en):
                m.d.sync += nxt.eq(result)
            result = nxt
        m.d.comb += self.res[e // 2].eq(result)


class ResultSerializer(wiring.Component):
    """Holds the results of one row (all chains) and sends the active nodes' lanes one a beat.

    Order: chain, segment, low lane then high lane. ``capture`` loads the bank; it must only
    rise while ``busy`` is low.
    """

    def __init__(self, params, chains: int):
        self.params = params
        self.chains = chains
        s = params.stages
        res = data.ArrayLayout(result_layout(params.acc_bits), s // 2)
        super().__init__(
            {
                "res": In(data.ArrayLayout(res, chains)),
                "capture": In(1),
                "seg_log2": In(2),
                "busy": Out(1),
                "o": Out(stream.Signature(signed(params.acc_bits))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        bank = Signal(self.res.shape())
        full = Signal()
        chain = Signal(index_bits(self.chains))
        seg = Signal(index_bits(p.stages // 2))
        lane = Signal()
        segs_minus_1 = Signal(index_bits(p.stages // 2))
        m.d.comb += segs_minus_1.eq((Const(p.stages) >> (self.seg_log2 + 1)) - 1)
        node = Signal(index_bits(p.stages // 2))
        m.d.comb += node.eq(((seg + 1) << self.seg_log2) - 1)
        entry = bank[chain][node]
        m.d.comb += [
            self.busy.eq(full),
            self.o.valid.eq(full),
            self.o.payload.eq(Mux(lane, entry.hi, entry.lo)),
        ]
        with m.If(self.capture):
            m.d.sync += [bank.eq(self.res), full.eq(1), chain.eq(0), seg.eq(0), lane.eq(0)]
        with m.Elif(self.o.valid & self.o.ready):
            m.d.sync += lane.eq(~lane)
            with m.If(lane):
                with m.If(seg == segs_minus_1):
                    m.d.sync += seg.eq(0)
                    with m.If(chain == self.chains - 1):
                        m.d.sync += [chain.eq(0), full.eq(0)]
                    with m.Else():
                        m.d.sync += chain.eq(chain + 1)
                with m.Else():
                    m.d.sync += seg.eq(seg + 1)
        return m


class SparseDspChain(wiring.Component):
    """``sparse-dsp-chain``: one chain with its configuration register and result stream.

    Attributes
    ----------
    cfg_i : In(stream.Signature(chain_config_layout))
        A configuration word; taken only when no beat is in flight and every result has left,
        and it holds back ``i`` while it waits.
    i : In(stream.Signature(...))
        One beat: per stage ``w0``, ``w1``, ``idx``; per stage windows ``win0``, ``win1`` of
        ``max_m`` int8; ``last`` closes a row.
    o : Out(stream.Signature(signed(acc_bits)))
        Per row, for each cascade segment, the low then the high lane.
    """

    def __init__(self, params: SparseDspChainParams):
        if not isinstance(params, SparseDspChainParams):
            raise TypeError(f"params must be a SparseDspChainParams, not {params!r}")
        self.params = params
        self.LATENCY = params.stages + 4
        s = params.stages
        slot = data.StructLayout(
            {"w0": signed(8), "w1": signed(8), "idx": unsigned(params.index_bits)}
        )
        win = data.ArrayLayout(data.ArrayLayout(signed(8), params.max_m), s)
        beat = data.StructLayout(
            {"slots": data.ArrayLayout(slot, s), "win0": win, "win1": win, "last": 1}
        )
        super().__init__(
            {
                "cfg_i": In(stream.Signature(chain_config_layout(params.max_m))),
                "i": In(stream.Signature(beat)),
                "o": Out(stream.Signature(signed(params.acc_bits))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        m = Module()
        m.submodules.core = core = ChainCore(p, window=p.max_m)
        m.submodules.out = out = ResultSerializer(p, 1)
        cfg = Signal(chain_config_layout(p.max_m), init={"m_log2": 1})
        restart = Signal(init=1)  # the next beat opens a row
        en = Signal()
        capture = core.tap_valid & core.tap_last
        m.d.comb += en.eq(~(capture & out.busy))
        idle = ~core.busy & ~out.busy
        m.d.comb += self.cfg_i.ready.eq(idle)
        with m.If(self.cfg_i.valid & self.cfg_i.ready):
            m.d.sync += cfg.eq(self.cfg_i.payload)
        take = Signal()
        m.d.comb += [
            self.i.ready.eq(en & ~self.cfg_i.valid),
            take.eq(self.i.valid & self.i.ready),
        ]
        with m.If(take):
            m.d.sync += restart.eq(self.i.payload.last)
        beat = self.i.payload
        m.d.comb += [
            core.en.eq(en),
            core.cfg.eq(cfg),
            core.valid.eq(take),
            core.first.eq(restart),
            core.last.eq(beat.last),
            core.q.eq(0),
            core.win0.eq(beat.win0),
            core.win1.eq(beat.win1),
            out.res[0].eq(core.res),
            out.capture.eq(en & capture),
            out.seg_log2.eq(cfg.seg_log2),
        ]
        for j in range(p.stages):
            m.d.comb += [
                core.w0[j].eq(beat.slots[j].w0),
                core.w1[j].eq(beat.slots[j].w1),
                core.idx[j].eq(beat.slots[j].idx),
            ]
        wiring.connect(m, wiring.flipped(self.o), out.o)
        return m
