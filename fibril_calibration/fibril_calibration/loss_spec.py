"""A robust loss as the request names it: its type (one of ``LOSS_TYPES``) and scale.

The vocabulary only, at the base of the package so the request's ``objective`` section can
parse and check a loss without loading the kernels, which live in ``solve.losses`` beside the
objective that applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import CalibrationRequestError

__all__ = ["LOSS_TYPES", "LossSpec"]

LOSS_TYPES: tuple[str, ...] = ("huber", "soft_l1", "cauchy", "arctan", "tukey")


@dataclass(frozen=True)
class LossSpec:
    """A robust loss: ``type`` one of ``LOSS_TYPES`` and its ``scale`` in residual units."""

    type: str
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.type not in LOSS_TYPES:
            raise CalibrationRequestError(
                f"loss type {self.type!r} is not one of " + ", ".join(LOSS_TYPES)
            )
        if not (np.isfinite(self.scale) and self.scale > 0.0):
            raise CalibrationRequestError(
                f"loss scale must be a positive finite number, got {self.scale!r}"
            )
