"""The generated Reference covers every key the loaders accept.

The manifest and bridge loaders are run on documents that reach every section, with the schema
helper ``keys`` (the check of which keys a mapping may hold) recorded: each key any of those
checks accepts must be a documented key of that section. Component types are covered from their
``fields`` and ``bind_keys`` (what the loader validates with); the CLI from its parsers; the
node's parameters from its declarations. The summary line counts the keys covered.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from fibril_sim_core import schema

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "_ext"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fibril_reference as ref  # noqa: E402
from conftest import REFERENCE_COUNTS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config" / "examples" / "drivetrain"


def _recording(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Every key set ``schema.keys`` is asked to check, by normalised section path."""
    seen: dict[str, set[str]] = {}
    original = schema.keys

    def keys(value, where, required=(), optional=()):  # noqa: ANN001, ANN202
        seen.setdefault(_section(where.path), set()).update(required, optional)
        return original(value, where, required=required, optional=optional)

    monkeypatch.setattr(schema, "keys", keys)
    return seen


def _section(path: str) -> str:
    path = re.sub(r"\[\d+\]", "[]", path)
    path = re.sub(r"^profiles\.[^.]+", "profiles.<name>", path)
    return re.sub(r"^.*\.qos$", "<entry>.qos", path)


def missing(recorded: dict[str, set[str]], documented: list[ref.Key]) -> list[str]:
    paths = {key.path for key in documented}
    return sorted(f"{section}.{key}" if section else key
                  for section, keys in recorded.items() for key in keys
                  if (f"{section}.{key}" if section else key) not in paths)


def _manifest_document(tmp_path: Path) -> Path:
    text = (DRIVETRAIN / "simulation.yaml").read_text()
    text = text.replace("model: drivetrain.xml", f"model: {DRIVETRAIN / 'drivetrain.xml'}")
    text = text.replace("trace:\n", "extensions: []\nparameter_overlays: []\ntrace:\n")
    path = tmp_path / "simulation.yaml"
    path.write_text(text)
    return path


