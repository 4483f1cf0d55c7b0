"""Fibril's replays as the lab's sim CSV + sidecar (``replay_python_csv_sim.py``'s output).

``fibril_sim calibrate ... --write-sim-csv DIR`` replays every validation episode of a
``franka_sysid`` recording (the training ones when the request has none) on the fitted plan
(with ``--evaluate``: on each evaluated set's plan) and writes, per episode,
``DIR/<episode>/<real stem>_sim.csv`` and ``<real stem>_sim.json`` (with ``--evaluate``:
``DIR/<set>/<episode>/...``), so that the lab's plotting and comparison scripts read them
unchanged. The data-format document's column table:

* same time base as the real CSV: row k is the real row k of the episode's window, ``t_s``
  copied; its state is the simulated state at that time, under target k-1 (target k is sent
  at row k and held until row k+1);
* ``q1..qN``, ``dq1..dqN``: the arm's joints (the request's ``joint_position`` observations in
  order, else the model's hinge joints, as many as the real CSV has ``q`` columns);
* ``x_x, x_y, x_z`` / ``dx_x, dx_y, dx_z``: the end effector's position and linear velocity,
  ``quat_x, quat_y, quat_z, quat_w`` (xyzw) and ``wx, wy, wz`` its orientation and angular
  velocity, all in the model's world (the robot base) frame. The end effector is the site
  the model's site actuators drive (the Cartesian impedance of config/examples/panda), or
  the site or body named by ``--sim-csv-ee``;
* ``x_des_*``, ``dx_des_*``, ``quat_des_*``: the target, copied from the real CSV;
* ``e_x, e_y, e_z``: ``x_des - x``; ``e_ox, e_oy, e_oz``: the rotation vector of
  ``q_des ⊗ conj(q)`` (base frame, rad): the task-space error the impedance drives to zero,
  target minus state (the metrics' tracking convention).

The sim sidecar (``schema_version: 2``) records the replay arguments (``args``), the applied
parameters (``applied_params``, every overlay of the plan) and the same ``summary`` block as
the real sidecar (its error fields from the ``e_*`` columns; the torque fields are null: the
sim CSV has no torque columns).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import numpy.typing as npt

from fibril_sim_core.errors import FibrilError

from ._atomic import write_atomic
from ._json import JsonObject
from .errors import CalibrationError, EvaluationError
from .metrics_json import unique_names
from .model.candidate_plan import CandidatePlanBuilder
from .recordings.franka import episode_recording
from .recordings.sources import SourceError
from .request.input_timing import SourceSummary
from .recordings.time_offsets import candidate_builder
from .result import strict, strict_object, to_json
from .parameter_sets import nominal_set, overlay_values

if TYPE_CHECKING:
    from fibril_sim_core.overlays import OverlayParameter
    from fibril_sim_core.plan import SimulationPlan

    from .recordings.franka import FrankaSource
    from .request.document import CalibrationRequest
    from .request.episode_specs import EpisodeSpec

Array = npt.NDArray[np.float64]

__all__ = ["SimReplay", "replay_episode", "sim_columns", "write_sim_csvs"]

_XYZ = ("x", "y", "z")
_QUAT = ("x", "y", "z", "w")
_UNSTABLE = (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQPOS,
             mujoco.mjtWarning.mjWARN_BADQVEL, mujoco.mjtWarning.mjWARN_BADCTRL)


def sim_columns(joints: int) -> tuple[str, ...]:
    """The sim CSV's header, in the data-format document's order."""
    return ("t_s", *(f"q{i}" for i in range(1, joints + 1)),
            *(f"dq{i}" for i in range(1, joints + 1)),
            *(f"x_{c}" for c in _XYZ), *(f"dx_{c}" for c in _XYZ),
            *(f"quat_{c}" for c in _QUAT), "wx", "wy", "wz",
            *(f"x_des_{c}" for c in _XYZ), *(f"dx_des_{c}" for c in _XYZ),
            *(f"quat_des_{c}" for c in _QUAT),
            "e_x", "e_y", "e_z", "e_ox", "e_oy", "e_oz")


@dataclass(frozen=True)
class SimReplay:
    """One episode's sim CSV (``columns`` × ``rows``) and its sidecar document."""

    episode: str
    stem: str  # the real CSV's stem: files are <stem>_sim.csv / <stem>_sim.json
    columns: tuple[str, ...]
    rows: Array
    sidecar: JsonObject


