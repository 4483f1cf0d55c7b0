"""The Franka sysid CSV + sidecar layout as a named source (``format: franka_sysid``): a 1 kHz
ring log (time from ``seq``) of the two-joint torque arm of ``_recording_rig`` recovers the
true damping over windows; quaternion columns (xyzw) come out wxyz; sidecar ``q_init`` gives
the first window's state; ring-log gaps and resets refuse the windows that cross them.
"""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.engine import run_calibration
from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.request import load_calibration_request
from fibril_calibration.recordings.sources import SourceError
from fibril_calibration.recordings.formats import open_source

SEQ_FIRST = 5000
DURATION = 0.6


def _write_run(folder: Path, *, drop: range | None = None, ring: dict[str, Any] | None = None,
               stem: str = "run", pose: tuple[np.ndarray, np.ndarray] | None = None,
               desired: tuple[np.ndarray, np.ndarray] | None = None) -> Path:
    """A ring log of the arm; ``pose`` (x (n, 3), quat xyzw (n, 4)) replaces the constant EE
    columns, ``desired`` (the same shapes) adds x_des_* / quat_des_* columns."""
    manifest = rig.write_arm(folder)
    ticks = int(DURATION * 1000)
    k = np.arange(ticks)
    torques = np.column_stack([0.3 * np.sin(2 * np.pi * 3 * k / 1000),
                               0.25 * np.cos(2 * np.pi * 5 * k / 1000)])
    q, dq = rig.truth(manifest, k * rig.DT, torques, DURATION)
    path = folder / f"{stem}.csv"
    with path.open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["t_s", "period_ms", "q1", "q2", "dq1", "dq2", "x_x", "x_y", "x_z",
                         "quat_x", "quat_y", "quat_z", "quat_w", "tau1", "tau2", "tau_J1",
                         "tau_J2", "seq", "target_idx"]
                        + ([f"x_des_{c}" for c in "xyz"] + [f"quat_des_{c}" for c in "xyzw"]
                           if desired is not None else []))
        for n in range(ticks):
            if drop is not None and n in drop:
                continue
            ee = (["0.5", "0.0", "0.4", "0.0", "0.0", "0.6", "0.8"] if pose is None else
                  [*map(repr, pose[0][n].tolist()), *map(repr, pose[1][n].tolist())])
            extra = ([] if desired is None else
                     [*map(repr, desired[0][n].tolist()), *map(repr, desired[1][n].tolist())])
            writer.writerow([f"{n / 1000:.3f}", "1.0", *map(repr, q[n].tolist()),
                             *map(repr, dq[n].tolist()), *ee, *map(repr, torques[n].tolist()), "nan", "nan", SEQ_FIRST + n,
                             _in_force(n), *extra])
    sidecar = {"schema_version": 2, "controller": "synthetic", "control_rate_hz": 50.0,
               "q_init": q[0].tolist(), "args": {"kp_pos": 500, "kd_pos": 44.7},
               "ring_log": {"seq_first": SEQ_FIRST, "seq_last": SEQ_FIRST + ticks - 1,
                            "gaps": [], "resets": 0, **(ring or {})}}
    path.with_suffix(".json").write_text(json.dumps(sidecar))
    return path


def _in_force(n: int) -> int:
    """The run row's ``target_idx``: setpoint k (head ``SEQ_FIRST + 20 k``, see
    ``_write_targets``) is in force from seq = head + 1 (the data-format document), so from row
    ``20 k + 1``; row 0 is before the first (-1)."""
    return (n - 1) // 20


def _request(folder: Path, run: Path, **episode: Any) -> dict[str, Any]:
    doc = rig.request(folder / "arm.yaml", {"path": str(run), "format": "franka_sysid"},
                      csv_log=True, windows={"every": 0.2})
    doc["training"][0]["signals"]["q"]["columns"] = ["q"]  # the q1..qN group
    doc["training"][0].update(episode)
    return doc


