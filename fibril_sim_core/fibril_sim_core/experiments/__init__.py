"""Parameter experiments: the experiment document (``experiment``), the trace metrics
(``metrics``) and the runner that executes a baseline and explicit variants (``runner``)."""

from .experiment import Experiment, ExperimentError, load_experiment
from .runner import run_experiment, write_json_atomically

__all__ = ["Experiment", "ExperimentError", "load_experiment", "run_experiment",
           "write_json_atomically"]
