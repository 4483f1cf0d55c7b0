"""fibril_calibration: fit MuJoCo and device parameters to recorded episodes (pure Python).

A calibration request (schema 3.1) → episodes replayed through the normal ingress on a fresh
instance of a normal candidate SimulationPlan per parameter vector → a residual vector →
bounded least squares (scipy) → identifiability, covariance, profile likelihood, fit verdict →
a versioned result document and a portable parameter overlay. ``fibril_sim calibrate`` is the
CLI; from Python, build a ``CalibrationRequest`` (or load one) and ``calibrate`` it.

The names below are imported on first use: ``fibril_sim --help`` loads the ``calibrate``
command's parser through this package without importing SciPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fibril_sim_core._lazy import lazy_exports

# The public API; everything else is imported from its subpackage (``request``, ``recordings``,
# ``model``, ``solve``, ``analysis``) or top module (``engine``, ``result``, ``scores``...).
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("CalibrationRequest", "Commands", "Episode", "Observation", "Parameter",
                     "Signal"),
                    ".request.typed"),
    "load_calibration_request": ".request.document",
    "calibrate": ".calibration",
    **dict.fromkeys(("CalibrationResult", "run_calibration"), ".engine"),
    "FittedParameter": ".fitted",
    "from_sysid": ".mujoco_sysid",
    **dict.fromkeys(("CalibrationError", "CalibrationRequestError", "EvaluationError"), ".errors"),
    **dict.fromkeys(("Source", "SourceError", "Stream"), ".recordings.sources"),
    "open_source": ".recordings.formats",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from .calibration import calibrate
    from .engine import CalibrationResult, run_calibration
    from .errors import CalibrationError, CalibrationRequestError, EvaluationError
    from .fitted import FittedParameter
    from .mujoco_sysid import from_sysid
    from .recordings.formats import open_source
    from .recordings.sources import Source, SourceError, Stream
    from .request.document import load_calibration_request
    from .request.typed import (CalibrationRequest, Commands, Episode, Observation, Parameter,
                                Signal)