def replay_episode(plan: SimulationPlan, episode: EpisodeSpec, *,
                   joints: Sequence[str] | None = None, ee: str | None = None,
                   parameter_set: str = "",
                   values: Mapping[str, float] | None = None,
                   request_path: Path | None = None) -> SimReplay:
    """Replay ``episode`` (from a franka_sysid recording) on ``plan``, at the real rows."""
    label = f"--write-sim-csv: episode {episode.id!r}"
    info: SourceSummary = episode.source or {}
    if info.get("format") != "franka_sysid" or not info.get("path"):
        raise CalibrationError(f"{label}: not from a franka_sysid recording (the lab's sim "
                               f"CSV is the replay of one); its source: "
                               f"{info.get('format') or 'a trace'}")
    real_path = Path(info["path"])
    try:
        real = episode_recording(info)
    except SourceError as exc:
        raise CalibrationError(f"{label}: {exc}") from None
    model = plan.model
    dt = plan.timebase.timestep_ns
    start = int(info["start_ns"] if "start_ns" in info else info.get("origin_ns") or 0)
    end = max(int(signal.times_ns[-1]) for signal in episode.signals)
    times = np.asarray(real.times_ns, dtype=np.int64)
    inside = np.flatnonzero((times >= start) & (times <= start + end))
    if inside.size == 0:
        raise CalibrationError(f"{label}: no row of {str(real_path)!r} lies in the episode")
    ticks = np.rint((times[inside] - start) / dt).astype(np.int64)
    joint_ids = _joints(model, joints, real, label)
    ee_kind, ee_id = _end_effector(model, ee, label)

    qpos, qvel = _simulate(plan, episode, ticks, label)
    n = len(joint_ids)
    columns = sim_columns(n)
    rows = np.full((inside.size, len(columns)), np.nan)
    rows[:, 0] = _real_column(real, "t_s", inside, times[inside] / 1e9)
    qadr = [int(model.jnt_qposadr[j]) for j in joint_ids]
    dadr = [int(model.jnt_dofadr[j]) for j in joint_ids]
    rows[:, 1:1 + n] = qpos[:, qadr]
    rows[:, 1 + n:1 + 2 * n] = qvel[:, dadr]
    pose = _end_effector_states(model, ee_kind, ee_id, qpos, qvel)  # x, dx, quat xyzw, w
    at = 1 + 2 * n
    rows[:, at:at + 13] = pose
    at += 13
    for name in (*(f"x_des_{c}" for c in _XYZ), *(f"dx_des_{c}" for c in _XYZ),
                 *(f"quat_des_{c}" for c in _QUAT)):
        rows[:, at] = _real_column(real, name, inside, None)
        at += 1
    x, quat = pose[:, 0:3], pose[:, 6:10]
    x_des = rows[:, columns.index("x_des_x"):columns.index("x_des_x") + 3]
    quat_des = rows[:, columns.index("quat_des_x"):columns.index("quat_des_x") + 4]
    rows[:, at:at + 3] = x_des - x
    rows[:, at + 3:at + 6] = _orientation_error(quat_des, quat)
    sidecar = _sidecar(plan, episode, real, rows, columns, joint_ids, ee_kind, ee_id,
                       parameter_set, values, request_path, int(ticks[-1]))
    return SimReplay(episode.id, real_path.stem, columns, rows, sidecar)


