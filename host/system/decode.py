"""Heterogeneous decode: a Llama decoder on the GPU with every decode attention on HPU cards.

The split of the HPU paper (Rhee et al., arXiv 2504.16112):

* the GPU side (torch; CUDA when present, else CPU) runs the embeddings, RMSNorm, the q/k/v
  and output projections, RoPE, the SwiGLU MLP, the LM head and sampling, and the whole
  prefill with torch attention (:class:`Llama`);
* after prefill the KV cache moves to the HPU cards, and every decode-step attention of every
  layer runs there (:class:`HpuAttention`): per sequence and KV head the host sends the
  ``G = n_heads / n_kv_heads`` queries and the new token's k and v; the card appends them and
  returns the attention output.

Quantization (what :mod:`tandem.host.hpu` documents): K is smoothed per channel with factors
``s`` (:func:`~tandem.host.hpu.key_smoothing` of the keys the prefill produced, once per
sequence, layer and KV head), then K / s and V go to ``kv_bits`` integers (int16 by default, int8
with ``kv_bits=8``) with one binary16 scale per token; the
queries ``q * s`` go to int16 with one scale per vector, folded into the score scale
(:func:`~tandem.host.hpu.score_scale`). Scores are unchanged by the smoothing.

Placement: a sequence reserves its whole capacity (prompt + new tokens) for every (layer, KV
head) when it moves to the cards; it goes to the card with the most free memory, and if no
card can hold it, it is split into slices (whole pages) over several cards. A split sequence's
attention runs on every card holding a slice in partial mode, and the host merges the
``(m, l, o)`` results (:func:`~tandem.host.hpu.merge_partials`).

Sub-batch ping-pong: the batch is split into two sub-batches; while the cards attend for one,
the GPU runs the MLP and the next layer's projections of the other. This module runs
single-threaded, so the overlap is a schedule: :func:`schedule` places the measured GPU work
and the cards' cycles (at ``clock_mhz``) on a timeline, and :func:`chrome_trace` writes it for
Perfetto / ``chrome://tracing``.

The pure-torch reference is the same runtime with :class:`TorchAttention` (float32 KV cache,
``scaled_dot_product_attention``), so the two differ only in where attention runs.
"""

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tandem.host.common.errors import CapacityError
from tandem.host.hpu import key_smoothing, merge_partials, quantize_rows, score_scale
from tandem.host.hpu.device import AttendBatch, HpuDevice, SeqAlloc
from tandem.host.hpu.params import KEY_SMOOTHING_STRENGTH
from tandem.host.system.llama import Llama, default_device, import_torch
from tandem.host.system.model import LlamaConfig
from tandem.mappings.hpu.placement import NoRoomError, place

from tandem.errors import UserError

__all__ = [
    "DecodeResult",
    "Decoder",
    "HpuAttention",
    "Llama",
    "TorchAttention",
    "chrome_trace",
    "default_device",
    "schedule",
]


# torch and the model itself live in llama.py; decode keeps their old names
_torch = import_torch


class TorchAttention:
    """Reference decode attention: float32 KV cache and ``scaled_dot_product_attention``."""

    name = "torch"

    def __init__(self, config: LlamaConfig):
        self.config = config
        self.k: dict[int, list] = {}
        self.v: dict[int, list] = {}
        self.last_cycles: dict[str, int] = {}

    def start(self, seq: int, keys, values, capacity: int) -> None:
        """Take over sequence ``seq``'s prefill cache (``capacity`` is unused here)."""
        self.k[seq], self.v[seq] = list(keys), list(values)

    def attend(self, layer: int, seqs: list[int], q, k_new, v_new):
        """Append ``k_new``/``v_new`` [n, Hkv, d] and attend ``q`` [n, Hq, d]: [n, Hq, d]."""
        torch = _torch()
        g = self.config.gqa_group
        out = []
        window = self.config.attention_window(layer) or 0  # 0: k[:, -0:] is every key
        for i, s in enumerate(seqs):
            self.k[s][layer] = torch.cat([self.k[s][layer], k_new[i][:, None]], dim=1)
            self.v[s][layer] = torch.cat([self.v[s][layer], v_new[i][:, None]], dim=1)
            k, v = self.k[s][layer][:, -window:], self.v[s][layer][:, -window:]
            o = torch.nn.functional.scaled_dot_product_attention(
                q[i][:, None], k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
            )
            out.append(o[:, 0])
        self.last_cycles = {}
        return torch.stack(out)

    def finish(self, seq: int) -> None:
        self.k.pop(seq, None)
        self.v.pop(seq, None)

    def close(self) -> None:
        pass


