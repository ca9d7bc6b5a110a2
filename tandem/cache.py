"""``tandem cache``: list and clean what tandem keeps in its cache folder.

The folder is ``$XDG_CACHE_HOME/tandem`` (``~/.cache/tandem`` when the variable is unset):

* ``sim/``: one simulator build per (design, parameters, simulator, tool versions), named
  ``<design>-<simulator>-<key>`` (:mod:`tandem.sim.runner`; ``tandem sim``, the RTL backends
  and the benchmarks share them). Its last use is when a run last took its lock.
* ``models/``: model weights (``tandem model fetch``, :mod:`tandem.host.system.model`).
* any other folder there: listed entry by entry, cleaned like the builds.

``tandem cache clean`` removes the entries selected by ``--older-than DAYS``, ``--design D``
or ``--all`` (at least one), never model weights unless ``--models`` is given, and never a
build under way (its builder holds the lock; it says so). It prints each removed entry and the bytes
freed.
"""

import fcntl
import json
import os
import shutil
import time
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .errors import UserError, did_you_mean

__all__ = ["CacheEntry", "clean", "entries"]

_MARKER = ".tandem-built"  # written by tandem.sim.runner once a build has finished


@dataclass
class CacheEntry:
    """One folder or file in the cache."""

    kind: str  # "sim", "models" or the name of another folder
    name: str
    path: Path
    size: int
    last_use: float  # seconds since the epoch
    design: str = ""  # the design (sim) or model (models) it belongs to
    simulator: str = ""
    key: str = ""  # the hash of parameters and tool versions in the build's name
    complete: bool = True  # a build whose run ended before it finished is not
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def lock(self) -> Path:
        """The lock file :mod:`tandem.sim.runner` holds while it builds or runs this build."""
        return self.path.parent / f".{self.name}.lock"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        data["last_use"] = datetime.fromtimestamp(self.last_use).isoformat(timespec="seconds")
        return data


def _dirs() -> tuple[Path, Path, Path]:
    """``(root, sim, models)``, from the modules that write them."""
    from tandem.host.system.model import model_cache_dir
    from tandem.sim.runner import default_cache_dir

    sim, models = default_cache_dir(), model_cache_dir()
    return sim.parent, sim, models


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _mtime(*paths: Path) -> float:
    times = []
    for path in paths:
        with suppress(OSError):
            times.append(path.stat().st_mtime)
    return max(times, default=0.0)


def _sim_entry(path: Path, kind: str) -> CacheEntry:
    from tandem.sim.toolchain import SIMULATORS

    entry = CacheEntry(kind, path.name, path, _size(path), 0.0)
    parts = path.name.rsplit("-", 2)
    if len(parts) == 3 and parts[1] in SIMULATORS:
        entry.design, entry.simulator, entry.key = parts
        manifest = path / f"{entry.design}.manifest.json"
        with suppress(OSError, ValueError):
            entry.params = json.loads(manifest.read_text()).get("params", {})
    entry.complete = kind != "sim" or (path / _MARKER).exists()
    entry.last_use = _mtime(path, path / _MARKER, entry.lock)
    return entry


def _model_entry(path: Path) -> CacheEntry:
    from tandem.host.system.model import MODELS

    names = {source.file: name for name, source in MODELS.items()}
    stat = path.stat()
    return CacheEntry(
        "models",
        path.name,
        path,
        stat.st_size,
        max(stat.st_mtime, stat.st_atime),
        design=names.get(path.name, ""),
    )


def entries() -> list[CacheEntry]:
    """Everything in the cache folder, by kind and name (lock files and partial downloads not)."""
    root, sim, models = _dirs()
    found = []
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for folder in folders:
        for path in sorted(folder.iterdir()):
            if path.name.startswith("."):  # locks, a download in progress (.fetch-*)
                continue
            if folder == models:
                if path.is_file():
                    found.append(_model_entry(path))
            else:
                found.append(_sim_entry(path, "sim" if folder == sim else folder.name))
    return found


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _ago(when: float, now: float) -> str:
    days = (now - when) / 86400
    if days < 1 / 24:
        return f"{max(0, round(days * 1440))} min ago"
    if days < 1:
        return f"{days * 24:.0f} h ago"
    return f"{days:.0f} d ago"


