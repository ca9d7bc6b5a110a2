"""Run a compiled program (``tandem compile``) on tandem's devices.

:class:`CompiledModel` reads a compile folder; :class:`ProgramRunner` executes its decode
program and prefill templates instruction by instruction:

- ``MATMUL`` on a :class:`~tandem.host.sparse_dsp.device.SparseMpeDevice` (golden or RTL):
  matrix-vector mode in decode, matrix-matrix mode in prefill; its cycles are counted per op.
- ``ATTEND`` on :class:`~tandem.host.system.decode.HpuAttention` over
  :class:`~tandem.host.hpu.device.HpuDevice` cards, one call per token of the tile so each
  token sees exactly the keys before it (the cards append its key and value).
- The element-wise ops (RMSNorm, (de)quantization, RoPE, SiLU and gate, add) run here on the
  host, in float32 numpy, and are counted as host work (docs/compiler.md says what a hardware
  unit for them would cost).
- The GPU side (torch) does only the token embeddings, the LM head and sampling.
"""

import json
import time
import zipfile
import zlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import NoReturn

import numpy as np
from tandem.host.common import checks
from tandem.host.system.model import LlamaConfig
from tandem.mappings.nm import NMPacked, NMPattern

from tandem.errors import UserError

from . import program as prog
from .compiler import quantize_activations, split_digits
from .isa import UNIT, Op, Unit, decode_program
from .program import BUFFER_NAMES, EMBEDDINGS, HIDDEN_OUT, SPILL

__all__ = ["CompiledModel", "OpStats", "ProgramRunner"]


class ProgramError(UserError, ValueError):
    """A compile folder that cannot be run, or a call the runner cannot take: one line (exit
    status 2 in the CLI; a ``ValueError`` to Python callers)."""


#: Largest values of the card's fields: what the instruction fields hold (8-bit layer, 16-bit
#: rows and columns) and :class:`~tandem.mappings.llm.compiler.CompileOptions`' limits.
_CARD_LIMITS = {
    "n_layers": 255,
    "dim": 65535,
    "n_heads": 65535,
    "n_kv_heads": 65535,
    "head_dim": 65535,
    "hidden": 65535,
    "tile": 32,
    "weight_group": 65536,
}
_MAX_PREFILL = 4095


