"""Calibration against mujoco.sysid on mujoco.sysid's own integration-test problems.

Problems (the models and excitations of ``mujoco/sysid/tests/test_integration.py``):

* ``spring_mass``: a slide joint with a spring; recover the mass 1.0 from an initial 2.0;
* ``arm``: a 5-link arm; recover five joint armatures (0.5 … 0.1) from 0.01 each.

Both tools get the same recorded arrays, generated once with ``mujoco.rollout`` from the true
model: the control of every physics step and the position/velocity sensors of every step. Each
side is timed from data in memory to fitted values: mujoco.sysid's ``optimize`` (its own
Gauss-Newton "mujoco" optimizer) against ``fibril_calibration.run_calibration`` on a parsed
request (a Fibril manifest with one motor endpoint per actuator; every control sample replayed
as a recorded ExternalInput through the ingress; central differences, SVD and covariance at the
fit included). Runs are interleaved; medians of wall time, the absolute error of each fitted
value and the wall-time ratio are reported.

Needs mujoco.sysid's optional dependencies: ``pip install -r bench/requirements.txt``.

Fibril runs three ways in process: a parsed request document with its default
central-difference Jacobian (the spec's adapter), the same with the opt-in
``optimizer.jacobian: forward`` (mujoco.sysid's choice, about half the rollouts), and the Python
API (``from_sysid(params, model_sequences)`` then ``calibrate``: mujoco.sysid's own objects
from arrays, no files but the generated manifest, request building timed too).

Whole process (``--processes``, one run each per repeat): ``fibril_sim calibrate request.yaml``
(the Python request written with ``to_yaml``) against a Python process that records the
arrays, calls ``from_sysid`` and ``calibrate`` and against one that runs mujoco.sysid; start-up,
imports and model compilation included.

Whole process (``--whole-process``): the same recording posed as a CSV log (time, controls,
sensors) with a calibration request file, ``fibril_sim calibrate request.yaml`` as a process of
its own against a Python script that reads the CSV with NumPy and runs mujoco.sysid, each timed
from process start to exit (imports, reading, fitting, writing the result), interleaved. Fibril
runs twice: with its default central differences (what the issue's target compares; 2n rollouts
per Jacobian) and with ``optimizer.jacobian: forward`` (n per Jacobian: mujoco.sysid's own
scheme, the like-for-like row). Both tools run as installed packages do: from bytecode caches.
mujoco.sysid's wheel came with its ``__pycache__``; Fibril runs from its source tree, and with
``PYTHONDONTWRITEBYTECODE`` set (as in this project's containers) it would compile every one of
its modules from source in every process (about 0.15-0.3 s). The processes therefore get
``PYTHONPYCACHEPREFIX`` pointing into the temporary folder (``PYTHONDONTWRITEBYTECODE`` unset)
and one untimed warm-up run each: both tools then read the same kind of cache, and nothing is
written into the source tree.

Usage: ``python bench/calibration_vs_mujoco_sysid.py [--repeats 5] [--problem arm]
[--parallelism 2] [--processes] [--whole-process]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import shutil
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from mujoco import rollout

# The problems as mujoco.sysid poses them: plain (linear) coordinates within [min, max].
PARAMETERIZATION = "linear"

SPRING_MASS_XML = """\
<mujoco model="spring_mass">
  <option timestep="0.002">
    <flag contact="disable"/>
  </option>
  <worldbody>
    <body name="ball" pos="0 0 0.1">
      <inertial pos="0 0 0" mass="1.0" diaginertia="0.001 0.001 0.001"/>
      <joint name="slide" type="slide" axis="1 0 0" stiffness="100" damping="5.0"/>
      <geom type="sphere" size="0.05"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="slide"/>
  </actuator>
  <sensor>
    <jointpos name="position" joint="slide"/>
    <jointvel name="velocity" joint="slide"/>
  </sensor>
