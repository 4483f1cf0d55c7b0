"""Scores of one evaluation on the request's episodes, in physical units.

A standardized RMS says how well a fit explains the data relative to the declared scales; an
engineer also wants "the joint-3 position error went from 12 mrad to 2 mrad". ``score`` turns one
``Evaluation`` into both: per scope the standardized RMS, and per signal (over all episodes of
the scope, then per episode) each residual component's RMS and largest absolute error in the
observation's own units (``(sim - rec)``: the residual times its scale; rad for an orientation's
rotation vector).

Every calibration result carries ``scores`` for the ``nominal`` (initial) parameter set beside
the ``fitted`` one, training and validation; which sets are scored, and ``fibril_sim calibrate
--evaluate``'s document of sets scored without fitting, are the top's ``parameter_sets``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import numpy.typing as npt

from .._json import JsonObject, JsonValue, json_list, json_object
from ..request.input_timing import InputTiming, describe_timing
from .units import NO_UNIT, device_unit

if TYPE_CHECKING:
    from ..evaluation import Evaluation
    from ..request.document import CalibrationRequest

__all__ = ["input_timing", "score", "scores_text", "signal_units"]


def signal_units(request: CalibrationRequest) -> dict[str, str]:
    """Observation id → unit where the source says it (joints: by joint type)."""
    model = request.nominal_plan.model
    out: dict[str, str] = {}
    for observation in request.observations:
        source = observation.source
        unit = None
        if source in ("joint_position", "joint_velocity"):
            jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, observation.name or "")
            if jid >= 0:
                kind = int(model.jnt_type[jid])
                linear = kind == int(mujoco.mjtJoint.mjJNT_SLIDE)
                angular = kind == int(mujoco.mjtJoint.mjJNT_HINGE)
                if linear or angular:
                    unit = ("m" if linear else "rad") + ("/s" if source == "joint_velocity"
                                                         else "")
        elif source == "body_position":
            unit = "m"
        elif source == "body_quaternion" or observation.quaternion:
            unit = "rad"
        elif source == "device_output":  # the units of its sample components
            unit = device_unit(observation.sample_type, observation.indices)
        out[observation.id] = unit or NO_UNIT
    return out


def score(request: CalibrationRequest, evaluation: Evaluation, scope: str,
          nuisance_dof: Mapping[str, int] | None = None) -> JsonObject:
    """Standardized and physical-unit scores of one scope's evaluation. ``nuisance_dof``
    (initial_state_fit: episode → degrees of freedom its nuisance initial states took) adds
    ``standardized_rms_dof_corrected``, ``sqrt(SSE / (count - nuisance dof))``."""
    episodes = {e.id: e for e in request.episodes(scope)}
    units = signal_units(request)
    observations = {o.id: o for o in request.observations}
    per_signal: dict[str, list[npt.NDArray[np.float64]]] = {}
    per_episode: dict[str, list[JsonObject]] = {}
    sse: dict[str, float] = {}
    counts: dict[str, int] = {}
    residuals = evaluation.unweighted
    for block in evaluation.blocks:
        observation = observations[block.signal]
        signal = episodes[block.episode].signal(block.signal)
        width = observation.residual_dimension
        standardized = residuals[block.start:block.stop].reshape(-1, width)
        physical = standardized * signal.residual_scales
        per_signal.setdefault(block.signal, []).append(physical)
        per_episode.setdefault(block.episode, []).append(
            _signal_score(block.signal, observation.residual_components, units[block.signal],
                          physical))
        sse[block.episode] = sse.get(block.episode, 0.0) + float(np.sum(standardized ** 2))
        counts[block.episode] = counts.get(block.episode, 0) + int(standardized.size)
    total = sum(counts.values())
    removed = {e: int(n) for e, n in (nuisance_dof or {}).items() if n and e in counts}
    corrected: JsonObject = {}
    if removed:
        dof = sum(removed.values())
        corrected = {"nuisance_degrees_of_freedom": dof,
                     "standardized_rms_dof_corrected": _root(sum(sse.values()), total - dof)}
    return {
        "standardized_rms": _root(sum(sse.values()), total),
        **corrected,
        "count": total,
        "signals": [_signal_score(name, observations[name].residual_components, units[name],
                                  np.concatenate(parts))
                    for name, parts in per_signal.items()],
        "episodes": [{"episode": episode, "standardized_rms": _root(sse[episode],
                                                                      counts[episode]),
                      **({"nuisance_degrees_of_freedom": removed[episode],
                          "standardized_rms_dof_corrected": _root(
                              sse[episode], counts[episode] - removed[episode])}
                         if episode in removed else {}),
                      "signals": signals}
                     for episode, signals in per_episode.items()],
    }


def _signal_score(name: str, components: Sequence[str], unit: str,
                  physical: npt.NDArray[np.float64]) -> JsonObject:
    rms: list[float | None]
    peak: list[float | None]
    if physical.shape[0] == 0:
        rms = [None] * len(components)
        peak = [None] * len(components)
    else:
        rms = np.sqrt(np.mean(physical ** 2, axis=0)).tolist()
        peak = np.max(np.abs(physical), axis=0).tolist()
    return {"signal": name, "unit": unit, "samples": int(physical.shape[0]),
            "components": list(components), "rms": rms, "max_abs": peak}


def _root(sse: float, count: int) -> float | None:
    return math.sqrt(sse / count) if count > 0 else None


def input_timing(request: CalibrationRequest) -> InputTiming | None:
    """How recording-source input samples were moved onto ticks, all episodes together."""
    return describe_timing(request.training + request.validation)


def scores_text(scores: Mapping[str, JsonValue]) -> list[str]:
    """Readable lines: per scope, each signal component's RMS (and max) per parameter set."""
    sets = {n: json_object(entry, f"scores {n}") for n, entry in scores.items()}
    lines: list[str] = []
    for scope in ("training", "validation"):
        entries: dict[str, list[Mapping[str, JsonValue]]] = {}
        rms: dict[str, JsonValue] = {}
        for n, entry in sets.items():
            scored = json_object(entry.get(scope) or {}, f"scores {n} {scope}")
            if "error" in scored:
                lines.append(f"{scope} scores  {n}: not evaluated: {scored['error']}")
            elif scored:
                rms[n] = scored["standardized_rms"]
                entries[n] = [json_object(s, "signal score")
                              for s in json_list(scored["signals"], "signals")]
        if not entries:
            continue
        head = "  ".join(f"{n}: {_g(value)}" for n, value in rms.items())
        lines.append(f"{scope} scores  (standardized rms  {head})")
        first = next(iter(entries.values()))
        for index, signal in enumerate(first):
            for c, component in enumerate(json_list(signal["components"], "components")):
                cells = []
                for n, signals in entries.items():
                    other = signals[index]
                    cells.append(f"{n} {_g(json_list(other['rms'])[c])} "
                                 f"(max {_g(json_list(other['max_abs'])[c])})")
                lines.append(f"  {signal['signal']}.{component} [{signal['unit']}] rms  "
                             + "  ".join(cells))
    return lines


def _g(value: JsonValue) -> str:
    return "n/a" if value is None else f"{value:.4g}"