def table(found: list[CacheEntry], now: float | None = None) -> str:
    """The listing ``tandem cache list`` prints."""
    root = _dirs()[0]
    if not found:
        return f"{root}: empty"
    now = time.time() if now is None else now
    rows = [("kind", "design", "simulator", "key", "size", "last use")]
    for e in found:
        key = e.key if e.complete else f"{e.key or '-'} (incomplete)"
        rows.append(
            (
                e.kind,
                e.design or e.name,
                e.simulator or "-",
                key or "-",
                _human(e.size),
                _ago(e.last_use, now),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    total = sum(e.size for e in found)
    lines.append(f"{len(found)} entries, {_human(total)} in {root}")
    return "\n".join(lines)


#: The most days --older-than takes (about 270 years: nothing in a cache is older).
MAX_DAYS = 100_000


def _select(found, *, older_than, design, models, now) -> list[CacheEntry]:
    chosen = []
    for e in found:
        if e.kind == "models" and not models:
            continue
        if design is not None and e.design != design:
            continue
        if older_than is not None and e.last_use > now - older_than * 86400:
            continue
        chosen.append(e)
    return chosen


def _remove(entry: CacheEntry) -> bool:
    """Remove ``entry`` unless a build of it is under way (it holds the lock); True if removed."""
    if entry.kind == "models" or not entry.lock.exists():
        if entry.path.is_dir():
            shutil.rmtree(entry.path)
        else:
            entry.path.unlink()
        return True
    with open(entry.lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            shutil.rmtree(entry.path)
            entry.lock.unlink()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    return True


def clean(
    *,
    older_than: float | None = None,
    design: str | None = None,
    everything: bool = False,
    models: bool = False,
    dry_run: bool = False,
    log=print,
) -> tuple[list[CacheEntry], int]:
    """Remove the selected entries; return ``(removed, bytes freed)``.

    ``older_than`` (days since last use), ``design`` and ``everything`` select; at least one is
    needed. Model weights are only candidates with ``models``. A build under way is kept.
    """
    if older_than is None and design is None and not everything:
        raise UserError("say what to remove: --older-than DAYS, --design NAME or --all")
    if older_than is not None and not 0 <= older_than <= MAX_DAYS:
        raise UserError(f"--older-than must be a number of days in 0..{MAX_DAYS}, not {older_than}")
    found = entries()
    if design is not None:
        from tandem.host.system.model import MODELS
        from tandem.registry import all_designs

        known = {d.name for d in all_designs()} | set(MODELS) | {e.design for e in found}
        if design not in known:
            raise UserError(f"unknown design {design!r}{did_you_mean(design, known)}")
    chosen = _select(
        found,
        older_than=older_than,
        design=design,
        models=models,
        now=time.time(),
    )
    removed, freed = [], 0
    for e in chosen:
        if dry_run or _remove(e):
            removed.append(e)
            freed += e.size
            log(f"{'would remove' if dry_run else 'removed'} {e.path} ({_human(e.size)})")
        else:
            log(f"kept {e.path}: it is being built")
    return removed, freed


def add_arguments(parser) -> None:
    """Subcommands of ``tandem cache``: list, clean."""
    actions = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
    p = actions.add_parser("list", help="every simulator build and model file, size, last use")
    p.add_argument("--json", action="store_true", help="print the entries as JSON")
    p.set_defaults(func=run_list)
    p = actions.add_parser(
        "clean", help="remove simulator builds (model weights only with --models)"
    )
    p.add_argument(
        "--older-than", type=float, metavar="DAYS", help="entries not used for DAYS days"
    )
    p.add_argument("--design", metavar="NAME", help="entries of this design (or model)")
    p.add_argument("--all", dest="everything", action="store_true", help="every entry")
    p.add_argument("--models", action="store_true", help="model weights may be removed too")
    p.add_argument("--dry-run", action="store_true", help="print what would go, remove nothing")
    p.set_defaults(func=run_clean)


def run_list(args) -> int:
    """``tandem cache list``."""
    found = entries()
    if args.json:
        print(json.dumps([e.to_dict() for e in found], indent=2))
    else:
        print(table(found))
    return 0


def run_clean(args) -> int:
    """``tandem cache clean``."""
    removed, freed = clean(
        older_than=args.older_than,
        design=args.design,
        everything=args.everything,
        models=args.models,
        dry_run=args.dry_run,
    )
    verb = "would free" if args.dry_run else "freed"
    print(f"{verb} {freed} bytes ({_human(freed)}) in {len(removed)} entries")
    return 0