</mujoco>
"""


def _arm_xml() -> str:
    links = [  # (mass, diaginertia, inertial z, axis, armature, damping, length, radius)
        (1.0, "0.01 0.01 0.005", 0.05, "0 0 1", 0.5, 1.0, 0.1, 0.04),
        (0.8, "0.008 0.008 0.004", 0.05, "0 1 0", 0.4, 0.8, 0.1, 0.035),
        (0.6, "0.006 0.006 0.003", 0.05, "0 1 0", 0.3, 0.6, 0.1, 0.03),
        (0.4, "0.004 0.004 0.002", 0.04, "0 0 1", 0.2, 0.4, 0.08, 0.025),
        (0.2, "0.002 0.002 0.001", 0.03, "0 1 0", 0.1, 0.2, 0.06, 0.02),
    ]
    body, pos = "", "0 0 0.1"
    for i, (mass, inertia, iz, axis, armature, damping, length, radius) in \
            reversed(list(enumerate(links, 1))):
        body = (f'<body name="link{i}" pos="{{pos{i}}}"><inertial pos="0 0 {iz}" mass="{mass}" '
                f'diaginertia="{inertia}"/><joint name="joint{i}" type="hinge" axis="{axis}" '
                f'range="-3.14 3.14" armature="{armature}" damping="{damping}"/>'
                f'<geom type="capsule" fromto="0 0 0 0 0 {length}" size="{radius}"/>'
                f'{body}</body>')
    positions = {"pos1": pos, "pos2": "0 0 0.1", "pos3": "0 0 0.1", "pos4": "0 0 0.1",
                 "pos5": "0 0 0.08"}
    body = body.format(**positions)
    joints = range(1, 6)
    return (
        '<mujoco model="arm"><compiler angle="radian" autolimits="true"/>'
        '<option integrator="implicitfast" timestep="0.002"><flag contact="disable"/></option>'
        f'<worldbody>{body}</worldbody><actuator>'
        + "".join(f'<motor name="act{i}" joint="joint{i}"/>' for i in joints)
        + "</actuator><sensor>"
        + "".join(f'<jointpos name="joint{i}_pos" joint="joint{i}"/>' for i in joints)
        + "".join(f'<jointvel name="joint{i}_vel" joint="joint{i}"/>' for i in joints)
        + "</sensor></mujoco>")


@dataclass(frozen=True)
class Problem:
    name: str
    xml: str
    duration: float
    control: Callable[[np.ndarray], np.ndarray]
    # (parameter id, target kind, object, truth, initial, lower, upper)
    parameters: tuple[tuple[str, str, str, float, float, float, float], ...]


PROBLEMS = {
    "spring_mass": Problem(
        "spring_mass", SPRING_MASS_XML, 3.0,
        lambda t: (5.0 * np.sin(2 * np.pi * 1.5 * t)
                   + 3.0 * np.sin(2 * np.pi * 3.7 * t)).reshape(-1, 1),
        (("mass", "body_mass", "ball", 1.0, 2.0, 0.3, 3.0),)),
    "arm": Problem(
        "arm", _arm_xml(), 2.0,
        lambda t: np.column_stack([
            5.0 * np.sin(2 * np.pi * 0.5 * t), 4.0 * np.sin(2 * np.pi * 0.7 * t + 0.5),
            3.0 * np.sin(2 * np.pi * 0.4 * t + 1.0), 2.0 * np.sin(2 * np.pi * 0.9 * t + 1.5),
            1.0 * np.sin(2 * np.pi * 0.6 * t + 2.0)]),
        tuple((f"joint{i}_armature", "joint_armature", f"joint{i}", truth, 0.01, 0.001, 1.0)
              for i, truth in enumerate((0.5, 0.4, 0.3, 0.2, 0.1), 1))),
}


@dataclass(frozen=True)
class Recording:
    """What both tools get: control per step (ticks 0..n-1), sensors per step (ticks 0..n-1)."""

    times: np.ndarray
    control: np.ndarray
    sensors: np.ndarray
    initial_state: np.ndarray


def record(problem: Problem) -> Recording:
    model = mujoco.MjModel.from_xml_string(problem.xml)
    data = mujoco.MjData(model)
    steps = int(problem.duration / model.opt.timestep)
    times = np.arange(steps) * model.opt.timestep
    control = problem.control(times)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    initial = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, initial, spec)
    _, sensors = rollout.rollout(model, data, initial, control[:-1])
    # Row i of the sensors is computed from the state at tick i (before step i → i+1).
    return Recording(times, control, np.squeeze(sensors, axis=0), initial)


# --------------------------------------------------------------------------- mujoco.sysid


def sysid_problem(problem: Problem, rec: Recording) -> tuple[Any, Any]:
    """The problem as mujoco.sysid objects: its ParameterDict and ModelSequences."""
    from mujoco import sysid

    spec = mujoco.MjSpec.from_string(problem.xml)
    model = spec.compile()
    params = sysid.ParameterDict()
    for pid, kind, obj, truth, initial, lower, upper in problem.parameters:
        if kind == "body_mass":
            modifier = (lambda o: lambda s, p: setattr(s.body(o), "mass", p.value[0]))(obj)
        else:
            modifier = (lambda o: lambda s, p: setattr(s.joint(o), "armature", p.value[0]))(obj)
        params.add(sysid.Parameter(pid, nominal=truth, min_value=lower, max_value=upper,
                                   modifier=modifier))
        params[pid].value[:] = initial
    # mujoco.sysid labels the sensors computed during step i with the time after it.
    sensor_ts = sysid.TimeSeries.from_names(rec.times[1:], rec.sensors, model)
    control_ts = sysid.TimeSeries(rec.times, rec.control)
    sequences = sysid.ModelSequences(problem.name, spec, "measured", rec.initial_state,
                                     control_ts, sensor_ts)
    return params, sequences


def run_sysid(problem: Problem, rec: Recording) -> tuple[float, dict[str, float]]:
    from mujoco import sysid

    start = time.perf_counter()
    params, sequences = sysid_problem(problem, rec)
    residual_fn = sysid.build_residual_fn(models_sequences=[sequences])
    with contextlib.redirect_stdout(io.StringIO()):
        fitted, _ = sysid.optimize(initial_params=params, residual_fn=residual_fn,
                                   optimizer="mujoco")
    wall = time.perf_counter() - start
    return wall, {pid: float(fitted[pid].value[0]) for pid, *_ in problem.parameters}


# --------------------------------------------------------------------------- Fibril


def fibril_request(problem: Problem, rec: Recording, folder: Path, *, jacobian: str = "central",
                   parallelism: int = 2) -> Any:
    """A calibration request (schema 3.1) for the same recording, parsed in memory."""
    from fibril_calibration.request import parse_calibration_request

    model, actuators, sensors = write_model(problem, folder)
    ticks = len(rec.sensors)
    inputs = [{"source_id": name, "source_sequence": tick,
               "payload_type": "fibril_sim/motor_command/v1",
               "payload_json": json.dumps({"mode": "torque", "value": float(rec.control[tick, a])}),
               "commit_tick": tick, "acceptance_sequence": tick * len(actuators) + a}
              for tick in range(ticks) for a, name in enumerate(actuators)]
    step_ns = round(model.opt.timestep * 1e9)
    signals = {name: {"alignment": "exact", "residual_scale": 1.0,
                      "samples": [{"time_ns": tick * step_ns,
                                   "values": [float(rec.sensors[tick, model.sensor_adr[i]])]}
                                  for tick in range(ticks)]}
               for i, name in enumerate(sensors)}
    episode = {"id": "measured", "recorded_inputs": inputs, "signals": signals}
    return parse_calibration_request(request_document(problem, sensors, episode, jacobian,
                                                      parallelism), folder / "request.yaml")


def write_model(problem: Problem, folder: Path) -> tuple[Any, list[str], list[str]]:
    """model.xml and a manifest with one motor endpoint per actuator; (model, actuator names,
    sensor names)."""
    model = mujoco.MjModel.from_xml_string(problem.xml)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.xml").write_text(problem.xml)
    actuators = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i)
                 for i in range(model.nu)]
    components = "\n".join(
        f"  - {{id: {name}, type: fibril_sim/motor, endpoint: {name}, bind: {{actuator: {name}}}}}"
        for name in actuators)
    (folder / "manifest.yaml").write_text(
        f"schema_version: {{major: 3, minor: 1}}\nmodel: model.xml\ncomponents:\n{components}\n")
    sensors = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, i)
               for i in range(model.nsensor)]
    return model, actuators, sensors


def request_document(problem: Problem, sensors: list[str], episode: dict[str, Any],
                     jacobian: str, parallelism: int) -> dict[str, Any]:
    return {
        "schema_version": {"major": 3, "minor": 1},
        "manifest": "manifest.yaml",
        "parameters": [{"id": pid, "lower": lower, "upper": upper, "initial": initial,
                        "parameterization": PARAMETERIZATION,
                        "target": {"type": "mujoco", "kind": kind, "object": obj}}
                       for pid, kind, obj, truth, initial, lower, upper in problem.parameters],
        "observations": [{"id": name, "source": "sensor", "name": name} for name in sensors],
        "training": [episode],
        "optimizer": {"type": "ceres", "max_iterations": 100, "jacobian": jacobian},
        "execution": {"max_parallelism": parallelism, "cache_entries": 64},
    }


def run_fibril(problem: Problem, request: Any) -> tuple[float, dict[str, float]]:
    from fibril_calibration import run_calibration

    start = time.perf_counter()
    result = run_calibration(request)
    wall = time.perf_counter() - start
    fitted = dict(zip(request.parameter_ids, (float(v) for v in result.outcome.fitted)))
    return wall, fitted


def run_python_api(problem: Problem, rec: Recording, folder: Path
                   ) -> tuple[float, dict[str, float]]:
    """mujoco.sysid's objects → ``from_sysid`` → ``calibrate``, timed from the arrays."""
    from fibril_calibration import calibrate, from_sysid

    start = time.perf_counter()
    params, sequences = sysid_problem(problem, rec)
    request = from_sysid(params, sequences, folder=folder)
    result = calibrate(request)
    wall = time.perf_counter() - start
    return wall, {pid: p.value for pid, p in result.parameters.items()}


