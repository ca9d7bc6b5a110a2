"""The native harness's own parts: beat conversion, the fast evaluation and its shape check,
the build's rewrite of narrow selects of wide shifts.

The device tests (``tests/test_*_device_rtl.py``) run every design through the native harness
against golden and cocotb; these check what they cannot see: the vectorized packing equals
:mod:`tandem.host.common.bits`, the build's check of the Verilated model (``fast_eval_shape``)
refuses the shapes the fast evaluation would get wrong, the fast and the plain evaluation
give the same outputs and cycles on one model, and ``narrow_shifts`` keeps every value of the
shifts it rewrites (shift amounts past the wide operand included).
"""

import subprocess

import numpy as np
import pytest
from tandem.host.common import bits
from tandem.host.sparse_dsp import SparseMpeParams
from tandem.host.sparse_dsp.device import MpeCodec, SparseMpeDevice
from tandem.mappings.nm import NMPattern, mpe_streams, prune_magnitude
from tandem.sim.native.build import build_native, fast_eval_shape, narrow_shifts
from tandem.sim.native.model import (
    NativeModel,
    fields_to_words,
    ints_to_words,
    words_to_fields,
    words_to_ints,
)
from tandem.sim.native.server import StreamServer

from tandem.registry import get_design

from .rtl import need

#: As tests/test_sparse_dsp_device_rtl.py, so one pytest run builds the model once.
MPE = SparseMpeParams(chains=2, stages=4, max_k=256, max_batch=4)


def _reference_words(payloads: list[int], words: int) -> np.ndarray:
    raw = b"".join(p.to_bytes(4 * words, "little") for p in payloads)
    return np.frombuffer(raw, "<u4").reshape(len(payloads), words)


