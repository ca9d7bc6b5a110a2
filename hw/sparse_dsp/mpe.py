"""``sparse-mpe``: sparse DSP chains beside an activation buffer. Golden model:
:func:`tandem.host.sparse_dsp.mpe_golden`; streams: :func:`tandem.mappings.nm.mpe_streams`.

A request is a configuration word (``cfg_i``), the activations (``act_i``) and the weight stream
(``w_i``). The activations go into two buffers (even and odd tokens) of ``word_bytes``-wide words,
so one read gives a cascade segment's whole span of activations for two tokens; every stage's
sparse MUX then picks, at its own window base plus the weight's index, the activation it needs.
Steps run (pass, step, slot, token pair), token pair innermost: a weight beat is held for all
token pairs (weight-stationary, matrix-matrix mode) and taken with the last one.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from tandem.host.sparse_dsp import MODE_MM, SparseMpeParams, mpe_config_fields

from .chain import ChainCore, ResultSerializer, index_bits

__all__ = ["SparseMpe", "mpe_config_layout"]


def mpe_config_layout(params: SparseMpeParams) -> data.StructLayout:
    """The engine's configuration word (fields of :func:`mpe_config_fields`)."""
    return data.StructLayout({name: unsigned(width) for name, width in mpe_config_fields(params)})


