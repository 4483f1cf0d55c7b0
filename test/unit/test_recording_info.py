"""``fibril_sim recording info``: every kind of bag the suite writes described from its summary
and index, checked against rosbags reading every message; field trees in the request's syntax;
CSV columns; bags without message definitions (issue 24 items 1, 5)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.recordings.formats import open_source
from fibril_calibration.recordings.recording_info import CsvInfo, field_tree, recording_info
from fibril_calibration.recordings.sources import SourceError

from fibril_sim_core import SimulationBuilder
from fibril_sim_core.trace import TraceWriter

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config/examples/drivetrain/simulation.yaml"

LEG_MSG = """\
# one leg's joints
uint8 MODE_IDLE=0
uint8 MODE_RUN=1
string[] name
float64[] position
float64[] velocity
geometry_msgs/Vector3 foot_force
geometry_msgs/Quaternion imu
uint8 mode
"""


def _leg_store() -> Any:
    from rosbags.typesys import get_types_from_msg
    from rosbags.typesys.store import Typestore

    base = rig.typestore()
    store = Typestore()
    store.fielddefs.update(base.fielddefs)
    store.types.update(base.types)
    store.register(get_types_from_msg(LEG_MSG, "leg_msgs/msg/LegState"))
    return store


def _leg_topic(data: dict[str, Any]) -> Any:
    """/leg (leg_msgs/LegState, a custom type) carrying the arm's logged joint states."""
    def add(writer: Any, _store: Any) -> list[tuple[int, Any, Any]]:
        store = _leg_store()
        Leg = store.types["leg_msgs/msg/LegState"]
        Vector3 = store.types["geometry_msgs/msg/Vector3"]
        Quaternion = store.types["geometry_msgs/msg/Quaternion"]
        conn = writer.add_connection("/leg", "leg_msgs/msg/LegState", typestore=store)
        rows = []
        for t, q, dq in zip(data["log_times"].tolist(), data["q"], data["dq"]):
            msg = Leg(name=list(rig.JOINTS), position=np.array(q), velocity=np.array(dq),
                      foot_force=Vector3(x=0.0, y=0.0, z=1.0),
                      imu=Quaternion(x=0.0, y=0.0, z=0.0, w=1.0), mode=1)
            rows.append((rig.EPOCH + t, conn, bytes(store.serialize_cdr(msg, conn.msgtype))))
        return rows
    return add


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("info")
    data = rig.recording(folder)
    out: dict[str, Any] = {"data": data, "folder": folder}
    out["mcap"] = rig.write_bag(folder / "bag-mcap", data, "mcap", extra=_leg_topic(data))
    out["sqlite3"] = rig.write_bag(folder / "bag-sqlite3", data, "sqlite3",
                                   extra=_leg_topic(data))
    out["raw.mcap"] = rig.raw_mcap(out["mcap"], folder / "raw.mcap")
    out["raw.db3"] = folder / "raw.db3"
    shutil.copyfile(next(out["sqlite3"].glob("*.db3")), out["raw.db3"])
    out["unindexed.mcap"] = _without_summary(out["raw.mcap"], folder / "unindexed.mcap")
    out["no-metadata.db3"] = folder / "no-metadata.db3"  # counted by one pass over the rows
    shutil.copyfile(out["raw.db3"], out["no-metadata.db3"])
    db = sqlite3.connect(out["no-metadata.db3"])
    with db:
        db.execute("DELETE FROM metadata")
    db.close()
    plan = SimulationBuilder().build(DRIVETRAIN)
    with TraceWriter(folder / "trace", provenance={}, layout={}) as trace:
        instance = plan.create_instance(seed=1, trace=trace, collect=False)
        instance.advance(300)
    out["trace"] = folder / "trace"
    out["imu_odometry"] = _imu_odometry(folder / "imu-odom")
    return out


def _without_summary(raw: Path, target: Path) -> Path:
    """The MCAP file cut before its summary, closed by a footer that points to none."""
    data = raw.read_bytes()
    footer = len(data) - 8 - 29
    summary = struct.unpack("<Q", data[footer + 9:footer + 17])[0]
    assert summary
    target.write_bytes(data[:summary] + bytes([0x02]) + struct.pack("<Q", 20) +
                       struct.pack("<QQI", 0, 0, 0) + data[-8:])
    return target


