"""A calibrated per-source time offset (issue 24 item 2): an arm's command and state logs are
two recordings on clocks 2 ms apart; ``{type: time_offset, source: state}`` fits that offset
for every signal read from the state recording, on top of its fixed ``offset``, and misuse is
a request error."""

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

LATE_S = 0.002  # the state recording's clock runs this far ahead of the command recording's


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("split")
    data = rig.recording(folder, duration_s=0.6)
    command = rig.write_bag(folder / "command", data, "mcap")
    keep = data["log_times"] >= 10_000_000
    late = dict(data)
    late["log_times"] = data["log_times"][keep] + int(LATE_S * 1e9)
    late["q"], late["dq"] = data["q"][keep], data["dq"][keep]
    state = rig.write_bag(folder / "state", late, "mcap")
    doc = rig.request(data["manifest"], "command",
                      sources={"command": {"path": str(command)},
                               "state": {"path": str(state)}})
    episode = doc["training"][0]
    for signal in episode["signals"].values():
        signal["source"] = "state"
    episode["initial_state"] = [{"type": "joint", "joint": j, "qpos": [0.0], "qvel": [0.0]}
                                for j in rig.JOINTS]
    doc["parameters"].append({"id": "state_clock", "unit": "s", "lower": -0.004,
                              "upper": 0.006, "initial": 0.0,
                              "target": {"type": "time_offset", "source": "state"}})
    return {"folder": folder, "doc": doc}


def _load(folder: Path, doc: dict[str, Any]) -> Any:
    return load_calibration_request(rig.write_request(folder, doc))


def test_the_state_clock_and_damping_are_recovered(split: dict[str, Any]) -> None:
    request = _load(split["folder"], split["doc"])
    episode = request.training[0]
    assert [s.source for s in episode.signals] == ["state", "state"]
    assert {s.time_offset_key for s in episode.signals} == {"source:state"}
    assert episode.signals[0].time_offset_bounds_ns == (-4e6, 6e6)
    assert episode.source["input_sources"] == ["command"]
    result = run_calibration(request)
    assert result.fitted_values["state_clock"] == pytest.approx(LATE_S, abs=2e-6)
    for joint, value in rig.TRUTH.items():
        assert result.fitted_values[f"d_{joint}"] == pytest.approx(value, rel=1e-3)
    assert [p["id"] for p in result.parameter_overlay["parameters"]] == ["d_j1", "d_j2"]
    contract = {p["id"]: p for p in result.document["parameter_contract"]}
    assert contract["state_clock"]["targets"][0] == {"type": "time_offset", "source": "state"}


def test_the_fitted_part_adds_to_the_fixed_offset(split: dict[str, Any]) -> None:
    from fibril_calibration.solve.problem import CalibrationProblem

    doc = copy.deepcopy(split["doc"])
    doc["sources"]["state"]["offset"] = -0.0015  # most of the 2 ms is known
    request = _load(split["folder"], doc)
    truth = [rig.TRUTH["j1"], rig.TRUTH["j2"]]
    with CalibrationProblem(request) as problem:
        rest = problem.evaluate(np.array([*truth, LATE_S - 0.0015]))
        whole = problem.evaluate(np.array([*truth, LATE_S]))
    assert np.sqrt(np.mean(rest.unweighted ** 2)) < 1e-6
    assert np.sqrt(np.mean(whole.unweighted ** 2)) > 0.1


def test_source_offset_misuse_is_a_request_error(split: dict[str, Any]) -> None:
    folder, doc = split["folder"], split["doc"]
    bad = copy.deepcopy(doc)
    bad["parameters"][-1]["target"]["source"] = "command"
    with pytest.raises(CalibrationRequestError, match="feeds recorded inputs"):
        _load(folder, bad)
    bad = copy.deepcopy(doc)
    bad["sources"]["spare"] = {"path": doc["sources"]["state"]["path"]}
    bad["parameters"][-1]["target"]["source"] = "spare"
    with pytest.raises(CalibrationRequestError, match="no episode compares a signal"):
        _load(folder, bad)
    bad = copy.deepcopy(doc)
    bad["parameters"].append({"id": "delay", "unit": "s", "lower": -0.004, "upper": 0.006,
                              "initial": 0.0,
                              "target": {"type": "time_offset", "observation": "q_j1"}})
    with pytest.raises(CalibrationRequestError, match="two calibrated time offsets"):
        _load(folder, bad)
    bad = copy.deepcopy(doc)
    bad["parameters"][-1]["target"] = {"type": "time_offset", "source": "state",
                                       "observation": "q_j1"}
    with pytest.raises(CalibrationRequestError, match="observation"):
        _load(folder, bad)
