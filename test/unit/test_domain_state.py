"""Domain state (concepts: a SimulationInstance isolates MuJoCo state, times, device queues,
actuator driver state, inputs, domain state, RNG and trace state): what components keep outside
MuJoCo is per instance and reset by ``reset()``. See docs/concepts/domain_state.md.

Every standard component type that keeps such state is in one plan here: noise streams (all
noisy devices), the encoder's last position (its velocity), the lidar's ray buffers, the motor
endpoint's transport queue (command latency), the digital input's binding. Two instances of the
plan must not see each other, and an episode after ``reset()`` must repeat the first exactly.
The camera (its offscreen renderer and scene) is checked the same way in a child process, as
test_components.py renders it: MuJoCo aborts the process when an offscreen context fails twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from fibril_sim_core import SimulationBuilder, external_input
from fibril_sim_core.records import ActuatorApplication, DeviceOutput

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
PAYLOAD = "fibril_sim/motor_command/v1"
TICKS = 240
#: Component types of this plan and the domain state each keeps (the docs page's table).
STATEFUL = {
    "fibril_sim/motor": "transport queue of released commands (command latency)",
    "fibril_sim/encoder": "noise stream, last quantized position",
    "fibril_sim/imu": "noise stream",
    "fibril_sim/rangefinder": "noise stream",
    "fibril_sim/body_kinematics": "noise stream",
    "fibril_sim/motor_feedback": "noise stream",
    "fibril_sim/planar_lidar": "noise stream, ray buffers",
    "fibril_sim/digital_input": "noise stream (unused), delivery queue",
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Any:
    document = yaml.safe_load((EXAMPLE / "simulation.yaml").read_text())
    document["model"] = str(EXAMPLE / document["model"])
    by_id = {c["id"]: c for c in document["components"]}
    by_id["chassis_pose"]["config"].update(position_noise=0.01, velocity_noise=0.02)
    by_id["drive_feedback"]["config"].update(force_noise=0.1, velocity_noise=0.1)
    document["components"] += [
        {"id": "lidar", "type": "fibril_sim/planar_lidar", "bind": {"site": "lidar"},
         "config": {"period": 0.01, "latency": 0.003, "rays": 16, "noise": 0.01}},
        {"id": "wheel_switch", "type": "fibril_sim/digital_input",
         "bind": {"joint": "wheel_joint"}, "config": {"period": 0.004, "threshold": 0.5}},
    ]
    path = tmp_path_factory.mktemp("domain") / "simulation.yaml"
    path.write_text(yaml.safe_dump(document))
    built = SimulationBuilder().build(path)
    assert {d.type for d in built.devices} | {a.type for a in built.actuators} == set(STATEFUL)
    return built


def _commands(instance: Any, start: int, values: list[float]) -> None:
    for n, value in enumerate(values):
        instance.enqueue(external_input("motor/command", start + n, PAYLOAD,
                                        {"mode": "voltage", "value": value}))


def _episode(records: list[Any]) -> dict[str, list[Any]]:
    """Per device id and per endpoint: what the episode delivered / applied, in episode time."""
    out: dict[str, list[Any]] = {}
    for record in records:
        if isinstance(record, DeviceOutput):
            out.setdefault(record.device_id, []).append(
                (record.acquisition_tick, record.delivery_time_ns, record.values.tolist()))
        elif isinstance(record, ActuatorApplication):
            out.setdefault(record.endpoint, []).append(
                (record.tick, record.mode, record.applied))
    return out


def _reference(plan: Any) -> dict[str, list[Any]]:
    instance = plan.create_instance(7)
    instance.advance(30)
    _commands(instance, 1, [4.0, -2.0])
    instance.advance(TICKS - 30)
    return _episode(instance.poll())


def test_every_component_type_is_isolated_between_two_instances(plan: Any) -> None:
    reference = _reference(plan)
    assert set(reference) == {d.id for d in plan.devices} | {"motor/command"}
    a, b = plan.create_instance(7), plan.create_instance(7)
    assert not ({id(x) for x in a._device_reads.devices}
                & {id(x) for x in b._device_reads.devices})
    assert not {id(x) for x in a._endpoints} & {id(x) for x in b._endpoints}
    # Interleaved, with A given other commands, another seed mid-run and a reset: B must
    # deliver what an instance alone delivers.
    a.advance(17)
    b.advance(30)
    _commands(a, 1, [9.0, 1.0, -6.0])
    _commands(b, 1, [4.0, -2.0])
    for chunk in (13, 41, 7, 59, 90):
        a.advance(chunk)
        b.advance(chunk)
    a.reset(seed=99)
    a.advance(40)
    assert b.tick == TICKS
    assert _episode(b.poll()) == reference
    noisy = [d for d in plan.devices if d.type != "fibril_sim/digital_input"]
    assert all(reference[d.id] for d in noisy)


def test_reset_restarts_every_component_state(plan: Any) -> None:
    reference = _reference(plan)
    instance = plan.create_instance(7)
    instance.advance(50)
    _commands(instance, 1, [12.0])
    instance.advance(1)  # committed: released 2 ticks later (command latency)
    instance.poll()
    instance.reset()  # the released-but-unapplied command must not reach the new episode
    instance.advance(30)
    _commands(instance, 2, [4.0, -2.0])
    instance.advance(TICKS - 30)
    records = instance.poll()
    assert {r.episode for r in records if hasattr(r, "episode")} == {1}
    assert _episode(records) == reference


def test_another_seed_changes_only_the_noise_streams(plan: Any) -> None:
    reference = _reference(plan)
    instance = plan.create_instance(8)
    instance.advance(30)
    _commands(instance, 1, [4.0, -2.0])
    instance.advance(TICKS - 30)
    other = _episode(instance.poll())
    assert other["motor/command"] == reference["motor/command"]
    for device in plan.devices:
        if device.type == "fibril_sim/digital_input":
            continue  # no noise
        assert not np.array_equal(np.array([v for *_, v in other[device.id]]),
                                  np.array([v for *_, v in reference[device.id]])), device.id


# ------------------------------------------------------------------ camera
# A red box on a rail in front of the camera: a push moves it, so the images change with the
# commands and over time. Samples every 4 ticks, delivered 6 ticks later: at any tick at least
# one image is in flight.
CAMERA_SCRIPT = """
import json, pathlib, sys
from fibril_sim_core import ComponentError, external_input
from fibril_sim_core.records import DeviceOutput
from _models import build, device, motor

