"""The Franka sidecar, paragraph by paragraph (franka-sysid-data-format.md): schema_version 2
is checked; the ring_log block's dropped_frames and save_error are reported per episode and
refused where their rows fall in a window unless accepted; an aborted run is refused or cut at
abort.time_s; x_anchor with q_anchor_xyzw gives anchor-relative target positions; the gains
args.kp_* / kd_* reach a request as in --sidecar-gains; the trajectory generators' target
CSV + sidecar is a source, its controller kind in the episode's source summary.

Fixtures are the document's own example shapes: its sidecar, a ring_log block with gaps,
dropped frames, a save error and an abort, and a 1 kHz target CSV."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
import yaml
from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.recordings.formats import open_source
from fibril_calibration.recordings.sources import SourceError
from fibril_calibration.request import load_calibration_request
from fibril_calibration.result import recording_warnings
from test_franka_source import SEQ_FIRST, _request, _write_run

REPO = Path(__file__).resolve().parents[2]
PANDA = REPO / "config" / "examples" / "panda"

# The document's sidecar example (its "..." filled in with numbers of the same shapes).
SPEC_SIDECAR: dict[str, Any] = {
    "schema_version": 2,
    "controller": "python_v4_chirp_excitation",
    "created_utc": "2026-01-01T00:00:00Z", "csv_path": "run.csv", "sidecar_path": "run.json",
    "control_rate_hz": 50.0, "duration_s": 8.0, "num_samples": 400,
    "amp_ramp_s": 0.0,
    "amplitude_m": {"x": 0.10, "y": 0.10, "z": 0.15},
    "amplitude_rad": {"rx": 0.50, "ry": 0.25, "rz": 0.50},
    "freq_set_hz": {"x": [0.1, 0.7]}, "phase_rad": {"x": [0.0, 0]},
    "ori_freq_set_hz": {"rx": [0.1, 0.7]}, "ori_phase_rad": {"rx": [0.0, 0]},
    "peak_rates": {"x": 0.2},
    "q_init": [0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.8],
    "x_anchor": [0.475, 0.0, 0.594],
    "q_anchor_xyzw": [0.0072917467, 0.9987236420, 0.0003648915, 0.0499778372],
    "args": {"kp_pos": 500, "kp_ori": 30, "kd_pos": 44.7, "kd_ori": 10.95,
             "duration": 8.0, "rate": 50.0, "mode": "chirp",
             "err_delta_pos_override": 0.15,
             "band": "low", "f0_hz": 0.1, "f1_hz": 0.7, "amp_taper_exp": 0.0,
             "ramp_up_s": 2.0, "ramp_down_s": 3.0},
    "abort": {"code": 0, "name": "none", "value": 0.0, "time_s": 0.0},
    "summary": {"ticks": 400, "err_pos_rms_xyz": [0.01, 0.01, 0.01],
                "err_pos_abs_max_xyz": [0.02, 0.02, 0.02], "err_pos_inf_max": 0.02,
                "err_ori_rms_rad": 0.01, "err_ori_max_rad": 0.02,
                "tau_J_abs_max_nm": [1.0] * 7, "tau_J_limit_frac": [0.1] * 7,
                "tau_cmd_abs_max_nm": [1.0] * 7},
    "ring_log": {"path": "run.csv", "targets_path": "run_targets.csv",
                 "num_frames": 600, "seq_start": SEQ_FIRST, "seq_first": SEQ_FIRST,
                 "seq_last": SEQ_FIRST + 599, "duration_s": 0.6,
                 "num_targets": 30, "gaps": [], "dropped_frames": 0, "resets": 0,
                 "poll_hz": 100.0, "log_id": 1},
}


def _spec_run(folder: Path, stem: str = "run", *, ring: dict[str, Any] | None = None,
              **changes: Any) -> Path:
    """The arm's ring log with the document's sidecar (``ring`` / ``changes`` applied)."""
    run = _write_run(folder, stem=stem)
    sidecar = copy.deepcopy(SPEC_SIDECAR)
    sidecar["q_init"] = json.loads(run.with_suffix(".json").read_text())["q_init"]
    sidecar["ring_log"].update(ring or {})
    sidecar.update(changes)
    run.with_suffix(".json").write_text(json.dumps(sidecar))
    return run


def _load(folder: Path, doc: dict[str, Any]) -> Any:
    return load_calibration_request(rig.write_request(folder, doc))


def _source(doc: dict[str, Any], **options: Any) -> dict[str, Any]:
    doc["training"][0]["source"].update(options)
    return doc


def test_the_documents_sidecar_is_read(tmp_path: Path) -> None:
    run = _spec_run(tmp_path)
    request = _load(tmp_path, _request(tmp_path, run))
    episode = request.training[0]
    assert episode.source["controller"] == "python_v4_chirp_excitation"
    assert "ring_log" not in episode.source  # a clean run: nothing to report
    assert recording_warnings(request) == []


@pytest.mark.parametrize("version", [1, 3, "2", None])
def test_another_schema_version_is_a_request_error(tmp_path: Path, version: Any) -> None:
    run = _spec_run(tmp_path, schema_version=version)
    if version is None:
        sidecar = json.loads(run.with_suffix(".json").read_text())
        del sidecar["schema_version"]
        run.with_suffix(".json").write_text(json.dumps(sidecar))
    with pytest.raises(CalibrationRequestError) as info:
        _load(tmp_path, _request(tmp_path, run))
    text = str(info.value)
    assert str(run.with_suffix(".json")) in text
    assert "understands schema_version 2" in text
    assert (f"schema_version {version!r}" if version is not None else "no schema_version") \
        in text


def test_dropped_frames_are_refused_unless_accepted_and_reported(tmp_path: Path) -> None:
    run = _spec_run(tmp_path, ring={"dropped_frames": 3})
    with pytest.raises(CalibrationRequestError) as info:
        _load(tmp_path, _request(tmp_path, run))
    text = str(info.value)
    assert "3 dropped frame(s)" in text and "accept: [dropped_frames]" in text
    assert "window 0 [0 s, 0.2 s]" in text
    request = _load(tmp_path, _source(_request(tmp_path, run), accept=["dropped_frames"]))
    for episode in request.training:
        assert episode.source["ring_log"] == {"dropped_frames": 3, "save_error": None,
                                              "accepted": ["dropped_frames"]}
    warnings = recording_warnings(request)
    assert len(warnings) == 1 and "3 dropped frame(s) in the ring log (accepted)" in \
        warnings[0]["message"]
    assert warnings[0]["episodes"] == [e.id for e in request.training]


def test_a_failed_save_is_refused_unless_accepted(tmp_path: Path) -> None:
    run = _spec_run(tmp_path, ring={"path": None, "targets_path": None,
                                    "save_error": "fetch timed out after 5 s"})
    with pytest.raises(CalibrationRequestError, match="failed save .*fetch timed out"):
        _load(tmp_path, _request(tmp_path, run))
    request = _load(tmp_path, _source(_request(tmp_path, run), accept=["save_error"]))
    report = request.training[0].source["ring_log"]
    assert report["save_error"] == "fetch timed out after 5 s"
    assert report["accepted"] == ["save_error"]


def test_the_50_hz_log_is_not_concerned_by_ring_log_problems(tmp_path: Path) -> None:
    """Dropped frames concern the 1 kHz ring log; a --log CSV's rows are reported, not
    refused."""
    run = _spec_run(tmp_path, ring={"dropped_frames": 2})
    rows = list(csv.reader(run.open()))
    seq = rows[0].index("seq")
    with run.open("w", newline="") as out:
        csv.writer(out, lineterminator="\n").writerows(
            [r[:seq] + r[seq + 2:] for r in rows])  # no seq / target_idx: the --log CSV
    request = _load(tmp_path, _request(tmp_path, run))
    assert request.training[0].source["ring_log"]["accepted"] == []
    assert "2 dropped frame(s)" in recording_warnings(request)[0]["message"]


def test_an_aborted_run_is_refused_or_truncated(tmp_path: Path) -> None:
    abort = {"code": 3, "name": "cartesian_reflex", "value": 0.31, "time_s": 0.45}
    run = _spec_run(tmp_path, abort=abort)
    with pytest.raises(CalibrationRequestError) as info:
        _load(tmp_path, _request(tmp_path, run))
    text = str(info.value)
    assert "code 3 'cartesian_reflex', value 0.31, at 0.45 s" in text
    assert "abort: truncate" in text
    doc = _source(_request(tmp_path, run), abort="truncate")
    doc["training"][0].pop("windows")
    request = _load(tmp_path, doc)
    episode = request.training[0]
    assert episode.signals[0].times_ns[-1] == 450_000_000  # rows after abort.time_s left out
    report = episode.source["ring_log"]["abort"]
    assert report == {"code": 3, "name": "cartesian_reflex", "value": 0.31, "time_s": 0.45,
                      "rows_kept": 451, "rows_left_out": 149}
    source = open_source(run, "franka_sysid", abort="truncate")
    assert source.rows == 451 and source.column("q1").shape == (451,)
    bad = _source(_request(tmp_path, run), abort="ignore")
    with pytest.raises(CalibrationRequestError, match="abort: expected one of refuse, "
                                                      "truncate, got 'ignore'"):
        _load(tmp_path, bad)


def test_accept_and_abort_belong_to_franka_sources(tmp_path: Path) -> None:
    run = _spec_run(tmp_path)
    doc = _request(tmp_path, run)
    doc["training"][0]["source"].update(format="csv", time_column="t_s",
                                        accept=["dropped_frames"])
    with pytest.raises(CalibrationRequestError, match="accept is a franka_sysid source's"):
        _load(tmp_path, doc)
    with pytest.raises(CalibrationRequestError, match="unknown 'gaps'; a franka_sysid source "
                                                      "accepts dropped_frames, save_error"):
        _load(tmp_path, _source(_request(tmp_path, run), accept=["gaps"]))


def _anchor_matrix() -> tuple[np.ndarray, np.ndarray]:
    x, y, z, w = np.array(SPEC_SIDECAR["q_anchor_xyzw"]) / np.linalg.norm(
        SPEC_SIDECAR["q_anchor_xyzw"])
    rotation = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                         [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                         [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
    return np.array(SPEC_SIDECAR["x_anchor"]), rotation


def test_x_anchor_gives_anchor_relative_target_positions(tmp_path: Path) -> None:
    n = 600
    desired = (np.column_stack([0.5 + 0.01 * np.sin(np.arange(n) / 50), np.full(n, 0.02),
                                np.full(n, 0.6)]),
               np.tile(SPEC_SIDECAR["q_anchor_xyzw"], (n, 1)))
    run = _write_run(tmp_path, desired=desired)
    sidecar = json.loads(run.with_suffix(".json").read_text())
    sidecar.update(x_anchor=SPEC_SIDECAR["x_anchor"], q_anchor_xyzw=SPEC_SIDECAR["q_anchor_xyzw"])
    run.with_suffix(".json").write_text(json.dumps(sidecar))
    source = open_source(run, "franka_sysid")
    stream = source.stream(columns=["xrel_des"])
    assert stream.components == ("xrel_des_x", "xrel_des_y", "xrel_des_z")
    origin, rotation = _anchor_matrix()
    expected = (desired[0] - origin) @ rotation  # R(q_anchor)^T (x_des - x_anchor)
    np.testing.assert_allclose(stream.values, expected, atol=1e-12)
    # the anchor orientation itself is rotvec 0 (the same frame)
    np.testing.assert_allclose(source.stream(columns=["rotvec_des"]).values, 0.0, atol=1e-9)
    del sidecar["x_anchor"]
    run.with_suffix(".json").write_text(json.dumps(sidecar))
    with pytest.raises(SourceError, match="needs x_anchor .* and q_anchor_xyzw"):
        open_source(run, "franka_sysid").stream(columns=["xrel_des"])


def _panda_request(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    doc = yaml.safe_load((PANDA / "calibration-closed-loop.yaml").read_text())
    doc["manifest"] = str(PANDA / doc["manifest"])
    for source in doc["sources"].values():
        source["path"] = str(PANDA / source["path"])
    doc.update(extra)
    return doc


def test_sidecar_gains_reach_the_request_as_fixed_overlays(tmp_path: Path) -> None:
    sidecar = json.loads((PANDA / "calibration_data" / "loop-01.json").read_text())
    sidecar["args"].update(kp_pos=400.0, kd_pos=40.0, kp_ori=25.0, kd_ori=10.0)
    (tmp_path / "gains.json").write_text(json.dumps(sidecar))
    request = _load(tmp_path, _panda_request(tmp_path, sidecar_gains={"sidecar": "gains.json"}))
    assert [(p.id, p.value) for p in request.fixed_overlays] == [
        ("kp_pos", 400.0), ("kd_pos", 40.0), ("kp_ori", 25.0), ("kd_ori", 10.0)]
    from fibril_calibration.solve.problem import CalibrationProblem

    with CalibrationProblem(request) as problem:
        plan = problem.candidate_plan(request.initial_values)
    np.testing.assert_allclose(plan.model.actuator_gainprm[:, 0], [400] * 3 + [25] * 3)
    np.testing.assert_allclose(-plan.model.actuator_biasprm[:, 2], [40] * 3 + [10] * 3)
    # by source name: the source's <stem>.json, the recorded gains (the model's own)
    request = _load(tmp_path, _panda_request(tmp_path, sidecar_gains="loop-01"))
    assert [p.value for p in request.fixed_overlays] == [500.0, 44.7, 30.0, 10.95]
    sidecar["args"]["kd_ori"] = -1
    (tmp_path / "gains.json").write_text(json.dumps(sidecar))
    with pytest.raises(CalibrationRequestError, match=r"sidecar_gains: sidecar .*gains.json.* "
                                                      r"args.kd_ori is -1, not a positive"):
        _load(tmp_path, _panda_request(tmp_path, sidecar_gains={"sidecar": "gains.json"}))
    with pytest.raises(CalibrationRequestError, match="unknown source 'nope'"):
        _load(tmp_path, _panda_request(tmp_path, sidecar_gains="nope"))


def _target_csv(folder: Path, kind: str = "v4_chirp_excitation_target") -> Path:
    """A generator's 1 kHz target: loop-03's 50 Hz targets held over 20 ticks each."""
    real = list(csv.DictReader((PANDA / "calibration_data" / "loop-03.csv").open()))
    columns = ["t_s", *(f"x_des_{c}" for c in "xyz"), *(f"dx_des_{c}" for c in "xyz"),
               *(f"quat_des_{c}" for c in "xyzw")]
    path = folder / "target.csv"
    with path.open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for k in range(len(real) * 20):
            row = real[k // 20]
            writer.writerow([f"{k / 1000:.3f}", *(row[c] for c in columns[1:])])
    sidecar = json.loads((PANDA / "calibration_data" / "loop-03.json").read_text())
    sidecar.update(controller=kind, csv_path=str(path), control_rate_hz=1000.0)
    sidecar.pop("ring_log", None)
    path.with_suffix(".json").write_text(json.dumps(sidecar))
    return path


def test_target_csv_is_a_source_for_open_loop_replay(tmp_path: Path) -> None:
    """The commanded reference drives the impedance open loop; the episode's source summary
    names the generator's controller kind; the target itself is the reference signal of the
    end effector (the tracking it allows)."""
    target = _target_csv(tmp_path)
    source = open_source(target, "franka_target")
    assert source.controller == "v4_chirp_excitation_target"
    assert source.stream(columns=["quat_des"]).components == (
        "quat_des_w", "quat_des_x", "quat_des_y", "quat_des_z")
    doc = _panda_request(tmp_path)
    doc["observations"] = [{"id": "ee", "source": "body_position", "name": "attachment"}]
    doc["sources"] = {"target": {"path": str(target), "format": "franka_target"}}
    episode = copy.deepcopy(doc["training"][0])
    episode.update(id="open-loop", source="target")
    episode["signals"] = {"ee": {"columns": ["x_des"], "alignment": "exact",
                                 "residual_scale": 0.01}}
    doc["training"], doc.pop("validation")
    doc["training"] = [episode]
    doc.pop("fit", None)
    doc["objective"] = {"standardized_gaussian_residuals": False}
    request = _load(tmp_path, doc)
    loaded = request.training[0]
    assert loaded.source["format"] == "franka_target"
    assert loaded.source["controller"] == "v4_chirp_excitation_target"
    assert len(loaded.recorded_inputs) > 0
    from fibril_calibration.parameter_sets import evaluate_parameter_sets

    scored = evaluate_parameter_sets(request, ["nominal"])["scores"]["nominal"]["training"]
    assert 0 < scored["signals"][0]["rms"][0] < 0.1  # the impedance follows its target


def test_bad_target_csvs_are_one_line_errors(tmp_path: Path) -> None:
    target = _target_csv(tmp_path, kind="python_sine")
    with pytest.raises(SourceError, match="controller 'python_sine' is not a target kind; "
                                          "expected one of multiband_excitation_target, "
                                          "multiband_pos_only_target, "
                                          "v4_chirp_excitation_target"):
        open_source(target, "franka_target")
    target = _target_csv(tmp_path)
    lines = target.read_text().splitlines()
    lines[5] = "0.0045," + lines[5].split(",", 1)[1]
    target.write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError, match=r"line 6: '0.0045' is 1.5 ms after the row before; "
                                          r"a target CSV is a 1 kHz reference"):
        open_source(target, "franka_target")


def test_the_documents_ring_log_block_with_every_problem(tmp_path: Path) -> None:
    """gaps, dropped frames and a save error in one ring_log block: accepting the dropped
    frames and the save error still refuses a window across the gap, and uses the others."""
    run = _write_run(tmp_path, drop=range(300, 321))
    sidecar = copy.deepcopy(SPEC_SIDECAR)
    sidecar["q_init"] = json.loads(run.with_suffix(".json").read_text())["q_init"]
    sidecar["ring_log"].update(gaps=[[SEQ_FIRST + 300, SEQ_FIRST + 320]], dropped_frames=7,
                               save_error="partial fetch", path=None, targets_path=None)
    run.with_suffix(".json").write_text(json.dumps(sidecar))
    accepted = _source(_request(tmp_path, run), accept=["dropped_frames", "save_error"])
    with pytest.raises(CalibrationRequestError, match="ring log gap of frames 5300..5320"):
        _load(tmp_path, accepted)
    accepted["training"][0]["windows"] = [[0.0, 0.2], [0.4, 0.6]]
    request = _load(tmp_path, accepted)
    assert [e.source["ring_log"] for e in request.training] == [
        {"dropped_frames": 7, "save_error": "partial fetch",
         "accepted": ["dropped_frames", "save_error"]}] * 2
    assert len(recording_warnings(request)) == 2
