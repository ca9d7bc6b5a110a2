"""The decode projection of the performance model: the GPU roofline, the sub-batch ping-pong of
a GPU with HPU cards, the PCIe transfers, and the rows of :func:`decode_projection`."""

import math

import numpy as np
from tandem.host.hpu.cycles import request_beats, request_cycles

from tandem.boards import Board, Gpu, load_board, load_gpu
from tandem.errors import UserError

from .cards import (
    GIB,
    KV_PLACEMENTS,
    best_engine,
    call_channel_rates,
    card_kv_bandwidth,
    engine_clock,
    engine_fit,
    hpu_params_for_model,
    place_sequences,
)
from .inputs import ModelShape, load_efficiency, load_model_shape

#: Bytes per result element sent back over PCIe (out_bits <= 32 packed in 32-bit words).
RESULT_ELEM_BYTES = 4


# --- the projection -------------------------------------------------------------------------
def _roofline(bytes_, flops, bw, peak):
    mem, comp = bytes_ / bw, flops / peak
    return np.maximum(mem, comp), mem, comp


def _gpu_linear(model: ModelShape, gpu_bw: float, peak: float, batch: int):
    """Seconds of one layer's linear kernels and of embedding + LM head for ``batch`` rows."""
    w = model.dtype_bytes
    layer_bytes = model.layer_linear_params * w + batch * w * model.activation_elems
    layer, layer_mem, layer_comp = _roofline(
        layer_bytes, 2 * batch * model.layer_linear_params, gpu_bw, peak
    )
    head, _, _ = _roofline(
        model.vocab * model.hidden * w, 2 * batch * model.vocab * model.hidden, gpu_bw, peak
    )
    return float(layer), float(head), bool(layer_comp > layer_mem)


def pingpong_step(layers: int, subbatches, head=0.0):
    """Seconds of one decode step under sub-batch ping-pong (the package docstring, "Sub-batch").

    Parameters
    ----------
    layers
        ``L``.
    subbatches
        Per sub-batch ``(g, pd, h, pu)``: seconds of its GPU work, descriptors down, card
        attention and results up for one layer (scalars or arrays over decode steps).
    head
        Seconds of the work after the last layer (LM head), not overlapped.

    Returns
    -------
    step, terms, exposed
        The step time (makespan of the task graph, event by event, plus ``head``), the
        candidates of the steady-state period ``T`` by name (``gpu``, ``hpu``, ``pcie down``,
        ``pcie up``, ``dependency chain``) and ``step - head - L * T`` (fill and drain).
    """
    stages = [[np.asarray(x, dtype=float) for x in s] for s in subbatches]
    free = [0.0] * 4  # when each resource (GPU, link down, cards, link up) is next free
    done = [0.0] * len(stages)  # when each sub-batch's last task ended
    for _ in range(layers):
        for i, durations in enumerate(stages):
            t = done[i]
            for r, d in enumerate(durations):
                t = np.maximum(t, free[r]) + d
                free[r] = t
            done[i] = t
    makespan = np.maximum.reduce(np.broadcast_arrays(*done))
    chains = [sum(s) for s in stages]
    terms = {
        name: sum(s[r] for s in stages)
        for r, name in enumerate(("gpu", "pcie down", "hpu", "pcie up"))
    }
    terms["dependency chain"] = np.maximum.reduce(np.broadcast_arrays(*chains))
    period = np.maximum.reduce(np.broadcast_arrays(*terms.values()))
    return makespan + head, terms, makespan - layers * period


def _link_seconds(card_bytes: list[np.ndarray], gpu: Gpu, board: Board, latency_s: float):
    total = sum(card_bytes)
    worst = np.max(np.stack(card_bytes), axis=0)
    gpu_link = gpu.pcie["bandwidth_gb_s"] * 1e9
    card_link = board.pcie["bandwidth_gb_s"] * 1e9
    return np.maximum(total / gpu_link, worst / card_link) + latency_s


