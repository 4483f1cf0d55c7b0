"""The bridge file's values of the wrong type or out of what ROS accepts: every one is a
BridgeError naming the file, the key and the value (the node turns it into one line and exit 2),
never a TypeError from a lookup nor a name or QoS that rclpy refuses when the node starts.
No rclpy here: ``fibril_sim_ros.bridge`` parses and checks only."""

from __future__ import annotations

from pathlib import Path

import pytest

from fibril_sim_core import SimulationBuilder
from fibril_sim_ros.bridge import BridgeError, load_bridge

MANIFEST = Path(__file__).resolve().parents[2] / "config/examples/drivetrain/simulation.yaml"
HEADER = "schema_version: {major: 1, minor: 0}\n"
JOINTS = "{topic: /j, type: sensor_msgs/msg/JointState, joints: {wheel_joint: motor/command}"


@pytest.fixture(scope="module")
def plan():
    return SimulationBuilder().build(MANIFEST)


def _error(plan, tmp_path: Path, text: str) -> str:
    path = tmp_path / "bridge.yaml"
    path.write_text(HEADER + text + "\n")
    with pytest.raises(BridgeError) as caught:
        load_bridge(plan, path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    return message.removeprefix(f"{path}: ")


@pytest.mark.parametrize(("text", "message"), [
    # issue 23 item 10: a list or a mapping as `field` was `TypeError: unhashable type`
    (f"inputs: [{JOINTS}, field: [velocity]}}]",
     "inputs[0].field: unknown value list ['velocity']; expected one of position, velocity, "
     "effort"),
    (f"inputs: [{JOINTS}, field: {{a: 1}}}}]",
     "inputs[0].field: unknown value dict {'a': 1}; expected one of"),
    (f"inputs: [{JOINTS}, field: 3}}]", "inputs[0].field: unknown value int 3; expected"),
    (f"inputs: [{JOINTS}, field: torque}}]",
     "inputs[0].field: unknown value 'torque'; expected one of position, velocity, effort"),
    ("inputs: [{topic: /j, type: sensor_msgs/msg/JointState, joints: {1: motor/command}}]",
     "inputs[0].joints: a joint name must be a non-empty string, got int 1 (quote it)"),
    ("inputs: [{topic: /a, type: std_msgs/Float64, endpoint: motor/command, mode: [duty]}]",
     "inputs[0].mode: expected a non-empty string, got list ['duty']"),
    ("inputs: [{topic: /a, type: std_msgs/Float64, endpoint: motor/command, mode: duty, "
     "qos: {durability: {x: 1}}}]",
     "inputs[0].qos.durability: unknown value dict {'x': 1}; expected one of volatile, "
     "transient_local"),
    ("outputs: [{device: chassis_imu, stamp: [acquisition]}]",
     "outputs[0].stamp: unknown value list ['acquisition']; expected one of acquisition, "
     "delivery"),
    ("outputs: [{device: chassis_imu, qos: {reliability: [reliable]}}]",
     "outputs[0].qos.reliability: unknown value list ['reliable']"),
    # rclpy takes a depth up to 2**31 - 1 only (a TypeError when the node starts)
    ("outputs: [{device: chassis_imu, qos: {depth: 4294967296}}]",
     "outputs[0].qos.depth: expected an integer <= 1000000, got 4294967296"),
    ("outputs: [{device: front_range, radiation_type: {a: 1}}]",
     "outputs[0].radiation_type: unknown value dict {'a': 1}; expected one of infrared, "
     "ultrasound"),
    ("outputs: [{device: front_range, field_of_view: 1.0e+300}]",
     "outputs[0].field_of_view: expected a number <= 6.28319, got 1e+300"),
    ("outputs: [{device: front_range, type: [sensor_msgs/msg/Range]}]",
     "outputs[0].type: message type ['sensor_msgs/msg/Range'] cannot carry device"),
    ("outputs: [{device: [chassis_imu]}]",
     "outputs[0].device: expected a non-empty string, got list ['chassis_imu']"),
    # names rclpy refuses when the node creates the topic
    ("outputs: [{device: chassis_imu, topic: /caf\u00e9}]",
     "outputs[0].topic: '/caf\u00e9' is not a valid ROS topic name"),
    ("outputs: [{device: chassis_imu, topic: ~imu}]",
     "outputs[0].topic: '~imu' is not a valid ROS topic name"),
    ("outputs: [{device: chassis_imu, topic: /~/imu}]",
     "outputs[0].topic: '/~/imu' is not a valid ROS topic name"),
    ("outputs: [{device: chassis_imu, topic: //imu}]",
     "outputs[0].topic: '//imu' is not a valid ROS topic name"),
    ("outputs: [{device: chassis_imu, topic: '/{node}/imu'}]",
     "outputs[0].topic: '/{node}/imu' is not a valid ROS topic name"),
    ("outputs: [{device: chassis_imu, topic: /" + "a/" * 150 + "imu}]",
     "outputs[0].topic: a topic name of 304 characters; at most 200"),
])
def test_wrong_values_are_bridge_errors_naming_key_and_value(plan, tmp_path: Path, text: str,
                                                             message: str) -> None:
    assert _error(plan, tmp_path, text).startswith(message)


def test_a_huge_value_is_shown_short(plan, tmp_path: Path) -> None:
    message = _error(plan, tmp_path, f"inputs: [{JOINTS}, field: {'x' * 100_000}}}]")
    assert message.startswith("inputs[0].field: unknown value str 'xxx") and len(message) < 300


def test_yaml_1_1_words_are_not_values(plan, tmp_path: Path) -> None:
    """``defaults: yes`` is the string 'yes' (YAML 1.2), refused rather than read as true."""
    assert _error(plan, tmp_path, "defaults: yes") == \
        "defaults: expected true or false, got str 'yes'"


def test_private_and_relative_names_are_kept(plan, tmp_path: Path) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(HEADER + "outputs: [{device: chassis_imu, topic: ~/imu, raw_topic: "
                    "_raw/imu_2}]\n")
    entry = next(e for e in load_bridge(plan, path).outputs if e.device == "chassis_imu")
    assert (entry.topic, entry.raw_topic) == ("~/imu", "/_raw/imu_2")


@pytest.mark.parametrize("rate", ["1.0e-300", "1.0e-200"])
def test_a_rate_whose_period_never_ends_is_a_bridge_error(plan, tmp_path: Path,
                                                          rate: str) -> None:
    """1e-300 Hz was ``OverflowError: cannot convert float infinity to integer``."""
    assert _error(plan, tmp_path, f"joint_states: {{rate: {rate}}}") == (
        f"joint_states.rate: rate {float(rate):g} Hz is a period longer than 2**63 - 1 physics "
        f"steps")
