"""``tandem pack nm``: pack a weight matrix into N:M value and index streams.

    tandem pack nm --weights W.npy --pattern 2:4 -o packed.npz
    tandem pack nm --weights W_float.npy --pattern 2:4 --prune --quantize -o packed.npz

The output ``.npz`` holds ``values`` (int8) and ``indices`` (uint8), both [rows, groups * N],
``n``, ``m``, ``shape`` and, with ``--quantize``, the per-row ``scales`` (float32); it is read back
by :meth:`tandem.mappings.nm.NMPacked.load`.
"""

import argparse
import io
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tandem pack nm``."""
    parser.add_argument("--weights", required=True, metavar="W.npy", help="[rows, cols] matrix")
    parser.add_argument("--pattern", required=True, metavar="N:M", help="for example 2:4")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.npz", help="output file")
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


def run(args) -> int:
    """Pack, write atomically, print a summary; errors are UserErrors (exit status 2)."""
    import numpy as np

    from tandem.errors import UserError
    from tandem.generate import write_files

    from .engine import mv_units
    from .packer import NMPattern, pack_nm, prune_magnitude, quantize_per_channel

    pattern = NMPattern.parse(args.pattern)
    if args.max_m is not None:
        pattern.check_supported(args.max_m)
    if args.pair_rows and not args.prune:
        raise UserError("--pair-rows needs --prune")
    path = Path(args.weights)
    try:
        weights = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a .npy array ({exc})") from None
    if not isinstance(weights, np.ndarray) or weights.ndim != 2:
        raise UserError(f"{path}: expected a 2-D array, not shape {getattr(weights, 'shape', '?')}")
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
    out = Path(args.output)
    write_files(out.parent, {out.name: buffer.getvalue()})
    rows, cols = packed.shape
    paired = int((mv_units(packed)[:, 1] >= 0).sum())
    print(
        f"{out}: {rows}x{cols} at {pattern}, {packed.values.size} slots "
        f"({packed.nonzeros} non-zero); matrix-vector row pairs sharing indices: "
        f"{paired} of {rows // 2}"
    )
    return 0
