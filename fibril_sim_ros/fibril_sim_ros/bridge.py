"""The bridge file: which ROS topics carry which endpoints and devices of a plan.

The manifest knows nothing of ROS; topic names, message types, frame ids, QoS and unit
conversions live here (in the spirit of ros_gz_bridge's YAML). Every endpoint and device the
file does not name gets a default entry derived from the manifest, so no file is needed for the
common case: endpoint ``E`` → input ``/E`` (fibril_msgs/msg/MotorCommand), device ``D`` →
output ``/D`` with the standard message type of its kind (camera: ``/D/image_raw`` and
``/D/camera_info``).

```yaml
schema_version: {major: 1, minor: 0}
defaults: true                      # default entries for components not named below
inputs:
  - {topic: /motor/duty, type: std_msgs/msg/Float64, endpoint: motor/command, mode: duty}
  - {topic: /forward_commands, type: std_msgs/msg/Float64MultiArray,
     endpoints: [motor/command], mode: voltage, scale: 12.0}
  - {topic: /joint_commands, type: sensor_msgs/msg/JointState,
     joints: {wheel_joint: motor/command}, field: velocity}
outputs:
  - {device: wheel_encoder, topic: /wheel_encoder, type: sensor_msgs/msg/JointState,
     frame_id: wheel_joint, raw_topic: /wheel_encoder/counts, stamp: acquisition,
     qos: {reliability: reliable, durability: volatile, depth: 10}}
joint_states: {topic: /joint_states, rate: 50.0}   # ground truth (default); false: off
tf: {rate: 50.0, frame_prefix: ""}                 # /tf and /tf_static (default); false: off
robot_description: {topic: /robot_description}     # URDF from the MJCF (default); false: off
markers: {topic: /fibril_sim/markers}              # the scene's geoms; off unless given
```

Rates are of simulated time and must be a whole number of physics steps (messages are stamped
exactly ``k / rate``).

This module parses and checks only (no rclpy), so it can be tested and reused without ROS.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from fibril_sim_core import schema as s
from fibril_sim_core._document import Node, NodeMap
from fibril_sim_core.errors import FibrilError, InstanceError

if TYPE_CHECKING:
    from fibril_sim_core.components.device import DeviceDescriptor
    from fibril_sim_core.components.endpoint import ActuatorDescriptor
    from fibril_sim_core.plan import SimulationPlan

E = TypeVar("E")  # a ground-truth entry (joint states, TF, a latched topic)
SCHEMA_MAJOR = 1
SCHEMA_MINORS = (0,)

MOTOR_COMMAND = "fibril_msgs/msg/MotorCommand"
FLOAT64 = "std_msgs/msg/Float64"
FLOAT64_ARRAY = "std_msgs/msg/Float64MultiArray"
JOINT_STATE = "sensor_msgs/msg/JointState"
IMU = "sensor_msgs/msg/Imu"
RANGE = "sensor_msgs/msg/Range"
LASER_SCAN = "sensor_msgs/msg/LaserScan"
IMAGE = "sensor_msgs/msg/Image"
ODOMETRY = "nav_msgs/msg/Odometry"
BOOL = "std_msgs/msg/Bool"
DEVICE_SAMPLE = "fibril_msgs/msg/DeviceSample"

INPUT_TYPES = (MOTOR_COMMAND, FLOAT64, FLOAT64_ARRAY, JOINT_STATE)
#: Device type → the message types that can carry its samples (the first is the default).
OUTPUT_TYPES: dict[str, tuple[str, ...]] = {
    "fibril_sim/encoder": (JOINT_STATE, DEVICE_SAMPLE),
    "fibril_sim/imu": (IMU, DEVICE_SAMPLE),
    "fibril_sim/rangefinder": (RANGE, DEVICE_SAMPLE),
    "fibril_sim/planar_lidar": (LASER_SCAN, DEVICE_SAMPLE),
    "fibril_sim/camera": (IMAGE, DEVICE_SAMPLE),
    "fibril_sim/body_kinematics": (ODOMETRY, DEVICE_SAMPLE),
    "fibril_sim/digital_input": (BOOL, DEVICE_SAMPLE),
}
MOTOR_MODES = ("duty", "voltage", "torque", "velocity", "position")
JOINT_FIELDS = {"position": "position", "velocity": "velocity", "effort": "torque"}
STAMPS = ("acquisition", "delivery")
RADIATION_TYPES = ("infrared", "ultrasound")
RELIABILITY = ("reliable", "best_effort")
DURABILITY = ("volatile", "transient_local")
#: The deepest history a topic may keep (rclpy refuses more than 2**31 - 1; every kept message
#: is held in memory).
MAX_QOS_DEPTH = 1_000_000
#: The longest topic name (ROS refuses fully qualified names above 247 characters; a ``~``
#: name grows by the node's namespace and name when expanded).
MAX_TOPIC_LENGTH = 200


class BridgeError(FibrilError):
    """The bridge file is invalid for this plan (names file, key and value)."""


@dataclass(frozen=True)
class Qos:
    """Reliable and volatile by default (a best-effort subscriber still receives); outputs
    keep 100 messages so that a reliable subscriber that stalls briefly loses nothing."""

    reliability: str = "reliable"
    durability: str = "volatile"
    depth: int = 10


OUTPUT_QOS = Qos(depth=100)


@dataclass(frozen=True)
class InputEntry:
    """One subscription: messages of ``type`` on ``topic`` become ExternalInputs.

    ``targets`` are the endpoints in message order (Float64MultiArray: the array order;
    JointState: ``joints`` maps joint names to endpoints, ``targets`` is their order)."""

    topic: str
    type: str
    targets: tuple[str, ...]
    mode: str | None = None
    joints: Mapping[str, str] = field(default_factory=dict)
    field: str = "position"
    scale: float = 1.0
    offset: float = 0.0
    qos: Qos = Qos()
    where: str = ""


@dataclass(frozen=True)
class OutputEntry:
    """One publisher: samples of ``device`` as ``type`` on ``topic``."""

    device: str
    device_type: str
    topic: str
    type: str
    frame_id: str
    stamp: str = "acquisition"
    raw_topic: str | None = None  # the same samples as fibril_msgs/DeviceSample
    info_topic: str | None = None  # camera: sensor_msgs/CameraInfo
    child_frame_id: str = ""  # odometry
    field_of_view: float = 0.0  # range
    radiation_type: str = "infrared"  # range
    qos: Qos = Qos()
    where: str = ""


#: Running free as fast as possible, ground truth goes out at most this often (wall Hz).
FAST_WALL_RATE = 100.0


@dataclass(frozen=True)
class JointStatesEntry:
    topic: str = "/joint_states"
    rate: float = 50.0
    qos: Qos = OUTPUT_QOS
    fast_wall_rate: float = FAST_WALL_RATE


@dataclass(frozen=True)
class TfEntry:
    """Every moving body's pose relative to its parent on /tf at ``rate``; fixed bodies once
    on /tf_static. Frame names: the body names with ``frame_prefix``."""

    rate: float = 50.0
    frame_prefix: str = ""
    fast_wall_rate: float = FAST_WALL_RATE


@dataclass(frozen=True)
class TopicEntry:
    """A latched topic (transient local, depth 1): robot_description, markers."""

    topic: str


@dataclass(frozen=True)
class Bridge:
    inputs: tuple[InputEntry, ...]
    outputs: tuple[OutputEntry, ...]
    joint_states: JointStatesEntry | None = JointStatesEntry()
    source: str = "(defaults)"
    tf: TfEntry | None = TfEntry()
    robot_description: TopicEntry | None = TopicEntry("/robot_description")
    markers: TopicEntry | None = None

    @property
    def topics(self) -> list[str]:
        names = [e.topic for e in self.inputs] + [e.topic for e in self.outputs]
        names += [t for e in self.outputs for t in (e.raw_topic, e.info_topic) if t]
        names += [e.topic for e in (self.joint_states, self.robot_description, self.markers)
                  if e is not None]
        if self.tf is not None:
            names += ["/tf", "/tf_static"]
        return names


def topic_for(name: str) -> str:
    """The default topic of a component name: ``/`` + the name (ROS name rules apply)."""
    return "/" + name.strip("/")


def load_bridge(plan: SimulationPlan, path: str | Path | None = None) -> Bridge:
    """The bridge for ``plan``: the file's entries plus defaults for what it does not name."""
    if path is None or str(path) == "":
        return _complete(plan, [], [], Bridge((), ()), True, s.Where("(defaults)", "",
                                                                     BridgeError))
    file = Path(path)
    root = s.Where(str(file), "", BridgeError)
    document = s.load_yaml(file, BridgeError)
    if document is None:
        document = {}
    doc = s.mapping(document, root)
    s.keys(doc, root, required=("schema_version",),
           optional=("defaults", "inputs", "outputs", "joint_states", "tf",
                     "robot_description", "markers"))
    s.version(doc["schema_version"], root.key("schema_version"), major=SCHEMA_MAJOR,
              minors=SCHEMA_MINORS)
    defaults = s.boolean(doc.get("defaults", True), root.key("defaults"))
    endpoints = {a.endpoint: a for a in plan.actuators}
    devices = {d.id: d for d in plan.devices}
    inputs = [_input(item, root.key("inputs").key(n), endpoints)
              for n, item in enumerate(s.sequence(doc.get("inputs", []), root.key("inputs")))]
    outputs = [_output(item, root.key("outputs").key(n), devices)
               for n, item in enumerate(s.sequence(doc.get("outputs", []),
                                                   root.key("outputs")))]
    timestep_ns = plan.timebase.timestep_ns
    ground_truth = Bridge(
        (), (),
        joint_states=_switch(doc, "joint_states", root, JointStatesEntry(),
                             lambda v, w: _joint_states(v, w, timestep_ns)),
        tf=_switch(doc, "tf", root, TfEntry(), lambda v, w: _tf(v, w, timestep_ns)),
        robot_description=_switch(doc, "robot_description", root,
                                  TopicEntry("/robot_description"), _latched,
                                  "/robot_description"),
        markers=_switch(doc, "markers", root, None, _latched, "/fibril_sim/markers"))
    bridge = _complete(plan, inputs, outputs, ground_truth, defaults, root)
    return replace(bridge, source=str(file))


