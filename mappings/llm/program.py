"""Instruction programs of a decoder: the decode program and length-adaptive prefill templates.

A decoder layer is one *body* of instructions (:func:`layer_body`): RMSNorm, int8 quantization,
the q/k/v matrix ops, dequantization, RoPE, attention (which appends the tile's keys and values
to the KV cache), the output projection and residual add, then the SwiGLU MLP. Buffers are
on-chip; :func:`allocate` gives each a byte offset by liveness, so buffers whose lives do not
overlap share memory.

**Decode** runs every body once with one token (matrix-vector mode). **Prefill** runs a layer's
body once per tile of ``tile`` tokens: the layer's weights stream once per tile, and the tiles
go in order so that each tile's attention sees the keys the earlier tiles appended (causal).
A prefill program compiled for one length unrolls those tiles (``ceil(L / tile)`` bodies per
layer, each with its own token offset); a *template* serves a whole bucket of lengths with a
``LOOP`` per layer whose trip count the runner takes from the length register. Buckets are
powers of two (1, 2, 3-4, 5-8, ... 1025-2048): a bucket fixes the tile and whether the
residual stream of every prompt token stays on chip (``resident``) or is spilled to HBM and
brought back one tile at a time (``LOAD``/``STORE`` around each body).
"""

from dataclasses import dataclass

from .isa import WORD_BYTES, Instruction, Op, encode_program

__all__ = [
    "LINEARS",
    "CardShape",
    "Compiled",
    "allocate",
    "buckets",
    "compile_programs",
    "decode_program",
    "layer_body",
    "linear_shapes",
    "prefill_program",
    "prefill_template",
    "program_table",
    "unrolled_instructions",
]

#: Bytes of the card's on-chip memory given to activation buffers (of U280's 41 MB of block
#: RAM and UltraRAM; the rest holds the engines' own buffers).
ACTIVATION_BUFFER_BYTES = 8 << 20

#: The linear layers of a decoder layer, llama.cpp names, in program order.
LINEARS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")

#: Tensor-table ids of the HBM regions the programs read and write.
EMBEDDINGS, HIDDEN_OUT, SPILL = 0, 1, 2
_FIRST_WEIGHT = 3


#: The inputs that linear layers share, by the layers reading them: an input is quantized once,
#: to 8 or 16 bits, for all of its readers.
INPUT_GROUPS = {
    "attn_in": ("attn_q", "attn_k", "attn_v"),
    "attn_out": ("attn_output",),
    "mlp_in": ("ffn_gate", "ffn_up"),
    "mlp_out": ("ffn_down",),
}


@dataclass(frozen=True)
class CardShape:
    """What a program depends on: the model's shapes, the prefill tile, which inputs of which
    layers are quantized to 16 bits (``wide``: (layer, input group) pairs; the rest are int8),
    which linear layers have 16-bit weights (``wide_weights``: (layer, name) pairs), and the
    columns per weight scale (``weight_group``; 0: one scale per row)."""

    n_layers: int
    dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden: int
    tile: int
    wide: tuple[tuple[int, str], ...] = ()
    wide_weights: tuple[tuple[int, str], ...] = ()
    weight_group: int = 0

    @classmethod
    def for_model(
        cls, config, tile: int, wide=(), wide_weights=(), weight_group: int = 0
    ) -> "CardShape":
        return cls(
            config.n_layers,
            config.dim,
            config.n_heads,
            config.n_kv_heads,
            config.head_dim,
            config.hidden,
            tile,
            tuple(sorted(tuple(w) for w in wide)),
            tuple(sorted(tuple(w) for w in wide_weights)),
            int(weight_group),
        )

    def weight_blocks(self, cols: int) -> int:
        """Column blocks (one scale each per row) of a matrix of ``cols`` columns; 0 when each
        row has one scale (the ``count`` field of its ``MATMUL`` and ``DEQUANTIZE``)."""
        return cols // self.weight_group if self.weight_group else 0

    def is_wide(self, layer: int, group: str) -> bool:
        return (layer, group) in self.wide

    def weight(self, layer: int, name: str) -> int:
        """Tensor id of a linear layer's packed weights."""
        return _FIRST_WEIGHT + layer * (len(LINEARS) + 2) + LINEARS.index(name)

    def norm(self, layer: int, name: str) -> int:
        """Tensor id of a layer's norm vector (``attn_norm`` or ``ffn_norm``)."""
        return _FIRST_WEIGHT + layer * 9 + 7 + ("attn_norm", "ffn_norm").index(name)

    def tensor_table(self) -> list[dict]:
        """Every tensor id: HBM regions, weights and norm vectors."""
        table = [
            {"id": EMBEDDINGS, "kind": "region", "name": "token embeddings (host)"},
            {"id": HIDDEN_OUT, "kind": "region", "name": "last hidden state (host)"},
            {"id": SPILL, "kind": "region", "name": "spilled residual stream"},
        ]
        for layer in range(self.n_layers):
            for name in LINEARS:
                table.append(
                    {"id": self.weight(layer, name), "kind": "matrix", "layer": layer, "name": name}
                )
            for name in ("attn_norm", "ffn_norm"):
                table.append(
                    {"id": self.norm(layer, name), "kind": "norm", "layer": layer, "name": name}
                )
        return table


