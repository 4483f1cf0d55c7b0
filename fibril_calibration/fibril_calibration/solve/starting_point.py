"""Where the optimizer starts: the declared initial values, or an interior start near a bound.

scipy's trust-region reflective solver (trf, this implementation's stand-in for Ceres) scales
each step by the distance to the nearest bound (Coleman-Li). A parameter whose initial value
equals a bound (a nominal friction of 0 with lower bound 0) therefore starts with a step of
almost zero: trf crawls along the bound or stops there and reports convergence. Every such
parameter is named in a warning (progress output and the result's ``warnings`` list).

``optimizer.interior_start: {fraction: f}`` (0 < f < 0.5) starts such a parameter at
``lower + f * (upper - lower)`` (or ``upper - f * (upper - lower)``) instead; parameters strictly
inside their bounds keep their initial value. The result reports both the declared initial value
(``parameters[].initial``, the parameter contract) and the start actually used
(``optimizer.start``).

It is opt-in, not the default, because of what ``calibration.ja.md`` says about the initial
value: it is part of the physical parameter's declared metadata (unit, provenance, bounds,
initial value, nominal value, parameterization), the origin of a ``normalized_linear``
coordinate when no nominal value is given, and the point at which the request is resolved
against its nominal plan. The spec gives the solver no licence to move it, so moving it by
default would fit from a point the request never declared; the opt-in puts the choice in the
request's ``optimizer`` block, where the result's optimizer option hash records it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._json import JsonObject
from ..parameters import CoordinateMap


@dataclass(frozen=True)
class StartingPoint:
    """The physical start of the fit and the warnings about parameters at a bound."""

    physical: np.ndarray
    warnings: tuple[JsonObject, ...]


def starting_point(cmap: CoordinateMap, interior_fraction: float | None = None
                   ) -> StartingPoint:
    """The declared initial values, with parameters at a bound moved inside by
    ``interior_fraction`` of their range when that is given."""
    start = cmap.initial.copy()
    warnings: list[JsonObject] = []
    for i, pid in enumerate(cmap.ids):
        lower, upper, initial = cmap.lower[i], cmap.upper[i], cmap.initial[i]
        if initial == lower:
            bound, value, inward = "lower", float(lower), 1.0
        elif initial == upper:
            bound, value, inward = "upper", float(upper), -1.0
        else:
            continue
        warning: JsonObject = {
            "code": "initial_value_at_bound", "parameter": pid, "bound": bound,
            "value": value}
        if interior_fraction is not None:
            start[i] = initial + inward * interior_fraction * (upper - lower)
            warning["start"] = float(start[i])
            warning["message"] = (
                f"parameter {pid!r}: initial value {value:g} equals its {bound} bound; the "
                f"fit starts at {start[i]:g} (optimizer.interior_start fraction "
                f"{interior_fraction:g} of the range)")
        else:
            warning["start"] = value
            warning["message"] = (
                f"parameter {pid!r}: initial value {value:g} equals its {bound} bound; the "
                f"trust-region solver may crawl or stop at the bound; start inside, or set "
                f"optimizer.interior_start: {{fraction: 0.01}}")
        warnings.append(warning)
    return StartingPoint(start, tuple(warnings))