# --------------------------------------------------------------------------- whole process

def child(problem_name: str, tool: str, folder: Path) -> None:
    """One whole-process run (``--child``): record, fit, print the fitted values as JSON."""
    logging.disable(logging.WARNING)
    problem = PROBLEMS[problem_name]
    rec = record(problem)
    if tool == "mujoco.sysid":
        _, values = run_sysid(problem, rec)
    else:
        _, values = run_python_api(problem, rec, folder)
    print(json.dumps(values))


def run_process(command: list[str]) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    wall = time.perf_counter() - start
    if command[1] == "calibrate":  # fibril_sim calibrate --output: read the values back
        document = json.loads(Path(command[command.index("--output") + 1]).read_text())
        return wall, dict(document["fitted_parameters"])
    return wall, json.loads(done.stdout.strip().splitlines()[-1])


def process_commands(problem: Problem, rec: Recording, folder: Path) -> dict[str, list[str]]:
    """The whole-process runs: the Python request written as YAML and run by the CLI, and
    Python processes doing the same from arrays with Fibril or with mujoco.sysid."""
    from fibril_calibration import from_sysid

    params, sequences = sysid_problem(problem, rec)
    request = from_sysid(params, sequences, folder=folder / "yaml")
    path = request.to_yaml(folder / "yaml" / "request.yaml")
    cli = str(Path(sys.executable).with_name("fibril_sim"))
    me = [sys.executable, str(Path(__file__).resolve()), "--child", problem.name]
    return {
        "process: mujoco.sysid": [*me, "mujoco.sysid", str(folder / "child")],
        "process: fibril_sim calibrate": [cli, "calibrate", str(path), "--output",
                                          str(folder / "yaml" / "result.json")],
        "process: fibril Python API": [*me, "fibril", str(folder / "child")],
    }

