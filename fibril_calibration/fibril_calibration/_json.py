"""JSON document types and strict-JSON helpers: non-finite numbers become ``None``
(documents carry explicit flags).

``JsonValue`` is what a JSON (or YAML) document holds; its containers are read-only
(``Sequence``/``Mapping``) so a ``list[float]`` or ``dict[str, int]`` is one too. A document we
build is a ``JsonObject``; a document we read back is narrowed with ``json_object`` /
``json_list`` where its shape is checked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeAlias, Union

import numpy as np
import numpy.typing as npt

JsonValue: TypeAlias = Union[None, bool, int, float, str, Sequence["JsonValue"],
                             Mapping[str, "JsonValue"]]
JsonObject: TypeAlias = dict[str, JsonValue]


def json_object(value: object, what: str = "document") -> Mapping[str, JsonValue]:
    """``value`` as a JSON object (a mapping), or a TypeError naming ``what``."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{what}: expected a mapping, got {type(value).__name__}")
    return value


def json_list(value: object, what: str = "document") -> Sequence[JsonValue]:
    """``value`` as a JSON array (a list or tuple), or a TypeError naming ``what``."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{what}: expected a list, got {type(value).__name__}")
    return value


def finite_or_none(value: float | np.floating[npt.NBitBase] | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def matrix_or_none(matrix: npt.ArrayLike) -> list[list[float | None]]:
    return [[finite_or_none(v) for v in row] for row in np.asarray(matrix, dtype=float)]


def vector_or_none(vector: npt.ArrayLike) -> list[float | None]:
    return [finite_or_none(v) for v in np.asarray(vector, dtype=float)]
