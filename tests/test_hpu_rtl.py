"""RTL regression of ``hpu``: the cocotb module ``tandem.sim.hpu.hpu_tb`` on generated Verilog.

Each configuration runs every test of the module (single token, odd lengths, max_seq_len,
append then read, appends back to back, back-to-back descriptors, partial slices merged,
reset mid-request and mid-descriptor, random latency and backpressure, line-rate streaming,
latency hiding, the memory model's own latency) in Verilator and Icarus. The configurations
are small, to keep build and run within about two minutes per simulator on two cores;
together they cover:

* ``gqa_group`` 1, 2 and 3 (every value 1..8 runs in the Amaranth simulator, tests/test_hpu.py);
* ``head_dim`` 32 (rows with padding), 64 and 128;
* 64-, 128- and 256-bit memory ports, so 1, 2 and 4 beats per 64-byte block;
* int8 and int16 queries; int8 and int16 K and V (``kv_bits``);
* the scaling products in DSP48E2s and in fabric (``scaling_multipliers``);
* ``max_outstanding`` 2 and 4 (the address channel must wait) and the default 16, and
  bursts of 4, 8 and 16 beats;
* one read port shared by K and V (the narrow configuration) and two.
"""

import pytest

from .rtl import assert_regression_passes

CONFIGS = {
    "hd32-g2": {
        "head_dim": 32,
        "lanes": 16,
        "mem_data_bits": 128,
        "kv_bits": 8,
        "gqa_group": 2,
        "max_seq_len": 256,
    },
    "hd64-g3-q16-narrow-1port": {
        "head_dim": 64,
        "lanes": 8,
        "mem_data_bits": 64,
        "kv_bits": 8,
        "gqa_group": 3,
        "q_bits": 16,
        "max_seq_len": 128,
        "max_outstanding": 2,
        "max_burst_beats": 4,
        "read_ports": 1,
    },
    "hd128-g1-wide": {
        "head_dim": 128,
        "lanes": 32,
        "mem_data_bits": 256,
        "kv_bits": 8,
        "gqa_group": 1,
        "max_seq_len": 96,
        "max_outstanding": 4,
        "max_burst_beats": 8,
    },
    # int8 queries and K, G 4: two pairs of queries share the K side's multipliers; the
    # output's multipliers are shared (each result beat in 4 parts), as by default; the
    # scaling products in DSP48E2s.
    "hd64-g4-q8-out4": {
        "head_dim": 64,
        "lanes": 16,
        "mem_data_bits": 128,
        "kv_bits": 8,
        "gqa_group": 4,
        "q_bits": 8,
        "out_beat_cycles": 4,
        "scaling_multipliers": "dsp",
        "max_seq_len": 96,
    },
    # A multiplier per output lane (each result beat in one part; the default is 4), and
    # the scaling products in DSP48E2s (scaling_multipliers; the default is fabric).
    "hd64-g3-kv16-dsp": {
        "head_dim": 64,
        "lanes": 8,
        "mem_data_bits": 128,
        "gqa_group": 3,
        "kv_bits": 16,
        "out_beat_cycles": 1,
        "scaling_multipliers": "dsp",
        "max_seq_len": 96,
    },
}


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_rtl_regression(config, simulator, seed, sim_cache, tmp_path):
    result = assert_regression_passes(
        "hpu", simulator, seed, sim_cache, tmp_path, **CONFIGS[config]
    )
    figures = {t.name: t.figures for t in result.tests}
    # The cocotb test asserts the bound; this catches a run that silently recorded nothing.
    assert figures["line_rate_streaming"]["stream_efficiency"] >= 0.9, figures
