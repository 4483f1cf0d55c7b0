"""Memory stays flat over a calibration's evaluations.

A candidate plan (and its compiled model: tens of MB for a mesh model) must be freed as soon as
its rollouts are done, by reference counting: anything only the cyclic garbage collector frees
piles up between its (ever rarer) full collections; that is how a 21-parameter calibration of
a 7-joint arm reached 4.4 GB after 1,565 evaluations. The model here carries a 4 MB height
field so that every candidate model left behind shows in the process RSS.
"""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fibril_calibration.model.candidate_plan import CandidatePlanBuilder
from fibril_calibration.solve.problem import CalibrationProblem
from fibril_calibration.request import load_calibration_request

ARM_XML = """\
<mujoco model="arm2">
  <option timestep="0.002"/>
  <asset><hfield name="ground" nrow="1000" ncol="1000" size="1 1 0.1 0.1"/></asset>
  <worldbody>
    <geom type="hfield" hfield="ground" pos="0 0 -2" contype="0" conaffinity="0"/>
    <body name="link1" pos="0 0 0.1">
      <joint name="joint1" type="hinge" axis="0 0 1" damping="0.5" armature="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.02" mass="0.5" contype="0"
            conaffinity="0"/>
      <body name="link2" pos="0.1 0 0">
        <joint name="joint2" type="hinge" axis="0 1 0" damping="0.3"/>
        <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.02" mass="0.3" contype="0"
              conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="act1" joint="joint1"/>
    <motor name="act2" joint="joint2"/>
  </actuator>
  <sensor>
    <jointpos name="q1" joint="joint1"/>
    <jointpos name="q2" joint="joint2"/>
  </sensor>
</mujoco>
"""

PARAMETERS = [("d1", "joint_damping", "joint1", 0.01, 2.0),
              ("d2", "joint_damping", "joint2", 0.01, 2.0),
              ("a1", "joint_armature", "joint1", 0.001, 1.0),
              ("m2", "body_mass", "link2", 0.05, 2.0)]


def write_problem(folder: Path, *, episodes: int = 2, steps: int = 20) -> Path:
    (folder / "arm2.xml").write_text(ARM_XML)
    components = "\n".join(
        f"  - {{id: m{i}, type: fibril_sim/motor, endpoint: m{i}, bind: {{actuator: act{i}}}}}"
        for i in (1, 2))
    (folder / "arm2.yaml").write_text(
        f"schema_version: {{major: 3, minor: 1}}\nmodel: arm2.xml\ncomponents:\n{components}\n")
    rng = np.random.default_rng(3)
    training = []
    for e in range(episodes):
        inputs = [{"source_id": f"m{i}", "source_sequence": tick, "payload_type":
                   "fibril_sim/motor_command/v1",
                   "payload_json": json.dumps({"mode": "torque", "value": float(rng.normal())}),
                   "commit_tick": tick, "acceptance_sequence": 2 * tick + i}
                  for tick in range(0, steps, 5) for i in (1, 2)]
        signals = {f"q{i}": {"alignment": "exact", "residual_scale": 0.01,
                             "samples": [{"time_ns": t * 2_000_000, "values": [0.0]}
                                         for t in range(1, steps + 1)]} for i in (1, 2)}
        training.append({"id": f"ep{e}", "recorded_inputs": inputs, "signals": signals})
    doc = {"schema_version": {"major": 3, "minor": 1}, "manifest": "arm2.yaml",
           "parameters": [{"id": pid, "lower": lo, "upper": hi, "initial": (lo + hi) / 2,
                           "target": f"mujoco:{kind}:{obj}"}
                          for pid, kind, obj, lo, hi in PARAMETERS],
           "observations": [{"id": f"q{i}", "source": "joint_position", "name": f"joint{i}"}
                            for i in (1, 2)],
           "training": training, "execution": {"max_parallelism": 2, "cache_entries": 256}}
    path = folder / "request.yaml"
    path.write_text(json.dumps(doc))
    return path


