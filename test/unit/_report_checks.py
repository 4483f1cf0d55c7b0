"""Checks shared by the report tests: the page parses with the standard library's parser and
every figure it shows is a real, non-blank PNG beside it."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import numpy as np


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.images: list[str] = []
        self.scripts = 0
        self.links: list[str] = []
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if tag == "img":
            self.images.append(attributes["src"])
        elif tag == "script":
            self.scripts += 1
        elif tag in ("link",) or (tag == "a" and not attributes.get("href", "#").startswith("#")):
            self.links.append(attributes.get("href", ""))
        elif tag == "tr":
            self.rows.append([])
        elif tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(folder: Path) -> Page:
    page = Page()
    page.feed((folder / "index.html").read_text(encoding="utf-8"))
    page.close()
    return page


def png_pixels(path: Path) -> np.ndarray:
    """The decoded pixels (Pillow, which matplotlib brings); a broken PNG fails here."""
    from PIL import Image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name}: not a PNG"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"))


def check_figures(folder: Path, page: Page) -> None:
    assert page.images, "no figure on the page"
    assert page.scripts == 0 and not page.links, "the page must need no script or network"
    on_disk = sorted(p.name for p in folder.glob("*.png"))
    assert sorted(page.images) == on_disk
    for name in page.images:
        pixels = png_pixels(folder / name)
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
        assert float(np.var(pixels[..., :3])) > 50.0, f"{name} is blank"
