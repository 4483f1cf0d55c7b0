"""The calibration report's figures (matplotlib Agg; imported only when a report is drawn).

Long episodes are decimated for drawing only: each line is cut into ``DRAW_BINS`` bins (about
one per pixel column) and each bin drawn as its smallest and largest value, so a noisy residual
keeps its envelope (a stride would thin it). Every number in the report and the result comes
from all samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fibril_sim_core.reporting import (AggCanvas, agg_canvas, axes_title, few_ticks, figure,
                                       write_png)

from .document import SCOPES, ErrorSummary, ProfileLikelihood
from .physical_errors import FLOOR
from .series import SignalSeries

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn, not at start-up (optional,
    # and a third of a second that every fibril_sim command without --report would pay)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Text

DRAW_BINS = 300  # per line, of a panel about 300 pixels wide
_SET_STYLE = {"nominal": dict(color="tab:orange", linestyle=":"),
              "fitted": dict(color="tab:blue", linestyle="--"),
              "zero": dict(color="gray", linestyle="-")}


def envelope(t: np.ndarray, y: np.ndarray, bins: int = DRAW_BINS
             ) -> tuple[np.ndarray, np.ndarray]:
    """``(t, y)`` for drawing: per bin its smallest and largest value, in the order the bin
    visits them roughly (rising bins low first), at its first and last sample's time."""
    count = y.shape[0]
    if count <= 2 * bins:
        return t, y
    first = (np.arange(bins) * count) // bins
    last = np.append(first[1:] - 1, count - 1)
    low, high = np.minimum.reduceat(y, first), np.maximum.reduceat(y, first)
    rising = y[last] >= y[first]
    values = np.column_stack([np.where(rising, low, high), np.where(rising, high, low)])
    return np.column_stack([t[first], t[last]]).ravel(), values.ravel()


