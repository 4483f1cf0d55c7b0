"""A result's fitted parameters as typed values, read from its result document: the value,
its standard deviation and 95 % interval (the profile-likelihood interval when the request
computed one, else the local one from the covariance) and whether it is identifiable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # (types only: this module stays light)
    from ._json import JsonValue
    from .report.document import IdentifiedParameter, ParameterProfile, ResultDocument


@dataclass(frozen=True)
class FittedParameter:
    """One fitted parameter; ``sd`` and ``interval`` are None when the analysis could not
    give them (an unidentifiable direction, no covariance)."""

    id: str
    value: float
    sd: float | None
    interval: tuple[float, float] | None
    identifiable: bool | None
    unit: str | None
    initial: float
    lower: float
    upper: float


def fitted_parameters(document: Mapping[str, JsonValue]) -> dict[str, FittedParameter]:
    """``{id: FittedParameter}`` in the request's order, from a result document."""
    result = cast("ResultDocument", document)  # (the result document's shape)
    local = {p["id"]: p for p in
             (result.get("local_identifiability") or {}).get("parameters", [])}
    profile = {p["parameter"]: p for p in
               (result.get("profile_likelihood") or {}).get("parameters", [])}
    out = {}
    for entry in result["parameters"]:
        pid = entry["id"]
        analysis: IdentifiedParameter = local.get(pid, {})
        no_profile: ParameterProfile = {}
        interval = (profile.get(pid, no_profile).get("confidence_interval")
                    or analysis.get("interval_95"))
        out[pid] = FittedParameter(
            id=pid, value=float(entry["value"]), sd=analysis.get("standard_deviation"),
            interval=None if interval is None else (float(interval[0]), float(interval[1])),
            identifiable=analysis.get("identifiable"), unit=entry.get("unit"),
            initial=float(entry["initial"]), lower=float(entry["lower"]),
            upper=float(entry["upper"]))
    return out
