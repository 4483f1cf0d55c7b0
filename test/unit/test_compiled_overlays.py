"""Compile once: candidates' values written into a compiled model are bit-identical to a full
compile (``fibril_sim_core.overlays.compiled``), for every target kind that takes this path;
every other kind compiles."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import mujoco
import pytest
from _models import manifest_doc, motor, write_manifest
from _patience import patience
from test_overlays import kinds_manifest, param

from fibril_sim_core import ParameterOverlays, PlanError, SimulationBuilder
from fibril_sim_core.manifest import SimulationManifest, load_manifest
from fibril_sim_core.overlays import compiled as compiled_overlays
from fibril_sim_core.overlays.artifact import MujocoTarget, OverlayParameter
from fibril_sim_core.overlays.mujoco_targets import KINDS
from fibril_sim_core.provenance import saved_model

# Every writable kind: (target on the kinds model, three values: first build, verification
# build, written build).
WRITTEN: dict[str, list[tuple[str, tuple[float, float, float]]]] = {
    "body_mass": [("mujoco:body_mass:rotor", (0.3, 0.45, 0.6)),  # geom-inferred inertia
                  ("mujoco:body_mass:ball_body", (0.2, 0.3, 0.25))],
    "body_inertia": [("mujoco:body_inertia:rotor:2", (0.0002, 0.00022, 0.00024))],
    "joint_damping": [("mujoco:joint_damping:shaft", (0.2, 0.7, 0.05)),
                      ("mujoco:joint_damping:ball", (0.2, 0.7, 0.05))],  # three dofs
    "joint_frictionloss": [("mujoco:joint_frictionloss:rail", (0.1, 0.3, 0.0))],
    "joint_armature": [("mujoco:joint_armature:shaft", (0.01, 0.05, 0.02)),
                       ("mujoco:joint_armature:ball", (0.01, 0.05, 0.02))],
    "joint_stiffness": [("mujoco:joint_stiffness:shaft", (1.0, 2.0, 0.0))],
    "geom_friction": [("mujoco:geom_friction:rotor_geom:1", (0.02, 0.03, 0.01))],
    "geom_solref": [("mujoco:geom_solref:rotor_geom:0", (0.05, 0.03, 0.04))],
    "geom_solimp": [("mujoco:geom_solimp:rotor_geom:4", (3.0, 2.0, 4.0))],
    "actuator_gear": [("mujoco:actuator_gear:push:0", (3.0, 2.0, 1.5))],
    "actuator_position_kp": [("mujoco:actuator_position_kp:servo", (80.0, 60.0, 70.0))],
    "actuator_position_kv": [("mujoco:actuator_position_kv:servo", (3.0, 1.0, 2.0))],
    "actuator_adhesion_gain": [("mujoco:actuator_adhesion_gain:stick", (9.0, 7.0, 8.0))],
    "equality_weld_torquescale": [("mujoco:equality_weld_torquescale:glue:0", (0.5, 0.7, 0.6))],
}
# Every other kind compiles each candidate (why: see the module docstring of ``compiled``).
COMPILED = {"actuator_forcerange", "actuator_delay", "tendon_range", "joint_range",
            "plugin_attribute", *(k for k in KINDS if k.startswith("dcmotor_"))}

CASES = [(kind, target, values) for kind, items in WRITTEN.items()
         for target, values in items]


def test_every_kind_is_classified() -> None:
    assert set(WRITTEN) == set(compiled_overlays.WRITABLE_KINDS)
    assert set(WRITTEN) | COMPILED == set(KINDS)
    assert not set(WRITTEN) & COMPILED


def overlays(*parameters: OverlayParameter) -> ParameterOverlays:
    return ParameterOverlays(parameters)


def builds(builder: SimulationBuilder, manifest: SimulationManifest, target: str,
           values: tuple[float, ...]) -> list[Any]:
    return [builder.build(manifest, overlays(param("p", v, target))) for v in values]


@pytest.mark.parametrize(("kind", "target", "values"), CASES,
                         ids=[f"{c[0]}:{c[1].split(':')[2]}" for c in CASES])
def test_written_model_is_bit_identical_to_a_full_compile(
        tmp_path: Path, kind: str, target: str, values: tuple[float, float, float]) -> None:
    manifest = load_manifest(kinds_manifest(tmp_path, angle="radian"))
    builder = SimulationBuilder()
    compiles = count_compiles(builder)
    plans = builds(builder, manifest, target, values)
    assert compiles == [1, 1, 0]  # the third candidate is written, not compiled
    assert builder._family is not None and builder._family.verified is True
    for plan, value in zip(plans, values):
        fresh = SimulationBuilder().build(manifest, overlays(param("p", value, target)))
        assert saved_model(plan.model) == saved_model(fresh.model)
        assert plan.provenance["compiled_model_sha256"] == \
            fresh.provenance["compiled_model_sha256"]

    # A released plan's model is reused for the next candidate: still bit-identical.
    pooled = id(plans[2].model)
    builder.release(plans[2])
    del plans[2], plan, fresh  # the last loop values are the released plan
    again = builder.build(manifest, overlays(param("p", values[0], target)))
    assert id(again.model) == pooled
    assert saved_model(again.model) == saved_model(plans[0].model)


def count_compiles(builder: SimulationBuilder) -> list[int]:
    """Compiles per build from now on (the list grows with each build)."""
    counts: list[int] = []
    compile_ = builder._compile
    build = builder.build

    def counting_compile(*args: Any) -> Any:
        counts[-1] += 1
        return compile_(*args)

    def counting_build(*args: Any, **kwargs: Any) -> Any:
        counts.append(0)
        return build(*args, **kwargs)

    builder._compile = counting_compile  # type: ignore[method-assign]
    builder.build = counting_build  # type: ignore[method-assign]
    return counts


def test_several_kinds_at_once_and_the_value_guard(tmp_path: Path) -> None:
    manifest = load_manifest(kinds_manifest(tmp_path, angle="radian"))
    targets = ["mujoco:body_mass:rotor", "mujoco:joint_armature:shaft",
               "mujoco:actuator_position_kp:servo", "mujoco:geom_friction:rotor_geom:0"]

    def at(scale: float) -> ParameterOverlays:
        return overlays(*(param(f"p{i}", scale * (i + 1) * 0.1, t)
                          for i, t in enumerate(targets)))

    builder = SimulationBuilder()
    compiles = count_compiles(builder)
    plans = [builder.build(manifest, at(s)) for s in (1.0, 1.2, 0.9, 1.1)]
    assert compiles == [1, 1, 0, 0]
    for plan, s in zip(plans, (1.0, 1.2, 0.9, 1.1)):
        assert saved_model(plan.model) == saved_model(SimulationBuilder().build(
            manifest, at(s)).model)

    # A mass the compiler refuses takes the compile, so its error is the compiler's.
    zero = overlays(param("m", 0.0, "mujoco:body_mass:rotor"))
    with pytest.raises(PlanError) as fresh:
        SimulationBuilder().build(manifest, zero)
    builder = SimulationBuilder()
    builds(builder, manifest, "mujoco:body_mass:rotor", (0.3, 0.4))
    with pytest.raises(PlanError) as written:
        builder.build(manifest, zero)
    assert str(written.value) == str(fresh.value)
    assert "mass" in str(written.value)


def test_other_kinds_and_settings_always_compile(tmp_path: Path) -> None:
    manifest = load_manifest(kinds_manifest(tmp_path, angle="radian"))
    builder = SimulationBuilder()
    compiles = count_compiles(builder)
    builds(builder, manifest, "mujoco:dcmotor_resistance:drive", (2.0, 2.5, 3.0))
    assert compiles == [1, 1, 1] and builder._family is None
    # One compiled kind among writable ones: every candidate compiles.
    builder = SimulationBuilder()
    compiles = count_compiles(builder)
    for v in (1.0, 2.0, 3.0):
        builder.build(manifest, overlays(param("a", v, "mujoco:actuator_gear:push:0"),
                                         param("b", v, "mujoco:actuator_forcerange:push:1")))
    assert compiles == [1, 1, 1]

    spec = mujoco.MjSpec.from_string(
        '<mujoco><compiler boundmass="0.01"/><worldbody><body name="b"><joint/>'
        '<geom name="g" size="0.1"/></body><body name="c" pos="1 0 0"><freejoint/>'
        '<geom name="h" size="0.1"/></body></worldbody>'
        '<contact><pair geom1="g" geom2="h"/></contact></mujoco>')

    def binding(kind: str, obj: str) -> list[tuple[OverlayParameter, MujocoTarget]]:
        target = MujocoTarget(kind, obj)
        return [(OverlayParameter("p", 1.0, (target,)), target)]

    assert compiled_overlays.writable(spec, binding("joint_damping", "j"))
    assert not compiled_overlays.writable(spec, binding("body_mass", "b"))  # boundmass
    assert not compiled_overlays.writable(spec, binding("geom_friction", "g"))  # a pair
    assert not compiled_overlays.writable(spec, [])

    body = ('<worldbody><body name="b"><joint name="j"/><geom size="0.1"/></body>'
            '</worldbody><actuator>{}</actuator>')
    servo = mujoco.MjSpec.from_string(
        "<mujoco>" + body.format('<position joint="j" kp="10" dampratio="1"/>') + "</mujoco>")
    for kind in ("joint_armature", "body_mass", "actuator_position_kp"):  # kv from inertia
        assert not compiled_overlays.writable(servo, binding(kind, "j"))
    assert compiled_overlays.writable(servo, binding("joint_damping", "j"))
    muscle = mujoco.MjSpec.from_string(
        "<mujoco>" + body.format('<muscle joint="j"/>') + "</mujoco>")
    assert not compiled_overlays.writable(muscle, binding("joint_damping", "j"))


def test_a_model_that_fails_the_check_is_always_compiled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder's own check on the model: were a written copy not bit-identical to the
    compile (here: the mean-mass statistic left stale), every candidate compiles."""
    monkeypatch.setattr(compiled_overlays, "_set_statistics", lambda model, spec: None)
    manifest = load_manifest(kinds_manifest(tmp_path, angle="radian"))
    builder = SimulationBuilder()
    compiles = count_compiles(builder)
    plans = builds(builder, manifest, "mujoco:body_mass:rotor", (0.3, 0.45, 0.6, 0.5))
    assert compiles == [1, 1, 1, 1]
    assert builder._family is not None and builder._family.verified is False
    fresh = SimulationBuilder().build(manifest, overlays(param("p", 0.5, "mujoco:body_mass:rotor")))
    assert saved_model(plans[3].model) == saved_model(fresh.model)


