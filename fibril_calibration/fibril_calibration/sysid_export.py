"""Fibril's parameters as the lab's ``sysid_best_params.json``: the inverse of ``sysid_import``.

    fibril_sim calibrate request.yaml --output-sysid-params sysid_best_params.json
    python -m fibril_calibration.sysid_export overlay.json --manifest panda.yaml \\
        --joints joint1,...,joint7 [--motors m1,...] --output sysid_best_params.json

``best_params_decoded`` is read from the compiled model of the plan (the values the replay
applied, fitted or not), per joint in the lab's order: ``armature`` ← ``joint_armature``,
``mu_dynamic`` ← ``joint_frictionloss`` (MuJoCo's one dry-friction level is the lab's dynamic
one), ``mu_viscous`` ← ``joint_damping``, ``motor_delay_steps`` ← the ``command_latency`` of
the ``motors`` components in 1 ms ticks. ``mu_static`` and ``dynamic_ratio`` have no MuJoCo
counterpart: they come back from the imported artifact that kept them (``source.not_mapped``,
the ratio recomputed as ``mu_dynamic / mu_static`` if the friction was refitted), else
``mu_static = mu_dynamic`` and ``dynamic_ratio = 1`` (one level: static equals dynamic).

``best_params_raw`` is the 29-value vector ``armature, mu_static, dynamic_ratio, mu_viscous``
(7 each) then ``motor_delay_steps``; ``bounds`` give each entry's fitted range (a parameter of
the request that targets it) or ``[value, value]`` when it was held. ``best_score`` is
Fibril's final objective (null when no fit made the values); ``history`` is empty: a
least-squares fit has no generations.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import mujoco

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.overlays import load_overlay_artifact
from fibril_sim_core.plan import SimulationBuilder, SimulationPlan

from ._atomic import write_atomic
from ._json import JsonObject, JsonValue, json_list
from .errors import CalibrationError
from .parameters import CalibrationParameter
from .result import strict, strict_object, to_json

if TYPE_CHECKING:
    from .request.input_timing import SourceSummary
    from .request.document import CalibrationRequest

__all__ = ["main", "sysid_document"]

_FIELDS = (("armature", "dof_armature", "joint_armature"),
           ("mu_dynamic", "dof_frictionloss", "joint_frictionloss"),
           ("mu_viscous", "dof_damping", "joint_damping"))


def sysid_document(plan: SimulationPlan, joints: Sequence[str], *, motors: Sequence[str] = (),
                   tick_s: float = 0.001, not_mapped: Mapping[str, JsonValue] | None = None,
                   best_score: float | None = None,
                   parameters: Sequence[CalibrationParameter] = (),
                   args: Mapping[str, object] | None = None,
                   trajectories: Sequence[Mapping[str, JsonValue]] = ()) -> JsonObject:
    """The lab's document of the values ``plan`` applies. ``parameters`` (request parameters
    with ``lower``/``upper``/``targets``) give the fitted entries' bounds; ``args`` (the
    command's options) are recorded as strict JSON."""
    model = plan.model
    decoded: dict[str, list[float]] = {}
    dofs = []
    for name in joints:
        index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if index < 0:
            raise CalibrationError(f"sysid_best_params: no joint {name!r} in the model "
                                   f"{str(plan.manifest.model)!r}")
        dofs.append(int(model.jnt_dofadr[index]))
    for key, field, _ in _FIELDS:
        decoded[key] = [float(getattr(model, field)[d]) for d in dofs]
    kept = dict(not_mapped or {})
    static, ratio = kept.get("mu_static"), kept.get("dynamic_ratio")
    if isinstance(static, list) and len(static) == len(joints):
        decoded["mu_static"] = [float(v) for v in static]
        old = ratio if isinstance(ratio, list) and len(ratio) == len(joints) else [None] * len(
            joints)
        decoded["dynamic_ratio"] = [_ratio(d, s, r) for d, s, r in
                                    zip(decoded["mu_dynamic"], decoded["mu_static"], old)]
    else:
        decoded["mu_static"] = list(decoded["mu_dynamic"])
        decoded["dynamic_ratio"] = [1.0] * len(joints)
    delay = _delay(plan, motors, tick_s, kept.get("motor_delay_steps"))
    ordered: JsonObject = {key: decoded[key] for key in ("armature", "mu_static",
                                                         "dynamic_ratio", "mu_dynamic",
                                                         "mu_viscous")}
    ordered["motor_delay_steps"] = delay
    raw: list[JsonValue] = [*decoded["armature"], *decoded["mu_static"],
                            *decoded["dynamic_ratio"], *decoded["mu_viscous"]]
    raw.append(delay)
    return {
        "best_score": best_score,
        "best_params_raw": raw,
        "best_params_decoded": ordered,
        "history": [],
        "bounds": _bounds(raw, joints, motors, parameters, tick_s),
        "args": strict_object(args) if args is not None else {},
        "source": {"trajectories": [dict(t) for t in trajectories],
                   "num_trajectories": len(trajectories),
                   "time_base": "fibril_sim_ticks", "warmup_steps": 0,
                   "fibril": {"manifest": str(plan.manifest.path),
                              "parameter_set_hash": strict(
                                  plan.provenance["parameter_set_hash"]),
                              "episode_seed": strict(plan.provenance.get("episode_seed")),
                              "mujoco": strict(plan.provenance["build"]["mujoco"])}},
    }


