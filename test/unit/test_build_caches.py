"""Build-time caches and deferred work: provenance and layout computed on first read, resolved
components / asset lists / model-file hashes reused while their inputs are unchanged,
``ParameterOverlays.with_values`` and the candidate template, memoized replay-block control
tables, the rollout context, and calibration workers taking turns.

Every model and manifest is written into ``tmp_path``; the calibration tests use the small rig
of ``_calibration_rig``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _calibration_rig import duty, request_doc, samples, write_request, write_rig
from _calibration_rig import manifest_doc as rig_manifest_doc
from _models import (HINGE_XML, dense_records, device, manifest_doc, motor,
                     write_manifest, write_model)

from fibril_calibration.model.candidate_plan import CandidatePlanBuilder
from fibril_calibration.errors import EvaluationError
from fibril_calibration.parameters import CalibrationParameter
from fibril_calibration.solve.problem import CalibrationProblem
from fibril_calibration.request import load_calibration_request
from fibril_sim_core import (
    InstanceError,
    MujocoTarget,
    OverlayParameter,
    ParameterOverlays,
    PlanError,
    SimulationBuilder,
    SimulationPlan,
)
from fibril_sim_core.overlays import ComponentTarget, OverlayError
from fibril_sim_core import replay as replay_module
from fibril_sim_core import provenance as prov
from fibril_sim_core.manifest import load_manifest
from fibril_sim_core.plan import trace_layout
from fibril_sim_core.provenance import DeferredMapping

PROVENANCE_KEYS = ["manifest_path", "manifest_sha256", "model_path", "model_sha256",
                   "model_files", "assets", "compiled_model_sha256", "parameter_set_hash",
                   "parameter_overlays", "parameters", "extensions", "build", "episode_seed"]

# HINGE_XML bodies: rotor (shaft, dcmotor drive), slider (rail, motor push),
# arm (lift, position servo), wheel (axle, velocity servo).
COMPONENTS = [
    motor("m_drive", "drive", "drive/command"),
    motor("m_push", "push", "push/command"),
    motor("m_servo", "servo", "servo/command"),
    device("enc", "encoder", {"joint": "shaft"}, period=0.01),
]
SOURCES = {"drive/command": "voltage", "push/command": "torque", "servo/command": "position"}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_hinge(folder: Path, components: Any = COMPONENTS, xml: str = HINGE_XML,
                **extra: Any) -> Path:
    write_model(folder, xml)
    return write_manifest(folder, manifest_doc(components, **extra))


def body(plan: SimulationPlan, name: str) -> int:
    import mujoco

    return mujoco.mj_name2id(plan.model, mujoco.mjtObj.mjOBJ_BODY, name)


def dof(plan: SimulationPlan, joint: str) -> int:
    import mujoco

    jid = mujoco.mj_name2id(plan.model, mujoco.mjtObj.mjOBJ_JOINT, joint)
    return int(plan.model.jnt_dofadr[jid])


def records(ticks: int, every: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    """Dense recorded motor commands for SOURCES."""
    return dense_records(SOURCES, ticks, every, seed)


def _race(read: Callable[[int], Any], readers: int, started: threading.Event,
          gate: threading.Event) -> None:
    """Start ``readers`` threads at once; the first to compute sets ``started`` and waits for
    ``gate``, which opens once the others have had time to arrive at the lock."""
    start = threading.Barrier(readers + 1)

    def run(n: int) -> None:
        start.wait()
        read(n)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(readers)]
    for thread in threads:
        thread.start()
    start.wait()
    assert started.wait(2.0)
    time.sleep(0.05)  # the other readers arrive while the first computes
    gate.set()
    for thread in threads:
        thread.join(5.0)


def within(seconds: float, function: Callable[[], Any]) -> Any:
    """Run ``function`` on a daemon thread; fail (instead of hanging) on a deadlock."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s (deadlock?)"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# =========================================================================== DeferredMapping
def test_deferred_mapping_computes_once_with_concurrent_readers() -> None:
    calls: list[int] = []
    started, gate = threading.Event(), threading.Event()

    def compute() -> dict[str, Any]:
        calls.append(threading.get_ident())
        started.set()
        gate.wait(2.0)  # hold every other reader at the lock while this one computes
        return {"b": 2, "a": [1, 2], "c": None}

    mapping = DeferredMapping(compute)
    seen: list[Any] = []

    def read(n: int) -> None:
        value = (mapping["a"], len(mapping), list(mapping), dict(mapping))[n % 4]
        seen.append((n % 4, value))

    _race(read, 8, started, gate)
    assert len(calls) == 1
    assert sorted(seen, key=lambda s: s[0]) == [
        (0, [1, 2]), (0, [1, 2]), (1, 3), (1, 3), (2, ["b", "a", "c"]), (2, ["b", "a", "c"]),
        (3, {"b": 2, "a": [1, 2], "c": None}), (3, {"b": 2, "a": [1, 2], "c": None})]
    # Later reads do not compute again; a Mapping, read-only, equal to the plain dict.
    assert mapping == {"b": 2, "a": [1, 2], "c": None} and mapping.get("zz") is None
    assert "c" in mapping and len(calls) == 1
    with pytest.raises(TypeError):
        mapping["a"] = 3  # type: ignore[index]
    with pytest.raises(KeyError):
        mapping["missing"]


