"""Parameter experiments (schema 1.0): the loader's validation, the runner's records and result
classes, serial/parallel equivalence and the generic metrics, each checked against the traces
the runs wrote.

Every experiment runs on a copy of ``config/examples/drivetrain`` (or a tiny purpose-built model)
under pytest's tmp_path; runs that make MuJoCo warn do so in a temporary working directory so
that MuJoCo's ``MUJOCO_LOG.TXT`` never lands in the repository.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import math
import os
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import pytest
import yaml
from fibril_sim_core.experiments.experiment import ExperimentError, load_experiment
from fibril_sim_core.experiments.runner import run_experiment, write_json_atomically
from fibril_sim_core.manifest import load_manifest
from fibril_sim_core.experiments.metrics import event_time, reduce
from fibril_sim_core.overlays import ParameterOverlays, load_overlay_artifact
from fibril_sim_core.trace.query import query
from fibril_sim_core.trace.reader import TraceReader

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
STEPS = 500  # 0.5 s: long enough for the wheel speed to order by damping, short enough to be fast
DAMPINGS = {"baseline": 0.02, "damping-001": 0.01, "damping-005": 0.05, "damping-010": 0.10,
            "same-as-baseline": 0.02}
RTF = "realtime_factor"


# ------------------------------------------------------------------ helpers
@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    """MuJoCo writes MUJOCO_LOG.TXT into the working directory when it warns."""
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _example(folder: Path) -> Path:
    """A private copy of the drivetrain example (experiment files resolve relative to it)."""
    shutil.copytree(EXAMPLE, folder)
    return folder


def _dump(path: Path, doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _variant(run_id: str, **values: Any) -> dict[str, Any]:
    return {"id": run_id, "parameter_values": values}


STUDY_METRICS: list[dict[str, Any]] = [
    {"id": "chassis_displacement", "kind": "signal", "signal": "body:chassis.position",
     "reduce": "delta_norm"},
    {"id": "chassis_peak_distance", "kind": "signal", "signal": "body:chassis.position",
     "reduce": "max_norm"},
    {"id": "chassis_final_position", "kind": "signal", "signal": "body:chassis.position",
     "reduce": "final"},
    {"id": "final_wheel_speed", "kind": "signal", "signal": "joint:wheel_joint.velocity",
     "reduce": "final"},
    {"id": "peak_wheel_speed", "kind": "signal", "signal": "joint:wheel_joint.velocity",
     "reduce": "max_abs"},
    {"id": "peak_motor_force", "kind": "signal", "signal": "actuator:motor/command.force",
     "reduce": "max_abs"},
    {"id": "applied_command", "kind": "signal", "signal": "actuator:motor/command.applied",
     "reduce": "final"},
    {"id": "encoder_final", "kind": "signal", "signal": "device:wheel_encoder",
     "reduce": "final"},
    {"id": "time_above_10_rad_s", "kind": "signal", "signal": "joint:wheel_joint.velocity",
     "reduce": "duration_above", "threshold": 10.0},
    {"id": "time_far", "kind": "signal", "signal": "body:chassis.position",
     "reduce": "duration_above", "threshold": 0.1},
    {"id": "reached_12_rad_s", "kind": "event_reached", "signal": "joint:wheel_joint.velocity",
     "op": "ge", "value": 12.0},
    {"id": "never_reached", "kind": "event_reached", "signal": "joint:wheel_joint.velocity",
     "op": "gt", "value": 1.0e6},
    {"id": "wheel_contact_time", "kind": "contact_duration", "contact": "wheel_left"},
    {"id": "peak_wheel_contact_force", "kind": "max_contact_wrench", "contact": "wheel_left"},
    {"id": RTF, "kind": "rtf"},
]


def _experiment_doc(*, variants: list[dict[str, Any]], metrics: list[dict[str, Any]],
                    assertions: list[dict[str, Any]] | None = None,
                    baseline_overlay: str = "damping-baseline.yaml", steps: int = STEPS,
                    **execution: Any) -> dict[str, Any]:
    execution = {"steps": steps, "timeout_seconds": 60.0, "workers": 1, "cpu_budget": 2,
                 "mujoco_internal_threads": 1, **execution}
    return {"schema_version": {"major": 1, "minor": 0}, "id": "study",
            "model": {"manifest": "simulation.yaml"}, "scenario": "drive-start.yaml",
            "parameters": {"baseline_overlay": baseline_overlay},
            "variants": copy.deepcopy(variants), "metrics": copy.deepcopy(metrics),
            "assertions": copy.deepcopy(assertions or []), "execution": execution}


STUDY_VARIANTS = [_variant(run_id, wheel_damping=value) for run_id, value in DAMPINGS.items()
                  if run_id != "baseline"]
STUDY_ASSERTIONS = [{"metric": "chassis_displacement", "op": "lt", "value": 2.0},
                    {"metric": "peak_wheel_speed", "op": "gt", "value": 1.0}]


def _run(folder: Path, name: str, doc: dict[str, Any]) -> dict[str, Any]:
    path = _dump(folder / f"{name}.yaml", doc)
    with _cwd(folder):
        return run_experiment(path, traces=folder / f"{name}.traces")


def _by_id(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {run["id"]: run for run in document["runs"]}


def _without_rtf(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k != RTF}


def _rows(trace: str | Path, selector: str) -> tuple[np.ndarray, np.ndarray]:
    """(times in s, values) of ``selector``, read straight from the trace."""
    result = query(trace, selector)
    skip = 3 if "acquisition_time_ns" in result.columns else 2
    times = np.array([row[0] for row in result.rows], dtype=float) / 1e9
    values = np.array([row[skip:] for row in result.rows], dtype=float)
    return times, values


# ------------------------------------------------------------------ loader
def _loader_folder(tmp_path: Path) -> Path:
    folder = _example(tmp_path / "example")
    _dump(folder / "valid.yaml", _experiment_doc(variants=STUDY_VARIANTS, metrics=STUDY_METRICS,
                                                 assertions=STUDY_ASSERTIONS))
    return folder


def test_loader_accepts_the_shipped_example() -> None:
    experiment = load_experiment(EXAMPLE / "wheel-damping-study.yaml")
    assert experiment.id == "wheel-damping-study"
    assert experiment.manifest == EXAMPLE / "simulation.yaml"
    assert experiment.scenario == EXAMPLE / "drive-start.yaml"
    assert experiment.baseline_overlay == EXAMPLE / "damping-baseline.yaml"
    assert [(v.id, v.parameter_values) for v in experiment.variants] == [
        ("damping-001", {"wheel_damping": 0.01}), ("damping-005", {"wheel_damping": 0.05}),
        ("damping-010", {"wheel_damping": 0.10})]
    assert experiment.metric("time_above_10_rad_s").threshold == 10.0
    assert experiment.metric("reached_10_rad_s").op == "gt"
    assert (experiment.execution.workers, experiment.execution.cpu_budget,
            experiment.execution.mujoco_internal_threads) == (1, 2, 1)
    raw = (EXAMPLE / "wheel-damping-study.yaml").read_bytes()
    assert experiment.sha256 == hashlib.sha256(raw).hexdigest()


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _delete(doc: dict[str, Any], path: tuple[Any, ...]) -> None:
    for key in path[:-1]:
        doc = doc[key]
    del doc[path[-1]]


SIGNAL = {"id": "m", "kind": "signal", "signal": "joint:wheel_joint.velocity", "reduce": "final"}

# (case id, edit(doc), key path named by the error, words the message must contain)
LOADER_CASES: list[tuple[str, Any, str, str]] = [
    ("unknown-top-level-key", lambda d: _set(d, ("variant_matrix",), {}),
     "variant_matrix", "unknown key"),
    ("unknown-model-key", lambda d: _set(d, ("model", "mjcf"), "drivetrain.xml"),
     "model.mjcf", "unknown key"),
    ("unknown-parameters-key", lambda d: _set(d, ("parameters", "grid"), []),
     "parameters.grid", "unknown key"),
    ("unknown-variant-key", lambda d: _set(d, ("variants", 1, "values"), {}),
     "variants[1].values", "unknown key"),
    ("unknown-metric-key", lambda d: _set(d, ("metrics", 0, "reducer"), "final"),
     "metrics[0].reducer", "unknown key"),
    ("unknown-assertion-key", lambda d: _set(d, ("assertions", 0, "tolerance"), 1),
     "assertions[0].tolerance", "unknown key"),
    ("unknown-execution-key", lambda d: _set(d, ("execution", "threads"), 1),
     "execution.threads", "unknown key"),
    ("missing-execution-steps", lambda d: _delete(d, ("execution", "steps")),
     "execution.steps", "missing required key"),
    ("missing-id", lambda d: _delete(d, ("id",)), "id", "missing required key"),
    ("schema-major-2", lambda d: _set(d, ("schema_version",), {"major": 2, "minor": 0}),
     "schema_version", "unsupported schema version 2.0"),
    ("schema-minor-1", lambda d: _set(d, ("schema_version",), {"major": 1, "minor": 1}),
     "schema_version", "unsupported schema version 1.1"),
    ("missing-manifest", lambda d: _set(d, ("model", "manifest"), "nowhere.yaml"),
     "model.manifest", "nowhere.yaml"),
    ("missing-scenario", lambda d: _set(d, ("scenario",), "no-scenario.yaml"),
     "scenario", "no-scenario.yaml"),
    ("missing-baseline-overlay", lambda d: _set(d, ("parameters", "baseline_overlay"),
                                                "no-overlay.yaml"),
     "parameters.baseline_overlay", "no-overlay.yaml"),
    ("duplicate-variant-id", lambda d: _set(d, ("variants", 2, "id"), "damping-001"),
     "variants[2].id", "duplicate run id 'damping-001'"),
    ("variant-named-baseline", lambda d: _set(d, ("variants", 0, "id"), "baseline"),
     "variants[0].id", "'baseline'"),
    ("duplicate-metric-id", lambda d: _set(d, ("metrics", 3, "id"), "chassis_displacement"),
     "metrics[3].id", "duplicate metric id 'chassis_displacement'"),
    ("unknown-metric-kind", lambda d: _set(d, ("metrics", 0, "kind"), "energy"),
     "metrics[0].kind", "'energy'"),
    ("unknown-reducer", lambda d: _set(d, ("metrics", 0, "reduce"), "mean"),
     "metrics[0].reduce", "'mean'"),
    ("duration-above-without-threshold", lambda d: _delete(d, ("metrics", 8, "threshold")),
     "metrics[8].threshold", "duration_above needs a threshold"),
    ("threshold-on-final", lambda d: _set(d, ("metrics", 3, "threshold"), 1.0),
     "metrics[3].threshold", "only duration_above takes a threshold"),
    ("threshold-not-a-number", lambda d: _set(d, ("metrics", 8, "threshold"), "ten"),
     "metrics[8].threshold", "expected a number"),
    ("selector-without-kind", lambda d: _set(d, ("metrics", 0, "signal"), "chassis.position"),
     "metrics[0].signal", "not a selector"),
    ("selector-unknown-kind", lambda d: _set(d, ("metrics", 0, "signal"), "link:chassis.position"),
     "metrics[0].signal", "not a selector"),
    ("selector-without-field", lambda d: _set(d, ("metrics", 0, "signal"), "body:chassis"),
     "metrics[0].signal", "body:chassis"),
    ("selector-wrong-field", lambda d: _set(d, ("metrics", 0, "signal"), "body:chassis.velocity"),
     "metrics[0].signal", "body:chassis.velocity"),
    ("selector-empty-name", lambda d: _set(d, ("metrics", 0, "signal"), "joint:.velocity"),
     "metrics[0].signal", "joint:.velocity"),
    ("selector-not-a-string", lambda d: _set(d, ("metrics", 0, "signal"), 3),
     "metrics[0].signal", "expected a non-empty string"),
    ("event-selector-malformed", lambda d: _set(d, ("metrics", 10, "signal"), "sensor:"),
     "metrics[10].signal", "sensor:"),
    ("event-unknown-op", lambda d: _set(d, ("metrics", 10, "op"), "above"),
     "metrics[10].op", "'above'"),
    ("contact-metric-without-contact", lambda d: _delete(d, ("metrics", 12, "contact")),
     "metrics[12].contact", "missing required key"),
    ("assertion-on-unknown-metric", lambda d: _set(d, ("assertions", 1, "metric"), "top_speed"),
     "assertions[1].metric", "no metric 'top_speed'"),
    ("assertion-unknown-op", lambda d: _set(d, ("assertions", 0, "op"), "<"),
     "assertions[0].op", "'<'"),
    ("workers-over-cpu-budget", lambda d: _set(d, ("execution",), {
        "steps": 10, "timeout_seconds": 1.0, "workers": 3, "cpu_budget": 2,
        "mujoco_internal_threads": 1}),
     "execution.workers", "must not exceed cpu_budget (2)"),
    ("internal-threads-2", lambda d: _set(d, ("execution", "mujoco_internal_threads"), 2),
     "execution.mujoco_internal_threads", "requires 1"),
    ("internal-threads-0", lambda d: _set(d, ("execution", "mujoco_internal_threads"), 0),
     "execution.mujoco_internal_threads", ">= 1"),
    ("zero-timeout", lambda d: _set(d, ("execution", "timeout_seconds"), 0),
     "execution.timeout_seconds", "> 0"),
    ("zero-steps", lambda d: _set(d, ("execution", "steps"), 0),
     "execution.steps", ">= 1"),
    ("variants-not-a-list", lambda d: _set(d, ("variants",), {"damping-001": 0.01}),
     "variants", "expected a list"),
]


@pytest.mark.parametrize(("edit", "key_path", "words"),
                         [pytest.param(*case[1:], id=case[0]) for case in LOADER_CASES])
def test_loader_error_names_file_and_key_path(tmp_path: Path, edit: Any, key_path: str,
                                              words: str) -> None:
    folder = _loader_folder(tmp_path)
    doc = yaml.safe_load((folder / "valid.yaml").read_text())
    load_experiment(folder / "valid.yaml")  # the unedited document is valid
    edit(doc)
    path = _dump(folder / "broken.yaml", doc)
    with pytest.raises(ExperimentError) as caught:
        load_experiment(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key_path}: "), message
    assert words in message, message
    assert "\n" not in message


def test_loader_missing_or_unparsable_experiment_file(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match=r"absent\.yaml: file not found$"):
        load_experiment(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("id: [unclosed\n")
    with pytest.raises(ExperimentError, match=rf"^{broken}: not valid YAML \(line"):
        load_experiment(broken)
    listed = _dump(tmp_path / "list.yaml", [1, 2])
    with pytest.raises(ExperimentError, match=rf"^{listed}: expected a mapping"):
        load_experiment(listed)


# ------------------------------------------------------------------ the study (serial)
@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = _example(tmp_path_factory.mktemp("study") / "example")
    doc = _experiment_doc(variants=STUDY_VARIANTS, metrics=STUDY_METRICS,
                          assertions=STUDY_ASSERTIONS)
    return folder, _run(folder, "study", doc)


@pytest.fixture(scope="module")
def study_parallel(study: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    folder, _ = study
    doc = _experiment_doc(variants=STUDY_VARIANTS, metrics=STUDY_METRICS,
                          assertions=STUDY_ASSERTIONS, workers=2, cpu_budget=2)
    return _run(folder, "study-parallel", doc)


def test_study_document_header(study: tuple[Path, dict[str, Any]]) -> None:
    folder, document = study
    path = folder / "study.yaml"
    assert document["format"] == "fibril_sim/experiment_result"
    assert document["schema_version"] == {"major": 1, "minor": 1}
    assert document["experiment"] == {"id": "study", "path": str(path),
                                      "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert document["manifest"] == str(folder / "simulation.yaml")
    assert document["scenario"] == str(folder / "drive-start.yaml")
    overlay = folder / "damping-baseline.yaml"
    assert document["baseline_overlay"]["path"] == str(overlay)
    assert document["baseline_overlay"]["sha256"] == hashlib.sha256(
        overlay.read_bytes()).hexdigest()
    assert [p["id"] for p in document["baseline_overlay"]["parameters"]] == ["wheel_damping"]
    sources = document["sources"]
    assert sources["manifest"]["sha256"] == load_manifest(folder / "simulation.yaml").sha256
    assert sources["model"]["sha256"] == hashlib.sha256(
        (folder / "drivetrain.xml").read_bytes()).hexdigest()
    assert sources["scenario"]["sha256"] == hashlib.sha256(
        (folder / "drive-start.yaml").read_bytes()).hexdigest()
    assert document["sources_sha256"] == hashlib.sha256(
        json.dumps(sources, sort_keys=True).encode()).hexdigest()
    assert document["mujoco_version"] == mujoco.__version__
    assert document["execution"] == {"steps": STEPS, "timeout_seconds": 60.0, "workers": 1,
                                     "cpu_budget": 2, "mujoco_internal_threads": 1, "seed": 0,
                                     "backend": {"backend": "local", "scheduler": None}}
    assert document["summary"] == {"runs": 5, "succeeded": 5, "by_status": {"succeeded": 5}}
    json.dumps(document, allow_nan=False)  # strict JSON


def test_study_records_in_declaration_order_with_full_values(
        study: tuple[Path, dict[str, Any]]) -> None:
    _, document = study
    runs = document["runs"]
    assert [r["id"] for r in runs] == list(DAMPINGS)
    assert [r["role"] for r in runs] == ["baseline"] + ["variant"] * 4
    for run in runs:
        assert (run["status"], run["success"], run["error_reason"]) == ("succeeded", True, None)
        assert run["parameters"] == {"wheel_damping": DAMPINGS[run["id"]]}
    by_id = _by_id(document)
    assert by_id["baseline"]["parameter_diff"] == {}
    assert by_id["same-as-baseline"]["parameter_diff"] == {}
    diff = by_id["damping-010"]["parameter_diff"]
    assert set(diff) == {"wheel_damping"}
    assert diff["wheel_damping"]["baseline"] == 0.02
    assert diff["wheel_damping"]["value"] == 0.10
    assert diff["wheel_damping"]["delta"] == pytest.approx(0.08)
    assert by_id["damping-001"]["parameter_diff"]["wheel_damping"]["delta"] == pytest.approx(
        -0.01)


def test_study_parameter_set_hash_and_targets(study: tuple[Path, dict[str, Any]]) -> None:
    folder, document = study
    by_id = _by_id(document)
    hashes = {run_id: run["parameter_set_hash"] for run_id, run in by_id.items()}
    assert hashes["same-as-baseline"] == hashes["baseline"]
    assert len({hashes[r] for r in ("baseline", "damping-001", "damping-005",
                                    "damping-010")}) == 4
    declared = load_overlay_artifact(folder / "damping-baseline.yaml").parameter("wheel_damping")
    for run_id, run in by_id.items():
        expected = ParameterOverlays((declared.with_value(DAMPINGS[run_id]),))
        assert run["parameter_set_hash"] == expected.parameter_set_hash
        assert run["targets"] == [{
            "id": "wheel_damping", "value": DAMPINGS[run_id], "unit": "N_m_s_per_rad",
            "provenance": "drivetrain.xml production value",
            "target": {"type": "mujoco", "kind": "joint_damping", "object": "wheel_joint",
                       "component_index": 0}}]


def test_study_embeds_the_resolved_plan_inspection(study: tuple[Path, dict[str, Any]]) -> None:
    folder, document = study
    manifest = load_manifest(folder / "simulation.yaml")
    compiled = set()
    for run in document["runs"]:
        plan = run["plan"]
        provenance = plan["provenance"]
        assert plan["manifest"] == str(folder / "simulation.yaml")
        assert plan["model"]["path"] == str(folder / "drivetrain.xml")
        assert provenance["manifest_sha256"] == manifest.sha256
        assert provenance["model_sha256"] == hashlib.sha256(
            (folder / "drivetrain.xml").read_bytes()).hexdigest()
        assert provenance["parameter_set_hash"] == run["parameter_set_hash"]
        assert provenance["parameters"] == run["targets"]
        assert provenance["build"]["mujoco"] == mujoco.__version__
        assert {c["id"] for c in plan["components"]} >= {"motor", "wheel_encoder"}
        compiled.add((run["parameters"]["wheel_damping"], provenance["compiled_model_sha256"]))
    assert len(compiled) == 4  # one compiled model per distinct damping value
    assert len({sha for _, sha in compiled}) == 4


def test_study_timestamps(study: tuple[Path, dict[str, Any]]) -> None:
    _, document = study
    previous_end = None
    for run in document["runs"]:
        started = datetime.fromisoformat(run["started_at"])
        finished = datetime.fromisoformat(run["finished_at"])
        assert started.utcoffset() is not None and finished.utcoffset() is not None
        assert started <= finished
        if previous_end is not None:  # serial: one run after the other
            assert previous_end <= started
        previous_end = finished
        assert run["wall_seconds"] > 0


def test_study_traces_exist_and_read_back(study: tuple[Path, dict[str, Any]]) -> None:
    folder, document = study
    assert document["traces"] == str(folder / "study.traces")
    for run in document["runs"]:
        trace = Path(run["trace"])
        assert trace == folder / "study.traces" / run["id"]
        assert list(trace.glob("*.mcap"))
        with TraceReader(trace) as reader:
            assert reader.provenance["parameter_set_hash"] == run["parameter_set_hash"]
        rows = query(trace, "joint:wheel_joint.velocity").rows
        assert len(rows) == STEPS // 10  # state_every_steps: 10
        assert rows[-1][2] == run["metrics"]["final_wheel_speed"]


def test_study_higher_damping_gives_lower_final_wheel_speed(
        study: tuple[Path, dict[str, Any]]) -> None:
    _, document = study
    by_id = _by_id(document)
    order = ["damping-001", "baseline", "damping-005", "damping-010"]
    speeds = [by_id[run_id]["metrics"]["final_wheel_speed"] for run_id in order]
    assert all(a > b for a, b in itertools.pairwise(speeds)), speeds
    assert speeds[-1] > 1.0  # the wheel still turns: a real difference, not a stalled model
    assert _without_rtf(by_id["same-as-baseline"]["metrics"]) == _without_rtf(
        by_id["baseline"]["metrics"])


def test_study_assertion_outcomes(study: tuple[Path, dict[str, Any]]) -> None:
    _, document = study
    for run in document["runs"]:
        assert run["assertions"] == [
            {"metric": "chassis_displacement", "op": "lt", "value": 2.0,
             "actual": run["metrics"]["chassis_displacement"], "passed": True,
             "status": "passed"},
            {"metric": "peak_wheel_speed", "op": "gt", "value": 1.0,
             "actual": run["metrics"]["peak_wheel_speed"], "passed": True,
             "status": "passed"}]


def test_study_comparison_against_the_baseline(study: tuple[Path, dict[str, Any]]) -> None:
    _, document = study
    by_id = _by_id(document)
    comparison = document["comparison"]
    base = by_id["baseline"]
    assert comparison["baseline"] == {"id": "baseline", "success": True, "status": "succeeded",
                                      "metrics": base["metrics"], "trace": base["trace"]}
    assert [v["id"] for v in comparison["variants"]] == list(DAMPINGS)[1:]
    for entry in comparison["variants"]:
        run = by_id[entry["id"]]
        assert (entry["success"], entry["status"]) == (True, "succeeded")
        assert entry["parameter_diff"] == run["parameter_diff"]
        assert entry["trace"] == run["trace"]
        assert set(entry["metric_diff"]) == {m["id"] for m in STUDY_METRICS}
        for metric_id, diff in entry["metric_diff"].items():
            assert diff["baseline"] == base["metrics"][metric_id]
            assert diff["variant"] == run["metrics"][metric_id]
            if isinstance(diff["variant"], float) and isinstance(diff["baseline"], float):
                assert diff["delta"] == pytest.approx(diff["variant"] - diff["baseline"])
    slower = next(v for v in comparison["variants"] if v["id"] == "damping-010")
    assert slower["metric_diff"]["final_wheel_speed"]["delta"] < 0


def test_write_json_atomically(study: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    _, document = study
    target = tmp_path / "deeper" / "results.json"
    write_json_atomically(target, document)
    assert json.loads(target.read_text()) == json.loads(json.dumps(document))
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]
    with pytest.raises(ValueError):
        write_json_atomically(target, {"bad": math.nan})
    assert json.loads(target.read_text())["format"] == "fibril_sim/experiment_result"
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]  # no temp file left


# ------------------------------------------------------------------ parallel
def _comparable(run: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in run.items()
           if k not in ("started_at", "finished_at", "wall_seconds", "trace")}
    out["metrics"] = _without_rtf(run["metrics"])
    if out.get("error_reason"):  # names the experiment file, which differs between the two
        out["error_reason"] = out["error_reason"].split(": ", 1)[-1]
    return out


def test_two_workers_give_the_same_records(study: tuple[Path, dict[str, Any]],
                                           study_parallel: dict[str, Any]) -> None:
    _, serial = study
    parallel = study_parallel
    assert parallel["execution"]["workers"] == 2
    assert [r["id"] for r in parallel["runs"]] == [r["id"] for r in serial["runs"]]
    for a, b in zip(serial["runs"], parallel["runs"]):
        assert _comparable(a) == _comparable(b)
        assert Path(b["trace"]).parent.name == "study-parallel.traces"
        assert b["metrics"][RTF] > 0
    assert parallel["summary"] == serial["summary"]
    assert (query(serial["runs"][3]["trace"], "joint:wheel_joint.velocity").rows
            == query(parallel["runs"][3]["trace"], "joint:wheel_joint.velocity").rows)


# ------------------------------------------------------------------ metrics from the traces
def test_signal_reducers_match_values_computed_from_the_trace(
        study: tuple[Path, dict[str, Any]]) -> None:
    _, document = study
    reached: list[float | None] = []
    for run in document["runs"]:
        metrics, trace = run["metrics"], run["trace"]
        t, speed = _rows(trace, "joint:wheel_joint.velocity")
        _, position = _rows(trace, "body:chassis.position")
        _, force = _rows(trace, "actuator:motor/command.force")
        _, applied = _rows(trace, "actuator:motor/command.applied")
        _, encoder = _rows(trace, "device:wheel_encoder")
        speed = speed[:, 0]
        assert metrics["final_wheel_speed"] == speed[-1]
        assert metrics["peak_wheel_speed"] == np.max(np.abs(speed))
        assert metrics["peak_motor_force"] == np.max(np.abs(force[:, 0]))
        assert metrics["applied_command"] == pytest.approx(0.8 * 12.0)  # 80 % duty of 12 V
        assert metrics["applied_command"] == applied[-1, 0]
        assert metrics["encoder_final"] == list(encoder[-1])
        assert metrics["chassis_final_position"] == list(position[-1])
        assert metrics["chassis_displacement"] == pytest.approx(
            math.dist(position[-1], position[0]), rel=1e-12)
        assert metrics["chassis_peak_distance"] == pytest.approx(
            max(math.hypot(*p) for p in position), rel=1e-12)
        # duration_above: each sample holds until the next one (the last one has no width).
        above = sum(t[i + 1] - t[i] for i in range(len(t) - 1) if speed[i] > 10.0)
        assert metrics["time_above_10_rad_s"] == pytest.approx(above, abs=1e-9)
        assert 0 < metrics["time_above_10_rad_s"] < t[-1]
        far = sum(t[i + 1] - t[i] for i in range(len(t) - 1) if math.hypot(*position[i]) > 0.1)
        assert metrics["time_far"] == pytest.approx(far, abs=1e-9)
        first = next((float(ti) for ti, v in zip(t, speed) if v >= 12.0), None)
        assert metrics["reached_12_rad_s"] == (None if first is None
                                               else pytest.approx(first, abs=1e-12))
        reached.append(first)
        assert metrics["never_reached"] is None
        assert metrics[RTF] > 0
    assert any(r is not None and r > 0 for r in reached)  # the event is reached, not at t = 0


def test_reduce_and_event_time_on_known_series() -> None:
    times = np.array([0.0, 0.1, 0.2, 0.3, 0.5])
    scalar = np.array([[1.0], [-4.0], [3.0], [3.5], [2.0]])
    assert reduce("final", times, scalar, None) == 2.0
    assert reduce("max_abs", times, scalar, None) == 4.0
    assert reduce("max_norm", times, scalar, None) == 4.0
    assert reduce("delta_norm", times, scalar, None) == 1.0
    # 3.0 holds 0.2 → 0.3 and 3.5 holds 0.3 → 0.5; -4.0 is below the level (not |x|).
    assert reduce("duration_above", times, scalar, 2.5) == pytest.approx(0.3)
    vector = np.array([[3.0, 4.0], [0.0, 0.0], [6.0, 8.0], [1.0, 0.0], [0.0, 1.0]])
    assert reduce("final", times, vector, None) == [0.0, 1.0]
    assert reduce("max_abs", times, vector, None) == 8.0
    assert reduce("max_norm", times, vector, None) == 10.0
    assert reduce("delta_norm", times, vector, None) == pytest.approx(math.dist((3, 4), (0, 1)))
    assert reduce("duration_above", times, vector, 4.0) == pytest.approx(0.2)  # norms 5, 10
    assert event_time(times, scalar, "ge", 3.0) == 0.2
    assert event_time(times, scalar, "lt", 0.0) == 0.1
    assert event_time(times, vector, "gt", 9.0) == 0.2
    assert event_time(times, scalar, "gt", 100.0) is None


BOX_XML = """\
<mujoco model="box">
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="lamp" pos="0 0 2"><geom name="lamp_geom" type="sphere" size="0.1"/></body>
    <body name="crate" pos="1 0 0.05">
      <freejoint name="crate_free"/>
      <geom name="crate_geom" type="box" size="0.05 0.05 0.05" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("box")
    (folder / "box.xml").write_text(BOX_XML)
    _dump(folder / "simulation.yaml", {"schema_version": {"major": 3, "minor": 1},
                                       "model": "box.xml"})
    _dump(folder / "mass.yaml", {"schema_version": {"major": 1, "minor": 0}, "parameters": [
        {"id": "crate_mass", "value": 1.0, "target": "mujoco:body_mass:crate"}]})
    doc = {"schema_version": {"major": 1, "minor": 0}, "id": "box",
           "model": {"manifest": "simulation.yaml"},
           "parameters": {"baseline_overlay": "mass.yaml"},
           "variants": [_variant("heavy", crate_mass=3.0)],
           "metrics": [
               {"id": "geom_contact_time", "kind": "contact_duration", "contact": "crate_geom"},
               {"id": "body_contact_time", "kind": "contact_duration", "contact": "crate"},
               {"id": "peak_force", "kind": "max_contact_wrench", "contact": "crate"},
               {"id": "floor_force", "kind": "max_contact_wrench", "contact": "floor"},
               {"id": "lamp_contact_time", "kind": "contact_duration", "contact": "lamp"},
               {"id": "lamp_force", "kind": "max_contact_wrench", "contact": "lamp_geom"},
               {"id": "height", "kind": "signal", "signal": "joint:crate_free.position",
                "reduce": "final"}],
           "execution": {"steps": 250, "timeout_seconds": 60.0, "mujoco_internal_threads": 1}}
    return _run(folder, "box", doc)


