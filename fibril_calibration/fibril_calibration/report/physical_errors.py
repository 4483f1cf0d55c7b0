"""Nominal vs fitted error in physical units, with a hold-last predictor as the floor.

The standardized RMS says how well a fit explains the data relative to the declared scales;
an engineer asks "what is the held-out joint error in radians, before and after, and is that
better than doing nothing?". ``error_summary`` answers it per signal component and pooled per
unit (every component with the same physical unit together: the seven joints of an arm in rad),
training and validation apart, for each scored parameter set and for the **hold-last**
predictor: each signal held at its first recorded value of the episode (the last value known
when the simulation starts; a model worse than it explains nothing of the motion).

The same function serves the result JSON (``error_summary``, from the scores and the request's
recorded values), the stderr summary line and the report's table (from the re-simulated
residuals), so the three show the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .._json import JsonObject, JsonValue, json_list, json_object
from ..analysis.units import NO_UNIT

if TYPE_CHECKING:  # the request module loads MuJoCo: imported where a request is loaded
    from ..request.document import CalibrationRequest

__all__ = ["FLOOR", "aggregate", "error_lines", "error_summary", "floor_scores",
           "hold_last_error"]

FLOOR = "hold_last"
FLOOR_DESCRIPTION = ("hold_last: each signal held at its first recorded value of the episode "
                     "(no model); a floor the simulation should beat on moving signals")

Array = npt.NDArray[np.float64]
Part = tuple[str, Sequence[str], str, Array]  # signal, components, unit, (n, r) errors

def hold_last_error(values: Array, quaternion: bool) -> Array:
    """(held - recorded) of one episode's signal, in its units (rotation vector for an
    orientation), with the first recorded sample held."""
    if values.shape[0] == 0:
        return np.empty((0, 3 if quaternion else values.shape[1]))
    held = np.broadcast_to(values[:1], values.shape)
    if quaternion:
        from ..alignment import quat_error

        error: Array = quat_error(np.array(held), values)
        return error
    difference: Array = held - values
    return difference


def aggregate(parts: Iterable[Part]) -> list[JsonObject]:
    """Per signal (in first-seen order, all its episodes together): samples and each
    component's RMS and largest absolute error."""
    merged: dict[str, tuple[Sequence[str], str, list[Array]]] = {}
    for name, components, unit, errors in parts:
        merged.setdefault(name, (components, unit, []))[2].append(errors)
    out: list[JsonObject] = []
    for name, (components, unit, arrays) in merged.items():
        samples = sum(a.shape[0] for a in arrays)
        if samples == 0:
            rms: list[float | None] = [None] * len(components)
            peak: list[float | None] = [None] * len(components)
        else:
            squares = sum(np.sum(a * a, axis=0) for a in arrays)
            rms = np.sqrt(np.asarray(squares) / samples).tolist()
            peak = np.max([np.max(np.abs(a), axis=0) for a in arrays if a.shape[0]],
                          axis=0).tolist()
        out.append({"signal": name, "unit": unit, "samples": int(samples),
                    "components": list(components), "rms": rms, "max_abs": peak})
    return out


def floor_scores(request: CalibrationRequest, units: Mapping[str, str]) -> JsonObject:
    """The hold-last predictor's scores of every scope of a request (recorded values only);
    ``units``: observation id → its physical unit (as the scores name it)."""
    observations = {o.id: o for o in request.observations}
    out: JsonObject = {}
    for scope in ("training", "validation"):
        episodes = request.episodes(scope)
        if not episodes:
            out[scope] = None
            continue
        parts: list[Part] = []
        for episode in episodes:
            for signal in episode.signals:
                observation = observations[signal.observation]
                parts.append((signal.observation, observation.residual_components,
                              units.get(signal.observation, NO_UNIT),
                              hold_last_error(signal.values, observation.quaternion)))
        out[scope] = {"signals": aggregate(parts)}
    return out


