"""Every device method and constructor against malformed arguments (golden backend).

Each case of the tables below hands one bad argument to one call of a fresh, loaded device and
asserts what the device API promises (docs/host.md): the call raises ``ValueError`` or a
documented subclass of the device errors (``CapacityError``, ``DeviceClosedError``, the
packer's ``NMError``) with one line, the device is exactly as it was (free spans, lengths and
memory of an ``HpuDevice``; loaded weights, model or mapping of the others; the cycle
counters), and a good call still works afterwards. The Hypothesis tests at the end hand random
arrays (shape, dtype, values) to the array arguments: each is either valid and computed
correctly, or rejected the same way.
"""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tandem.host.common.errors import CapacityError, DeviceClosedError
from tandem.host.hpu import HpuParams, quantize_rows, score_scale
from tandem.host.hpu.device import Attend, HpuDevice
from tandem.host.rnn import RnnParams
from tandem.host.rnn.device import RnnDevice
from tandem.host.sparse_dsp import SparseMpeParams
from tandem.host.sparse_dsp.device import SparseMpeDevice
from tandem.host.spmm import SparseEngineParams, SystolicParams
from tandem.host.spmm.device import SpmmDevice
from tandem.mappings.nm import NMError, NMPattern, prune_magnitude

#: What a malformed call may raise: ``ValueError`` and the documented device errors.
ALLOWED = (ValueError, CapacityError, DeviceClosedError, NMError)

NAN, INF = float("nan"), float("inf")
#: Not an integer: wrong types, floats (also integral ones), bools, non-finite values.
NOT_INTS = [
    "1",
    None,
    1.5,
    2.0,
    np.float64(2.0),
    True,
    np.bool_(True),
    NAN,
    INF,
    {},
    [1],
    object(),
    1 + 0j,
]
#: Not a bool flag.
NOT_BOOLS = ["yes", None, 2, 1.5, {}, object()]
HUGE = [1 << 70, np.int64(2**62), np.uint64(2**63)]


def _arrays(shape):
    """Arrays of ``shape`` that are no good as integers: float, complex, object, str, bool."""
    return [
        np.zeros(shape, np.float64),
        np.zeros(shape, np.complex128),
        np.zeros(shape, object),
        np.full(shape, "a"),
        np.zeros(shape, bool),
        None,
        "abc",
        {},
        object(),
    ]


def _check_rejected(make, snapshot, call, good):
    """``call`` on the fixture of ``make`` raises a one-line allowed error and changes nothing;
    ``good`` still works."""
    fixture = make()
    before = snapshot(fixture)
    with pytest.raises(Exception) as info:
        call(fixture)
    assert isinstance(info.value, ALLOWED), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    assert message and "\n" not in message, f"not one line: {message!r}"
    assert _same(snapshot(fixture), before), "the rejected call changed the device"
    good(fixture)


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)
    return a is b or a == b


def _counters(dev) -> dict:
    return {
        "calls": dev.calls,
        "total": dev.total_cycles,
        "last": dev.last_cycles,
        "closed": dev.closed,
    }


def _cases(table):
    """pytest params from a table of ``(label, call)`` pairs."""
    return [pytest.param(call, id=label) for label, call in table]


def _label(value) -> str:
    """A short label of ``value`` that is the same in every pytest worker."""
    if isinstance(value, np.ndarray):
        first = f",{value.flat[0]!r}" if value.size else ""
        return f"{value.dtype}{list(value.shape)}{first}"
    text = repr(value)
    return type(value).__name__ if " at 0x" in text else text


def _table(name, values, call):
    """One ``(label, call)`` pair per value: ``call(fixture, value)``."""
    return [
        (f"{name}[{i}]={_label(value)}"[:70], (lambda v: lambda f: call(f, v))(value))
        for i, value in enumerate(values)
    ]


# --- HpuDevice -------------------------------------------------------------------------------
P = HpuParams(head_dim=32, lanes=16, mem_data_bits=128, kv_bits=8, gqa_group=2, max_seq_len=256)
G, D = P.gqa_group, P.head_dim


def _tokens(n, seed=0):
    rng = np.random.default_rng(seed)
    k, ks = quantize_rows(rng.standard_normal((n, D)))
    v, vs = quantize_rows(rng.standard_normal((n, D)))
    return k, ks, v, vs


def _query(seed=0):
    rng = np.random.default_rng(seed)
    q, qs = quantize_rows(rng.standard_normal((G, D)), P.q_bits)
    return q, score_scale(qs, D)


