"""The calibration report (issue 25): an HTML page that names everything the request holds,
figures that are real PNGs with content, a nominal-vs-fitted table that equals a recomputation
from the residuals, sections that say why they are empty, the fitted MJCF export, and the
one-line error without matplotlib."""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from _calibration_rig import request_doc, samples, synthesize, write_request, write_rig  # noqa: E402
from _report_checks import check_figures as _check_figures  # noqa: E402
from _report_checks import parse as _parse  # noqa: E402
from fibril_calibration.cli import main as calibrate_main  # noqa: E402
from fibril_calibration.report import error_summary, write_report  # noqa: E402
from fibril_calibration.report.series import floor_entries, score_entries  # noqa: E402
from fibril_calibration.report.synthetic import synthetic_result  # noqa: E402


def test_synthetic_report_names_everything_and_draws_real_figures(tmp_path: Path) -> None:
    # six episodes: drawn on one reused figure (figures.EpisodePainter)
    document, series = synthetic_result(episodes=6, signals=3, samples=300, parameters=3,
                                        quaternion=True)
    index = write_report(document, tmp_path / "report", series)
    assert index == tmp_path / "report" / "index.html"
    page = _parse(tmp_path / "report")
    text = " ".join(page.text)
    for p in document["parameter_contract"]:
        assert p["id"] in text
    for s in series:
        assert s.episode in text and s.signal in text
    assert "plausible_fit" in text and "validation" in text
    _check_figures(tmp_path / "report", page)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging left over"


def test_error_table_equals_a_recomputation_from_the_residuals(tmp_path: Path) -> None:
    document, series = synthetic_result(episodes=4, signals=2, samples=150, parameters=2)
    summary = error_summary(score_entries(series, ["nominal", "fitted"]),
                            floor_entries(series))
    assert summary == document["error_summary"]
    for scope in ("training", "validation"):
        for row in summary[scope]["signals"]:
            mine = [s for s in series if s.scope == scope and s.signal == row["signal"]]
            for name in ("nominal", "fitted"):
                errors = np.concatenate([s.errors[name][:, 0] for s in mine])
                assert row["rms"][name] == pytest.approx(math.sqrt(np.mean(errors ** 2)),
                                                         rel=1e-12)
            held = np.concatenate([s.recorded[0, 0] - s.recorded[:, 0] for s in mine])
            assert row["rms"]["hold_last"] == pytest.approx(math.sqrt(np.mean(held ** 2)))
        pooled = summary[scope]["pooled"][0]  # every synthetic signal is in rad
        mine = [s for s in series if s.scope == scope]
        errors = np.concatenate([s.errors["fitted"].ravel() for s in mine])
        assert pooled["unit"] == "rad"
        assert pooled["rms"]["fitted"] == pytest.approx(math.sqrt(np.mean(errors ** 2)))
    write_report(document, tmp_path / "r", series)
    cells = [r for r in _parse(tmp_path / "r").rows if r and r[0].endswith(".position")]
    shown = {(r[0], r[3], r[4]) for r in cells}
    for scope in ("training", "validation"):
        for row in summary[scope]["signals"]:
            assert (f"{row['signal']}.position", f"{row['rms']['nominal']:.4g}",
                    f"{row['rms']['fitted']:.4g}") in shown


@pytest.mark.parametrize("variant, why", [
    ({"profile": False}, "did not enable analysis.profile_likelihood"),
    ({"rank_deficient": True}, "rank deficient"),
    ({"evaluate": True}, "an --evaluate result has no fit"),
])
def test_sections_without_content_say_why(tmp_path: Path, variant: dict, why: str) -> None:
    document, series = synthetic_result(episodes=2, signals=2, samples=80, **variant)
    write_report(document, tmp_path / "r", series)
    page = _parse(tmp_path / "r")
    text = " ".join(" ".join(page.text).split())
    assert why in text
    _check_figures(tmp_path / "r", page)


