"""The N:M packer: patterns, packing, errors, pruning, int8, PyTorch 2:4, `tandem pack nm`."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tandem.host.sparse_dsp import packed_matmul
from tandem.mappings.nm import (
    NMError,
    NMPacked,
    NMPattern,
    check_nm,
    from_torch_semi_structured,
    mv_units,
    pack_nm,
    prune_magnitude,
    quantize_per_channel,
    to_torch_semi_structured,
)

from tandem.cli import main

PATTERNS = [NMPattern(n, m) for m in (2, 4, 8, 16, 32) for n in range(1, m + 1) if m % n == 0]


@pytest.mark.parametrize("text", ["3:4", "2:6", "0:4", "4:2", "2-4", "a:b", "1:1"])
def test_bad_patterns_are_user_errors(text):
    with pytest.raises(NMError):
        NMPattern.parse(text)


def test_pattern_parse_and_engine_limit():
    assert NMPattern.parse("2:4") == NMPattern(2, 4) and NMPattern(16, 16).dense
    with pytest.raises(NMError, match="exceeds the engine's max_m 16"):
        NMPattern(1, 32).check_supported(16)


@pytest.mark.parametrize("pattern", PATTERNS, ids=str)
def test_pack_round_trips_and_multiplies_exactly(pattern):
    rng = np.random.default_rng(pattern.n * 100 + pattern.m)
    cols = 3 * pattern.m + 5  # a padded last group
    w = prune_magnitude(rng.integers(-128, 128, (7, cols)), pattern).astype(np.int8)
    w[0] = 0  # an empty row: zero slots at the lowest indices
    packed = pack_nm(w, pattern)
    assert packed.values.shape == (7, packed.groups * pattern.n)
    assert packed.indices.max() < pattern.m
    assert np.array_equal(packed.dense(), w)
    assert np.array_equal(packed.indices[0], np.tile(np.arange(pattern.n), packed.groups))
    x = rng.integers(-128, 128, (cols, 3))
    assert np.array_equal(
        packed_matmul(packed.values, packed.indices, pattern.n, pattern.m, x),
        w.astype(np.int64) @ x,
    )


def test_not_nm_names_the_first_offending_group():
    w = np.zeros((4, 12), dtype=np.int8)
    w[2, 5:8] = 1  # row 2, group 1 (columns 4..7): three non-zeros
    w[3, 0:4] = 1  # later in row-major order
    with pytest.raises(NMError, match=r"row 2, columns 4\.\.7 \(group 1\) hold 3 non-zeros"):
        pack_nm(w, NMPattern(2, 4))
    w[2, 10:12] = 0
    check_nm(w, NMPattern(4, 4))


def test_pack_rejects_float_and_out_of_range():
    with pytest.raises(NMError, match="quantize"):
        pack_nm(np.zeros((2, 4)), NMPattern(2, 4))
    with pytest.raises(NMError, match="int8 range"):
        pack_nm(np.full((2, 4), 200), NMPattern(4, 4))


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(PATTERNS),
    st.integers(1, 9),
    st.integers(1, 70),
    st.integers(0, 2**31),
    st.booleans(),
)
def test_pruning_keeps_the_largest_and_is_nm(pattern, rows, cols, seed, pair_rows):
    w = np.random.default_rng(seed).standard_normal((rows, cols))
    pruned = prune_magnitude(w, pattern, pair_rows=pair_rows)
    check_nm(pruned, pattern)
    kept = pruned != 0
    assert np.array_equal(pruned[kept], w[kept])
    if not pair_rows:  # every dropped entry is no larger than the smallest kept one of its group
        g = -(-cols // pattern.m) * pattern.m
        a = np.zeros((rows, g))
        a[:, :cols] = np.abs(w)
        k = np.zeros((rows, g), dtype=bool)
        k[:, :cols] = kept
        a, k = a.reshape(rows, -1, pattern.m), k.reshape(rows, -1, pattern.m)
        smallest_kept = np.where(k, a, np.inf).min(-1)
        largest_dropped = np.where(k, -np.inf, a).max(-1)
        assert (largest_dropped <= smallest_kept).all()
    else:  # both rows of a pair share their pattern: the matrix-vector mode pairs them all
        units = mv_units(pack_nm(kept.astype(np.int8), pattern))
        assert (units[:, 1] >= 0).sum() == rows // 2


def test_quantize_per_channel():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 40)) * rng.uniform(0.01, 10, (16, 1))
    w[5] = 0
    q, scales = quantize_per_channel(w)
    assert q.dtype == np.int8 and scales.dtype == np.float32
    assert q.min() >= -127 and np.abs(q).max(axis=1)[np.arange(16) != 5].min() == 127
    assert scales[5] == 1 and not q[5].any()
    # Round to nearest: error at most half a step per entry.
    assert (np.abs(q * scales[:, None].astype(np.float64) - w) <= scales[:, None] * 0.5001).all()
    with pytest.raises(NMError, match="NaN"):
        quantize_per_channel(np.array([[np.nan, 1.0]]))


def test_torch_semi_structured_round_trip():
    torch = pytest.importorskip("torch")
    from torch.ao.pruning import WeightNormSparsifier

    rng = np.random.default_rng(4)
    linear = torch.nn.Linear(128, 64, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(rng.standard_normal((64, 128)).astype(np.float32)))
    model = torch.nn.Sequential(linear)
    sparsifier = WeightNormSparsifier(
        sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2
    )
    sparsifier.prepare(model, [{"tensor_fqn": "0.weight"}])
    sparsifier.step()
    sparsifier.squash_mask()
    q, _ = quantize_per_channel(model[0].weight.detach().numpy())
    dense = torch.from_numpy(q)
    packed = from_torch_semi_structured(dense)  # PyTorch's pruning output is 2:4 as we define it
    assert np.array_equal(packed.dense(), q)
    values, meta = to_torch_semi_structured(packed)
    assert values.shape == (64, 64) and values.dtype == torch.int8
    again = from_torch_semi_structured(values, meta)
    assert np.array_equal(again.values, packed.values)
    assert np.array_equal(again.indices, packed.indices)
    with pytest.raises(NMError, match="2:4"):
        to_torch_semi_structured(pack_nm(q, NMPattern(4, 4)))


def test_save_load(tmp_path):
    w = prune_magnitude(np.arange(-32, 32).reshape(4, 16), NMPattern(1, 4)).astype(np.int8)
    packed = pack_nm(w, NMPattern(1, 4), scales=np.ones(4))
    packed.save(tmp_path / "p.npz")
    back = NMPacked.load(tmp_path / "p.npz")
    assert np.array_equal(back.dense(), w) and back.pattern == NMPattern(1, 4)
    assert back.scales is not None and back.scales.dtype == np.float32


def test_cli_pack(tmp_path, capsys):
    rng = np.random.default_rng(5)
    np.save(tmp_path / "wf.npy", rng.standard_normal((8, 32)).astype(np.float32))
    out = tmp_path / "sub" / "packed.npz"
    args = ["pack", "nm", "--weights", str(tmp_path / "wf.npy"), "--pattern", "2:4"]
    assert main([*args, "--prune", "--pair-rows", "--quantize", "-o", str(out)]) == 0
    assert "row pairs sharing indices: 4 of 4" in capsys.readouterr().out
    packed = NMPacked.load(out)
    check_nm(packed.dense(), NMPattern(2, 4))
    assert packed.scales.shape == (8,)
    # Float without --quantize, a non-N:M matrix, a bad pattern: exit 2, nothing written.
    np.save(tmp_path / "wi.npy", rng.integers(-128, 128, (4, 8)).astype(np.int8))
    bad = tmp_path / "bad.npz"
    for extra in (
        ["--weights", str(tmp_path / "wf.npy"), "--pattern", "2:4"],
        ["--weights", str(tmp_path / "wi.npy"), "--pattern", "2:4"],
        ["--weights", str(tmp_path / "wi.npy"), "--pattern", "3:4"],
        ["--weights", str(tmp_path / "missing.npy"), "--pattern", "2:4"],
    ):
        assert main(["pack", "nm", *extra, "-o", str(bad)]) == 2
        assert not bad.exists()
    err = capsys.readouterr().err
    assert "row 0, columns 0..3 (group 0)" in err and len(err.strip().splitlines()) == 4