#: Buffers: name -> (element kind, width function). fp: float32 activations; i8: int8 with
#: one float32 scale per token; i32: the matrix engine's accumulators.
def _buffers(s: CardShape) -> dict[str, tuple[str, int]]:
    q, kv = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
    return {
        "x": ("fp", s.dim),
        "h": ("fp", s.dim),
        "h_i8": ("i8", s.dim),
        "q_acc": ("i32", q),
        "k_acc": ("i32", kv),
        "v_acc": ("i32", kv),
        "q": ("fp", q),
        "k": ("fp", kv),
        "v": ("fp", kv),
        "attn": ("fp", q),
        "attn_i8": ("i8", q),
        "o_acc": ("i32", s.dim),
        "o": ("fp", s.dim),
        "gate_acc": ("i32", s.hidden),
        "up_acc": ("i32", s.hidden),
        "gate": ("fp", s.hidden),
        "up": ("fp", s.hidden),
        "mlp": ("fp", s.hidden),
        "mlp_i8": ("i8", s.hidden),
        "down_acc": ("i32", s.dim),
        "down": ("fp", s.dim),
    }


#: Buffer ids in instruction fields (the order of :func:`_buffers`).
BUFFER_NAMES = tuple(_buffers(CardShape(1, 1, 1, 1, 1, 1, 2)))
BUFFER = {name: i for i, name in enumerate(BUFFER_NAMES)}


def buffer_bytes_per_token(s: CardShape) -> dict[str, int]:
    """Bytes one token occupies in each buffer (a quantized buffer: 2 bytes per element where
    any layer takes 16-bit inputs)."""
    size = {"fp": 4, "i32": 4, "i8": 2 if s.wide else 1}
    return {
        name: width * size[kind] + (4 if kind == "i8" else 0)
        for name, (kind, width) in _buffers(s).items()
    }


def linear_shapes(s: CardShape) -> dict[str, tuple[int, int]]:
    """``(rows, cols)`` of every linear layer's weights, by llama.cpp name."""
    q, kv = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
    return {
        "attn_q": (q, s.dim),
        "attn_k": (kv, s.dim),
        "attn_v": (kv, s.dim),
        "attn_output": (s.dim, q),
        "ffn_gate": (s.hidden, s.dim),
        "ffn_up": (s.hidden, s.dim),
        "ffn_down": (s.dim, s.hidden),
    }


