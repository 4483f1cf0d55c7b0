"""Typed parameter overlays: every MuJoCo target kind lands in the compiled model, DC motor
state rebuilds, component-config targets, layering, hashing, artifacts and every rejection.

Models are written into ``tmp_path``. ``KINDS_XML`` holds one object of each kind a target can
name (a degree/radian ``angle`` is substituted); the drivetrain example is used for behaviour.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

import mujoco
import numpy as np
import pytest
import yaml
from _models import DRIVETRAIN, MOTOR_PAYLOAD, device, manifest_doc, motor, write_manifest

from fibril_sim_core import (
    FibrilError,
    ManifestError,
    MujocoTarget,
    OverlayParameter,
    ParameterOverlays,
    PlanError,
    SimulationBuilder,
    SimulationPlan,
)
from fibril_sim_core.overlays import (
    ComponentTarget,
    OverlayError,
    load_overlay_artifact,
    overlay_document,
)
from fibril_sim_core.overlays.mujoco_targets import KINDS

# --------------------------------------------------------------------------- fixtures

KINDS_XML = """\
<mujoco model="kinds">
  <compiler angle="{angle}"/>
  <option timestep="0.001" gravity="0 0 0"/>
  <extension>
    <plugin plugin="mujoco.pid">
      <instance name="pid1">
        <config key="kp" value="40"/>
        <config key="kd" value="4"/>
      </instance>
    </plugin>
  </extension>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="rotor" pos="0 0 1">
      <joint name="shaft" type="hinge" axis="0 0 1" damping="0.1" stiffness="0.5"
             range="{shaft_range}"/>
      <geom name="rotor_geom" type="cylinder" size="0.05 0.01" mass="0.2" pos="0.01 0 0"/>
      <geom name="rotor_tab" type="box" size="0.01 0.01 0.01" pos="0.04 0 0" mass="0.05"/>
    </body>
    <body name="slider" pos="0 1 1">
      <joint name="rail" type="slide" axis="1 0 0" range="-0.5 0.5"/>
      <geom name="slider_geom" type="box" size="0.02 0.02 0.02" mass="0.1"/>
      <site name="s1"/>
    </body>
    <body name="arm" pos="0 2 1">
      <joint name="lift" type="slide" axis="1 0 0"/>
      <geom name="arm_geom" type="box" size="0.02 0.02 0.02" mass="0.1"/>
      <site name="s2"/>
    </body>
    <body name="ctl" pos="0 3 1">
      <joint name="ctl_joint" type="hinge" axis="0 0 1"/>
      <geom type="cylinder" size="0.05 0.01" mass="0.2"/>
    </body>
    <body name="coil_body" pos="0 3.5 1">
      <joint name="coil_joint" type="hinge" axis="0 0 1"/>
      <geom type="cylinder" size="0.05 0.01" mass="0.2"/>
    </body>
    <body name="integ_body" pos="0 3.8 1">
      <joint name="integ_joint" type="hinge" axis="0 0 1"/>
      <geom type="cylinder" size="0.05 0.01" mass="0.2"/>
    </body>
    <body name="pid_body" pos="0 4 1">
      <joint name="pid_joint" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.02 0.02 0.02" mass="0.1"/>
    </body>
    <body name="ball_body" pos="0 5 1">
      <joint name="ball" type="ball"/>
      <geom type="sphere" size="0.05" mass="0.1"/>
    </body>
    <body name="pair_a" pos="1 0 1">
      <freejoint name="free_a"/>
      <geom type="sphere" size="0.05" mass="0.1"/>
    </body>
    <body name="pair_b" pos="1.5 0 1">
      <freejoint/>
      <geom type="sphere" size="0.05" mass="0.1"/>
    </body>
    <body name="sticky" pos="3 0 0.05">
      <freejoint/>
      <geom name="sticky_geom" type="box" size="0.05 0.05 0.05" mass="0.5"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="tether" range="0 2">
      <site site="s1"/>
      <site site="s2"/>
    </spatial>
  </tendon>
  <equality>
    <weld name="glue" body1="pair_a" body2="pair_b" torquescale="2"/>
    <connect name="pin" body1="pair_a" body2="pair_b" anchor="0 0 0" active="false"/>
  </equality>
  <actuator>
    <dcmotor name="drive" joint="shaft" resistance="2.0" motorconst="0.05 0.08" gear="10"/>
    <dcmotor name="servo_motor" joint="ctl_joint" resistance="2" motorconst="0.05" input="pos"
             controller="1 0 0.1 0 0 0"/>
    <dcmotor name="coil" joint="coil_joint" resistance="2" motorconst="0.05" inductance="0.02"/>
    <dcmotor name="integ" joint="integ_joint" resistance="2" motorconst="0.05" input="pos"
             controller="1 0.5 0.1 3 4 5"/>
    <motor name="push" joint="rail" gear="1" nsample="4" delay="0.002"/>
    <position name="servo" joint="lift" kp="50" kv="2"/>
    <adhesion name="stick" body="sticky" ctrlrange="0 1" gain="5"/>
    <plugin name="pid_act" joint="pid_joint" instance="pid1"/>
  </actuator>
</mujoco>
"""

KINDS_PROFILES = {"fine_encoder": {"type": "fibril_sim/encoder",
                                   "config": {"counts_per_revolution": 1024,
                                              "noise_counts": 0.5}}}
KINDS_COMPONENTS = [
    {"id": "enc", "type": "fibril_sim/encoder", "profile": "fine_encoder",
     "bind": {"joint": "shaft"}, "config": {"period": 0.002}},
    motor("servo_cmd", "servo_motor", "servo/command"),
    device("scan", "planar_lidar", {"site": "s1"}, period=0.01, rays=8),
]


def kinds_xml(angle: str = "degree") -> str:
    shaft_range = "-90 90" if angle == "degree" else "-1.5 1.5"
    return KINDS_XML.format(angle=angle, shaft_range=shaft_range)


def artifact_doc(parameters: Sequence[Mapping[str, Any]], *, minor: int = 1,
                 **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema_version": {"major": 1, "minor": minor}}
    doc.update(extra)
    doc["parameters"] = copy.deepcopy([dict(p) for p in parameters])
    return doc


def write_doc(folder: Path, doc: Any, name: str) -> Path:
    path = folder / name
    if name.endswith(".json"):
        path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path.resolve()


def kinds_manifest(folder: Path, overlays: Sequence[Any] = (), *, angle: str = "degree",
                   components: Sequence[Mapping[str, Any]] | None = None,
                   xml: str | None = None, **extra: Any) -> Path:
    """Write the kinds model, the overlay artifacts (docs or file names) and a manifest."""
    (folder / "model.xml").write_text(xml if xml is not None else kinds_xml(angle),
                                      encoding="utf-8")
    names = []
    for i, item in enumerate(overlays):
        if isinstance(item, str):
            names.append(item)
        else:
            names.append(write_doc(folder, item, f"overlay{i}.yaml").name)
    doc = manifest_doc(KINDS_COMPONENTS if components is None else components,
                       profiles=copy.deepcopy(KINDS_PROFILES), **extra)
    if names:
        doc["parameter_overlays"] = names
    return write_manifest(folder, doc).resolve()


def drivetrain_manifest(folder: Path, overlays: Sequence[str] = (), **changes: Any) -> Path:
    """The drivetrain example's manifest, written into ``folder`` (model by absolute path)."""
    doc = yaml.safe_load(DRIVETRAIN.read_text(encoding="utf-8"))
    doc["model"] = str(DRIVETRAIN.parent / doc["model"])
    if overlays:
        doc["parameter_overlays"] = list(overlays)
    doc.update(changes)
    return write_manifest(folder, doc, "drivetrain.yaml").resolve()


def build(manifest: Path, overlays: Any = None) -> SimulationPlan:
    return SimulationBuilder().build(manifest, overlays)


def param(pid: str, value: Any, *targets: MujocoTarget | ComponentTarget | str,
          **extra: Any) -> OverlayParameter:
    """A programmatic parameter; string targets use ``mujoco:<kind>:<object>[:<i|attr>]``."""
    typed = []
    for t in targets:
        if isinstance(t, str):
            _, kind, obj, *rest = t.split(":")
            if kind == "plugin_attribute":
                typed.append(MujocoTarget(kind, obj, attribute=rest[0]))
            else:
                typed.append(MujocoTarget(kind, obj, int(rest[0]) if rest else 0))
        else:
            typed.append(t)
    if isinstance(value, list):
        value = tuple(float(v) for v in value)
    return OverlayParameter(pid, value, tuple(typed), **extra)


def oid(model: mujoco.MjModel, objtype: mujoco.mjtObj, name: str) -> int:
    i = mujoco.mj_name2id(model, objtype, name)
    assert i >= 0, name
    return i


OBJ = mujoco.mjtObj


def jid(model: mujoco.MjModel, name: str) -> int:
    return oid(model, OBJ.mjOBJ_JOINT, name)


def aid(model: mujoco.MjModel, name: str) -> int:
    return oid(model, OBJ.mjOBJ_ACTUATOR, name)


def dof(model: mujoco.MjModel, name: str) -> int:
    return int(model.jnt_dofadr[jid(model, name)])


def plugin_attrs(model: mujoco.MjModel) -> list[bytes]:
    return bytes(model.plugin_attr).split(b"\0")


@pytest.fixture(scope="module")
def kinds_baseline(tmp_path_factory: pytest.TempPathFactory) -> SimulationPlan:
    return build(kinds_manifest(tmp_path_factory.mktemp("kinds_base")))


