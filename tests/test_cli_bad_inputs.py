"""Bad inputs over every subcommand of ``tandem``: one line, exit 2, no traceback, nothing written.

Each case of :data:`CASES` runs ``tandem.cli.main`` in-process in a fresh working folder and
asserts what the CLI promises for input the user can fix (docs/architecture.md): exit status 2,
exactly one line on stderr (``tandem: error: ...`` or argparse's ``tandem SUB: error: ...``), no
traceback, no warning, and no file created, changed or removed, neither in the working folder
(the default output folders are relative to it) nor among the inputs. Every case is rejected
before any heavy work (elaboration of a large design, a simulator build, synthesis, a model
download, a Dask cluster), so the whole table runs in seconds; a deadline per case turns a
hang into a failure.

The Hypothesis tests at the end hand random bytes to the file arguments (a config, a grid, a
weight matrix, a state_dict, a GGUF model): each is either a valid input or rejected the same
way.
"""

import argparse
import contextlib
import functools
import hashlib
import io
import os
import re
import signal
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.cli import main

#: The one line a user error prints: ``tandem: error: ...`` (ours) or ``tandem map spmm:
#: error: ...`` (argparse's, naming the subcommand).
ONE_LINE = re.compile(r"tandem( [\w-]+)*: error: \S.*")

#: Seconds a case may take before it counts as a hang (all are rejected in well under one).
DEADLINE_S = 30

IN, OUT = "{i}", "{o}"  # the inputs folder (shared, read-only) and the output folder (per case)
HUGE = str(10**30)
LONG_NAME = "x" * 300  # beyond NAME_MAX: the folder cannot be created


# --- inputs ---------------------------------------------------------------------------------
BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "lut_bits: *i\n"
)  # 9**9 values once expanded
MTX = "%%MatrixMarket matrix coordinate real general\n8 8 3\n1 2 1.0\n3 4 1.0\n8 1 1.0\n"
#: A grid of 10**9 points (nine axes of ten values each).
HUGE_GRID = "grid:\n" + "".join(
    f"  {name}: [{', '.join(str(v) for v in range(1, 11))}]\n"
    for name in [
        "lanes",
        "gqa_group",
        "max_seq_len",
        "max_outstanding",
        "max_burst_beats",
        "addr_bits",
        "score_int_bits",
        "score_frac_bits",
        "prob_frac_bits",
    ]
)

TEXT_FILES = {
    "afile": "not a folder\n",
    "latin1.yaml": "lut_bits: 6  # caf\xe9\n",  # written as Latin-1: not UTF-8
    "bomb.yaml": BOMB,
    "scalar.yaml": "5\n",
    "list.yaml": "- lut_bits\n- 6\n",
    "nested.yaml": "lut_bits: {a: 1}\n",
    "other-design.yaml": "design: hpu\n",
    "int-key.yaml": "1: 2\n",
    "nan.yaml": "lut_bits: .nan\n",
    "hugeint.yaml": "lut_bits: " + "9" * 5000 + "\n",
    "broken.yaml": "lut_bits: [6\n",
    "big.yaml": "# " + "x" * (2 << 20) + "\nlut_bits: 6\n",
    "g.mtx": MTX,
    "spmm-scalar.yaml": "systolic: 5\n",
    "spmm-value.yaml": "systolic: {rows: 999}\n",
    "spmm-section.yaml": "other: {}\n",
    "spmm-list.yaml": "- systolic\n",
    "grid-scalar.yaml": "5\n",
    "grid-none.yaml": "fixed: {lut_bits: 6}\n",
    "grid-five.yaml": "grid: 5\n",
    "grid-empty.yaml": "grid: {}\n",
    "grid-empty-list.yaml": "grid: {lut_bits: []}\n",
    "grid-unknown.yaml": "grid: {lutbits: [6]}\n",
    "grid-key.yaml": "grid: {lut_bits: [6]}\nfoo: 1\n",
    "grid-design.yaml": "design: hpu\ngrid: {lut_bits: [6]}\n",
    "grid-value.yaml": "grid: {lut_bits: [5, 99]}\n",
    "grid-type.yaml": "grid: {lut_bits: [5, abc]}\n",
    "grid-nested.yaml": "grid: {lut_bits: [[6]]}\n",
    "grid-fixed.yaml": "grid: {lut_bits: [6]}\nfixed: 5\n",
    "grid-board.yaml": "board: nosuch\ngrid: {lut_bits: [6]}\n",
    "grid-huge.yaml": HUGE_GRID,
    "grid-nan.yaml": "grid: {lut_bits: [.nan]}\n",
    "grid-hugeint.yaml": "grid: {lut_bits: [" + "9" * 5000 + "]}\n",
}