def _simulate(plan: SimulationPlan, episode: EpisodeSpec, ticks: npt.NDArray[np.int64],
              label: str) -> tuple[Array, Array]:
    """qpos / qvel at ``ticks``: the calibration's own replay of the episode (seed, initial
    state, recorded inputs through the ingress contract)."""
    try:
        instance = plan.create_instance(episode.seed, collect=False)
        if episode.initial_state:
            instance.inject_state([dict(entry) for entry in episode.initial_state])
        if episode.recorded_inputs:
            instance.enqueue_recorded_trace_inputs(
                plan.prepare_recorded_inputs(episode.recorded_inputs))
        capture = instance.capture(ticks, ("qpos", "qvel"))
        instance.advance(int(ticks[-1]) + 1 - instance.tick)
    except FibrilError as exc:
        raise EvaluationError(f"{label}: replay failed: {exc}") from None
    for warning in _UNSTABLE:
        if instance.data.warning[warning].number > 0:
            raise EvaluationError(f"{label}: the replay became unstable ({warning.name})")
    rows = np.searchsorted(capture.ticks, ticks)  # repeated ticks share a captured row
    return capture.values["qpos"][rows], capture.values["qvel"][rows]


def _joints(model: mujoco.MjModel, names: Sequence[str] | None, real: FrankaSource,
            label: str) -> list[int]:
    if names:
        ids = []
        for name in names:
            index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if index < 0:
                raise CalibrationError(f"{label}: no joint {name!r} in the model")
            ids.append(index)
        return ids
    count = 0
    while f"q{count + 1}" in real.header:
        count += 1
    hinges = [j for j in range(model.njnt)
              if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    if count == 0 or len(hinges) < count:
        raise CalibrationError(f"{label}: cannot tell the arm's joints: the real CSV has "
                               f"{count} q column(s), the model {len(hinges)} hinge joint(s); "
                               f"declare joint_position observations")
    return hinges[:count]


def _end_effector(model: mujoco.MjModel, name: str | None, label: str) -> tuple[int, int]:
    """(object type, id): the named site or body, else the one site the site actuators
    drive."""
    obj = mujoco.mjtObj
    if name:
        for kind in (obj.mjOBJ_SITE, obj.mjOBJ_XBODY):
            index = mujoco.mj_name2id(model, obj.mjOBJ_SITE if kind == obj.mjOBJ_SITE
                                      else obj.mjOBJ_BODY, name)
            if index >= 0:
                return int(kind), index
        raise CalibrationError(f"--sim-csv-ee {name!r}: no site or body of that name in the "
                               f"model")
    sites = sorted({int(model.actuator_trnid[a, 0]) for a in range(model.nu)
                    if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_SITE})
    if len(sites) != 1:
        found = ", ".join(mujoco.mj_id2name(model, obj.mjOBJ_SITE, s) or str(s) for s in sites)
        raise CalibrationError(f"{label}: cannot tell the end effector (site actuators drive "
                               f"{found or 'no site'}); name it with --sim-csv-ee SITE|BODY")
    return int(obj.mjOBJ_SITE), sites[0]


def _end_effector_states(model: mujoco.MjModel, kind: int, index: int, qpos: Array,
                         qvel: Array) -> Array:
    """Per row: position (3), linear velocity (3), quaternion xyzw (4), angular velocity (3),
    world frame, from the state alone (forward kinematics on a scratch MjData)."""
    data = mujoco.MjData(model)
    out = np.empty((qpos.shape[0], 13))
    velocity = np.empty(6)
    quat = np.empty(4)
    site = kind == mujoco.mjtObj.mjOBJ_SITE
    for row in range(qpos.shape[0]):
        data.qpos[:] = qpos[row]
        data.qvel[:] = qvel[row]
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        mujoco.mj_comVel(model, data)
        mujoco.mj_objectVelocity(model, data, kind, index, velocity, 0)  # [rot, lin]
        if site:
            position = data.site_xpos[index]
            mujoco.mju_mat2Quat(quat, data.site_xmat[index])
        else:
            position = data.xpos[index]
            quat[:] = data.xquat[index]
        out[row, 0:3] = position
        out[row, 3:6] = velocity[3:]
        out[row, 6:10] = (quat[1], quat[2], quat[3], quat[0])
        out[row, 10:13] = velocity[:3]
    return out


def _orientation_error(target_xyzw: Array, actual_xyzw: Array) -> Array:
    """Rotation vectors of ``q_des ⊗ conj(q)`` (shortest arc), NaN where a target is."""
    out = np.full((target_xyzw.shape[0], 3), np.nan)
    product = np.empty(4)
    conj = np.empty(4)
    for row in range(target_xyzw.shape[0]):
        target = target_xyzw[row]
        if not np.all(np.isfinite(target)):
            continue
        t = np.array([target[3], target[0], target[1], target[2]])
        a = actual_xyzw[row]
        mujoco.mju_negQuat(conj, np.array([a[3], a[0], a[1], a[2]]))
        mujoco.mju_mulQuat(product, t / np.linalg.norm(t), conj)
        if product[0] < 0:
            product = -product
        mujoco.mju_quat2Vel(out[row], product, 1.0)
    return out


def _real_column(real: FrankaSource, name: str, rows: npt.NDArray[np.intp],
                 default: Array | None) -> Array:
    if name in real.header:
        result: Array = np.asarray(real.column(name), dtype=np.float64)[rows]
        return result
    return default if default is not None else np.full(rows.shape[0], np.nan)


def _sidecar(plan: SimulationPlan, episode: EpisodeSpec, real: FrankaSource, rows: Array,
             columns: Sequence[str],
             joint_ids: list[int], ee_kind: int, ee_id: int, parameter_set: str,
             values: Mapping[str, float] | None, request_path: Path | None,
             last_tick: int) -> JsonObject:
    model = plan.model
    lab = real.sidecar
    error = rows[:, columns.index("e_x"):columns.index("e_x") + 3]
    angle = np.linalg.norm(rows[:, columns.index("e_ox"):columns.index("e_ox") + 3], axis=1)
    ee_name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SITE if ee_kind == int(
        mujoco.mjtObj.mjOBJ_SITE) else mujoco.mjtObj.mjOBJ_BODY, ee_id)
    t = rows[:, 0]
    return {
        "schema_version": 2,
        "controller": "fibril_sim_replay",
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "csv_path": None, "sidecar_path": None,  # set when written
        "real_csv": str(real.path), "real_sidecar": str(real.sidecar_path),
        "control_rate_hz": lab.get("control_rate_hz"),
        "duration_s": float(t[-1] - t[0]) if t.size else 0.0,
        "num_samples": int(rows.shape[0]),
        "q_init": lab.get("q_init"), "x_anchor": lab.get("x_anchor"),
        "q_anchor_xyzw": lab.get("q_anchor_xyzw"),
        "args": {"tool": "fibril_sim calibrate --write-sim-csv",
                 "request": None if request_path is None else str(request_path),
                 "manifest": str(plan.manifest.path), "episode": episode.id,
                 "scope": episode.scope, "window_s": (episode.source or {}).get("window_s"),
                 "parameter_set": parameter_set, "episode_seed": int(episode.seed),
                 "timestep_s": plan.timebase.timestep_s, "rollout_ticks": last_tick + 1,
                 "joints": [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j)
                            for j in joint_ids],
                 "ee": ee_name, "lab_args": lab.get("args")},
        "applied_params": {"values": dict(values or {}),
                           "overlays": strict(plan.provenance["parameters"]),
                           "parameter_set_hash": plan.provenance["parameter_set_hash"]},
        "provenance": {"episode_seed": int(episode.seed),
                       "manifest_sha256": plan.provenance["manifest_sha256"],
                       "compiled_model_sha256": plan.provenance["compiled_model_sha256"],
                       "mujoco": plan.provenance["build"]["mujoco"]},
        "summary": {
            "ticks": int(rows.shape[0]),
            "err_pos_rms_xyz": [_rms(error[:, i]) for i in range(3)],
            "err_pos_abs_max_xyz": [_max_abs(error[:, i]) for i in range(3)],
            "err_pos_inf_max": _max_abs(error),
            "err_ori_rms_rad": _rms(angle), "err_ori_max_rad": _max_abs(angle),
            "tau_J_abs_max_nm": None, "tau_J_limit_frac": None, "tau_cmd_abs_max_nm": None},
    }