class EpisodePainter:
    """Draws each episode's strip chart (one row per signal: left, recorded vs simulated at
    each set, an orientation as its angle error; right, simulated - recorded; each row scaled
    to its own range, printed at its edge in the signal's units) on one reused figure.

    Text is most of what a figure costs to draw (matplotlib 3.11 renders about 0.15 ms a
    glyph), and the episodes of a request share their frame: the axes, grid, row names, time
    axis and legend are drawn once per layout (the same signals and time span) and restored
    from a copy of their pixels; per episode only its title, the row ranges and the curves
    (one LineCollection per style and panel) are drawn."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self._frame: _Frame | None = None

    def write(self, path: Path, episode: str, scope: str,
              signals: Sequence[SignalSeries]) -> None:
        """Draw one episode and write it as a PNG at ``path``."""
        from matplotlib.collections import LineCollection  # lazy: see the module docstring

        spans = [(float(s.times_s[0]), float(s.times_s[-1])) for s in signals if s.times_s.size]
        xlim = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0.0, 1.0)
        if xlim[1] <= xlim[0]:
            xlim = (xlim[0], xlim[0] + 1.0)
        layout = (xlim, tuple((s.signal, s.unit, s.quaternion) for s in signals))
        frame = self._frame
        if frame is None or frame.layout != layout:
            frame = self._frame = _draw_frame(layout, signals, self.names)
        fig = frame.figure
        frame.canvas.restore_region(frame.background)
        label = "validation: not used by the fit" if scope == "validation" else "training"
        frame.title.set_text(f"{episode} ({label})")
        fig.draw_artist(frame.title)
        lines: dict[tuple[int, str | None], list[np.ndarray]] = {}
        texts = iter(frame.scales)
        rows = len(signals)
        for i, series in enumerate(signals):
            base = rows - 1 - i
            t = series.times_s
            present = [n for n in self.names if n in series.errors]
            curves: list[tuple[np.ndarray, str | None]]
            if series.quaternion:
                curves = [(np.linalg.norm(series.errors[n], axis=1), n) for n in present]
            else:
                width = series.recorded.shape[1]
                curves = [(series.recorded[:, c], None) for c in range(width)]
                curves += [(series.recorded[:, c] + series.errors[n][:, c], n)
                           for n in present for c in range(width)]
            next(texts).set_text(_strip(lines, 0, t, curves, base))
            errors: list[tuple[np.ndarray, str | None]] = [
                (series.errors[n][:, c], n) for n in present
                for c in range(series.errors[n].shape[1])]
            next(texts).set_text(_strip(lines, 1, t, errors, base, symmetric=True))
        for text in frame.scales:
            fig.draw_artist(text)
        for (panel, name), segments in lines.items():
            if name is None:
                collection = LineCollection(segments, animated=True, colors="black",
                                            linewidths=1.2, alpha=0.6)
            else:
                style = _style(name)
                collection = LineCollection(segments, animated=True, colors=style["color"],
                                            linewidths=1, linestyles=style["linestyle"])
            ax = frame.axes[panel]
            ax.add_collection(collection, autolim=False)
            ax.draw_artist(collection)
            collection.remove()
        write_png(frame.canvas, path)


@dataclass(frozen=True)
class _Frame:
    """An episode figure of one layout, drawn without its per-episode parts (``animated``
    artists, skipped by a full draw), and the pixels of that drawing."""

    layout: tuple[object, ...]
    figure: Figure
    canvas: AggCanvas
    axes: tuple[Axes, Axes]
    background: object  # the canvas's copy of the frame's pixels
    title: Text
    scales: list[Text]  # per row: left, right


def _draw_frame(layout: tuple[tuple[float, float], tuple[object, ...]],
                signals: Sequence[SignalSeries], sets: Sequence[str]) -> _Frame:
    rows = len(signals)
    height = 1.5 * rows + 1.0
    fig = figure(11.0, height, layout=None)
    fig.subplots_adjust(left=0.13, right=0.975, top=1 - 0.6 / height,
                        bottom=0.5 / height, wspace=0.3)
    left, right = fig.subplots(1, 2)
    axes_title(left, "recorded (black) vs simulated", fontsize=8)
    axes_title(right, "simulated - recorded", fontsize=8)
    title = fig.text(0.5, 0.98, "", ha="center", va="top", fontsize=10, animated=True)
    scales = []
    for i, series in enumerate(signals):
        base = rows - 1 - i
        names = (f"{series.signal}\nangle error [rad]" if series.quaternion
                 else f"{series.signal}\n[{series.unit}]",
                 f"{series.signal}\n[{series.unit}]")
        for ax, name in zip((left, right), names):
            # the name above the row's middle, this episode's range below it (one line: a
            # text's cost grows with its lines)
            ax.text(-0.005, base + 0.5, name, va="bottom", ha="right", fontsize=7,
                    transform=ax.get_yaxis_transform())
            scales.append(ax.text(-0.005, base + 0.5, "", va="top", ha="right", fontsize=7,
                                  transform=ax.get_yaxis_transform(), animated=True))
    for ax in (left, right):
        ax.set_xlim(*layout[0])
        ax.set_ylim(-0.05, rows + 0.05)
        ax.set_yticks([])
        ax.set_xlabel("time [s]", fontsize=8)
        ax.tick_params(labelsize=7)
        for i in range(rows + 1):
            ax.axhline(i, color="#bbbbbb", lw=0.6)
    for name in sets:
        style = _style(name)
        left.plot([], [], lw=1, label=name, color=style["color"], linestyle=style["linestyle"])
    left.plot([], [], color="black", lw=1.2, alpha=0.6, label="recorded")
    left.legend(fontsize=7, loc="upper right", ncol=3, framealpha=0.7)
    canvas = agg_canvas(fig)
    canvas.draw()
    return _Frame(layout, fig, canvas, (left, right), canvas.copy_from_bbox(fig.bbox), title,
                  scales)


def _strip(lines: dict[tuple[int, str | None], list[np.ndarray]], panel: int,
           t: np.ndarray, curves: Sequence[tuple[np.ndarray, str | None]], base: float,
           symmetric: bool = False) -> str:
    """One row: its curves scaled into [base, base + 1] (added to ``lines``); returns the
    range it shows, in the signal's units."""
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
        x, y = envelope(t, curve)
        placed = base + 0.08 + 0.84 * (y - low) / (high - low)
        lines.setdefault((panel, name), []).append(np.column_stack([x, placed]))
    if symmetric:
        lines.setdefault((panel, "zero"), []).append(
            np.array([[t[0], base + 0.5], [t[-1], base + 0.5]]) if t.size else np.zeros((0, 2)))
    return f"±{high:.3g}" if symmetric else f"{low:.4g} … {high:.4g}"


def _log_scale(ax: Axes) -> None:
    """A log y axis labelled in plain text: the default labels (10^k) go through mathtext,
    whose parser costs more than the rest of the figure; minor ticks cost more than bars."""
    from matplotlib.ticker import LogFormatter, NullLocator

    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(LogFormatter())


def _style(name: str) -> dict[str, str]:
    return dict(_SET_STYLE.get(name, dict(color="tab:green", linestyle="-.")))


