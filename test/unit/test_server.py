"""SimulationServer and RemoteConnection in one process (real sockets, real threads):
security of the listeners, filters, lockstep equivalence, disconnects and render refusal."""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from _models import DRIVETRAIN, HINGE_XML, SCENE_XML, build, command, device, motor
from _runtime_rig import runtime_starter, wait_for

from fibril_sim_core import (
    DeviceOutput,
    IngressError,
    InstanceError,
    ServerError,
    ServerOptions,
    SimulationBuilder,
    SimulationConnection,
    SimulationPlan,
    SimulationRuntime,
    external_input,
)
from fibril_sim_core.records import FrameTiming

TOKEN = b"0123456789abcdef-shared-token"
DUTY = "fibril_sim/motor_command/v1"


@pytest.fixture(scope="module")
def drivetrain() -> SimulationPlan:
    return SimulationBuilder().build(DRIVETRAIN)


@pytest.fixture()
def start() -> Iterator[Callable[..., SimulationRuntime]]:
    yield from runtime_starter(seed=5, server=ServerOptions())


def _key(record) -> tuple:
    """Every field, arrays as bytes: equal keys mean bit-identical records."""
    if isinstance(record, DeviceOutput):
        return tuple(v.tobytes() if isinstance(v, np.ndarray) else v for v in record)
    return tuple(getattr(record, name).tobytes() if isinstance(getattr(record, name), np.ndarray)
                 else getattr(record, name) for name in record.__slots__)


def test_default_listener_is_a_private_unix_socket(drivetrain, start) -> None:
    runtime = start(drivetrain, mode="lockstep")
    address = runtime.address
    assert address.startswith("unix:///")
    path = Path(address[len("unix://"):])
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [a for a in runtime.server.addresses if a.startswith("tcp")] == []  # no TCP
    runtime.stop()
    assert not path.exists() and not path.parent.exists()  # removed on stop


def test_remote_equals_in_process_bit_for_bit_in_lockstep(drivetrain, start) -> None:
    runtime = start(drivetrain, mode="lockstep")
    local: list = []
    runtime.connect().on_record(local.append)
    remote_records: list = []
    with SimulationConnection.connect(runtime.address, name="test") as remote:
        remote.on_record(remote_records.append)
        for n in range(1, 6):
            assert remote.submit(external_input("motor/command", n, DUTY,
                                                {"mode": "duty", "value": 0.1 * n})) == n
            state = remote.step(40)
            # When step returns, every record of those ticks has reached the callback.
            assert len(remote_records) == len(local)
        assert state["tick"] == 200 and state["seed"] == 5
        assert remote.describe() == runtime.connect().describe() == drivetrain.inspect()
        with pytest.raises(IngressError, match="source_sequence 3 does not increase"):
            remote.submit(external_input("motor/command", 3, DUTY, {"mode": "duty", "value": 0}))
        remote.reset(seed=9)
        remote.step(30)
    assert len(local) == len(remote_records) > 300
    assert [_key(r) for r in local if not isinstance(r, FrameTiming)] == \
        [_key(r) for r in remote_records if not isinstance(r, FrameTiming)]
    assert [type(r) for r in local] == [type(r) for r in remote_records]


def test_filters_by_kind_and_device(drivetrain, start) -> None:
    runtime = start(drivetrain, mode="lockstep")
    local_imu: list = []
    runtime.connect().on_record(local_imu.append, kinds="device_output", devices=["chassis_imu"])
    with SimulationConnection.connect(runtime.address) as remote:
        imu, frames = [], []
        remote.on_record(imu.append, kinds=["device_output"], devices=["chassis_imu"])
        remote.on_record(frames.append, kinds=["frame_timing"])
        remote.step(100)
        assert {r.device_id for r in imu} == {"chassis_imu"} and len(imu) == 20
        assert frames and all(isinstance(r, FrameTiming) for r in frames)
        assert [_key(r) for r in imu] == [_key(r) for r in local_imu]
        # The server sends only what some subscription wants.
        assert runtime.server._wanted_types == {DeviceOutput: {"chassis_imu"},
                                                FrameTiming: None}
        # ... and the simulation makes only what some client wants: no other device's samples
        imu_index = [d.id for d in runtime.plan.devices].index("chassis_imu")
        assert runtime.instance._listeners.heard == {imu_index}
        listeners = runtime.instance._listeners
        assert not listeners.hears_ingress and not listeners.hears_actuation
        with pytest.raises(InstanceError, match="unknown record kind"):
            remote.on_record(print, kinds=["camera"])


