"""fibril_calibration: fit MuJoCo and device parameters to recorded episodes (pure Python).

A calibration request (schema 3.1) → episodes replayed through the normal ingress on a fresh
instance of a normal candidate SimulationPlan per parameter vector → a residual vector →
bounded least squares (scipy) → identifiability, covariance, profile likelihood, fit verdict →
a versioned result document and a portable parameter overlay. ``fibril_sim calibrate`` is the
CLI; ``run_calibration`` the programmatic entry.
"""

from .alignment import ALIGNMENTS, align, quat_error, quat_slerp
from .analysis import InformationMatrix, LocalAnalysis
from .candidate_plan import (CalibrationParameterValues, CandidatePlanBuilder,
                             CandidatePlanBuilderProtocol)
from .decoders import (STANDARD_DECODERS, CalibrationDeviceOutputDecoder,
                       CalibrationDeviceOutputDecoderRegistry)
from .engine import CalibrationResult, run_calibration, solver_options, summary_text
from .errors import CalibrationError, CalibrationRequestError, EvaluationError
from .evaluation import Evaluation, ResidualBlock, ResidualModel
from .losses import LOSS_TYPES, LossSpec
from .observations import ObservationSpec
from .optimizer import Tolerances
from .outcome import CalibrationOutcome, EvaluationCounts
from .parameters import (PARAMETERIZATIONS, CalibrationParameter, CoordinateMap,
                         Parameterization, Prior, parameter_problems, physical_scale,
                         validate_parameter, validate_parameters)
from .problem import CalibrationProblem, ProblemStatistics
from .profile_likelihood import ParameterProfile, ProfileLikelihood, ProfilePoint
from .request import (AnalysisSpec, CalibrationRequest, EpisodeSpec, ExecutionSpec, FitSpec,
                      ObjectiveSpec, OptimizerSpec, ProfileLikelihoodSpec, SignalSpec,
                      load_calibration_request, parse_calibration_request)
from .result import RESULT_FORMAT, build_result_document, write_atomic
from .solver import SolverOptions, calibrate, likelihood_interpretation_valid
from .summaries import EpisodeSummary, ResidualSummary, SignalSummary
from .verdict import FitCriteria, FitVerdict

__all__ = [
    "ALIGNMENTS", "LOSS_TYPES", "PARAMETERIZATIONS", "RESULT_FORMAT", "STANDARD_DECODERS",
    "AnalysisSpec", "CalibrationDeviceOutputDecoder", "CalibrationDeviceOutputDecoderRegistry",
    "CalibrationError", "CalibrationOutcome", "CalibrationParameter",
    "CalibrationParameterValues", "CalibrationProblem", "CalibrationRequest",
    "CalibrationRequestError", "CalibrationResult", "CandidatePlanBuilder",
    "CandidatePlanBuilderProtocol", "CoordinateMap", "EpisodeSpec", "EpisodeSummary",
    "Evaluation", "EvaluationCounts", "EvaluationError", "ExecutionSpec", "FitCriteria",
    "FitSpec", "FitVerdict", "InformationMatrix", "LocalAnalysis", "LossSpec", "ObjectiveSpec",
    "ObservationSpec", "OptimizerSpec", "ParameterProfile", "Parameterization", "Prior",
    "ProblemStatistics", "ProfileLikelihood", "ProfileLikelihoodSpec", "ProfilePoint",
    "ResidualBlock", "ResidualModel", "ResidualSummary", "SignalSpec", "SignalSummary",
    "SolverOptions", "Tolerances", "align", "build_result_document", "calibrate",
    "likelihood_interpretation_valid", "load_calibration_request", "parameter_problems",
    "parse_calibration_request", "physical_scale", "quat_error", "quat_slerp", "run_calibration",
    "solver_options", "summary_text", "validate_parameter", "validate_parameters",
    "write_atomic",
]
