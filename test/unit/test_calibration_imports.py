"""Start-up cost: a calibration that reports no statistical interval never imports scipy.stats
(about 0.4-0.7 s of a ``fibril_sim calibrate`` process); one from a small CSV log imports no
reader of other formats (the trace stack, rosbags, pyarrow), nor the report or lab-format
writers it was not asked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
from _calibration_rig import request_doc, synthesize, write_request, write_rig
from mujoco import rollout

SCRIPT = """
import sys
from fibril_calibration.engine import run_calibration
result = run_calibration(sys.argv[1])
print(result.document["likelihood_interpretation_valid"], "scipy.stats" in sys.modules)
"""


def _run(request: Path) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(request)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_scipy_stats_is_imported_only_for_intervals(tmp_path: Path) -> None:
    manifest = write_rig(tmp_path)
    doc = synthesize(tmp_path, request_doc(manifest), {"damping": 0.05})
    assert _run(write_request(tmp_path, doc, "plain.yaml")) == ["False", "False"]
    valid = dict(doc, objective={"standardized_gaussian_residuals": True})
    assert _run(write_request(tmp_path, valid, "valid.yaml")) == ["True", "True"]


MODEL = """<mujoco><option timestep="0.002"/>
  <worldbody><body name="ball"><inertial pos="0 0 0" mass="1" diaginertia="1e-3 1e-3 1e-3"/>
    <joint name="slide" type="slide" axis="1 0 0" stiffness="100" damping="5"/></body>
  </worldbody>
  <actuator><motor name="push" joint="slide"/></actuator>
  <sensor><jointpos name="position" joint="slide"/></sensor></mujoco>"""

CLI = """
import gc, sys
from fibril_sim_core.cli import main
code = main(["calibrate", sys.argv[1], "--quiet", "--output", sys.argv[2]])
# the stack loaded with the collector paused, then frozen; the collector runs again
assert gc.isenabled() and gc.get_freeze_count() > 10_000, gc.get_freeze_count()
frozen = gc.get_freeze_count()
main(["calibrate", sys.argv[1], "--quiet", "--output", sys.argv[2]])
assert gc.isenabled() and gc.get_freeze_count() == frozen  # loaded already: left alone
names = ("fibril_sim_core.trace", "rosbags", "pyarrow", "fibril_calibration.report.writer",
         "fibril_calibration.sysid_export", "fibril_calibration.sim_csv",
         "fibril_calibration.metrics_json", "fibril_calibration.recordings.franka",
         "fibril_calibration.recordings.bag_source", "matplotlib")
print(code, *[name for name in names if name in sys.modules])
"""


def test_a_csv_calibration_imports_no_other_formats_nor_writers(tmp_path: Path) -> None:
    """Also: the calibration stack loads with the cyclic collector paused and is then frozen
    (gc.freeze), once per process; the collector is on again for the fit."""
    model = mujoco.MjModel.from_xml_string(MODEL)
    (tmp_path / "model.xml").write_text(MODEL)
    (tmp_path / "manifest.yaml").write_text(
        "schema_version: {major: 3, minor: 1}\nmodel: model.xml\ncomponents:\n"
        "  - {id: push, type: fibril_sim/motor, endpoint: push, bind: {actuator: push}}\n")
    times = np.arange(250) * 0.002
    control = (5 * np.sin(2 * np.pi * 1.5 * times)).reshape(-1, 1)
    data = mujoco.MjData(model)
    state = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(model, data, state, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    _, sensors = rollout.rollout(model, data, state, control[:-1])
    (tmp_path / "log.csv").write_text("t_s,u,position\n" + "".join(
        f"{t:.3f},{u!r},{s!r}\n" for t, u, s in zip(times, control[:, 0].tolist(),
                                                     sensors[0, :, 0].tolist())))
    request = {
        "schema_version": {"major": 3, "minor": 1}, "manifest": "manifest.yaml",
        "parameters": [{"id": "mass", "lower": 0.3, "upper": 3.0, "initial": 2.0,
                        "target": {"type": "mujoco", "kind": "body_mass", "object": "ball"}}],
        "observations": [{"id": "position", "source": "sensor", "name": "position"}],
        "training": [{"id": "log", "source": {"path": "log.csv", "time_column": "t_s"},
                      "inputs": [{"endpoints": {"u": "push"}, "mode": "torque",
                                  "commit": "next_tick"}],
                      "signals": {"position": {"column": "position", "alignment": "exact",
                                               "residual_scale": 1.0}}}]}
    path = write_request(tmp_path, request)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", CLI, str(path), str(tmp_path / "result.json")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == ["0"]  # after the summary: what loaded

