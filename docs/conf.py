"""Sphinx configuration of the Fibril Sim documentation (``make docs`` → docs/_build/html).

Pages are MyST Markdown. The Reference pages under reference/generated/ are written from the
code when the build starts (_ext/fibril_reference.py); the packages are imported from the
repository, so the reference always describes this checkout.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path[:0] = [str(DOCS / "_ext")] + [str(REPO / p) for p in
                                        ("fibril_sim_core", "fibril_calibration",
                                         "fibril_sim_ros")]

project = "Fibril Sim"
author = "the Fibril Sim authors"
copyright = "the Fibril Sim authors"  # noqa: A001 - Sphinx's name
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "fibril_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "reference/generated/_fragments", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
html_theme = "alabaster"
html_title = "Fibril Sim"
autodoc_typehints = "description"


class _EmptySection(logging.Filter):
    """A section whose pages have not landed yet (its toctree glob matches nothing) is not an
    error under -W. Sphinx logs that warning without a type, so ``suppress_warnings`` cannot
    name it; every other warning still fails the build."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "didn't match any documents" not in str(record.msg)


def setup(app: object) -> None:
    logging.getLogger("sphinx.sphinx.directives.other").addFilter(_EmptySection())
