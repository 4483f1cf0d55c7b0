"""The sim node's message templates give rclpy's serialization of the same message.

A template packs its numbers between the prototype's constant bytes in one ``struct`` call
(``encode`` and the faster ``packer()``): the bytes must be those ``serialize_message`` makes
of a message object filled with the same values, for every kind of field, but for the
alignment padding: rclpy leaves whatever its buffer held there (a stray byte seen before a
float64 sequence, depending on the heap), a template has zeros (as rosbags' serializer).
"""

from __future__ import annotations

import math
import struct

import pytest
from fibril_sim_ros.cdr import Template, canonical_bytes
from rclpy.serialization import serialize_message
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from fibril_msgs.msg import DeviceSample

STAMPS = [(0, 0), (12, 345_678_901), (-3, 999_999_999), (2**31 - 1, 2**32 - 1)]


def _joint_state() -> JointState:
    msg = JointState()
    msg.header.frame_id = "wheel_joint"
    msg.name = ["wheel_joint"]
    return msg


def _assert_rclpys(packed: bytes, expected) -> None:
    """``packed`` is rclpy's serialization of ``expected`` with zeros in the padding."""
    raw = serialize_message(expected)
    assert len(packed) == len(raw)
    differing = [i for i, (ours, theirs) in enumerate(zip(packed, raw, strict=True))
                 if ours != theirs]
    assert all(packed[i] == 0 for i in differing), differing  # padding only
    assert packed == canonical_bytes(expected)


@pytest.mark.parametrize("sec, nanosec", STAMPS)
@pytest.mark.parametrize("position, velocity", [(0.5, -0.25), (-0.0, math.inf),
                                                (1e300, -1e-300)])
def test_joint_state_bytes_are_rclpys(sec, nanosec, position, velocity) -> None:
    template = Template(_joint_state(), [("header.stamp", "time"), ("position", "f64s", 1),
                                         ("velocity", "f64s", 1)])
    expected = _joint_state()
    expected.header.stamp.sec, expected.header.stamp.nanosec = sec, nanosec
    expected.position, expected.velocity = [position], [velocity]
    packed = template.packer()(sec, nanosec, position, velocity)
    _assert_rclpys(packed, expected)
    assert template.encode((sec, nanosec), (position,), (velocity,)) == packed


def _sample() -> DeviceSample:
    msg = DeviceSample()
    msg.header.frame_id = "imu"
    msg.device_id = "chassis_imu"
    msg.sample_type = "fibril_sim/imu_sample/v1"
    msg.component_names = ["a", "b", "c"]
    return msg


def test_every_field_kind_packs_as_rclpy_serializes() -> None:
    template = Template(_sample(), [
        ("header.stamp", "time"), ("acquisition_stamp", "time"),
        ("acquisition_episode_time_ns", "i64"), ("delivery_episode_time_ns", "i64"),
        ("episode", "u32"), ("values", "f64s", 3)])
    expected = _sample()
    expected.header.stamp.sec, expected.header.stamp.nanosec = 7, 8
    expected.acquisition_stamp.sec, expected.acquisition_stamp.nanosec = 5, 6
    expected.acquisition_episode_time_ns = -(2**62)
    expected.delivery_episode_time_ns = 2**62
    expected.episode = 2**32 - 1
    expected.values = [1.5, math.nan, -2.0]
    packed = template.packer()(7, 8, 5, 6, -(2**62), 2**62, 2**32 - 1, 1.5, math.nan, -2.0)
    _assert_rclpys(packed, expected)
    assert template.encode((7, 8), (5, 6), -(2**62), 2**62, 2**32 - 1,
                           [1.5, math.nan, -2.0]) == packed


def test_a_clock_template() -> None:
    pack = Template(Clock(), [("clock", "time")]).packer()
    expected = Clock()
    expected.clock.sec, expected.clock.nanosec = 1_700_000_000, 1
    _assert_rclpys(pack(1_700_000_000, 1), expected)


def test_the_template_has_no_stray_padding_bytes() -> None:
    """A float64 sequence after a 4-byte length needs 4 bytes of padding (the velocity of a
    one-joint JointState): zeros in the template whatever rclpy's buffer held."""
    prototype = _joint_state()
    prototype.position, prototype.velocity = [1.0], [2.0]
    data = canonical_bytes(prototype)
    velocity = data.find(struct.pack("<d", 2.0))
    assert velocity % 8 == 4  # aligned to 8 after the 4-byte encapsulation header
    assert data[velocity - 8:velocity - 4] == struct.pack("<I", 1)  # the length ...
    assert data[velocity - 4:velocity] == bytes(4)  # ... then the padding, zeros


def test_fields_out_of_layout_order_are_refused() -> None:
    with pytest.raises(ValueError, match="layout order"):
        Template(_joint_state(), [("position", "f64s", 1), ("header.stamp", "time")])


def test_values_out_of_range_fail_as_struct_does() -> None:
    pack = Template(Clock(), [("clock", "time")]).packer()
    with pytest.raises(Exception, match="format requires|argument out of range"):
        pack(0, -1)  # nanosec is unsigned
