"""Real English texts that ship with Python: calibration and evaluation text without network."""

import sysconfig
from pathlib import Path

__all__ = ["TEXTS", "load_text"]


def _stdlib_license() -> str:
    path = Path(sysconfig.get_path("stdlib")) / "LICENSE.txt"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        raise ValueError(f"text 'license': this Python has no {path}") from None


def _execmodel() -> str:
    from pydoc_data.topics import topics

    return topics["execmodel"]


#: Built-in texts: name -> (what it is, loader).
TEXTS = {
    "execmodel": ("Python Language Reference, 'Execution model'", _execmodel),
    "license": ("Python's LICENSE.txt (history of the software, license terms)", _stdlib_license),
}


def load_text(name: str) -> str:
    """A built-in text by name (:data:`TEXTS`) or a UTF-8 file's contents."""
    if name in TEXTS:
        return TEXTS[name][1]()
    try:
        return Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ValueError(
            f"--texts: {name!r} is neither a built-in text ({', '.join(TEXTS)}) nor a readable "
            f"UTF-8 file ({reason})"
        ) from None