# --------------------------------------------------------------------------- whole process

SYSID_SCRIPT = """\
import contextlib, io, json, sys
import mujoco
import numpy as np
from mujoco import sysid

folder, problem = sys.argv[1], json.loads(sys.argv[2])
spec = mujoco.MjSpec.from_file(folder + "/model.xml")
model = spec.compile()
log = np.loadtxt(folder + "/log.csv", delimiter=",", skiprows=1)
times, control, sensors = log[:, 0], log[:, 1:1 + model.nu], log[:, 1 + model.nu:]
data = mujoco.MjData(model)
kind = mujoco.mjtState.mjSTATE_FULLPHYSICS
initial = np.empty(mujoco.mj_stateSize(model, kind))
mujoco.mj_getState(model, data, initial, kind)
params = sysid.ParameterDict()
for pid, what, obj, truth, start, lower, upper in problem["parameters"]:
    if what == "body_mass":
        modifier = (lambda o: lambda s, p: setattr(s.body(o), "mass", p.value[0]))(obj)
    else:
        modifier = (lambda o: lambda s, p: setattr(s.joint(o), "armature", p.value[0]))(obj)
    params.add(sysid.Parameter(pid, nominal=truth, min_value=lower, max_value=upper,
                               modifier=modifier))
    params[pid].value[:] = start
sequences = sysid.ModelSequences(problem["name"], spec, "measured", initial,
                                 sysid.TimeSeries(times, control),
                                 sysid.TimeSeries.from_names(times[1:], sensors[:-1], model))
residual_fn = sysid.build_residual_fn(models_sequences=[sequences])
with contextlib.redirect_stdout(io.StringIO()):
    fitted, _ = sysid.optimize(initial_params=params, residual_fn=residual_fn,
                               optimizer="mujoco")
json.dump({pid: float(fitted[pid].value[0]) for pid, *_ in problem["parameters"]},
          open(folder + "/sysid.json", "w"))
"""