def _rms(values: Array) -> float | None:
    finite = values[np.isfinite(values)]
    return math.sqrt(float(np.mean(finite ** 2))) if finite.size else None


def _max_abs(values: Array) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.max(np.abs(finite))) if finite.size else None


def csv_text(columns: Sequence[str], rows: Array) -> str:
    """The CSV: a header line, then every value at full precision (``repr``), NaN as nan."""
    lines = [",".join(columns)]
    for row in rows.tolist():
        lines.append(",".join("nan" if v != v else repr(v) for v in row))
    return "\n".join(lines) + "\n"


def write_sim_csvs(folder: Path, replays: Sequence[SimReplay]) -> dict[str, tuple[Path, Path]]:
    """``folder/<episode>/<stem>_sim.csv`` and ``_sim.json`` of each replay, atomically;
    episode id → (csv, sidecar). A folder that cannot be made is a CalibrationError."""
    names = unique_names([r.episode for r in replays])
    out: dict[str, tuple[Path, Path]] = {}
    for replay in replays:
        target = folder / names[replay.episode]
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CalibrationError(f"--write-sim-csv: cannot create the folder "
                                   f"{str(target)!r}: {exc.strerror or exc}") from None
        csv_path = target / f"{replay.stem}_sim.csv"
        sidecar_path = target / f"{replay.stem}_sim.json"
        sidecar = dict(replay.sidecar, csv_path=str(csv_path), sidecar_path=str(sidecar_path))
        write_atomic(csv_path, csv_text(replay.columns, replay.rows))
        write_atomic(sidecar_path, to_json(strict_object(sidecar)))
        out[replay.episode] = (csv_path, sidecar_path)
    return out


