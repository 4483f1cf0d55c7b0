"""Writing MuJoCo overlay values straight into a compiled model (the compile-once path).

A calibration builds one plan per candidate, and each full compile processes every mesh again
(about 40 ms for a Menagerie arm against 0.5 ms for a mesh-free model). For the target kinds
below, what the compiler does with a value is known exactly: it copies it into one or two
fields, and ``mj_setConst`` derives the rest (``body_subtreemass``, ``dof_M0``,
``*_invweight0``, ``actuator_acc0``), except two statistics the compiler computes itself
(``stat.meanmass`` = the mean mass of the bodies after the world, ``stat.meaninertia`` = the
mean of ``dof_M0``), recomputed here in the compiler's order unless the model sets them. So a
copy of a model compiled with the same targets, with the new values written and constants set
again, is bit-identical to a full compile. The unit tests prove it for every kind in
``WRITABLE_KINDS`` (and that every other kind of ``KINDS`` takes the full compile), and the
builder checks it once more on the actual model before it uses this path.

Kinds that change the model's structure or that the compiler interprets take the full
compile: native DC motor parameters (activation states), ``actuator_delay`` (history
buffers), ranges (``limited`` from ``autolimits``; hinge degrees), ``actuator_forcerange``
(``forcelimited`` from ``autolimits``), plugin attributes. Every kind takes it in a model
with muscles (the compiler simulates their length ranges); geom kinds when the model has
explicit contact pairs (a pair copies its geoms' parameters at compile time); kinds that change
the reflected inertia or a servo's kp when a position servo gives a damping ratio (the compiler
derives kv from both); body kinds when a compiler setting rewrites masses or inertias; and a
value the compiler would refuse
(a mass or inertia too small, inertias that violate the triangle inequality) always does, so
the compiler's own error is reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from .mujoco_targets import KINDS

if TYPE_CHECKING:
    from .artifact import MujocoTarget, OverlayParameter

WRITABLE_KINDS = frozenset({
    "body_mass", "body_inertia", "joint_damping", "joint_frictionloss", "joint_armature",
    "joint_stiffness", "geom_friction", "geom_solref", "geom_solimp", "actuator_gear",
    "actuator_position_kp", "actuator_position_kv", "actuator_adhesion_gain",
    "equality_weld_torquescale",
})

_OBJ = {"body": mujoco.mjtObj.mjOBJ_BODY, "joint": mujoco.mjtObj.mjOBJ_JOINT,
        "geom": mujoco.mjtObj.mjOBJ_GEOM, "actuator": mujoco.mjtObj.mjOBJ_ACTUATOR,
        "equality": mujoco.mjtObj.mjOBJ_EQUALITY}
_DOFS = {int(mujoco.mjtJoint.mjJNT_FREE): 6, int(mujoco.mjtJoint.mjJNT_BALL): 3,
         int(mujoco.mjtJoint.mjJNT_SLIDE): 1, int(mujoco.mjtJoint.mjJNT_HINGE): 1}
_DOF_FIELD = {"joint_damping": "dof_damping", "joint_frictionloss": "dof_frictionloss",
              "joint_armature": "dof_armature"}
# Kinds that change the reflected inertia or a servo's kp (what a damping ratio depends on).
_INERTIA_KINDS = frozenset({"body_mass", "body_inertia", "joint_armature", "actuator_gear",
                            "actuator_position_kp"})
_MIN_VALUE = 1e-12  # masses and inertias at or below this take the compiler's checks


def writable(spec: mujoco.MjSpec,
             bindings: Sequence[tuple[OverlayParameter, MujocoTarget]]) -> bool:
    """Whether every binding can be written into a compiled model of ``spec``."""
    if not bindings:
        return False
    kinds = {target.kind for _, target in bindings}
    if not kinds <= WRITABLE_KINDS:
        return False
    if any(kind.startswith("geom_") for kind in kinds) and len(spec.pairs) > 0:
        return False
    actuators = list(spec.actuators)
    if any(a.gaintype == mujoco.mjtGain.mjGAIN_MUSCLE or a.dyntype == mujoco.mjtDyn.mjDYN_MUSCLE
           for a in actuators):
        return False  # the compiler simulates muscle length ranges
    if kinds & _INERTIA_KINDS and any(_dampratio(a) for a in actuators):
        return False  # the compiler turns a position servo's damping ratio into kv
    if kinds & {"body_mass", "body_inertia"}:
        compiler = spec.compiler
        if (compiler.boundmass > 0 or compiler.boundinertia > 0 or compiler.balanceinertia
                or compiler.settotalmass > 0
                or compiler.inertiafromgeom == mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_TRUE):
            return False
    return True


def _dampratio(actuator: mujoco.MjsActuator) -> bool:
    """A position servo whose kv the compiler derives from a damping ratio (stored as a
    positive third bias parameter) and the reflected inertia."""
    return (actuator.biastype == mujoco.mjtBias.mjBIAS_AFFINE
            and float(actuator.biasprm[2]) > 0.0)


def write(model: mujoco.MjModel, data: mujoco.MjData, spec: mujoco.MjSpec,
          bindings: Sequence[tuple[OverlayParameter, MujocoTarget]],
          reference: mujoco.MjModel) -> bool:
    """Write the bindings' values into ``model`` (a copy of a model compiled from ``spec``
    with the same targets; ``reference`` is that model, for the values no binding sets) and
    set its constants again with ``data``. False (``model`` untouched) when a value needs the
    compiler's own checks."""
    resolved = [(target, _index(model, target), parameter.value)
                for parameter, target in bindings]
    scalars = [(t, i, v) for t, i, v in resolved if not isinstance(v, tuple)]
    if len(scalars) < len(resolved) or not _values_allowed(scalars, reference):
        return False  # (a range needs the compiler)
    for target, index, value in scalars:
        _write(model, target, index, float(value))
    mujoco.mj_setConst(model, data)
    _set_statistics(model, spec)
    return True