def write_csv_problem(problem: Problem, rec: Recording, folder: Path, *, jacobian: str,
                      parallelism: int) -> Path:
    """model.xml, manifest.yaml, log.csv (t_s, one column per control, one per sensor, a row
    per physics step) and request.yaml reading the log: what a user has on disk."""
    model, actuators, sensors = write_model(problem, folder)
    step_ns = round(model.opt.timestep * 1e9)
    rows = [",".join(["t_s", *(f"u_{a}" for a in actuators), *sensors])]
    for tick in range(len(rec.sensors)):
        rows.append(",".join([f"{tick * step_ns / 1e9:.9f}",
                              *(repr(float(v)) for v in rec.control[tick]),
                              *(repr(float(rec.sensors[tick, model.sensor_adr[i]]))
                                for i in range(len(sensors)))]))
    (folder / "log.csv").write_text("\n".join(rows) + "\n")
    episode = {"id": "measured", "source": {"path": "log.csv", "time_column": "t_s"},
               "inputs": [{"endpoints": {f"u_{a}": a for a in actuators}, "mode": "torque",
                           "commit": "next_tick"}],
               "signals": {name: {"column": name, "alignment": "exact", "residual_scale": 1.0}
                           for name in sensors}}
    path = folder / "request.yaml"
    path.write_text(json.dumps(request_document(problem, sensors, episode, jacobian,
                                                parallelism), indent=1))
    return path