def _hpu():
    dev = HpuDevice(P, memory_bytes=1 << 16, max_sequences=4)
    seq = dev.allocate(64, heads=2)
    dev.write_kv(seq, 0, *_tokens(10))
    freed = dev.allocate(32)
    dev.free(freed)
    full = dev.allocate(32)
    dev.write_kv(full, 0, *_tokens(31, seed=1))  # one token left
    other = HpuDevice(P, memory_bytes=1 << 16, name="hpu1")
    q, qs = _query()
    return SimpleNamespace(
        dev=dev,
        seq=seq,
        freed=freed,
        full=full,
        foreign=other.allocate(64, heads=2),
        copy=dataclasses.replace(seq, lengths=seq.lengths.copy()),
        q=q,
        qs=qs,
        tok=_tokens(1, seed=2),
        rows=_tokens(4, seed=3),
    )


def _hpu_state(f) -> dict:
    dev = f.dev
    return {
        "free": list(dev.space.free),
        "allocs": {
            h: (a.start, a.capacity, a.heads, a.lengths.copy()) for h, a in dev._allocs.items()
        },
        "next": dev._next_handle,
        "memory": dev.backend.memory.array.copy(),
        "lengths": [s.lengths.copy() for s in (f.seq, f.full, f.freed, f.foreign)],
        "freed": [s.freed for s in (f.seq, f.full, f.freed, f.foreign)],
        **_counters(dev),
    }


def _hpu_good(f):
    before = int(f.seq.lengths[0])
    y = f.dev.attend(f.seq, 0, f.q, f.qs, new=f.tok)
    assert y.y.shape == (G, D) and f.seq.lengths[0] == before + 1
    assert f.dev.read_kv(f.seq, 0)[0].shape == (before + 1, D)


def _attend(f, **change):
    args = {"seq": f.seq, "head": 0, "q": f.q, "score_scale": f.qs, "new": f.tok, "partial": False}
    args.update(change)
    return Attend(**args)


def _new(f, index, value):
    new = list(f.tok)
    new[index] = value
    return tuple(new)


def _rows(f, index, value):
    rows = list(f.rows)
    rows[index] = value
    return rows


