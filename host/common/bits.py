"""Integer fields packed into one payload word: the one implementation of every wire format.

A payload is described by a *field list*: :class:`Field` entries, the first in the least
significant bits and each next one right above the previous one, unless it names its own
``offset`` (then the bits in between are zero). This is how Amaranth lays out a
:class:`amaranth.lib.data.StructLayout` (members in declaration order) and an
:class:`~amaranth.lib.data.ArrayLayout` (element 0 lowest), so :func:`layout` turns the same list
into the gateware's view of the payload and the host packs and unpacks with :func:`pack` and
:func:`unpack` (one payload, any width) or :func:`pack_rows` and :func:`unpack_rows` (arrays of
payloads, vectorized over the rows).

Field kinds
-----------
``signed=False``
    Unsigned: values in ``[0, 2**width)``.
``signed=True``
    Two's complement: values in ``[-2**(width-1), 2**(width-1))``, sign-extended on unpack.
``signed=None``
    Raw bits of either reading: values in ``[-2**(width-1), 2**width)``, unpacked unsigned.
    A plain integer in a field list is such a field; it serves drivers that do not know the
    signedness of the port they drive (a stream source's payload).

A value outside its field's range is a ``ValueError`` that names the field: nothing is
silently truncated.
"""

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

__all__ = [
    "Field",
    "as_fields",
    "field_offsets",
    "layout",
    "pack",
    "pack_array",
    "pack_rows",
    "payload_bits",
    "unpack",
    "unpack_array",
    "unpack_rows",
]


class Field(NamedTuple):
    """One field of a payload.

    Attributes
    ----------
    name : str
        Key of the field's value in a mapping (and of the Amaranth layout's member).
    width : int
        Bits of one element.
    signed : bool or None
        ``False`` unsigned, ``True`` two's complement, ``None`` raw bits (see the module).
    count : int or None
        ``None`` for a scalar; else an array of ``count`` elements of ``width`` bits, element
        0 lowest, whose value is a sequence (an ``ArrayLayout``, even of one element).
    offset : int or None
        Bit offset of the field's lowest bit; ``None`` places it right above the previous one.
    """

    name: str
    width: int
    signed: bool | None = False
    count: int | None = None
    offset: int | None = None

    @property
    def elements(self) -> int:
        """Elements of the field: ``count``, or 1 for a scalar."""
        return 1 if self.count is None else self.count

    @property
    def bits(self) -> int:
        """Bits the field takes (``width`` times the elements)."""
        return self.width * self.elements


def as_fields(spec, *, signed: bool | None = None) -> tuple[Field, ...]:
    """A field list from ``Field``s, ``(name, width)`` / ``(name, width, signed)`` tuples or widths.

    A bare integer width becomes a field named ``"field <index>"`` of kind ``signed`` (default
    ``None``, raw bits). Widths must be positive.
    """
    out = []
    for index, item in enumerate(spec):
        if isinstance(item, Field):
            field = item
        elif isinstance(item, tuple):
            field = Field(*item)
        else:
            field = Field(f"field {index}", int(item), signed)
        if not isinstance(field.width, int | np.integer) or field.width < 1:
            raise ValueError(
                f"field {field.name!r}: width must be a positive integer, not {field.width!r}"
            )
        if field.count is not None and field.count < 1:
            raise ValueError(f"field {field.name!r}: count must be positive, not {field.count!r}")
        out.append(field)
    return tuple(out)


def field_offsets(fields) -> list[tuple[Field, int]]:
    """``(field, bit offset)`` of every field of the list, in order."""
    placed, next_offset = [], 0
    for field in as_fields(fields):
        offset = next_offset if field.offset is None else field.offset
        if offset < 0:
            raise ValueError(f"field {field.name!r}: offset must be non-negative, not {offset}")
        placed.append((field, offset))
        next_offset = offset + field.bits
    return placed


def payload_bits(fields) -> int:
    """Bits up to the top of the highest field."""
    return max((offset + field.bits for field, offset in field_offsets(fields)), default=0)


def _bounds(field: Field) -> tuple[int, int]:
    """``(lowest, highest)`` value of one element of ``field``."""
    w = field.width
    if field.signed is None:
        return -(1 << (w - 1)), (1 << w) - 1
    if field.signed:
        return -(1 << (w - 1)), (1 << (w - 1)) - 1
    return 0, (1 << w) - 1


