"""The live ROS 2 simulation node, end to end: the node runs as a child process
(``python -m fibril_sim_ros.sim_node``) on this session's ROS domain over shared memory; this
process subscribes, publishes commands and calls its services.

The ``live`` node (real time, factor 2, traced) is shared by the tests that follow it in file
order; the last of them stops it with SIGTERM and replays its trace offline.
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy")

from _sim_node_peer import (BEST_EFFORT, CLOCK, LIVE_CLOCK, MANIFEST, Peer,  # noqa: E402
                            SimProcess, ns, snapshot, wait_until)
from _patience import patience, speed_factor  # noqa: E402
from fibril_msgs.msg import DeviceSample, FrameTiming, MotorCommand  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from fibril_msgs.srv import GetState, Reset, SetPaused, Step  # noqa: E402
from rcl_interfaces.msg import Parameter as ParameterMsg, ParameterType  # noqa: E402
from rcl_interfaces.msg import ParameterValue  # noqa: E402
from rcl_interfaces.srv import SetParameters  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Imu, JointState  # noqa: E402
from std_msgs.msg import Float64  # noqa: E402

from fibril_sim_core import SimulationBuilder  # noqa: E402
from fibril_sim_core import cli  # noqa: E402
from fibril_sim_core.trace import TraceReader  # noqa: E402
from fibril_sim_ros.bridge import BridgeError, load_bridge  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow,
              # rclpy's own QoS-event logging in this process (deprecated logger.warn)
              pytest.mark.filterwarnings("ignore:Deprecated in favor of:DeprecationWarning")]

MS = 1_000_000
ENCODER_PERIOD, ENCODER_LATENCY = 2 * MS, 1 * MS
IMU_PERIOD, IMU_LATENCY = 5 * MS, 1 * MS
CPR = 1024
BRIDGE = """\
schema_version: {major: 1, minor: 0}
inputs:
  - {topic: /motor/command, type: fibril_msgs/msg/MotorCommand, endpoint: motor/command}
  - {topic: /motor/duty_percent, type: std_msgs/msg/Float64, endpoint: motor/command,
     mode: duty, scale: 0.01}
outputs:
  - {device: wheel_encoder, raw_topic: /wheel_encoder/counts}