def decode_projection(
    model: str | ModelShape,
    gpu: str | Gpu,
    batches,
    *,
    input_tokens: int = 1024,
    output_tokens: int = 1024,
    hpus: int = 0,
    hpu_board: str | Board = "u55c",
    engines: int | None = None,
    clock_mhz: float | None = None,
    latency: int = 100,
    pcie_latency_us: float = 0.0,
    kv_bits: int | None = None,
    placement: str = "channels",
) -> list[dict]:
    """Project decode throughput for the GPU alone and, with ``hpus > 0``, GPU + HPUs.

    Parameters
    ----------
    model, gpu, hpu_board
        Names in ``constraints/`` (or loaded objects).
    batches
        Batch sizes (sequences decoded together).
    input_tokens, output_tokens
        Prompt length (already in the KV cache) and tokens generated per sequence.
    hpus
        HPU cards beside the GPU (0: only the GPU-alone rows).
    engines
        hpu engines per card (default: HBM channels // read ports).
    clock_mhz
        Engine clock (default: the board's default clock).
    latency
        Read latency (cycles) of the measured stream efficiency to use.
    pcie_latency_us
        Fixed latency added to every transfer (default 0).
    kv_bits
        The cards' KV format: 16 (int16 rows) or 8 (int8 rows: half the bytes per token, at
        the accuracy docs/hpu.md's table gives); None: :class:`HpuParams`'s default.
    placement
        Where the cards' allocators put KV regions (:data:`KV_PLACEMENTS`): ``"channels"``
        (the runtime's default) or ``"contiguous"``.

    Returns
    -------
    list of dict
        One row per (system, batch); see :mod:`tandem.host.system.perf` and ``docs/perf.md``.
    """
    m = load_model_shape(model) if isinstance(model, str) else model
    g = load_gpu(gpu) if isinstance(gpu, str) else gpu
    batches = [int(b) for b in batches]
    _check_projection_inputs(m, batches, input_tokens, output_tokens, hpus, pcie_latency_us)
    if clock_mhz is not None and not (clock_mhz > 0 and math.isfinite(clock_mhz)):
        raise UserError(f"--hpu-clock-mhz must be positive, not {clock_mhz}")
    capacity_tokens = input_tokens + output_tokens
    peak = (g.fp16_dense_tflops if m.dtype_bytes == 2 else g.bf16_dense_tflops) * 1e12
    gpu_bw = g.memory_bandwidth_gb_s * 1e9
    gpu_capacity = g.memory_gib * GIB
    contexts = input_tokens + 1 + np.arange(output_tokens)  # t of every decode step

    rows = []
    for b in batches:
        rows.append(_gpu_alone(m, g, b, contexts, input_tokens, output_tokens, peak, gpu_bw))
    if hpus == 0:
        return rows

    board = load_board(hpu_board) if isinstance(hpu_board, str) else hpu_board
    eff = load_efficiency()
    if latency not in eff.latencies:
        raise UserError(
            f"--hpu-latency {latency}: the stream efficiency was measured at read latencies "
            f"{', '.join(map(str, eff.latencies))} only"
        )
    params = _card_params(m, capacity_tokens, kv_bits, placement)
    chosen = best_engine(params, board, clock_mhz)
    params = chosen["params"]
    engines, limited_by, fit = _engines_per_card(params, board, engines)
    if clock_mhz is not None and not clock_mhz > 0:
        raise UserError(f"--hpu-clock-mhz must be positive, not {clock_mhz}")
    timing = engine_clock(params, board, clock_mhz)
    clock = timing["clock_mhz"] * 1e6
    hw = _hardware_summary(
        board, params, chosen, eff, timing, hpus=hpus, engines=engines, limited_by=limited_by,
        fit=fit, clock=clock, clock_mhz=clock_mhz, latency=latency,
    )  # fmt: skip
    for b in batches:
        rows.append(
            _gpu_hpu(
                m, g, board, params, eff, hw, b, contexts, input_tokens, output_tokens,
                peak=peak, gpu_bw=gpu_bw, gpu_capacity=gpu_capacity, hpus=hpus,
                engines=engines, clock=clock, latency=latency,
                pcie_latency_s=pcie_latency_us * 1e-6, kv_placement=placement,
            )
        )  # fmt: skip
    return rows


def _check_projection_inputs(
    m: ModelShape, batches: list[int], input_tokens, output_tokens, hpus, pcie_latency_us
) -> None:
    """Raise :class:`UserError` for the :func:`decode_projection` options out of range."""
    if not batches or min(batches) < 1:
        raise UserError(f"batch sizes must be positive integers, not {batches}")
    if input_tokens < 1 or output_tokens < 1:
        raise UserError(
            f"--input and --output must be at least 1, not {input_tokens} and {output_tokens}"
        )
    capacity_tokens = input_tokens + output_tokens
    if capacity_tokens > m.max_context:
        raise UserError(
            f"--input + --output = {capacity_tokens} exceeds {m.name}'s context of "
            f"{m.max_context} tokens"
        )
    if hpus < 0:
        raise UserError(f"--hpus must be 0 or more, not {hpus}")
    if not pcie_latency_us >= 0 or math.isinf(pcie_latency_us):
        raise UserError(f"--pcie-latency-us must be 0 or more, not {pcie_latency_us}")


