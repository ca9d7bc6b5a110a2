"""SpMM graph readers (``mappings/spmm/readers/``): the formats, every bad file as one
GraphError line, and the fast paths (``scipy.io.mmread`` and numpy on checked blocks) against
the line walk they fall back to and against scipy.

The fast path and the walk are compared on random files (Hypothesis): for every file both give
the same CSR, to the bit, or the same error. The walk is the reader tandem had before the fast
path (Python's ``float``/``int`` on every token), so "the same" means "as before".
"""

import gzip
import io
import os
import re
import tempfile
import threading
import tracemalloc
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tandem.mappings.spmm import readers
from tandem.mappings.spmm.readers import GraphError, read_graph

from tandem.cli import main

DATA = Path(__file__).parent / "data"
FOUR_ELT = DATA / "spmm_4elt.graph.gz"
MGRAPH = DATA / "spmm_test.mgraph"
WORMNET = DATA / "spmm_wormnet_head.txt"
HEADER = "%%MatrixMarket matrix coordinate real general\n"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(gzip.compress(content, mtime=0) if name.endswith(".gz") else content)
    return path


def outcome(path, walk=False, threads=1):
    """``("ok", indptr, indices, data bytes)`` or ``("error", message)``: no warning allowed."""
    patches = {}
    if walk:  # the fast paths off: every file goes through the line walk
        patches = {
            (readers.mtx, "_mtx_fast"): lambda path, head, text, threads=1: None,
            (readers.edges, "_edges_fast"): lambda path, text, threads=1: None,
            (readers.metis, "_metis_fast"): lambda text, threads=1: None,
        }
    saved = {key: getattr(*key) for key in patches}
    try:
        for (module, name), value in patches.items():
            setattr(module, name, value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                m = read_graph(path, threads=threads)
            except GraphError as exc:
                message = str(exc)
                assert "\n" not in message and message.startswith(str(path)), message
                return ("error", message)
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)
    assert m.format == "csr" and m.dtype == np.float64 and m.has_canonical_format
    return (
        "ok",
        m.shape,
        m.indptr.tobytes(),
        m.indices.astype(np.int64).tobytes(),
        m.data.tobytes(),
    )


# ---------------------------------------------------------------------------- the formats


def test_real_metis_meshes_and_edge_list_read():
    a = read_graph(FOUR_ELT)
    assert a.shape == (7434, 7434) and a.nnz == 2 * 43031
    assert (a != a.T).nnz == 0 and a.diagonal().sum() == 0
    m = read_graph(MGRAPH)  # fmt 010 with two vertex weights per line
    assert m.shape == (766, 766) and m.nnz == 2 * 1314
    w = read_graph(WORMNET)
    assert w.shape[0] > 100 and (w != w.T).nnz == 0


def test_formats_agree_on_one_graph(tmp_path):
    edges = [(1, 2), (2, 3), (3, 1), (3, 4)]
    n = 4
    mtx = "%%MatrixMarket matrix coordinate pattern symmetric\n% comment\n4 4 4\n"
    mtx += "".join(f"{max(u, v)} {min(u, v)}\n" for u, v in edges)
    metis = "% c\n4 4\n2 3\n1 3\n1 2 4\n3\n"
    edge_list = "# source target\n" + "".join(f"{u} {v}\n" for u, v in edges)
    dense = np.zeros((n, n))
    for u, v in edges:
        dense[u - 1, v - 1] = dense[v - 1, u - 1] = 1
    sp.save_npz(tmp_path / "g.npz", sp.csr_matrix(dense))
    for path in (
        write(tmp_path, "g.mtx", mtx),
        write(tmp_path, "g.graph", metis),
        write(tmp_path, "g.txt", edge_list),
        write(tmp_path, "g.tsv", edge_list.replace(" ", "\t")),
        write(tmp_path, "g.mtx.gz", mtx),
        write(tmp_path, "g.graph.gz", metis),
        write(tmp_path, "g.txt.gz", edge_list),
        tmp_path / "g.npz",
    ):
        assert np.array_equal(read_graph(path).toarray(), dense), path
        assert outcome(path) == outcome(path, walk=True), path


def test_metis_edge_weights_and_edge_list_weights(tmp_path):
    a = read_graph(write(tmp_path, "w.graph", "3 2 1\n2 5\n1 5 3 7\n2 7\n"))
    assert a[0, 1] == 5 and a[1, 2] == 7 and a.nnz == 4
    b = read_graph(write(tmp_path, "w.edges", "a b 2.5\nb c 1\nb a 2.5\n"))
    assert b.shape == (3, 3) and b[0, 1] == 2.5 and b.nnz == 4
    c = read_graph(write(tmp_path, "w.txt", "0 1 2.5\n1 2 1\n1 0 4\n"))  # the last weight wins
    assert c[0, 1] == c[1, 0] == 4 and c[1, 2] == 1 and c.nnz == 4


