"""Semantic records that flow out of a SimulationInstance.

They are plain, immutable values so that the trace writer, a ROS publisher and a calibration
observer can all receive the same object. Times are integer nanoseconds of EpisodeTime unless the
name says ``session``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ._document import Node


@dataclass(frozen=True, slots=True)
class ExternalInput:
    """A value arriving from outside the simulation (controller, ROS callback, recording).

    ``payload`` is the decoded JSON object; ``payload_json`` its text form as received.
    """

    source_id: str
    source_sequence: int
    payload_type: str
    payload: dict[str, Node]  # the decoded JSON object (a document boundary)
    payload_json: str = ""


@dataclass(frozen=True, slots=True)
class IngressRecord:
    """What the ingress did with one ExternalInput: committed at a tick, or rejected."""

    episode: int
    source_id: str
    source_sequence: int
    payload_type: str
    payload_json: str
    accepted: bool
    commit_tick: int  # -1 when rejected
    acceptance_sequence: int
    reject_reason: str
    session_time_ns: int


class DeviceOutput(NamedTuple):
    """One sample of a virtual sensor: acquired at one tick, visible after its latency.

    A NamedTuple (immutable and cheap to create: one is made per acquisition on the hot path).
    """

    episode: int
    device_id: str
    sample_type: str
    acquisition_tick: int
    acquisition_time_ns: int
    delivery_time_ns: int
    session_acquisition_time_ns: int
    session_delivery_time_ns: int
    values: np.ndarray
    component_names: tuple[str, ...]
    frame_id: str = ""


@dataclass(frozen=True, slots=True)
class ActuatorApplication:
    """An actuator endpoint's command path at one tick: commanded → released → applied."""

    episode: int
    tick: int
    time_ns: int
    session_time_ns: int
    endpoint: str
    actuator: str
    mode: str
    commanded: float
    released: float
    applied: float


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """Post-physics state at one tick (arrays are copies)."""

    episode: int
    tick: int
    time_ns: int
    session_time_ns: int
    qpos: np.ndarray
    qvel: np.ndarray
    act: np.ndarray
    ctrl: np.ndarray
    actuator_force: np.ndarray
    sensordata: np.ndarray
    xpos: np.ndarray  # (nbody, 3)
    xquat: np.ndarray  # (nbody, 4) wxyz


@dataclass(frozen=True, slots=True)
class EpisodeStart:
    """An episode began: its seed and keyframe, so any episode of a trace replays exactly.

    Emitted when an instance is created (episode 0) and at every reset, before the episode's
    first record; ``session_time_ns`` is the SessionTime at which its EpisodeTime is 0.
    """

    episode: int
    seed: int
    keyframe: str
    session_time_ns: int


@dataclass(frozen=True, slots=True)
class FrameTiming:
    """Timing of one completed host frame."""

    episode: int
    tick: int
    episode_time_ns: int
    session_time_ns: int
    wall_step_time: float
    real_time_factor: float


@dataclass(frozen=True, slots=True)
class RenderFrame:
    """One render observation: an image of a MuJoCo camera (or the free camera) taken by the
    host at a frame boundary, for the viewer / GUI channel (not a sensor: no noise, no latency).

    ``rgb`` is (height, width, 3) uint8; ``depth`` (height, width) float32 metres or None.
    """

    stream: int
    camera: str  # the MJCF camera name, or "" for the free camera
    episode: int
    tick: int
    session_time_ns: int
    rgb: np.ndarray
    depth: np.ndarray | None = None


class StateObservation(NamedTuple):
    """Ground truth the host takes on the simulated clock's grid (runtime/observation.py):
    joint states and the moving bodies' frames, for ``/joint_states`` and ``/tf`` (no noise,
    no latency; not a sensor). The arrays follow the model's ``StateLayout``; those a stream
    did not ask for are empty.

    ``joint_effort`` is the actuator force on each joint's dof (``qfrc_actuator``) over the
    step that led here; ``frame_orientation`` rows are quaternions w x y z. A NamedTuple
    (cheap to create: as fast as possible, thousands are made a second).
    """

    stream: int
    episode: int
    tick: int
    session_time_ns: int
    joint_position: np.ndarray
    joint_velocity: np.ndarray
    joint_effort: np.ndarray
    frame_position: np.ndarray
    frame_orientation: np.ndarray


#: What a SimulationInstance emits to its subscribers and trace (EpisodeStart at the start of
#: every episode, the others as they are made).
Record = DeviceOutput | ActuatorApplication | IngressRecord | StateSnapshot | EpisodeStart
#: Every record a trace holds (a host adds its frame timings).
TraceRecord = Record | FrameTiming
#: Every record a connection's callbacks may receive (a connection's own streams add render
#: frames and state observations).
ClientRecord = TraceRecord | RenderFrame | StateObservation
