"""Solving a calibration problem: the episodes run on candidate plans (``episodes``), the
residual problem over them (``problem``), the robust objective (``objective``) and its loss
kernels (``losses``; the loss names a request may use are the base's ``loss_spec``), derivatives
(``differentiation``), the bounded least-squares optimizer (``optimizer``) and its starting
point (``starting_point``).

Above the request (a problem is built from one), below the analysis of its solution.

The names below are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fibril_sim_core._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("Tolerances",), ".optimizer"),
    **dict.fromkeys(("CalibrationProblem", "ProblemStatistics"), ".problem"),
    **dict.fromkeys(("StartingPoint", "starting_point"), ".starting_point"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from .optimizer import Tolerances
    from .problem import CalibrationProblem, ProblemStatistics
    from .starting_point import StartingPoint, starting_point
