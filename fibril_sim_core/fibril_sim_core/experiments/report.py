"""The experiment report (``fibril_sim experiment run EXP --report DIR``).

One folder, like the calibration report: ``index.html`` (no network, no JavaScript) and its
PNG figures. It shows the status of every run, each metric per variant against the baseline
with the assertion thresholds, the parameter differences, and overlays of chosen signals
across runs, read back from the runs' traces (by default every selector a ``signal`` metric
reduces). matplotlib is needed only here (``require_matplotlib`` before any run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import numpy as np

from .._document import JsonValue

from ..reporting import (Raw, ReportFolder, axes_title, escape, few_ticks, figure, image, note,
                         number, page, require_matplotlib, table)

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn, not at start-up (optional,
    # and a third of a second that every fibril_sim command without --report would pay)
    from matplotlib.figure import Figure

    from .experiment import Experiment
    from .run import RunRecord
    from .runner import ExperimentResult

__all__ = ["default_signals", "write_experiment_report"]

MAX_POINTS = 1500


def default_signals(experiment: Experiment) -> list[str]:
    """The selectors the experiment's signal metrics reduce, each once."""
    return list(dict.fromkeys(m.signal for m in experiment.metrics
                              if m.kind in ("signal", "event_reached") and m.signal))


def write_experiment_report(document: ExperimentResult, folder: Path,
                            signals: Sequence[str] = ()) -> Path:
    """Draw the experiment result ``document`` into ``folder``; returns its index.html."""
    require_matplotlib()
    with ReportFolder(Path(folder)) as staged:
        sections = [("summary", "Summary", _summary(document)),
                    ("runs", "Runs", _runs(document)),
                    ("metrics", "Metrics against the baseline", _metrics(document, staged)),
                    ("parameters", "Parameter differences", _parameters(document)),
                    ("signals", "Signals across runs", _signals(document, signals, staged))]
        experiment = (document.get("experiment") or {}).get("id", "")
        return staged.commit(page(f"Experiment report: {experiment}", sections))


def _summary(document: ExperimentResult) -> str:
    summary = document["summary"]
    rows: list[tuple[str, object]] = [
            ("experiment", f"{document['experiment'].get('path')}  sha256 "
                           f"{document['experiment'].get('sha256')}"),
            ("runs", f"{summary.get('succeeded')}/{summary.get('runs')} succeeded ("
                     + ", ".join(f"{n} {s}" for s, n in sorted(
                         (summary.get("by_status") or {}).items())) + ")")]
    for key, source in (document.get("sources") or {}).items():
        if key != "experiment" and isinstance(source, Mapping):  # (no scenario: null)
            rows.append((key, f"{source.get('path')}  sha256 {source.get('sha256')}"))
    rows += [("MuJoCo", document.get("mujoco_version")),
             ("execution", ", ".join(f"{k} {v}" for k, v in
                                     (document.get("execution") or {}).items())),
             ("traces", document.get("traces"))]
    return table(["item", "value"], rows)


def _runs(document: ExperimentResult) -> str:
    rows, classes = [], []
    for run in document.get("runs") or []:
        failed = [a for a in run.get("assertions") or [] if a.get("status") != "passed"]
        rows.append((run["id"], run.get("role"), run.get("status"),
                     run.get("error_reason") or "", number(run.get("wall_seconds")),
                     ", ".join(f"{a['metric']} {a['op']} {a['value']}: {a.get('status')}"
                               for a in failed) or "all passed",
                     run.get("trace") or ""))
        classes.append("" if run.get("success") else "bad")
    return table(["run", "role", "status", "reason", "wall s", "assertions", "trace"], rows,
                 classes=classes)


def _thresholds(document: ExperimentResult) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for run in document.get("runs") or []:
        for a in run.get("assertions") or []:
            text = f"{a['op']} {a['value']}"
            if text not in out.setdefault(a["metric"], []):
                out[a["metric"]].append(text)
    return out


def _metrics(document: ExperimentResult, folder: ReportFolder) -> str:
    runs = document.get("runs") or []
    baseline = next((r for r in runs if r.get("role") == "baseline"), None)
    if not runs:
        return note("No run finished, so there are no metrics.")
    names = list(dict.fromkeys(k for r in runs for k in (r.get("metrics") or {})))
    if not names:
        return note("The experiment declares no metrics.")
    thresholds = _thresholds(document)
    verdicts = {(r["id"], a["metric"]): a.get("status") for r in runs
                for a in r.get("assertions") or []}
    headers = ["metric", "assertion"] + [r["id"] for r in runs]
    rows = []
    for name in names:
        base = (baseline or {}).get("metrics", {}).get(name)
        cells: list[object] = [name, " and ".join(thresholds.get(name, [])) or ""]
        for run in runs:
            value = (run.get("metrics") or {}).get(name)
            text = escape(_value(value))
            if run is not baseline and _numeric(value) and _numeric(base):
                delta = value - base
                relative = f", {delta / base:+.1%}" if base else ""
                text += f"<br><small>Δ {escape(number(delta))}{escape(relative)}</small>"
            verdict = verdicts.get((run["id"], name))
            if verdict and verdict != "passed":
                text += f" <b>({escape(verdict)})</b>"
            cells.append(Raw(text))
        rows.append(cells)
    parts = [table(headers, rows),
             note("Δ: the variant's value minus the baseline's (relative in %). A failed "
                  "assertion is marked in bold.")]
    parts.append(image(folder.save(_metric_figure(names, runs, thresholds), "metrics"),
                       "each metric per run"))
    return "\n".join(parts)