def test_a_remote_client_moves_its_filter_and_the_host_follows(drivetrain, start) -> None:
    runtime = start(drivetrain, mode="lockstep")
    every: list = []
    local = runtime.connect()
    local.on_record(every.append, kinds="device_output")
    with SimulationConnection.connect(runtime.address) as remote:
        got: list = []
        handle = remote.on_record(got.append, kinds="device_output", devices="chassis_imu")
        remote.step(50)
        remote.set_record_filter(handle, kinds="device_output", devices=["wheel_encoder"])
        remote.step(50)
        want = [r for r in every if (r.device_id, r.acquisition_tick < 50) in
                {("chassis_imu", True), ("wheel_encoder", False)}]
        assert [_key(r) for r in got] == [_key(r) for r in want] and len(got) == 10 + 25
        with pytest.raises(InstanceError, match="not a subscription of this connection"):
            remote.set_record_filter([print, None], kinds="device_output")
    # with the remote client gone and the local one closed, nothing is wanted: nothing made
    local.close()
    wait_for(lambda: runtime.connect().state()["clients"] == 0)
    runtime.connect().step(1)
    assert runtime.instance._listeners.heard == frozenset()


def test_tcp_requires_the_token_and_logs_refusals(drivetrain, start,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ServerError, match="a TCP listener needs a shared token"):
        start(drivetrain, server=ServerOptions(unix=False, tcp="127.0.0.1:0"))
    runtime = start(drivetrain, mode="lockstep",
                    server=ServerOptions(unix=False, tcp="127.0.0.1:0", token=TOKEN))
    address = runtime.address
    assert address.startswith("tcp://127.0.0.1:")
    caplog.set_level(logging.WARNING, logger="fibril_sim.server")
    with pytest.raises(ServerError, match="refused by the server: wrong token"):
        SimulationConnection.connect(address, token=b"not-the-token-at-all", timeout=5)
    with pytest.raises(ServerError, match="the server requires a token"):
        SimulationConnection.connect(address, timeout=5)
    messages = [r.getMessage() for r in caplog.records]
    assert any("refused a client" in m and "wrong token" in m for m in messages), messages
    _wait_for_log = time.monotonic() + 5
    while not any("no token given" in m for m in messages) and time.monotonic() < _wait_for_log:
        time.sleep(0.02)
        messages = [r.getMessage() for r in caplog.records]
    assert any("refused a client" in m and "no token given" in m for m in messages), messages
    with SimulationConnection.connect(address, token=TOKEN) as remote:
        assert remote.step(10)["tick"] == 10
        assert remote.state()["refused_clients"] >= 1


def test_unknown_address_and_missing_socket_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="expected unix:///path/to/socket or tcp://HOST:PORT"):
        SimulationConnection.connect("http://localhost")
    with pytest.raises(ServerError, match="no such socket"):
        SimulationConnection.connect(f"unix://{tmp_path}/none.sock")


def test_a_closed_client_loses_its_subscriptions_and_nothing_else(drivetrain, start) -> None:
    runtime = start(drivetrain, mode="fast")
    local = runtime.connect()
    remote = SimulationConnection.connect(runtime.address, name="leaver")
    remote.on_record(lambda r: None, kinds="device_output")
    wait_for(lambda: local.state()["clients"] == 1)
    remote.close()
    wait_for(lambda: local.state()["clients"] == 0)
    assert runtime.server._wanted_types == {}
    tick = local.state()["tick"]
    wait_for(lambda: local.state()["tick"] > tick)  # the simulation goes on
    assert runtime.instance._listeners.heard == frozenset()  # making samples for nobody
    with pytest.raises(InstanceError, match="the connection is closed"):
        remote.step(1)


def test_state_reports_measured_real_time_factor(drivetrain, start) -> None:
    runtime = start(drivetrain, mode="realtime", real_time_factor=2.0)
    connection = runtime.connect()
    time.sleep(1.2)
    state = connection.state()
    for key in ("tick", "episode", "episode_time_ns", "session_time_ns", "paused", "seed",
                "real_time_factor", "accepted_inputs", "rejected_inputs", "drops"):
        assert key in state
    assert state["target_real_time_factor"] == 2.0
    assert state["real_time_factor"] == pytest.approx(2.0, abs=0.4)


def test_in_process_connection_close_and_filters(tmp_path: Path, start) -> None:
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command"),
                                       device("enc", "encoder", {"joint": "shaft"}),
                                       device("enc2", "encoder", {"joint": "axle"})])
    runtime = start(plan, server=None, mode="lockstep")
    assert runtime.address == ""
    connection = runtime.connect()
    inputs, enc2 = [], []
    connection.on_record(inputs.append, kinds=["ingress_record", "actuator_application"])
    connection.on_record(enc2.append, devices="enc2")
    connection.submit(command("drive/command", 0, "voltage", 1.0))
    connection.step(5)
    assert [type(r).__name__ for r in inputs] == ["IngressRecord", "ActuatorApplication"]
    assert {r.device_id for r in enc2} == {"enc2"} and len(enc2) == 5
    connection.close()
    connection.close()  # idempotent
    runtime.connect().step(5)
    assert len(enc2) == 5  # no more records after close