def test_contact_metrics_of_a_box_resting_on_a_plane(box: dict[str, Any]) -> None:
    by_id = _by_id(box)
    assert [r["status"] for r in box["runs"]] == ["succeeded", "succeeded"]
    for run_id, mass in (("baseline", 1.0), ("heavy", 3.0)):
        metrics = by_id[run_id]["metrics"]
        weight = mass * 9.81
        assert metrics["geom_contact_time"] == pytest.approx(250 * 0.002)  # the whole run
        assert metrics["body_contact_time"] == metrics["geom_contact_time"]
        # The peak is the settling force of the soft contact: at least the weight, not much more.
        assert weight <= metrics["peak_force"] <= 1.3 * weight, metrics["peak_force"]
        assert metrics["floor_force"] == pytest.approx(metrics["peak_force"])
        assert (metrics["lamp_contact_time"], metrics["lamp_force"]) == (0.0, 0.0)
        assert metrics["height"][2] == pytest.approx(0.05, abs=1e-3)  # still resting
    ratio = by_id["heavy"]["metrics"]["peak_force"] / by_id["baseline"]["metrics"]["peak_force"]
    assert ratio == pytest.approx(3.0, rel=1e-3)


# ------------------------------------------------------------------ result classes
MIXED_OVERLAY = {
    "format": "fibril_sim/parameter_overlay", "schema_version": {"major": 1, "minor": 0},
    "parameters": [
        {"id": "wheel_damping", "value": 0.02, "target": "mujoco:joint_damping:wheel_joint:0"},
        {"id": "motor_gear", "value": 10.0, "target": "mujoco:actuator_gear:drive:0"},
        {"id": "axle_izz", "value": 0.0005, "target": "mujoco:body_inertia:axle:2"}]}