def _index(model: mujoco.MjModel, target: MujocoTarget) -> int:
    objid: int = mujoco.mj_name2id(model, _OBJ[KINDS[target.kind].objtype], target.object)
    if objid < 0:  # pragma: no cover - the targets were resolved on a full compile
        raise KeyError(target.key)
    return objid


def _values_allowed(resolved: Sequence[tuple[MujocoTarget, int, float]],
                    reference: mujoco.MjModel) -> bool:
    inertias: dict[int, np.ndarray] = {}
    for target, index, value in resolved:
        if not math.isfinite(float(value)):
            return False
        if target.kind == "body_mass" and not float(value) > _MIN_VALUE:
            return False
        if target.kind == "body_inertia":
            diagonal = inertias.setdefault(index, reference.body_inertia[index].copy())
            diagonal[target.component_index] = float(value)
    for a, b, c in inertias.values():
        if min(a, b, c) <= _MIN_VALUE:
            return False
        margin = 1e-9 * (a + b + c)  # near the limit the compiler decides
        if a + b < c + margin or a + c < b + margin or b + c < a + margin:
            return False
    return True


def _write(model: mujoco.MjModel, target: MujocoTarget, index: int, value: float) -> None:
    kind, i = target.kind, target.component_index
    if kind == "body_mass":
        model.body_mass[index] = value
    elif kind == "body_inertia":
        model.body_inertia[index, i] = value
    elif kind in _DOF_FIELD:
        start = int(model.jnt_dofadr[index])
        getattr(model, _DOF_FIELD[kind])[start:start + _DOFS[int(model.jnt_type[index])]] = value
    elif kind == "joint_stiffness":
        model.jnt_stiffness[index] = value
    elif kind in ("geom_friction", "geom_solref", "geom_solimp"):
        getattr(model, kind)[index, i] = value
    elif kind == "actuator_gear":
        model.actuator_gear[index, i] = value
    elif kind == "actuator_position_kp":
        model.actuator_gainprm[index, 0] = value
        model.actuator_biasprm[index, 1] = -value
    elif kind == "actuator_position_kv":
        model.actuator_biasprm[index, 2] = -value
    elif kind == "actuator_adhesion_gain":
        model.actuator_gainprm[index, 0] = value
    elif kind == "equality_weld_torquescale":
        model.eq_data[index, 10] = value
    else:  # pragma: no cover - WRITABLE_KINDS and this switch are kept in step by the tests
        raise AssertionError(kind)


def _set_statistics(model: mujoco.MjModel, spec: mujoco.MjSpec) -> None:
    """The statistics the compiler derives from masses and ``dof_M0`` (summed in its order),
    unless the model sets them itself."""
    if math.isnan(spec.stat.meanmass) and model.nbody > 1:
        total = 0.0
        for mass in model.body_mass[1:].tolist():
            total += mass
        model.stat.meanmass = total / (model.nbody - 1)
    if math.isnan(spec.stat.meaninertia) and model.nv > 0:
        total = 0.0
        for inertia in model.dof_M0.tolist():
            total += inertia
        model.stat.meaninertia = total / model.nv
