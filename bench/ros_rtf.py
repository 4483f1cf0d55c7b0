"""Live ROS 2 node benchmark: real-time factor, publish jitter, command latency, fast ratio.

The drivetrain with 1 kHz physics (drivetrain.xml), the wheel encoder at 1 kHz (latency 1 ms)
and the IMU at 200 Hz (latency 1 ms); the node (``python -m fibril_sim_ros.sim_node``) runs as a
child process and this process subscribes to /wheel_encoder, /chassis_imu and /clock over shared
memory on a private ROS domain.

1. Real time (``real_time_factor: 1.0``, traced) for ``--seconds`` (10) wall seconds:
   * measured real-time factor: simulated / wall time between the first and last /clock;
   * publish jitter of encoder and IMU messages against the ideal schedule: each message's
     publication time (DDS source timestamp) minus its delivery time on the simulation clock,
     less the median of that offset; p50 / p99 of the absolute value;
   * end-to-end latency: ``--commands`` MotorCommands are published; for each, from its
     publication to the arrival here of the first encoder message whose acquisition happened
     after the command reached physics (its commit tick, from the session's trace, plus the
     endpoint's command latency). It includes the simulated latencies (command 2 ms, encoder
     1 ms, sampling) and the transport; the transport share is reported too.
2. As fast as possible (``real_time_factor: 0``, not traced) with the subscriber on the encoder
   only (as a wheel controller): ticks per second against ``fibril_sim run`` of the same
   manifest without ROS (ratio).

Targets: real-time factor >= 0.99, p99 jitter < 2 ms, ratio >= 0.5.

The fast phase and the offline run alternate ``--repeats`` times (default 5) and the medians
are reported, with the median of the per-pair ratios (a shared machine's load changes from
minute to minute; each pair runs back to back). ``--no-realtime`` skips phase 1.

3. ``--ground-truth``: the Menagerie-derived Panda (config/examples/panda/panda.yaml, 1 kHz
   physics) with what a ROS user sees on (``/joint_states`` and ``/tf`` at 50 Hz, the robot
   description and the geom markers, each with a subscriber in this process) against the same
   node with all of them off, interleaved: the real-time factor at rtf 1 (from ``/clock``) and
   the as-fast-as-possible ticks/s, as ratios to ``fibril_sim run`` of the same manifest.
   Target: rtf >= 0.99 and the fast ratio at most 10 % below the node without them.

4. ``--live``: live delivery at rtf 1 (docs/benchmarks/live_delivery.md), with ``--hogs``
   (default 1) CPU-busy processes running: for the drivetrain (above, plus the motor feedback
   at 1 kHz, latency 1 ms) and the Panda (``/joint_states`` at 500 Hz and ``/tf`` at 100 Hz
   on), each untraced and traced, in the same minutes:
   * the machine's own timer noise: a child process's ``time.sleep(0.001)`` loop, its
     overshoot p50 / p99 / max (at the node's ``thread_priority``: by default 10 in real time,
     where this process may raise priorities, as the node does);
   * the node's delivery lateness as it measures it (``get_state``: each output's write time
     minus its due wall time), p50 / p99 / max, and p99 as a ratio to the sleep loop's p99;
     target p99 <= 2 x sleep p99 + 1 ms;
   * a controller process (``--controller``: rclpy, GC off) that subscribes to the feedback
     (``/drive_feedback``; Panda: ``/joint_states``), and every 20 ms, from inside a sample's
     callback, flips the sign of its command (duty 0.6 on ``/motor/command``; Panda torque
     2 Nm on ``/joint1/command``); the round trip is from that publication to the arrival
     of the first sample whose force (effort) has the new sign. Target p50 <= 2 control
     periods (sample periods: 1 ms; Panda 2 ms) + the device latencies (command 2 ms +
     feedback 1 ms; Panda 0). It also reports the samples' arrival lateness there: arrival
     - (stamp + latency), less its minimum over the run (the clocks' offset);
   * the real-time factor from get_state, and the node process's CPU time (all threads, from
     /proc) per simulated second over the same seconds;
   * the load average before and after (a shared machine).
   ``--baseline DIR`` runs another checkout's node too, interleaved.

Usage: ``python bench/ros_rtf.py [--seconds 10] [--fast-seconds 5] [--commands 20]
[--repeats 5] [--no-realtime] [--ground-truth] [--live [--hogs 1] [--priority 0]
[--live-repeats 1] [--robots drivetrain panda] [--baseline DIR]]``
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("FASTDDS_BUILTIN_TRANSPORTS", "SHM")
os.environ.setdefault("ROS_DOMAIN_ID", str(101 + os.getpid() % 100))

import rclpy  # noqa: E402
from fibril_msgs.msg import MotorCommand  # noqa: E402
from fibril_msgs.srv import GetState  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.exceptions import InvalidHandle
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Imu, JointState  # noqa: E402

from fibril_sim_core.trace import TraceReader  # noqa: E402
from fibril_sim_ros.priority import DEFAULT_THREAD_PRIORITY  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "config" / "examples" / "drivetrain" / "drivetrain.xml"
MS = 1_000_000
ENCODER_LATENCY_NS = MS
COMMAND_LATENCY_TICKS = 2
MANIFEST = f"""\
schema_version: {{major: 3, minor: 1}}
model: {MODEL}
components:
  - {{id: motor, type: fibril_sim/motor, endpoint: motor/command, bind: {{actuator: drive}},
     config: {{supply_voltage: 12.0, command_latency: 0.002}}}}
  - {{id: wheel_encoder, type: fibril_sim/encoder, bind: {{joint: wheel_joint}},
     config: {{period: 0.001, latency: 0.001, counts_per_revolution: 1024, noise_counts: 0.5}}}}
  - {{id: chassis_imu, type: fibril_sim/imu, bind: {{site: imu}},
     config: {{period: 0.005, latency: 0.001, gyro_noise: 0.01, accel_noise: 0.05}}}}
  - {{id: drive_feedback, type: fibril_sim/motor_feedback, bind: {{actuator: drive}},
     config: {{period: 0.001, latency: 0.001}}}}
