"""Performance model of FPGA-only decode: a compiled decode program on one card.

Batch 1, the way FlightLLM measures decode: every decode step streams every weight from HBM
once and reads the KV cache of its context. The model walks the decode program
(:func:`~tandem.mappings.llm.program.decode_program`) instruction by instruction:

- ``MATMUL``: the matrix's rows are split over ``mpe_engines`` sparse-mpe engines, one per
  HBM pseudo-channel; each engine's cycles are the engine's own cycle formula
  (:func:`~tandem.mappings.nm.engine.work_cycles`, exact against the RTL) for its rows in
  matrix-vector mode, or the time its pseudo-channel takes to deliver its weight beats where
  that is longer.
- ``ATTEND``: the KV heads are split over the HPU engines that fit; each engine's cycles are
  :func:`~tandem.host.system.perf.hpu_call_cycles` (the golden cycle model with the measured
  stream efficiency) for its heads at the context.
- Element-wise ops: ``elementwise_lanes`` elements a cycle (an assumed vector unit; the
  runner does them on the host today).

The ops of a step run one after another (batch 1: each needs the previous one's output);
``overlap`` hides each matrix op's fill and drain behind the next op's weight stream (the
runner's "keep the engine busy across ops"). A pseudo-channel delivers the board's
``sustained_fraction`` of its peak (``constraints/boards``). Bandwidth use = the bytes the
decode needs (the weights' values, their indices only where the pattern is sparse, and the KV)
/ (step time x HBM peak): the figure FlightLLM reports as 65.9 % on U280. The index stream the
engine also reads for a dense pattern is overhead, counted in ``stream_use`` only.
"""

from dataclasses import dataclass

from tandem.host.sparse_dsp.golden import SparseMpeParams
from tandem.mappings.nm import NMPattern
from tandem.mappings.nm.engine import work_cycles

from .isa import Op
from .program import CardShape, decode_program

__all__ = ["FpgaCard", "decode_step"]


@dataclass(frozen=True)
class FpgaCard:
    """A card of sparse-mpe and HPU engines on one board.

    ``mpe_clock_mhz`` and ``hpu_clock_mhz``: the engines' clocks (their timing estimates, or
    the board's default); ``hbm_gb_s`` and ``channels``: the board's HBM; ``sustained_fraction``
    the share of a pseudo-channel's peak it delivers to sequential reads.
    """

    mpe: SparseMpeParams
    mpe_engines: int
    mpe_clock_mhz: float
    hpu_engines: int
    hpu_clock_mhz: float
    hbm_gb_s: float
    channels: int
    sustained_fraction: float
    elementwise_lanes: int = 64

    @property
    def channel_gb_s(self) -> float:
        """What one pseudo-channel delivers to an engine streaming from it."""
        return self.hbm_gb_s * self.sustained_fraction / self.channels

    @property
    def mpe_beat_bytes(self) -> float:
        """Weight bytes an engine takes a cycle: two int8 and an index per stage."""
        p = self.mpe
        return p.chains * p.stages * (16 + p.index_bits) / 8


def _matrix_cycles(card: FpgaCard, rows: int, cols: int, pattern: NMPattern) -> dict:
    """One engine's share of a matrix-vector op: cycles, weight bytes streamed and needed (the
    indices only where the pattern is sparse), and fill + drain."""
    p = card.mpe
    sparse = pattern.n < pattern.m
    rows_e = -(-rows // card.mpe_engines)
    units = -(-rows_e // 2)  # row pairs (the compiler prunes pairs to share their columns)
    groups = -(-cols // pattern.m)
    compute, beats = work_cycles(p, units, groups, pattern.n, 1)
    stream = beats * card.mpe_beat_bytes / (card.channel_gb_s * 1e9) * card.mpe_clock_mhz * 1e6
    fill = compute - beats  # results, stages and the pipeline's own fill
    return {
        "cycles": max(compute, stream + fill),
        "fill": fill,
        "bytes": rows * groups * pattern.n * (1 + p.index_bits / 16),
        "needed_bytes": rows * groups * pattern.n * (1 + p.index_bits / 16 * sparse),
    }


def decode_step(
    model_shape: CardShape,
    card: FpgaCard,
    pattern: NMPattern,
    context: int,
    hpu_params,
    *,
    overlap: bool = True,
) -> dict:
    """Seconds, bytes and bandwidth use of one decode step at ``context`` tokens."""
    from tandem.host.system.perf import hpu_call_cycles

    s = model_shape
    seconds = {"MATMUL": 0.0, "ATTEND": 0.0, "ELEMENTWISE": 0.0}
    weight_bytes = needed_weight_bytes = 0.0
    hidden_fill = 0.0
    previous_matmul, last_rows = False, s.dim
    heads_per_engine = -(-s.n_kv_heads // card.hpu_engines)
    attend_cycles = hpu_call_cycles(hpu_params, [context] * heads_per_engine)
    kv_bytes = s.n_layers * s.n_kv_heads * hpu_params.layout.region_bytes(context)
    for inst in decode_program(s):
        if inst.op == Op.MATMUL:
            blocks = max(1, inst.count)  # column blocks with scales of their own: a pass each
            m = _matrix_cycles(card, inst.rows, inst.cols // blocks, pattern)
            cycles = blocks * m["cycles"]
            m["bytes"] *= blocks
            m["needed_bytes"] *= blocks
            # Each pass after the first overlaps the one before, as consecutive ops do.
            hidden = (blocks - 1 + int(previous_matmul)) * m["fill"] if overlap else 0
            cycles -= hidden
            hidden_fill += hidden / (card.mpe_clock_mhz * 1e6)
            seconds["MATMUL"] += cycles / (card.mpe_clock_mhz * 1e6)
            weight_bytes += m["bytes"]
            needed_weight_bytes += m["needed_bytes"]
            previous_matmul, last_rows = True, inst.rows
            continue
        if inst.op != Op.DEQUANTIZE:  # dequantization follows the results as they drain
            previous_matmul = False
        if inst.op == Op.ATTEND:
            seconds["ATTEND"] += attend_cycles / (card.hpu_clock_mhz * 1e6)
        elif inst.op in (Op.RMSNORM, Op.QUANTIZE, Op.DEQUANTIZE, Op.ROPE, Op.SILU_MUL, Op.ADD):
            width = {
                Op.DEQUANTIZE: last_rows,
                Op.SILU_MUL: s.hidden,
                Op.ROPE: inst.rows * inst.cols,
            }.get(inst.op, s.dim)
            seconds["ELEMENTWISE"] += -(-width // card.elementwise_lanes) / (
                card.mpe_clock_mhz * 1e6
            )
    step = sum(seconds.values())
    peak_bytes = step * card.hbm_gb_s * 1e9
    return {
        "context": context,
        "step_s": step,
        "tokens_per_s": 1.0 / step,
        "seconds": seconds,
        "weight_bytes": weight_bytes,
        "needed_weight_bytes": needed_weight_bytes,
        "kv_bytes": kv_bytes,
        "bandwidth_use": (needed_weight_bytes + kv_bytes) / peak_bytes,
        "stream_use": (weight_bytes + kv_bytes) / peak_bytes,
        "hidden_fill_s": hidden_fill,
    }