def test_deferred_mapping_pickles_and_copies_as_its_values() -> None:
    import pickle

    deferred = DeferredMapping(lambda: {"a": 1, "b": [2, 3]})
    assert pickle.loads(pickle.dumps(deferred)) == {"a": 1, "b": [2, 3]}
    assert copy.deepcopy(deferred) == {"a": 1, "b": [2, 3]}


def test_deferred_mapping_retries_after_a_failed_computation() -> None:
    attempts: list[int] = []

    def compute() -> dict[str, int]:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("transient")
        return {"x": 1}

    mapping = DeferredMapping(compute)
    with pytest.raises(RuntimeError, match="transient"):
        dict(mapping)
    assert mapping["x"] == 1 and len(attempts) == 2
    assert dict(mapping) == {"x": 1} and len(attempts) == 2


# =========================================================================== provenance
def test_provenance_keys_order_and_values(tmp_path: Path) -> None:
    path = write_hinge(tmp_path)
    mass = OverlayParameter("mass", 0.3, (MujocoTarget("body_mass", "rotor"),), unit="kg")
    plan = SimulationBuilder().build(path, [mass])
    provenance = dict(plan.provenance)
    assert list(provenance) == PROVENANCE_KEYS
    assert list(plan.provenance) == PROVENANCE_KEYS
    overlays = ParameterOverlays((mass,))
    model = tmp_path / "model.xml"
    assert provenance["manifest_path"] == str(plan.manifest.path)
    assert provenance["manifest_sha256"] == plan.manifest.sha256
    assert provenance["model_path"] == str(plan.manifest.model)
    assert provenance["model_sha256"] == sha(model)
    assert provenance["model_files"] == {"model.xml": sha(model)}
    assert provenance["assets"] == {}
    assert provenance["compiled_model_sha256"] == prov.compiled_model_sha256(plan.model)
    assert provenance["parameter_set_hash"] == overlays.parameter_set_hash
    assert provenance["parameter_overlays"] == {}
    assert provenance["parameters"] == overlays.describe()
    assert provenance["extensions"] == []
    assert provenance["build"] == prov.build_identity()
    # Still JSON-able through inspect().
    assert json.loads(json.dumps(plan.inspect()))["provenance"]["model_sha256"] == sha(model)


