"""Standard component semantics on small purpose-built models with known answers."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest
from _models import HINGE_XML, LIDAR_XML, REPO, SCENE_XML, build, command, device, motor

from fibril_sim_core import (
    ActuatorApplication,
    DeviceOutput,
    FibrilError,
    IngressError,
    IngressRecord,
)

GRAVITY = 9.81


def _outputs(records, device_id: str) -> list[DeviceOutput]:
    return [r for r in records if isinstance(r, DeviceOutput) and r.device_id == device_id]


def _last(records, device_id: str) -> np.ndarray:
    return _outputs(records, device_id)[-1].values


# ------------------------------------------------------------------ encoder
@pytest.mark.parametrize(("offset", "bias"), [(0.0, 0.0), (0.01, -0.002)])
def test_encoder_hinge_quantization_with_offset_and_bias(tmp_path: Path, offset: float,
                                                         bias: float) -> None:
    cpr = 1000.0
    plan = build(tmp_path, HINGE_XML, [device("enc", "encoder", {"joint": "shaft"},
                                              counts_per_revolution=cpr, offset=offset,
                                              bias=bias)])
    instance = plan.create_instance()
    angle = 0.123456
    instance.inject_state([{"type": "joint", "joint": "shaft", "qpos": [angle]}])
    instance.advance(3)
    samples = _outputs(instance.poll(), "enc")
    assert [s.acquisition_tick for s in samples] == [0, 1, 2]
    expected = round((angle + offset + bias) * cpr / (2 * math.pi))
    for sample in samples:
        position, velocity, counts = sample.values
        assert counts == expected
        assert position == pytest.approx(expected * 2 * math.pi / cpr, rel=1e-12)
        assert velocity == 0.0
    assert samples[0].sample_type == "fibril_sim/encoder_sample/v1"
    assert samples[0].component_names == ("position", "velocity", "counts")
    assert samples[0].frame_id == "shaft"


def test_encoder_slide_counts_per_metre(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [device("lin", "encoder", {"joint": "rail"},
                                              counts_per_revolution=10_000.0)])
    instance = plan.create_instance()
    instance.inject_state([{"type": "joint", "joint": "rail", "qpos": [0.01234]}])
    instance.advance(1)
    position, _, counts = _last(instance.poll(), "lin")
    assert counts == 123.0
    assert position == pytest.approx(0.0123, rel=1e-12)


def test_encoder_velocity_is_quantized_difference_over_period(tmp_path: Path) -> None:
    per_metre, period = 100_000.0, 0.002
    # ``rail`` carries an idle plain motor: nothing slows the slider down.
    plan = build(tmp_path, HINGE_XML, [device("enc", "encoder", {"joint": "rail"},
                                              counts_per_revolution=per_metre, period=period)])
    instance = plan.create_instance()
    instance.inject_state([{"type": "joint", "joint": "rail", "qvel": [2.0]}])
    instance.advance(40)
    samples = _outputs(instance.poll(), "enc")
    assert [s.acquisition_tick for s in samples] == list(range(0, 40, 2))
    assert samples[0].values[1] == 0.0  # no previous reading yet
    for previous, sample in itertools.pairwise(samples):
        expected = (sample.values[0] - previous.values[0]) / period
        assert sample.values[1] == pytest.approx(expected, rel=1e-9)
        assert sample.values[1] == pytest.approx(2.0, abs=2 / per_metre / period)
    # Position is the quantized joint value: 2 m/s × 38 ms.
    assert samples[-1].values[0] == pytest.approx(0.076, abs=1 / per_metre)
    assert samples[-1].values[2] == round(samples[-1].values[0] * per_metre)


def test_encoder_rejects_free_joint(tmp_path: Path) -> None:
    with pytest.raises(FibrilError, match=r"components\[0\]\.bind\.joint: joint 'block_free' is "
                                          r"not a hinge or slide joint"):
        build(tmp_path, SCENE_XML, [device("enc", "encoder", {"joint": "block_free"})])


# ------------------------------------------------------------------ IMU
def test_imu_at_rest_reads_gravity_up(tmp_path: Path) -> None:
    plan = build(tmp_path, SCENE_XML, [device("fixed", "imu", {"site": "fixed_imu"}),
                                       device("block", "imu", {"site": "block_imu"},
                                              period=0.01)])
    instance = plan.create_instance()
    instance.advance(400)
    records = instance.poll()
    fixed = _outputs(records, "fixed")
    assert len(fixed) == 400
    for sample in fixed:
        np.testing.assert_allclose(sample.values, [0, 0, 0, 0, 0, GRAVITY], atol=1e-9)
    settled = _outputs(records, "block")[-1]  # resting on the floor after 0.39 s
    assert settled.acquisition_tick == 390
    np.testing.assert_allclose(settled.values[:3], 0.0, atol=1e-6)
    np.testing.assert_allclose(settled.values[3:], [0, 0, GRAVITY], atol=1e-3)


def test_imu_bias_is_added_exactly_without_noise(tmp_path: Path) -> None:
    gyro_bias, accel_bias = [0.1, -0.2, 0.3], [1.0, 2.0, -3.0]
    plan = build(tmp_path, SCENE_XML, [
        device("plain", "imu", {"site": "block_imu"}),
        device("biased", "imu", {"site": "block_imu"}, gyro_bias=gyro_bias,
               accel_bias=accel_bias)])
    instance = plan.create_instance()
    instance.inject_state([{"type": "joint", "joint": "block_free",
                            "qvel": [0.5, 0.0, 2.0, 1.0, -2.0, 3.0]}])
    instance.advance(50)
    records = instance.poll()
    plain, biased = _outputs(records, "plain"), _outputs(records, "biased")
    assert len(plain) == len(biased) == 50
    bias = np.array(gyro_bias + accel_bias)
    assert any(np.abs(p.values[:3]).max() > 0.5 for p in plain)  # it really tumbles
    for p, b in zip(plain, biased):
        assert p.acquisition_tick == b.acquisition_tick
        np.testing.assert_array_equal(b.values, p.values + bias)


def test_imu_bias_needs_three_values(tmp_path: Path) -> None:
    with pytest.raises(FibrilError, match=r"components\[0\]\.config\.gyro_bias: expected 3 "
                                          r"values \(x, y, z\), got 2"):
        build(tmp_path, SCENE_XML, [device("imu", "imu", {"site": "fixed_imu"},
                                           gyro_bias=[0.1, 0.2])])


def test_imu_noise_has_the_configured_std(tmp_path: Path) -> None:
    plan = build(tmp_path, SCENE_XML, [device("imu", "imu", {"site": "fixed_imu"},
                                              gyro_noise=0.1, accel_noise=0.5)])
    instance = plan.create_instance(seed=3)
    instance.advance(4000)
    values = np.array([s.values for s in _outputs(instance.poll(), "imu")])
    assert values.shape == (4000, 6)
    np.testing.assert_allclose(values.std(axis=0), [0.1] * 3 + [0.5] * 3, rtol=0.06)
    np.testing.assert_allclose(values.mean(axis=0), [0, 0, 0, 0, 0, GRAVITY], atol=0.03)
    # Independent axes: the correlation between two axes is small.
    assert abs(np.corrcoef(values[:, 0], values[:, 1])[0, 1]) < 0.1


# ------------------------------------------------------------------ rangefinder
def test_rangefinder_distance_to_wall_and_no_hit(tmp_path: Path) -> None:
    plan = build(tmp_path, SCENE_XML, [
        device("wall", "rangefinder", {"site": "range_x"}),
        device("sky", "rangefinder", {"site": "range_up"}, max_range=7.0),
        device("short", "rangefinder", {"site": "range_x"}, max_range=2.0),
        device("coarse", "rangefinder", {"site": "range_x"}, resolution=0.25)])
    instance = plan.create_instance()
    instance.advance(2)
    records = instance.poll()
    np.testing.assert_allclose(_last(records, "wall"), [2.9, 1.0], atol=1e-9)
    np.testing.assert_array_equal(_last(records, "sky"), [7.0, 0.0])
    np.testing.assert_array_equal(_last(records, "short"), [2.0, 0.0])
    np.testing.assert_allclose(_last(records, "coarse"), [3.0, 1.0], atol=1e-12)
    assert _outputs(records, "wall")[0].component_names == ("distance", "hit")


def test_rangefinder_min_range_must_be_below_max(tmp_path: Path) -> None:
    with pytest.raises(FibrilError, match=r"config\.min_range: min_range 5 must be below "
                                          r"max_range 2"):
        build(tmp_path, SCENE_XML, [device("r", "rangefinder", {"site": "range_x"},
                                           min_range=5.0, max_range=2.0)])


def test_rangefinder_noise_std(tmp_path: Path) -> None:
    plan = build(tmp_path, SCENE_XML, [device("r", "rangefinder", {"site": "range_x"},
                                              noise=0.01)])
    instance = plan.create_instance(seed=1)
    instance.advance(2000)
    distances = np.array([s.values[0] for s in _outputs(instance.poll(), "r")])
    assert distances.std() == pytest.approx(0.01, rel=0.08)
    assert distances.mean() == pytest.approx(2.9, abs=0.002)


# ------------------------------------------------------------------ planar lidar
def test_planar_lidar_four_rays_see_walls(tmp_path: Path) -> None:
    plan = build(tmp_path, LIDAR_XML, [
        device("scan", "planar_lidar", {"site": "lidar"}, rays=4),
        device("turned", "planar_lidar", {"site": "lidar_turned"}, rays=4, max_range=2.5),
        device("fan", "planar_lidar", {"site": "lidar"}, rays=3, fov=1.0)])
    instance = plan.create_instance()
    instance.advance(1)
    records = instance.poll()
    # Rays at -pi, -pi/2, 0, pi/2 about the site z axis: -x, -y, +x, +y.
    np.testing.assert_allclose(_last(records, "scan"), [2.0, 3.0, 1.0, 1.5], atol=1e-9)
    # The site is turned 90 degrees: its +x is the world +y; -y wall (3.0) is beyond max_range.
    np.testing.assert_allclose(_last(records, "turned"), [2.5, 1.0, 1.5, 2.0], atol=1e-9)
    # A 1 rad fan of 3 rays: -0.5, 0, 0.5 rad towards the +x wall at 1.0.
    np.testing.assert_allclose(_last(records, "fan"), [1 / math.cos(0.5), 1.0, 1 / math.cos(0.5)],
                               atol=1e-9)
    scan = _outputs(records, "scan")[0]
    assert scan.sample_type == "fibril_sim/planar_lidar_scan/v1"
    assert scan.component_names == ("range_0", "range_1", "range_2", "range_3")
    binding = plan.device("scan").binding
    assert binding["angle_min"] == pytest.approx(-math.pi)
    assert binding["angle_increment"] == pytest.approx(math.pi / 2)


# ------------------------------------------------------------------ digital input
@pytest.mark.parametrize(("qpos", "invert", "state"), [
    (0.1, False, 1.0), (0.02, False, 0.0), (0.1, True, 0.0), (0.02, True, 1.0)])
def test_digital_input_threshold_on_joint(tmp_path: Path, qpos: float, invert: bool,
                                          state: float) -> None:
    plan = build(tmp_path, HINGE_XML, [device("switch", "digital_input", {"joint": "rail"},
                                              threshold=0.05, invert=invert)])
    instance = plan.create_instance()
    instance.inject_state([{"type": "joint", "joint": "rail", "qpos": [qpos]}])
    instance.advance(1)
    assert _last(instance.poll(), "switch").tolist() == [state]


def test_digital_input_contact_mode(tmp_path: Path) -> None:
    plan = build(tmp_path, SCENE_XML, [
        device("block_touch", "digital_input", {"body": "block"}, mode="contact"),
        device("geom_touch", "digital_input", {"geom": "block_geom"}, mode="contact"),
        device("lamp_touch", "digital_input", {"body": "lamp"}, mode="contact"),
        device("lamp_free", "digital_input", {"body": "lamp"}, mode="contact", invert=True)])
    instance = plan.create_instance()
    instance.advance(200)
    records = instance.poll()
    assert _last(records, "block_touch").tolist() == [1.0]
    assert _last(records, "geom_touch").tolist() == [1.0]
    assert _last(records, "lamp_touch").tolist() == [0.0]
    assert _last(records, "lamp_free").tolist() == [1.0]
    # Lift the block off the floor: no contact any more.
    instance.inject_state([{"type": "joint", "joint": "block_free",
                            "qpos": [-3, -3, 1.0, 1, 0, 0, 0], "qvel": [0] * 6}])
    instance.advance(2)
    assert _last(instance.poll(), "block_touch").tolist() == [0.0]


def test_digital_input_threshold_rejects_free_joint(tmp_path: Path) -> None:
    with pytest.raises(FibrilError, match=r"components\[0\]\.bind\.joint: joint 'block_free' is "
                                          r"not a hinge or slide joint"):
        build(tmp_path, SCENE_XML, [device("in", "digital_input", {"joint": "block_free"},
                                           threshold=0.1)])


def test_digital_input_bind_must_match_mode(tmp_path: Path) -> None:
    with pytest.raises(FibrilError, match=r"components\[0\]\.bind: mode 'contact' needs exactly "
                                          r"one of body or geom, got joint"):
        build(tmp_path, HINGE_XML, [device("d", "digital_input", {"joint": "rail"},
                                           mode="contact")])


@pytest.mark.parametrize(("component", "message"), [
    (device("x", "imu", {"site": "nope"}),
     ("components[0].bind.site: no MuJoCo site named 'nope' in the model; known: fixed_imu, "
      "range_x, range_up, block_imu")),
    (device("x", "rangefinder", {"site": "nope"}),
     ("components[0].bind.site: no MuJoCo site named 'nope' in the model; known: fixed_imu, "
      "range_x, range_up, block_imu")),
    (device("x", "planar_lidar", {"site": "nope"}),
     ("components[0].bind.site: no MuJoCo site named 'nope' in the model; known: fixed_imu, "
      "range_x, range_up, block_imu")),
    (device("x", "body_kinematics", {"body": "nope"}),
     ("components[0].bind.body: no MuJoCo body named 'nope' in the model; known: world, mount, "
      "lamp, block")),
    (device("x", "camera", {"camera": "nope"}),
     "components[0].bind.camera: no MuJoCo camera named 'nope' in the model; known: overview"),
    (device("x", "digital_input", {"geom": "nope"}, mode="contact"),
     ("components[0].bind.geom: no MuJoCo geom named 'nope' in the model; known: floor, wall, "
      "mount_geom, lamp_geom, block_geom")),
    (device("x", "imu", {}), "components[0].bind.site: missing required key"),
])
def test_unknown_binding_names_the_key_and_known_objects(tmp_path: Path, component: dict,
                                                        message: str) -> None:
    with pytest.raises(FibrilError) as info:
        build(tmp_path, SCENE_XML, [component])
    assert str(info.value) == f"{(tmp_path / 'simulation.yaml').resolve()}: {message}"


# ------------------------------------------------------------------ motor feedback
def test_motor_feedback_current_is_force_over_motor_constant(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [
        motor("m", "drive", "drive/command"),
        device("fb", "motor_feedback", {"actuator": "drive"}),
        device("push_fb", "motor_feedback", {"actuator": "push"})])
    assert plan.device("fb").binding["motor_constant"] == 0.05
    instance = plan.create_instance()
    instance.enqueue(command("drive/command", 0, "voltage", 6.0))
    instance.advance(30)
    records = instance.poll()
    samples = _outputs(records, "fb")
    assert len(samples) == 30
    # At rest: i = V / R = 3 A, torque K·i = 0.15.
    np.testing.assert_allclose(samples[0].values, [0.15, 0.0, 3.0], rtol=1e-12)
    for sample in samples:
        force, velocity, current = sample.values
        assert current == pytest.approx(force / 0.05, rel=1e-12)
        # A DC motor without inductance: i = (V - Ke·ω) / R, ω in actuator space.
        assert current == pytest.approx((6.0 - 0.05 * velocity) / 2.0, rel=1e-9)
    assert samples[-1].values[1] > 1.0  # the rotor spun up
    assert all(s.values[2] == 0.0 for s in _outputs(records, "push_fb"))


# ------------------------------------------------------------------ body kinematics
def test_body_kinematics_matches_model_state_at_acquisition_tick(tmp_path: Path) -> None:
    plan = build(tmp_path, SCENE_XML, [device("pose", "body_kinematics", {"body": "block"},
                                              period=0.005)])
    instance = plan.create_instance()
    state = {"type": "joint", "joint": "block_free", "qpos": [-3, -3, 0.5, 1, 0, 0, 0],
             "qvel": [1.0, 0.5, 2.0, 3.0, -1.0, 2.0]}
    instance.inject_state([state])
    model = plan.model
    raw = mujoco.MjData(model)
    raw.qpos[:] = state["qpos"]
    raw.qvel[:] = state["qvel"]
    qpos_at, qvel_at = {}, {}
    for tick in range(200):
        qpos_at[tick], qvel_at[tick] = raw.qpos.copy(), raw.qvel.copy()
        mujoco.mj_step(model, raw)
    instance.advance(200)
    samples = _outputs(instance.poll(), "pose")
    assert [s.acquisition_tick for s in samples] == list(range(0, 200, 5))
    body = model.body("block").id
    check = mujoco.MjData(model)
    velocity = np.zeros(6)
    moved = False
    for sample in samples:
        check.qpos[:], check.qvel[:] = qpos_at[sample.acquisition_tick], \
            qvel_at[sample.acquisition_tick]
        mujoco.mj_forward(model, check)
        mujoco.mj_objectVelocity(model, check, mujoco.mjtObj.mjOBJ_XBODY, body, velocity, 0)
        np.testing.assert_allclose(sample.values[:3], check.xpos[body], atol=1e-12)
        np.testing.assert_allclose(sample.values[3:7], check.xquat[body], atol=1e-12)
        np.testing.assert_allclose(sample.values[7:10], velocity[3:], atol=1e-9)
        np.testing.assert_allclose(sample.values[10:], velocity[:3], atol=1e-9)
        moved |= abs(sample.values[0] + 3) > 0.1
    assert moved
    assert samples[0].frame_id == "world"


# ------------------------------------------------------------------ motor endpoint
MOTORS = [
    motor("drive", "drive", "drive/command", supply_voltage=12.0, duty_limit=0.8),
    motor("push", "push", "push/command", torque_limit=2.0),
    motor("servo", "servo", "servo/command", position_limits=[-0.05, 0.05]),
    motor("speed", "speed", "speed/command", velocity_limit=3.0),
]


def _applied(tmp_path: Path, source: str, mode: str, value: float) -> tuple[float, float]:
    plan = build(tmp_path, HINGE_XML, MOTORS)
    instance = plan.create_instance()
    instance.enqueue(command(source, 0, mode, value))
    instance.advance(0)
    applications = [r for r in instance.poll() if isinstance(r, ActuatorApplication)]
    assert len(applications) == 1
    application = applications[0]
    assert application.tick == 0 and application.commanded == value
    aid = plan.model.actuator(application.actuator).id
    return application.applied, float(instance.data.ctrl[plan.model.actuator_ctrladr[aid]])


@pytest.mark.parametrize(("source", "mode", "value", "applied"), [
    ("drive/command", "duty", 0.5, 6.0),
    ("drive/command", "duty", 1.5, 9.6),      # clamped to duty_limit 0.8 × 12 V
    ("drive/command", "duty", -2.0, -9.6),
    ("drive/command", "voltage", 20.0, 12.0),  # clamped to the supply voltage
    ("drive/command", "voltage", -3.0, -3.0),
    ("push/command", "torque", -5.0, -2.0),    # torque_limit
    ("push/command", "torque", 1.5, 1.5),
    ("servo/command", "position", 0.2, 0.05),  # position_limits
    ("servo/command", "position", -0.01, -0.01),
    ("speed/command", "velocity", 5.0, 3.0),   # velocity_limit
])
def test_motor_command_reaches_ctrl(tmp_path: Path, source: str, mode: str, value: float,
                                    applied: float) -> None:
    result, ctrl = _applied(tmp_path, source, mode, value)
    assert result == pytest.approx(applied, rel=1e-15)
    assert ctrl == result


def test_motor_modes_follow_actuator_inputs(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, MOTORS)
    modes = {endpoint: sorted(a.modes) for endpoint, a in plan.endpoints.items()}
    assert modes == {"drive/command": ["duty", "voltage"], "push/command": ["torque"],
                     "servo/command": ["position"], "speed/command": ["velocity"]}


@pytest.mark.parametrize(("source", "mode", "accepted"), [
    ("drive/command", "torque", "voltage, duty"),
    ("servo/command", "duty", "position"),
    ("speed/command", "position", "velocity"),
    ("push/command", "voltage", "torque"),
])
def test_mode_not_accepted_by_actuator(tmp_path: Path, source: str, mode: str,
                                       accepted: str) -> None:
    plan = build(tmp_path, HINGE_XML, MOTORS)
    instance = plan.create_instance()
    actuator = plan.endpoints[source].actuator
    kind = plan.endpoints[source].kind.describe()
    with pytest.raises(IngressError) as info:
        instance.enqueue(command(source, 0, mode, 1.0))
    assert str(info.value) == (f"source {source!r} sequence 0: mode {mode!r} is not accepted by "
                               f"actuator {actuator!r} ({kind}); accepted: {accepted}")
    instance.advance(5)
    records = instance.poll()
    assert not any(isinstance(r, ActuatorApplication) for r in records)
    rejected = [r for r in records if isinstance(r, IngressRecord)]
    assert len(rejected) == 1 and not rejected[0].accepted
    assert np.all(instance.data.ctrl == 0.0)


def test_command_latency_delays_application_by_whole_ticks(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command",
                                             command_latency=0.005)])
    assert plan.endpoints["drive/command"].latency_ticks == 5
    instance = plan.create_instance()
    instance.advance(7)
    instance.enqueue(command("drive/command", 0, "voltage", 4.0))
    ctrl_at = {}
    for _ in range(10):
        instance.step()
        ctrl_at[instance.tick] = float(instance.data.ctrl[0])
    records = instance.poll()
    (commit,) = [r for r in records if isinstance(r, IngressRecord)]
    (application,) = [r for r in records if isinstance(r, ActuatorApplication)]
    assert commit.accepted and commit.commit_tick == 7
    assert application.tick == commit.commit_tick + 5 == 12
    assert application.time_ns == 12_000_000
    assert application.applied == 4.0
    assert [t for t, ctrl in ctrl_at.items() if ctrl == 4.0] == list(range(12, 18))
    assert all(ctrl == 0.0 for t, ctrl in ctrl_at.items() if t < 12)


# ------------------------------------------------------------------ camera
# MuJoCo aborts the whole process when an offscreen context is requested again after one failed,
# so the camera runs in a child process (with this process's MUJOCO_GL, whatever it is).
CAMERA_SCRIPT = """
import sys, pathlib
from fibril_sim_core import ComponentError
from _models import SCENE_XML, build, device
plan = build(pathlib.Path(sys.argv[1]), SCENE_XML,
             [device("cam", "camera", {"camera": "overview"}, width=8, height=6)])