runtime: {{mode: realtime, real_time_factor: 1.0}}
scenario:
  keyframe: rest
  initial_inputs:
    - {{source_id: motor/command, source_sequence: 0, payload_type: fibril_sim/motor_command/v1,
       payload: {{mode: duty, value: 0.3}}}}
"""
RELIABLE = QoSProfile(depth=5000, reliability=ReliabilityPolicy.RELIABLE)
# As rclpy's time source listens to /clock: best effort, the latest only.
CLOCK_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)


def ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class _Peer:
    """A node of this process on a context of its own, spun by a thread until ``close``."""

    def __init__(self, name: str) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)

    def _start(self, executor: Any, timeout: float) -> None:
        self.executor = executor
        self.executor.add_node(self.node)
        self._stop = False
        self._timeout = timeout
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop:
            try:
                self.executor.spin_once(timeout_sec=self._timeout)
            except InvalidHandle:  # an entity destroyed from another thread meanwhile
                continue

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()


class Subscriber(_Peer):
    """This process's node: what arrives (message, source timestamp, arrival time)."""

    def __init__(self) -> None:
        super().__init__("fibril_bench_subscriber")
        self.lock = threading.Lock()
        self.encoder = self._subscribe(JointState, "/wheel_encoder", RELIABLE)
        self.imu = self._subscribe(Imu, "/chassis_imu", RELIABLE)
        self.clock = self._subscribe(Clock, "/clock", CLOCK_QOS)
        self.motor = self.node.create_publisher(MotorCommand, "/motor/command", 10)
        self.recording = False
        self._start(SingleThreadedExecutor(context=self.context), 0.01)

    def encoder_only(self) -> None:
        """Keep only the encoder subscription (what a wheel controller listens to)."""
        for subscription in list(self.node.subscriptions):
            if subscription.topic_name != "/wheel_encoder":
                self.node.destroy_subscription(subscription)

    def _subscribe(self, cls, topic, qos) -> list:
        received: list = []

        def callback(msg, info) -> None:
            if self.recording:
                received.append((msg, int(info["source_timestamp"]), time.time_ns()))

        self.node.create_subscription(cls, topic, callback, qos)
        return received

    def clear(self) -> None:
        for items in (self.encoder, self.imu, self.clock):
            items.clear()

    def state(self) -> GetState.Response:
        client = self.node.create_client(GetState, "/fibril_sim/get_state")
        try:
            if not client.wait_for_service(timeout_sec=30):
                raise SystemExit("the node did not come up (no ~/get_state)")
            future = client.call_async(GetState.Request())
            deadline = time.monotonic() + 30
            while not future.done() and time.monotonic() < deadline:
                time.sleep(0.002)
            if not future.done():
                raise SystemExit("the node did not answer ~/get_state in 30 s")
            return future.result()
        finally:
            self.node.destroy_client(client)


def _events_executor(context: Any) -> Any:
    """rclpy's EventsExecutor where there is one (cheaper per message), else the default."""
    try:
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    except ImportError:
        return SingleThreadedExecutor(context=context)