def default_bridge(plan: SimulationPlan) -> Bridge:
    return load_bridge(plan, None)


# --------------------------------------------------------------------------- entries
def _message_type(value: Node, where: s.Where, allowed: Sequence[str]) -> str:
    """``pkg/msg/Type`` (or ``pkg/Type``) normalised to ``pkg/msg/Type``, checked."""
    text = s.string(value, where)
    parts = text.split("/")
    if len(parts) == 2:
        text = f"{parts[0]}/msg/{parts[1]}"
    if text not in allowed:
        raise where.fail(f"message type {s.short(value)} is not possible here; expected one "
                         f"of {', '.join(allowed)}")
    return text


def _topic(value: Node, where: s.Where) -> str:
    """A ROS topic name as rclpy accepts it (ASCII tokens; ``~`` only as a leading ``~/``), so
    that a name the node cannot create is refused here, not when the node starts."""
    text = s.string(value, where)
    if len(text) > MAX_TOPIC_LENGTH:
        raise where.fail(f"a topic name of {len(text)} characters; at most {MAX_TOPIC_LENGTH}")
    name = text if text.startswith(("/", "~")) else "/" + text
    body = name[2:] if name.startswith("~/") else name[1:]
    tokens = body.split("/")
    if name.startswith("~") and not name.startswith("~/") or not all(
            t and (t[0].isalpha() or t[0] == "_") and t.isascii()
            and all(c.isalnum() or c == "_" for c in t) for t in tokens):
        raise where.fail(f"{s.short(text)} is not a valid ROS topic name (tokens of ASCII "
                         f"letters, digits and _, not starting with a digit, separated by "
                         f"single /; ~/ only at the start)")
    return name