def layer_body(s: CardShape, layer: int, tokens: int, offset: int, mv: bool) -> list[Instruction]:
    """One decoder layer for ``tokens`` tokens from ``offset`` (``tokens=0``: the tile's)."""
    b = BUFFER
    t = {"tokens": tokens, "offset": offset, "layer": layer}
    shapes = linear_shapes(s)

    def wide(group):
        return s.is_wide(layer, group)

    def quantize(dst, src, group):
        return Instruction(Op.QUANTIZE, dst=b[dst], src0=b[src], flags=int(wide(group)), **t)

    def linear(name, acc, out, src):
        rows, cols = shapes[name]
        w = s.weight(layer, name)
        group = next(g for g, names in INPUT_GROUPS.items() if name in names)
        return [
            Instruction(
                Op.MATMUL,
                dst=b[acc],
                src0=b[src],
                tensor=w,
                rows=rows,
                cols=cols,
                flags=int(mv) | 2 * int(wide(group)) | 4 * int((layer, name) in s.wide_weights),
                count=s.weight_blocks(cols),
                **t,
            ),
            Instruction(
                Op.DEQUANTIZE,
                dst=b[out],
                src0=b[acc],
                src1=b[src],
                tensor=w,
                count=s.weight_blocks(cols),
                **t,
            ),
        ]

    return [
        Instruction(Op.RMSNORM, dst=b["h"], src0=b["x"], tensor=s.norm(layer, "attn_norm"), **t),
        quantize("h_i8", "h", "attn_in"),
        *linear("attn_q", "q_acc", "q", "h_i8"),
        *linear("attn_k", "k_acc", "k", "h_i8"),
        *linear("attn_v", "v_acc", "v", "h_i8"),
        Instruction(Op.ROPE, dst=b["q"], src0=b["q"], rows=s.n_heads, cols=s.head_dim, **t),
        Instruction(Op.ROPE, dst=b["k"], src0=b["k"], rows=s.n_kv_heads, cols=s.head_dim, **t),
        Instruction(
            Op.ATTEND,
            dst=b["attn"],
            src0=b["q"],
            src1=b["k"],
            src2=b["v"],
            rows=s.n_heads,
            cols=s.head_dim,
            **t,
        ),
        quantize("attn_i8", "attn", "attn_out"),
        *linear("attn_output", "o_acc", "o", "attn_i8"),
        Instruction(Op.ADD, dst=b["x"], src0=b["x"], src1=b["o"], **t),
        Instruction(Op.RMSNORM, dst=b["h"], src0=b["x"], tensor=s.norm(layer, "ffn_norm"), **t),
        quantize("h_i8", "h", "mlp_in"),
        *linear("ffn_gate", "gate_acc", "gate", "h_i8"),
        *linear("ffn_up", "up_acc", "up", "h_i8"),
        Instruction(Op.SILU_MUL, dst=b["mlp"], src0=b["gate"], src1=b["up"], **t),
        quantize("mlp_i8", "mlp", "mlp_out"),
        *linear("ffn_down", "down_acc", "down", "mlp_i8"),
        Instruction(Op.ADD, dst=b["x"], src0=b["x"], src1=b["down"], **t),
    ]


def _reads(i: Instruction) -> list[int]:
    srcs = {
        Op.MATMUL: [i.src0],
        Op.ATTEND: [i.src0, i.src1, i.src2],
        Op.DEQUANTIZE: [i.src0, i.src1],
        Op.SILU_MUL: [i.src0, i.src1],
        Op.ADD: [i.src0, i.src1],
        Op.STORE: [i.src0],
    }
    return srcs.get(i.op, [i.src0] if i.op in (Op.RMSNORM, Op.QUANTIZE, Op.ROPE) else [])