class Counter(_Peer):
    """A lean subscriber for the fast phase: counts encoder messages as they arrive (raw
    bytes, no deserialization) on rclpy's EventsExecutor where there is one. It shares the
    machine's cores with the node, so the executor's own cost per message (a Python
    SingleThreadedExecutor pass is ~100 us) would otherwise be measured as the node's."""

    def __init__(self) -> None:
        super().__init__("fibril_bench_counter")
        self.count = 0
        self.node.create_subscription(JointState, "/wheel_encoder", self._on_message,
                                      RELIABLE, raw=True)
        self._start(_events_executor(self.context), 0.05)

    def _on_message(self, _: bytes) -> None:
        self.count += 1


def start_node(manifest: Path, scratch: Path, name: str, node_command: list[str] | None = None,
               **params) -> subprocess.Popen:
    command = [*(node_command or [sys.executable, "-m", "fibril_sim_ros.sim_node"]),
               "--ros-args", "-p", f"manifest:={manifest}"]
    for key, value in params.items():
        command += ["-p", f"{key}:={value}"]
    return subprocess.Popen(command, stdout=open(scratch / f"{name}.out", "w"),
                            stderr=open(scratch / f"{name}.err", "w"), stdin=subprocess.DEVNULL)


def stop_node(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def jitter(samples: list, latency_ns: int) -> np.ndarray:
    """|publication - delivery (sim) - median offset| in ms."""
    offsets = np.array([published - (ns(m.header.stamp) + latency_ns)
                        for m, published, _ in samples], dtype=np.float64)
    return np.abs(offsets - np.median(offsets)) / 1e6


def realtime_phase(sub: Subscriber, manifest: Path, scratch: Path, seconds: float,
                   commands: int, node_command: list[str] | None = None) -> dict:
    trace = scratch / "rt.trace"
    shutil.rmtree(trace, ignore_errors=True)
    node = start_node(manifest, scratch, "rt", node_command, real_time_factor=1.0,
                      trace_dir=trace)
    sent: list[int] = []
    try:
        sub.state()
        time.sleep(1.0)  # discovery settles
        sub.clear()
        gc.collect()
        gc.disable()  # this process's own collections (of the messages it keeps) would delay arrivals
        sub.recording = True
        start = time.monotonic()
        interval = seconds / (commands + 1)
        for k in range(commands):
            while time.monotonic() < start + (k + 1) * interval:
                time.sleep(0.001)
            sent.append(time.time_ns())
            sub.motor.publish(MotorCommand(mode=MotorCommand.MODE_DUTY,
                                           value=0.6 if k % 2 else -0.6))
        while time.monotonic() < start + seconds:
            time.sleep(0.01)
        sub.recording = False
        state = sub.state()
    finally:
        gc.enable()
        stop_node(node)
    with sub.lock:
        clock, encoder, imu = list(sub.clock), list(sub.encoder), list(sub.imu)
    rtf = (ns(clock[-1][0].clock) - ns(clock[0][0].clock)) / (clock[-1][2] - clock[0][2])
    with TraceReader(trace) as reader:
        commits = [r.commit_tick for r in reader.external_inputs()
                   if r.accepted and r.source_sequence > 0]
    latencies, transport = [], []
    arrivals = [(ns(m.header.stamp), arrived, published) for m, published, arrived in encoder]
    for sent_ns, commit in zip(sent, commits):
        applied_ns = (commit + COMMAND_LATENCY_TICKS) * MS  # released; acquired from here on
        first = next(((a, arrived, pub) for a, arrived, pub in arrivals if a >= applied_ns),
                     None)
        if first is not None:
            latencies.append((first[1] - sent_ns) / 1e6)
            transport.append((first[1] - first[2]) / 1e6)
    return {"rtf": rtf, "node_rtf": state.real_time_factor, "encoder": jitter(encoder, MS),
            "imu": jitter(imu, MS), "encoder_count": len(encoder), "imu_count": len(imu),
            "latency": np.array(latencies), "transport": np.array(transport),
            "commands": len(sent), "committed": len(commits)}


def fast_phase(sub: Subscriber, manifest: Path, scratch: Path, seconds: float,
               lean: bool = True, node_command: list[str] | None = None
               ) -> tuple[float, float, float, float]:
    """Ticks/s of the node as fast as possible, encoder messages received per tick, and the
    CPU time per tick (µs, all threads) of the node's process and of this one (the
    subscriber's): on a machine of few cores they share, it shows where the time goes."""
    sub.encoder_only()
    counter = Counter() if lean else None
    if counter is not None:  # only the counter listens to the encoder
        for subscription in list(sub.node.subscriptions):
            sub.node.destroy_subscription(subscription)
    node = start_node(manifest, scratch, "fast", node_command, real_time_factor=0.0)
    try:
        sub.state()
        # Timing starts once encoder messages arrive (the node publishes only to matched
        # subscribers, and matching can take longer than the node's start-up).
        sub.recording = counter is None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
                counter.count if counter is not None else len(sub.encoder)):
            time.sleep(0.01)
        time.sleep(0.2)
        sub.recording = True
        first = sub.state()
        received0 = counter.count if counter is not None else len(sub.encoder)
        t0 = time.monotonic()
        cpu0 = (process_cpu_s(node.pid), time.process_time())
        time.sleep(seconds)
        cpu1 = (process_cpu_s(node.pid), time.process_time())
        last = sub.state()
        t1 = time.monotonic()
        received = (counter.count if counter is not None else len(sub.encoder)) - received0
        sub.recording = False
    finally:
        stop_node(node)
        if counter is not None:
            counter.close()
    ticks = last.tick - first.tick
    if not ticks:
        return 0.0, 0.0, math.nan, math.nan
    # The CPU window is inside the tick window (the two get_state calls): scale to it.
    window = ticks * seconds / (t1 - t0)
    return (ticks / (t1 - t0), received / ticks, (cpu1[0] - cpu0[0]) / window * 1e6,
            (cpu1[1] - cpu0[1]) / window * 1e6)