@dataclass
class _Slice:
    device: int
    alloc: SeqAlloc
    first: int  # global position of the slice's first token
    capacity: int

    def holds(self, position: int) -> bool:
        return self.first <= position < self.first + self.capacity


@dataclass
class _SeqState:
    slices: list[_Slice]
    length: int
    factors: np.ndarray  # [n_layers, n_kv_heads, head_dim] key smoothing


class HpuAttention:
    """Decode attention on one or more :class:`~tandem.host.hpu.device.HpuDevice` cards.

    Parameters
    ----------
    config
        The model's shapes.
    devices
        The cards (same :class:`HpuParams`, head_dim and gqa_group matching ``config``).
    smoothing
        Per-channel key smoothing before quantization (default on).
    smoothing_strength
        Its migration strength (:func:`~tandem.host.hpu.params.key_smoothing`; default
        :data:`~tandem.host.hpu.params.KEY_SMOOTHING_STRENGTH`).
    max_slice_tokens
        Cap on the tokens one card holds of a sequence (default: what fits); a smaller value
        forces sequences to split across cards.
    """

    name = "hpu"

    def __init__(
        self,
        config: LlamaConfig,
        devices: list[HpuDevice],
        *,
        smoothing: bool = True,
        smoothing_strength: float = KEY_SMOOTHING_STRENGTH,
        max_slice_tokens: int | None = None,
    ):
        if not devices:
            raise ValueError("HpuAttention needs at least one device")
        p = devices[0].params
        if p.head_dim != config.head_dim or p.gqa_group != config.gqa_group:
            raise ValueError(
                f"engine head_dim {p.head_dim} / gqa_group {p.gqa_group} does not match the "
                f"model's {config.head_dim} / {config.gqa_group}"
            )
        self.config = config
        self.devices = devices
        self.params = p
        self.smoothing = smoothing
        if not 0.0 <= smoothing_strength <= 1.0:
            raise ValueError(f"smoothing_strength must be in 0..1, not {smoothing_strength}")
        self.smoothing_strength = smoothing_strength
        self.max_slice_tokens = max_slice_tokens
        self.heads = config.n_layers * config.n_kv_heads
        self.seqs: dict[int, _SeqState] = {}
        #: Cycles per device name of the last :meth:`attend`.
        self.last_cycles: dict[str, int] = {}

    def _place(self, capacity: int) -> list[_Slice]:
        """Allocate the slices :func:`~tandem.mappings.hpu.placement.place` decides."""
        # The cards' free memory as their allocators keep it; one call reads one layer's
        # KV heads of each sequence, the group a channel-placing card spreads.
        space = [d.card_space() for d in self.devices]
        group = self.config.n_kv_heads
        try:
            decided = place(
                capacity,
                space,
                layout=self.params.layout,
                heads=self.heads,
                max_seq_len=self.params.max_seq_len,
                max_slice_tokens=self.max_slice_tokens,
                group=group,
            )
        except NoRoomError as exc:
            raise CapacityError(str(exc)) from None
        slices = []
        try:
            for s in decided:
                alloc = self.devices[s.card].allocate(s.tokens, self.heads, group=group)
                slices.append(_Slice(s.card, alloc, s.first, s.tokens))
        except CapacityError:
            for s in slices:
                self.devices[s.device].free(s.alloc)
            raise
        return slices

    def start(self, seq: int, keys, values, capacity: int, factors=None) -> None:
        """Move sequence ``seq``'s prefill cache (per layer [Hkv, T, d]) onto the cards.

        ``factors`` [n_layers, Hkv, d] are static key smoothing factors (a compiled program's,
        from calibration text); by default they come from the prefill keys. ``T`` may be 0:
        the cache then fills as :meth:`attend` appends.
        """
        c = self.config
        length = int(keys[0].shape[1])
        if capacity < length + 1:
            raise ValueError(f"capacity {capacity} leaves no room after {length} prompt tokens")
        k_all = np.stack([k.detach().cpu().double().numpy() for k in keys])  # [L, Hkv, T, d]
        v_all = np.stack([v.detach().cpu().double().numpy() for v in values])
        if factors is not None:
            factors = np.asarray(factors, dtype=np.float64)
            shape = (c.n_layers, c.n_kv_heads, c.head_dim)
            if factors.shape != shape or not (np.isfinite(factors) & (factors > 0)).all():
                raise ValueError(f"factors must be {shape} finite positive values")
        elif length == 0 and self.smoothing:
            raise ValueError("an empty prefill needs static key smoothing factors")
        elif self.smoothing:
            strength = self.smoothing_strength
            factors = np.stack(
                [[key_smoothing(k, strength=strength) for k in layer] for layer in k_all]
            )
        else:
            factors = np.ones((c.n_layers, c.n_kv_heads, c.head_dim))
        bits = self.params.kv_bits
        ki, ks = quantize_rows(k_all / factors[:, :, None, :], bits)
        vi, vs = quantize_rows(v_all, bits)
        slices = self._place(capacity)
        windows = [c.attention_window(layer) for layer in range(c.n_layers)]
        if len(slices) > 1 and any(w is not None and w < capacity for w in windows):
            for s in slices:
                self.devices[s.device].free(s.alloc)
            raise ValueError(
                "a sequence whose sliding-window layers keep a ring of their window must lie "
                f"on one card, not {len(slices)} slices"
            )
        for s in slices:
            dev = self.devices[s.device]
            lo, hi = s.first, min(s.first + s.capacity, length)
            for layer in range(c.n_layers):
                rows = np.arange(lo, hi)
                window = windows[layer]
                if window is not None and len(rows) > window:
                    # Only the last `window` positions, position p in slot p % window (the
                    # ring attend() keeps): attention does not depend on the keys' order.
                    rows = rows[-window:][np.argsort(rows[-window:] % window)]
                for kv in range(c.n_kv_heads):
                    head = layer * c.n_kv_heads + kv
                    if hi > lo:
                        dev.write_kv(
                            s.alloc,
                            head,
                            ki[layer, kv, rows],
                            ks[layer, kv, rows],
                            vi[layer, kv, rows],
                            vs[layer, kv, rows],
                        )
        self.seqs[seq] = _SeqState(slices, length, factors)

    def attend(self, layer: int, seqs: list[int], q, k_new, v_new):
        """Attention of one layer for ``seqs``: one batch of descriptors per card.

        ``q`` [n, Hq, d], ``k_new``/``v_new`` [n, Hkv, d] (torch); returns [n, Hq, d].
        """
        torch = _torch()
        c, p = self.config, self.params
        g, n, hkv = c.gqa_group, len(seqs), c.n_kv_heads
        qn = q.detach().cpu().double().numpy().reshape(n, hkv, g, c.head_dim)
        kv_new = torch.stack([k_new, v_new]).detach().cpu().double().numpy()  # [2, n, Hkv, d]
        factors = np.stack([self.seqs[s].factors[layer] for s in seqs])  # [n, Hkv, d]
        qi, qs = quantize_rows(qn * factors[:, :, None, :], p.q_bits)
        qc = score_scale(qs, c.head_dim)
        kv_new[0] /= factors
        (ki, vi), (ks, vs) = quantize_rows(kv_new, p.kv_bits)
        # Every (sequence, slice) the new token's attention covers, grouped by card: one call
        # per KV head of each, the token appended where its slice holds the new position.
        # A sliding-window layer whose window is full keeps a ring (one slice, see start):
        # the host writes the new token over the oldest one, in slot position % window, and
        # the card attends over the whole ring without appending.
        window = c.attention_window(layer)
        jobs: dict[int, list[tuple[int, _Slice, bool, bool]]] = {}
        for i, s in enumerate(seqs):
            state = self.seqs[s]
            position = state.length  # the new token's position
            active = [sl for sl in state.slices if sl.first <= position]
            ring = window is not None and position >= window
            for sl in active:
                if ring:
                    for kv in range(hkv):
                        self.devices[sl.device].write_kv(
                            sl.alloc,
                            layer * hkv + kv,
                            ki[i, kv][None],
                            ks[i, kv][None],
                            vi[i, kv][None],
                            vs[i, kv][None],
                            start=position % window,
                        )
                entry = (i, sl, sl.holds(position) and not ring, len(active) > 1)
                jobs.setdefault(sl.device, []).append(entry)
        out = np.empty((n, hkv, g, c.head_dim))
        parts: dict[tuple[int, int], list] = {}  # (sequence, KV head) -> partial results
        self.last_cycles = {}
        started = []  # every card's batch starts before any is waited for: on the RTL
        # backend each card simulates in its own process, so the cards work side by side
        for d in sorted(jobs):
            entries = jobs[d]
            rows = np.repeat([e[0] for e in entries], hkv)  # the calls' sequence indices
            kv = np.tile(np.arange(hkv), len(entries))
            partial = np.repeat([e[3] for e in entries], hkv)
            batch = AttendBatch(
                seqs=[e[1].alloc for e in entries for _ in range(hkv)],
                heads=layer * hkv + kv,
                q=qi[rows, kv],
                score_scale=qc[rows, kv],
                partial=partial,
                append=np.repeat([e[2] for e in entries], hkv),
                new_k=ki[rows, kv],
                new_k_scale=ks[rows, kv],
                new_v=vi[rows, kv],
                new_v_scale=vs[rows, kv],
            )
            try:
                self.devices[d].submit_batch(batch)
            except BaseException:
                for dev, *_ in started:  # no reply may be left behind
                    with contextlib.suppress(Exception):
                        dev.collect_batch()
                raise
            started.append((self.devices[d], rows, kv, partial))
        error = None
        for dev, rows, kv, partial in started:
            try:
                results = dev.collect_batch()
            except Exception as exc:  # collect the other cards' batches, then raise the first
                error = error or exc
                continue
            self.last_cycles[dev.name] = dev.last_cycles
            full = ~partial
            if full.any():
                out[rows[full], kv[full]] = results.real(p)[full]
            for j in np.flatnonzero(partial):
                parts.setdefault((int(rows[j]), int(kv[j])), []).append(results[j])
        if error is not None:
            raise error
        for (i, head), got in parts.items():
            out[i, head] = merge_partials(p, got)
        if layer == c.n_layers - 1:
            for s in seqs:
                self.seqs[s].length += 1
        return torch.as_tensor(out.reshape(n, c.n_heads, c.head_dim), dtype=torch.float32).to(
            q.device
        )

    def finish(self, seq: int) -> None:
        """Free sequence ``seq``'s memory on every card."""
        state = self.seqs.pop(seq, None)
        if state is not None:
            for s in state.slices:
                self.devices[s.device].free(s.alloc)

    def close(self) -> None:
        for dev in self.devices:
            dev.close()


