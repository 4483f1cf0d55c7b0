"""Shared pieces of the HTML + PNG reports (calibration, experiments).

A report is one folder: ``index.html`` that opens from disk with no network and no JavaScript,
and every figure beside it as a PNG. matplotlib is optional: ``require_matplotlib`` fails at
start-up (before any work) with one line naming the package and the install command, and
figures are drawn on Agg ``Figure`` objects (no pyplot state, headless). The folder is written
under a temporary name and renamed into place: an error or SIGINT leaves no half report.
"""

from __future__ import annotations

import html
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from .errors import FibrilError

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn, not at start-up (optional,
    # and a third of a second that every fibril_sim command without --report would pay)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.transforms import BboxBase

__all__ = ["AggCanvas", "Raw", "ReportError", "ReportFolder", "agg_canvas", "axes_title",
           "check_report_folder", "escape", "few_ticks", "figure", "image", "note", "number",
           "page", "require_matplotlib", "table", "write_png"]

INSTALL_HINT = ("pip install 'fibril_calibration[report]' (or pip install matplotlib; "
                "apt: python3-matplotlib)")


class ReportError(FibrilError):
    """A report cannot be written (missing matplotlib, a folder that is not a report's)."""


def require_matplotlib(option: str = "--report") -> None:
    """Fail now, with one line, when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise ReportError(f"{option} needs the Python package matplotlib, which is not "
                          f"installed: {INSTALL_HINT}") from None


def figure(width: float = 8.0, height: float = 4.0, *,
           layout: Literal["constrained", "compressed", "tight"] | None = None) -> Figure:
    """A new Agg-backed matplotlib Figure (no pyplot, no display). Placed by hand
    (``subplots_adjust``) by default: constrained layout measures every label and costs as
    much as the drawing."""
    # here, not at the top: matplotlib is optional, and importing it costs every command
    # (fibril_sim, calibrate without --report) a third of a second at start-up
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=72, layout=layout)
    FigureCanvasAgg(fig)
    return fig


class AggCanvas(Protocol):
    """What the reports use of matplotlib's Agg canvas (whose methods are not annotated)."""

    def draw(self) -> None: ...

    def buffer_rgba(self) -> memoryview: ...

    def copy_from_bbox(self, bbox: BboxBase) -> object: ...

    def restore_region(self, region: object) -> None: ...


def agg_canvas(fig: Figure) -> AggCanvas:
    """The Agg canvas ``figure`` attached."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas
    if not isinstance(canvas, FigureCanvasAgg):
        raise TypeError(f"figure has a {type(canvas).__name__}, not the Agg canvas of figure()")
    return canvas


def axes_title(ax: Axes, text: str, fontsize: float = 9) -> None:
    """A title as plain text above the frame: ``Axes.set_title`` measures the axes'
    decorations again at every draw (a tenth of a second per panel)."""
    ax.text(0.5, 1.01, text, transform=ax.transAxes, ha="center", va="bottom",
            fontsize=fontsize)


def few_ticks(ax: Axes, x: bool = False, y: bool = True, count: int = 4) -> None:
    """At most ``count`` major ticks: a tick is two lines and a text, made and drawn anew."""
    from matplotlib.ticker import MaxNLocator

    for axis, wanted in ((ax.xaxis, x), (ax.yaxis, y)):
        if wanted:
            axis.set_major_locator(MaxNLocator(count))


def check_report_folder(path: Path, option: str = "--report") -> None:
    """Before any work: ``path`` is a new or empty folder, or an earlier report (replaced)."""
    if path.exists():
        if not path.is_dir():
            raise ReportError(f"{option} {str(path)!r} is a file, not a folder")
        entries = list(path.iterdir())
        if entries and not (path / "index.html").is_file():
            raise ReportError(f"{option} {str(path)!r} is a non-empty folder that holds no "
                              f"report (index.html); choose a new or empty folder")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ReportError(f"{option} {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ReportError(f"{option} {str(path)!r}: folder {str(parent)!r} is not writable")


class ReportFolder:
    """Figures and the page are written into a temporary sibling folder; ``commit`` renames
    it over ``path`` (an earlier report there is replaced), ``discard`` removes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        parent = path.absolute().parent
        self.staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=parent))
        self.figures: list[str] = []

    def save(self, fig: Figure, name: str) -> str:
        """Write ``fig`` as ``name``.png; returns the file name (relative to the page)."""
        filename = _save(fig, self.staging, name)
        self.figures.append(filename)
        return filename

    def reserve(self, name: str) -> Path:
        """Where the figure ``name``.png goes when its drawer writes the file itself."""
        self.figures.append(f"{name}.png")
        return self.staging / f"{name}.png"

    def commit(self, page_text: str) -> Path:
        (self.staging / "index.html").write_text(page_text, encoding="utf-8")
        os.chmod(self.staging, 0o755)
        old: Path | None = None
        if self.path.exists():
            old = self.path.with_name(f".{self.path.name}.old-{os.getpid()}")
            os.rename(self.path, old)
        os.rename(self.staging, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.path / "index.html"

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self) -> ReportFolder:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if self.staging.exists():
            self.discard()


def _save(fig: Figure, folder: Path, name: str) -> str:
    filename = f"{name}.png"
    canvas = agg_canvas(fig)
    canvas.draw()
    write_png(canvas, folder / filename)
    return filename


def write_png(canvas: AggCanvas, path: Path) -> None:
    """The canvas's pixels as a 256-colour PNG. A chart has few colours: the palette image
    is a third of the RGBA one's size and is encoded three times faster (zlib level 2: the
    default level spends about as long compressing as drawing), with no visible change."""
    from PIL import Image  # Pillow comes with matplotlib: optional, loaded to draw only

    pixels = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")
    pixels.quantize(256, method=Image.Quantize.FASTOCTREE).save(
        path, format="png", compress_level=2)


def escape(value: object) -> str:
    return html.escape(str(value), quote=True)


def number(value: object, digits: int = 4) -> str:
    """A number for a table cell (``n/a`` for None or non-finite)."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        return f"{value:.{digits}g}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *,
          classes: Sequence[str] | None = None) -> str:
    """An HTML table; cells are escaped unless given as ``Raw``."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{escape(classes[i])}"' if classes and classes[i] else ""
        cells = "".join(f"<td>{c if isinstance(c, Raw) else escape(c)}</td>" for c in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Raw(str):
    """Cell or section content that is already HTML."""


_STYLE = """
body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;color:#222;line-height:1.4}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f0f0f0}tr.warn td{background:#fff3cd}tr.bad td{background:#f8d7da}
tr.validation td{background:#eef6ff}.note{color:#555;font-style:italic}
img{max-width:100%;border:1px solid #ddd;margin:.3em 0}code{background:#f5f5f5}
.verdict{font-size:1.1em;font-weight:bold}nav a{margin-right:.8em}
"""


def page(title: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole page: ``sections`` are (anchor, heading, HTML body); a contents line on top.
    Inline CSS only: nothing is fetched when it opens."""
    nav = " ".join(f'<a href="#{escape(a)}">{escape(h)}</a>' for a, h, _ in sections)
    body = "\n".join(f'<section id="{escape(a)}"><h2>{escape(h)}</h2>\n{b}\n</section>'
                     for a, h, b in sections)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head>\n<body>"
            f"<h1>{escape(title)}</h1>\n<nav>{nav}</nav>\n{body}\n</body></html>\n")


def image(filename: str, alt: str) -> str:
    return f'<img src="{escape(filename)}" alt="{escape(alt)}">'


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'
