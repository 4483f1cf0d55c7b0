"""An episode's ``initial_state``: keyframe, qpos/qvel/act values checked against the nominal
model, and the parts of it fitted as nuisance (``initial_state_fit``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import mujoco

from fibril_sim_core import schema as s

from ..model import initial_state_fit as fit
from ..model.initial_state_fit import InitialStateEntry

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan


def initial_state_fit(body: Mapping[str, object], where: s.Where,
                      initial_state: Sequence[InitialStateEntry],
                      plan: SimulationPlan) -> tuple[str, ...]:
    """The episode's ``initial_state_fit`` (``()`` when absent), checked against its
    initial_state."""
    if "initial_state_fit" not in body:
        return ()

    return fit.parse(body["initial_state_fit"], where.key("initial_state_fit"), initial_state,
                     plan.model)


def parse_initial_state(value: object, where: s.Where,
                   plan: SimulationPlan) -> tuple[InitialStateEntry, ...]:
    model = plan.model
    out: list[InitialStateEntry] = []
    for i, item in enumerate(s.sequence(value, where)):
        at = where.key(i)
        body = s.mapping(item, at)
        kind = body.get("type")
        if kind == "joint":
            s.keys(body, at, required=("type", "joint"), optional=("qpos", "qvel"))
            name = s.string(body["joint"], at.key("joint"))
            jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if jid < 0:
                raise at.key("joint").fail(f"no MuJoCo joint named {name!r} in the model")
            jtype = int(model.jnt_type[jid])
            label = {0: "free", 1: "ball", 2: "slide", 3: "hinge"}[jtype]
            nq, nv = {0: (7, 6), 1: (4, 3), 2: (1, 1), 3: (1, 1)}[jtype]
            if "qpos" not in body and "qvel" not in body:
                raise at.fail("a joint entry sets qpos, qvel or both")
            entry: InitialStateEntry = {"type": "joint", "joint": name}
            joint_parts: tuple[tuple[Literal["qpos", "qvel"], int], ...] = (("qpos", nq),
                                                                           ("qvel", nv))
            for key, size in joint_parts:
                if key in body:
                    values = _numbers(body[key], at.key(key))
                    if len(values) != size:
                        raise at.key(key).fail(f"{label} joint {name!r} has {size} {key} "
                                               f"value(s), got {len(values)}")
                    if key == "qpos" and label in ("free", "ball"):
                        q = values[-4:]
                        if abs(math.sqrt(sum(v * v for v in q)) - 1.0) > 1e-3:
                            raise at.key(key).fail(f"the orientation part {q} of {label} joint "
                                                   f"{name!r} is not a unit quaternion (wxyz)")
                    entry[key] = values
            out.append(entry)
        elif kind == "mocap":
            s.keys(body, at, required=("type", "body"), optional=("pos", "quat"))
            name = s.string(body["body"], at.key("body"))
            bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
            if bid < 0:
                raise at.key("body").fail(f"no MuJoCo body named {name!r} in the model")
            if int(model.body_mocapid[bid]) < 0:
                raise at.key("body").fail(f"body {name!r} is not a mocap body")
            if "pos" not in body and "quat" not in body:
                raise at.fail("a mocap entry sets pos, quat or both")
            entry = {"type": "mocap", "body": name}
            mocap_parts: tuple[tuple[Literal["pos", "quat"], int], ...] = (("pos", 3),
                                                                          ("quat", 4))
            for place, size in mocap_parts:
                if place in body:
                    values = _numbers(body[place], at.key(place))
                    if len(values) != size:
                        raise at.key(place).fail(f"expected {size} values, got {len(values)}")
                    if place == "quat" and abs(math.sqrt(sum(v * v for v in values)) - 1) > 1e-3:
                        raise at.key(place).fail(f"{values} is not a unit quaternion (wxyz)")
                    entry[place] = values
            out.append(entry)
        elif kind == "actuator":
            s.keys(body, at, required=("type", "actuator", "act"))
            name = s.string(body["actuator"], at.key("actuator"))
            aid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, name)
            if aid < 0:
                raise at.key("actuator").fail(f"no MuJoCo actuator named {name!r} in the model")
            num = int(model.actuator_actnum[aid])
            if num == 0:
                raise at.key("actuator").fail(f"actuator {name!r} has no activation state in the "
                                              f"nominal plan")
            values = _numbers(body["act"], at.key("act"))
            if len(values) != num:
                raise at.key("act").fail(f"actuator {name!r} has {num} activation value(s), got "
                                         f"{len(values)}")
            out.append({"type": "actuator", "actuator": name, "act": values})
        else:
            raise at.key("type").fail(f"expected joint, mocap or actuator, got {s.describe(kind)}")
    return tuple(out)


def _numbers(value: object, where: s.Where) -> list[float]:
    return [s.number(v, where.key(i)) for i, v in enumerate(s.sequence(value, where))]
