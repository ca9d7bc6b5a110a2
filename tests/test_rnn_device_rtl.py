"""``backend="rtl"`` of RnnDevice: the same LSTM and GRU scripts on golden and RTL.

Each script runs on both backends and must give bit-identical outputs and the same saturation
counts (an LSTM cell driven past the narrow cell state's range, with the engine's sticky flag
checked beat by beat); RTL cycles are simulated and must equal the rnn scheduler's, which is
cycle-exact for both cells. The engine
configurations are those of ``tests/test_rnn_rtl.py`` (``x8-h12-8x4-b2-stream`` and
``gru-x12-h20-8x4-b2``), so one pytest run builds each Verilator model once for both files (the
``sim_cache`` fixture). Every script runs through the native harness, Verilator under cocotb and
Icarus.
"""

import numpy as np
import pytest
import torch
from tandem.host.rnn import RnnParams
from tandem.host.rnn.device import RnnDevice

from .rtl import ROUTES, need, rtl_device, run_script

RNN = RnnParams(
    max_input=8,
    max_hidden=12,
    tile_rows=8,
    tile_cols=4,
    weight_source="stream",
    cell_bits=18,
    cell_frac=14,
)
#: tests/test_rnn_rtl.py's ``gru-x12-h20-8x4-b2``: the same build.
GRU = RnnParams(cell="gru", max_input=12, max_hidden=20, tile_rows=8, tile_cols=4)


def rnn_script(dev):
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    out = []
    for x_size, h_size in ((6, 10), (8, 12)):  # a second model: the program is loaded again
        dev.load(torch.nn.LSTM(x_size, h_size).state_dict())
        for steps, batch in ((4, 3), (2, 2)):  # batch 3: two commands, the second padded
            x = dev.quantize(rng.standard_normal((steps, batch, x_size)))
            out.append((*dev.run(x), dev.last_cycles, dev.last_saturations))
    # An nn.LSTMCell whose unit 0 saturates the narrow cell state (+-8) after about 8 steps.
    cell = torch.nn.LSTMCell(8, 12)
    with torch.no_grad():
        cell.bias_ih[[0, 12, 24]] = 6.0
    dev.load(cell.state_dict())
    x = dev.quantize(rng.standard_normal((12, 3, 8)))
    out.append((*dev.run(x), dev.last_cycles, dev.last_saturations))
    assert dev.last_saturations.get("c", 0) > 0, dev.last_saturations
    return out


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ROUTES)
def test_rnn_rtl_bit_identical(simulator, sim_cache, tmp_path):
    need(simulator)
    golden, got = run_script(
        rnn_script, RnnDevice(RNN), rtl_device(RnnDevice, simulator, sim_cache, tmp_path, RNN)
    )
    for (h, c, modelled, sat), (h2, c2, simulated, sat2) in zip(golden, got, strict=True):
        assert np.array_equal(h, h2) and np.array_equal(c, c2)
        assert sat == sat2  # the RTL's sticky flag was checked against these counts
        print(f"rnn {simulator}: model {modelled}, RTL {simulated} cycles")
        assert simulated == modelled > 0  # the scheduler's model is cycle-exact


def gru_script(dev):
    torch.manual_seed(4)
    rng = np.random.default_rng(4)
    out = []
    # A small GRU, then the engine's largest (a second program, every memory row used).
    for x_size, h_size, steps, batch in ((5, 7, 4, 3), (12, 20, 2, 2)):
        dev.load(torch.nn.GRU(x_size, h_size).state_dict())
        x = dev.quantize(2 * rng.standard_normal((steps, batch, x_size)))
        h, c = dev.run(x)  # batch 3: two commands, the second padded
        assert c is None
        out.append((h, dev.last_cycles))
    return out


@pytest.mark.rtl
@pytest.mark.parametrize("simulator", ROUTES)
def test_gru_rtl_bit_identical(simulator, sim_cache, tmp_path):
    need(simulator)
    golden, got = run_script(
        gru_script, RnnDevice(GRU), rtl_device(RnnDevice, simulator, sim_cache, tmp_path, GRU)
    )
    for (h, modelled), (h2, simulated) in zip(golden, got, strict=True):
        assert np.array_equal(h, h2)
        print(f"rnn gru {simulator}: model {modelled}, RTL {simulated} cycles")
        assert simulated == modelled > 0  # the same scheduler model, cycle-exact for GRU too
