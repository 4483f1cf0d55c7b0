"""The calibration report's figures (matplotlib Agg; imported only when a report is drawn).

Long episodes are decimated for drawing only (at most ``MAX_POINTS`` per line, by stride):
every number in the report and the result comes from all samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fibril_sim_core.reporting import figure

from .series import SignalSeries

MAX_POINTS = 1000
_SET_STYLE = {"nominal": dict(color="tab:orange", linestyle=":"),
              "fitted": dict(color="tab:blue", linestyle="--"),
              "zero": dict(color="gray", linestyle="-")}


def _stride(count: int) -> int:
    return max(1, math.ceil(count / MAX_POINTS))


def episode_figure(episode: str, scope: str, signals: Sequence[SignalSeries],
                   names: Sequence[str]) -> Any:
    """A strip chart per episode, one row per signal: left, recorded vs simulated at each set
    (an orientation: its angle error); right, simulated - recorded. Each row is scaled to its
    own range, printed at its edge in the signal's units: two axes per episode, whatever the
    number of signals (a panel per signal would cost a second per episode to draw)."""
    rows = len(signals)
    height = 1.5 * rows + 1.0
    fig = figure(11.0, height, layout=None)
    fig.subplots_adjust(left=0.13, right=0.975, top=1 - 0.4 / height, bottom=0.5 / height,
                        wspace=0.3)
    left, right = fig.subplots(1, 2)
    label = "validation: not used by the fit" if scope == "validation" else "training"
    fig.suptitle(f"{episode} ({label})", fontsize=10)
    _title(left, "recorded (black) vs simulated", fontsize=8)
    _title(right, "simulated - recorded", fontsize=8)
    # One LineCollection per style and panel: a Line2D per curve costs more than its drawing.
    lines: dict[tuple[int, str | None], list[np.ndarray]] = {}
    for i, series in enumerate(signals):
        base = rows - 1 - i
        step = _stride(series.times_s.shape[0])
        t = series.times_s[::step]
        present = [n for n in names if n in series.errors]
        if series.quaternion:
            curves = [(np.linalg.norm(series.errors[n][::step], axis=1), n) for n in present]
            title = f"{series.signal}\nangle error [rad]"
        else:
            curves = [(series.recorded[::step, c], None)
                      for c in range(series.recorded.shape[1])]
            curves += [(series.recorded[::step, c] + series.errors[n][::step, c], n)
                       for n in present for c in range(series.recorded.shape[1])]
            title = f"{series.signal}\n[{series.unit}]"
        _strip(left, lines, 0, t, curves, base, title)
        errors = [(series.errors[n][::step, c], n) for n in present
                  for c in range(series.errors[n].shape[1])]
        _strip(right, lines, 1, t, errors, base, f"{series.signal}\n[{series.unit}]",
               symmetric=True)
    from matplotlib.collections import LineCollection

    for (panel, name), segments in lines.items():
        style = (dict(colors="black", linewidths=1.2, alpha=0.6) if name is None else
                 dict(colors=_style(name)["color"], linewidths=1,
                      linestyles=_style(name)["linestyle"]))
        (left, right)[panel].add_collection(LineCollection(segments, **style))
    for ax in (left, right):
        ax.set_xlim(min(float(s.times_s[0]) for s in signals if s.times_s.size) if any(
            s.times_s.size for s in signals) else 0.0,
            max((float(s.times_s[-1]) for s in signals if s.times_s.size), default=1.0))
        ax.set_ylim(-0.05, rows + 0.05)
        ax.set_yticks([])
        ax.set_xlabel("time [s]", fontsize=8)
        ax.tick_params(labelsize=7)
        for i in range(rows + 1):
            ax.axhline(i, color="#bbbbbb", lw=0.6)
    for name in names:
        left.plot([], [], lw=1, label=name, **_style(name))
    left.plot([], [], color="black", lw=1.2, alpha=0.6, label="recorded")
    left.legend(fontsize=7, loc="upper right", ncol=3, framealpha=0.7)
    return fig


def _strip(ax: Any, lines: dict[tuple[int, str | None], list[np.ndarray]], panel: int,
           t: np.ndarray, curves: Sequence[tuple[np.ndarray, str | None]], base: float,
           title: str, symmetric: bool = False) -> None:
    """One row: its curves scaled into [base, base + 1] (added to ``lines``), its label."""
    finite = [c[np.isfinite(c)] for c, _ in curves if c.size]
    values = np.concatenate(finite) if finite else np.zeros(1)
    if values.size == 0:
        values = np.zeros(1)
    if symmetric:
        top = float(np.max(np.abs(values))) or 1.0
        low, high = -top, top
    else:
        low, high = float(np.min(values)), float(np.max(values))
        if high <= low:
            low, high = low - 1.0, high + 1.0
    for curve, name in curves:
        placed = base + 0.08 + 0.84 * (curve - low) / (high - low)
        lines.setdefault((panel, name), []).append(np.column_stack([t, placed]))
    if symmetric:
        lines.setdefault((panel, "zero"), []).append(
            np.array([[t[0], base + 0.5], [t[-1], base + 0.5]]) if t.size else np.zeros((0, 2)))
    scale = f"±{high:.3g}" if symmetric else f"{low:.4g} … {high:.4g}"
    ax.text(-0.005, base + 0.5, f"{title}\n{scale}", va="center", ha="right", fontsize=7,
            transform=ax.get_yaxis_transform())


def _title(ax: Any, text: str, fontsize: float = 9, **_: Any) -> None:
    """A title as plain text above the frame: ``Axes.set_title`` measures the axes'
    decorations again at every draw (a tenth of a second per panel here)."""
    ax.text(0.5, 1.01, text, transform=ax.transAxes, ha="center", va="bottom",
            fontsize=fontsize)


def _style(name: str) -> dict[str, Any]:
    return dict(_SET_STYLE.get(name, dict(color="tab:green", linestyle="-.")))


def error_bars(summary: Mapping[str, Any]) -> Any:
    """Per signal component and scope: RMS error of each set and the hold-last floor (log)."""
    from matplotlib.ticker import NullLocator

    scopes = [s for s in ("training", "validation") if summary.get(s)]
    fig = figure(9.0, 3.4 * len(scopes))
    fig.subplots_adjust(left=0.08, right=0.98, top=0.93, bottom=0.14, hspace=0.6)
    axes = fig.subplots(len(scopes), 1, squeeze=False)[:, 0]
    for ax, scope in zip(axes, scopes):
        rows = summary[scope]["signals"]
        columns = list(rows[0]["rms"]) if rows else []
        width = 0.8 / max(1, len(columns))
        for j, column in enumerate(columns):
            values = [r["rms"][column] or np.nan for r in rows]
            ax.bar(np.arange(len(rows)) + j * width, values, width, label=column,
                   color=_style(column)["color"] if column != "hold_last" else "lightgray")
        ax.set_xticks(np.arange(len(rows)) + 0.4 - width / 2)
        ax.set_xticklabels([f"{r['signal']}.{r['component']}\n[{r['unit']}]" for r in rows],
                           fontsize=7)
        ax.set_yscale("log")
        ax.yaxis.set_minor_locator(NullLocator())  # minor log ticks cost more than the bars
        ax.set_ylabel("rms error")
        _title(ax, f"{scope}: rms of (simulated - recorded) in physical units", fontsize=9)
        ax.legend(fontsize=7)
    return fig


def profile_figure(profile: Mapping[str, Any], fitted: Mapping[str, float],
                   deviations: Mapping[str, float | None]) -> Any:
    """Δ objective per profiled parameter, the χ² threshold, the profile interval and, dashed,
    the local quadratic ((p - p̂) / SD)² the Wald interval assumes."""
    entries = profile["parameters"]
    columns = min(3, len(entries))
    rows = math.ceil(len(entries) / columns)
    fig = figure(3.4 * columns, 2.8 * rows)
    fig.subplots_adjust(left=0.1, right=0.98, top=1 - 0.35 / (2.8 * rows),
                        bottom=0.35 / (2.8 * rows), wspace=0.35, hspace=0.45)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    threshold = profile.get("threshold_delta_objective")
    for ax, entry in zip(axes, entries):
        points = [(p["value"], max(p["delta_objective"], 0.0)) for p in entry["points"]
                  if p.get("delta_objective") is not None]
        interval = entry.get("confidence_interval")
        if interval and threshold is not None:  # the refined crossings are profile points too
            points += [(v, threshold) for v in interval if v is not None]
        points.sort()
        x = np.array([p[0] for p in points])
        y = np.array([p[1] for p in points])
        ax.plot(x, y, "o-", ms=3, lw=1, label="profile")
        if threshold is not None:
            ax.axhline(threshold, color="tab:red", lw=0.8, label=f"χ² 95 % ({threshold:.3g})")
        interval = entry.get("confidence_interval")
        if interval:
            ax.axvspan(interval[0], interval[1], color="tab:green", alpha=0.2,
                       label="profile interval")
            span = interval[1] - interval[0]
            if span > 0:
                ax.set_xlim(interval[0] - 3 * span, interval[1] + 3 * span)
                visible = y[(x >= interval[0] - 3 * span) & (x <= interval[1] + 3 * span)]
                top = max([*(visible.tolist() or [0.0]), (threshold or 1.0) * 3])
                ax.set_ylim(-0.05 * top, top)
        centre, sd = fitted.get(entry["parameter"]), deviations.get(entry["parameter"])
        if centre is not None:
            ax.axvline(centre, color="black", lw=0.6)
            if sd:
                lo, hi = ax.get_xlim()
                grid = np.linspace(lo, hi, 200)
                ax.plot(grid, ((grid - centre) / sd) ** 2, color="gray", lw=0.8, ls="--",
                        label="local quadratic (Wald)")
        _title(ax, entry["parameter"], fontsize=9)
        ax.set_ylabel("Δ objective", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6)
    for ax in axes[len(entries):]:
        ax.set_visible(False)
    return fig


def singular_values_figure(values: Sequence[float], tolerance: float | None) -> Any:
    from matplotlib.ticker import NullLocator

    fig = figure(5.0, 3.0)
    fig.subplots_adjust(left=0.15, right=0.97, top=0.9, bottom=0.16)
    ax = fig.subplots()
    ax.bar(np.arange(len(values)), [max(v, 1e-300) for v in values], color="tab:blue")
    if tolerance:
        ax.axhline(tolerance, color="tab:red", lw=0.8, label="rank tolerance")
        ax.legend(fontsize=7)
    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("direction (largest first)")
    ax.set_ylabel("singular value")
    _title(ax, "Jacobian singular values (dimensionless coordinates)", fontsize=9)
    return fig


def correlation_figure(names: Sequence[str], matrix: np.ndarray) -> Any:
    size = max(3.5, 0.5 * len(names) + 2.5)
    fig = figure(size + 1.0, size)
    margin = 0.12 + 0.012 * max((len(n) for n in names), default=0)
    fig.subplots_adjust(left=min(margin, 0.4), bottom=min(margin, 0.4), right=0.95, top=0.92)
    ax = fig.subplots()
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap="RdBu_r", vmin=-1.0, vmax=1.0)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    if len(names) <= 12:
        for i in range(len(names)):
            for j in range(len(names)):
                if np.isfinite(matrix[i, j]):
                    ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(image, ax=ax, shrink=0.8)
    _title(ax, "parameter correlation", fontsize=9)
    return fig


def histogram_figure(standardized: Mapping[str, np.ndarray], normal: bool) -> Any:
    fig = figure(6.0, 3.2)
    fig.subplots_adjust(left=0.1, right=0.97, top=0.95, bottom=0.16)
    ax = fig.subplots()
    for scope, values in standardized.items():
        if values.size:
            ax.hist(values, bins=60, density=True, histtype="step", lw=1.2,
                    label=f"{scope} ({values.size})")
    if normal:
        x = np.linspace(-4, 4, 200)
        ax.plot(x, np.exp(-x * x / 2) / math.sqrt(2 * math.pi), color="black", lw=1,
                label="unit normal")
    ax.set_xlabel("standardized residual of the fitted set")
    ax.set_ylabel("density")
    ax.legend(fontsize=7)
    return fig