def _imu_odometry(path: Path) -> Path:
    from rosbags.rosbag2 import Writer

    store = rig.typestore()
    Imu, Odometry = store.types["sensor_msgs/msg/Imu"], store.types["nav_msgs/msg/Odometry"]
    with Writer(path, version=9) as writer:
        imu = writer.add_connection("/imu", Imu.__msgtype__, typestore=store)
        odom = writer.add_connection("/odom", Odometry.__msgtype__, typestore=store)
        for n in range(20):
            t = rig.EPOCH + n * 5_000_000
            msg = store.types  # built below, per type
            header = msg["std_msgs/msg/Header"](
                stamp=msg["builtin_interfaces/msg/Time"](sec=t // 10**9, nanosec=t % 10**9),
                frame_id="base")
            v3 = msg["geometry_msgs/msg/Vector3"]
            quat = msg["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)
            writer.write(imu, t, store.serialize_cdr(Imu(
                header=header, orientation=quat, orientation_covariance=np.zeros(9),
                angular_velocity=v3(x=0.0, y=0.0, z=0.1),
                angular_velocity_covariance=np.zeros(9),
                linear_acceleration=v3(x=0.0, y=0.0, z=9.8),
                linear_acceleration_covariance=np.zeros(9)), Imu.__msgtype__))
            if n % 2 == 0:
                pose = msg["geometry_msgs/msg/PoseWithCovariance"](
                    pose=msg["geometry_msgs/msg/Pose"](
                        position=msg["geometry_msgs/msg/Point"](x=0.1 * n, y=0.0, z=0.0),
                        orientation=quat), covariance=np.zeros(36))
                twist = msg["geometry_msgs/msg/TwistWithCovariance"](
                    twist=msg["geometry_msgs/msg/Twist"](linear=v3(x=1.0, y=0.0, z=0.0),
                                                         angular=v3(x=0.0, y=0.0, z=0.0)),
                    covariance=np.zeros(36))
                writer.write(odom, t + 1000, store.serialize_cdr(Odometry(
                    header=header, child_frame_id="base_link", pose=pose, twist=twist),
                    Odometry.__msgtype__))
    return path


def _rosbags_counts(path: Path) -> dict[str, tuple[str, int, int, int, float]]:
    """What rosbags reads message by message: topic -> (type, count, first, last, median
    interval)."""
    from rosbags.rosbag2 import Reader

    times: dict[str, list[int]] = {}
    types: dict[str, str] = {}
    with Reader(path) as reader:
        for connection in reader.connections:
            types[connection.topic] = connection.msgtype
            times.setdefault(connection.topic, [])
        for connection, t, _ in reader.messages():
            times[connection.topic].append(t)
    out = {}
    for topic, stamps in times.items():
        ordered = np.sort(np.array(stamps, dtype=np.int64))
        step = float(np.median(np.diff(ordered))) if ordered.size > 1 else float("nan")
        out[topic] = (types[topic], ordered.size, int(ordered[0]), int(ordered[-1]), step)
    return out


@pytest.mark.parametrize("name", ["mcap", "sqlite3", "raw.mcap", "raw.db3", "unindexed.mcap",
                                  "no-metadata.db3", "trace", "imu_odometry"])
def test_info_counts_equal_rosbags_reading_every_message(bags: dict[str, Any],
                                                         name: str) -> None:
    path = bags[name]
    info = recording_info(path)
    reference = _rosbags_counts(bags["raw.mcap"] if name == "unindexed.mcap" else path)
    assert {t.topic for t in info.topics} == set(reference)
    start = min(r[2] for r in reference.values())
    assert info.start_ns == start
    assert info.messages == sum(r[1] for r in reference.values())
    for topic in info.topics:
        msgtype, count, first, last, step = reference[topic.topic]
        assert (topic.type, topic.count) == (msgtype, count), topic
        assert topic.first_s == pytest.approx((first - start) / 1e9, abs=1e-9)
        assert topic.last_s == pytest.approx((last - start) / 1e9, abs=1e-9)
        if count > 1:
            assert topic.rate_hz == pytest.approx(1e9 / step, rel=1e-9)
    assert info.method == ("scan" if name == "unindexed.mcap" else "index")


def test_definitions_embedded_known_or_missing(bags: dict[str, Any], tmp_path: Path) -> None:
    leg = {t.topic: t.definition for t in recording_info(bags["mcap"]).topics}
    assert leg["/leg"] == "embedded" and leg["/joint_states"] == "embedded"
    stripped = _strip_definitions(bags["raw.db3"], tmp_path / "stripped.db3")
    found = {t.topic: t.definition for t in recording_info(stripped).topics}
    assert found == {"/joint_commands": "known", "/joint_states": "known", "/leg": "missing"}
    msg_dir = _msg_dir(tmp_path)
    found = {t.topic: t.definition for t in recording_info(stripped, types=[msg_dir]).topics}
    assert found["/leg"] == "known"


def _strip_definitions(db3: Path, target: Path) -> Path:
    """A sqlite3 bag that carries no message definitions (as Humble's rosbag2 writes)."""
    if target != db3:
        shutil.copyfile(db3, target)
    db = sqlite3.connect(target)
    with db:
        db.execute("DELETE FROM message_definitions")
    db.close()
    return target


def _msg_dir(folder: Path) -> Path:
    msg = folder / "leg_msgs" / "msg"
    msg.mkdir(parents=True)
    (msg / "LegState.msg").write_text(LEG_MSG)
    return msg


def test_field_trees_in_the_request_syntax(bags: dict[str, Any]) -> None:
    msgtype, lines = field_tree(bags["mcap"], "/joint_states")
    paths = [line.path for line in lines]
    assert msgtype == "sensor_msgs/msg/JointState"
    # the element names come from the first message (the log names j2 before j1)
    assert paths == ["header.stamp.sec", "header.stamp.nanosec", "header.frame_id", "name",
                     "position[j2]", "position[j1]", "velocity[j2]", "velocity[j1]",
                     "effort[<name>]"]
    _, lines = field_tree(bags["imu_odometry"], "/imu")
    imu = {line.path: line for line in lines}
    assert "quaternion" in imu["orientation"].note
    assert "vector" in imu["angular_velocity"].note
    assert imu["orientation_covariance"].type == "float64[9]"
    assert "linear_acceleration.z" in imu
    _, lines = field_tree(bags["imu_odometry"], "/odom")
    odom = {line.path: line for line in lines}
    assert "quaternion" in odom["pose.pose.orientation"].note
    assert {"pose.pose.position.x", "twist.twist.linear.x", "child_frame_id"} <= set(odom)
    # a custom type embedded in the bag: fields, no constants (MODE_IDLE, MODE_RUN)
    msgtype, lines = field_tree(bags["mcap"], "/leg")
    paths = [line.path for line in lines]
    assert msgtype == "leg_msgs/msg/LegState"
    assert paths == ["name", "position[j1]", "position[j2]", "velocity[j1]", "velocity[j2]",
                     "foot_force", "foot_force.x", "foot_force.y", "foot_force.z", "imu",
                     "imu.x", "imu.y", "imu.z", "imu.w", "mode"]
    # every listed path streams through the request's own field reader
    source = open_source(bags["mcap"])
    try:
        for path in ("position[j2]", "foot_force", "imu", "mode", "foot_force.z"):
            assert len(source.stream(topic="/leg", field=path)) == bags["data"]["q"].shape[0]
    finally:
        source.close()


def test_cli_text_json_and_ros2_executable(bags: dict[str, Any]) -> None:
    env_python = [sys.executable, "-m", "fibril_sim_core.cli"]
    done = subprocess.run([*env_python, "recording", "info", str(bags["mcap"]), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert {t["topic"] for t in document["topics"]} == {"/joint_commands", "/joint_states",
                                                        "/leg"}
    done = subprocess.run([*env_python, "recording", "info", str(bags["mcap"]), "--fields",
                           "/nope"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "has no topic '/nope'" in done.stderr and "/joint_states" in done.stderr
    from fibril_calibration.recording_cli import main

    assert main([str(bags["sqlite3"])]) == 0


def test_a_long_topic_list_is_never_cut(tmp_path: Path) -> None:
    """A bag with 300 topics: the wrong-topic error counts them and points to recording info
    (a one-line error is cut at 1000 characters; a list cut mid-way misleads)."""
    from rosbags.rosbag2 import Writer

    store = rig.typestore()
    Float64 = store.types["std_msgs/msg/Float64"]
    path = tmp_path / "many"
    with Writer(path, version=9) as writer:
        for n in range(300):
            conn = writer.add_connection(f"/robot/sensor_{n:03d}/value", Float64.__msgtype__,
                                         typestore=store)
            writer.write(conn, rig.EPOCH + n, store.serialize_cdr(Float64(data=1.0),
                                                                  Float64.__msgtype__))
    source = open_source(path)
    try:
        with pytest.raises(SourceError) as info:
            source.stream(topic="/robot/sensor/value", field="data")
    finally:
        source.close()
    text = str(info.value)
    assert "its 300 topics (list them: fibril_sim recording info" in text
    assert len(text) < 1000
    assert len(recording_info(path).topics) == 300


def test_csv_info_columns_rate_gaps_and_bad_cells(tmp_path: Path) -> None:
    path = tmp_path / "state.csv"
    lines = ["timestamp;q1;q2;note"]
    t = 1763146355421617551
    for n in range(100):
        t += 2_000_000 if n != 50 else 40_000_000  # one 40 ms gap: row 51 (line 52)
        q1 = "" if n == 10 else ("nan" if n == 11 else f"{0.01 * n:.3f}")
        q2 = "err" if n == 20 else f"{-0.01 * n:.3f}"
        lines.append(f"{t};{q1};{q2};ok")
    path.write_text("\n".join(lines) + "\n")
    info = recording_info(path)
    assert isinstance(info, CsvInfo)
    assert (info.delimiter, info.header, info.rows) == (";", True, 100)
    assert (info.time_column, info.time_unit) == ("timestamp", "ns")  # 19 digits: ns epoch
    assert info.rate_hz == pytest.approx(500.0)
    assert info.gap_count == 1 and info.gaps[0][0] == 52 and info.gaps[0][2] == \
        pytest.approx(0.04)
    columns = {c.name: c for c in info.columns}
    assert (columns["q1"].empty_or_nan, columns["q1"].non_numeric) == (2, 0)
    assert (columns["q2"].non_numeric, columns["q2"].first_bad_line,
            columns["q2"].first_bad_cell) == (1, 22, "err")
    assert columns["note"].non_numeric == 100
    headerless = tmp_path / "cmd.csv"
    headerless.write_text("\n".join("\t".join([str(1763146355421617551 + n * 10**6), "0.5"])
                                    for n in range(10)) + "\n")
    info = recording_info(headerless)
    assert (info.delimiter, info.header, info.rows, info.time_column) == ("\t", False, 10, None)


def test_csv_info_with_two_time_columns_says_which_and_how_to_pick(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CSV with ``time`` and ``t_s``: recording info says the time column is ambiguous,
    names both and how a request picks one (it said "no column named t_s, time, ..."); the
    calibration request's own error names both too."""
    from fibril_calibration.recording_cli import main
    from fibril_calibration.recordings.formats import open_source
    from fibril_calibration.recordings.recording_info import as_dict

    path = tmp_path / "both.csv"
    path.write_text("time,t_s,q1\n" + "".join(f"{1763146355421617551 + n * 10**6},"
                                               f"{n / 1000},{0.1 * n}\n" for n in range(10)))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert ("time       ambiguous: columns 'time' and 't_s' both name the time; a request "
            "picks one with time_column: (on its source)") in out, out
    assert "no column named" not in out
    with pytest.raises(SourceError) as error:
        open_source(path)
    text = str(error.value)
    assert "its time column is ambiguous: columns 'time' and 't_s' both name the time" in text
    assert "pick one with time_column:" in text
    info = recording_info(path)
    assert isinstance(info, CsvInfo)
    assert info.time_column is None and info.time_candidates == ("time", "t_s")
    assert as_dict(info)["time_candidates"] == ("time", "t_s")
    # no time-named column at all: the old wording
    path.write_text("stamp,q1\n1,0.1\n2,0.2\n")
    assert main([str(path)]) == 0
    assert "no column named t_s, time, timestamp" in capsys.readouterr().out


def test_a_bag_without_definitions_says_how_to_give_one(bags: dict[str, Any], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 5: a sqlite3 bag whose custom type has no definition in it: the request error
    names the type and both ways to give it; a source's types: [msg_dir] or a ROS
    installation's share folder (AMENT_PREFIX_PATH) then decode it."""
    bag = tmp_path / "bag"
    shutil.copytree(bags["sqlite3"], bag)
    _strip_definitions(next(bag.glob("*.db3")), next(bag.glob("*.db3")))
    manifest = rig.write_arm(tmp_path)
    doc = rig.request(manifest, {"path": str(bag)})
    episode = doc["training"][0]
    episode["signals"] = {f"q_{j}": {"topic": "/leg", "field": f"position[{j}]",
                                     "alignment": "linear", "residual_scale": 1e-3}
                          for j in rig.JOINTS}
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    text = rig.request_fails(tmp_path, doc, "topic '/leg'", "no definition for "
                             "leg_msgs/msg/LegState", "types: [path/to/msg_dir, ...]",
                             "AMENT_PREFIX_PATH")
    assert "source.path" in text or "path" in text
    msg_dir = _msg_dir(tmp_path / "defs")
    episode["source"]["types"] = [str(msg_dir)]
    request = rig.load_request(tmp_path, doc)
    (spec,) = request.training
    signal = spec.signal("q_j1")
    np.testing.assert_allclose(signal.values[:, 0], bags["data"]["q"][:, 0])
    # the same from a ROS installation's share folder
    del episode["source"]["types"]
    prefix = tmp_path / "install"
    (prefix / "share").mkdir(parents=True)
    shutil.copytree(tmp_path / "defs" / "leg_msgs", prefix / "share" / "leg_msgs")
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    (spec,) = rig.load_request(tmp_path, doc).training
    np.testing.assert_allclose(spec.signal("q_j2").values[:, 0], bags["data"]["q"][:, 1])
    # a types folder that does not exist is the source's error
    episode["source"]["types"] = [str(tmp_path / "nowhere")]
    rig.request_fails(tmp_path, doc, "source.types", "does not exist")