MIXED_METRICS = [
    {"id": "final_wheel_speed", "kind": "signal", "signal": "joint:wheel_joint.velocity",
     "reduce": "final"},
    {"id": "chassis_displacement", "kind": "signal", "signal": "body:chassis.position",
     "reduce": "delta_norm"},
    {"id": "wheel_contact_time", "kind": "contact_duration", "contact": "wheel_left"},
    {"id": RTF, "kind": "rtf"}]
MIXED_ASSERTIONS = [{"metric": "final_wheel_speed", "op": "gt", "value": 5.0}]
GOOD = _variant("good", wheel_damping=0.05)
MIXED_VARIANTS = [
    _variant("undeclared-id", no_such_parameter=1.0),
    GOOD,
    _variant("list-for-scalar", wheel_damping=[0.1, 0.2]),
    _variant("inertia-refused", axle_izz=1.0),  # violates A + B >= C: MuJoCo refuses to compile
    _variant("huge-gear", motor_gear=1.0e9),  # diverges at once: mjWARN_BADQACC
    _variant("heavy-damping", wheel_damping=1.0),  # the wheel barely turns: assertion fails
]


@pytest.fixture(scope="module")
def mixed_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = _example(tmp_path_factory.mktemp("mixed") / "example")
    _dump(folder / "mixed-baseline.yaml", MIXED_OVERLAY)
    return folder


