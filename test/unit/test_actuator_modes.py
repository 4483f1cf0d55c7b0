"""Actuators by what they are: the modes each MuJoCo actuator takes, the ctrl a command writes,
and that a setpoint reaches the joint (models written here, one actuator per joint)."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

from _models import MOTOR_PAYLOAD, build, command, motor
from fibril_sim_core import ActuatorApplication, IngressError, SimulationBuilder
from fibril_sim_core.records import IngressRecord
from fibril_sim_core.components.motor import classify_actuator

GRIP_GAIN = 0.01568627  # Menagerie Panda's actuator8: gain 255/16 000, bias 0 -100 -10
GRIP_SCALE = 100.0 / GRIP_GAIN

XML = f"""\
<mujoco model="kinds">
  <option timestep="0.001" gravity="0 0 0" integrator="implicitfast"/>
  <default><geom type="box" size="0.05 0.02 0.02" mass="1" contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="b_motor" pos="0 0 0"><joint name="j_motor" axis="0 0 1"/><geom/></body>
    <body name="b_pos" pos="0 1 0"><joint name="j_pos" axis="0 0 1"/>
      <geom size="0.5 0.05 0.05" mass="20"/></body>
    <body name="b_grip" pos="0 2 0"><joint name="j_grip" type="slide" axis="1 0 0"/><geom/></body>
    <body name="b_vel" pos="0 3 0"><joint name="j_vel" axis="0 0 1"/><geom/></body>
    <body name="b_int" pos="0 4 0"><joint name="j_int" axis="0 0 1"/><geom/></body>
    <body name="b_damp" pos="0 5 0"><joint name="j_damp" axis="0 0 1"/><geom/></body>
    <body name="b_dc" pos="0 6 0"><joint name="j_dc" axis="0 0 1"/><geom/></body>
    <body name="b_cyl" pos="0 7 0"><joint name="j_cyl" type="slide" axis="1 0 0"/><geom/></body>
    <body name="b_svo" pos="0 8 0"><joint name="j_svo" axis="0 0 1"/><geom/></body>
    <body name="b_gvel" pos="0 9 0"><joint name="j_gvel" axis="0 0 1"/><geom/></body>
    <body name="b_dcpos" pos="0 10 0"><joint name="j_dcpos" axis="0 0 1"/><geom/></body>
  </worldbody>
  <actuator>
    <motor name="push" joint="j_motor" ctrlrange="-2 2"/>
    <general name="arm" joint="j_pos" biastype="affine" gainprm="4500" biasprm="0 -4500 -450"
             ctrlrange="-1.5 1.5"/>
    <general name="grip" joint="j_grip" biastype="affine" gainprm="{GRIP_GAIN}"
             biasprm="0 -100 -10" ctrlrange="0 255"/>
    <velocity name="spin" joint="j_vel" kv="3"/>
    <intvelocity name="creep" joint="j_int" kp="50" kv="10" actrange="-1 1"/>
    <damper name="brake" joint="j_damp" kv="1" ctrlrange="0 1"/>
    <dcmotor name="drive" joint="j_dc" resistance="2.0" motorconst="0.05 0.05" gear="10"/>
    <cylinder name="ram" joint="j_cyl" area="2"/>
    <position name="servo" joint="j_svo" kp="20" kv="4"/>
    <general name="wheel" joint="j_gvel" biastype="affine" gainprm="2" biasprm="0 0 -6"/>
    <dcmotor name="drive_pos" joint="j_dcpos" resistance="2" motorconst="0.05" input="pos"
             controller="5 0 0.1"/>
  </actuator>