def _qos(value: Node, where: s.Where, default_depth: int = 10) -> Qos:
    item = s.mapping(value, where)
    s.keys(item, where, optional=("reliability", "durability", "depth"))
    reliability = _choice(item.get("reliability", "reliable"), where.key("reliability"),
                          RELIABILITY)
    durability = _choice(item.get("durability", "volatile"), where.key("durability"),
                         DURABILITY)
    depth = s.integer(item.get("depth", default_depth), where.key("depth"), minimum=1,
                      maximum=MAX_QOS_DEPTH)
    return Qos(reliability, durability, depth)


def _choice(value: Node, where: s.Where, allowed: Sequence[str]) -> str:
    """One of ``allowed``: anything else (a list, a mapping, a number) is a BridgeError, never
    a TypeError from a lookup."""
    if not isinstance(value, str) or value not in allowed:
        shown = repr(value) if isinstance(value, str) and len(value) <= 60 else \
            s.describe(value)
        raise where.fail(f"unknown value {shown}; expected one of {', '.join(allowed)}")
    return value


def _endpoint(value: Node, where: s.Where, endpoints: Mapping[str, ActuatorDescriptor]) -> str:
    name = s.string(value, where)
    if name not in endpoints:
        raise where.fail(f"no actuator endpoint {s.short(name)} in the manifest; endpoints: "
                         f"{', '.join(endpoints) or 'none'}")
    return name


