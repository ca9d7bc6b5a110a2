"""Performance model (host/system/perf/, ``tandem perf decode``): formulas on hand-computed cases,
memory boundaries, the ping-pong schedule, JSON schema, CLI errors, the runtime cross-check."""

import json
from dataclasses import replace

import numpy as np
import pytest
import yaml
from tandem.host.hpu import HpuParams, HpuRequest, pack_descriptor
from tandem.host.system.perf import (
    ModelShape,
    StreamEfficiency,
    decode_projection,
    hpu_call_cycles,
    hpu_params_for_model,
    hpu_step_cycles,
    load_efficiency,
    load_model_shape,
    model_names,
    paper_comparison,
    pingpong_step,
    place_sequences,
    request_beats,
)

from tandem.boards import Gpu, load_board
from tandem.cli import main
from tandem.errors import UserError

GIB = 1 << 30

# A model small enough to compute by hand (see test_gpu_alone_by_hand).
TOY = ModelShape(
    name="toy",
    full_name="toy",
    layers=1,
    hidden=4,
    heads=2,
    kv_heads=1,
    head_dim=2,
    intermediate=8,
    vocab=16,
    tied_embeddings=True,
    dtype_bytes=2,
    max_context=64,
)
# 1 GB/s and 1 GFLOP/s: every kernel takes max(bytes, flops) nanoseconds.
SLOW = Gpu(
    name="slow",
    full_name="slow",
    memory_gib=1.0,
    memory_kind="test",
    memory_bandwidth_gb_s=1.0,
    fp16_dense_tflops=1e-3,
    bf16_dense_tflops=1e-3,
    pcie={"gen": 4, "lanes": 16, "bandwidth_gb_s": 31.5},
    tdp_w=100.0,
)


def table_efficiency(rows) -> StreamEfficiency:
    return StreamEfficiency(
        params=HpuParams().to_dict(), command="test", simulator="test", seed=0, source="test",
        batch=8, rows=tuple(rows),
    )  # fmt: skip


# --- model shapes --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "params"),
    [
        # Published parameter counts of the three models (sum of their checkpoints' tensors).
        ("smollm2-135m", 134_515_008),
        ("llama-2-7b", 6_738_415_616),
        ("llama-3-8b", 8_030_261_248),
    ],
)
def test_model_parameter_counts(name, params):
    m = load_model_shape(name)
    assert m.params == params
    assert m.weight_bytes == 2 * params


def test_models_shipped_and_gqa():
    assert {"llama-2-7b", "llama-3-8b", "smollm2-135m"} <= set(model_names())
    assert load_model_shape("llama-2-7b").gqa_group == 1
    assert load_model_shape("llama-3-8b").gqa_group == 4
    assert load_model_shape("smollm2-135m").gqa_group == 3
    # Llama-2-7B, fp16: 2 * 32 layers * 4096 * 2 bytes = 512 KiB of KV per token.
    assert load_model_shape("llama-2-7b").kv_bytes_per_token == 512 << 10


def test_unknown_model():
    with pytest.raises(UserError, match="did you mean 'llama-2-7b'"):
        load_model_shape("llama-2-7")


# --- HPU engine ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape", [dict(), dict(head_dim=128, gqa_group=1), dict(lanes=16, mem_data_bits=128, kv_bits=8)]
)
def test_request_beats_match_layout_and_descriptor(shape):
    p = HpuParams(**shape)
    for length in (1, 2, 31, 32, 33, 64, 100, 257):
        desc, reads, out = request_beats(p, [length])
        bursts = p.layout.read_bursts(
            0, length - 1, value=False, beat_bytes=p.beat_bytes, max_beats=p.max_burst_beats
        )
        assert reads[0] == sum(b.beats for b in bursts)
        request = HpuRequest(
            seq_id=1, base=0, length=length,
            q=np.zeros((p.gqa_group, p.head_dim), dtype=np.int64),
            score_scale=np.ones(p.gqa_group), new_k=np.zeros(p.head_dim, dtype=np.int64),
            new_k_scale=1.0, new_v=np.zeros(p.head_dim, dtype=np.int64), new_v_scale=1.0,
        )  # fmt: skip
        assert desc[0] == len(pack_descriptor(p, request)) // p.beat_bytes
        assert out[0] == p.gqa_group * p.row_beats


def test_efficiency_interpolation_and_fill():
    eff = table_efficiency(
        [
            {"latency": 2, "tokens": 1, "beats": 100, "alone": 0.4, "queued": 0.5, "fill": 10},
            {"latency": 2, "tokens": 2, "beats": 400, "alone": 0.8, "queued": 0.9, "fill": 20},
        ]
    )
    # Linear in log2(beats): 200 beats is halfway between 100 and 400.
    assert eff.efficiency(200, 2) == pytest.approx(0.6)
    assert eff.efficiency(200, 2, queued=True) == pytest.approx(0.7)
    assert eff.efficiency([10, 10_000], 2).tolist() == [0.4, 0.8]  # held at the ends
    assert eff.fill_cycles(2) == 15
    with pytest.raises(UserError, match="latency 7"):
        eff.efficiency(100, 7)


