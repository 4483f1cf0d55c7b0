"""A calibrated per-signal time offset (sensor delay): the arm's joint states are logged 2 ms
late; fitting the damping together with a ``time_offset`` parameter recovers both, the offset
never enters the fitted overlay, and misuse is a request error."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.engine import run_calibration
from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.request import load_calibration_request

DELAY_S = 0.002


@pytest.fixture(scope="module")
def delayed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("delay")
    data = rig.recording(folder, duration_s=0.6)
    keep = data["log_times"] >= 10_000_000
    late = dict(data)
    late["log_times"] = data["log_times"][keep] + int(DELAY_S * 1e9)  # stamped 2 ms late
    late["q"], late["dq"] = data["q"][keep], data["dq"][keep]
    bag = rig.write_bag(folder / "late", late, "mcap")
    doc = rig.request(data["manifest"], {"path": str(bag)})
    episode = doc["training"][0]
    episode["initial_state"] = [{"type": "joint", "joint": j, "qpos": [0.0], "qvel": [0.0]}
                                for j in rig.JOINTS]
    doc["parameters"].append({"id": "delay", "unit": "s", "lower": -0.004, "upper": 0.006,
                              "initial": 0.0, "targets": [
                                  {"type": "time_offset", "observation": "q_j1"},
                                  {"type": "time_offset", "observation": "q_j2"}]})
    return {"folder": folder, "doc": doc}


def _load(folder: Path, doc: dict[str, Any]) -> Any:
    return load_calibration_request(rig.write_request(folder, doc))


def test_delay_and_damping_are_recovered(delayed: dict[str, Any]) -> None:
    request = _load(delayed["folder"], delayed["doc"])
    assert request.training[0].signals[0].time_offset_bounds_ns == (-4e6, 6e6)
    result = run_calibration(request)
    assert result.fitted_values["delay"] == pytest.approx(DELAY_S, abs=2e-6)
    for joint, value in rig.TRUTH.items():
        assert result.fitted_values[f"d_{joint}"] == pytest.approx(value, rel=1e-3)
    overlay_ids = [p["id"] for p in result.parameter_overlay["parameters"]]
    assert overlay_ids == ["d_j1", "d_j2"]  # an offset is not a model parameter
    contract = {p["id"]: p for p in result.document["parameter_contract"]}
    assert contract["delay"]["targets"][0] == {"type": "time_offset", "observation": "q_j1"}


def test_problem_evaluates_the_offset_without_a_builder(delayed: dict[str, Any]) -> None:
    from fibril_calibration.solve.problem import CalibrationProblem

    request = _load(delayed["folder"], delayed["doc"])
    with CalibrationProblem(request) as problem:
        at_truth = problem.evaluate(np.array([rig.TRUTH["j1"], rig.TRUTH["j2"], DELAY_S]))
        no_delay = problem.evaluate(np.array([rig.TRUTH["j1"], rig.TRUTH["j2"], 0.0]))
    assert np.sqrt(np.mean(at_truth.unweighted ** 2)) < 1e-6
    assert np.sqrt(np.mean(no_delay.unweighted ** 2)) > 1.0


def test_time_offset_misuse_is_a_request_error(delayed: dict[str, Any]) -> None:
    folder, doc = delayed["folder"], delayed["doc"]
    bad = copy.deepcopy(doc)
    bad["training"][0]["signals"]["q_j1"]["alignment"] = "nearest"
    with pytest.raises(CalibrationRequestError, match="needs alignment: linear"):
        _load(folder, bad)
    bad = copy.deepcopy(doc)
    bad["parameters"][-1]["upper"] = 0.05
    with pytest.raises(CalibrationRequestError, match="before episode time 0"):
        _load(folder, bad)
    bad = copy.deepcopy(doc)
    bad["parameters"][-1]["targets"][1]["observation"] = "q_j9"
    with pytest.raises(CalibrationRequestError, match="unknown observation 'q_j9'"):
        _load(folder, bad)
    bad = copy.deepcopy(doc)
    bad["parameters"][-1]["targets"].append("mujoco:joint_damping:j1")
    with pytest.raises(CalibrationRequestError, match="cannot share a parameter"):
        _load(folder, bad)


def test_two_offsets_on_one_observation_are_a_request_error(delayed: dict[str, Any]) -> None:
    bad = copy.deepcopy(delayed["doc"])
    bad["parameters"].append({"id": "delay_again", "unit": "s", "lower": -0.004,
                              "upper": 0.006, "initial": 0.0,
                              "target": {"type": "time_offset", "observation": "q_j2"}})
    with pytest.raises(CalibrationRequestError) as info:
        _load(delayed["folder"], bad)
    text = str(info.value)
    assert "\n" not in text
    assert "parameters[3].target" in text  # delay_again
    assert "time_offset:q_j2 is already bound by parameter 'delay'" in text
    bad = copy.deepcopy(delayed["doc"])
    bad["parameters"][-1]["targets"].append({"type": "time_offset", "observation": "q_j1"})
    with pytest.raises(CalibrationRequestError, match="the same target is listed twice"):
        _load(delayed["folder"], bad)


class _Recording:
    """A ready candidate builder (the standard one) that records the plans handed back."""

    def __init__(self, manifest: Any, parameters: Any) -> None:
        from fibril_calibration.model.candidate_plan import CandidatePlanBuilder

        self.inner = CandidatePlanBuilder(manifest, parameters)
        self.released: list[Any] = []

    def build(self, values: Any) -> Any:
        return self.inner.build(values)

    def release(self, plan: Any) -> None:
        self.released.append(plan)
        self.inner.release(plan)


def test_a_ready_builder_object_gets_the_offsets_and_plans_back(
        delayed: dict[str, Any]) -> None:
    from fibril_calibration.recordings.time_offsets import is_time_offset

    request = _load(delayed["folder"], delayed["doc"])
    ready = _Recording(request.manifest,
                       [p for p in request.parameters if not is_time_offset(p)])
    result = run_calibration(request, candidate_builder=ready)
    assert result.fitted_values["delay"] == pytest.approx(DELAY_S, abs=2e-6)
    overlay_ids = [p["id"] for p in result.parameter_overlay["parameters"]]
    assert overlay_ids == ["d_j1", "d_j2"]
    assert ready.released  # OffsetAwareBuilder.release forwards to the ready builder
    from fibril_calibration.recordings.time_offsets import OffsetPlan

    assert not any(isinstance(plan, OffsetPlan) for plan in ready.released)


def test_offset_aware_builder_release_unwraps_the_plan() -> None:
    from fibril_calibration.recordings.time_offsets import OffsetAwareBuilder, OffsetPlan

    class Inner:
        def __init__(self) -> None:
            self.released: list[Any] = []

        def build(self, values: Any) -> Any:
            return object()

        def release(self, plan: Any) -> None:
            self.released.append(plan)

    inner = Inner()
    builder = OffsetAwareBuilder(inner, [])
    plan = builder.build({})
    assert isinstance(plan, OffsetPlan)
    builder.release(plan)
    assert inner.released == [plan._plan]
    OffsetAwareBuilder(object(), []).release(plan)  # an inner builder without release