def test_every_manifest_key_is_in_the_reference(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    from fibril_sim_core.plan import SimulationBuilder

    recorded = _recording(monkeypatch)
    SimulationBuilder().build(_manifest_document(tmp_path))
    config = recorded.pop("components[].config")  # per type: the next test
    bind = recorded.pop("components[].bind")
    assert {"", "trace", "runtime", "scenario", "scenario.initial_inputs[]", "components[]",
            "profiles.<name>", "schema_version"} <= set(recorded), sorted(recorded)
    documented = ref.manifest_keys()
    assert missing(recorded, documented) == []
    assert config and bind
    REFERENCE_COUNTS["manifest"] = len(documented)


def test_every_component_key_is_in_the_reference() -> None:
    from fibril_sim_core.components.registry import ComponentRegistry

    page = ref.manifest_page()
    documented = {kind.type_id: {k.path for k in keys} for kind, keys in ref.component_types()}
    registry = ComponentRegistry.standard()
    count = 0
    for type_id in registry:
        kind = registry.get(type_id)
        section = page.split(f"### `{type_id}`", 1)[1].split("\n### ", 1)[0]
        required, optional = kind.bind_keys
        for name in (*required, *optional):
            assert f"{type_id}.bind.{name}" in documented[type_id]
            assert f"| `{name}` |" in section, (type_id, "bind", name)
            count += 1
        for name, field in kind.fields.items():
            assert f"{type_id}.config.{name}" in documented[type_id]
            assert f"| `{name}` |" in section, (type_id, name)
            if field.kind == "duration":
                assert "| s |" in section.split(f"| `{name}` |", 1)[1].split("\n", 1)[0]
            count += 1
    REFERENCE_COUNTS["component"] = count


BRIDGE = """\
schema_version: {major: 1, minor: 0}
defaults: true
inputs:
  - {topic: /a, type: fibril_msgs/msg/MotorCommand, endpoint: motor/command, qos: {depth: 5}}
  - {topic: /b, type: std_msgs/msg/Float64, endpoint: motor/command, mode: duty, scale: 2.0,
     offset: 0.1}
  - {topic: /c, type: std_msgs/msg/Float64MultiArray, endpoints: [motor/command], mode: duty}
outputs:
  - {device: wheel_encoder, topic: /w, raw_topic: /w/raw, stamp: delivery, qos: {depth: 3}}
  - {device: front_range, field_of_view: 0.1, radiation_type: ultrasound}
joint_states: {rate: 100.0, qos: {reliability: best_effort}, fast_wall_rate: 10.0}
tf: {rate: 25.0, frame_prefix: sim/}
robot_description: {topic: /rd}
markers: {}
"""


def test_every_bridge_key_is_in_the_reference(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    from fibril_sim_core.plan import SimulationBuilder
    from fibril_sim_ros.bridge import load_bridge

    plan = SimulationBuilder().build(DRIVETRAIN / "simulation.yaml")
    (tmp_path / "bridge.yaml").write_text(BRIDGE)
    recorded = _recording(monkeypatch)
    load_bridge(plan, tmp_path / "bridge.yaml")
    assert {"", "inputs[]", "outputs[]", "<entry>.qos", "joint_states", "tf",
            "robot_description", "markers", "schema_version"} <= set(recorded)
    documented = ref.bridge_keys()
    assert missing(recorded, documented) == []
    page = ref.bridge_page()
    for key in documented:
        assert f"## `{key.section or '(top level)'}`" in page and f"| `{key.name}` |" in page
    REFERENCE_COUNTS["bridge"] = len(documented)


def test_a_key_missing_from_the_reference_is_found() -> None:
    documented = [k for k in ref.manifest_keys() if k.path != "runtime.start_paused"]
    assert missing({"runtime": {"mode", "start_paused"}}, documented) == \
        ["runtime.start_paused"]


def test_every_cli_option_is_in_the_reference() -> None:
    page = ref.cli_page()
    count = 0
    for name, parser in ref.cli_commands():
        assert f"## `{name}`" in page
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in page, (name, option)
                    count += 1
    assert "## `fibril_sim init`" in page and "## `fibril_sim calibrate`" in page
    REFERENCE_COUNTS["cli"] = count


def test_every_sim_node_parameter_is_in_the_reference() -> None:
    pytest.importorskip("rclpy")
    declared = ref.sim_node_parameters()
    names = [name for name, _, _ in declared]
    assert "manifest" in names and "sync_topics" in names
    assert sorted(set(names) - set(ref.SIM_NODE_PARAMETERS)) == []
    page = ref.sim_node_page()
    for name in names:
        assert f"| `{name}` |" in page
    REFERENCE_COUNTS["sim_node"] = len(names)


# --------------------------------------------------------------------------- documents
import fibril_documents as docs  # noqa: E402

CALIBRATIONS = [REPO / "config" / "examples" / p for p in (
    "drivetrain/calibration.yaml", "drivetrain/bag/calibration.yaml", "panda/calibration.yaml",
    "panda/calibration-closed-loop.yaml", "quadruped_leg/calibration.yaml")]
#: Keys of a recording stream, documented once under ``<stream>``.
STREAM_KEYS = {"topic", "field", "type", "time", "column", "columns", "max_gap", "source",
               "valid", "on_invalid"}


def _recording_of(monkeypatch: pytest.MonkeyPatch, error: type) -> dict[str, set[str]]:
    """Like ``_recording``, for the checks of one document kind (by its error class) only."""
    seen: dict[str, set[str]] = {}
    original = schema.keys

    def keys(value, where, required=(), optional=()):  # noqa: ANN001, ANN202
        if where.error is error:
            path = re.sub(r"\[\d+\]", "[]", where.path)
            seen.setdefault(path, set()).update(required, optional)
        return original(value, where, required=required, optional=optional)

    monkeypatch.setattr(schema, "keys", keys)
    return seen


def _calibration_section(path: str) -> str:
    path = re.sub(r"^validation\[\]", "training[]", path)
    path = re.sub(r"^recorded_inputs\[\]", "training[].recorded_inputs[]", path)
    path = re.sub(r"^sources\.[^.]+", "sources.<name>", path)
    path = re.sub(r"\.signals\.[^.]+", ".signals.<observation id>", path)
    return re.sub(r"\.q(pos|vel)_from$", ".<part>_from", path)


def test_every_calibration_request_key_is_in_the_reference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fibril_calibration.errors import CalibrationRequestError
    from fibril_calibration.request import load_calibration_request

    recorded = _recording_of(monkeypatch, CalibrationRequestError)
    for request in CALIBRATIONS:
        load_calibration_request(request)
    documented = {k.path for k in docs.calibration_keys()}
    targets = {f"parameters[].target.{k.name}" for k in docs.overlay_target_keys()}
    lacking = []
    for path, keys in recorded.items():
        section = _calibration_section(path)
        for key in keys:
            candidates = {f"{section}.{key}" if section else key}
            if key in STREAM_KEYS or section.endswith(".valid"):
                candidates.add(f"<stream>.{key}" if key in STREAM_KEYS
                               else f"<stream>.valid.{key}")
            if not section and key == "recorded_inputs":  # a recorded_inputs_file's root
                candidates.add("training[].recorded_inputs")
            if re.match(r"^parameters\[\]\.targets?(\[\])?$", section):
                candidates.add(f"parameters[].target.{key}")
            if not candidates & (documented | targets):
                lacking.append(f"{path}: {key}")
    assert {"sources.<name>", "training[].inputs[]", "training[].windows",
            "training[].signals.<observation id>", "optimizer", "fit"} <= {
        _calibration_section(p) for p in recorded}
    assert sorted(lacking) == []
    page = docs.calibration_request_page()
    for key in docs.calibration_keys():
        assert f"| `{key.name}` |" in page
    REFERENCE_COUNTS["calibration request"] = len(documented)


def test_every_experiment_key_is_in_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    from fibril_sim_core.experiments.experiment import ExperimentError, load_experiment

    recorded = _recording_of(monkeypatch, ExperimentError)
    load_experiment(DRIVETRAIN / "wheel-damping-study.yaml")
    documented = docs.experiment_keys()
    assert {"", "model", "parameters", "variants[]", "metrics[]", "assertions[]",
            "execution"} <= set(recorded)
    assert missing(recorded, documented) == []
    REFERENCE_COUNTS["experiment"] = len(documented)


def test_every_overlay_key_is_in_the_reference(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    from fibril_sim_core.overlays import load_overlay_artifact
    from fibril_sim_core.overlays.artifact import OverlayError

    recorded = _recording_of(monkeypatch, OverlayError)
    artifact = tmp_path / "overlay.yaml"
    artifact.write_text("format: fibril_sim/parameter_overlay\nschema_version: {major: 1, "
                        "minor: 1}\nid: a\ndescription: b\nsource: {}\nparameters:\n"
                        "  - {id: d, value: 0.1, unit: x, provenance: y, description: z,\n"
                        "     target: {type: mujoco, kind: joint_damping, object: wheel_joint,"
                        " component_index: 0}}\n"
                        "  - {id: n, value: 0.5, targets: [{type: component_config, "
                        "component: wheel_encoder, config_path: noise_counts}]}\n")
    load_overlay_artifact(artifact)
    documented = docs.overlay_keys()
    targets = {f"{k.section}.{k.name}" for k in docs.overlay_target_keys()}
    recorded_targets = {s: recorded.pop(s) for s in list(recorded) if ".target" in s}
    assert missing(recorded, documented) == []
    for keys in recorded_targets.values():
        assert {f"target (mujoco).{k}" for k in keys} & targets or \
            {f"target (component_config).{k}" for k in keys} <= targets, keys
    REFERENCE_COUNTS["overlay"] = len(documented) + len(targets)


def test_every_calibration_result_key_is_in_the_reference(tmp_path: Path) -> None:
    """The top-level keys of a real result (the bag example's, a second's fit)."""
    import contextlib
    import io
    import json

    from fibril_sim_core.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["calibrate", str(CALIBRATIONS[1]), "--quiet", "--json"]) == 0
    result = json.loads(out.getvalue())
    documented = {name for name, _, _ in docs.CALIBRATION_RESULT}
    assert sorted(set(result) - documented) == []
    REFERENCE_COUNTS["calibration result"] = len(documented)
