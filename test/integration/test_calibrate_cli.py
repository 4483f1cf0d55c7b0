"""``fibril_sim calibrate``: the drivetrain example end to end (recovers its known truth), the
result and overlay files, the overlay loaded back through a manifest's parameter_overlays, and
user errors as one line with exit code 2."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import mujoco
import pytest
import yaml

from fibril_sim_core import SimulationBuilder
from fibril_sim_core.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
REQUEST = EXAMPLE / "calibration.yaml"
TRUTH = {"wheel_damping": 0.05, "motor_resistance": 2.6}


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _strict_json(text: str) -> Any:
    def reject(constant: str) -> Any:
        raise AssertionError(f"non-strict JSON constant {constant}")
    return json.loads(text, parse_constant=reject)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("calibrate")
    result, overlay = folder / "result.json", folder / "fit.json"
    code, out, err = _main(["calibrate", str(REQUEST), "--output", str(result),
                            "--output-overlay", str(overlay)])
    return {"code": code, "out": out, "err": err, "result": result, "overlay": overlay,
            "folder": folder}


@pytest.fixture()
def small_request(tmp_path: Path) -> Path:
    """One parameter, one episode of the example's data: a fast request."""
    doc = yaml.safe_load(REQUEST.read_text())
    doc["manifest"] = str(EXAMPLE / "bench.yaml")
    doc["parameters"] = doc["parameters"][:1]
    episode = doc["training"][0]
    episode["recorded_inputs_file"] = str(EXAMPLE / episode["recorded_inputs_file"])
    for signal in episode["signals"].values():
        signal["samples_file"] = str(EXAMPLE / signal["samples_file"])
    doc["training"] = [episode]
    for key in ("validation", "analysis", "fit"):
        doc.pop(key)
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ------------------------------------------------------------------ the example
def test_example_runs_and_prints_a_summary(example: dict[str, Any]) -> None:
    assert example["code"] == 0, example["err"]
    out = example["out"]
    assert out.startswith(f"calibration  {REQUEST}\n")
    assert "termination  converged" in out
    assert "wheel_damping" in out and "motor_resistance" in out and " ± " in out
    assert "identifiability  rank 2/2, condition number" in out
    assert "fit          plausible_fit" in out
    assert f"result       {example['result']}" in out
    progress = example["err"].splitlines()
    assert progress and all(line.startswith("fibril_sim calibrate: ") for line in progress)


def test_example_recovers_the_truth_within_its_95_percent_intervals(
        example: dict[str, Any]) -> None:
    document = _strict_json(example["result"].read_text())
    assert document["likelihood_interpretation_valid"] is True
    assert document["optimization_termination"] == "converged"
    assert document["fit"]["verdict"] == "plausible_fit"
    for entry in document["local_identifiability"]["parameters"]:
        low, high = entry["interval_95"]
        assert low <= TRUTH[entry["id"]] <= high, entry
    assert document["profile_likelihood"] is not None
    assert document["information_matrix"] is not None


def test_result_document_carries_context_and_provenance(example: dict[str, Any]) -> None:
    document = _strict_json(example["result"].read_text())
    assert document["format"] == "fibril_calibration/result"
    assert document["schema_version"] == {"major": 1, "minor": 0}
    context = document["context"]
    for key in ("training_episode_content_sha256", "validation_episode_content_sha256",
                "objective_version", "alignment_contract", "observation_spec_sha256",
                "optimizer_id", "optimizer_option_sha256", "seed"):
        assert context[key] is not None, key
    assert set(context["training_episode_content_sha256"]) == {"run-01", "run-02"}
    assert context["metric_id"] == "standardized_least_squares" and context["seed"] == 9
    assert "ceres" in context["optimizer_id"]
    provenance = document["candidate_plan"]["provenance"]
    for key in ("manifest_sha256", "model_sha256", "compiled_model_sha256", "assets",
                "parameter_set_hash", "build"):
        assert key in provenance, key
    assert provenance["build"]["mujoco"] == mujoco.__version__
    contract = {p["id"]: p for p in document["parameter_contract"]}
    assert contract["wheel_damping"]["parameterization"] == "log_positive"
    assert contract["motor_resistance"]["unit"] == "ohm"
    assert contract["wheel_damping"]["lower"] == 0.001
    mapping = document["target_mapping"]
    assert mapping["parameters"]["motor_resistance"] == [
        {"type": "mujoco", "kind": "dcmotor_resistance", "object": "drive",
         "component_index": 0}]
    assert len(mapping["sha256"]) == 64
    summary = document["training_summary"]
    assert [e["episode"] for e in summary["episodes"]] == ["run-01", "run-02"]
    assert [s["signal"] for s in summary["episodes"][0]["signals"]] == ["wheel_velocity",
                                                                        "motor_current"]
    assert document["parameter_overlay"] == _strict_json(example["overlay"].read_text())


def test_fitted_overlay_loads_in_a_manifest_and_sets_the_compiled_model(
        example: dict[str, Any], tmp_path: Path) -> None:
    overlay = _strict_json(example["overlay"].read_text())
    fitted = {p["id"]: p["value"] for p in overlay["parameters"]}
    assert overlay["format"] == "fibril_sim/parameter_overlay"
    assert overlay["id"] == "drivetrain-fit"
    for manifest_name in ("simulation.yaml", "bench.yaml"):
        doc = yaml.safe_load((EXAMPLE / manifest_name).read_text())
        doc["model"] = str(EXAMPLE / doc["model"])
        doc["parameter_overlays"] = [str(example["overlay"])]
        path = tmp_path / manifest_name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        plan = SimulationBuilder().build(path)
        model = plan.model
        joint = model.joint("wheel_joint")
        assert model.dof_damping[joint.dofadr[0]] == fitted["wheel_damping"]
        assert model.actuator("drive").gainprm[0] == fitted["motor_resistance"]
        assert str(example["overlay"]) in plan.provenance["parameter_overlays"]