def error_summary(scores: Mapping[str, JsonValue], floor: Mapping[str, JsonValue] | None
                  ) -> JsonObject:
    """Per scope, each signal component's RMS for every parameter set and the floor, and the
    same pooled per physical unit."""
    names = list(scores)
    summary: JsonObject = {
        "quantity": "root mean square of (simulated - recorded) in the observation's units "
                    "(an orientation: the rotation-vector components, rad)",
        "sets": names, "floor": FLOOR_DESCRIPTION if floor else None}
    for scope in ("training", "validation"):
        columns: dict[str, Sequence[JsonValue]] = {}
        for name in names:
            entry = json_object(scores[name] or {}, f"scores {name}").get(scope)
            if entry and "error" not in json_object(entry, f"scores {name} {scope}"):
                columns[name] = json_list(json_object(entry)["signals"], "signals")
        floor_scope = floor.get(scope) if floor else None
        if floor_scope:
            columns[FLOOR] = json_list(json_object(floor_scope)["signals"], "signals")
        if not columns:
            summary[scope] = None
            continue
        rows: list[_Row] = []
        keyed: dict[tuple[JsonValue, JsonValue], _Row] = {}
        for column, signals in columns.items():
            for signal in map(json_object, signals):
                rms = json_list(signal["rms"], "rms")
                for c, component in enumerate(json_list(signal["components"], "components")):
                    key = (signal["signal"], component)
                    row = keyed.get(key)
                    if row is None:
                        row = keyed[key] = _Row(
                            signal["signal"], component, signal["unit"],
                            _count(signal["samples"]),
                            {n: None for n in [*names, *([FLOOR] if FLOOR in columns else [])]})
                        rows.append(row)
                    row.rms[column] = _number(rms[c])
        summary[scope] = {"signals": [r.to_json() for r in rows], "pooled": _pooled(rows)}
    return summary


@dataclass(frozen=True)
class _Row:
    """One signal component's RMS per set (error_summary's ``signals[i]``)."""

    signal: JsonValue
    component: JsonValue
    unit: JsonValue
    samples: int
    rms: dict[str, float | None]

    def to_json(self) -> JsonObject:
        return {"signal": self.signal, "component": self.component, "unit": self.unit,
                "samples": self.samples, "rms": self.rms}


def _number(value: JsonValue) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    raise TypeError(f"expected a number or null, got {type(value).__name__}")


def _count(value: JsonValue) -> int:
    if isinstance(value, int):
        return value
    raise TypeError(f"expected an integer, got {type(value).__name__}")


def _pooled(rows: Sequence[_Row]) -> list[JsonObject]:
    groups: dict[str, list[_Row]] = {}
    for row in rows:
        if row.unit != NO_UNIT:
            groups.setdefault(str(row.unit), []).append(row)
    out: list[JsonObject] = []
    for unit, members in groups.items():
        count = sum(r.samples for r in members)
        rms: dict[str, float | None] = {}
        for column in members[0].rms:
            values = [r.rms[column] for r in members]
            if count == 0 or any(v is None for v in values):
                rms[column] = None
            else:
                rms[column] = math.sqrt(sum(v * v * r.samples for v, r in
                                            zip(values, members) if v is not None) / count)
        out.append({"unit": unit, "components": [f"{r.signal}.{r.component}"
                                                 for r in members],
                    "samples": count, "rms": rms})
    return out


def units_of(document: Mapping[str, JsonValue]) -> dict[str, str]:
    """Observation id → unit, as a result's scores name them."""
    out: dict[str, str] = {}
    for entry in json_object(document.get("scores") or {}, "scores").values():
        for scope in ("training", "validation"):
            block = (entry or {}).get(scope) if isinstance(entry, Mapping) else None
            for signal in json_list(json_object(block or {}).get("signals") or []):
                signal = json_object(signal, "signal score")
                out.setdefault(str(signal["signal"]), str(signal["unit"]))
    return out


def error_lines(summary: Mapping[str, JsonValue] | None) -> list[str]:
    """One line per scope: pooled per unit first, then every signal component, each
    ``set value`` ... ``hold_last value`` in its unit."""
    lines: list[str] = []
    for scope in ("training", "validation"):
        block = (summary or {}).get(scope)
        if not block:
            continue
        block = json_object(block, f"error summary {scope}")
        cells = [f"pooled [{p['unit']}] {_cells(p['rms'])}"
                 for p in map(json_object, json_list(block["pooled"]))]
        cells += [f"{r['signal']}.{r['component']} [{r['unit']}] {_cells(r['rms'])}"
                  for r in map(json_object, json_list(block["signals"]))]
        lines.append(f"{scope} rms in physical units: " + "; ".join(cells))
    return lines


def _cells(rms: JsonValue) -> str:
    return " ".join(f"{name} {_g(value)}" for name, value in json_object(rms, "rms").items())


def _g(value: JsonValue) -> str:
    return "n/a" if value is None else f"{value:.4g}"
