"""Bag reader selection (``reader: rosbags | rosbag2_py | auto``) and the rosbag2_py-backed
reader, against a FAKE ``rosbag2_py`` module that implements the documented API
(SequentialReader, StorageOptions, ConverterOptions, StorageFilter, get_all_topics_and_types,
has_next / read_next) on top of rosbags. rosbag2_py itself is not installable here: this
tests our use of its API, not the real library."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.recordings.bag_readers import choose_reader
from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.request import load_calibration_request
from fibril_calibration.recordings.sources import SourceError
from fibril_calibration.recordings.formats import open_source


def _fake_module(calls: list[Any], *, fail_open: bool = False,
                 metadata: dict[str, tuple[str, str]] | None = None) -> types.ModuleType:
    """``fail_open``: every open fails as for a missing storage plugin; ``metadata``: topic →
    (type, serialization format) reported instead of the bag's."""
    from rosbags.rosbag2 import Reader

    module = types.ModuleType("rosbag2_py")

    class StorageOptions:
        def __init__(self, uri: str, storage_id: str = "") -> None:
            self.uri, self.storage_id = uri, storage_id

    class ConverterOptions:
        def __init__(self, input_serialization_format: str,
                     output_serialization_format: str) -> None:
            self.input_serialization_format = input_serialization_format
            self.output_serialization_format = output_serialization_format

    class StorageFilter:
        def __init__(self, topics: list[str]) -> None:
            self.topics = topics

    class TopicMetadata:
        def __init__(self, name: str, type: str, serialization_format: str) -> None:
            self.name, self.type, self.serialization_format = name, type, serialization_format

    class SequentialReader:
        def open(self, storage: StorageOptions, converter: ConverterOptions) -> None:
            calls.append(("open", storage.uri, storage.storage_id,
                          converter.input_serialization_format,
                          converter.output_serialization_format))
            if fail_open:
                raise RuntimeError("Could not load/open plugin with storage id 'mcap'")
            try:  # rosbag2_py raises RuntimeError for what it cannot open
                self._bag = Reader(Path(storage.uri))
                self._bag.open()
            except Exception:  # noqa: BLE001
                raise RuntimeError("No storage could be initialized from the inputs.") from None
            self._filter: list[str] | None = None
            self._items: Any = None

        def get_all_topics_and_types(self) -> list[TopicMetadata]:
            return [TopicMetadata(c.topic, *(metadata or {}).get(c.topic, (c.msgtype, "cdr")))
                    for c in self._bag.connections]

        def set_filter(self, storage_filter: StorageFilter) -> None:
            calls.append(("filter", tuple(storage_filter.topics)))
            self._filter = storage_filter.topics

        def _iterator(self) -> Any:
            if self._items is None:
                wanted = [c for c in self._bag.connections
                          if self._filter is None or c.topic in self._filter]
                self._items = iter(list(self._bag.messages(connections=wanted)))
                self._next = next(self._items, None)
            return self._items

        def has_next(self) -> bool:
            self._iterator()
            return self._next is not None

        def read_next(self) -> tuple[str, bytes, int]:
            self._iterator()
            connection, timestamp, raw = self._next
            self._next = next(self._items, None)
            return connection.topic, bytes(raw), timestamp

        def close(self) -> None:
            self._bag.close()

    for item in (StorageOptions, ConverterOptions, StorageFilter, TopicMetadata,
                 SequentialReader):
        setattr(module, item.__name__, item)
    return module


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("bags")
    data = rig.recording(folder, duration_s=0.4)
    return {"data": data, "folder": folder,
            "mcap": rig.write_bag(folder / "bag-mcap", data, "mcap"),
            "sqlite3": rig.write_bag(folder / "bag-sqlite3", data, "sqlite3")}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setitem(sys.modules, "rosbag2_py", _fake_module(calls))
    return calls


def test_selection_without_rosbag2_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rosbag2_py", None)  # import fails
    assert choose_reader("rosbags", "r") == "rosbags"
    assert choose_reader("auto", "r") == "rosbags"
    with pytest.raises(ValueError, match="r: rosbag2_py does not import here"):
        choose_reader("rosbag2_py", "r")
    with pytest.raises(ValueError, match="expected one of rosbags, rosbag2_py, auto"):
        choose_reader("ros1", "r")


def test_selection_with_rosbag2_py(fake: list[Any]) -> None:
    assert choose_reader("rosbags", "r") == "rosbags"  # the default stays rosbags
    assert choose_reader("auto", "r") == "rosbag2_py"
    assert choose_reader("rosbag2_py", "r") == "rosbag2_py"


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_rosbag2_py_reader_gives_the_same_streams(bags: dict[str, Any], fake: list[Any],
                                                  storage: str) -> None:
    theirs = open_source(bags[storage], reader="rosbag2_py")
    ours = open_source(bags[storage])
    try:
        assert (theirs.reader, ours.reader) == ("rosbag2_py", "rosbags")
        assert theirs.topics == ours.topics
        for topic, field in (("/joint_states", "position[j2]"), ("/joint_states", "velocity"),
                             ("/joint_commands", "effort")):
            a = theirs.stream(topic=topic, field=field)
            b = ours.stream(topic=topic, field=field)
            np.testing.assert_array_equal(a.times_ns, b.times_ns)
            np.testing.assert_array_equal(a.values, b.values)
            assert a.components == b.components
    finally:
        theirs.close()
        ours.close()
    opened = [c for c in fake if c[0] == "open"]
    assert opened and all(c[1] == str(bags[storage]) and c[2] == "" and c[3:] == ("cdr", "cdr")
                          for c in opened)
    assert ("filter", ("/joint_states",)) in fake and ("filter", ("/joint_commands",)) in fake