def allocate(s: CardShape, tokens: int, resident_tokens: int) -> dict:
    """On-chip byte offsets of every buffer for a body of ``tokens`` tokens per tile.

    ``x`` (the residual stream) lives across the whole program and holds
    ``resident_tokens`` tokens; every other buffer lives from its first write to its last read
    within a body, and buffers whose lives do not overlap share bytes (first fit, in order of
    first write). Returns ``{"offsets": {name: byte}, "bytes": total}``.
    """
    per_token = buffer_bytes_per_token(s)
    body = layer_body(s, 0, tokens, 0, tokens == 1)
    life: dict[str, list[int]] = {}
    for step, inst in enumerate(body):
        for buf in [BUFFER_NAMES[r] for r in _reads(inst)] + [BUFFER_NAMES[inst.dst]]:
            life.setdefault(buf, [step, step])[1] = step
    offsets = {"x": 0}
    top = per_token["x"] * resident_tokens
    placed: list[tuple[int, int, int, int]] = []  # (start, end, lo, hi)
    for name in sorted((n for n in life if n != "x"), key=lambda n: life[n][0]):
        start, end = life[name]
        size = per_token[name] * tokens
        lo = top
        for p_start, p_end, p_lo, p_hi in sorted(placed, key=lambda p: p[2]):
            overlaps_in_time = not (end < p_start or p_end < start)
            if overlaps_in_time and lo < p_hi and p_lo < lo + size:
                lo = p_hi
        placed.append((start, end, lo, lo + size))
        offsets[name] = lo
    total = max([top] + [p[3] for p in placed])
    return {"offsets": offsets, "bytes": total}


def decode_program(s: CardShape) -> list[Instruction]:
    """One decode step: the new token's embedding in, every layer, its hidden state out."""
    program = [Instruction(Op.LOAD, dst=BUFFER["x"], tensor=EMBEDDINGS, tokens=1)]
    for layer in range(s.n_layers):
        program += layer_body(s, layer, 1, 0, True)
    return program + [
        Instruction(Op.STORE, src0=BUFFER["x"], tensor=HIDDEN_OUT, tokens=1, flags=1),
        Instruction(Op.SYNC),
        Instruction(Op.END),
    ]


def buckets(max_length: int) -> list[tuple[int, int]]:
    """Power-of-two buckets of prompt lengths: (1, 1), (2, 2), (3, 4), (5, 8)..."""
    out, lo = [], 1
    while lo <= max_length:
        hi = min(max(1, 2 * (lo - 1)), max_length) if lo > 2 else lo
        out.append((lo, hi))
        lo = hi + 1
    return out


def bucket_plan(s: CardShape, hi: int) -> dict:
    """A bucket's tile and whether the residual stream of all ``hi`` tokens stays on chip."""
    tile = min(s.tile, hi)
    resident = buffer_bytes_per_token(s)["x"] * hi + allocate(s, tile, 0)["bytes"]
    on_chip = resident <= ACTIVATION_BUFFER_BYTES
    buffers = allocate(s, tile, hi if on_chip else tile)
    return {"tile": tile, "resident": on_chip, "buffers": buffers}


def _tile_wrap(s: CardShape, layer: int, body: list, tokens: int, offset: int, resident: bool):
    """A body with the LOAD/STORE of the residual tile it needs in its plan."""
    x = BUFFER["x"]
    t = {"tokens": tokens, "offset": offset}
    if resident:
        head = [Instruction(Op.LOAD, dst=x, tensor=EMBEDDINGS, **t)] if layer == 0 else []
        return head + body
    source = EMBEDDINGS if layer == 0 else SPILL
    return [
        Instruction(Op.LOAD, dst=x, tensor=source, **t),
        *body,
        Instruction(Op.STORE, src0=x, tensor=SPILL, **t),
    ]


def _prefill_tail(s: CardShape, resident: bool) -> list[Instruction]:
    x = BUFFER["x"]
    tail = [Instruction(Op.SYNC)]
    if not resident:  # the last token's residual is in the spill region
        tail.append(Instruction(Op.LOAD, dst=x, tensor=SPILL, tokens=1, flags=1))
    return tail + [
        Instruction(Op.STORE, src0=x, tensor=HIDDEN_OUT, tokens=1, flags=1),
        Instruction(Op.END),
    ]