def test_skew_symmetric_and_integer_matrix_market(tmp_path):
    text = "%%MatrixMarket matrix coordinate integer skew-symmetric\n3 3 3\n2 1 5\n3 1 -2\n1 1 0\n"
    a = read_graph(write(tmp_path, "s.mtx", text)).toarray()
    assert a.tolist() == [[0, -5, 2], [5, 0, 0], [-2, 0, 0]]


def test_edge_list_node_names_numeric_and_strings(tmp_path):
    # Integer names are numbered in numeric order (10 after 9), other names in string order.
    a = read_graph(write(tmp_path, "n.txt", "10 9\n9 100\n"))
    assert a.shape == (3, 3) and a[0, 1] == 1 and a[0, 2] == 1 and a[1, 2] == 0
    b = read_graph(write(tmp_path, "s.txt", "10 9\n9 x\n"))  # "10" < "9" < "x"
    assert b.shape == (3, 3) and b[0, 1] == 1 and b[1, 2] == 1
    sparse_ids = read_graph(write(tmp_path, "big.txt", f"0 {2**62}\n{2**40} 7\n"))
    assert sparse_ids.shape == (4, 4) and sparse_ids.nnz == 4


# ---------------------------------------------------------------------------- bad files


def _npz(matrix) -> bytes:
    buffer = io.BytesIO()
    sp.save_npz(buffer, matrix)
    return buffer.getvalue()