def test_measured_queue_streams_as_one_request():
    """The data file's evidence for counting a call as one request of all its beats."""
    eff = load_efficiency()
    # measured on the int16 SmolLM2 engine on 512-bit ports (what the card runs; 2 beats a
    # row), with its scaling products in DSP48E2s (the performance model's pick)
    card = HpuParams(
        max_seq_len=eff.params["max_seq_len"],
        lanes=32,
        mem_data_bits=512,
        scaling_multipliers="dsp",
    )
    assert eff.params == card.to_dict()
    rows = {(r["latency"], r["tokens"]): r for r in eff.rows}
    checked = 0
    for (latency, tokens), row in rows.items():
        longer = rows.get((latency, tokens * eff.batch))
        if longer is not None:
            assert row["queued"] == pytest.approx(longer["alone"], abs=2e-3), (latency, tokens)
            checked += 1
    assert checked >= 4
    # The figures docs/results.md gives: 2-cycle latency 0.998 / 0.9995, 100-cycle 0.912 / 0.9765
    # (64-byte beats: a page's scale block is one beat, so 1040 beats for 512 tokens where the
    # int8 engine's 32-byte beats make 1056; that engine measures 0.9135 / 0.9769).
    assert rows[(2, 512)]["alone"] == pytest.approx(0.998, abs=5e-4)
    assert rows[(2, 2048)]["alone"] == pytest.approx(0.9995, abs=5e-4)
    assert rows[(100, 512)]["alone"] == pytest.approx(0.912, abs=1e-3)
    assert rows[(100, 2048)]["alone"] == pytest.approx(0.9765, abs=5e-4)


def test_call_cycles_by_hand():
    p = HpuParams(kv_bits=8, lanes=32)  # head_dim 64, G 3, q int16: 2 beats a row
    eff = table_efficiency(
        [{"latency": 2, "tokens": 1, "beats": 10, "alone": 0.5, "queued": 0.5, "fill": 10}]
    )
    # 33 tokens with append: 32 rows read, one page: R = 2 + 32 * 2 = 66; D = 2 + 4 + 3 * 4 = 18;
    # O = 3 * 2 = 6, 4 cycles each (out_beat_cycles). Cycles = fill + max(R, D, 4 O)
    # + R * (1 / e - 1) = 10 + 66 + 66.
    assert hpu_call_cycles(p, [33], efficiency=eff) == 142
    # Length 2 (one row read): R = 2 + 2 = 4 < D = 18 < 4 O = 24; stalls of the call (70
    # beats) 70.
    assert p.out_beat_cycles == 4
    assert hpu_call_cycles(p, [33, 2], efficiency=eff) == 10 + 66 + 24 + 70
    assert hpu_call_cycles(p, [], efficiency=eff) == 0


def test_step_cycles_follow_runtime_calls():
    m = load_model_shape("smollm2-135m")
    p = hpu_params_for_model(m, 4096)
    eff = load_efficiency()
    contexts = [40, 50, 60]
    # Sub-batches [0, 1] and [2]; one call per (sub-batch, layer), Hkv requests per sequence.
    expected = m.layers * (
        hpu_call_cycles(p, [40, 40, 40, 50, 50, 50]) + hpu_call_cycles(p, [60, 60, 60])
    )
    assert hpu_step_cycles(m, p, contexts, efficiency=eff) == {"hpu0": pytest.approx(expected)}
    two = hpu_step_cycles(m, p, contexts, cards=2)
    assert set(two) == {"hpu0", "hpu1"}  # sequences 0, 2 on hpu0, 1 on hpu1
    assert two["hpu1"] == pytest.approx(m.layers * hpu_call_cycles(p, [50, 50, 50]))

    # The runtime fills the card with the most free memory: a long sequence on hpu0 sends the
    # next two to hpu1.
    def cards(capacities, n):
        return [[s.card for s in slices] for slices in place_sequences(p, capacities, n)]

    assert cards([1000, 10, 10, 10], 2) == [[0], [1], [1], [1]]
    assert cards([64] * 5, 2) == [[0], [1], [0], [1], [0]]
    # Longer than max_seq_len: split into whole slices, as the runtime does.
    assert cards([5000, 10], 2) == [[0, 1], [1]]