def process_cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid`` so far, all threads (Linux /proc; NaN elsewhere): the
    sum of its threads' scheduler run times (nanoseconds), else user + system time from
    /proc/PID/stat (whole clock ticks, 10 ms: too coarse for a run of a few seconds).
    Threads that ended are not in the sum; none of the node's end while it is measured."""
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def offline_rate(manifest: Path, seconds: float) -> float:
    result = subprocess.run([sys.executable, "-m", "fibril_sim_core.cli", "run", str(manifest),
                             "--duration", str(seconds)], capture_output=True, text=True,
                            check=True)
    match = re.search(r"ran (\d+) ticks .* in ([0-9.]+) s wall", result.stdout)
    return int(match.group(1)) / float(match.group(2))


def baseline_command(root: Path) -> list[str]:
    """The node of another checkout (``--baseline``): its packages first on the path."""
    paths = [str(root / "fibril_sim_ros"), str(root / "fibril_sim_core")]
    code = f"import sys; sys.path[:0] = {paths!r}; from fibril_sim_ros.sim_node import main; main()"
    return [sys.executable, "-c", code]


PANDA = ROOT / "config" / "examples" / "panda" / "panda.yaml"
GROUND_TRUTH_ON = """schema_version: {major: 1, minor: 0}
joint_states: {rate: 50.0}
tf: {rate: 50.0}
markers: true
"""
GROUND_TRUTH_OFF = """schema_version: {major: 1, minor: 0}
joint_states: false
tf: false
robot_description: false
"""


class GroundTruthCounter(_Peer):
    """Counts /joint_states and /tf messages as they arrive (raw, on the EventsExecutor where
    there is one, like ``Counter``), and holds the robot description's latched topic."""

    def __init__(self) -> None:
        super().__init__("fibril_bench_ground_truth")
        from std_msgs.msg import String

        self.count = 0
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(JointState, "/joint_states", self._on_message, qos,
                                      raw=True)
        try:
            from tf2_msgs.msg import TFMessage

            self.node.create_subscription(TFMessage, "/tf", self._on_message, qos, raw=True)
        except ImportError:
            print("(no tf2_msgs here: /tf is off)", file=sys.stderr)
        self.node.create_subscription(String, "/robot_description", lambda _: None, 1)
        self._start(_events_executor(self.context), 0.05)

    def _on_message(self, _: bytes) -> None:
        self.count += 1


def ground_truth_run(scratch: Path, bridge: Path, rtf: float, seconds: float
                     ) -> tuple[float, int, float]:
    """One node on the Panda: (simulated / wall time from /clock at rtf 1, or ticks/s as
    fast as possible; ground-truth messages received; node CPU us a tick).

    As fast as possible the node starts paused and runs the same window of simulated time
    in every run (``seconds`` x 20 000 ticks from tick 0): the Panda's cost per step depends
    on its state (it falls and settles), so windows of equal wall time would compare
    different motions."""
    from fibril_msgs.srv import SetPaused

    peer = Subscriber()
    if rtf == 0:
        peer.encoder_only()  # no /clock subscription as fast as possible
    counter = GroundTruthCounter()
    params = dict(real_time_factor=rtf, bridge=bridge)
    if rtf == 0:
        params["start_paused"] = "true"
    node = start_node(PANDA, scratch, "gt", None, **params)
    try:
        peer.state()
        time.sleep(1.0)
        peer.clear()
        peer.recording = True
        first = peer.state()
        received0 = counter.count
        cpu0 = process_cpu_s(node.pid)
        t0 = time.monotonic()
        if rtf > 0:
            time.sleep(seconds)
            last = peer.state()
        else:
            target = first.tick + int(seconds * 20_000)
            client = peer.node.create_client(SetPaused, "/fibril_sim/set_paused")
            client.wait_for_service(timeout_sec=30)
            future = client.call_async(SetPaused.Request(paused=False))
            last = first
            while last.tick < target:
                time.sleep(0.02)
                last = peer.state()
            assert future.done()
        t1 = time.monotonic()
        cpu1 = process_cpu_s(node.pid)
        received = counter.count - received0
        peer.recording = False
    finally:
        stop_node(node)
        counter.close()
        peer.close()
    ticks = last.tick - first.tick
    cpu = (cpu1 - cpu0) / ticks * 1e6 if ticks else math.nan
    if rtf > 0:
        clock = peer.clock
        value = (ns(clock[-1][0].clock) - ns(clock[0][0].clock)) / (clock[-1][2] - clock[0][2])
    else:
        value = ticks / (t1 - t0)
    return value, received, cpu


