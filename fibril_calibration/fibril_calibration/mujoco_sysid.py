"""A Fibril request from mujoco.sysid objects, so a sysid user compares both tools on their own
data: ``from_sysid(params, model_sequences)``.

* Each free (not ``frozen``) scalar ``Parameter`` becomes a Fibril parameter with the same
  bounds, initial and nominal value, in plain coordinates (``linear``, as sysid optimizes).
  Its target is found by running its ``modifier`` on a copy of the spec with a probe value and
  seeing which compiled-model field moved (a body mass, a joint's damping, armature,
  frictionloss or stiffness); ``targets={id: "mujoco:<kind>:<object>"}`` names any other.
* Each sequence becomes an episode: the control ``TimeSeries`` as motor commands (one
  ``fibril_sim/motor`` endpoint per actuator, ``torque`` mode: the value goes to ``ctrl``),
  the initial state as joint / actuator initial states, and each MuJoCo sensor of the sensor
  ``TimeSeries`` as a reference signal. mujoco.sysid stamps the sensors computed in step i
  with the time after the step; Fibril stamps them with the tick the state was at, one timestep
  earlier. Residual scales are each sensor column's RMS, as sysid normalizes its residuals.
* Without a ``manifest`` the model (``spec.to_xml()``) and a manifest are written into
  ``folder`` (default: a new temporary folder).
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import numpy.typing as npt

from ._json import JsonObject
from .errors import CalibrationRequestError
from .request.typed import CalibrationRequest, Commands, Episode, Observation, Parameter, Signal

if TYPE_CHECKING:  # lazy at run time: mujoco.sysid is heavy (start-up time)
    from mujoco.sysid import ModelSequences, ParameterDict, TimeSeries
    from mujoco.sysid import Parameter as SysidParameter

__all__ = ["from_sysid"]

# Compiled-model field → (Fibril target kind, object type, index of the object from the entry).
# MjModel field → (overlay target kind, object type, the object owning element i of the field)
_FIELDS: dict[str, tuple[str, mujoco.mjtObj, Callable[[mujoco.MjModel, int], int]]] = {
    "body_mass": ("body_mass", mujoco.mjtObj.mjOBJ_BODY, lambda m, i: i),
    "dof_damping": ("joint_damping", mujoco.mjtObj.mjOBJ_JOINT, lambda m, i: m.dof_jntid[i]),
    "dof_armature": ("joint_armature", mujoco.mjtObj.mjOBJ_JOINT, lambda m, i: m.dof_jntid[i]),
    "dof_frictionloss": ("joint_frictionloss", mujoco.mjtObj.mjOBJ_JOINT,
                         lambda m, i: m.dof_jntid[i]),
    "jnt_stiffness": ("joint_stiffness", mujoco.mjtObj.mjOBJ_JOINT, lambda m, i: i),
}


def from_sysid(params: ParameterDict,
               model_sequences: ModelSequences | list[ModelSequences]
               | tuple[ModelSequences, ...], manifest: str | Path | None = None, *,
               folder: str | Path | None = None, targets: Mapping[str, str] | None = None,
               endpoints: Mapping[str, str] | None = None) -> CalibrationRequest:
    """A typed Fibril request from a mujoco.sysid ``ParameterDict`` and ``ModelSequences``
    (one, or a list of one: a Fibril request has one model). ``endpoints`` maps an actuator
    to its endpoint in a given ``manifest`` (default: the actuator's name)."""
    sequences: list[ModelSequences] = (
        list(model_sequences) if isinstance(model_sequences, (list, tuple))
        else [model_sequences])
    if len(sequences) != 1:
        raise CalibrationRequestError(f"from_sysid: {len(sequences)} ModelSequences; a Fibril "
                                      f"request calibrates one model (give one)")
    ms = sequences[0]
    model = ms.spec.compile()
    work = Path(folder if folder is not None else tempfile.mkdtemp(prefix="fibril-sysid-"))
    work.mkdir(parents=True, exist_ok=True)
    actuators = [_name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i, "actuator")
                 for i in range(model.nu)]
    if manifest is None:
        (work / "model.xml").write_text(ms.spec.to_xml())
        components = "".join(
            f"  - {{id: {a}, type: fibril_sim/motor, endpoint: {a}, bind: {{actuator: {a}}}}}\n"
            for a in actuators)
        (work / "manifest.yaml").write_text("schema_version: {major: 3, minor: 1}\n"
                                            "model: model.xml\ncomponents:\n" + components)
        manifest = "manifest.yaml"
    parameters = [_parameter(p, ms.spec, model, (targets or {}).get(p.name))
                  for p in params.values() if not p.frozen]
    sensors = _sensors(ms.sensordata[0])
    observations = [Observation(id=name, source="sensor", name=name) for name in sensors]
    episodes = [_episode(name, state, control, sensordata, model, actuators, endpoints or {})
                for name, state, control, sensordata in zip(
                    ms.sequence_name, ms.initial_state, ms.control, ms.sensordata, strict=True)]
    return CalibrationRequest(manifest=str(manifest), parameters=parameters,
                              observations=observations, training=episodes, base=work)