# --- ping-pong schedule --------------------------------------------------------------------
def test_pingpong_by_hand():
    # One sub-batch: nothing overlaps, L * chain.
    step, terms, exposed = pingpong_step(3, [(1.0, 0.5, 2.0, 0.5)], head=1.0)
    assert step == 3 * 4.0 + 1.0 and exposed == 0
    # GPU-bound (g = 5 > pd + h + pu = 3): the GPU works 2 * 5 per layer without a gap, then
    # the second sub-batch's last pd + h + pu = 3 trails.
    step, terms, exposed = pingpong_step(4, [(5.0, 1.0, 1.0, 1.0)] * 2)
    assert step == 4 * 10 + 3 and exposed == 3
    # Cards-bound (h = 5): the cards start after g + pd = 2 and work 2 * 5 per layer, then pu.
    step, terms, exposed = pingpong_step(4, [(1.0, 1.0, 5.0, 1.0)] * 2)
    assert step == 2 + 4 * 10 + 1
    # Chain-bound (g + pd + h + pu = 8 > 2 * max(g, h) = 6): the second sub-batch lags by
    # max(g, h) = 3.
    step, terms, exposed = pingpong_step(4, [(3.0, 1.0, 3.0, 1.0)] * 2)
    assert terms["dependency chain"] == 8 and step == 4 * 8 + 3
    # Vectorized over decode steps.
    step, _, _ = pingpong_step(4, [(np.array([5.0, 1.0]), 1.0, np.array([1.0, 5.0]), 1.0)] * 2)
    assert step.tolist() == [43, 43]


# --- projections ---------------------------------------------------------------------------
def test_gpu_alone_by_hand():
    # TOY: Pl = 4*4 + 2*4*2 + 4*4 + 3*4*8 = 144 weights; activations 3*4 + 4 + 4 + 4 + 24 = 48
    # elements per token. Batch 1: layer max(144*2 + 48*2 = 384 B, 288 FLOP) = 384 ns; head
    # max(16*4*2 = 128 B, 2*16*4 = 128 FLOP) = 128 ns; attention at t tokens max(2*t*2*2 = 8t B,
    # 4*2*2*t = 16t FLOP) = 16t ns. Input 2, output 2: t = 3, 4 -> steps 560 and 576 ns.
    (row,) = decode_projection(TOY, SLOW, [1], input_tokens=2, output_tokens=2)
    assert row["system"] == "gpu" and not row["oom"]
    assert row["step_ms"] == pytest.approx(568e-6)
    assert row["tokens_per_s"] == pytest.approx(2 / 1136e-9)
    assert row["split_ms"]["gpu_linear"] == pytest.approx(512e-6)
    assert row["split_ms"]["gpu_attention"] == pytest.approx(56e-6)
    assert row["bottleneck"] == "gpu weight reads"
    # Useful FLOPs: 2 steps * (2 * (144 + 64) + 16 * t) = 832 + 112 = 944 in 1136 ns at 1 GFLOP/s.
    assert row["mfu"] == pytest.approx(944 / 1136)
    assert row["tokens_per_s_per_w"] == pytest.approx(row["tokens_per_s"] / 100)


def test_gpu_oom_boundary():
    # Weights (144 + 8) + 16*4 + 4 = 220 params = 440 B; KV 8 B per token, 4 tokens per sequence.
    fits = 10
    gpu = replace(SLOW, memory_gib=(440 + fits * 4 * 8) / GIB)
    rows = decode_projection(TOY, gpu, [fits, fits + 1], input_tokens=2, output_tokens=2)
    assert [r["oom"] for r in rows] == [False, True]
    assert rows[1]["tokens_per_s"] is None and "GiB" in rows[1]["oom_reason"]