def ground_truth(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="fibril-ros-bench-"))
    bridges = {"ground truth on": scratch / "on.yaml", "ground truth off": scratch / "off.yaml"}
    bridges["ground truth on"].write_text(GROUND_TRUTH_ON)
    bridges["ground truth off"].write_text(GROUND_TRUTH_OFF)
    rt: dict[str, list[float]] = {name: [] for name in bridges}
    fast: dict[str, list[float]] = {name: [] for name in bridges}
    messages: dict[str, list[int]] = {name: [] for name in bridges}
    cpu: dict[str, list[float]] = {name: [] for name in bridges}
    offline: list[float] = []
    for _ in range(max(1, args.repeats)):
        for name, bridge in bridges.items():
            rate, count, _ = ground_truth_run(scratch, bridge, 1.0, args.seconds)
            rt[name].append(rate)
            messages[name].append(count)
            rate, _, per_tick = ground_truth_run(scratch, bridge, 0.0, args.fast_seconds)
            fast[name].append(rate)
            cpu[name].append(per_tick)
        offline.append(offline_rate(PANDA, args.fast_seconds * 20.0))
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"Panda (1 kHz physics), median of {len(offline)} interleaved repeats; fibril_sim "
          f"run {np.median(offline):.0f} ticks/s:")
    for name in bridges:
        ratios = [f / o for f, o in zip(fast[name], offline)]
        print(f"  [{name}] real time: rtf {np.median(rt[name]):.4f} (runs "
              f"{', '.join(f'{r:.4f}' for r in rt[name])}), {np.median(messages[name]):.0f} "
              f"/joint_states + /tf messages in {args.seconds:g} s; as fast as possible "
              f"{np.median(fast[name]):.0f} ticks/s, ratio to fibril_sim run "
              f"{np.median(ratios):.2f} (per pair {', '.join(f'{r:.2f}' for r in ratios)}), "
              f"node CPU {np.median(cpu[name]):.1f} us a tick")
    on = [f / o for f, o in zip(fast["ground truth on"], fast["ground truth off"])]
    print(f"  on / off as fast as possible: {np.median(on):.3f} (per pair "
          f"{', '.join(f'{r:.3f}' for r in on)})   target >= 0.90; real time target >= 0.99")


# --------------------------------------------------------------------------- live delivery
LIVE_PANDA_BRIDGE = """schema_version: {major: 1, minor: 0}
joint_states: {rate: 500.0}
tf: {rate: 100.0}
"""
FLIP_S = 0.02  # the controller flips its command this often


def sleep_noise(seconds: float, out: Path) -> None:
    """Child process: the overshoot of ``time.sleep(0.001)`` (s), GC off, saved as .npy."""
    gc.disable()
    overshoot = []
    end = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        if start > end:
            break
        time.sleep(0.001)
        overshoot.append(time.perf_counter() - start - 0.001)
    np.save(out, np.array(overshoot))


