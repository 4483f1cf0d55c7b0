"""The Python front door: the pinned public names, typed requests equal to the YAML loader's
(same request hash on every example request), a drivetrain calibration from arrays alone, and
``from_sysid`` on two of mujoco.sysid's own example problems with the fitted values agreeing."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import fibril_calibration
import fibril_sim_core
from fibril_calibration import (CalibrationRequest, Episode, Observation, Parameter, Signal,
                                calibrate, from_sysid, load_calibration_request)

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config" / "examples" / "drivetrain"
# every example calibration request, at any depth under config/ (drivetrain/bag/ included)
EXAMPLES = sorted((REPO / "config").rglob("calibration*.yaml"))

CALIBRATION_API = [
    "CalibrationError", "CalibrationRequest", "CalibrationRequestError", "CalibrationResult",
    "Commands", "Episode", "EvaluationError", "FittedParameter", "Observation", "Parameter",
    "Signal", "Source", "SourceError", "Stream", "calibrate", "from_sysid",
    "load_calibration_request", "open_source", "run_calibration"]
CORE_API = [
    "ActuatorApplication", "ComponentError", "DeviceOutput", "ExternalInput", "FibrilError",
    "IngressError", "IngressRecord", "InstanceError", "ManifestError", "MujocoTarget",
    "OverlayParameter", "ParameterOverlays", "PlanError", "ServerError", "ServerOptions",
    "ShutdownSignals", "SimulationBuilder", "SimulationConnection", "SimulationInstance",
    "SimulationManifest", "SimulationPlan", "SimulationRuntime", "SimulationServer",
    "StateSnapshot", "external_input", "load_manifest"]


# --------------------------------------------------------------------------- public names

def _type_checking_names(package: object) -> set[str]:
    tree = ast.parse(Path(package.__file__).read_text())  # type: ignore[attr-defined]
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and getattr(n.test, "id", None) == "TYPE_CHECKING")
    return {(a.asname or a.name) for node in block.body if isinstance(node, ast.ImportFrom)
            for a in node.names}


@pytest.mark.parametrize("package, names", [(fibril_calibration, CALIBRATION_API),
                                            (fibril_sim_core, CORE_API)])
def test_public_names_are_pinned(package: object, names: list[str]) -> None:
    assert package.__all__ == names  # type: ignore[attr-defined]
    # the lazy exports and the names type checkers see are the same list
    assert _type_checking_names(package) == set(names)
    for name in names:
        assert getattr(package, name) is not None


def _type_checking_imports(init: Path) -> dict[str, str]:
    """name -> relative module of the ``if TYPE_CHECKING:`` imports of a package ``__init__``."""
    tree = ast.parse(init.read_text())
    blocks = [n for n in tree.body if isinstance(n, ast.If)
              and getattr(n.test, "id", None) == "TYPE_CHECKING"]
    return {(a.asname or a.name): "." * node.level + (node.module or "")
            for block in blocks for node in block.body if isinstance(node, ast.ImportFrom)
            for a in node.names}


PACKAGE_INITS = sorted(init for root in ("fibril_sim_core/fibril_sim_core",
                                         "fibril_calibration/fibril_calibration",
                                         "fibril_sim_ros/fibril_sim_ros")
                       for init in (REPO / root).rglob("__init__.py"))


@pytest.mark.parametrize("init", PACKAGE_INITS, ids=lambda p: str(p.relative_to(REPO)))
def test_lazy_exports_and_type_checking_imports_agree(init: Path) -> None:
    """A package's public API is written twice (``_EXPORTS`` for the lazy imports, the
    ``TYPE_CHECKING`` block for type checkers): the two must name the same things from the
    same modules, in every package and subpackage of the three."""
    import importlib

    relative = init.parent.relative_to(REPO).parts[1:]
    package = importlib.import_module(".".join(relative))
    exports = getattr(package, "_EXPORTS", {})
    assert _type_checking_imports(init) == exports
    if exports:
        assert sorted(package.__all__) == sorted(exports)


@pytest.mark.parametrize("subpackage", ["analysis", "model", "recordings", "request", "solve"])
def test_subpackages_export_what_they_declare(subpackage: str) -> None:
    import importlib

    package = importlib.import_module(f"fibril_calibration.{subpackage}")
    assert _type_checking_names(package) == set(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None


# --------------------------------------------------------------------------- typed requests

def test_every_example_request_is_compared() -> None:
    """The comparison below must not lose an example: five are known today, and a YAML file
    under config/ that reads as a calibration request under another name is named here."""
    assert len(EXAMPLES) >= 5
    assert DRIVETRAIN / "bag" / "calibration.yaml" in EXAMPLES
    requests = [path for path in sorted((REPO / "config").rglob("*.y*ml"))
                if _reads_as_a_request(path)]
    assert requests == EXAMPLES


def _reads_as_a_request(path: Path) -> bool:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return False
    return isinstance(document, dict) and {"manifest", "parameters", "observations",
                                           "training"} <= document.keys()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO / "config")))
def test_typed_request_equals_the_yaml_loaders(path: Path) -> None:
    typed = CalibrationRequest.from_yaml(path)
    assert typed.to_document() == yaml.safe_load(path.read_text())
    assert typed == CalibrationRequest.from_yaml(path)
    loaded = load_calibration_request(path)
    resolved = typed.resolve()
    assert resolved.sha256 == loaded.sha256
    assert [e.content_sha256 for e in resolved.training + resolved.validation] == \
        [e.content_sha256 for e in loaded.training + loaded.validation]


def _drivetrain_by_hand() -> CalibrationRequest:
    """calibration.yaml written as Python objects."""
    def signals(episode: str, alignments: tuple[str, str]) -> dict[str, Signal]:
        return {name: Signal(alignment=alignment, residual_scale=scale,
                             scale_semantics="measurement_standard_deviation",
                             samples_file=f"calibration_data/{episode}_{name}.csv")
                for (name, scale), alignment in zip((("wheel_velocity", 0.05),
                                                     ("motor_current", 0.02)), alignments)}

    def episode(name: str, seed: int, alignments: tuple[str, str] = ("exact", "exact")
                ) -> Episode:
        return Episode(id=name, episode_seed=seed, signals=signals(name, alignments),
                       recorded_inputs_file=f"calibration_data/{name}_inputs.yaml")

    return CalibrationRequest(
        manifest="bench.yaml", base=DRIVETRAIN,
        parameters=[
            Parameter("wheel_damping", 0.001, 1.0, 0.02, nominal=0.02, unit="N_m_s_per_rad",
                      provenance="drivetrain.xml nominal", parameterization="log_positive",
                      target={"type": "mujoco", "kind": "joint_damping",
                              "object": "wheel_joint", "component_index": 0}),
            Parameter("motor_resistance", 0.5, 8.0, 2.0, nominal=2.0, unit="ohm",
                      provenance="motor datasheet", parameterization="normalized_linear",
                      target="mujoco:dcmotor_resistance:drive")],
        observations=[
            Observation("wheel_velocity", "joint_velocity", name="wheel_joint",
                        sample_every_steps=5),
            Observation("motor_current", "device_output", name="drive_feedback",
                        sample_type="fibril_sim/motor_feedback_sample/v1",
                        indices=("current",))],
        training=[episode("run-01", 9), episode("run-02", 10)],
        validation=[episode("held-out", 11, ("linear", "nearest"))],
        optimizer={"type": "ceres", "max_iterations": 50},
        objective={"standardized_gaussian_residuals": True},
        execution={"max_parallelism": 1, "cache_entries": 256},
        analysis={"profile_likelihood": {"enabled": True, "samples_per_parameter": 11},
                  "information_matrix": True},
        fit={"max_training_rms": 1.5, "max_validation_rms": 1.5,
             "max_local_condition_number": 1000000, "max_episode_rms_ratio": 1.5,
             "reject_parameter_near_bound": True},
        context={"metric_id": "standardized_least_squares",
                 "input_provenance": "calibration_data/generate.py",
                 "parameter_set_id": "drivetrain-fit", "seed": 9})


def test_python_objects_build_the_yaml_request() -> None:
    by_hand = _drivetrain_by_hand()
    path = DRIVETRAIN / "calibration.yaml"
    assert by_hand == CalibrationRequest.from_yaml(path)
    assert by_hand.resolve().sha256 == load_calibration_request(path).sha256


def test_to_yaml_writes_a_request_that_loads_the_same_episodes(tmp_path: Path) -> None:
    typed = _drivetrain_by_hand()
    (tmp_path / "sub").mkdir()
    written = typed.to_yaml(tmp_path / "sub" / "request.yaml")
    assert written.is_file()
    loaded = load_calibration_request(written)
    original = typed.resolve()
    assert [e.content_sha256 for e in loaded.training + loaded.validation] == \
        [e.content_sha256 for e in original.training + original.validation]
    # paths were rewritten for the file's folder; the rest of the document is unchanged
    doc = yaml.safe_load(written.read_text())
    assert Path(tmp_path / "sub" / doc["manifest"]).resolve() == DRIVETRAIN / "bench.yaml"
    assert {k: v for k, v in doc.items() if k not in ("manifest", "training", "validation")} \
        == {k: v for k, v in typed.to_document().items()
            if k not in ("manifest", "training", "validation")}


def test_an_unknown_key_names_itself(tmp_path: Path) -> None:
    doc = yaml.safe_load((DRIVETRAIN / "calibration.yaml").read_text())
    doc["parameters"][1]["lowr"] = 1.0
    with pytest.raises(fibril_calibration.CalibrationRequestError,
                       match=r"parameters\[1\]\.lowr.*unknown key 'lowr'"):
        CalibrationRequest.from_document(doc, DRIVETRAIN)


_WITH_INITIAL_STATE = """\
schema_version: {{major: 3, minor: 1}}
manifest: {manifest}
parameters:
  - {{id: wheel_damping, lower: 0.001, upper: 1.0, initial: 0.02,
     target: "mujoco:joint_damping:wheel_joint"}}
