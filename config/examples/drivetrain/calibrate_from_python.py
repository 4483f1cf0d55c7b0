"""Calibrate the drivetrain from Python, from arrays: no request file, as in a notebook.

The same calibration as calibration.yaml (wheel damping and motor resistance from two bench
episodes, checked on a held-out one), with the data as NumPy arrays: the motor commands and
the measured wheel velocity and motor current, here read from calibration_data/ (in a
notebook they come from wherever the robot's logs are). Run from anywhere:

    python config/examples/drivetrain/calibrate_from_python.py [--save DIR] [--report DIR]

``--save DIR`` also writes the request as YAML (DIR/calibration.yaml: review it, or run it with
``fibril_sim calibrate``), the result document and the fitted parameter overlay.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml

from fibril_calibration import (CalibrationRequest, Episode, Observation, Parameter, Signal,
                                calibrate)

HERE = Path(__file__).resolve().parent
DATA = HERE / "calibration_data"
TIMESTEP = 0.001  # drivetrain_bench.xml: <option timestep="0.001">
SCALES = {"wheel_velocity": 0.05, "motor_current": 0.02}  # measurement standard deviations


def commands(episode: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The motor commands of one episode: times (s), values, modes."""
    records = yaml.safe_load((DATA / f"{episode}_inputs.yaml").read_text())["recorded_inputs"]
    payloads = [json.loads(r["payload_json"]) for r in records]
    times = np.array([r["commit_tick"] * TIMESTEP for r in records])
    return times, np.array([p["value"] for p in payloads]), [p["mode"] for p in payloads]


def measured(episode: str, signal: str) -> tuple[np.ndarray, np.ndarray]:
    """One measured signal of one episode: times (s), values."""
    table = np.loadtxt(DATA / f"{episode}_{signal}.csv", delimiter=",", skiprows=1)
    return table[:, 0] / 1e9, table[:, 1]


def episode(name: str, seed: int, alignments: dict[str, str] | None = None) -> Episode:
    if alignments is None:  # every signal compared at its exact sample ticks
        return Episode.from_arrays(
            name, inputs={"motor/command": commands(name)},
            signals={s: measured(name, s) for s in SCALES}, residual_scales=SCALES,
            scale_semantics="measurement_standard_deviation", episode_seed=seed)
    built = Episode.from_arrays(name, inputs={"motor/command": commands(name)},
                                episode_seed=seed)
    signals = {s: Signal.from_arrays(*measured(name, s), residual_scale=SCALES[s],
                                     alignment=alignments[s],
                                     scale_semantics="measurement_standard_deviation")
               for s in SCALES}
    return Episode(id=built.id, signals=signals, episode_seed=seed, commands=built.commands)


def request() -> CalibrationRequest:
    return CalibrationRequest(
        manifest="bench.yaml", base=HERE,
        parameters=[
            Parameter("wheel_damping", lower=0.001, upper=1.0, initial=0.02, nominal=0.02,
                      unit="N_m_s_per_rad", provenance="drivetrain.xml nominal",
                      parameterization="log_positive",
                      target={"type": "mujoco", "kind": "joint_damping",
                              "object": "wheel_joint", "component_index": 0}),
            Parameter("motor_resistance", lower=0.5, upper=8.0, initial=2.0, nominal=2.0,
                      unit="ohm", provenance="motor datasheet",
                      parameterization="normalized_linear",
                      target="mujoco:dcmotor_resistance:drive"),
        ],
        observations=[
            Observation("wheel_velocity", source="joint_velocity", name="wheel_joint",
                        sample_every_steps=5),
            Observation("motor_current", source="device_output", name="drive_feedback",
                        sample_type="fibril_sim/motor_feedback_sample/v1",
                        indices=["current"]),
        ],
        training=[episode("run-01", 9), episode("run-02", 10)],
        validation=[episode("held-out", 11, {"wheel_velocity": "linear",
                                             "motor_current": "nearest"})],
        optimizer={"type": "ceres", "max_iterations": 50},
        objective={"standardized_gaussian_residuals": True},
        fit={"max_training_rms": 1.5, "max_validation_rms": 1.5,
             "max_local_condition_number": 1000000, "max_episode_rms_ratio": 1.5,
             "reject_parameter_near_bound": True},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="write request, result and overlay here")
    parser.add_argument("--report", type=Path, help="draw the HTML + PNG report here "
                                                    "(needs matplotlib)")
    args = parser.parse_args()
    built = request()
    result = calibrate(built)
    for name, fitted in result.parameters.items():
        low, high = fitted.interval or (float("nan"), float("nan"))
        print(f"{name}: {fitted.value:.6g} (sd {fitted.sd:.2g}; 95 % [{low:.6g}, {high:.6g}])")
    print(f"verdict: {result.verdict}")
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        built.to_yaml(args.save / "calibration.yaml")
        result.save(args.save / "result.json")
        result.to_overlay(args.save / "fitted-overlay.json")
        print(f"wrote {args.save}/calibration.yaml, result.json, fitted-overlay.json")
    if args.report:
        print(f"report: {result.report(args.report)}")


if __name__ == "__main__":
    main()