# --- the runtime ---------------------------------------------------------------------------
@dataclass
class DecodeResult:
    """Outcome of :meth:`Decoder.generate`.

    ``tokens[b]`` are sequence b's generated ids (the first from the prefill's logits);
    ``logits`` [steps, batch, vocab] of the decode steps when kept; ``tasks`` the work of every
    (step, sub-batch, layer) for :func:`schedule`; ``wall_s`` the decode loop's wall time;
    ``step_cycles`` per decode step the accelerator cycles per card.
    """

    tokens: list[list[int]]
    logits: np.ndarray | None
    tasks: list[dict]
    subbatches: list[list[int]]
    wall_s: float
    prefill_s: float
    step_cycles: list[dict[str, int]] = field(default_factory=list)

    @property
    def decode_tokens(self) -> int:
        """Tokens produced by decode steps (all sequences)."""
        return sum(max(len(t) - 1, 0) for t in self.tokens)


class Decoder:
    """Batched greedy / temperature decoding with attention on ``attention``.

    Parameters
    ----------
    model
        The GPU side (:class:`Llama`).
    attention
        :class:`HpuAttention` or :class:`TorchAttention`.
    """

    def __init__(self, model: Llama, attention):
        self.model = model
        self.attention = attention

    def _timed(self, fn, *args):
        self.model.sync()
        start = time.perf_counter()
        out = fn(*args)
        self.model.sync()
        return out, time.perf_counter() - start

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        seed: int = 0,
        forced: list[list[int]] | None = None,
        keep_logits: bool = False,
        stop_ids: tuple[int, ...] = (),
    ) -> DecodeResult:
        """Generate ``max_new_tokens`` per prompt.

        ``forced`` (teacher forcing) feeds the given tokens instead of the sampled ones, so
        two runs see the same inputs and their logits compare step by step. Sequences that
        produce a ``stop_ids`` token stop early (not with ``forced``).
        """
        torch = _torch()
        m, c = self.model, self.model.config
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, not {max_new_tokens}")
        gen = torch.Generator(device="cpu").manual_seed(seed)

        def pick(logits_row, b, step):
            if temperature > 0:
                probs = torch.softmax(logits_row.float().cpu() / temperature, -1)
                token = int(torch.multinomial(probs, 1, generator=gen))
            else:
                token = int(logits_row.argmax())
            return forced[b][step] if forced is not None else token

        batch = len(prompts)
        tokens: list[list[int]] = [[] for _ in range(batch)]
        start = time.perf_counter()
        with torch.no_grad():
            for b, prompt in enumerate(prompts):
                logits, keys, values = m.prefill(prompt)
                tokens[b].append(pick(logits, b, 0))
                self.attention.start(b, keys, values, len(prompt) + max_new_tokens)
            prefill_s = time.perf_counter() - start
            half = (batch + 1) // 2
            subbatches = [list(range(half)), list(range(half, batch))] if batch > 1 else [[0]]
            positions = [len(p) for p in prompts]
            live = list(range(batch))
            tasks: list[dict] = []
            kept = []
            step_cycles = []
            loop_start = time.perf_counter()
            for step in range(1, max_new_tokens):
                if not live:
                    break
                cycles: dict[str, int] = {}
                step_logits = np.full((batch, c.vocab), np.nan, dtype=np.float32)
                for sb, members in enumerate(subbatches):
                    seqs = [b for b in members if b in live]
                    if not seqs:
                        continue
                    ids = [tokens[b][-1] for b in seqs]
                    pos = torch.as_tensor([positions[b] for b in seqs], device=m.device)
                    x, t = self._timed(m.embed, ids)
                    gpu_s = t
                    for layer in range(c.n_layers):
                        (q, k, v), t = self._timed(m.attn_in, layer, x, pos)
                        tasks.append(_task(step, sb, layer, "gpu", gpu_s + t, len(seqs)))
                        o = self.attention.attend(layer, seqs, q, k, v)
                        layer_cycles = dict(self.attention.last_cycles)
                        for name, n in layer_cycles.items():
                            cycles[name] = cycles.get(name, 0) + n
                        tasks.append(
                            _task(step, sb, layer, "hpu", 0.0, len(seqs), cycles=layer_cycles)
                        )
                        x, gpu_s = self._timed(m.attn_out, layer, x, o)
                    logits, t = self._timed(m.logits, x)
                    tasks.append(_task(step, sb, c.n_layers, "gpu", gpu_s + t, len(seqs)))
                    for i, b in enumerate(seqs):
                        tokens[b].append(pick(logits[i], b, step))
                        positions[b] += 1
                        step_logits[b] = logits[i].float().cpu().numpy()
                step_cycles.append(cycles)
                if keep_logits:
                    kept.append(step_logits)
                if forced is None and stop_ids:
                    for b in list(live):
                        if tokens[b][-1] in stop_ids:
                            live.remove(b)
                            self.attention.finish(b)
            wall_s = time.perf_counter() - loop_start
            for b in range(batch):
                self.attention.finish(b)
        return DecodeResult(
            tokens=tokens,
            logits=np.stack(kept) if kept else None,
            tasks=tasks,
            subbatches=subbatches,
            wall_s=wall_s,
            prefill_s=prefill_s,
            step_cycles=step_cycles,
        )


