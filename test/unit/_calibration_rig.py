"""A tiny test rig for the calibration problem side: MJCF, manifest and request documents.

``RIG_XML``: a rotor on a vertical hinge ``shaft`` driven by a native DC motor ``drive`` (no
gravity load, no contacts; the shaft encoder's 1e14 counts per revolution keep its quantization
far below finite-difference steps), a free-falling ``puck`` (free joint), a mocap body ``target`` and an
``elbow`` hinge with a first-order ``lag`` actuator (one activation state). Sensors: the shaft
speed and the rotor tip position. Everything is smooth in the parameters, so fits are exact up
to the added noise.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

RIG_XML = """\
<mujoco model="rig">
  <option timestep="0.001"/>
  <worldbody>
    <body name="rotor" pos="0 0 1">
      <joint name="shaft" type="hinge" axis="0 0 1" damping="0.02"/>
      <geom name="rotor_geom" type="cylinder" size="0.05 0.01" mass="4" contype="0"
            conaffinity="0"/>
      <site name="tip" pos="0.05 0 0"/>
    </body>
    <body name="puck" pos="0 1 1">
      <freejoint name="puck_free"/>
      <geom name="puck_geom" type="sphere" size="0.05" mass="0.1" contype="0" conaffinity="0"/>
    </body>
    <body name="target" mocap="true" pos="0 2 1">
      <geom name="target_geom" type="sphere" size="0.02" contype="0" conaffinity="0"/>
    </body>
    <body name="arm" pos="0 3 1">
      <joint name="elbow" type="hinge" axis="0 0 1"/>
      <geom name="arm_geom" type="box" size="0.1 0.01 0.01" pos="0.1 0 0" mass="0.1"
            contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <dcmotor name="drive" joint="shaft" resistance="2.0" motorconst="0.05 0.05" gear="10"/>
    <general name="lag" joint="elbow" dyntype="filter" dynprm="0.02" gainprm="0.01"/>
  </actuator>
  <sensor>
    <jointvel name="shaft_speed" joint="shaft"/>
    <framepos name="tip_pos" objtype="site" objname="tip"/>
  </sensor>