def test_hpu_kv_capacity_boundary():
    m = load_model_shape("llama-2-7b")
    board = load_board("u55c")
    region = hpu_params_for_model(m, 2048).layout.region_bytes(2048)
    per_seq = m.layers * m.kv_heads * region
    fits = int(board.memory[0]["capacity_gib"] * GIB // per_seq)  # sequences per card
    rows = decode_projection(
        m, "l40s", [2 * fits, 2 * fits + 1], hpus=2, input_tokens=1024, output_tokens=1024
    )  # the default KV format, as hpu_params_for_model's
    hpu = [r for r in rows if r["system"] == "gpu+hpu"]
    assert [r["oom"] for r in hpu] == [False, True]
    assert "HBM" in hpu[1]["oom_reason"]
    assert hpu[0]["memory"]["hpu_used_gib_per_card"] == pytest.approx(fits * per_seq / GIB)


def test_gpu_plus_hpu_rows():
    # int8 KV: 64 x 2048 tokens fit 4 cards (int16 takes 4.3 % more than their 64 GiB)
    rows = decode_projection("llama-2-7b", "l40s", [1, 8, 64], hpus=4, kv_bits=8)
    gpu = {r["batch"]: r for r in rows if r["system"] == "gpu"}
    hpu = {r["batch"]: r for r in rows if r["system"] == "gpu+hpu"}
    assert gpu[64]["oom"] and not hpu[64]["oom"]  # 64 x 2048 tokens of fp16 KV exceed 48 GiB
    assert not gpu[8]["oom"]
    for r in hpu.values():
        assert r["hpu"]["efficiency"]["read_latency_cycles"] == 100
        assert r["hpu"]["efficiency"]["source"].endswith("hpu_stream_efficiency.yaml")
        assert r["hpu_bound"] in ("bandwidth", "compute")
        assert r["split_ms"]["gpu_attention"] == 0
        assert r["power_w"] == 350 + 4 * 150
    # Ping-pong reads the weights once per sub-batch: twice the GPU-alone weight time.
    assert hpu[8]["split_ms"]["gpu_linear"] > 1.9 * gpu[8]["split_ms"]["gpu_linear"] - 1
    cmp = paper_comparison(rows)
    assert cmp["gpu_oom_batches"] == [64] and cmp["hpu_best_batch"] == 64
    assert cmp["speedup"] == pytest.approx(hpu[64]["tokens_per_s"] / gpu[8]["tokens_per_s"])


def test_card_bandwidth_grows_with_engines_up_to_the_hbm_sustained_rate():
    """One engine draws what its two ports move (one beat a cycle each); 128 engines share the
    32 pseudo-channels and reach the HBM's sustained rate (the board's measured fraction of its
    peak), times the stream efficiency either way."""
    # int8 K and V (the one synthesis of its head on 256-bit ports; 16 sequences fit a card)
    one = decode_projection("llama-2-7b", "l40s", [16], hpus=1, engines=1, kv_bits=8)[-1]
    many = decode_projection("llama-2-7b", "l40s", [16], hpus=1, engines=128, kv_bits=8)[-1]
    e1, e64 = one["hpu_kv"]["stream_efficiency"], many["hpu_kv"]["stream_efficiency"]
    port = one["hpu_kv"]["port_gb_s"]
    # the synthesis's timing estimate, or the board's 300 MHz where the estimate reaches it
    clock = one["hpu_kv"]["clock_mhz"]
    sources = ("timing estimate", "board default (the timing estimate")
    assert one["hpu_kv"]["clock_source"].startswith(sources) and clock <= 300
    assert port == pytest.approx(32 * clock * 1e6 / 1e9)  # 32-byte beats at that clock
    assert one["hpu_kv"]["card_gb_s"] == pytest.approx(2 * port * e1)
    assert one["hpu_kv"]["card_limited_by"] == "engine ports"
    sustained = load_board("u55c").memory[0]["sustained_fraction"]
    assert 0.85 < sustained < 1 and many["hpu_kv"]["sustained_fraction"] == sustained
    assert many["hpu_kv"]["hbm_fraction"] == pytest.approx(sustained * e64)
    assert many["hpu_kv"]["card_limited_by"] == "HBM sustained rate"
    assert one["split_ms"]["hpu"] > 10 * many["split_ms"]["hpu"]


def test_engine_clock_comes_from_the_synthesis_timing_estimate(monkeypatch):
    """Given clock > the synthesized configuration's estimate (when below the board's default)
    > the board's default; every choice names its source."""
    from tandem.host.system import perf
    from tandem.host.system.perf import cards

    from tandem.boards import load_board

    board = load_board("u55c")
    params = hpu_params_for_model(load_model_shape("smollm2-135m"), max_seq_len=2048)
    entry = dict(perf.synthesized_engine(params))
    for fmax, clock, source in ((212.5, 212.5, "timing estimate"), (412.0, 300.0, "board default")):
        entry["timing"] = {"fmax_mhz": fmax}
        monkeypatch.setattr(cards, "load_engine_resources", lambda e=dict(entry): [e])
        chosen = perf.engine_clock(params, board)
        assert chosen["clock_mhz"] == clock and chosen["clock_source"].startswith(source)
        assert chosen["fmax_mhz"] == fmax
        row = decode_projection("smollm2-135m", "l40s", [8], hpus=1)[-1]
        assert row["hpu"]["clock_mhz"] == clock and row["hpu_kv"]["clock_mhz"] == clock
        assert row["hpu"]["clock_source"].startswith(source)
    assert perf.engine_clock(params, board, 150.0)["clock_source"] == "given"
    monkeypatch.setattr(cards, "load_engine_resources", lambda: [])
    assert "no timing estimate" in perf.engine_clock(params, board)["clock_source"]


def test_engines_per_card_from_synthesized_resources():
    """The engines a card runs: as many as fit in its resources (the stored synthesis of the
    configuration the model runs), at most one per pair of pseudo-channels. Some of
    Llama-3-8B's candidates (head_dim 128, G 4) are bound by their LUTs, SmolLM2's by the HBM
    ports (16 fit); an engine never synthesized is not checked, and says so."""
    from tandem.host.system.perf import (
        ENGINE_RESOURCE_SHARE,
        best_engine,
        engine_fit,
        hpu_params_for_model,
    )

    from tandem.boards import load_board

    board = load_board("u55c")
    fits, ports = {}, {}
    for model in ("llama-3-8b", "smollm2-135m"):
        reference = hpu_params_for_model(load_model_shape(model), max_seq_len=2048)
        params = best_engine(reference, board)["params"]  # the configuration the model runs
        ports[model] = board.memory[0]["channels"] // params.read_ports  # engines HBM serves
        fit = fits[model] = engine_fit(params, board)
        assert fit["checked"]
        each = {
            name: int(board.capacity(name) * ENGINE_RESOURCE_SHARE // used)
            for name, used in fit["per_engine"].items()
            if used and board.capacity(name) is not None
        }
        assert fit["engines_fit"] == min(each.values()) == each[fit["bound_by"]]
    row = decode_projection("llama-3-8b", "l40s", [8], hpus=1)[-1]
    llama = fits["llama-3-8b"]["engines_fit"]
    assert row["hpu"]["engines_per_card"] == min(llama, ports["llama-3-8b"])
    bound = fits["llama-3-8b"]["bound_by"].upper() if llama < ports["llama-3-8b"] else "HBM ports"
    assert row["hpu"]["engines_limited_by"] == bound
    # The LUT-bound engine exists among the candidates: the model weighed it and chose by bandwidth.
    limits = {c["engines_limited_by"] for c in row["hpu"]["config_candidates"]}
    assert "LUT" in limits
    row = decode_projection("smollm2-135m", "l40s", [8], hpus=1)[-1]
    assert fits["smollm2-135m"]["engines_fit"] >= ports["smollm2-135m"]
    assert row["hpu"]["engines_per_card"] == ports["smollm2-135m"]
    assert row["hpu"]["engines_limited_by"] == "HBM ports"
    too_many = fits["smollm2-135m"]["engines_fit"] + 1
    forced = decode_projection("smollm2-135m", "l40s", [8], hpus=1, engines=too_many)[-1]
    assert forced["hpu"]["engines_limited_by"] == "--engines"
    assert forced["hpu"]["resources"]["fits"] is False
    odd = hpu_params_for_model(load_model_shape("smollm2-135m"), max_seq_len=2048, q_bits=8)
    assert engine_fit(odd, board) == {"checked": False, "reason": engine_fit(odd, board)["reason"]}
    assert "no synthesis" in engine_fit(odd, board)["reason"]


def test_best_engine_is_the_synthesis_drawing_the_most_card_bandwidth():
    """SmolLM2's int16 engine is stored on 256-bit and on 512-bit ports: the model takes the
    one whose engines that fit draw the most KV bandwidth, and lists both; a format or number
    format with no synthesis keeps the reference configuration and says so."""
    from tandem.host.system.perf import best_engine, card_kv_bandwidth, hpu_params_for_model

    board = load_board("u55c")
    smol = load_model_shape("smollm2-135m")
    reference = hpu_params_for_model(
        smol, max_seq_len=2048, kv_bits=16, lanes=16, mem_data_bits=256
    )
    chosen = best_engine(reference, board)
    # 256-bit ports with the scaling products in DSP48E2s and in fabric, 512-bit in DSP48E2s
    stored = sorted((c["mem_data_bits"], c["scaling_multipliers"]) for c in chosen["candidates"])
    assert stored == [(256, "dsp"), (256, "fabric"), (512, "dsp")]
    assert "3 synthesized" in chosen["choice"]
    bandwidth = {
        (c["mem_data_bits"], c["scaling_multipliers"]): c["card_gb_s"] for c in chosen["candidates"]
    }
    best = max(bandwidth, key=bandwidth.get)
    assert best == (512, "dsp")  # 16 port-bound engines on 512-bit ports
    assert chosen["params"].mem_data_bits == 512 and chosen["params"].lanes == 32
    assert bandwidth[best] == card_kv_bandwidth(chosen["params"], board, 1.0)["card_gb_s"]
    assert reference.scaling_multipliers == "dsp"  # the stream efficiency's engine
    assert chosen["params"].replace(lanes=16, mem_data_bits=256) == reference
    at_300 = best_engine(reference, board, 300.0)  # a given clock ranks every candidate at it
    assert {c["clock_mhz"] for c in at_300["candidates"]} == {300.0}
    row = decode_projection("smollm2-135m", "l40s", [8], hpus=1, kv_bits=16)[-1]
    hpu_params = row["hpu"]["params"]
    assert (hpu_params["mem_data_bits"], hpu_params["scaling_multipliers"]) == best
    assert row["hpu"]["config_choice"] == chosen["choice"]
    odd = reference.replace(q_bits=8)
    unmatched = best_engine(odd, board)
    assert unmatched["params"] == odd and unmatched["candidates"] == []
    assert "no synthesis" in unmatched["choice"]


def test_projection_errors():
    with pytest.raises(UserError, match="context"):
        decode_projection("smollm2-135m", "l40s", [1], input_tokens=8000, output_tokens=1000)
    with pytest.raises(UserError, match="latency"):
        decode_projection("smollm2-135m", "l40s", [1], hpus=1, latency=5)
    with pytest.raises(UserError, match="batch"):
        decode_projection("smollm2-135m", "l40s", [0])


# --- command line --------------------------------------------------------------------------
def test_cli_json_schema(capsys):
    status = main(
        ["perf", "decode", "--model", "llama-3-8b", "--gpu", "a100-80gb", "--hpus", "2",
         "--batch", "1,4", "--input", "128", "--output", "64", "--json"]
    )  # fmt: skip
    assert status == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["system"], r["batch"]) for r in rows] == [
        ("gpu", 1), ("gpu", 4), ("gpu+hpu", 1), ("gpu+hpu", 4),
    ]  # fmt: skip
    for r in rows:
        assert isinstance(r["oom"], bool)
        assert r["tokens_per_s"] > 0 and r["step_ms"] > 0
        assert r["tokens_per_s"] == pytest.approx(r["batch"] * 1e3 / r["step_ms"])
        assert {"bottleneck", "mfu", "tokens_per_s_per_w", "split_ms", "memory"} <= set(r)


