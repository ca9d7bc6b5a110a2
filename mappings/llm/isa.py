"""The instruction set of a tandem LLM card: one 128-bit word per instruction.

A card is ``sparse-mpe`` engines (every linear layer: GEMV in decode, GEMM in prefill), ``hpu``
engines (attention over the KV cache they hold) and an element-wise unit (RMSNorm, RoPE, SiLU
and gate, residual add, int8 quantization of activations). Activations live in on-chip
buffers; weights and the KV cache live in HBM. :data:`FIELDS` is the one encoding that the
compiler (:mod:`~tandem.mappings.llm.compiler`), the program runner
(:mod:`~tandem.mappings.llm.runner`) and any gateware decoder read; every instruction has every
field, unused ones zero.

Token counts and token offsets are relative to a *tile*: a prefill template runs its body once
per tile of ``tile`` tokens inside a ``LOOP`` whose trip count the runner computes from the
length register ``L`` (``ceil(L / tile)``); the last tile holds ``L - offset`` tokens. That is
what lets one template serve a whole bucket of prompt lengths (see docs/compiler.md).
"""

import enum
from dataclasses import dataclass

import numpy as np

__all__ = [
    "FIELDS",
    "WORD_BYTES",
    "Instruction",
    "Op",
    "Unit",
    "decode_program",
    "encode_program",
]


class Unit(enum.IntEnum):
    """Which part of the card executes an instruction."""

    CONTROL = 0
    MPE = 1  # sparse-mpe: matrix ops
    HPU = 2  # hpu: attention
    ELEMENTWISE = 3  # RMSNorm, RoPE, SiLU, add, (de)quantization
    DMA = 4  # HBM <-> on-chip buffers


class Op(enum.IntEnum):
    """Opcodes. The comment names the fields each one reads."""

    NOP = 0
    LOAD = 1  # DMA: dst <- HBM region `tensor` (the token embeddings, a spilled tile)
    STORE = 2  # DMA: HBM region `tensor` <- src0 (the last hidden state; a spilled tile)
    MATMUL = 3  # MPE: dst (int32) <- weights `tensor` [rows, cols] @ src0 (int8); `count`
    # column blocks (0: one): one pass and one accumulator per row per block
    ATTEND = 4  # HPU: dst <- attention of layer `layer` for queries src0; appends K src1, V src2
    RMSNORM = 5  # dst <- rmsnorm(src0) * norm vector `tensor`
    QUANTIZE = 6  # dst (int8, or 16 bits as two int8 digits with flags 1; a scale per token)
    DEQUANTIZE = 7  # dst <- src0 (int32) * token scales of src1 * channel scales of `tensor`
    # (with `count` blocks: the sum over blocks of each block's result times its scale)
    ROPE = (
        8  # dst <- RoPE of src0 ([tokens, heads = rows, head_dim = cols]) at the tokens' positions
    )
    SILU_MUL = 9  # dst <- silu(src0) * src1
    ADD = 10  # dst <- src0 + src1
    LOOP = 11  # repeat the next `count` instructions once per tile of the length register
    SYNC = 12  # wait until every unit is idle
    END = 13  # end of program


#: Which unit runs each opcode.
UNIT = {
    Op.NOP: Unit.CONTROL,
    Op.LOAD: Unit.DMA,
    Op.STORE: Unit.DMA,
    Op.MATMUL: Unit.MPE,
    Op.ATTEND: Unit.HPU,
    Op.RMSNORM: Unit.ELEMENTWISE,
    Op.QUANTIZE: Unit.ELEMENTWISE,
    Op.DEQUANTIZE: Unit.ELEMENTWISE,
    Op.ROPE: Unit.ELEMENTWISE,
    Op.SILU_MUL: Unit.ELEMENTWISE,
    Op.ADD: Unit.ELEMENTWISE,
    Op.LOOP: Unit.CONTROL,
    Op.SYNC: Unit.CONTROL,
    Op.END: Unit.CONTROL,
}

