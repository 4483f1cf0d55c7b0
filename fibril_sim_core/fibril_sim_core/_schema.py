"""Small validation helpers for versioned YAML documents.

Each helper raises the caller's error class with ``<file>: <key.path>: <what is wrong>`` so that
every document error names the file, the key path, the value and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import FibrilError


@dataclass(frozen=True)
class Where:
    """A position in a document: file plus key path, used to word errors."""

    file: str
    path: str = ""
    error: type[FibrilError] = FibrilError

    def key(self, name: str | int) -> Where:
        if isinstance(name, int):
            return Where(self.file, f"{self.path}[{name}]", self.error)
        return Where(self.file, f"{self.path}.{name}" if self.path else name, self.error)

    def fail(self, message: str) -> FibrilError:
        where = f"{self.file}: {self.path}" if self.path else self.file
        return self.error(f"{where}: {message}")


def load_yaml(path: Path, error: type[FibrilError]) -> Any:
    """Read a YAML (or JSON) document; a missing or unparsable file is a clear error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{path}: not valid YAML{at}: {problem}") from None


def mapping(value: Any, where: Where) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise where.fail(f"expected a mapping, got {describe(value)}")
    return value


def sequence(value: Any, where: Where) -> Sequence[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise where.fail(f"expected a list, got {describe(value)}")
    return value


def keys(value: Mapping[str, Any], where: Where, *, required: Sequence[str] = (),
         optional: Sequence[str] = ()) -> None:
    """Reject unknown keys and report missing required ones."""
    allowed = set(required) | set(optional)
    for key in value:
        if key not in allowed:
            raise where.key(str(key)).fail(
                f"unknown key; expected one of: {', '.join(sorted(allowed))}")
    for key in required:
        if key not in value:
            raise where.key(key).fail("missing required key")


def string(value: Any, where: Where) -> str:
    if not isinstance(value, str) or not value:
        raise where.fail(f"expected a non-empty string, got {describe(value)}")
    return value


def number(value: Any, where: Where, *, minimum: float | None = None,
           maximum: float | None = None, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.fail(f"expected a number, got {describe(value)}")
    result = float(value)
    if not math.isfinite(result):
        raise where.fail(f"expected a finite number, got {value!r}")
    if positive and result <= 0:
        raise where.fail(f"expected a number > 0, got {value!r}")
    if minimum is not None and result < minimum:
        raise where.fail(f"expected a number >= {minimum:g}, got {value!r}")
    if maximum is not None and result > maximum:
        raise where.fail(f"expected a number <= {maximum:g}, got {value!r}")
    return result


def integer(value: Any, where: Where, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(f"expected an integer, got {describe(value)}")
    if minimum is not None and value < minimum:
        raise where.fail(f"expected an integer >= {minimum}, got {value!r}")
    return value


def boolean(value: Any, where: Where) -> bool:
    if not isinstance(value, bool):
        raise where.fail(f"expected true or false, got {describe(value)}")
    return value


def version(value: Any, where: Where, *, major: int, minors: Sequence[int]) -> tuple[int, int]:
    """Check ``schema_version: {major, minor}`` against the supported versions."""
    supported = ", ".join(f"{major}.{minor}" for minor in minors)
    item = mapping(value, where)
    keys(item, where, required=("major", "minor"))
    got = (integer(item["major"], where.key("major")), integer(item["minor"], where.key("minor")))
    if got[0] != major or got[1] not in minors:
        raise where.fail(f"unsupported schema version {got[0]}.{got[1]}; expected {supported}")
    return got


def describe(value: Any) -> str:
    """A short description of a value for error messages."""
    if value is None:
        return "nothing (null)"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"
