"""Starting at a bound: the warning, the opt-in interior start, and what the result reports."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from _calibration_models import NumpyModel, Signal
from _calibration_rig import DAMPING, request_doc, synthesize, write_request, write_rig

from fibril_calibration.engine import run_calibration
from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.parameters import CalibrationParameter
from fibril_calibration.request import load_calibration_request
from fibril_calibration.solver import SolverOptions, calibrate

T = np.linspace(0.0, 3.0, 60)


def friction(p: np.ndarray) -> np.ndarray:
    """A Coulomb-like drag ``p0`` (nominal 0, lower bound 0) and a drift ``p1``."""
    return np.sin(2 * T) - 0.1 * p[0] * np.sign(np.cos(2 * T)) * T + p[1] * T


def friction_problem() -> tuple[NumpyModel, list[CalibrationParameter]]:
    y = friction(np.array([0.2, 0.3]))
    model = NumpyModel(["drag", "drift"], [Signal("e", "y", lambda p: (friction(p) - y) / 0.01)])
    return model, [CalibrationParameter("drag", 0.0, 1.0, 0.0),
                   CalibrationParameter("drift", -1.0, 1.0, 0.0)]


def test_interior_start_reaches_the_same_optimum_in_fewer_iterations() -> None:
    model, params = friction_problem()
    messages: list[str] = []
    at_bound = calibrate(model, params, SolverOptions(progress=messages.append))
    model, params = friction_problem()
    inside = calibrate(model, params, SolverOptions(interior_start_fraction=0.01))
    assert at_bound.termination == inside.termination == "converged"
    np.testing.assert_allclose(at_bound.fitted, [0.2, 0.3], atol=1e-7)
    np.testing.assert_allclose(inside.fitted, at_bound.fitted, atol=1e-7)
    assert inside.iterations * 2 < at_bound.iterations  # 5 against 19 today
    assert inside.evaluations.training < at_bound.evaluations.training

    # The warning names the parameter and the bound, in the progress output and the result.
    assert any("warning" in m and "'drag'" in m and "lower bound" in m for m in messages)
    warnings = at_bound.to_document()["warnings"]
    assert [(w["code"], w["parameter"], w["bound"], w["value"]) for w in warnings] == \
        [("initial_value_at_bound", "drag", "lower", 0.0)]
    assert "interior_start" in warnings[0]["message"]

    # Both report the declared initial value; the start is the one actually used.
    doc = inside.to_document()
    assert [p["initial"] for p in doc["parameters"]] == [0.0, 0.0]
    assert doc["optimizer"]["start"] == {"drag": pytest.approx(0.01), "drift": 0.0}
    assert doc["optimizer"]["interior_start_fraction"] == 0.01
    assert doc["warnings"][0]["start"] == pytest.approx(0.01)
    assert at_bound.to_document()["optimizer"]["start"] == {"drag": 0.0, "drift": 0.0}
    json.dumps(doc, allow_nan=False)


def test_upper_bound_moves_down_and_interior_parameters_stay() -> None:
    y = 2.0 * np.exp(-1.3 * T)
    model = NumpyModel(["k"], [Signal("e", "y", lambda p: (2.0 * np.exp(-p[0] * T) - y) / 0.01)])
    out = calibrate(model, [CalibrationParameter("k", 0.5, 2.5, 2.5)],
                    SolverOptions(interior_start_fraction=0.1))
    assert out.to_document()["optimizer"]["start"]["k"] == pytest.approx(2.3)
    assert out.fitted_values["k"] == pytest.approx(1.3, abs=1e-8)
    model = NumpyModel(["k"], [Signal("e", "y", lambda p: (2.0 * np.exp(-p[0] * T) - y) / 0.01)])
    out = calibrate(model, [CalibrationParameter("k", 0.5, 2.5, 2.0)],
                    SolverOptions(interior_start_fraction=0.1))
    assert out.to_document()["optimizer"]["start"] == {"k": 2.0}
    assert out.to_document()["warnings"] == []


def test_request_option_is_validated_and_reaches_the_result(tmp_path: Path) -> None:
    manifest = write_rig(tmp_path)
    at_bound = copy.deepcopy(DAMPING)
    at_bound.update(initial=0.001)  # its lower bound
    base = request_doc(manifest, parameters=[at_bound])
    doc = synthesize(tmp_path, request_doc(manifest), {"damping": 0.05})
    doc["parameters"] = [at_bound]
    for bad, message in (({"fraction": 0.5}, "(0, 0.5)"), ({"fraction": 0}, "> 0"),
                         ({"share": 0.1}, "share"), (0.01, "mapping")):
        broken = dict(base, optimizer={"interior_start": bad})
        with pytest.raises(CalibrationRequestError, match="interior_start") as info:
            load_calibration_request(write_request(tmp_path, broken, "bad.yaml"))
        assert message in str(info.value)
        assert "\n" not in str(info.value)

    plain = run_calibration(write_request(tmp_path, doc, "plain.yaml"))
    moved = run_calibration(write_request(
        tmp_path, dict(doc, optimizer={"interior_start": {"fraction": 0.01}}), "moved.yaml"))
    for result in (plain, moved):
        assert result.document["warnings"][0]["parameter"] == "damping"
        assert result.document["parameter_contract"][0]["initial"] == 0.001
        assert "warning" in result.summary()
    assert plain.document["optimizer"]["start"] == {"damping": 0.001}
    assert moved.document["optimizer"]["start"]["damping"] == pytest.approx(0.001 + 0.00999)
    assert moved.fitted_values["damping"] == pytest.approx(0.05, rel=1e-5)
    # The option changes what the optimizer does: it is part of the option hash.
    assert plain.document["context"]["optimizer_option_sha256"] != \
        moved.document["context"]["optimizer_option_sha256"]
