"""Sim-vs-real scores in the lab's ``metrics.json`` shape (schema_version 1), per episode.

The lab's compare script writes one ``metrics.json`` per replayed run; ``fibril_sim calibrate
--metrics DIR`` writes the same document for every validation episode (``DIR/<episode>/
metrics.json``; with ``--evaluate``, ``DIR/<parameter set>/<episode>/metrics.json``), so the
lab's numbers and ours are compared on the same windows and with the same formulas:

* ``joints``: from the episode's joint signals (``joint_position`` / ``qpos`` observations, in
  declaration order, one joint per component; velocities from ``joint_velocity`` / ``qvel``):
  per joint ``pos_rmse_rad``, ``pos_max_abs_rad`` (sim - real), ``pos_rmse_all_rad`` over all
  joints at once and its square ``pos_mse_all_rad2``, ``pos_rmse_pct_of_motion`` (100 · rmse /
  the real joint's max - min in the episode), ``real_motion_range_rad``, ``vel_rmse_rad_s`` and
  ``vel_rmse_all_rad_s``; null without joint position signals.
* ``ee``: ``pos`` (``rmse_m`` / ``max_abs_m`` per axis and ``3d``: the RMS / max of the error's
  norm) from the first ``body_position`` signal, ``ori`` (``rmse_rad`` / ``max_rad`` of the
  shortest angle between sim and real) from the first ``body_quaternion`` signal.

* ``tracking``: each side against the Cartesian targets, with the same fields as ``ee``:
  ``real`` is ``x_des - x_real`` and the angle between the real and the target orientation,
  ``sim`` the same for the simulation. The targets are the ``x_des_*`` / ``quat_des_*`` (xyzw)
  columns of the episode's ``franka_sysid`` recording, the row in force at each real sample
  (zero-order held, as the lab's logs define them); null for other sources, without EE
  signals, or when the recording has no (finite) target columns at those times.

With ``initial_state_fit`` on the episode the document has ``initial_state_fit: true``: its
errors are the projected residuals, the simulation started from the fitted nuisance initial
state (to first order), not the lab's replay from the logged ``q_init``; the two are not
comparable as they are.

The simulated values are compared at the real sample times through the signal's alignment
(the lab interpolates the sim onto the real rows the same way).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._atomic import write_atomic
from ._json import JsonObject, JsonValue
from .alignment import quat_error, quat_multiply
from .errors import CalibrationError
from .recordings.franka import episode_recording
from .recordings.sources import SourceError
from .result import strict_object, to_json

if TYPE_CHECKING:
    from .evaluation import Evaluation
    from .recordings.franka import FrankaSource
    from .request.document import CalibrationRequest
    from .request.episode_specs import EpisodeSpec

Array = npt.NDArray[np.float64]
#: (physical errors (n, r), recorded values (n, d), sample times ns (n,)) of one signal
SignalErrors = tuple[Array, Array, npt.NDArray[np.int64]]
#: episode id → its metrics.json document
MetricsDocuments = dict[str, JsonObject]

__all__ = ["metrics_documents", "name_sim_files", "name_sysid_params", "safe_name",
           "unique_names", "write_metrics"]

_JOINT_POSITION = ("joint_position", "qpos")
_JOINT_VELOCITY = ("joint_velocity", "qvel")


def metrics_documents(request: CalibrationRequest, evaluation: Evaluation, scope: str,
                      parameter_set: str, provenance: Mapping[str, JsonValue] | None = None
                      ) -> MetricsDocuments:
    """Episode id → its metrics.json document for one scope's evaluation."""
    observations = {o.id: o for o in request.observations}
    episodes = {e.id: e for e in request.episodes(scope)}
    errors: dict[str, dict[str, SignalErrors]] = {}
    for block in evaluation.blocks:
        observation = observations[block.signal]
        signal = episodes[block.episode].signal(block.signal)
        width = observation.residual_dimension
        physical = (evaluation.unweighted[block.start:block.stop].reshape(-1, width)
                    * signal.residual_scales)
        errors.setdefault(block.episode, {})[block.signal] = (physical, signal.values,
                                                             signal.times_ns)
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out: MetricsDocuments = {}
    recordings: dict[tuple[str, str | None], FrankaSource | None] = {}
    for episode_id, signals in errors.items():
        episode = episodes[episode_id]
        order = [o for o in request.observations if o.id in signals]
        positions = [signals[o.id] for o in order if o.source in _JOINT_POSITION]
        velocities = [signals[o.id] for o in order if o.source in _JOINT_VELOCITY]
        ee_pos = next((signals[o.id] for o in order if o.source == "body_position"), None)
        ee_ori = next((signals[o.id] for o in order if o.quaternion), None)
        first = positions[0] if positions else next(iter(signals.values()))
        times = first[2]
        source = episode.source or {}
        path = source.get("path") or (str(episode.recording) if episode.recording else None)
        targets = _targets(episode, recordings)
        sidecar = None
        if source.get("format") == "franka_sysid" and path:
            sidecar = source.get("sidecar") or str(Path(path).with_suffix(".json"))
        document: JsonObject = {
            "schema_version": 1, "created_utc": created,
            "real_csv": path, "sim_csv": None, "real_sidecar": sidecar, "sim_sidecar": None,
            "sysid_params": _sysid_params(provenance),
            "parameter_set": parameter_set, "episode": episode_id, "scope": scope,
            "episode_seed": int(episode.seed),
            "window_s": source.get("window_s"),
            "num_samples": int(times.shape[0]),
            "duration_s": float((times[-1] - times[0]) / 1e9) if times.shape[0] else 0.0,
            "ee": ee_metrics(ee_pos, ee_ori),
            "joints": _joints(positions, velocities),
            "tracking": _tracking(episode, ee_pos, ee_ori, targets),
        }
        if episode.initial_state_fit:
            document["initial_state_fit"] = True
            document["initial_state_fit_note"] = (
                "sim from the fitted nuisance initial state (projected residuals), not a "
                "replay from the logged state: not comparable with replay-from-q_init metrics")
        out[episode_id] = document
    return out


