"""The suite's scripts: :class:`Benchmark` and :data:`BENCHMARKS`, in the order they run."""

from dataclasses import dataclass

from .figures import Provenance


@dataclass(frozen=True)
class Benchmark:
    """One script of the suite.

    Attributes
    ----------
    name
        Suite name (``tandem bench --only NAME``).
    script
        File name in ``benchmarks/``.
    designs
        The designs it measures.
    what
        One line: what it measures.
    quick_args, full_args
        Arguments for ``--quick`` and for the full run (``--figures PATH`` is added).
    provenance
        How its figures are obtained, unless a figure says otherwise (empty: not stated).
    system
        Its figures are of the whole system (performance model, host runtime), not of one
        design: the results page puts them in its system table.
    """

    name: str
    script: str
    designs: tuple[str, ...]
    what: str
    quick_args: tuple[str, ...] = ()
    full_args: tuple[str, ...] = ()
    provenance: str = ""
    system: bool = False


#: The suite, in the order it runs (cheap analytic ones first).
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "fixed-point",
        "fixed_point_error.py",
        ("exp2", "reciprocal"),
        "exp2 and reciprocal units: error in LSB against float over every input",
        provenance=Provenance.GOLDEN_EVERY_INPUT,
    ),
    Benchmark(
        "hpu-error",
        "hpu_error.py",
        ("hpu",),
        "HPU golden (bit-exact with the RTL) against torch float attention on SmolLM2 K/V",
        provenance=Provenance.GOLDEN_REAL_DATA,
    ),
    Benchmark(
        "hpu-accuracy-dense",
        "hpu_accuracy_dense.py",
        ("hpu",),
        "HPU error at every decode step, layer and head of SmolLM2 as the runtime runs it",
        quick_args=("--tokens", "64"),
        provenance=Provenance.GOLDEN_REAL_DATA,
    ),
    Benchmark(
        "decode-accuracy",
        "decode_accuracy.py",
        ("hpu",),
        "SmolLM2-135M decode, attention on golden HPU cards, against torch float32",
        quick_args=("--tokens", "8"),
        provenance=Provenance.GOLDEN_REAL_DATA,
    ),
    Benchmark(
        "decode-cycles",
        "decode_cycles.py",
        ("hpu",),
        "golden HPU backend's cycle model against RTL cycles over ten batches, and its fit",
        quick_args=("--configs", "hd32-g2"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "decode-speed",
        "decode_speed.py",
        ("hpu",),
        "SmolLM2-135M decode tokens/s, golden HPU attention against torch attention",
        quick_args=("--new-tokens", "8", "--repeat", "1"),
        provenance=Provenance.WALL_TIME,
        system=True,
    ),
    Benchmark(
        "shared-machine",
        "shared_machine.py",
        ("hpu", "sparse-mpe"),
        "compile, decode and the compiled program alone and beside a second CPU-bound process: "
        "wall and CPU time, loaded over quiet",
        quick_args=("--quick",),
        provenance=Provenance.WALL_TIME,
        system=True,
    ),
    Benchmark(
        "hpu-efficiency",
        "hpu_stream_efficiency.py",
        ("hpu",),
        "HPU engine in RTL: KV stream efficiency against memory latency and length",
        quick_args=("--lengths", "64", "512", "--latencies", "2", "100"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "hpu-card-rtl",
        "hpu_card_rtl.py",
        ("hpu-card",),
        "HPU card in RTL on the HBM model (N = 2, 4): KV bandwidth over the touched channels' "
        "sustained peak, card cycle model against RTL",
        quick_args=("--engines", "2", "4", "--tokens", "512", "1024"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "sparse-dsp",
        "sparse_dsp_performance.py",
        ("sparse-dsp-chain", "sparse-mpe"),
        "N:M sparse DSP chain: DSP utilization and speed-up over dense, in RTL",
        quick_args=("--rows", "128", "--cols", "256"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "spmm-cost-model",
        "spmm_cost_model.py",
        ("systolic", "sparse-engine"),
        "SpMM engines: cost-model cycles against RTL cycles across tile densities",
        quick_args=("--densities", "0.01,0.2,1.0"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "spmm-mapping",
        "spmm_mapping.py",
        ("systolic", "sparse-engine"),
        "density-aware SpMM mapping: makespan against three baselines on real graphs",
        quick_args=("--quick",),
        provenance=Provenance.MODELLED,
    ),
    Benchmark(
        "spmm-mapper-speed",
        "spmm_mapper_speed.py",
        ("systolic", "sparse-engine"),
        "SpMM mapper: non-zeros per second and peak memory on power-law graphs",
        quick_args=("--sizes", "2000000"),
        full_args=("--sizes", "10000000", "100000000"),
        provenance=Provenance.WALL_TIME,
    ),
    Benchmark(
        "rnn-activation",
        "rnn_activation_error.py",
        ("rnn",),
        "RNN sigmoid/tanh tables: error in LSB against float",
        provenance=Provenance.GOLDEN_EVERY_INPUT,
    ),
    Benchmark(
        "rnn-accuracy",
        "rnn_accuracy.py",
        ("rnn",),
        "quantized LSTM (golden, bit-exact with the RTL) against torch float",
        quick_args=("--steps", "20", "--batch", "2"),
        provenance=Provenance.GOLDEN_SYNTHETIC_DATA,
    ),
    Benchmark(
        "rnn-long-sequence",
        "rnn_long_sequence.py",
        ("rnn",),
        "trained LSTMs (silero VAD, a character model) over 1250 steps against torch float: "
        "error and saturated values, int16 cell state against the default",
        quick_args=("--steps", "600", "--train-steps", "200"),
        provenance=Provenance.GOLDEN_REAL_DATA,
    ),
    Benchmark(
        "rnn-utilization",
        "rnn_utilization.py",
        ("rnn",),
        "RNN tile dispatcher in RTL: array utilization against a naive schedule",
        quick_args=("--hidden", "128", "--max-steps", "8"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "accel-backends",
        "accel_backends.py",
        ("sparse-mpe", "rnn", "systolic", "sparse-engine"),
        "device API, golden vs RTL backend: model/RTL cycles and the golden speed-up per call",
        quick_args=("--quick", "--simulator", "icarus"),
        provenance=Provenance.RTL,
    ),
    Benchmark(
        "perf-paper",
        "perf_paper.py",
        ("hpu",),
        "system model: GPU + HPU cards against GPU alone, against the HPU paper",
        provenance=Provenance.MODELLED,
        system=True,
    ),
    Benchmark(
        "perf-crosscheck",
        "perf_crosscheck.py",
        ("hpu",),
        "system model's HPU cycles against the decode runtime's, SmolLM2 shapes",
        provenance=Provenance.MODELLED,
        system=True,
    ),
    Benchmark(
        "hpu-channel-balance",
        "hpu_channel_balance.py",
        ("hpu",),
        "HBM pseudo-channels one decode call loads, contiguous against channel-aware placement, "
        "SmolLM2 and Llama-2-7B (batch 48, 4 cards) shapes",
        quick_args=("--smollm2-batch", "64", "--llama-batch", "16", "--input", "256"),
        provenance=Provenance.COUNTERS,
    ),
    Benchmark(
        "resources",
        "resources.py",
        (),
        "LUT, FF, DSP, BRAM of every design's default configuration (yosys)",
        quick_args=("--quick",),
        provenance=Provenance.SYNTHESIS,
    ),
    Benchmark(
        "hpu-synthesis",
        "hpu_resources_data.py",
        ("hpu", "hpu-card"),
        "stored yosys syntheses of HPU engines and cards that describe the present gateware: "
        "LUT, FF, DSP, clock estimate, engines that fit (constraints/measured/hpu_resources.yaml)",
        provenance=Provenance.SYNTHESIS,
    ),
    Benchmark(
        "pnr",
        "pnr.py",
        (),
        "post-route Fmax and LUT4, FF, MULT18X18D, DP16KD shares on the ULX3S (nextpnr-ecp5)",
        quick_args=("--quick",),
        provenance=Provenance.PLACE_AND_ROUTE,
    ),
    Benchmark(
        "timing-calibration",
        "timing_calibration.py",
        (),
        "the timing estimate's Fmax error against nextpnr-ecp5, before and after fitting its "
        "routing terms (every design, several parameter sets)",
        quick_args=("--quick",),
        provenance=Provenance.PLACE_AND_ROUTE,
    ),
    Benchmark(
        "gpu-decode",
        "gpu_decode.py",
        (),
        "the GPU side of decode on a real GPU (PyTorch on CUDA): step time and share of the "
        "GPU's memory bandwidth, GPU alone and beside HPU cards (without CUDA: the stored "
        "measurement, constraints/measured/gpu_decode.yaml)",
        quick_args=("--quick",),
        provenance=Provenance.GPU,
        system=True,
    ),
    Benchmark(
        "sim-speed",
        "sim_speed.py",
        (),
        "simulated cycles per second on Verilator and Icarus, and golden-model speed-up",
        quick_args=("--quick",),
        provenance=Provenance.WALL_TIME,
    ),
    Benchmark(
        "native-speed",
        "native_speed.py",
        ("hpu", "rnn", "sparse-mpe", "systolic", "sparse-engine"),
        "RTL co-simulation: the native C++ harness against cocotb on the same workload",
        quick_args=("--quick",),
        provenance=Provenance.WALL_TIME,
    ),
)
