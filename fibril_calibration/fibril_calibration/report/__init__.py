"""See the fit: the calibration report (HTML + PNG) and the fitted-model MJCF export.

    fibril_sim calibrate calibration.yaml --report report/ --export-mjcf fitted.xml
    fibril_sim report result.json --output report/ --export-mjcf fitted.xml

``write_report`` draws a result (and its re-simulated time series) into one folder: a
self-contained ``index.html`` and every figure as a PNG. ``physical_errors`` holds the
nominal-vs-fitted table in physical units that the result JSON and the stderr summary share.
matplotlib is needed only to draw (``fibril_calibration[report]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fibril_sim_core._lazy import lazy_exports

# Imported on first use: every calibration builds its result's ``error_summary`` through
# ``physical_errors``; the writer and the re-simulated series load only for a report.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("error_lines", "error_summary", "floor_scores"), ".physical_errors"),
    **dict.fromkeys(("export_fitted_mjcf", "report_result", "write_report"), ".writer"),
    **dict.fromkeys(("SignalSeries", "load_request", "simulate_series"), ".series"),
}

__all__ = ["SignalSeries", "error_lines", "error_summary", "export_fitted_mjcf",
           "floor_scores", "load_request", "report_result", "simulate_series", "write_report"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from .physical_errors import error_lines, error_summary, floor_scores
    from .series import SignalSeries, load_request, simulate_series
    from .writer import export_fitted_mjcf, report_result, write_report