def _mode(value: Node, where: s.Where, targets: Sequence[str],
          endpoints: Mapping[str, ActuatorDescriptor]) -> str:
    mode = s.string(value, where)
    if mode not in MOTOR_MODES:
        raise where.fail(f"unknown mode {s.short(mode)}; expected one of "
                         f"{', '.join(MOTOR_MODES)}")
    for target in targets:
        accepted = endpoints[target].modes
        if mode not in accepted:
            raise where.fail(f"mode {mode!r} is not accepted by endpoint {target!r} "
                             f"({endpoints[target].kind.describe()}); accepted: "
                             f"{', '.join(accepted) or 'none'}")
    return mode


def _joint_name(value: Node, where: s.Where) -> str:
    """A JointState name: a string key (``1: motor`` or ``true: motor`` would compare unequal
    to the names a message carries)."""
    if not isinstance(value, str) or not value:
        raise where.fail(f"a joint name must be a non-empty string, got {s.describe(value)} "
                         f"(quote it)")
    return value


def _input(value: Node, where: s.Where, endpoints: Mapping[str, ActuatorDescriptor]) -> InputEntry:
    item = s.mapping(value, where)
    s.keys(item, where, required=("topic", "type"),
           optional=("endpoint", "endpoints", "joints", "mode", "field", "scale", "offset",
                     "qos"))
    kind = _message_type(item["type"], where.key("type"), INPUT_TYPES)
    topic = _topic(item["topic"], where.key("topic"))
    scale = s.number(item.get("scale", 1.0), where.key("scale"))
    offset = s.number(item.get("offset", 0.0), where.key("offset"))
    qos = _qos(item.get("qos", {}), where.key("qos"))
    allowed = {MOTOR_COMMAND: ("endpoint",), FLOAT64: ("endpoint", "mode"),
               FLOAT64_ARRAY: ("endpoints", "mode"), JOINT_STATE: ("joints", "field")}[kind]
    for key in ("endpoint", "endpoints", "joints", "mode", "field"):
        if key in item and key not in allowed:
            raise where.key(key).fail(f"not used by {kind}; its keys: {', '.join(allowed)}")
    for key in allowed:
        if key not in item and not (kind == JOINT_STATE and key == "field"):
            raise where.key(key).fail(f"missing required key (for {kind})")
    label = where.path
    if kind in (MOTOR_COMMAND, FLOAT64):
        target = _endpoint(item["endpoint"], where.key("endpoint"), endpoints)
        mode = None if kind == MOTOR_COMMAND else _mode(item["mode"], where.key("mode"),
                                                        (target,), endpoints)
        return InputEntry(topic, kind, (target,), mode, scale=scale, offset=offset, qos=qos,
                          where=label)
    if kind == FLOAT64_ARRAY:
        names = s.sequence(item["endpoints"], where.key("endpoints"))
        if not names:
            raise where.key("endpoints").fail("expected at least one endpoint")
        targets = tuple(_endpoint(n, where.key("endpoints").key(i), endpoints)
                        for i, n in enumerate(names))
        mode = _mode(item["mode"], where.key("mode"), targets, endpoints)
        return InputEntry(topic, kind, targets, mode, scale=scale, offset=offset, qos=qos,
                          where=label)
    joints = s.mapping(item["joints"], where.key("joints"))
    if not joints:
        raise where.key("joints").fail("expected at least one joint: endpoint pair")
    mapped = {_joint_name(j, where.key("joints")): _endpoint(e, where.key("joints").key(str(j)),
                                                              endpoints)
              for j, e in joints.items()}
    fieldname = _choice(item.get("field", "position"), where.key("field"), tuple(JOINT_FIELDS))
    mode = JOINT_FIELDS[fieldname]
    _mode(mode, where.key("field"), tuple(mapped.values()), endpoints)
    return InputEntry(topic, kind, tuple(mapped.values()), mode, joints=mapped,
                      field=fieldname, scale=scale, offset=offset, qos=qos, where=label)


