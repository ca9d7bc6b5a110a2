"""Schedule files: a YAML summary and an npz tile program, byte-for-byte reproducible.

``<name>.schedule.yaml``
    cell, sizes, array, chosen tile shape and the reason, every candidate's figures, the
    predicted cycles per step and MAC utilization of the overlapped and the naive schedule, and
    the parameters to generate the engine with.
``<name>.program.npz``
    one int64 array per program field (``src col row first last wait need end``, one element
    per tile of a step) and, when weights were given, ``tiles`` (entries x tile_rows x
    tile_cols), ``biases`` (row blocks x tile_rows) and ``w_frac``: exactly what the engine's
    ``tile_i`` stream carries (:func:`tandem.host.rnn.tile_beats`).

The npz is written with fixed zip timestamps, so the same inputs give the same bytes.
"""

import io
import zipfile
from pathlib import Path

import numpy as np
import yaml

from .schedule import ShapeChoice
from .tiling import FIELDS, TileProgram

__all__ = ["load_program", "program_arrays", "summary", "write_npz", "write_schedule"]


def program_arrays(program: TileProgram) -> dict[str, np.ndarray]:
    """The program's fields plus its shape, as arrays for the npz."""
    arrays = {name: np.asarray(v, dtype=np.int64) for name, v in program.fields().items()}
    arrays["shape"] = np.array(
        [
            program.input_size,
            program.hidden_size,
            program.tile_rows,
            program.tile_cols,
            int(program.naive),
            int(program.cell == "gru"),
        ],
        dtype=np.int64,
    )
    return arrays


def load_program(path: str | Path) -> tuple[TileProgram, dict[str, np.ndarray]]:
    """Read an npz written by :func:`write_schedule`: the program and the other arrays."""
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    x, h, rows, cols, naive, *gru = (int(v) for v in arrays.pop("shape"))
    fields = {name: arrays.pop(name) for name in FIELDS}
    program = TileProgram(
        input_size=x,
        hidden_size=h,
        tile_rows=rows,
        tile_cols=cols,
        naive=bool(naive),
        cell="gru" if gru and gru[0] else "lstm",
        **fields,
    )
    return program, arrays


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` with fixed timestamps (deterministic bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(
                member, np.ascontiguousarray(arrays[name]), allow_pickle=False
            )
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue())
    path.write_bytes(buffer.getvalue())


def summary(
    choice: ShapeChoice,
    program: TileProgram,
    *,
    array: tuple[int, int],
    batch: int,
    cell: str = "lstm",
    extra: dict | None = None,
) -> dict:
    """The YAML summary as a plain dict."""
    p, n = choice.prediction, choice.naive
    data = {
        "cell": cell,
        "input_size": program.input_size,
        "hidden_size": program.hidden_size,
        "batch": batch,
        "array": f"{array[0]}x{array[1]}",
        "tile": {
            "rows": choice.tile_rows,
            "cols": choice.tile_cols,
            "reason": choice.reason,
        },
        "program": {
            "entries_per_step": program.entries,
            "row_blocks": program.row_blocks,
            "x_blocks": program.x_blocks,
            "h_blocks": program.h_blocks,
            "units_per_row_block": program.units_per_block,
        },
        "predicted": p.to_dict(),
        "naive": n.to_dict(),
        "speedup_over_naive": round(n.cycles / p.cycles, 4),
        "candidates": [c.to_dict() for c in choice.candidates],
        "generate": {
            "tile_rows": choice.tile_rows,
            "tile_cols": choice.tile_cols,
            "batch": batch,
            "max_input": program.input_size,
            "max_hidden": program.hidden_size,
        },
    }
    if extra:
        data.update(extra)
    return data


def write_schedule(
    directory: str | Path, name: str, summary_data: dict, arrays: dict[str, np.ndarray]
) -> list[Path]:
    """Write ``<name>.schedule.yaml`` and ``<name>.program.npz`` into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    yaml_path = directory / f"{name}.schedule.yaml"
    npz_path = directory / f"{name}.program.npz"
    yaml_path.write_text(yaml.safe_dump(summary_data, sort_keys=False, width=100))
    write_npz(npz_path, arrays)
    return [yaml_path, npz_path]