def _name(model: mujoco.MjModel, kind: mujoco.mjtObj, index: int, what: str) -> str:
    name = mujoco.mj_id2name(model, kind, index)
    if not name:
        raise CalibrationRequestError(f"from_sysid: {what} {index} has no name; Fibril names "
                                      f"every object it reads or writes")
    result: str = name
    return result


def _parameter(param: SysidParameter, spec: mujoco.MjSpec, model: mujoco.MjModel,
               target: str | None) -> Parameter:
    value = np.atleast_1d(param.value)
    if value.size != 1:
        raise CalibrationRequestError(f"from_sysid: parameter {param.name!r} has {value.size} "
                                      f"values; only scalar parameters map to Fibril targets")
    lower, upper = (float(np.atleast_1d(b)[0]) for b in (param.min_value, param.max_value))
    return Parameter(id=param.name, lower=lower, upper=upper, initial=float(value[0]),
                     nominal=float(np.atleast_1d(param.nominal)[0]), parameterization="linear",
                     target=target or _probe(param, spec, model, lower, upper))


def _probe(param: SysidParameter, spec: mujoco.MjSpec, model: mujoco.MjModel, lower: float,
           upper: float) -> str:
    """The target a modifier writes: apply it with a probe value to a copy of the spec and
    find the one compiled-model entry that changed."""
    if param.modifier is None:
        raise CalibrationRequestError(f"from_sysid: parameter {param.name!r} has no modifier; "
                                      f"name its target in targets=")
    probe = copy.deepcopy(param)
    probe.value = np.atleast_1d(np.asarray(lower + 0.37 * (upper - lower), dtype=np.float64))
    if float(probe.value[0]) == float(np.atleast_1d(param.value)[0]):
        probe.value = probe.value * 0.5 + 0.25 * upper
    changed_spec = spec.copy()
    probe.modifier(changed_spec, probe)
    changed = changed_spec.compile()
    moved = [(field, int(i)) for field in _FIELDS
             for i in np.flatnonzero(np.ravel(getattr(changed, field))
                                     != np.ravel(getattr(model, field)))]
    if len(moved) != 1:
        what = (f"it moves {', '.join(f'{f}[{i}]' for f, i in moved)}" if moved else
                "it moves no body mass nor joint damping, armature, frictionloss, stiffness")
        raise CalibrationRequestError(
            f"from_sysid: cannot tell parameter {param.name!r}'s target from its modifier "
            f"({what}); name it: targets={{{param.name!r}: 'mujoco:<kind>:<object>'}}")
    field, index = moved[0]
    kind, objtype, owner = _FIELDS[field]
    return f"mujoco:{kind}:{_name(model, objtype, int(owner(model, index)), 'object')}"


def _sensors(series: TimeSeries) -> list[str]:
    """The MuJoCo sensors a sensor TimeSeries holds, in column order."""
    from mujoco.sysid import SignalType  # lazy: start-up time (mujoco.sysid is heavy)

    mapping = series.signal_mapping or {}
    names = []
    for name, (kind, _) in mapping.items():
        if kind != SignalType.MjSensor:
            raise CalibrationRequestError(f"from_sysid: signal {name!r} is a {kind.name}; only "
                                          f"MuJoCo sensors (MjSensor) map to Fibril signals")
        names.append(name)
    if not names:
        raise CalibrationRequestError("from_sysid: the sensor TimeSeries names no sensors "
                                      "(build it with TimeSeries.from_names)")
    return names