def _task(step, sb, layer, kind, seconds, sequences, cycles=None) -> dict:
    return {
        "step": step,
        "subbatch": sb,
        "layer": layer,
        "kind": kind,
        "seconds": seconds,
        "sequences": sequences,
        "cycles": cycles or {},
    }


# --- timeline ------------------------------------------------------------------------------
def schedule(tasks: list[dict], clock_mhz: float = 200.0, overlap: bool = True) -> list[dict]:
    """Place ``tasks`` on a GPU track and one track per card; return timed events.

    A sub-batch's tasks form a chain (GPU work of layer l, attention of layer l on its cards,
    GPU work of layer l + 1, ...). Each track runs its tasks in (step, layer, sub-batch) order
    and a task starts when its track is free and its predecessor in the chain is done, so
    the GPU works on one sub-batch while the cards attend for the other (ping-pong).
    ``overlap=False`` runs everything back to back instead (the no-ping-pong baseline). GPU
    durations are the measured ones; a card's are its cycles at ``clock_mhz``.

    Each event: ``track``, ``start_s``, ``end_s``, ``step``, ``subbatch``, ``layer``, ``kind``.
    """
    order = sorted(
        range(len(tasks)),
        key=lambda i: (
            tasks[i]["step"],
            tasks[i]["layer"],
            tasks[i]["kind"] == "hpu",
            tasks[i]["subbatch"],
        ),
    )
    free: dict[str, float] = {}
    chain: dict[tuple[int, int], float] = {}
    clock = 0.0
    events = []
    for i in order:
        t = tasks[i]
        key = (t["subbatch"], t["step"])
        previous = chain.get(key, chain.get((t["subbatch"], t["step"] - 1), 0.0))
        if t["kind"] == "gpu":
            work = {"gpu": t["seconds"]}
        else:
            work = {name: n / (clock_mhz * 1e6) for name, n in t["cycles"].items()} or {"hpu": 0}
        end = previous
        for track, seconds in work.items():
            # Without overlap every task waits for everything before it (one thing at a time).
            begin = max(free.get(track, 0.0), previous) if overlap else clock
            events.append(
                {
                    "track": track,
                    "start_s": begin,
                    "end_s": begin + seconds,
                    **{k: t[k] for k in ("step", "subbatch", "layer", "kind", "sequences")},
                }
            )
            free[track] = begin + seconds
            end = max(end, begin + seconds)
        chain[key] = end
        clock = max(clock, end)
    return events