def _mixed_doc(variants: list[dict[str, Any]], **execution: Any) -> dict[str, Any]:
    return _experiment_doc(variants=variants, metrics=MIXED_METRICS,
                           assertions=MIXED_ASSERTIONS, baseline_overlay="mixed-baseline.yaml",
                           steps=300, **execution)


@pytest.fixture(scope="module")
def mixed(mixed_folder: Path) -> dict[str, Any]:
    return _run(mixed_folder, "mixed", _mixed_doc(MIXED_VARIANTS))


@pytest.fixture(scope="module")
def alone(mixed_folder: Path) -> dict[str, Any]:
    """The baseline and the good variant without any failing sibling."""
    return _run(mixed_folder, "alone", _mixed_doc([GOOD]))


def test_each_result_class_is_recorded(mixed: dict[str, Any]) -> None:
    assert [r["id"] for r in mixed["runs"]] == ["baseline"] + [v["id"] for v in MIXED_VARIANTS]
    status = {r["id"]: r["status"] for r in mixed["runs"]}
    assert status == {"baseline": "succeeded", "undeclared-id": "invalid_parameter",
                      "good": "succeeded", "list-for-scalar": "invalid_parameter",
                      "inertia-refused": "compile_failure", "huge-gear": "runtime_failure",
                      "heavy-damping": "assertion_failure"}
    for run in mixed["runs"]:
        assert run["success"] is (run["status"] == "succeeded")
        assert (run["error_reason"] is None) is run["success"]
        assert run["finished_at"] >= run["started_at"]
    assert mixed["summary"] == {"runs": 7, "succeeded": 2, "by_status": {
        "succeeded": 2, "invalid_parameter": 2, "compile_failure": 1, "runtime_failure": 1,
        "assertion_failure": 1}}
    json.dumps(mixed, allow_nan=False)