def _ratio(dynamic: float, static: float, old: JsonValue) -> float:
    """``mu_dynamic / mu_static``, the imported ratio kept when it still holds."""
    if isinstance(old, (int, float)) and abs(float(old) * static - dynamic) <= 1e-12 * max(
            abs(dynamic), 1e-300):
        return float(old)
    return dynamic / static if static else 1.0


def _delay(plan: SimulationPlan, motors: Sequence[str], tick_s: float, kept: JsonValue
           ) -> JsonValue:
    if not motors:
        return kept
    by_id = {a.id: a for a in plan.actuators}
    ticks = set()
    for motor in motors:
        actuator = by_id.get(motor)
        if actuator is None:
            raise CalibrationError(f"sysid_best_params: no motor component {motor!r} in the "
                                   f"plan; actuators: {', '.join(by_id) or 'none'}")
        ticks.add(actuator.latency_ticks)
    if len(ticks) != 1:
        raise CalibrationError(f"sysid_best_params: motors {', '.join(motors)} have different "
                               f"command latencies ({sorted(ticks)} ticks); the lab's "
                               f"motor_delay_steps is one number")
    steps = ticks.pop() * plan.timebase.timestep_s / tick_s
    return int(round(steps)) if abs(steps - round(steps)) < 1e-9 else steps


def _bounds(raw: Sequence[JsonValue], joints: Sequence[str], motors: Sequence[str],
            parameters: Sequence[CalibrationParameter], tick_s: float
            ) -> list[Sequence[JsonValue]]:
    """Per raw entry: the range of the request parameter that fitted it, else ``[v, v]``
    (held). ``mu_static`` takes the frictionloss range when it is the frictionloss (no
    imported ratio); ``dynamic_ratio`` is never fitted here."""
    ranges: dict[tuple[str, str], list[float]] = {}
    for parameter in parameters:
        for target in parameter.targets:
            described = target.describe()
            kind = described.get("kind") or described.get("config_path")
            name = described.get("object") or described.get("component")
            ranges[(str(kind), str(name))] = [float(parameter.lower), float(parameter.upper)]
    n = len(joints)
    out: list[Sequence[JsonValue]] = [[value, value] for value in raw]
    for i, joint in enumerate(joints):
        out[i] = ranges.get(("joint_armature", joint), out[i])
        if raw[2 * n + i] == 1.0:  # mu_static = mu_dynamic = frictionloss
            out[n + i] = ranges.get(("joint_frictionloss", joint), out[n + i])
        out[3 * n + i] = ranges.get(("joint_damping", joint), out[3 * n + i])
    for motor in motors:
        if ("command_latency", motor) in ranges:
            low, high = ranges[("command_latency", motor)]  # seconds -> lab ticks
            out[-1] = [low / tick_s, high / tick_s]
    return out