def candidates(request: Any, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lower = np.array([p.lower for p in request.parameters])
    upper = np.array([p.upper for p in request.parameters])
    return [lower + (upper - lower) * rng.random(lower.size) for _ in range(count)]


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096 / 1e6


class RecordingBuilder(CandidatePlanBuilder):
    """Keeps a weak reference to every plan it builds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.built: list[weakref.ref] = []

    def build(self, values: Any) -> Any:
        plan = super().build(values)
        self.built.append(weakref.ref(plan))
        return plan


def test_candidate_plans_are_freed_without_the_cyclic_collector(tmp_path: Path) -> None:
    request = load_calibration_request(write_problem(tmp_path))
    builder = RecordingBuilder(request.manifest, request.parameters)
    enabled = gc.isenabled()
    with CalibrationProblem(request, candidate_builder=builder) as problem:
        problem.evaluate_many(candidates(request, 2, 0))  # warm-up: first-use lazy setup
        gc.collect()
        gc.disable()
        try:
            problem.evaluate(candidates(request, 1, 1)[0])
            problem.evaluate_many(candidates(request, 6, 2))  # on the worker pool
            assert len(builder.built) == 9
            assert [ref() for ref in builder.built] == [None] * 9
            # Nothing of the evaluations (instances, plans, ingress, captures) is in a cycle.
            # (Only ours are judged: another library's thread left in this test process, e.g. a
            # Dask cluster's event loop from an earlier test, makes cyclic garbage of its own.)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            ours = [type(o) for o in gc.garbage
                    if type(o).__module__.startswith(("fibril_", "mujoco"))]
            assert ours == []
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            if enabled:
                gc.enable()


@pytest.mark.slow
def test_rss_after_1500_evaluations_stays_within_10_percent_of_rss_after_200(
        tmp_path: Path) -> None:
    request = load_calibration_request(write_problem(tmp_path))
    with CalibrationProblem(request) as problem:
        done = 0
        after_200 = None
        for batch in range(150):
            problem.evaluate_many(candidates(request, 10, batch))
            done += 10
            if done == 200:
                after_200 = rss_mb()
        assert problem.statistics.evaluations["training"] == 1500
        after_1500 = rss_mb()
    assert after_200 is not None
    assert after_1500 <= 1.10 * after_200, (after_200, after_1500)


def test_control_trajectories_and_inertials_are_bounded(tmp_path: Path) -> None:
    """One control trajectory per actuator setup (a calibrated motor config makes one per
    candidate) and one inertial table per model state: both keep a few entries only."""
    import dataclasses

    from fibril_sim_core.plan import MODEL_CACHE_ENTRIES as _MODEL_CACHE_ENTRIES

    request = load_calibration_request(write_problem(tmp_path))
    plan = request.nominal_plan
    records = request.training[0].recorded_inputs
    prepared = plan.prepare_recorded_inputs(records)
    endpoints = [a.create() for a in plan.actuators]
    trajectories = []
    for k in range(40):
        actuators = [dataclasses.replace(a, config={**a.config, "supply_voltage": 10.0 + k})
                     for a in plan.actuators]
        trajectories.append(prepared.controls(actuators, endpoints))
    assert all(t is not None for t in trajectories)
    assert len(prepared._controls) <= 8
    assert prepared.controls(actuators, endpoints) is trajectories[-1]  # the latest is kept

    builder = CandidatePlanBuilder(request.manifest, request.parameters).builder
    model = tmp_path / "arm2.xml"
    for k in range(3 * _MODEL_CACHE_ENTRIES):  # the model file changes under the builder
        model.write_text(ARM_XML.replace('mass="0.3"', f'mass="{0.3 + 0.01 * k:.2f}"'))
        CandidatePlanBuilder(request.manifest, request.parameters,
                             builder=builder).build({p.id: p.initial for p in request.parameters})
    assert len(builder._models) <= _MODEL_CACHE_ENTRIES
    assert len(builder._inertials) <= _MODEL_CACHE_ENTRIES
