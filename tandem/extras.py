"""What tandem declares it needs: the base install and the optional extras of ``pyproject.toml``.

One source: the requirements are read from ``pyproject.toml`` when tandem runs from its source
checkout (the README's ``pip install -e``), else from the installed package's metadata, so the
checks below and ``tandem doctor`` never keep a second list of packages. A package counts as
installed when its distribution is (``importlib.metadata``); importing it is not needed.

A command that needs an optional feature calls :func:`require` before it starts its work, and
:func:`extra_of` names the extra of a module whose import failed deep inside a command; either
way the user reads one line naming the extra (``tandem sweep needs the 'sweep' extra: pip
install -e '.[sweep]'``), exit status 2.
"""

import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .errors import UserError

__all__ = [
    "declared",
    "extra_of",
    "install_hint",
    "installed_version",
    "missing",
    "need_message",
    "require",
]

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

#: Import names that differ from their distribution's name (``import yaml`` is PyYAML). The rest
#: are the distribution name with dashes as underscores.
_IMPORT_NAMES = {
    "distributed": ("distributed", "dask"),
    "pyyaml": ("yaml",),
    "cocotb": ("cocotb", "cocotb_tools"),
    "cocotbext-axi": ("cocotbext",),
    "pytest-xdist": ("xdist",),
}


def _requirements() -> list[Requirement]:
    """Every requirement, with its ``extra == "x"`` marker for optional ones."""
    try:
        project = tomllib.loads(_PYPROJECT.read_text())["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        project = None
    if project is not None and project.get("name") == "tandem":
        lines = list(project.get("dependencies", []))
        for extra, deps in project.get("optional-dependencies", {}).items():
            lines += [f'{dep}; extra == "{extra}"' for dep in deps]
    else:
        try:
            lines = metadata.requires("tandem") or []
        except metadata.PackageNotFoundError:
            lines = []
    return [Requirement(line) for line in lines]


def _extra(req: Requirement) -> str | None:
    """The extra a requirement belongs to (None: the base install)."""
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        return None
    return next((e for e in _extra_names() if req.marker.evaluate({"extra": e})), None)


@cache
def _extra_names() -> tuple[str, ...]:
    """The extras in pyproject.toml's order (the first that holds a package names it)."""
    try:
        project = tomllib.loads(_PYPROJECT.read_text())["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        project = None
    if project is not None and project.get("name") == "tandem":
        return tuple(project.get("optional-dependencies", {}))
    try:
        return tuple(metadata.metadata("tandem").get_all("Provides-Extra") or [])
    except metadata.PackageNotFoundError:
        return ()


@cache
def declared() -> dict[str | None, list[Requirement]]:
    """Requirements by extra (``None``: the base install), self-references (``all``) expanded."""
    groups: dict[str | None, list[Requirement]] = {}
    for req in _requirements():
        groups.setdefault(_extra(req), []).append(req)
    for extra, reqs in groups.items():
        expanded = []
        for req in reqs:
            if canonicalize_name(req.name) == "tandem":  # tandem[sweep,synth,...]
                expanded += [r for e in sorted(req.extras) for r in groups.get(e, [])]
            else:
                expanded.append(req)
        names = [canonicalize_name(r.name) for r in expanded]
        groups[extra] = [
            r for i, r in enumerate(expanded) if canonicalize_name(r.name) not in names[:i]
        ]
    return groups


def import_names(distribution: str) -> tuple[str, ...]:
    """The top-level module names a distribution provides."""
    name = canonicalize_name(distribution)
    return _IMPORT_NAMES.get(name, (name.replace("-", "_"),))


def installed_version(distribution: str) -> str | None:
    """Installed version of ``distribution``, or None."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def missing(extra: str | None) -> list[str]:
    """Distributions of ``extra`` (None: the base install) that are not installed."""
    return [req.name for req in declared().get(extra, []) if installed_version(req.name) is None]


def install_hint(extra: str | None) -> str:
    """The command that installs ``extra`` (None: the base install) from the source checkout."""
    return "pip install -e ." if extra is None else f"pip install -e '.[{extra}]'"


def need_message(feature: str, extra: str) -> str:
    """``tandem sweep needs the 'sweep' extra: pip install -e '.[sweep]'``."""
    return f"{feature} needs the {extra!r} extra: {install_hint(extra)}"


def require(feature: str, *extras: str) -> None:
    """Raise a one-line :class:`UserError` if a package of one of ``extras`` is not installed.

    ``feature`` is what the user ran (``"tandem sweep"``).
    """
    for extra in extras:
        if extra not in declared():
            raise ValueError(f"no extra {extra!r} in pyproject.toml")
        if missing(extra):
            raise UserError(need_message(feature, extra))


def extra_of(module: str | None) -> str | None:
    """The extra whose packages provide top-level module ``module`` (None: not an optional one)."""
    if not module:
        return None
    top = module.split(".")[0]
    base = {n for req in declared().get(None, []) for n in import_names(req.name)}
    if top in base:
        return None
    for extra in _extra_names():
        if extra == "all":
            continue
        if any(top in import_names(req.name) for req in declared().get(extra, [])):
            return extra
    return None