def chrome_trace(events: list[dict], path: str | Path, metadata: dict | None = None) -> Path:
    """Write ``events`` (from :func:`schedule`) as Chrome trace JSON (Perfetto opens it)."""
    tracks = sorted({e["track"] for e in events}, key=lambda t: (t != "gpu", t))
    tid = {t: i for i, t in enumerate(tracks)}
    out = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "tandem cosim decode"}}]
    for track, i in tid.items():
        label = "GPU" if track == "gpu" else f"HPU {track}"
        out.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": label}})
    for e in events:
        what = "attention" if e["kind"] == "hpu" else "gpu"
        out.append(
            {
                "name": f"sb{e['subbatch']} L{e['layer']} {what}",
                "cat": f"subbatch{e['subbatch']}",
                "ph": "X",
                "pid": 0,
                "tid": tid[e["track"]],
                "ts": round(e["start_s"] * 1e6, 3),
                "dur": round((e["end_s"] - e["start_s"]) * 1e6, 3),
                "args": {"step": e["step"], "sequences": e["sequences"]},
            }
        )
    path = Path(path)
    data = {"traceEvents": out, "displayTimeUnit": "ns", "metadata": metadata or {}}
    path.write_text(json.dumps(data, indent=0) + "\n")
    return path


# --- models by name, and what the cards read --------------------------------------------
#: The random model ``--model tiny`` builds (same code path as the real one, no download).
TINY = LlamaConfig(n_layers=2, dim=128, n_heads=4, n_kv_heads=2, hidden=256, vocab=256)