def prefill_template(s: CardShape, lo: int, hi: int) -> list[Instruction]:
    """The program serving every prompt length in ``lo..hi``: one ``LOOP`` per layer."""
    plan = bucket_plan(s, hi)
    program = []
    for layer in range(s.n_layers):
        body = _tile_wrap(s, layer, layer_body(s, layer, 0, 0, False), 0, 0, plan["resident"])
        program += [Instruction(Op.LOOP, count=len(body), layer=layer), *body]
    return program + _prefill_tail(s, plan["resident"])


def prefill_program(s: CardShape, length: int, hi: int | None = None) -> list[Instruction]:
    """The program of one prompt length, tiles unrolled (what a per-length compiler emits)."""
    plan = bucket_plan(s, length if hi is None else hi)
    tile, program = plan["tile"], []
    for layer in range(s.n_layers):
        for offset in range(0, length, tile):
            tokens = min(tile, length - offset)
            body = layer_body(s, layer, tokens, offset, False)
            program += _tile_wrap(s, layer, body, tokens, offset, plan["resident"])
    return program + _prefill_tail(s, plan["resident"])


def unrolled_instructions(s: CardShape, length: int) -> int:
    """``len(prefill_program(s, length))``, counted without building it."""
    plan = bucket_plan(s, length)
    tiles = -(-length // plan["tile"])
    body = len(layer_body(s, 0, 1, 0, False))
    if plan["resident"]:
        per_layer = [tiles * body + (tiles if layer == 0 else 0) for layer in range(s.n_layers)]
    else:
        per_layer = [tiles * (body + 2)] * s.n_layers
    return sum(per_layer) + len(_prefill_tail(s, plan["resident"]))


@dataclass
class Compiled:
    images: dict[str, bytes]
    table: dict
    instructions: int
    storage_bytes: int
    storage_bytes_per_length: int
    buckets: list[tuple[int, int]]
    on_chip_bytes: int


def program_table(s: CardShape, max_prefill: int) -> dict:
    """The table of the programs for ``s`` and prompts up to ``max_prefill`` tokens: the card,
    buffers, tensors, and each program's file, on-chip bytes and buffer offsets (a prefill
    template's also its bucket, tile and whether the residual stream stays on chip)."""
    plans = {}
    for lo, hi in buckets(max_prefill):
        plan = bucket_plan(s, hi)
        plans[f"{lo}-{hi}"] = {
            "file": f"prefill_{lo}_{hi}.bin",
            "lo": lo,
            "hi": hi,
            "tile": plan["tile"],
            "resident": plan["resident"],
            "on_chip_bytes": plan["buffers"]["bytes"],
            "buffer_offsets": plan["buffers"]["offsets"],
        }
    decode_buffers = allocate(s, 1, 1)
    return {
        "format": "tandem-llm-program 1",
        "word_bytes": WORD_BYTES,
        "card": s.__dict__,
        "buffers": list(BUFFER_NAMES),
        "tensors": s.tensor_table(),
        "decode": {
            "file": "decode.bin",
            "on_chip_bytes": decode_buffers["bytes"],
            "buffer_offsets": decode_buffers["offsets"],
        },
        "prefill": plans,
    }


def compile_programs(s: CardShape, max_prefill: int) -> Compiled:
    """The decode program and every bucket's prefill template, as images and a table."""
    table = program_table(s, max_prefill)
    images = {"decode.bin": encode_program(decode_program(s))}
    for plan in table["prefill"].values():
        images[plan["file"]] = encode_program(prefill_template(s, plan["lo"], plan["hi"]))
    instructions = sum(len(image) // WORD_BYTES for image in images.values())
    storage = sum(len(image) for image in images.values())
    per_length = WORD_BYTES * sum(unrolled_instructions(s, n) for n in range(1, max_prefill + 1))
    per_length += len(images["decode.bin"])
    on_chip = [table["decode"]["on_chip_bytes"]]
    return Compiled(
        images=images,
        table=table,
        instructions=instructions,
        storage_bytes=storage,
        storage_bytes_per_length=per_length,
        buckets=buckets(max_prefill),
        on_chip_bytes=max(on_chip + [p["on_chip_bytes"] for p in table["prefill"].values()]),
    )
