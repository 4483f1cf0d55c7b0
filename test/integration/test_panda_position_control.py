"""The Menagerie Panda's position servos take positions: ``mode: position`` through the core,
and a sensor_msgs/JointState command topic through the ROS node, reach a target pose.

The model is MuJoCo Menagerie's ``franka_emika_panda/panda.xml`` from the shared models folder
(its arm actuators are ``<general biastype="affine">`` position servos; the gripper's actuator8
is a servo on a 0..255 ctrl whose setpoint is ctrl · 0.0157 / 100 m of its tendon).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from fibril_sim_core import SimulationBuilder, external_input

PANDA = Path(os.environ.get("FIBRIL_SHARED_MODELS", "/work/shared/models")) / \
    "franka_emika_panda" / "panda.xml"
MOTOR_PAYLOAD = "fibril_sim/motor_command/v1"
JOINTS = tuple(f"joint{i}" for i in range(1, 8))
# A pose away from the model's "home" keyframe (0 0 0 -1.57 0 1.57 -0.785), inside every range.
TARGET = (0.4, -0.3, 0.25, -2.1, 0.2, 1.9, 0.3)
GRIP = 0.02  # m of the fingers' tendon (each finger's slide: the same, split 0.5 / 0.5)
TOLERANCE = 0.01  # rad: gravity sag of the 2000..4500 N·m/rad servos stays under ~0.003

pytestmark = pytest.mark.skipif(not PANDA.is_file(),
                                reason=f"the Menagerie Panda is not at {PANDA} (shared models "
                                       f"folder missing; set FIBRIL_SHARED_MODELS)")


def _manifest(folder: Path) -> Path:
    """One fibril_sim/motor per arm actuator (endpoint ``<joint>/position``) and the gripper,
    starting from the model's home keyframe."""
    components = [{"id": f"arm{i}", "type": "fibril_sim/motor", "endpoint": f"{joint}/position",
                   "bind": {"actuator": f"actuator{i}"}}
                  for i, joint in enumerate(JOINTS, start=1)]
    components.append({"id": "gripper", "type": "fibril_sim/motor",
                       "endpoint": "gripper/position", "bind": {"actuator": "actuator8"}})
    doc = {"schema_version": {"major": 3, "minor": 1}, "model": str(PANDA),
           "components": components, "scenario": {"keyframe": "home"}}
    path = folder / "panda_position.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _joint_positions(model, qpos, names) -> np.ndarray:
    return np.array([qpos[model.jnt_qposadr[model.joint(n).id]] for n in names])


def test_panda_servos_take_position_commands(tmp_path: Path) -> None:
    plan = SimulationBuilder().build(_manifest(tmp_path))
    model = plan.model
    assert {e: sorted(a.modes) for e, a in plan.endpoints.items()} == \
        {**{f"{j}/position": ["position"] for j in JOINTS}, "gripper/position": ["position"]}
    assert plan.endpoints["joint1/position"].kind.describe() == \
        "a position servo: kp 4500, kv 450"
    instance = plan.create_instance(seed=0)
    start = _joint_positions(model, instance.data.qpos, JOINTS)
    assert np.abs(start - TARGET).max() > 0.3
    for n, (joint, q) in enumerate(zip(JOINTS, TARGET, strict=True)):
        instance.enqueue(external_input(f"{joint}/position", n, MOTOR_PAYLOAD,
                                        {"mode": "position", "value": q}))
    instance.enqueue(external_input("gripper/position", 0, MOTOR_PAYLOAD,
                                    {"mode": "position", "value": GRIP}))
    instance.advance(round(2.0 / model.opt.timestep))
    assert instance.data.time == pytest.approx(2.0)
    reached = _joint_positions(model, instance.data.qpos, JOINTS)
    np.testing.assert_allclose(reached, TARGET, atol=TOLERANCE)
    assert np.abs(instance.data.qvel[:7]).max() < 0.05
    # The gripper's 0..255 ctrl carries the tendon setpoint: 0.02 m ↦ ctrl 127.5.
    grip = model.actuator("actuator8").id
    assert float(instance.data.ctrl[grip]) == pytest.approx(GRIP * 100 / 0.01568627, rel=1e-6)
    fingers = _joint_positions(model, instance.data.qpos, ("finger_joint1", "finger_joint2"))
    np.testing.assert_allclose(fingers, [GRIP, GRIP], atol=2e-3)


def test_panda_servo_refuses_torque_and_says_why(tmp_path: Path) -> None:
    plan = SimulationBuilder().build(_manifest(tmp_path))
    assert plan.endpoints["joint4/position"].refusal("torque") == (
        "mode 'torque' is not accepted by actuator 'actuator4' (a position servo: kp 3500, "
        "kv 350); accepted: position")


# --------------------------------------------------------------------------- through ROS
BRIDGE = """\
schema_version: {major: 1, minor: 0}
inputs:
  - topic: /panda/joint_commands
    type: sensor_msgs/msg/JointState
    field: position
    joints: {%s}
"""


@pytest.mark.ros
@pytest.mark.slow
def test_joint_state_positions_drive_the_panda_through_the_node(tmp_path: Path) -> None:
    """A ros2_control-style route: JointState positions on a command topic, read back from
    ``~/get_state``'s qpos after 2 s of simulated time (as fast as possible, no wall clock)."""
    pytest.importorskip("rclpy")
    from _sim_node_peer import Peer, SimProcess, wait_until
    from fibril_msgs.srv import GetState
    from sensor_msgs.msg import JointState

    manifest = _manifest(tmp_path)
    model = SimulationBuilder().build(manifest).model
    bridge = tmp_path / "bridge.yaml"
    bridge.write_text(BRIDGE % ", ".join(f"{j}: {j}/position" for j in JOINTS))
    peer = Peer("panda_position_peer")
    sim = SimProcess(tmp_path, {"manifest": manifest, "bridge": bridge, "start_paused": True},
                     name="panda")
    try:
        peer.wait_for_service(GetState, "/fibril_sim/get_state", sim, timeout=120)
        publisher = peer.publisher(JointState, "/panda/joint_commands")
        state = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
        assert state.paused and state.tick == 0
        start = _joint_positions(model, state.qpos, JOINTS)
        assert np.abs(start - TARGET).max() > 0.3
        # The command is taken when the node's subscription has matched and a message came.
        wait_until(lambda: publisher.get_subscription_count() > 0, 60, "the node subscribing",
                   sim.log)
        message = JointState(name=list(JOINTS), position=list(TARGET))
        deadline = time.monotonic() + 60
        while peer.call(GetState, "/fibril_sim/get_state",
                        GetState.Request()).accepted_inputs < len(JOINTS):
            assert sim.alive(), sim.log()
            assert time.monotonic() < deadline, f"the command was not accepted\n{sim.log()}"
            publisher.publish(message)
            time.sleep(0.2)
        _step(peer, round(2.0 / model.opt.timestep))
        state = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
        assert state.session_time_ns == 2_000_000_000
        np.testing.assert_allclose(_joint_positions(model, state.qpos, JOINTS), TARGET,
                                   atol=TOLERANCE)
    finally:
        sim.stop()
        peer.close()


def _step(peer, ticks: int) -> None:
    from fibril_msgs.srv import Step

    reply = peer.call(Step, "/fibril_sim/step", Step.Request(steps=ticks), timeout=120)
    assert reply.success, reply
