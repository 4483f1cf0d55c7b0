"""``sidecar_gains:`` of a request: a Franka run's impedance gains held in every candidate.

The lab's replay takes the gains a run was recorded with from its sidecar (``--gain-source
sidecar``, the default); a request says the same with

    sidecar_gains: loop-01            # a source in sources: its sidecar
    sidecar_gains: {sidecar: calibration_data/loop-01.json,
                    position_actuators: [ee_x, ee_y, ee_z],
                    orientation_actuators: [ee_rx, ee_ry, ee_rz]}

``args.kp_pos`` / ``kd_pos`` become ``actuator_position_kp`` / ``_kv`` of the position
actuators, ``kp_ori`` / ``kd_ori`` of the orientation ones (``sysid_import --sidecar-gains``
makes the same overlays), applied as fixed overlays of every candidate plan.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from fibril_sim_core import schema as s

from ..recordings.franka_sidecar import (ORIENTATION_ACTUATORS, POSITION_ACTUATORS,
                                         SidecarProblem, gain_overlays)

if TYPE_CHECKING:
    from fibril_sim_core.overlays import OverlayParameter

__all__ = ["sidecar_gains"]


def sidecar_gains(value: object, where: s.Where, base: Path,
                  sources: Mapping[str, object]) -> tuple[OverlayParameter, ...]:
    """The fixed overlay parameters of a request's ``sidecar_gains`` (none: ``()``)."""
    if value is None:
        return ()
    body: Mapping[str, object]
    if isinstance(value, str):
        body = {"source": value}
    else:
        body = s.mapping(value, where)
    s.keys(body, where, optional=("source", "sidecar", "position_actuators",
                                  "orientation_actuators"))
    if ("source" in body) == ("sidecar" in body):
        raise where.fail("name the run: a source of sources (its sidecar) or sidecar: PATH")
    if "source" in body:
        name = s.string(body["source"], where.key("source"))
        spec = sources.get(name)
        if not isinstance(spec, Mapping) or "path" not in spec:
            known = ", ".join(str(k) for k in sources) or "none declared"
            raise where.key("source").fail(f"unknown source {name!r}; the request's sources: "
                                           f"{known}")
        path = (base / str(spec["sidecar"]) if "sidecar" in spec
                else (base / str(spec["path"])).with_suffix(".json"))
    else:
        path = base / s.string(body["sidecar"], where.key("sidecar"))
    position = _names(body, "position_actuators", POSITION_ACTUATORS, where)
    orientation = _names(body, "orientation_actuators", ORIENTATION_ACTUATORS, where)
    try:
        sidecar = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise where.fail(f"sidecar {str(path)!r} does not exist") from None
    except (OSError, ValueError) as exc:
        raise where.fail(f"cannot read sidecar {str(path)!r}: {exc}") from None
    if not isinstance(sidecar, dict):
        raise where.fail(f"sidecar {str(path)!r}: expected a JSON object")
    try:
        return gain_overlays(sidecar, path, position=position, orientation=orientation)
    except SidecarProblem as exc:
        raise where.fail(str(exc)) from None


def _names(body: Mapping[str, object], key: str, default: tuple[str, ...],
           where: s.Where) -> tuple[str, ...]:
    if key not in body:
        return default
    at = where.key(key)
    return tuple(s.string(v, at.key(i)) for i, v in enumerate(s.sequence(body[key], at)))
