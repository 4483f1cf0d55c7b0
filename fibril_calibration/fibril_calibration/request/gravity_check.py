"""A model that compensates gravity, driven by recorded torques: a warning at request load.

MuJoCo's ``gravcomp`` on a body cancels gravity on it (as force applied to the body, or through
the actuators with ``actuatorgravcomp``). A robot's *commanded* torque from a controller that
compensates gravity itself (Franka's torque interface) leaves gravity out, and the model must
compensate it; a *measured* joint torque, or a command of a controller that does not, includes
gravity, and a compensating model then counts it twice (a real arm's measured torques gave
0.089 rad nominal error with compensation against 0.029 without). Which one a log holds is not
in the log, so a request whose recorded torque inputs drive joints that move gravity-
compensated bodies gets a warning naming them; nothing is changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import mujoco

from .._json import JsonObject

if TYPE_CHECKING:
    from .document import CalibrationRequest

__all__ = ["CODE", "gravcomp_warnings"]

CODE = "gravity_compensated_torque_inputs"
_TRN_JOINT = 0  # mjTRN_JOINT


def gravcomp_warnings(request: CalibrationRequest) -> list[JsonObject]:
    """One warning when recorded torque inputs drive joints whose moved bodies have gravcomp."""
    plan = request.nominal_plan
    model = plan.model
    if not any(float(g) for g in model.opt.gravity):
        return []  # nothing to compensate
    endpoints = plan.endpoints
    torque: dict[str, list[str]] = {}  # endpoint -> episodes
    for episode in (*request.training, *request.validation):
        seen = set()
        for record in episode.recorded_inputs:
            if record.source_id in seen or '"torque"' not in record.payload_json:
                continue
            seen.add(record.source_id)
            torque.setdefault(record.source_id, []).append(episode.id)
    joints: dict[str, list[str]] = {}  # joint -> compensated bodies it moves
    episodes: set[str] = set()
    for endpoint, ids in torque.items():
        descriptor = endpoints.get(endpoint)
        if descriptor is None or "torque" not in descriptor.modes:
            continue
        actuator = descriptor.actuator_id
        if int(model.actuator_trntype[actuator]) != _TRN_JOINT:
            continue
        joint = int(model.actuator_trnid[actuator, 0])
        bodies = _compensated_subtree(model, int(model.jnt_bodyid[joint]))
        if bodies:
            joints[_name(model, "joint", joint)] = bodies
            episodes.update(ids)
    if not joints:
        return []
    names = sorted({b for bodies in joints.values() for b in bodies})
    message = (f"the model compensates gravity (gravcomp on {_few(names)}) on bodies moved by "
               f"recorded torque inputs (joints {_few(sorted(joints))}; episodes "
               f"{_few(sorted(episodes))}): right when the log's torques leave gravity out (a "
               f"controller's command above its own gravity compensation), counted twice when "
               f"they include it (measured joint torques): then use a model without gravcomp")
    return [{"code": CODE, "bodies": names, "joints": sorted(joints),
             "episodes": sorted(episodes), "message": message}]


def _compensated_subtree(model: mujoco.MjModel, root: int) -> list[str]:
    out = []
    for body in range(model.nbody):
        parent = body
        while parent != 0 and parent != root:
            parent = int(model.body_parentid[parent])
        if parent == root and float(model.body_gravcomp[body]) != 0.0:
            out.append(_name(model, "body", body))
    return out


def _name(model: mujoco.MjModel, kind: str, index: int) -> str:
    kinds = {"body": mujoco.mjtObj.mjOBJ_BODY, "joint": mujoco.mjtObj.mjOBJ_JOINT}
    return mujoco.mj_id2name(model, kinds[kind], index) or f"{kind} {index}"


def _few(names: Sequence[str], limit: int = 8) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"