def _output(value: Node, where: s.Where, devices: Mapping[str, DeviceDescriptor]) -> OutputEntry:
    item = s.mapping(value, where)
    s.keys(item, where, required=("device",),
           optional=("topic", "type", "frame_id", "stamp", "raw_topic", "info_topic",
                     "child_frame_id", "field_of_view", "radiation_type", "qos"))
    name = s.string(item["device"], where.key("device"))
    device = devices.get(name)
    if device is None:
        raise where.key("device").fail(f"no device {s.short(name)} in the manifest; devices: "
                                       f"{', '.join(devices) or 'none'}")
    base = _default_output(device)
    allowed = OUTPUT_TYPES.get(device.type, (DEVICE_SAMPLE,))
    kind = base.type
    if "type" in item:
        try:
            kind = _message_type(item["type"], where.key("type"), allowed)
        except BridgeError:
            raise where.key("type").fail(
                f"message type {s.short(item['type'])} cannot carry device {name!r} "
                f"({device.type}); possible: {', '.join(allowed)}") from None
    stamp = item.get("stamp", "acquisition")
    if "stamp" in item and kind == DEVICE_SAMPLE:
        raise where.key("stamp").fail(f"{DEVICE_SAMPLE} carries both times (header.stamp: "
                                      f"delivery, acquisition_stamp: acquisition)")
    stamp = _choice(stamp, where.key("stamp"), STAMPS)
    topic = _topic(item["topic"], where.key("topic")) if "topic" in item else base.topic
    raw = _topic(item["raw_topic"], where.key("raw_topic")) if "raw_topic" in item else None
    if raw is not None and kind == DEVICE_SAMPLE:
        raise where.key("raw_topic").fail("the main topic already carries DeviceSample")
    info = base.info_topic
    if "info_topic" in item:
        if kind != IMAGE:
            raise where.key("info_topic").fail(f"only an {IMAGE} output has a camera info topic")
        info = _topic(item["info_topic"], where.key("info_topic"))
    elif kind != IMAGE:
        info = None
    elif "topic" in item:
        info = topic.rsplit("/", 1)[0] + "/camera_info" if topic.count("/") > 1 \
            else topic + "/camera_info"
    for key, wanted in (("child_frame_id", ODOMETRY), ("field_of_view", RANGE),
                        ("radiation_type", RANGE)):
        if key in item and kind != wanted:
            raise where.key(key).fail(f"only used by {wanted} outputs")
    # An arc in radians: at most a full turn (and so always a float32 of the Range message).
    fov = s.number(item.get("field_of_view", 0.0), where.key("field_of_view"), minimum=0.0,
                   maximum=2 * math.pi)
    radiation = _choice(item.get("radiation_type", "infrared"), where.key("radiation_type"),
                        RADIATION_TYPES)
    frame = s.string(item["frame_id"], where.key("frame_id")) if "frame_id" in item \
        else base.frame_id
    child = s.string(item["child_frame_id"], where.key("child_frame_id")) \
        if "child_frame_id" in item else base.child_frame_id
    return OutputEntry(name, device.type, topic, kind, frame, stamp, raw, info, child, fov,
                       radiation, _qos(item.get("qos", {}), where.key("qos"), OUTPUT_QOS.depth),
                       where.path)