def _out_of_range(field: Field, value) -> ValueError:
    low, high = _bounds(field)
    kind = {None: "raw", True: "signed", False: "unsigned"}[field.signed]
    return ValueError(
        f"field {field.name!r} = {value} does not fit {kind} {field.width} bits ({low}..{high})"
    )


def _check_int(field: Field, value) -> int:
    value = int(value)
    low, high = _bounds(field)
    if not low <= value <= high:
        raise _out_of_range(field, value)
    return value


def _element_values(field: Field, value) -> list[int]:
    if field.count is None:
        return [_check_int(field, value)]
    values = _flat(value)
    if len(values) != field.count:
        raise ValueError(f"field {field.name!r} holds {field.count} elements, not {len(values)}")
    return [_check_int(field, v) for v in values]


def _flat(value) -> list:
    """The elements of ``value`` (an array or nested sequences) as Python objects, in order.

    Not through ``np.asarray`` for sequences: it would turn integers beyond int64 (a 64-bit
    unsigned field) into float64 and round them.
    """
    if isinstance(value, np.ndarray):
        return value.reshape(-1).tolist()
    if isinstance(value, list | tuple):
        return [element for item in value for element in _flat(item)]
    return [value]


def _field_values(fields: tuple[Field, ...], values) -> list:
    if isinstance(values, Mapping):
        unknown = set(values) - {f.name for f in fields}
        if unknown:
            raise ValueError(f"no field named {sorted(unknown)[0]!r}")
        missing = [f.name for f in fields if f.name not in values]
        if missing:
            raise ValueError(f"field {missing[0]!r} has no value")
        return [values[f.name] for f in fields]
    values = list(values)
    if len(values) != len(fields):
        raise ValueError(f"{len(values)} values for {len(fields)} fields")
    return values


def pack(fields, values) -> int:
    """One payload from field values.

    Parameters
    ----------
    fields
        Field list (see :func:`as_fields`).
    values
        Mapping from field name to value, or a sequence in field order. An array field's value
        is a sequence of its ``count`` elements.

    Returns
    -------
    int
        The payload (non-negative, any width).

    Raises
    ------
    ValueError
        A value outside its field's range (the message names the field), a missing or
        unknown field, or a wrong number of values.
    """
    fields = as_fields(fields)
    word = 0
    for (field, offset), value in zip(
        field_offsets(fields), _field_values(fields, values), strict=True
    ):
        mask = (1 << field.width) - 1
        for index, element in enumerate(_element_values(field, value)):
            word |= (element & mask) << (offset + index * field.width)
    return word


def _read(field: Field, raw: int) -> int:
    if field.signed and raw >> (field.width - 1):
        return raw - (1 << field.width)
    return raw


def unpack(fields, word: int) -> dict[str, int | list[int]]:
    """Field values of one payload: ``{name: value}`` (a list for an array field).

    Signed fields are sign-extended; bits outside every field are ignored. A negative
    ``word`` (a payload read as signed) is read by its two's complement bits.
    """
    word = int(word)
    out = {}
    for field, offset in field_offsets(fields):
        mask = (1 << field.width) - 1
        elements = [
            _read(field, (word >> (offset + i * field.width)) & mask) for i in range(field.elements)
        ]
        out[field.name] = elements[0] if field.count is None else elements
    return out


def pack_array(values, width: int, *, signed: bool | None = True) -> int:
    """One payload from equal-width elements, element 0 lowest (an ``ArrayLayout``)."""
    values = _flat(values)
    return pack([Field("element", width, signed, len(values))], [values]) if values else 0


def unpack_array(word: int, width: int, count: int, *, signed: bool | None = True) -> np.ndarray:
    """``count`` elements of ``width`` bits of one payload, element 0 lowest (int64)."""
    return np.asarray(unpack([Field("element", width, signed, count)], word)["element"], np.int64)


# --- arrays of payloads ------------------------------------------------------------------
def _columns(fields) -> list[tuple[Field, int]]:
    """``(field, bit offset)`` of every scalar element: one column of a row each."""
    columns = []
    for field, offset in field_offsets(fields):
        element = field._replace(count=None)
        columns += [(element, offset + i * field.width) for i in range(field.elements)]
    return columns


