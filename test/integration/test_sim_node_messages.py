"""Message conversions of the sim node (no node, no DDS): ROS commands → ingress payloads, and
every device kind → its standard message, checked by deserializing what would be published."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("rclpy")

from fibril_msgs.msg import DeviceSample, MotorCommand  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.serialization import deserialize_message  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Image, Imu, JointState, LaserScan, Range  # noqa: E402
from std_msgs.msg import Bool, Float64, Float64MultiArray  # noqa: E402

from fibril_sim_core import SimulationBuilder  # noqa: E402
from fibril_sim_core.records import DeviceOutput  # noqa: E402
from fibril_sim_ros import bridge as b  # noqa: E402
from fibril_sim_ros import messages as m  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "config" / "examples" / "drivetrain" / "drivetrain.xml"
MANIFEST = f"""\
schema_version: {{major: 3, minor: 1}}
model: {MODEL}
components:
  - {{id: motor, type: fibril_sim/motor, endpoint: motor/command, bind: {{actuator: drive}}}}
  - {{id: enc, type: fibril_sim/encoder, bind: {{joint: wheel_joint}},
     config: {{period: 0.002, counts_per_revolution: 1000}}}}
  - {{id: imu, type: fibril_sim/imu, bind: {{site: imu}},
     config: {{period: 0.005, gyro_noise: 0.1, accel_noise: 0.2}}}}
  - {{id: range, type: fibril_sim/rangefinder, bind: {{site: range_front}},
     config: {{period: 0.01, min_range: 0.05, max_range: 4.0}}}}
  - {{id: lidar, type: fibril_sim/planar_lidar, bind: {{site: lidar}},
     config: {{period: 0.01, rays: 8, max_range: 6.0}}}}
  - {{id: pose, type: fibril_sim/body_kinematics, bind: {{body: chassis}},
     config: {{period: 0.01, position_noise: 0.01}}}}
  - {{id: bumper, type: fibril_sim/digital_input, bind: {{geom: chassis_box}},
     config: {{period: 0.01, mode: contact}}}}
  - {{id: feedback, type: fibril_sim/motor_feedback, bind: {{actuator: drive}},
     config: {{period: 0.002}}}}