def _switch(doc: NodeMap, key: str, root: s.Where, default: E | None,
            parse: Callable[[Node, s.Where], E], topic: str | None = None) -> E | None:
    """A ground-truth entry: absent → ``default``; false → off; true → on with its defaults
    (``topic`` for one that is off by default); a mapping → parsed."""
    where = root.key(key)
    if key not in doc:
        return default
    value = doc[key]
    if isinstance(value, bool):
        if not value:
            return None
        value = {}
    if topic is not None and isinstance(value, Mapping) and "topic" not in value:
        value = {**value, "topic": topic}
    return parse(value, where)


def _rate(value: Node, where: s.Where, timestep_ns: int) -> float:
    # (MuJoCo is loaded only once a ground-truth rate is checked: reading a bridge needs none)
    from fibril_sim_core.runtime.observation import ObservationRequest

    rate = s.number(value, where, positive=True)
    try:
        ticks = ObservationRequest(rate).period_ticks(timestep_ns)
    except InstanceError as exc:
        raise where.fail(str(exc).removeprefix("observe: ")) from None
    except OverflowError:  # 1e-300 Hz: a period of infinitely many steps
        ticks = None
    if ticks is None or ticks > s.MAX_INTEGER:
        raise where.fail(f"rate {rate:g} Hz is a period longer than 2**63 - 1 physics steps")
    return rate


def _joint_states(value: Node, where: s.Where, timestep_ns: int) -> JointStatesEntry:
    item = s.mapping(value, where)
    s.keys(item, where, optional=("rate", "topic", "qos", "fast_wall_rate"))
    rate = _rate(item.get("rate", JointStatesEntry.rate), where.key("rate"), timestep_ns)
    topic = _topic(item.get("topic", "/joint_states"), where.key("topic"))
    return JointStatesEntry(topic, rate, _qos(item.get("qos", {}), where.key("qos"),
                                              OUTPUT_QOS.depth), _fast_wall_rate(item, where))


def _tf(value: Node, where: s.Where, timestep_ns: int) -> TfEntry:
    item = s.mapping(value, where)
    s.keys(item, where, optional=("rate", "frame_prefix", "fast_wall_rate"))
    rate = _rate(item.get("rate", TfEntry.rate), where.key("rate"), timestep_ns)
    prefix = s.string(item.get("frame_prefix", ""), where.key("frame_prefix")) \
        if item.get("frame_prefix", "") != "" else ""
    if prefix and not all(c.isalnum() or c in "_/" for c in prefix):
        raise where.key("frame_prefix").fail(f"{prefix!r} is not a valid frame prefix "
                                             f"(letters, digits, _ and /)")
    return TfEntry(rate, prefix, _fast_wall_rate(item, where))