def test_invalid_parameter_records(mixed: dict[str, Any]) -> None:
    by_id = _by_id(mixed)
    undeclared = by_id["undeclared-id"]
    assert "'no_such_parameter' not declared by the baseline overlay" in undeclared[
        "error_reason"]
    assert "declared: wheel_damping, motor_gear, axle_izz" in undeclared["error_reason"]
    wrong_type = by_id["list-for-scalar"]
    assert "parameter 'wheel_damping'" in wrong_type["error_reason"]
    assert "takes one number, got list [0.1, 0.2]" in wrong_type["error_reason"]
    assert wrong_type["parameters"]["wheel_damping"] == [0.1, 0.2]
    for run in (undeclared, wrong_type):
        assert (run["metrics"], run["assertions"], run["trace"]) == ({}, [], None)
        assert (run["plan"], run["parameter_set_hash"], run["targets"]) == (None, None, None)


def test_compile_failure_record(mixed: dict[str, Any]) -> None:
    run = _by_id(mixed)["inertia-refused"]
    assert "cannot compile model" in run["error_reason"]
    assert "inertia must satisfy A + B >= C" in run["error_reason"]
    assert run["parameters"] == {"wheel_damping": 0.02, "motor_gear": 10.0, "axle_izz": 1.0}
    assert run["parameter_diff"] == {"axle_izz": {"baseline": 0.0005, "value": 1.0,
                                                  "delta": pytest.approx(0.9995)}}
    assert (run["metrics"], run["trace"]) == ({}, None)
    assert (run["plan"], run["parameter_set_hash"], run["targets"]) == (None, None, None)