def _entries(value: JsonValue) -> list[Mapping[str, JsonValue]]:
    """The objects of a JSON list (the baseline overlay's parameter descriptions)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _value(value: JsonValue) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(number(v) for v in value) + "]"
    return number(value)


def _numeric(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _metric_figure(names: Sequence[str], runs: Sequence[RunRecord],
                   thresholds: Mapping[str, list[str]]) -> Figure:
    columns = min(4, len(names))
    rows = math.ceil(len(names) / columns)
    fig = figure(3.0 * columns, 2.4 * rows)
    fig.subplots_adjust(left=0.06, right=0.99, top=1 - 0.3 / (2.4 * rows),
                        bottom=0.9 / (2.4 * rows), wspace=0.35, hspace=0.45)
    axes = [fig.add_subplot(rows, columns, i + 1) for i in range(len(names))]  # only those used
    labels = [r["id"] for r in runs]
    for index, (ax, name) in enumerate(zip(axes, names)):
        values = [(r.get("metrics") or {}).get(name) for r in runs]
        heights = [float(v) if _numeric(v) else math.nan for v in values]
        colors = ["tab:gray" if r.get("role") == "baseline" else
                  ("tab:blue" if r.get("success") else "tab:red") for r in runs]
        ax.bar(range(len(runs)), heights, color=colors)
        for text in thresholds.get(name, []):
            op, _, limit = text.partition(" ")
            try:
                ax.axhline(float(limit), color="tab:red", lw=0.8, ls="--")
            except ValueError:
                pass
        axes_title(ax, name, fontsize=8)
        few_ticks(ax)
        ax.set_xticks(range(len(runs)))
        if index + columns < len(names):  # the panel below names the same runs (rotated text
            ax.tick_params(labelbottom=False)  # is the costliest part of this figure)
        else:
            ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=6)
        ax.tick_params(labelsize=6)
    return fig


def _parameters(document: ExperimentResult) -> str:
    rows = []
    for run in document.get("runs") or []:
        if run.get("role") == "baseline":
            continue
        for pid, diff in (run.get("parameter_diff") or {}).items():
            rows.append((run["id"], pid, _value(diff.get("baseline")),
                         _value(diff.get("value")), _value(diff.get("delta"))))
    baseline = _entries((document.get("baseline_overlay") or {}).get("parameters"))
    parts = [table(["parameter", "baseline value", "unit", "provenance"],
                   [(p["id"], _value(p.get("value")), p.get("unit") or "",
                     p.get("provenance") or "") for p in baseline])] if baseline else []
    if rows:
        parts.append(table(["variant", "parameter", "baseline", "variant value", "Δ"], rows))
    else:
        parts.append(note("No variant changes a parameter (only the baseline ran)."))
    return "\n".join(parts)


def _signals(document: ExperimentResult, signals: Sequence[str],
             folder: ReportFolder) -> str:
    if not signals:
        return note("No signal chosen: the experiment has no signal metric.")
    from ..errors import FibrilError
    from ..trace.query import query

    parts = []
    runs = [r for r in document.get("runs") or [] if r.get("trace")]
    for index, selector in enumerate(signals):
        series: list[tuple[str, np.ndarray, np.ndarray, list[str]]] = []
        missing = []
        for run in runs:
            try:
                result = query(Path(run.get("trace") or ""), selector)  # (one it has)
            except (FibrilError, ValueError, OSError) as exc:
                missing.append(f"{run['id']}: {str(exc).splitlines()[0]}")
                continue
            if not result.rows:
                missing.append(f"{run['id']}: no samples")
                continue
            first = 3 if result.columns[2:3] == ["acquisition_time_ns"] else 2
            times = np.array([row[0] for row in result.rows], dtype=float) * 1e-9
            values = np.array([[float(v) for v in row[first:]] for row in result.rows])
            series.append((run["id"], times, values, result.columns[first:]))
        if series:
            filename = folder.save(_overlay(selector, series), f"signal-{index:02d}")
            parts.append(f"<h3>{escape(selector)}</h3>" + image(filename, selector))
        else:
            parts.append(f"<h3>{escape(selector)}</h3>"
                         + note("No run's trace holds this signal."))
        if missing:
            parts.append(note("Not drawn: " + "; ".join(missing)))
    return "\n".join(parts)


def _overlay(selector: str, series: Sequence[tuple[str, np.ndarray, np.ndarray, list[str]]]
             ) -> Figure:
    width = max(s[2].shape[1] for s in series)
    fig = figure(9.0, 2.2 * width + 0.6)
    fig.subplots_adjust(left=0.1, right=0.98, top=1 - 0.35 / (2.2 * width + 0.6),
                        bottom=0.5 / (2.2 * width + 0.6), hspace=0.35)
    axes = fig.subplots(width, 1, squeeze=False)[:, 0]
    for run, times, values, columns in series:
        step = max(1, math.ceil(times.shape[0] / MAX_POINTS))
        for c in range(values.shape[1]):
            axes[c].plot(times[::step], values[::step, c], lw=1, label=run)
            axes[c].set_ylabel(columns[c] if c < len(columns) else f"[{c}]", fontsize=8)
    for ax in axes:
        few_ticks(ax)
    axes_title(axes[0], selector, fontsize=9)
    axes[0].legend(fontsize=7)
    axes[-1].set_xlabel("time [s]")
    return fig