def _npy_with_shape(path: Path, shape: tuple[int, ...]) -> None:
    """A .npy whose header claims ``shape`` (int8) but holds 16 bytes of data."""
    header = {"descr": "|i1", "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    path.write_bytes(buffer.getvalue() + bytes(16))


def make_inputs(folder: Path) -> None:
    """Write every input file the cases name into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adir").mkdir(exist_ok=True)
    for name, text in TEXT_FILES.items():
        (folder / name).write_bytes(text.encode("latin-1" if name == "latin1.yaml" else "utf-8"))
    (folder / "binary.bin").write_bytes(bytes(range(256)) * 4)
    weights = {
        "w0x0": np.zeros((0, 0), np.int8),
        "w4x0": np.zeros((4, 0), np.int8),
        "w0x8": np.zeros((0, 8), np.int8),
        "w1d": np.zeros(8, np.int8),
        "w3d": np.zeros((2, 4, 8), np.int8),
        "wcomplex": np.ones((4, 8), np.complex64),
        "wbool": np.ones((4, 8), bool),
        "wstr": np.full((4, 8), "a"),
        "wnan": np.where(np.eye(4, 8) > 0, np.nan, 1.0).astype(np.float32),
        "winf": np.where(np.eye(4, 8) > 0, np.inf, 1.0).astype(np.float32),
        "wfloat": np.ones((4, 8), np.float32),
        "wrange": np.full((4, 8), 1000, np.int64),
        "wdense": np.ones((4, 8), np.int8),  # not 2:4
        "wok": np.eye(4, 8, dtype=np.int8),
    }
    for name, array in weights.items():
        np.save(folder / f"{name}.npy", array)
    np.save(folder / "wobject.npy", np.array([[1, None]], object), allow_pickle=True)
    np.savez(folder / "wnpz.npz", a=np.eye(4, 8, dtype=np.int8))
    _npy_with_shape(folder / "wheader.npy", (10**9, 10**9))
    _npy_with_shape(folder / "wshort.npy", (64, 64))
    (folder / "bad.gguf").write_bytes(b"GGUF" + bytes(range(256)))
    _state_dicts(folder)


def _state_dicts(folder: Path) -> None:
    try:
        import torch
    except ImportError:  # the map rnn --state-dict cases skip themselves
        return

    def lstm(h: int, x: int = 8, gates: int = 4):
        return {
            "weight_ih_l0": torch.zeros(gates * h, x),
            "weight_hh_l0": torch.zeros(gates * h, h),
            "bias_ih_l0": torch.zeros(gates * h),
            "bias_hh_l0": torch.zeros(gates * h),
        }

    nan = lstm(8)
    nan["weight_hh_l0"][0, 0] = float("nan")
    big = lstm(1)  # hidden 5000, stored as a broadcast view of one element
    big["weight_hh_l0"] = torch.zeros(1).expand(4 * 5000, 5000)
    big["weight_ih_l0"] = torch.zeros(1).expand(4 * 5000, 8)
    dicts = {
        "sd-zero": {**lstm(8), "weight_hh_l0": torch.zeros(0, 0)},
        "sd-zero-rows": {**lstm(8), "weight_hh_l0": torch.zeros(0, 8)},
        "sd-1d": {**lstm(8), "weight_hh_l0": torch.zeros(32)},
        "sd-3d": {**lstm(8), "weight_hh_l0": torch.zeros(32, 8, 1)},
        "sd-ih-1d": {**lstm(8), "weight_ih_l0": torch.zeros(32)},
        "sd-no-hh": {"weight_ih_l0": torch.zeros(32, 8)},
        "sd-list": {"weight_ih_l0": [1, 2], "weight_hh_l0": [[1.0]]},
        "sd-rows": {**lstm(8), "weight_ih_l0": torch.zeros(24, 8)},
        "sd-gates": {**lstm(8), "weight_hh_l0": torch.zeros(40, 8)},
        "sd-nan": nan,
        "sd-big": big,
        "sd-bias": {**lstm(8), "bias_ih_l0": torch.zeros(5)},
        "sd-complex": {k: v.to(torch.complex64) for k, v in lstm(8).items()},
        "sd-not-dict": [1, 2, 3],
    }
    for name, data in dicts.items():
        torch.save(data, folder / f"{name}.pt")


# --- the cases ------------------------------------------------------------------------------
def _out_file_is_folder(*names):
    """Setup: the output folder exists with an old ``keep`` file and each of ``names`` as a
    folder (an output file that cannot be replaced)."""

    def setup(root: Path) -> None:
        out = root / "out"
        out.mkdir()
        (out / "keep").write_text("old\n")
        for name in names:
            (out / name).mkdir()

    return setup


def _old_outputs(*names, folder: str = ""):
    """Setup: old versions of the outputs ``names`` (they must stay as they are) and the last
    output file of the list a folder, so the write fails after the others could have moved."""

    def setup(root: Path) -> None:
        out = root / "out"
        out.mkdir()
        for name in names:
            (out / name).write_text("old\n")
        if folder:
            (out / folder).mkdir()

    return setup


G = ["generate", "exp2", "-o", OUT]
S = ["sim", "exp2"]
SY = ["synth", "exp2", "--board", "u280", "-o", OUT]
M = ["map", "spmm", "--graph", IN + "/g.mtx", "--features", "16", "--no-heatmap", "-o", OUT]
R = ["map", "rnn", "--input", "32", "--hidden", "32", "--no-plot", "-o", OUT]
P = ["pack", "nm", "--pattern", "2:4", "-o", OUT + "/packed.npz", "--weights"]
F = ["model", "fetch"]
C = ["cosim", "decode", "--prompt", "hi", "--model", "tiny", "--tokens", "2"]
PD = ["perf", "decode", "--model", "llama-2-7b", "--gpu", "a100-80gb"]
B = ["bench", "--only", "fixed-point", "-o", OUT]
SW = ["sweep", "exp2", "-o", OUT, "--grid"]


def _config_cases(prefix):
    """A YAML config file that is not one: ``prefix`` + ``-c FILE``."""
    return [
        [*prefix, "-c", IN + "/" + name]
        for name in (
            "binary.bin",
            "latin1.yaml",
            "bomb.yaml",
            "scalar.yaml",
            "list.yaml",
            "nested.yaml",
            "other-design.yaml",
            "int-key.yaml",
            "nan.yaml",
            "hugeint.yaml",
            "broken.yaml",
            "big.yaml",
            "adir",
            "missing.yaml",
        )
    ]


def _set_cases(prefix):
    """``--set`` values that are not values of ``lut_bits`` (or not ``key=value`` at all)."""
    return [
        [*prefix, "--set", text]
        for text in (
            "lut_bits",
            "=6",
            "lut_bits=99",
            "lut_bits=abc",
            "lut_bits=1.5",
            "lut_bits=.nan",
            "lut_bits=.inf",
            "lut_bits=true",
            "lut_bits=[6]",
            "lut_bits={a: 1}",
            "lut_bits=" + "9" * 5000,
            "lut_bits=*alias",
            "lutbits=6",
        )
    ]


def _design_bound_cases():
    """Every numeric parameter of every design, far beyond anything the design can hold."""
    import dataclasses

    from tandem.registry import all_designs

    cases = []
    for design in all_designs():
        for field in dataclasses.fields(design.params):
            if field.metadata.get("choices") is None and field.type in (int, float, "int"):
                cases.append(["generate", design.name, "-o", OUT, "--set", f"{field.name}={HUGE}"])
    return cases


CASES: list[tuple[list[str], object]] = [
    # designs
    *(
        (args, None)
        for args in (["designs", "--bogus"], ["designs", "extra"], ["designs", "--json=yes"])
    ),
    # generate
    *((args, None) for args in _config_cases(G)),
    *((args, None) for args in _set_cases(G)),
    *((args, None) for args in _design_bound_cases()),
    (["generate", "nosuch", "-o", OUT], None),
    (["generate", "exp2", "-o"], None),
    (["generate", "-o", OUT], None),
    ([*G, "--board", "nosuch"], None),
    ([*G, "--board", ""], None),
    (["generate", "exp2", "-o", IN + "/afile"], None),
    (["generate", "exp2", "-o", IN + "/afile/sub"], None),
    (["generate", "exp2", "-o", LONG_NAME], None),
    (["generate", "exp2", "-o", "/proc/tandem-out"], None),
    (["generate", "exp2", "-o", ""], None),
    (G, _out_file_is_folder("exp2.v")),
    (G, _old_outputs("exp2.v", folder="exp2.manifest.json")),
    ([*G, "--board", "u280"], _old_outputs("exp2.v", "exp2.manifest.json", folder="exp2.xdc")),
    (["generate", "sparse-mpe", "-o", OUT, "--set", "max_k=1073741824"], None),
    (["generate", "sparse-mpe", "-o", OUT, "--set", "act_bytes=1099511627776"], None),
    (
        ["generate", "sparse-mpe", "-o", OUT, "--set", "max_k=1073741824", "--set", "acc_bits=48"],
        None,
    ),
    (
        ["generate", "sparse-mpe", "-o", OUT, "--set", "max_k=16777216", "--set", "max_batch=32"],
        None,
    ),
    # sim
    ([*S, "--run-dir", IN + "/afile"], None),
    ([*S, "--run-dir", IN + "/afile/sub"], None),
    ([*S, "--run-dir", LONG_NAME], None),
    ([*S, "--seed", "-1"], None),
    ([*S, "--seed", "x"], None),
    ([*S, "--seed", str(2**64)], None),
    ([*S, "--simulator", "vcs"], None),
    (["sim", "nosuch"], None),
    ([*S, "-c", IN + "/bomb.yaml"], None),
    ([*S, "-c", IN + "/binary.bin"], None),
    ([*S, "--set", "lut_bits=99"], None),
    (["sim", "sparse-mpe", "--set", "max_k=1073741824"], None),
    # synth
    (["pnr", "exp2", "--board", "nosuch"], None),
    (["pnr", "exp2"], None),
    (["pnr", "exp2", "--board", "u280"], None),
    (["pnr", "exp2", "--board", "ulx3s-85f", "--seed", "-1"], None),
    (["pnr", "exp2", "--board", "ulx3s-85f", "-o", IN + "/afile/sub"], None),
    (["pnr", "nosuch", "--board", "ulx3s-85f"], None),
    (["synth", "exp2", "--board", "nosuch"], None),
    (["synth", "exp2"], None),
    (["synth", "exp2", "--board", "u280", "-o", IN + "/afile"], None),
    (["synth", "exp2", "--board", "u280", "-o", IN + "/afile/sub"], None),
    (["synth", "exp2", "--board", "u280", "-o", LONG_NAME], None),
    (SY, _out_file_is_folder("exp2.u280.synth.json")),
    ([*SY, "-c", IN + "/bomb.yaml"], None),
    ([*SY, "-c", IN + "/binary.bin"], None),
    ([*SY, "--set", "lut_bits=.nan"], None),
    (["synth", "sparse-mpe", "--board", "u280", "--set", "max_k=1073741824"], None),
    # map spmm
    *(
        ([*M, *extra], None)
        for extra in (
            ["--features", "0"],
            ["--features", "-1"],
            ["--features", str(10**12)],
            ["--features", "abc"],
            ["--tile", "3"],
            ["--tile", "0"],
            ["--tile", "-4"],
            ["--tile", str(2**40)],
            ["--threshold", "nan"],
            ["--threshold", "inf"],
            ["--threshold", "0"],
            ["--threshold", "2"],
            ["--threshold", "-0.5"],
            ["--threads", "0"],
            ["--threads", "-1"],
            ["--threads", "1000000"],
            ["--board", "nosuch"],
            ["--format", "bogus"],
            ["--reorder", "bogus"],
            ["-c", IN + "/binary.bin"],
            ["-c", IN + "/bomb.yaml"],
            ["-c", IN + "/scalar.yaml"],
            ["-c", IN + "/spmm-list.yaml"],
            ["-c", IN + "/spmm-scalar.yaml"],
            ["-c", IN + "/spmm-value.yaml"],
            ["-c", IN + "/spmm-section.yaml"],
            ["-c", IN + "/big.yaml"],
            ["-c", IN + "/missing.yaml"],
            ["-c", IN + "/adir"],
            ["--set", "rows=4"],
            ["--set", "systolic.rows=999"],
            ["--set", "systolic.nokey=1"],
            ["--set", "systolic.rows=.nan"],
            ["--set", "sparse-engine.tile=3"],
            ["--set", "systolic.rows=64", "--set", "systolic.cols=64"],
            ["--set", "systolic.a_bits=8"],
        )
    ),
    (["map", "spmm", "--graph", IN + "/missing.mtx", "--features", "16", "-o", OUT], None),
    (["map", "spmm", "--graph", IN + "/adir", "--features", "16", "-o", OUT], None),
    (["map", "spmm", "--graph", IN + "/g.mtx", "--features", "16", "-o", IN + "/afile"], None),
    (["map", "spmm", "--graph", IN + "/g.mtx", "--features", "16", "-o", IN + "/afile/x"], None),
    (["map", "spmm", "--graph", IN + "/g.mtx", "--features", "16", "-o", LONG_NAME], None),
    (["map", "spmm", "--graph", IN + "/g.mtx", "--features", "16", "-o", ""], None),
    (
        ["map", "spmm", "--graph", IN + "/g.mtx", "--features", "16", "-o", OUT],
        _old_outputs("mapping.yaml", "mapping.npz", folder="heatmap.png"),
    ),
    (M, _old_outputs("mapping.yaml", folder="mapping.npz")),
    # map rnn
    *(
        ([*R, *extra], None)
        for extra in (
            ["--input", "0"],
            ["--input", "-1"],
            ["--input", "5000"],
            ["--input", "abc"],
            ["--hidden", "0"],
            ["--hidden", str(10**9)],
            ["--batch", "0"],
            ["--batch", "17"],
            ["--batch", str(10**9)],
            ["--steps", "0"],
            ["--steps", "70000"],
            ["--array", "0x0"],
            ["--array", "3x3"],
            ["--array", "64"],
            ["--array", "1000000x1000000"],
            ["--array", "axb"],
            ["--cell", "rnn"],
            ["--weight-bits", "4"],
        )
    ),
    (["map", "rnn", "-o", OUT], None),
    (["map", "rnn", "--input", "32", "-o", OUT], None),
    *(
        (["map", "rnn", "--state-dict", IN + "/" + name, "--no-plot", "-o", OUT], None)
        for name in (
            "missing.pt",
            "binary.bin",
            "adir",
            "sd-zero.pt",
            "sd-zero-rows.pt",
            "sd-1d.pt",
            "sd-3d.pt",
            "sd-ih-1d.pt",
            "sd-no-hh.pt",
            "sd-list.pt",
            "sd-rows.pt",
            "sd-gates.pt",
            "sd-nan.pt",
            "sd-big.pt",
            "sd-not-dict.pt",
            "sd-bias.pt",
            "sd-complex.pt",
        )
    ),
    (["map", "rnn", "--input", "32", "--hidden", "32", "-o", IN + "/afile"], None),
    (["map", "rnn", "--input", "32", "--hidden", "32", "-o", IN + "/afile/x"], None),
    (["map", "rnn", "--input", "32", "--hidden", "32", "-o", LONG_NAME], None),
    (
        ["map", "rnn", "--input", "32", "--hidden", "32", "-o", OUT],
        _old_outputs("lstm_x32_h32.schedule.yaml", folder="lstm_x32_h32.program.npz"),
    ),
    (
        ["map", "rnn", "--input", "32", "--hidden", "32", "-o", OUT],
        _old_outputs(
            "lstm_x32_h32.schedule.yaml",
            "lstm_x32_h32.program.npz",
            folder="lstm_x32_h32.utilization.png",
        ),
    ),
    # pack nm
    *(
        ([*P, IN + "/" + name, *extra], None)
        for name, extra in (
            ("missing.npy", []),
            ("adir", []),
            ("binary.bin", []),
            ("w0x0.npy", []),
            ("w4x0.npy", []),
            ("w0x8.npy", []),
            ("w1d.npy", []),
            ("w3d.npy", []),
            ("wcomplex.npy", []),
            ("wcomplex.npy", ["--quantize"]),
            ("wbool.npy", []),
            ("wstr.npy", []),
            ("wstr.npy", ["--prune", "--quantize"]),
            ("wobject.npy", []),
            ("wnpz.npz", []),
            ("wheader.npy", []),
            ("wshort.npy", []),
            ("wnan.npy", ["--prune", "--quantize"]),
            ("wnan.npy", ["--quantize"]),
            ("winf.npy", ["--prune", "--quantize"]),
            ("wfloat.npy", []),
            ("wrange.npy", []),
            ("wdense.npy", []),
            ("w0x0.npy", ["--prune", "--quantize"]),
            ("w4x0.npy", ["--prune", "--quantize"]),
            ("wok.npy", ["--pair-rows"]),
            ("wok.npy", ["--max-m", "0"]),
            ("wok.npy", ["--max-m", "-4"]),
            ("wok.npy", ["--max-m", "2"]),
        )
    ),
    *(
        (["pack", "nm", "--weights", IN + "/wok.npy", "-o", OUT + "/p.npz", "--pattern", p], None)
        for p in (
            "2",
            "0:4",
            "3:4",
            "4:2",
            "2:3",
            "a:b",
            "2:4:8",
            "-2:4",
            "2:0",
            "1:" + HUGE,
            "1:" + str(2**40),
        )
    ),
    (
        ["pack", "nm", "--weights", IN + "/wok.npy", "--pattern", "2:4", "-o", IN + "/afile/p.npz"],
        None,
    ),
    (["pack", "nm", "--weights", IN + "/wok.npy", "--pattern", "2:4", "-o", IN + "/adir"], None),
    (["pack", "nm", "--weights", IN + "/wok.npy", "--pattern", "2:4", "-o", ""], None),
    (["pack", "nm", "--weights", IN + "/wok.npy", "--pattern", "2:4", "-o", LONG_NAME], None),
    ([*P, IN + "/wok.npy"], _out_file_is_folder("packed.npz")),
    # model fetch
    ([*F, "nosuch", "--cache-dir", OUT], None),
    ([*F, "", "--cache-dir", OUT], None),
    ([*F, "smollm2-135m", "--cache-dir", IN + "/afile"], None),
    ([*F, "smollm2-135m", "--cache-dir", IN + "/afile/sub"], None),
    (F, None),
    # cosim decode
    *(
        ([*C, *extra], None)
        for extra in (
            ["--temperature", "nan"],
            ["--temperature", "inf"],
            ["--temperature", "-1"],
            ["--clock-mhz", "nan"],
            ["--clock-mhz", "inf"],
            ["--clock-mhz", "0"],
            ["--clock-mhz", "-1"],
            ["--hpu-memory-mib", "nan"],
            ["--hpu-memory-mib", "inf"],
            ["--hpu-memory-mib", "0.0001"],
            ["--hpu-memory-mib", "0"],
            ["--hpu-memory-mib", "-1"],
            ["--hpu-memory-mib", str(10**12)],
            ["--max-slice-tokens", "0"],
            ["--max-slice-tokens", "-5"],
            ["--batch", "0"],
            ["--batch", "1000000000"],
            ["--hpus", "0"],
            ["--hpus", "1000000"],
            ["--engines", "-1"],
            ["--engines", "17"],
            ["--engines", "3"],
            ["--tokens", "0"],
            ["--tokens", "1000000000"],
            ["--threads", "0"],
            ["--threads", "1000000"],
            ["--seed", "-1"],
            ["--seed", str(2**70)],
            ["--trace", IN + "/afile/t.json"],
            ["--trace", OUT + "/missing/t.json"],
            ["--trace", IN + "/adir"],
            ["--trace", ""],
            ["--model", IN + "/missing.gguf"],
            ["--model", IN + "/bad.gguf"],
            ["--model", IN + "/binary.bin"],
            ["--model", IN + "/adir"],
            ["--model", "nosuch"],
            ["--prompt", ""],
            ["--set", "lanes=3"],
            ["--set", "nokey=1"],
            ["--set", "max_seq_len=2"],
            ["--temperature", "1e-320"],
            ["--max-slice-tokens", "32", "--tokens", "1000000000"],
            ["--set", "max_seq_len=.nan"],
            ["--backend", "fpga"],
            ["--simulator", "vcs"],
        )
    ),
    (["cosim", "decode", "--model", "tiny"], None),
    (["cosim", "decode", "--model", "tiny", "--prompt", "a", "--program", IN + "/wok.npy"], None),
    (["cosim", "decode", "--model", "tiny", "--prompt", "a", "--program", OUT + "/none"], None),
    # compile
    *(
        (["compile", "tiny", "-o", OUT + "/c", *extra], None)
        for extra in (
            ["--patterns", "3:4"],
            ["--patterns", ""],
            ["--patterns", "2:4,abc"],
            ["--budget", "nan"],
            ["--budget", "0"],
            ["--budget", "1"],
            ["--criterion", "random"],
            ["--tile", "3"],
            ["--tile", "64"],
            ["--calibration-tokens", "0"],
            ["--max-prefill", "0"],
            ["--max-prefill", "5000"],
            ["--activation-bits", "4"],
            ["--activation-bits", "8,x"],
            ["--weight-bits", "4"],
            ["--weight-bits", "x"],
            ["--method", "fast"],
            ["--calibration-text", IN + "/nosuch.txt"],
        )
    ),
    (["compile", "nosuch-model", "-o", OUT + "/c"], None),
    (["compile", "tiny"], None),
    # perf decode
    *(
        ([*PD, *extra], None)
        for extra in (
            ["--hpu-clock-mhz", "nan"],
            ["--hpu-clock-mhz", "inf"],
            ["--hpu-clock-mhz", "0"],
            ["--hpu-clock-mhz", "-5"],
            ["--hpu-clock-mhz", "1e300"],
            ["--pcie-latency-us", "nan"],
            ["--pcie-latency-us", "inf"],
            ["--pcie-latency-us", "-1"],
            ["--pcie-latency-us", "1e300"],
            ["--hpus", str(10**9)],
            ["--hpus", "-1"],
            ["--batch", ""],
            ["--batch", "a"],
            ["--batch", "0"],
            ["--batch", "-1"],
            ["--batch", "1,,x"],
            ["--batch", str(10**12)],
            ["--input", "0"],
            ["--input", str(10**12)],
            ["--output", "0"],
            ["--output", "-5"],
            ["--engines", "0"],
            ["--engines", "-1"],
            ["--engines", str(10**9)],
            ["--hpu-latency", "-1"],
            ["--hpu-latency", str(10**9)],
            ["--hpu-board", "nosuch"],
            ["--plot", IN + "/afile/p.png"],
            ["--plot", OUT + "/missing/p.png"],
            ["--plot", IN + "/adir"],
            ["--plot", ""],
        )
    ),
    (["perf", "decode", "--model", "nosuch", "--gpu", "a100-80gb"], None),
    (["perf", "decode", "--model", "llama-2-7b", "--gpu", "nosuch"], None),
    (["perf", "decode", "--model", "llama-2-7b"], None),
    # bench
    *(
        ([*B, *extra], None)
        for extra in (
            ["--only", "nosuch"],
            ["--timeout", "0"],
            ["--timeout", "-1"],
            ["--timeout", "nan"],
            ["--timeout", "inf"],
            ["--benchmarks", IN + "/missing"],
            ["--benchmarks", IN + "/afile"],
            ["--benchmarks", IN + "/adir"],
        )
    ),
    (["bench", "--only"], None),
    (["bench", "--only", "fixed-point", "-o", IN + "/afile"], None),
    (["bench", "--only", "fixed-point", "-o", IN + "/afile/sub"], None),
    (["bench", "--only", "fixed-point", "-o", LONG_NAME], None),
    # sweep
    *(
        ([*SW, IN + "/" + name], None)
        for name in (
            "missing.yaml",
            "adir",
            "binary.bin",
            "latin1.yaml",
            "bomb.yaml",
            "big.yaml",
            "broken.yaml",
            "grid-scalar.yaml",
            "grid-none.yaml",
            "grid-five.yaml",
            "grid-empty.yaml",
            "grid-empty-list.yaml",
            "grid-unknown.yaml",
            "grid-key.yaml",
            "grid-design.yaml",
            "grid-value.yaml",
            "grid-type.yaml",
            "grid-nested.yaml",
            "grid-fixed.yaml",
            "grid-board.yaml",
            "grid-nan.yaml",
            "grid-hugeint.yaml",
        )
    ),
    (["sweep", "hpu", "-o", OUT, "--grid", IN + "/grid-huge.yaml"], None),
    (["sweep", "exp2", "-o", OUT, "--grid", IN + "/grid-type.yaml", "--no-synth"], None),
    (["sweep", "nosuch", "-o", OUT, "--grid", IN + "/grid-value.yaml"], None),
    (["sweep", "exp2", "-o", IN + "/afile", "--grid", IN + "/grid-nested.yaml"], None),
    *(
        (["sweep", "exp2", "--grid", IN + "/g.mtx", *extra], None)
        for extra in (
            ["--workers", "0"],
            ["--workers", "-1"],
            ["--workers", "1000000"],
            ["--simulator", "vcs"],
        )
    ),
]


# Subcommands other engineers own, bad inputs all the same (the cache is a temporary one).
CASES += [
    *((args, None) for args in (["doctor", "--bogus"], ["doctor", "extra"], ["setup", "--bogus"])),
    *(
        (["cache", *extra], None)
        for extra in (
            [],
            ["list", "--bogus"],
            ["clean", "--older-than", "nan"],
            ["clean", "--older-than", "inf"],
            ["clean", "--older-than", "-1"],
            ["clean", "--older-than", "abc"],
            ["frobnicate"],
        )
    ),
    *(
        (["run", *extra], None)
        for extra in (
            ["--tokens", "0"],
            ["--tokens", "1000000000"],
            ["-o", IN + "/afile"],
            ["-o", IN + "/afile/sub"],
            ["-o", LONG_NAME],
            ["--backend", "fpga"],
            ["--simulator", "vcs"],
            ["--quick", "--no-verify"],
            ["--prompt", "", "-o", OUT],
            ["--prompt", "  ", "-o", OUT],
            ["-o", ""],
        )
    ),
    *(
        (["prove", *extra], None)
        for extra in (
            ["nosuch"],
            ["exp2", "--depth", "0"],
            ["exp2", "--depth", str(10**6)],
            ["exp2", "--timeout", "nan"],
            ["exp2", "--timeout", "-1"],
            ["exp2", "--set", "lut_bits=99"],
            ["exp2", "-c", IN + "/bomb.yaml"],
            ["sparse-mpe", "--set", "max_k=1073741824", "--set", "acc_bits=48"],
        )
    ),
]


def _subcommand(args: list[str]) -> str:
    words = [a for a in args[:2] if not a.startswith("-")]
    if words and words[0] in ("map", "pack", "model", "cosim", "perf"):
        return " ".join(words)
    return words[0] if words else "-"


# --- running one case -------------------------------------------------------------------------
@contextlib.contextmanager
def _deadline(seconds: int):
    def expire(signum, frame):
        raise TimeoutError(f"no answer in {seconds} s (a hang)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_tandem(argv: list[str], cwd: Path, deadline_s: int = DEADLINE_S):
    """``tandem.cli.main(argv)`` in ``cwd``: (status, stdout, stderr). An exception that escapes
    ``main`` is written to stderr as the interpreter would (a traceback), and every warning
    (other than deprecations, which Python hides from users) as a line of stderr."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            warnings.simplefilter("always")
            try:
                with _deadline(deadline_s):
                    status = main(argv)
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # what a user would see: a traceback, status 1
                err.write(traceback.format_exc())
                status = 1
    finally:
        os.chdir(here)
    for warning in caught:
        if not issubclass(warning.category, DeprecationWarning | PendingDeprecationWarning):
            err.write(f"{warning.filename}:{warning.lineno}: {warning.message}\n")
    return status, out.getvalue(), err.getvalue()


def snapshot(*roots: Path) -> dict[str, object]:
    """Every file and folder below ``roots`` (hidden ones too) with its contents' hash."""
    seen: dict[str, object] = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in dirs:
                seen[os.path.join(folder, name)] = "dir"
            for name in files:
                path = os.path.join(folder, name)
                seen[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return seen


def expand(args: list[str], inputs: Path, out: Path) -> list[str]:
    return [a.replace(IN, str(inputs)).replace(OUT, str(out)) for a in args]


def check_rejected(status, stdout, stderr, before, after):
    """The contract: exit 2, one line of the user-error form, no traceback, nothing written."""
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr[-3000:]
    assert status == 2, f"exit status {status}; stdout {stdout[-500:]!r}; stderr {stderr[-500:]!r}"
    assert len(lines) == 1 and ONE_LINE.fullmatch(lines[0]), stderr[-2000:]
    assert len(lines[0]) < 1000, f"{len(lines[0])} characters: {lines[0][:200]}..."
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    assert not (added or removed or changed), (added, removed, changed)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    make_inputs(folder)
    return folder


def _case_id(case) -> str:
    args, setup = case
    text = " ".join(a if len(a) < 40 else a[:12] + f"...({len(a)})" for a in args)
    return text + (" [outputs exist]" if setup else "")


#: Cases still accepted by code this suite's change did not own, with the owner to fix them.
ELSEWHERE: dict[str, str] = {}


def _params():
    for case in CASES:
        name = _case_id(case)
        marks = [pytest.mark.xfail(reason=ELSEWHERE[name])] if name in ELSEWHERE else []
        yield pytest.param(case, id=name, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, inputs, tmp_path, monkeypatch):
    args, setup = case
    if any(".pt" in a for a in args):
        pytest.importorskip("torch")
    if args[0] not in _subcommands():
        pytest.skip(f"no tandem {args[0]} here")
    work = tmp_path / "work"
    work.mkdir()
    # Simulator builds and model weights go to $XDG_CACHE_HOME: a temporary one, watched too.
    monkeypatch.setenv("XDG_CACHE_HOME", str(work / "cache"))
    if setup:
        setup(work)
    before = snapshot(work, inputs)
    status, stdout, stderr = run_tandem(expand(args, inputs, work / "out"), work)
    check_rejected(status, stdout, stderr, before, snapshot(work, inputs))


@functools.cache
def _subcommands() -> dict[str, list[str]]:
    """Each subcommand of the parser and the actions below it (``map``: ``spmm``, ``rnn``)."""
    from tandem.cli import build_parser

    def children(parser) -> dict:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return actions[0].choices if actions else {}

    return {name: list(children(sub)) for name, sub in children(build_parser()).items()}


def test_every_subcommand_has_bad_inputs():
    """The table covers every subcommand the parser has (a new one must add its cases)."""
    names = set()
    for name, actions in _subcommands().items():
        two = name in ("map", "pack", "model", "cosim", "perf")
        names |= {f"{name} {a}" for a in actions} if two else {name}
    covered = {_subcommand(args) for args, _ in CASES}
    assert names <= covered, sorted(names - covered)


# --- random files -----------------------------------------------------------------------------
def _random_file_case(tmp_path: Path, content: bytes, args: list[str]):
    """Run ``args`` (``{f}`` is a file holding ``content``): a clean success, or the contract."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    path = work / "input"
    path.write_bytes(content)
    argv = [a.replace("{f}", str(path)).replace(OUT, str(work / "out")) for a in args]
    before = snapshot(work)
    status, stdout, stderr = run_tandem(argv, work)
    if status == 0:
        assert "Traceback" not in stderr and not stderr.strip(), stderr
        return
    check_rejected(status, stdout, stderr, before, snapshot(work))


YAMLISH = st.text(alphabet="ab_:-[]{}&*!|>'\"#%@ \n\t0123456789.", max_size=80)
FUZZ = settings(
    max_examples=int(os.environ.get("TANDEM_FUZZ_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(content=st.binary(max_size=200) | YAMLISH.map(str.encode))
def test_random_config_file(tmp_path, content):
    # synth: a valid config reaches synthesis, which the output path (a file) then refuses
    # before any work, so every example is fast.
    (tmp_path / "afile").touch()
    _random_file_case(
        tmp_path,
        content,
        ["synth", "exp2", "--board", "u280", "-c", "{f}", "-o", str(tmp_path / "afile")],
    )


@FUZZ
@given(content=st.binary(max_size=200) | YAMLISH.map(str.encode))
def test_random_grid_file(tmp_path, content):
    (tmp_path / "afile").touch()
    _random_file_case(
        tmp_path, content, ["sweep", "exp2", "--grid", "{f}", "-o", str(tmp_path / "afile")]
    )


@FUZZ
@given(content=st.binary(max_size=300))
def test_random_weights_file(tmp_path, content):
    _random_file_case(
        tmp_path, content, ["pack", "nm", "--weights", "{f}", "--pattern", "2:4", "-o", OUT]
    )


@FUZZ
@given(content=st.binary(max_size=300))
def test_random_state_dict_file(tmp_path, content):
    pytest.importorskip("torch")
    _random_file_case(tmp_path, content, ["map", "rnn", "--state-dict", "{f}", "-o", OUT])


@FUZZ
@given(content=st.binary(max_size=300).map(lambda b: b"GGUF" + b))
def test_random_model_file(tmp_path, content):
    pytest.importorskip("torch")
    _random_file_case(
        tmp_path, content, ["cosim", "decode", "--prompt", "hi", "--model", "{f}", "--tokens", "2"]
    )


if __name__ == "__main__":  # print the table's size by subcommand
    from collections import Counter

    for name, count in sorted(Counter(_subcommand(a) for a, _ in CASES).items()):
        print(f"{name:<14}{count:>5}")
    print(f"{'total':<14}{len(CASES):>5}", file=sys.stdout)


# --- the all-or-nothing writer ----------------------------------------------------------------
def test_a_failed_rename_puts_the_old_outputs_back(tmp_path, monkeypatch):
    """The second file's rename fails: the first is back to its old contents, nothing is left
    of the staging folder."""
    from tandem.errors import UserError
    from tandem.generate import write_files

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old a\n")
    (out / "b.txt").write_text("old b\n")
    before = snapshot(out)
    real_rename = os.rename

    def rename(src, dst):
        if Path(dst).name == "b.txt" and ".tmp-" in str(src):
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(UserError, match="cannot write the output: No space left on device"):
        write_files(out, {"a.txt": b"new a\n", "b.txt": b"new b\n"})
    assert snapshot(out) == before


def test_an_error_inside_removes_the_folders_made_for_the_output(tmp_path):
    from tandem.generate import staged_output

    with pytest.raises(RuntimeError), staged_output(tmp_path / "a" / "b" / "out") as staging:
        (staging / "x").write_text("half\n")
        raise RuntimeError("the work failed")
    assert list(tmp_path.iterdir()) == []


def test_outputs_appear_together_with_the_umask_permissions(tmp_path):
    from tandem.generate import write_files

    paths = write_files(tmp_path / "new" / "out", {"a": b"1", "b": b"2"})
    assert [p.read_bytes() for p in paths] == [b"1", b"2"]
    assert sorted(p.name for p in (tmp_path / "new" / "out").iterdir()) == ["a", "b"]
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "new" / "out").stat().st_mode & 0o777 == 0o777 & ~mask
    write_files(tmp_path / "new" / "out", {"a": b"3"})  # replaces one, keeps the other
    assert [p.read_bytes() for p in paths] == [b"3", b"2"]