def column_block(packed: NMPacked, block: int, blocks: int) -> NMPacked:
    """Column block ``block`` of ``blocks`` of ``packed`` (whole N:M groups; scales
    [rows, blocks]) as a matrix of its own with that block's scale per row."""
    rows, cols = packed.shape
    per_block = packed.groups // blocks * packed.pattern.n  # slots per row in one block
    slots = slice(block * per_block, (block + 1) * per_block)
    return NMPacked(
        values=packed.values[:, slots],
        indices=packed.indices[:, slots],
        pattern=packed.pattern,
        shape=(rows, cols // blocks),
        scales=np.ascontiguousarray(packed.scales[:, block]),
    )


class CompiledModel:
    """A ``tandem compile`` output folder: programs, tensor table, packed weights.

    Every file is checked as it is read: the table and the programs must be what the compiler
    writes for the table's card, and every array in ``weights.npz`` must have the shape and
    number format the programs read it in.

    Parameters
    ----------
    directory
        The folder ``tandem compile -o`` wrote.

    Raises
    ------
    ProgramError
        One line naming the folder and the file that is missing, unreadable or not what the
        compiler writes.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        self.table = self._json("program.json")
        self.summary = self._json("summary.json")
        shape, max_prefill = self._card()
        expected = json.loads(json.dumps(prog.program_table(shape, max_prefill)))
        if self.table != expected:
            keys = sorted({*expected, *self.table}, key=str)
            key = next(k for k in keys if self.table.get(k) != expected.get(k))
            self._fail(f"program.json's {key!r} is not what tandem compile writes for its card")
        self.shape = shape
        self.card = self.table["card"]
        self.decode = self._program("decode.bin", prog.decode_program(shape))
        self.prefill = {
            (b["lo"], b["hi"]): self._program(
                b["file"], prog.prefill_template(shape, b["lo"], b["hi"])
            )
            for b in self.table["prefill"].values()
        }
        self.arrays = self._weights()
        self.matrices: dict[int, NMPacked] = {}
        #: The low digit matrices of 16-bit weights (``W = 256 * matrices + matrices_lo``).
        self.matrices_lo: dict[int, NMPacked] = {}
        self.norms: dict[int, np.ndarray] = {}
        shapes = prog.linear_shapes(shape)
        for entry in self.table["tensors"]:
            key = f"blk.{entry.get('layer')}.{entry.get('name')}"
            if entry["kind"] == "matrix":
                wide = (entry["layer"], entry["name"]) in shape.wide_weights
                planes = (("", self.matrices), (".lo", self.matrices_lo))[: 1 + wide]
                for suffix, table in planes:
                    table[entry["id"]] = self._matrix(key, suffix, shapes[entry["name"]])
            elif entry["kind"] == "norm":
                self.norms[entry["id"]] = self._array(key, (shape.dim,), "f").astype(np.float32)
        self.key_factors = self._array(
            "key_factors", (shape.n_layers, shape.n_kv_heads, shape.head_dim), "f"
        )
        if not (self.key_factors > 0).all():
            self._fail("weights.npz: key_factors must be positive")

    def _fail(self, why: str) -> NoReturn:
        raise ProgramError(f"{self.directory}: {why}")

    def _read(self, name: str) -> bytes:
        try:
            return (self.directory / name).read_bytes()
        except OSError as exc:
            reason = "missing" if isinstance(exc, FileNotFoundError) else exc.strerror
            self._fail(f"not a tandem compile folder ({name}: {reason})")

    def _json(self, name: str) -> dict:
        text = self._read(name)
        try:
            data = json.loads(text)
        except ValueError as exc:  # JSON, or bytes that are not UTF-8
            self._fail(f"{name} is not JSON ({exc})")
        if name == "program.json" and (
            not isinstance(data, dict) or data.get("format") != "tandem-llm-program 1"
        ):
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            self._fail(f"not a tandem compile folder (program.json format {found!r})")
        if not isinstance(data, dict):
            self._fail(f"{name} holds a {type(data).__name__}, not an object")
        return data

    def _card(self) -> tuple[prog.CardShape, int]:
        """The table's card as a :class:`~tandem.mappings.llm.program.CardShape`, and the
        longest prompt of its buckets."""
        card, buckets = self.table.get("card"), self.table.get("prefill")
        names = [f.name for f in fields(prog.CardShape)]
        if not isinstance(card, dict) or sorted(card) != sorted(names):
            self._fail(f"program.json's card must have the fields {', '.join(names)}")
        for name, limit in _CARD_LIMITS.items():
            value, least = card[name], 0 if name == "weight_group" else 1
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= limit:
                self._fail(f"program.json's card {name} must be in {least}..{limit}, not {value!r}")
        pairs = {}
        for name in ("wide", "wide_weights"):
            value = card[name]
            ok = isinstance(value, list) and all(
                isinstance(p, list) and len(p) == 2 and type(p[0]) is int and isinstance(p[1], str)
                for p in value
            )
            if not ok:
                self._fail(f"program.json's card {name} must be [layer, name] pairs")
            pairs[name] = tuple(tuple(p) for p in value)
        his = [b.get("hi") if isinstance(b, dict) else None for b in (buckets or {}).values()]
        if (
            not isinstance(buckets, dict)
            or not his
            or any(isinstance(hi, bool) or not isinstance(hi, int) for hi in his)
        ):
            self._fail("program.json's prefill must map buckets to entries with an integer hi")
        longest = max(his)
        if not 1 <= longest <= _MAX_PREFILL:
            self._fail(
                f"program.json's longest prefill must be in 1..{_MAX_PREFILL}, not {longest}"
            )
        try:
            shape = prog.CardShape(**{**card, **pairs})
            if (shape.dim % shape.n_heads, shape.n_heads % shape.n_kv_heads) != (0, 0):
                raise ValueError("dim must divide into n_heads, n_heads into n_kv_heads")
        except ValueError as exc:
            self._fail(f"program.json's card: {exc}")
        return shape, longest

    def _program(self, name: str, expected: list) -> list:
        try:
            program = decode_program(self._read(name))
        except ValueError as exc:
            self._fail(f"{name}: {exc}")
        if program != expected:
            at = next((i for i, (a, b) in enumerate(zip(program, expected)) if a != b), None)
            where = f"instruction {at}" if at is not None else f"{len(program)} instructions"
            self._fail(f"{name} is not the program tandem compile writes for its card ({where})")
        return program

    def _weights(self) -> dict[str, np.ndarray]:
        path = self.directory / "weights.npz"
        try:
            with np.load(path, allow_pickle=False) as weights:
                return {k: weights[k] for k in weights.files}
        except FileNotFoundError:
            self._fail("not a tandem compile folder (weights.npz: missing)")
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            # truncated or damaged: np.load and zipfile say so in many ways
            why = getattr(exc, "strerror", None) or exc
            self._fail(f"weights.npz cannot be read ({why})")

    def _array(self, key: str, shape: tuple, kinds: str) -> np.ndarray:
        """Array ``key`` of ``weights.npz``, checked: ``shape``, a dtype kind of ``kinds``
        (numpy's letters: ``i``/``u`` integers, ``f`` floats), finite."""
        if key not in self.arrays:
            self._fail(f"weights.npz does not match program.json (no {key})")
        array = self.arrays[key]
        if array.shape != shape or array.dtype.kind not in kinds:
            self._fail(
                f"weights.npz: {key} must be {shape} of kind {kinds!r}, not {array.shape} "
                f"{array.dtype}"
            )
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            self._fail(f"weights.npz: {key} holds NaN or infinity")
        return array

    def _matrix(self, key: str, suffix: str, shape: tuple[int, int]) -> NMPacked:
        """A linear layer's packed weights (``suffix`` ".lo": the low digits of 16-bit ones)."""
        n, m = (int(v) for v in self._array(key + ".pattern", (2,), "iu"))
        try:
            pattern = NMPattern(n, m)
        except UserError as exc:
            self._fail(f"weights.npz: {key}.pattern: {exc}")
        rows, cols = self._array(key + ".shape", (2,), "iu").tolist()
        if (rows, cols) != shape:
            self._fail(
                f"weights.npz: {key} is {rows} x {cols}, the program's {shape[0]} x {shape[1]}"
            )
        group = self.shape.weight_group
        if group and group % m:
            self._fail(f"weights.npz: {key}'s M = {m} does not divide the weight group {group}")
        slots = (rows, -(-cols // m) * n)
        values = self._array(key + suffix + ".values", slots, "i")
        indices = self._array(key + suffix + ".indices", slots, "iu")
        scales = self._array(key + ".scales", (rows, cols // group) if group else (rows,), "f")
        bad_index = indices.size and not 0 <= indices.min() <= indices.max() < m
        if values.dtype != np.int8 or bad_index:
            self._fail(f"weights.npz: {key}{suffix} must hold int8 values and indices below {m}")
        return NMPacked(values, indices.astype(np.uint8), pattern, (rows, cols), scales)

    def bucket(self, length: int) -> tuple[int, int]:
        """The prefill bucket serving a prompt of ``length`` tokens."""
        for lo, hi in self.prefill:
            if lo <= length <= hi:
                return lo, hi
        longest = max(hi for _, hi in self.prefill)
        raise ProgramError(f"a {length}-token prompt exceeds the compiled {longest}-token maximum")

    def max_columns(self) -> int:
        """The most columns of any matrix (in whole N:M groups): the engine's ``max_k``."""
        return max(p.groups * p.pattern.m for p in self.matrices.values())


@dataclass
class OpStats:
    """What a run did, per opcode: instructions executed, and engine cycles where modelled or
    simulated (``MATMUL``: sparse-mpe; ``ATTEND``: the HPU cards)."""

    count: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    useful_macs: int = 0
    load_cycles: int = 0  # sparse-mpe activation-load beats, before each request's weights

    def add(self, op: Op, cycles: int = 0, seconds: float = 0.0) -> None:
        self.count[op.name] = self.count.get(op.name, 0) + 1
        self.cycles[op.name] = self.cycles.get(op.name, 0) + cycles
        self.seconds[op.name] = self.seconds.get(op.name, 0.0) + seconds


class ProgramRunner:
    """Execute a :class:`CompiledModel`'s programs for one sequence at a time.

    Parameters
    ----------
    compiled
        The compile folder.
    model
        The GPU side (:class:`~tandem.host.system.decode.Llama`): embeddings and LM head only.
    mpe
        The matrix engine (:class:`~tandem.host.sparse_dsp.device.SparseMpeDevice`).
    attention
        :class:`~tandem.host.system.decode.HpuAttention` over the HPU cards.
    """

    def __init__(
        self,
        compiled: CompiledModel,
        model,
        mpe,
        attention,
        *,
        mpe_clock_mhz: float = 300.0,
        hpu_clock_mhz: float = 300.0,
        elementwise_lanes: int = 64,
    ):
        self.compiled, self.model, self.mpe, self.attention = compiled, model, mpe, attention
        #: Clocks of the timeline: sparse-mpe (also the element-wise unit and DMA), the HPU.
        self.clock_mhz = {Unit.MPE: mpe_clock_mhz, Unit.HPU: hpu_clock_mhz}
        self.elementwise_lanes = elementwise_lanes
        #: Every executed instruction on a serial timeline (batch 1: each op needs the last).
        self.timeline: list[dict] = []
        #: Cycles per unit of each run (a prefill, then one per decode step).
        self.run_cycles: list[dict[str, int]] = []
        self._now_s = 0.0
        self._op_cycles = 0
        if not isinstance(compiled, CompiledModel):
            raise ProgramError(f"compiled must be a CompiledModel, not {type(compiled).__name__}")
        c = getattr(model, "config", None)
        if not isinstance(c, LlamaConfig):
            # The element-wise ops here are Llama's (RMSNorm, rotate-half RoPE, SwiGLU).
            raise ProgramError(
                f"a compiled program runs a Llama-architecture model, not {type(model).__name__}"
            )
        card = compiled.card
        if (card["n_layers"], card["dim"], card["n_heads"], card["hidden"]) != (
            c.n_layers,
            c.dim,
            c.n_heads,
            c.hidden,
        ):
            raise ProgramError(
                f"{compiled.directory} was compiled for another model shape ({card}); "
                "compile this model with tandem compile"
            )
        if compiled.max_columns() > mpe.params.max_k:
            raise ProgramError(
                f"the program's widest matrix ({compiled.max_columns()} columns) exceeds the "
                f"engine's max_k {mpe.params.max_k}"
            )
        self.config = c
        d = c.head_dim
        self._inv_freq = c.rope_theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        self.stats = OpStats()
        self._loaded: int | None = None

    # --- the element-wise unit (host) ----------------------------------------------------
    def _rmsnorm(self, x, weight):
        x = x.astype(np.float32)
        inv = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(self.config.eps))
        return (x * inv.astype(np.float32)) * weight

    def _rope(self, x, heads: int, positions):
        d = self.config.head_dim
        angle = np.outer(positions.astype(np.float64), self._inv_freq)
        angle = np.concatenate([angle, angle], axis=1)
        cos = np.cos(angle).astype(np.float32)[:, None]
        sin = np.sin(angle).astype(np.float32)[:, None]
        x = x.reshape(len(positions), heads, d)
        rotated = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], axis=-1)
        return (x * cos + rotated * sin).reshape(len(positions), heads * d)

    # --- execution ---------------------------------------------------------------------------
    def start(self, seq: int, capacity: int) -> None:
        """Give sequence ``seq`` KV memory for ``capacity`` tokens on the cards (empty).

        Raises ``ValueError`` for a ``seq`` that is not an integer of at least 0, a
        ``capacity`` not one of at least 1, or a sequence already started
        (:class:`ProgramError`), and :class:`~tandem.host.common.errors.CapacityError` when
        the cards have no room.
        """
        import torch

        checks.integer(seq, "seq", lo=0)
        checks.integer(capacity, "capacity", lo=1)
        if seq in self.attention.seqs:
            raise ProgramError(f"sequence {seq} is already started")
        c = self.config
        empty = [torch.zeros(c.n_kv_heads, 0, c.head_dim) for _ in range(c.n_layers)]
        self.attention.start(seq, empty, empty, capacity, factors=self.compiled.key_factors)
        if len(self.attention.seqs[seq].slices) != 1:
            self.attention.finish(seq)
            raise ProgramError("a compiled program runs a sequence held on one card")

    def prefill(self, seq: int, ids, every_position: bool = False) -> np.ndarray:
        """Run the prompt ``ids`` through its bucket's template: the last token's hidden state
        [dim], or with ``every_position`` every token's [T, dim] (teacher forcing: each token's
        row is what a decode step of that token computes, bit for bit)."""
        ids = self._tokens(ids)
        program = self.compiled.prefill[self.compiled.bucket(len(ids))]
        self._room(seq, 0, len(ids))
        return self._execute(program, seq, ids, position=0, every_position=every_position)

    def step(self, seq: int, token: int, position: int) -> np.ndarray:
        """One decode step of the token at ``position`` (the sequence's length: each step
        appends one token); its hidden state."""
        (token,) = self._tokens([token])
        checks.integer(position, "position", lo=0)
        self._room(seq, position, 1)
        return self._execute(self.compiled.decode, seq, [token], position=position)

    def _tokens(self, ids) -> list[int]:
        """``ids`` as token ids of the model's vocabulary, at least one."""
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise ProgramError(f"ids must be a sequence of token ids, not {type(ids).__name__}")
        ids = list(ids)
        if not ids:
            raise ProgramError("ids must hold at least one token")
        vocab = self.config.vocab
        for token in ids:
            checks.integer(token, "a token id", lo=0, hi=vocab - 1, what=" (the vocabulary)")
        return [int(token) for token in ids]

    def _room(self, seq: int, position: int, tokens: int) -> None:
        """Refuse a run that does not continue ``seq`` where it stands or outgrows its
        capacity: the cards would append the keys at another position than RoPE's."""
        state = self.attention.seqs.get(seq)
        if state is None:
            raise ProgramError(f"sequence {seq} is not started; call start({seq}, capacity)")
        if position != state.length:
            raise ProgramError(
                f"sequence {seq} holds {state.length} tokens: the next runs at position "
                f"{state.length}, not {position}"
            )
        capacity = sum(s.capacity for s in state.slices)
        if state.length + tokens > capacity:
            raise ProgramError(
                f"sequence {seq} holds {state.length} of its {capacity} tokens: no room for "
                f"{tokens} more"
            )

    def logits(self, hidden) -> np.ndarray:
        """LM head on the GPU side: [vocab] float32 of a hidden state [dim] ([T, vocab] of
        [T, dim])."""
        import torch

        x = torch.as_tensor(np.atleast_2d(hidden), dtype=torch.float32, device=self.model.device)
        with torch.no_grad():
            out = self.model.logits(x).float().cpu().numpy()
        return out if np.ndim(hidden) == 2 else out[0]

    def _execute(
        self, program, seq: int, ids: list[int], position: int, every_position: bool = False
    ) -> np.ndarray:
        """Run ``program`` over ``ids`` (one decode token, or a prompt); the last hidden state.

        The residual stream ``x`` holds every token of the run unless the program spills it
        (then it holds one tile, moved by LOAD and STORE); every other buffer holds the tile.
        """
        length = len(ids)
        phase = "decode" if program is self.compiled.decode else f"prefill {length}"
        self.run_cycles.append({})
        embeddings = self.model.embed(ids).float().cpu().numpy()
        spill = np.zeros_like(embeddings)
        x_id = BUFFER_NAMES.index("x")
        whole_x = not any(i.op == Op.STORE and i.tensor == SPILL for i in program)
        tile_size = max((i.tokens for i in program if i.op == Op.MATMUL), default=0)
        if program is not self.compiled.decode:
            tile_size = self.compiled.table["prefill"][self._bucket_key(length)]["tile"]
        buffers: dict[int, object] = {}
        if whole_x:
            buffers[x_id] = np.zeros((length, self.config.dim), dtype=np.float32)
        out, pc, tile, loop = None, 0, None, None
        while pc < len(program):
            inst = program[pc]
            if inst.op == Op.LOOP:
                loop, tile = (pc + 1, pc + 1 + inst.count), (0, min(tile_size, length))
                pc += 1
                continue
            if inst.op == Op.END:
                break
            offset, tokens = (
                tile if tile is not None and not inst.tokens else (inst.offset, inst.tokens)
            )
            started = time.perf_counter()
            self._op_cycles = 0
            if inst.op == Op.LOAD:
                source = embeddings if inst.tensor == EMBEDDINGS else spill
                if inst.flags:  # the last token only
                    buffers[x_id] = source[length - 1 : length].copy()
                elif whole_x:
                    buffers[x_id][offset : offset + tokens] = source[offset : offset + tokens]
                else:
                    buffers[x_id] = source[offset : offset + tokens].copy()
            elif inst.op == Op.STORE:
                x = buffers[inst.src0]
                if inst.tensor == HIDDEN_OUT:
                    out = x[-1] if not whole_x else x[length - 1]
                else:
                    spill[offset : offset + tokens] = x[:tokens]
            else:
                self._compute(inst, buffers, offset, tokens, whole_x, seq, position)
            if inst.op not in (Op.MATMUL, Op.ATTEND):
                self.stats.add(inst.op, 0, time.perf_counter() - started)
            self._record(inst, buffers, tokens or 1, phase)
            pc += 1
            if loop is not None and pc == loop[1]:
                offset = tile[0] + tile[1]
                if offset < length:
                    tile, pc = (offset, min(tile_size, length - offset)), loop[0]
                else:
                    loop, tile = None, None
        if out is None:
            raise ProgramError("the program ended without storing a hidden state")
        if every_position:
            return np.array(buffers[x_id] if whole_x else spill, dtype=np.float32)
        return np.asarray(out, dtype=np.float32)

    def _record(self, inst, buffers, tokens: int, phase: str) -> None:
        """Put the instruction on the timeline: engine cycles where an engine ran it, else the
        element-wise unit's ``elements / lanes`` cycles (DMA: 64 bytes a cycle)."""
        unit = UNIT[inst.op]
        if unit in (Unit.MPE, Unit.HPU):
            cycles = self._op_cycles
        elif unit == Unit.ELEMENTWISE:
            value = buffers[inst.dst]
            width = (value[0] if isinstance(value, tuple) else value).shape[-1]
            size = tokens * width
            cycles = -(-size // self.elementwise_lanes)
        elif unit == Unit.DMA:
            moved = 1 if inst.flags else tokens
            cycles = -(-moved * self.config.dim * 4 // 64)
        else:
            cycles = 0
        if not cycles:
            return
        clock = self.clock_mhz[Unit.HPU if unit == Unit.HPU else Unit.MPE]
        seconds = cycles / (clock * 1e6)
        self.timeline.append(
            {
                "unit": unit.name,
                "name": f"{inst.op.name} L{inst.layer}",
                "phase": phase,
                "start_s": self._now_s,
                "end_s": self._now_s + seconds,
                "cycles": int(cycles),
            }
        )
        self._now_s += seconds
        run = self.run_cycles[-1]
        run[unit.name] = run.get(unit.name, 0) + int(cycles)

    def write_trace(self, path, metadata: dict | None = None) -> None:
        """The timeline as Chrome trace JSON (open in ui.perfetto.dev): one track per unit."""
        units = sorted({e["unit"] for e in self.timeline})
        out = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "tandem program"}}]
        for i, unit in enumerate(units):
            out.append(
                {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": unit}}
            )
        for e in self.timeline:
            out.append(
                {
                    "name": e["name"],
                    "cat": e["phase"],
                    "ph": "X",
                    "pid": 0,
                    "tid": units.index(e["unit"]),
                    "ts": round(e["start_s"] * 1e6, 4),
                    "dur": round((e["end_s"] - e["start_s"]) * 1e6, 4),
                    "args": {"cycles": e["cycles"], "phase": e["phase"]},
                }
            )
        data = {"traceEvents": out, "displayTimeUnit": "ns", "metadata": metadata or {}}
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:  # written beside and renamed: a failed write leaves no half trace
            tmp.write_text(json.dumps(data, indent=0) + "\n")
            tmp.replace(path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ProgramError(f"cannot write trace {path}: {exc.strerror}") from None

    def _bucket_key(self, length: int) -> str:
        lo, hi = self.compiled.bucket(length)
        return f"{lo}-{hi}"

    def _compute(self, inst, buffers, offset, tokens, whole_x, seq, position) -> None:
        x_id = BUFFER_NAMES.index("x")

        def get(index):
            if index == x_id and whole_x:
                return buffers[index][offset : offset + tokens]
            return buffers[index]

        def put(value):
            if inst.dst == x_id and whole_x:
                buffers[x_id][offset : offset + tokens] = value
            else:
                buffers[inst.dst] = value

        op = inst.op
        if op == Op.RMSNORM:
            put(self._rmsnorm(get(inst.src0), self.compiled.norms[inst.tensor]))
        elif op == Op.QUANTIZE:
            put(quantize_activations(get(inst.src0), 16 if inst.flags & 1 else 8))
        elif op == Op.MATMUL:
            self._matmul(inst, buffers, get(inst.src0))
        elif op == Op.DEQUANTIZE:
            acc = get(inst.src0)
            _, act_scale = get(inst.src1)
            w_scale = self.compiled.matrices[inst.tensor].scales.astype(np.float64)
            if inst.count:  # acc [tokens, blocks, rows]: each block times its own scales
                acc = np.einsum("tbr,rb->tr", acc.astype(np.float64), w_scale)
                put((acc * act_scale[:, None]).astype(np.float32))
            else:
                put((acc * act_scale[:, None] * w_scale[None, :]).astype(np.float32))
        elif op == Op.ROPE:
            positions = position + offset + np.arange(tokens)
            put(self._rope(get(inst.src0), inst.rows, positions))
        elif op == Op.ATTEND:
            self._attend(inst, buffers, get, seq, tokens)
        elif op == Op.SILU_MUL:
            g = get(inst.src0).astype(np.float32)
            put((g / (np.float32(1) + np.exp(-g)) * get(inst.src1)).astype(np.float32))
        elif op == Op.ADD:
            put((get(inst.src0) + get(inst.src1)).astype(np.float32))
        elif op not in (Op.SYNC, Op.NOP):
            raise ProgramError(f"instruction {inst} is not runnable here")

    def _matmul(self, inst, buffers, source) -> None:
        """One MATMUL: one pass over the weights, or two for 16-bit weights (their high and
        low digit matrices, ``256 * hi + lo``), per column block when the weights have a scale
        per block (``count`` blocks: the result is [tokens, blocks, rows]); cycles, MACs and
        loads summed over passes."""
        q, _ = source
        if inst.flags & 2 and q.dtype != np.int32:
            raise ProgramError(f"{inst}: 16-bit MATMUL of an 8-bit buffer")
        planes = [self.compiled.matrices[inst.tensor]]
        if inst.flags & 4:
            planes.append(self.compiled.matrices_lo[inst.tensor])
        blocks = max(1, inst.count)
        width = inst.cols // blocks
        started = time.perf_counter()
        cycles, results = 0, []
        for block in range(blocks):
            acc = None
            columns = slice(block * width, (block + 1) * width)
            for plane, packed in enumerate(planes):
                if inst.count:
                    packed = column_block(packed, block, blocks)
                part = self._matrix_pass(inst, packed, (inst.tensor, plane, block), q[:, columns])
                cycles += self.mpe.last_cycles
                acc = part if acc is None else 256 * acc + part
            results.append(acc)
        self.stats.add(Op.MATMUL, cycles, time.perf_counter() - started)
        self._op_cycles = cycles
        buffers[inst.dst] = np.stack(results, axis=1) if inst.count else results[0]

    def _matrix_pass(self, inst, packed, key, q) -> np.ndarray:
        """``packed @ q`` for the tile's tokens on the engine: int64 [tokens, rows]."""
        if self._loaded != key:
            self.mpe.load(packed)
            self._loaded = key
        tokens = q.shape[0]
        if inst.flags & 2:  # 16-bit: the two int8 digits of each token as a token pair
            hi, lo = split_digits(q)
            digits = np.stack([hi, lo], axis=1).reshape(2 * tokens, -1)
            both = self.mpe.gemm(digits.T).T.astype(np.int64).reshape(tokens, 2, -1)
            acc = 256 * both[:, 0] + both[:, 1]
        elif inst.flags & 1 and tokens == 1:
            acc = self.mpe.gemv(q[0])[None, :].astype(np.int64)
        else:
            acc = self.mpe.gemm(q.T).T.astype(np.int64)
        digits = 2 if inst.flags & 2 else 1  # a 16-bit input is two int8 digits
        self.stats.useful_macs += int(packed.values.size) * tokens * digits
        # The activation load before the weights (not in the engine's request cycles).
        params = self.mpe.params
        words = -(-packed.groups * packed.pattern.m // params.word_bytes)
        sent = 1 if (inst.flags & 3) == 1 and tokens == 1 else tokens * digits + tokens * digits % 2
        self.stats.load_cycles += sent * words * params.word_bytes // params.act_bytes
        return acc

    def _attend(self, inst, buffers, get, seq, tokens) -> None:
        import torch

        c = self.config
        q, k, v = (get(i) for i in (inst.src0, inst.src1, inst.src2))
        started = time.perf_counter()
        outputs, cycles = [], 0
        for t in range(tokens):
            o = self.attention.attend(
                inst.layer,
                [seq],
                torch.from_numpy(q[t].reshape(1, c.n_heads, c.head_dim)),
                torch.from_numpy(k[t].reshape(1, c.n_kv_heads, c.head_dim)),
                torch.from_numpy(v[t].reshape(1, c.n_kv_heads, c.head_dim)),
            )
            outputs.append(o.float().cpu().numpy().reshape(-1))
            cycles += sum(self.attention.last_cycles.values())
        self.stats.add(Op.ATTEND, cycles, time.perf_counter() - started)
        self._op_cycles = cycles
        buffers[inst.dst] = np.stack(outputs).astype(np.float32)
