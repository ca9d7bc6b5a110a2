"""The HBM pseudo-channel timing model (:mod:`tandem.sim.hpu.hbm`), without a simulator."""

import pytest
from tandem.mappings.hpu.channels import ChannelGeometry
from tandem.sim.hpu.hbm import HbmModel, HbmParams

GEOMETRY = ChannelGeometry.scaled(128 << 10, 4)


def params(**overrides):
    return HbmParams.of_board(GEOMETRY, 16, **overrides)


def stream(model, ports, cycles, start=0):
    """Every port asks for a beat every cycle at its address; beats each got."""
    got = [0] * len(ports)
    for t in range(start, start + cycles):
        for i, ok in enumerate(model.grant(t, ports)):
            got[i] += ok
    return got


def test_of_board_rates():
    p = params()
    assert p.peak_bytes_per_cycle == pytest.approx(460 / 32 * 1e3 / 300 / 64 * 16)
    assert p.refresh_interval == 1170 and p.refresh_cycles == 105
    # refresh and the rest multiply to the board's sustained fraction
    assert (1 - p.refresh_share) * p.stream_efficiency == pytest.approx(0.91)
    assert p.sustained_bytes_per_cycle == pytest.approx(p.peak_bytes_per_cycle * 0.91)


def test_one_port_converges_to_sustained():
    p = params()
    model = HbmModel(p)
    port = model.port([0])
    cycles = 20 * p.refresh_interval
    (beats,) = stream(model, [(port, 0)], cycles)
    rate = beats * p.beat_bytes / cycles
    assert rate == pytest.approx(p.sustained_bytes_per_cycle, rel=0.005)


def test_fast_channel_caps_at_one_beat():
    p = params(peak_bytes_per_cycle=64.0)
    model = HbmModel(p)
    (beats,) = stream(model, [(model.port([0]), 0)], 1000)
    assert beats == 1000 - p.refresh_cycles  # one a cycle outside the refresh at cycle 0


def test_two_ports_share_a_channel():
    p = params()
    model = HbmModel(p)
    a, b = model.port([1]), model.port([1])
    cycles = 10 * p.refresh_interval
    got = stream(model, [(a, 1 << 15), (b, (1 << 15) + 4096)], cycles)
    total = sum(got) * p.beat_bytes / cycles
    assert total == pytest.approx(p.sustained_bytes_per_cycle, rel=0.01)
    assert abs(got[0] - got[1]) <= 1
    assert got[0] / cycles == pytest.approx(p.port_beats_per_cycle(2), rel=0.01)


def test_ports_on_different_channels_do_not_share():
    p = params()
    model = HbmModel(p)
    a, b = model.port([0]), model.port([1])
    cycles = 10 * p.refresh_interval
    got = stream(model, [(a, 0), (b, 1 << 15)], cycles)
    for beats in got:
        assert beats / cycles == pytest.approx(p.port_beats_per_cycle(1), rel=0.01)


def test_refresh_gaps_at_the_interval():
    p = params(peak_bytes_per_cycle=64.0)  # one beat a cycle outside refresh
    model = HbmModel(p)
    port = model.port([0])
    idle = [t for t in range(3 * p.refresh_interval) if not model.grant(t, [(port, 0)])[0]]
    starts = [t for t in idle if t - 1 not in idle]
    assert starts[:3] == [0, p.refresh_interval, 2 * p.refresh_interval]
    assert len(idle) == 3 * p.refresh_cycles
    # channel 2 refreshes half an interval later
    assert model.refreshing(2, p.refresh_interval // 2)
    assert not model.refreshing(2, 0)


def test_lateral_reads_pay_the_penalty():
    p = params()
    model = HbmModel(p)
    home, away = model.port([0]), model.port([1])
    cycles = 10 * p.refresh_interval
    alone = HbmModel(p)
    (own,) = stream(alone, [(alone.port([0]), 0)], cycles)
    (lateral,) = stream(model, [(away, 0)], cycles)
    assert lateral / own == pytest.approx(p.lateral_factor, rel=0.01)
    assert home == 0


@pytest.mark.parametrize(
    "field, value",
    [
        ("sustained_fraction", 1.2),
        ("sustained_fraction", 0),
        ("lateral_factor", 0.0),
        ("lateral_factor", 1.5),
        ("peak_bytes_per_cycle", -1.0),
        ("latency", 0),
        ("refresh_cycles", 2000),
        ("channels", 0),
        ("bucket_beats", 0.5),
    ],
)
def test_bad_parameters(field, value):
    with pytest.raises(ValueError, match=repr(value)):
        params(**{field: value})


def test_refresh_longer_than_the_sustained_fraction_allows():
    with pytest.raises(ValueError, match=r"0\.99"):
        params(sustained_fraction=0.99, refresh_cycles=200)


def test_unknown_channel():
    with pytest.raises(ValueError, match="7"):
        HbmModel(params()).port([7])