def test_record_filter_follows_what_a_client_listens_to(tmp_path: Path, start) -> None:
    """set_record_filter moves a subscription to other devices between frames: the simulation
    makes only the devices wanted now, and their samples are those of a run making all."""
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command"),
                                       device("enc", "encoder", {"joint": "shaft"},
                                              noise_counts=0.5),
                                       device("enc2", "encoder", {"joint": "axle"},
                                              noise_counts=0.5)])
    runtime = start(plan, server=None, mode="lockstep")
    connection = runtime.connect()
    got: list = []
    handle = connection.on_record(got.append, kinds="device_output", devices="enc")
    connection.submit(command("drive/command", 0, "voltage", 1.0))
    connection.step(50)
    assert runtime.instance._listeners.heard == {0}
    connection.set_record_filter(handle, kinds="device_output", devices=["enc2"])
    connection.step(50)
    assert runtime.instance._listeners.heard == {1}
    reference = plan.create_instance(seed=5, collect=False)
    every: list = []
    reference.subscribe(every.append)
    reference.enqueue(command("drive/command", 0, "voltage", 1.0))
    reference.advance(100)
    want = [r for r in every if isinstance(r, DeviceOutput) and
            (r.device_id, r.acquisition_tick < 50) in {("enc", True), ("enc2", False)}]
    assert [_key(r) for r in got] == [_key(r) for r in want] and len(got) == 100
    with pytest.raises(InstanceError, match="not a subscription of this connection"):
        runtime.connect().set_record_filter(handle, kinds="device_output")


def test_render_request_is_refused_or_served(tmp_path: Path, start) -> None:
    """Without GL the request fails with a clear error and stepping goes on; with GL (CI sets
    MUJOCO_GL) frames arrive at the requested simulated rate."""
    plan = build(tmp_path, SCENE_XML)
    runtime = start(plan, server=None, mode="lockstep")
    connection = runtime.connect()
    frames: list = []
    connection.on_record(frames.append, kinds="render_frame")
    with pytest.raises(InstanceError, match="no camera named 'nope'.*cameras: overview"):
        connection.render("nope", 32, 24, 50.0)
    with pytest.raises(InstanceError, match="larger than the model's offscreen buffer"):
        connection.render("overview", 4000, 24, 50.0)
    try:
        stream = connection.render("overview", 32, 24, 50.0, depth=True)
    except InstanceError as exc:
        assert "MUJOCO_GL" in str(exc)
        assert connection.step(10)["tick"] == 10  # the simulation keeps running
        pytest.skip(f"no offscreen OpenGL here: {exc}")
    connection.step(100)  # 0.1 s at 50 Hz: ticks 0, 20, 40, 60, 80, 100
    assert [f.tick for f in frames] == [0, 20, 40, 60, 80, 100]
    assert [f.session_time_ns for f in frames] == [t * 1_000_000 for t in (0, 20, 40, 60, 80,
                                                                            100)]
    assert frames[0].rgb.shape == (24, 32, 3) and frames[0].rgb.dtype == np.uint8
    assert frames[0].depth.shape == (24, 32) and frames[0].camera == "overview"
    assert frames[0].rgb.max() > 0
    connection.stop_render(stream)
    connection.step(40)
    assert len(frames) == 6
    free = connection.render(None, 16, 16, 100.0)
    connection.step(20)
    assert [f.camera for f in frames[6:]] == ["", "", ""] and free != stream
    assert os.environ.get("MUJOCO_GL") in ("egl", "osmesa", None)


def test_any_of_passes_what_one_of_its_filters_passes(drivetrain) -> None:
    """The server's host filter (its clients' filters, as one per-type map) agrees record by
    record with asking each filter."""
    from fibril_sim_core.runtime.subscription import AnyOf, RecordFilter

    instance = drivetrain.create_instance(seed=2)
    instance.enqueue(command("motor/command", 1, "duty", 0.4))
    instance.advance(60)
    records = instance.poll()
    filters = (RecordFilter.of("device_output", ["chassis_imu"]),
               RecordFilter.of(["device_output", "ingress_record"], ["wheel_encoder",
                                                                     "motor/command"]),
               RecordFilter.of("state_snapshot"))
    for chosen in (filters, filters[:1], filters[1:], ()):
        any_of = AnyOf(chosen)
        assert [any_of.matches(r) for r in records] == \
            [any(f.matches(r) for f in chosen) for r in records]
    assert sum(AnyOf(filters).matches(r) for r in records) > 0
