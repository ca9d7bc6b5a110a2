"""RTL regression of ``rnn``: the cocotb module ``tandem.sim.rnn.rnn_tb`` on generated Verilog.

Every test of the module runs in Verilator and Icarus: sequences of length 1 and 100 (Icarus,
about 150 simulated cycles per second on this design, runs the long sequence on the smallest
configuration and 20 steps on the others), random x gaps and output backpressure, reset in the
middle of a sequence and between sequences, and the overlapped and naive programs with their
cycle counts checked against the scheduler's prediction. The configurations cover H and X that
are not multiples of the tile (40 on 8x8, 33 on 16x4, 12 on 8x4), h slices narrower and wider
than a row block's units, batch 2 and 3, int8 and int16 weights, weights on chip and streamed
(``weight_source``), the GRU cell, and cell states of the default width (27 bits) and a
narrow one (18) that saturates: the engine's sticky saturation flag is checked on every output
against the golden model's counts.
"""

import pytest
from tandem.hw.rnn.design import RNN_DESIGN
from tandem.sim.runner import run_regression

CONFIGS = {
    "x24-h40-8x8-b2": {"max_input": 24, "max_hidden": 40, "tile_rows": 8, "tile_cols": 8},
    "x20-h33-16x4-b3-int8": {
        "max_input": 20,
        "max_hidden": 33,
        "tile_rows": 16,
        "tile_cols": 4,
        "batch": 3,
        "weight_bits": 8,
    },
    "gru-x12-h20-8x4-b2": {
        "cell": "gru",
        "max_input": 12,
        "max_hidden": 20,
        "tile_rows": 8,
        "tile_cols": 4,
    },
    # A cell state of the old range (+-8: 18 bits, 14 fraction bits), so that the saturation
    # test's driven unit saturates within the sequence and the sticky flag is seen rising.
    "x8-h12-8x4-b2-stream": {
        "max_input": 8,
        "max_hidden": 12,
        "tile_rows": 8,
        "tile_cols": 4,
        "weight_source": "stream",
        "cell_bits": 18,
        "cell_frac": 14,
    },
}
#: Icarus runs the 100-step sequence only on the smallest configuration.
ICARUS_LONG = {"x8-h12-8x4-b2-stream": 100}


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_rtl_regression(config, simulator, seed, sim_cache, tmp_path):
    params = RNN_DESIGN.params(**CONFIGS[config])
    long = 100 if simulator == "verilator" else ICARUS_LONG.get(config, 20)
    result = run_regression(
        RNN_DESIGN,
        params,
        simulator=simulator,
        seed=seed,
        cache_dir=sim_cache,
        run_dir=tmp_path,
        plusargs=(f"+rnn_long={long}", "+rnn_bench_steps=6"),
    )
    assert result.tests, f"no cocotb test ran; log {result.log_file}"
    assert result.passed, result.summary()
    figures = {t.name: t.figures for t in result.tests}
    util = figures["utilization"]
    # The cocotb test asserts equality; this catches a run that silently recorded nothing.
    assert util["overlapped_cycles"] == util["overlapped_predicted_cycles"], util
    assert util["naive_cycles"] >= util["overlapped_cycles"], util
    assert figures["lengths_1_and_long"][f"cycles_len{long}"] > 0
    if config.endswith("stream") or config.startswith("gru"):  # these must saturate
        assert figures["saturation_flag"]["raised"], figures["saturation_flag"]