observations:
  - {{id: wheel_velocity, source: joint_velocity, name: wheel_joint, sample_every_steps: 5}}
training:
  - id: spin-down
    initial_state:
      - {{type: joint, joint: wheel_joint, qpos: [0.25], qvel: [3.0]}}
    recorded_inputs:
      - source_id: motor/command
        source_sequence: 1
        payload_type: fibril_sim/motor_command/v1
        payload_json: '{{"mode": "duty", "value": 0.5}}'
        commit_tick: 0
        acceptance_sequence: 0
      - source_id: motor/command
        source_sequence: 2
        payload_type: fibril_sim/motor_command/v1
        payload_json: '{{"mode": "duty", "value": 0.0}}'
        commit_tick: 10
        acceptance_sequence: 1
    signals:
      wheel_velocity:
        alignment: exact
        residual_scale: 0.05
        samples:
          - {{time_ns: 5000000, values: [3.1]}}
          - {{time_ns: 10000000, values: [3.2]}}
          - {{time_ns: 15000000, values: [3.15]}}
"""


def test_from_arrays_with_an_initial_state_equals_the_yaml_loaders(tmp_path: Path) -> None:
    """``Episode.from_arrays(..., initial_state=...)`` makes the episode a YAML file with the
    same initial state makes: the same request hash, episode hash and initial state."""
    manifest = DRIVETRAIN / "bench.yaml"
    path = tmp_path / "calibration.yaml"
    path.write_text(_WITH_INITIAL_STATE.format(manifest=manifest))
    initial_state = [{"type": "joint", "joint": "wheel_joint", "qpos": [0.25], "qvel": [3.0]}]
    typed = CalibrationRequest(
        manifest=str(manifest), base=tmp_path,
        parameters=[Parameter("wheel_damping", 0.001, 1.0, 0.02,
                              target="mujoco:joint_damping:wheel_joint")],
        observations=[Observation("wheel_velocity", "joint_velocity", name="wheel_joint",
                                  sample_every_steps=5)],
        training=[Episode.from_arrays(
            "spin-down", inputs={"motor/command": ([0.0, 0.01], [0.5, 0.0], "duty")},
            signals={"wheel_velocity": ([0.005, 0.010, 0.015], [3.1, 3.2, 3.15])},
            initial_state=initial_state, residual_scales=0.05)])
    loaded = load_calibration_request(path)
    resolved = typed.resolve()
    assert resolved.sha256 == loaded.sha256
    assert [e.content_sha256 for e in resolved.training] == \
        [e.content_sha256 for e in loaded.training]
    assert [list(e.initial_state) for e in resolved.training] == [initial_state]
    # the arrays' commands become the file's recorded_inputs: the documents are the same
    assert typed.to_document() == yaml.safe_load(path.read_text())
    # without the initial state the request is another one
    bare = dataclasses.replace(typed, training=[dataclasses.replace(typed.training[0],
                                                                    initial_state=None)])
    assert bare.resolve().sha256 != loaded.sha256


# --------------------------------------------------------------------------- from arrays

def _example_module() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("calibrate_from_python",
                                                  DRIVETRAIN / "calibrate_from_python.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arrays_only_drivetrain_calibration_matches_the_file_request() -> None:
    """The example's arrays make the same episodes as the files (same content hashes), so
    the fit is the file request's fit."""
    example = _example_module()
    from_arrays = example.request()  # type: ignore[attr-defined]
    assert not any(e.recorded_inputs_file or any(s.samples_file for s in e.signals.values())
                   for e in (*from_arrays.training, *from_arrays.validation))
    from_files = dataclasses.replace(
        CalibrationRequest.from_yaml(DRIVETRAIN / "calibration.yaml"),
        execution=None, analysis=None, context=None)
    arrays_resolved, files_resolved = from_arrays.resolve(), from_files.resolve()
    assert [e.content_sha256 for e in arrays_resolved.training + arrays_resolved.validation] \
        == [e.content_sha256 for e in files_resolved.training + files_resolved.validation]
    fitted, reference = calibrate(from_arrays), calibrate(files_resolved)
    for name, parameter in fitted.parameters.items():
        assert parameter.value == pytest.approx(reference.parameters[name].value, rel=1e-9)
        low, high = parameter.interval
        assert low < {"wheel_damping": 0.05, "motor_resistance": 2.6}[name] < high
    assert fitted.verdict == reference.verdict == "plausible_fit"
    assert set(fitted.scores) == {"nominal", "fitted"}