def test_cli_table_and_plot(tmp_path, capsys):
    args = ["perf", "decode", "--model", "llama-2-7b", "--gpu", "l40s", "--hpus", "4"]
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    assert main([*args, "--plot", str(a)]) == 0
    out = capsys.readouterr().out
    assert "OOM" in out and "HPU paper" in out and "read latency 100" in out
    assert main([*args, "--plot", str(b), "--json"]) == 0
    assert a.read_bytes() == b.read_bytes()  # reproducible bytes
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "llama-9"], "unknown model"),
        (["--gpu", "h200"], "unknown gpu"),
        (["--hpus", "1", "--hpu-board", "u5c"], "unknown board"),
        (["--batch", "1,x"], "--batch"),
        (["--batch", "0"], "--batch"),
        (["--input", "0"], "--input"),
        (["--hpus", "-1"], "--hpus"),
        (["--hpus", "1", "--hpu-latency", "3"], "latency"),
        (["--hpus", "1", "--engines", "0"], "--engines"),
        (["--hpus", "1", "--hpu-clock-mhz", "0"], "--hpu-clock-mhz"),
        (["--input", "8000", "--output", "1000"], "context"),
        (["--plot", "/nonexistent-dir/x.png"], "cannot write plot"),
    ],
)
def test_cli_errors(extra, message, capsys):
    args = {"--model": "smollm2-135m", "--gpu": "l40s"}
    for i in range(0, len(extra), 2):
        args[extra[i]] = extra[i + 1]
    argv = ["perf", "decode", *[x for kv in args.items() for x in kv]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_missing_option(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["perf", "decode", "--gpu", "l40s"])
    assert exc.value.code == 2
    assert "--model" in capsys.readouterr().err


# --- runtime cross-check -------------------------------------------------------------------
def test_step_cycles_agree_with_runtime():
    """SmolLM2-135M shape: predicted cycles per step within 10 % of the golden runtime's."""
    torch = pytest.importorskip("torch")
    from tandem.host.hpu.device import HpuDevice
    from tandem.host.system.decode import Decoder, HpuAttention, Llama
    from tandem.host.system.model import LlamaConfig, random_llama

    m = load_model_shape("smollm2-135m")
    # The runtime's cycles depend on the shape of attention only: the vocabulary is cut to keep
    # the random weights small.
    config = LlamaConfig(
        n_layers=m.layers, dim=m.hidden, n_heads=m.heads, n_kv_heads=m.kv_heads,
        hidden=m.intermediate, vocab=256,
    )  # fmt: skip
    assert (config.head_dim, config.gqa_group) == (m.head_dim, m.gqa_group)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = Llama(config, random_llama(config, 0), "cpu")
        params = HpuParams.for_model(config, max_seq_len=512)
        cards = [HpuDevice(params, memory_bytes=64 << 20, name=f"hpu{i}") for i in range(2)]
        rng = np.random.default_rng(0)
        lengths = [37, 90, 20, 64]
        prompts = [rng.integers(0, 256, n).tolist() for n in lengths]
        result = Decoder(model, HpuAttention(config, cards)).generate(prompts, 3)
    finally:
        torch.set_num_threads(threads)
    assert len(result.step_cycles) == 2
    for step, measured in enumerate(result.step_cycles, start=1):
        contexts = [n + step for n in lengths]  # the appended token included
        capacities = [n + 3 for n in lengths]  # prompt + max_new_tokens, as the runtime reserves
        predicted = hpu_step_cycles(m, params, contexts, cards=2, capacities=capacities, latency=2)
        assert set(predicted) == set(measured)
        for card, cycles in measured.items():
            assert predicted[card] == pytest.approx(cycles, rel=0.10), (step, card)


def test_int16_kv_format_doubles_bytes_and_card_time():
    """``kv_bits=16``: each token's rows take twice the bytes; the model runs the int16 engine
    on the ports that draw the most bandwidth (512-bit, where int8's stored one has 256), so
    the cards' share of a decode step grows by twice the bytes over the ports' speed-up."""
    from tandem.host.system.perf import decode_projection

    rows = {
        bits: decode_projection(
            "llama-2-7b",
            "a100-80gb",
            [16],
            hpus=2,
            kv_bits=bits,
            input_tokens=1024,
            engines=16,
            clock_mhz=300.0,  # the same engine count at the same clock
        )[-1]
        for bits in (8, 16)
    }
    card = {bits: row["hpu"] for bits, row in rows.items()}
    assert card[8]["kv_format"].startswith("int8") and card[16]["kv_format"].startswith("int16")
    # Per token and (layer, KV head): K and V rows of head_dim elements and two binary16 scales.
    assert card[8]["kv_bytes_per_token"] == 2 * 128 + 4
    assert card[16]["kv_bytes_per_token"] == 2 * 256 + 4
    assert card[8]["params"]["mem_data_bits"] == 256 and card[16]["params"]["mem_data_bits"] == 512
    hpu = {bits: row["split_ms"]["hpu"] for bits, row in rows.items()}
    port = {bits: row["hpu_kv"]["port_gb_s"] for bits, row in rows.items()}
    # 512-bit ports at 300 MHz would move 19.2 GB/s; each is held to its pseudo-channel's 14.4
    assert port[16] < 2 * port[8]
    assert hpu[16] / hpu[8] == pytest.approx(2 * port[8] / port[16], rel=0.05), (hpu, port)
    with pytest.raises(UserError, match="kv-bits"):
        decode_projection("llama-2-7b", "a100-80gb", [16], hpus=2, kv_bits=4)


def test_stored_efficiency_names_the_command_that_measured_it():
    """perf_efficiency_data records the benchmark's harness and every parameter that differs
    from the defaults (max_seq_len follows the lengths by itself), so the stored figures can be
    measured again."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / "perf_efficiency_data.py"
    spec = importlib.util.spec_from_file_location("perf_efficiency_data", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    card = HpuParams(max_seq_len=8192, lanes=32, mem_data_bits=512).to_dict()
    assert module.measuring_command({"params": card, "harness": "native"}) == (
        "python benchmarks/hpu_stream_efficiency.py --harness native --set lanes=32 "
        "--set mem_data_bits=512"
    )
    defaults = HpuParams(max_seq_len=8192).to_dict()
    assert module.measuring_command({"params": defaults, "harness": "cocotb"}) == (
        "python benchmarks/hpu_stream_efficiency.py"
    )
    assert load_efficiency().command == module.measuring_command(
        {"params": load_efficiency().params, "harness": "native"}
    )


def test_verilog_hash_is_cached_by_sources_and_parameters(tmp_path, monkeypatch):
    """hpu_resources_data generates a configuration's Verilog once: a later process reads its
    hash from the cache, and other parameters are generated afresh."""
    import importlib.util
    from pathlib import Path

    import tandem.generate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "hpu_resources_data.py"

    def load():
        spec = importlib.util.spec_from_file_location("hpu_resources_data", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    first = load().verilog_sha256("exp2", {})
    assert len(list((tmp_path / "tandem" / "verilog-sha256").iterdir())) == 1

    def no_generation(*args, **kwargs):
        raise AssertionError("generated again")

    monkeypatch.setattr(tandem.generate, "generate", no_generation)
    assert load().verilog_sha256("exp2", {}) == first
    with pytest.raises(AssertionError, match="generated again"):
        load().verilog_sha256("exp2", {"lut_bits": 4})


def test_stored_synthesis_entries_say_whether_they_describe_the_present_gateware(tmp_path):
    """hpu_resources_data records the sha256 of the Verilog each report was synthesized from;
    ``--check`` says ``current`` only where the present generator writes that Verilog."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "hpu_resources_data.py"
    spec = importlib.util.spec_from_file_location("hpu_resources_data", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    small = HpuParams(head_dim=32, lanes=16, mem_data_bits=128, kv_bits=8, max_seq_len=256)
    used = {"lut": 1000, "ff": 1000, "dsp": 10, "bram36": 0, "uram": 0}
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"board": "u55c", "params": small.to_dict(), "used": used}))
    out = tmp_path / "resources.yaml"
    assert module.main([str(report), "--out", str(out)]) == 0
    (entry,) = yaml.safe_load(out.read_text())["engines"]
    assert entry["verilog_sha256"] == module.verilog_sha256("hpu", small.to_dict())
    assert module.rtl_state(entry) == "current"
    assert module.rtl_state({**entry, "verilog_sha256": "0" * 64}) == "older"
    assert module.rtl_state({k: v for k, v in entry.items() if k != "verilog_sha256"}) == "older"
    # A report that names its Verilog (tandem synth's do) keeps that hash, whatever the tree.
    named = {"board": "u55c", "params": small.to_dict(), "used": used, "verilog_sha256": "ab" * 32}
    report.write_text(json.dumps(named))
    assert module.main([str(report), "--out", str(out)]) == 0
    (entry,) = yaml.safe_load(out.read_text())["engines"]
    assert entry["verilog_sha256"] == "ab" * 32 and module.rtl_state(entry) == "older"
    # --drop removes a stored entry by its command; an unknown one is a user error.
    assert (
        module.main(["--drop", "tandem synth hpu --board u55c --set nothing", "--out", str(out)])
        == 2
    )
    assert len(yaml.safe_load(out.read_text())["engines"]) == 1
    assert module.main(["--drop", entry["command"], "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["engines"] == []
    missing = tmp_path / "none.yaml"
    assert module.main(["--drop", entry["command"], "--out", str(missing)]) == 2
    assert not missing.exists()
    # A card's report goes under cards; --figures publishes the entries of the present
    # gateware with the command that reproduces each, and counts the older ones.
    card = {
        "design": "hpu-card",
        "board": "u55c",
        "params": {**small.to_dict(), "engines": 2, "channels": 4, "memory_bytes": 1 << 18},
        "used": used,
        "timing": {"fmax_mhz": 250.0, "logic_levels": 7, "path_ns": 4.0},
    }
    report.write_text(json.dumps(card))
    assert module.main([str(report), "--out", str(out)]) == 0
    stored = yaml.safe_load(out.read_text())
    assert stored["engines"] == [] and len(stored["cards"]) == 1
    assert stored["cards"][0]["command"].startswith("tandem synth hpu-card --board u55c --set ")
    assert module.rtl_state(stored["cards"][0]) == "current"
    figures_file = tmp_path / "figures.json"
    assert module.main(["--out", str(out), "--figures", str(figures_file)]) == 0
    figures = {f["name"]: f for f in json.loads(figures_file.read_text())["figures"]}
    assert figures["stored syntheses of the present gateware"]["value"] == 1
    (clock,) = [f for name, f in figures.items() if name.startswith("clock estimate, 2 engines")]
    assert clock["value"] == 250.0 and clock["command"] == stored["cards"][0]["command"]
    assert clock["design"] == "hpu-card"
    # With its engine synthesized alone, the card's share outside its engines is published.
    engine = HpuParams(**{**small.to_dict(), "value_offset": 1 << 16})
    alone = {"design": "hpu", "board": "u55c", "params": engine.to_dict()}
    report.write_text(json.dumps({**alone, "used": {**used, "lut": 400, "ff": 450}}))
    assert module.main([str(report), "--out", str(out)]) == 0
    assert module.main(["--out", str(out), "--figures", str(figures_file)]) == 0
    figures = {f["name"]: f for f in json.loads(figures_file.read_text())["figures"]}
    (share,) = [f for name, f in figures.items() if name.startswith("LUT share outside")]
    assert share["value"] == pytest.approx((1000 - 2 * 400) / 1000)


def test_gpu_decode_efficiency_is_the_published_measurement_over_the_roofline():
    """The A100's ``decode_efficiency`` is TensorRT-LLM's published A100 FP16 LLaMA 7B decode
    (batch 60, 128 in, 2048 out: 1,928 tokens/s) over this model's roofline of the same setup;
    the GPU's time in every projection is the roofline's over that efficiency, its MFU still
    against the data sheet."""
    from tandem.boards import load_gpu

    a100 = load_gpu("a100-80gb")
    roofline = replace(a100, decode_efficiency=1.0)
    ideal = decode_projection("llama-2-7b", roofline, [60], input_tokens=128, output_tokens=2048)
    assert 1928 / ideal[0]["tokens_per_s"] == pytest.approx(a100.decode_efficiency, abs=0.01)
    real = decode_projection("llama-2-7b", a100, [60], input_tokens=128, output_tokens=2048)
    ratio = real[0]["tokens_per_s"] / ideal[0]["tokens_per_s"]
    assert ratio == pytest.approx(a100.decode_efficiency)
    assert real[0]["mfu"] == pytest.approx(ideal[0]["mfu"] * a100.decode_efficiency)


def test_card_bandwidth_comes_from_the_channels_each_call_reads():
    """The HPU paper's setup (Llama-2-7B, batch 48, 4 cards): with the channel-aware placement
    every call reads all 32 pseudo-channels evenly and the card draws their sustained rate; with
    contiguous placement a call reads a few channels and the cards become the bottleneck."""
    from tandem.boards import load_board

    hbm = load_board("u55c").memory[0]
    rows = {
        placement: decode_projection(
            "llama-2-7b", "l40s", [48], input_tokens=1024, output_tokens=1024, hpus=4,
            placement=placement,
        )[-1]
        for placement in ("channels", "contiguous")
    }  # fmt: skip
    spread, packed = rows["channels"], rows["contiguous"]
    for call in spread["hpu_channels"]["calls"]:
        assert call["touched"] == hbm["channels"] and call["busiest_over_mean"] == 1.0
        assert call["gb_s"] == pytest.approx(hbm["bandwidth_gb_s"] * hbm["sustained_fraction"])
    for call in packed["hpu_channels"]["calls"]:
        assert call["touched"] < hbm["channels"] / 2 and call["busiest_over_mean"] > 2
        assert call["gb_s"] < 0.3 * hbm["bandwidth_gb_s"]
    assert packed["bottleneck"].startswith("hpu bandwidth")
    assert packed["tokens_per_s"] < spread["tokens_per_s"] / 2
    with pytest.raises(UserError, match="--placement"):
        decode_projection("llama-2-7b", "l40s", [8], hpus=1, placement="striped")
