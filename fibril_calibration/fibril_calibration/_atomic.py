"""Files written whole or not at all: a temporary file in the same folder, then a rename (a
result, an overlay, a request written from Python)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import CalibrationError

__all__ = ["write_atomic"]


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                             dir=folder)
    except OSError as exc:
        raise CalibrationError(f"{target}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp's 0600 → the usual file mode
        os.replace(temporary, target)
    except OSError as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise CalibrationError(f"{target}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