def test_from_dataframe_equals_from_arrays() -> None:
    pandas = pytest.importorskip("pandas")
    t = np.arange(5) * 0.01
    frame = pandas.DataFrame({"t": t, "u": [0.1, 0.2, 0.3, 0.4, 0.5], "w": t ** 2,
                              "x": t, "y": -t})
    assert Episode.from_dataframe(
        "e", frame, inputs={"motor/command": ("u", "duty")},
        signals={"wheel_velocity": "w", "pos": ["x", "y"]}, residual_scales=0.1
    ) == Episode.from_arrays(
        "e", t, inputs={"motor/command": (frame["u"].to_numpy(), "duty")},
        signals={"wheel_velocity": t ** 2, "pos": np.column_stack([t, -t])},
        residual_scales=0.1)


def test_the_example_script_runs(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(DRIVETRAIN / "calibrate_from_python.py"),
                           "--save", str(tmp_path / "out"), "--report", str(tmp_path / "report")],
                          capture_output=True, text=True,
                          env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "verdict: plausible_fit" in done.stdout
    saved = CalibrationRequest.from_yaml(tmp_path / "out" / "calibration.yaml").resolve()
    assert len(saved.training) == 2 and len(saved.validation) == 1
    assert (tmp_path / "out" / "result.json").is_file()
    assert (tmp_path / "out" / "fitted-overlay.json").is_file()
    page = (tmp_path / "report" / "index.html").read_text()  # result.report(dir)
    assert "wheel_damping" in page and "motor_resistance" in page