def test_runtime_failure_record(mixed: dict[str, Any]) -> None:
    run = _by_id(mixed)["huge-gear"]
    assert run["error_reason"].startswith("MuJoCo warning mjWARN_BADQACC")
    assert run["parameter_diff"]["motor_gear"]["value"] == 1.0e9
    assert run["plan"]["provenance"]["parameter_set_hash"] == run["parameter_set_hash"]
    assert run["metrics"] == {}
    assert run["trace"] is not None


def test_assertion_failure_record(mixed: dict[str, Any]) -> None:
    run = _by_id(mixed)["heavy-damping"]
    speed = run["metrics"]["final_wheel_speed"]
    assert 0 < speed < 5.0
    assert run["assertions"] == [{"metric": "final_wheel_speed", "op": "gt", "value": 5.0,
                                  "actual": speed, "passed": False, "status": "failed"}]
    assert run["error_reason"] == f"final_wheel_speed = {speed!r} is not gt 5"
    assert query(run["trace"], "joint:wheel_joint.velocity").rows[-1][2] == speed


def test_failing_siblings_leave_the_other_runs_intact(mixed: dict[str, Any],
                                                      alone: dict[str, Any]) -> None:
    assert [r["status"] for r in alone["runs"]] == ["succeeded", "succeeded"]
    mixed_runs, alone_runs = _by_id(mixed), _by_id(alone)
    for run_id in ("baseline", "good"):
        a, b = mixed_runs[run_id], alone_runs[run_id]
        assert a["status"] == "succeeded"
        assert _without_rtf(a["metrics"]) == _without_rtf(b["metrics"])
        assert a["parameter_set_hash"] == b["parameter_set_hash"]
        assert a["plan"]["provenance"]["compiled_model_sha256"] == b["plan"]["provenance"][
            "compiled_model_sha256"]
    variants = {v["id"]: v for v in mixed["comparison"]["variants"]}
    assert variants["huge-gear"]["success"] is False
    assert variants["huge-gear"]["metric_diff"] == {}
    assert variants["good"]["metric_diff"]["final_wheel_speed"]["variant"] == mixed_runs["good"][
        "metrics"]["final_wheel_speed"]


