"""Payload layouts of the streams between the ``rnn`` engine's components, and of its memories.

A beat is one program entry for one batch element. It leaves the :class:`~.dispatcher.Dispatcher`
as the addresses of its operand and weight words (:func:`beat_layout`), the
:class:`~.mac_array.MacArray` reads them and turns a row block's last beat into its gate
pre-activations
(:func:`sums_layout`), the :class:`~.activations.Activations` into the unit's gates and old state
(:func:`gates_layout`), and the :class:`~.cell.Cell` into the engine's output. Every stage keeps
the beat's :func:`tag_layout`: where its results go.
"""

from amaranth.hdl import signed, unsigned
from amaranth.lib import data
from amaranth.utils import ceil_log2
from tandem.host.common import bits
from tandem.host.rnn import RnnParams, tile_fields

__all__ = [
    "ENTRY_FIELDS",
    "GATE_NAMES",
    "beat_layout",
    "checked",
    "entry_layout",
    "gates_layout",
    "sums_layout",
    "tag_layout",
]

#: The fields of a ``tile_i`` beat that the program memory keeps (the dispatcher's entry).
ENTRY_FIELDS = ("src", "col", "row", "first", "last", "wait", "need", "end")

#: A unit's four gate rows, in the order the tile program packs them.
GATE_NAMES = {"lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n_x", "n_h")}


def checked(params: RnnParams) -> RnnParams:
    """``params``, where it is an :class:`~tandem.host.rnn.RnnParams` (a component's argument)."""
    if not isinstance(params, RnnParams):
        raise TypeError(f"params must be an RnnParams, not {params!r}")
    return params


def entry_layout(params: RnnParams) -> data.StructLayout:
    """One program entry, as the program memory holds it."""
    return bits.layout([(n, w) for n, w in tile_fields(params) if n in ENTRY_FIELDS])


def tag_layout(params: RnnParams) -> data.StructLayout:
    """Where a beat's results go: its row block, batch element, step parity, and whether its
    step is the sequence's first (whose state starts at 0)."""
    return data.StructLayout(
        {"row": params.row_bits, "b": range(max(params.batch, 2)), "par": 1, "step0": 1}
    )


def beat_layout(params: RnnParams) -> data.StructLayout:
    """Dispatcher to MAC array, one per issued beat: where its operand and weight words are.

    ``x_addr`` is the x tile's word in the x memory; ``h_addr`` the h memory word whose
    ``slice``-th ``tile_cols`` values are the operand when ``src`` is set (zeros when ``zero``:
    h at step 0); ``w_addr`` the tile's word in the weight memory (on-chip weights), or
    ``weights`` the tile itself, taken from ``w_i`` by batch element 0 (streamed weights).
    ``first`` starts the row block's sum from its bias, ``last`` ends it."""
    p = params
    fields = {
        "tag": tag_layout(p),
        "first": 1,
        "last": 1,
        "src": 1,
        "zero": 1,
        "slice": range(max(p.h_word // p.tile_cols, 2)),
        "x_addr": ceil_log2(2 * p.batch * p.max_x_blocks),
        "h_addr": ceil_log2(2 * p.batch * p.h_words),
    }
    if p.weight_source == "memory":
        fields["w_addr"] = ceil_log2(p.max_entries)
    else:
        fields["weights"] = unsigned(p.tile_bits)
    return data.StructLayout(fields)


def sums_layout(params: RnnParams) -> data.StructLayout:
    """MAC array to activations: a row block's accumulated gate rows (``w_frac`` scale)."""
    p = params
    return data.StructLayout(
        {"tag": tag_layout(p), "pre": data.ArrayLayout(signed(p.acc_bits), p.tile_rows)}
    )


def unit_gates_layout(params: RnnParams) -> data.StructLayout:
    """One unit's gates (``gate_frac`` fraction bits); a GRU's n_x and n_h are clamped
    activation inputs (``state_frac``), passed through."""
    p = params
    gate = signed(p.gate_frac + 2)
    names = GATE_NAMES[p.cell]
    shapes = [gate, gate] + [signed(p.act_bits) if p.cell == "gru" else gate] * 2
    return data.StructLayout(dict(zip(names, shapes, strict=True)))


def gates_layout(params: RnnParams) -> data.StructLayout:
    """Activations to cell: every unit's gates and old state (an LSTM's c, a GRU's h), and
    ``sat``, whether an activation input's clamp changed a result."""
    p = params
    ub = p.units_per_block
    return data.StructLayout(
        {
            "tag": tag_layout(p),
            "sat": 1,
            "gates": data.ArrayLayout(unit_gates_layout(p), ub),
            "state": data.ArrayLayout(signed(p.c_bits), ub),
        }
    )