</mujoco>
"""

COMPONENTS = [
    motor("push", "push", "push/cmd", torque_limit=5.0),
    motor("arm", "arm", "arm/cmd"),
    motor("grip", "grip", "grip/cmd", position_limits=[0.0, 0.03]),
    motor("spin", "spin", "spin/cmd"),
    motor("creep", "creep", "creep/cmd"),
    motor("brake", "brake", "brake/cmd"),
    motor("drive", "drive", "drive/cmd", supply_voltage=12.0, duty_limit=0.8),
    motor("ram", "ram", "ram/cmd"),
    motor("servo", "servo", "servo/cmd"),
    motor("wheel", "wheel", "wheel/cmd"),
    motor("drive_pos", "drive_pos", "drive_pos/cmd"),
]


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory):
    return build(tmp_path_factory.mktemp("kinds"), XML, COMPONENTS)


@pytest.mark.parametrize(("endpoint", "modes", "kind", "scale"), [
    ("push/cmd", ["torque"], "a motor: gain 1", 1.0),
    ("arm/cmd", ["position"], "a position servo: kp 4500, kv 450", 1.0),
    ("grip/cmd", ["position"], "a position servo: kp 100, kv 10, gain 0.0156863", GRIP_SCALE),
    ("spin/cmd", ["velocity"], "a velocity servo: kv 3", 1.0),
    ("creep/cmd", ["velocity"], "an integrated-velocity servo: kp 50, kv 10", 1.0),
    ("brake/cmd", [], "a damper: kv 1; its ctrl scales the damping, it is neither a force nor "
                     "a setpoint", 1.0),
    ("drive/cmd", ["duty", "voltage"], "a DC motor: inputs voltage", 1.0),
    ("ram/cmd", [], "a cylinder: area 2; its ctrl is a pressure", 1.0),
    ("servo/cmd", ["position"], "a position servo: kp 20, kv 4", 1.0),
    ("wheel/cmd", ["velocity"], "a velocity servo: kv 6, gain 2", 3.0),
    ("drive_pos/cmd", ["position"], "a DC motor: inputs position", 1.0),
])
def test_actuator_kind_and_modes(plan, endpoint: str, modes: list[str], kind: str,
                                 scale: float) -> None:
    descriptor = plan.endpoints[endpoint]
    assert sorted(descriptor.modes) == modes
    assert descriptor.kind.describe() == kind
    assert descriptor.kind.scale == pytest.approx(scale, rel=1e-12)
    assert plan.inspect()["components"][COMPONENTS.index(
        next(c for c in COMPONENTS if c["endpoint"] == endpoint))]["modes"] == modes


def test_dc_motor_modes_are_its_declared_inputs(plan) -> None:
    """DC motors keep their input signature: one ctrl per declared input, in MuJoCo's order,
    no scaling and no ctrlrange clamp here (the driver's own limits only)."""
    model = plan.model
    for name in ("drive", "drive_pos"):
        aid = model.actuator(name).id
        spec = int(model.actuator_ctrlspec[aid])
        modes, kind = classify_actuator(model, aid)
        assert spec in (8, 1)
        expected = ({"voltage": int(model.actuator_ctrladr[aid]),
                     "duty": int(model.actuator_ctrladr[aid])} if spec == 8
                    else {"position": int(model.actuator_ctrladr[aid])})
        assert modes == expected
        assert (kind.scale, kind.ctrlrange) == (1.0, None)


def _apply(plan, endpoint: str, mode: str, value: float) -> tuple[float, float]:
    instance = plan.create_instance()
    instance.enqueue(command(endpoint, 0, mode, value))
    instance.advance(0)
    applications = [r for r in instance.poll() if isinstance(r, ActuatorApplication)]
    assert len(applications) == 1 and applications[0].commanded == value
    aid = plan.model.actuator(applications[0].actuator).id
    return applications[0].applied, float(instance.data.ctrl[plan.model.actuator_ctrladr[aid]])


@pytest.mark.parametrize(("endpoint", "mode", "value", "ctrl"), [
    ("push/cmd", "torque", 1.5, 1.5),
    ("push/cmd", "torque", -4.0, -2.0),          # ctrlrange -2 2 (torque_limit 5 is wider)
    ("push/cmd", "torque", 9.0, 2.0),            # torque_limit 5, then ctrlrange
    ("arm/cmd", "position", 0.7, 0.7),           # kp == gain: ctrl is the setpoint
    ("arm/cmd", "position", -2.0, -1.5),         # ctrlrange
    ("grip/cmd", "position", 0.02, 0.02 * GRIP_SCALE),
    ("grip/cmd", "position", 0.04, 0.03 * GRIP_SCALE),  # position_limits, joint units
    ("grip/cmd", "position", -0.01, 0.0),
    ("spin/cmd", "velocity", -2.5, -2.5),
    ("creep/cmd", "velocity", 0.4, 0.4),
    ("wheel/cmd", "velocity", 1.5, 4.5),         # ctrl = v · kv / gain
    ("servo/cmd", "position", 0.3, 0.3),
    ("drive/cmd", "duty", 1.5, 9.6),             # unchanged: duty_limit 0.8 × 12 V
    ("drive/cmd", "voltage", 20.0, 12.0),        # unchanged: the supply voltage
    ("drive_pos/cmd", "position", 7.5, 7.5),     # unchanged: as given
])
def test_command_writes_ctrl(plan, endpoint: str, mode: str, value: float, ctrl: float) -> None:
    applied, written = _apply(plan, endpoint, mode, value)
    assert applied == pytest.approx(ctrl, rel=1e-12)
    assert written == applied


@pytest.mark.parametrize(("endpoint", "mode", "why"), [
    ("arm/cmd", "torque",
     "mode 'torque' is not accepted by actuator 'arm' (a position servo: kp 4500, kv 450); "
     "accepted: position"),
    ("spin/cmd", "position",
     "mode 'position' is not accepted by actuator 'spin' (a velocity servo: kv 3); "
     "accepted: velocity"),
    ("brake/cmd", "torque",
     "mode 'torque' is not accepted by actuator 'brake' (a damper: kv 1; its ctrl scales the "
     "damping, it is neither a force nor a setpoint); accepted: none"),
    ("push/cmd", "position",
     "mode 'position' is not accepted by actuator 'push' (a motor: gain 1); accepted: torque"),
])
def test_refused_mode_names_what_the_actuator_takes(plan, endpoint: str, mode: str,
                                                    why: str) -> None:
    instance = plan.create_instance()
    with pytest.raises(IngressError) as info:
        instance.enqueue(command(endpoint, 0, mode, 0.1))
    assert str(info.value) == f"source {endpoint!r} sequence 0: {why}"
    assert plan.endpoints[endpoint].refusal(mode) == why


def test_describe_modes(plan) -> None:
    assert plan.endpoints["arm/cmd"].describe_modes() == \
        "position (a position servo: kp 4500, kv 450)"
    assert plan.endpoints["ram/cmd"].describe_modes() == \
        "none (a cylinder: area 2; its ctrl is a pressure)"


def _run(plan, commands: dict[str, tuple[str, float]], seconds: float):
    instance = plan.create_instance(seed=0)
    for n, (endpoint, (mode, value)) in enumerate(commands.items()):
        instance.enqueue(command(endpoint, n, mode, value))
    instance.advance(round(seconds / plan.model.opt.timestep))
    return instance.data


def _qpos(plan, data, joint: str) -> float:
    return float(data.qpos[plan.model.jnt_qposadr[plan.model.joint(joint).id]])


def _qvel(plan, data, joint: str) -> float:
    return float(data.qvel[plan.model.jnt_dofadr[plan.model.joint(joint).id]])


def test_setpoints_reach_the_joints(plan) -> None:
    """Position targets are met in joint units, the scaled gripper servo's included; velocity
    servos hold their velocity (no load here); an integrated-velocity servo's setpoint (its
    activation) moves at the commanded rate (0.8 after 2 s at 0.4, short of actrange 1)."""
    data = _run(plan, {"arm/cmd": ("position", 0.7), "grip/cmd": ("position", 0.025),
                       "servo/cmd": ("position", -0.4), "spin/cmd": ("velocity", -2.5),
                       "wheel/cmd": ("velocity", 1.5), "creep/cmd": ("velocity", 0.4)}, 2.0)
    assert _qpos(plan, data, "j_pos") == pytest.approx(0.7, abs=1e-3)
    assert _qpos(plan, data, "j_grip") == pytest.approx(0.025, abs=1e-4)
    assert _qpos(plan, data, "j_svo") == pytest.approx(-0.4, abs=1e-3)
    assert _qvel(plan, data, "j_vel") == pytest.approx(-2.5, abs=1e-3)
    assert _qvel(plan, data, "j_gvel") == pytest.approx(1.5, abs=1e-3)
    creep = plan.model.actuator("creep")
    assert float(data.act[plan.model.actuator_actadr[creep.id]]) == pytest.approx(0.8, abs=1e-6)
    # The joint follows the ramp at its rate, kv / kp · rate behind the setpoint.
    assert _qvel(plan, data, "j_int") == pytest.approx(0.4, abs=1e-3)
    assert _qpos(plan, data, "j_int") == pytest.approx(0.8 - 0.4 * 10 / 50, abs=1e-3)


def test_motor_torque_is_the_ctrl(plan) -> None:
    """A motor's torque command is its ctrl: 1.5 N·m on 1 kg·(0.05² + 0.02²)/3 for 0.1 s."""
    data = _run(plan, {"push/cmd": ("torque", 1.5)}, 0.1)
    body = plan.model.body("b_motor").id
    inertia = float(plan.model.body_inertia[body][2])
    assert _qvel(plan, data, "j_motor") == pytest.approx(1.5 / inertia * 0.1, rel=1e-2)


def test_passive_dc_motor_takes_nothing(tmp_path: Path) -> None:
    xml = XML.replace('<dcmotor name="drive" joint="j_dc" resistance="2.0" '
                      'motorconst="0.05 0.05" gear="10"/>',
                      '<dcmotor name="drive" joint="j_dc" resistance="2.0" '
                      'motorconst="0.05 0.05" gear="10" input="none"/>')
    model = mujoco.MjModel.from_xml_string(xml)
    modes, kind = classify_actuator(model, model.actuator("drive").id)
    assert modes == {} and kind.describe() == "a DC motor: passive, declared with no inputs"
    assert np.isfinite(model.actuator_gainprm).all()


def _kp_overlay(actuator: str, kp: float):
    from fibril_sim_core.overlays import MujocoTarget, OverlayParameter

    return [OverlayParameter(f"{actuator}_kp", kp,
                             (MujocoTarget("actuator_position_kp", actuator),))]


def test_overlays_cannot_make_a_servo_scaled(plan) -> None:
    """``actuator_position_kp`` sets gain and bias gain alike and is refused on a servo whose
    bias gain differs from its gain (the gripper's): no overlay changes a servo's ctrl scale,
    so recorded commands (and their cached control trajectories) mean the same on every
    calibration candidate."""
    from fibril_sim_core.overlays import OverlayError

    with pytest.raises(OverlayError, match="'grip' is not a position servo"):
        SimulationBuilder().build(plan.manifest.path, overlays=_kp_overlay("grip", 200.0))
    overlaid = SimulationBuilder().build(plan.manifest.path, overlays=_kp_overlay("arm", 2000.0))
    kind = overlaid.endpoints["arm/cmd"].kind
    assert (kind.describe(), kind.scale) == ("a position servo: kp 2000, kv 450", 1.0)


def test_recorded_position_commands_replay_on_overlaid_candidates(plan) -> None:
    records = [IngressRecord(0, "arm/cmd", 0, MOTOR_PAYLOAD,
                             json.dumps({"mode": "position", "value": 0.6}), True, 0, 0, "", 0),
               IngressRecord(0, "grip/cmd", 0, MOTOR_PAYLOAD,
                             json.dumps({"mode": "position", "value": 0.025}), True, 0, 1, "",
                             0)]
    recorded = plan.prepare_recorded_inputs(records)
    overlaid = SimulationBuilder().build(plan.manifest.path, overlays=_kp_overlay("arm", 2000.0))
    for candidate in (plan, overlaid):
        instance = candidate.create_instance(seed=0)
        instance.enqueue_recorded_trace_inputs(recorded)
        instance.advance(2000)
        assert _qpos(candidate, instance.data, "j_pos") == pytest.approx(0.6, abs=1e-3)
        assert _qpos(candidate, instance.data, "j_grip") == pytest.approx(0.025, abs=1e-4)
