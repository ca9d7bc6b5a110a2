"""One pack/unpack for every wire format (tandem.host.common.bits) and the HPU's field lists."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tandem.host.common import bits
from tandem.host.common.bits import Field
from tandem.host.hpu import HEADER_BYTES, HpuParams, HpuRequest, decode_result, pack_descriptor
from tandem.host.hpu.codec import (
    HEADER_FIELDS,
    header_layout,
    pack_header,
    result_error,
    result_fields,
    result_layout,
    unpack_header,
)


def _value(draw, field: Field) -> int:
    w = field.width
    low, high = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if field.signed else (0, (1 << w) - 1)
    return draw(st.integers(low, high))


@st.composite
def _fields_and_values(draw):
    fields, values = [], []
    for index in range(draw(st.integers(1, 6))):
        width = draw(st.integers(1, 70))
        signed = draw(st.sampled_from([False, True]))
        count = draw(st.sampled_from([None, 1, 3]))
        field = Field(f"f{index}", width, signed, count)
        fields.append(field)
        if count is None:
            values.append(_value(draw, field))
        else:
            values.append([_value(draw, field) for _ in range(count)])
    return fields, values


@settings(max_examples=300, deadline=None)
@given(_fields_and_values())
def test_round_trip(case):
    fields, values = case
    word = bits.pack(fields, values)
    assert 0 <= word < 1 << bits.payload_bits(fields)
    assert bits.unpack(fields, word) == {f.name: v for f, v in zip(fields, values)}
    by_name = bits.pack(fields, {f.name: v for f, v in zip(fields, values)})
    assert by_name == word


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_rows_match_the_scalar_form(data):
    fields = [
        Field(f"f{i}", data.draw(st.integers(1, 63)), data.draw(st.booleans()))
        for i in range(data.draw(st.integers(1, 5)))
    ]
    rows = [[_value(data.draw, f) for f in fields] for _ in range(data.draw(st.integers(0, 8)))]
    array = np.array(rows, dtype=np.int64).reshape(len(rows), len(fields))
    words = bits.pack_rows(fields, array)
    assert words == [bits.pack(fields, row) for row in rows]
    assert np.array_equal(bits.unpack_rows(fields, words), array)


def test_known_values():
    # First field lowest; signed fields two's complement; raw fields take either reading.
    assert bits.pack([("a", 4, True), ("b", 4), ("c", 1)], [-1, 1, 1]) == 0b1_0001_1111
    assert bits.pack([4, 4, 1], [-1, 1, 1]) == 0b1_0001_1111
    assert bits.unpack([("a", 4, True), ("b", 4)], 0b0001_1111) == {"a": -1, "b": 1}
    assert bits.unpack([("a", 4), ("b", 4)], 0b0001_1111) == {"a": 15, "b": 1}
    assert bits.pack_array([1, -2, 3], 8) == 0x03_FE_01
    assert bits.unpack_array(0x03_FE_01, 8, 3).tolist() == [1, -2, 3]
    # An explicit offset leaves a gap; the next field follows the offset one.
    fields = [("lo", 4), Field("hi", 4, offset=8), ("top", 2)]
    assert bits.pack(fields, [0xA, 0xB, 3]) == 0x3_B_0_A
    assert bits.unpack(fields, 0x3_B_0_A) == {"lo": 0xA, "hi": 0xB, "top": 3}
    # A negative payload (read from a signed port) is read by its bits.
    assert bits.unpack([("a", 4, True), ("b", 4, True)], -1) == {"a": -1, "b": -1}
    assert bits.unpack_rows([("a", 4), ("b", 4, True)], [-1]).tolist() == [[15, -1]]
    assert bits.pack_rows([Field("x", 64, True)], np.array([[-(2**63)]])) == [1 << 63]


@pytest.mark.parametrize(
    ("fields", "values", "message"),
    [
        ([("mode", 1)], [2], r"field 'mode' = 2 does not fit unsigned 1 bits \(0\.\.1\)"),
        ([("w", 8, True)], [128], r"field 'w' = 128 does not fit signed 8 bits"),
        ([("w", 8, True)], [-129], r"field 'w' = -129"),
        ([4], [16], r"field 'field 0' = 16 does not fit raw 4 bits \(-8\.\.15\)"),
        ([4], [-9], r"field 'field 0' = -9"),
        ([Field("v", 4, True, 2)], [[1, 8]], r"field 'v' = 8"),
        ([Field("v", 4, True, 2)], [[1]], r"field 'v' holds 2 elements, not 1"),
        ([("a", 2), ("b", 2)], {"a": 1}, r"field 'b' has no value"),
        ([("a", 2)], {"a": 1, "z": 0}, r"no field named 'z'"),
        ([("a", 2), ("b", 2)], [1], r"1 values for 2 fields"),
    ],
)
def test_out_of_range_names_the_field(fields, values, message):
    with pytest.raises(ValueError, match=message):
        bits.pack(fields, values)


def test_rows_reject_out_of_range_naming_the_field():
    with pytest.raises(ValueError, match=r"field 'x' = -5 does not fit unsigned 3 bits"):
        bits.pack_rows([("x", 3)], np.array([[1], [-5]]))


def test_amaranth_layout_lays_out_fields_like_pack():
    fields = [("a", 3, True), Field("v", 5, False, 2), ("b", 7)]
    layout = bits.layout(fields)
    values = {"a": -3, "v": [17, 4], "b": 99}
    assert layout.size == bits.payload_bits(fields) == 20
    assert layout.const(values).as_bits() == bits.pack(fields, values)
    flexible = bits.layout([("lo", 4), Field("hi", 4, offset=8)], size=16)
    assert flexible.size == 16
    assert flexible.const({"lo": 5, "hi": 9}).as_bits() == 0x0905


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"lanes": 8, "mem_data_bits": 64, "kv_bits": 8, "gqa_group": 8, "read_ports": 1},
        {"lanes": 64, "mem_data_bits": 512, "kv_bits": 8, "gqa_group": 1, "head_dim": 32},
        {"lanes": 16, "mem_data_bits": 128, "kv_bits": 8, "gqa_group": 3, "q_bits": 8},
    ],
)
def test_hpu_header_fields(kw):
    p = HpuParams(**kw)
    rng = np.random.default_rng(1)
    q_scale = rng.random(p.gqa_group).astype(np.float16)
    request = HpuRequest(
        seq_id=0xDEADBEEF,
        base=64 * 12345,
        length=77,
        q=rng.integers(-9, 9, (p.gqa_group, p.head_dim)),
        score_scale=q_scale,
        new_k=np.ones(p.head_dim, np.int64),
        new_v=np.ones(p.head_dim, np.int64),
        new_k_scale=0.5,
        new_v_scale=0.25,
        partial=True,
    )
    data = pack_descriptor(p, request)
    header = data[:HEADER_BYTES]
    # The byte offsets the format promises.
    assert int.from_bytes(header[0:4], "little") == 0xDEADBEEF
    assert int.from_bytes(header[4:8], "little") == 77
    assert int.from_bytes(header[8:16], "little") == 64 * 12345
    assert header[16] == 0b11
    assert np.frombuffer(header[20:24], "<f2").tolist() == [0.5, 0.25]
    assert np.array_equal(np.frombuffer(header[24 : 24 + 2 * p.gqa_group], "<f2"), q_scale)
    assert not any(header[17:20]) and not any(header[24 + 2 * p.gqa_group :])
    fields = unpack_header(p, data)
    assert (fields["seq_id"], fields["length"], fields["base"]) == (0xDEADBEEF, 77, 64 * 12345)
    assert (fields["append"], fields["partial"]) == (1, 1)
    assert np.array_equal(fields["score_scale"], q_scale)
    assert pack_header(p, fields) == header
    # The gateware's view: the same bits, field by field, across the header beats.
    layout = header_layout(p)
    assert layout.size == 8 * p.header_beats * p.beat_bytes
    view = layout.from_bits(int.from_bytes(header, "little"))
    assert view.seq_id == 0xDEADBEEF and view.length == 77 and view.base == 64 * 12345
    assert view.append == 1 and view.partial == 1
    assert view.new_k_scale == int(np.float16(0.5).view(np.uint16))
    scale_bits = q_scale.view(np.uint16)
    assert [view.score_scale[g] for g in range(p.gqa_group)] == scale_bits.tolist()
    assert {f.name for f in HEADER_FIELDS} == {name for name, _ in layout}


def test_hpu_result_beat():
    p = HpuParams(lanes=8, mem_data_bits=64, kv_bits=8)
    words = [-1, 2, -(1 << (p.word_bits - 1)), (1 << (p.word_bits - 1)) - 1, 0, 5, -6, 7]
    payload = bits.pack(result_fields(p), [words, 0xFFFFFFFF, 1, 0])
    fields = {"data": words, "tag": 0xFFFFFFFF, "last": 1, "error": 0}
    assert payload == result_layout(p).const(fields).as_bits()
    assert decode_result(p, payload) == (words, 0xFFFFFFFF, 1)
    assert payload >> (8 * p.word_bits) == (1 << 32) | 0xFFFFFFFF
    assert not result_error(p, payload)
    flagged = bits.pack(result_fields(p), [words, 0xFFFFFFFF, 1, 1])
    assert flagged == result_layout(p).const({**fields, "error": 1}).as_bits()
    assert flagged >> (8 * p.word_bits) == (1 << 33) | (1 << 32) | 0xFFFFFFFF
    assert result_error(p, flagged) and decode_result(p, flagged) == (words, 0xFFFFFFFF, 1)