@pytest.fixture(scope="module")
def drivetrain_baseline() -> SimulationPlan:
    return SimulationBuilder().build(DRIVETRAIN)


# --------------------------------------------------------------------------- 1. every kind

# (kind, target, value, reader(model) -> the value the compiled model holds at the right place)
Reader = Callable[[mujoco.MjModel], Any]
KIND_CASES: list[tuple[str, str, Any, Reader]] = [
    ("body_mass", "mujoco:body_mass:rotor", 0.7,
     lambda m: m.body_mass[oid(m, OBJ.mjOBJ_BODY, "rotor")]),
    ("body_inertia", "mujoco:body_inertia:rotor:2", 0.0002,
     lambda m: m.body_inertia[oid(m, OBJ.mjOBJ_BODY, "rotor")][2]),
    ("joint_damping", "mujoco:joint_damping:shaft", 0.7, lambda m: m.dof_damping[dof(m, "shaft")]),
    ("joint_frictionloss", "mujoco:joint_frictionloss:shaft:0", 0.3,
     lambda m: m.dof_frictionloss[dof(m, "shaft")]),
    ("joint_armature", "mujoco:joint_armature:shaft", 0.01,
     lambda m: m.dof_armature[dof(m, "shaft")]),
    ("joint_stiffness", "mujoco:joint_stiffness:shaft", 2.5,
     lambda m: np.ravel(m.jnt_stiffness[jid(m, "shaft")])[0]),
    ("geom_friction", "mujoco:geom_friction:rotor_geom:1", 0.02,
     lambda m: m.geom_friction[oid(m, OBJ.mjOBJ_GEOM, "rotor_geom")][1]),
    ("geom_solref", "mujoco:geom_solref:rotor_geom:0", 0.05,
     lambda m: m.geom_solref[oid(m, OBJ.mjOBJ_GEOM, "rotor_geom")][0]),
    ("geom_solimp", "mujoco:geom_solimp:rotor_geom:4", 3.0,
     lambda m: m.geom_solimp[oid(m, OBJ.mjOBJ_GEOM, "rotor_geom")][4]),
    ("actuator_gear", "mujoco:actuator_gear:push:0", 3.0,
     lambda m: m.actuator_gear[aid(m, "push")][0]),
    ("actuator_forcerange", "mujoco:actuator_forcerange:push:1", 5.0,
     lambda m: m.actuator_forcerange[aid(m, "push")][1]),
    ("actuator_position_kp", "mujoco:actuator_position_kp:servo", 80.0,
     lambda m: (m.actuator_gainprm[aid(m, "servo")][0], -m.actuator_biasprm[aid(m, "servo")][1])),
    ("actuator_position_kv", "mujoco:actuator_position_kv:servo", 3.0,
     lambda m: -m.actuator_biasprm[aid(m, "servo")][2]),
    ("actuator_adhesion_gain", "mujoco:actuator_adhesion_gain:stick", 9.0,
     lambda m: m.actuator_gainprm[aid(m, "stick")][0]),
    ("actuator_delay", "mujoco:actuator_delay:push", 0.003,
     lambda m: m.actuator_delay[aid(m, "push")]),
    ("tendon_range", "mujoco:tendon_range:tether", [0.5, 1.5],
     lambda m: tuple(m.tendon_range[oid(m, OBJ.mjOBJ_TENDON, "tether")])),
    ("joint_range", "mujoco:joint_range:rail", [-0.2, 0.3],
     lambda m: tuple(m.jnt_range[jid(m, "rail")])),
    ("equality_weld_torquescale", "mujoco:equality_weld_torquescale:glue:0", 0.5,
     lambda m: m.eq_data[oid(m, OBJ.mjOBJ_EQUALITY, "glue")][10]),
]


def _expected(value: Any, reader_value: Any) -> Any:
    if isinstance(reader_value, tuple) and not isinstance(value, list):
        return (value,) * len(reader_value)
    return tuple(value) if isinstance(value, list) else value


@pytest.mark.parametrize(("kind", "target", "value", "reader"), KIND_CASES,
                         ids=[c[0] for c in KIND_CASES])
def test_every_mujoco_kind_lands_in_the_compiled_model(
        tmp_path: Path, kinds_baseline: SimulationPlan, kind: str, target: str, value: Any,
        reader: Reader) -> None:
    artifact = artifact_doc([{"id": f"p_{kind}", "value": value, "target": target}])
    plan = build(kinds_manifest(tmp_path, [artifact]))
    before, after = reader(kinds_baseline.model), reader(plan.model)
    expected = _expected(value, after)
    assert not np.allclose(np.atleast_1d(before), np.atleast_1d(expected)), "no-op case"
    np.testing.assert_allclose(np.atleast_1d(after), np.atleast_1d(expected), rtol=1e-12)
    # the model structure is unchanged (no state added or removed)
    assert plan.model.nq == kinds_baseline.model.nq and plan.model.na == kinds_baseline.model.na
    described = plan.provenance["parameters"]
    assert [d["id"] for d in described] == [f"p_{kind}"]
    assert described[0]["target"]["kind"] == kind


def test_kind_cases_cover_every_kind() -> None:
    covered = {c[0] for c in KIND_CASES} | {k for k in KINDS if k.startswith("dcmotor_")}
    covered |= {"plugin_attribute"}  # test_plugin_attribute_*
    assert covered == set(KINDS)
    assert {k for k in KINDS if k.startswith("dcmotor_")} == {
        "dcmotor_resistance", "dcmotor_effective_motor_constant", "dcmotor_inductance",
        "dcmotor_controller_kp", "dcmotor_controller_ki", "dcmotor_controller_kd",
        "dcmotor_controller_slewmax", "dcmotor_controller_integral_limit",
        "dcmotor_voltage_limit"}