def whole_process(problem: Problem, rec: Recording, folder: Path, repeats: int,
                  parallelism: int) -> None:
    fibril_sim = Path(sys.executable).parent / "fibril_sim"
    requests = {f"fibril_sim calibrate ({jacobian})": write_csv_problem(
        problem, rec, folder / jacobian, jacobian=jacobian, parallelism=parallelism)
        for jacobian in ("central", "forward")}
    (folder / "sysid.py").write_text(SYSID_SCRIPT)
    described = json.dumps({"name": problem.name, "parameters": problem.parameters})
    commands = {"mujoco.sysid script": [sys.executable, str(folder / "sysid.py"),
                                        str(folder / "central"), described],
                **{tool: [str(fibril_sim), "calibrate", str(path), "--quiet", "--output",
                          str(path.with_name("result.json"))]
                   for tool, path in requests.items()}}
    # Bytecode caches for both tools, as installed packages have them (see the docstring).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    for command in commands.values():  # untimed: writes the caches
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
    walls: dict[str, list[float]] = {tool: [] for tool in commands}
    for repeat in range(repeats):
        for tool in (list(commands) if repeat % 2 == 0 else list(commands)[::-1]):
            start = time.perf_counter()
            subprocess.run(commands[tool], check=True, stdout=subprocess.DEVNULL, env=env)
            walls[tool].append(time.perf_counter() - start)
    truth = {pid: t for pid, _, _, t, *_ in problem.parameters}
    fitted = {"mujoco.sysid script": json.loads((folder / "central" / "sysid.json").read_text())}
    for tool, path in requests.items():
        result = json.loads(path.with_name("result.json").read_text())
        fitted[tool] = {pid: result["fitted_parameters"][pid] for pid in truth}
    base = statistics.median(walls["mujoco.sysid script"])
    print(f"{problem.name}, whole process from a CSV log ({repeats} repeats, interleaved):")
    for tool, values in walls.items():
        error = max(abs(fitted[tool][pid] - truth[pid]) for pid in truth)
        median = statistics.median(values)
        print(f"  {tool:<36} median {median * 1e3:8.1f} ms  ratio {median / base:5.2f}x  "
              f"max |error| {error:.1e}  runs {[round(w * 1e3) for w in values]}")


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--problem", choices=sorted(PROBLEMS), action="append")
    parser.add_argument("--parallelism", type=int, default=2,
                        help="Fibril's execution.max_parallelism (mujoco.sysid uses one "
                             "rollout thread per CPU)")
    parser.add_argument("--processes", action="store_true",
                        help="also time whole processes (CLI on the written YAML request, "
                             "Python API, mujoco.sysid)")
    parser.add_argument("--child", nargs=3, metavar=("PROBLEM", "TOOL", "FOLDER"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--whole-process", action="store_true",
                        help="only the whole-process comparison from a CSV log")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], Path(args.child[2]))
        return
    logging.disable(logging.WARNING)
    folder = Path(tempfile.mkdtemp(prefix="fibril-bench-sysid-"))
    try:
        for name in args.problem or list(PROBLEMS):
            problem = PROBLEMS[name]
            rec = record(problem)
            work = folder / name
            work.mkdir()
            if args.whole_process:
                whole_process(problem, rec, work, args.repeats, args.parallelism)
                continue
            start = time.perf_counter()
            requests = {
                "fibril": fibril_request(problem, rec, work, parallelism=args.parallelism),
                "fibril (jacobian: forward)": fibril_request(
                    problem, rec, work, jacobian="forward", parallelism=args.parallelism)}
            parse_s = (time.perf_counter() - start) / 2
            processes = (process_commands(problem, rec, work) if args.processes else {})
            tools = ["mujoco.sysid", *requests, "fibril Python API (from_sysid)", *processes]
            walls: dict[str, list[float]] = {tool: [] for tool in tools}
            fitted: dict[str, dict[str, float]] = {}
            for repeat in range(args.repeats):
                for tool in (tools if repeat % 2 == 0 else tools[::-1]):
                    if tool == "mujoco.sysid":
                        wall, values = run_sysid(problem, rec)
                    elif tool in requests:
                        wall, values = run_fibril(problem, requests[tool])
                    elif tool in processes:
                        wall, values = run_process(processes[tool])
                    else:
                        wall, values = run_python_api(problem, rec, work / "api")
                    walls[tool].append(wall)
                    fitted[tool] = values
            truth = {pid: t for pid, _, _, t, *_ in problem.parameters}
            print(f"{name}: {len(problem.parameters)} parameter(s), {len(rec.sensors)} steps, "
                  f"{args.repeats} repeats, max_parallelism {args.parallelism} "
                  f"(request parse {parse_s * 1e3:.0f} ms, not timed)")
            for tool in tools:
                base = statistics.median(walls["process: mujoco.sysid" if tool.startswith(
                    "process:") else "mujoco.sysid"])
                error = max(abs(fitted[tool][pid] - truth[pid]) for pid in truth)
                median = statistics.median(walls[tool])
                print(f"  {tool:<32} median {median * 1e3:8.1f} ms  ratio {median / base:5.2f}x"
                      f"  max |error| {error:.1e}  runs {[round(w * 1e3) for w in walls[tool]]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