def _load(folder: Path, doc: dict[str, Any]) -> Any:
    return load_calibration_request(rig.write_request(folder, doc))


def test_ring_log_recovers_the_truth_with_seq_time(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    request = _load(tmp_path, _request(tmp_path, run))
    assert [e.id for e in request.training] == ["arm/w000", "arm/w001"]  # 0.6 s: 599 rows
    episode = request.training[1]
    assert episode.signals[0].times_ns[0] == 0
    assert episode.source["format"] == "franka_sysid"
    timing = episode.source["input_timing"]["next_tick"]
    assert timing["moved"] == 0  # the ring log is on the 1 kHz grid
    result = run_calibration(request)
    for joint, value in rig.TRUTH.items():
        assert result.fitted_values[f"d_{joint}"] == pytest.approx(value, rel=1e-6)


def test_sidecar_initial_state_and_column_groups(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    source = open_source(run, "franka_sysid")
    stream = source.stream(columns=["quat"])
    assert stream.components == ("quat_w", "quat_x", "quat_y", "quat_z")
    np.testing.assert_array_equal(stream.values[0], [0.8, 0.0, 0.0, 0.6])
    assert source.stream(columns=["tau"]).components == ("tau1", "tau2")
    assert source.stream(columns=["x"]).components == ("x_x", "x_y", "x_z")
    assert source.times_ns[5] == 5_000_000
    # tau_J is NaN (a daemon before shm v3): named only when a request maps it
    with pytest.raises(SourceError, match=r"600 row\(s\) with NaN"):
        source.stream(columns=["tau_J"])
    state = [{"type": "joint", "joint": j, "qpos_from": {"sidecar": "q_init", "index": n},
              "qvel": [0.0]} for n, j in enumerate(rig.JOINTS)]
    doc = _request(tmp_path, run, initial_state=state, windows=[[0.0, 0.3]])
    request = _load(tmp_path, doc)
    assert request.training[0].initial_state[0]["qpos"] == [0.0]
    doc = _request(tmp_path, run, initial_state=state)
    with pytest.raises(CalibrationRequestError, match="a sidecar value is the state at the "
                                                      "run's first row"):
        _load(tmp_path, doc)
    bad = copy.deepcopy(state)
    bad[0]["qpos_from"] = {"sidecar": "q_final"}
    with pytest.raises(CalibrationRequestError, match="has no 'q_final'"):
        _load(tmp_path, _request(tmp_path, run, initial_state=bad))


def test_windows_crossing_ring_log_gaps_or_resets_are_refused(tmp_path: Path) -> None:
    run = _write_run(tmp_path, drop=range(300, 321),
                     ring={"gaps": [[SEQ_FIRST + 300, SEQ_FIRST + 320]]})
    with pytest.raises(CalibrationRequestError) as info:
        _load(tmp_path, _request(tmp_path, run))
    text = str(info.value)
    assert "window 1 [0.2 s, 0.4 s]" in text and "ring log gap of frames 5300..5320" in text
    doc = _request(tmp_path, run, windows=[[0.0, 0.2], [0.4, 0.6]])
    assert len(_load(tmp_path, doc).training) == 2
    run = _write_run(tmp_path, ring={"resets": 1}, stem="reset")
    with pytest.raises(CalibrationRequestError, match="1 controller reset"):
        _load(tmp_path, _request(tmp_path, run))
    (tmp_path / "reset.json").unlink()
    with pytest.raises(CalibrationRequestError, match="sidecar .* does not exist"):
        _load(tmp_path, _request(tmp_path, run))


# --------------------------------------------------------------------------- ring-log targets

def _write_targets(run: Path, rows: list[list[Any]] | None = None,
                   header: list[str] | None = None, num_targets: int | None = None) -> Path:
    """``<stem>_targets.csv``: a setpoint every 20 frames, in force one frame after its head
    (``seq_effective`` = head + 1, as the daemon writes it)."""
    header = header or ["target_idx", "head", "seq_effective", "x_des_x", "x_des_y", "x_des_z",
                        "quat_des_x", "quat_des_y", "quat_des_z", "quat_des_w"]
    if rows is None:
        rows = [[k, SEQ_FIRST + 20 * k, SEQ_FIRST + 20 * k + 1, 0.1 * k, 0.2, 0.3 + 0.01 * k,
                 0.0, 0.0, 0.6, 0.8] for k in range(30)]
    path = run.with_name(f"{run.stem}_targets.csv")
    with path.open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    sidecar = json.loads(run.with_suffix(".json").read_text())
    sidecar["q_anchor_xyzw"] = [0.0, 0.0, 0.0, 1.0]
    sidecar["ring_log"]["num_targets"] = len(rows) if num_targets is None else num_targets
    run.with_suffix(".json").write_text(json.dumps(sidecar))
    return path


def test_ring_log_targets_are_columns_at_their_effective_times(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    _write_targets(run)
    source = open_source(run, "franka_sysid")
    stream = source.stream(columns=["targets.x_des"])
    assert stream.components == ("targets.x_des_x", "targets.x_des_y", "targets.x_des_z")
    assert stream.times_ns[:3].tolist() == [1_000_000, 21_000_000, 41_000_000]
    np.testing.assert_allclose(stream.values[2], [0.2, 0.2, 0.32])
    assert "_targets.csv" in stream.label
    quat = source.stream(columns=["targets.quat_des"])
    assert quat.components[0] == "targets.quat_des_w"
    np.testing.assert_array_equal(quat.values[0], [0.8, 0.0, 0.0, 0.6])
    rotvec = source.stream(columns=["targets.rotvec_des"]).values[0]
    np.testing.assert_allclose(rotvec, [0.0, 0.0, 2 * np.arctan2(0.6, 0.8)])
    assert source.stream(columns=["targets.head"]).values[1, 0] == SEQ_FIRST + 20
    with pytest.raises(SourceError, match="mix the run's rows and its targets file's"):
        source.stream(columns=["q1", "targets.x_des_x"])
    with pytest.raises(SourceError, match=r"_targets.csv' has no column 'x_des_w'"):
        source.stream(columns=["targets.x_des_w"])


def test_ring_log_targets_drive_windowed_inputs(tmp_path: Path) -> None:
    """Targets as recorded inputs (here, for the torque arm, two setpoint columns as torques):
    each window gets the setpoint in force at its start and the changes inside it."""
    run = _write_run(tmp_path)
    _write_targets(run)
    doc = _request(tmp_path, run)
    doc["training"][0]["inputs"] = [{"endpoints": {"targets.x_des_y": "j1/command",
                                                   "targets.x_des_z": "j2/command"},
                                     "mode": "torque", "commit": "next_tick"}]
    # the targets start 1 ms after the run: windows would start there (where every stream has
    # data); start: 0 keeps them on the run's 0.2 s grid
    doc["training"][0]["windows"]["start"] = 0.0
    request = _load(tmp_path, doc)
    second = request.training[1]  # [0.2 s, 0.4 s]
    j2 = [r for r in second.recorded_inputs if r.source_id == "j2/command"]
    values = [json.loads(r.payload_json)["value"] for r in j2]
    ticks = [r.commit_tick for r in j2]
    assert values[:2] == pytest.approx([0.3 + 0.01 * 9, 0.3 + 0.01 * 10])  # held, then 201 ms
    assert ticks[:2] == [0, 1]


def test_targets_are_placed_at_head_plus_one_not_at_a_late_seq_effective(
        tmp_path: Path) -> None:
    """The data-format document: setpoint k is in force from seq = head_k + 1; a file written
    by scripts/shm_log.py has seq_effective late by up to one poll period (here 7 frames).
    The rows go at head + 1, the lateness is reported, and the run's target_idx agrees."""
    run = _write_run(tmp_path)
    rows = [[k, SEQ_FIRST + 20 * k, SEQ_FIRST + 20 * k + 1 + (7 if k % 2 else 0), 0.1 * k, 0.2,
             0.3, 0.0, 0.0, 0.0, 1.0] for k in range(30)]
    _write_targets(run, rows)
    source = open_source(run, "franka_sysid")
    stream = source.stream(columns=["targets.x_des_x"])
    assert stream.times_ns[:3].tolist() == [1_000_000, 21_000_000, 41_000_000]
    report = source.targets_report
    assert report["seq_effective_late_max_ticks"] == 7
    assert report["seq_effective_late_rows"] == 15
    # every setpoint change of the 599-row run (targets 0..29) checked, all exact
    assert report["run_target_idx"] == {"checked": 30, "exact": 30, "off_by_one": 0}
    doc = _request(tmp_path, run)
    doc["training"][0]["inputs"] = [{"endpoints": {"targets.x_des_x": "j1/command"},
                                     "mode": "torque", "commit": "next_tick"}]
    request = _load(tmp_path, doc)
    assert request.training[0].source["ring_targets"]["seq_effective_late_max_ticks"] == 7


def test_run_target_idx_disagreeing_with_head_is_refused(tmp_path: Path) -> None:
    """One tick of disagreement is the document's uncertainty (reported); two are refused,
    naming the run's line and the targets file's line."""
    run = _write_run(tmp_path)
    rows = [[k, SEQ_FIRST + 20 * k, SEQ_FIRST + 20 * k + 1, 0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 1.0]
            for k in range(30)]
    rows[3][1] -= 1  # target 3 in force one frame earlier than the run says
    _write_targets(run, rows)
    source = open_source(run, "franka_sysid")
    source.stream(columns=["targets.x_des_x"])
    assert source.targets_report["run_target_idx"] == {"checked": 30, "exact": 29,
                                                       "off_by_one": 1}
    rows[3][1] -= 1
    _write_targets(run, rows)
    source = open_source(run, "franka_sysid")
    with pytest.raises(SourceError, match=r"run.csv' column 'target_idx' line 63: target 3 is "
                                          r"first in force at seq 5061, but .*run_targets.csv' "
                                          r"line 5 has head 5058 \(in force from seq 5059: "
                                          r"\+2 tick\(s\)"):
        source.stream(columns=["targets.x_des_x"])


@pytest.mark.parametrize(("edit", "message"), [
    ("missing", r"its ring-log targets file '.*run_targets.csv' does not exist"),
    ("column", r"run_targets.csv' \(ring-log targets of .*\) has no column\(s\) quat_des_w"),
    ("order", r"run_targets.csv' column 'target_idx' line 4: expected 2 .*got 5"),
    ("integer", r"run_targets.csv' column 'seq_effective' line 3: '5021.5' is not an integer"),
    ("backwards", r"run_targets.csv' column 'head': time goes backwards at line 4"),
    ("count", r"has 30 target row\(s\), the sidecar .* ring_log.num_targets says 31"),
    ("short", r"run.csv' column 'target_idx' line 203: target 10 is not in .*\(10 row\(s\)\)"),
    ("nan", r"run_targets.csv' column 'x_des_x' line 2: 'oops' is not a number"),
])
def test_bad_targets_files_name_file_column_and_row(tmp_path: Path, edit: str,
                                                    message: str) -> None:
    run = _write_run(tmp_path)
    rows = [[k, SEQ_FIRST + 20 * k, SEQ_FIRST + 20 * k + 1, 0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 1.0]
            for k in range(30)]
    header = None
    count = None
    if edit == "column":
        header = ["target_idx", "head", "seq_effective", "x_des_x", "x_des_y", "x_des_z",
                  "quat_des_x", "quat_des_y", "quat_des_z", "w"]
    elif edit == "order":
        rows[2][0] = 5
    elif edit == "integer":
        rows[1][2] = "5021.5"
    elif edit == "backwards":
        rows[2][1] = SEQ_FIRST
    elif edit == "count":
        count = 31
    elif edit == "short":
        rows = rows[:10]
    elif edit == "nan":
        rows[0][3] = "oops"
    if edit != "missing":
        _write_targets(run, rows, header, count)
    source = open_source(run, "franka_sysid")
    with pytest.raises(SourceError, match=message):
        source.stream(columns=["targets.x_des_x"])


def test_nan_in_a_derived_target_group_names_the_line(tmp_path: Path) -> None:
    """A NaN quat_des cell under rotvec_des (a column computed from several): the error names
    the CSV line and the time into the recording, in the run's file and in its targets file
    (issue 24 item 7: CSV errors name lines; it gave only a time)."""
    ticks = int(DURATION * 1000)
    x_des = np.tile([0.5, 0.0, 0.4], (ticks, 1))
    quat_des = np.tile([0.0, 0.0, 0.6, 0.8], (ticks, 1))
    quat_des[10:13, 3] = np.nan  # rows 10-12: lines 12-14
    run = _write_run(tmp_path, desired=(x_des, quat_des))
    sidecar = json.loads(run.with_suffix(".json").read_text())
    sidecar["q_anchor_xyzw"] = [0.0, 0.0, 0.0, 1.0]
    run.with_suffix(".json").write_text(json.dumps(sidecar))
    source = open_source(run, "franka_sysid")
    with pytest.raises(SourceError) as info:
        source.stream(columns=["rotvec_des"])
    assert ("columns quat_des_*: 3 row(s) with NaN, the first at 0.01 s into the recording "
            "(stamp 0.010000000 s) (line 12)") in str(info.value)
    rows = [[k, SEQ_FIRST + 20 * k, SEQ_FIRST + 20 * k + 1, 0.1, 0.2, 0.3, 0.0, 0.0, 0.6, 0.8]
            for k in range(30)]
    rows[3][9] = "nan"  # target 3: line 5, in force from seq 5061 (0.061 s)
    _write_targets(run, rows)
    source = open_source(run, "franka_sysid")
    with pytest.raises(SourceError) as info:
        source.stream(columns=["targets.rotvec_des"])
    assert "run_targets.csv' columns quat_des_*: 1 row(s) with NaN" in str(info.value)
    assert "(stamp 0.061000000 s) (line 5)" in str(info.value)


# --------------------------------------------------------------------------- metrics tracking

def _link2_pose(manifest: Path, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward kinematics of the arm's link2 (world position, wxyz) at each row of ``q``."""
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(manifest.parent / "arm.xml"))
    data = mujoco.MjData(model)
    body = model.body("link2").id
    xpos, xquat = [], []
    for row in q:
        data.qpos[:] = row
        mujoco.mj_kinematics(model, data)
        xpos.append(data.xpos[body].copy())
        xquat.append(data.xquat[body].copy())
    return np.array(xpos), np.array(xquat)


def _nominal_rollout(manifest: Path, q: np.ndarray, v: np.ndarray, torques: np.ndarray,
                     rows: np.ndarray) -> np.ndarray:
    """qpos at ``rows`` of the arm at its nominal damping (the XML's), from the true state at
    the first row, each tick's torque applied over the step after it (commit next_tick)."""
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(manifest.parent / "arm.xml"))
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = q[rows[0]], v[rows[0]]
    out = [data.qpos.copy()]
    for tick in rows[:-1]:
        data.ctrl[:] = torques[tick]
        mujoco.mj_step(model, data)
        out.append(data.qpos.copy())
    return np.array(out)


def _angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The shortest angle between unit quaternions (rows)."""
    return 2 * np.arccos(np.clip(np.abs(np.sum(a * b, axis=1)), 0.0, 1.0))


def test_metrics_tracking_against_a_hand_computation(tmp_path: Path) -> None:
    """tracking.real / tracking.sim: the targets in force minus each side's EE pose, by the
    data-format document's formulas applied to forward kinematics of a nominal rollout."""
    from fibril_sim_core.cli import main

    manifest = rig.write_arm(tmp_path)
    ticks = int(DURATION * 1000)
    k = np.arange(ticks)
    torques = np.column_stack([0.3 * np.sin(2 * np.pi * 3 * k / 1000),
                               0.25 * np.cos(2 * np.pi * 5 * k / 1000)])
    q_true, v_true = rig.truth(manifest, k * rig.DT, torques, DURATION)
    x_real, quat_real = _link2_pose(manifest, q_true[:ticks])
    held = (k // 20) * 20  # targets change every 20 ticks (zero-order held)
    x_des = x_real[held] + np.array([0.01, -0.02, 0.005])
    yaw = 0.05 * np.sin(2 * np.pi * k[held] / 1000)
    quat_des = np.column_stack([np.cos(yaw / 2), 0 * yaw, 0 * yaw, np.sin(yaw / 2)])  # wxyz
    run = _write_run(tmp_path, pose=(x_real, quat_real[:, [1, 2, 3, 0]]),
                     desired=(x_des, quat_des[:, [1, 2, 3, 0]]))
    doc = _request(tmp_path, run, windows=[[0.1, 0.5]])
    doc["observations"] += [{"id": "p", "source": "body_position", "name": "link2"},
                            {"id": "o", "source": "body_quaternion", "name": "link2"}]
    episode = doc["training"].pop(0)
    episode["id"] = "held"
    episode["signals"]["p"] = {"columns": ["x"], "alignment": "exact", "residual_scale": 1e-3}
    episode["signals"]["o"] = {"columns": ["quat"], "alignment": "exact",
                               "residual_scale": 1e-3}
    training = copy.deepcopy(episode)
    training["id"] = "train"
    doc["training"] = [training]
    doc["validation"] = [episode]
    code = main(["calibrate", str(rig.write_request(tmp_path, doc)), "--quiet", "--evaluate",
                 "nominal", "--metrics", str(tmp_path / "metrics")])
    assert code == 0
    written = json.loads((tmp_path / "metrics" / "nominal" / "held-w000" / "metrics.json")
                         .read_text())
    rows = np.arange(100, 501)  # [0.1 s, 0.5 s]
    x_sim, quat_sim = _link2_pose(manifest, _nominal_rollout(manifest, q_true, v_true,
                                                             torques, rows))
    tracking = written["tracking"]
    for side, x, quat in (("real", x_real[rows], quat_real[rows]), ("sim", x_sim, quat_sim)):
        error = x_des[rows] - x
        norms = np.linalg.norm(error, axis=1)
        pos = tracking[side]["pos"]
        for i, axis in enumerate("xyz"):
            assert pos["rmse_m"][axis] == pytest.approx(np.sqrt(np.mean(error[:, i] ** 2)),
                                                        rel=1e-7, abs=1e-12)
            assert pos["max_abs_m"][axis] == pytest.approx(np.max(np.abs(error[:, i])),
                                                           rel=1e-7, abs=1e-12)
        assert pos["rmse_m"]["3d"] == pytest.approx(np.sqrt(np.mean(norms ** 2)), rel=1e-7)
        assert pos["max_abs_m"]["3d"] == pytest.approx(np.max(norms), rel=1e-7)
        angles = _angle(quat, quat_des[rows])
        ori = tracking[side]["ori"]
        assert ori["rmse_rad"] == pytest.approx(np.sqrt(np.mean(angles ** 2)), rel=1e-6)
        assert ori["max_rad"] == pytest.approx(np.max(angles), rel=1e-6)
    assert tracking["sim"]["pos"] != tracking["real"]["pos"]