#: The encoding, lowest bits first: (field, bits, meaning). 122 of 128 bits.
FIELDS: tuple[tuple[str, int, str], ...] = (
    ("opcode", 6, "Op"),
    ("dst", 6, "destination buffer"),
    ("src0", 6, "first source buffer"),
    ("src1", 6, "second source buffer"),
    ("src2", 6, "third source buffer"),
    ("tensor", 12, "weight matrix, norm vector or HBM region (the program's tensor table)"),
    ("layer", 8, "decoder layer"),
    ("rows", 16, "rows of a matrix op; heads of RoPE and ATTEND"),
    ("cols", 16, "columns of a matrix op; head_dim of RoPE and ATTEND"),
    ("tokens", 12, "tokens of the op; 0: the current tile's (from the length register)"),
    ("offset", 12, "first token of the op in the sequence's rows; with tokens 0: the tile's"),
    ("count", 12, "LOOP: instructions in the body; MATMUL, DEQUANTIZE: weight column blocks"),
    (
        "flags",
        4,
        "MATMUL: bit 0 matrix-vector mode, bit 1 16-bit activations, bit 2 16-bit weights (two "
        "digit matrices); QUANTIZE: 1 = 16 bits; LOAD and STORE: 1 = the last token only",
    ),
)

WORD_BYTES = 16
_TOTAL_BITS = sum(bits for _, bits, _ in FIELDS)
assert _TOTAL_BITS <= 8 * WORD_BYTES


@dataclass(frozen=True)
class Instruction:
    """One instruction; fields not given are zero."""

    op: Op
    dst: int = 0
    src0: int = 0
    src1: int = 0
    src2: int = 0
    tensor: int = 0
    layer: int = 0
    rows: int = 0
    cols: int = 0
    tokens: int = 0
    offset: int = 0
    count: int = 0
    flags: int = 0

    @property
    def unit(self) -> Unit:
        return UNIT[self.op]

    def values(self) -> dict[str, int]:
        return {
            name: int(self.op) if name == "opcode" else getattr(self, name) for name, _, _ in FIELDS
        }

    def encode(self) -> int:
        """The 128-bit word (``opcode`` in the lowest bits)."""
        word, shift = 0, 0
        for name, bits, _ in FIELDS:
            value = self.values()[name]
            if not 0 <= value < 1 << bits:
                raise ValueError(f"{self.op.name}: field {name} = {value} does not fit {bits} bits")
            word |= value << shift
            shift += bits
        return word

    @classmethod
    def decode(cls, word: int) -> "Instruction":
        fields, shift = {}, 0
        for name, bits, _ in FIELDS:
            fields[name] = (word >> shift) & ((1 << bits) - 1)
            shift += bits
        if word >> shift:
            raise ValueError(f"instruction word {word:#x} sets bits above {shift}")
        try:
            op = Op(fields.pop("opcode"))
        except ValueError:
            raise ValueError(f"instruction word {word:#x}: unknown opcode") from None
        return cls(op=op, **fields)

    def __str__(self) -> str:
        used = {k: v for k, v in self.values().items() if v and k != "opcode"}
        return f"{self.op.name:<10} " + " ".join(f"{k}={v}" for k, v in used.items())


def encode_program(instructions) -> bytes:
    """The program image: 16 little-endian bytes per instruction."""
    return b"".join(i.encode().to_bytes(WORD_BYTES, "little") for i in instructions)


def decode_program(image: bytes) -> list[Instruction]:
    """Instructions of a program image (:func:`encode_program`)."""
    if len(image) % WORD_BYTES:
        raise ValueError(
            f"a program image is whole {WORD_BYTES}-byte words, not {len(image)} bytes"
        )
    words = np.frombuffer(image, dtype="<u8").reshape(-1, 2)
    return [Instruction.decode(int(lo) | int(hi) << 64) for lo, hi in words]
