"""The typed errors of fibril_calibration.

Messages name the file, key path, parameter, episode or signal at fault so that the CLI can
print them as one line.
"""

from __future__ import annotations

from fibril_sim_core.errors import FibrilError

# An error lists names (topics, columns, joints, elements) only while the list stays short
# enough to be read whole in a one-line error; a longer one is counted and pointed to instead.
LISTING_LIMIT = 400


class CalibrationError(FibrilError):
    """Base of every error the calibration engine raises for bad input or a failed run."""


class CalibrationRequestError(CalibrationError):
    """The calibration request (schema 3.1) is invalid or inconsistent."""


class EvaluationError(CalibrationError):
    """A residual evaluation failed (rollout failure, missing exact sample, non-finite value)."""