def _card_params(m: ModelShape, capacity_tokens: int, kv_bits, placement: str):
    """The :class:`HpuParams` of ``m``'s cards holding ``capacity_tokens`` per sequence in
    ``kv_bits`` rows (None: the default), after checking ``kv_bits`` and ``placement``."""
    params = hpu_params_for_model(m, max_seq_len=max(capacity_tokens, 1))
    if kv_bits is None:
        kv_bits = params.kv_bits
    if kv_bits not in (8, 16):
        raise UserError(f"--kv-bits must be 8 or 16, not {kv_bits}")
    if placement not in KV_PLACEMENTS:
        raise UserError(f"--placement must be one of {', '.join(KV_PLACEMENTS)}, not {placement!r}")
    if kv_bits != params.kv_bits:
        params = hpu_params_for_model(m, max_seq_len=max(capacity_tokens, 1), kv_bits=kv_bits)
    return params


def _engines_per_card(params, board: Board, engines) -> tuple[int, str, dict]:
    """``(engines, limited_by, fit)``: the engines per card (``engines``, else one per pair of
    HBM ports, as many as the card's resources hold), what limits them, and the resource fit."""
    hbm = board.memory[0]
    fit = engine_fit(params, board)
    port_engines = max(1, int(hbm["channels"]) // params.read_ports)
    if engines is None:
        engines, limited_by = port_engines, "HBM ports"
        if fit["checked"] and fit["engines_fit"] < engines:
            engines, limited_by = max(1, fit["engines_fit"]), fit["bound_by"].upper()
    else:
        limited_by = "--engines"
    if engines < 1:
        raise UserError(f"--engines must be at least 1, not {engines}")
    if fit["checked"]:
        fit["fits"] = engines <= fit["engines_fit"]
    return engines, limited_by, fit


def _hardware_summary(
    board: Board, params, chosen, eff, timing, *, hpus, engines, limited_by, fit, clock, clock_mhz,
    latency,
) -> dict:  # fmt: skip
    """The ``hw`` entry of every GPU + HPU row: the cards, their engines, clock and formats."""
    hbm = board.memory[0]
    return {
        "board": board.name,
        "cards": hpus,
        "engines_per_card": engines,
        "engines_limited_by": limited_by,
        "resources": fit,
        "clock_mhz": clock / 1e6,
        # --hpu-clock-mhz, else the synthesized configuration's timing estimate (engine_clock)
        "clock_source": "--hpu-clock-mhz" if clock_mhz is not None else timing["clock_source"],
        "fmax_mhz": timing["fmax_mhz"],
        "hbm_gb_s": float(hbm["bandwidth_gb_s"]),
        "hbm_channels": int(hbm["channels"]),
        "sustained_fraction": float(hbm["sustained_fraction"]),
        "params": params.to_dict(),
        "config_choice": chosen["choice"],
        "config_candidates": chosen["candidates"],
        "efficiency": {
            "source": eff.source,
            "command": eff.command,
            "simulator": eff.simulator,
            "reference_params": eff.params,
            "read_latency_cycles": latency,
            "per": "call: one request of the busiest engine's read beats",
        },
        "kv_format": f"int{params.kv_bits} rows + binary16 scale per token (KvLayout)",
        "kv_bytes_per_token": params.layout.token_bytes,
    }


def _common(m: ModelShape, g: Gpu, system: str, b: int, tin: int, tout: int) -> dict:
    return {
        "system": system,
        "model": m.name,
        "gpu": g.name,
        "batch": b,
        "input": tin,
        "output": tout,
    }


def _finish(row, m, b, contexts, step_s, peak, power_w):
    tokens = b * len(contexts)
    total = float(np.sum(step_s))
    flops = float(np.sum(m.linear_flops(b) + b * m.attention_flops(contexts)))
    tps = tokens / total
    row.update(
        tokens_per_s=tps,
        step_ms=1e3 * total / len(contexts),
        mfu=flops / (total * peak),
        power_w=power_w,
        tokens_per_s_per_w=tps / power_w if power_w else None,
    )
    return row


def _oom(row, reason):
    row.update(
        oom=True,
        oom_reason=reason,
        tokens_per_s=None,
        step_ms=None,
        mfu=None,
        tokens_per_s_per_w=None,
        bottleneck=None,
        split_ms=None,
    )
    return row


def _gpu_rates(g: Gpu, gpu_bw: float, peak: float) -> tuple[float, float]:
    """The bandwidth and FLOP rate the GPU's decode kernels reach: the data sheet's times the
    GPU's ``decode_efficiency`` (a production stack's measured decode over this roofline)."""
    return gpu_bw * g.decode_efficiency, peak * g.decode_efficiency


def _gpu_alone(m, g, b, contexts, tin, tout, peak, gpu_bw):
    row = _common(m, g, "gpu", b, tin, tout)
    used = m.weight_bytes + b * (tin + tout) * m.kv_bytes_per_token
    capacity = g.memory_gib * GIB
    row["memory"] = {"gpu_used_gib": used / GIB, "gpu_capacity_gib": g.memory_gib}
    if used > capacity:
        return _oom(
            row,
            f"weights {m.weight_bytes / GIB:.1f} GiB + KV {b} x {tin + tout} tokens "
            f"{(used - m.weight_bytes) / GIB:.1f} GiB > {g.memory_gib} GiB of {g.name}",
        )
    gpu_bw, flops = _gpu_rates(g, gpu_bw, peak)
    layer, head, compute_bound = _gpu_linear(m, gpu_bw, flops, b)
    w = m.dtype_bytes
    attn, _, _ = _roofline(
        b * 2 * contexts * m.kv_heads * m.head_dim * w,
        b * 4 * m.heads * m.head_dim * contexts,
        gpu_bw,
        flops,
    )
    step = head + m.layers * (layer + attn)
    linear_ms = 1e3 * (head + m.layers * layer)
    attn_ms = 1e3 * m.layers * float(np.mean(attn))
    row["oom"] = False
    row["split_ms"] = {"gpu_linear": linear_ms, "gpu_attention": attn_ms, "pcie": 0.0, "hpu": 0.0}
    if attn_ms > linear_ms:
        row["bottleneck"] = "gpu attention (KV reads)"
    else:
        row["bottleneck"] = "gpu compute (GEMMs)" if compute_bound else "gpu weight reads"
    return _finish(row, m, b, contexts, step, peak, g.tdp_w)


def _gpu_hpu(
    m, g, board, params, eff, hw, b, contexts, tin, tout, *, peak, gpu_bw, gpu_capacity,
    hpus, engines, clock, latency, pcie_latency_s, kv_placement="channels",
):  # fmt: skip
    row = _common(m, g, "gpu+hpu", b, tin, tout)
    row["hpus"] = hpus
    row["hpu"] = hw
    per_card = -(-b // hpus)
    region = params.layout.region_bytes(tin + tout)
    card_used = per_card * m.layers * m.kv_heads * region
    card_capacity = float(board.memory[0]["capacity_gib"]) * GIB
    row["memory"] = {
        "gpu_used_gib": m.weight_bytes / GIB,
        "gpu_capacity_gib": g.memory_gib,
        "hpu_used_gib_per_card": card_used / GIB,
        "hpu_capacity_gib_per_card": card_capacity / GIB,
    }
    if m.weight_bytes > gpu_capacity:
        return _oom(row, f"weights {m.weight_bytes / GIB:.1f} GiB > {g.memory_gib} GiB of {g.name}")
    if card_used > card_capacity:
        return _oom(
            row,
            f"KV of {per_card} sequences x {tin + tout} tokens per card "
            f"{card_used / GIB:.1f} GiB > {card_capacity / GIB:.0f} GiB of {board.name} HBM",
        )
    half = (b + 1) // 2
    sizes = [half, b - half] if b > 1 else [1]
    gpu_bw, flops = _gpu_rates(g, gpu_bw, peak)
    desc, reads, _ = request_beats(params, contexts)
    busy = request_cycles(params, contexts)
    # What the engines can draw from the pseudo-channels each call's regions lie in: a port
    # one beat a cycle, a channel its sustained rate (call_channel_rates).
    kv = card_kv_bandwidth(params, board, 1.0, clock / 1e6, engines)
    fill_s = eff.fill_cycles(latency) / clock
    write_bytes = 2 * (params.row_elems + 2)
    result_bytes = m.gqa_group * m.head_dim * RESULT_ELEM_BYTES
    # The runtime's placement: equal sequences that fit go round-robin, whole.
    placement = place_sequences(
        params, [tin + tout] * b, hpus, heads=m.layers * m.kv_heads, card_bytes=card_capacity
    )
    subbatches = [range(f, f + n) for f, n in zip(np.cumsum([0, *sizes]), sizes)]
    rates = call_channel_rates(
        params, board, placement, subbatches, layers=m.layers, kv_heads=m.kv_heads,
        policy=kv_placement, port_gb_s=kv["port_gb_s"], ports=engines * params.read_ports,
    )  # fmt: skip
    parts, efficiencies = [], []
    for (first, size), rate in zip(zip(np.cumsum([0, *sizes]), sizes), rates):
        hbm_bw = rate["gb_s"] * 1e9
        # Sequences of this sub-batch on each card, requests = sequences x Hkv.
        on_card = [0] * hpus
        for b_ in range(first, first + size):
            for s in placement[b_]:
                on_card[s.card] += m.kv_heads
        busiest = max(on_card)
        e = eff.efficiency(-(-busiest // engines) * reads, latency)
        efficiencies.append(e)
        bw_s = busiest * (2 * reads * params.beat_bytes + write_bytes) / (hbm_bw * e)
        comp_s = busiest * busy / (engines * clock)
        hpu_s = np.maximum(bw_s, comp_s) + fill_s
        down = _link_seconds(
            [np.full(len(contexts), n * desc[0] * params.beat_bytes) for n in on_card],
            g, board, pcie_latency_s,
        )  # fmt: skip
        up = _link_seconds(
            [np.full(len(contexts), float(n * result_bytes)) for n in on_card],
            g, board, pcie_latency_s,
        )  # fmt: skip
        layer, _, compute_bound = _gpu_linear(m, gpu_bw, flops, size)
        parts.append(
            {"g": layer, "pd": down, "h": hpu_s, "pu": up, "bw": bw_s, "comp": comp_s,
             "compute_bound": compute_bound}
        )  # fmt: skip
    _, head, _ = _gpu_linear(m, gpu_bw, flops, b)
    step, terms, exposed = pingpong_step(
        m.layers, [(p["g"] + 0 * contexts, p["pd"], p["h"], p["pu"]) for p in parts], head
    )
    stack = np.stack(list(terms.values()))
    first = parts[0]
    # The term that sets T most often over the run names the bottleneck.
    winner = list(terms)[int(np.bincount(np.argmax(stack, axis=0), minlength=len(terms)).argmax())]
    card_bound = (
        "bandwidth"
        if np.sum(sum(p["bw"] for p in parts)) >= np.sum(sum(p["comp"] for p in parts))
        else "compute"
    )
    if winner == "gpu":
        winner = "gpu compute (GEMMs)" if first["compute_bound"] else "gpu weight reads"
    elif winner == "hpu":
        winner = f"hpu {card_bound}"
    row["oom"] = False
    row["bottleneck"] = winner
    row["hpu_bound"] = card_bound
    row["hpu_efficiency_mean"] = float(np.mean(efficiencies))
    row["hpu_kv"] = {  # the card's KV bandwidth at this batch's mean stream efficiency
        **card_kv_bandwidth(params, board, row["hpu_efficiency_mean"], clock / 1e6, engines),
        "clock_source": hw["clock_source"],
    }
    hbm_gb_s = float(board.memory[0]["bandwidth_gb_s"])
    row["hpu_channels"] = {  # what the calls' placement really draws, per sub-batch
        "placement": kv_placement,
        "calls": rates,
        "hbm_fraction": [r["gb_s"] * row["hpu_efficiency_mean"] / hbm_gb_s for r in rates],
    }
    ms = 1e3 * m.layers
    row["split_ms"] = {
        "gpu_linear": ms * float(np.mean(terms["gpu"])) + 1e3 * head,
        "gpu_attention": 0.0,
        "pcie": ms * float(np.mean(terms["pcie down"] + terms["pcie up"])),
        "hpu": ms * float(np.mean(terms["hpu"])),
        "not_overlapped": 1e3 * float(np.mean(exposed + head)),
    }
    power = g.tdp_w + hpus * board.power_w if board.power_w is not None else None
    return _finish(row, m, b, contexts, step, peak, power)