joint_states: {rate: 50.0}
"""


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def peer():
    node = Peer()
    yield node
    node.close()


class Live:
    """The shared real-time node and what the peer has received from it."""

    def __init__(self, sim: SimProcess, peer: Peer, trace: Path) -> None:
        self.sim, self.peer, self.trace = sim, peer, trace
        self.rtf = 0.0  # the node's real-time factor (set by the fixture)
        self.clock = peer.subscribe(Clock, "/clock", LIVE_CLOCK)
        self.encoder = peer.subscribe(JointState, "/wheel_encoder")
        self.counts = peer.subscribe(DeviceSample, "/wheel_encoder/counts")
        self.imu = peer.subscribe(Imu, "/chassis_imu")
        self.best_effort_imu = peer.subscribe(Imu, "/chassis_imu", BEST_EFFORT)
        self.joint_states = peer.subscribe(JointState, "/joint_states")
        self.motor = peer.publisher(MotorCommand, "/motor/command")
        self.duty = peer.publisher(Float64, "/motor/duty_percent")

    def handled(self) -> int:
        state = self.peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
        return state.accepted_inputs + state.rejected_inputs

    def send(self, publisher, msg) -> None:
        """Publish until the node's ingress has handled (accepted or rejected) one more input.
        The publisher seeing the subscription matched does not mean the node's reader has
        matched this writer yet (discovery is per side), and a volatile message sent in
        between is lost: seen on a loaded machine. Repeated only after 3 s without it being
        counted, so the exact counts the tests assert stay exact."""
        wait_until(lambda: publisher.get_subscription_count() > 0, 10,
                   f"a subscriber on {publisher.topic_name}", self.sim.log)
        before = self.handled()
        deadline = time.monotonic() + 20.0
        while True:
            publisher.publish(msg)
            wait = time.monotonic() + 3.0
            while time.monotonic() < wait:
                if self.handled() > before:
                    return
                time.sleep(0.05)
            assert time.monotonic() < deadline, (
                f"no input handled from {publisher.topic_name} in 20 s\n{self.sim.log()}")

    def sim_now(self) -> int:
        clock = snapshot(self.clock, self.peer.lock)
        return max((ns(m.clock) for m, _ in clock), default=0)

    def wait_sim(self, seconds: float) -> int:
        """Wait until ``seconds`` of simulated time passed on /clock; returns that time."""
        # From the first /clock this process receives (not from 0: the node may have been
        # running for seconds before this subscription matched).
        wait_until(lambda: self.sim_now() > 0, 20.0, "the first /clock", self.sim.log)
        target = self.sim_now() + int(seconds * 1e9)
        wait_until(lambda: self.sim_now() >= target, 20.0 + seconds, "/clock",
                   self.sim.log)
        # This process may lag on one topic more than another: wait for the encoder too.
        wait_until(lambda: self.encoder and ns(self.encoder[-1][0].header.stamp) >= target - 4e6,
                   20.0, "the encoder to catch up", self.sim.log)
        return target

    def wheel_speed(self, seconds: float, since: int) -> float:
        """Mean wheel speed (rad/s) over ``seconds`` of encoder positions stamped from ``since``
        (sim ns), once a later sample shows the window is complete. The position is a
        continuous angle, so samples this process lost (it subscribes to ~3 000 messages a
        second and drops many when starved: seen as gaps of up to 20 ms, once a whole 0.2 s) do
        not bias the mean; only the ends matter, and they must span three quarters of the
        window. A window this process was starved through is replaced by the next one (the
        command, and so the steady speed, is unchanged), up to five times."""
        span = int(seconds * 1e9)
        seen: list[tuple[int, int]] = []
        for _ in range(5):
            end = since + span
            inside: list[tuple[int, float]] = []

            def window() -> bool:
                inside.clear()
                for m, _ in snapshot(self.encoder, self.peer.lock):
                    stamp = ns(m.header.stamp)
                    if stamp > end:
                        return True  # arrival order is stamp order (one reliable writer)
                    if stamp >= since:
                        inside.append((stamp, m.position[0]))
                return False  # no sample after the window yet

            wait_until(window, 20.0, f"an encoder sample after {end} ns", self.sim.log)
            if len(inside) >= 2 and inside[-1][0] - inside[0][0] >= 0.75 * span:
                (t0, p0), (t1, p1) = inside[0], inside[-1]
                return (p1 - p0) / ((t1 - t0) / 1e9)
            seen.append((since, len(inside)))
            since = end
        raise AssertionError(f"five encoder windows of {seconds} s held too few samples "
                             f"(window start ns, samples): {seen}")


@pytest.fixture(scope="module")
def live(peer, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live")
    bridge = tmp / "bridge.yaml"
    bridge.write_text(BRIDGE)
    trace = tmp / "trace"
    # Twice real time on a quiet machine; slower on a busy one, where this process, reading
    # ~3 000 messages a (wall) second, would fall behind the node.
    rtf = 2.0 / speed_factor()
    sim = SimProcess(tmp, {"manifest": MANIFEST, "bridge": bridge, "real_time_factor": rtf,
                           "seed": 3, "trace_dir": trace})
    state = Live(sim, peer, trace)
    state.rtf = rtf
    peer.wait_for_service(GetState, "/fibril_sim/get_state", sim)
    yield state
    sim.stop()


# --------------------------------------------------------------------------- live node
def test_clock_ticks_and_devices_arrive_at_their_period_published_at_delivery(live) -> None:
    live.wait_sim(0.5)
    peer = live.peer
    wait_until(lambda: len(live.encoder) > 100 and len(live.imu) > 60, 10, "encoder and IMU",
               live.sim.log)
    devices = [(snapshot(live.encoder, peer.lock), ENCODER_PERIOD, ENCODER_LATENCY,
                "wheel_joint"), (snapshot(live.imu, peer.lock), IMU_PERIOD, IMU_LATENCY, "imu")]
    last = max(ns(s[-1][0].header.stamp) for s, *_ in devices) + 2 * MS
    wait_until(lambda: live.sim_now() >= last, 10, "/clock past the samples", live.sim.log)
    # (The first samples may be the writer's transient-local history, delivered late.)
    clock = [(ns(m.clock), t) for m, t in snapshot(live.clock, peer.lock)][5:]
    values = [c for c, _ in clock]
    assert values == sorted(values), values[:20]
    assert values[-1] - values[0] >= 400 * MS
    for samples, period, latency, frame in devices:
        assert len(samples) > 50, live.sim.log()
        stamps = [ns(m.header.stamp) for m, _ in samples]
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        # every period's sample, in order (this process, starved on a busy machine, may lose
        # some from the writer's keep-last history: a gap of whole periods then)
        assert all(g > 0 and g % period == 0 for g in gaps) and statistics.mode(gaps) == period
        assert {m.header.frame_id for m, _ in samples} == {frame}
        assert all(s % period == 0 for s in stamps)  # stamped at acquisition (tick multiple)
        assert _published_at_delivery(samples, clock, latency) > 40


def _published_at_delivery(samples: list, clock: list, latency: int) -> int:
    """Check that each message was published in the frame that reached its delivery time:
    after every /clock before the delivery time, before the first /clock at or past it."""
    values = [c for c, _ in clock]
    checked = 0
    for msg, published in samples:
        delivery = ns(msg.header.stamp) + latency
        if not values[0] < delivery <= values[-1]:
            continue
        checked += 1
        before = [t for c, t in clock if c < delivery]
        after = [t for c, t in clock if c >= delivery]
        assert before[-1] <= published <= after[0], (delivery, before[-1], published, after[0])
    return checked


def test_a_best_effort_subscriber_receives_from_the_reliable_default(live) -> None:
    wait_until(lambda: len(live.best_effort_imu) > 20, 10, "best-effort IMU", live.sim.log)
    best = {ns(m.header.stamp) for m, _ in snapshot(live.best_effort_imu, live.peer.lock)}
    live.peer.unsubscribe(live.best_effort_imu)
    reliable = {ns(m.header.stamp) for m, _ in snapshot(live.imu, live.peer.lock)}
    assert len(best & reliable) > 20


def test_frame_timing_topic(live) -> None:
    frames = live.peer.subscribe(FrameTiming, "/fibril_sim/frame_timing")
    wait_until(lambda: len(frames) > 20, 10, "~/frame_timing", live.sim.log)
    live.peer.unsubscribe(frames)
    items = [m for m, _ in snapshot(frames, live.peer.lock)]
    assert all(b.tick > a.tick for a, b in zip(items, items[1:]))
    assert all(m.session_time_ns == m.tick * MS and m.wall_step_time > 0 for m in items)


def test_encoder_positions_are_counts_over_counts_per_revolution(live) -> None:
    def pairs() -> list[tuple[Any, Any]]:
        counts = {ns(m.acquisition_stamp): m for m, _ in snapshot(live.counts, live.peer.lock)}
        return [(msg, counts[ns(msg.header.stamp)])
                for msg, _ in snapshot(live.encoder, live.peer.lock)
                if ns(msg.header.stamp) in counts]

    wait_until(lambda: len(pairs()) > 50, 30, "50 encoder samples with their counts",
               live.sim.log)  # a busy machine runs the node slower
    live.peer.unsubscribe(live.counts)
    for msg, raw in pairs():
        assert list(raw.component_names) == ["position", "velocity", "counts"]
        assert raw.device_id == "wheel_encoder" and raw.header.frame_id == "wheel_joint"
        assert math.isclose(msg.position[0], raw.values[2] * 2 * math.pi / CPR, rel_tol=1e-12)
        assert msg.name == ["wheel_joint"]


def test_ground_truth_joint_states_at_the_declared_rate(live) -> None:
    wait_until(lambda: len(live.joint_states) > 10, 10, "/joint_states", live.sim.log)
    live.peer.unsubscribe(live.joint_states)
    states = [m for m, _ in snapshot(live.joint_states, live.peer.lock)]
    assert {tuple(m.name) for m in states} == {("wheel_joint",)}  # hinge and slide joints
    stamps = [ns(m.header.stamp) for m in states]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    # 50 Hz in sim time; each is the state between two frames, stamped with its own time.
    assert min(gaps) > 0 and 18 * MS <= sorted(gaps)[len(gaps) // 2] <= 24 * MS, gaps


def test_motor_command_and_float64_duty_turn_the_wheel(live) -> None:
    forward = live.wheel_speed(0.2, live.wait_sim(1.0) - 200 * MS)  # scenario: duty 0.5 at 0
    assert forward > 1.0
    # Where the chassis was (the wheel rolls: x = angle × radius): the wall at x 2.8 m, reached
    # after ~7.7 s of sim time, slows the wheel; a busy machine runs this test that late.
    free = _last_angle(live) * WHEEL_RADIUS < 2.4
    live.send(live.motor, MotorCommand(mode=MotorCommand.MODE_DUTY, value=-0.5))
    # The 2 kg chassis takes a while to reverse: a window from the last 0.2 s of 2.5 s after.
    backward = live.wheel_speed(0.2, live.wait_sim(2.5) - 200 * MS)
    assert backward < -1.0, (forward, backward)
    if free:  # both free-running: the same speed either way
        assert -1.15 < backward / forward < -0.85, (forward, backward)
    # Forward again, slower (moving away from the wall before, so it stays clear of it).
    live.send(live.duty, Float64(data=25.0))  # percent (scale 0.01): duty 0.25
    quarter = live.wheel_speed(0.2, live.wait_sim(2.5) - 200 * MS)
    assert -0.8 < quarter / backward < -0.15, (backward, quarter)  # other way, slower


WHEEL_RADIUS = 0.05  # m, drivetrain.xml


def _last_angle(live) -> float:
    return float(snapshot(live.encoder, live.peer.lock)[-1][0].position[0])


def test_malformed_commands_are_rejected_with_a_logged_reason(live) -> None:
    before = live.peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
    live.send(live.motor, MotorCommand(mode=9, value=0.1))
    live.send(live.motor, MotorCommand(mode=MotorCommand.MODE_DUTY, value=math.nan))
    live.send(live.duty, Float64(data=math.inf))
    wait_until(lambda: "rejected command on /motor/duty_percent" in live.sim.stderr(), 10,
               "the rejection log", live.sim.log)
    log = live.sim.stderr()
    assert "WARN" in log and "rejected command on /motor/command" in log
    assert "payload 'mode' must be one of duty, voltage, torque, velocity, position, got 9" in log
    assert "payload 'value' must be a finite number, got inf" in log
    after = live.peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
    assert after.rejected_inputs - before.rejected_inputs == 3
    assert after.accepted_inputs == before.accepted_inputs
    count = len(live.encoder)
    live.wait_sim(0.1)
    assert len(live.encoder) > count and live.sim.alive()  # still publishing


def _set_real_time_factor(peer: Peer, rtf: float) -> None:
    request = SetParameters.Request(parameters=[ParameterMsg(
        name="real_time_factor", value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE,
                                                      double_value=rtf))])
    result = peer.call(SetParameters, "/fibril_sim/set_parameters", request)
    assert result.results[0].successful, result.results[0].reason


def test_get_state_and_real_time_factor_parameter(live) -> None:
    state = live.peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
    assert state.mode == "realtime" and not state.paused and state.seed == 3
    assert state.target_real_time_factor == live.rtf
    assert state.real_time_factor > 0  # (its value is checked below, at a factor any load allows)
    assert state.episode == 0 and state.tick > 0 and len(state.qpos) == 8
    _set_real_time_factor(live.peer, 0.5)
    time.sleep(2.0)
    state = live.peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
    assert state.target_real_time_factor == 0.5
    # Paced at the new factor: never faster than asked (a busy machine may make it slower:
    # the measured pace is a figure for bench/, not an outcome to assert).
    assert 0 < state.real_time_factor < 0.7, state.real_time_factor


def _boosted_threads(pid: int) -> int:
    """How many threads of process ``pid`` run at nice -10."""
    count = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            count += os.getpriority(os.PRIO_PROCESS, int(task.name)) == -10
        except ProcessLookupError:
            pass
    return count


def test_real_time_delivery_threads_run_at_a_higher_priority_where_permitted(live) -> None:
    """By default (thread_priority 10) in real time: the host, publisher, command and
    executor threads; a user who may not raise priorities is told so once, at INFO, and the
    node runs as before."""
    if os.geteuid() == 0:
        assert _boosted_threads(live.sim.process.pid) >= 4
    else:
        assert _boosted_threads(live.sim.process.pid) == 0
        assert "thread_priority 10: not permitted" in live.sim.log()


def test_qos_mismatches_are_logged_not_silent(live) -> None:
    # A subscription asking for transient-local history from the volatile /chassis_imu, and a
    # best-effort publisher on the reliable /motor/command subscription.
    wrong_sub = live.peer.subscribe(Imu, "/chassis_imu", QoSProfile(
        depth=10, reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    wrong_pub = live.peer.publisher(MotorCommand, "/motor/command", BEST_EFFORT)
    try:
        wait_until(lambda: live.sim.stderr().count("QoS mismatch on") >= 2, 10,
                   "the QoS mismatch warnings", live.sim.log)
    finally:
        live.peer.unsubscribe(wrong_sub)
        live.peer.node.destroy_publisher(wrong_pub)
    log = live.sim.stderr()
    assert "QoS mismatch on /chassis_imu: a subscription requests QoS this publisher " \
           "(reliable, volatile, depth 100) cannot offer" in log and "DURABILITY" in log
    assert "QoS mismatch on /motor/command: a publisher offers QoS incompatible with this " \
           "subscription (reliable, volatile, depth 10)" in log and "RELIABILITY" in log


def test_sigterm_leaves_a_complete_trace_that_replays_bit_for_bit(live, tmp_path) -> None:
    before = live.peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
    live.send(live.motor, MotorCommand(mode=MotorCommand.MODE_VOLTAGE, value=1.5))
    live.send(live.motor, MotorCommand(mode=MotorCommand.MODE_VOLTAGE, value=math.nan))
    wait_until(lambda: live.peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
               .rejected_inputs > before.rejected_inputs, 10, "the rejection", live.sim.log)
    live.wait_sim(0.1)
    started = time.monotonic()
    live.sim.process.send_signal(signal.SIGTERM)
    assert live.sim.wait(5) == 143, live.sim.log()
    assert time.monotonic() - started < patience(2.0)
    with TraceReader(live.trace) as reader:
        inputs = list(reader.external_inputs())
        outputs = sorted((o.device_id, o.episode, o.acquisition_tick, o.values.tobytes())
                         for o in reader.device_outputs())
    live_inputs = sorted((r for r in inputs if r.source_sequence > 0),  # ROS (0: scenario)
                         key=lambda r: r.source_sequence)
    assert live_inputs[-2].accepted and live_inputs[-2].payload_json == \
        '{"mode":"voltage","value":1.5}'
    assert not live_inputs[-1].accepted and "finite number" in live_inputs[-1].reject_reason
    assert all(r.commit_tick > 0 for r in live_inputs if r.accepted)
    assert all(r.commit_tick == -1 and r.reject_reason for r in live_inputs if not r.accepted)
    replay = tmp_path / "replay"
    assert cli.main(["run", str(MANIFEST), "--seed", "3", "--inputs-from-trace",
                     str(live.trace), "--trace", str(replay)]) == 0
    with TraceReader(replay) as reader:
        replayed = sorted((o.device_id, o.episode, o.acquisition_tick, o.values.tobytes())
                          for o in reader.device_outputs())
        assert [(r.commit_tick, r.payload_json) for r in reader.external_inputs()
                if r.source_sequence > 0] == [(r.commit_tick, r.payload_json)
                                               for r in live_inputs if r.accepted]
    assert len(outputs) > 200
    assert replayed == outputs


# --------------------------------------------------------------------------- paused / step
def test_step_advances_exactly_and_clock_never_goes_back_across_reset(peer, live,
                                                                     tmp_path) -> None:
    live.sim.stop()  # one simulation on the domain at a time
    params = tmp_path / "params.yaml"  # --params-file works like -p
    params.write_text(f"fibril_sim:\n  ros__parameters:\n    manifest: {MANIFEST}\n"
                      f"    start_paused: true\n")
    sim = SimProcess(tmp_path, {}, name="paused", params_file=params)
    try:
        clock = peer.subscribe(Clock, "/clock", CLOCK)
        encoder = peer.subscribe(JointState, "/wheel_encoder")
        peer.wait_for_service(Step, "/fibril_sim/step", sim)
        # Starting paused publishes /clock once (time 0) so that waiting nodes do not deadlock.
        wait_until(lambda: len(clock) >= 1, 10, "the first /clock", sim.log)
        assert ns(clock[0][0].clock) == 0
        time.sleep(0.3)
        state = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
        assert state.paused and state.tick == 0 and len(encoder) == 0
        reply = peer.call(Step, "/fibril_sim/step", Step.Request(steps=7))
        assert reply.success and (reply.tick, reply.session_time_ns) == (7, 7 * MS)
        reply = peer.call(Step, "/fibril_sim/step", Step.Request(steps=100))
        assert (reply.tick, reply.episode_time_ns, reply.paused) == (107, 107 * MS, True)
        wait_until(lambda: ns(clock[-1][0].clock) == 107 * MS, 5, "/clock at 107 ms", sim.log)
        # Encoder samples acquired at 0, 2, ..., 106 ms, delivered 1 ms later (<= 107 ms).
        time.sleep(0.3)
        assert [ns(m.header.stamp) // MS for m, _ in snapshot(encoder, peer.lock)] == \
            list(range(0, 107, 2))
        reset = peer.call(Reset, "/fibril_sim/reset", Reset.Request(set_seed=True, seed=5))
        assert reset.success and (reset.episode, reset.tick, reset.seed) == (1, 0, 5)
        assert reset.session_time_ns == 107 * MS
        reply = peer.call(Step, "/fibril_sim/step", Step.Request(steps=10))
        assert (reply.tick, reply.session_time_ns, reply.episode) == (10, 117 * MS, 1)
        wait_until(lambda: ns(clock[-1][0].clock) == 117 * MS, 5, "/clock at 117 ms", sim.log)
        values = [ns(m.clock) for m, _ in snapshot(clock, peer.lock)]
        assert values == sorted(values)  # never back, across the reset
        resumed = peer.call(SetPaused, "/fibril_sim/set_paused", SetPaused.Request(paused=False))
        assert resumed.success and not resumed.paused
        running = peer.call(Step, "/fibril_sim/step", Step.Request(steps=1))
        assert not running.success and "pause it first" in running.message
    finally:
        sim.stop()


def test_as_fast_as_possible_keeps_clock_after_the_messages(peer, live, tmp_path) -> None:
    live.sim.stop()
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "real_time_factor": 0.0}, name="fast")
    try:
        clock = peer.subscribe(Clock, "/clock", CLOCK)
        encoder = peer.subscribe(JointState, "/wheel_encoder")
        frames = peer.subscribe(FrameTiming, "/fibril_sim/frame_timing")
        peer.wait_for_service(GetState, "/fibril_sim/get_state", sim)
        first = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
        # Enough sim time for the checks below however fast this machine runs the node now:
        # 1 000 encoder samples (2 s of sim time) received here.
        wait_until(lambda: len(encoder) > 1000, patience(20.0), "1 000 encoder samples",
                   sim.log)
        last = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
        assert last.mode == "fast" and last.session_time_ns - first.session_time_ns > 1e9
        # As fast as possible the delivery threads keep the process's priority (a boosted
        # host stepping flat out would crowd out everything else); in real time, boosted.
        assert _boosted_threads(sim.process.pid) == 0
        if os.geteuid() == 0:
            _set_real_time_factor(peer, 1.0)
            assert _boosted_threads(sim.process.pid) >= 4
            _set_real_time_factor(peer, 0.0)
            assert _boosted_threads(sim.process.pid) == 0
        # Frames grow past the manifest's 10 ms (10 ticks) toward ~20 ms of wall time each,
        # so the per-frame overhead is paid less often; services are still answered (above).
        wait_until(lambda: len(frames) > 3, 10, "~/frame_timing", sim.log)
        got = snapshot(frames, peer.lock)
        ticks_per_frame = [b[0].tick - a[0].tick for a, b in zip(got, got[1:])]
        assert max(ticks_per_frame) > 10, ticks_per_frame
        samples = snapshot(encoder, peer.lock)
        wait_until(lambda: ns(clock[-1][0].clock) > ns(samples[-1][0].header.stamp), 10,
                   "/clock past the samples", sim.log)
        ticks = [(ns(m.clock), t) for m, t in snapshot(clock, peer.lock)][5:]
        # Until the node has seen this /clock subscriber (its listener refresh, after
        # discovery) it writes /clock once per frame only: check from the first clock period.
        start = next(i for i, ((a, _), (b, _)) in enumerate(zip(ticks, ticks[1:]))
                     if b - a <= ENCODER_PERIOD)
        assert _published_at_delivery(samples, ticks[start:], ENCODER_LATENCY) > 100
        # /clock at least every encoder period (2 ms) even with 10 ms host frames. A busy
        # subscriber misses some of them (the clock's keep-last history overwrites what it has
        # not taken yet), so not every step it sees is 2 ms; a node publishing only per frame
        # would show none at all.
        steps = [b - a for (a, _), (b, _) in zip(ticks, ticks[1:])]
        assert min(steps) > 0
        assert sum(step <= ENCODER_PERIOD for step in steps) >= 0.1 * len(steps), steps[:50]
    finally:
        sim.stop()


# --------------------------------------------------------------------------- bridge files
@pytest.fixture(scope="module")
def plan():
    return SimulationBuilder().build(MANIFEST)


@pytest.mark.parametrize(("text", "message"), [
    ("outputs: [{device: nope}]",
     "outputs[0].device: no device 'nope' in the manifest; devices: wheel_encoder"),
    ("outputs: [{device: chassis_imu, type: sensor_msgs/msg/JointState}]",
     "outputs[0].type: message type 'sensor_msgs/msg/JointState' cannot carry device "
     "'chassis_imu' (fibril_sim/imu); possible: sensor_msgs/msg/Imu, "
     "fibril_msgs/msg/DeviceSample"),
    ("outputs: [{device: front_range, topic: /chassis_imu}]",
     "outputs[0].topic: duplicate topic '/chassis_imu' (also the default topic of device "
     "chassis_imu)"),
    ("inputs: [{topic: /a, type: std_msgs/Float64, endpoint: motor/command, mode: warp}]",
     "inputs[0].mode: unknown mode 'warp'"),
    ("inputs: [{topic: /a, type: std_msgs/Float64, endpoint: wheel, mode: duty}]",
     "inputs[0].endpoint: no actuator endpoint 'wheel' in the manifest; endpoints: "
     "motor/command"),
    ("inputs: [{topic: /a, type: std_msgs/Float64, endpoint: motor/command, mode: position}]",
     "inputs[0].mode: mode 'position' is not accepted by endpoint 'motor/command'"),
    ("inputs: [{topic: /a, type: std_msgs/String, endpoint: motor/command}]",
     "inputs[0].type: message type 'std_msgs/String' is not possible here"),
    ("outputs: [{device: chassis_imu, stamp: later}]",
     "outputs[0].stamp: unknown value 'later'; expected one of acquisition, delivery"),
    ("outputs: [{device: drive_feedback, stamp: delivery}]",
     "outputs[0].stamp: fibril_msgs/msg/DeviceSample carries both times"),
    ("outputs: [{device: chassis_imu, colour: red}]",
     "outputs[0].colour: unknown key; expected one of"),
    ("inputs: [{topic: 9lives, type: std_msgs/Float64, endpoint: motor/command, mode: duty}]",
     "inputs[0].topic: '9lives' is not a valid ROS topic name"),
])
def test_bridge_file_errors_name_file_key_and_value(plan, tmp_path, text, message) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text("schema_version: {major: 1, minor: 0}\n" + text + "\n")
    with pytest.raises(BridgeError) as error:
        load_bridge(plan, path)
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)


def test_default_bridge_derives_topics_and_types_from_the_manifest(plan) -> None:
    bridge = load_bridge(plan)
    assert [(e.topic, e.type, e.targets) for e in bridge.inputs] == [
        ("/motor/command", "fibril_msgs/msg/MotorCommand", ("motor/command",))]
    assert [(e.topic, e.type, e.frame_id) for e in bridge.outputs] == [
        ("/wheel_encoder", "sensor_msgs/msg/JointState", "wheel_joint"),
        ("/chassis_imu", "sensor_msgs/msg/Imu", "imu"),
        ("/front_range", "sensor_msgs/msg/Range", "range_front"),
        ("/chassis_pose", "nav_msgs/msg/Odometry", "world"),
        ("/drive_feedback", "fibril_msgs/msg/DeviceSample", "drive")]


def test_a_bad_bridge_file_stops_the_node_with_one_line(peer, tmp_path) -> None:
    bridge = tmp_path / "bridge.yaml"
    bridge.write_text("schema_version: {major: 1, minor: 0}\noutputs: [{device: nope}]\n")
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "bridge": bridge}, name="bad")
    try:
        assert sim.wait(30) == 2
        lines = [line for line in sim.stderr().splitlines() if line.strip()]
        assert lines == [f"fibril_sim: error: {bridge}: outputs[0].device: no device 'nope' in "
                         f"the manifest; devices: wheel_encoder, chassis_imu, front_range, "
                         f"chassis_pose, drive_feedback"]
    finally:
        sim.stop()


# --------------------------------------------------------------------------- sync mode
class Answerer:
    """A controller stand-in: answers every new /clock (after 0) with one MotorCommand whose
    duty depends only on the time, so the commands of two runs must be equal."""

    def __init__(self, peer: Peer, answer: bool = True) -> None:
        self.seen: set[int] = set()
        self.answer = answer
        self.peer = peer
        self.motor = peer.publisher(MotorCommand, "/motor/command")
        self.clock = peer.subscribe(Clock, "/clock", CLOCK, on_message=self._on_clock)

    def close(self) -> None:
        """Leave the graph: a later run must not take this one's endpoints for its own."""
        self.answer = False
        self.peer.unsubscribe(self.clock)
        self.peer.node.destroy_publisher(self.motor)

    def _on_clock(self, msg: Clock) -> None:
        now = ns(msg.clock)
        if now == 0 or now in self.seen or not self.answer:
            return
        self.seen.add(now)
        self.motor.publish(MotorCommand(mode=MotorCommand.MODE_DUTY,
                                        value=0.1 * (now // (10 * MS) % 7) - 0.3))


def _sync_run(peer: Peer, tmp_path: Path, name: str, periods: int) -> list[tuple[int, str]]:
    trace = tmp_path / f"{name}.trace"
    # The answerer first: a controller answers each /clock once, and the node starts its first
    # period once the publishers it sees are matched. Created after the node, it could miss
    # that (the node taking a previous run's answerer, still in the graph, for it).
    answerer = Answerer(peer)
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "seed": 1, "trace_dir": trace,
                                "sync_topics": ["/motor/command"], "control_period": 0.01,
                                # (wall seconds the node waits for this process's answer: a
                                # starved answerer is slow, not absent)
                                "sync_timeout": patience(5.0)}, name=name)
    try:
        wait_until(lambda: len(answerer.seen) >= periods, patience(30.0),
                   f"{periods} sync periods", lambda: f"{sim.log()}\nthe answerer answered "
                   f"the /clock times (ns) {sorted(answerer.seen)[:5]}")
        sim.process.send_signal(signal.SIGINT)
        assert sim.wait(patience(5.0)) == 130, sim.log()
    finally:
        answerer.close()
        sim.stop()
    with TraceReader(trace) as reader:
        return [(r.commit_tick, r.payload_json) for r in reader.external_inputs()
                if r.source_sequence > 0]


def test_sync_mode_commits_the_answers_at_the_same_ticks_on_every_run(peer, tmp_path) -> None:
    first = _sync_run(peer, tmp_path, "sync1", 22)
    second = _sync_run(peer, tmp_path, "sync2", 22)
    assert len(first) >= 20 and len(second) >= 20
    # One answer per control period (10 ms), committed at the period's end tick.
    assert [tick for tick, _ in first[:20]] == [10 * k for k in range(1, 21)]
    assert first[:20] == second[:20]


def test_sync_mode_fails_loudly_naming_a_topic_that_never_answers(peer, tmp_path) -> None:
    silent = Answerer(peer, answer=False)  # a publisher on /motor/command that never answers
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "sync_topics": ["/motor/command"],
                                "control_period": 0.01, "sync_timeout": 1.0}, name="silent")
    try:
        assert sim.wait(30) == 1, sim.log()
        assert "sync: no message on /motor/command within sync_timeout 1 s" in sim.stderr()
    finally:
        silent.close()
        sim.stop()


