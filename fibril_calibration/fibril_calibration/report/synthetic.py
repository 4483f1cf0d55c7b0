"""A synthetic calibration result and its series, for the report's tests and benchmark.

Every section of a real result is present (parameters with intervals, profiles, SVD,
correlation, verdict, scores and ``error_summary``) with numbers that are consistent with the
series: the scores are computed from the series' own residuals. ``profile``, ``rank`` and
``evaluate`` switch off the profile likelihood, make the Jacobian rank deficient, or make an
``--evaluate`` document without a fit.
"""

from __future__ import annotations

import numpy as np

from .._json import JsonObject
from .physical_errors import error_summary, hold_last_error
from .series import SignalSeries, floor_entries, score_entries

__all__ = ["synthetic_result"]


def synthetic_result(episodes: int = 3, signals: int = 2, samples: int = 200,
                     parameters: int = 3, *, profile: bool = True, rank_deficient: bool = False,
                     evaluate: bool = False, quaternion: bool = False, seed: int = 0
                     ) -> tuple[JsonObject, list[SignalSeries]]:
    rng = np.random.default_rng(seed)
    pids = [f"param_{i}" for i in range(parameters)]
    nominal = {p: 1.0 + i for i, p in enumerate(pids)}
    fitted = {p: v * 1.1 for p, v in nominal.items()}
    names = [f"joint_{j}_position" for j in range(signals)]
    series: list[SignalSeries] = []
    for e in range(episodes):
        scope = "validation" if e == episodes - 1 and episodes > 1 else "training"
        times = np.arange(samples) * 0.002
        for j, name in enumerate(names):
            is_quat = quaternion and j == signals - 1
            if is_quat:
                angle = 0.3 * np.sin(times * (1 + j))
                recorded = np.stack([np.cos(angle / 2), np.zeros(samples), np.zeros(samples),
                                     np.sin(angle / 2)], axis=1)
                components: tuple[str, ...] = ("rx", "ry", "rz")
            else:
                recorded = np.sin(times[:, None] * (1 + j) + e)[:, :1] * (1 + 0.1 * j)
                components = ("position",)
            width = len(components)
            scales = np.full(width, 0.01)
            errors = {"nominal": 0.05 * (1 + j) * np.cos(times)[:, None]
                      + rng.normal(0, 0.01, (samples, width)),
                      "fitted": rng.normal(0, 0.01, (samples, width))}
            if evaluate:
                errors = {"nominal": errors["nominal"]}
            series.append(SignalSeries(
                scope=scope, episode=f"episode-{e:02d}", signal=name, components=components,
                unit="rad", quaternion=is_quat, times_s=times, recorded=recorded,
                scales=scales, errors=errors, floor=hold_last_error(recorded, is_quat)))
    sets = ["nominal"] if evaluate else ["nominal", "fitted"]
    scored = score_entries(series, sets)
    scores = {n: {"values": nominal if n == "nominal" else fitted,
                  "provenance": {"from": "synthetic"}, **scored[n]} for n in sets}
    by_scope = {scope: [s for s in series if s.scope == scope]
                for scope in ("training", "validation")}
    document: JsonObject = {
        "format": "fibril_calibration/evaluation" if evaluate else "fibril_calibration/result",
        "request": {"path": "/synthetic/calibration.yaml", "sha256": "0" * 64},
        "scores": scores,
        "error_summary": error_summary(scores, floor_entries(series)),
        "input_timing": None,
        "episodes": {scope: [{"id": eid, "signals": [
            {"observation": s.signal, "samples": s.times_s.shape[0], "alignment": "exact"}
            for s in items if s.episode == eid], "rollout_ticks": samples * 2}
            for eid in dict.fromkeys(s.episode for s in items)]
            for scope, items in by_scope.items()},
    }
    if evaluate:  # an --evaluate document lists the episode ids only
        document["episodes"] = {scope: list(dict.fromkeys(s.episode for s in items))
                                for scope, items in by_scope.items()}
        return document, series
    p = len(pids)
    singular = np.geomspace(100.0, 1.0, p)
    if rank_deficient:
        singular[-1] = 0.0
    basis = np.linalg.qr(rng.normal(size=(p, p)))[0]
    correlation = np.clip(basis @ np.diag(1 / np.maximum(singular, 1e-3)) @ basis.T, -1, 1)
    d = np.sqrt(np.abs(np.diag(correlation)))
    correlation = correlation / np.outer(d, d)
    if rank_deficient:
        correlation[:, -1] = np.nan
        correlation[-1, :] = np.nan
    correlation_list = [[None if not np.isfinite(v) else float(v) for v in row]
                        for row in correlation]
    sd = {q: 0.01 * fitted[q] for q in pids}
    document.update({
        "optimization_termination": "converged",
        "optimizer": {"iterations": 7, "max_iterations": 50, "message": "synthetic",
                      "initial_objective": 1e4, "final_objective": 1e2},
        "evaluations": {"training": 40, "validation": 1},
        "wall_time_s": 1.0,
        "likelihood_interpretation_valid": True,
        "fitted_parameters": fitted,
        "parameter_contract": [{"id": q, "unit": "N_m_s_per_rad", "provenance": "synthetic",
                                "lower": 0.0, "upper": 10.0, "initial": nominal[q],
                                "nominal": nominal[q]} for q in pids],
        "local_identifiability": {
            "coordinate_system": "dimensionless", "singular_values": singular.tolist(),
            "rank_tolerance": 1e-6, "numerical_rank": int(np.sum(singular > 1e-6)),
            "full_rank": not rank_deficient, "condition_number": None if rank_deficient
            else float(singular[0] / singular[-1]),
            "condition_number_infinite": rank_deficient,
            "directions": [{"singular_value": float(s), "identifiable": bool(s > 1e-6),
                            "components": dict(zip(pids, basis[:, i].tolist()))}
                           for i, s in enumerate(singular)],
            "parameters": [{"id": q, "identifiable": not (rank_deficient and q == pids[-1]),
                            "standard_deviation": sd[q],
                            "interval_95": [fitted[q] - 1.96 * sd[q], fitted[q] + 1.96 * sd[q]],
                            "interval_95_crosses_bounds": False} for q in pids],
            "covariance": {"correlation": correlation_list,
                           "null_space_dimension": int(rank_deficient),
                           "unidentifiable_parameters": [pids[-1]] if rank_deficient else []},
        },
        "fit": {"verdict": "no_plausible_fit" if rank_deficient else "plausible_fit",
                "reasons": ["ill_conditioned"] if rank_deficient else [],
                "criteria": {"near_bound_fraction": 1e-3},
                "measurements": {"bound_distance_fraction": {q: 0.2 for q in pids}}},
        "candidate_plan": {"values": fitted, "provenance": {"compiled_model_sha256": "f" * 64}},
        "profile_likelihood": None,
    })
    if profile:
        threshold = 3.841458820694124
        entries: list[JsonObject] = []
        for q in pids:
            grid = fitted[q] + sd[q] * np.linspace(-4, 4, 11)
            points = [{"value": float(v), "delta_objective": float(((v - fitted[q]) / sd[q]) ** 2)}
                      for v in grid]
            entries.append({"parameter": q, "points": points,
                            "confidence_interval": [fitted[q] - 1.96 * sd[q],
                                                    fitted[q] + 1.96 * sd[q]],
                            "lower_objective_found": False})
        document["profile_likelihood"] = {"threshold_delta_objective": threshold,
                                          "likelihood_interpretation_valid": True,
                                          "parameters": entries}
    return document, series