def test_rosbag2_py_reader_errors_are_one_line(bags: dict[str, Any], fake: list[Any],
                                               tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match=r"cannot read recording .*empty.*rosbag2_py: No "
                                          r"storage"):
        open_source(tmp_path / "empty", "rosbag2", reader="rosbag2_py")
    with pytest.raises(SourceError, match="a csv log takes no reader"):
        path = tmp_path / "x.csv"
        path.write_text("t_s,a\n0,1\n")
        open_source(path, reader="rosbag2_py")


def test_request_reader_key(bags: dict[str, Any], fake: list[Any],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    data = bags["data"]
    doc = rig.request(data["manifest"], {"path": str(bags["mcap"]), "reader": "rosbag2_py"},
                      windows={"every": 0.2})
    request = load_calibration_request(rig.write_request(bags["folder"], doc))
    assert request.training[0].source["reader"] == "rosbag2_py"
    plain = rig.request(data["manifest"], {"path": str(bags["mcap"])}, windows={"every": 0.2})
    reference = load_calibration_request(rig.write_request(bags["folder"], plain, "plain.yaml"))
    assert reference.training[0].source["reader"] == "rosbags"
    for a, b in zip(request.training, reference.training):
        assert a.content_sha256 == b.content_sha256  # the same episodes either way
    monkeypatch.setitem(sys.modules, "rosbag2_py", None)
    with pytest.raises(CalibrationRequestError,
                       match=r"training\[0\]\.source\.reader: rosbag2_py does not import"):
        load_calibration_request(rig.write_request(bags["folder"], doc, "bad.yaml"))
    doc["training"][0]["source"]["reader"] = "ros1"
    with pytest.raises(CalibrationRequestError, match=r"source\.reader: expected one of"):
        load_calibration_request(rig.write_request(bags["folder"], doc, "bad.yaml"))


def test_auto_falls_back_to_rosbags_when_rosbag2_py_cannot_open_the_bag(
        bags: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A rosbag2_py that imports but lacks the storage plugin: reader: auto reads the bag with
    rosbags and says so; reader: rosbag2_py is a one-line error."""
    calls: list[Any] = []
    monkeypatch.setitem(sys.modules, "rosbag2_py", _fake_module(calls, fail_open=True))
    source = open_source(bags["mcap"], reader="auto")
    try:
        assert source.reader == "rosbags"
        assert "rosbag2_py could not open it" in source.reader_fallback
        assert source.stream(topic="/joint_states", field="position[j1]").values.shape[1] == 1
    finally:
        source.close()
    with pytest.raises(SourceError, match="cannot read recording .*Could not load/open plugin"):
        open_source(bags["mcap"], reader="rosbag2_py")
    data = bags["data"]
    doc = rig.request(data["manifest"], {"path": str(bags["mcap"]), "reader": "auto"},
                      windows={"every": 0.2})
    request = load_calibration_request(rig.write_request(bags["folder"], doc, "auto.yaml"))
    assert request.training[0].source["reader"] == "rosbags"
    assert "rosbag2_py could not open it" in request.training[0].source["reader_fallback"]


def test_serialization_and_types_are_checked_for_the_topics_read(
        bags: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic the request does not read may be in any serialization; a read topic rosbag2_py
    cannot give (not CDR, or a custom type it has no definition for) is an error with
    reader: rosbag2_py and a fallback to rosbags with reader: auto."""
    calls: list[Any] = []
    odd = {"/joint_commands": ("sensor_msgs/msg/JointState", "ros1_msgpack")}
    monkeypatch.setitem(sys.modules, "rosbag2_py", _fake_module(calls, metadata=odd))
    source = open_source(bags["mcap"], reader="rosbag2_py")
    try:
        source.stream(topic="/joint_states", field="position[j1]")  # not the odd topic: fine
        with pytest.raises(SourceError, match=r"reader rosbag2_py\): topic '/joint_commands' "
                                              r"is serialized as 'ros1_msgpack', not cdr"):
            source.stream(topic="/joint_commands", field="effort")
    finally:
        source.close()
    source = open_source(bags["mcap"], reader="auto")
    try:
        assert source.reader == "rosbag2_py"
        source.stream(topic="/joint_commands", field="effort")
        assert source.reader == "rosbags" and "ros1_msgpack" in source.reader_fallback
    finally:
        source.close()
    custom = {"/joint_states": ("my_robot/msg/ArmState", "cdr")}
    monkeypatch.setitem(sys.modules, "rosbag2_py", _fake_module(calls, metadata=custom))
    source = open_source(bags["mcap"], reader="auto")
    try:
        stream = source.stream(topic="/joint_states", field="position[j1]")
        assert stream.values.shape[1] == 1
        assert "my_robot/msg/ArmState, which is not a known type" in source.reader_fallback
    finally:
        source.close()
