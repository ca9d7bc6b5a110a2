"""``rnn``'s streams: a quantized model packed into tiles, the tile, weight, input and command
beats the engine reads, and the output beats decoded."""

import numpy as np
from tandem.host.common import bits
from tandem.mappings.rnn.tiling import GATES, TileProgram, packed_rows

from .params import STATE_BITS, RnnParams
from .quantize import QuantLstm


def pack_tiles(params: RnnParams, model: QuantLstm, program: TileProgram):
    """Tiles ``(entries, tile_rows, tile_cols)`` and biases ``(row_blocks, tile_rows)``.

    Tile ``e`` holds the weights entry ``e`` of ``program`` multiplies: its row block's packed
    rows (unit-interleaved, see :func:`tandem.mappings.rnn.tiling.packed_rows`) times its x or
    h column block, zero-padded.
    """
    tr, tc = program.tile_rows, program.tile_cols
    if (tr, tc) != (params.tile_rows, params.tile_cols):
        raise ValueError(
            f"program tile {tr}x{tc} does not match the engine's "
            f"{params.tile_rows}x{params.tile_cols}"
        )
    nx_in, nh_in = program.input_size, program.hidden_size
    if (model.input_size, model.hidden_size) != (nx_in, nh_in):
        raise ValueError("program and model sizes differ")
    rows = packed_rows(nh_in, tr)
    valid = rows >= 0
    nx, nh = program.x_blocks, program.h_blocks
    wpad = np.zeros((len(rows), nx * tc), np.int64)
    upad = np.zeros((len(rows), nh * tc), np.int64)
    bias = np.zeros(len(rows), np.int64)
    if params.cell == "gru":
        # Packed rows per unit: r, z (W and U), n_x (W_in, b_in), n_h (U_hn, b_hn).
        unit = np.arange(len(rows)) // GATES
        slot = np.arange(len(rows)) % GATES
        live = unit < nh_in
        src = np.minimum(slot, 2) * nh_in + unit  # torch row of r, z, n
        use_w = live & (slot != 3)
        use_u = live & (slot != 2)
        wpad[use_w, :nx_in] = model.w[src[use_w]]
        upad[use_u, :nh_in] = model.u[src[use_u]]
        bias[use_w] = model.bias[src[use_w]]
        rz = live & (slot < 2)
        bias[rz] += model.bias_h[src[rz]]
        nh_rows = live & (slot == 3)
        bias[nh_rows] = model.bias_h[src[nh_rows]]
    else:
        wpad[valid, :nx_in] = model.w[rows[valid]]
        upad[valid, :nh_in] = model.u[rows[valid]]
        bias[valid] = model.bias[rows[valid]]
    wt = wpad.reshape(program.row_blocks, tr, nx, tc).transpose(0, 2, 1, 3)
    ut = upad.reshape(program.row_blocks, tr, nh, tc).transpose(0, 2, 1, 3)
    tiles = np.where(
        (program.src == 0)[:, None, None],
        wt[program.row, np.minimum(program.col, nx - 1)],
        ut[program.row, np.minimum(program.col, nh - 1)],
    )
    return tiles, bias.reshape(program.row_blocks, tr)


def tile_fields(params: RnnParams) -> list[tuple[str, int]]:
    """Payload layout of the ``tile_i`` stream, least significant field first."""
    p = params
    weights = [("weights", p.tile_bits)] if p.weight_source == "memory" else []
    return weights + [
        ("bias", p.tile_rows * p.acc_bits),
        ("src", 1),
        ("col", p.col_bits),
        ("row", p.row_bits),
        ("first", 1),
        ("last", 1),
        ("wait", 1),
        ("need", p.row_bits),
        ("end", 1),
    ]


def cmd_fields(params: RnnParams) -> list[tuple[str, int]]:
    """Payload layout of the ``cmd_i`` stream."""
    p = params
    return [
        ("steps", p.step_bits),
        ("x_blocks", p.max_x_blocks.bit_length()),
        ("row_blocks", p.max_row_blocks.bit_length()),
        ("w_frac", p.w_frac_bits),
    ]


def out_fields(params: RnnParams) -> list[tuple[str, int]]:
    """Payload layout of the ``o`` stream: h then c of one row block's units (``c_bits``
    each), then the sequence's sticky saturation flag (:func:`saturation_flags`)."""
    ub = params.units_per_block
    return [("h", ub * STATE_BITS), ("c", ub * params.c_bits), ("sat", 1)]


