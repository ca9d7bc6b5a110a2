"""Compiled twins of golden models: a C source built once per machine and loaded with ctypes.

A golden model stays the numpy specification; a twin is a faster implementation of the same
function, compared with it bit for bit in the tests, for the hot loops of the host runtime
(the golden HPU backend runs every layer of every decode step). Sources are built with the
machine's C compiler (``$CC``, else ``cc``) into ``$XDG_CACHE_HOME/tandem/native/`` (``tandem
cache`` lists and cleans it), named by a hash of the source, the flags and the compiler's
version, so an edited source or another compiler builds anew. Where no compiler works the
caller runs the numpy model and says so (:class:`NativeLibrary` carries the reason).
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["NativeLibrary", "load_native", "native_cache_dir"]

#: IEEE float64 exactly as numpy computes it: no contraction into fused multiply-adds, no
#: fast-math; ``-fwrapv`` gives integer overflow numpy's wrapping meaning.
CFLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-fwrapv", "-fPIC")


@dataclass(frozen=True)
class NativeLibrary:
    """A loaded twin (``library``), or why there is none (``library`` None, ``reason``)."""

    library: ctypes.CDLL | None
    path: Path | None
    reason: str


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
def load_native(source: Path) -> NativeLibrary:
    """Build ``source`` (C) into a shared library, or find it built, and load it.

    Never raises: a missing compiler or a failed build comes back as a library of None with
    the reason (the first line of the compiler's complaint).
    """
    source = Path(source)
    compiler = _compiler()
    if compiler is None:
        return NativeLibrary(None, None, f"no C compiler ({os.environ.get('CC') or 'cc'})")
    path, version = compiler
    digest = hashlib.sha256()
    for part in (source.read_bytes(), " ".join(CFLAGS).encode(), version.encode()):
        digest.update(part + b"\0")
    target = native_cache_dir() / f"{source.stem}-{digest.hexdigest()[:16]}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # Built under a temporary name beside the target and renamed into place: processes
        # that build at the same time each write their own file, and the rename is atomic.
        handle, scratch = tempfile.mkstemp(dir=target.parent, prefix=f".{source.stem}-")
        os.close(handle)
        try:
            done = subprocess.run(
                [path, *CFLAGS, "-shared", "-o", scratch, str(source), "-lm"],
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
            if os.path.exists(scratch):
                os.unlink(scratch)
    try:
        return NativeLibrary(ctypes.CDLL(str(target)), target, "")
    except OSError as exc:
        return NativeLibrary(None, None, f"cannot load {target}: {exc}")
