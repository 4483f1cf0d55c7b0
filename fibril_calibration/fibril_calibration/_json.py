"""Strict-JSON helpers: non-finite numbers become ``None`` (documents carry explicit flags)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def matrix_or_none(matrix: np.ndarray) -> list[list[float | None]]:
    return [[finite_or_none(v) for v in row] for row in np.asarray(matrix, dtype=float)]


def vector_or_none(vector: np.ndarray) -> list[float | None]:
    return [finite_or_none(v) for v in np.asarray(vector, dtype=float)]