# --------------------------------------------------------------------------- mujoco.sysid

def _sysid_problems() -> object:
    sysid = pytest.importorskip("mujoco.sysid")
    if not hasattr(sysid, "ParameterDict"):  # its optional dependencies are missing
        pytest.skip("mujoco.sysid needs its optional dependencies (bench/requirements.txt)")
    from mujoco.sysid.tests import test_integration as problems

    return problems


def _agree(params: object, sequences: object, folder: Path, truth: dict[str, float]) -> None:
    """Fit with mujoco.sysid and with Fibril through from_sysid; both find the truth."""
    from mujoco import sysid

    result = calibrate(from_sysid(params, sequences, folder=folder))
    residual_fn = sysid.build_residual_fn(models_sequences=[sequences])
    with contextlib.redirect_stdout(io.StringIO()):
        fitted, _ = sysid.optimize(initial_params=params, residual_fn=residual_fn,
                                   optimizer="mujoco")
    for name, value in truth.items():
        ours, theirs = result.parameters[name].value, float(fitted[name].value[0])
        assert ours == pytest.approx(theirs, abs=1e-4)
        assert ours == pytest.approx(value, abs=1e-4)


def test_from_sysid_spring_mass(tmp_path: Path) -> None:
    problems = _sysid_problems()
    from mujoco import sysid

    spec, initial, control, sensors = problems._generate_data(  # type: ignore[attr-defined]
        problems.SPRING_MASS_XML,  # type: ignore[attr-defined]
        ctrl_fn=lambda t: (5.0 * np.sin(2 * np.pi * 1.5 * t)
                           + 3.0 * np.sin(2 * np.pi * 3.7 * t)).reshape(-1, 1),
        duration=3.0)
    params = sysid.ParameterDict()
    params.add(sysid.Parameter("mass", nominal=1.0, min_value=0.3, max_value=3.0,
                               modifier=lambda s, p: setattr(s.body("ball"), "mass",
                                                             p.value[0])))
    params["mass"].value[:] = 2.0
    sequences = sysid.ModelSequences("spring_mass", spec, "measured", initial, control, sensors)
    request = from_sysid(params, sequences, folder=tmp_path / "req")
    assert [p.target for p in request.parameters] == ["mujoco:body_mass:ball"]
    assert [o.id for o in request.observations] == ["position", "velocity"]
    _agree(params, sequences, tmp_path / "fit", {"mass": 1.0})