print("SAMPLE_TYPE", plan.device("cam").sample_type, flush=True)
for attempt in ("FIRST", "SECOND"):
    phase = "CREATE"
    try:
        instance = plan.create_instance()
        phase = "ADVANCE"
        instance.advance(1)
    except ComponentError as exc:
        print(attempt, phase, exc, flush=True)
        continue
    (image,) = [r for r in instance.poll() if getattr(r, "device_id", "") == "cam"]
    print("RENDERED", image.values.shape[0], image.values.min(), image.values.max(), flush=True)
    break
"""


@pytest.fixture(scope="module")
def camera_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    folder = tmp_path_factory.mktemp("camera")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "fibril_sim_core"), str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", CAMERA_SCRIPT, str(folder)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _camera_lines(run: subprocess.CompletedProcess, prefix: str) -> list[str]:
    return [line for line in run.stdout.splitlines() if line.startswith(prefix)]


def test_camera_without_gl_names_mujoco_gl(camera_run: subprocess.CompletedProcess) -> None:
    assert _camera_lines(camera_run, "SAMPLE_TYPE") == ["SAMPLE_TYPE fibril_sim/camera_rgb/v1"]
    if _camera_lines(camera_run, "RENDERED"):
        pytest.skip("rendering works here (an offscreen OpenGL context is available), so the "
                    "no-GL error path cannot be exercised")
    (first,) = _camera_lines(camera_run, "FIRST")
    assert "camera device 'cam' (overview): no offscreen OpenGL context available" in first
    assert "MUJOCO_GL=egl" in first and "MUJOCO_GL=osmesa" in first


def test_camera_without_gl_fails_at_instance_creation(
        camera_run: subprocess.CompletedProcess) -> None:
    """As CameraType documents: creating the instance fails, not a later advance()."""
    if _camera_lines(camera_run, "RENDERED"):
        pytest.skip("rendering works here")
    (first,) = _camera_lines(camera_run, "FIRST")
    assert first.startswith("FIRST CREATE camera device 'cam'")


def test_camera_without_gl_fails_cleanly_twice(camera_run: subprocess.CompletedProcess) -> None:
    """A second attempt raises the same clear error (MuJoCo itself would abort the process)."""
    if _camera_lines(camera_run, "RENDERED"):
        pytest.skip("rendering works here")
    assert camera_run.returncode == 0, camera_run.stderr[-500:]
    (second,) = _camera_lines(camera_run, "SECOND")
    assert second.startswith("SECOND CREATE camera device 'cam'") and "MUJOCO_GL" in second


def test_camera_renders_when_gl_is_available(camera_run: subprocess.CompletedProcess) -> None:
    rendered = _camera_lines(camera_run, "RENDERED")
    if not rendered:
        pytest.skip("no offscreen OpenGL context here (run with MUJOCO_GL=egl to render)")
    assert camera_run.returncode == 0
    _, size, low, high = rendered[0].split()
    assert int(size) == 8 * 6 * 3
    assert 0 <= float(low) <= float(high) <= 255
