"""Local identifiability, covariance and the information matrix at the fitted point.

Everything is expressed in the dimensionless coordinate ``theta_i = (p_i - p_hat_i) /
physical_scale_i`` (independent of the optimizer parameterization) from the data-only,
unweighted training Jacobian; covariances are mapped to physical units at the end.

- SVD (``numpy.linalg.svd``): singular values, numerical rank, condition number
  ``s_max / s_min`` (infinite when rank deficient) and right-singular vectors as parameter
  directions. This is a local practical identifiability diagnostic, not a proof of structural
  identifiability. The rank tolerance is relative to ``s_max`` like numpy's ``matrix_rank``,
  but numpy's ``max(m, n) * eps`` assumes an exact matrix, while a finite-difference Jacobian
  is only accurate to about ``h**2 + eps / h ~ 1e-10`` relative (more with a simulation's own
  rounding): two parameters entering only as a sum give a smallest singular value of
  ~1e-12 * s_max, which numpy's default would call full rank. The tolerance is therefore
  ``s_max * max(max(m, n) * eps, sqrt(eps))`` (``sqrt(eps) ~ 1.5e-8``): a condition number
  above ~7e7 is indistinguishable from rank deficiency with finite-difference derivatives.
- Covariance ``C = (J^T J)^+`` as Ceres' ``Covariance`` computes it, rank-deficient cases
  included: the SVD pseudo-inverse with the numerical null space dropped. Like Ceres it is in
  residual units: for standardized Gaussian residuals (``measurement_standard_deviation``
  scales) that is the parameter covariance; otherwise ``residual_variance_estimate`` (``SSE /
  (m - rank)`` of the unweighted fit residuals; ``SSE / (m - rank - nuisance)`` when
  ``initial_state_fit`` projected out nuisance initial states) is reported beside it, to scale
  it by the residuals' own spread. A parameter whose axis has a component above ``1e-6`` in the null
  space is locally unidentifiable: the pseudo-inverse gives it a finite number, but its
  variance is really unbounded, so its standard deviation and interval are ``None``, its
  correlations are ``None`` and it is listed in ``unidentifiable_parameters``.
- Standard deviations and 95 % normal-approximation intervals exist only when
  ``likelihood_interpretation_valid`` (standardized Gaussian residuals, no prior, no robust loss).
- Information matrix ``J^T J`` (same coordinates): ``fisher_information_approximation`` when
  likelihood-valid, else ``sensitivity_gram_matrix``; eigenvalues are the squared singular
  values of ``J`` (more accurate than an eigensolver on ``J^T J``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._json import JsonObject, finite_or_none, matrix_or_none

NULL_LOADING_TOLERANCE = 1e-6
RANK_RELATIVE_TOLERANCE = float(np.sqrt(np.finfo(float).eps))
CONFIDENCE_LEVEL = 0.95
COORDINATE_SYSTEM = "dimensionless: theta_i = (p_i - p_hat_i) / physical_scale_i"


@dataclass(frozen=True)
class LocalAnalysis:
    parameter_ids: tuple[str, ...]
    fitted: np.ndarray
    physical_scale: np.ndarray
    jacobian_source: str
    residual_count: int
    singular_values: np.ndarray
    rank_tolerance: float
    rank_relative_tolerance: float
    numerical_rank: int
    condition_number: float
    directions: np.ndarray  # rows: right-singular vectors, same order as singular_values
    identifiable: np.ndarray
    standardized: bool
    residual_variance_estimate: float  # SSE / (m - rank - nuisance_dof); nan when <= 0
    covariance: np.ndarray  # dimensionless (J^T J)^+, null space dropped (finite everywhere)
    likelihood_interpretation_valid: bool
    lower: np.ndarray | None = None  # physical bounds, to flag intervals that cross them
    upper: np.ndarray | None = None
    nuisance_dof: int = 0  # initial_state_fit: degrees of freedom of the projected nuisance

    @property
    def covariance_physical(self) -> np.ndarray:
        s = self.physical_scale
        return self.covariance * np.outer(s, s)

    @property
    def correlation(self) -> np.ndarray:
        c = self.covariance
        d = np.sqrt(np.diag(c))
        with np.errstate(invalid="ignore", divide="ignore"):
            corr = c / np.outer(d, d)
        ok = np.outer(self.identifiable, self.identifiable) & np.isfinite(corr)
        corr = np.where(ok, corr, np.nan)
        for i in range(len(d)):
            if ok[i, i]:
                corr[i, i] = 1.0
        return corr

    @property
    def standard_deviations(self) -> np.ndarray | None:
        """Physical-unit standard deviations (``inf`` if unidentifiable); only when valid."""
        if not self.likelihood_interpretation_valid:
            return None
        return np.where(self.identifiable, np.sqrt(np.diag(self.covariance_physical)), np.inf)

    @property
    def intervals(self) -> np.ndarray | None:
        """``(n, 2)`` 95 % normal-approximation intervals in physical units; only when valid."""
        sd = self.standard_deviations
        if sd is None:
            return None
        from scipy.stats import norm  # only here: importing scipy.stats costs ~0.4-0.7 s

        z = float(norm.ppf(0.5 + CONFIDENCE_LEVEL / 2.0))
        return np.column_stack([self.fitted - z * sd, self.fitted + z * sd])

    def to_document(self) -> JsonObject:
        ids = self.parameter_ids
        sd = self.standard_deviations
        iv = self.intervals
        per_parameter = []
        for i, pid in enumerate(ids):
            entry: JsonObject = {
                "id": pid,
                "identifiable": bool(self.identifiable[i]),
                "physical_scale": float(self.physical_scale[i]),
            }
            if sd is not None and iv is not None:
                entry["standard_deviation"] = finite_or_none(sd[i])
                entry["interval_95"] = (
                    [float(iv[i, 0]), float(iv[i, 1])] if np.all(np.isfinite(iv[i])) else None
                )
                if entry["interval_95"] is not None and self.lower is not None \
                        and self.upper is not None:
                    # The local normal approximation knows no bounds; say when it crosses one.
                    entry["interval_95_crosses_bounds"] = bool(
                        iv[i, 0] < self.lower[i] or iv[i, 1] > self.upper[i])
            per_parameter.append(entry)
        cond = self.condition_number
        return {
            "coordinate_system": COORDINATE_SYSTEM,
            "jacobian_source": self.jacobian_source,
            "residual_count": self.residual_count,
            "singular_values": [float(v) for v in self.singular_values],
            "rank_tolerance": float(self.rank_tolerance),
            "rank_relative_tolerance": float(self.rank_relative_tolerance),
            "numerical_rank": int(self.numerical_rank),
            "full_rank": bool(self.numerical_rank == len(ids)),
            "condition_number": finite_or_none(cond),
            "condition_number_infinite": bool(not np.isfinite(cond)),
            "directions": [
                {
                    "singular_value": float(self.singular_values[k]),
                    "identifiable": bool(k < self.numerical_rank),
                    "components": {pid: float(self.directions[k, i]) for i, pid in enumerate(ids)},
                }
                for k in range(len(self.singular_values))
            ],
            "parameters": per_parameter,
            "covariance": {
                "method": "svd_pseudo_inverse",
                "null_space_dimension": len(ids) - int(self.numerical_rank),
                "unidentifiable_parameters": [
                    pid for i, pid in enumerate(ids) if not self.identifiable[i]],
                "units": ("standardized_residuals" if self.standardized else
                          "residual_units_scale_by_residual_variance_estimate"),
                "residual_variance_estimate": finite_or_none(self.residual_variance_estimate),
                **({"residual_degrees_of_freedom": self.residual_count
                    - self.numerical_rank - self.nuisance_dof,
                    "nuisance_degrees_of_freedom": self.nuisance_dof}
                   if self.nuisance_dof else {}),
                "dimensionless": matrix_or_none(self.covariance),
                "physical": matrix_or_none(self.covariance_physical),
                "correlation": matrix_or_none(self.correlation),
            },
            "likelihood_interpretation_valid": self.likelihood_interpretation_valid,
        }


def analyze(
    parameter_ids: Sequence[str],
    fitted: np.ndarray,
    physical_scale: np.ndarray,
    jacobian: np.ndarray,
    unweighted_residuals: np.ndarray,
    standardized: bool,
    likelihood_valid: bool,
    jacobian_source: str,
    rank_relative_tolerance: float = RANK_RELATIVE_TOLERANCE,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
    nuisance_dof: int = 0,
) -> LocalAnalysis:
    """SVD, rank, condition number and covariance of a dimensionless data-only Jacobian.
    ``nuisance_dof``: degrees of freedom the residuals already lost to nuisance parameters
    eliminated by projection (``initial_state_fit``), taken off the residual variance's."""
    J = np.asarray(jacobian, dtype=float)
    m, n = J.shape
    padded = J if m >= n else np.vstack([J, np.zeros((n - m, n))])
    _, s, vt = np.linalg.svd(padded, full_matrices=False)
    s_max = float(s[0]) if s.size else 0.0
    tolerance = s_max * max(max(m, n) * float(np.finfo(float).eps), rank_relative_tolerance)
    rank = int(np.sum(s > tolerance)) if s_max > 0.0 else 0
    condition = s_max / float(s[-1]) if rank == n and n > 0 else float("inf")
    null = vt[rank:].T  # n x (n - rank)
    loading = np.linalg.norm(null, axis=1) if null.size else np.zeros(n)
    identifiable = loading <= NULL_LOADING_TOLERANCE

    r = np.asarray(unweighted_residuals, dtype=float)
    dof = m - rank - int(nuisance_dof)
    variance = float(r @ r) / dof if dof > 0 else float("nan")
    inv = np.zeros(n)
    inv[:rank] = 1.0 / (s[:rank] * s[:rank])
    covariance = (vt.T * inv) @ vt
    return LocalAnalysis(
        parameter_ids=tuple(parameter_ids),
        fitted=np.asarray(fitted, dtype=float),
        physical_scale=np.asarray(physical_scale, dtype=float),
        jacobian_source=jacobian_source,
        residual_count=m,
        singular_values=s,
        rank_tolerance=tolerance,
        rank_relative_tolerance=rank_relative_tolerance,
        numerical_rank=rank,
        condition_number=condition,
        directions=vt,
        identifiable=identifiable,
        standardized=standardized,
        residual_variance_estimate=variance,
        covariance=covariance,
        likelihood_interpretation_valid=likelihood_valid,
        lower=None if bounds is None else np.asarray(bounds[0], dtype=float),
        upper=None if bounds is None else np.asarray(bounds[1], dtype=float),
        nuisance_dof=int(nuisance_dof),
    )