def arm_joints(request: CalibrationRequest) -> list[str]:
    """The request's ``joint_position`` observations' joints, in declaration order."""
    return [o.name for o in request.observations if o.source == "joint_position" and o.name]


def sim_episodes(request: CalibrationRequest) -> tuple[EpisodeSpec, ...]:
    """The episodes whose replays are written: the validation ones (the training ones when
    the request has none), as for metrics.json."""
    return tuple(request.validation or request.training)


def set_plan(request: CalibrationRequest, name: str) -> tuple[SimulationPlan, dict[str, float]]:
    """The plan and parameter values of one ``--evaluate`` set (``nominal`` or an overlay
    artifact), built as ``evaluate_parameter_sets`` builds its candidates."""
    fixed: tuple[OverlayParameter, ...] = ()
    if name == "nominal":
        chosen = nominal_set(request)
    else:
        chosen, fixed = overlay_values(request, Path(name))
    values = dict(chosen[1])
    builder = candidate_builder(
        CandidatePlanBuilder.holding((*request.fixed_overlays, *fixed)),
        request.manifest, request.parameters)
    try:
        return builder.build(values), values
    except FibrilError as exc:
        raise CalibrationError(f"--write-sim-csv: parameter set {name!r}: {exc}") from None


def replays(request: CalibrationRequest, plan: SimulationPlan, name: str,
            values: Mapping[str, float], *,
            ee: str | None = None) -> list[SimReplay]:
    """The sim CSV of every episode ``sim_episodes`` names, on ``plan``."""
    joints = arm_joints(request) or None
    return [replay_episode(plan, episode, joints=joints, ee=ee, parameter_set=name,
                           values=values, request_path=request.path)
            for episode in sim_episodes(request)]