"""


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("messages") / "robot.yaml"
    path.write_text(MANIFEST)
    return SimulationBuilder().build(path)


def _output(device: str, values, acquisition_ns: int = 40 * 10**6, latency_ns: int = 10**6,
            names=()) -> DeviceOutput:
    return DeviceOutput(0, device, "x", acquisition_ns // 10**6, acquisition_ns,
                        acquisition_ns + latency_ns, 7 * 10**9 + acquisition_ns,
                        7 * 10**9 + acquisition_ns + latency_ns,
                        np.asarray(values, dtype=np.float64), tuple(names), "")


def _convert(plan, device: str, output: DeviceOutput, **entry) -> list:
    bridge = b.load_bridge(plan)
    base = next(e for e in bridge.outputs if e.device == device)
    if entry:
        base = b.OutputEntry(**{**base.__dict__, **entry})
    convert = m.output_converter(base, plan.device(device), plan.timebase.timestep_s)
    result = []
    for topic, msg in convert(output):
        if isinstance(msg, bytes):
            cls = m.MESSAGE_CLASSES.get(base.type) if topic == base.topic else DeviceSample
            msg = deserialize_message(msg, cls)
        result.append((topic, msg))
    return result


def test_default_types_for_every_device_kind(plan) -> None:
    types = {e.device: e.type for e in b.load_bridge(plan).outputs}
    assert types == {"enc": b.JOINT_STATE, "imu": b.IMU, "range": b.RANGE,
                     "lidar": b.LASER_SCAN, "pose": b.ODOMETRY, "bumper": b.BOOL,
                     "feedback": b.DEVICE_SAMPLE}


def test_encoder_joint_state_in_radians_stamped_at_acquisition_or_delivery(plan) -> None:
    output = _output("enc", (0.0, 1.5, 250.0))
    [(topic, msg)] = _convert(plan, "enc", output)
    assert topic == "/enc" and isinstance(msg, JointState)
    assert msg.name == ["wheel_joint"] and msg.header.frame_id == "wheel_joint"
    assert math.isclose(msg.position[0], 250 * 2 * math.pi / 1000, rel_tol=1e-12)
    assert msg.velocity[0] == 1.5
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (7, 40_000_000)
    [(_, late), (raw_topic, raw)] = _convert(plan, "enc", output, stamp="delivery",
                                             raw_topic="/enc/raw")
    assert (late.header.stamp.sec, late.header.stamp.nanosec) == (7, 41_000_000)
    assert raw_topic == "/enc/raw" and list(raw.values) == [0.0, 1.5, 250.0]
    assert list(raw.component_names) == ["position", "velocity", "counts"]


def test_imu_with_covariances_from_the_configured_noise(plan) -> None:
    [(_, msg)] = _convert(plan, "imu", _output("imu", (1, 2, 3, 4, 5, 6)))
    assert isinstance(msg, Imu) and msg.header.frame_id == "imu"
    assert (msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z) == (1, 2, 3)
    assert (msg.linear_acceleration.x, msg.linear_acceleration.z) == (4, 6)
    assert np.allclose(msg.angular_velocity_covariance[[0, 4, 8]], 0.01)
    assert np.allclose(msg.linear_acceleration_covariance[[0, 4, 8]], 0.04)
    assert msg.orientation_covariance[0] == -1.0


def test_range_reports_inf_without_a_return(plan) -> None:
    [(_, hit)] = _convert(plan, "range", _output("range", (1.25, 1.0)))
    [(_, miss)] = _convert(plan, "range", _output("range", (4.0, 0.0)))
    assert isinstance(hit, Range) and hit.range == pytest.approx(1.25)
    assert (hit.min_range, hit.max_range) == pytest.approx((0.05, 4.0))
    assert miss.range == math.inf and hit.radiation_type == Range.INFRARED


def test_laser_scan_geometry_from_the_lidar_config(plan) -> None:
    [(_, msg)] = _convert(plan, "lidar", _output("lidar", np.arange(8) * 0.5))
    assert isinstance(msg, LaserScan) and len(msg.ranges) == 8
    assert msg.angle_min == pytest.approx(-math.pi)
    assert msg.angle_increment == pytest.approx(2 * math.pi / 8)
    assert msg.range_max == pytest.approx(6.0) and msg.scan_time == pytest.approx(0.01)


def test_odometry_twist_is_in_the_body_frame(plan) -> None:
    half = math.sqrt(0.5)  # yaw 90°: body x is world y
    values = (1, 2, 3, half, 0, 0, half, 0.0, 2.0, 0.0, 0.0, 0.0, 0.5)
    [(_, msg)] = _convert(plan, "pose", _output("pose", values))
    assert isinstance(msg, Odometry)
    assert (msg.header.frame_id, msg.child_frame_id) == ("world", "chassis")
    assert (msg.pose.pose.position.x, msg.pose.pose.orientation.w) == pytest.approx((1, half))
    assert msg.twist.twist.linear.x == pytest.approx(2.0)  # forward in the body frame
    assert msg.twist.twist.linear.y == pytest.approx(0.0, abs=1e-12)
    assert msg.twist.twist.angular.z == pytest.approx(0.5)
    assert msg.pose.covariance[0] == pytest.approx(1e-4)


def test_digital_input_and_motor_feedback(plan) -> None:
    [(_, on)] = _convert(plan, "bumper", _output("bumper", (1.0,)))
    assert isinstance(on, Bool) and on.data is True
    [(_, sample)] = _convert(plan, "feedback", _output("feedback", (0.5, 3.0, 0.1),
                                                       names=("force", "velocity", "current")))
    assert isinstance(sample, DeviceSample) and sample.device_id == "feedback"
    assert list(sample.values) == [0.5, 3.0, 0.1]
    assert list(sample.component_names) == ["force", "velocity", "current"]
    # DeviceSample keeps its definition: header.stamp at delivery, acquisition_stamp apart.
    assert (sample.header.stamp.nanosec, sample.acquisition_stamp.nanosec) == (41e6, 40e6)
    assert (sample.acquisition_episode_time_ns, sample.delivery_episode_time_ns) == (40e6, 41e6)


def test_camera_image_and_info() -> None:
    device = SimpleNamespace(id="cam", type="fibril_sim/camera", sample_type="x",
                             component_names=("rgb[12]",), period_ticks=10,
                             config={"width": 2, "height": 2, "depth": False},
                             binding={"camera": "front", "camera_id": 0})
    entry = b.OutputEntry("cam", "fibril_sim/camera", "/cam/image_raw", b.IMAGE, "front",
                          info_topic="/cam/camera_info")
    convert = m.output_converter(entry, device, 0.001)
    [(topic, image), (info_topic, info)] = convert(_output("cam", np.arange(12) * 30.0))
    assert topic == "/cam/image_raw" and isinstance(image, Image)
    assert (image.encoding, image.width, image.height, image.step) == ("rgb8", 2, 2, 6)
    assert bytes(image.data) == bytes(range(0, 360, 30)[:9]) + bytes([255, 255, 255])
    assert info_topic == "/cam/camera_info" and info.k[0] > 0 and info.header.frame_id == "front"


def test_clock_message() -> None:
    msg = deserialize_message(m.clock_message(12_345_678_901), Clock)
    assert (msg.clock.sec, msg.clock.nanosec) == (12, 345_678_901)


def _input(kind: str, **fields) -> b.InputEntry:
    defaults = {"topic": "/in", "type": kind, "targets": ("a",)}
    return b.InputEntry(**{**defaults, **fields})


def test_input_conversions() -> None:
    motor = m.input_converter(_input(b.MOTOR_COMMAND))
    assert motor(MotorCommand(mode=MotorCommand.MODE_VOLTAGE, value=3.0)) == [
        ("a", {"mode": "voltage", "value": 3.0})]
    assert motor(MotorCommand(mode=7, value=1.0)) == [("a", {"mode": 7, "value": 1.0})]
    single = m.input_converter(_input(b.FLOAT64, mode="duty", scale=0.01))
    assert single(Float64(data=50.0)) == [("a", {"mode": "duty", "value": 0.5})]
    fan = m.input_converter(_input(b.FLOAT64_ARRAY, targets=("a", "b"), mode="torque"))
    assert fan(Float64MultiArray(data=[1.0, -2.0])) == [
        ("a", {"mode": "torque", "value": 1.0}), ("b", {"mode": "torque", "value": -2.0})]
    with pytest.raises(ValueError, match=r"expected 2 value\(s\) \(for a, b\), got 1"):
        fan(Float64MultiArray(data=[1.0]))
    joints = m.input_converter(_input(b.JOINT_STATE, targets=("a", "b"), mode="velocity",
                                      joints={"left": "a", "right": "b"}, field="velocity"))
    assert joints(JointState(name=["right"], velocity=[4.0])) == [
        ("b", {"mode": "velocity", "value": 4.0})]
    with pytest.raises(ValueError, match="unknown joint name\\(s\\) 'middle'; known: left, right"):
        joints(JointState(name=["middle"], velocity=[1.0]))
    with pytest.raises(ValueError, match="1 name\\(s\\) but 0 velocity value\\(s\\)"):
        joints(JointState(name=["left"]))
