"""Compiled twins of golden models: a C source built once per machine and loaded with ctypes.

A golden model stays the numpy specification; a twin is a faster implementation of the same
function, compared with it bit for bit in the tests, for the hot loops of the host runtime
(the golden HPU backend runs every layer of every decode step). Sources are built with the
machine's C compiler (``$CC``, else ``cc``) into ``$XDG_CACHE_HOME/tandem/native/`` (``tandem
cache`` lists and cleans it), named by a hash of the source, the flags and the compiler's
version, so an edited source or another compiler builds anew. Where no compiler works the
caller runs the numpy model and says so (:class:`NativeLibrary` carries the reason).

A structure that Python hands to the C code is described once, as a list of :class:`CField`:
:func:`c_structure` makes its ctypes class, :func:`c_struct_text` the C declaration that
:func:`load_native` writes into a generated header for the source to include (the header's
text is part of the library's name, so a changed field list builds anew), and
:func:`c_values` the values of its fields from a Python object.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from operator import attrgetter
from pathlib import Path

__all__ = [
    "CField",
    "NativeLibrary",
    "c_struct_text",
    "c_structure",
    "c_values",
    "load_native",
    "native_cache_dir",
]

#: IEEE float64 exactly as numpy computes it: no contraction into fused multiply-adds, no
#: fast-math; ``-fwrapv`` gives integer overflow numpy's wrapping meaning.
CFLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-fwrapv", "-fPIC")


@dataclass(frozen=True)
class NativeLibrary:
    """A loaded twin (``library``), or why there is none (``library`` None, ``reason``)."""

    library: ctypes.CDLL | None
    path: Path | None
    reason: str


#: The C types a :class:`CField` may have, and their ctypes.
C_TYPES = {"int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "double": ctypes.c_double}


@dataclass(frozen=True)
class CField:
    """One field of a structure shared by Python and C.

    ``value`` says where the field's value comes from: an attribute path of the source object
    (``"exp2.in_bits"``), a function of it, or None for the field's name as the path.
    ``comment`` goes into the C declaration."""

    name: str
    ctype: str
    value: str | Callable | None = None
    comment: str = ""

    def __post_init__(self):
        if self.ctype not in C_TYPES:
            raise ValueError(f"{self.name}: C type {self.ctype!r} is not one of {list(C_TYPES)}")

    def of(self, source):
        """The field's value for ``source``."""
        if callable(self.value):
            return self.value(source)
        return attrgetter(self.value or self.name)(source)


def c_structure(name: str, fields: tuple[CField, ...]) -> type[ctypes.Structure]:
    """The ctypes class of the C struct ``name`` that :func:`c_struct_text` declares."""
    layout = [(f.name, C_TYPES[f.ctype]) for f in fields]
    return type(name, (ctypes.Structure,), {"_fields_": layout, "__doc__": f"``{name}`` in C."})


def c_values(fields: tuple[CField, ...], source) -> dict:
    """Each field's value for ``source`` (:meth:`CField.of`), by name."""
    return {f.name: f.of(source) for f in fields}


def c_struct_text(name: str, fields: tuple[CField, ...]) -> str:
    """The C declaration of ``fields`` as ``typedef struct {...} name;``, and
    ``<NAME>_FIELDS``, the field names as an X-macro (``X(field)`` for each, in order) for C
    code that walks them (a layout check: ``offsetof`` of each)."""
    lines = ["typedef struct {"]
    for f in fields:
        comment = f" /* {f.comment} */" if f.comment else ""
        lines.append(f"    {f.ctype} {f.name};{comment}")
    lines.append(f"}} {name};")
    names = " ".join(f"X({f.name})" for f in fields)
    lines.append(f"#define {name.upper()}_FIELDS {names}")
    return "\n".join(lines) + "\n"


def native_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tandem/native`` (``~/.cache/tandem/native`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tandem" / "native"


def _compiler() -> tuple[str, str] | None:
    """``(compiler, version line)`` of ``$CC`` or ``cc``; None when neither runs."""
    name = os.environ.get("CC") or "cc"
    path = shutil.which(name)
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return path, (done.stdout.splitlines() or [""])[0]


@cache
def load_native(source: Path, headers: tuple[tuple[str, str], ...] = ()) -> NativeLibrary:
    """Build ``source`` (C) into a shared library, or find it built, and load it.

    ``headers`` are generated headers as ``(file name, text)``: written for the build into a
    directory on the include path, so the source includes them by name. Never raises: a
    missing compiler or a failed build comes back as a library of None with the reason (the
    first line of the compiler's complaint).
    """
    source = Path(source)
    compiler = _compiler()
    if compiler is None:
        return NativeLibrary(None, None, f"no C compiler ({os.environ.get('CC') or 'cc'})")
    path, version = compiler
    digest = hashlib.sha256()
    parts = [source.read_bytes(), " ".join(CFLAGS).encode(), version.encode()]
    parts += [f"{name}\0{text}".encode() for name, text in headers]
    for part in parts:
        digest.update(part + b"\0")
    target = native_cache_dir() / f"{source.stem}-{digest.hexdigest()[:16]}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # Built under a temporary name beside the target and renamed into place: processes
        # that build at the same time each write their own file, and the rename is atomic.
        handle, scratch = tempfile.mkstemp(dir=target.parent, prefix=f".{source.stem}-")
        os.close(handle)
        include = tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{source.stem}-h-")
        for name, text in headers:
            Path(include.name, name).write_text(text)
        try:
            done = subprocess.run(
                [path, *CFLAGS, "-I", include.name, "-shared", "-o", scratch, str(source), "-lm"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                first = next((x for x in done.stderr.splitlines() if "error" in x), "")
                return NativeLibrary(None, None, f"the C build failed: {first or done.stderr}")
            os.replace(scratch, target)
        except (OSError, subprocess.SubprocessError) as exc:
            return NativeLibrary(None, None, f"the C build failed: {exc}")
        finally:
            include.cleanup()
            if os.path.exists(scratch):
                os.unlink(scratch)
    try:
        return NativeLibrary(ctypes.CDLL(str(target)), target, "")
    except OSError as exc:
        return NativeLibrary(None, None, f"cannot load {target}: {exc}")
