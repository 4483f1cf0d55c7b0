"""Whole-process wall time of the ``fibril_sim`` CLI beside a mujoco.sysid script.

Measured as child processes, from ``exec`` to exit (interpreter start, imports, parsing, work):

* ``fibril_sim --help``;
* ``fibril_sim inspect`` of the drivetrain example (config/examples/drivetrain/simulation.yaml);
* ``fibril_sim calibrate --quiet`` on mujoco.sysid's spring-mass and 5-link-arm problems,
  beside a plain Python script that runs mujoco.sysid (``optimize``, its "mujoco" optimizer)
  on the same problem and the same arrays.

The problems and their recorded arrays are those of ``bench/calibration_vs_mujoco_sysid.py``
(control of every physics step, position/velocity sensors of every step, from the true model).
They are written into a temporary folder as a user would have them: the MJCF, a Fibril manifest
with one motor endpoint per actuator, a calibration request (YAML) whose signals read CSV
``samples_file``s and whose recorded inputs are a ``fibril_sim run --inputs`` file; for
mujoco.sysid a ``.npz`` of the same arrays and a script. Commands run interleaved (each repeat
in a rotated order); medians, and for calibrate the ratio to mujoco.sysid, are printed.

Both tools run as installed packages do, from bytecode caches: with ``PYTHONDONTWRITEBYTECODE``
set (as in this project's containers) Fibril, run from its source tree, would compile every
module in every process while mujoco.sysid's wheel came with its caches. The children get
``PYTHONPYCACHEPREFIX`` in the temporary folder (``PYTHONDONTWRITEBYTECODE`` unset) and every
command one untimed warm-up run.

Needs mujoco.sysid's optional dependencies: ``pip install -r bench/requirements.txt``.

Usage: ``python bench/cli_startup.py [--repeats 7] [--problem spring_mass]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_vs_mujoco_sysid import (PROBLEMS, Problem, Recording, record,  # noqa: E402
                                         write_model)

ROOT = Path(__file__).resolve().parent.parent
DRIVETRAIN = ROOT / "config" / "examples" / "drivetrain" / "simulation.yaml"

SYSID_SCRIPT = '''\
"""mujoco.sysid on {name}: the same model, arrays and parameters as the Fibril request."""
import contextlib, io, logging, sys
import numpy as np
import mujoco
from mujoco import sysid

logging.disable(logging.WARNING)
data = np.load(sys.argv[1])
spec = mujoco.MjSpec.from_file(sys.argv[2])
model = spec.compile()
params = sysid.ParameterDict()
for pid, kind, obj, truth, initial, lower, upper in {parameters!r}:
    if kind == "body_mass":
        modifier = (lambda o: lambda s, p: setattr(s.body(o), "mass", p.value[0]))(obj)
    else:
        modifier = (lambda o: lambda s, p: setattr(s.joint(o), "armature", p.value[0]))(obj)
    params.add(sysid.Parameter(pid, nominal=truth, min_value=lower, max_value=upper,
                               modifier=modifier))
    params[pid].value[:] = initial
times = data["times"]
sensors = sysid.TimeSeries.from_names(times[1:], data["sensors"], model)
control = sysid.TimeSeries(times, data["control"])
sequences = sysid.ModelSequences("{name}", spec, "measured", data["initial_state"], control,
                                 sensors)
residual_fn = sysid.build_residual_fn(models_sequences=[sequences])
with contextlib.redirect_stdout(io.StringIO()):
    fitted, _ = sysid.optimize(initial_params=params, residual_fn=residual_fn,
                               optimizer="mujoco")
print({{pid: float(fitted[pid].value[0]) for pid, *_ in {parameters!r}}})
'''


def write_problem(problem: Problem, rec: Recording, folder: Path) -> dict[str, list[str]]:
    """The user's files for both tools; the command line of each."""
    folder.mkdir(parents=True)
    model, actuators, _ = write_model(problem, folder)
    ticks = len(rec.sensors)
    lines = ["schema_version: {major: 1, minor: 0}", "inputs:"]
    for tick in range(ticks):
        for a, name in enumerate(actuators):
            payload = json.dumps({"mode": "torque", "value": float(rec.control[tick, a])})
            lines.append(f"  - {{commit_tick: {tick}, source_id: {name}, source_sequence: "
                         f"{tick}, payload_type: fibril_sim/motor_command/v1, "
                         f"payload_json: '{payload}'}}")
    (folder / "inputs.yaml").write_text("\n".join(lines) + "\n")
    step_ns = round(model.opt.timestep * 1e9)
    sensors = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, i)
               for i in range(model.nsensor)]
    signals = {}
    for i, name in enumerate(sensors):
        rows = "\n".join(f"{tick * step_ns},{float(rec.sensors[tick, model.sensor_adr[i]])!r}"
                         for tick in range(ticks))
        (folder / f"{name}.csv").write_text(f"time_ns,value\n{rows}\n")
        signals[name] = {"alignment": "exact", "residual_scale": 1.0,
                         "samples_file": f"{name}.csv"}
    request = {
        "schema_version": {"major": 3, "minor": 1},
        "manifest": "manifest.yaml",
        "parameters": [{"id": pid, "lower": lower, "upper": upper, "initial": initial,
                        "parameterization": "linear",
                        "target": {"type": "mujoco", "kind": kind, "object": obj}}
                       for pid, kind, obj, truth, initial, lower, upper in problem.parameters],
        "observations": [{"id": name, "source": "sensor", "name": name} for name in sensors],
        "training": [{"id": "measured", "recorded_inputs_file": "inputs.yaml",
                      "signals": signals}],
        "optimizer": {"type": "ceres", "max_iterations": 100},
        "execution": {"max_parallelism": 2, "cache_entries": 64},
    }
    (folder / "request.yaml").write_text(json.dumps(request, indent=1))  # JSON is YAML
    np.savez(folder / "recording.npz", times=rec.times, control=rec.control,
             sensors=rec.sensors, initial_state=rec.initial_state)
    (folder / "sysid.py").write_text(SYSID_SCRIPT.format(
        name=problem.name, parameters=tuple(problem.parameters)))
    return {
        f"fibril_sim calibrate {problem.name}": [
            fibril_sim(), "calibrate", str(folder / "request.yaml"), "--quiet", "--json"],
        f"mujoco.sysid script {problem.name}": [
            sys.executable, str(folder / "sysid.py"), str(folder / "recording.npz"),
            str(folder / "model.xml")],
    }