BAD_SEQS = [None, "seq", 3, {}, object()]
BAD_SCALES_4 = [
    np.full(4, NAN),
    np.full(4, INF),
    np.full(4, -1.0),
    np.full(4, 1e6),  # inf as binary16
    np.full(4, 1 + 1j),
    np.full(4, "a"),
    np.zeros(4, object),
    np.ones(3),
    np.ones(5),
    np.ones((4, 1)),
    None,
    "abc",
]
BAD_ROWS = [
    *_arrays((4, D)),
    np.zeros((4, D - 1), np.int8),
    np.zeros((4, D + 1), np.int8),
    np.zeros(4 * D, np.int8),  # the right size, one dimension
    np.zeros((2, 2 * D), np.int8),  # the right size, rows of twice the width
    np.zeros((1, 4, D), np.int8),
    np.full((4, D), 200),
    np.full((4, D), -129),
    np.zeros((3, D), np.int8),  # one row short of the scales
    np.zeros((0,), np.int8),
]
BAD_HEADS = [*NOT_INTS, -1, -3, 2, 3, *HUGE, np.int64(-1)]
BAD_Q = [
    *_arrays((G, D)),
    np.zeros((G, D - 1), np.int16),
    np.zeros((G * D,), np.int16),  # the right size, one dimension
    np.zeros((1, G, D), np.int16),
    np.zeros((G + 1, D), np.int16),
    np.zeros((G // 2 or 1, 2 * D), np.int16),
    np.full((G, D), 40000),
    np.zeros((0, D), np.int16),
]
BAD_QS = [
    np.full(G, NAN),
    np.full(G, INF),
    np.full(G, -1.0),
    np.full(G, 1e6),
    np.full(G, 1j),
    np.full(G, "a"),
    np.zeros(G, object),
    np.ones(G + 1),
    np.ones((G, 1)),
    np.ones(0),
    None,
    "abc",
]
BAD_NEW = [
    "abcd",
    3,
    {},
    object(),
    (1, 2, 3),
    ("a", "b", "c", "d"),
    [None] * 4,
]

HPU_CALLS = [
    *_table(
        "allocate.tokens",
        [*NOT_INTS, 0, -1, P.max_seq_len + 1, *HUGE],
        lambda f, v: f.dev.allocate(v),
    ),
    *_table("allocate.heads", [*NOT_INTS, 0, -1, *HUGE], lambda f, v: f.dev.allocate(32, v)),
    *_table(
        "bytes_for.tokens", [*NOT_INTS, 0, -1, P.max_seq_len + 1], lambda f, v: f.dev.bytes_for(v)
    ),
    *_table("bytes_for.heads", [*NOT_INTS, 0, -1], lambda f, v: f.dev.bytes_for(32, v)),
    *_table("tokens_fit.heads", [*NOT_INTS, 0, -1], lambda f, v: f.dev.tokens_fit(v)),
    *_table(
        "free.seq",
        [*BAD_SEQS, "foreign", "freed", "copy"],
        lambda f, v: f.dev.free(getattr(f, v) if v in ("foreign", "freed", "copy") else v),
    ),
    *_table(
        "read_kv.seq",
        [*BAD_SEQS, "foreign", "freed"],
        lambda f, v: f.dev.read_kv(getattr(f, v) if v in ("foreign", "freed") else v, 0),
    ),
    *_table("read_kv.head", BAD_HEADS, lambda f, v: f.dev.read_kv(f.seq, v)),
    *_table(
        "write_kv.seq",
        [*BAD_SEQS, "foreign", "freed"],
        lambda f, v: f.dev.write_kv(getattr(f, v) if v in ("foreign", "freed") else v, 0, *f.rows),
    ),
    *_table("write_kv.head", BAD_HEADS, lambda f, v: f.dev.write_kv(f.seq, v, *f.rows)),
    *_table("write_kv.k", BAD_ROWS, lambda f, v: f.dev.write_kv(f.seq, 0, *_rows(f, 0, v))),
    *_table("write_kv.v", BAD_ROWS, lambda f, v: f.dev.write_kv(f.seq, 0, *_rows(f, 2, v))),
    *_table(
        "write_kv.k_scale", BAD_SCALES_4, lambda f, v: f.dev.write_kv(f.seq, 0, *_rows(f, 1, v))
    ),
    *_table(
        "write_kv.v_scale", BAD_SCALES_4, lambda f, v: f.dev.write_kv(f.seq, 0, *_rows(f, 3, v))
    ),
    *_table(
        "write_kv.start",
        [*NOT_INTS, -1, 11, 61, 64, *HUGE],
        lambda f, v: f.dev.write_kv(f.seq, 0, *f.rows, start=v),
    ),
    *_table(
        "append.seq",
        [*BAD_SEQS, "foreign", "freed"],
        lambda f, v: f.dev.append(getattr(f, v) if v in ("foreign", "freed") else v, 0, *f.tok),
    ),
    *_table("append.head", BAD_HEADS, lambda f, v: f.dev.append(f.seq, v, *f.tok)),
    *_table(
        "append.k",
        [*BAD_ROWS, np.zeros((2, D // 2), np.int8)],
        lambda f, v: f.dev.append(f.seq, 0, *_rows(f, 0, v)),
    ),
    *_table("append.k_scale", BAD_SCALES_4, lambda f, v: f.dev.append(f.seq, 0, *_rows(f, 1, v))),
    *_table("append.full", [2], lambda f, v: f.dev.append(f.full, 0, *_tokens(v))),
    *_table(
        "attend.seq",
        [*BAD_SEQS, "foreign", "freed"],
        lambda f, v: f.dev.attend(getattr(f, v) if v in ("foreign", "freed") else v, 0, f.q, f.qs),
    ),
    *_table("attend.head", BAD_HEADS, lambda f, v: f.dev.attend(f.seq, v, f.q, f.qs, new=f.tok)),
    *_table("attend.empty_head", [1], lambda f, v: f.dev.attend(f.seq, v, f.q, f.qs)),
    *_table("attend.q", BAD_Q, lambda f, v: f.dev.attend(f.seq, 0, v, f.qs, new=f.tok)),
    *_table("attend.score_scale", BAD_QS, lambda f, v: f.dev.attend(f.seq, 0, f.q, v, new=f.tok)),
    *_table("attend.new", BAD_NEW, lambda f, v: f.dev.attend(f.seq, 0, f.q, f.qs, new=v)),
    # Float rows beyond what a binary16 scale reaches: named, never clipped.
    *_table(
        "write_kv_real.k",
        [np.full((4, D), 1e7), np.full((4, D), NAN)],
        lambda f, v: f.dev.write_kv_real(f.seq, 0, v, np.ones((4, D))),
    ),
    *_table(
        "attend_real.q",
        [np.full((G, D), 1e12)],
        lambda f, v: f.dev.attend_real(f.seq, 0, v, new=(np.ones(D), np.ones(D))),
    ),
    *_table(
        "attend_real.new_v",
        [np.full(D, -1e9)],
        lambda f, v: f.dev.attend_real(f.seq, 0, np.ones((G, D)), new=(np.ones(D), v)),
    ),
    *_table(
        "attend.new_k",
        [*BAD_ROWS[:9], np.zeros((2, D), np.int8), np.zeros(D + 1, np.int8), np.full(D, 128)],
        lambda f, v: f.dev.attend(f.seq, 0, f.q, f.qs, new=_new(f, 0, v)),
    ),
    *_table(
        "attend.new_v",
        [np.zeros(D), np.zeros((2, D), np.int8), np.full(D, -200)],
        lambda f, v: f.dev.attend(f.seq, 0, f.q, f.qs, new=_new(f, 2, v)),
    ),
    *_table(
        "attend.new_k_scale",
        [NAN, INF, -1.0, 1e6, "a", None, 1j, np.ones(2), np.ones(0)],
        lambda f, v: f.dev.attend(f.seq, 0, f.q, f.qs, new=_new(f, 1, v)),
    ),
    *_table(
        "attend.new_v_scale",
        [NAN, -INF, -0.5, np.ones(3)],
        lambda f, v: f.dev.attend(f.seq, 0, f.q, f.qs, new=_new(f, 3, v)),
    ),
    *_table(
        "attend.partial",
        NOT_BOOLS,
        lambda f, v: f.dev.attend(f.seq, 0, f.q, f.qs, new=f.tok, partial=v),
    ),
    *_table(
        "attend_many.calls",
        [None, "abc", 3, {}, object(), [None], [3], ["x"], [(1, 2)]],
        lambda f, v: f.dev.attend_many(v),
    ),
    # A good call first: a rejected batch must not have appended its token.
    *_table(
        "attend_many.second",
        [
            {"q": np.zeros((G, D))},
            {"score_scale": np.full(G, NAN)},
            {"score_scale": np.ones(G + 1)},
            {"seq": None},
            {"head": 7},
            {"head": -1},
            {"head": 1.0},
            {"partial": "no"},
            {"new": (1, 2)},
            {"new": "abcd"},
            {"seq": "foreign"},
            {"seq": "freed"},
            {"seq": "full", "new": None, "head": 1},
        ],
        lambda f, v: f.dev.attend_many(
            [
                _attend(f),
                _attend(
                    f,
                    **{
                        k: getattr(f, x) if isinstance(x, str) and hasattr(f, x) else x
                        for k, x in v.items()
                    },
                ),
            ]
        ),
    ),
    *_table(
        "attend_many.not_attend", ["x", 3, None], lambda f, v: f.dev.attend_many([_attend(f), v])
    ),
    # The second append of one batch overflows the head: neither may happen.
    *_table(
        "attend_many.overflow", [2], lambda f, v: f.dev.attend_many([_attend(f, seq=f.full)] * v)
    ),
    *_table("attend_batch.batch", [None, "x", 3, [], object()], lambda f, v: f.dev.attend_batch(v)),
    # A good call first, then one bad field: the rejected batch appends nothing.
    *_table(
        "attend_batch.field",
        [
            {"seqs": None},
            {"seqs": "seq"},
            {"seqs": ["seq", None]},
            {"seqs": ["seq", "freed"]},
            {"seqs": ["seq", "foreign"]},
            {"heads": [0, 7]},
            {"heads": [0, -1]},
            {"heads": [0.0, 1.0]},
            {"heads": [0]},
            {"heads": [[0, 1]]},
            {"q": np.zeros((2, G, D))},
            {"q": np.zeros((2, G, D + 1), dtype=np.int64)},
            {"q": np.full((2, G, D), 1 << 20)},
            {"score_scale": np.full((2, G), NAN)},
            {"score_scale": -np.ones((2, G))},
            {"score_scale": np.ones((2, G + 1))},
            {"score_scale": [[1.0], [1.0, 2.0]]},
            {"partial": [0, 1]},
            {"partial": np.zeros(3, dtype=bool)},
            {"append": ["yes", "no"]},
            {"new_k": np.full((2, D), 300)},
            {"new_k": np.zeros((2, D))},
            {"new_v": None},
            {"new_v_scale": np.full(2, INF)},
            {"new_k_scale": np.ones(3)},
            {"seqs": ["full", "full"], "heads": [0, 0]},  # the second append overflows
        ],
        lambda f, v: f.dev.attend_batch(_batch(f, **v)),
    ),
]


def _batch(f, **change):
    """A good two-call AttendBatch (heads 0 and 1 of ``f.seq``, both appending), changed."""
    from tandem.host.hpu.device import AttendBatch

    k, ks, v, vs = f.tok
    q = np.stack([f.q, f.q])
    fields = {
        "seqs": [f.seq, f.seq],
        "heads": np.array([0, 1]),
        "q": q,
        "score_scale": np.stack([f.qs, f.qs]),
        "partial": np.zeros(2, dtype=bool),
        "append": np.ones(2, dtype=bool),
        "new_k": np.repeat(np.reshape(k, (1, D)), 2, axis=0),
        "new_k_scale": np.full(2, np.reshape(ks, -1)[0]),
        "new_v": np.repeat(np.reshape(v, (1, D)), 2, axis=0),
        "new_v_scale": np.full(2, np.reshape(vs, -1)[0]),
    }
    if "seqs" in change and isinstance(change["seqs"], list):
        change["seqs"] = [getattr(f, s) if isinstance(s, str) else s for s in change["seqs"]]
    fields.update(change)
    return AttendBatch(**fields)


def test_attend_batch_table_starts_from_a_good_batch():
    """The attend_batch cases change one field of a batch that works (else they prove nothing)."""
    f = _hpu()
    results = f.dev.attend_batch(_batch(f))
    assert results.y.shape == (2, G, D) and f.seq.lengths.tolist() == [11, 1]


@pytest.mark.parametrize("call", _cases(HPU_CALLS))
def test_hpu_device_rejects(call):
    _check_rejected(_hpu, _hpu_state, call, _hpu_good)


HPU_CONSTRUCTORS = [
    *_table("params", ["x", 3, object(), SparseMpeParams()], lambda f, v: HpuDevice(v)),
    *_table(
        "memory_bytes",
        [
            *NOT_INTS,
            0,
            -64,
            65,
            100,
            1000,
            P.layout.page_bytes - 64,
            1 << 70,
            (1 << P.addr_bits) + 64,
            np.int64(-(2**62)),
        ],
        lambda f, v: HpuDevice(P, memory_bytes=v),
    ),
    *_table(
        "max_sequences",
        [*NOT_INTS, 0, -1, np.int64(-1)],
        lambda f, v: HpuDevice(P, memory_bytes=1 << 16, max_sequences=v),
    ),
    *_table(
        "backend",
        [None, 3, ["golden"], "fpga", ""],
        lambda f, v: HpuDevice(P, memory_bytes=1 << 16, backend=v),
    ),
    *_table("name", [None, 3, b"hpu", ""], lambda f, v: HpuDevice(P, memory_bytes=1 << 16, name=v)),
    *_table(
        "options",
        [{"simulator": "icarus"}, {"bogus": 1}],
        lambda f, v: HpuDevice(P, memory_bytes=1 << 16, **v),
    ),
]


def _constructed(f):
    dev = HpuDevice(P, memory_bytes=1 << 16)
    assert dev.allocate(32).start == 0


@pytest.mark.parametrize("call", _cases(HPU_CONSTRUCTORS))
def test_hpu_device_constructor_rejects(call):
    _check_rejected(lambda: None, lambda f: None, call, _constructed)


def test_allocate_2_5_is_rejected_and_the_allocator_is_intact():
    """The reported bug: allocate(2.5) was accepted and corrupted the free list."""
    dev = HpuDevice(P, memory_bytes=1 << 16)
    with pytest.raises(ValueError, match=r"tokens must be an integer, not 2\.5"):
        dev.allocate(2.5)
    assert dev.free_spans == [1 << 16] and dev.allocate(32).start == 0


# --- SparseMpeDevice -------------------------------------------------------------------------
MPE = SparseMpeParams(max_k=128)
ROWS, COLS = 8, 16
W = prune_magnitude(
    np.random.default_rng(0).integers(-128, 128, (ROWS, COLS)), NMPattern(2, 4), pair_rows=True
).astype(np.int8)


def _mpe():
    dev = SparseMpeDevice(MPE)
    dev.load(W, "2:4")
    return SimpleNamespace(dev=dev, packed=dev.packed)


def _mpe_state(f) -> dict:
    return {"packed": f.dev.packed, **_counters(f.dev)}


def _mpe_good(f):
    x = np.arange(COLS, dtype=np.int8)
    assert f.dev.packed is f.packed
    assert np.array_equal(f.dev.gemv(x), W.astype(np.int64) @ x)


BAD_MATRICES = [
    *_arrays((ROWS, COLS)),
    np.full((ROWS, COLS), NAN),
    np.zeros((ROWS, COLS, 1), np.int8),
    np.zeros(COLS, np.int8),
    np.zeros((0, 0), np.int8),
    np.zeros((0, COLS), np.int8),
    np.zeros((ROWS, 0), np.int8),
    np.full((ROWS, COLS), 300),
    np.ones((ROWS, COLS), np.int8),  # not 2:4
    np.zeros((ROWS, 4 * MPE.max_k), np.int8),  # beyond max_k
    3,
]
BAD_VECTORS = [
    *_arrays(COLS),
    np.zeros(COLS - 1, np.int8),
    np.zeros((COLS, 1), np.int8),
    np.zeros(0, np.int8),
    np.int8(1),
    np.full(COLS, 128),
]
MPE_CALLS = [
    *_table("load.weights", BAD_MATRICES, lambda f, v: f.dev.load(v, "2:4")),
    *_table(
        "load.pattern",
        [None, 3, "abc", "5:4", "0:4", "2:3", "2:64", {}, 2.5, ":"],
        lambda f, v: f.dev.load(W, v),
    ),
    *_table("load.packed_and_pattern", ["1:4"], lambda f, v: f.dev.load(f.packed, v)),
    *_table(
        "load.packed_values",
        [300, -129, 0.5],
        lambda f, v: f.dev.load(
            dataclasses.replace(f.packed, values=f.packed.values.astype(np.int64) * v)
        ),
    ),
    *_table(
        "load.packed_indices",
        [4, 255],
        lambda f, v: f.dev.load(dataclasses.replace(f.packed, indices=f.packed.indices + v)),
    ),
    *_table("load.path", ["/nonexistent/w.npz", "", "."], lambda f, v: f.dev.load(v)),
    *_table("gemv.x", BAD_VECTORS, lambda f, v: f.dev.gemv(v)),
    *_table(
        "gemm.x",
        [
            *_arrays((COLS, 2)),
            np.zeros(COLS, np.int8),
            np.zeros((COLS, 0), np.int8),
            np.zeros((COLS - 1, 2), np.int8),
            np.zeros((COLS, 2, 1), np.int8),
            np.full((COLS, 2), -129),
        ],
        lambda f, v: f.dev.gemm(v),
    ),
]


@pytest.mark.parametrize("call", _cases(MPE_CALLS))
def test_sparse_mpe_device_rejects(call):
    _check_rejected(_mpe, _mpe_state, call, _mpe_good)


MPE_CONSTRUCTORS = [
    *_table("params", ["x", 3, object(), P], lambda f, v: SparseMpeDevice(v)),
    *_table("backend", [None, 3, ["golden"], "fpga"], lambda f, v: SparseMpeDevice(backend=v)),
    *_table("name", [None, 3, ""], lambda f, v: SparseMpeDevice(name=v)),
]


@pytest.mark.parametrize("call", _cases(MPE_CONSTRUCTORS))
def test_sparse_mpe_device_constructor_rejects(call):
    _check_rejected(lambda: None, lambda f: None, call, lambda f: _mpe_good(_mpe()))


# --- SpmmDevice ------------------------------------------------------------------------------
SYS, SPARSE, F = SystolicParams(rows=4, cols=4), SparseEngineParams(lanes=4, tile=32), 4
ADJ = sp.csr_matrix(np.ones((3, 3)))


def _spmm_device(**change):
    args = {"systolic": SYS, "sparse": SPARSE, "features": F, "tile": 32}
    args.update(change)
    return SpmmDevice(args.pop("systolic"), args.pop("sparse"), **args)


def _spmm():
    dev = _spmm_device()
    mapping = dev.load(ADJ, normalize=True)
    other = _spmm_device(features=F + 1)
    return SimpleNamespace(
        dev=dev,
        mapping=mapping,
        adjacency=dev.adjacency,
        other_mapping=other.load(ADJ, normalize=True),
    )


def _spmm_state(f) -> dict:
    return {"mapping": f.dev.mapping, "adjacency": f.dev.adjacency, **_counters(f.dev)}


def _spmm_good(f):
    assert f.dev.mapping is f.mapping
    x = np.arange(3 * F).reshape(3, F)
    assert f.dev.aggregate(x).shape == (3, F)
    assert f.dev.gcn_layer(np.ones((3, 2)), np.ones((2, F)), device="cpu").output.shape == (3, F)


def _sparse_with(values):
    a = sp.csr_matrix(np.ones((3, 3)))
    return sp.csr_matrix((np.asarray(values), a.indices, a.indptr), shape=(3, 3))


SPMM_CALLS = [
    *_table(
        "load.adjacency",
        [
            None,
            "abc",
            3,
            np.ones((3, 3)),
            sp.csr_matrix(np.ones((3, 4))),
            sp.csr_matrix((0, 0)),
            _sparse_with(np.full(9, NAN)),
            _sparse_with(np.full(9, INF)),
            _sparse_with(np.full(9, 1 + 1j)),
            _sparse_with(np.full(9, True)),
            _sparse_with(np.full(9, 1000.0)),  # beyond a_bits=16, a_frac=14: never clipped
            _sparse_with(np.full(9, -2.0001)),
        ],
        lambda f, v: f.dev.load(v),
    ),
    *_table("load.normalize", NOT_BOOLS, lambda f, v: f.dev.load(ADJ, normalize=v)),
    *_table("load.reorder", ["bogus", 3, None, ""], lambda f, v: f.dev.load(ADJ, reorder=v)),
    *_table(
        "load.mapping",
        ["x", 3, {}, object(), "other"],
        lambda f, v: f.dev.load(ADJ, mapping=f.other_mapping if v == "other" else v),
    ),
    *_table(
        "aggregate.features",
        [
            *_arrays((3, F)),
            np.zeros(3 * F, np.int64),
            np.zeros((3, F + 1), np.int64),
            np.zeros((0, F), np.int64),
            np.zeros((3, F, 1), np.int64),
            np.full((3, F), 1 << 40),
        ],
        lambda f, v: f.dev.aggregate(v),
    ),
    *_table(
        "aggregate.streams",
        NOT_BOOLS,
        lambda f, v: f.dev.aggregate(np.zeros((3, F), np.int64), streams=v),
    ),
    *_table(
        "gcn_layer.x",
        [
            np.full((3, 2), NAN),
            np.full((3, 2), INF),
            np.full((3, 2), 1j),
            np.full((3, 2), "a"),
            np.zeros((3, 2), object),
            None,
            "abc",
            np.zeros(6),
            np.zeros((4, 2)),
            np.zeros((0, 2)),
            np.zeros((3, 2, 1)),
            np.full((3, 2), 1e300),
        ],
        lambda f, v: f.dev.gcn_layer(v, np.ones((2, F)), device="cpu"),
    ),
    *_table(
        "gcn_layer.w",
        [
            np.full((2, F), NAN),
            np.full((2, F), -INF),
            np.zeros((2, F + 1)),
            np.zeros((3, F)),
            None,
            np.full((2, F), 1j),
        ],
        lambda f, v: f.dev.gcn_layer(np.ones((3, 2)), v, device="cpu"),
    ),
    *_table(
        "gcn_layer.device",
        [3, "nope", {}, ""],
        lambda f, v: f.dev.gcn_layer(np.ones((3, 2)), np.ones((2, F)), device=v),
    ),
    *_table(
        "gcn_layer.streams",
        NOT_BOOLS,
        lambda f, v: f.dev.gcn_layer(np.ones((3, 2)), np.ones((2, F)), device="cpu", streams=v),
    ),
]


@pytest.mark.parametrize("call", _cases(SPMM_CALLS))
def test_spmm_device_rejects(call):
    _check_rejected(_spmm, _spmm_state, call, _spmm_good)


SPMM_CONSTRUCTORS = [
    *_table("systolic", ["x", 3, object(), SPARSE], lambda f, v: _spmm_device(systolic=v)),
    *_table("sparse", ["x", 3, object(), SYS], lambda f, v: _spmm_device(sparse=v)),
    *_table("features", [*NOT_INTS, 0, -1], lambda f, v: _spmm_device(features=v)),
    *_table(  # None is the default (the sparse engine's tile)
        "tile",
        [*(v for v in NOT_INTS if v is not None), 0, -1, 2, 64, 1 << 70],
        lambda f, v: _spmm_device(tile=v),
    ),
    *_table("board", [None, 3, "nope", "", "../x"], lambda f, v: _spmm_device(board=v)),
    *_table("backend", [None, 3, "fpga"], lambda f, v: _spmm_device(backend=v)),
    *_table("name", [None, 3, ""], lambda f, v: _spmm_device(name=v)),
]


@pytest.mark.parametrize("call", _cases(SPMM_CONSTRUCTORS))
def test_spmm_device_constructor_rejects(call):
    _check_rejected(lambda: None, lambda f: None, call, lambda f: _spmm_good(_spmm()))


# --- RnnDevice -------------------------------------------------------------------------------
RNN = RnnParams(batch=1, max_input=8, max_hidden=8, max_steps=16)
torch.manual_seed(0)
STATE = {k: v.numpy().copy() for k, v in torch.nn.LSTM(4, 6).state_dict().items()}


def _state(**change):
    state = dict(STATE)
    state.update(change)
    return state


def _rnn():
    dev = RnnDevice(RNN)
    model = dev.load(STATE)
    return SimpleNamespace(dev=dev, model=model, program=dev.program)


def _rnn_state(f) -> dict:
    return {"model": f.dev.model, "program": f.dev.program, **_counters(f.dev)}


def _rnn_good(f):
    assert f.dev.model is f.model and f.dev.program is f.program
    x = f.dev.quantize(np.full((3, 2, 4), 0.5))
    h, c = f.dev.run(x)
    assert h.shape == c.shape == (3, 2, 6)
    assert f.dev.to_float(h).dtype == np.float64


W_IH = STATE["weight_ih_l0"]
RNN_CALLS = [
    *_table(
        "load.source",
        [None, 3, 2.5, object(), "/nonexistent.program.npz", {}, [], "", np.zeros((2, 2))],
        lambda f, v: f.dev.load(v),
    ),
    *_table(
        "load.state_dict",
        [
            {"weight_ih_l0": np.full_like(W_IH, NAN)},
            {"weight_ih_l0": np.full_like(W_IH, INF)},
            {"bias_ih_l0": np.full_like(STATE["bias_ih_l0"], NAN)},
            {"weight_ih_l0": W_IH.astype(np.complex128)},
            {"weight_ih_l0": "abc"},
            {"weight_ih_l0": None},
            {"weight_ih_l0": W_IH[:, :, None]},
            {"weight_ih_l0": W_IH[:5]},
            {"weight_hh_l0": np.zeros((24, 0))},
            {"bias_ih_l0": np.zeros(5)},
            {"weight_ih_l0": np.zeros((24, 0))},
            {"weight_ih_l0": np.full_like(W_IH, 1e6)},  # beyond int16 at w_frac 0: not clipped
            {"bias_hh_l0": np.full_like(STATE["bias_hh_l0"], 1e12)},
        ],
        lambda f, v: f.dev.load(_state(**v)),
    ),
    *_table("load.layer", [*NOT_INTS, -1, 1, *HUGE], lambda f, v: f.dev.load(STATE, layer=v)),
    *_table(
        "quantize.x",
        [
            NAN,
            INF,
            -INF,
            np.array([1.0, NAN]),
            np.full(3, 1j),
            "abc",
            None,
            {},
            object(),
            np.array(["a"]),
            np.zeros(2, object),
        ],
        lambda f, v: f.dev.quantize(v),
    ),
    *_table(
        "to_float.state",
        [
            None,
            "abc",
            np.full(3, 1j),
            np.array([NAN]),
            {},
            np.zeros(2, object),
            np.array([1 << 20]),
        ],
        lambda f, v: f.dev.to_float(v),
    ),
    *_table(
        "run.x",
        [
            *_arrays((3, 1, 4)),
            np.zeros((3, 4), np.int16),
            np.zeros((1, 3, 1, 4), np.int16),
            np.zeros((3, 1, 5), np.int16),
            np.zeros((0, 1, 4), np.int16),
            np.zeros((3, 0, 4), np.int16),
            np.zeros((RNN.max_steps + 1, 1, 4), np.int16),
            np.full((3, 1, 4), 1 << 15),
            np.zeros((), np.int16),
        ],
        lambda f, v: f.dev.run(v),
    ),
]


@pytest.mark.parametrize("call", _cases(RNN_CALLS))
def test_rnn_device_rejects(call):
    _check_rejected(_rnn, _rnn_state, call, _rnn_good)


RNN_CONSTRUCTORS = [
    *_table("params", ["x", 3, object(), P], lambda f, v: RnnDevice(v)),
    *_table("backend", [None, 3, "fpga"], lambda f, v: RnnDevice(RNN, backend=v)),
    *_table("name", [None, 3, ""], lambda f, v: RnnDevice(RNN, name=v)),
]


@pytest.mark.parametrize("call", _cases(RNN_CONSTRUCTORS))
def test_rnn_device_constructor_rejects(call):
    _check_rejected(lambda: None, lambda f: None, call, lambda f: _rnn_good(_rnn()))


# --- random arrays ---------------------------------------------------------------------------
DTYPES = st.sampled_from(
    [
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.float32,
        np.float64,
        np.complex64,
        np.bool_,
    ]
)


def _random_arrays(max_dims=3, max_side=40):
    return hnp.arrays(
        DTYPES,
        hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=max_side),
    )


def _valid_int(x, bits) -> bool:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return x.dtype.kind in "iu" and (x.size == 0 or (x.min() >= lo and x.max() <= hi))


FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(x=_random_arrays(max_dims=2))
def test_gemv_takes_a_valid_vector_or_rejects_it(x):
    f = _mpe()
    before = _mpe_state(f)
    if x.ndim == 1 and x.shape[0] == COLS and _valid_int(x, 8):
        assert np.array_equal(f.dev.gemv(x), W.astype(np.int64) @ x.astype(np.int64))
        return
    with pytest.raises(ValueError) as info:
        f.dev.gemv(x)
    assert "\n" not in str(info.value)
    assert _same(_mpe_state(f), before)


@FAST
@given(k=_random_arrays(max_dims=3, max_side=2 * D), scale=st.floats(allow_nan=True))
def test_write_kv_takes_valid_rows_or_writes_nothing(k, scale):
    f = _hpu()
    before = _hpu_state(f)
    n = len(k) if k.ndim else 0
    ks, v, vs = np.full(n, scale), np.zeros((n, D), np.int8), np.ones(n)
    with np.errstate(over="ignore"):  # a scale beyond binary16 becomes inf: not ok
        scale_ok = np.isfinite(np.float16(scale)) and scale >= 0 and not np.signbit(scale)
    # The head holds 64 tokens; no scale is checked when there is no row.
    valid = k.ndim == 2 and k.shape[1] == D and _valid_int(k, 8) and (n == 0 or scale_ok)
    if valid:
        f.dev.write_kv(f.seq, 0, k, ks, v, vs)
        assert np.array_equal(f.dev.read_kv(f.seq, 0)[0][:n], k)
        return
    with pytest.raises(ValueError) as info:
        f.dev.write_kv(f.seq, 0, k, ks, v, vs)
    assert "\n" not in str(info.value)
    assert _same(_hpu_state(f), before)


@FAST
@given(x=_random_arrays(max_dims=4, max_side=6))
def test_rnn_run_takes_valid_sequences_or_rejects_them(x):
    f = _rnn()
    before = _rnn_state(f)
    shape_ok = x.ndim == 3 and 1 <= x.shape[0] <= RNN.max_steps and x.shape[1] >= 1
    if shape_ok and x.shape[2] == 4 and _valid_int(x, 16):
        h, _ = f.dev.run(x)
        assert h.shape == (x.shape[0], x.shape[1], 6)
        return
    with pytest.raises(ValueError) as info:
        f.dev.run(x)
    assert "\n" not in str(info.value)
    assert _same(_rnn_state(f), before)


@FAST
@given(x=hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=5)))
def test_rnn_quantize_takes_finite_floats_or_rejects_them(x):
    dev = RnnDevice(RNN)
    if np.isfinite(x).all():
        q = dev.quantize(x)
        assert q.shape == x.shape and q.dtype == np.int64
        return
    with pytest.raises(ValueError, match="finite"):
        dev.quantize(x)
