"""Registrations of the designs that ship with tandem: one entry per design, every fact of it.

Importing this module registers them (:func:`tandem.design_record.register`); :mod:`tandem.registry`
does so on its first lookup. This module imports :mod:`tandem.design_record`, never
:mod:`tandem.registry`, so the two form no import cycle.
"""

from tandem.host.common.arith import AdderTreeParams, MacParams, adder_tree_golden, mac_golden
from tandem.host.common.exp2 import Exp2Params, exp2_golden
from tandem.host.common.reciprocal import ReciprocalParams, reciprocal_golden
from tandem.host.hpu import HpuParams, hpu_golden
from tandem.host.hpu.card import HpuCardParams, hpu_card_golden
from tandem.host.rnn import RnnParams, rnn_golden
from tandem.host.sparse_dsp import (
    SparseDspChainParams,
    SparseMpeParams,
    chain_golden,
    mpe_golden,
)
from tandem.host.spmm import (
    SparseEngineParams,
    SystolicParams,
    sparse_engine_golden,
    systolic_golden,
)
from tandem.hw.common.adder_tree import AdderTree
from tandem.hw.common.exp2 import Exp2
from tandem.hw.common.mac import Mac
from tandem.hw.common.reciprocal import Reciprocal
from tandem.hw.hpu.card import HpuCard
from tandem.hw.hpu.engine import Hpu
from tandem.hw.rnn.engine import Rnn
from tandem.hw.sparse_dsp.chain import SparseDspChain
from tandem.hw.sparse_dsp.mpe import SparseMpe
from tandem.hw.spmm.sparse_engine import SparseEngine
from tandem.hw.spmm.systolic import Systolic

from .design_record import Design, SweepBenchmark, Tool, register

__all__ = ["HPU_SERVER", "NM_PACKER", "RNN_MAPPER", "SPMM_MAPPER", "STREAM_SERVER"]

# The mappers and packers; designs that share one name the same record.
SPMM_MAPPER = Tool(
    "map",
    "spmm",
    "tandem.mappings.spmm.cli",
    "tile a GCN adjacency for the systolic + sparse engines",
)
RNN_MAPPER = Tool(
    "map", "rnn", "tandem.mappings.rnn.cli", "tile program and dispatch schedule of an LSTM/GRU"
)
NM_PACKER = Tool(
    "pack", "nm", "tandem.mappings.nm.cli", "pack an int8 matrix into N:M value and index streams"
)

HPU_SERVER = "tandem.sim.cosim.hpu_server"
# The card on its shared HBM model, routing host memory accesses to the owning engine.
CARD_SERVER = "tandem.sim.cosim.card_server"
# Serves any design with stream ports; the host encodes every beat.
STREAM_SERVER = "tandem.sim.cosim.stream_server"


# `hpu`'s proof parameters (see its registration), shared by `hpu-card`.
_HPU_PROVE_PARAMS = {
    "lanes": 16,
    "mem_data_bits": 128,
    "kv_bits": 8,
    "head_dim": 32,
    "gqa_group": 1,
    "max_seq_len": 64,
    "max_outstanding": 2,
    "max_burst_beats": 2,
    "addr_bits": 16,
    "q_bits": 8,
    "score_int_bits": 4,
    "score_frac_bits": 4,
    "prob_frac_bits": 8,
    "weight_bits": 10,
    "weight_frac_bits": 8,
    "out_bits": 8,
    "out_frac_bits": 0,
}


def _per_cycle(figures: dict) -> float:
    """Stream transfers per clock cycle, from a line-rate test's figures."""
    return figures["transfers"] / figures["cycles"]


register(
    Design(
        name="exp2",
        summary="2**x for x <= 0 in fixed point (softmax core): table + linear interpolation",
        params=Exp2Params,
        generator=Exp2,
        golden=exp2_golden,
        testbench="tandem.sim.common.exp2_tb",
        docs="docs/fixed_point.md",
        sweep=SweepBenchmark(
            "corner_cases_at_line_rate", "results/cycle", lambda p, f: _per_cycle(f)
        ),
    )
)

register(
    Design(
        name="reciprocal",
        summary="1/x for positive fixed-point x: seed table + Newton-Raphson, saturating",
        params=ReciprocalParams,
        generator=Reciprocal,
        golden=reciprocal_golden,
        testbench="tandem.sim.common.reciprocal_tb",
        docs="docs/fixed_point.md",
        sweep=SweepBenchmark(
            "corner_cases_at_line_rate", "results/cycle", lambda p, f: _per_cycle(f)
        ),
    )
)

register(
    Design(
        name="adder-tree",
        summary="pipelined exact sum of n signed words, one register per level",
        params=AdderTreeParams,
        generator=AdderTree,
        golden=adder_tree_golden,
        testbench="tandem.sim.common.adder_tree_tb",
        docs="docs/fixed_point.md",
        sweep=SweepBenchmark("line_rate", "inputs/cycle", lambda p, f: _per_cycle(f) * p.n_inputs),
    )
)

register(
    Design(
        name="mac",
        summary="signed multiply-accumulate shaped like one DSP48E2 (27x18, 48-bit P)",
        params=MacParams,
        generator=Mac,
        golden=mac_golden,
        testbench="tandem.sim.common.mac_tb",
        docs="docs/fixed_point.md",
        expected_dsps=lambda p: 1,
    )
)

