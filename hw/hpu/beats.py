"""Payload layouts of the streams between the ``hpu`` engine's components, and their depths.

A request's descriptor is parsed into a slot (:class:`~.parser.Parser`); the
:class:`~.reader.Reader` streams its pages' beats, a :class:`~.sequencer.Sequencer` per side turns
them into row beats (:func:`row_beat_layout`), the :class:`~.k_side.KSide` turns K's into one
row entry per row (:func:`row_entry_layout`: every query's shift and ``p``) and a request's final
(m, l) per query (:func:`stats_layout`), the :class:`~.v_side.VSide` accumulates V's into the
snapshot the :class:`~.output.Output` emits, divided by the :class:`~.normalizer.Normalizer`'s
``1/m`` of each ``l``.
"""

from amaranth.hdl import signed, unsigned
from amaranth.lib import data
from tandem.host.hpu import HpuParams

__all__ = [
    "DATA_FIFO_DEPTH",
    "DESCRIPTOR_SLOTS",
    "ERROR_FIFO_DEPTH",
    "REQUEST_QUEUE_DEPTH",
    "ROW_FIFO_DEPTH",
    "TAG_BITS",
    "V_DATA_FIFO_DEPTH",
    "checked",
    "normalized_layout",
    "query_write_layout",
    "row_beat_layout",
    "row_entry_layout",
    "stats_layout",
    "v_request_layout",
]

#: Depth of the K read-data FIFO (32 beats and the entry the reader keeps free, so that its
#: room is a register: a buffered FIFO of 33 has 32 in LUTRAM) and of the row FIFO between
#: the K and V sides.
DATA_FIFO_DEPTH = 33
ROW_FIFO_DEPTH = 64
#: Depth of the V read-data FIFO: the V side takes a row's first beat only once the K side has
#: pushed that row's entry, so it lags the V port by the K pipeline's latency and a row; with
#: 32 entries a 13-stage K pipeline left the V port a cycle idle now and then. 64 entries cost
#: no more LUTs per bit than 32 would with a deeper K pipeline (LUTRAM is 32 or 64 deep); one
#: more for the entry the reader keeps free, as for K.
V_DATA_FIFO_DEPTH = 65
#: Requests the K side may run ahead of the output (V requests queued, (m, l) results held).
REQUEST_QUEUE_DEPTH = 4
#: Descriptor slots: the K side's request, the next one, and one more being parsed, so a short
#: request between two long ones does not leave the read ports waiting for a descriptor.
DESCRIPTOR_SLOTS = 3
#: Per-request error flags a reader or the writer holds for the output: a request's flag goes
#: in once its memory traffic is done, after its reads started, and out as the output takes its
#: (m, l). Requests between the two hold a descriptor slot or one of the K side's
#: REQUEST_QUEUE_DEPTH places, so this many never overflow.
ERROR_FIFO_DEPTH = DESCRIPTOR_SLOTS + REQUEST_QUEUE_DEPTH
#: A request's tag on the V side and at the output: its ``seq_id`` (32 bits), then ``partial``.
TAG_BITS = 33


def checked(params: HpuParams) -> HpuParams:
    """``params``, where it is an :class:`~tandem.host.hpu.HpuParams` (a component's argument)."""
    if not isinstance(params, HpuParams):
        raise TypeError(f"params must be an HpuParams, not {params!r}")
    return params


def body_beats(params: HpuParams) -> int:
    """The beats of a descriptor body: the new k row, the new v row, then every query."""
    p = params
    return 2 * p.row_beats + p.gqa_group * p.q_beats


def query_write_layout(params: HpuParams) -> data.StructLayout:
    """A descriptor's query beat on its way to the K side's query memory: the slot, the beat's
    index among the slot's query beats (query by query), its data."""
    p = params
    return data.StructLayout(
        {
            "slot": range(DESCRIPTOR_SLOTS),
            "beat": range(p.gqa_group * p.q_beats),
            "data": unsigned(p.mem_data_bits),
        }
    )


def row_beat_layout(params: HpuParams) -> data.StructLayout:
    """A sequencer's row beat: the beat's data, its row's binary16 scale, its index in the
    row, and whether it is the row's last beat, the request's first row, the request's last
    row."""
    p = params
    return data.StructLayout(
        {
            "data": unsigned(p.mem_data_bits),
            "scale": unsigned(16),
            "beat": range(p.row_beats),
            "last_beat": 1,
            "first_row": 1,
            "last_row": 1,
        }
    )


def row_entry_layout(params: HpuParams) -> data.ArrayLayout:
    """The K side's entry per row, one element per query: the row's shift of ``l`` and ``o``
    and its ``p`` (``prob_frac_bits + 1`` bits)."""
    p = params
    entry = data.StructLayout({"shift": unsigned(p.shift_bits), "prob": p.prob_frac_bits + 1})
    return data.ArrayLayout(entry, p.gqa_group)


def stats_layout(params: HpuParams) -> data.ArrayLayout:
    """A request's final (m, l) per query."""
    p = params
    return data.ArrayLayout(
        data.StructLayout({"max": signed(p.max_bits), "sum": unsigned(p.l_bits)}), p.gqa_group
    )


def normalized_layout(params: HpuParams) -> data.StructLayout:
    """A request's (m, l) per query and the reciprocal unit's ``1/m`` of each ``l``."""
    p = params
    return data.StructLayout(
        {
            "stats": stats_layout(p),
            "recips": data.ArrayLayout(unsigned(p.reciprocal.out_bits), p.gqa_group),
        }
    )


def v_request_layout(params: HpuParams) -> data.StructLayout:
    """What the V side needs of a request the K side starts: the appended v row and its scale,
    the stored rows, the append flag, the sequence id and the partial flag."""
    p = params
    return data.StructLayout(
        {
            "new_v": unsigned(p.row_elems * p.kv_bits),
            "new_v_scale": unsigned(16),
            "rows": unsigned(p.position_bits),
            "append": unsigned(1),
            "seq_id": unsigned(32),
            "partial": unsigned(1),
        }
    )
