"""Target boards (``constraints/boards/*.yaml``) and GPUs (``constraints/gpus/*.yaml``).

Each file cites the public source of every figure. A figure the vendor documents could not
confirm is left out of the file rather than guessed; reports then say "n/a" for it.
"""

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from .errors import UserError, did_you_mean

__all__ = [
    "DEFAULT_BOARD",
    "Board",
    "Gpu",
    "board_names",
    "gpu_names",
    "load_board",
    "load_gpu",
]

RESOURCE_KEYS = ("lut", "ff", "dsp", "bram36", "uram")

#: The board of a design whose registry entry names none (:attr:`tandem.registry.Design.board`
#: holds each design's board: the board its paper used).
DEFAULT_BOARD = "vck190"

#: yosys synthesis pass by :attr:`Board.architecture`, where it is not ``synth_xilinx``.
_SYNTH_PASSES = {"ecp5": "synth_ecp5"}


@dataclass(frozen=True)
class Board:
    """An FPGA or ACAP board: resources, memories, host link and default clock."""

    name: str
    full_name: str
    part: str
    architecture: str
    yosys_family: str | None
    resources: dict[str, Any]
    memory: list[dict[str, Any]]
    pcie: dict[str, Any]
    default_clock_mhz: float
    power_w: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def synth_pass(self) -> str:
        """The yosys pass that maps onto the part: ``synth_ecp5`` for Lattice ECP5 (no family
        option), else ``synth_xilinx`` (with :attr:`yosys_family` as its ``-family``)."""
        return _SYNTH_PASSES.get(self.architecture, "synth_xilinx")

    def capacity(self, resource: str) -> int | None:
        """How many ``resource`` cells (lut, ff, dsp, bram36, uram) the part has, if known."""
        value = self.resources.get(resource)
        return int(value) if value is not None else None


@dataclass(frozen=True)
class Gpu:
    """A GPU on the host side: memory, bandwidth, peak FP16 throughput, host link, power."""

    name: str
    full_name: str
    memory_gib: float
    memory_kind: str
    memory_bandwidth_gb_s: float
    fp16_dense_tflops: float
    bf16_dense_tflops: float
    pcie: dict[str, Any]
    tdp_w: float
    #: Decode throughput a production serving stack reaches over tandem's roofline of the same
    #: setup (the file names the measurement it comes from); 1.0 is the roofline itself.
    decode_efficiency: float = 1.0


def _folder(kind: str):
    return resources.files("tandem.constraints") / kind


def _names(kind: str) -> list[str]:
    return sorted(
        p.name[: -len(".yaml")] for p in _folder(kind).iterdir() if p.name.endswith(".yaml")
    )


def board_names() -> list[str]:
    """Names of every board description shipped with tandem."""
    return _names("boards")


def gpu_names() -> list[str]:
    """Names of every GPU description shipped with tandem."""
    return _names("gpus")


def _load(kind: str, name: str) -> dict[str, Any]:
    names = _names(kind)
    if name not in names:
        what = kind[:-1]
        raise UserError(
            f"unknown {what} {name!r}{did_you_mean(name, names)}; known: {', '.join(names)}"
        )
    return yaml.safe_load((_folder(kind) / f"{name}.yaml").read_text())


def _check_memory(board: str, memory: list[dict[str, Any]]) -> None:
    """The first memory (the fastest, the one the performance models read) must say, where it
    gives a peak bandwidth, what share of it sequential reads sustain: every bandwidth figure
    the models give is taken at that share, never at the peak."""
    for entry in memory[:1]:
        if "bandwidth_gb_s" not in entry:
            continue
        fraction = entry.get("sustained_fraction")
        if not isinstance(fraction, int | float) or not 0 < fraction <= 1:
            raise UserError(
                f"constraints/boards/{board}.yaml: memory {entry.get('kind', '?')!r} has a "
                f"bandwidth_gb_s but sustained_fraction is {fraction!r}; give the measured share "
                "of the peak that sequential reads sustain, in (0, 1], with its source"
            )


@cache
def load_board(name: str) -> Board:
    """The board called ``name`` (file stem in ``constraints/boards``)."""
    data = dict(_load("boards", name))
    _check_memory(name, data.get("memory") or [])
    known = {f for f in Board.__dataclass_fields__ if f != "extra"}
    core = {k: data.pop(k) for k in list(data) if k in known}
    return Board(**core, extra=data)


@cache
def load_gpu(name: str) -> Gpu:
    """The GPU called ``name`` (file stem in ``constraints/gpus``)."""
    return Gpu(**_load("gpus", name))