def error_bars(summary: ErrorSummary) -> Figure:
    """Per signal component and scope: RMS error of each set (a marker each) and the hold-last
    floor (a grey bar-wide dash), on a log axis. Markers, not bars: a bar is a patch of its
    own, and a log axis has no zero for a bar to stand on anyway."""
    blocks = [(s, block) for s in SCOPES if (block := summary.get(s))]
    fig = figure(9.0, 3.6 * len(blocks))
    fig.subplots_adjust(left=0.14, right=0.98, top=0.93, bottom=0.2, hspace=0.9)
    axes = fig.subplots(len(blocks), 1, squeeze=False)[:, 0]
    for ax, (scope, block) in zip(axes, blocks):
        rows = block["signals"]
        columns = list(rows[0]["rms"]) if rows else []
        sets = [c for c in columns if c != FLOOR]
        width = 0.6 / max(1, len(sets))
        where = np.arange(len(rows), dtype=float)
        if FLOOR in columns:
            ax.plot(where, [r["rms"][FLOOR] or np.nan for r in rows], ls="none",
                    marker="_", ms=28, mew=3, color="darkgray", label=FLOOR)
        for j, column in enumerate(sets):
            ax.plot(where + (j - (len(sets) - 1) / 2) * width,
                    [r["rms"][column] or np.nan for r in rows], ls="none",
                    marker="oDs^v"[j % 5], ms=6, color=_style(column)["color"], label=column)
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.set_xticks(where)
        ax.set_xticklabels([f"{r['signal']}.{r['component']} [{r['unit']}]" for r in rows],
                           fontsize=7, rotation=20, ha="right")
        _log_scale(ax)
        ax.set_ylabel("rms error")
        axes_title(ax, f"{scope}: rms of (simulated - recorded) in physical units", fontsize=9)
        ax.legend(fontsize=7, markerscale=0.5)
    return fig


def profile_figure(profile: ProfileLikelihood, fitted: Mapping[str, float],
                   deviations: Mapping[str, float | None]) -> Figure:
    """Δ objective per profiled parameter, the χ² threshold, the profile interval and, dashed,
    the local quadratic ((p - p̂) / SD)² the Wald interval assumes."""
    entries = profile["parameters"]
    columns = min(3, len(entries))
    rows = math.ceil(len(entries) / columns)
    fig = figure(3.4 * columns, 2.8 * rows)
    fig.subplots_adjust(left=0.1, right=0.98, top=1 - 0.35 / (2.8 * rows),
                        bottom=0.35 / (2.8 * rows), wspace=0.35, hspace=0.45)
    # only the axes that are used, few ticks, one legend: ticks, legends and their text are
    # most of what this figure costs to draw
    axes = [fig.add_subplot(rows, columns, i + 1) for i in range(len(entries))]
    threshold = profile.get("threshold_delta_objective")
    for i, (ax, entry) in enumerate(zip(axes, entries)):
        few_ticks(ax, x=True)
        points = [(p["value"], max(delta, 0.0)) for p in entry["points"]
                  if (delta := p.get("delta_objective")) is not None]
        interval = entry.get("confidence_interval")
        if interval and threshold is not None:  # the refined crossings are profile points too
            points += [(v, threshold) for v in interval]  # finite ends (a found interval)
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
        axes_title(ax, entry["parameter"], fontsize=9)
        ax.set_ylabel("Δ objective", fontsize=8)
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=6)
    return fig


def singular_values_figure(values: Sequence[float], tolerance: float | None) -> Figure:
    fig = figure(5.0, 3.0)
    fig.subplots_adjust(left=0.15, right=0.97, top=0.9, bottom=0.16)
    ax = fig.subplots()
    ax.bar(np.arange(len(values)), [max(v, 1e-300) for v in values], color="tab:blue")
    if tolerance:
        ax.axhline(tolerance, color="tab:red", lw=0.8, label="rank tolerance")
        ax.legend(fontsize=7)
    _log_scale(ax)
    ax.set_xlabel("direction (largest first)")
    ax.set_ylabel("singular value")
    axes_title(ax, "Jacobian singular values (dimensionless coordinates)", fontsize=9)
    return fig


def correlation_figure(names: Sequence[str], matrix: np.ndarray) -> Figure:
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
    axes_title(ax, "parameter correlation", fontsize=9)
    return fig


def histogram_figure(standardized: Mapping[str, np.ndarray], normal: bool) -> Figure:
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