def hog(seconds: float) -> None:
    """Child process: a CPU-busy loop."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for _ in range(10_000):
            x += 1


def controller(spec: dict) -> None:
    """Child process: the controller of ``--live`` (see the module docstring). Writes
    ``{"roundtrip": [...s], "lateness": [...s]}`` to spec["out"]."""
    import json

    gc.disable()
    rclpy.init()
    node = rclpy.create_node("fibril_bench_controller")
    panda = spec["robot"] == "panda"
    if panda:
        from sensor_msgs.msg import JointState as Sample

        topic, command_topic = "/joint_states", "/joint1/command"
        mode, amplitude, latency_ns = MotorCommand.MODE_TORQUE, 2.0, 0
    else:
        from fibril_msgs.msg import DeviceSample as Sample

        topic, command_topic = "/drive_feedback", "/motor/command"
        mode, amplitude, latency_ns = MotorCommand.MODE_DUTY, 0.6, MS
    publisher = node.create_publisher(MotorCommand, command_topic, 10)
    arrivals: list[tuple[int, int]] = []
    roundtrip: list[float] = []
    state = {"sign": 1.0, "sent": 0, "waiting": False, "next": 0.0}
    start = time.monotonic() + spec["settle"]
    end = start + spec["seconds"]

    def on_sample(msg: Any) -> None:
        now_ns = time.time_ns()
        now = time.monotonic()
        if now < start:
            return
        arrivals.append((ns(msg.header.stamp) + latency_ns, now_ns))
        value = msg.effort[0] if panda else msg.values[0]
        if state["waiting"] and value * state["sign"] > 0:
            roundtrip.append((now_ns - state["sent"]) / 1e9)
            state["waiting"] = False
        if now >= state["next"]:
            state["sign"] = -state["sign"]
            state["next"] = now + FLIP_S
            state["sent"] = time.time_ns()
            state["waiting"] = True
            publisher.publish(MotorCommand(mode=mode, value=amplitude * state["sign"]))

    node.create_subscription(Sample, topic, on_sample, RELIABLE)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
    offsets = np.array([arrived - due for due, arrived in arrivals], dtype=np.float64)
    lateness = (offsets - offsets.min()) / 1e9 if len(offsets) else offsets
    Path(spec["out"]).write_text(json.dumps({"roundtrip": roundtrip,
                                             "lateness": lateness.tolist()}))
    node.destroy_node()
    rclpy.try_shutdown()


def _child(*args: str, **kwargs: Any) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args],
                            stdin=subprocess.DEVNULL, **kwargs)


def live_run(scratch: Path, robot: str, traced: bool, seconds: float, hogs: int,
             node_command: list[str] | None, priority: int | None = None) -> dict:
    """One node at rtf 1 with the controller, the sleep loop and the hogs beside it."""
    import json

    settle = 3.0
    name = f"live-{robot}-{'traced' if traced else 'untraced'}-{priority}"
    params: dict[str, Any] = dict(real_time_factor=1.0)
    if priority is not None:
        params["thread_priority"] = priority
    else:  # the node's default, where this process may (as the node's)
        priority = DEFAULT_THREAD_PRIORITY
    if traced:
        shutil.rmtree(scratch / f"{name}.trace", ignore_errors=True)
        params["trace_dir"] = scratch / f"{name}.trace"
    if robot == "panda":
        bridge = scratch / "live-panda-bridge.yaml"
        bridge.write_text(LIVE_PANDA_BRIDGE)
        params["bridge"] = bridge
        manifest = PANDA
    else:
        manifest = scratch / "bench.yaml"
    load_before = os.getloadavg()[0]
    hog_processes = [_child("--hog", str(seconds + settle + 20)) for _ in range(hogs)]
    peer = Subscriber()
    node = start_node(manifest, scratch, name, node_command, **params)
    try:
        peer.state()  # the node is up
        out = scratch / f"{name}.json"
        spec = {"robot": robot, "seconds": seconds, "settle": settle, "out": str(out)}
        control = _child("--controller", json.dumps(spec))
        time.sleep(settle)
        first = peer.state()
        cpu0 = process_cpu_s(node.pid)
        noise = _child("--sleep-noise", str(seconds), str(scratch / f"{name}.npy"))
        if priority:  # the machine's timer noise for a thread at the node's priority
            try:
                os.setpriority(os.PRIO_PROCESS, noise.pid, -priority)
            except PermissionError:
                pass
        control.wait(seconds + 60)
        noise.wait(60)
        cpu1 = process_cpu_s(node.pid)
        state = peer.state()
        result = json.loads(out.read_text())
    finally:
        stop_node(node)
        peer.close()
        for process in hog_processes:
            process.terminate()
            process.wait()
    return {"rtf": state.real_time_factor,
            "node": (state.lateness_p50_ms, state.lateness_p99_ms, state.lateness_max_ms),
            "late": state.late_deliveries, "warning": state.lateness_warning,
            "sleep": np.load(scratch / f"{name}.npy") * 1e3,
            "roundtrip": np.array(result["roundtrip"]) * 1e3,
            "arrival": np.array(result["lateness"]) * 1e3,
            "cpu": (cpu1 - cpu0) / max(1e-9, (state.session_time_ns - first.session_time_ns)
                                       / 1e9),
            "load": (load_before, os.getloadavg()[0])}


def live(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="fibril-ros-live-"))
    (scratch / "bench.yaml").write_text(MANIFEST)
    nodes: dict[str, tuple[list[str] | None, int | None]] = {"node": (None, None)}
    if args.priority >= 0:
        nodes[f"node, thread_priority {args.priority}"] = (None, args.priority)
    if args.baseline is not None:
        nodes["baseline"] = (baseline_command(args.baseline.resolve()), 0)
    # Sample periods (the controller reacts to each) and device latencies, ms.
    targets = {"drivetrain": 2 * 1.0 + 2.0 + 1.0, "panda": 2 * 2.0 + 0.0}
    print(f"live delivery at rtf 1, {args.seconds:g} s each, {args.hogs} CPU-busy "
          f"process(es) beside it, {os.cpu_count()} cores; ms")
    summary: dict[tuple[str, bool, str], list[dict]] = {}
    try:
        for _ in range(max(1, args.live_repeats)):
            for robot in args.robots:
                for traced in (False, True):
                    for name, (command, priority) in nodes.items():  # interleaved
                        r = live_run(scratch, robot, traced, args.seconds, args.hogs, command,
                                     priority)
                        summary.setdefault((robot, traced, name), []).append(r)
                        _print_live(name, robot, traced, r, targets[robot])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"medians of {max(1, args.live_repeats)} interleaved run(s) (ms): sleep p99 | node "
          f"lateness p50 / p99 | p99 / sleep p99 | arrival p50 / p99 | round trip p50 | rtf | "
          f"node CPU s per simulated s")
    for (robot, traced, name), runs in summary.items():
        def med(f) -> float:
            return float(np.median([f(r) for r in runs]))

        sleep = med(lambda r: np.percentile(r["sleep"], 99))
        print(f"  {robot:10s} {'traced  ' if traced else 'untraced'} {name:26s} "
              f"{sleep:7.3f} | {med(lambda r: r['node'][0]):8.3f} / "
              f"{med(lambda r: r['node'][1]):8.3f} | "
              f"{med(lambda r: r['node'][1] / np.percentile(r['sleep'], 99)):6.2f} | "
              f"{med(lambda r: _pct(r['arrival'], 50)):8.3f} / "
              f"{med(lambda r: _pct(r['arrival'], 99)):8.3f} | "
              f"{med(lambda r: _pct(r['roundtrip'], 50)):6.3f} | {med(lambda r: r['rtf']):.4f} | "
              f"{med(lambda r: r['cpu']):.3f}")


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def _print_live(name: str, robot: str, traced: bool, r: dict, trip_target: float) -> None:
    sleep_p99 = float(np.percentile(r["sleep"], 99))
    p50, p99, worst = r["node"]
    target = 2 * sleep_p99 + 1.0
    trip = r["roundtrip"]
    print(f"[{name}] {robot} {'traced' if traced else 'untraced'}: load "
          f"{r['load'][0]:.1f} -> {r['load'][1]:.1f}; rtf {r['rtf']:.4f}; node CPU "
          f"{r['cpu']:.3f} s per simulated s")
    print(f"  sleep(1 ms) overshoot  p50 {np.percentile(r['sleep'], 50):.3f} "
          f"p99 {sleep_p99:.3f} max {r['sleep'].max():.3f}")
    if worst:
        print(f"  node lateness (write)  p50 {p50:.3f} p99 {p99:.3f} max "
              f"{worst:.3f}; p99 / sleep p99 {p99 / sleep_p99:.2f}; target "
              f"p99 <= {target:.3f}: {'met' if p99 <= target else 'NOT met'};"
              f" {r['late']} over the warn threshold")
    else:
        print("  node lateness (write)  n/a (this node does not measure it)")
    if len(r["arrival"]):
        arrival = r["arrival"]
        print(f"  arrival lateness (controller) p50 {np.percentile(arrival, 50):.3f} p99 "
              f"{np.percentile(arrival, 99):.3f} max {arrival.max():.3f} "
              f"over {len(arrival)} samples")
    if len(trip):
        print(f"  command -> sample round trip p50 {np.median(trip):.3f} p99 "
              f"{np.percentile(trip, 99):.3f} over {len(trip)}; target p50 <= "
              f"{trip_target:g}: {'met' if np.median(trip) <= trip_target else 'NOT met'}")
    if r["warning"]:
        print(f"  last watchdog warning: {r['warning']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fast-seconds", type=float, default=5.0)
    parser.add_argument("--commands", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5,
                        help="fast phase / offline run pairs (medians reported)")
    parser.add_argument("--no-realtime", action="store_true", help="skip the real-time phase")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout whose node runs too, interleaved (old vs new)")
    parser.add_argument("--rich-subscriber", action="store_true",
                        help="fast phase: the deserializing SingleThreadedExecutor subscriber "
                             "of earlier releases instead of the lean counter")
    parser.add_argument("--ground-truth", action="store_true",
                        help="only the Panda with /joint_states, /tf, robot description and "
                             "markers on against off (see the module docstring)")
    parser.add_argument("--live", action="store_true",
                        help="only the live delivery phase (see the module docstring)")
    parser.add_argument("--hogs", type=int, default=1,
                        help="--live: CPU-busy processes running beside the node")
    parser.add_argument("--live-repeats", type=int, default=1,
                        help="--live: interleaved repeats (medians reported)")
    parser.add_argument("--robots", nargs="+", default=["drivetrain", "panda"],
                        choices=["drivetrain", "panda"], help="--live: which robots")
    parser.add_argument("--priority", type=int, default=0,
                        help="--live: also run the node with this thread_priority (default 0: "
                             "what a user who may not raise priorities gets; -1: not)")
    parser.add_argument("--controller", help=argparse.SUPPRESS)  # child processes of --live
    parser.add_argument("--sleep-noise", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--hog", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.controller:
        import json

        controller(json.loads(args.controller))
        return
    if args.sleep_noise:
        sleep_noise(float(args.sleep_noise[0]), Path(args.sleep_noise[1]))
        return
    if args.hog:
        hog(args.hog)
        return
    if args.live:
        live(args)
        return
    if args.ground_truth:
        ground_truth(args)
        return
    scratch = Path(tempfile.mkdtemp(prefix="fibril-ros-bench-"))
    manifest = scratch / "bench.yaml"
    manifest.write_text(MANIFEST)
    sub = Subscriber()
    nodes = {"node": None}
    if args.baseline is not None:
        nodes["baseline"] = baseline_command(args.baseline.resolve())
    fasts: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in nodes}
    offlines: list[float] = []
    rts: dict[str, dict] = {}
    try:
        if not args.no_realtime:
            for name, command in nodes.items():
                rts[name] = realtime_phase(sub, manifest, scratch, args.seconds, args.commands,
                                           command)
        for _ in range(max(1, args.repeats)):  # interleaved, back to back
            for name, command in nodes.items():
                fasts[name].append(fast_phase(sub, manifest, scratch, args.fast_seconds,
                                              not args.rich_subscriber, command))
                sub.clear()
            offlines.append(offline_rate(manifest, 20.0))
    finally:
        sub.close()
    shutil.rmtree(scratch, ignore_errors=True)

    def pct(values: np.ndarray) -> str:
        if not len(values):
            return "n/a"
        return f"p50 {np.percentile(values, 50):.3f} ms, p99 {np.percentile(values, 99):.3f} ms"

    for name, rt in rts.items():
        print(f"[{name}] ", end="")
        print_realtime(rt, args, pct)
    subscriber = "deserializing" if args.rich_subscriber else "lean counting"
    print(f"as fast as possible (real_time_factor 0, not traced, {subscriber} encoder "
          f"subscriber attached), median of {len(offlines)}:")
    for name, results in fasts.items():
        rates = [rate for rate, *_ in results]
        ratios = [rate / offline for rate, offline in zip(rates, offlines)]
        print(f"  [{name}] {np.median(rates):.0f} ticks/s, fibril_sim run "
              f"{np.median(offlines):.0f} ticks/s, ratio {np.median(ratios):.2f} (per pair: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}), encoder messages received per tick "
              f"{np.median([r[1] for r in results]):.3f}   target >= 0.5")
        node_cpu, sub_cpu = np.median([r[2] for r in results]), np.median([r[3] for r in results])
        cores = os.cpu_count() or 1
        print(f"  [{name}] CPU per tick: node process {node_cpu:.1f} us, subscriber process "
              f"{sub_cpu:.1f} us; {cores} cores give {cores * 1e6 / np.median(rates):.1f} us "
              f"a tick at that rate; fibril_sim run takes {1e6 / np.median(offlines):.1f} us")


def print_realtime(rt: dict, args: argparse.Namespace, pct) -> None:
    print(f"real time, {args.seconds:g} s (1 kHz physics, encoder 1 kHz, IMU 200 Hz, traced):")
    print(f"  measured real-time factor   {rt['rtf']:.4f} (node's own: {rt['node_rtf']:.4f})"
          f"   target >= 0.99")
    print(f"  encoder publish jitter      {pct(rt['encoder'])} over {rt['encoder_count']} msgs"
          f"   target p99 < 2 ms")
    print(f"  IMU publish jitter          {pct(rt['imu'])} over {rt['imu_count']} msgs")
    print(f"  command -> encoder latency  {pct(rt['latency'])} ({rt['committed']}/"
          f"{rt['commands']} commands; includes 2 ms command + 1 ms encoder latency in sim)")
    print(f"  of which transport          {pct(rt['transport'])} (encoder publication -> here)")


if __name__ == "__main__":
    main()