def test_server_socket_lets_a_remote_client_attach_to_the_nodes_simulation(peer,
                                                                           tmp_path) -> None:
    from fibril_sim_core.runtime import SimulationConnection

    socket = tmp_path / "sim.sock"
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "start_paused": True,
                                "server_socket": socket}, name="served")
    try:
        peer.wait_for_service(GetState, "/fibril_sim/get_state", sim)
        wait_until(lambda: f"server unix://{socket}" in sim.log(), 10,
                   "the server address in the start-up line", sim.log)
        assert socket.stat().st_mode & 0o777 == 0o600
        remote = SimulationConnection.connect(f"unix://{socket}")
        try:
            before = remote.state()["tick"]
            remote.step(5)  # through the node's runtime: the node's own state says so
            state = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
            assert state.tick == before + 5 and state.paused
        finally:
            remote.close()
        assert sim.alive()
    finally:
        sim.stop()


def test_a_topic_nobody_heard_resumes_with_the_samples_of_a_run_hearing_all(peer,
                                                                            tmp_path) -> None:
    """The node asks the simulation only for the devices whose topics have subscribers; the
    IMU, unheard for 100 ticks, gives a late subscriber (from the next ~/step on) exactly the
    samples an offline run making every sample gives: its noise stream never slipped."""
    from fibril_sim_core.records import DeviceOutput

    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "start_paused": True, "seed": 3},
                     name="late")
    try:
        peer.wait_for_service(Step, "/fibril_sim/step", sim)
        assert peer.call(Step, "/fibril_sim/step", Step.Request(steps=100)).tick == 100
        imu = peer.subscribe(Imu, "/chassis_imu")
        wait_until(lambda: peer.node.count_publishers("/chassis_imu") > 0, 10,
                   "the IMU publisher", sim.log)
        time.sleep(0.3)  # the node's side of the match
        assert peer.call(Step, "/fibril_sim/step", Step.Request(steps=50)).tick == 150
        wait_until(lambda: len(imu) >= 10, 10, "10 IMU messages", sim.log)
        time.sleep(0.2)
        got = snapshot(imu, peer.lock)
    finally:
        sim.stop()
    offline = SimulationBuilder().build(MANIFEST).create_instance(seed=3)
    offline.advance(150)
    expected = [r for r in offline.poll() if isinstance(r, DeviceOutput)
                and r.device_id == "chassis_imu" and r.acquisition_tick >= 100
                and r.acquisition_tick + 1 <= 150]
    assert [ns(m.header.stamp) // MS for m, _ in got] == \
        [r.acquisition_tick for r in expected] == list(range(100, 150, 5))
    for (msg, _), record in zip(got, expected, strict=True):
        w, a = msg.angular_velocity, msg.linear_acceleration
        assert [w.x, w.y, w.z, a.x, a.y, a.z] == record.values.tolist()


def test_a_server_socket_in_a_missing_directory_is_a_named_error(peer, tmp_path) -> None:
    socket = tmp_path / "missing" / "sim.sock"
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "server_socket": socket}, name="nosock")
    try:
        assert sim.wait(30) == 2
        assert (f"parameter server_socket: directory {socket.parent} does not exist"
                in sim.stderr()), sim.log()
    finally:
        sim.stop()