XML = '''
<mujoco model="camera_domain">
  <option timestep="0.001"/>
  <worldbody>
    <light pos="0 -2 4" dir="0 0.5 -1"/>
    <geom name="floor" type="plane" size="5 5 0.1" rgba="0.2 0.3 0.4 1"/>
    <camera name="front" pos="0 -3 0.5" xyaxes="1 0 0 0 0 1"/>
    <body name="cart" pos="-0.5 0 0.5">
      <joint name="rail" type="slide" axis="1 0 0" damping="0.5"/>
      <geom name="cart_geom" type="box" size="0.15 0.15 0.15" rgba="1 0 0 1" mass="1"
            contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator><motor name="push" joint="rail" gear="1"/></actuator>
</mujoco>
'''
TICKS = int(sys.argv[2])
try:
    plan = build(pathlib.Path(sys.argv[1]), XML, [
        motor("push", "push", "push/command"),
        device("cam", "camera", {"camera": "front"}, width=32, height=24, period=0.004,
               latency=0.006)])
    first = plan.create_instance(7)
except ComponentError as exc:
    print("NO_GL", exc, flush=True)
    sys.exit(0)


def commands(instance, start, values):
    for n, value in enumerate(values):
        instance.enqueue(external_input("push/command", start + n, "fibril_sim/motor_command/v1",
                                        {"mode": "torque", "value": value}))


def episode(records):
    return [(r.episode, r.acquisition_tick, r.delivery_time_ns, r.values.tolist())
            for r in records if isinstance(r, DeviceOutput)]


def renderers(instance):
    return {id(d._renderer) for d in instance._device_reads.devices}


