"""Recordings as robots write them, read as timestamped streams: rosbag2 / MCAP / sqlite3 bags
(``bag_source``, ``message_fields``, ``bag_readers``, ``mcap_integrity``), CSV logs
(``csv_layout``, ``csv_columns``), the lab's Franka
ring logs (``franka``), opening any of them (``formats``), fibril_sim traces (``traces``) and
per-signal time offsets (``time_offsets``).

The lowest layer above the shared vocabulary: nothing here knows the request or the solver.

The names below are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fibril_sim_core._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("BAG_READERS", "Rosbag2PyReader", "choose_reader"), ".bag_readers"),
    **dict.fromkeys(("open_source",), ".formats"),
    **dict.fromkeys(("FrankaSource", "RingTargets"), ".franka"),
    **dict.fromkeys(("BagSource",), ".bag_source"),
    **dict.fromkeys(("SOURCE_FORMATS", "CsvSource", "Source", "SourceError", "SourceInfo",
                     "Stream"),
                    ".sources"),
    **dict.fromkeys(("OffsetAwareBuilder", "OffsetPlan", "TimeOffsetTarget"), ".time_offsets"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from .bag_readers import BAG_READERS, Rosbag2PyReader, choose_reader
    from .formats import open_source
    from .franka import FrankaSource, RingTargets
    from .bag_source import BagSource
    from .sources import SOURCE_FORMATS, CsvSource, Source, SourceError, SourceInfo, Stream
    from .time_offsets import OffsetAwareBuilder, OffsetPlan, TimeOffsetTarget
