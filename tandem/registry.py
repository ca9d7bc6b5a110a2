"""The design registry: every design registers once, and the CLI lists from here.

A design bundles its name, its parameter class, its Amaranth generator, its golden model and
its cocotb test module. ``tandem/designs.py`` holds the registrations of the designs that ship
with tandem; other packages can call :func:`register` too.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import Params
from .errors import UserError, did_you_mean

__all__ = ["Design", "all_designs", "get_design", "register"]


@dataclass(frozen=True)
class Design:
    """One registered design.

    Attributes
    ----------
    name
        CLI name; the generated top module is this name with ``-`` turned into ``_``.
    summary
        One line for ``tandem designs``.
    params
        The design's :class:`~tandem.config.Params` subclass: its only parameter set.
    generator
        Callable building the top ``wiring.Component`` from a parameter set.
    golden
        The bit-exact golden model, ``golden(params, inputs) -> outputs``.
    testbench
        Dotted name of the cocotb module that verifies the generated Verilog.
    """

    name: str
    summary: str
    params: type[Params]
    generator: Callable[[Params], Any]
    golden: Callable[..., Any]
    testbench: str

    @property
    def top(self) -> str:
        """Verilog name of the top module."""
        return self.name.replace("-", "_")


_designs: dict[str, Design] = {}


def register(design: Design) -> Design:
    """Add ``design`` to the registry; names must be unique."""
    if design.name in _designs and _designs[design.name] != design:
        raise ValueError(f"design {design.name!r} is already registered")
    _designs[design.name] = design
    return design


def _load_builtin() -> None:
    from . import designs  # noqa: F401  (registers the built-in designs on import)


def all_designs() -> list[Design]:
    """Every registered design, sorted by name."""
    _load_builtin()
    return [_designs[name] for name in sorted(_designs)]


def get_design(name: str) -> Design:
    """The design called ``name``; a :class:`UserError` with a suggestion if there is none."""
    _load_builtin()
    try:
        return _designs[name]
    except KeyError:
        known = ", ".join(sorted(_designs))
        raise UserError(
            f"unknown design {name!r}{did_you_mean(name, _designs)}; known: {known}"
        ) from None