def test_in_memory_hashes_wait_for_the_first_read(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_hinge(tmp_path)
    calls: list[int] = []
    real = prov.compiled_model_sha256
    started, gate = threading.Event(), threading.Event()

    def counting(model: Any) -> str:
        calls.append(1)
        started.set()
        gate.wait(2.0)
        return real(model)

    monkeypatch.setattr(prov, "compiled_model_sha256", counting)
    plan = SimulationBuilder().build(path)
    assert calls == []  # not computed by the build
    hashes: list[str] = []
    _race(lambda n: hashes.append(plan.provenance["compiled_model_sha256"]), 6, started, gate)
    assert calls == [1]
    assert hashes == [real(plan.model)] * 6
    assert dict(plan.provenance)["compiled_model_sha256"] == real(plan.model)
    assert calls == [1]


def test_model_hash_is_the_build_time_one_even_when_read_later(tmp_path: Path) -> None:
    path = write_hinge(tmp_path)
    model = tmp_path / "model.xml"
    original = sha(model)
    builder = SimulationBuilder()
    first = builder.build(path)
    # Rewrite the model (other content and size) before anyone reads the first provenance.
    model.write_text(HINGE_XML.replace('mass="0.2"', 'mass="0.35"', 1), encoding="utf-8")
    changed = sha(model)
    assert changed != original
    assert first.provenance["model_sha256"] == original
    assert first.provenance["model_files"] == {"model.xml": original}
    assert first.provenance["compiled_model_sha256"] == prov.compiled_model_sha256(first.model)
    second = builder.build(path)
    assert second.provenance["model_sha256"] == changed
    assert second.provenance["model_files"] == {"model.xml": changed}
    assert first.model.body_mass[body(first, "rotor")] == pytest.approx(0.2)
    assert second.model.body_mass[body(second, "rotor")] == pytest.approx(0.35)
    assert (second.provenance["compiled_model_sha256"]
            != first.provenance["compiled_model_sha256"])
    # The first plan still reports what it was built from.
    assert first.provenance["model_sha256"] == original


def test_layout_equals_trace_layout(tmp_path: Path) -> None:
    plan = SimulationBuilder().build(write_hinge(tmp_path))
    expected = trace_layout(plan.model, plan.timebase, plan.devices, plan.actuators)
    assert isinstance(plan.layout, DeferredMapping)
    assert dict(plan.layout) == expected
    assert list(plan.layout) == list(expected)
    assert plan.layout["endpoints"] == {"drive/command": "drive", "push/command": "push",
                                        "servo/command": "servo"}
    assert plan.layout["devices"]["enc"]["sample_type"] == plan.device("enc").sample_type


# =========================================================================== builder caches
def test_resolved_components_are_reused_while_inputs_are_the_same(tmp_path: Path) -> None:
    path = write_hinge(tmp_path)
    manifest = load_manifest(path)
    builder = SimulationBuilder()
    builder.build(manifest)
    resolved = builder._resolved[3]  # type: ignore[index]
    damping = OverlayParameter("d", 0.1, (MujocoTarget("joint_damping", "shaft"),))
    plan = builder.build(manifest, [damping])  # MuJoCo overlays only: same components
    assert builder._resolved[3] is resolved  # type: ignore[index]
    assert plan.model.dof_damping[dof(plan, "shaft")] == pytest.approx(0.1)
    bias = OverlayParameter("bias", 0.5, (ComponentTarget("enc", "bias"),))
    builder.build(manifest, [bias])
    assert builder._resolved[3] is not resolved  # type: ignore[index]
    builder.build(load_manifest(path))  # another manifest object: resolved again
    assert builder._resolved[3] is not resolved  # type: ignore[index]


def test_component_overlay_values_reach_the_plan(tmp_path: Path) -> None:
    manifest = load_manifest(write_hinge(tmp_path))
    builder = SimulationBuilder()

    def with_bias(value: float | None, latency: float | None = None) -> SimulationPlan:
        overlays = []
        if value is not None:
            overlays.append(OverlayParameter("bias", value, (ComponentTarget("enc", "bias"),)))
        if latency is not None:
            overlays.append(OverlayParameter(
                "lat", latency, (ComponentTarget("m_push", "command_latency"),)))
        return builder.build(manifest, overlays)

    assert with_bias(0.5).device("enc").config["bias"] == 0.5
    assert with_bias(0.75).device("enc").config["bias"] == 0.75
    plain = with_bias(None)
    assert plain.device("enc").config["bias"] == 0.0
    assert plain.endpoints["push/command"].latency_ticks == 0
    again = with_bias(0.5, latency=0.003)
    assert again.device("enc").config["bias"] == 0.5
    assert again.endpoints["push/command"].latency_ticks == 3
    later = with_bias(0.5, latency=0.005)
    assert later.endpoints["push/command"].latency_ticks == 5
    assert with_bias(None).endpoints["push/command"].latency_ticks == 0
    # The encoder reads the joint plus the bias.
    for value in (0.0, 0.25):
        plan = with_bias(value)
        instance = plan.create_instance()
        instance.data.qpos[0] = 1.0
        instance.advance(12)
        outputs = [r for r in instance.poll() if type(r).__name__ == "DeviceOutput"]
        assert outputs[-1].values[0] == pytest.approx(1.0 + value, abs=2e-3)


def test_rewritten_model_file_is_picked_up_by_the_next_build(tmp_path: Path) -> None:
    path = write_hinge(tmp_path)
    model = tmp_path / "model.xml"
    builder = SimulationBuilder()
    first = builder.build(path)
    again = builder.build(path)  # unchanged: same hash, same compiled model
    assert again.provenance["model_sha256"] == first.provenance["model_sha256"]
    assert (again.provenance["compiled_model_sha256"]
            == first.provenance["compiled_model_sha256"])
    model.write_text(HINGE_XML.replace('mass="0.2"', 'mass="0.35"', 1)
                     + "<!-- longer -->\n", encoding="utf-8")
    second = builder.build(path)
    assert second.model.body_mass[body(second, "rotor")] == pytest.approx(0.35)
    assert second.provenance["model_sha256"] == sha(model)
    assert second.provenance["model_sha256"] != first.provenance["model_sha256"]
    assert (second.provenance["compiled_model_sha256"]
            != first.provenance["compiled_model_sha256"])
    # Back to the original content (size changes again): the original model again.
    model.write_text(HINGE_XML, encoding="utf-8")
    third = builder.build(path)
    assert third.model.body_mass[body(third, "rotor")] == pytest.approx(0.2)
    assert third.provenance["model_sha256"] == first.provenance["model_sha256"]


MESH_XML = """\
<mujoco model="mesh">
  <option timestep="0.001"/>
  <asset><mesh name="m" file="{file}"/></asset>
  <worldbody>
    <body name="piece"><joint name="j" type="hinge"/>
      <geom type="mesh" mesh="m" mass="1"/></body>
  </worldbody>
</mujoco>
"""


def _tetrahedron(scale: float) -> str:
    return (f"v 0 0 0\nv {scale} 0 0\nv 0 {scale} 0\nv 0 0 {scale}\n"
            "f 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n")


def test_asset_list_follows_the_model_file(tmp_path: Path) -> None:
    (tmp_path / "small.obj").write_text(_tetrahedron(0.1), encoding="utf-8")
    (tmp_path / "large_mesh.obj").write_text(_tetrahedron(0.25), encoding="utf-8")
    model = write_model(tmp_path, MESH_XML.format(file="small.obj"))
    path = write_manifest(tmp_path, manifest_doc([]))
    builder = SimulationBuilder()
    first = builder.build(path)
    assert first.provenance["assets"] == {"small.obj": sha(tmp_path / "small.obj")}
    assert builder.build(path).provenance["assets"] == first.provenance["assets"]
    model.write_text(MESH_XML.format(file="large_mesh.obj"), encoding="utf-8")
    second = builder.build(path)
    assert second.provenance["assets"] == {"large_mesh.obj": sha(tmp_path / "large_mesh.obj")}
    assert second.model.body_inertia[1][0] == pytest.approx(
        first.model.body_inertia[1][0] * 2.5 ** 2)


NESTED_MAIN = '<mujoco model="nested"><option timestep="0.001"/><include file="a.xml"/></mujoco>'
NESTED_BODY = ('<mujoco><worldbody><body name="piece"><joint name="j" type="hinge"/>'
               '<geom type="sphere" size="0.1" mass="{mass}"/></body></worldbody></mujoco>')


def test_a_nested_include_that_appears_later_is_tracked(tmp_path: Path) -> None:
    (tmp_path / "model.xml").write_text(NESTED_MAIN, encoding="utf-8")
    (tmp_path / "a.xml").write_text(NESTED_BODY.format(mass=1), encoding="utf-8")
    path = write_manifest(tmp_path, manifest_doc([]))
    builder = SimulationBuilder()
    assert builder.build(path).model.body_mass[1] == pytest.approx(1.0)
    (tmp_path / "a.xml").write_text('<mujoco><include file="b.xml"/></mujoco>',
                                    encoding="utf-8")
    (tmp_path / "b.xml").write_text(NESTED_BODY.format(mass=2), encoding="utf-8")
    assert builder.build(path).model.body_mass[1] == pytest.approx(2.0)
    (tmp_path / "b.xml").write_text(NESTED_BODY.format(mass=3.5), encoding="utf-8")
    plan = builder.build(path)
    assert set(plan.provenance["model_files"]) == {"model.xml", "a.xml", "b.xml"}
    assert plan.model.body_mass[1] == pytest.approx(3.5)


# =========================================================================== with_values
def _overlay_set(mass: float = 0.3, damping: float = 0.05, bias: float = 0.1,
                 shared: float = 0.02) -> tuple[OverlayParameter, ...]:
    return (
        OverlayParameter("mass", mass, (MujocoTarget("body_mass", "rotor"),), unit="kg"),
        # A multi-target parameter over two joints.
        OverlayParameter("damping", damping, (MujocoTarget("joint_damping", "shaft"),
                                              MujocoTarget("joint_damping", "axle"))),
        OverlayParameter("bias", bias, (ComponentTarget("enc", "bias"),), provenance="test"),
        # A multi-target parameter over a joint and a component config.
        OverlayParameter("shared", shared, (MujocoTarget("joint_armature", "rail"),
                                            ComponentTarget("enc", "offset"))),
    )


def _same_overlays(a: ParameterOverlays, b: ParameterOverlays) -> None:
    assert a.parameter_set_hash == b.parameter_set_hash
    assert a.identity == b.identity
    assert a.mujoco == b.mujoco
    assert a.components == b.components
    assert a.parameters == b.parameters
    assert a.describe() == b.describe()


def test_with_values_equals_a_fresh_set(tmp_path: Path) -> None:
    template = ParameterOverlays(_overlay_set())
    before = (template.parameter_set_hash, template.identity)
    new = {"mass": 0.45, "damping": 0.2, "bias": -0.3, "shared": 0.07}
    changed = template.with_values(new)
    fresh = ParameterOverlays(_overlay_set(**new))
    _same_overlays(changed, fresh)
    assert changed.parameter_set_hash != template.parameter_set_hash
    assert (template.parameter_set_hash, template.identity) == before  # template untouched
    assert changed.components == {"enc": {"bias": ("bias", -0.3), "offset": ("shared", 0.07)}}
    # Some values only: the others keep the template's.
    _same_overlays(template.with_values({"bias": 0.9}), ParameterOverlays(_overlay_set(bias=0.9)))
    _same_overlays(template.with_values({}), template)
    # Integers are checked and stored like the fresh set stores them.
    _same_overlays(template.with_values({"mass": 2}), ParameterOverlays(_overlay_set(mass=2)))

    path = write_hinge(tmp_path)
    plans = [SimulationBuilder().build(path, changed), SimulationBuilder().build(path, fresh),
             SimulationBuilder().build(path, list(_overlay_set(**new)))]
    hashes = {prov.compiled_model_sha256(p.model) for p in plans}
    assert len(hashes) == 1
    for plan in plans:
        assert plan.model.body_mass[body(plan, "rotor")] == pytest.approx(0.45)
        assert plan.model.dof_damping[dof(plan, "shaft")] == pytest.approx(0.2)
        assert plan.model.dof_damping[dof(plan, "axle")] == pytest.approx(0.2)
        assert plan.model.dof_armature[dof(plan, "rail")] == pytest.approx(0.07)
        assert plan.device("enc").config["bias"] == -0.3
        assert plan.device("enc").config["offset"] == 0.07
        assert plan.provenance["parameter_set_hash"] == fresh.parameter_set_hash
        assert plan.provenance["parameters"] == fresh.describe()


def test_with_values_on_a_range_target() -> None:
    rail = MujocoTarget("joint_range", "rail")
    template = ParameterOverlays((OverlayParameter("range", (-0.3, 0.3), (rail,)),))
    _same_overlays(template.with_values({"range": [-0.1, 0.4]}),
                   ParameterOverlays((OverlayParameter("range", (-0.1, 0.4), (rail,)),)))
    with pytest.raises(OverlayError, match=r"'range'.*reversed range"):
        template.with_values({"range": (0.4, -0.1)})
    with pytest.raises(OverlayError, match="'range'"):
        template.with_values({"range": 0.4})


@pytest.mark.parametrize(("pid", "value", "message"), [
    ("mass", -0.1, r"'mass'.*mujoco:body_mass:rotor:0 must be >= 0"),
    ("shared", -0.01, r"'shared'.*mujoco:joint_armature:rail:0 must be >= 0"),
    ("damping", -1.0, r"'damping'.*joint_damping.*must be >= 0"),
    ("mass", math.nan, r"'mass'.*not finite"),
    ("mass", math.inf, r"'mass'.*not finite"),
    ("bias", "high", r"'bias'.*takes one number"),
    ("mass", True, r"'mass'.*takes one number"),
    ("nope", 1.0, r"no overlay parameter\(s\) 'nope'; parameters: mass, damping, bias, shared"),
])
def test_with_values_checks_every_value(pid: str, value: Any, message: str) -> None:
    template = ParameterOverlays(_overlay_set())
    with pytest.raises(OverlayError, match=message):
        template.with_values({pid: value})


def test_with_values_positive_kind() -> None:
    drive = MujocoTarget("dcmotor_resistance", "drive")
    template = ParameterOverlays((OverlayParameter("R", 2.0, (drive,)),))
    assert template.with_values({"R": 3.0}).parameters[0].value == 3.0
    with pytest.raises(OverlayError, match=r"'R'.*must be > 0, got 0"):
        template.with_values({"R": 0.0})


def test_given_overlays_are_used_as_is_without_manifest_overlays(tmp_path: Path) -> None:
    path = write_hinge(tmp_path)
    manifest = load_manifest(path)
    overlays = ParameterOverlays(_overlay_set())
    assert SimulationBuilder._overlays(manifest, overlays) is overlays
    plan = SimulationBuilder().build(manifest, overlays=overlays)
    assert plan.provenance["parameter_set_hash"] == overlays.parameter_set_hash
    assert plan.model.body_mass[body(plan, "rotor")] == pytest.approx(0.3)
    # With manifest overlays the given set is layered over them (a new set).
    artifact = tmp_path / "overlay.yaml"
    artifact.write_text(yaml.safe_dump({
        "schema_version": {"major": 1, "minor": 1},
        "parameters": [{"id": "mass", "value": 0.9, "target": "mujoco:body_mass:slider"},
                       {"id": "extra", "value": 0.4, "target": "mujoco:body_mass:arm"}]}),
        encoding="utf-8")
    layered_path = write_manifest(tmp_path, manifest_doc(
        COMPONENTS, parameter_overlays=["overlay.yaml"]), "layered.yaml")
    layered = load_manifest(layered_path)
    merged = SimulationBuilder._overlays(layered, overlays)
    assert merged is not overlays
    assert sorted(p.id for p in merged.parameters) == ["bias", "damping", "extra", "mass",
                                                        "shared"]
    plan = SimulationBuilder().build(layered, overlays=overlays)
    assert plan.model.body_mass[body(plan, "rotor")] == pytest.approx(0.3)  # given wins
    assert plan.model.body_mass[body(plan, "slider")] == pytest.approx(0.1)
    assert plan.model.body_mass[body(plan, "arm")] == pytest.approx(0.4)
    assert plan.provenance["parameter_overlays"] == {str(artifact): sha(artifact)}


# =========================================================================== candidate plans
def _candidate_parameters() -> list[CalibrationParameter]:
    return [
        CalibrationParameter("mass", 0.01, 2.0, 0.2, targets=(MujocoTarget("body_mass", "rotor"),)),
        CalibrationParameter("damping", 0.0, 1.0, 0.1,
                             targets=(MujocoTarget("joint_damping", "shaft"),
                                      MujocoTarget("joint_damping", "axle"))),
        CalibrationParameter("bias", -1.0, 1.0, 0.0, targets=(ComponentTarget("enc", "bias"),)),
    ]


def test_candidate_builder_applies_values_and_checks_them_after_the_template(
        tmp_path: Path) -> None:
    path = write_hinge(tmp_path)
    builder = CandidatePlanBuilder(path, _candidate_parameters())

    def check(plan: SimulationPlan, mass: float, damping: float, bias: float) -> None:
        assert plan.model.body_mass[body(plan, "rotor")] == pytest.approx(mass)
        assert plan.model.dof_damping[dof(plan, "shaft")] == pytest.approx(damping)
        assert plan.model.dof_damping[dof(plan, "axle")] == pytest.approx(damping)
        assert plan.device("enc").config["bias"] == bias

    check(builder.build({"mass": 0.3, "damping": 0.1, "bias": 0.0}), 0.3, 0.1, 0.0)
    assert builder._template is not None
    second = builder.build({"mass": 0.7, "damping": 0.25, "bias": 0.125})
    check(second, 0.7, 0.25, 0.125)
    reference = CandidatePlanBuilder(path, _candidate_parameters()).build(
        {"mass": 0.7, "damping": 0.25, "bias": 0.125})
    assert (second.provenance["compiled_model_sha256"]
            == reference.provenance["compiled_model_sha256"])
    assert second.provenance["parameter_set_hash"] == reference.provenance["parameter_set_hash"]

    with pytest.raises(OverlayError, match=r"'mass'.*must be >= 0, got -0.5") as caught:
        builder.build({"mass": -0.5, "damping": 0.1, "bias": 0.0})
    assert isinstance(caught.value, PlanError)
    with pytest.raises(OverlayError, match=r"'damping'.*not finite"):
        builder.build({"mass": 0.5, "damping": math.nan, "bias": 0.0})
    with pytest.raises(KeyError, match="damping"):
        builder.build({"mass": 0.5, "bias": 0.0})
    with pytest.raises(KeyError, match="mass, bias"):
        builder.build({"damping": 0.5})
    # The builder is still usable, with the new values.
    check(builder.build({"mass": 1.5, "damping": 0.0, "bias": -0.5}), 1.5, 0.0, -0.5)


def test_candidate_builder_first_build_failures(tmp_path: Path) -> None:
    path = write_hinge(tmp_path)
    builder = CandidatePlanBuilder(path, _candidate_parameters())
    with pytest.raises(KeyError, match="bias"):
        builder.build({"mass": 0.5, "damping": 0.1})
    with pytest.raises(OverlayError, match="'mass'"):
        builder.build({"mass": -1.0, "damping": 0.1, "bias": 0.0})
    plan = builder.build({"mass": 0.5, "damping": 0.1, "bias": 0.0})
    assert plan.model.body_mass[body(plan, "rotor")] == pytest.approx(0.5)


# =========================================================================== replay blocks
def _hinge_plan(folder: Path, latency: float = 0.0) -> SimulationPlan:
    config = {"command_latency": latency} if latency else {}
    return SimulationBuilder().build(write_hinge(folder, [
        motor("m_drive", "drive", "drive/command"),
        motor("m_push", "push", "push/command", **config),
        motor("m_servo", "servo", "servo/command"),
    ]))


CHUNKS = (5, 37, 120, 138)  # 300 ticks; blocks end at each advance() boundary


def _replay(plan: SimulationPlan, inputs: Any, *, collect: bool = False,
            context: Any = None, ctrl: dict[int, float] | None = None
            ) -> dict[str, np.ndarray]:
    instance = plan.create_instance(4, collect=collect, rollout_context=context)
    for index, value in (ctrl or {}).items():
        instance.data.ctrl[index] = value
    instance.enqueue_recorded_trace_inputs(inputs)
    for chunk in CHUNKS:
        instance.advance(chunk)
    assert instance.tick == sum(CHUNKS)
    return {name: getattr(instance.data, name).copy()
            for name in ("qpos", "qvel", "act", "ctrl", "qacc")}


def _assert_bitwise(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


def _trajectory(prepared: Any) -> Any:
    found = [c for c in prepared._controls.values() if c is not None]
    assert len(found) == 1
    return found[0]


def test_instances_share_the_memoized_block_tables(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _hinge_plan(tmp_path)
    prepared = plan.prepare_recorded_inputs(records(300))
    computed: list[bool] = []
    real = replay_module.block_controls

    def counting(*args: Any) -> Any:
        computed.append(bool(args[3]))  # waiting releases?
        return real(*args)

    monkeypatch.setattr(replay_module, "block_controls", counting)
    first = _replay(plan, prepared)
    memo = _trajectory(prepared).blocks
    assert len(memo) >= 1 and len(computed) == len(memo)
    assert computed == [False] * len(computed)
    for table, consumed, later in memo.values():
        assert not table.flags.writeable
        with pytest.raises(ValueError):
            table[0, 0] = 1.0
        assert consumed > 0 and later == ()
    snapshot = {key: value[0].copy() for key, value in memo.items()}
    second = _replay(plan, prepared)
    assert len(computed) == len(memo)  # nothing computed again: every table came from the memo
    _assert_bitwise(first, second)
    for key, table in snapshot.items():  # and nobody wrote into a shared table
        assert memo[key][0].tobytes() == table.tobytes()
    # Tick-by-tick stepping (collect=True) gets the same state, bit for bit.
    _assert_bitwise(first, _replay(plan, prepared, collect=True))
    assert not np.allclose(first["qvel"], 0.0)
    # Another starting ctrl (the velocity servo, never commanded here) is another table.
    spinning = _replay(plan, prepared, ctrl={3: 0.5})
    assert len(computed) > len(snapshot)
    _assert_bitwise(spinning, _replay(plan, prepared, collect=True, ctrl={3: 0.5}))
    assert spinning["ctrl"][3] == 0.5 and spinning["qvel"][3] != first["qvel"][3]


def test_latency_releases_waiting_across_blocks_match_tick_by_tick(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _hinge_plan(tmp_path, latency=0.003)
    assert plan.endpoints["push/command"].latency_ticks == 3
    prepared = plan.prepare_recorded_inputs(records(300))
    waited: list[bool] = []
    real = replay_module.block_controls

    def counting(*args: Any) -> Any:
        waited.append(bool(args[3]))
        return real(*args)

    monkeypatch.setattr(replay_module, "block_controls", counting)
    blocked = _replay(plan, prepared)
    assert any(waited)  # some block started with releases committed before it
    again = _replay(plan, prepared)  # memoized tables where nothing waits
    reference = _replay(plan, prepared, collect=True)
    _assert_bitwise(blocked, reference)
    _assert_bitwise(again, reference)
    # Unprepared records (parsed per instance) give the same.
    _assert_bitwise(_replay(plan, records(300)), reference)


class CountingContext:
    def __init__(self) -> None:
        self.enters = 0
        self.exits = 0
        self.depth = 0

    def __enter__(self) -> None:
        self.enters += 1
        self.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.exits += 1
        self.depth -= 1


def test_rollout_context_wraps_every_block_rollout(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _hinge_plan(tmp_path, latency=0.003)
    prepared = plan.prepare_recorded_inputs(records(300))
    context = CountingContext()
    depths: list[int] = []
    real = replay_module.rollout.rollout

    def spying(*args: Any, **kwargs: Any) -> Any:
        depths.append(context.depth)
        return real(*args, **kwargs)

    monkeypatch.setattr(replay_module.rollout, "rollout", spying)
    blocked = _replay(plan, prepared, context=context)
    assert len(depths) >= len(CHUNKS) - 1  # the first chunk (5 ticks) is stepped
    assert depths == [1] * len(depths)  # every rollout inside the context, entered once
    assert context.enters == context.exits == len(depths) and context.depth == 0
    # Tick by tick: no rollout, the context is never entered.
    stepped = CountingContext()
    depths.clear()
    reference = _replay(plan, prepared, collect=True, context=stepped)
    assert depths == [] and stepped.enters == stepped.exits == 0
    _assert_bitwise(blocked, reference)


def test_rollout_context_exits_when_the_rollout_fails(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _hinge_plan(tmp_path)
    context = CountingContext()

    def failing(*args: Any, **kwargs: Any) -> Any:
        assert context.depth == 1
        raise InstanceError("rollout broke")

    monkeypatch.setattr(replay_module.rollout, "rollout", failing)
    instance = plan.create_instance(collect=False, rollout_context=context)
    instance.enqueue_recorded_trace_inputs(plan.prepare_recorded_inputs(records(50)))
    with pytest.raises(InstanceError, match="rollout broke"):
        instance.advance(50)
    assert context.enters == context.exits == 1 and context.depth == 0


# =========================================================================== calibration turns
@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The calibration rig without its devices: a 1 ms encoder would end every replay block
    after one tick, and the rollouts (and their context) would never run."""
    path = write_rig(tmp_path_factory.mktemp("rig_turns"))
    doc = rig_manifest_doc()
    doc["components"] = [c for c in doc["components"] if c["type"] == "fibril_sim/motor"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _episodes_doc(rig: Path, **execution: Any) -> dict[str, Any]:
    """Three episodes observed through the shaft speed only, every tick (captured: the episode
    runs as replay blocks)."""
    doc = request_doc(rig, execution=execution)
    base = doc["training"][0]
    doc["training"] = []
    for n, command in enumerate((0.5, -0.3, 0.9)):
        episode = copy.deepcopy(base)
        episode.update(id=f"ep{n}", episode_seed=n,
                       recorded_inputs=[duty(1, command, 0), duty(2, -command, 23)])
        episode["signals"]["speed"]["samples"] = samples(list(range(1, 61)))
        doc["training"].append(episode)
    return doc


POINTS = [np.array([0.02]), np.array([0.05]), np.array([0.011]), np.array([0.3])]


def _problem(rig: Path, folder: Path, workers: int) -> CalibrationProblem:
    doc = _episodes_doc(rig, max_parallelism=workers, cache_entries=0)
    return CalibrationProblem(load_calibration_request(write_request(folder, doc)))


def test_taking_turns_gives_the_same_residuals_and_frees_the_turn(
        rig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes = []
    for workers in (1, 2):
        with _problem(rig, tmp_path, workers) as problem:
            held: list[bool] = []
            real = replay_module.rollout.rollout

            def spying(*args: Any, problem: CalibrationProblem = problem,
                       held: list[bool] = held, real: Any = real, **kwargs: Any) -> Any:
                held.append(problem._turn.locked())
                return real(*args, **kwargs)

            monkeypatch.setattr(replay_module.rollout, "rollout", spying)
            outcomes.append(within(30, lambda: problem.evaluate_many(POINTS)))
            monkeypatch.undo()
            assert not problem._turn.locked()
            assert problem.statistics.rollouts == 3 * len(POINTS)
            assert held  # the rollouts ran as blocks, in the rollout context
            if workers == 1:  # alone, the turn is given away during every rollout
                assert held == [False] * len(held)
            single = within(30, lambda: problem.evaluate(POINTS[1]))
            np.testing.assert_array_equal(single.residuals, outcomes[-1][1].residuals)
            assert not problem._turn.locked()
    for a, b in zip(*outcomes):
        assert a.residuals.tobytes() == b.residuals.tobytes()
        assert a.unweighted.tobytes() == b.unweighted.tobytes()
        assert a.blocks == b.blocks
    assert len({e.residuals.tobytes() for e in outcomes[0]}) == len(POINTS)


def test_failed_evaluations_free_the_turn(rig: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with _problem(rig, tmp_path, 2) as problem:
        # A value the overlay rejects: the candidate build fails.
        with pytest.raises(EvaluationError, match=r"candidate plan at \{damping=-0.01\}.*"
                                                  r"'damping'.*must be >= 0"):
            within(30, lambda: problem.evaluate_many([POINTS[0], np.array([-0.01]),
                                                      POINTS[1]]))
        assert not problem._turn.locked()
        assert problem.statistics.failures == 1

        # A rollout that fails while the turn is given away.
        real = replay_module.rollout.rollout

        def failing(model: Any, *args: Any, **kwargs: Any) -> Any:
            if model.dof_damping[0] == pytest.approx(0.0777):
                raise InstanceError("mujoco gave up")
            return real(model, *args, **kwargs)

        monkeypatch.setattr(replay_module.rollout, "rollout", failing)
        with pytest.raises(EvaluationError, match=r"episode 'ep0': rollout failed at tick "
                                                  r"\d+: mujoco gave up"):
            within(30, lambda: problem.evaluate_many([POINTS[2], np.array([0.0777])]))
        assert not problem._turn.locked()
        with pytest.raises(EvaluationError, match="mujoco gave up"):
            within(30, lambda: problem.evaluate(np.array([0.0777])))
        assert not problem._turn.locked()
        monkeypatch.undo()
        # Still usable afterwards, with the same residuals as before.
        after = within(30, lambda: problem.evaluate_many(POINTS))
        assert not problem._turn.locked()
    with _problem(rig, tmp_path, 1) as reference:
        expected = reference.evaluate_many(POINTS)
    for a, b in zip(after, expected):
        assert a.residuals.tobytes() == b.residuals.tobytes()
