"""The MuJoCo target kinds of parameter overlays, applied to an MjSpec before compilation.

Each kind names the object type it applies to, how many components it has, how a value is
written into the MjSpec and how the compiled value is read back. The builder reads every
applied value back from the compiled model, so an overlay that MuJoCo would silently override
(a compiler setting, a default class) is an error instead of a wrong experiment.

Native DC motors keep their physical meaning: ``dcmotor_inductance`` is L in henry (MuJoCo
stores the time constant L/R, so a resistance overlay keeps L), ``dcmotor_effective_motor_constant``
is the compiled K = sqrt(Kt*Ke), and the actuator's activation dimension is rebuilt when
inductance, integral gain or slew limit switch a state on or off.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, TypeVar

import mujoco
import numpy as np
import numpy.typing as npt



class MujocoTargetLike(Protocol):
    """What the appliers read of an ``artifact.MujocoTarget``: a Protocol, since ``artifact``
    imports this module for its target kinds."""

    @property
    def kind(self) -> str: ...
    @property
    def object(self) -> str: ...
    @property
    def component_index(self) -> int: ...
    @property
    def attribute(self) -> str | None: ...


#: A parameter's value: a number, or a [min, max] pair for range targets (``artifact.Value``).
TargetValue: TypeAlias = "float | tuple[float, float]"
#: A MuJoCo spec element a target names (``KINDS[kind].objtype``).
SpecObject: TypeAlias = ("mujoco.MjsBody | mujoco.MjsJoint | mujoco.MjsGeom | mujoco.MjsActuator"
                         " | mujoco.MjsTendon | mujoco.MjsEquality | mujoco.MjsPlugin")
#: A body's compiled inertial: mass, diagonal inertia, position and orientation of its frame.
Inertial: TypeAlias = tuple[float, npt.NDArray[np.float64], npt.NDArray[np.float64],
                            npt.NDArray[np.float64]]
#: The inertials of some bodies of one parsed model: (the model's key, body names).
InertialKey: TypeAlias = tuple[Hashable, tuple[str, ...]]


class BoundParameter(Protocol):
    """What the appliers read of an ``artifact.OverlayParameter``: its value."""

    @property
    def value(self) -> TargetValue: ...


P = TypeVar("P", bound=BoundParameter)
T = TypeVar("T", bound=MujocoTargetLike)

_OBJ = {"body": mujoco.mjtObj.mjOBJ_BODY, "joint": mujoco.mjtObj.mjOBJ_JOINT,
        "geom": mujoco.mjtObj.mjOBJ_GEOM, "actuator": mujoco.mjtObj.mjOBJ_ACTUATOR,
        "tendon": mujoco.mjtObj.mjOBJ_TENDON, "equality": mujoco.mjtObj.mjOBJ_EQUALITY}

# Compiled dcmotor layout (MuJoCo 4): gainprm = [R, K, ., ., kp, ki, kd, Vmax],
# dynprm = [L/R, ..., slewmax (7), Imax (8)].
_DC_GAIN = {"dcmotor_resistance": 0, "dcmotor_effective_motor_constant": 1,
            "dcmotor_controller_kp": 4, "dcmotor_controller_ki": 5,
            "dcmotor_controller_kd": 6, "dcmotor_voltage_limit": 7}
_DC_DYN = {"dcmotor_controller_slewmax": 7, "dcmotor_controller_integral_limit": 8}


@dataclass(frozen=True)
class MujocoKind:
    """One target kind: object type, component count, value shape and schema minor."""

    name: str
    objtype: str
    width: int = 1
    range: bool = False
    minor: int = 0
    nonnegative: bool = False
    positive: bool = False


def _kinds() -> dict[str, MujocoKind]:
    kinds = [
        MujocoKind("body_mass", "body", nonnegative=True),
        MujocoKind("body_inertia", "body", width=3, nonnegative=True),
        MujocoKind("joint_damping", "joint", nonnegative=True),
        MujocoKind("joint_frictionloss", "joint", nonnegative=True),
        MujocoKind("joint_armature", "joint", nonnegative=True),
        MujocoKind("joint_stiffness", "joint", nonnegative=True),
        MujocoKind("geom_friction", "geom", width=3, nonnegative=True),
        MujocoKind("geom_solref", "geom", width=2),
        MujocoKind("geom_solimp", "geom", width=5),
        MujocoKind("actuator_gear", "actuator", width=6),
        MujocoKind("actuator_forcerange", "actuator", width=2),
        MujocoKind("actuator_position_kp", "actuator", nonnegative=True),
        MujocoKind("actuator_position_kv", "actuator", nonnegative=True),
        MujocoKind("actuator_adhesion_gain", "actuator", nonnegative=True),
        MujocoKind("actuator_delay", "actuator", nonnegative=True),
        # MJCF itself refuses R <= 0 and K <= 0 (in its parser, not the compiler).
        MujocoKind("dcmotor_resistance", "actuator", positive=True),
        MujocoKind("dcmotor_effective_motor_constant", "actuator", positive=True),
        *(MujocoKind(name, "actuator", nonnegative=True)
          for name in (*list(_DC_GAIN)[2:], "dcmotor_inductance", *_DC_DYN)),
        MujocoKind("tendon_range", "tendon", range=True, minor=1),
        MujocoKind("joint_range", "joint", range=True, minor=1),
        MujocoKind("equality_weld_torquescale", "equality", minor=1, nonnegative=True),
        MujocoKind("plugin_attribute", "plugin", minor=1),
    ]
    return {k.name: k for k in kinds}


KINDS: dict[str, MujocoKind] = _kinds()


class TargetProblem(Exception):
    """Raised by the appliers; the builder words it with parameter, target and value."""


def apply_mujoco_overlays(spec: mujoco.MjSpec,
                          bindings: Sequence[tuple[P, T]],
                          fail: Callable[[P, T, str], Exception],
                          *, inertials: dict[InertialKey, list[Inertial]] | None = None,
                          model_key: Hashable | None = None) -> None:
    """Write every binding into ``spec`` (parsed, not yet compiled). ``inertials`` caches
    the materialized inertials of bodies per ``model_key`` (the parsed files' identity)."""
    objects = [(p, t, _find(spec, t, fail, p)) for p, t in bindings]
    bodies = list({id(obj): obj for p, t, obj in objects
                   if t.kind in ("body_mass", "body_inertia")}.values())
    if bodies:
        _materialize_inertia(spec, bodies, inertials if model_key is not None else None,
                             model_key)
    dcmotors: dict[str, list[tuple[P, T]]] = {}
    for parameter, target, obj in objects:
        if target.kind.startswith("dcmotor_"):
            if obj.gaintype != mujoco.mjtGain.mjGAIN_DCMOTOR:
                raise fail(parameter, target, f"actuator {target.object!r} is not a native DC "
                                              f"motor (<dcmotor>)")
            dcmotors.setdefault(target.object, []).append((parameter, target))
            continue
        try:
            _assign(spec, obj, target, parameter.value)
        except TargetProblem as exc:
            raise fail(parameter, target, str(exc)) from None
    for name, items in dcmotors.items():
        _apply_dcmotor(spec.actuator(name), {t.kind: _number(p.value) for p, t in items})


def compiled_value(model: mujoco.MjModel, spec: mujoco.MjSpec, target: MujocoTargetLike
                   ) -> float | tuple[float, ...] | None:
    """The value the compiled model holds for ``target`` (None when not observable)."""
    if target.kind == "plugin_attribute":
        return None
    objid = mujoco.mj_name2id(model, _OBJ[KINDS[target.kind].objtype], target.object)
    i, kind = target.component_index, target.kind
    if kind == "body_mass":
        return float(model.body_mass[objid])
    if kind == "body_inertia":
        return float(model.body_inertia[objid][i])
    if kind in ("joint_damping", "joint_frictionloss", "joint_armature"):
        field = {"joint_damping": model.dof_damping, "joint_frictionloss": model.dof_frictionloss,
                 "joint_armature": model.dof_armature}[kind]
        return float(field[model.jnt_dofadr[objid]])
    if kind == "joint_stiffness":
        return float(np.ravel(model.jnt_stiffness[objid])[0])
    if kind == "joint_range":
        # MuJoCo converts a hinge range from degrees only when the joint is limited.
        scale = 180.0 / math.pi if (spec.compiler.degree and model.jnt_limited[objid] and
                                    model.jnt_type[objid] == mujoco.mjtJoint.mjJNT_HINGE) else 1.0
        return tuple(float(v) * scale for v in model.jnt_range[objid])
    if kind.startswith("geom_"):
        return float(getattr(model, kind)[objid][i])
    if kind in ("actuator_gear", "actuator_forcerange"):
        return float(getattr(model, kind)[objid][i])
    if kind in ("actuator_position_kp", "actuator_adhesion_gain"):
        return float(model.actuator_gainprm[objid][0])
    if kind == "actuator_position_kv":
        return float(-model.actuator_biasprm[objid][2])
    if kind == "actuator_delay":
        return float(model.actuator_delay[objid])
    if kind in _DC_GAIN:
        return float(model.actuator_gainprm[objid][_DC_GAIN[kind]])
    if kind in _DC_DYN:
        return float(model.actuator_dynprm[objid][_DC_DYN[kind]])
    if kind == "dcmotor_inductance":
        return float(model.actuator_dynprm[objid][0] * model.actuator_gainprm[objid][0])
    if kind == "tendon_range":
        return tuple(float(v) for v in model.tendon_range[objid])
    if kind == "equality_weld_torquescale":
        return float(model.eq_data[objid][10])
    raise AssertionError(kind)


# --------------------------------------------------------------------------- helpers


def _find(spec: mujoco.MjSpec, target: T, fail: Callable[[P, T, str], Exception],
          parameter: P) -> SpecObject:
    objtype = KINDS[target.kind].objtype
    if objtype == "plugin":
        for plugin in spec.plugins:
            if plugin.name == target.object:
                return plugin
        known = ", ".join(p.name for p in spec.plugins if p.name) or "none in the model"
        raise fail(parameter, target, f"no plugin instance named {target.object!r}; "
                                      f"known: {known}")
    obj = getattr(spec, objtype)(target.object)
    if obj is None:
        others = [kind for kind in _OBJ if kind != objtype
                  and getattr(spec, kind)(target.object) is not None]
        if others:
            raise fail(parameter, target, f"{target.object!r} is a {others[0]}, not a {objtype}")
        raise fail(parameter, target, f"no {objtype} named {target.object!r} in the model")
    if target.kind == "joint_range" and obj.type not in (mujoco.mjtJoint.mjJNT_HINGE,
                                                         mujoco.mjtJoint.mjJNT_SLIDE):
        raise fail(parameter, target, f"joint {target.object!r} is not a hinge or slide joint")
    if target.kind == "equality_weld_torquescale" and obj.type != mujoco.mjtEq.mjEQ_WELD:
        raise fail(parameter, target, f"equality {target.object!r} is not a weld")
    if target.kind in ("actuator_position_kp", "actuator_position_kv") and not _is_position(obj):
        raise fail(parameter, target, f"actuator {target.object!r} is not a position servo "
                                      f"(fixed gain, affine bias with -kp)")
    if target.kind == "actuator_adhesion_gain" and obj.trntype != mujoco.mjtTrn.mjTRN_BODY:
        raise fail(parameter, target, f"actuator {target.object!r} is not an adhesion actuator")
    return obj


def _is_position(actuator: mujoco.MjsActuator) -> bool:
    return bool(actuator.gaintype == mujoco.mjtGain.mjGAIN_FIXED
                and actuator.biastype == mujoco.mjtBias.mjBIAS_AFFINE
                and actuator.biasprm[1] == -actuator.gainprm[0])



def _keep_limited(spec: mujoco.MjSpec, obj: mujoco.MjsJoint | mujoco.MjsTendon) -> None:
    """A range overlay never changes whether a joint or tendon is limited. With autolimits,
    limited="auto" means "limited iff a range is authored", so setting a range would silently
    turn limiting on: write the state the object compiles to as authored (a range other than
    [0, 0] under autolimits) explicitly."""
    if obj.limited == mujoco.mjtLimited.mjLIMITED_AUTO:
        authored = spec.compiler.autolimits and bool(np.any(np.asarray(obj.range) != 0))
        obj.limited = (mujoco.mjtLimited.mjLIMITED_TRUE if authored
                       else mujoco.mjtLimited.mjLIMITED_FALSE)


def _set_element(obj: SpecObject, name: str, index: int, value: float) -> None:
    array = np.array(getattr(obj, name), dtype=float)
    array[index] = value
    setattr(obj, name, array)


def _assign(spec: mujoco.MjSpec, obj: SpecObject, target: MujocoTargetLike,
            value: TargetValue) -> None:
    kind, i = target.kind, target.component_index
    if isinstance(value, tuple):  # [min, max]: what parse_value gives a range kind, only it
        if kind not in ("joint_range", "tendon_range"):  # pragma: no cover
            raise AssertionError(kind)
        _keep_limited(spec, obj)
        obj.range = list(value)
        return
    if kind == "body_mass":
        obj.mass = value
    elif kind == "body_inertia":
        _set_element(obj, "inertia", i, value)
    elif kind in ("joint_damping", "joint_stiffness"):
        _set_element(obj, kind.removeprefix("joint_"), 0, value)
    elif kind in ("joint_frictionloss", "joint_armature"):
        setattr(obj, kind.removeprefix("joint_"), value)
    elif kind in ("geom_friction", "geom_solref", "geom_solimp", "actuator_gear",
                  "actuator_forcerange"):
        _set_element(obj, kind.split("_", 1)[1], i, value)
    elif kind == "actuator_position_kp":
        _set_element(obj, "gainprm", 0, value)
        _set_element(obj, "biasprm", 1, -value)
    elif kind == "actuator_position_kv":
        _set_element(obj, "biasprm", 2, -value)
    elif kind == "actuator_adhesion_gain":
        _set_element(obj, "gainprm", 0, value)
    elif kind == "actuator_delay":
        obj.delay = value
    elif kind == "equality_weld_torquescale":
        _set_element(obj, "data", 10, value)
    elif kind == "plugin_attribute":
        config = dict(obj.config)
        if target.attribute not in config:
            known = ", ".join(sorted(config)) or "none"
            raise TargetProblem(f"plugin instance {target.object!r} has no attribute "
                                f"{target.attribute!r}; configured: {known}")
        config[target.attribute] = repr(float(value))
        obj.config = config
    else:  # pragma: no cover - KINDS and this switch are kept in step by the tests
        raise AssertionError(kind)


def _number(value: TargetValue) -> float:
    """A scalar target's value (parse_value gives ranges to range kinds only)."""
    if isinstance(value, tuple):  # pragma: no cover
        raise AssertionError(value)
    return float(value)


def _materialize_inertia(spec: mujoco.MjSpec, bodies: Sequence[mujoco.MjsBody],
                         cache: dict[InertialKey, list[Inertial]] | None,
                         model_key: Hashable | None) -> None:
    """Make geom-inferred inertia explicit so mass/inertia overlays are not recomputed.

    The inertials come from compiling the model as authored (before any overlay), so they
    depend only on the model files; ``cache`` keeps them per ``model_key``."""
    wanted = [body.name for body in bodies]
    key = (model_key, tuple(wanted))
    inertials = cache.get(key) if cache is not None else None
    if inertials is None:
        try:
            model = spec.copy().compile()
        except Exception:  # noqa: BLE001 - the real compile reports the error with context
            return
        inertials = []
        for name in wanted:
            objid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
            inertials.append((float(model.body_mass[objid]), model.body_inertia[objid].copy(),
                              model.body_ipos[objid].copy(), model.body_iquat[objid].copy()))
        if cache is not None:
            cache[key] = inertials
    for body, (mass, inertia, ipos, iquat) in zip(bodies, inertials):
        body.explicitinertial = True
        body.mass = mass
        body.inertia = inertia.copy()
        body.ipos = ipos.copy()
        body.iquat = iquat.copy()
        body.fullinertia = np.array([math.nan, 0, 0, 0, 0, 0], dtype=float)


def _apply_dcmotor(actuator: mujoco.MjsActuator, values: dict[str, float]) -> None:
    gain = np.array(actuator.gainprm, dtype=float)
    dyn = np.array(actuator.dynprm, dtype=float)
    before = _dc_states(gain, dyn)
    inductance = values.get("dcmotor_inductance", dyn[0] * gain[0])
    for kind, index in _DC_GAIN.items():
        if kind in values:
            gain[index] = values[kind]
    for kind, index in _DC_DYN.items():
        if kind in values:
            dyn[index] = values[kind]
    dyn[0] = inductance / gain[0] if gain[0] > 0 else 0.0
    after = _dc_states(gain, dyn)
    actuator.gainprm = gain
    actuator.dynprm = dyn
    if actuator.actdim >= 0:
        actuator.actdim = int(actuator.actdim - before + after)


def _dc_states(gain: np.ndarray, dyn: np.ndarray) -> int:
    """Activation states that overlays can switch: current, slew limiter, integrator."""
    return int(dyn[0] > 0) + int(dyn[7] > 0) + int(gain[5] > 0)