def pack_rows(fields, rows) -> list[int]:
    """The payload of each row of ``rows``, vectorized over the rows.

    Parameters
    ----------
    fields
        Field list; every field at most 64 bits wide per element.
    rows
        Integer array ``[n, columns]``: one column per scalar field and per element of an
        array field, in field order.

    Returns
    -------
    list of int
        ``n`` payloads (Python integers: payloads may be wider than 64 bits).
    """
    columns = _columns(fields)
    rows = np.asarray(rows)
    if rows.ndim == 1 and len(columns) == 1:
        rows = rows[:, None]
    if rows.ndim != 2 or rows.shape[1] != len(columns):
        raise ValueError(f"rows must be [n, {len(columns)}], not {list(rows.shape)}")
    if rows.size and not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(f"rows must hold integers, not {rows.dtype}")
    n = rows.shape[0]
    total = payload_bits(fields)
    bits = np.zeros((n, -(-total // 8) * 8), dtype=np.uint8)
    for index, (field, offset) in enumerate(columns):
        if field.width > 64:
            raise ValueError(f"field {field.name!r}: pack_rows takes fields of at most 64 bits")
        column = rows[:, index].astype(np.int64)
        low, high = _bounds(field)
        bad = (column < low) | (column > high) if field.width < 64 else column < low
        if np.any(bad):
            raise _out_of_range(field, int(column[np.argmax(bad)]))
        raw = column.astype("<u8").view(np.uint8).reshape(n, 8)
        bits[:, offset : offset + field.width] = np.unpackbits(raw, axis=1, bitorder="little")[
            :, : field.width
        ]
    data = np.packbits(bits, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in data]


def unpack_rows(fields, words) -> np.ndarray:
    """Field values of each payload: int64 ``[n, columns]`` (the inverse of :func:`pack_rows`).

    Every field at most 64 bits wide per element (63 unless signed).
    """
    columns = _columns(fields)
    total = payload_bits(fields)
    size = -(-total // 8)
    words = [int(w) for w in words]
    mask = (1 << total) - 1  # also reads a negative payload by its two's complement bits
    data = np.frombuffer(
        b"".join((w & mask).to_bytes(size, "little") for w in words), dtype=np.uint8
    ).reshape(len(words), size)
    bits = np.unpackbits(data, axis=1, bitorder="little")
    out = np.zeros((len(words), len(columns)), dtype=np.int64)
    for index, (field, offset) in enumerate(columns):
        if field.width > 63 and field.signed is not True:
            raise ValueError(
                f"field {field.name!r}: unpack_rows reads unsigned fields of at most 63 bits"
            )
        if field.width > 64:
            raise ValueError(f"field {field.name!r}: unpack_rows reads fields of at most 64 bits")
        chunk = np.zeros((len(words), 64), dtype=np.uint8)
        chunk[:, : field.width] = bits[:, offset : offset + field.width]
        if field.signed:
            chunk[:, field.width :] = chunk[:, field.width - 1 : field.width]
        out[:, index] = np.packbits(chunk, axis=1, bitorder="little").view("<i8")[:, 0]
    return out


# --- the gateware's view -----------------------------------------------------------------
def layout(fields, size: int | None = None):
    """The Amaranth layout of a field list.

    A :class:`~amaranth.lib.data.StructLayout` when the fields follow one another (no field
    names an ``offset``) and ``size`` is not given; else a
    :class:`~amaranth.lib.data.FlexibleLayout` of ``size`` bits (default: up to the highest
    field) with every field at its offset. An array field is an
    :class:`~amaranth.lib.data.ArrayLayout`. Raw fields are unsigned.
    """
    from amaranth.hdl import signed as signed_shape
    from amaranth.hdl import unsigned
    from amaranth.lib import data

    placed = field_offsets(fields)

    def shape(field: Field):
        element = signed_shape(field.width) if field.signed else unsigned(field.width)
        return element if field.count is None else data.ArrayLayout(element, field.count)

    if size is None and all(field.offset is None for field, _ in placed):
        return data.StructLayout({field.name: shape(field) for field, _ in placed})
    size = payload_bits(fields) if size is None else size
    return data.FlexibleLayout(
        size, {field.name: data.Field(shape(field), offset) for field, offset in placed}
    )