@pytest.mark.parametrize("seed", range(4))
def test_beat_conversion_equals_the_bits_module(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        widths = [int(w) for w in rng.integers(1, 65, rng.integers(1, 12))]
        high = [min((1 << w) - 1, (1 << 63) - 1) for w in widths]  # raw fields, int64 rows
        rows = np.stack(
            [rng.integers(-(1 << (w - 1)), h, 9, endpoint=True) for w, h in zip(widths, high)], 1
        )
        total = bits.payload_bits(bits.as_fields(widths))
        width = int(rng.integers(max(1, total - 40), total + 40))  # ports narrower and wider
        words = -(-width // 32)
        payloads = [v & ((1 << width) - 1) for v in bits.pack_rows(bits.as_fields(widths), rows)]
        want = _reference_words(payloads, words)
        assert np.array_equal(fields_to_words(widths, rows, words, width), want)
        assert np.array_equal(ints_to_words(payloads, words, width), want)
        signed = [p - (1 << width) if p >> (width - 1) else p for p in payloads]
        assert np.array_equal(ints_to_words(signed, words, width), want)
        assert words_to_ints(want) == payloads
        assert words_to_ints(want, signed_width=width) == signed
        fields = bits.as_fields(widths, signed=True)
        mask = (1 << total) - 1
        unpacked = bits.unpack_rows(fields, [p & mask for p in payloads])
        assert np.array_equal(words_to_fields(want, widths), unpacked)
    with pytest.raises(ValueError, match=r"= 16 does not fit raw 4 bits \(-8\.\.15\)"):
        fields_to_words([4], np.array([[16]]), 1, 4)


#: Verilog of a clocked adder and what the check says of it (None: the fast evaluation fits).
SHAPES = {
    "posedge clk": ("always @(posedge clk) if (rst) q <= 0; else q <= d + q;", None),
    "async reset": (
        "always @(posedge clk or posedge rst) if (rst) q <= 0; else q <= d + q;",
        "not triggered by the rising edge of clk alone",
    ),
    "falling edge": ("always @(negedge clk) q <= d + q;", "rising edge of clk alone"),
    "clk in logic": (
        "always @(posedge clk) q <= d + q; assign c = {7'b0, clk};",
        "reads clk",
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_fast_eval_shape_refuses_what_it_cannot_evaluate(shape, tmp_path):
    need("native")
    logic, why = SHAPES[shape]
    body = logic if "assign c" in logic else logic + " assign c = q ^ d;"
    (tmp_path / "top.v").write_text(
        "module top(input clk, input rst, input [7:0] d, output reg [7:0] q, "
        f"output [7:0] c);\n{body}\nendmodule\n"
    )
    command = ["verilator", "--cc", "--prefix", "Vtop", "-O3", "-Wno-fatal", "-Wno-lint"]
    command += ["--output-split", "0", "-Mdir", "obj", "top.v"]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True)
    found = fast_eval_shape(tmp_path / "obj")
    if why is None:
        assert found is None
    else:
        assert found is not None and why in found, found


@pytest.mark.rtl
def test_fast_evaluation_gives_the_plain_outputs_and_cycles(sim_cache):
    need("native")
    library, manifest = build_native(get_design("sparse-mpe"), MPE, cache_dir=sim_cache)
    rng = np.random.default_rng(3)
    dev = SparseMpeDevice(MPE)  # golden: packs the weights
    w = prune_magnitude(rng.integers(-128, 128, (24, 96)), NMPattern(2, 4), pair_rows=True)
    dev.load(w.astype(np.int8), "2:4")
    xs = [rng.integers(-128, 128, 96), rng.integers(-128, 128, (96, 4))]
    requests = [mpe_streams(MPE, dev.packed, x, mode) for x, mode in zip(xs, ("mv", "mm"))]
    jobs = [MpeCodec(MPE).encode(request)["sparse-mpe"] for request in requests]
    runs = {}
    for fast in (True, False):
        model = NativeModel(library, manifest)
        assert model.fast_eval(fast) == fast, "the build did not take the fast evaluation"
        server = StreamServer(model, "sparse-mpe")
        runs[fast] = [server.run(job.steps, 100_000) for job in jobs]
        model.close()
    for request, x, fast, plain in zip(requests, xs, runs[True], runs[False]):
        assert fast[1] == plain[1]  # cycles
        assert np.array_equal(np.asarray(fast[0][0]), np.asarray(plain[0][0]))
        assert np.array_equal(request.unpack(np.asarray(fast[0][0])), w @ x)


#: (operand bits, result bits, shift amount bits) of each ``r = w >> s`` narrow_shifts rewrites.
NARROW = ((100, 8, 8), (130, 64, 9), (1024, 1, 11), (65, 64, 7))


def test_narrow_shifts_keep_every_value(tmp_path):
    need("native")
    lines = ["module top;", "  integer i, j, errors = 0;"]
    for n, (wide, narrow, amount) in enumerate(NARROW):
        lines += [
            f"  reg [{wide - 1}:0] w{n};",
            f"  reg [{amount - 1}:0] s{n};",
            f"  wire [{narrow - 1}:0] r{n};",
            f"  wire [{narrow - 1}:0] ref{n};",
            f"  assign r{n} = w{n} >> s{n};",
            f"  assign ref{n} = {narrow}'h0 | (w{n} >> s{n});",  # not the rewritten shape
        ]
    lines += ["  initial begin", "    for (i = 0; i < 8; i = i + 1) begin"]
    for n, (wide, _, amount) in enumerate(NARROW):
        random = ", ".join(["$random"] * ((wide + 31) // 32))
        lines += [
            f"      w{n} = {{{random}}};",
            f"      for (j = 0; j < {1 << amount}; j = j + 1) begin",
            f"        s{n} = j; #1; if (r{n} !== ref{n}) errors = errors + 1;",
            "      end",
        ]
    lines += [
        "    end",
        '    if (errors != 0) $display("MISMATCH %0d", errors); else $display("SAME");',
        "    $finish;",
        "  end",
        "endmodule",
    ]
    verilog, count = narrow_shifts("\n".join(lines) + "\n")
    assert count == len(NARROW)
    assert verilog.count(">>") == 2 * len(NARROW)  # each ref, each rewrite's far end
    (tmp_path / "top.v").write_text(verilog)
    command = ["verilator", "--binary", "-j", "2", "-Wno-fatal", "-Wno-lint", "-Wno-style"]
    command += ["-CFLAGS", "-fcoroutines", "--top-module", "top", "-Mdir", "obj", "top.v"]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True)
    run = subprocess.run([tmp_path / "obj" / "Vtop"], capture_output=True, text=True, check=True)
    assert "SAME" in run.stdout, run.stdout