def _zip(members: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, array in members.items():
            payload = io.BytesIO()
            np.lib.format.write_array(payload, np.asarray(array), allow_pickle=False)
            archive.writestr(name, payload.getvalue())
    return buffer.getvalue()


def _corrupt_gzip() -> bytes:
    data = bytearray(gzip.compress(HEADER.encode() + b"3 3 1\n1 1 1\n" * 500, mtime=0))
    for k in range(20, 40):
        data[k] ^= 0x5A
    return bytes(data)


GZ_TEXT = gzip.compress(HEADER.encode() + b"3 3 2\n1 1 1\n2 2 1\n", mtime=0)
BINARY = bytes(range(256)) * 8
LATIN1 = (HEADER + "3 3 1\n1 1 1.0 % café\n").encode("latin-1")
#: (file name, content, what the one line says after "file:line: ")
BAD_FILES = [
    # gzip
    ("corrupt.mtx.gz", _corrupt_gzip(), r"broken gzip data"),
    ("cut.mtx.gz", GZ_TEXT[: len(GZ_TEXT) // 2], r"broken gzip data"),
    ("cut.txt.gz", gzip.compress(b"1 2\n" * 10000)[:-10], r"broken gzip data"),
    ("cut.graph.gz", gzip.compress(b"2 1\n2\n1\n")[:-6], r"broken gzip data"),
    # binary, not UTF-8, NUL bytes
    ("binary.mtx", BINARY, r":1: not a text file \(NUL byte\)"),
    ("binary.txt", BINARY, r":1: not a text file \(NUL byte\)"),
    ("binary.graph", BINARY, r":1: not a text file \(NUL byte\)"),
    ("utf16.mtx", HEADER.encode("utf-16"), r":1: not a text file \(invalid UTF-8\)"),
    ("latin1.mtx", LATIN1, r":3: not a text file \(invalid UTF-8\)"),
    ("latin1.txt", "1 2\ncafé 3\n".encode("latin-1"), r":2: not a text file \(invalid UTF-8\)"),
    ("nul.mtx", HEADER + "3 3 1\n1 1 1.0\x00\n", r":3: not a text file \(NUL byte\)"),
    ("nul.txt", "1 2\n3\x004\n", r":2: not a text file \(NUL byte\)"),
    ("binary.npz", BINARY, r"binary.npz: not a scipy sparse .npz file"),
    # empty
    ("empty.mtx", b"", r"empty.mtx: empty file"),
    ("empty.mtx.gz", b"", r"empty.mtx.gz: empty file"),
    ("empty.txt", b"", r"empty.txt: empty graph \(no edges\)"),
    ("blank.txt", b"\n  \n\t\n", r"blank.txt: empty graph \(no edges\)"),
    ("empty.graph", b"", r"empty.graph: empty file \(no header line\)"),
    ("empty.npz", b"", r"empty.npz: not a scipy sparse .npz file"),
    ("noentries.mtx", HEADER + "3 3 0\n", r":2: empty graph \(no entries\)"),
    ("zero.graph", "0 0\n", r":1: empty graph \(n = 0\)"),
    ("nosize.mtx", HEADER + "% only a comment\n", r":2: missing size line"),
    # headers that lie, sizes beyond the limits
    ("more.mtx", HEADER + "3 3 3\n1 1 1\n2 2 1\n", r":4: size line promises 3 entries, file has 2"),
    (
        "fewer.mtx",
        HEADER + "3 3 1\n1 1 1\n2 2 1\n",
        r":4: size line promises 1 entries, file has 2",
    ),
    (
        "lie.mtx",
        HEADER + "3 3 100000000\n1 1 1\n",
        r":2: size line promises 100000000 entries, more",
    ),
    ("lie.mtx.gz", gzip.compress(b"%s3 3 99\n1 1 1\n" % HEADER.encode()), r":3: size line prom"),
    ("liar.mtx.gz", gzip.compress(b"%s3 3 9999999\n1 1 1\n" % HEADER.encode()), "a gzip file"),
    ("huge.mtx", HEADER + "1000000000 1000000000 2\n1 1 1\n2 2 1\n", r":2: 1000000000 nodes: more"),
    ("many.mtx", HEADER + f"3 3 {2**40}\n1 1 1\n", rf":2: {2**40} non-zeros: more than"),
    (
        "symmany.mtx",
        HEADER.replace("general", "symmetric") + f"3 3 {2**26 + 1}\n1 1 1\n",
        "non-zeros",
    ),
    ("huge.graph", "1000000000 1\n2\n1\n", r":1: 1000000000 nodes: more than the 33554432"),
    ("lines.graph", "3 1\n2\n1\n", r":3: header says 3 vertices, file has 2"),
    ("edges.graph", "2 2\n2\n1\n", r":1: header says 2 edges"),
    # indices: out of range, beyond int64, huge negative, not integers
    ("range.mtx", HEADER + "3 3 2\n1 1 1.0\n4 1 2.0\n", r":4: row index 4 out of range 1..3"),
    ("col.mtx", HEADER + "3 3 1\n1 0 1.0\n", r":3: column index 0 out of range 1..3"),
    ("neg.mtx", HEADER + "3 3 1\n-100000000000000000000 1 1\n", r":3: row index -10+ out of range"),
    ("big.mtx", HEADER + "3 3 1\n1 99999999999999999999 1\n", r":3: column index 10+ out of range"),
    ("infidx.mtx", HEADER + "3 3 1\n1 inf 1\n", r":3: column index inf out of range"),
    ("frac.mtx", HEADER + "3 3 1\n1.5 1 1\n", r":3: row index 1.5 is not an integer"),
    (
        "big.txt",
        "1 2\n3 99999999999999999999\n",
        r":2: node id '99999999999999999999' does not fit 64",
    ),
    ("bigneg.txt", "1 2\n-99999999999999999999 1\n", r":2: node id '-9+' does not fit 64 bits"),
    ("neg.txt", "1 2\n-1 2\n", r":2: node id -1 is negative"),
    ("longname.txt", "a b\nb " + "c" * 300 + "\n", r":2: node name longer than 256 characters"),
    ("longid.txt", "1 2\n2 x" + "0" * 300 + "\n", r":2: node name longer than 256 characters"),
    ("range.graph", "% m\n3 2\n2 4\n1\n\n", r":3: neighbour index 4 out of range 1..3"),
    ("neg.graph", "2 1\n-99999999999999999999\n1\n", r":2: neighbour index -10+ out of range 1..2"),
    ("frac.graph", "2 1\n1.5\n1\n", r":2: neighbour 1.5 is not an integer"),
    # values: NaN, inf, not numbers, what mmread alone would read as something else
    ("nan.mtx", HEADER + "2 2 2\n1 1 1.0\n2 1 nan\n", r":4: value nan is not finite"),
    ("inf.mtx", HEADER + "2 2 1\n1 1 -inf\n", r":3: value -inf is not finite"),
    ("overflow.mtx", HEADER + "2 2 1\n1 1 1e999\n", r":3: value inf is not finite"),
    ("word.mtx", HEADER + "2 2 1\n1 x 1.0\n", r":3: entry 'x' is not a number"),
    ("tail.mtx", HEADER + "2 2 2\n1 1 1\n2 2 1.0abc\n", r":4: entry '1.0abc' is not a number"),
    ("dots.mtx", HEADER + "2 2 2\n1 1 1\n2 2 1.2.3\n", r":4: entry '1.2.3' is not a number"),
    ("exps.mtx", HEADER + "2 2 1\n2 2 1e5e5\n", r":3: entry '1e5e5' is not a number"),
    ("minus.mtx", HEADER + "2 2 1\n2 2 1-2\n", r":3: entry '1-2' is not a number"),
    ("noexp.mtx", HEADER + "2 2 1\n2 2 1e\n", r":3: entry '1e' is not a number"),
    ("hex.mtx", HEADER + "2 2 1\n2 2 0x10\n", r":3: entry '0x10' is not a number"),
    ("extra.mtx", HEADER + "2 2 1\n1 1 1.0 7\n", r":3: expected 3 fields, got '1 1 1.0 7'"),
    ("glued.mtx", HEADER + "3 3 1\n1 2.5 7\n", r":3: column index 2.5 is not an integer"),
    ("short.mtx", HEADER + "2 2 2\n1 1 1\n1 2.5\n", r":4: expected 3 fields, got '1 2.5'"),
    ("pattern.mtx", HEADER.replace("real", "pattern") + "2 2 1\n1 1 1\n", r":3: expected 2 fields"),
    ("nanw.txt", "1 2 1.0\n2 3 inf\n", r":2: value inf is not finite"),
    ("badw.txt", "1 2 1.0\n2 3 1.0abc\n", r":2: weight '1.0abc' is not a number"),
    ("dotw.txt", "1 2 1.0\n2 3 .\n", r":2: weight '.' is not a number"),
    ("short.txt", "# x\n1 2\n3\n", r":3: expected 'u v' or 'u v weight'"),
    # three short lines with a blank at their end hold as many numbers as three weighted ones
    ("trail.txt", "1 2 3\n4 5 \n6 7 \n8 9 \n", r":2: expected 'u v' or 'u v weight', got '4 5'"),
    ("wide.txt", "1 2 3 4\n", r":1: expected 'u v' or 'u v weight'"),
    ("nan.graph", "2 1 1\n2 nan\n1 nan\n", r":2: value nan is not finite"),
    ("word.graph", "2 1\n2\nx\n", r":3: entry 'x' is not a number"),
    ("fields.graph", "2 1 1\n2\n1 1\n", r":2: vertex line has 1 fields"),
    # headers of the wrong kind
    ("head.mtx", "hello\n", r":1: not a Matrix Market file"),
    ("array.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", r":1: only the"),
    ("complex.mtx", HEADER.replace("real", "complex") + "1 1 1\n1 1 1 2\n", r":1: field 'complex'"),
    ("herm.mtx", HEADER.replace("general", "hermitian") + "1 1 1\n1 1 1\n", r":1: symmetry 'herm"),
    ("size.mtx", HEADER + "3 3\n1 1 1\n", r":2: size line must be 'rows cols entries'"),
    ("sizefloat.mtx", HEADER + "3 3 1.0\n1 1 1\n", r":2: size line must be"),
    ("rect.mtx", HEADER + "2 3 1\n1 1 1\n", r":2: adjacency must be square, not 2 x 3"),
    ("head.graph", "3 x\n", r":1: header must be 'n m \[fmt \[ncon\]\]'"),
    ("fmt.graph", "3 1 2\n", r":1: fmt must be three 0/1 digits"),
    # lines without end
    ("long.mtx", HEADER + "3 3 1\n" + "1" * 100_000, r"long.mtx:3: line longer than 65536 bytes"),
    ("long.txt", "1 " * 100_000, r"long.txt:1: line longer than 65536 bytes"),
    ("long.graph", "1 " * 100_000, r"long.graph:1: header must be"),
    # npz
    ("complex.npz", _npz(sp.csr_matrix(np.array([[0, 1 + 2j], [1, 0]]))), r"complex values"),
    ("rect.npz", _npz(sp.csr_matrix(np.ones((2, 3)))), r"adjacency must be square, not 2 x 3"),
    ("nan.npz", _npz(sp.csr_matrix(np.array([[0, np.nan], [1, 0]]))), r"entry \(0, 1\) is nan"),
    ("empty0.npz", _npz(sp.csr_matrix((0, 0))), r"empty graph \(no nodes\)"),
    (
        "index.npz",
        _zip(
            {
                "format.npy": np.array("csr"),
                "shape.npy": np.array([2, 2]),
                "data.npy": np.ones(2),
                "indices.npy": np.array([0, 7], np.int32),
                "indptr.npy": np.array([0, 1, 2], np.int32),
            }
        ),
        r"broken csr arrays",
    ),
    (
        "strings.npz",
        _zip(
            {
                "format.npy": np.array("coo"),
                "shape.npy": np.array([2, 2]),
                "data.npy": np.array(["a", "b"]),
                "row.npy": np.array([0, 1]),
                "col.npy": np.array([1, 0]),
            }
        ),
        r"not a scipy sparse|are not numbers",
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "message"), BAD_FILES, ids=[case[0] for case in BAD_FILES]
)
def test_bad_file_is_one_graph_error_line(tmp_path, name, content, message):
    path = tmp_path / name  # bytes as given (.gz cases hold their gzip bytes already)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for walk in (False, True):
        result = outcome(path, walk=walk)
        assert result[0] == "error", (name, walk)
        assert re.search(message, result[1]), (result[1], message)


def test_missing_file_and_folder(tmp_path):
    for name in ("missing.mtx", "missing.txt", "missing.graph", "missing.npz"):
        assert "cannot read" in outcome(tmp_path / name)[1]
    folder = tmp_path / "dir.mtx"
    folder.mkdir()
    assert "cannot read" in outcome(folder)[1]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_pipe_is_read_once(tmp_path):
    # A pipe cannot be read twice: the walk after a refused fast path reads the bytes kept.
    for name, text, expected in (
        ("good.mtx", HEADER + "2 2 1\n1 2 0.5\n", "ok"),
        ("bad.mtx", HEADER + "2 2 1\n1 2 0.5 7\n", "expected 3 fields"),
        ("bad.txt", "1 2\n# c\n2 x y\n", "expected 'u v' or 'u v weight'"),
    ):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        writer = threading.Thread(target=fifo.write_text, args=(text,))
        writer.start()
        try:
            result = outcome(fifo)
        finally:
            writer.join(timeout=10)
        assert expected in str(result[0] if expected == "ok" else result[1]), result


def test_limits_on_nodes_and_non_zeros(tmp_path, monkeypatch):
    monkeypatch.setattr(readers.limits, "MAX_NODES", 4)
    too_many = write(tmp_path, "five.txt", "0 1\n2 3\n4 0\n")
    assert re.search(r"five.txt: 5 nodes: more than the 4", outcome(too_many)[1])
    assert re.search(r"five.txt: 5 nodes", outcome(too_many, walk=True)[1])
    sp.save_npz(tmp_path / "five.npz", sp.identity(5, format="csr"))
    assert "5 nodes: more than the 4" in outcome(tmp_path / "five.npz")[1]
    monkeypatch.setattr(readers.limits, "MAX_NODES", 1 << 25)
    monkeypatch.setattr(readers.limits, "MAX_NONZEROS", 3)
    assert "non-zeros: more than the 3" in outcome(write(tmp_path, "e.txt", "0 1\n1 2\n"))[1]
    mtx = write(
        tmp_path, "sym.mtx", HEADER.replace("general", "symmetric") + "3 3 2\n2 1 1\n3 1 1\n"
    )
    assert "4 non-zeros: more than the 3" in outcome(mtx)[1]


def test_a_lying_header_allocates_nothing_large(tmp_path):
    # 10**9 nodes, or 2**26 promised entries in a gzip file of two: refused or read in kilobytes.
    for name, text in (
        ("nodes.mtx", HEADER + "1000000000 1000000000 2\n1 1 1\n2 2 1\n"),
        ("entries.mtx.gz", HEADER + f"3 3 {2**26}\n1 1 1\n2 2 1\n"),
    ):
        path = write(tmp_path, name, text)
        tracemalloc.start()
        try:
            assert outcome(path)[0] == "error"
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20, (name, peak)  # numpy's calloc'd arrays count as traced


CLI_CASES = ("corrupt.mtx.gz", "huge.mtx", "neg.mtx", "big.txt", "complex.npz", "binary.graph")


def test_cli_bad_graph_is_one_line_exit_2(tmp_path, capsys):
    for name, content, _ in (case for case in BAD_FILES if case[0] in CLI_CASES):
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        argv = ["map", "spmm", "--graph", str(path), "--features", "4", "-o", str(tmp_path / "o")]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            status = main(argv)
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1 and err.startswith("tandem: error: "), err
        assert "Traceback" not in err and not (tmp_path / "o").exists()


# --------------------------------------------------------------- fast path = line walk = scipy


def _mtx_text(rng, n, entries, field, symmetry, style):
    rows = rng.integers(1, n + 1, entries)
    cols = rng.integers(1, n + 1, entries)
    if symmetry != "general":  # the lower triangle; without the diagonal when skew-symmetric
        rows, cols = np.maximum(rows, cols), np.minimum(rows, cols)
        if symmetry == "skew-symmetric":
            rows, cols = rows[rows > cols], cols[rows > cols]
    if field == "pattern":
        values = [""] * rows.size
    elif field == "integer":
        values = [f" {v}" for v in rng.integers(-(10**6), 10**6, rows.size)]
    else:
        x = rng.normal(size=rows.size) * 10.0 ** rng.integers(-5, 6, rows.size)
        formats = ("{!r}", "{:.6e}", "{:.3f}", "{:.17g}")
        values = [" " + formats[k % 4].format(float(v)) for k, v in enumerate(x)]
    sep = " " if style == "plain" else "\t  "
    body = "".join(f"{r}{sep}{c}{v}\n" for r, c, v in zip(rows, cols, values))
    return (
        f"%%MatrixMarket matrix coordinate {field} {symmetry}\n% written by the test\n"
        f"{n} {n} {rows.size}\n{body}"
    )


@pytest.mark.parametrize("field", ["real", "integer", "pattern"])
@pytest.mark.parametrize("symmetry", ["general", "symmetric", "skew-symmetric"])
@pytest.mark.parametrize("gz", [False, True])
def test_mtx_equals_scipy_and_the_line_walk(tmp_path, field, symmetry, gz):
    rng = np.random.default_rng(zlib.crc32(f"{field} {symmetry} {gz}".encode()))
    for style, n, entries in (("plain", 50, 3000), ("plain", 2000, 60_000), ("aligned", 30, 500)):
        if field == "pattern" and symmetry == "skew-symmetric":
            continue  # a pattern cannot be skew-symmetric
        text = _mtx_text(rng, n, entries, field, symmetry, style)
        path = write(tmp_path, f"m{n}.mtx" + (".gz" if gz else ""), text)
        result = outcome(path)
        assert result[0] == "ok" and result == outcome(path, walk=True)
        expected = sp.csr_matrix(scipy.io.mmread(path), dtype=np.float64)
        expected.sum_duplicates()
        got = read_graph(path)
        assert np.array_equal(got.indptr, expected.indptr)
        assert np.array_equal(got.indices, expected.indices)
        assert np.array_equal(got.data, expected.data)


def test_fast_paths_take_the_usual_files(tmp_path, monkeypatch):
    # The files of the benchmarks must not fall back to the walk.
    def no_walk(*args):
        raise AssertionError("walked")

    monkeypatch.setattr(readers.mtx, "_mtx_walk", no_walk)
    monkeypatch.setattr(readers.edges, "_edges_walk", no_walk)
    monkeypatch.setattr(readers.metis, "_metis_walk", no_walk)
    rng = np.random.default_rng(5)
    for gz in (False, True):
        suffix = ".gz" if gz else ""
        read_graph(
            write(
                tmp_path, "a.mtx" + suffix, _mtx_text(rng, 300, 200_000, "real", "general", "plain")
            )
        )
        edges = "# c\n" + "".join(f"{u}\t{v}\n" for u, v in rng.integers(0, 5000, (100_000, 2)))
        read_graph(write(tmp_path, "a.txt" + suffix, edges))
        u, v = rng.integers(0, 99, (2, 999))
        weighted = "".join(f"{a} {b} {float(w)!r}\n" for a, b, w in zip(u, v, rng.random(999)))
        read_graph(write(tmp_path, "w.txt" + suffix, weighted))
        read_graph(write(tmp_path, "b.graph" + suffix, gzip.decompress(FOUR_ELT.read_bytes())))
    windows = _mtx_text(rng, 300, 50_000, "integer", "symmetric", "plain").replace("\n", "\r\n")
    read_graph(write(tmp_path, "crlf.mtx", windows))


def test_errors_past_the_first_block_name_their_line(tmp_path):
    rng = np.random.default_rng(7)
    text = _mtx_text(rng, 100, 150_000, "real", "general", "plain")  # about 4 MiB, 4 blocks
    lines = text.splitlines()
    lines[120_000] = "1 1 1.0abc"
    path = write(tmp_path, "late.mtx.gz", "\n".join(lines) + "\n")
    assert outcome(path)[1] == f"{path}:120001: entry '1.0abc' is not a number"
    edges = [f"{u} {v}" for u, v in rng.integers(0, 900, (300_000, 2))]
    edges[250_000] = "5 -1"
    path = write(tmp_path, "late.txt", "\n".join(edges) + "\n")
    assert outcome(path)[1] == f"{path}:250001: node id -1 is negative"


#: Bodies that ``scipy.io.mmread`` reads without a word, each as something it does not say (it
#: reads a number's longest prefix and skips the rest of the line), and tandem's one line.
MMREAD_MISREADS = [
    ("2 2 1\n1 1 1.0abc\n", ":3: entry '1.0abc' is not a number"),
    ("2 2 1\n1 1 1.2.3\n", ":3: entry '1.2.3' is not a number"),
    ("2 2 1\n1 1 1e5e5\n", ":3: entry '1e5e5' is not a number"),
    ("2 2 1\n1 1 1-2\n", ":3: entry '1-2' is not a number"),
    ("2 2 1\n1 1 0x10\n", ":3: entry '0x10' is not a number"),
    ("2 2 1\n1 1 1.0 7\n", ":3: expected 3 fields, got '1 1 1.0 7'"),
    ("3 3 1\n1 2.5 7\n", ":3: column index 2.5 is not an integer"),
    ("3 3 2\n1 1 1\n1 2.5\n", ":4: expected 3 fields, got '1 2.5'"),
    ("3 3 1\n1 1 1.0 % caf\u00e9\n", ":3: not a text file (invalid UTF-8)"),
]


@pytest.mark.parametrize(("body", "message"), MMREAD_MISREADS)
def test_what_mmread_misreads_is_refused(tmp_path, body, message):
    # What the block checks before mmread are for: none of these makes mmread fail.
    path = write(tmp_path, "m.mtx", (HEADER + body).encode("latin-1"))
    assert scipy.io.mmread(path).nnz > 0
    assert outcome(path) == ("error", f"{path}{message}")


def test_what_mmread_reads_otherwise_is_read_as_python_does(tmp_path):
    # mmread reads 1_0 as 1, Python's float (and so tandem) as 10.
    path = write(tmp_path, "m.mtx", HEADER + "2 2 1\n1 2 1_0\n")
    assert scipy.io.mmread(path).data.tolist() == [1.0]
    assert read_graph(path).toarray().tolist() == [[0, 10], [0, 0]]


def test_threads_read_the_same(tmp_path, monkeypatch):
    # Blocks of 4 KiB: each file is dozens of them, checked and parsed side by side.
    monkeypatch.setattr(readers.text, "_BLOCK", 1 << 12)
    rng = np.random.default_rng(11)
    edges = "".join(f"{u}\t{v}\n" for u, v in rng.integers(0, 3000, (20_000, 2)))
    weighted = "".join(
        f"{u} {v} {w!r}\n" for (u, v), w in zip(rng.integers(0, 99, (999, 2)), rng.random(999))
    )
    files = [
        write(tmp_path, "a.mtx", _mtx_text(rng, 300, 20_000, "real", "general", "plain")),
        write(tmp_path, "p.mtx", _mtx_text(rng, 300, 20_000, "pattern", "symmetric", "plain")),
        write(tmp_path, "a.txt", edges),
        write(tmp_path, "w.txt", weighted),
        write(tmp_path, "b.graph", gzip.decompress(FOUR_ELT.read_bytes())),
    ]
    lines = edges.splitlines()
    lines[15_000] = "7 x7"
    files.append(write(tmp_path, "late.txt", "\n".join(lines)))
    lines = _mtx_text(rng, 300, 20_000, "real", "general", "plain").splitlines()
    lines[15_000] = "3 3 1e5e5"
    files.append(write(tmp_path, "late.mtx", "\n".join(lines)))
    for path in files:
        expected = outcome(path)
        for threads in (2, 5):
            assert outcome(path, threads=threads) == expected, (path.name, threads)
    assert outcome(files[-1])[1].endswith(":15001: entry '1e5e5' is not a number")
    assert outcome(files[-2])[0] == "ok"  # string names: the walk reads them


def test_integers_are_read_as_python_reads_them():
    rng = np.random.default_rng(13)
    # Up to 19 digits (all that uint64 holds for sure), leading zeros among them.
    tokens = ["".join(map(str, rng.integers(0, 10, rng.integers(1, 20)))) for _ in range(5000)]
    tokens += ["9" * 19, "0", "00000000", "12345678", "123456789"]
    text = " ".join(tokens).encode()
    ends = np.flatnonzero(np.frombuffer(text + b" ", np.uint8) == ord(" "))
    lengths = np.array([len(t) for t in tokens])
    assert readers.block_checks.parse_integers(text, ends, lengths).tolist() == [
        int(t) for t in tokens
    ]
    assert readers.block_checks.parse_integers(b"1" * 20, np.array([20]), np.array([20])) is None


def test_memory_scales_with_entries(tmp_path):
    # A 200 k-entry file is about 6 MB of text; the old reader took about 120 MB for it.
    rng = np.random.default_rng(3)
    mtx = write(tmp_path, "m.mtx", _mtx_text(rng, 20_000, 200_000, "real", "general", "plain"))
    edges = write(
        tmp_path, "e.txt", "".join(f"{u} {v}\n" for u, v in rng.integers(0, 9999, (200_000, 2)))
    )
    for path in (mtx, edges):
        tracemalloc.start()
        try:
            read_graph(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 100 * 200_000, (path.name, peak)  # bytes per entry, the CSR included


# ------------------------------------------------------------------- Hypothesis: fast = walk

TOKEN = st.sampled_from(
    [
        "1",
        "2",
        "3",
        "10",
        "0",
        "-1",
        "007",
        "1.5",
        ".5",
        "5.",
        "-.5",
        "+1",
        "1e3",
        "1E-2",
        "-2e+2",
        "1.e5",
        "1e",
        "1e-",
        "1-2",
        "1.2.3",
        "1e5e5",
        "1e5.3",
        "e5",
        ".",
        "-",
        "nan",
        "inf",
        "x",
        "1.0abc",
        "1_0",
        "99999999999999999999",
        "٣",
    ]
)
SEP = st.sampled_from([" ", " ", " ", "  ", "\t", " \t", "\r", "\x0c"])


@st.composite
def lines(draw, fields):
    """Lines of ``fields`` tokens mostly, sometimes one more or less, blank or a comment."""
    out = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.integers(0, 19))
        if kind == 0:
            out.append(draw(st.sampled_from(["", "   ", "% c", "# c"])))
            continue
        count = fields + (kind == 1) - (kind == 2)
        tokens = [draw(TOKEN) for _ in range(count)]
        sep = draw(SEP)
        line = sep.join(tokens)
        if kind == 3:
            line = " " + line
        if kind == 4:
            line += " "
        out.append(line)
    return out


def _check_fast_equals_walk(text: str, name: str, gz: bool, crlf: bool):
    if crlf:
        text = text.replace("\n", "\r\n")
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), name + (".gz" if gz else ""), text)
        assert outcome(path) == outcome(path, walk=True)


@FUZZ
@given(
    field=st.sampled_from(["real", "integer", "pattern"]),
    symmetry=st.sampled_from(["general", "symmetric", "skew-symmetric"]),
    n=st.integers(1, 3),
    body=st.data(),
    delta=st.sampled_from([0, 0, 0, -1, 1]),
    gz=st.booleans(),
    crlf=st.booleans(),
)
def test_mtx_fast_path_agrees_with_the_walk(field, symmetry, n, body, delta, gz, crlf):
    data = body.draw(lines(2 if field == "pattern" else 3))
    count = sum(1 for line in data if line.strip() and not line.strip().startswith("%"))
    text = f"%%MatrixMarket matrix coordinate {field} {symmetry}\n{n} {n} {max(count + delta, 1)}\n"
    _check_fast_equals_walk(text + "\n".join(data) + "\n", "f.mtx", gz, crlf)


@FUZZ
@given(width=st.sampled_from([2, 3]), body=st.data(), gz=st.booleans(), crlf=st.booleans())
def test_edge_list_fast_path_agrees_with_the_walk(width, body, gz, crlf):
    data = body.draw(lines(width))
    _check_fast_equals_walk("# head\n" + "\n".join(data) + "\n", "f.txt", gz, crlf)


@FUZZ
@given(
    n=st.integers(1, 4),
    m=st.integers(0, 3),
    fmt=st.sampled_from(["", " 1", " 10", " 11 2"]),
    body=st.data(),
    crlf=st.booleans(),
)
def test_metis_fast_path_agrees_with_the_walk(n, m, fmt, body, crlf):
    data = body.draw(
        st.lists(
            st.lists(TOKEN, max_size=4).flatmap(lambda t: SEP.map(lambda sep: sep.join(t))),
            min_size=n - 1,
            max_size=n + 1,
        )
    )
    _check_fast_equals_walk(f"{n} {m}{fmt}\n" + "\n".join(data) + "\n", "f.graph", False, crlf)


@FUZZ
@given(
    content=st.binary(max_size=300), name=st.sampled_from(["r.mtx", "r.txt", "r.graph", "r.npz"])
)
def test_random_bytes_are_a_graph_or_one_error_line(content, name):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(content)
        outcome(path)  # asserts one line naming the file, no warning, or a canonical CSR
        if name.endswith(".mtx"):
            path.write_bytes(HEADER.encode() + b"2 2 1\n" + content)
            assert outcome(path) == outcome(path, walk=True)
