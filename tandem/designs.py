"""Registrations of the designs that ship with tandem: one entry per design."""

from tandem.host.common.arith import AdderTreeParams, MacParams, adder_tree_golden, mac_golden
from tandem.host.common.exp2 import Exp2Params, exp2_golden
from tandem.host.common.reciprocal import ReciprocalParams, reciprocal_golden
from tandem.host.hpu import HpuParams, hpu_golden
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
from tandem.hw.hpu.engine import Hpu
from tandem.hw.rnn.design import RNN_DESIGN  # noqa: F401  (registers `rnn` on import)
from tandem.hw.sparse_dsp.chain import SparseDspChain
from tandem.hw.sparse_dsp.mpe import SparseMpe
from tandem.hw.spmm.sparse_engine import SparseEngine
from tandem.hw.spmm.systolic import Systolic

from .registry import Design, register

register(
    Design(
        name="exp2",
        summary="2**x for x <= 0 in fixed point (softmax core): table + linear interpolation",
        params=Exp2Params,
        generator=Exp2,
        golden=exp2_golden,
        testbench="tandem.sim.common.exp2_tb",
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
    )
)