def test_from_sysid_arm(tmp_path: Path) -> None:
    problems = _sysid_problems()
    from mujoco import sysid

    spec, initial, control, sensors = problems._generate_data(  # type: ignore[attr-defined]
        problems.ARM_XML,  # type: ignore[attr-defined]
        ctrl_fn=lambda t: np.column_stack([
            5.0 * np.sin(2 * np.pi * 0.5 * t), 4.0 * np.sin(2 * np.pi * 0.7 * t + 0.5),
            3.0 * np.sin(2 * np.pi * 0.4 * t + 1.0), 2.0 * np.sin(2 * np.pi * 0.9 * t + 1.5),
            1.0 * np.sin(2 * np.pi * 0.6 * t + 2.0)]),
        duration=2.0)
    truth = {f"{j}_armature": a for j, a in problems.TRUE_ARMATURE.items()}  # type: ignore
    params = sysid.ParameterDict()
    for joint in problems.JOINT_NAMES:  # type: ignore[attr-defined]
        params.add(sysid.Parameter(f"{joint}_armature", nominal=truth[f"{joint}_armature"],
                                   min_value=0.001, max_value=1.0,
                                   modifier=lambda s, p, j=joint: setattr(s.joint(j),
                                                                          "armature",
                                                                          p.value[0])))
        params[f"{joint}_armature"].value[:] = 0.01
    sequences = sysid.ModelSequences("arm", spec, "sinusoidal", initial, control, sensors)
    _agree(params, sequences, tmp_path, truth)


def test_from_sysid_names_a_target_it_cannot_tell(tmp_path: Path) -> None:
    problems = _sysid_problems()
    from mujoco import sysid

    spec, initial, control, sensors = problems._generate_data(  # type: ignore[attr-defined]
        problems.SPRING_MASS_XML, ctrl_fn=lambda t: np.zeros((len(t), 1)),  # type: ignore
        duration=0.1)
    params = sysid.ParameterDict()
    params.add(sysid.Parameter("size", nominal=0.05, min_value=0.01, max_value=0.1,
                               modifier=lambda s, p: None))  # writes nothing Fibril can see
    sequences = sysid.ModelSequences("spring_mass", spec, "measured", initial, control, sensors)
    with pytest.raises(fibril_calibration.CalibrationRequestError,
                       match="cannot tell parameter 'size'.s target.*targets="):
        from_sysid(params, sequences, folder=tmp_path)
    named = from_sysid(params, sequences, folder=tmp_path,
                       targets={"size": "mujoco:body_mass:ball"})
    assert named.parameters[0].target == "mujoco:body_mass:ball"