def load_model_weights(name: str, device=None):
    """``(model, tokenizer, label)`` for ``--model``: a known name, a .gguf path (Llama or
    Gemma 3 architecture), ``tiny`` (a random Llama) or ``tiny-gemma`` (a random Gemma 3 with
    a window of 8 positions)."""
    from tandem.host.system.gemma import TINY_GEMMA, Gemma, load_gemma_gguf, random_gemma
    from tandem.host.system.model import (
        MODELS,
        byte_tokenizer,
        find_model,
        gguf_architecture,
        load_gguf,
        random_llama,
    )

    if name == "tiny":
        return Llama(TINY, random_llama(TINY, 0), device), byte_tokenizer(), "tiny (random)"
    if name == "tiny-gemma":
        model = Gemma(TINY_GEMMA, random_gemma(TINY_GEMMA, 0), device)
        return model, byte_tokenizer(), "tiny-gemma (random)"
    if name in MODELS:
        path = find_model(name)
        if path is None:
            raise UserError(f"model {name!r} is not fetched; run: tandem model fetch {name}")
    else:
        path = Path(name)
    if gguf_architecture(path) == "gemma3":
        config, weights, tokenizer = load_gemma_gguf(path)
        return Gemma(config, weights, device), tokenizer, f"{path.name}"
    config, weights, tokenizer = load_gguf(path)
    return Llama(config, weights, device), tokenizer, f"{path.name}"