first.advance(30)
commands(first, 1, [40.0, 30.0])
first.advance(TICKS - 30)
reference = episode(first.poll())
images = [v for *_, v in reference]
out = {"samples": len(reference), "distinct_images": len({json.dumps(v) for v in images}),
       "brightest_red": max(max(v[0::3]) for v in images)}

# Two instances interleaved: A with other commands, another seed and a reset midway; B must
# deliver what an instance alone delivers.
a, b = plan.create_instance(7), plan.create_instance(7)
out["renderers_shared"] = bool(renderers(a) & renderers(b))
a.advance(17)
b.advance(30)
commands(a, 1, [-30.0, 10.0, 25.0])
commands(b, 1, [40.0, 30.0])
for chunk in (13, 41, 7, 59, 90):
    a.advance(chunk)
    b.advance(chunk)
by_tick = {tick: v for _, tick, _, v in reference}
seen_by_a = [(tick, v) for _, tick, _, v in episode(a.poll())]
out["a_differs"] = sum(v != by_tick[tick] for tick, v in seen_by_a) > len(seen_by_a) // 2
a.reset(seed=99)
a.advance(40)
out["b_tick"] = b.tick
out["interleaved_equal"] = episode(b.poll()) == reference

# Reset with work in flight: images acquired but not yet delivered, and a committed push,
# must not reach the new episode, which repeats the first one exactly.
instance = plan.create_instance(7)
instance.advance(50)
commands(instance, 1, [60.0])
instance.advance(1)
delivered = {tick for _, tick, *_ in episode(instance.poll())}
out["in_flight"] = sorted(tick for _, tick, *_ in reference
                          if tick <= instance.tick and tick not in delivered)
old = renderers(instance)
instance.reset()
out["renderer_renewed"] = not (old & renderers(instance))
instance.advance(30)
commands(instance, 2, [40.0, 30.0])
instance.advance(TICKS - 30)
after = episode(instance.poll())
out["episodes_after_reset"] = sorted({e for e, *_ in after})
out["reset_equal"] = [x[1:] for x in after] == [x[1:] for x in reference]
print("RESULT", json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def camera_domain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The camera script's findings, from a child process with this process's MUJOCO_GL
    (test/conftest.py picks an offscreen one when EGL or OSMesa is installed)."""
    folder = tmp_path_factory.mktemp("camera_domain")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "fibril_sim_core"), str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", CAMERA_SCRIPT, str(folder), str(TICKS)],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    lines = run.stdout.splitlines()
    no_gl = [line for line in lines if line.startswith("NO_GL")]
    if no_gl:
        pytest.skip(f"no offscreen OpenGL context here (MUJOCO_GL="
                    f"{os.environ.get('MUJOCO_GL', 'unset')}; test/conftest.py chooses egl or "
                    f"osmesa when installed): {no_gl[0][6:]}")
    assert run.returncode == 0, run.stderr[-2000:]
    (result,) = [line for line in lines if line.startswith("RESULT ")]
    found: dict[str, Any] = json.loads(result[len("RESULT "):])
    # The images are worth comparing: every sample there, the red box seen moving in them.
    assert found["samples"] == (TICKS - 6) // 4 + 1, found  # acquired at 0, 4, ...
    assert found["distinct_images"] > found["samples"] // 2, found
    assert found["brightest_red"] > 100, found
    return found


def test_camera_is_isolated_between_two_instances(camera_domain: dict[str, Any]) -> None:
    assert camera_domain["renderers_shared"] is False
    assert camera_domain["a_differs"] is True  # A's other commands did change its images
    assert camera_domain["b_tick"] == TICKS
    assert camera_domain["interleaved_equal"] is True


def test_camera_reset_with_images_in_flight_repeats_the_episode(
        camera_domain: dict[str, Any]) -> None:
    assert camera_domain["in_flight"], "no image was in flight at the reset"
    assert camera_domain["renderer_renewed"] is True
    assert camera_domain["episodes_after_reset"] == [1]
    assert camera_domain["reset_equal"] is True
