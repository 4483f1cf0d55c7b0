"""Writing a calibration report folder and the fitted MJCF from a result document."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fibril_sim_core.reporting import ReportFolder, require_matplotlib

from .._json import JsonValue
from .document import ResultDocument, read_result
from .series import SignalSeries, load_request, simulate_series

if TYPE_CHECKING:  # the request module loads MuJoCo: imported where a request is loaded
    from ..request.document import CalibrationRequest

__all__ = ["export_fitted_mjcf", "report_result", "write_report"]


def write_report(document: Mapping[str, JsonValue], folder: Path,
                 series: Sequence[SignalSeries] = (), *,
                 result_path: str | None = None) -> Path:
    """Draw ``document`` (and ``series``) into ``folder``; returns its index.html. Nothing is
    left behind on an error or SIGINT (the folder is staged, then renamed into place)."""
    require_matplotlib()
    from .page import render

    with ReportFolder(Path(folder)) as staged:
        text = render(read_result(document), series, staged, result_path=result_path)
        return staged.commit(text)


def parameter_sets(document: ResultDocument) -> dict[str, dict[str, float]]:
    """The scored sets of a result (nominal, fitted) or an --evaluate document."""
    return {name: dict(entry["values"]) for name, entry in (document.get("scores") or {}).items()
            if entry.get("values")}


def report_result(document: Mapping[str, JsonValue], folder: Path, *, where: str,
                  request: CalibrationRequest | None = None, result_path: str | None = None,
                  progress: Callable[[str], None] | None = None) -> Path:
    """Re-simulate the result's parameter sets on its own request (checked against the
    result's hashes unless ``request`` is the one just fitted) and write the report."""
    if request is None:
        request = load_request(document, where)
    result = read_result(document)
    if progress is not None:
        progress(f"report: re-simulating {len(parameter_sets(result))} parameter set(s)")
    provenance = (result.get("candidate_plan") or {}).get("provenance") or {}
    from .physical_errors import units_of

    series = simulate_series(request, parameter_sets(result), units_of(document),
                             fitted_compiled_sha256=provenance.get("compiled_model_sha256"),
                             where=where)
    return write_report(document, folder, series, result_path=result_path)


def export_fitted_mjcf(document: Mapping[str, JsonValue], request: CalibrationRequest,
                       path: Path, *, result_path: str | None) -> str:
    """``--export-mjcf``: the request's model with the result's fitted overlay, written from
    MjSpec; its compiled-model hash equals the fitted plan's (checked). Returns that hash."""
    from fibril_sim_core.mjcf_export import export_mjcf
    from fibril_sim_core.overlays import OverlayParameter

    from ..model.candidate_plan import CandidatePlanBuilder
    from ..errors import CalibrationError
    from ..recordings.time_offsets import is_time_offset

    result = read_result(document)
    values = result.get("fitted_parameters")
    if not values:
        raise CalibrationError(f"--export-mjcf {str(path)!r}: the result has no fitted values "
                               f"(an --evaluate result)")
    fitted = [p for p in request.parameters if not is_time_offset(p)]
    overlays: tuple[OverlayParameter, ...] = CandidatePlanBuilder(
        request.manifest, fitted).overlay_parameters(values)
    provenance = (result.get("candidate_plan") or {}).get("provenance") or {}
    expected = provenance.get("compiled_model_sha256")
    request_info = result.get("request") or {}
    comment = (f"Fitted model written by fibril_sim from calibration result "
               f"{result_path or '(not saved)'} of request {request_info.get('path')} "
               f"(sha256 {request_info.get('sha256')}); fitted values: "
               + ", ".join(f"{k}={v!r}" for k, v in values.items())
               + f"; compiled model sha256 {expected}")
    return export_mjcf(request.manifest, overlays, Path(path), comment=comment,
                       expected_sha256=expected)
