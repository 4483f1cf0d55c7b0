"""Conversions between Fibril records and ROS 2 messages (standard types where one fits).

Outputs: a DeviceOutput becomes the message of its bridge entry, stamped with the acquisition
time (SessionTime, i.e. ``/clock``) or, with ``stamp: delivery``, the delivery time. Inputs: a
ROS command message becomes one ``fibril_sim/motor_command/v1`` payload per target endpoint; the
ingress validates it (mode, finiteness) and says why when it rejects it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from builtin_interfaces.msg import Time
from fibril_msgs.msg import DeviceSample, FrameTiming as FrameTimingMsg, MotorCommand
from nav_msgs.msg import Odometry
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, Imu, JointState, LaserScan, Range
from std_msgs.msg import Bool, Float64, Float64MultiArray

from fibril_sim_core.records import DeviceOutput, FrameTiming

from . import bridge as b
from .cdr import Template

if TYPE_CHECKING:
    from fibril_sim_core.components.device import DeviceDescriptor

NS_PER_S = 1_000_000_000
MOTOR_PAYLOAD = "fibril_sim/motor_command/v1"
MOTOR_MODE_NAMES = {MotorCommand.MODE_DUTY: "duty", MotorCommand.MODE_VOLTAGE: "voltage",
                    MotorCommand.MODE_TORQUE: "torque", MotorCommand.MODE_VELOCITY: "velocity",
                    MotorCommand.MODE_POSITION: "position"}

MESSAGE_CLASSES: dict[str, type] = {
    b.MOTOR_COMMAND: MotorCommand, b.FLOAT64: Float64, b.FLOAT64_ARRAY: Float64MultiArray,
    b.JOINT_STATE: JointState, b.IMU: Imu, b.RANGE: Range, b.LASER_SCAN: LaserScan,
    b.IMAGE: Image, b.ODOMETRY: Odometry, b.BOOL: Bool, b.DEVICE_SAMPLE: DeviceSample,
}

#: [(target endpoint, motor command payload)] of one command message
Payloads = list[tuple[str, dict[str, object]]]


def stamp(ns: int) -> Time:
    sec, nanosec = divmod(int(ns), NS_PER_S)
    return Time(sec=sec, nanosec=nanosec)


_CLOCK = Template(Clock(), [("clock", "time")]).packer()


def clock_message(session_time_ns: int) -> bytes:
    """``rosgraph_msgs/Clock`` at a SessionTime, serialized (see ``cdr``)."""
    return _CLOCK(*divmod(int(session_time_ns), NS_PER_S))


def frame_timing_message(frame: FrameTiming) -> FrameTimingMsg:
    return FrameTimingMsg(stamp=stamp(frame.session_time_ns), episode=frame.episode,
                          tick=frame.tick, episode_time_ns=frame.episode_time_ns,
                          session_time_ns=frame.session_time_ns,
                          wall_step_time=float(frame.wall_step_time),
                          real_time_factor=float(frame.real_time_factor))


def device_sample(output: DeviceOutput, frame_id: str) -> DeviceSample:
    """The generic message of any device (what the trace holds), stamped at delivery."""
    msg = DeviceSample()
    msg.header.stamp = stamp(output.session_delivery_time_ns)
    msg.header.frame_id = frame_id
    msg.acquisition_stamp = stamp(output.session_acquisition_time_ns)
    msg.acquisition_episode_time_ns = output.acquisition_time_ns
    msg.delivery_episode_time_ns = output.delivery_time_ns
    msg.episode = output.episode
    msg.device_id = output.device_id
    msg.sample_type = output.sample_type
    msg.values = np.asarray(output.values, dtype=np.float64)
    msg.component_names = list(output.component_names)
    return msg


def device_sample_encoder(device: DeviceDescriptor,
                          frame_id: str) -> Callable[[DeviceOutput], object]:
    """DeviceSample of one device: pre-serialized when its sample has a fixed small size.

    As the message definition says, ``header.stamp`` is the delivery time and
    ``acquisition_stamp`` the acquisition time (both SessionTime)."""
    names = list(device.component_names)
    if len(names) > 64 or any("[" in n for n in names):  # images, long scans: plain messages
        return lambda output: device_sample(output, frame_id)
    prototype = DeviceSample()
    prototype.header.frame_id = frame_id
    prototype.device_id = device.id
    prototype.sample_type = device.sample_type
    prototype.component_names = names
    pack = Template(prototype, [
        ("header.stamp", "time"), ("acquisition_stamp", "time"),
        ("acquisition_episode_time_ns", "i64"), ("delivery_episode_time_ns", "i64"),
        ("episode", "u32"), ("values", "f64s", len(names))]).packer()

    def encode(output: DeviceOutput) -> bytes:
        delivered, acquired = output.session_delivery_time_ns, output.session_acquisition_time_ns
        return pack(delivered // NS_PER_S, delivered % NS_PER_S, acquired // NS_PER_S,
                    acquired % NS_PER_S, output.acquisition_time_ns, output.delivery_time_ns,
                    output.episode, *output.values.tolist())

    return encode


# --------------------------------------------------------------------------- outputs
Converter = Callable[[DeviceOutput], list[tuple[str, object]]]
# A message builder: (output, stamp ns) -> the message (an rclpy message or its bytes).
Build = Callable[[DeviceOutput, int], object]


def main_message(entry: b.OutputEntry, device: DeviceDescriptor,
                 timestep_s: float) -> Callable[[DeviceOutput], object] | None:
    """DeviceOutput → the entry's message of its own type, stamped at acquisition (or at
    delivery with ``stamp: delivery``); None for a type sent as DeviceSample."""
    main = _MAIN.get(entry.type)
    if main is None:
        return None
    build = main(entry, device, timestep_s)
    if entry.stamp == "delivery":
        return lambda output: build(output, output.session_delivery_time_ns)
    return lambda output: build(output, output.session_acquisition_time_ns)


def output_converter(entry: b.OutputEntry, device: DeviceDescriptor, timestep_s: float,
                     message: Callable[[DeviceOutput], object] | None = None) -> Converter:
    """A function DeviceOutput → [(topic, message or serialized bytes)] for one entry;
    ``message``: its ``main_message``, when the caller has made it already."""
    at_delivery = entry.stamp == "delivery"
    if message is None:
        message = main_message(entry, device, timestep_s)
    generic = device_sample_encoder(device, entry.frame_id)
    topic, raw_topic, info_topic = entry.topic, entry.raw_topic, entry.info_topic
    info = _camera_info(entry, device) if info_topic else None

    def convert(output: DeviceOutput) -> list[tuple[str, object]]:
        if message is None:
            return [(topic, generic(output))]
        result = [(topic, message(output))]
        if raw_topic is not None:
            result.append((raw_topic, generic(output)))
        if info is not None and info_topic:
            info.header.stamp = stamp(output.session_delivery_time_ns if at_delivery
                                      else output.session_acquisition_time_ns)
            result.append((info_topic, info))
        return result

    return convert


def _encoder(entry: b.OutputEntry, device: DeviceDescriptor, timestep_s: float) -> Build:
    per_unit = float(device.binding["counts_per_unit"])
    prototype = JointState()
    prototype.header.frame_id = entry.frame_id
    prototype.name = [str(device.binding["joint"])]
    pack = Template(prototype, [("header.stamp", "time"), ("position", "f64s", 1),
                                ("velocity", "f64s", 1)]).packer()

    def build(output: DeviceOutput, when: int) -> bytes:
        _, velocity, counts = output.values.tolist()
        # counts → radians (hinge) or metres (slide) with the configured counts per revolution.
        return pack(when // NS_PER_S, when % NS_PER_S, counts / per_unit, velocity)

    return build


def _imu(entry: b.OutputEntry, device: DeviceDescriptor, timestep_s: float) -> Build:
    config = device.config
    prototype = Imu()
    prototype.header.frame_id = entry.frame_id
    prototype.orientation_covariance = [-1.0] + [0.0] * 8  # REP 145: no orientation estimate
    prototype.angular_velocity_covariance = b.covariance_diagonal(config.get("gyro_noise", 0.0))
    prototype.linear_acceleration_covariance = b.covariance_diagonal(
        config.get("accel_noise", 0.0))
    pack = Template(prototype, [("header.stamp", "time")] + [
        (f"{vector}.{axis}", "f64") for vector in ("angular_velocity", "linear_acceleration")
        for axis in "xyz"]).packer()

    def build(output: DeviceOutput, when: int) -> bytes:
        return pack(when // NS_PER_S, when % NS_PER_S, *output.values.tolist())

    return build


def _range(entry: b.OutputEntry, device: DeviceDescriptor, timestep_s: float) -> Build:
    config = device.config
    low, high = float(config.get("min_range", 0.0)), float(config.get("max_range", 10.0))
    radiation = Range.INFRARED if entry.radiation_type == "infrared" else Range.ULTRASOUND
    fov = float(entry.field_of_view)
    frame_id = entry.frame_id

    def build(output: DeviceOutput, when: int) -> Range:
        distance, hit = float(output.values[0]), float(output.values[1])
        msg = Range()
        msg.header.stamp = stamp(when)
        msg.header.frame_id = frame_id
        msg.radiation_type = radiation
        msg.field_of_view = fov
        msg.min_range, msg.max_range = low, high
        msg.range = distance if hit > 0.5 else math.inf  # REP 117: +inf when nothing in range
        return msg

    return build


def _scan(entry: b.OutputEntry, device: DeviceDescriptor, timestep_s: float) -> Build:
    config, binding = device.config, device.binding
    rays = int(config.get("rays", 1))
    angle_min = float(binding["angle_min"])
    increment = float(binding["angle_increment"])
    period = device.period_ticks * timestep_s
    frame_id = entry.frame_id

    def build(output: DeviceOutput, when: int) -> LaserScan:
        msg = LaserScan()
        msg.header.stamp = stamp(when)
        msg.header.frame_id = frame_id
        msg.angle_min = angle_min
        msg.angle_max = angle_min + increment * (rays - 1)
        msg.angle_increment = increment
        msg.scan_time = period
        msg.range_min = float(config.get("min_range", 0.0))
        msg.range_max = float(config.get("max_range", 10.0))
        msg.ranges = np.asarray(output.values, dtype=np.float32)
        return msg

    return build


def _image(entry: b.OutputEntry, device: DeviceDescriptor, timestep_s: float) -> Build:
    config = device.config
    width, height, depth = int(config["width"]), int(config["height"]), bool(config["depth"])
    frame_id = entry.frame_id

    def build(output: DeviceOutput, when: int) -> Image:
        msg = Image()
        msg.header.stamp = stamp(when)
        msg.header.frame_id = frame_id
        msg.width, msg.height = width, height
        if depth:
            msg.encoding, msg.step = "32FC1", width * 4
            msg.data = np.asarray(output.values, dtype=np.float32).tobytes()
        else:
            msg.encoding, msg.step = "rgb8", width * 3
            msg.data = np.clip(np.asarray(output.values), 0, 255).astype(np.uint8).tobytes()
        return msg

    return build


def _camera_info(entry: b.OutputEntry, device: DeviceDescriptor) -> CameraInfo:
    """Pinhole intrinsics from the MuJoCo camera's vertical field of view (no distortion)."""
    config = device.config
    width, height = int(config["width"]), int(config["height"])
    fovy = float(device.binding["model"].cam_fovy[device.binding["camera_id"]]) \
        if "model" in device.binding else 45.0
    f = 0.5 * height / math.tan(math.radians(fovy) / 2)
    cx, cy = (width - 1) / 2, (height - 1) / 2
    info = CameraInfo()
    info.header.frame_id = entry.frame_id
    info.width, info.height = width, height
    info.distortion_model = "plumb_bob"
    info.d = [0.0] * 5
    info.k = [f, 0.0, cx, 0.0, f, cy, 0.0, 0.0, 1.0]
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    info.p = [f, 0.0, cx, 0.0, 0.0, f, cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return info


def _odometry(entry: b.OutputEntry, device: DeviceDescriptor, timestep_s: float) -> Build:
    config = device.config
    pos_var = float(config.get("position_noise", 0.0)) ** 2
    vel_var = float(config.get("velocity_noise", 0.0)) ** 2
    pose_cov = [0.0] * 36
    twist_cov = [0.0] * 36
    for i in range(3):
        pose_cov[7 * i] = pos_var
        twist_cov[7 * i] = vel_var
        twist_cov[7 * (i + 3)] = vel_var
    frame_id, child = entry.frame_id, entry.child_frame_id

    def build(output: DeviceOutput, when: int) -> Odometry:
        v = np.asarray(output.values, dtype=np.float64)
        msg = Odometry()
        msg.header.stamp = stamp(when)
        msg.header.frame_id = frame_id
        msg.child_frame_id = child
        p = msg.pose.pose
        p.position.x, p.position.y, p.position.z = float(v[0]), float(v[1]), float(v[2])
        w, x, y, z = (float(q) for q in v[3:7])
        p.orientation.w, p.orientation.x, p.orientation.y, p.orientation.z = w, x, y, z
        # nav_msgs/Odometry: the twist is in the child (body) frame; the sample's is in world.
        rotation = _rotation(w, x, y, z)
        linear = rotation.T @ v[7:10]
        angular = rotation.T @ v[10:13]
        t = msg.twist.twist
        t.linear.x, t.linear.y, t.linear.z = (float(c) for c in linear)
        t.angular.x, t.angular.y, t.angular.z = (float(c) for c in angular)
        msg.pose.covariance = pose_cov
        msg.twist.covariance = twist_cov
        return msg

    return build


def _rotation(w: float, x: float, y: float, z: float) -> np.ndarray:
    """Body → world rotation matrix of a unit quaternion (w, x, y, z)."""
    return np.array((
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y))))