def test_without_the_input_thread_the_executor_serves_commands(peer, tmp_path,
                                                               monkeypatch) -> None:
    """The fallback for an rclpy without the implementation module the input thread uses."""
    monkeypatch.setenv("FIBRIL_SIM_INPUT_THREAD", "0")
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "start_paused": True}, name="executor")
    try:
        peer.wait_for_service(GetState, "/fibril_sim/get_state", sim)
        wait_until(lambda: "command subscriptions served by the executor" in sim.log(), 10,
                   "the fallback in the start-up log", sim.log)
        publisher = peer.publisher(MotorCommand, "/motor/command")
        wait_until(lambda: publisher.get_subscription_count() > 0, 10, "the subscription",
                   sim.log)

        def handled() -> int:
            state = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
            return state.accepted_inputs + state.rejected_inputs

        before = handled()
        deadline = time.monotonic() + 20.0
        resend = 0.0
        while handled() == before:  # re-sent each second: a volatile message may precede the match
            assert time.monotonic() < deadline, sim.log()
            if time.monotonic() >= resend:
                publisher.publish(MotorCommand(mode=MotorCommand.MODE_DUTY, value=0.3))
                resend = time.monotonic() + 1.0
            time.sleep(0.05)
        state = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
        assert state.accepted_inputs > 0 and sim.alive()
    finally:
        sim.stop()


def test_without_a_seed_parameter_the_node_starts_from_the_manifests_seed(peer,
                                                                          tmp_path) -> None:
    """The plan's provenance holds the episode seed: the node's default (-1) takes the
    manifest's scenario.seed, as ``fibril_sim run`` does."""
    import yaml

    document = yaml.safe_load(Path(MANIFEST).read_text())
    document["model"] = str(Path(MANIFEST).parent / document["model"])
    document.setdefault("scenario", {})["seed"] = 41
    manifest = tmp_path / "seeded.yaml"
    manifest.write_text(yaml.safe_dump(document))
    trace = tmp_path / "trace"
    sim = SimProcess(tmp_path, {"manifest": manifest, "start_paused": True,
                                "trace_dir": trace}, name="seeded")
    try:  # this node's own start-up line and trace (another node may serve get_state too)
        wait_until(lambda: f"simulating {manifest}" in sim.log(), 30,
                   "the start-up line", sim.log)
        assert ", paused, seed 41," in sim.log()
    finally:
        sim.stop()
    with TraceReader(trace) as reader:
        assert reader.provenance["episode_seed"] == 41
        assert [e.seed for e in reader.episodes()] == [41]