def fibril_sim() -> str:
    beside = Path(sys.executable).parent / "fibril_sim"
    found = str(beside) if beside.exists() else shutil.which("fibril_sim")
    if found is None:
        raise SystemExit("fibril_sim is not installed beside this Python or on PATH")
    return found


def child_environment(folder: Path) -> dict[str, str]:
    """Bytecode caches for every child, in ``folder`` (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    return env


def run(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return wall, done.stdout


def fitted_values(label: str, stdout: str) -> dict[str, float]:
    if label.startswith("fibril_sim calibrate"):
        return json.loads(stdout)["fitted_parameters"]
    import ast

    return ast.literal_eval(stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--problem", choices=sorted(PROBLEMS), action="append")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fibril-bench-cli-"))
    try:
        commands: dict[str, list[str]] = {
            "fibril_sim --help": [fibril_sim(), "--help"],
            "fibril_sim inspect drivetrain": [fibril_sim(), "inspect", str(DRIVETRAIN)],
        }
        names = args.problem or ["spring_mass", "arm"]
        truths = {}
        for name in names:
            problem = PROBLEMS[name]
            commands.update(write_problem(problem, record(problem), folder / name))
            truths[name] = {pid: t for pid, _, _, t, *_ in problem.parameters}
        labels = list(commands)
        env = child_environment(folder)
        for label in labels:  # untimed: the bytecode caches are written
            run(commands[label], env)
        walls: dict[str, list[float]] = {label: [] for label in labels}
        errors: dict[str, float] = {}
        for repeat in range(args.repeats):
            shift = repeat % len(labels)
            for label in labels[shift:] + labels[:shift]:
                wall, stdout = run(commands[label], env)
                walls[label].append(wall)
                problem_name = next((n for n in names if label.endswith(" " + n)), None)
                if problem_name is not None and repeat == 0:
                    fitted = fitted_values(label, stdout)
                    errors[label] = max(abs(fitted[p] - t)
                                        for p, t in truths[problem_name].items())
        print(f"whole processes, {args.repeats} interleaved repeats, median wall time "
              f"(python {sys.version.split()[0]}, mujoco {mujoco.__version__})")
        medians = {label: statistics.median(walls[label]) for label in labels}
        for label in labels:
            line = f"  {label:<40} {medians[label] * 1e3:8.0f} ms"
            for name in names:
                if label == f"fibril_sim calibrate {name}":
                    ratio = medians[label] / medians[f"mujoco.sysid script {name}"]
                    line += f"  ratio to mujoco.sysid {ratio:4.2f}x"
            if label in errors:
                line += f"  max |error| {errors[label]:.1e}"
            print(line + f"  runs {[round(w * 1e3) for w in walls[label]]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