def test_two_workers_give_the_same_records_with_failures(mixed_folder: Path,
                                                         mixed: dict[str, Any]) -> None:
    parallel = _run(mixed_folder, "mixed-parallel", _mixed_doc(MIXED_VARIANTS, workers=2))
    assert [_comparable(r) for r in parallel["runs"]] == [_comparable(r) for r in mixed["runs"]]
    assert parallel["summary"] == mixed["summary"]


def test_overlay_on_a_missing_object_is_a_compile_failure_of_every_run(
        mixed_folder: Path) -> None:
    overlay = copy.deepcopy(MIXED_OVERLAY)
    overlay["parameters"].append({"id": "ghost_damping", "value": 0.1,
                                  "target": "mujoco:joint_damping:ghost_joint:0"})
    _dump(mixed_folder / "ghost-baseline.yaml", overlay)
    doc = _experiment_doc(variants=[GOOD], metrics=MIXED_METRICS,
                          baseline_overlay="ghost-baseline.yaml", steps=50)
    document = _run(mixed_folder, "ghost", doc)
    assert [(r["id"], r["status"]) for r in document["runs"]] == [
        ("baseline", "compile_failure"), ("good", "compile_failure")]
    for run in document["runs"]:
        assert "ghost_joint" in run["error_reason"]
        assert "overlay parameter 'ghost_damping'" in run["error_reason"]
        assert run["trace"] is None
    assert document["comparison"]["baseline"]["success"] is False
    assert not (mixed_folder / "ghost.traces" / "baseline").exists()


def test_timeout(mixed_folder: Path) -> None:
    doc = _mixed_doc([GOOD])
    doc["execution"].update(steps=20000, timeout_seconds=1.0e-6)
    document = _run(mixed_folder, "timeout", doc)
    assert [(r["id"], r["status"]) for r in document["runs"]] == [
        ("baseline", "timeout"), ("good", "timeout")]
    for run in document["runs"]:
        assert run["error_reason"].startswith("timeout_seconds 1e-06 exceeded at tick ")
        assert run["error_reason"].endswith(" of 20000")
        assert run["success"] is False and run["metrics"] == {}
        assert run["wall_seconds"] < 10  # stopped early, not after 20 000 ticks
        assert run["trace"] == str(mixed_folder / "timeout.traces" / run["id"])


def test_unavailable_metrics(mixed_folder: Path, mixed: dict[str, Any]) -> None:
    metrics = [*MIXED_METRICS,
               {"id": "ghost_position", "kind": "signal", "signal": "body:ghost.position",
                "reduce": "final"},
               {"id": "ghost_contact", "kind": "contact_duration", "contact": "ghost_geom"},
               {"id": "ghost_sensor", "kind": "signal", "signal": "sensor:ghost_sensor",
                "reduce": "max_abs"}]
    doc = _experiment_doc(variants=[GOOD], metrics=metrics, assertions=MIXED_ASSERTIONS,
                          baseline_overlay="mixed-baseline.yaml", steps=300)
    document = _run(mixed_folder, "unavailable", doc)
    reference = _by_id(mixed)
    for run in document["runs"]:
        assert run["status"] == "unavailable_metric"
        assert run["success"] is False
        for metric_id in ("ghost_position", "ghost_contact", "ghost_sensor"):
            assert f"metric {metric_id!r}" in run["error_reason"]
            assert run["metrics"][metric_id] is None
        assert "ghost" in run["error_reason"]
        # The available metrics are still computed, and equal those of the same run elsewhere.
        available = {k: run["metrics"][k] for k in ("final_wheel_speed", "chassis_displacement",
                                                    "wheel_contact_time")}
        assert available == {k: reference[run["id"]]["metrics"][k] for k in available}
        assert run["assertions"][0]["passed"] is True
        assert Path(run["trace"]).is_dir()


