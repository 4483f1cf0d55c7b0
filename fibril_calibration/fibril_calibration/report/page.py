"""The calibration report page: every section of a result, with figures beside it.

A section with nothing to show says why (no profile likelihood requested, an ``--evaluate``
result without a fit, a rank-deficient Jacobian, a likelihood reading that is not valid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fibril_sim_core.reporting import (Raw, ReportFolder, escape, image, note, number, page,
                                       table)

from .._json import JsonValue
from . import figures
from .document import (SCOPES, IdentifiedParameter, Interval, ParameterProfile,
                       ResultDocument, read_error_summary)
from .physical_errors import FLOOR, error_summary
from .series import SignalSeries, floor_entries, score_entries

REASONS = {
    "no_fit_criteria": "the request sets no fit criteria, so no verdict is possible",
    "training_rms_exceeded": "the training standardized RMS is above fit.max_training_rms",
    "validation_rms_exceeded": "the validation standardized RMS is above "
                               "fit.max_validation_rms",
    "validation_unavailable": "there are no validation episodes to check the fit on",
    "ill_conditioned": "the local condition number is above fit.max_local_condition_number "
                       "(some parameter combinations are not determined by the data)",
    "cross_episode_inconsistency": "the per-episode training RMS differ by more than "
                                   "fit.max_episode_rms_ratio (one model does not fit all "
                                   "episodes alike)",
}


def reason_text(code: str) -> str:
    if code.startswith("parameter_near_bound:"):
        return (f"parameter {code.split(':', 1)[1]} ended at (within near_bound_fraction "
                f"of) a bound: the optimum may lie outside the range")
    return REASONS.get(code, code)


def render(document: ResultDocument, series: Sequence[SignalSeries], folder: ReportFolder,
           *, result_path: str | None = None) -> str:
    """Draw every figure into ``folder`` and return the page."""
    names = [n for n in (document.get("scores") or {})
             if any(n in s.errors for s in series)] or [
        n for n in (document.get("scores") or {})]
    sections = [
        ("summary", "Summary", _summary(document, result_path)),
        ("parameters", "Parameters", _parameters(document)),
        ("errors", "Nominal vs fitted, physical units", _errors(document, series, names, folder)),
        ("episodes", "Episodes: recorded vs simulated", _episodes(series, names, folder)),
        ("profiles", "Profile likelihood", _profiles(document, folder)),
        ("identifiability", "Identifiability: SVD and correlation",
         _identifiability(document, folder)),
        ("residuals", "Residual distribution", _residuals(document, series, folder)),
        ("input-timing", "Input timing", _input_timing(document)),
    ]
    request_path = str((document.get("request") or {}).get("path", ""))
    title = f"Calibration report: {Path(request_path).name}"
    return page(title, sections)


# ------------------------------------------------------------------ sections

def _summary(document: ResultDocument, result_path: str | None) -> str:
    fit = document.get("fit")
    rows: list[tuple[str, object]] = []
    parts = []
    if fit is None:
        parts.append(note("An --evaluate result: parameter sets scored without a fit, so there "
                          "is no verdict, termination or fitted value."))
    else:
        verdict = fit.get("verdict")
        parts.append(f'<p class="verdict">Verdict: {escape(verdict)}</p>')
        reasons = fit.get("reasons") or []
        if reasons:
            parts.append("<ul>" + "".join(f"<li><code>{escape(r)}</code>: "
                                          f"{escape(reason_text(r))}</li>" for r in reasons)
                         + "</ul>")
        else:
            parts.append(note("Every fit criterion the request set passed."))
        optimizer = document.get("optimizer") or {}
        rows += [("termination", f"{document.get('optimization_termination')} "
                                 f"({optimizer.get('message', '')})"),
                 ("iterations", f"{optimizer.get('iterations')} (max "
                                f"{optimizer.get('max_iterations')})"),
                 ("evaluations", ", ".join(f"{k} {v}" for k, v in
                                           (document.get("evaluations") or {}).items())),
                 ("wall time", f"{number(document.get('wall_time_s'))} s"),
                 ("objective", f"{number(optimizer.get('initial_objective'))} → "
                               f"{number(optimizer.get('final_objective'))}")]
    request = document.get("request") or {}
    provenance = (document.get("candidate_plan") or {}).get("provenance") or {}
    rows += [("result", result_path or "(not written)"),
             ("request", f"{request.get('path')}  sha256 {request.get('sha256')}"),
             ("manifest", f"{provenance.get('manifest_path', request.get('manifest'))}  sha256 "
                          f"{provenance.get('manifest_sha256', 'n/a')}"),
             ("model", f"{provenance.get('model_path', 'n/a')}  sha256 "
                       f"{provenance.get('model_sha256', 'n/a')}"),
             ("fitted plan", f"compiled model sha256 "
                             f"{provenance.get('compiled_model_sha256', 'n/a')}, parameter "
                             f"set hash {provenance.get('parameter_set_hash', 'n/a')}"),
             ("build", ", ".join(f"{k} {v}" for k, v in (provenance.get("build") or {})
                                 .items()) or "n/a")]
    parts.append(table(["item", "value"], rows))
    parts.append("<h3>Data sources</h3>")
    source_rows: list[tuple[str, str, str, str, object]] = []
    for scope, episodes in (document.get("episodes") or {}).items():
        for episode in episodes:
            if not isinstance(episode, Mapping):  # an --evaluate document: ids only
                source_rows.append((episode, scope, "see the request", "", ""))
                continue
            source = episode.get("source") or {}
            where = _source_text(source)
            signals = ", ".join(f"{s['observation']} ({s['samples']} samples, "
                                f"{s['alignment']})" for s in episode.get("signals", []))
            source_rows.append((episode["id"], scope, where, signals,
                                episode.get("rollout_ticks")))
    parts.append(table(["episode", "scope", "recording / files", "signals", "rollout ticks"],
                       source_rows, classes=[r[1] for r in source_rows]))
    return "\n".join(parts)


def _source_text(source: Mapping[str, JsonValue]) -> str:
    if not source:
        return "samples files of the request"
    keep = []
    for key in ("path", "format", "reader", "entry", "window_s", "sidecar", "topics", "topic"):
        if source.get(key) is not None:
            keep.append(f"{key}: {source[key]}")
    return "; ".join(keep) or ", ".join(f"{k}: {v}" for k, v in source.items()
                                        if k != "input_timing")


def _parameters(document: ResultDocument) -> str:
    contract = document.get("parameter_contract") or []
    if not contract:
        return note("The result lists no parameters.")
    identifiability = {p["id"]: p for p in (document.get("local_identifiability") or {})
                       .get("parameters", [])}
    profiles = {p["parameter"]: p for p in (document.get("profile_likelihood") or {})
                .get("parameters", [])}
    fitted = document.get("fitted_parameters") or {}
    fractions = ((document.get("fit") or {}).get("measurements") or {}).get(
        "bound_distance_fraction") or {}
    near = ((document.get("fit") or {}).get("criteria") or {}).get("near_bound_fraction",
                                                                    1e-3)
    rows, classes = [], []
    for p in contract:
        pid = p["id"]
        ident: IdentifiedParameter = identifiability.get(pid, {})
        profile: ParameterProfile = profiles.get(pid, {})
        wald = ident.get("interval_95")
        marks = []
        fraction = fractions.get(pid)
        if fraction is not None and fraction <= near:
            marks.append("value at a bound")
        if ident.get("interval_95_crosses_bounds"):
            marks.append("Wald interval crosses a bound")
        if profile.get("confidence_lower_bound_limited") or profile.get(
                "confidence_upper_bound_limited"):
            marks.append("profile interval stops at a bound")
        if ident and not ident.get("identifiable", True):
            marks.append("not locally identifiable")
        rows.append((pid, p.get("unit") or "", number(p.get("nominal")),
                     number(p.get("initial")), number(fitted.get(pid), 6),
                     number(ident.get("standard_deviation"), 3),
                     _interval(wald), _interval(profile.get("confidence_interval")),
                     f"[{number(p.get('lower'))}, {number(p.get('upper'))}]",
                     p.get("provenance") or "", "; ".join(marks)))
        classes.append("warn" if marks else "")
    body = table(["parameter", "unit", "nominal", "initial", "fitted", "± SD",
                  "95 % Wald", "95 % profile", "bounds", "provenance", "⚠ bound / identifiability"],
                 rows, classes=classes)
    if not document.get("likelihood_interpretation_valid", True):
        body += note("The objective is not a standardized Gaussian likelihood (no "
                     "standardized_gaussian_residuals, or a robust loss): the SD and intervals "
                     "are not statistical statements.")
    if "fitted_parameters" not in document:
        body += note("An --evaluate result: no fitted values; the scored sets are below.")
    return body


def _interval(interval: Interval | None) -> str:
    if not interval or interval[0] is None:
        return "n/a"
    return f"[{number(interval[0], 6)}, {number(interval[1], 6)}]"


def _errors(document: ResultDocument, series: Sequence[SignalSeries], names: Sequence[str],
            folder: ReportFolder) -> str:
    if not series:
        summary = document.get("error_summary")
        origin = note("From the result's error_summary (no time series re-simulated).")
    else:
        summary = read_error_summary(error_summary(score_entries(series, names),
                                                   floor_entries(series)))
        origin = note("Recomputed from the re-simulated residuals of every reference sample; "
                      "the same numbers are in the result JSON (error_summary) and on stderr.")
    if not summary or not (summary.get("training") or summary.get("validation")):
        return note("No parameter set could be scored, so there is no physical-unit error.")
    parts = [origin, note(summary.get("floor") or "")]
    for scope in SCOPES:
        block = summary.get(scope)
        if not block:
            parts.append(f"<h3>{scope}</h3>" + note(f"No {scope} episodes in the request."))
            continue
        columns = list(block["signals"][0]["rms"]) if block["signals"] else []
        rows = [(f"{r['signal']}.{r['component']}", r["unit"], r["samples"],
                 *[number(r["rms"][c]) for c in columns], _gain(r["rms"]))
                for r in block["signals"]]
        rows += [(Raw(f"<b>pooled</b> ({escape(', '.join(p['components']))})"), p["unit"],
                  p["samples"], *[number(p["rms"][c]) for c in columns], _gain(p["rms"]))
                 for p in block["pooled"]]
        parts.append(f'<h3>{scope}</h3>')
        parts.append(table(["signal", "unit", "samples", *[f"rms {c}" for c in columns],
                            "fitted / nominal"], rows,
                           classes=[scope] * len(rows)))
    parts.append(image(folder.save(figures.error_bars(summary), "errors"),
                       "rms error per signal, nominal vs fitted vs hold-last"))
    return "\n".join(parts)


def _gain(rms: Mapping[str, float | None]) -> str:
    a, b = rms.get("nominal"), rms.get("fitted")
    if a is None or b is None or a == 0:
        return "n/a"
    return f"{b / a:.3g}"


def _episodes(series: Sequence[SignalSeries], names: Sequence[str],
              folder: ReportFolder) -> str:
    if not series:
        return note("No time series: the result's request could not be re-simulated.")
    parts = [note("Black: recorded. Dotted orange: nominal; dashed blue: fitted. Residual "
                  "panels show simulated - recorded in the signal's units; orientations are "
                  "drawn as angle error. Long episodes are decimated for drawing only.")]
    for scope in ("training", "validation"):
        failed = [n for n in names if not any(n in s.errors for s in series if s.scope == scope)
                  and any(s.scope == scope for s in series)]
        if failed:
            parts.append(note(f"Not simulated on the {scope} episodes (the rollout failed; the "
                              f"result's scores give the reason): {', '.join(failed)}."))
    grouped: dict[tuple[str, str], list[SignalSeries]] = {}
    for item in series:
        grouped.setdefault((item.scope, item.episode), []).append(item)
    painter = figures.EpisodePainter(names)
    filenames = []
    for index, ((scope, episode), items) in enumerate(grouped.items()):
        path = folder.reserve(f"episode-{index:03d}-{_slug(episode)}")
        painter.write(path, episode, scope, items)
        filenames.append(path.name)
    for filename, ((scope, episode), items) in zip(filenames, grouped.items()):
        mark = " (validation: not used by the fit)" if scope == "validation" else ""
        parts.append(f"<h3>{escape(episode)}{escape(mark)}</h3>"
                     f"<p>signals: {escape(', '.join(i.signal for i in items))}</p>"
                     + image(filename, f"episode {episode}"))
    return "\n".join(parts)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:60]


def _profiles(document: ResultDocument, folder: ReportFolder) -> str:
    profile = document.get("profile_likelihood")
    if "fit" not in document:
        return note("Not computed: an --evaluate result has no fit to profile.")
    if not profile or not profile.get("parameters"):
        return note("Not computed: the request did not enable "
                    "analysis.profile_likelihood (set enabled: true to get these curves "
                    "and likelihood-ratio intervals).")
    parts = []
    if not profile.get("likelihood_interpretation_valid"):
        parts.append(note("The likelihood reading is not valid for this objective: the curves "
                          "are objective profiles, without a χ² threshold or interval."))
    fitted = document.get("fitted_parameters") or {}
    deviations = {p["id"]: p.get("standard_deviation") for p in
                  (document.get("local_identifiability") or {}).get("parameters", [])}
    parts.append(image(folder.save(figures.profile_figure(profile, fitted, deviations),
                                   "profiles"),
                       "profile likelihood per parameter"))
    rows = [(p["parameter"], _interval(p.get("confidence_interval")), len(p["points"]),
             "yes" if p.get("lower_objective_found") else "no")
            for p in profile["parameters"]]
    parts.append(table(["parameter", "95 % profile interval", "points",
                        "lower objective found off the optimum"], rows))
    return "\n".join(parts)


def _identifiability(document: ResultDocument, folder: ReportFolder) -> str:
    local = document.get("local_identifiability")
    if not local:
        return note("Not computed: an --evaluate result has no fit, so no Jacobian at an "
                    "optimum.")
    parts = []
    values = local.get("singular_values") or []
    rank = local.get("numerical_rank")
    count = len(document.get("parameter_contract") or values)
    condition = ("infinite" if local.get("condition_number_infinite")
                 else number(local.get("condition_number")))
    parts.append(f"<p>Numerical rank {escape(rank)} of {escape(count)}; condition number "
                 f"{escape(condition)}; coordinates: {escape(local.get('coordinate_system'))}"
                 f".</p>")
    if values:
        parts.append(image(folder.save(figures.singular_values_figure(
            values, local.get("rank_tolerance")), "singular-values"), "singular values"))
    directions = sorted(local.get("directions") or [], key=lambda d: d["singular_value"])
    rows = []
    for d in directions[:3]:
        components = sorted(d["components"].items(), key=lambda kv: -abs(kv[1]))
        rows.append((number(d["singular_value"]), "yes" if d.get("identifiable") else "no",
                     ", ".join(f"{v:+.3f}·{k}" for k, v in components[:6])))
    if rows:
        parts.append("<h3>Weakest directions</h3>"
                     + table(["singular value", "identifiable", "direction (largest parts)"],
                             rows))
    covariance = local.get("covariance") or {}
    unidentifiable = covariance.get("unidentifiable_parameters") or []
    if not local.get("full_rank", True):
        parts.append(note(f"The Jacobian is rank deficient (null space dimension "
                          f"{covariance.get('null_space_dimension')}): the data do not "
                          f"determine {', '.join(unidentifiable) or 'every direction'}; their "
                          f"correlations are left blank."))
    matrix = covariance.get("correlation")
    names = [p["id"] for p in local.get("parameters") or []]
    if matrix is None or not names:
        parts.append(note("No correlation matrix: the covariance was not computed."))
    else:
        array = np.array([[np.nan if v is None else v for v in row] for row in matrix],
                         dtype=float)
        parts.append(image(folder.save(figures.correlation_figure(names, array),
                                       "correlation"), "parameter correlation heat map"))
    return "\n".join(parts)


def _residuals(document: ResultDocument, series: Sequence[SignalSeries],
               folder: ReportFolder) -> str:
    name = "fitted" if any("fitted" in s.errors for s in series) else None
    if name is None:
        return note("No fitted set to show: an --evaluate result has no fit, or the "
                    "request could not be re-simulated.")
    standardized = {}
    for scope in ("training", "validation"):
        parts = [(s.errors[name] / s.scales).ravel() for s in series
                 if s.scope == scope and name in s.errors]
        standardized[scope] = np.concatenate(parts) if parts else np.empty(0)
    valid = bool(document.get("likelihood_interpretation_valid"))
    text = [] if valid else [note(
        "The likelihood reading is not valid for this objective (the residuals are not "
        "declared measurement standard deviations, or a robust loss is used): the histogram "
        "is drawn without the unit normal, which it need not follow.")]
    text.append(image(folder.save(figures.histogram_figure(standardized, valid), "residuals"),
                      "standardized residual histogram"))
    rows = [(scope, values.size, number(float(np.mean(values))) if values.size else "n/a",
             number(float(np.std(values))) if values.size else "n/a")
            for scope, values in standardized.items()]
    text.append(table(["scope", "residuals", "mean", "standard deviation"], rows))
    return "\n".join(text)


def _input_timing(document: ResultDocument) -> str:
    timing = document.get("input_timing")
    if not timing:
        return note("No recorded input came from a recording source (bag / trace), so no "
                    "command was moved onto the tick grid.")
    rows = [(policy.replace("_", " "), stats["samples"], stats["moved"],
             f"{stats['max_shift_s'] * 1e3:.4g} ms", stats["held_at_start"],
             stats.get("held_latency_ticks", 0)) for policy, stats in timing.items()]
    return table(["committed at", "input samples", "moved", "largest shift",
                  "held at a window start", "endpoint latency ticks"], rows)


__all__ = ["FLOOR", "reason_text", "render"]