register(
    Design(
        name="hpu",
        summary="decode attention over an HBM-resident KV cache: online softmax at line rate",
        params=HpuParams,
        generator=Hpu,
        golden=hpu_golden,
        testbench="tandem.sim.hpu.hpu_tb",
        board="u55c",  # the HPU paper's card
        docs="docs/hpu.md",
        cosim_server=HPU_SERVER,
        device="tandem.host.hpu.device:HpuDevice",
        # KV bytes read per cycle while streaming a long sequence.
        sweep=SweepBenchmark(
            "line_rate_streaming",
            "KV bytes/cycle",
            lambda p, f: f["stream_efficiency"] * p.read_ports * p.mem_data_bits / 8,
        ),
        quick_test="line_rate_streaming",
        # The configuration hpu_stream_efficiency.py builds in `tandem bench --quick`.
        quick_overrides={"max_seq_len": 512},
        # Induction does not close, and a BMC of the defaults reaches no result (docs/formal.md):
        # the same gateware with 16 lanes, one query, 64 tokens and narrow number formats
        # raises its first result in cycle 60 (`tandem prove hpu --only result_o` reports it);
        # each output is checked 3 cycles past its first.
        prove_params=_HPU_PROVE_PARAMS,
        prove_depth=63,
        prove_mode="bmc",
        prove_margin=3,
    )
)

register(
    Design(
        name="hpu-card",
        summary="several hpu engines behind one descriptor stream: requests routed by KV "
        "address to the engine owning its HBM channels, results merged per request",
        params=HpuCardParams,
        generator=HpuCard,
        # Per engine, its requests' results in descriptor order (docs/hpu.md, "The card").
        golden=hpu_card_golden,
        testbench="tandem.sim.hpu.card_tb",
        cosim_server=CARD_SERVER,
        device="tandem.host.hpu.device:HpuDevice",
        board="u55c",  # the HPU paper's card
        docs="docs/hpu.md",
        # The engine's proof parameters (see hpu), two engines over a 64 KiB memory of four
        # channels (each engine's K spans in one, its V spans in the next). The dispatcher
        # holds each header for its header_beats cycles and the result slice adds one: the
        # card's first result comes in cycle 65 (`tandem prove hpu-card --only result_o`).
        prove_params={
            **_HPU_PROVE_PARAMS,
            "engines": 2,
            "channels": 4,
            "memory_bytes": 1 << 16,
        },
        prove_depth=68,
        prove_mode="bmc",
        prove_margin=3,
    )
)

register(
    Design(
        name="systolic",
        summary="output-stationary R x C systolic array for dense GCN adjacency tiles",
        params=SystolicParams,
        generator=Systolic,
        golden=systolic_golden,
        testbench="tandem.sim.spmm.systolic_tb",
        docs="docs/spmm.md",
        tools=(SPMM_MAPPER,),
        cosim_server=STREAM_SERVER,
        device="tandem.host.spmm.device:SpmmDevice",
        # The array does every MAC of a tile, dense; the test records how many.
        sweep=SweepBenchmark("line_rate", "MACs/cycle", lambda p, f: f["macs"] / f["cycles"]),
        expected_dsps=lambda p: p.rows * p.cols,
    )
)

register(
    Design(
        name="sparse-engine",
        summary="streaming COO SpMM engine: gathered feature rows, row sums without stalls",
        params=SparseEngineParams,
        generator=SparseEngine,
        golden=sparse_engine_golden,
        testbench="tandem.sim.spmm.sparse_engine_tb",
        docs="docs/spmm.md",
        tools=(SPMM_MAPPER,),
        cosim_server=STREAM_SERVER,
        device="tandem.host.spmm.device:SpmmDevice",
    )
)

register(
    Design(
        name="sparse-dsp-chain",
        summary="N:M sparse DSP48E2 chain: sparse MUX, two int8 MACs per DSP, reduction nodes",
        params=SparseDspChainParams,
        generator=SparseDspChain,
        golden=chain_golden,
        testbench="tandem.sim.sparse_dsp.chain_tb",
        board="u280",  # FlightLLM's card
        docs="docs/sparse_dsp.md",
        tools=(NM_PACKER,),
        # Both lanes of every stage: useful MACs per cycle.
        sweep=SweepBenchmark(
            "line_rate", "MACs/cycle", lambda p, f: f["dsp_utilization"] * 2 * p.stages
        ),
        expected_dsps=lambda p: p.stages,
    )
)

register(
    Design(
        name="sparse-mpe",
        summary="N:M sparse matrix engine: DSP chains, activation buffer, GEMV and small GEMM",
        params=SparseMpeParams,
        generator=SparseMpe,
        golden=mpe_golden,
        testbench="tandem.sim.sparse_dsp.mpe_tb",
        board="u280",  # FlightLLM's card
        docs="docs/sparse_dsp.md",
        tools=(NM_PACKER,),
        cosim_server=STREAM_SERVER,
        device="tandem.host.sparse_dsp.device:SparseMpeDevice",
        expected_dsps=lambda p: p.chains * p.stages,
        # Induction does not close (docs/formal.md); BMC of the defaults with yices reaches the
        # first result (cycle 23) and 17 cycles past it in half a minute.
        prove_depth=40,
        prove_mode="bmc",
    )
)

register(
    Design(
        name="rnn",
        summary="LSTM/GRU tile dispatcher (SHARP-style): W.x of the next step and U.h tiles "
        "overlap the wait for h on one MAC array",
        params=RnnParams,
        generator=Rnn,
        golden=rnn_golden,
        testbench="tandem.sim.rnn.rnn_tb",
        docs="docs/rnn.md",
        tools=(RNN_MAPPER,),
        cosim_server=STREAM_SERVER,
        device="tandem.host.rnn.device:RnnDevice",
        sweep=SweepBenchmark(
            "utilization",
            "MACs/cycle",
            lambda p, f: f["overlapped_utilization"] * p.tile_rows * p.tile_cols,
        ),
        quick_test="utilization",
    )
)
