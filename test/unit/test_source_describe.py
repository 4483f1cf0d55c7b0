"""Sources describe themselves (issue 31 item 1): ``describe() -> SourceInfo`` and the common
calls every reader takes (``prefetch``, ``check_window``, ``sidecar_value``), so that the
mapping asks instead of probing for attributes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import _recording_rig as rig
import pytest
from fibril_calibration.recordings import SourceError, SourceInfo
from fibril_calibration.recordings.formats import open_source


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("describe")
    data = rig.recording(folder, duration_s=0.3)
    return {"bag": rig.write_bag(folder / "bag", data, "sqlite3"),
            "csv": rig.write_csv(folder / "log.csv", data)}


def test_a_csv_log_describes_itself(arm: dict[str, Path]) -> None:
    source = open_source(arm["csv"], time_column="t_s")
    info = source.describe()
    assert info == SourceInfo(arm["csv"], "csv", True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.format = "mcap"  # type: ignore[misc]  # frozen: the assignment must fail
    source.prefetch(["q1", "no_such_column"])  # one pass; a missing column is left to stream
    assert source.check_window(0, 10**8) is None
    with pytest.raises(SourceError, match="has no sidecar"):
        source.sidecar_value("q_init", None)


def test_a_bag_describes_its_reader_and_warnings(arm: dict[str, Path]) -> None:
    source = open_source(arm["bag"])
    try:
        info = source.describe()
        assert (info.format, info.tabular, info.reader, info.sidecar) == (
            "rosbag2", False, "rosbags", False)
        assert info.reader_fallback is None
        assert any("sqlite3 storage keeps no checksums" in w for w in info.warnings)
        assert info.ring_log is None and info.ring_targets is None and info.controller is None
    finally:
        source.close()