class SparseMpe(wiring.Component):
    """Matrix engine of ``chains`` sparse DSP chains, matrix-vector and matrix-matrix modes.

    Attributes
    ----------
    cfg_i : In(stream.Signature(mpe_config_layout))
        Starts a request; taken only when the engine is idle.
    act_i : In(stream.Signature(ArrayLayout(signed(8), act_bytes)))
        ``k_words * word_bytes`` activations per token, token by token.
    w_i : In(stream.Signature(ArrayLayout(ArrayLayout(slot, stages), chains)))
        One beat per step: ``w0``, ``w1`` (int8) and ``idx`` of every stage of every chain.
    o : Out(stream.Signature(signed(acc_bits)))
        Results, in the order of :func:`tandem.host.sparse_dsp.mpe_golden`.
    """

    def __init__(self, params: SparseMpeParams):
        if not isinstance(params, SparseMpeParams):
            raise TypeError(f"params must be a SparseMpeParams, not {params!r}")
        self.params = params
        self.LATENCY = params.stages + 5
        slot = data.StructLayout(
            {"w0": signed(8), "w1": signed(8), "idx": unsigned(params.index_bits)}
        )
        super().__init__(
            {
                "cfg_i": In(stream.Signature(mpe_config_layout(params))),
                "act_i": In(stream.Signature(data.ArrayLayout(signed(8), params.act_bytes))),
                "w_i": In(
                    stream.Signature(
                        data.ArrayLayout(data.ArrayLayout(slot, params.stages), params.chains)
                    )
                ),
                "o": Out(stream.Signature(signed(params.acc_bits))),
            }
        )

    def elaborate(self, platform):
        p = self.params
        word = p.word_bytes
        word_log2 = word.bit_length() - 1
        m = Module()
        cfg = Signal(mpe_config_layout(p), init={"m_log2": 1, "n": 1})
        depth = p.words_per_token * p.pairs
        addr_bits = index_bits(depth)
        mems = []
        for k in range(2):
            mem = Memory(shape=unsigned(8 * word), depth=depth, init=[])
            m.submodules[f"act_buffer{k}"] = mem
            mems.append(mem)
        writes = [mem.write_port(granularity=8) for mem in mems]
        reads = [mem.read_port(domain="sync") for mem in mems]

        cores = []
        for c in range(p.chains):
            core = ChainCore(p.chain, acc_slots=p.pairs, window=word, shared_window=True)
            m.submodules[f"chain{c}"] = core
            cores.append(core)
        m.submodules.out = out = ResultSerializer(p.chain, p.chains)
        wiring.connect(m, wiring.flipped(self.o), out.o)

        en = Signal()
        capture = cores[0].tap_valid & cores[0].tap_last
        m.d.comb += [
            en.eq(~(capture & out.busy)),
            out.capture.eq(en & capture),
            out.seg_log2.eq(cfg.seg_log2),
        ]

        chunks = word // p.act_bytes
        chunk, load_word, token, token_base, last_token, take_act = self._activation_load(
            m, cfg, writes, addr_bits
        )

        # --- step counters
        pass_ = Signal(16)
        step = Signal(16)
        slot_n = Signal(index_bits(p.max_m + 1))
        q = Signal(index_bits(p.pairs))
        q_base = Signal(addr_bits + 1)
        issue = Signal()
        m.d.comb += self.w_i.ready.eq(0)

        # Span of this step: groups step*L .. step*L + L - 1, i.e. bytes step * L * M onwards.
        offset = Signal(16 + 3 + 7)
        m.d.comb += offset.eq(step << (cfg.seg_log2 + 1 + cfg.m_log2))
        span_word = offset >> word_log2
        within = offset[:word_log2] if word_log2 else Const(0, 1)
        for rp in reads:
            m.d.comb += [rp.addr.eq(q_base + span_word), rp.en.eq(en)]

        front_valid = self._front_stage(
            m, cfg, cores, reads, out, en, issue, (step, slot_n, q), within
        )

        busy = front_valid | out.busy
        for core in cores:
            busy = busy | core.busy
        with m.FSM(name="request"):
            with m.State("IDLE"):
                m.d.comb += self.cfg_i.ready.eq(1)
                with m.If(self.cfg_i.valid):
                    m.d.sync += [
                        cfg.eq(self.cfg_i.payload),
                        chunk.eq(0),
                        load_word.eq(0),
                        token.eq(0),
                        token_base.eq(0),
                    ]
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += self.act_i.ready.eq(1)
                with m.If(take_act):
                    m.d.sync += chunk.eq(chunk + 1)
                    with m.If(chunk == chunks - 1):
                        m.d.sync += [chunk.eq(0), load_word.eq(load_word + 1)]
                        with m.If(load_word == cfg.k_words - 1):
                            m.d.sync += [load_word.eq(0), token.eq(token + 1)]
                            with m.If(token[0]):
                                m.d.sync += token_base.eq(token_base + cfg.k_words)
                            with m.If(token == last_token):
                                m.d.sync += [
                                    pass_.eq(0),
                                    step.eq(0),
                                    slot_n.eq(0),
                                    q.eq(0),
                                    q_base.eq(0),
                                ]
                                m.next = "RUN"
            with m.State("RUN"):
                last_pair = q == cfg.pairs - 1
                m.d.comb += [
                    self.w_i.ready.eq(en & last_pair),
                    issue.eq(en & self.w_i.valid),
                ]
                with m.If(issue):
                    with m.If(last_pair):
                        m.d.sync += [q.eq(0), q_base.eq(0), slot_n.eq(slot_n + 1)]
                        with m.If(slot_n == cfg.n - 1):
                            m.d.sync += [slot_n.eq(0), step.eq(step + 1)]
                            with m.If(step == cfg.row_steps - 1):
                                m.d.sync += [step.eq(0), pass_.eq(pass_ + 1)]
                                with m.If(pass_ == cfg.passes - 1):
                                    m.next = "DRAIN"
                    with m.Else():
                        m.d.sync += [q.eq(q + 1), q_base.eq(q_base + cfg.k_words)]
            with m.State("DRAIN"):
                with m.If(~busy):
                    m.next = "IDLE"
        return m

    def _activation_load(self, m, cfg, writes, addr_bits):
        """The activation buffers' write ports: token t goes to buffer t % 2 at words
        (t // 2) * k_words onwards, a chunk of ``act_bytes`` a beat. Returns the load's
        counters (chunk, word, token, the token pair's base), the last token and the take."""
        p = self.params
        word = p.word_bytes
        chunks = word // p.act_bytes
        chunk = Signal(index_bits(chunks))
        load_word = Signal(16)
        token = Signal(index_bits(p.max_batch))
        token_base = Signal(addr_bits + 1)
        last_token = Signal(index_bits(p.max_batch))
        m.d.comb += last_token.eq(Mux(cfg.mode == MODE_MM, (cfg.pairs << 1) - 1, 0))
        take_act = Signal()
        m.d.comb += take_act.eq(self.act_i.valid & self.act_i.ready)
        lane_mask = Signal(word)
        m.d.comb += lane_mask.eq(Const((1 << p.act_bytes) - 1, word) << (chunk * p.act_bytes))
        for k, wp in enumerate(writes):
            m.d.comb += [
                wp.addr.eq(token_base + load_word),
                wp.data.eq(Cat(*([self.act_i.payload.as_value()] * chunks))),
                wp.en.eq(Mux(take_act & (token[0] == k), lane_mask, 0)),
            ]
        return chunk, load_word, token, token_base, last_token, take_act

    def _front_stage(self, m, cfg, cores, reads, out, en, issue, counters, within):
        """The front stage (the weight beat, flags and window bases, registered beside the
        buffer read) and the chains' inputs from it; ``counters`` are the step, the slot and
        the token pair of the beat issued. Returns the front stage's valid."""
        p = self.params
        s, word = p.stages, p.word_bytes
        step, slot_n, q = counters
        front_valid, front_first, front_last = Signal(), Signal(), Signal()
        front_q = Signal(index_bits(p.pairs))
        front_w = Signal(self.w_i.payload.shape())
        front_base = Signal(data.ArrayLayout(unsigned(index_bits(word)), s))
        segment_mask = Signal(3)
        m.d.comb += segment_mask.eq((Const(2, 3) << cfg.seg_log2) - 1)
        with m.If(en):
            m.d.sync += [
                front_valid.eq(issue),
                front_first.eq((step == 0) & (slot_n == 0)),
                front_last.eq((step == cfg.row_steps - 1) & (slot_n == cfg.n - 1)),
                front_q.eq(q),
                front_w.eq(self.w_i.payload),
            ]
            for j in range(s):
                m.d.sync += front_base[j].eq(within + ((j & segment_mask) << cfg.m_log2))
        for c, core in enumerate(cores):
            m.d.comb += [
                core.en.eq(en),
                core.cfg.mode.eq(cfg.mode),
                core.cfg.m_log2.eq(cfg.m_log2),
                core.cfg.seg_log2.eq(cfg.seg_log2),
                core.valid.eq(front_valid),
                core.first.eq(front_first),
                core.last.eq(front_last),
                core.q.eq(front_q),
                core.win0.eq(reads[0].data),
                core.win1.eq(reads[1].data),
                core.base.eq(front_base),
                out.res[c].eq(core.res),
            ]
            for j in range(s):
                m.d.comb += [
                    core.w0[j].eq(front_w[c][j].w0),
                    core.w1[j].eq(front_w[c][j].w1),
                    core.idx[j].eq(front_w[c][j].idx),
                ]
        return front_valid
