"""fibril_calibration: fit MuJoCo and device parameters to recorded episodes (pure Python).

A calibration request (schema 3.1) → episodes replayed through the normal ingress on a fresh
instance of a normal candidate SimulationPlan per parameter vector → a residual vector →
bounded least squares (scipy) → identifiability, covariance, profile likelihood, fit verdict →
a versioned result document and a portable parameter overlay. ``fibril_sim calibrate`` is the
CLI; ``run_calibration`` the programmatic entry.

The names below are imported on first use: ``fibril_sim --help`` loads the ``calibrate``
command's parser through this package without importing SciPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fibril_sim_core._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("ALIGNMENTS", "align", "quat_error", "quat_slerp"), ".alignment"),
    **dict.fromkeys(("InformationMatrix", "LocalAnalysis"), ".analysis.identifiability"),
    **dict.fromkeys(("CalibrationParameterValues", "CandidatePlanBuilder",
                     "CandidatePlanBuilderProtocol"),
                    ".model.candidate_plan"),
    **dict.fromkeys(("STANDARD_DECODERS", "CalibrationDeviceOutputDecoder",
                     "CalibrationDeviceOutputDecoderRegistry"),
                    ".model.decoders"),
    **dict.fromkeys(("CalibrationResult", "run_calibration", "solver_options", "summary_text"),
                    ".engine"),
    **dict.fromkeys(("CalibrationError", "CalibrationRequestError", "EvaluationError"), ".errors"),
    **dict.fromkeys(("Evaluation", "ResidualBlock", "ResidualModel"), ".evaluation"),
    **dict.fromkeys(("LOSS_TYPES", "LossSpec"), ".losses"),
    **dict.fromkeys(("ObservationSpec",), ".model.observations"),
    **dict.fromkeys(("Tolerances",), ".solve.optimizer"),
    **dict.fromkeys(("CalibrationOutcome", "EvaluationCounts"), ".outcome"),
    **dict.fromkeys(("PARAMETERIZATIONS", "CalibrationParameter", "CoordinateMap",
                     "Parameterization", "Prior", "parameter_problems", "physical_scale",
                     "validate_parameter", "validate_parameters"),
                    ".parameters"),
    **dict.fromkeys(("CalibrationProblem", "ProblemStatistics"), ".solve.problem"),
    **dict.fromkeys(("ParameterProfile", "ProfileLikelihood", "ProfilePoint"),
                    ".analysis.profile_likelihood"),
    **dict.fromkeys(("AnalysisSpec", "CalibrationRequest", "ExecutionSpec",
                     "FitSpec", "ObjectiveSpec", "OptimizerSpec", "ProfileLikelihoodSpec",
                     "load_calibration_request", "parse_calibration_request"),
                    ".request.document"),
    **dict.fromkeys(("RESULT_FORMAT", "build_result_document", "write_atomic"), ".result"),
    **dict.fromkeys(("SolverOptions", "calibrate", "likelihood_interpretation_valid"), ".solver"),
    **dict.fromkeys(("StartingPoint", "starting_point"), ".solve.starting_point"),
    **dict.fromkeys(("EpisodeSummary", "ResidualSummary", "SignalSummary"), ".analysis.summaries"),
    **dict.fromkeys(("FitCriteria", "FitVerdict"), ".analysis.verdict"),
    **dict.fromkeys(("EpisodeSpec", "SignalSpec"), ".request.episode_specs"),
    **dict.fromkeys(("open_source",), ".recordings.formats"),
    **dict.fromkeys(("BagSource", "CsvSource", "SOURCE_FORMATS", "Source", "SourceError",
                     "Stream"),
                    ".recordings.sources"),
    **dict.fromkeys(("FrankaSource", "RingTargets"), ".recordings.franka"),
    **dict.fromkeys(("BAG_READERS", "Rosbag2PyReader", "choose_reader"),
                    ".recordings.bag_readers"),
    **dict.fromkeys(("InitialStateProjection",), ".model.initial_state_fit"),
    **dict.fromkeys(("COMMIT_POLICIES", "SourceSet", "source_episodes"), ".request.mapping"),
    **dict.fromkeys(("Window", "parse_windows"), ".request.windows"),
    **dict.fromkeys(("EVALUATION_FORMAT", "evaluate_parameter_sets", "overlay_values", "score",
                     "score_sets", "scores_text"),
                    ".scores"),
    **dict.fromkeys(("metrics_documents", "write_metrics"), ".metrics_json"),
    **dict.fromkeys(("sidecar_gains_overlay", "sysid_overlay"), ".sysid_import"),
    **dict.fromkeys(("OffsetAwareBuilder", "OffsetPlan", "TimeOffsetTarget"),
                    ".recordings.time_offsets"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:
    from .alignment import ALIGNMENTS, align, quat_error, quat_slerp
    from .analysis.identifiability import InformationMatrix, LocalAnalysis
    from .analysis.profile_likelihood import ParameterProfile, ProfileLikelihood, ProfilePoint
    from .analysis.summaries import EpisodeSummary, ResidualSummary, SignalSummary
    from .analysis.verdict import FitCriteria, FitVerdict
    from .engine import CalibrationResult, run_calibration, solver_options, summary_text
    from .errors import CalibrationError, CalibrationRequestError, EvaluationError
    from .evaluation import Evaluation, ResidualBlock, ResidualModel
    from .losses import LOSS_TYPES, LossSpec
    from .metrics_json import metrics_documents, write_metrics
    from .model.candidate_plan import (CalibrationParameterValues, CandidatePlanBuilder,
                                       CandidatePlanBuilderProtocol)
    from .model.decoders import (STANDARD_DECODERS, CalibrationDeviceOutputDecoder,
                                 CalibrationDeviceOutputDecoderRegistry)
    from .model.initial_state_fit import InitialStateProjection
    from .model.observations import ObservationSpec
    from .outcome import CalibrationOutcome, EvaluationCounts
    from .parameters import (PARAMETERIZATIONS, CalibrationParameter, CoordinateMap,
                             Parameterization, Prior, parameter_problems, physical_scale,
                             validate_parameter, validate_parameters)
    from .recordings.bag_readers import BAG_READERS, Rosbag2PyReader, choose_reader
    from .recordings.formats import open_source
    from .recordings.franka import FrankaSource, RingTargets
    from .recordings.sources import (SOURCE_FORMATS, BagSource, CsvSource, Source, SourceError,
                                     Stream)
    from .recordings.time_offsets import OffsetAwareBuilder, OffsetPlan, TimeOffsetTarget
    from .request.document import (AnalysisSpec, CalibrationRequest, ExecutionSpec, FitSpec,
                                   ObjectiveSpec, OptimizerSpec, ProfileLikelihoodSpec,
                                   load_calibration_request, parse_calibration_request)
    from .request.episode_specs import EpisodeSpec, SignalSpec
    from .request.mapping import COMMIT_POLICIES, SourceSet, source_episodes
    from .request.windows import Window, parse_windows
    from .result import RESULT_FORMAT, build_result_document, write_atomic
    from .scores import (EVALUATION_FORMAT, evaluate_parameter_sets, overlay_values, score,
                         score_sets, scores_text)
    from .solve.optimizer import Tolerances
    from .solve.problem import CalibrationProblem, ProblemStatistics
    from .solve.starting_point import StartingPoint, starting_point
    from .solver import SolverOptions, calibrate, likelihood_interpretation_valid
    from .sysid_import import sidecar_gains_overlay, sysid_overlay
