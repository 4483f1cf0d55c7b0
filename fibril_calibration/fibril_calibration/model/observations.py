"""Observation selectors: what a signal compares, resolved by name on each candidate's model.

Snapshot selectors read MuJoCo state at physics-step boundaries, on a grid of
``sample_every_steps`` ticks starting at tick 0; the sample at tick ``t`` (time ``t·dt``) is the
state x(t):

=================  =========================================  ==========================
source             selects                                    values
=================  =========================================  ==========================
joint_position     ``name``: a joint                          qpos slice (free 7, ball 4,
                                                              hinge/slide 1)
joint_velocity     ``name``: a joint                          qvel slice (free 6, ball 3,
                                                              hinge/slide 1)
sensor             ``name``: a MuJoCo sensor                  its sensordata slice
body_position      ``name``: a body                           world position (3)
body_quaternion    ``name``: a body                           world orientation, wxyz (4);
                                                              a 3-D rotation-vector residual
qpos / qvel /      ``indices`` into the raw array             the selected elements
sensordata
=================  =========================================  ==========================

Event-driven selectors take the plan's own records (``sample_every_steps`` is always 1):

* ``actuator_application`` (``name``: an endpoint id): one sample per command release, stamped
  at the release tick; the vector is (commanded, released, applied); ``indices`` select from it
  and default to ``applied``. Capturing it needs no trace file: the rollout subscribes to the
  instance's ActuatorApplication records, the same records a trace writer receives.
* ``device_output`` (``name``: a device id, optional ``sample_type`` that must be the device's):
  each delivered sample through its typed decoder, stamped at its delivery time (what the trace
  and ROS header stamps carry) or, with ``timestamp: acquisition``, at its acquisition time;
  ``indices`` (integers or component names) select components of the decoded vector.

Derived quantities (sensordata, body poses) of x(t) are what MuJoCo computes at the start of the
step from x(t); they are read right after that step, exactly like the instance's own state
snapshots, so no extra ``mj_forward`` ever runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import numpy.typing as npt

from fibril_sim_core import schema as s

from .._json import JsonObject
from ..errors import LISTING_LIMIT, EvaluationError
from .decoders import CalibrationDeviceOutputDecoderRegistry

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan

SNAPSHOT_SOURCES: tuple[str, ...] = (
    "joint_position", "joint_velocity", "sensor", "body_position", "body_quaternion",
    "qpos", "qvel", "sensordata")
EVENT_SOURCES: tuple[str, ...] = ("actuator_application", "device_output")
SOURCES: tuple[str, ...] = SNAPSHOT_SOURCES + EVENT_SOURCES
NAMED_SOURCES = ("joint_position", "joint_velocity", "sensor", "body_position",
                 "body_quaternion", "actuator_application", "device_output")
INDEXED_SOURCES = ("qpos", "qvel", "sensordata")
# Sources whose values MuJoCo derives in the step's forward pass (read one boundary later).
DERIVED_SOURCES = ("sensor", "body_position", "body_quaternion", "sensordata")
# Body poses are read from MjData at boundaries; every other snapshot source is captured
# (qpos / qvel / sensordata) straight from the rollout.
POSE_SOURCES = ("body_position", "body_quaternion")
APPLICATION_COMPONENTS = ("commanded", "released", "applied")
TIMESTAMPS = ("delivery", "acquisition")

_JOINT_TYPES = {0: "free", 1: "ball", 2: "slide", 3: "hinge"}
_JOINT_POSITION = {"free": ("x", "y", "z", "qw", "qx", "qy", "qz"),
                   "ball": ("qw", "qx", "qy", "qz"), "slide": ("position",),
                   "hinge": ("position",)}
_JOINT_VELOCITY = {"free": ("vx", "vy", "vz", "wx", "wy", "wz"), "ball": ("wx", "wy", "wz"),
                   "slide": ("velocity",), "hinge": ("velocity",)}
_OBJ = mujoco.mjtObj


@dataclass(frozen=True)
class ObservationSpec:
    """One observation selector, validated against the nominal plan.

    ``components`` name the compared values (the length every reference sample must have);
    ``indices`` are resolved integers (None: the source's natural vector).
    """

    id: str
    source: str
    name: str | None
    indices: tuple[int, ...] | None
    sample_type: str | None
    sample_every_steps: int
    timestamp: str | None
    components: tuple[str, ...]

    @property
    def target(self) -> str:
        """The named object of a NAMED_SOURCES selector: a joint, sensor, body, actuator
        endpoint or device."""
        if self.name is None:
            raise ValueError(f"observation {self.id!r} ({self.source}) selects by indices")
        return self.name

    @property
    def event_driven(self) -> bool:
        return self.source in EVENT_SOURCES

    @property
    def derived(self) -> bool:
        return self.source in DERIVED_SOURCES

    @property
    def pose(self) -> bool:
        return self.source in POSE_SOURCES

    @property
    def quaternion(self) -> bool:
        return self.source == "body_quaternion"

    @property
    def dimension(self) -> int:
        """Values per reference sample."""
        return len(self.components)

    @property
    def residual_dimension(self) -> int:
        """Residual components per reference sample (3 for an orientation)."""
        return 3 if self.quaternion else len(self.components)

    @property
    def residual_components(self) -> tuple[str, ...]:
        return ("rx", "ry", "rz") if self.quaternion else self.components

    def describe(self) -> JsonObject:
        """The selector as a JSON mapping (for the observation spec hash and the result)."""
        out: JsonObject = {"id": self.id, "source": self.source}
        if self.name is not None:
            out["name"] = self.name
        if self.indices is not None:
            out["indices"] = list(self.indices)
        if self.sample_type is not None:
            out["sample_type"] = self.sample_type
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp
        out["sample_every_steps"] = self.sample_every_steps
        out["components"] = list(self.components)
        out["residual_components"] = list(self.residual_components)
        return out


# --------------------------------------------------------------------------- parsing

def parse_observation(raw: object, where: s.Where, plan: SimulationPlan,
                      decoders: CalibrationDeviceOutputDecoderRegistry) -> ObservationSpec:
    """Validate one ``observations[i]`` entry against the nominal plan's compiled model."""
    body = s.mapping(raw, where)
    s.keys(body, where, required=("id", "source"),
           optional=("name", "indices", "sample_type", "sample_every_steps", "timestamp"))
    observation_id = s.string(body["id"], where.key("id"))
    source = s.string(body["source"], where.key("source"))
    if source not in SOURCES:
        raise where.key("source").fail(f"unknown observation source {source!r}; expected one "
                                       f"of {', '.join(SOURCES)}")
    if source in NAMED_SOURCES:
        if "name" not in body:
            raise where.key("name").fail(f"missing required key: a {source} selector names "
                                         f"its {_what(source)}")
        name: str | None = s.string(body["name"], where.key("name"))
    else:
        if "name" in body:
            raise where.key("name").fail(f"a {source} selector takes 'indices', not a name "
                                         f"(use joint_position / sensor / ... to select by name)")
        if "indices" not in body:
            raise where.key("indices").fail(f"missing required key: a {source} selector needs "
                                            f"the indices of the elements it compares")
        name = None
    if "sample_type" in body and source != "device_output":
        raise where.key("sample_type").fail(f"only device_output selectors take a sample_type, "
                                            f"not {source}")
    if "timestamp" in body and source != "device_output":
        raise where.key("timestamp").fail(f"only device_output selectors take a timestamp, "
                                          f"not {source}")
    if "indices" in body and source in ("joint_position", "joint_velocity", "sensor",
                                        "body_position", "body_quaternion"):
        raise where.key("indices").fail(f"a {source} selector compares the whole "
                                        f"{_what(source)} value; indices apply to qpos, qvel, "
                                        f"sensordata, actuator_application and device_output")
    every = 1
    if "sample_every_steps" in body:
        every = s.integer(body["sample_every_steps"], where.key("sample_every_steps"), minimum=1)
        if source in EVENT_SOURCES and every != 1:
            raise where.key("sample_every_steps").fail(
                f"{source} is event-driven (one sample per emitted record); sample_every_steps "
                f"must be 1 (physics-step subsampling applies to snapshot selectors only), "
                f"got {every}")

    model = plan.model
    sample_type = None
    timestamp = None
    indices_raw = body.get("indices")
    listed = f"every name: the model file {str(plan.manifest.model)!r} and its includes"
    if source in ("joint_position", "joint_velocity"):
        jid = _lookup(model, _OBJ.mjOBJ_JOINT, name, where.key("name"), "joint", listed)
        kind = _JOINT_TYPES[int(model.jnt_type[jid])]
        components = (_JOINT_POSITION if source == "joint_position" else _JOINT_VELOCITY)[kind]
        indices = None
    elif source == "sensor":
        sid = _lookup(model, _OBJ.mjOBJ_SENSOR, name, where.key("name"), "sensor", listed)
        dim = int(model.sensor_dim[sid])
        assert name is not None  # a NAMED_SOURCES selector
        components = (name,) if dim == 1 else tuple(f"{name}[{i}]" for i in range(dim))
        indices = None
    elif source in ("body_position", "body_quaternion"):
        _lookup(model, _OBJ.mjOBJ_BODY, name, where.key("name"), "body", listed)
        components = ("x", "y", "z") if source == "body_position" else ("qw", "qx", "qy", "qz")
        indices = None
    elif source in INDEXED_SOURCES:
        size = {"qpos": model.nq, "qvel": model.nv, "sensordata": model.nsensordata}[source]
        indices = _indices(indices_raw, where.key("indices"), size,
                           tuple(f"{source}[{i}]" for i in range(size)), source,
                           f"{source}[0] to {source}[{size - 1}]")
        components = tuple(f"{source}[{i}]" for i in indices)
    elif source == "actuator_application":
        endpoints = plan.endpoints
        if name not in endpoints:
            known = ", ".join(endpoints) or "none in the plan"
            raise where.key("name").fail(f"no actuator endpoint {name!r}; endpoints: {known}")
        if indices_raw is None:
            indices = (APPLICATION_COMPONENTS.index("applied"),)
        else:
            indices = _indices(indices_raw, where.key("indices"), len(APPLICATION_COMPONENTS),
                               APPLICATION_COMPONENTS, source, "")
        components = tuple(APPLICATION_COMPONENTS[i] for i in indices)
    else:  # device_output
        devices = {d.id: d for d in plan.devices}
        device = devices.get(name) if name is not None else None
        if device is None:
            known = ", ".join(devices) or "none in the plan"
            raise where.key("name").fail(f"no device {name!r} in the plan; devices: {known}")
        sample_type = device.sample_type
        if "sample_type" in body:
            given = s.string(body["sample_type"], where.key("sample_type"))
            if given != device.sample_type:
                raise where.key("sample_type").fail(
                    f"device {name!r} emits {device.sample_type!r}, not {given!r}")
        decoder = decoders.get(sample_type)
        if decoder is None:
            known = ", ".join(decoders) or "none"
            raise where.key("sample_type").fail(
                f"no calibration decoder for sample type {sample_type!r} of device {name!r}; "
                f"registered: {known} (register one on a CalibrationDeviceOutputDecoderRegistry)")
        timestamp = "delivery"
        if "timestamp" in body:
            timestamp = s.string(body["timestamp"], where.key("timestamp"))
            if timestamp not in TIMESTAMPS:
                raise where.key("timestamp").fail(f"expected one of {', '.join(TIMESTAMPS)}, "
                                                  f"got {timestamp!r}")
        if indices_raw is None:
            indices = None
            components = decoder.components
        else:
            indices = _indices(indices_raw, where.key("indices"), len(decoder.components),
                               decoder.components, f"{sample_type}",
                               f"every name: the decoder registered for {sample_type!r}")
            components = tuple(decoder.components[i] for i in indices)
    return ObservationSpec(observation_id, source, name, indices, sample_type, every, timestamp,
                           tuple(components))


def _what(source: str) -> str:
    return {"joint_position": "joint", "joint_velocity": "joint", "sensor": "sensor",
            "body_position": "body", "body_quaternion": "body",
            "actuator_application": "actuator endpoint", "device_output": "device"}[source]


_PLURAL = {"body": "bodies"}


def _offered(names: Sequence[str], label: str, what: str, listed: str, near: str | None) -> str:
    """The names an error offers: ``label: a, b, c`` whole, or when that is too long for a
    one-line error (the CLI cuts one at 1000 characters), how many ``what`` there are, where
    every one is listed and the few closest to ``near``: never a list cut off mid-way."""
    text = ", ".join(names)
    if len(text) <= LISTING_LIMIT:
        return f"{label}: {text}"
    close = difflib.get_close_matches(near, names, n=5, cutoff=0.5) if near else []
    return (f"{len(names)} {what} ({listed})"
            + (f"; the closest: {', '.join(close)}" if close else ""))


def _lookup(model: mujoco.MjModel, objtype: mujoco.mjtObj, name: str | None, where: s.Where,
            kind: str, listed: str) -> int:
    """``name``'s id; an unknown name is an error offering the model's names (``listed``
    says where every one is, for a list too long to give whole)."""
    index = mujoco.mj_name2id(model, objtype, name) if name else -1
    if index < 0:
        from fibril_sim_core.components.base import names_of

        known = [n for n in names_of(model, objtype) if not n.startswith("__fibril__")]
        what = f"{_PLURAL.get(kind, kind + 's')} in the model"
        raise where.fail(f"no MuJoCo {kind} named {name!r} in the compiled model"
                         + (f"; {_offered(known, 'known', what, listed, name)}" if known
                            else ""))
    return index


def _indices(raw: object, where: s.Where, size: int, names: tuple[str, ...],
             what: str, listed: str) -> tuple[int, ...]:
    """The selected indices (ints, or component names); ``listed`` says where every
    component name is, for a list too long to give whole in an error."""
    items = s.sequence(raw, where)
    if not items:
        raise where.fail("expected at least one index")
    out: list[int] = []
    for i, item in enumerate(items):
        at = where.key(i)
        if isinstance(item, str):
            if item not in names:
                offered = _offered(names, "components", f"components of {what}", listed, item)
                raise at.fail(f"unknown component {item!r} of {what}; {offered}")
            index = names.index(item)
        else:
            index = s.integer(item, at, minimum=0)
            if index >= size:
                raise at.fail(f"index {index} is out of range: {what} has {size} element(s) "
                              f"(valid 0..{size - 1})")
        if index in out:
            raise at.fail(f"index {index} ({names[index]}) is selected twice")
        out.append(index)
    return tuple(out)


# --------------------------------------------------------------------------- reading

@dataclass(frozen=True)
class SnapshotReader:
    """Where a snapshot selector's values live in MjData for one compiled model."""

    array: str  # qpos, qvel, sensordata, xpos, xquat
    index: slice | npt.NDArray[np.intp] | tuple[int, slice]  # into the MjData array

    def read(self, data: mujoco.MjData) -> np.ndarray:
        result: np.ndarray = getattr(data, self.array)[self.index]
        return result


def snapshot_reader(observation: ObservationSpec, model: mujoco.MjModel) -> SnapshotReader:
    """Resolve a snapshot selector by name on a candidate's compiled model."""
    source, name = observation.source, observation.name
    if source in ("joint_position", "joint_velocity"):
        jid = _bound(model, _OBJ.mjOBJ_JOINT, name, observation)
        kind = _JOINT_TYPES[int(model.jnt_type[jid])]
        if source == "joint_position":
            start = int(model.jnt_qposadr[jid])
            return SnapshotReader("qpos", slice(start, start + len(_JOINT_POSITION[kind])))
        start = int(model.jnt_dofadr[jid])
        return SnapshotReader("qvel", slice(start, start + len(_JOINT_VELOCITY[kind])))
    if source == "sensor":
        sid = _bound(model, _OBJ.mjOBJ_SENSOR, name, observation)
        start = int(model.sensor_adr[sid])
        return SnapshotReader("sensordata", slice(start, start + int(model.sensor_dim[sid])))
    if source in ("body_position", "body_quaternion"):
        bid = _bound(model, _OBJ.mjOBJ_BODY, name, observation)
        return SnapshotReader("xpos" if source == "body_position" else "xquat",
                              (bid, slice(None)))
    if source in INDEXED_SOURCES:
        return SnapshotReader(source, np.asarray(observation.indices, dtype=np.intp))
    raise AssertionError(f"{source} is not a snapshot source")  # pragma: no cover


def _bound(model: mujoco.MjModel, objtype: mujoco.mjtObj, name: str | None,
           observation: ObservationSpec) -> int:
    index = mujoco.mj_name2id(model, objtype, name) if name else -1
    if index < 0:
        raise EvaluationError(f"observation {observation.id!r}: the candidate model has no "
                              f"{observation.source.split('_')[0]} named {name!r}")
    return index

