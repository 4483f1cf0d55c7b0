"""The fibril_msgs interface definitions, embedded, and a rosbags typestore that knows them.

Traces are written and read without ROS, so the core cannot look the ``.msg`` files up in an
ament index or rely on the source tree layout. The text below is a verbatim copy of
``fibril_msgs/msg/*.msg``; a unit test compares it with the files so the two never drift.
"""

from __future__ import annotations

from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from rosbags.typesys import Stores, get_types_from_msg, get_typestore

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np
    from rosbags.typesys.store import Typestore

_ACTUATOR_APPLICATION = """\
# What an actuator endpoint did with a command: commanded by the controller, released by the
# transport (after latency), and applied to the MuJoCo actuator after driver semantics.
builtin_interfaces/Time stamp
uint32 episode
int64 tick
string endpoint
string actuator
string mode
float64 commanded
float64 released
float64 applied
"""

_DEVICE_SAMPLE = """\
# One DeviceOutput of a virtual sensor, as delivered to its subscribers.
# header.stamp is the delivery time (SessionTime, i.e. /clock); header.frame_id names the frame.
std_msgs/Header header
# When the device sampled the physics state (SessionTime).
builtin_interfaces/Time acquisition_stamp
# Episode-local times in integer nanoseconds (EpisodeTime restarts at reset).
int64 acquisition_episode_time_ns
int64 delivery_episode_time_ns
uint32 episode
string device_id
# Stable sample type id, e.g. fibril_sim/imu_sample/v1.
string sample_type
float64[] values
string[] component_names
"""

_EXTERNAL_INPUT = """\
# A value that entered the simulation from outside (controller, ROS callback, recording),
# with what the ingress did with it. Rejected inputs are traced too, never dropped silently.
builtin_interfaces/Time stamp
uint32 episode
string source_id
uint64 source_sequence
string payload_type
string payload_json
# Tick of the episode at which the input was committed; -1 when rejected.
int64 commit_tick
# Global order in which the ingress accepted inputs (commit order within a tick).
uint64 acceptance_sequence
bool accepted
string reject_reason
"""

_FRAME_TIMING = """\
# Timing of one completed frame of the simulation host.
builtin_interfaces/Time stamp
uint32 episode
uint64 tick
int64 episode_time_ns
int64 session_time_ns
# Wall-clock seconds spent stepping physics in this frame.
float64 wall_step_time
# Simulated time advanced / wall time elapsed over the frame.
float64 real_time_factor
"""

_MOTOR_COMMAND = """\
# Command for a fibril_sim/motor endpoint (payload fibril_sim/motor_command/v1).
uint8 MODE_DUTY=0
uint8 MODE_VOLTAGE=1
uint8 MODE_TORQUE=2
uint8 MODE_VELOCITY=3
uint8 MODE_POSITION=4
uint8 mode
float64 value
"""

_STATE_SNAPSHOT = """\
# Post-physics state of the whole model at one tick; names are in the trace metadata.
builtin_interfaces/Time stamp
uint32 episode
int64 tick
int64 episode_time_ns
float64[] qpos
float64[] qvel
float64[] act
float64[] ctrl
float64[] actuator_force
float64[] sensordata
# Body poses in world frame, nbody x 3 and nbody x 4 (w, x, y, z), row-major.
float64[] xpos
float64[] xquat
"""

PACKAGE = "fibril_msgs"

#: Full type name (``fibril_msgs/msg/Name``) → verbatim ``.msg`` text.
MSG_DEFINITIONS: Mapping[str, str] = MappingProxyType(
    {
        "fibril_msgs/msg/ActuatorApplication": _ACTUATOR_APPLICATION,
        "fibril_msgs/msg/DeviceSample": _DEVICE_SAMPLE,
        "fibril_msgs/msg/ExternalInput": _EXTERNAL_INPUT,
        "fibril_msgs/msg/FrameTiming": _FRAME_TIMING,
        "fibril_msgs/msg/MotorCommand": _MOTOR_COMMAND,
        "fibril_msgs/msg/StateSnapshot": _STATE_SNAPSHOT,
    }
)

ACTUATOR_APPLICATION = "fibril_msgs/msg/ActuatorApplication"
DEVICE_SAMPLE = "fibril_msgs/msg/DeviceSample"
EXTERNAL_INPUT = "fibril_msgs/msg/ExternalInput"
FRAME_TIMING = "fibril_msgs/msg/FrameTiming"
MOTOR_COMMAND = "fibril_msgs/msg/MotorCommand"
STATE_SNAPSHOT = "fibril_msgs/msg/StateSnapshot"


