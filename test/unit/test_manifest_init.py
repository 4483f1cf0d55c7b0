"""``fibril_sim init``: from an MJCF alone to a manifest and bridge file that load and run.

On the drivetrain, the Menagerie Panda and three small test models (test/unit/fixtures/
init_models: a cart-pole, a rover with MJCF sensors, an arm with servos of several kinds and a
damper), init writes files that the real loaders accept; the plan runs 1 s of simulated time
and every device delivers its samples; endpoints take exactly the modes their actuator's type
accepts. Bad models are one-line errors naming the element, exit 2, nothing written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from fibril_sim_core.cli import main
from fibril_sim_core.manifest import load_manifest
from fibril_sim_core.plan import SimulationBuilder
from fibril_sim_core.records import DeviceOutput

REPO = Path(__file__).resolve().parents[2]
MODELS = Path(__file__).resolve().parent / "fixtures" / "init_models"
_PANDA_CANDIDATES = [Path(os.environ.get("FIBRIL_PANDA_MODEL", "/nonexistent"))] + [
    base / "shared" / "models" / "franka_emika_panda" / "scene.xml"
    for base in (REPO.parent, REPO.parent.parent)]
PANDA = next((p for p in _PANDA_CANDIDATES if p.is_file()), _PANDA_CANDIDATES[1])
needs_panda = pytest.mark.skipif(not PANDA.is_file(),
                                 reason=f"the Menagerie Panda is not at {PANDA}")

#: model -> (endpoint -> modes, device id -> samples in 1 s, JointState input topics)
EXPECTED = {
    "drivetrain": (REPO / "config" / "examples" / "drivetrain" / "drivetrain.xml",
                   {"drive/command": ["voltage", "duty"]},
                   {"wheel_joint_encoder": 500}, []),
    "panda": (PANDA,
              {**{f"actuator{i}/command": ["position"] for i in range(1, 9)}},
              {**{f"joint{i}_encoder": 500 for i in range(1, 8)},
               "finger_joint1_encoder": 500, "finger_joint2_encoder": 500},
              ["/joint_commands"]),
    "cartpole": (MODELS / "cartpole.xml",
                 {"cart_drive/command": ["velocity"], "pole_torque/command": ["torque"]},
                 {"slider_encoder": 500, "hinge_encoder": 500},
                 ["/joint_commands", "/joint_commands/torque"]),
    "rover": (MODELS / "rover.xml",
              {"left_motor/command": ["voltage", "duty"],
               "right_motor/command": ["voltage", "duty"]},
              {"left_encoder": 500, "right_encoder": 500, "imu_site": 100,
               "front_range": 100, "bump": 100}, []),
    "arm": (MODELS / "arm.xml",
            {"shoulder_servo/command": ["position"], "elbow_servo/command": ["velocity"],
             "grip_motor/command": ["torque"]},
            {"shoulder_encoder": 500, "elbow_encoder": 500, "grip_encoder": 500},
            ["/joint_commands", "/joint_commands/velocity", "/joint_commands/torque"]),
}


def _init(tmp_path: Path, model: Path, *extra: str) -> tuple[int, Path]:
    output = tmp_path / "generated"
    return main(["init", str(model), "--output", str(output), *extra]), output


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs_panda) if n == "panda" else n
                                  for n in EXPECTED])
def test_init_writes_a_manifest_that_loads_and_runs(name: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from fibril_sim_ros.bridge import JOINT_STATE, MOTOR_COMMAND, load_bridge

    model, endpoints, devices, joint_topics = EXPECTED[name]
    code, output = _init(tmp_path, model)
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{len(endpoints)} endpoint(s), {len(devices)} device(s)" in out
    manifest = load_manifest(output / "simulation.yaml")
    assert manifest.model.resolve() == model.resolve()
    plan = SimulationBuilder().build(manifest)
    assert {a.endpoint: list(a.modes) for a in plan.actuators} == endpoints
    # The bridge file loads for this plan: one MotorCommand topic per endpoint, JointState
    # inputs by joint name for the joint actuators, every device on its default topic.
    bridge = load_bridge(plan, output / "bridge.yaml")
    assert sorted(e.topic for e in bridge.inputs if e.type == MOTOR_COMMAND) == \
        sorted("/" + e for e in endpoints)
    assert [e.topic for e in bridge.inputs if e.type == JOINT_STATE] == joint_topics
    assert {e.device: e.topic for e in bridge.outputs} == {d: "/" + d for d in devices}
    # 1 s of simulated time: every device delivers its samples.
    counts: dict[str, int] = {}
    instance = plan.create_instance(0, collect=False)
    instance.subscribe(lambda r: counts.__setitem__(r.device_id, counts.get(r.device_id, 0) + 1)
                       if type(r) is DeviceOutput else None)
    instance.advance(plan.timebase.ticks(1.0))
    assert counts == devices


def test_init_comments_what_has_no_device_or_mode(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _init(tmp_path, MODELS / "rover.xml")
    assert code == 0
    text = (output / "simulation.yaml").read_text()
    # The unmapped sensor and the camera are comments; the IMU carries the MJCF noise.
    assert "#   sensor 'left_speed' (jointvel)" in text
    assert "  # - id: front_cam\n  #   type: fibril_sim/camera" in text
    assert "gyro_noise: 0.01, accel_noise: 0.05" in text
    assert "max_range: 4.0" in text
    code, output = _init(tmp_path / "arm", MODELS / "arm.xml")
    text = (output / "simulation.yaml").read_text()
    assert "# actuator 'elbow_brake' (on joint 'elbow') takes no command: a damper" in text
    assert "  # - id: elbow_brake" in text
    assert "keyframe" not in yaml.safe_load(text).get("scenario", {})
    code, output = _init(tmp_path / "cp", MODELS / "cartpole.xml")
    assert yaml.safe_load((output / "simulation.yaml").read_text())["scenario"] == \
        {"keyframe": "upright"}


def test_init_options_choose_joints_rates_and_cameras(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    code, output = _init(tmp_path, MODELS / "rover.xml", "--joints", "l*", "--cameras",
                         "--encoder-rate", "250", "--sensor-rate", "40", "--camera-rate", "10")
    assert code == 0, capsys.readouterr().err
    manifest = load_manifest(output / "simulation.yaml")
    by_id = {c.id: c for c in manifest.components}
    assert "left_encoder" in by_id and "right_encoder" not in by_id
    assert by_id["left_encoder"].config["period"] == 0.004
    assert by_id["imu_site"].config["period"] == 0.025
    assert by_id["front_cam"].type == "fibril_sim/camera"
    assert by_id["front_cam"].config["period"] == 0.1
    code, output = _init(tmp_path / "none", MODELS / "rover.xml", "--no-encoders")
    assert code == 0
    types = {c.type for c in load_manifest(output / "simulation.yaml").components}
    assert "fibril_sim/encoder" not in types


def test_init_keeps_existing_files_without_force(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "generated"
    output.mkdir()
    (output / "simulation.yaml").write_text("mine\n")
    code, _ = _init(tmp_path, MODELS / "cartpole.xml")
    err = capsys.readouterr().err
    assert code == 2 and "exists already; not overwritten (--force" in err
    assert (output / "simulation.yaml").read_text() == "mine\n"
    assert not (output / "bridge.yaml").exists()
    code, _ = _init(tmp_path, MODELS / "cartpole.xml", "--force")
    assert code == 0 and "mine" not in (output / "simulation.yaml").read_text()


_NO_ACTUATORS = """<mujoco><worldbody><body><joint name="j" type="hinge"/>
<geom size="0.1" mass="1"/></body></worldbody></mujoco>"""
_UNNAMED_JOINT = """<mujoco><worldbody><body name="link"><joint type="hinge"/>
<geom size="0.1" mass="1"/><site name="s"/></body></worldbody>
<actuator><motor name="m" site="s"/></actuator></mujoco>"""
_UNNAMED_ACTUATOR = """<mujoco><worldbody><body><joint name="j" type="hinge"/>
<geom size="0.1" mass="1"/></body></worldbody><actuator><motor joint="j"/></actuator></mujoco>"""
_NOT_COMPILING = """<mujoco><worldbody><body><joint name="j" type="hinge"/>
<geom size="0.1" mass="1"/></body></worldbody><actuator><motor name="m" joint="nope"/>
</actuator></mujoco>"""


@pytest.mark.parametrize("text, message", [
    (_NO_ACTUATORS, "no actuators: the model has no <actuator> element"),
    (_UNNAMED_JOINT, "joint 0 (hinge in body 'link') has no name"),
    (_UNNAMED_ACTUATOR, "actuator 0 (on joint 'j') has no name"),
    (_NOT_COMPILING, "the MJCF does not compile: "),
    (None, "file not found"),
], ids=["no-actuators", "unnamed-joint", "unnamed-actuator", "not-compiling", "missing"])
def test_bad_models_are_one_line_errors(text: str | None, message: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.xml"
    if text is not None:
        model.write_text(text)
    code, output = _init(tmp_path, model)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"fibril_sim: error: {model}: {message}"), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not output.exists()
    if text is _NOT_COMPILING:
        assert "nope" in err  # MuJoCo's message names the element


def test_bad_options_are_one_line_errors(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _init(tmp_path, MODELS / "arm.xml", "--joints", "wrist*")
    err = capsys.readouterr().err
    assert code == 2 and "--joints 'wrist*' matches no hinge or slide joint; known: " \
        "shoulder, elbow, grip" in err
    code, _ = _init(tmp_path, MODELS / "arm.xml", "--sensor-rate", "0")
    assert code == 2 and "--sensor-rate must be a positive number of Hz" in \
        capsys.readouterr().err
