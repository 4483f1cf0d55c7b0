"""The lab's ``sysid_best_params.json`` as a fibril overlay artifact, to score their fit beside
ours on the same episodes (``fibril_sim calibrate request.yaml --evaluate lab-fit.json``).

    python -m fibril_calibration.sysid_import sysid_best_params.json \\
        --joints panda_joint1,...,panda_joint7 [--motors motor1,...,motor7] --output lab-fit.json

``best_params_decoded`` maps per joint (in ``--joints`` order) to typed MuJoCo targets:
``armature`` → ``joint_armature`` (kg·m²), ``mu_dynamic`` → ``joint_frictionloss`` (N·m: MuJoCo's
dry friction has one level, the lab's dynamic one; ``mu_static`` and ``dynamic_ratio`` have no
MuJoCo counterpart and are recorded in the artifact's description only), ``mu_viscous`` →
``joint_damping`` (N·m·s/rad); ``motor_delay_steps`` (integer 1 ms ticks) → the
``command_latency`` (s) of each ``--motors`` component, when given. Parameter ids are
``armature_<joint>``, ``frictionloss_<joint>``, ``damping_<joint>`` and ``motor_delay``.

``--sidecar-gains run.json`` instead writes the run's impedance gains (``args.kp_pos``,
``kd_pos``, ``kp_ori``, ``kd_ori``) as overlays of the Cartesian impedance's site actuators
(``actuator_position_kp`` / ``actuator_position_kv`` of ``--position-actuators``, default
ee_x,ee_y,ee_z, and ``--orientation-actuators``, default ee_rx,ee_ry,ee_rz), for a manifest's
``parameter_overlays``: the replay then uses the gains the run was recorded with.

``--evaluate`` matches an artifact's parameters to the request's by id or by identical
targets; the ones the request does not fit are applied as fixed overlays of that set.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from fibril_sim_core.overlays import (
    ComponentTarget,
    MujocoTarget,
    OverlayParameter,
    overlay_document,
)

from ._atomic import write_atomic
from ._json import JsonObject, json_list
from .errors import CalibrationError

__all__ = ["main", "sidecar_gains_overlay", "sysid_overlay"]

_PER_JOINT = (("armature", "joint_armature", "armature", "kg_m2"),
              ("mu_dynamic", "joint_frictionloss", "frictionloss", "N_m"),
              ("mu_viscous", "joint_damping", "damping", "N_m_s_per_rad"))


def sysid_overlay(path: Path, joints: Sequence[str], *, motors: Sequence[str] = (),
                  tick_s: float = 0.001) -> JsonObject:
    """The overlay artifact document of a ``sysid_best_params.json``."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CalibrationError(f"{path}: file not found") from None
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"{path}: cannot read as JSON: {exc}") from None
    decoded = document.get("best_params_decoded") if isinstance(document, dict) else None
    if not isinstance(decoded, dict):
        raise CalibrationError(f"{path}: expected a best_params_decoded object")
    parameters: list[OverlayParameter] = []
    origin = f"sysid_best_params.json {path} (best_score {document.get('best_score')})"
    for key, kind, prefix, unit in _PER_JOINT:
        values = decoded.get(key)
        if values is None:
            continue
        if not isinstance(values, list) or len(values) != len(joints):
            raise CalibrationError(f"{path}: best_params_decoded.{key} has "
                                   f"{len(values) if isinstance(values, list) else 'no'} "
                                   f"value(s) for {len(joints)} joint(s) ({', '.join(joints)})")
        for joint, value in zip(joints, values):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise CalibrationError(f"{path}: best_params_decoded.{key}: {value!r} is not a "
                                       f"number")
            parameters.append(OverlayParameter(f"{prefix}_{joint}", float(value),
                                               (MujocoTarget(kind, joint),), unit, origin))
    delay = decoded.get("motor_delay_steps")
    if delay is not None and motors:
        if not isinstance(delay, (int, float)) or delay < 0:
            raise CalibrationError(f"{path}: motor_delay_steps {delay!r} is not a tick count")
        parameters.append(OverlayParameter(
            "motor_delay", float(delay) * tick_s,
            tuple(ComponentTarget(m, "command_latency") for m in motors), "s", origin))
    if not parameters:
        raise CalibrationError(f"{path}: best_params_decoded has none of armature, mu_dynamic, "
                               f"mu_viscous, motor_delay_steps")
    unmapped = {k: decoded[k] for k in ("mu_static", "dynamic_ratio") if k in decoded}
    if delay is not None and not motors:
        unmapped["motor_delay_steps"] = delay
    out = overlay_document(parameters, id="sysid_best_params", source={
        "format": "sysid_best_params.json", "path": str(path),
        "best_score": document.get("best_score"), "not_mapped": unmapped})
    return out


def sidecar_gains_overlay(path: Path, *, position: Sequence[str] = ("ee_x", "ee_y", "ee_z"),
                          orientation: Sequence[str] = ("ee_rx", "ee_ry", "ee_rz")
                          ) -> JsonObject:
    """The overlay artifact document of a run sidecar's impedance gains (a request takes the
    same gains with ``sidecar_gains:``)."""
    from .recordings.franka_sidecar import SidecarProblem, gain_overlays  # not for --help

    try:
        sidecar = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CalibrationError(f"{path}: file not found") from None
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"{path}: cannot read as JSON: {exc}") from None
    if not isinstance(sidecar, dict):
        raise CalibrationError(f"{path}: expected a JSON object")
    try:
        parameters = gain_overlays(sidecar, Path(path), position=position,
                                   orientation=orientation)
    except SidecarProblem as exc:
        raise CalibrationError(str(exc)) from None
    return overlay_document(parameters, id="sidecar_gains",
                            source={"format": "seed-002 sidecar", "path": str(path)})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fibril_calibration.sysid_import",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("params", type=Path, nargs="?", help="sysid_best_params.json")
    parser.add_argument("--joints", default="",
                        help="MuJoCo joint names, comma-separated, in the lab's joint order")
    parser.add_argument("--sidecar-gains", type=Path, metavar="RUN.json",
                        help="write a run sidecar's impedance gains instead")
    parser.add_argument("--position-actuators", default="ee_x,ee_y,ee_z")
    parser.add_argument("--orientation-actuators", default="ee_rx,ee_ry,ee_rz")
    parser.add_argument("--motors", default="",
                        help="motor component ids whose command_latency takes "
                             "motor_delay_steps (comma-separated)")
    parser.add_argument("--tick", type=float, default=0.001,
                        help="seconds per motor_delay step (default 0.001)")
    parser.add_argument("--output", type=Path, required=True, help="overlay artifact to write")
    args = parser.parse_args(argv)
    from .result import to_json  # the request and solver: not for --help

    try:
        if args.sidecar_gains is not None:
            document = sidecar_gains_overlay(
                args.sidecar_gains, position=args.position_actuators.split(","),
                orientation=args.orientation_actuators.split(","))
        elif args.params is None or not args.joints:
            raise CalibrationError("give sysid_best_params.json and --joints, or "
                                   "--sidecar-gains RUN.json")
        else:
            document = sysid_overlay(args.params, [j for j in args.joints.split(",") if j],
                                     motors=[m for m in args.motors.split(",") if m],
                                     tick_s=args.tick)
        write_atomic(args.output, to_json(document))
    except CalibrationError as exc:
        print(f"sysid_import: {exc}", file=sys.stderr)
        return 2
    print(f"{args.output}: {len(json_list(document['parameters']))} parameter(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