PANDA = Path("/work/shared/models/franka_emika_panda/panda.xml")


@pytest.mark.skipif(not PANDA.exists(), reason="the Menagerie Panda is not available")
def test_mesh_model_candidates_are_written_bit_identically_without_compiling(
        tmp_path: Path) -> None:
    """The Menagerie Panda (67 meshes, motors on its seven actuators): 21 joint parameters
    and seven link masses. A candidate costs no compile and, reusing released models, a few
    milliseconds instead of tens."""
    doc = manifest_doc([motor(f"m{i}", f"actuator{i}", f"m{i}") for i in range(1, 8)])
    doc["model"] = str(PANDA)
    manifest = load_manifest(write_manifest(tmp_path, doc))
    kinds = ("joint_damping", "joint_armature", "joint_frictionloss")
    parameters = [param(f"{k}{i}", 0.1, f"mujoco:{k}:joint{i}")
                  for k in kinds for i in range(1, 8)]
    parameters += [param(f"mass{i}", 1.0, f"mujoco:body_mass:link{i}") for i in range(1, 8)]
    base = overlays(*parameters)

    def at(k: int) -> ParameterOverlays:
        return base.with_values({p.id: p.value * (1.0 + 0.01 * k) for p in parameters})

    builder = SimulationBuilder()
    compiles = count_compiles(builder)
    seconds = []
    for k in range(12):
        started = time.perf_counter()
        plan = builder.build(manifest, at(k))
        seconds.append(time.perf_counter() - started)
        if k in (2, 11):
            fresh = SimulationBuilder().build(manifest, at(k))
            assert saved_model(plan.model) == saved_model(fresh.model)
        builder.release(plan)
        del plan
    assert compiles == [1, 1] + [0] * 10
    assert sorted(seconds[3:])[4] < patience(0.02)  # median about 2 ms (40-50 ms compiling)


def test_a_calibration_is_the_same_written_or_compiled(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from _calibration_rig import request_doc, synthesize, write_request, write_rig

    from fibril_calibration.engine import run_calibration

    manifest = write_rig(tmp_path)
    doc = synthesize(tmp_path, request_doc(manifest), {"damping": 0.05}, noise=0.5)
    request = write_request(tmp_path, dict(doc, execution={"max_parallelism": 2}), "fit.yaml")
    compiles = [0]
    compile_ = SimulationBuilder._compile

    def counting(*args: Any) -> Any:
        compiles[0] += 1
        return compile_(*args)

    monkeypatch.setattr(SimulationBuilder, "_compile", staticmethod(counting))
    result = run_calibration(request)
    written = result.document
    # Two builders (the request's, which probes initial, lower and upper values, and the
    # run's) compile twice each: a family's first model and its verification; no candidate.
    assert compiles[0] == 4
    assert result.document["evaluations"]["training"] > 10
    monkeypatch.setattr(compiled_overlays, "writable", lambda *args: False)
    compiled = run_calibration(request).document
    assert compiles[0] > 12
    for document in (written, compiled):
        document.pop("wall_time_s")
        document["execution"].pop("statistics")
    assert written == compiled