def _fast_wall_rate(item: NodeMap, where: s.Where) -> float:
    """Wall Hz (0: every grid point) while running free as fast as possible."""
    return s.number(item.get("fast_wall_rate", FAST_WALL_RATE), where.key("fast_wall_rate"),
                    minimum=0.0, maximum=1e6)


def _latched(value: Node, where: s.Where) -> TopicEntry:
    item = s.mapping(value, where)
    s.keys(item, where, optional=("topic",))
    return TopicEntry(_topic(item.get("topic"), where.key("topic")))


def _default_input(actuator: ActuatorDescriptor) -> InputEntry:
    return InputEntry(topic_for(actuator.endpoint), MOTOR_COMMAND, (actuator.endpoint,),
                      where=f"(default for endpoint {actuator.endpoint})")


def _default_output(device: DeviceDescriptor) -> OutputEntry:
    kind = OUTPUT_TYPES.get(device.type, (DEVICE_SAMPLE,))[0]
    topic = topic_for(device.id)
    info = None
    if kind == IMAGE:
        info = topic + "/camera_info"
        topic = topic + "/image_raw"
    child = str(device.binding.get("body", "")) if kind == ODOMETRY else ""
    return OutputEntry(device.id, device.type, topic, kind, device.frame_id, info_topic=info,
                       child_frame_id=child, qos=OUTPUT_QOS,
                       where=f"(default for device {device.id})")


def _complete(plan: SimulationPlan, inputs: list[InputEntry], outputs: list[OutputEntry],
              ground_truth: Bridge, defaults: bool, root: s.Where) -> Bridge:
    """Add default entries for components the file does not name; reject duplicate topics."""
    if defaults:
        named = {t for e in inputs for t in e.targets}
        inputs = inputs + [_default_input(a) for a in plan.actuators if a.endpoint not in named]
        shown = {e.device for e in outputs}
        outputs = outputs + [_default_output(d) for d in plan.devices if d.id not in shown]
    seen: dict[str, str] = {}

    def claim(topic: str, where: str) -> None:
        if topic in seen:
            first, second = seen[topic], where
            if second.startswith("(default"):  # name the file's key, not the default
                first, second = second, first
            also = first.replace("(default for ", "the default topic of ").rstrip(")") \
                if first.startswith("(default") else first
            raise BridgeError(f"{root.file}: {second}: duplicate topic {topic!r} (also "
                              f"{also})")
        seen[topic] = where

    for entry in inputs:
        claim(entry.topic, f"{entry.where}.topic" if entry.where.startswith("inputs") else
              entry.where)
    for output in outputs:
        own = output.where.startswith("outputs")
        claim(output.topic, f"{output.where}.topic" if own else output.where)
        if output.raw_topic:
            claim(output.raw_topic, f"{output.where}.raw_topic")
        if output.info_topic:
            claim(output.info_topic, f"{output.where}.info_topic" if own else output.where)
    for key, stream in (("joint_states", ground_truth.joint_states),
                        ("robot_description", ground_truth.robot_description),
                        ("markers", ground_truth.markers)):
        if stream is not None:
            claim(stream.topic, f"{key}.topic")
    if ground_truth.tf is not None:
        claim("/tf", "tf")
        claim("/tf_static", "tf")
    return replace(ground_truth, inputs=tuple(inputs), outputs=tuple(outputs),
                   source=root.file)


def covariance_diagonal(std: float) -> list[float]:
    """A 3×3 row-major covariance with ``std²`` on the diagonal."""
    variance = float(std) ** 2 if math.isfinite(std) else 0.0
    return [variance, 0.0, 0.0, 0.0, variance, 0.0, 0.0, 0.0, variance]
