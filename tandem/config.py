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
import reprlib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from .errors import UserError, did_you_mean

__all__ = ["ParamError", "ParamInfo", "Params", "param", "read_yaml", "resolve_params", "show"]


class _Short(reprlib.Repr):
    def __init__(self):
        super().__init__()
        self.maxstring = self.maxother = 60
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = 4
        self.maxlevel = 2

    def repr_int(self, x, level):
        if x.bit_length() <= 128:
            return repr(x)
        # repr of an integer of over 4300 digits raises; its size is what matters here
        return f"<an integer of {int(x.bit_length() * 0.30103) + 1} digits>"

    def repr_bool(self, x, level):
        return repr(x)


_SHOW = _Short()


def show(value: Any) -> str:
    """``repr(value)`` cut short, for messages: one readable line whatever the value (a
    5000-digit integer, a YAML alias bomb that expands to billions of items)."""
    return _SHOW.repr(value)


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
        raise ParamError(name, f"{name} must be of type {_type_name(ftype)}, not {show(value)}")


def _check_field(field: dataclasses.Field, value: Any, ftype: Any) -> None:
    name, meta = field.name, field.metadata
    _check_type(name, value, ftype)
    if value is None:
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ParamError(name, f"{name} must be one of {options}, not {show(value)}")
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None and not lo <= value <= hi:
        raise ParamError(name, f"{name} must be between {lo} and {hi}, not {show(value)}")
    if lo is not None and value < lo:
        raise ParamError(name, f"{name} must be at least {lo}, not {show(value)}")
    if hi is not None and value > hi:
        raise ParamError(name, f"{name} must be at most {hi}, not {show(value)}")
    if meta.get("power_of_two") and (value <= 0 or value & (value - 1)):
        raise ParamError(name, f"{name} must be a power of two, not {show(value)}")


#: Largest YAML file (config, grid) read: parameter files are a few hundred bytes.
MAX_YAML_BYTES = 1 << 20
#: Most values (scalars, list items, mapping entries, an alias counted each time it is used)
#: a YAML file may expand to: an alias bomb of a few lines expands to billions.
MAX_YAML_VALUES = 100_000


def read_yaml(path: str | Path, what: str = "config file", invalid: str = "invalid YAML") -> Any:
    """The data of a small YAML file, checked: at most :data:`MAX_YAML_BYTES`, UTF-8, valid
    YAML, at most :data:`MAX_YAML_VALUES` values once aliases are expanded.

    Raises
    ------
    UserError
        One line naming the file (``what`` says what it was meant to be) and the problem; a
        syntax error starts with ``invalid``.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > MAX_YAML_BYTES:
        raise UserError(f"{path}: larger than {MAX_YAML_BYTES >> 20} MiB; not a {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path}: not a {what}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset "
            f"{exc.start})"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{path}: {invalid}{where}: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as exc:
        # PyYAML's constructors: an integer of more than 4300 digits, a nesting deeper than
        # the interpreter's stack
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{path}: not a {what}: {first}") from None
    if _count_values(data, MAX_YAML_VALUES) > MAX_YAML_VALUES:
        raise UserError(
            f"{path}: expands to more than {MAX_YAML_VALUES} values (aliases of aliases?); "
            f"not a {what}"
        )
    return data


def _count_values(data: Any, limit: int) -> int:
    """Values in ``data``, aliases counted at every use; stops counting above ``limit``."""
    count, stack = 0, [data]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set):
            stack.extend(item)
    return count


def _kind(data: Any) -> str:
    """What a YAML document is, in words: ``a list``, ``the number 5``, ``the text 'x'``."""
    if isinstance(data, list):
        return "a list"
    if isinstance(data, bool):
        return f"the value {data}"
    if isinstance(data, int | float):
        return f"the number {show(data)}"
    if isinstance(data, str):
        return f"the text {show(data)}"
    return f"a {type(data).__name__}"


def _read_yaml_mapping(path: Path) -> dict[str, Any]:
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(
            f"{path}: expected a mapping of parameter names to values, not {_kind(data)}"
        )
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """Split one ``--set key=value`` flag; the value is read as a YAML scalar (``8``, ``true``);
    anything else (a list, a mapping, text that is not YAML) stays the text it was."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--set {show(text)}: expected key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError):
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
            raise UserError(f"{where}: unknown parameter {show(key)} for {what}{hint}")
        values[key] = value
        source[key] = where

    if config_file is not None:
        path = Path(config_file)
        data = _read_yaml_mapping(path)
        named = data.pop("design", None)
        if named is not None and design is not None and named != design:
            raise UserError(f"{path}: this config is for design {show(named)}, not {design!r}")
        for key, value in data.items():
            take(str(key), value, str(path))
    for text in overrides:
        key, value = parse_override(text)
        take(key, value, f"--set {show(text)[1:-1]}")

    try:
        return cls(**values)
    except ParamError as exc:
        where = source.get(exc.key, "defaults")
        raise ParamError(exc.key, f"{where}: {exc}") from None
