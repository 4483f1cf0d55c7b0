"""Both CSV readers in one test: pyarrow's (when installed) and numpy's (pyarrow hidden).

``csv_reader`` runs a test once per reader; its value names the one in use. Hiding puts None in
``sys.modules`` for pyarrow (an import then fails as if it were not installed) and gives the
reader a fresh, empty import cache for the test (the real one is back after it).
"""

from __future__ import annotations

import functools
import sys

import pytest
from fibril_calibration.recordings import csv_arrow

READERS = ("pyarrow", "numpy")


def hide_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("pyarrow", "pyarrow.csv"):
        monkeypatch.setitem(sys.modules, name, None)
    fresh = functools.lru_cache(maxsize=1)(csv_arrow._load.__wrapped__)
    monkeypatch.setattr(csv_arrow, "_load", fresh)
    assert csv_arrow.arrow() is None


@pytest.fixture(params=READERS)
def csv_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pyarrow":
        pytest.importorskip("pyarrow.csv", reason="pyarrow is not installed (fast-csv extra)")
        assert csv_arrow.arrow() is not None
        monkeypatch.setattr(csv_arrow, "MIN_BYTES", 0)  # the tests' logs are small
    else:
        hide_pyarrow(monkeypatch)
    return str(request.param)