def _targets(episode: EpisodeSpec, cache: dict[tuple[str, str | None], FrankaSource | None]
             ) -> FrankaSource | None:
    """The episode's franka_sysid recording (opened once per path), or None."""
    source = episode.source or {}
    if source.get("format") != "franka_sysid" or not source.get("path"):
        return None
    sidecar = source.get("sidecar")
    key = (str(source["path"]), None if sidecar is None else str(sidecar))
    if key not in cache:
        try:
            cache[key] = episode_recording(source)
        except SourceError:
            cache[key] = None
    return cache[key]


def _tracking(episode: EpisodeSpec, position: SignalErrors | None,
              orientation: SignalErrors | None, recording: FrankaSource | None
              ) -> JsonObject | None:
    """``{"real": {pos, ori}, "sim": {pos, ori}}``: each side against the targets in force."""
    if recording is None or (position is None and orientation is None):
        return None
    info = episode.source or {}
    start = int(info.get("start_ns", info.get("origin_ns") or 0))
    sides: dict[str, JsonObject] = {"real": {}, "sim": {}}

    def rows(times: npt.NDArray[np.int64]) -> npt.NDArray[np.intp] | None:
        index = np.searchsorted(recording.times_ns, start + times, "right") - 1
        return None if (index < 0).any() else index

    def columns(names: list[str], index: npt.NDArray[np.intp]) -> Array | None:
        try:
            values = np.column_stack([recording.column(n) for n in names])[index]
        except SourceError:
            return None
        return values if np.all(np.isfinite(values)) else None

    if position is not None:
        error, real, times = position
        index = rows(times)
        desired = None if index is None else columns([f"x_des_{c}" for c in "xyz"], index)
        if desired is not None:
            for side, actual in (("real", real), ("sim", real + error)):
                sides[side]["pos"] = _position_metrics(desired - actual)
    if orientation is not None:
        error, real, times = orientation
        index = rows(times)
        desired = None if index is None else columns([f"quat_des_{c}" for c in "wxyz"], index)
        if desired is not None:
            simulated = quat_multiply(real, _quat_exp(error))  # error = log(conj(real) ⊗ sim)
            for side, actual in (("real", real), ("sim", simulated)):
                sides[side]["ori"] = _orientation_metrics(quat_error(actual, desired))
    if not sides["real"]:
        return None
    return {side: metrics for side, metrics in sides.items()}


def _quat_exp(rotvec: Array) -> Array:
    """The unit quaternion (wxyz) of rotation vectors."""
    angle = np.linalg.norm(rotvec, axis=-1, keepdims=True)
    half = 0.5 * angle
    scale = np.where(angle > 1e-12, np.sin(half) / np.where(angle > 1e-12, angle, 1.0), 0.5)
    return np.concatenate([np.cos(half), rotvec * scale], axis=-1)


def _joints(positions: list[SignalErrors], velocities: list[SignalErrors]
            ) -> JsonObject | None:
    if not positions:
        return None
    errors = [e[:, c] for e, _, _ in positions for c in range(e.shape[1])]
    real = [v[:, c] for _, v, _ in positions for c in range(v.shape[1])]
    rmse = [_rms(e) for e in errors]
    ranges = [float(np.max(r) - np.min(r)) for r in real]
    pooled = np.concatenate(errors)
    out: JsonObject = {
        "pos_rmse_rad": rmse,
        "pos_max_abs_rad": [float(np.max(np.abs(e))) for e in errors],
        "pos_rmse_all_rad": _rms(pooled),
        "pos_mse_all_rad2": float(np.mean(pooled ** 2)),
        "pos_rmse_pct_of_motion": [100.0 * r / m if m > 0 else None
                                   for r, m in zip(rmse, ranges)],
        "real_motion_range_rad": ranges,
    }
    if velocities:
        vel = [e[:, c] for e, _, _ in velocities for c in range(e.shape[1])]
        out["vel_rmse_rad_s"] = [_rms(e) for e in vel]
        out["vel_rmse_all_rad_s"] = _rms(np.concatenate(vel))
    return out