def trajectories(request: CalibrationRequest) -> list[JsonObject]:
    """The training episodes as the lab's ``source.trajectories`` entries."""
    out: list[JsonObject] = []
    for episode in request.training:
        info: SourceSummary = episode.source or {}
        gains = None
        sidecar = info.get("sidecar") or (str(Path(info["path"]).with_suffix(".json"))
                                          if info.get("format") == "franka_sysid" else None)
        if sidecar:
            try:
                lab_args = json.loads(Path(sidecar).read_text(encoding="utf-8")).get("args")
            except (OSError, ValueError, AttributeError):
                lab_args = None
            if isinstance(lab_args, dict):
                gains = {k: lab_args.get(k) for k in ("kp_pos", "kp_ori", "kd_pos", "kd_ori")}
        out.append({"real_csv": info.get("path"), "real_sidecar": sidecar,
                    "num_samples": max((s.count for s in episode.signals), default=0),
                    "weight": float(episode.weight), "gains": gains, "episode": episode.id})
    return out


def fitted_joints(request: CalibrationRequest, plan: SimulationPlan) -> list[str]:
    """The joints of a request's sysid document: its joint_position observations in order,
    else the joints its parameters target, in model order."""
    observed = [o.name for o in request.observations if o.source == "joint_position" and o.name]
    if observed:
        return observed
    targeted = {target.describe().get("object") for p in request.parameters
                for target in p.targets
                if target.describe().get("kind") in {f for _, _, f in _FIELDS}}
    model = plan.model
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt)]
    joints = [n for n in names if n in targeted]
    if not joints:
        raise CalibrationError("--output-sysid-params: the request declares no joint_position "
                               "observation and fits no joint armature, frictionloss or "
                               "damping: name the joints with --sysid-joints")
    return joints


def _mapping(value: JsonValue) -> Mapping[str, JsonValue] | None:
    return value if isinstance(value, Mapping) else None


def _number(value: JsonValue) -> float | None:
    return value if isinstance(value, (int, float)) else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fibril_calibration.sysid_export",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("overlay", type=Path, nargs="?",
                        help="an overlay artifact to apply (default: the manifest as it is)")
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--joints", required=True,
                        help="MuJoCo joint names, comma-separated, in the lab's joint order")
    parser.add_argument("--motors", default="",
                        help="motor component ids whose command_latency is motor_delay_steps")
    parser.add_argument("--tick", type=float, default=0.001,
                        help="seconds per motor_delay step (default 0.001)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)

    try:
        source: Mapping[str, JsonValue] = {}
        overlays = None
        if args.overlay is not None:  # an imported lab file keeps what MuJoCo cannot hold
            overlays = load_overlay_artifact(args.overlay).parameters
            found = json.loads(args.overlay.read_text(encoding="utf-8")).get("source") or {}
            if isinstance(found, dict) and found.get("format") == "sysid_best_params.json":
                source = found
        plan = SimulationBuilder().build(args.manifest, overlays)
        document = sysid_document(plan, [j for j in args.joints.split(",") if j],
                                  motors=[m for m in args.motors.split(",") if m],
                                  tick_s=args.tick,
                                  not_mapped=_mapping(source.get("not_mapped")),
                                  best_score=_number(source.get("best_score")),
                                  args={"argv": list(argv if argv is not None
                                                     else sys.argv[1:])})
        write_atomic(args.output, to_json(strict_object(document)))
    except (FibrilError, OSError, ValueError) as exc:
        print(f"sysid_export: {exc}", file=sys.stderr)
        return 2
    print(f"{args.output}: {len(json_list(document['best_params_raw']))} value(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