#: One payload from named field values, LSB-first as Amaranth lays out structs
#: (:func:`tandem.host.common.bits.pack`; every field needs a value, in range).
pack_fields = bits.pack
#: Field values of one payload (:func:`tandem.host.common.bits.unpack`; unsigned fields).
unpack_fields = bits.unpack


def tile_beats(params: RnnParams, program: TileProgram, tiles, biases) -> list[int]:
    """``tile_i`` payloads: one per program entry (weights row-major, the entry's bias block
    on ``first`` entries)."""
    p = params
    entries = program.entries
    if not entries:
        return []
    # tile_fields with the weights and the bias as arrays of their elements (element 0
    # lowest, as pack_array lays them out): one vectorized pack of every entry.
    fields, columns = [], []
    if p.weight_source == "memory":
        fields.append(bits.Field("weights", p.weight_bits, True, p.tile_rows * p.tile_cols))
        columns.append(np.asarray(tiles, np.int64).reshape(entries, -1))
    fields.append(bits.Field("bias", p.acc_bits, True, p.tile_rows))
    columns.append(np.asarray(biases, np.int64)[np.asarray(program.row)].reshape(entries, -1))
    for name, width in tile_fields(p)[len(fields) :]:
        fields.append(bits.Field(name, width))
        columns.append(np.asarray(getattr(program, name), np.int64).reshape(entries, 1))
    return bits.pack_rows(fields, np.concatenate(columns, axis=1))


def weight_beats(params: RnnParams, tiles) -> list[int]:
    """``w_i`` payloads of one step (``weight_source = "stream"``): one tile per program entry,
    weights row-major; send them again for every step."""
    return [bits.pack_array(tile, params.weight_bits) for tile in tiles]


def x_beats(params: RnnParams, program: TileProgram, x) -> list[int]:
    """``x_i`` payloads for ``x`` of shape ``(T, B, X)``: step, batch, column block order."""
    x = np.asarray(x, dtype=np.int64)
    steps, batch, width = x.shape
    tc = params.tile_cols
    padded = np.zeros((steps, batch, program.x_blocks * tc), np.int64)
    padded[:, :, :width] = x
    blocks = padded.reshape(steps, batch, program.x_blocks, tc)
    return [
        bits.pack_array(blocks[t, b, j], STATE_BITS)
        for t in range(steps)
        for b in range(batch)
        for j in range(program.x_blocks)
    ]


def cmd_payload(params: RnnParams, program: TileProgram, steps: int, w_frac: int) -> int:
    """``cmd_i`` payload that runs ``steps`` steps of ``program``."""
    if not 1 <= steps <= params.max_steps:
        raise ValueError(f"steps must be 1..{params.max_steps}, not {steps}")
    return pack_fields(
        cmd_fields(params),
        {
            "steps": steps,
            "x_blocks": program.x_blocks,
            "row_blocks": program.row_blocks,
            "w_frac": w_frac,
        },
    )


def decode_outputs(params: RnnParams, program: TileProgram, beats, steps: int):
    """``(h, c, sat)`` from the ``o`` payloads (step, row block, batch order): h and c of shape
    ``(T, B, H)`` and the sticky saturation flags ``(T, row_blocks, B)`` (bool, in the order of
    :func:`saturation_flags`)."""
    ub, batch, hidden = params.units_per_block, params.batch, program.hidden_size
    expected = steps * program.row_blocks * batch
    if len(beats) != expected:
        raise ValueError(f"expected {expected} output beats, got {len(beats)}")
    h = np.zeros((steps, batch, program.row_blocks * ub), np.int64)
    c = np.zeros_like(h)
    sat = np.zeros((steps, program.row_blocks, batch), bool)
    layout = out_fields(params)
    index = 0
    for t in range(steps):
        for k in range(program.row_blocks):
            for b in range(batch):
                f = unpack_fields(layout, int(beats[index]))
                h[t, b, k * ub : (k + 1) * ub] = bits.unpack_array(f["h"], STATE_BITS, ub)
                c[t, b, k * ub : (k + 1) * ub] = bits.unpack_array(f["c"], params.c_bits, ub)
                sat[t, k, b] = bool(f["sat"])
                index += 1
    return h[:, :, :hidden], c[:, :, :hidden], sat