def _bool(entry: b.OutputEntry, device: DeviceDescriptor, timestep_s: float) -> Build:
    def build(output: DeviceOutput, when: int) -> Bool:
        return Bool(data=bool(output.values[0] > 0.5))

    return build


_MAIN: dict[str, Callable[[b.OutputEntry, DeviceDescriptor, float], Build]] = {
    b.JOINT_STATE: _encoder, b.IMU: _imu, b.RANGE: _range, b.LASER_SCAN: _scan,
    b.IMAGE: _image, b.ODOMETRY: _odometry, b.BOOL: _bool,
}


# --------------------------------------------------------------------------- inputs
def input_converter(entry: b.InputEntry) -> Callable[[object], Payloads]:
    """A function ROS message → [(endpoint, payload)]; ValueError names what is malformed.
    (It takes the message class of ``entry.type``: the subscription's; typed ``object``, as
    rclpy's message classes are untyped.)"""
    scale, offset = entry.scale, entry.offset

    def value(x: float) -> float:
        return float(x) * scale + offset if (scale != 1.0 or offset != 0.0) else float(x)

    if entry.type == b.MOTOR_COMMAND:
        target = entry.targets[0]

        def motor(msg: MotorCommand) -> Payloads:
            mode = MOTOR_MODE_NAMES.get(msg.mode, int(msg.mode))
            return [(target, {"mode": mode, "value": value(msg.value)})]

        return motor
    if entry.type == b.FLOAT64:
        target, mode = entry.targets[0], entry.mode

        def single(msg: Float64) -> Payloads:
            return [(target, {"mode": mode, "value": value(msg.data)})]

        return single
    if entry.type == b.FLOAT64_ARRAY:
        targets, mode = entry.targets, entry.mode

        def fan_out(msg: Float64MultiArray) -> Payloads:
            data = msg.data
            if len(data) != len(targets):
                raise ValueError(f"expected {len(targets)} value(s) (for "
                                 f"{', '.join(targets)}), got {len(data)}")
            return [(t, {"mode": mode, "value": value(x)}) for t, x in zip(targets, data)]

        return fan_out
    joints, fieldname, mode = dict(entry.joints), entry.field, entry.mode

    def by_name(msg: JointState) -> Payloads:
        values: Sequence[float] = getattr(msg, fieldname)
        if len(values) != len(msg.name):
            raise ValueError(f"{len(msg.name)} name(s) but {len(values)} {fieldname} value(s)")
        unknown = [n for n in msg.name if n not in joints]
        if unknown:
            raise ValueError(f"unknown joint name(s) {', '.join(map(repr, unknown))}; known: "
                             f"{', '.join(joints)}")
        return [(joints[n], {"mode": mode, "value": value(x)}) for n, x in zip(msg.name, values)]

    return by_name
