"""Checks of command-line values, shared by every subcommand.

Each raises :class:`~tandem.errors.UserError` with one line that names the flag and quotes the
bad value (the CLI prints it and exits with status 2), and returns the value in the form the
command goes on with. A command checks all of its flags, and its output paths, before any
work, so a bad value never leaves a half-written output behind.

The rules:

* integers are Python ``int`` (argparse's ``type=int``); bounds are inclusive and come from
  what the design or the machine can hold (each caller says where its bound comes from);
* floats are finite (``nan`` and ``inf`` parse as floats but are never a clock, a latency or
  a size);
* an output folder (:func:`output_dir`) is a folder or can be created as one: not empty, not
  a file, no file among its parents, a writable nearest existing parent, names within the
  file system's limits, and no output file name that is a folder inside it; an output file
  (:func:`output_file`) is such a folder plus a name that is not a folder;
* a command that writes files takes ``-o/--output`` and, without it, writes under
  ``build/<command>/<design or tool>`` in the working folder (:func:`default_output`,
  :func:`add_output`), and prints where the files went.
"""

import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tandem.host.common import checks

from .config import show
from .errors import UserError

__all__ = [
    "BUILD",
    "MAX_CLOCK_MHZ",
    "MAX_SEED",
    "NAME_MAX",
    "add_output",
    "default_output",
    "host_memory_bytes",
    "integer",
    "output_dir",
    "output_file",
    "real",
    "show",
]

#: Longest file or folder name (bytes) of Linux, macOS and Windows file systems.
NAME_MAX = 255
#: Highest clock (MHz) a flag accepts: no FPGA fabric or AI Engine array reaches 2 GHz
#: (Versal AI Engines run at up to 1.3 GHz).
MAX_CLOCK_MHZ = 2000.0
#: Seeds are 32-bit: cocotb, numpy and torch all take them, and ``--seed`` is printed to be
#: typed again.
MAX_SEED = 2**32 - 1
#: Where commands write when ``-o`` is not given, relative to the working folder.
BUILD = Path("build")


def integer(value, flag: str, lo: int | None = None, hi: int | None = None, why: str = "") -> int:
    """``value`` as an ``int`` in ``lo .. hi`` (None: open); ``why`` says where ``hi`` comes
    from (``" (HPU sequence slots)"``)."""
    try:
        checks.integer(value, flag, lo=lo)
        return checks.integer(value, flag, hi=hi, what=why)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def real(
    value,
    flag: str,
    lo: float | None = None,
    hi: float | None = None,
    *,
    above: bool = False,
    why: str = "",
) -> float:
    """``value`` as a finite ``float`` in ``lo .. hi``; ``above``: strictly above ``lo``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{flag} must be a number, not {show(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise UserError(f"{flag} must be a finite number, not {value}")
    if lo is not None and (value <= lo if above else value < lo):
        raise UserError(f"{flag} must be {'above' if above else 'at least'} {lo:g}, not {value:g}")
    if hi is not None and value > hi:
        raise UserError(f"{flag} must be at most {hi:g}{why}, not {value:g}")
    return value


def host_memory_bytes() -> int:
    """Physical memory of this machine (bytes); what golden memory images must fit in."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # not POSIX: no bound from the machine
        return 1 << 62


def output_dir(path, flag: str = "--output", names: Iterable[str] = ()) -> Path:
    """``path`` as an output folder that exists or can be created, checked without writing.

    Parameters
    ----------
    path
        The folder (``str`` or ``Path``); an empty string is not ``.``, it is an error.
    flag
        The flag that named it, for messages.
    names
        The files that will be written into it: none may be a folder already.
    """
    if path is None or str(path) == "":
        raise UserError(f"{flag} must name a folder, not an empty string")
    folder = Path(path)
    if "\0" in str(folder):
        raise UserError(f"{flag} {show(str(folder))}: a path cannot hold a NUL character")
    for name in folder.parts:
        if len(os.fsencode(name)) > NAME_MAX:
            raise UserError(f"{flag} {show(str(folder))}: a name longer than {NAME_MAX} bytes")
    existing = folder
    missing: list[str] = []
    try:
        while not existing.exists() and not existing.is_symlink():
            missing.append(existing.name)
            if existing.parent == existing:
                break
            existing = existing.parent
        is_dir = existing.is_dir()
    except OSError as exc:
        raise UserError(f"{flag} {show(str(folder))}: {exc.strerror}") from None
    if not is_dir:
        if existing == folder:
            raise UserError(f"{flag} {folder}: is a file, not a folder")
        raise UserError(f"{flag} {folder}: {existing} is a file, not a folder")
    if missing:
        # Can the first missing folder be made? Asked of the file system itself (permissions,
        # a read-only mount, /proc), with a folder that is removed again at once.
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".tandem-probe-", dir=existing))
        except OSError as exc:
            why = exc.strerror
            raise UserError(f"{flag} {folder}: cannot create it in {existing}: {why}") from None
    elif not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {folder}: cannot write into {existing}")
    if not missing:
        for name in names:
            if (folder / name).is_dir():
                raise UserError(f"{flag} {folder}: the output {name} is a folder there")
    return folder


def output_file(path, flag: str = "--output", *, make_folder: bool = False) -> Path:
    """``path`` as an output file, checked without writing: a name that is not a folder (nor
    ends in ``/``), in a folder that exists (or, with ``make_folder``, passes
    :func:`output_dir`)."""
    if path is None or str(path) == "":
        raise UserError(f"{flag} must name a file, not an empty string")
    text = os.fspath(path)
    file = Path(text)
    what = flag.lstrip("-")
    if len(os.fsencode(file.name)) > NAME_MAX:
        raise UserError(f"{flag} {show(text)}: a name longer than {NAME_MAX} bytes")
    if text.endswith(os.sep) or not file.name:
        raise UserError(f"{flag} {text}: names a folder, not a file")
    if make_folder:
        output_dir(file.parent, flag, (file.name,))
        return file
    try:
        folder_ok, there = file.parent.is_dir(), file.parent.exists()
    except OSError as exc:
        raise UserError(f"cannot write {what} {show(text)}: {exc.strerror}") from None
    if there and not folder_ok:
        raise UserError(f"cannot write {what} {text}: {file.parent} is a file, not a folder")
    if not folder_ok:
        raise UserError(f"cannot write {what} {text}: folder {file.parent} does not exist")
    if file.is_dir():
        raise UserError(f"cannot write {what} {text}: it is a folder")
    if not os.access(file.parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {what} {text}: folder {file.parent} is not writable")
    return file


def default_output(command: str, *names: str) -> Path:
    """The folder ``command`` writes into without ``-o``: ``build/<command>/<names...>``.

    One convention for every command that writes files: ``tandem generate exp2`` into
    ``build/generate/exp2``, ``tandem map spmm`` into ``build/map/spmm``, ``tandem pack nm``
    into ``build/pack/nm``, ``tandem sweep exp2`` into ``build/sweep/exp2``, ``tandem bench``
    into ``build/bench`` (``tandem sim`` into ``build/sim/<design>-<simulator>``, ``tandem run``
    into ``build/run``).
    """
    return BUILD.joinpath(command, *names)


def add_output(parser, default: str, *, file: bool = False, help: str = "") -> None:
    """``-o/--output`` of a command that writes files, optional: ``default`` says where the
    files go without it (``"build/generate/DESIGN"``); ``file``: it names a file, not a
    folder."""
    what = help or ("output file" if file else "output folder")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE" if file else "DIR",
        help=f"{what} (default {default})",
    )
