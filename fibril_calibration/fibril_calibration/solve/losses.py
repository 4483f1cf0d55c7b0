"""Robust losses applied per scalar data residual (never to ``__prior__`` residuals).

Every loss follows ``scipy.optimize.least_squares``' convention: ``rho`` is a function of the
squared residual ``z = r**2``; the objective is ``0.5 * sum(rho)``; ``rho(z) = z`` is plain least
squares, ``rho'(0) = 1``. A loss scale ``c`` (scipy's ``f_scale``) evaluates
``c**2 * rho(z / c**2)``: residuals well below ``c`` are treated quadratically.

huber, soft_l1, cauchy and arctan are scipy's built-in definitions; tukey is Ceres' TukeyLoss
(biweight): ``rho(z) = (1 - (1 - z)**3) / 3`` for ``z <= 1`` and ``1/3`` beyond, so residuals
larger than ``c`` get zero weight. For arctan the scale is in residual units like the others
(Ceres' ``ArctanLoss(a)`` corresponds to ``a = c**2``).

The optimizer receives one callable loss for the whole residual vector; it applies the chosen
loss to the first ``n_data`` entries and the identity to the appended prior residuals, which is
scale-invariant and therefore unaffected by ``f_scale``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..loss_spec import LossSpec


def _huber(z: np.ndarray, rho: np.ndarray) -> None:
    mask = z <= 1.0
    root = np.sqrt(np.where(mask, 1.0, z))
    rho[0] = np.where(mask, z, 2.0 * root - 1.0)
    rho[1] = np.where(mask, 1.0, 1.0 / root)
    rho[2] = np.where(mask, 0.0, -0.5 / (root * root * root))


def _soft_l1(z: np.ndarray, rho: np.ndarray) -> None:
    t = 1.0 + z
    root = np.sqrt(t)
    rho[0] = 2.0 * (root - 1.0)
    rho[1] = 1.0 / root
    rho[2] = -0.5 / (t * root)


def _cauchy(z: np.ndarray, rho: np.ndarray) -> None:
    t = 1.0 + z
    rho[0] = np.log1p(z)
    rho[1] = 1.0 / t
    rho[2] = -1.0 / (t * t)


def _arctan(z: np.ndarray, rho: np.ndarray) -> None:
    t = 1.0 + z * z
    rho[0] = np.arctan(z)
    rho[1] = 1.0 / t
    rho[2] = -2.0 * z / (t * t)


def _tukey(z: np.ndarray, rho: np.ndarray) -> None:
    inside = z <= 1.0
    v = np.where(inside, 1.0 - z, 0.0)
    rho[0] = np.where(inside, (1.0 - v * v * v) / 3.0, 1.0 / 3.0)
    rho[1] = v * v
    rho[2] = np.where(inside, -2.0 * v, 0.0)


_KERNELS: dict[str, Callable[[np.ndarray, np.ndarray], None]] = {
    "huber": _huber,
    "soft_l1": _soft_l1,
    "cauchy": _cauchy,
    "arctan": _arctan,
    "tukey": _tukey,
}


def unit_loss(loss_type: str) -> Callable[[np.ndarray], np.ndarray]:
    """The unit-scale loss ``z -> (3, m)`` array of ``rho, rho', rho''`` (scipy's format)."""
    kernel = _KERNELS[loss_type]

    def loss(z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=float)
        rho = np.empty((3, z.size))
        kernel(z, rho)
        return rho

    return loss


def data_only_loss(loss_type: str, n_data: int) -> Callable[[np.ndarray], np.ndarray]:
    """A callable scipy loss: ``loss_type`` on entries ``[:n_data]``, identity on the rest."""
    kernel = _KERNELS[loss_type]

    def loss(z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=float)
        rho = np.empty((3, z.size))
        kernel(z[:n_data], rho[:, :n_data])
        rho[0, n_data:] = z[n_data:]
        rho[1, n_data:] = 1.0
        rho[2, n_data:] = 0.0
        return rho

    return loss


def robustified_squares(loss: LossSpec | None, residuals: np.ndarray) -> np.ndarray:
    """Per-residual contribution to ``2 * cost``: ``c**2 * rho(r**2 / c**2)`` (``r**2`` if none)."""
    r = np.asarray(residuals, dtype=float)
    z: np.ndarray = r * r
    if loss is None:
        return z
    c2 = loss.scale * loss.scale
    result: np.ndarray = c2 * unit_loss(loss.type)(z / c2)[0]
    return result