def test_manifest_fixed_overlay_stays_in_effect(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    _dump(folder / "fixed.yaml", {"schema_version": {"major": 1, "minor": 0}, "parameters": [
        {"id": "chassis_mass", "value": 3.0, "target": "mujoco:body_mass:chassis"}]})
    manifest = yaml.safe_load((folder / "simulation.yaml").read_text())
    manifest["parameter_overlays"] = ["fixed.yaml"]
    _dump(folder / "simulation.yaml", manifest)
    doc = _experiment_doc(variants=[_variant("damping-010", wheel_damping=0.1)],
                          metrics=MIXED_METRICS[:1], steps=50)
    document = _run(folder, "fixed-study", doc)
    for run in document["runs"]:
        assert run["status"] == "succeeded", run["error_reason"]
        assert {t["id"]: t["value"] for t in run["targets"]} == {
            "chassis_mass": 3.0, "wheel_damping": DAMPINGS.get(run["id"], 0.1)}
        assert run["plan"]["provenance"]["parameter_overlays"] == {
            str(folder / "fixed.yaml"): hashlib.sha256(
                (folder / "fixed.yaml").read_bytes()).hexdigest()}
        assert run["parameters"] == {"wheel_damping": DAMPINGS.get(run["id"], 0.1)}


def test_existing_trace_folder_is_refused(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    path = _dump(folder / "e.yaml", _experiment_doc(variants=[], metrics=MIXED_METRICS[:1],
                                                    steps=10))
    (folder / "taken").mkdir()
    with pytest.raises(ExperimentError, match="the trace folder already exists"):
        run_experiment(path, traces=folder / "taken")
    assert list((folder / "taken").iterdir()) == []


def test_progress_lines(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    path = _dump(folder / "e.yaml", _experiment_doc(
        variants=[GOOD, _variant("bad", nope=1.0)], metrics=MIXED_METRICS[:1], steps=20))
    lines: list[str] = []
    run_experiment(path, traces=folder / "t", progress=lines.append)
    assert len(lines) == 3
    assert lines[0].startswith("[1/3] baseline succeeded (")
    assert lines[1].startswith("[2/3] good succeeded (")
    assert lines[2].startswith("[3/3] bad invalid_parameter (")
    assert "'nope' not declared" in lines[2]


# ------------------------------------------------------------------ fixed bugs (regressions)
def _one_variant(tmp_path: Path, values: dict[str, Any]) -> dict[str, Any]:
    folder = _example(tmp_path / "example")
    doc = _experiment_doc(variants=[GOOD, _variant("odd", **values)],
                          metrics=MIXED_METRICS[:1], steps=20)
    return _run(folder, "odd", doc)


def test_list_with_a_non_number_is_an_invalid_parameter_not_a_crash(tmp_path: Path) -> None:
    document = _one_variant(tmp_path, {"wheel_damping": [1.0, "x"]})
    assert [r["status"] for r in document["runs"]] == [
        "succeeded", "succeeded", "invalid_parameter"]


def test_non_finite_value_keeps_the_result_document_strict_json(tmp_path: Path) -> None:
    document = _one_variant(tmp_path, {"wheel_damping": math.inf})
    assert _by_id(document)["odd"]["status"] == "invalid_parameter"
    write_json_atomically(tmp_path / "results.json", document)


def test_rejected_bool_value_is_recorded_as_given(tmp_path: Path) -> None:
    run = _by_id(_one_variant(tmp_path, {"wheel_damping": True}))["odd"]
    assert run["status"] == "invalid_parameter"
    assert run["parameters"]["wheel_damping"] is True


def test_invalid_parameter_record_keeps_its_parameter_diff(tmp_path: Path) -> None:
    document = _one_variant(tmp_path, {"wheel_damping": [0.1, 0.2]})
    run = _by_id(document)["odd"]
    assert run["status"] == "invalid_parameter"
    assert "wheel_damping" in run["parameter_diff"]


def test_invalid_value_error_names_the_experiment_file_and_variant(tmp_path: Path) -> None:
    document = _one_variant(tmp_path, {"wheel_damping": "high"})
    reason = _by_id(document)["odd"]["error_reason"]
    assert str(tmp_path / "example" / "odd.yaml") in reason
    assert "variants[1].parameter_values.wheel_damping" in reason


# ------------------------------------------------------------------ episode seed
def _seed_rows(trace: str) -> list[Any]:
    """The noisy encoder's samples: what the episode seed decides."""
    return [row[2:] for row in query(trace, "device:wheel_encoder").rows]


def test_run_records_carry_the_episode_seed_the_runs_used(tmp_path: Path) -> None:
    """Every run record (a run failing before its plan is built too) names the episode seed,
    the trace was written under it, and the device noise follows it: ``execution.seed`` when
    given, else the scenario's (the experiment's scenario file, else the manifest's, the
    plan's ``episode_seed``)."""
    folder = _example(tmp_path / "example")
    manifest = yaml.safe_load((folder / "simulation.yaml").read_text())
    manifest["scenario"]["seed"] = 41
    _dump(folder / "simulation.yaml", manifest)
    scenario = yaml.safe_load((folder / "drive-start.yaml").read_text())
    _dump(folder / "seeded-start.yaml", {**scenario, "seed": 5})
    variants = [GOOD, _variant("bad", nope=1.0)]
    cases: dict[str, tuple[dict[str, Any], int]] = {}
    for name, scenario_file, execution, expected in (
            ("manifest-seed", None, {}, 41), ("explicit-41", None, {"seed": 41}, 41),
            ("execution-seed", None, {"seed": 7}, 7),
            ("scenario-seed", "seeded-start.yaml", {}, 5),
            ("both", "seeded-start.yaml", {"seed": 9}, 9)):
        doc = _experiment_doc(variants=variants, metrics=MIXED_METRICS[:1], steps=50,
                              **execution)
        if scenario_file is None:
            del doc["scenario"]
        else:
            doc["scenario"] = scenario_file
        cases[name] = (_run(folder, name, doc), expected)
    rows: dict[str, list[Any]] = {}
    for name, (document, seed) in cases.items():
        assert document["execution"]["seed"] == seed, name
        runs = _by_id(document)
        assert [r["status"] for r in document["runs"]] == [
            "succeeded", "succeeded", "invalid_parameter"], name
        for run in document["runs"]:
            assert run["episode_seed"] == seed, (name, run["id"])
        for run_id in ("baseline", "good"):
            with TraceReader(runs[run_id]["trace"]) as reader:
                assert reader.provenance["episode_seed"] == seed
                assert [e.seed for e in reader.episodes()] == [seed]
        # The plan's own seed is the manifest's, whatever the run started from.
        assert runs["baseline"]["plan"]["provenance"]["episode_seed"] == 41
        rows[name] = _seed_rows(runs["baseline"]["trace"])
        assert len(rows[name]) >= 20
    # The noise follows the recorded seed: the same seed gives the same samples.
    assert rows["manifest-seed"] == rows["explicit-41"]
    assert rows["execution-seed"] != rows["manifest-seed"]
    assert rows["scenario-seed"] != rows["manifest-seed"]
    assert rows["both"] != rows["scenario-seed"]