def test_missing_matplotlib_is_one_line_before_any_fitting(tmp_path: Path, monkeypatch,
                                                           capsys) -> None:
    manifest = write_rig(tmp_path)
    request = write_request(tmp_path, request_doc(manifest))
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code = calibrate_main([str(request), "--report", str(tmp_path / "report")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith("calibrate: error: --report needs the Python package matplotlib")
    assert "pip install 'fibril_calibration[report]'" in err[0]
    assert not (tmp_path / "report").exists()


def _fitted_rig(tmp_path: Path) -> Path:
    manifest = write_rig(tmp_path)
    doc = request_doc(manifest)
    doc["training"][0]["signals"]["speed"]["samples"] = samples([5 * i for i in range(1, 13)])
    validation = copy.deepcopy(doc["training"][0])
    validation["id"] = "ep-held"
    doc["validation"] = [validation]
    doc["objective"] = {"standardized_gaussian_residuals": True}
    doc["fit"] = {"max_training_rms": 3.0}
    doc = synthesize(tmp_path, doc, {"damping": 0.05}, noise=1.0)
    return write_request(tmp_path, doc)


def test_calibrate_report_and_export_end_to_end(tmp_path: Path, capsys) -> None:
    import mujoco

    from fibril_sim_core.provenance import compiled_model_sha256

    request = _fitted_rig(tmp_path)
    result, report, fitted = tmp_path / "result.json", tmp_path / "report", tmp_path / "fit.xml"
    assert calibrate_main([str(request), "--output", str(result), "--report", str(report),
                           "--export-mjcf", str(fitted)]) == 0
    err = capsys.readouterr().err
    document = json.loads(result.read_text())
    summary = document["error_summary"]
    # the stderr line carries the result's numbers
    row = summary["validation"]["signals"][0]
    assert (f"validation rms in physical units: pooled [rad/s] nominal "
            f"{row['rms']['nominal']:.4g} fitted {row['rms']['fitted']:.4g}") in err
    page = _parse(report)
    text = " ".join(page.text)
    for name in ("damping", "ep1", "ep-held", "speed"):
        assert name in text
    _check_figures(report, page)
    # the report's table (recomputed from re-simulated residuals) shows the result's numbers
    cells = {r[0]: r for r in page.rows if r and r[0] == "speed.velocity"}
    assert cells["speed.velocity"][4] == f"{row['rms']['fitted']:.4g}"
    # the exported MJCF compiles to the fitted plan's model, and says where it came from
    text = fitted.read_text()
    assert str(result) in text.splitlines()[0]
    expected = document["candidate_plan"]["provenance"]["compiled_model_sha256"]
    assert compiled_model_sha256(mujoco.MjModel.from_xml_path(str(fitted))) == expected


def test_report_of_a_saved_result_and_its_stale_check(tmp_path: Path, capsys) -> None:
    from fibril_sim_core.cli import main as fibril_main

    request = _fitted_rig(tmp_path)
    result = tmp_path / "result.json"
    assert calibrate_main([str(request), "--output", str(result), "--quiet"]) == 0
    again = tmp_path / "again.xml"
    assert fibril_main(["report", str(result), "--output", str(tmp_path / "r"),
                        "--export-mjcf", str(again), "--quiet"]) == 0
    assert (tmp_path / "r" / "index.html").is_file() and again.is_file()
    # the model changes on disk: the result no longer describes it
    model = tmp_path / "rig.xml"
    model.write_text(model.read_text().replace('damping="', 'armature="0.001" damping="', 1))
    capsys.readouterr()
    assert fibril_main(["report", str(result), "--output", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "changed since the result" in err[0], err
    assert not (tmp_path / "r2").exists()


def test_a_set_that_could_not_be_simulated_is_named(tmp_path: Path) -> None:
    from dataclasses import replace

    document, series = synthetic_result(episodes=2, signals=1, samples=50)
    series = [replace(s, errors={"fitted": s.errors["fitted"]}) if s.scope == "validation"
              else s for s in series]  # the nominal rollout failed on the validation episode
    write_report(document, tmp_path / "r", series)
    text = " ".join(" ".join(_parse(tmp_path / "r").text).split())
    assert "Not simulated on the validation episodes" in text and "nominal." in text


def test_device_output_signals_are_in_their_physical_units(tmp_path: Path) -> None:
    from fibril_calibration.analysis.units import device_unit

    motor = "fibril_sim/motor_feedback_sample/v1"
    assert device_unit(motor, ["current"]) == device_unit(motor, [2]) == "A"
    assert device_unit(motor, ["force"]) is None  # N·m or N, scaled by the gear: not known
    assert device_unit(motor, ["force", "current"]) is None  # mixed units: never pooled
    assert device_unit("fibril_sim/imu_sample/v1", ["gx", "gz"]) == "rad/s"
    # the drivetrain example's motor current, scored in A in the result, its summary and report
    root = Path(__file__).resolve().parents[2]
    request = root / "config" / "examples" / "drivetrain" / "calibration.yaml"
    result = tmp_path / "evaluate.json"
    assert calibrate_main([str(request), "--evaluate", "nominal", "--output", str(result),
                           "--quiet"]) == 0
    document = json.loads(result.read_text())
    rows = {r["signal"]: r for r in document["error_summary"]["validation"]["signals"]}
    assert rows["motor_current"]["unit"] == "A" and rows["wheel_velocity"]["unit"] == "rad/s"
    assert {p["unit"] for p in document["error_summary"]["training"]["pooled"]} == {"A", "rad/s"}
    write_report(document, tmp_path / "r", [])
    cells = [r for r in _parse(tmp_path / "r").rows if r and r[0] == "motor_current.current"]
    assert cells and all(r[1] == "A" for r in cells)
