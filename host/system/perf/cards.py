"""The HPU cards of the performance model: the engine configuration a card runs and how many
engines fit, their clock, the KV bandwidth a card draws from its HBM pseudo-channels, where the
sequences are placed, and the cycles of one call and of one runtime decode step."""

import numpy as np
from tandem.host.hpu import HpuParams
from tandem.host.hpu.cycles import Memory, batch_cycles
from tandem.mappings.hpu.placement import CardSpace, Slice, place_batch

from tandem.boards import Board, load_board
from tandem.errors import UserError

from .inputs import (
    RESOURCES_FILE,
    ModelShape,
    StreamEfficiency,
    load_efficiency,
    load_engine_resources,
)

#: Share of a card's LUT/FF/DSP/BRAM/URAM the engines may take: the rest is for the platform's
#: shell (PCIe DMA, HBM subsystem) and for routing; 80 % is a usual ceiling for a design that
#: still closes timing, an assumption, not a measurement.
ENGINE_RESOURCE_SHARE = 0.8
GIB = 1 << 30


# --- the HPU engine -------------------------------------------------------------------------
def synthesized_engine(params: HpuParams) -> dict | None:
    """The stored synthesis of ``params`` (:data:`RESOURCES_FILE`): every parameter but
    ``max_seq_len`` (a few counter bits) equal; None when there is none. A parameter an
    entry does not name (stored before the parameter existed) has its default value."""
    defaults = HpuParams().to_dict()
    wanted = {k: v for k, v in params.to_dict().items() if k != "max_seq_len"}
    for entry in load_engine_resources():
        stored = {**defaults, **entry["params"]}
        if {k: v for k, v in stored.items() if k != "max_seq_len"} == wanted:
            return entry
    return None


def engine_clock(params: HpuParams, board: Board, clock_mhz: float | None = None) -> dict:
    """The clock the engines of ``params`` run at on ``board``, and where it comes from.

    ``clock_mhz`` when given; else the timing estimate of the stored synthesis of this
    configuration (``tandem synth``'s longest register-to-register path, :mod:`tandem.timing`)
    where it is below the board's default kernel clock, the board's default where the
    estimate reaches it; the board's default, saying so, when no synthesis of the
    configuration carries an estimate. Returns ``{"clock_mhz", "clock_source",
    "fmax_mhz"}`` (``fmax_mhz`` None without an estimate).
    """
    default = float(board.default_clock_mhz)
    if clock_mhz is not None:
        return {"clock_mhz": float(clock_mhz), "clock_source": "given", "fmax_mhz": None}
    entry = synthesized_engine(params)
    fmax = ((entry or {}).get("timing") or {}).get("fmax_mhz")
    if fmax is None:
        return {
            "clock_mhz": default,
            "clock_source": "board default (no timing estimate of this configuration)",
            "fmax_mhz": None,
        }
    if fmax < default:
        source = f"timing estimate ({entry['command']})"
        return {"clock_mhz": float(fmax), "clock_source": source, "fmax_mhz": float(fmax)}
    return {
        "clock_mhz": default,
        "clock_source": f"board default (the timing estimate, {fmax:.0f} MHz, reaches it)",
        "fmax_mhz": float(fmax),
    }