# ------------------------------------------------------------------ output modes
def test_json_prints_the_full_result(small_request: Path) -> None:
    code, out, err = _main(["calibrate", str(small_request), "--json", "--quiet"])
    assert (code, err) == (0, "")
    document = _strict_json(out)
    assert set(document["fitted_parameters"]) == {"wheel_damping"}
    assert document["parameter_overlay"]["parameters"][0]["id"] == "wheel_damping"
    assert document["validation_summary"] is None
    assert document["fit"]["verdict"] == "indeterminate"


def test_overlay_only_output(small_request: Path, tmp_path: Path) -> None:
    overlay = tmp_path / "only.json"
    code, out, _ = _main(["calibrate", str(small_request), "--output-overlay", str(overlay),
                          "--quiet"])
    assert code == 0
    assert f"overlay      {overlay}" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["only.json", "small.yaml"]


def test_ros2_run_executable_is_the_same_command(small_request: Path) -> None:
    """``ros2 run fibril_calibration calibrate`` runs fibril_calibration.cli:main."""
    from fibril_calibration.cli import main as calibrate

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = calibrate([str(small_request), "--json", "--quiet"])
    assert (code, err.getvalue()) == (0, "")
    assert set(_strict_json(out.getvalue())["fitted_parameters"]) == {"wheel_damping"}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert calibrate([str(small_request.parent / "nope.yaml")]) == 2
    lines = err.getvalue().splitlines()  # progress lines, then the one-line error
    assert lines[-1] == f"calibrate: error: {small_request.parent / 'nope.yaml'}: file not found"
    assert all(line.startswith("calibrate: ") for line in lines)
    setup = (REPO / "fibril_calibration" / "setup.py").read_text()
    assert "'calibrate = fibril_calibration.cli:main'" in setup


def _help(main: object, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main(argv)  # type: ignore[operator]
    assert exit_.value.code == 0
    return out.getvalue()


def test_ros2_run_executable_is_named_calibrate_with_the_same_options() -> None:
    from fibril_calibration.cli import main as calibrate
    from fibril_sim_core.cli import main as fibril_sim

    own = _help(calibrate, ["--help"])
    sub = _help(fibril_sim, ["calibrate", "--help"])
    assert own.startswith("usage: calibrate [-h] ") and "fibril_sim" not in own
    assert sub.startswith("usage: fibril_sim calibrate [-h] ")
    # Same options, help texts and description: only the program name (and wrapping) differs.
    assert own.split() == sub.replace("fibril_sim calibrate", "calibrate").split()


# ------------------------------------------------------------------ user errors
def test_missing_request_is_one_line_exit_2(tmp_path: Path) -> None:
    code, out, err = _main(["calibrate", str(tmp_path / "nope.yaml"), "--quiet"])
    assert code == 2 and out == ""
    assert err == f"fibril_sim: error: {tmp_path / 'nope.yaml'}: file not found\n"


def test_invalid_request_is_one_line_naming_the_key(small_request: Path,
                                                    tmp_path: Path) -> None:
    doc = yaml.safe_load(small_request.read_text())
    doc["optimizer"]["type"] = "nelder_mead"
    small_request.write_text(yaml.safe_dump(doc))
    output = tmp_path / "result.json"
    output.write_text("previous result")
    code, out, err = _main(["calibrate", str(small_request), "--output", str(output)])
    assert code == 2 and out == ""
    last = err.splitlines()[-1]
    assert last.startswith(f"fibril_sim: error: {small_request}: optimizer.type: unknown "
                           f"optimizer 'nelder_mead'")
    assert "Traceback" not in err
    assert output.read_text() == "previous result"  # nothing half-written, nothing replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json", "small.yaml"]


def test_unwritable_output_fails_before_the_run(small_request: Path, tmp_path: Path) -> None:
    code, out, err = _main(["calibrate", str(small_request), "--output",
                            str(tmp_path / "missing" / "r.json")])
    assert code == 2 and out == ""
    assert err == (f"fibril_sim: error: --output '{tmp_path / 'missing' / 'r.json'}': folder "
                   f"'{tmp_path / 'missing'}' does not exist\n")


def test_evaluation_failure_is_one_line(small_request: Path, tmp_path: Path) -> None:
    doc = yaml.safe_load(small_request.read_text())
    signal = doc["training"][0]["signals"]["motor_current"]
    csv = tmp_path / "current.csv"
    csv.write_text("time_ns,current\n2000000,1.0\n3000000,1.0\n")
    signal["samples_file"] = str(csv)
    small_request.write_text(yaml.safe_dump(copy.deepcopy(doc)))
    overlay = tmp_path / "fit.json"
    code, out, err = _main(["calibrate", str(small_request), "--quiet", "--output-overlay",
                            str(overlay)])
    assert code == 2 and out == ""
    assert err.startswith("fibril_sim: error: episode 'run-01' signal 'motor_current': exact "
                          "alignment of reference sample 1 (time_ns 3000000)")
    assert err.count("\n") == 1
    assert not overlay.exists()