# -- what rosbags decodes them to ----------------------------------------------------------
# rosbags generates a class per message type and is untyped here: these Protocols say which
# fields the reader reads, with their types (a ``float64[]`` decodes to a numpy array).


class Stamp(Protocol):
    """A decoded builtin_interfaces/Time."""

    sec: int
    nanosec: int


class Header(Protocol):
    """A decoded std_msgs/Header."""

    stamp: Stamp
    frame_id: str


class DecodedExternalInput(Protocol):
    stamp: Stamp
    episode: int
    source_id: str
    source_sequence: int
    payload_type: str
    payload_json: str
    commit_tick: int
    acceptance_sequence: int
    accepted: bool
    reject_reason: str


class DecodedDeviceSample(Protocol):
    header: Header
    acquisition_stamp: Stamp
    acquisition_episode_time_ns: int
    delivery_episode_time_ns: int
    episode: int
    device_id: str
    sample_type: str
    values: np.ndarray
    component_names: list[str]


class DecodedActuatorApplication(Protocol):
    stamp: Stamp
    episode: int
    tick: int
    endpoint: str
    actuator: str
    mode: str
    commanded: float
    released: float
    applied: float


class DecodedStateSnapshot(Protocol):
    stamp: Stamp
    episode: int
    tick: int
    episode_time_ns: int
    qpos: np.ndarray
    qvel: np.ndarray
    act: np.ndarray
    ctrl: np.ndarray
    actuator_force: np.ndarray
    sensordata: np.ndarray
    xpos: np.ndarray
    xquat: np.ndarray


class DecodedFrameTiming(Protocol):
    stamp: Stamp
    episode: int
    tick: int
    episode_time_ns: int
    session_time_ns: int
    wall_step_time: float
    real_time_factor: float


class DecodedString(Protocol):
    """A decoded std_msgs/String (the episodes topic)."""

    data: str


_M = TypeVar("_M")


class Decoded(Generic[_M]):
    """A marker a reader passes to say, for type checkers, which shape it expects the
    messages it reads to decode to (nothing is checked at run time)."""

    __slots__ = ()


EXTERNAL_INPUT_SHAPE: Decoded[DecodedExternalInput] = Decoded()
DEVICE_SAMPLE_SHAPE: Decoded[DecodedDeviceSample] = Decoded()
ACTUATOR_APPLICATION_SHAPE: Decoded[DecodedActuatorApplication] = Decoded()
STATE_SNAPSHOT_SHAPE: Decoded[DecodedStateSnapshot] = Decoded()
FRAME_TIMING_SHAPE: Decoded[DecodedFrameTiming] = Decoded()
STRING_SHAPE: Decoded[DecodedString] = Decoded()

# Newest ROS 2 distribution first; the standard types we use (Header, Time) are identical
# across them, so any of these produces the same wire format and type hashes.
_BASE_STORES = ("ROS2_LYRICAL", "ROS2_KILTED", "ROS2_JAZZY", "ROS2_HUMBLE")


def _base_store() -> Stores:
    for name in _BASE_STORES:
        store = Stores.__members__.get(name)  # (an older rosbags lacks the newer ones)
        if store is not None:
            return store
    msg = f"installed rosbags has none of the typestores {', '.join(_BASE_STORES)}"
    raise RuntimeError(msg)


#: The standard types the traced messages use, as the ROS 2 stores define them.
_STANDARD_DEFINITIONS: Mapping[str, str] = MappingProxyType({
    "builtin_interfaces/msg/Time": "int32 sec\nuint32 nanosec\n",
    "std_msgs/msg/Header": "builtin_interfaces/Time stamp\nstring frame_id\n",
    "std_msgs/msg/String": "string data\n",
})


@lru_cache(maxsize=1)
def trace_typestore() -> Typestore:
    """A typestore of just what a trace writes (fibril_msgs, std_msgs/String and the types
    they use): the writer's schema texts and type hashes, the same as ``typestore()``'s
    (tested), built in a few milliseconds where a full ROS 2 store takes ~50."""
    store = get_typestore(Stores.EMPTY)
    types = {}
    for name, text in (*_STANDARD_DEFINITIONS.items(), *MSG_DEFINITIONS.items()):
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store


@lru_cache(maxsize=1)
def typestore() -> Typestore:
    """Return the shared typestore: a ROS 2 base store plus every fibril_msgs type.

    Built on first use (parsing and code generation take tens of milliseconds) and then
    reused, so serializers generated by rosbags are cached for the life of the process.
    """
    store = get_typestore(_base_store())
    types = {}
    for name, text in MSG_DEFINITIONS.items():
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store