def test_vector_kind_changes_only_the_indexed_component(
        tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    plan = build(kinds_manifest(tmp_path), [param("mu_torsion", 0.02,
                                                  "mujoco:geom_friction:rotor_geom:1"),
                                            param("gear_y", 4.0, "mujoco:actuator_gear:push:0")])
    g = oid(plan.model, OBJ.mjOBJ_GEOM, "rotor_geom")
    base = kinds_baseline.model.geom_friction[g]
    np.testing.assert_array_equal(plan.model.geom_friction[g], [base[0], 0.02, base[2]])
    a = aid(plan.model, "push")
    np.testing.assert_array_equal(plan.model.actuator_gear[a][1:],
                                  kinds_baseline.model.actuator_gear[a][1:])


def test_body_mass_on_geom_inferred_body_keeps_inertial_frame(
        tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    """rotor's inertia is inferred from two off-centre geoms: its ipos is not the body origin."""
    base = kinds_baseline.model
    b = oid(base, OBJ.mjOBJ_BODY, "rotor")
    assert base.body_mass[b] == pytest.approx(0.25)
    assert abs(base.body_ipos[b][0]) > 1e-3
    plan = build(kinds_manifest(tmp_path), [param("rotor_mass", 0.9, "mujoco:body_mass:rotor")])
    model = plan.model
    assert model.body_mass[b] == pytest.approx(0.9, rel=1e-12)
    np.testing.assert_allclose(model.body_ipos[b], base.body_ipos[b], atol=1e-12)
    np.testing.assert_allclose(model.body_iquat[b], base.body_iquat[b], atol=1e-12)
    np.testing.assert_allclose(model.body_inertia[b], base.body_inertia[b], rtol=1e-12)
    # other bodies untouched
    others = [i for i in range(model.nbody) if i != b]
    np.testing.assert_array_equal(model.body_mass[others], base.body_mass[others])


def test_body_inertia_and_mass_together_on_geom_inferred_drivetrain_chassis(
        tmp_path: Path, drivetrain_baseline: SimulationPlan) -> None:
    base = drivetrain_baseline.model
    b = oid(base, OBJ.mjOBJ_BODY, "chassis")
    plan = build(drivetrain_manifest(tmp_path), [
        param("chassis_mass", 3.0, "mujoco:body_mass:chassis"),
        param("chassis_izz", 0.01, "mujoco:body_inertia:chassis:2")])
    model = plan.model
    assert model.body_mass[b] == pytest.approx(3.0, rel=1e-12)
    np.testing.assert_allclose(model.body_inertia[b],
                               [base.body_inertia[b][0], base.body_inertia[b][1], 0.01],
                               rtol=1e-12)
    np.testing.assert_allclose(model.body_ipos[b], base.body_ipos[b], atol=1e-12)
    assert model.body_mass[oid(model, OBJ.mjOBJ_BODY, "axle")] == pytest.approx(0.4)


def test_compiler_that_recomputes_inertia_is_an_error_not_a_silent_override(
        tmp_path: Path) -> None:
    xml = kinds_xml().replace('<compiler angle="degree"/>',
                              '<compiler angle="degree" inertiafromgeom="true"/>')
    manifest = kinds_manifest(tmp_path, xml=xml)
    with pytest.raises(OverlayError) as info:
        build(manifest, [param("rotor_mass", 0.9, "mujoco:body_mass:rotor")])
    message = str(info.value)
    assert "'rotor_mass'" in message and "mujoco:body_mass:rotor:0" in message
    assert "0.9" in message and "compiled model holds" in message


@pytest.mark.parametrize("angle", ["degree", "radian"])
def test_joint_range_on_hinge_follows_compiler_angle(tmp_path: Path, angle: str) -> None:
    authored = (-30.0, 45.0) if angle == "degree" else (-0.5, 0.7)
    artifact = artifact_doc([{"id": "shaft_limits", "value": list(authored),
                              "target": "mujoco:joint_range:shaft"}])
    plan = build(kinds_manifest(tmp_path, [artifact], angle=angle))
    model = plan.model
    scale = math.pi / 180 if angle == "degree" else 1.0
    np.testing.assert_allclose(model.jnt_range[jid(model, "shaft")],
                               [authored[0] * scale, authored[1] * scale], rtol=1e-12)
    assert model.jnt_limited[jid(model, "shaft")]
    # the slide rail is in metres whatever the angle unit
    np.testing.assert_allclose(model.jnt_range[jid(model, "rail")], [-0.5, 0.5])


def test_slide_joint_range_is_not_scaled_in_degree_models(tmp_path: Path) -> None:
    plan = build(kinds_manifest(tmp_path, angle="degree"),
                 [param("rail_limits", [-0.1, 0.25], "mujoco:joint_range:rail")])
    np.testing.assert_allclose(plan.model.jnt_range[jid(plan.model, "rail")], [-0.1, 0.25])


def test_plugin_attribute_updates_the_plugin_instance(
        tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    assert plugin_attrs(kinds_baseline.model)[:3] == [b"40", b"", b"4"]  # kp, ki, kd
    artifact = artifact_doc([{"id": "pid_kp", "value": 75,
                              "target": "mujoco:plugin_attribute:pid1:kp"}])
    plan = build(kinds_manifest(tmp_path, [artifact]))
    attrs = plugin_attrs(plan.model)
    assert float(attrs[0]) == 75.0 and attrs[2] == b"4"
    described = plan.provenance["parameters"][0]
    assert described["target"] == {"type": "mujoco", "kind": "plugin_attribute",
                                   "object": "pid1", "attribute": "kp"}
    # the plugin actually uses it: a stiffer PID pulls harder toward the same setpoint
    forces = []
    for p in (kinds_baseline, plan):
        data = mujoco.MjData(p.model)
        data.ctrl[p.model.actuator_ctrladr[aid(p.model, "pid_act")]] = 0.1
        mujoco.mj_step(p.model, data, 5)
        forces.append(float(data.actuator_force[aid(p.model, "pid_act")]))
    assert forces[1] > forces[0] > 0


def test_plugin_attribute_mapping_form(tmp_path: Path) -> None:
    artifact = artifact_doc([{"id": "pid_kd", "value": 6.5,
                              "target": {"type": "mujoco", "kind": "plugin_attribute",
                                         "object": "pid1", "attribute": "kd"}}])
    plan = build(kinds_manifest(tmp_path, [artifact]))
    assert float(plugin_attrs(plan.model)[2]) == 6.5


# --------------------------------------------------------------------------- 1b. DC motors


def _dc(plan: SimulationPlan, name: str) -> tuple[np.ndarray, np.ndarray, int]:
    a = aid(plan.model, name)
    return (plan.model.actuator_gainprm[a].copy(), plan.model.actuator_dynprm[a].copy(),
            int(plan.model.actuator_actnum[a]))


def test_kinds_baseline_dcmotor_layout(kinds_baseline: SimulationPlan) -> None:
    gain, dyn, actnum = _dc(kinds_baseline, "drive")
    assert gain[0] == 2.0 and gain[1] == pytest.approx(math.sqrt(0.05 * 0.08)) and actnum == 0
    gain, dyn, actnum = _dc(kinds_baseline, "coil")
    assert dyn[0] * gain[0] == pytest.approx(0.02) and actnum == 1
    gain, dyn, actnum = _dc(kinds_baseline, "integ")
    assert list(gain[4:8]) == [1, 0.5, 0.1, 5] and list(dyn[7:9]) == [3, 4] and actnum == 2
    assert kinds_baseline.model.na == 3


@pytest.mark.parametrize(("kind", "actuator", "value", "where"), [
    ("dcmotor_resistance", "drive", 3.5, ("gain", 0)),
    ("dcmotor_effective_motor_constant", "drive", 0.07, ("gain", 1)),
    ("dcmotor_controller_kp", "servo_motor", 2.5, ("gain", 4)),
    ("dcmotor_controller_kd", "servo_motor", 0.3, ("gain", 6)),
    ("dcmotor_voltage_limit", "servo_motor", 6.0, ("gain", 7)),
    ("dcmotor_controller_integral_limit", "integ", 2.0, ("dyn", 8)),
    ("dcmotor_controller_ki", "integ", 0.8, ("gain", 5)),
    ("dcmotor_controller_slewmax", "integ", 1.5, ("dyn", 7)),
])
def test_dcmotor_kind_lands_at_its_compiled_slot(
        tmp_path: Path, kinds_baseline: SimulationPlan, kind: str, actuator: str,
        value: float, where: tuple[str, int]) -> None:
    artifact = artifact_doc([{"id": kind, "value": value, "target": f"mujoco:{kind}:{actuator}"}])
    plan = build(kinds_manifest(tmp_path, [artifact]))
    gain, dyn, actnum = _dc(plan, actuator)
    base_gain, base_dyn, base_actnum = _dc(kinds_baseline, actuator)
    array, base = (gain, base_gain) if where[0] == "gain" else (dyn, base_dyn)
    assert base[where[1]] != value
    assert array[where[1]] == pytest.approx(value, rel=1e-12)
    others = [i for i in range(len(array)) if i != where[1]]
    np.testing.assert_array_equal(array[others], base[others])
    assert actnum == base_actnum and plan.model.na == kinds_baseline.model.na


def test_effective_motor_constant_is_the_compiled_geometric_mean(
        tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    """The target is K = sqrt(Kt*Ke) as compiled: overlaying that value is a no-op."""
    k = float(kinds_baseline.model.actuator_gainprm[aid(kinds_baseline.model, "drive")][1])
    assert k == pytest.approx(math.sqrt(0.05 * 0.08))
    plan = build(kinds_manifest(tmp_path),
                 [param("k", k, "mujoco:dcmotor_effective_motor_constant:drive")])
    assert plan.provenance["compiled_model_sha256"] == \
        kinds_baseline.provenance["compiled_model_sha256"]


def test_inductance_turns_the_current_state_on(
        tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    plan = build(kinds_manifest(tmp_path),
                 [param("L", 0.01, "mujoco:dcmotor_inductance:drive")])
    gain, dyn, actnum = _dc(plan, "drive")
    assert actnum == 1 and plan.model.na == kinds_baseline.model.na + 1
    assert dyn[0] == pytest.approx(0.01 / 2.0) and dyn[0] * gain[0] == pytest.approx(0.01)
    # activation addresses are consistent after the rebuild
    assert list(plan.model.actuator_actadr[plan.model.actuator_actnum > 0]) == \
        list(np.cumsum([0, *plan.model.actuator_actnum[plan.model.actuator_actnum > 0][:-1]]))


def test_zero_inductance_turns_the_current_state_off(
        tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    plan = build(kinds_manifest(tmp_path), [param("L", 0.0, "mujoco:dcmotor_inductance:coil")])
    gain, dyn, actnum = _dc(plan, "coil")
    assert actnum == 0 and dyn[0] == 0.0 and plan.model.na == kinds_baseline.model.na - 1


def test_resistance_overlay_keeps_authored_inductance(tmp_path: Path) -> None:
    plan = build(kinds_manifest(tmp_path), [param("R", 4.0, "mujoco:dcmotor_resistance:coil")])
    gain, dyn, actnum = _dc(plan, "coil")
    assert gain[0] == 4.0 and actnum == 1
    assert dyn[0] == pytest.approx(0.02 / 4.0)
    assert dyn[0] * gain[0] == pytest.approx(0.02, rel=1e-12)


def test_inductance_and_resistance_together(tmp_path: Path) -> None:
    plan = build(kinds_manifest(tmp_path), [param("R", 4.0, "mujoco:dcmotor_resistance:drive"),
                                            param("L", 0.01, "mujoco:dcmotor_inductance:drive")])
    gain, dyn, actnum = _dc(plan, "drive")
    assert gain[0] == 4.0 and actnum == 1
    assert dyn[0] == pytest.approx(0.0025) and dyn[0] * gain[0] == pytest.approx(0.01)


def test_integral_gain_and_slew_limit_turn_states_on(
        tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    plan = build(kinds_manifest(tmp_path), [
        param("ki", 0.5, "mujoco:dcmotor_controller_ki:servo_motor"),
        param("slew", 2.0, "mujoco:dcmotor_controller_slewmax:servo_motor"),
        param("L", 0.001, "mujoco:dcmotor_inductance:servo_motor")])
    gain, dyn, actnum = _dc(plan, "servo_motor")
    assert gain[5] == 0.5 and dyn[7] == 2.0 and dyn[0] * gain[0] == pytest.approx(0.001)
    assert actnum == 3 and plan.model.na == kinds_baseline.model.na + 3


@pytest.mark.parametrize(("overlays", "states"), [
    ({"dcmotor_controller_ki": 0.0}, 1),
    ({"dcmotor_controller_slewmax": 0.0}, 1),
    ({"dcmotor_controller_ki": 0.0, "dcmotor_controller_slewmax": 0.0}, 0),
])
def test_integral_gain_and_slew_limit_turn_states_off(
        tmp_path: Path, kinds_baseline: SimulationPlan, overlays: dict[str, float],
        states: int) -> None:
    plan = build(kinds_manifest(tmp_path),
                 [param(k, v, f"mujoco:{k}:integ") for k, v in overlays.items()])
    assert _dc(plan, "integ")[2] == states
    assert plan.model.na == kinds_baseline.model.na - (2 - states)


def test_mujoco_compile_error_from_a_dcmotor_overlay_surfaces_as_plan_error(
        tmp_path: Path) -> None:
    """An integral gain needs the pos input: MuJoCo refuses, the builder says which overlay."""
    with pytest.raises(PlanError) as info:
        build(kinds_manifest(tmp_path), [param("ki_drive", 0.5,
                                               "mujoco:dcmotor_controller_ki:drive")])
    message = str(info.value)
    assert "cannot compile model" in message and "ki_drive" in message
    assert "controller" in message and "'drive'" in message and "\n" not in message


def test_actuator_delay_without_history_buffer_surfaces_as_plan_error(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as info:
        build(kinds_manifest(tmp_path), [param("late", 0.003, "mujoco:actuator_delay:servo")])
    assert "cannot compile model" in str(info.value) and "late" in str(info.value)


def test_instance_runs_after_state_changing_overlays(tmp_path: Path) -> None:
    components = [motor("servo_cmd", "servo_motor", "servo/command")]
    scenario = {"initial_inputs": [{"source_id": "servo/command", "source_sequence": 0,
                                    "payload_type": MOTOR_PAYLOAD,
                                    "payload": {"mode": "position", "value": 0.5}}]}
    manifest = kinds_manifest(tmp_path, components=components, scenario=scenario)
    plan = build(manifest, [
        param("ki", 0.5, "mujoco:dcmotor_controller_ki:servo_motor"),
        param("slew", 20.0, "mujoco:dcmotor_controller_slewmax:servo_motor"),
        param("L", 0.001, "mujoco:dcmotor_inductance:servo_motor"),
        param("L_coil", 0.0, "mujoco:dcmotor_inductance:coil")])
    a = aid(plan.model, "servo_motor")
    assert plan.model.actuator_actnum[a] == 3 and plan.model.na == 5
    instance = plan.create_instance()
    instance.advance(400)
    data = instance.data
    adr = int(plan.model.actuator_actadr[a])
    assert np.all(np.isfinite(data.act)) and np.any(data.act[adr:adr + 3] != 0)
    position = float(data.qpos[plan.model.jnt_qposadr[jid(plan.model, "ctl_joint")]])
    assert 0.05 < position < 1.0


def test_drivetrain_runs_with_inductance(tmp_path: Path,
                                          drivetrain_baseline: SimulationPlan) -> None:
    plan = build(drivetrain_manifest(tmp_path),
                 [param("L", 0.005, "mujoco:dcmotor_inductance:drive")])
    assert drivetrain_baseline.model.na == 0 and plan.model.na == 1
    instance = plan.create_instance()
    instance.advance(300)
    assert np.isfinite(instance.data.act[0]) and instance.data.act[0] != 0
    assert abs(instance.data.qvel[dof(plan.model, "wheel_joint")]) > 0.1


# --------------------------------------------------------------------------- 2. behaviour


def _wheel_speed(plan: SimulationPlan, ticks: int = 300) -> float:
    instance = plan.create_instance()
    instance.advance(ticks)
    return abs(float(instance.data.qvel[dof(plan.model, "wheel_joint")]))


def test_higher_wheel_damping_lowers_wheel_speed(
        tmp_path: Path, drivetrain_baseline: SimulationPlan) -> None:
    damped = build(drivetrain_manifest(tmp_path),
                   [param("wheel_damping", 0.5, "mujoco:joint_damping:wheel_joint:0")])
    assert damped.model.dof_damping[dof(damped.model, "wheel_joint")] == 0.5
    base_speed, damped_speed = _wheel_speed(drivetrain_baseline), _wheel_speed(damped)
    assert base_speed > 1.0
    assert damped_speed < 0.8 * base_speed
    # same parameters, same run: deterministic
    again = build(drivetrain_manifest(tmp_path),
                  [param("wheel_damping", 0.5, "mujoco:joint_damping:wheel_joint:0")])
    assert _wheel_speed(again) == damped_speed


def test_no_overlays_has_the_empty_parameter_set(drivetrain_baseline: SimulationPlan) -> None:
    prov = drivetrain_baseline.provenance
    assert prov["parameter_set_hash"] == ParameterOverlays().parameter_set_hash
    assert prov["parameters"] == [] and prov["parameter_overlays"] == {}


def test_parameter_set_hash_is_order_independent_and_value_sensitive(tmp_path: Path) -> None:
    manifest = kinds_manifest(tmp_path)
    a = param("damping", 0.3, "mujoco:joint_damping:shaft", "mujoco:joint_damping:ctl_joint")
    a_swapped = param("damping", 0.3, "mujoco:joint_damping:ctl_joint",
                      "mujoco:joint_damping:shaft")
    b = param("mass", 0.9, "mujoco:body_mass:rotor")
    c = param("noise", 1.5, ComponentTarget("enc", "noise_counts"))
    hashes = {
        "abc": build(manifest, [a, b, c]).provenance["parameter_set_hash"],
        "cba": build(manifest, [c, b, a_swapped]).provenance["parameter_set_hash"],
        "bca": ParameterOverlays((b, c, a)).parameter_set_hash,
    }
    assert len(set(hashes.values())) == 1
    plan = build(manifest, [c, b, a])
    assert [d["id"] for d in plan.provenance["parameters"]] == ["damping", "mass", "noise"]
    different = {
        "value": [a.with_value(0.31), b, c],
        "component value": [a, b, c.with_value(1.6)],
        "id": [a, param("mass2", 0.9, "mujoco:body_mass:rotor"), c],
        "target": [a, param("mass", 0.9, "mujoco:body_mass:ctl"), c],
        "subset": [a, b],
    }
    seen = set(hashes.values())
    for name, parameters in different.items():
        h = build(manifest, parameters).provenance["parameter_set_hash"]
        assert h not in seen, name
        seen.add(h)


def test_parameter_set_hash_distinguishes_component_index(tmp_path: Path) -> None:
    manifest = kinds_manifest(tmp_path)
    h0 = build(manifest, [param("mu", 0.9, "mujoco:geom_friction:rotor_geom:0")])
    h1 = build(manifest, [param("mu", 0.9, "mujoco:geom_friction:rotor_geom:1")])
    assert h0.provenance["parameter_set_hash"] != h1.provenance["parameter_set_hash"]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_manifest_parameter_overlays_artifact_applies(tmp_path: Path, suffix: str) -> None:
    doc = artifact_doc([{"id": "wheel_damping", "value": 0.25, "unit": "N*m*s/rad",
                         "provenance": "bench 2024-05",
                         "target": "mujoco:joint_damping:wheel_joint:0"}],
                       minor=0, format="fibril_sim/parameter_overlay", id="damping-baseline",
                       description="wheel damping")
    path = write_doc(tmp_path, doc, f"damping{suffix}")
    plan = build(drivetrain_manifest(tmp_path, [path.name]))
    assert plan.model.dof_damping[dof(plan.model, "wheel_joint")] == 0.25
    prov = plan.provenance
    assert prov["parameter_overlays"] == {
        str(path): hashlib.sha256(path.read_bytes()).hexdigest()}
    assert prov["parameters"] == [{
        "id": "wheel_damping", "value": 0.25, "unit": "N*m*s/rad", "provenance": "bench 2024-05",
        "target": {"type": "mujoco", "kind": "joint_damping", "object": "wheel_joint",
                   "component_index": 0}}]
    inspected = plan.inspect()["provenance"]
    assert inspected["parameter_set_hash"] == prov["parameter_set_hash"]
    json.dumps(plan.inspect())  # JSON-able


def test_two_artifacts_apply_in_order_later_same_id_wins(tmp_path: Path) -> None:
    first = write_doc(tmp_path, artifact_doc([
        {"id": "wheel_damping", "value": 0.1, "target": "mujoco:joint_damping:wheel_joint"},
        {"id": "chassis_mass", "value": 2.5, "target": "mujoco:body_mass:chassis"}]), "a.yaml")
    second = write_doc(tmp_path, artifact_doc([
        {"id": "wheel_damping", "value": 0.3, "target": "mujoco:joint_damping:wheel_joint"}]),
        "b.json")
    plan = build(drivetrain_manifest(tmp_path, ["a.yaml", "b.json"]))
    model = plan.model
    assert model.dof_damping[dof(model, "wheel_joint")] == 0.3
    assert model.body_mass[oid(model, OBJ.mjOBJ_BODY, "chassis")] == pytest.approx(2.5)
    assert list(plan.provenance["parameter_overlays"]) == [str(first), str(second)]
    values = {d["id"]: d["value"] for d in plan.provenance["parameters"]}
    assert values == {"wheel_damping": 0.3, "chassis_mass": 2.5}
    reversed_plan = build(drivetrain_manifest(tmp_path, ["b.json", "a.yaml"]))
    assert reversed_plan.model.dof_damping[dof(model, "wheel_joint")] == 0.1


def test_later_same_id_may_rebind_to_another_target(tmp_path: Path) -> None:
    write_doc(tmp_path, artifact_doc([
        {"id": "friction", "value": 0.1, "target": "mujoco:joint_frictionloss:wheel_joint"}]),
        "a.yaml")
    plan = build(drivetrain_manifest(tmp_path, ["a.yaml"]),
                 [param("friction", 0.2, "mujoco:joint_armature:wheel_joint")])
    model = plan.model
    assert model.dof_frictionloss[dof(model, "wheel_joint")] == 0.0
    assert model.dof_armature[dof(model, "wheel_joint")] == 0.2


def test_programmatic_overlays_apply_after_manifest_ones(tmp_path: Path) -> None:
    write_doc(tmp_path, artifact_doc([
        {"id": "wheel_damping", "value": 0.1, "target": "mujoco:joint_damping:wheel_joint"},
        {"id": "noise", "value": 1.0,
         "target": {"type": "component_config", "component": "wheel_encoder",
                    "config_path": "noise_counts"}}]), "a.yaml")
    manifest = drivetrain_manifest(tmp_path, ["a.yaml"])
    plan = build(manifest, [param("wheel_damping", 0.4, "mujoco:joint_damping:wheel_joint")])
    assert plan.model.dof_damping[dof(plan.model, "wheel_joint")] == 0.4
    assert plan.device("wheel_encoder").config["noise_counts"] == 1.0
    as_set = build(manifest, ParameterOverlays((param("wheel_damping", 0.4,
                                                      "mujoco:joint_damping:wheel_joint"),)))
    assert as_set.provenance["parameter_set_hash"] == plan.provenance["parameter_set_hash"]
    only_programmatic = build(drivetrain_manifest(tmp_path), [
        param("wheel_damping", 0.4, "mujoco:joint_damping:wheel_joint"),
        param("noise", 1.0, ComponentTarget("wheel_encoder", "noise_counts"))])
    assert only_programmatic.provenance["parameter_set_hash"] == \
        plan.provenance["parameter_set_hash"]


def test_layers_with_different_ids_on_one_field_conflict(tmp_path: Path) -> None:
    write_doc(tmp_path, artifact_doc([
        {"id": "wheel_damping", "value": 0.1, "target": "mujoco:joint_damping:wheel_joint"}]),
        "a.yaml")
    with pytest.raises(OverlayError) as info:
        build(drivetrain_manifest(tmp_path, ["a.yaml"]),
              [param("damping_fit", 0.4, "mujoco:joint_damping:wheel_joint")])
    message = str(info.value)
    assert "'wheel_damping'" in message and "'damping_fit'" in message
    assert "mujoco:joint_damping:wheel_joint:0" in message


@pytest.mark.parametrize("ranged", [False, True])
def test_overlay_document_round_trips_through_json(tmp_path: Path, ranged: bool) -> None:
    parameters = [
        param("wheel_damping", 0.05, "mujoco:joint_damping:wheel_joint", unit="N*m*s/rad",
              provenance="calibration run 7"),
        param("mu", 0.8, "mujoco:geom_friction:wheel_left:0", "mujoco:geom_friction:wheel_right:0"),
        param("R", 2.4, "mujoco:dcmotor_resistance:drive"),
        param("noise", 0.7, ComponentTarget("wheel_encoder", "noise_counts")),
    ]
    if ranged:
        parameters.append(param("wheel_limits", [-720.0, 720.0],
                                "mujoco:joint_range:wheel_joint"))
    doc = overlay_document(parameters, id="drivetrain-fit", source={"tool": "calibrate"})
    assert doc["schema_version"] == {"major": 1, "minor": 1 if ranged else 0}
    assert doc["format"] == "fibril_sim/parameter_overlay" and doc["id"] == "drivetrain-fit"
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    artifact = load_overlay_artifact(path)
    assert artifact.parameters == tuple(parameters)
    assert artifact.id == "drivetrain-fit"
    assert artifact.schema_version == (1, doc["schema_version"]["minor"])
    assert artifact.parameter("R") == parameters[2]
    assert overlay_document(artifact.parameters, id="drivetrain-fit",
                            source={"tool": "calibrate"}) == doc
    via_manifest = build(drivetrain_manifest(tmp_path, ["fit.json"]))
    via_code = build(drivetrain_manifest(tmp_path), parameters)
    for key in ("parameter_set_hash", "compiled_model_sha256", "parameters"):
        assert via_manifest.provenance[key] == via_code.provenance[key], key
    model = via_manifest.model
    for geom in ("wheel_left", "wheel_right"):
        assert model.geom_friction[oid(model, OBJ.mjOBJ_GEOM, geom)][0] == 0.8
    assert via_manifest.device("wheel_encoder").config["noise_counts"] == 0.7


def test_artifact_parameter_lookup_names_known_ids(tmp_path: Path) -> None:
    path = write_doc(tmp_path, artifact_doc([
        {"id": "wheel_damping", "value": 0.1, "target": "mujoco:joint_damping:wheel_joint"}]),
        "a.yaml")
    artifact = load_overlay_artifact(path)
    assert artifact.parameter("wheel_damping").with_value(0.2).value == 0.2
    with pytest.raises(OverlayError, match="no parameter 'nope'; declared: wheel_damping"):
        artifact.parameter("nope")


def test_one_parameter_binds_two_joints(tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    artifact = artifact_doc([{"id": "hinge_damping", "value": 0.45,
                              "targets": ["mujoco:joint_damping:shaft",
                                          {"type": "mujoco", "kind": "joint_damping",
                                           "object": "ctl_joint"}]}])
    plan = build(kinds_manifest(tmp_path, [artifact]))
    model = plan.model
    assert model.dof_damping[dof(model, "shaft")] == 0.45
    assert model.dof_damping[dof(model, "ctl_joint")] == 0.45
    assert model.dof_damping[dof(model, "coil_joint")] == \
        kinds_baseline.model.dof_damping[dof(model, "coil_joint")]
    described = plan.provenance["parameters"][0]
    assert [t["object"] for t in described["targets"]] == ["shaft", "ctl_joint"]


def test_one_parameter_binds_a_joint_and_a_component(tmp_path: Path) -> None:
    plan = build(kinds_manifest(tmp_path), [
        param("both", 0.6, "mujoco:joint_damping:shaft", ComponentTarget("enc", "noise_counts"))])
    assert plan.model.dof_damping[dof(plan.model, "shaft")] == 0.6
    assert plan.device("enc").config["noise_counts"] == 0.6


def test_component_config_overlay_on_profile_derived_key(
        tmp_path: Path, drivetrain_baseline: SimulationPlan) -> None:
    assert drivetrain_baseline.device("wheel_encoder").config["noise_counts"] == 0.5
    artifact = write_doc(tmp_path, artifact_doc([
        {"id": "encoder_noise", "value": 2.0,
         "target": {"type": "component_config", "component": "wheel_encoder",
                    "config_path": "noise_counts"}},
        {"id": "encoder_cpr", "value": 2048,
         "target": {"type": "component_config", "component": "wheel_encoder",
                    "config_path": "counts_per_revolution"}},
        {"id": "encoder_period", "value": 0.004,
         "target": {"type": "component_config", "component": "wheel_encoder",
                    "config_path": "period"}}], minor=0), "encoder.yaml")
    plan = build(drivetrain_manifest(tmp_path, [artifact.name]))
    encoder = plan.device("wheel_encoder")
    assert encoder.config["noise_counts"] == 2.0
    assert encoder.config["counts_per_revolution"] == 2048.0
    assert encoder.binding["counts_per_unit"] == pytest.approx(2048 / (2 * math.pi))
    assert encoder.period_ticks == 4
    inspected = {c["id"]: c for c in plan.inspect()["components"]}
    assert inspected["wheel_encoder"]["config"]["noise_counts"] == 2.0
    assert inspected["wheel_encoder"]["period"]["ticks"] == 4
    # the other components and the compiled model are untouched
    assert plan.provenance["compiled_model_sha256"] == \
        drivetrain_baseline.provenance["compiled_model_sha256"]
    assert plan.device("chassis_imu").config == drivetrain_baseline.device("chassis_imu").config
    # and the device's output follows the new config
    counts = []
    for p in (drivetrain_baseline, plan):
        instance = p.create_instance(seed=3)
        instance.advance(40)
        counts.append(len([r for r in instance.poll()
                           if getattr(r, "device_id", None) == "wheel_encoder"]))
    assert counts[1] == pytest.approx(counts[0] / 2, abs=1) and counts[1] >= 9


def test_component_overlay_on_int_key(tmp_path: Path, kinds_baseline: SimulationPlan) -> None:
    assert kinds_baseline.device("scan").config["rays"] == 8
    plan = build(kinds_manifest(tmp_path), [param("rays", 16.0, ComponentTarget("scan", "rays"))])
    rays = plan.device("scan").config["rays"]
    assert rays == 16 and isinstance(rays, int)
    assert len(plan.device("scan").component_names) == 16


# --------------------------------------------------------------------------- 3. rejections

GOOD = {"id": "wheel_damping", "value": 0.05, "target": "mujoco:joint_damping:shaft:0"}


def _p(pid: str, value: Any, target: Any, key: str = "target") -> dict[str, Any]:
    return {"id": pid, "value": value, key: target}


# case id -> (artifact doc, expected error type, fragments the message must hold,
#             the message names the parameter id)
REJECTIONS: dict[str, tuple[Any, type[FibrilError], list[str], bool]] = {
    "unknown object": (
        artifact_doc([_p("p1", 0.05, "mujoco:joint_damping:no_such_joint")]), OverlayError,
        ["mujoco:joint_damping:no_such_joint:0", "0.05", "no joint named 'no_such_joint'"],
        True),
    "unknown geom": (
        artifact_doc([_p("p1", 0.5, "mujoco:geom_friction:no_such_geom:2")]), OverlayError,
        ["mujoco:geom_friction:no_such_geom:2", "0.5", "no geom named 'no_such_geom'"], True),
    "joint kind on a body": (
        artifact_doc([_p("p1", 0.05, "mujoco:joint_damping:rotor")]), OverlayError,
        ["mujoco:joint_damping:rotor:0", "0.05", "'rotor' is a body, not a joint"], True),
    "body kind on a joint": (
        artifact_doc([_p("p1", 1.5, "mujoco:body_mass:shaft")]), OverlayError,
        ["mujoco:body_mass:shaft:0", "1.5", "'shaft' is a joint, not a body"], True),
    "list for a scalar": (
        artifact_doc([_p("p1", [0.1, 0.2], "mujoco:joint_damping:shaft")]), OverlayError,
        ["mujoco:joint_damping:shaft:0", "takes one number", "[0.1, 0.2]"], True),
    "string for a scalar": (
        artifact_doc([_p("p1", "0.1", "mujoco:joint_damping:shaft")]), OverlayError,
        ["mujoco:joint_damping:shaft:0", "takes one number", "'0.1'"], True),
    "bool for a scalar": (
        artifact_doc([_p("p1", True, "mujoco:joint_damping:shaft")]), OverlayError,
        ["mujoco:joint_damping:shaft:0", "takes one number", "True"], True),
    "scalar for a range": (
        artifact_doc([_p("p1", 0.5, "mujoco:joint_range:rail")]), OverlayError,
        ["mujoco:joint_range:rail:0", "needs [min, max]", "0.5"], True),
    "three values for a range": (
        artifact_doc([_p("p1", [0.1, 0.2, 0.3], "mujoco:tendon_range:tether")]), OverlayError,
        ["mujoco:tendon_range:tether:0", "needs [min, max]", "[0.1, 0.2, 0.3]"], True),
    "range and scalar targets in one parameter": (
        artifact_doc([_p("p1", [0.1, 0.2], ["mujoco:joint_range:rail",
                                            "mujoco:joint_damping:rail"], "targets")]),
        OverlayError, ["binds range and scalar targets"], True),
    "nan": (
        artifact_doc([_p("p1", float("nan"), "mujoco:joint_damping:shaft")]), OverlayError,
        ["mujoco:joint_damping:shaft:0", "nan", "not finite"], True),
    "infinity": (
        artifact_doc([_p("p1", float("inf"), "mujoco:geom_solref:rotor_geom:0")]), OverlayError,
        ["mujoco:geom_solref:rotor_geom:0", "inf", "not finite"], True),
    "negative infinity on a signed kind": (
        artifact_doc([_p("p1", float("-inf"), "mujoco:actuator_forcerange:push:0")]),
        OverlayError, ["mujoco:actuator_forcerange:push:0", "-inf", "not finite"], True),
    "infinity in a range": (
        artifact_doc([_p("p1", [0.0, float("inf")], "mujoco:tendon_range:tether")]),
        OverlayError, ["value[1]", "inf", "finite"], False),
    "string in a range": (
        artifact_doc([_p("p1", [0.0, "wide"], "mujoco:tendon_range:tether")]),
        OverlayError, ["value[1]", "'wide'"], False),
    "reversed range": (
        artifact_doc([_p("p1", [0.5, -0.5], "mujoco:joint_range:rail")]), OverlayError,
        ["mujoco:joint_range:rail:0", "reversed range [0.5, -0.5]"], True),
    "two parameters on one field": (
        artifact_doc([_p("p1", 0.1, "mujoco:joint_damping:shaft"),
                      _p("p2", 0.2, {"type": "mujoco", "kind": "joint_damping",
                                     "object": "shaft", "component_index": 0})]),
        OverlayError, ["'p1'", "'p2'", "both bind mujoco:joint_damping:shaft:0"], True),
    "two parameters on one component key": (
        artifact_doc([_p("p1", 0.1, {"type": "component_config", "component": "enc",
                                     "config_path": "noise_counts"}),
                      _p("p2", 0.2, {"type": "component_config", "component": "enc",
                                     "config_path": "noise_counts"})]),
        OverlayError, ["'p1'", "'p2'", "both bind component_config:enc:noise_counts"], True),
    "non-zero index on a scalar (string)": (
        artifact_doc([_p("p1", 0.05, "mujoco:joint_damping:shaft:2")]), OverlayError,
        ["joint_damping on 'shaft' is a scalar target", "component_index must be 0, got 2"],
        False),
    "non-zero index on a scalar (mapping)": (
        artifact_doc([_p("p1", 0.05, {"type": "mujoco", "kind": "body_mass", "object": "rotor",
                                      "component_index": 1})]), OverlayError,
        ["parameters[0].target.component_index", "body_mass on 'rotor' is a scalar target",
         "got 1"], False),
    "out-of-range index on a vector": (
        artifact_doc([_p("p1", 0.5, "mujoco:geom_friction:rotor_geom:3")]), OverlayError,
        ["geom_friction on 'rotor_geom' has 3 components", "component_index 3 is out of range"],
        False),
    "negative index (mapping)": (
        artifact_doc([_p("p1", 0.5, {"type": "mujoco", "kind": "actuator_gear",
                                     "object": "push", "component_index": -1})]), OverlayError,
        ["component_index", "-1"], False),
    "range kind in schema 1.0": (
        artifact_doc([_p("p1", [0.1, 0.2], "mujoco:joint_range:rail")], minor=0), OverlayError,
        ["'joint_range' needs overlay schema 1.1", "this document is 1.0"], False),
    "torquescale in schema 1.0": (
        artifact_doc([_p("p1", 0.5, {"type": "mujoco", "kind": "equality_weld_torquescale",
                                     "object": "glue"})], minor=0), OverlayError,
        ["'equality_weld_torquescale' needs overlay schema 1.1"], False),
    "plugin attribute in schema 1.0": (
        artifact_doc([_p("p1", 50, "mujoco:plugin_attribute:pid1:kp")], minor=0), OverlayError,
        ["'plugin_attribute' needs overlay schema 1.1"], False),
    "unknown kind": (
        artifact_doc([_p("p1", 0.05, "mujoco:joint_dampening:shaft")]), OverlayError,
        ["unknown MuJoCo target kind", "'joint_dampening'", "joint_damping"], False),
    "unknown kind (mapping)": (
        artifact_doc([_p("p1", 0.05, {"type": "mujoco", "kind": "mass", "object": "rotor"})]),
        OverlayError, ["parameters[0].target.kind", "unknown MuJoCo target kind", "'mass'"],
        False),
    "unknown target type": (
        artifact_doc([_p("p1", 0.05, {"type": "mjcf", "kind": "body_mass", "object": "rotor"})]),
        OverlayError, ["parameters[0].target.type", "'mjcf'"], False),
    "malformed target: no prefix": (
        artifact_doc([_p("p1", 0.05, "joint_damping:shaft")]), OverlayError,
        ["'joint_damping:shaft' is not of the form"], False),
    "malformed target: no object": (
        artifact_doc([_p("p1", 0.05, "mujoco:joint_damping")]), OverlayError,
        ["'mujoco:joint_damping' is not of the form"], False),
    "malformed target: empty part": (
        artifact_doc([_p("p1", 0.05, "mujoco::shaft")]), OverlayError,
        ["'mujoco::shaft' is not of the form"], False),
    "malformed target: too many parts": (
        artifact_doc([_p("p1", 0.05, "mujoco:joint_damping:shaft:0:1")]), OverlayError,
        ["'mujoco:joint_damping:shaft:0:1' is not of the form"], False),
    "malformed target: index not a number": (
        artifact_doc([_p("p1", 0.05, "mujoco:geom_friction:rotor_geom:x")]), OverlayError,
        ["component index 'x' is not a non-negative integer"], False),
    "malformed target: negative index": (
        artifact_doc([_p("p1", 0.05, "mujoco:geom_friction:rotor_geom:-1")]), OverlayError,
        ["component index '-1' is not a non-negative integer"], False),
    "malformed target: plugin without attribute": (
        artifact_doc([_p("p1", 50, "mujoco:plugin_attribute:pid1")]), OverlayError,
        ["plugin_attribute needs 'mujoco:plugin_attribute:<instance>:<attribute>'"], False),
    "unknown component": (
        artifact_doc([_p("p1", 0.7, {"type": "component_config", "component": "no_such",
                                     "config_path": "noise_counts"})]), OverlayError,
        ["target component 'no_such' is not in the manifest", "0.7"], True),
    "unknown component config key": (
        artifact_doc([_p("p1", 0.7, {"type": "component_config", "component": "enc",
                                     "config_path": "colour"})]), OverlayError,
        ["component_config:enc:colour", "0.7", "no numeric scalar config key 'colour'",
         "noise_counts"], True),
    "non-numeric component config key": (
        artifact_doc([_p("p1", 0.7, {"type": "component_config", "component": "servo_cmd",
                                     "config_path": "position_limits"})]), OverlayError,
        ["component_config:servo_cmd:position_limits", "0.7",
         "no numeric scalar config key 'position_limits'", "supply_voltage"], True),
    "string component config key": (
        artifact_doc([_p("p1", 1.0, {"type": "component_config", "component": "enc",
                                     "config_path": "frame_id"})]), OverlayError,
        ["component_config:enc:frame_id", "'frame_id'"], True),
    "fractional value for an int key": (
        artifact_doc([_p("p1", 7.5, {"type": "component_config", "component": "scan",
                                     "config_path": "rays"})]), OverlayError,
        ["component_config:scan:rays", "7.5", "integer"], True),
    "component config fails validation": (
        artifact_doc([_p("p1", -1.0, {"type": "component_config", "component": "enc",
                                      "config_path": "noise_counts"})]), OverlayError,
        ["component_config:enc:noise_counts", "-1"], True),
    "dcmotor kind on a plain motor": (
        artifact_doc([_p("p1", 3.0, "mujoco:dcmotor_resistance:push")]), OverlayError,
        ["mujoco:dcmotor_resistance:push:0", "3.0", "'push' is not a native DC motor"], True),
    "dcmotor kind on a position servo": (
        artifact_doc([_p("p1", 0.01, "mujoco:dcmotor_inductance:servo")]), OverlayError,
        ["mujoco:dcmotor_inductance:servo:0", "0.01", "'servo' is not a native DC motor"], True),
    "position kp on a dc motor": (
        artifact_doc([_p("p1", 80.0, "mujoco:actuator_position_kp:drive")]), OverlayError,
        ["mujoco:actuator_position_kp:drive:0", "80.0", "'drive' is not a position servo"], True),
    "position kv on a plain motor": (
        artifact_doc([_p("p1", 3.0, "mujoco:actuator_position_kv:push")]), OverlayError,
        ["mujoco:actuator_position_kv:push:0", "3.0", "'push' is not a position servo"], True),
    "adhesion gain on a position servo": (
        artifact_doc([_p("p1", 3.0, "mujoco:actuator_adhesion_gain:servo")]), OverlayError,
        ["mujoco:actuator_adhesion_gain:servo:0", "3.0", "not an adhesion actuator"], True),
    "joint range on a ball joint": (
        artifact_doc([_p("p1", [0.0, 30.0], "mujoco:joint_range:ball")]), OverlayError,
        ["mujoco:joint_range:ball:0", "(0.0, 30.0)", "'ball' is not a hinge or slide"], True),
    "joint range on a free joint": (
        artifact_doc([_p("p1", [-1.0, 1.0], "mujoco:joint_range:free_a")]), OverlayError,
        ["mujoco:joint_range:free_a:0", "(-1.0, 1.0)", "'free_a' is not a hinge or slide"],
        True),
    "weld torquescale on a connect": (
        artifact_doc([_p("p1", 0.5, "mujoco:equality_weld_torquescale:pin")]), OverlayError,
        ["mujoco:equality_weld_torquescale:pin:0", "0.5", "'pin' is not a weld"], True),
    "unknown plugin instance": (
        artifact_doc([_p("p1", 50, "mujoco:plugin_attribute:pid9:kp")]), OverlayError,
        ["mujoco:plugin_attribute:pid9:kp", "50", "no plugin instance named 'pid9'", "pid1"],
        True),
    "unconfigured plugin attribute": (
        artifact_doc([_p("p1", 50, "mujoco:plugin_attribute:pid1:gain")]), OverlayError,
        ["mujoco:plugin_attribute:pid1:gain", "50", "no attribute 'gain'", "kd, kp"], True),
    **{f"negative {kind}": (
        artifact_doc([_p("p1", -0.25, f"mujoco:{kind}:{obj}")]), OverlayError,
        [f"mujoco:{kind}:{obj}:0", "must be > 0" if kind == "dcmotor_resistance"
         else "must be >= 0", "-0.25"], True)
       for kind, obj in [("joint_damping", "shaft"), ("body_mass", "rotor"),
                         ("geom_friction", "rotor_geom"), ("dcmotor_resistance", "drive"),
                         ("dcmotor_inductance", "drive"), ("actuator_delay", "push"),
                         ("equality_weld_torquescale", "glue")]},
    "unknown artifact key": (
        {**artifact_doc([GOOD]), "colour": "blue"}, OverlayError,
        ["colour: unknown key", "parameters", "schema_version"], False),
    "unknown parameter key": (
        artifact_doc([{**GOOD, "bounds": [0, 1]}]), OverlayError,
        ["parameters[0].bounds: unknown key"], False),
    "unknown target key": (
        artifact_doc([_p("p1", 0.1, {"type": "mujoco", "kind": "joint_damping",
                                     "object": "shaft", "index": 0})]), OverlayError,
        ["parameters[0].target.index: unknown key"], False),
    "missing value": (
        artifact_doc([{"id": "p1", "target": "mujoco:joint_damping:shaft"}]), OverlayError,
        ["parameters[0].value: missing required key"], False),
    "schema major 2": (
        artifact_doc([GOOD], minor=0) | {"schema_version": {"major": 2, "minor": 0}},
        OverlayError, ["schema_version: unsupported schema version 2.0; expected 1.0, 1.1"],
        False),
    "schema minor 2": (
        artifact_doc([GOOD], minor=2), OverlayError,
        ["schema_version: unsupported schema version 1.2"], False),
    "wrong format": (
        artifact_doc([GOOD], format="fibril_sim/experiment"), OverlayError,
        ["format: expected 'fibril_sim/parameter_overlay'", "fibril_sim/experiment"], False),
    "duplicate ids": (
        artifact_doc([GOOD, {**GOOD, "target": "mujoco:joint_damping:ctl_joint"}]),
        OverlayError, ["parameters[1].id: duplicate parameter id 'wheel_damping'"], True),
    "both target and targets": (
        artifact_doc([{**GOOD, "targets": ["mujoco:joint_damping:ctl_joint"]}]), OverlayError,
        ["parameters[0]", "exactly one of 'target' (one) or 'targets' (a list)"], False),
    "neither target nor targets": (
        artifact_doc([{"id": "p1", "value": 0.1}]), OverlayError,
        ["parameters[0]", "exactly one of 'target' (one) or 'targets' (a list)"], False),
    "empty targets": (
        artifact_doc([_p("p1", 0.1, [], "targets")]), OverlayError,
        ["parameters[0].targets: expected at least one target"], False),
    "same target listed twice": (
        artifact_doc([_p("p1", 0.1, ["mujoco:joint_damping:shaft",
                                     "mujoco:joint_damping:shaft:0"], "targets")]),
        OverlayError, ["parameters[0].targets: the same target is listed twice"], False),
    "parameters not a list": (
        artifact_doc([]) | {"parameters": {"wheel_damping": 0.1}}, OverlayError,
        ["parameters: expected a list"], False),
    "document not a mapping": (
        ["not", "a", "mapping"], OverlayError, ["expected a mapping"], False),
}


def _rejection(tmp_path: Path, case: str) -> tuple[FibrilError, Path]:
    doc, error, _, _ = REJECTIONS[case]
    manifest = kinds_manifest(tmp_path, [doc])
    with pytest.raises(FibrilError) as info:
        build(manifest)
    assert isinstance(info.value, error), (type(info.value), info.value)
    assert isinstance(info.value, PlanError)
    return info.value, tmp_path / "overlay0.yaml"


@pytest.mark.parametrize("case", list(REJECTIONS))
def test_rejection(tmp_path: Path, case: str) -> None:
    error, artifact = _rejection(tmp_path, case)
    message = str(error)
    for fragment in REJECTIONS[case][2]:
        assert fragment in message, (fragment, message)
    assert "\n" not in message
    names_id = REJECTIONS[case][3]
    if names_id:
        assert "'p1'" in message or "'wheel_damping'" in message, message


def _names_id_param(case: str) -> Any:
    return case


@pytest.mark.parametrize("case", [_names_id_param(c) for c in REJECTIONS
                                  if c.startswith(("non-zero index", "out-of-range index",
                                                   "range kind", "unknown kind",
                                                   "malformed target", "infinity in a range",
                                                   "string in a range", "negative index"))])
def test_target_and_value_errors_name_the_parameter_id(tmp_path: Path, case: str) -> None:
    error, _ = _rejection(tmp_path, case)
    assert "'p1'" in str(error), str(error)


@pytest.mark.parametrize("case", ["list for a scalar", "non-zero index on a scalar (string)",
                                  "unknown kind", "range kind in schema 1.0",
                                  "unknown artifact key", "duplicate ids", "reversed range",
                                  "two parameters on one field", "wrong format"])
def test_artifact_errors_name_the_artifact_file(tmp_path: Path, case: str) -> None:
    error, artifact = _rejection(tmp_path, case)
    assert str(error).startswith(f"{artifact}: "), str(error)


def test_rejections_also_apply_to_json_artifacts(tmp_path: Path) -> None:
    path = write_doc(tmp_path, artifact_doc([_p("p1", [0.5, -0.5], "mujoco:joint_range:rail")]),
                     "bad.json")
    with pytest.raises(OverlayError, match=r"reversed range \[0.5, -0.5\]"):
        build(kinds_manifest(tmp_path, [path.name]))


def test_unreadable_artifacts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("parameters: [\n", encoding="utf-8")
    with pytest.raises(OverlayError, match="bad.yaml: not valid YAML"):
        load_overlay_artifact(bad)
    with pytest.raises(OverlayError, match="absent.yaml: file not found"):
        load_overlay_artifact(tmp_path / "absent.yaml")
    doc = manifest_doc(profiles={}, parameter_overlays=["absent.yaml"])
    (tmp_path / "model.xml").write_text(kinds_xml(), encoding="utf-8")
    with pytest.raises(ManifestError, match="parameter_overlays\\[0\\]: overlay file .*absent"):
        build(write_manifest(tmp_path, doc))


def test_rejected_overlay_builds_nothing_and_leaves_the_builder_usable(tmp_path: Path) -> None:
    builder = SimulationBuilder()
    manifest = kinds_manifest(tmp_path)
    with pytest.raises(OverlayError):
        builder.build(manifest, [param("p1", 0.1, "mujoco:joint_damping:rotor")])
    plan = builder.build(manifest, [param("p1", 0.1, "mujoco:joint_damping:shaft")])
    assert plan.model.dof_damping[dof(plan.model, "shaft")] == 0.1


# ---- programmatic parameters (the calibration / experiment path) must meet the same checks

PROGRAMMATIC: dict[str, tuple[OverlayParameter, list[str]]] = {
    "unknown object": (param("p1", 0.05, "mujoco:joint_damping:nope"),
                       ["'p1'", "mujoco:joint_damping:nope:0", "0.05", "no joint named"]),
    "wrong object type": (param("p1", 0.05, "mujoco:joint_damping:rotor"),
                          ["'p1'", "mujoco:joint_damping:rotor:0", "is a body"]),
    "dcmotor on plain motor": (param("p1", 1.0, "mujoco:dcmotor_resistance:push"),
                               ["'p1'", "not a native DC motor"]),
    "unconfigured plugin attribute": (param("p1", 1.0, "mujoco:plugin_attribute:pid1:ki"),
                                      ["'p1'", "mujoco:plugin_attribute:pid1:ki", "no attribute"]),
    "unknown component": (param("p1", 1.0, ComponentTarget("nope", "noise_counts")),
                          ["'p1'", "'nope'"]),
    "nan": (param("p1", float("nan"), "mujoco:joint_damping:shaft"),
            ["'p1'", "mujoco:joint_damping:shaft:0", "nan"]),
    "negative value for a non-negative kind": (
        param("p1", -1.0, "mujoco:joint_damping:shaft"),
        ["'p1'", "mujoco:joint_damping:shaft:0", "-1"]),
    "non-zero index on a scalar target": (
        param("p1", 0.3, "mujoco:joint_damping:shaft:3"), ["'p1'", "joint_damping", "3"]),
    "out-of-range index on a vector target": (
        param("p1", 0.3, "mujoco:geom_friction:rotor_geom:5"), ["'p1'", "geom_friction", "5"]),
    "unknown kind": (param("p1", 0.3, "mujoco:joint_dampening:shaft"),
                     ["'p1'", "joint_dampening"]),
    "scalar for a range": (param("p1", 0.3, "mujoco:joint_range:rail"),
                           ["'p1'", "mujoco:joint_range:rail:0", "0.3"]),
    "range for a scalar": (param("p1", [0.1, 0.2], "mujoco:joint_damping:shaft"),
                           ["'p1'", "mujoco:joint_damping:shaft:0"]),
    "reversed range": (param("p1", [0.5, -0.5], "mujoco:tendon_range:tether"),
                       ["'p1'", "mujoco:tendon_range:tether:0", "0.5"]),
}
@pytest.mark.parametrize("case", list(PROGRAMMATIC))
def test_programmatic_parameters_are_rejected_like_artifacts(tmp_path: Path, case: str) -> None:
    parameter, fragments = PROGRAMMATIC[case]
    with pytest.raises(FibrilError) as info:
        build(kinds_manifest(tmp_path), [parameter])
    assert isinstance(info.value, OverlayError), type(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_programmatic_conflict_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(OverlayError) as info:
        build(kinds_manifest(tmp_path), [param("a", 0.1, "mujoco:joint_damping:shaft"),
                                         param("b", 0.2, "mujoco:joint_damping:shaft")])
    assert "'a' and 'b' both bind mujoco:joint_damping:shaft:0" in str(info.value)
    with pytest.raises(OverlayError, match="'a' and 'b' both bind"):
        ParameterOverlays((param("a", 0.1, "mujoco:joint_damping:shaft"),
                           param("b", 0.2, "mujoco:joint_damping:shaft")))


# --------------------------------------------------------------------------- more contract


def test_parameter_set_hash_ignores_unit_and_provenance(tmp_path: Path) -> None:
    """The hash holds id, kind, object, component and value; unit/provenance are metadata."""
    manifest = kinds_manifest(tmp_path)
    plain = build(manifest, [param("d", 0.3, "mujoco:joint_damping:shaft")])
    noted = build(manifest, [param("d", 0.3, "mujoco:joint_damping:shaft", unit="N*m*s/rad",
                                   provenance="fit 3")])
    assert plain.provenance["parameter_set_hash"] == noted.provenance["parameter_set_hash"]
    assert noted.provenance["parameters"][0]["unit"] == "N*m*s/rad"


def test_schema_1_1_targets_round_trip(tmp_path: Path) -> None:
    parameters = [
        param("tether_limits", [0.25, 1.75], "mujoco:tendon_range:tether"),
        param("glue_scale", 0.75, "mujoco:equality_weld_torquescale:glue"),
        param("pid_kp", 55.0, "mujoco:plugin_attribute:pid1:kp"),
        param("shaft_limits", [-45.0, 60.0], "mujoco:joint_range:shaft"),
    ]
    doc = overlay_document(parameters)
    assert doc["schema_version"] == {"major": 1, "minor": 1} and "id" not in doc
    path = write_doc(tmp_path, doc, "fit.json")
    assert load_overlay_artifact(path).parameters == tuple(parameters)
    via_manifest = build(kinds_manifest(tmp_path, ["fit.json"]))
    via_code = build(kinds_manifest(tmp_path), parameters)
    assert via_manifest.provenance["compiled_model_sha256"] == \
        via_code.provenance["compiled_model_sha256"]
    assert via_manifest.provenance["parameter_set_hash"] == \
        via_code.provenance["parameter_set_hash"]
    model = via_manifest.model
    assert tuple(model.tendon_range[0]) == (0.25, 1.75)
    assert model.eq_data[oid(model, OBJ.mjOBJ_EQUALITY, "glue")][10] == 0.75
    assert float(plugin_attrs(model)[0]) == 55.0
    np.testing.assert_allclose(model.jnt_range[jid(model, "shaft")],
                               np.radians([-45.0, 60.0]), rtol=1e-12)


def test_schema_1_0_document_for_1_0_kinds_loads_under_1_1_too(tmp_path: Path) -> None:
    for minor in (0, 1):
        path = write_doc(tmp_path, artifact_doc([GOOD], minor=minor), f"v{minor}.yaml")
        artifact = load_overlay_artifact(path)
        assert artifact.schema_version == (1, minor)
        assert artifact.parameters[0].targets == (MujocoTarget("joint_damping", "shaft", 0),)
        assert len(artifact.sha256) == 64


def test_string_and_mapping_targets_are_the_same_target(tmp_path: Path) -> None:
    path = write_doc(tmp_path, artifact_doc([
        _p("a", 0.5, "mujoco:geom_friction:rotor_geom:2"),
        _p("b", 0.5, {"type": "mujoco", "kind": "geom_friction", "object": "slider_geom",
                      "component_index": 2}),
        _p("c", 1.0, {"type": "component_config", "component": "enc",
                      "config_path": "bias"})]), "a.yaml")
    a, b, c = load_overlay_artifact(path).parameters
    assert a.targets == (MujocoTarget("geom_friction", "rotor_geom", 2),)
    assert b.targets == (MujocoTarget("geom_friction", "slider_geom", 2),)
    assert c.targets == (ComponentTarget("enc", "bias"),)
    assert isinstance(a.value, float) and a.value == 0.5


def test_joint_range_on_unlimited_hinge_in_radian_model_keeps_limited_flag(
        tmp_path: Path) -> None:
    xml = kinds_xml("radian").replace(
        '<joint name="ctl_joint" type="hinge" axis="0 0 1"/>',
        '<joint name="ctl_joint" type="hinge" axis="0 0 1" limited="false" range="-1 1"/>')
    plan = build(kinds_manifest(tmp_path, xml=xml),
                 [param("r", [-0.3, 0.4], "mujoco:joint_range:ctl_joint")])
    j = jid(plan.model, "ctl_joint")
    assert tuple(plan.model.jnt_range[j]) == (-0.3, 0.4) and not plan.model.jnt_limited[j]


def test_joint_range_on_unlimited_hinge_in_degree_model(tmp_path: Path) -> None:
    xml = kinds_xml("degree").replace(
        '<joint name="ctl_joint" type="hinge" axis="0 0 1"/>',
        '<joint name="ctl_joint" type="hinge" axis="0 0 1" limited="false" range="-10 10"/>')
    plan = build(kinds_manifest(tmp_path, xml=xml),
                 [param("r", [-30.0, 45.0], "mujoco:joint_range:ctl_joint")])
    j = jid(plan.model, "ctl_joint")
    # MuJoCo's own convention for an unlimited degree hinge: the range is stored as authored
    assert tuple(plan.model.jnt_range[j]) == (-30.0, 45.0) and not plan.model.jnt_limited[j]


@pytest.mark.parametrize("kind", ["dcmotor_resistance", "dcmotor_effective_motor_constant"])
def test_zero_dcmotor_resistance_or_motor_constant_is_rejected(tmp_path: Path,
                                                               kind: str) -> None:
    with pytest.raises(FibrilError) as info:
        build(drivetrain_manifest(tmp_path), [param("p1", 0.0, f"mujoco:{kind}:drive")])
    assert "'p1'" in str(info.value) and f"mujoco:{kind}:drive:0" in str(info.value)


def test_component_duration_overlay_in_whole_ticks(tmp_path: Path) -> None:
    plan = build(kinds_manifest(tmp_path),
                 [param("lat", 0.003, ComponentTarget("enc", "latency"))])
    assert plan.device("enc").latency_ticks == 3


def test_non_whole_tick_duration_overlay_names_the_parameter(tmp_path: Path) -> None:
    with pytest.raises(OverlayError) as info:
        build(kinds_manifest(tmp_path), [param("per", 0.0015, ComponentTarget("enc", "period"))])
    assert "'per'" in str(info.value) and "component_config:enc:period" in str(info.value)


def test_inertia_overlay_that_mujoco_refuses_is_a_plan_error(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as info:
        build(kinds_manifest(tmp_path), [param("izz", 0.01, "mujoco:body_inertia:rotor:2")])
    message = str(info.value)
    assert "cannot compile model (with parameter overlays izz)" in message
    assert "inertia" in message