def ee_metrics(position: Sequence[npt.NDArray[np.generic] | None] | None,
               orientation: Sequence[npt.NDArray[np.generic] | None] | None
               ) -> JsonObject | None:
    """The end-effector errors of metrics.json: ``pos`` from position errors (the first
    array: one xyz row per sample), ``ori`` from rotation vectors; None without either."""
    if position is None and orientation is None:
        return None
    out: JsonObject = {}
    if position is not None:
        out["pos"] = _position_metrics(np.asarray(position[0], dtype=np.float64))
    if orientation is not None:
        out["ori"] = _orientation_metrics(np.asarray(orientation[0], dtype=np.float64))
    return out


def _position_metrics(e: Array) -> JsonObject:
    norms = np.linalg.norm(e, axis=1)
    return {"rmse_m": {**{a: _rms(e[:, i]) for i, a in enumerate("xyz")}, "3d": _rms(norms)},
            "max_abs_m": {**{a: float(np.max(np.abs(e[:, i]))) for i, a in enumerate("xyz")},
                          "3d": float(np.max(norms))}}


def _orientation_metrics(rotation_vectors: Array) -> dict[str, float]:
    angles = np.linalg.norm(rotation_vectors, axis=1)  # |rotation vector| = shortest angle
    return {"rmse_rad": _rms(angles), "max_rad": float(np.max(angles))}


def _rms(values: Array) -> float:
    return math.sqrt(float(np.mean(np.square(values)))) if values.size else 0.0


def _sysid_params(provenance: Mapping[str, JsonValue] | None) -> str | None:
    """The lab's ``sysid_best_params.json`` the set's values came from: the file an
    evaluated overlay artifact was imported from (``sysid_import``), else None (the fitted
    set's is named once written: ``name_sysid_params``)."""
    origin = dict(provenance or {}).get("from")
    if not isinstance(origin, str) or not origin or not Path(origin).is_file():
        return None
    try:
        source = json.loads(Path(origin).read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(source, dict) and source.get("format") == "sysid_best_params.json":
        path: str | None = source.get("path")
        return path
    return None


def name_sysid_params(documents: MetricsDocuments, path: Path) -> None:
    """``sysid_params`` of every episode's document: the sysid_best_params.json written."""
    for document in documents.values():
        document["sysid_params"] = str(path)


def name_sim_files(documents: MetricsDocuments,
                   files: Mapping[str, tuple[Path, Path]]) -> None:
    """``sim_csv`` / ``sim_sidecar`` of each episode's document: the files
    ``--write-sim-csv`` wrote for it (null otherwise)."""
    for episode, (csv, sidecar) in files.items():
        if episode in documents:
            documents[episode]["sim_csv"] = str(csv)
            documents[episode]["sim_sidecar"] = str(sidecar)


def safe_name(text: str) -> str:
    """A file name made from an episode id or a parameter set name: '/' → '-', anything but
    letters, digits, '.', '_' and '-' → '_', never empty, '.', '..' or hidden (it cannot leave
    the folder it is written in)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", text.replace("/", "-").replace("\\", "-"))
    if not name or name.startswith("."):
        name = "_" + name
    return name


def unique_names(names: Sequence[str]) -> dict[str, str]:
    """``safe_name`` of each name, made distinct (a later clash gets ``-2``, ``-3``, ...)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for text in names:
        base = candidate = safe_name(text)
        n = 1
        while candidate.lower() in taken:  # case-insensitive file systems too
            n += 1
            candidate = f"{base}-{n}"
        taken.add(candidate.lower())
        out[text] = candidate
    return out


def write_metrics(folder: Path, documents: Mapping[str, Mapping[str, JsonValue]]
                  ) -> list[Path]:
    """``folder/<episode>/metrics.json`` for each document (episode ids made safe file names
    by ``unique_names``); each file written atomically. A folder that cannot be made or written
    is a CalibrationError naming it."""
    paths = []
    names = unique_names(list(documents))
    for episode, document in documents.items():
        target = folder / names[episode] / "metrics.json"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CalibrationError(f"--metrics: cannot create the folder "
                                   f"{str(target.parent)!r}: {exc.strerror or exc}") from None
        body = dict(document)
        body["out_dir"] = str(target.parent)
        body["metrics_path"] = str(target)
        write_atomic(target, to_json(strict_object(body)))
        paths.append(target)
    return paths
