"""The design registry: every design registers once, and everything that needs a fact about a
design looks it up here.

A design bundles its name, its parameter class, its Amaranth generator, its golden model, its
cocotb test module and every other per-design fact (default board, mapper or packer,
co-simulation server, host device, sweep benchmark, docs page): see :class:`Design`.
``tandem/builtin_designs.py`` holds the registrations of the designs that ship with tandem; other
packages can call :func:`register` too.

The modules form no import cycle: :mod:`tandem.design_record` holds the record and
:func:`register` and imports neither this module nor :mod:`tandem.builtin_designs`;
:mod:`tandem.builtin_designs` imports only :mod:`tandem.design_record` (and the generators and
golden models); this module imports both, the built-ins only on the first lookup, so that
importing it stays cheap (no Amaranth, no numpy).
"""

from .design_record import Design, SweepBenchmark, Tool, register, registered
from .errors import UserError, did_you_mean

__all__ = [
    "Design",
    "SweepBenchmark",
    "Tool",
    "all_designs",
    "all_tools",
    "get_design",
    "register",
]


def _registered() -> dict[str, Design]:
    """Every design registered so far, the built-ins loaded first."""
    from . import builtin_designs  # noqa: F401  (registers the built-in designs on first import)

    return registered()


def all_designs() -> list[Design]:
    """Every registered design, sorted by name."""
    known = _registered()
    return [known[name] for name in sorted(known)]


def get_design(name: str) -> Design:
    """The design called ``name``; a :class:`UserError` with a suggestion if there is none."""
    known = _registered()
    try:
        return known[name]
    except KeyError:
        raise UserError(
            f"unknown design {name!r}{did_you_mean(name, known)}; known: {', '.join(sorted(known))}"
        ) from None


def all_tools(kind: str) -> list[Tool]:
    """The distinct ``tandem map`` (``kind="map"``) or ``tandem pack`` tools the designs name,
    in the order the designs were registered.

    Designs that share a tool must name the same :class:`Tool`; two different tools with one
    name are a ``ValueError``.
    """
    tools: dict[str, Tool] = {}
    for design in _registered().values():
        for tool in design.tools:
            if tool.kind != kind:
                continue
            if tools.setdefault(tool.name, tool) != tool:
                raise ValueError(
                    f"{design.name} names a different `tandem {kind} {tool.name}` "
                    f"({tool.module}) than another design ({tools[tool.name].module})"
                )
    return list(tools.values())