</mujoco>
"""

MOTOR_PAYLOAD = "fibril_sim/motor_command/v1"
VERSION = {"major": 3, "minor": 1}


def manifest_doc(*, latency: float = 0.0, initial_inputs: list | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": dict(VERSION),
        "model": "rig.xml",
        "components": [
            {"id": "motor", "type": "fibril_sim/motor", "endpoint": "motor/command",
             "bind": {"actuator": "drive"},
             "config": {"supply_voltage": 12.0, "command_latency": latency}},
            {"id": "lagger", "type": "fibril_sim/motor", "endpoint": "lag/command",
             "bind": {"actuator": "lag"}},
            {"id": "shaft_encoder", "type": "fibril_sim/encoder", "bind": {"joint": "shaft"},
             "config": {"period": 0.001, "latency": 0.002, "counts_per_revolution": 1.0e14}},
            {"id": "feedback", "type": "fibril_sim/motor_feedback",
             "bind": {"actuator": "drive"}, "config": {"period": 0.002}},
        ],
    }
    if initial_inputs:
        doc["scenario"] = {"initial_inputs": initial_inputs}
    return doc


def write_rig(folder: Path, **manifest: Any) -> Path:
    """Write rig.xml and rig.yaml into ``folder``; return the manifest path."""
    (folder / "rig.xml").write_text(RIG_XML, encoding="utf-8")
    path = folder / "rig.yaml"
    path.write_text(yaml.safe_dump(manifest_doc(**manifest), sort_keys=False), encoding="utf-8")
    return path


def duty(sequence: int, value: float, tick: int, acceptance: int | None = None,
         source: str = "motor/command") -> dict[str, Any]:
    return {"source_id": source, "source_sequence": sequence, "payload_type": MOTOR_PAYLOAD,
            "payload_json": f'{{"mode": "duty", "value": {value}}}', "commit_tick": tick,
            "acceptance_sequence": sequence if acceptance is None else acceptance}


def samples(times_ms: list[float], width: int = 1) -> list[dict[str, Any]]:
    return [{"time_ns": int(round(t * 1e6)), "values": [0.0] * width} for t in times_ms]


DAMPING = {"id": "damping", "unit": "N_m_s_per_rad", "lower": 0.001, "upper": 1.0,
           "initial": 0.02, "nominal": 0.02, "parameterization": "log_positive",
           "target": {"type": "mujoco", "kind": "joint_damping", "object": "shaft"}}
RESISTANCE = {"id": "resistance", "unit": "ohm", "lower": 0.5, "upper": 8.0, "initial": 2.0,
              "parameterization": "normalized_linear", "target": "mujoco:dcmotor_resistance:drive"}
ENCODER_BIAS = {"id": "encoder_bias", "lower": -0.2, "upper": 0.2, "initial": 0.0,
                "parameterization": "linear", "coordinate_scale": 0.1,
                "target": {"type": "component_config", "component": "shaft_encoder",
                           "config_path": "bias"}}


def request_doc(manifest: Path | str, **overrides: Any) -> dict[str, Any]:
    """A valid request: fit ``damping`` to the shaft speed of one 60 ms episode."""
    doc: dict[str, Any] = {
        "schema_version": dict(VERSION),
        "manifest": str(manifest),
        "parameters": [copy.deepcopy(DAMPING)],
        "observations": [{"id": "speed", "source": "joint_velocity", "name": "shaft"}],
        "training": [{
            "id": "ep1",
            "recorded_inputs": [duty(1, 0.5, 0)],
            "signals": {"speed": {"alignment": "exact", "residual_scale": 0.1,
                                  "scale_semantics": "measurement_standard_deviation",
                                  "samples": samples([10, 20, 30, 40, 50, 60])}},
        }],
    }
    doc.update(copy.deepcopy(overrides))
    return doc


def write_request(folder: Path, doc: Mapping[str, Any], name: str = "request.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(dict(doc), sort_keys=False), encoding="utf-8")
    return path


def synthesize(folder: Path, doc: dict[str, Any], truth: Mapping[str, float], *,
               noise: float = 0.0, seed: int = 1) -> dict[str, Any]:
    """Fill every signal's sample values with the rollout at ``truth`` (+ N(0, noise·scale)).

    Uses the problem side's own replay and alignment, which the consistency tests check against
    the instance's StateSnapshot / DeviceOutput records.
    """
    from fibril_calibration.alignment import align
    from fibril_calibration.solve.episodes import run_episode
    from fibril_calibration.solve.problem import CalibrationProblem
    from fibril_calibration.request import load_calibration_request

    request = load_calibration_request(write_request(folder, doc, "synthesize.yaml"))
    rng = np.random.default_rng(seed)
    out = copy.deepcopy(doc)
    with CalibrationProblem(request) as problem:
        plan = problem.candidate_plan(np.array([truth[p] for p in request.parameter_ids]))
        for scope in ("training", "validation"):
            for index, schedule in enumerate(problem.schedules(scope)):  # type: ignore[arg-type]
                tracks = run_episode(plan, schedule, problem.decoders)
                for item, track in zip(schedule.signals, tracks):
                    signal = item.signal
                    values = align(signal.times_ns, track.times_ns, track.values,
                                   signal.alignment, quaternion=item.observation.quaternion)
                    if noise and not item.observation.quaternion:
                        values = values + rng.normal(0.0, 1.0, values.shape) * noise * \
                            signal.residual_scales
                    entry = out[scope][index]["signals"][signal.observation]
                    entry["samples"] = [{"time_ns": int(t), "values": [float(v) for v in row]}
                                        for t, row in zip(signal.times_ns, values)]
    return out
