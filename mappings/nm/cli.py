"""``tandem pack nm``: pack a weight matrix into N:M value and index streams.

    tandem pack nm --weights W.npy --pattern 2:4                # build/pack/nm/W.npz
    tandem pack nm --weights W_float.npy --pattern 2:4 --prune --quantize -o packed.npz

Without ``-o`` the file goes to ``build/pack/nm/<weights' name>.npz``. ``--json`` prints the
packing's figures (shape, slots, non-zeros, matrix-vector row pairs) and the file as JSON.
The output ``.npz`` holds ``values`` (int8) and ``indices`` (uint8), both [rows, groups * N],
``n``, ``m``, ``shape`` and, with ``--quantize``, the per-row ``scales`` (float32); it is read back
by :meth:`tandem.mappings.nm.NMPacked.load`.
"""

import argparse
import io
import math
import os
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tandem pack nm``."""
    from tandem.args import add_output

    parser.add_argument("--weights", required=True, metavar="W.npy", help="[rows, cols] matrix")
    parser.add_argument("--pattern", required=True, metavar="N:M", help="for example 2:4")
    add_output(parser, "build/pack/nm/WEIGHTS.npz", file=True)
    parser.add_argument("--prune", action="store_true", help="magnitude-prune to the pattern first")
    parser.add_argument(
        "--pair-rows",
        action="store_true",
        help="with --prune: one pattern per row pair, so the matrix-vector mode fills both lanes",
    )
    parser.add_argument(
        "--quantize",
        action="store_true",
        help="float weights: per-output-channel symmetric int8, scales saved beside",
    )
    parser.add_argument(
        "--max-m", type=int, default=None, help="reject patterns with M above this (engine max_m)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the packing's figures and the file as JSON"
    )


def load_matrix(path: Path):
    """The array of a ``.npy`` file, its header checked before any of it is read: a real
    (not object) dtype and as many bytes as its shape claims, so a corrupt header is an error
    instead of a huge allocation."""
    import numpy as np

    from tandem.errors import UserError

    fmt = np.lib.format
    try:
        with open(path, "rb") as handle:
            try:
                major, _ = fmt.read_magic(handle)
                read = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
                shape, _, dtype = read(handle)
            except (ValueError, OSError, SyntaxError, TypeError) as exc:
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise UserError(f"{path}: not a .npy array ({why})") from None
            if dtype.hasobject:
                raise UserError(f"{path}: holds Python objects, not numbers")
            have = os.fstat(handle.fileno()).st_size - handle.tell()
            need = math.prod(shape) * dtype.itemsize
            if have != need:
                raise UserError(
                    f"{path}: its header says {shape} {dtype} ({need} bytes) but {have} bytes "
                    "follow"
                )
            return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it: {exc.strerror}") from None


def run(args) -> int:
    """Pack, write atomically, print a summary; errors are UserErrors (exit status 2)."""

    import json

    from tandem.args import default_output, output_file
    from tandem.errors import UserError
    from tandem.generate import write_files

    from .engine import mv_units
    from .packer import NMPattern, as_matrix, pack_nm, prune_magnitude, quantize_per_channel

    out = args.output
    if out is None:
        out = default_output("pack", "nm") / f"{Path(args.weights).stem or 'weights'}.npz"
    out = output_file(out, "--output", make_folder=True)
    pattern = NMPattern.parse(args.pattern)
    if args.max_m is not None:
        pattern.check_supported(args.max_m)
    if args.pair_rows and not args.prune:
        raise UserError("--pair-rows needs --prune")
    path = Path(args.weights)
    weights = load_matrix(path)
    try:
        as_matrix(weights)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    scales = None
    if args.prune:
        weights = prune_magnitude(weights, pattern, pair_rows=args.pair_rows)
    if args.quantize:
        weights, scales = quantize_per_channel(weights)
    elif weights.dtype.kind == "f":
        raise UserError(f"{path}: float weights ({weights.dtype}); pass --quantize")
    try:
        packed = pack_nm(weights, pattern, scales=scales)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    buffer = io.BytesIO()
    packed.save(buffer)
    write_files(out.parent, {out.name: buffer.getvalue()})
    rows, cols = packed.shape
    paired = int((mv_units(packed)[:, 1] >= 0).sum())
    if args.json:
        data = {
            "weights": str(path),
            "pattern": str(pattern),
            "rows": int(rows),
            "cols": int(cols),
            "slots": int(packed.values.size),
            "nonzeros": int(packed.nonzeros),
            "row_pairs": rows // 2,
            "row_pairs_sharing_indices": paired,
            "quantized": scales is not None,
            "output": str(out),
            "files": [str(out)],
        }
        print(json.dumps(data, indent=2))
        return 0
    print(
        f"{out}: {rows}x{cols} at {pattern}, {packed.values.size} slots "
        f"({packed.nonzeros} non-zero); matrix-vector row pairs sharing indices: "
        f"{paired} of {rows // 2}"
    )
    return 0
