"""Setting parts of an instance's MuJoCo state from entries (e.g. an episode's initial state):
joint qpos/qvel, mocap pose, actuator activation. Errors name the entry and its key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import mujoco
import numpy as np
import numpy.typing as npt

from .errors import InstanceError

__all__ = ["inject_state"]

# Per joint type (free, ball, slide, hinge): its sizes in qpos and qvel.
_JOINT_SIZES = {0: (7, 6), 1: (4, 3), 2: (1, 1), 3: (1, 1)}


def inject_state(model: mujoco.MjModel, data: mujoco.MjData,
                 entries: Sequence[Mapping[str, object]]) -> None:
    """Set joint qpos/qvel, mocap pose or actuator activation. Entries (YAML/JSON documents):
    ``{type: joint, joint, qpos?, qvel?}``, ``{type: mocap, body, pos?, quat?}``,
    ``{type: actuator, actuator, act}``."""
    for n, entry in enumerate(entries):
        where = f"inject_state[{n}]"
        kind = entry.get("type")
        if kind == "joint":
            jid = _object(model, mujoco.mjtObj.mjOBJ_JOINT, entry.get("joint"), where, "joint")
            nq, nv = _JOINT_SIZES[int(model.jnt_type[jid])]
            qadr, vadr = int(model.jnt_qposadr[jid]), int(model.jnt_dofadr[jid])
            _assign(data.qpos, qadr, nq, entry.get("qpos"), f"{where}.qpos")
            _assign(data.qvel, vadr, nv, entry.get("qvel"), f"{where}.qvel")
        elif kind == "mocap":
            bid = _object(model, mujoco.mjtObj.mjOBJ_BODY, entry.get("body"), where, "body")
            mocap = int(model.body_mocapid[bid])
            if mocap < 0:
                raise InstanceError(f"{where}.body: body {entry.get('body')!r} is not a "
                                    f"mocap body")
            _assign(data.mocap_pos[mocap], 0, 3, entry.get("pos"), f"{where}.pos")
            _assign(data.mocap_quat[mocap], 0, 4, entry.get("quat"), f"{where}.quat")
        elif kind == "actuator":
            aid = _object(model, mujoco.mjtObj.mjOBJ_ACTUATOR, entry.get("actuator"), where,
                          "actuator")
            adr, num = int(model.actuator_actadr[aid]), int(model.actuator_actnum[aid])
            if num == 0:
                raise InstanceError(f"{where}.actuator: actuator {entry.get('actuator')!r} "
                                    f"has no activation state")
            _assign(data.act, adr, num, entry.get("act"), f"{where}.act")
        else:
            raise InstanceError(f"{where}.type: expected joint, mocap or actuator, got "
                                f"{kind!r}")


def _object(model: mujoco.MjModel, objtype: mujoco.mjtObj, name: object, where: str,
            kind: str) -> int:
    index = mujoco.mj_name2id(model, objtype, name) if isinstance(name, str) else -1
    if index < 0:
        raise InstanceError(f"{where}.{kind}: no MuJoCo {kind} named {name!r}")
    return int(index)


def _assign(target: npt.NDArray[np.float64], start: int, width: int, values: object, where: str) -> None:
    if values is None:
        return
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.shape[0] != width:
        raise InstanceError(f"{where}: expected {width} value(s), got {array.shape[0]}")
    if not np.all(np.isfinite(array)):
        raise InstanceError(f"{where}: values must be finite, got {array.tolist()}")
    target[start:start + width] = array