def channel_report(devices) -> dict:
    """How evenly the decode read the cards' pseudo-channels: each card's total bytes per
    channel (:attr:`~tandem.host.hpu.device.HpuDevice.total_channel_bytes`), and for the card
    that read the most, its busiest and least channel over the mean and the channels touched."""
    per_card = [np.asarray(d.total_channel_bytes, dtype=np.int64) for d in devices]
    busiest = max(per_card, key=lambda b: int(b.sum()))
    mean = float(busiest.mean()) if busiest.size else 0.0
    return {
        "channels": int(busiest.size),
        "per_card": [b.tolist() for b in per_card],
        "touched": int(np.count_nonzero(busiest)),
        "busiest_over_mean": float(busiest.max() / mean) if mean else 0.0,
        "least_over_mean": float(busiest.min() / mean) if mean else 0.0,
    }


def compare_with_torch(model: Llama, prompts, result: DecodeResult) -> dict:
    """Decode the same tokens with torch attention (teacher forcing) and compare the logits.

    Returns top-1 ``agreement``, ``mean_kl`` (KL(torch || hpu) averaged over steps and
    sequences) and ``max_logit_error`` over the decode steps of ``result`` (which must have
    kept its logits).
    """
    reference = Decoder(model, TorchAttention(model.config)).generate(
        prompts, len(result.tokens[0]), forced=result.tokens, keep_logits=True
    )
    return logit_agreement(reference.logits, result.logits)


def logit_agreement(reference, test) -> dict:
    """Top-1 agreement, mean KL(reference || test) and max |difference| of two logit arrays."""
    ref = np.asarray(reference, dtype=np.float64)
    got = np.asarray(test, dtype=np.float64)
    keep = ~np.isnan(ref).any(-1) & ~np.isnan(got).any(-1)
    ref, got = ref[keep], got[keep]

    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    lr, lg = log_softmax(ref), log_softmax(got)
    kl = (np.exp(lr) * (lr - lg)).sum(-1)
    return {
        "agreement": float((ref.argmax(-1) == got.argmax(-1)).mean()),
        "mean_kl": float(kl.mean()),
        "max_logit_error": float(np.abs(ref - got).max()),
        "positions": len(ref),
    }