def engine_fit(params: HpuParams, board: Board) -> dict:
    """How many engines of ``params`` fit on ``board``, from a synthesis of that configuration.

    The configuration matches a stored synthesis when every parameter but ``max_seq_len`` (a
    few counter bits) is equal. Engines fit while each resource used stays within
    :data:`ENGINE_RESOURCE_SHARE` of the board's. Returns ``{"checked": False, "reason"}``
    when no synthesis matches.
    """
    entry = synthesized_engine(params)
    if entry is not None:
        limits = {}
        for name, used in entry["used"].items():
            capacity = board.capacity(name)
            if used and capacity is not None:
                limits[name] = int(capacity * ENGINE_RESOURCE_SHARE // used)
        if not limits:
            return {
                "checked": False,
                "reason": f"board {board.name} lists none of the resources the engine uses",
            }
        bound = min(limits, key=limits.get)
        return {
            "checked": True,
            "per_engine": dict(entry["used"]),
            "synthesized": f"{entry['command']} ({RESOURCES_FILE})",
            "share": ENGINE_RESOURCE_SHARE,
            "engines_fit": limits[bound],
            "bound_by": bound,
        }
    return {
        "checked": False,
        "reason": f"no synthesis of this engine configuration in constraints/{RESOURCES_FILE} "
        "(tandem synth hpu --json, then benchmarks/hpu_resources_data.py)",
    }


def card_kv_bandwidth(
    params: HpuParams,
    board: Board,
    efficiency: float,
    clock_mhz: float | None = None,
    engines: int | None = None,
) -> dict:
    """The KV bandwidth a card of ``engines`` engines draws, as a fraction of its HBM peak.

    Each engine port reaches one HBM pseudo-channel and moves at most one beat a cycle:
    ``min(beat bytes x clock, pseudo-channel sustained rate)``, the sustained rate being the
    data sheet's per-channel peak times the board's measured ``sustained_fraction`` (refresh,
    page and switch losses of sequential reads); the card's figure is that, summed over every
    port of the engines that run (``engines``, default as many as the HBM ports serve and the
    resources hold, :func:`engine_fit`), at most the card's sustained rate, times the measured
    stream ``efficiency`` (the engine's own port utilization), over the HBM peak. This is the
    figure to compare with a paper's share of HBM bandwidth, not ``efficiency`` alone. It
    assumes every port streams from a pseudo-channel of its own.
    """
    hbm = board.memory[0]
    peak = float(hbm["bandwidth_gb_s"])
    sustained = float(hbm["sustained_fraction"])
    channels = int(hbm["channels"])
    per_channel = peak * sustained / channels
    fit = engine_fit(params, board)
    limit, limited_by = max(1, channels // params.read_ports), "HBM ports"
    if fit["checked"] and fit["engines_fit"] < limit:
        limit, limited_by = max(1, fit["engines_fit"]), fit["bound_by"].upper()
    if engines is None:
        engines = limit
    else:
        limited_by = "given"
    timing = engine_clock(params, board, clock_mhz)
    clock, clock_source = timing["clock_mhz"], timing["clock_source"]
    port_gb_s = min(params.beat_bytes * clock * 1e6 / 1e9, per_channel)
    ports_gb_s = engines * params.read_ports * port_gb_s
    # More ports than pseudo-channels share them: the card draws at most the sustained rate.
    card_gb_s = min(ports_gb_s, peak * sustained) * efficiency
    return {
        "engines": engines,
        "engines_limited_by": limited_by,
        "resources_checked": fit["checked"],
        "clock_mhz": clock,
        "clock_source": clock_source,
        "port_gb_s": port_gb_s,
        "port_limited_by": "pseudo-channel" if port_gb_s == per_channel else "port width x clock",
        "card_limited_by": "HBM sustained rate"
        if ports_gb_s >= peak * sustained
        else "engine ports",
        "stream_efficiency": efficiency,
        "sustained_fraction": sustained,
        "card_gb_s": card_gb_s,
        "hbm_gb_s": peak,
        "hbm_fraction": card_gb_s / peak,
    }


def hpu_params_for_model(
    model: ModelShape, max_seq_len: int, kv_bits: int | None = None, **overrides
) -> HpuParams:
    """The measured reference configuration with the model's head_dim and GQA group
    (:meth:`HpuParams.for_model`), in ``kv_bits``' KV format (default :class:`HpuParams`'s),
    with the lanes that fill the reference's ports: the stream efficiency is a property of
    beats, not of their format."""
    kv_bits = HpuParams().kv_bits if kv_bits is None else kv_bits
    base = load_efficiency().params
    try:
        return HpuParams.for_model(
            model, kv_bits=kv_bits, base=base, max_seq_len=max_seq_len, **overrides
        )
    except (ValueError, TypeError) as exc:
        raise UserError(f"hpu engine for model {model.name}: {exc}") from None


#: Parameters the performance model may choose per card (the port width and the lanes that
#: fill it, and whether the scaling products take DSP48E2s or LUTs: the LUTs they take in
#: fabric can cost engines where LUTs bound them); every other parameter is the reference
#: configuration's.
CHOSEN_PARAMS = ("lanes", "mem_data_bits", "scaling_multipliers")


def _synth_family(board_name: str | None) -> str | None:
    """The yosys family a board's syntheses map to (``xcup`` where yosys has none)."""
    try:
        return load_board(board_name).yosys_family or "xcup"
    except (UserError, TypeError):
        return None


def best_engine(reference: HpuParams, board: Board, clock_mhz: float | None = None) -> dict:
    """The engine configuration that draws the most KV bandwidth from ``board``.

    The candidates are the stored syntheses for ``board``'s yosys family (:data:`RESOURCES_FILE`;
    the U55C's serve the U280, the same UltraScale+ mapping as ``tandem synth`` uses) that
    differ from ``reference`` only in :data:`CHOSEN_PARAMS` (so the same head, GQA group, KV
    format and number formats), each with as many engines as fit and its own timing estimate,
    or all at ``clock_mhz`` when given (:func:`card_kv_bandwidth` at stream efficiency 1, the
    same factor for all). Returns
    ``{"params", "choice", "candidates"}``: the winner (``reference`` itself where no
    synthesis matches), why, and every candidate's engines, clock and card bandwidth.
    """
    defaults = HpuParams().to_dict()
    wanted = {
        k: v for k, v in reference.to_dict().items() if k not in (*CHOSEN_PARAMS, "max_seq_len")
    }
    candidates = []
    for entry in load_engine_resources():
        stored = {**defaults, **entry["params"]}
        if _synth_family(entry.get("board")) != _synth_family(board.name):
            continue
        if {k: v for k, v in stored.items() if k in wanted} != wanted:
            continue
        params = reference.replace(**{k: stored[k] for k in CHOSEN_PARAMS})
        card = card_kv_bandwidth(params, board, 1.0, clock_mhz)
        candidates.append(
            {
                "params": params,
                "lanes": params.lanes,
                "mem_data_bits": params.mem_data_bits,
                "scaling_multipliers": params.scaling_multipliers,
                "engines": card["engines"],
                "engines_limited_by": card["engines_limited_by"],
                "clock_mhz": card["clock_mhz"],
                "card_gb_s": card["card_gb_s"],
            }
        )
    if not candidates:
        return {
            "params": reference,
            "choice": f"the reference configuration: no synthesis for {board.name} differs from it "
            f"only in {', '.join(CHOSEN_PARAMS)}",
            "candidates": [],
        }
    best = max(candidates, key=lambda c: c["card_gb_s"])
    return {
        "params": best["params"],
        "choice": f"the most card KV bandwidth of {len(candidates)} synthesized "
        f"configuration{'s' if len(candidates) > 1 else ''} of this head and format for "
        f"{board.name} ({', '.join(CHOSEN_PARAMS)} chosen)",
        "candidates": [{k: v for k, v in c.items() if k != "params"} for c in candidates],
    }


def hpu_call_cycles(
    params: HpuParams,
    contexts,
    *,
    latency: int = 2,
    efficiency: StreamEfficiency | None = None,
    append=True,
    partial=False,
    memory: Memory | None = None,
) -> float:
    """Predicted cycles of one call (a batch of requests) on one engine fed by its own ports.

    :func:`tandem.host.hpu.cycles.batch_cycles` with the measured memory at ``latency``
    (:meth:`Memory.measured` of ``efficiency``, default :func:`load_efficiency`) unless
    ``memory`` is given: ``fill + sum max(R, D, O) + sum R * (1 / e(sum R) - 1)`` over the
    requests of sequences ``contexts`` long (every beat, the descriptor or result stream where
    it is longer than the reads, and the read-latency stalls of the call, which streams as one
    request of all its beats; see :mod:`tandem.host.system.perf`).
    """
    if memory is None:
        memory = Memory.measured(efficiency or load_efficiency(), latency)
    return batch_cycles(params, contexts, append=append, partial=partial, memory=memory)


#: Card memory the performance model assumes where none is given: more than any placement
#: takes, so that only ``max_seq_len`` splits sequences.
UNBOUNDED_BYTES = 1 << 62


def place_sequences(
    params: HpuParams,
    capacities,
    cards: int,
    *,
    heads: int = 1,
    card_bytes: int | None = None,
    max_slice_tokens: int | None = None,
) -> list[list[Slice]]:
    """The slices of each sequence as the runtime places them (:class:`HpuAttention`).

    :func:`tandem.mappings.hpu.placement.place_batch` on ``cards`` empty cards of
    ``card_bytes`` each (default unbounded), ``heads`` KV regions per token (layers x KV
    heads): in order, each sequence goes to the card with the most free memory (ties to the
    lowest index), split into whole pages where one card cannot hold it (memory,
    ``max_seq_len``, ``max_slice_tokens``). Sequences of equal capacity that fit go
    round-robin.
    """
    size = UNBOUNDED_BYTES if card_bytes is None else int(card_bytes)
    return place_batch(
        capacities,
        [CardSpace.empty(size) for _ in range(cards)],
        layout=params.layout,
        heads=heads,
        max_seq_len=params.max_seq_len,
        max_slice_tokens=max_slice_tokens,
    )


#: The KV placements a card's allocator runs (:class:`~tandem.host.hpu.device.HpuDevice`).
KV_PLACEMENTS = ("channels", "contiguous")


def call_channel_rates(
    params: HpuParams,
    board: Board,
    placement: list[list[Slice]],
    subbatches: list[range],
    *,
    layers: int,
    kv_heads: int,
    policy: str,
    port_gb_s: float,
    ports: int,
) -> list[dict]:
    """The KV bandwidth each sub-batch's calls draw from the card that holds most of them,
    from the pseudo-channels its regions really lie in.

    Each card's regions are allocated as its allocator does (``policy``: ``"channels"``,
    :class:`~tandem.mappings.hpu.channels.ChannelSpace`; ``"contiguous"``, a sequence's
    regions one after another), slices in sequence order, on the board's channel geometry.
    With ``"channels"`` and two read ports, the regions are stored as the ``hpu-card`` stores
    them where its engines split the channels evenly (``ports`` a divisor of the channel
    count): the split layout, K spans in each engine's K channels and V spans
    ``value_offset`` above, in its V channels
    (:attr:`~tandem.host.hpu.card.HpuCardParams.card_value_offset`); otherwise K and V of a
    page share a channel, as one ``hpu`` stores them.
    A call (one sub-batch, one layer) reads its regions' bytes in proportion to their sizes
    (equal contexts fill every region alike); it takes ``max(busiest channel's bytes /
    channel rate, bytes / (ports x port rate))`` (a channel delivers its sustained rate, a port
    its beat rate), so its bandwidth is ``bytes`` over that. Layers run one after another, so
    a sub-batch's figure is the harmonic mean over layers.

    Returns, per sub-batch: ``gb_s`` (that bandwidth), ``touched`` (channels the busiest card's
    calls read, mean over layers), ``busiest_over_mean`` (its busiest channel's bytes over
    the mean, mean over layers) and ``split`` (whether K and V lie in channels of their own).
    """
    from tandem.mappings.hpu.channels import ChannelGeometry, ChannelSpace
    from tandem.mappings.hpu.kv_layout import KvLayout

    hbm = board.memory[0]
    channels = int(hbm["channels"])
    geometry = ChannelGeometry(channels, round(float(hbm["capacity_gib"]) * GIB) // channels)
    split = policy == "channels" and params.read_ports == 2 and channels % ports == 0
    value_offset = channels // ports * geometry.channel_bytes if split else 0
    layout = KvLayout(params.head_dim, params.kv_bits // 8, value_offset)
    channel_gb_s = float(hbm["bandwidth_gb_s"]) * float(hbm["sustained_fraction"])
    channel_gb_s /= channels
    heads = layers * kv_heads
    bases: dict[tuple[int, int], np.ndarray] = {}  # (sequence, slice) -> [heads] region bases
    sizes: dict[tuple[int, int], int] = {}
    spaces: dict[int, ChannelSpace] = {}
    offsets: dict[int, int] = {}
    for b, slices in enumerate(placement):
        for i, piece in enumerate(slices):
            region = layout.region_bytes(piece.tokens)
            if policy == "channels":
                space = spaces.setdefault(piece.card, ChannelSpace(geometry, value_offset))
                try:
                    bases[b, i] = space.take(region, heads, kv_heads)
                except ValueError:
                    raise UserError(
                        f"the KV regions of {b + 1} sequences do not fit whole inside the "
                        f"{board.name}'s pseudo-channels (--placement contiguous packs them)"
                    ) from None
            else:
                start = offsets.get(piece.card, 0)
                bases[b, i] = start + region * np.arange(heads, dtype=np.int64)
                offsets[piece.card] = start + region * heads
            sizes[b, i] = region
    out = []
    for members in subbatches:
        per_card: dict[int, list[tuple[int, int]]] = {}
        for b in members:
            for i, piece in enumerate(placement[b]):
                per_card.setdefault(piece.card, []).append((b, i))
        card = max(per_card, key=lambda c: sum(sizes[k] for k in per_card[c]))
        keys = per_card[card]
        seconds_per_gb, touched, peaks = [], [], []
        for layer in range(layers):
            window = slice(layer * kv_heads, (layer + 1) * kv_heads)
            starts = np.concatenate([bases[k][window] for k in keys])
            spans = np.concatenate([np.full(kv_heads, sizes[k]) for k in keys])
            if split:  # each region's V span, as many bytes value_offset above its K span
                starts, spans = np.concatenate([starts, starts + value_offset]), np.tile(spans, 2)
            loads = geometry.span_bytes(starts, spans)
            share = loads.max() / loads.sum()
            seconds_per_gb.append(max(share / channel_gb_s, 1 / (ports * port_gb_s)))
            touched.append(np.count_nonzero(loads))
            peaks.append(share * channels)
        out.append(
            {
                "gb_s": float(layers / sum(seconds_per_gb)),
                "touched": float(np.mean(touched)),
                "busiest_over_mean": float(np.mean(peaks)),
                "split": split,
            }
        )
    return out


def step_requests(contexts, placement: list[list[Slice]], members) -> dict[int, list[tuple]]:
    """``{card: [(length, append, partial)]}``: the requests of one (sub-batch, layer, KV head).

    As :meth:`HpuAttention.attend` sends them: every slice that starts at or before the new
    token's position ``t - 1`` gets a request, in partial mode when there are several; the
    slice holding the position appends the new token (``length = t - first``), the others
    (full) read their ``tokens``.
    """
    calls: dict[int, list[tuple]] = {}
    for b in members:
        position = int(contexts[b]) - 1
        active = [s for s in placement[b] if s.first <= position]
        partial = len(active) > 1
        for s in active:
            if s.holds(position):
                request = (position - s.first + 1, True, partial)
            else:
                request = (s.tokens, False, partial)
            calls.setdefault(s.card, []).append(request)
    return calls


def hpu_step_cycles(
    model: ModelShape,
    params: HpuParams,
    contexts,
    *,
    cards: int = 1,
    capacities=None,
    latency: int = 2,
    efficiency: StreamEfficiency | None = None,
    card_bytes: int | None = None,
    max_slice_tokens: int | None = None,
    memory: Memory | None = None,
) -> dict[str, float]:
    """Predicted accelerator cycles per card of one decode step of :mod:`tandem.host.system.decode`.

    Parameters
    ----------
    model, params
        The model's shape and the engine's parameters.
    contexts
        Each sequence's length including the token this step appends.
    cards
        HPU cards; sequences are placed as :func:`place_sequences` does.
    capacities
        Tokens reserved per sequence (prompt + new tokens; default ``contexts``), which
        decide the placement.
    latency
        Read latency (cycles) of the measured efficiency (the runtime's memory answers in 2).
    card_bytes, max_slice_tokens
        Each card's memory (default unbounded) and the runtime's cap on a slice, for the
        placement.
    memory
        The memory model (default: the measured one at ``latency``;
        :data:`~tandem.host.hpu.cycles.COSIM_MEMORY` gives the golden backend's cycles).

    Returns
    -------
    dict
        ``{"hpu<i>": cycles}`` for the cards that got work: as the runtime does, two
        sub-batches (the first ``ceil(B/2)`` sequences and the rest; one when B = 1), per
        sub-batch and layer one call per card holding sequences of it (:func:`step_requests`),
        ``Hkv`` requests per slice; each call :func:`hpu_call_cycles`.
    """
    contexts = [int(c) for c in contexts]
    batch = len(contexts)
    placement = place_sequences(
        params,
        capacities or contexts,
        cards,
        heads=model.layers * model.kv_heads,
        card_bytes=card_bytes,
        max_slice_tokens=max_slice_tokens,
    )
    if memory is None:
        memory = Memory.measured(efficiency or load_efficiency(), latency)
    half = (batch + 1) // 2
    subbatches = [list(range(half)), list(range(half, batch))] if batch > 1 else [[0]]
    cycles: dict[str, float] = {}
    for members in subbatches:
        for card, requests in sorted(step_requests(contexts, placement, members).items()):
            lengths, appends, partials = (np.repeat(x, model.kv_heads) for x in zip(*requests))
            per_layer = hpu_call_cycles(
                params, lengths, append=appends, partial=partials, memory=memory
            )
            name = f"hpu{card}"
            cycles[name] = cycles.get(name, 0.0) + model.layers * per_layer
    return cycles
