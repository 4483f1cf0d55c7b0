"""The simulation side of a calibration: the candidate plan a parameter vector runs, the
observations read from it, device-output decoders and initial-state coordinates.

Below the request (which resolves its selectors on the nominal plan) and above the shared
vocabulary (``errors``, ``parameters``, ``alignment``); reads no recording.

The names below are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fibril_sim_core._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("CalibrationParameterValues", "CandidatePlanBuilder",
                     "CandidatePlanBuilderProtocol"),
                    ".candidate_plan"),
    **dict.fromkeys(("STANDARD_DECODERS", "CalibrationDeviceOutputDecoder",
                     "CalibrationDeviceOutputDecoderRegistry"),
                    ".decoders"),
    **dict.fromkeys(("InitialStateProjection",), ".initial_state_fit"),
    **dict.fromkeys(("ObservationSpec",), ".observations"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from .candidate_plan import (CalibrationParameterValues, CandidatePlanBuilder,
                                 CandidatePlanBuilderProtocol)
    from .decoders import (STANDARD_DECODERS, CalibrationDeviceOutputDecoder,
                           CalibrationDeviceOutputDecoderRegistry)
    from .initial_state_fit import InitialStateProjection
    from .observations import ObservationSpec
