"""Typed, validated parameter sets, and how they are read from YAML files and ``--set`` flags.

Every design has exactly one parameter class: a frozen dataclass deriving from :class:`Params`
whose fields are declared with :func:`param`. The generator, the golden model, the testbench and
the performance model all take an instance of it, so nothing is parameterized twice.

Values are resolved in this order: the field defaults, then a YAML file (``-c cfg.yaml``), then
``--set key=value`` flags. Validation happens when the instance is built: field types, ranges,
choices and powers of two from the field metadata, then the cross-field rules in
:meth:`Params.check`. Every failure is a :class:`ParamError` naming the key and quoting the value.
"""

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from .errors import UserError, did_you_mean

__all__ = ["ParamError", "ParamInfo", "Params", "param", "resolve_params"]


class ParamError(UserError):
    """A parameter value broke a rule. ``key`` names the parameter."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def param(
    default: Any,
    doc: str,
    *,
    min: int | float | None = None,
    max: int | float | None = None,
    choices: typing.Sequence[Any] | None = None,
    power_of_two: bool = False,
) -> Any:
    """Declare one field of a :class:`Params` dataclass.

    Parameters
    ----------
    default
        Value used when neither the YAML file nor ``--set`` gives one.
    doc
        One-sentence description, shown by ``tandem designs`` and written to manifests.
    min, max
        Inclusive bounds for numeric parameters.
    choices
        The only values accepted.
    power_of_two
        Require a positive power of two.
    """
    metadata = {
        "doc": doc,
        "min": min,
        "max": max,
        "choices": tuple(choices) if choices is not None else None,
        "power_of_two": power_of_two,
    }
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ParamInfo:
    """What ``tandem designs`` shows about one parameter."""

    name: str
    type: str
    default: Any
    doc: str
    rule: str


@dataclass(frozen=True)
class Params:
    """Base class of every design's parameter set.

    Subclasses are frozen dataclasses whose fields all come from :func:`param`. Override
    :meth:`check` for rules that involve more than one field and raise :class:`ParamError`.
    """

    design: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _check_field(field, getattr(self, field.name), _field_type(type(self), field))
        self.check()

    def check(self) -> None:
        """Cross-field rules; raise :class:`ParamError` naming the key to blame."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every parameter, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: Any) -> "Params":
        """Copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def describe(cls) -> list[ParamInfo]:
        """Name, type, default, docstring and rule of every parameter."""
        infos = []
        for field in dataclasses.fields(cls):
            ftype = _field_type(cls, field)
            infos.append(
                ParamInfo(
                    name=field.name,
                    type=_type_name(ftype),
                    default=field.default,
                    doc=field.metadata.get("doc", ""),
                    rule=_rule_text(field.metadata),
                )
            )
        return infos


def _field_type(cls: type, field: dataclasses.Field) -> Any:
    return typing.get_type_hints(cls)[field.name]


def _type_name(ftype: Any) -> str:
    if typing.get_origin(ftype) is typing.Literal:
        return "str"
    return getattr(ftype, "__name__", str(ftype))


def _rule_text(meta: typing.Mapping[str, Any]) -> str:
    parts = []
    if meta.get("choices"):
        parts.append("one of " + ", ".join(str(c) for c in meta["choices"]))
    if meta.get("min") is not None and meta.get("max") is not None:
        parts.append(f"{meta['min']}..{meta['max']}")
    elif meta.get("min") is not None:
        parts.append(f">= {meta['min']}")
    elif meta.get("max") is not None:
        parts.append(f"<= {meta['max']}")
    if meta.get("power_of_two"):
        parts.append("power of two")
    return ", ".join(parts)


def _check_type(name: str, value: Any, ftype: Any) -> None:
    if ftype is bool:
        ok = isinstance(value, bool)
    elif ftype is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif ftype is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif ftype is str:
        ok = isinstance(value, str)
    elif isinstance(ftype, types.UnionType) or typing.get_origin(ftype) is typing.Union:
        for option in typing.get_args(ftype):
            try:
                _check_type(name, value, option)
                return
            except ParamError:
                continue
        ok = False
    elif ftype is type(None):
        ok = value is None
    else:
        ok = True
    if not ok:
        raise ParamError(name, f"{name} must be of type {_type_name(ftype)}, not {value!r}")


def _check_field(field: dataclasses.Field, value: Any, ftype: Any) -> None:
    name, meta = field.name, field.metadata
    _check_type(name, value, ftype)
    if value is None:
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ParamError(name, f"{name} must be one of {options}, not {value!r}")
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None and not lo <= value <= hi:
        raise ParamError(name, f"{name} must be between {lo} and {hi}, not {value!r}")
    if lo is not None and value < lo:
        raise ParamError(name, f"{name} must be at least {lo}, not {value!r}")
    if hi is not None and value > hi:
        raise ParamError(name, f"{name} must be at most {hi}, not {value!r}")
    if meta.get("power_of_two") and (value <= 0 or value & (value - 1)):
        raise ParamError(name, f"{name} must be a power of two, not {value!r}")


def _read_yaml_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such config file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read config file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}: invalid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of parameter names to values, not a list")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """Split one ``--set key=value`` flag; the value is read as a YAML scalar (``8``, ``true``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--set {text!r}: expected key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, dict | list):
        value = raw
    return key, value


def resolve_params(
    cls: type[Params],
    config_file: str | Path | None = None,
    overrides: typing.Sequence[str] = (),
    *,
    design: str | None = None,
) -> Params:
    """Build a validated parameter set from defaults, a YAML file and ``--set`` flags.

    Parameters
    ----------
    cls
        The design's :class:`Params` subclass.
    config_file
        YAML mapping of parameter names to values. A ``design:`` key, if present, must name
        this design.
    overrides
        ``key=value`` strings, applied last.
    design
        Design name, used in messages and to check the file's ``design:`` key.

    Raises
    ------
    UserError
        One line naming the file or flag, the key and the bad value.
    """
    known = [f.name for f in dataclasses.fields(cls)]
    values: dict[str, Any] = {}
    source: dict[str, str] = {}

    def take(key: str, value: Any, where: str) -> None:
        if key not in known:
            hint = did_you_mean(key, known)
            what = f"design {design!r}" if design else cls.__name__
            raise UserError(f"{where}: unknown parameter {key!r} for {what}{hint}")
        values[key] = value
        source[key] = where

    if config_file is not None:
        path = Path(config_file)
        data = _read_yaml_mapping(path)
        named = data.pop("design", None)
        if named is not None and design is not None and named != design:
            raise UserError(f"{path}: this config is for design {named!r}, not {design!r}")
        for key, value in data.items():
            take(str(key), value, str(path))
    for text in overrides:
        key, value = parse_override(text)
        take(key, value, f"--set {text}")

    try:
        return cls(**values)
    except ParamError as exc:
        where = source.get(exc.key, "defaults")
        raise ParamError(exc.key, f"{where}: {exc}") from None
