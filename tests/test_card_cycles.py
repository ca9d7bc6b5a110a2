"""The card cycle model (:func:`tandem.host.hpu.card.card_call_cycles`), checked against the
engine's model it is built from and the dispatcher's rules, without a simulator."""

import numpy as np
import pytest
from tandem.host.hpu import HpuRequest
from tandem.host.hpu.card import HpuCardParams, card_call_cycles, route
from tandem.host.hpu.cycles import FILL_CYCLES, GAP_CYCLES, drain_cycles, request_beats
from tandem.sim.hpu.hbm import HbmParams

from .test_hpu_card import CARD

P = HpuCardParams(**CARD)
HBM = HbmParams.of_board(P.geometry, P.beat_bytes)


def request(base, length, append=False):
    p = P.engine
    q = np.zeros((p.gqa_group, p.head_dim), dtype=np.int64)
    r = HpuRequest(1, base, length, q, np.ones(p.gqa_group))
    if append:
        r.new_k = r.new_v = np.zeros(p.head_dim, dtype=np.int64)
        r.new_k_scale = r.new_v_scale = 1.0
    return r


def alone(length):
    """The model's cycles of one request alone, written out from the engine's model."""
    d, reads, o = request_beats(P.engine, [length], append=False)
    rate = HBM.port_beats_per_cycle(1)  # split layout: K and V each stream from a channel
    busy = max(int(d[0]), reads[0] / rate, int(o[0]) * P.out_beat_cycles)
    fill = FILL_CYCLES + HBM.latency - 2
    drain = drain_cycles(P.engine, [length], append=False)
    return P.header_beats + busy + GAP_CYCLES + fill + drain


def test_one_request_is_the_engine_model_behind_the_dispatcher():
    got = card_call_cycles(P, [request(0, 60)], HBM)
    assert got.total == pytest.approx(alone(60))
    assert got.engines[1] == 0
    assert got.read_beats_per_cycle == (pytest.approx(HBM.port_beats_per_cycle(1)),)


def test_engines_overlap():
    base1 = P.engine_bases[1]
    assert route(P, [0, base1]).tolist() == [0, 1]
    both = card_call_cycles(P, [request(0, 60), request(base1, 60)], HBM)
    # the second waits only for the first's descriptor on desc_i
    d = request_beats(P.engine, [60], append=False).descriptor[0]
    assert both.total == pytest.approx(alone(60) + P.header_beats + int(d))


def test_head_of_line_blocking_at_the_descriptor_slots():
    """A fourth request for a busy engine waits for a slot, and the next engine's with it."""
    base1 = P.engine_bases[1]
    three = [request(0, 60) for _ in range(3)]
    free = card_call_cycles(P, [*three, request(base1, 8)], HBM)
    blocked = card_call_cycles(P, [*three, request(0, 60), request(base1, 8)], HBM)
    assert blocked.engines[1] > free.engines[1] + 0.5 * (alone(60) - FILL_CYCLES)


def test_slower_channels_make_slower_steps():
    slow = HbmParams.of_board(P.geometry, P.beat_bytes, sustained_fraction=0.5, refresh_cycles=0)
    requests = [request(0, 60), request(P.engine_bases[1], 60)]
    assert card_call_cycles(P, requests, slow).total > card_call_cycles(P, requests, HBM).total


def test_no_requests():
    assert card_call_cycles(P, [], HBM).total == 0


def test_the_fit_latency_is_the_cosimulation_memorys():
    """FILL and GAP were fitted on cocotbext-axi's read model: the card model's extra latency
    is counted from that model's latency, not from a copy of it."""
    from tandem.host.hpu.cycles import FIT_LATENCY_CYCLES
    from tandem.sim.hpu.memory import MODEL_LATENCY

    assert FIT_LATENCY_CYCLES == MODEL_LATENCY