@dataclass(frozen=True)
class InformationMatrix:
    name: str  # fisher_information_approximation | sensitivity_gram_matrix
    parameter_ids: tuple[str, ...]
    matrix: np.ndarray
    eigenvalues: np.ndarray  # descending
    numerical_rank: int
    physical_scale: np.ndarray

    @property
    def log_determinant(self) -> float | None:
        if self.numerical_rank < len(self.parameter_ids):
            return None
        return float(np.sum(np.log(self.eigenvalues)))

    def to_document(self) -> JsonObject:
        return {
            "name": self.name,
            "coordinate_system": {
                "description": COORDINATE_SYSTEM,
                "parameters": list(self.parameter_ids),
                "physical_scale": {
                    pid: float(s) for pid, s in zip(self.parameter_ids, self.physical_scale)
                },
            },
            "matrix": matrix_or_none(self.matrix),
            "eigenvalues": [float(v) for v in self.eigenvalues],
            "numerical_rank": self.numerical_rank,
            "full_rank": self.numerical_rank == len(self.parameter_ids),
            "log_determinant": finite_or_none(self.log_determinant),
        }


def information_matrix(
    analysis: LocalAnalysis, jacobian: np.ndarray
) -> InformationMatrix:
    J = np.asarray(jacobian, dtype=float)
    return InformationMatrix(
        name=(
            "fisher_information_approximation"
            if analysis.likelihood_interpretation_valid
            else "sensitivity_gram_matrix"
        ),
        parameter_ids=analysis.parameter_ids,
        matrix=J.T @ J,
        eigenvalues=analysis.singular_values**2,
        numerical_rank=analysis.numerical_rank,
        physical_scale=analysis.physical_scale,
    )
