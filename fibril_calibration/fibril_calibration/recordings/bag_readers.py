"""Which library reads a bag: rosbags (the default) or ROS 2's own ``rosbag2_py``.

A bag source's ``reader`` (request ``sources: {name: {path: ..., reader: ...}}``):

* ``rosbags`` (default): the pure-Python reader; works everywhere, no ROS installation;
* ``rosbag2_py``: ROS 2's reader (``SequentialReader``), for storage plugins or bag versions
  only a ROS installation reads; a request error when ``import rosbag2_py`` fails;
* ``auto``: ``rosbag2_py`` when it imports, otherwise rosbags; and rosbags after all when
  rosbag2_py cannot open the bag (e.g. a missing storage plugin) or cannot give a topic the
  request reads (not CDR, or a message type outside the known ones: rosbag2_py gives no
  embedded definitions). The episode's ``source.reader`` then says ``rosbags`` and
  ``source.reader_fallback`` why.

Both give ``BagSource`` the same thing: connections (topic, type) and the serialized CDR bytes
of each message with its log time; decoding stays with the shared typestore, so a stream reads
the same with either. rosbag2_py does not expose the bag's embedded message definitions
through the documented API used here, so its bags decode with the known types (ROS 2 base
types and fibril_msgs) only.

``Rosbag2PyReader`` uses only rosbag2_py's documented Python API: ``SequentialReader()``,
``StorageOptions(uri=..., storage_id=...)``, ``ConverterOptions(input_serialization_format=
"cdr", output_serialization_format="cdr")``, ``reader.open(storage, converter)``,
``reader.get_all_topics_and_types()`` (``name``, ``type``, ``serialization_format``),
``reader.has_next()`` and ``reader.read_next() -> (topic, bytes, log time ns)``; a
``StorageFilter(topics=[...])`` through ``set_filter`` when the module has it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Protocol

__all__ = ["BAG_READERS", "Rosbag2PyReader", "choose_reader", "import_rosbag2_py"]

BAG_READERS = ("rosbags", "rosbag2_py", "auto")
_STORAGE_IDS = {"rosbag2": "", "mcap": "mcap", "sqlite3": "sqlite3"}  # "": rosbag2 decides


def import_rosbag2_py() -> ModuleType | None:
    """The ``rosbag2_py`` module, or None when it does not import here."""
    try:
        return importlib.import_module("rosbag2_py")
    except Exception:  # noqa: BLE001 - ImportError, or a broken ROS environment
        return None


def choose_reader(requested: str, label: str) -> str:
    """``rosbags`` or ``rosbag2_py`` for a source's ``reader`` (``label`` names it in errors).
    Raises ValueError with a one-line reason."""
    if requested not in BAG_READERS:
        raise ValueError(f"{label}: expected one of {', '.join(BAG_READERS)}, got {requested!r}")
    if requested == "rosbags":
        return "rosbags"
    available = import_rosbag2_py() is not None
    if requested == "rosbag2_py" and not available:
        raise ValueError(f"{label}: rosbag2_py does not import here (it comes with a ROS 2 "
                         f"installation: source /opt/ros/<distro>/setup.bash); use reader: "
                         f"rosbags or auto")
    return "rosbag2_py" if available else "rosbags"


@dataclass(frozen=True)
class _Definition:
    """No embedded definition (what rosbags calls a connection's msgdef)."""

    format: object = None
    data: str = ""


@dataclass(frozen=True)
class Connection:
    """One topic of the bag, as ``BagSource`` uses a rosbags connection."""

    id: int
    topic: str
    msgtype: str
    msgdef: _Definition = _Definition()
    serialization_format: str = "cdr"


class _TopicMetadata(Protocol):
    """rosbag2_py's TopicMetadata, as far as it is read here."""

    name: str
    type: str


class _SequentialReader(Protocol):
    """rosbag2_py's SequentialReader (untyped: a ROS installation's), as far as it is used
    here (``set_filter`` and ``close`` are probed: not every distribution has them)."""

    def open(self, storage_options: object, converter_options: object, /) -> None: ...
    def get_all_topics_and_types(self) -> list[_TopicMetadata]: ...
    def has_next(self) -> bool: ...
    def read_next(self) -> tuple[str, bytes, int]: ...


class Rosbag2PyReader:
    """A bag read with rosbag2_py, behind the subset of rosbags' Reader that BagSource uses
    (``open``, ``connections``, ``messages(connections=...)``, ``close``)."""

    def __init__(self, path: Path, format: str, module: ModuleType | None = None) -> None:
        self.path = path
        found = module or import_rosbag2_py()
        if found is None:
            raise OSError("rosbag2_py does not import here")
        self._module = found  # rosbag2_py: untyped (a ROS installation's)
        self._storage_id = _STORAGE_IDS.get(format, "")
        self.connections: list[Connection] = []

    def _reader(self) -> _SequentialReader:
        m = self._module
        reader: _SequentialReader = m.SequentialReader()
        try:
            reader.open(m.StorageOptions(uri=str(self.path), storage_id=self._storage_id),
                        m.ConverterOptions(input_serialization_format="cdr",
                                           output_serialization_format="cdr"))
        except RuntimeError as exc:  # what rosbag2_py raises for a bag it cannot open
            raise ValueError(f"rosbag2_py: {exc}") from None
        return reader

    def open(self) -> None:
        reader = self._reader()
        found = []
        for n, topic in enumerate(reader.get_all_topics_and_types()):
            # the serialization is checked for the topics a request reads (BagSource), not here
            fmt = getattr(topic, "serialization_format", "cdr") or "cdr"
            found.append(Connection(n, str(topic.name), str(topic.type),
                                    serialization_format=str(fmt)))
        self.connections = found
        _close(reader)

    def messages(self, connections: Sequence[Connection] | None = None
                 ) -> Iterator[tuple[Connection, int, bytes]]:
        """(connection, log time ns, CDR bytes) of the given topics' messages, in bag order."""
        wanted = {c.topic: c for c in (connections if connections is not None
                                       else self.connections)}
        reader = self._reader()
        try:
            storage_filter = getattr(self._module, "StorageFilter", None)
            if storage_filter is not None and hasattr(reader, "set_filter"):
                reader.set_filter(storage_filter(topics=list(wanted)))
            while reader.has_next():
                topic, data, timestamp = reader.read_next()
                connection = wanted.get(topic)
                if connection is not None:
                    yield connection, int(timestamp), bytes(data)
        except RuntimeError as exc:  # what rosbag2_py raises for a storage failure
            raise ValueError(f"rosbag2_py: {exc}") from None
        finally:
            _close(reader)

    def close(self) -> None:
        """Readers are opened per pass and closed after it: nothing stays open."""


def _close(reader: object) -> None:
    close = getattr(reader, "close", None)
    if close is not None:
        close()