def _episode(name: str, state: npt.NDArray[np.float64], control: TimeSeries,
             sensordata: TimeSeries,
             model: mujoco.MjModel, actuators: Sequence[str],
             endpoints: Mapping[str, str]) -> Episode:
    dt = model.opt.timestep
    start = float(control.times[0])
    columns = _columns(control, actuators)
    # sysid applies control[i] in step i and never the last one (its state is not measured)
    commands = tuple(Commands(endpoints.get(a, a), tuple(control.times[:-1] - start),
                              tuple(control.data[:-1, c]), "torque")
                     for a, c in zip(actuators, columns))
    signals = {}
    times = np.asarray(sensordata.times, dtype=np.float64) - start - dt
    keep = times > -dt / 2  # the first row is the initial condition: no step made it
    for sensor, (_, indices) in sensordata.signal_mapping.items():
        values = np.asarray(sensordata.data)[:, np.atleast_1d(indices)][keep]
        rms = np.sqrt(np.mean(values ** 2, axis=0))
        scales = [float(x) if x > 0 else 1.0 for x in rms]
        signal = Signal.from_arrays(times[keep], values)
        signals[sensor] = Signal(alignment="exact", residual_scales=scales,
                                 samples=signal.samples)
    return Episode(id=name, signals=signals, initial_state=_initial_state(model, state),
                   commands=commands)


def _columns(control: TimeSeries, actuators: Sequence[str]) -> list[int]:
    mapping = control.signal_mapping
    if not mapping:
        if control.data.shape[1] != len(actuators):
            raise CalibrationRequestError(f"from_sysid: the control has {control.data.shape[1]} "
                                          f"columns for {len(actuators)} actuators")
        return list(range(len(actuators)))
    by_name = {name: int(np.atleast_1d(idx)[0]) for name, (_, idx) in mapping.items()}
    missing = [a for a in actuators if a not in by_name]
    if missing:
        raise CalibrationRequestError(f"from_sysid: no control for actuator(s) "
                                      f"{', '.join(missing)}")
    return [by_name[a] for a in actuators]


def _initial_state(model: mujoco.MjModel, state: npt.NDArray[np.float64]
                   ) -> tuple[JsonObject, ...]:
    """A full-physics state vector (``create_initial_state``) as Fibril initial states."""
    data = mujoco.MjData(model)
    mujoco.mj_setState(model, data, np.asarray(state, dtype=np.float64),
                       mujoco.mjtState.mjSTATE_FULLPHYSICS)
    out: list[JsonObject] = []
    for j in range(model.njnt):
        kind = model.jnt_type[j]
        q, v = model.jnt_qposadr[j], model.jnt_dofadr[j]
        if kind == mujoco.mjtJoint.mjJNT_FREE:
            if np.any(data.qvel[v:v + 6]):
                raise CalibrationRequestError("from_sysid: a free joint starts moving; Fibril "
                                              "initial states give bodies a pose only")
            body = _name(model, mujoco.mjtObj.mjOBJ_BODY, int(model.jnt_bodyid[j]), "body")
            out.append({"type": "body", "body": body,
                        "pos": [float(x) for x in data.qpos[q:q + 3]],
                        "quat": [float(x) for x in data.qpos[q + 3:q + 7]]})
            continue
        nq, nv = {mujoco.mjtJoint.mjJNT_BALL: (4, 3)}.get(kind, (1, 1))
        out.append({"type": "joint", "joint": _name(model, mujoco.mjtObj.mjOBJ_JOINT, j, "joint"),
                    "qpos": [float(x) for x in data.qpos[q:q + nq]],
                    "qvel": [float(x) for x in data.qvel[v:v + nv]]})
    for a in range(model.nu):
        if model.actuator_actnum[a]:
            adr = model.actuator_actadr[a]
            out.append({"type": "actuator",
                        "actuator": _name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, a, "actuator"),
                        "act": [float(x) for x in data.act[adr:adr + model.actuator_actnum[a]]]})
    return tuple(out)
