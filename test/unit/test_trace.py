"""Trace writer / reader / query: round trip, interoperability, robustness, selectors."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from fibril_sim_core.errors import TraceError
from fibril_sim_core.records import (
    ActuatorApplication,
    DeviceOutput,
    FrameTiming,
    IngressRecord,
    StateSnapshot,
)
from fibril_sim_core.trace import TraceWriter, actuator_topic, device_topic
from fibril_sim_core.trace.query import TraceQueryError, query, to_csv, to_json
from fibril_sim_core.trace.reader import TraceReader

from fibril_sim_core.trace import msgtypes

from _patience import patience

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "fibril_sim_core"
TIMESTEP_NS = 2_000_000
SESSION_OFFSET_NS = 5_000_000_000  # session time of episode 0's start (SessionTime != EpisodeTime)

# A hand-made layout: free-floating chassis with a hinge wheel, a ball gimbal and a slide lift.
LAYOUT = {
    "timestep_ns": TIMESTEP_NS,
    "bodies": ["world", "chassis", "wheel", "gimbal", "lift"],
    "joints": [
        {"name": "root", "type": "free", "qposadr": 0, "dofadr": 0},
        {"name": "wheel_joint", "type": "hinge", "qposadr": 7, "dofadr": 6},
        {"name": "gimbal_joint", "type": "ball", "qposadr": 8, "dofadr": 7},
        {"name": "lift_joint", "type": "slide", "qposadr": 12, "dofadr": 10},
    ],
    "sensors": [{"name": "wheel_pos", "adr": 0, "dim": 1}, {"name": "gyro", "adr": 1, "dim": 3}],
    "actuators": ["drive", "lift_motor"],
    "endpoints": {"motor/command": "drive", "lift/command": "lift_motor"},
    "devices": {
        "wheel_encoder": {
            "sample_type": "fibril_sim/encoder_sample/v1",
            "component_names": ["counts"],
        },
        "chassis/imu": {
            "sample_type": "fibril_sim/imu_sample/v1",
            "component_names": ["gyro_x", "gyro_y", "gyro_z"],
        },
    },
}
NQ, NV, NBODY, NSENSOR = 13, 11, 5, 4
PROVENANCE = {
    "fibril_sim": "0.1.0",
    "seed": 7,
    "manifest_sha256": "ab" * 32,
    "nested": {"x": [1, 2]},
}


def _snapshot(episode: int, tick: int, session_ns: int) -> StateSnapshot:
    base = episode * 1000 + tick
    return StateSnapshot(
        episode=episode,
        tick=tick,
        time_ns=tick * TIMESTEP_NS,
        session_time_ns=session_ns,
        qpos=np.arange(NQ, dtype=float) + base,
        qvel=-np.arange(NV, dtype=float) - base,
        act=np.array([0.5 * tick]),
        ctrl=np.array([0.1 * tick, -0.1 * tick]),
        actuator_force=np.array([2.0 * base, -3.0 * base]),
        sensordata=np.arange(NSENSOR, dtype=float) * 10 + base,
        xpos=np.arange(NBODY * 3, dtype=float).reshape(NBODY, 3) + base,
        xquat=np.arange(NBODY * 4, dtype=float).reshape(NBODY, 4) - base,
    )


def make_records(ticks: int = 20) -> list:
    """Two episodes of every record type, in session-time order."""
    records: list = []
    session_start = SESSION_OFFSET_NS
    acceptance = 0
    for episode in (0, 1):
        for tick in range(ticks):
            t = tick * TIMESTEP_NS
            s = session_start + t
            if tick % 4 == 0:
                rejected = tick == 8
                records.append(
                    IngressRecord(
                        episode=episode,
                        source_id="motor/command",
                        source_sequence=tick // 4,
                        payload_type="fibril_sim/motor_command/v1",
                        payload_json=json.dumps({"mode": "voltage", "value": tick * 0.5}),
                        accepted=not rejected,
                        commit_tick=-1 if rejected else tick,
                        acceptance_sequence=0 if rejected else acceptance,
                        reject_reason="stale sequence" if rejected else "",
                        session_time_ns=s,
                    )
                )
                acceptance += 0 if rejected else 1
            for endpoint, actuator in LAYOUT["endpoints"].items():
                records.append(
                    ActuatorApplication(
                        episode=episode,
                        tick=tick,
                        time_ns=t,
                        session_time_ns=s,
                        endpoint=endpoint,
                        actuator=actuator,
                        mode="voltage",
                        commanded=0.5 * tick,
                        released=0.5 * max(tick - 1, 0),
                        applied=0.25 * max(tick - 1, 0) + episode,
                    )
                )
            records.append(_snapshot(episode, tick, s))
            # The encoder's sample acquired at tick-1 is delivered now (one tick of latency).
            if tick >= 1:
                records.append(
                    DeviceOutput(
                        episode=episode,
                        device_id="wheel_encoder",
                        sample_type="fibril_sim/encoder_sample/v1",
                        acquisition_tick=tick - 1,
                        acquisition_time_ns=t - TIMESTEP_NS,
                        delivery_time_ns=t,
                        session_acquisition_time_ns=s - TIMESTEP_NS,
                        session_delivery_time_ns=s,
                        values=np.array([float(10 * tick + episode)]),
                        component_names=("counts",),
                        frame_id="",
                    )
                )
            if tick % 2 == 0:
                records.append(
                    DeviceOutput(
                        episode=episode,
                        device_id="chassis/imu",
                        sample_type="fibril_sim/imu_sample/v1",
                        acquisition_tick=tick,
                        acquisition_time_ns=t,
                        delivery_time_ns=t,
                        session_acquisition_time_ns=s,
                        session_delivery_time_ns=s,
                        values=np.array([0.1, 0.2, 0.3]) * tick + episode,
                        component_names=("gyro_x", "gyro_y", "gyro_z"),
                        frame_id="imu_link",
                    )
                )
            if tick % 5 == 4:
                records.append(
                    FrameTiming(
                        episode=episode,
                        tick=tick,
                        episode_time_ns=t,
                        session_time_ns=s,
                        wall_step_time=1e-4 * tick,
                        real_time_factor=1.0 + tick / 100,
                    )
                )
        session_start += ticks * TIMESTEP_NS  # SessionTime keeps going across the reset
    return records


def field_names(record: object) -> tuple[str, ...]:
    """Field names of a record, whether a dataclass or a NamedTuple (DeviceOutput)."""
    if dataclasses.is_dataclass(record):
        return tuple(f.name for f in dataclasses.fields(record))
    return record._fields  # type: ignore[attr-defined]


def replace(record: object, **changes: object) -> object:
    if dataclasses.is_dataclass(record):
        return dataclasses.replace(record, **changes)  # type: ignore[type-var]
    return record._replace(**changes)  # type: ignore[attr-defined]


def assert_records_equal(expected: list, actual: list) -> None:
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual, strict=True):
        assert type(got) is type(want)
        for name in field_names(want):
            a, b = getattr(want, name), getattr(got, name)
            if isinstance(a, np.ndarray):
                assert isinstance(b, np.ndarray), name
                assert b.dtype == np.float64, name
                np.testing.assert_array_equal(b, a, err_msg=name)
                assert b.shape == a.shape, name
            else:
                assert b == a, (name, want, got)
                assert type(b) is type(a), (name, type(a), type(b))


def write_trace(path: Path, records: list) -> Path:
    with TraceWriter(path, provenance=PROVENANCE, layout=LAYOUT) as writer:
        for record in records:
            writer.write(record)
    return path


@pytest.fixture(scope="module")
def records() -> list:
    return make_records()


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory, records: list) -> Path:
    return write_trace(tmp_path_factory.mktemp("trace") / "run", records)


def pymcap_cli() -> str | None:
    """The pymcap-cli console script: next to this interpreter first, then on PATH."""
    beside = Path(sys.executable).parent / "pymcap-cli"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("pymcap-cli")


def assert_doctor_ok(mcap: Path) -> None:
    cli = pymcap_cli()
    if cli is None:
        pytest.skip("pymcap-cli is not installed (pip install pymcap-cli) - MCAP doctor not run")
    proc = subprocess.run(
        [cli, "doctor", "--format", "jsonl", str(mcap)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = next(x for x in lines if x.get("type") == "summary")
    problems = [x for x in lines if x.get("severity") in {"error", "warning"}]
    assert summary["errors"] == 0 and summary["warnings"] == 0, problems
    assert summary["complete"] is True


# -- message definitions ----------------------------------------------------------------------


def test_embedded_msg_definitions_match_fibril_msgs() -> None:
    msg_dir = REPO / "fibril_msgs" / "msg"
    files = {
        f"fibril_msgs/msg/{p.stem}": p.read_text(encoding="utf-8") for p in msg_dir.glob("*.msg")
    }
    assert set(msgtypes.MSG_DEFINITIONS) == set(files), "embed every fibril_msgs .msg in msgtypes"
    for name, text in files.items():
        assert msgtypes.MSG_DEFINITIONS[name] == text, f"{name} drifted from fibril_msgs/msg"


def test_the_writers_small_typestore_gives_the_full_stores_schemas_and_hashes() -> None:
    full, small = msgtypes.typestore(), msgtypes.trace_typestore()
    assert small is msgtypes.trace_typestore()  # cached
    for msgtype in [*msgtypes.MSG_DEFINITIONS, "std_msgs/msg/String"]:
        assert small.generate_msgdef(msgtype, ros_version=2) == \
            full.generate_msgdef(msgtype, ros_version=2), msgtype
        assert small.hash_rihs01(msgtype) == full.hash_rihs01(msgtype), msgtype


def test_typestore_is_cached_and_knows_fibril_types() -> None:
    store = msgtypes.typestore()
    assert store is msgtypes.typestore()
    for name in msgtypes.MSG_DEFINITIONS:
        assert name in store.types


# -- round trip -------------------------------------------------------------------------------


def test_round_trip_every_field(trace: Path, records: list) -> None:
    with TraceReader(trace) as reader:
        assert reader.provenance == PROVENANCE
        assert reader.layout == LAYOUT
        assert_records_equal(
            [r for r in records if isinstance(r, IngressRecord)], list(reader.external_inputs())
        )
        assert_records_equal(
            [r for r in records if isinstance(r, StateSnapshot)], list(reader.snapshots())
        )
        assert_records_equal(
            [r for r in records if isinstance(r, FrameTiming)], list(reader.frame_timings())
        )
        for device in ("wheel_encoder", "chassis/imu"):
            want = [r for r in records if isinstance(r, DeviceOutput) and r.device_id == device]
            assert_records_equal(want, list(reader.device_outputs(device)))
        all_devices = list(reader.device_outputs())
        assert len(all_devices) == sum(isinstance(r, DeviceOutput) for r in records)
        for endpoint in LAYOUT["endpoints"]:
            want = [
                r for r in records if isinstance(r, ActuatorApplication) and r.endpoint == endpoint
            ]
            assert_records_equal(want, list(reader.actuator_applications(endpoint)))
        assert len(list(reader.actuator_applications())) == sum(
            isinstance(r, ActuatorApplication) for r in records
        )
        assert list(reader.device_outputs("no_such_device")) == []
        assert set(reader.topics) == {
            "/fibril/external_inputs",
            "/fibril/state",
            "/fibril/frame_timing",
            "/fibril/devices/wheel_encoder",
            "/fibril/devices/chassis/imu",
            "/fibril/actuators/motor/command",
            "/fibril/actuators/lift/command",
        }


def test_bag_metadata_and_compression(trace: Path) -> None:
    import yaml

    meta = yaml.safe_load((trace / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["storage_identifier"] == "mcap"
    assert json.loads(meta["custom_data"]["fibril_sim.provenance"]) == PROVENANCE
    assert json.loads(meta["custom_data"]["fibril_sim.layout"]) == LAYOUT
    from mcap.reader import make_reader

    with (trace / "run.mcap").open("rb") as f:
        summary = make_reader(f).get_summary()
    assert summary is not None
    assert {c.compression for c in summary.chunk_indexes} == {"zstd"}
    # Log time is the session time; device samples are logged at their delivery.
    from rosbags.rosbag2 import Reader

    with Reader(trace) as bag:
        assert bag.start_time == SESSION_OFFSET_NS


def test_topic_names_are_sanitized() -> None:
    assert device_topic("chassis/imu") == "/fibril/devices/chassis/imu"
    assert actuator_topic("motor/command") == "/fibril/actuators/motor/command"
    assert device_topic("2d-lidar//front.left") == "/fibril/devices/_2d_lidar/front_left"
    assert device_topic("") == "/fibril/devices/_"


def test_colliding_sanitized_ids_stay_apart(tmp_path: Path) -> None:
    records = make_records(4)
    renamed = [
        replace(r, device_id="wheel-encoder")
        if isinstance(r, DeviceOutput) and r.device_id == "wheel_encoder"
        else r
        for r in records
    ]
    extra = [r for r in records if isinstance(r, DeviceOutput) and r.device_id == "wheel_encoder"]
    path = write_trace(tmp_path / "t", sorted(renamed + extra, key=_log_time))
    with TraceReader(path) as reader:
        assert len(list(reader.device_outputs("wheel_encoder"))) == len(extra)
        assert {o.device_id for o in reader.device_outputs("wheel-encoder")} == {"wheel-encoder"}


def _log_time(record: object) -> int:
    if isinstance(record, DeviceOutput):
        return record.session_delivery_time_ns
    return record.session_time_ns  # type: ignore[attr-defined]


def test_pymcap_cli_doctor_passes(trace: Path) -> None:
    assert_doctor_ok(trace / "run.mcap")


def test_mcap_ros2_decodes_device_samples(trace: Path, records: list) -> None:
    # mcap_ros2's decoder through McapReader (mcap_ros2.reader.read_ros2_messages is deprecated).
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    want = [r for r in records if isinstance(r, DeviceOutput) and r.device_id == "chassis/imu"]
    with (trace / "run.mcap").open("rb") as stream:
        reader = make_reader(stream, decoder_factories=[DecoderFactory()])
        got = list(reader.iter_decoded_messages(topics=["/fibril/devices/chassis/imu"]))
    assert len(got) == len(want)
    for record, (schema, _, message, msg) in zip(want, got, strict=True):
        assert message.log_time == record.session_delivery_time_ns
        assert schema.name == "fibril_msgs/msg/DeviceSample"
        assert list(msg.values) == record.values.tolist()
        assert list(msg.component_names) == list(record.component_names)
        assert msg.device_id == "chassis/imu"
        assert msg.header.frame_id == "imu_link"
        assert (
            msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
            == record.session_delivery_time_ns
        )
        assert msg.acquisition_stamp.sec * 10**9 + msg.acquisition_stamp.nanosec == (
            record.session_acquisition_time_ns
        )
        assert msg.delivery_episode_time_ns == record.delivery_time_ns


# -- robustness -------------------------------------------------------------------------------


def test_trace_closed_after_exception_is_readable(tmp_path: Path, records: list) -> None:
    path = tmp_path / "crashed"
    writer = TraceWriter(path, provenance=PROVENANCE, layout=LAYOUT)
    written = 0
    with pytest.raises(RuntimeError, match="physics exploded"):
        try:
            for record in records:
                writer.write(record)
                written += 1
                if written == 57:
                    raise RuntimeError("physics exploded")
        finally:
            writer.close()
    writer.close()  # idempotent
    with TraceReader(path) as reader:
        assert reader.message_count == 57
        got = list(reader.snapshots())
        assert_records_equal([r for r in records[:57] if isinstance(r, StateSnapshot)], got)
    with pytest.raises(TraceError, match="closed"):
        writer.write(records[0])


def test_refuses_non_empty_directory(tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(TraceError, match=r"busy.*not empty"):
        TraceWriter(target, provenance={}, layout=LAYOUT)
    assert (target / "notes.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    with TraceWriter(empty, provenance={}, layout=LAYOUT) as writer:
        writer.write(make_records(1)[0])
    assert (empty / "metadata.yaml").is_file()


def test_bad_records_and_bad_metadata_are_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not JSON"):
        TraceWriter(tmp_path / "a", provenance={"x": object()}, layout=LAYOUT)
    with TraceWriter(tmp_path / "b", provenance={}, layout=LAYOUT) as writer:
        with pytest.raises(TypeError, match="cannot trace a str"):
            writer.write("not a record")  # type: ignore[arg-type]
        bad = FrameTiming(
            episode=-1,
            tick=0,
            episode_time_ns=0,
            session_time_ns=0,
            wall_step_time=0,
            real_time_factor=1,
        )
        # Records are serialized in the background: the misfit is reported by the next
        # flush / write / close, and left out of an otherwise complete trace.
        writer.write(bad)
        good = make_records(1)[0]
        writer.write(good)
        with pytest.raises(TraceError, match=r"cannot encode FrameTiming.*1 record\(s\) left out"):
            writer.flush()
    with TraceReader(tmp_path / "b") as reader:
        assert reader.message_count == 1


def test_write_many_is_write_for_each_record(tmp_path: Path, records: list) -> None:
    """write_many queues in order like write; an odd record in the list is refused like write
    refuses it, after the ones before it; a closed writer refuses the list."""
    with TraceWriter(tmp_path / "many", provenance={}, layout=LAYOUT) as writer:
        writer.write_many(records[:5])
        with pytest.raises(TypeError, match="cannot trace a str"):
            writer.write_many([*records[5:7], "not a record"])  # type: ignore[list-item]
        writer.write_many(records[7:])
        assert writer.record_count == len(records)
    with pytest.raises(TraceError, match="closed"):
        writer.write_many(records[:1])
    with TraceReader(tmp_path / "many") as one, TraceReader(
            write_trace(tmp_path / "each", records)) as other:
        assert one.message_count == other.message_count == len(records)


def test_reader_rejects_non_traces(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        TraceReader(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(TraceError, match=r"plain.*not a trace"):
        TraceReader(tmp_path / "plain")
    from rosbags.rosbag2 import StoragePlugin, Writer

    foreign = tmp_path / "foreign"
    with Writer(foreign, version=8, storage_plugin=StoragePlugin.MCAP):
        pass
    with pytest.raises(TraceError, match=r"foreign.*not a fibril_sim trace"):
        TraceReader(foreign)


def test_sigint_leaves_a_complete_trace(tmp_path: Path) -> None:
    path = tmp_path / "interrupted"
    script = textwrap.dedent(
        f"""
        import sys
        from fibril_sim_core.records import FrameTiming, StateSnapshot
        from fibril_sim_core.trace import TraceWriter
        import numpy as np
        writer = TraceWriter(sys.argv[1], provenance={{"run": "sigint"}}, layout={LAYOUT!r})
        try:
            i = 0
            zeros = np.zeros(16)
            while True:
                writer.write(FrameTiming(0, i, i * 1000, i * 1000, 1e-5, 1.0))
                writer.write(StateSnapshot(0, i, i * 1000, i * 1000, zeros, zeros, zeros, zeros,
                                           zeros, zeros, np.zeros((5, 3)), np.zeros((5, 4))))
                i += 1
                if i % 500 == 0:
                    print(i, flush=True)
        finally:
            writer.close()
        """
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(CORE), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        reported = 0
        for line in proc.stdout:
            reported = int(line)
            if reported >= 3000:
                break
        assert reported >= 3000, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=patience(20))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in stderr
    with TraceReader(path) as reader:
        assert reader.provenance == {"run": "sigint"}
        timings = list(reader.frame_timings())
        assert len(timings) >= reported
        assert [t.tick for t in timings] == list(range(len(timings)))
        assert sum(1 for _ in reader.snapshots()) >= reported
    assert_doctor_ok(path / "interrupted.mcap")


# -- queries ----------------------------------------------------------------------------------


def _snapshots(records: list) -> list[StateSnapshot]:
    return [r for r in records if isinstance(r, StateSnapshot)]


def test_query_body_position_and_quaternion(trace: Path, records: list) -> None:
    result = query(trace, "body:wheel.position")
    assert result.columns == ["time_ns", "episode", "x", "y", "z"]
    assert result.rows == [(s.time_ns, s.episode, *s.xpos[2].tolist()) for s in _snapshots(records)]
    result = query(trace, "body:chassis.quaternion")
    assert result.columns == ["time_ns", "episode", "w", "x", "y", "z"]
    assert result.rows == [
        (s.time_ns, s.episode, *s.xquat[1].tolist()) for s in _snapshots(records)
    ]


@pytest.mark.parametrize(
    ("joint", "qpos", "qvel", "columns"),
    [
        ("root", slice(0, 7), slice(0, 6), ["x", "y", "z", "qw", "qx", "qy", "qz"]),
        ("wheel_joint", slice(7, 8), slice(6, 7), ["position"]),
        ("gimbal_joint", slice(8, 12), slice(7, 10), ["qw", "qx", "qy", "qz"]),
        ("lift_joint", slice(12, 13), slice(10, 11), ["position"]),
    ],
)
def test_query_joints(
    trace: Path, records: list, joint: str, qpos: slice, qvel: slice, columns: list
) -> None:
    with TraceReader(trace) as reader:
        pos = query(reader, f"joint:{joint}.position")
        vel = query(reader, f"joint:{joint}.velocity")
    assert pos.columns == ["time_ns", "episode", *columns]
    assert pos.rows == [(s.time_ns, s.episode, *s.qpos[qpos].tolist()) for s in _snapshots(records)]
    assert len(vel.columns) == 2 + (qvel.stop - qvel.start)
    assert vel.rows == [(s.time_ns, s.episode, *s.qvel[qvel].tolist()) for s in _snapshots(records)]


def test_query_sensors_actuators_devices(trace: Path, records: list) -> None:
    snaps = _snapshots(records)
    with TraceReader(trace) as reader:
        gyro = query(reader, "sensor:gyro")
        assert gyro.columns == ["time_ns", "episode", "value_0", "value_1", "value_2"]
        assert gyro.rows == [(s.time_ns, s.episode, *s.sensordata[1:4].tolist()) for s in snaps]
        wheel = query(reader, "sensor:wheel_pos")
        assert wheel.columns == ["time_ns", "episode", "value"]
        assert wheel.rows == [(s.time_ns, s.episode, s.sensordata[0]) for s in snaps]

        applied = query(reader, "actuator:motor/command.applied")
        assert applied.columns == ["time_ns", "episode", "applied"]
        assert applied.rows == [
            (a.time_ns, a.episode, a.applied)
            for a in records
            if isinstance(a, ActuatorApplication) and a.endpoint == "motor/command"
        ]
        force = query(reader, "actuator:lift/command.force")
        assert force.columns == ["time_ns", "episode", "force"]
        assert force.rows == [(s.time_ns, s.episode, s.actuator_force[1]) for s in snaps]

        imu = query(reader, "device:chassis/imu")
        assert imu.columns == [
            "time_ns",
            "episode",
            "acquisition_time_ns",
            "gyro_x",
            "gyro_y",
            "gyro_z",
        ]
        assert imu.rows == [
            (d.delivery_time_ns, d.episode, d.acquisition_time_ns, *d.values.tolist())
            for d in records
            if isinstance(d, DeviceOutput) and d.device_id == "chassis/imu"
        ]
        enc = query(reader, "device:wheel_encoder")
        assert enc.rows[0][:3] == (TIMESTEP_NS, 0, 0)

    csv_text = to_csv(applied)
    assert csv_text.splitlines()[0] == "time_ns,episode,applied"
    assert len(csv_text.splitlines()) == 1 + len(applied.rows)
    doc = json.loads(to_json(imu))
    assert doc["selector"] == "device:chassis/imu"
    assert doc["columns"] == imu.columns
    assert [tuple(r) for r in doc["rows"]] == imu.rows


@pytest.mark.parametrize(
    ("selector", "mentions"),
    [
        ("bodywheel", ["bodywheel", "body", "device"]),
        ("link:wheel.position", ["link:wheel.position", "body", "joint", "sensor"]),
        ("body:wheeel.position", ["body:wheeel.position", "chassis", "wheel", "world"]),
        ("body:wheel.velocity", ["body:wheel.velocity", "position", "quaternion"]),
        ("body:wheel", ["body:wheel", "position"]),
        ("joint:hip.position", ["joint:hip.position", "root", "wheel_joint"]),
        ("sensor:accel", ["sensor:accel", "gyro", "wheel_pos"]),
        ("actuator:motor.applied", ["actuator:motor.applied", "motor/command", "lift/command"]),
        ("actuator:motor/command.torque", ["actuator:motor/command.torque", "applied", "force"]),
        ("device:lidar", ["device:lidar", "chassis/imu", "wheel_encoder"]),
        ("sensor:", ["sensor:", "empty"]),
    ],
)
def test_bad_selectors_name_the_selector(trace: Path, selector: str, mentions: list[str]) -> None:
    with pytest.raises(TraceQueryError) as info:
        query(trace, selector)
    assert isinstance(info.value, TraceError) and isinstance(info.value, ValueError)
    for text in mentions:
        assert text in str(info.value)


# -- throughput (informational) ---------------------------------------------------------------


def test_write_throughput(tmp_path: Path) -> None:
    base = make_records(200)
    devices = [r for r in base if isinstance(r, DeviceOutput)]
    snapshots = [r for r in base if isinstance(r, StateSnapshot)]
    for name, sample in (
        ("device samples", devices),
        ("state snapshots", snapshots),
        ("mixed", base),
    ):
        batch = (sample * (20_000 // len(sample) + 1))[:20_000]
        start = time.perf_counter()
        with TraceWriter(tmp_path / name.replace(" ", "_"), provenance={}, layout=LAYOUT) as writer:
            for record in batch:
                writer.write(record)
            enqueued = time.perf_counter()
        done = time.perf_counter()
        print(
            f"\ntrace write {name}: {len(batch) / (enqueued - start):,.0f} records/s "
            f"(caller), {len(batch) / (done - start):,.0f} records/s including close"
        )


@pytest.mark.parametrize(("values", "dtype", "fits"), [
    ([1, 2, 3], np.uint64, True), ([2**64 - 1], np.uint64, True), ([-1], np.uint64, False),
    ([2**63 - 1, -2**63], np.int64, True), ([2**63], np.int64, False),
    ([-2**31, 2**31 - 1], np.int32, True), ([2**31], np.int32, False),
    ([0, 255], np.uint8, True), ([256], np.uint8, False), ([], np.uint32, True),
    # beyond a few values the bounds are numpy's reductions, not Python's min/max
    (list(range(100)) + [2**32], np.uint32, False), (list(range(-100, 0)), np.uint32, False),
    (list(range(100)) + [2**32 - 1], np.uint32, True),
])
def test_integer_columns_are_range_checked(values, dtype, fits) -> None:
    """Python ints go in as int64 when they fit it (the fast path), else as objects; either
    way a value outside the field's type is an OverflowError, never wrapped around."""
    from fibril_sim_core.trace.cdr import checked_column

    if fits:
        column = checked_column(values, np.dtype(dtype))
        assert [int(v) for v in column] == values
    else:
        with pytest.raises(OverflowError, match=f"integer out of range for {np.dtype(dtype).name}"):
            checked_column(values, np.dtype(dtype))


@pytest.mark.parametrize("count", [1, 100])  # Python's min/max, numpy's reductions
def test_times_beyond_int32_seconds_are_refused(count: int) -> None:
    """builtin_interfaces/Time holds int32 seconds: the edges fit, one nanosecond beyond
    does not; nanoseconds split as floor division does (negative times too)."""
    from fibril_sim_core.trace.cdr import split_ns

    edge = 2**31 * 1_000_000_000
    sec, nanosec = split_ns(np.array([edge - 1, -edge, -1] * count, dtype=np.int64))
    assert sec.tolist()[:3] == [2**31 - 1, -2**31, -1]
    assert nanosec.tolist()[:3] == [999_999_999, 0, 999_999_999]
    for beyond in (edge, -edge - 1):
        with pytest.raises(OverflowError, match="int32 seconds"):
            split_ns([0] * (count - 1) + [beyond])
