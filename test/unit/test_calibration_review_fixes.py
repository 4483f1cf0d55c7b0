"""Review fixes of fibril_calibration: recording mistakes are one-line errors (never a
traceback), window grids that round to nothing are refused, a finished fit survives a failing
score, initial quaternions interpolate on the short arc, and --metrics names stay inside their
folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.errors import (
    CalibrationError,
    CalibrationRequestError,
    EvaluationError,
)
from fibril_calibration.recordings.sources import SourceError
from fibril_calibration.recordings.formats import open_source
from fibril_sim_core import schema as s


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("arm")
    data = rig.recording(folder)
    data["folder"] = folder
    data["mcap"] = rig.write_bag(folder / "bag-mcap", data, "mcap")
    return data


_load, _fails = rig.load_request, rig.request_fails


# --------------------------------------------------------------------------- 1. recordings

def test_bag_folder_without_metadata_is_a_one_line_error(arm: dict[str, Any],
                                                         tmp_path: Path) -> None:
    empty = tmp_path / "not-a-bag"
    empty.mkdir()
    with pytest.raises(SourceError, match="cannot read recording .*not-a-bag"):
        open_source(empty)
    doc = rig.request(arm["manifest"], {"path": str(empty)})
    _fails(arm["folder"], doc, "training[0].source.path", "not-a-bag")


def test_csv_ns_times_in_exponent_notation_are_read_exactly(tmp_path: Path) -> None:
    path = tmp_path / "ns.csv"
    path.write_text("time_ns,v\n1.7e18,1.0\n1700000000001000000,2.0\n1.700000000002e18,3.0\n")
    source = open_source(path, time_column="time_ns")
    assert source.times_ns.tolist() == [1_700_000_000_000_000_000, 1_700_000_000_001_000_000,
                                        1_700_000_000_002_000_000]
    small = tmp_path / "small.csv"
    small.write_text("stamp,v\n1e3,1.0\n2000,2.0\n")
    assert open_source(small, time_column="stamp", time_unit="ns").times_ns.tolist() == [1000,
                                                                                         2000]
    bad = tmp_path / "bad.csv"
    bad.write_text("time_ns,v\n1.7e18,1.0\nsoon,2.0\n")
    with pytest.raises(SourceError, match=r"column 'time_ns'.*line 3.*'soon'"):
        open_source(bad, time_column="time_ns")


def _franka_run(folder: Path, seq: list[str], ring: dict[str, Any]) -> Path:
    path = folder / "run.csv"
    rows = ["seq,t_s,q1"] + [f"{s},{n * 0.001},0.0" for n, s in enumerate(seq)]
    path.write_text("\n".join(rows) + "\n")
    path.with_suffix(".json").write_text(json.dumps({"schema_version": 2, "ring_log": ring}))
    return path


def test_franka_bad_seq_cells_and_sidecar_numbers_are_source_errors(tmp_path: Path) -> None:
    good = _franka_run(tmp_path, ["10", "11", "12"], {"gaps": [[10, 11]], "resets": [12]})
    source = open_source(good, "franka_sysid")
    assert source.times_ns.tolist() == [0, 1_000_000, 2_000_000]
    assert len(source.forbidden) == 2
    empty = _franka_run(tmp_path, ["10", "", "12"], {})
    with pytest.raises(SourceError, match=r"column 'seq' line 3: '' is not a number"):
        open_source(empty, "franka_sysid")
    half = _franka_run(tmp_path, ["10", "10.5", "12"], {})
    with pytest.raises(SourceError, match=r"column 'seq' line 3: '10.5' is not a frame"):
        open_source(half, "franka_sysid")
    for ring, needle in (({"gaps": [["a", 11]]}, r"ring_log.gaps: .*'a'"),
                         ({"gaps": [[10, None]]}, r"ring_log.gaps: .*None"),
                         ({"resets": ["x"]}, r"ring_log.resets: .*'x'"),
                         ({"seq_first": "zero"}, r"ring_log.seq_first: .*'zero'")):
        run = _franka_run(tmp_path, ["10", "11", "12"], ring)
        with pytest.raises(SourceError, match=needle):
            open_source(run, "franka_sysid")


def test_source_set_turns_reader_errors_into_request_errors(arm: dict[str, Any],
                                                            monkeypatch: Any) -> None:
    from fibril_calibration.request import mapping

    for error in (PermissionError(13, "Permission denied"), ValueError("bad chunk")):
        def broken(*_: Any, error: Exception = error, **__: Any) -> Any:
            raise error
        monkeypatch.setattr(mapping, "open_source", broken)
        doc = rig.request(arm["manifest"], {"path": str(arm["mcap"])})
        _fails(arm["folder"], doc, "training[0].source.path", "cannot read recording",
               str(arm["mcap"]), "Permission denied" if isinstance(error, OSError)
               else "bad chunk")


# --------------------------------------------------------------------------- 2. windows

def test_window_grid_that_rounds_below_a_timestep_is_refused(arm: dict[str, Any]) -> None:
    doc = rig.request(arm["manifest"], {"path": str(arm["mcap"])}, windows={"every": 1e-10})
    _fails(arm["folder"], doc, "training[0].windows.every", "shorter than one physics "
           "timestep", "nearest valid value is 0.001 s")
    doc = rig.request(arm["manifest"], {"path": str(arm["mcap"])},
                      windows={"every": 0.2, "length": 1e-4})
    _fails(arm["folder"], doc, "training[0].windows.length", "nearest valid value is 0.001 s")


def test_window_count_is_capped() -> None:
    from fibril_calibration.request.windows import MAX_WINDOWS, parse_windows

    where = s.Where("r.yaml", "windows", CalibrationRequestError)
    with pytest.raises(CalibrationRequestError, match=r"windows.every: .*at most 100000 per "
                       r"entry .*nearest valid every is 0.010000091 s"):
        parse_windows({"every": 0.001}, where, 1000 * 10**9, 10**6)
    windows, _ = parse_windows({"every": 0.01}, where, 1000 * 10**9, 10**6)
    assert len(windows) == MAX_WINDOWS  # exactly at the cap
    with pytest.raises(CalibrationRequestError, match="at most 100000"):
        parse_windows([[0, 1]] * (MAX_WINDOWS + 1), where, 10**9, 10**6)


# --------------------------------------------------------------------------- 3. scores

def test_a_failing_score_keeps_the_finished_fit(arm: dict[str, Any], monkeypatch: Any) -> None:
    from fibril_calibration import engine, parameter_sets

    request = _load(arm["folder"], rig.request(arm["manifest"], {"path": str(arm["mcap"])},
                                               windows={"every": 0.2, "validation_every": 4}))
    nominal = np.array([p.initial for p in request.parameters])
    real = parameter_sets.score_sets

    def failing(problem: Any, sets: Any, metrics: Any = None) -> Any:
        evaluate = problem.evaluate

        def evaluate_or_fail(vector: Any, scope: str) -> Any:
            if scope == "validation" and np.array_equal(vector, nominal):
                raise EvaluationError("rollout diverged at tick 7")
            return evaluate(vector, scope)

        problem.evaluate = evaluate_or_fail
        return real(problem, sets, metrics)

    monkeypatch.setattr(engine, "score_sets", failing)
    result = engine.run_calibration(request)
    for joint, value in rig.TRUTH.items():
        assert result.fitted_values[f"d_{joint}"] == pytest.approx(value, rel=1e-6)
    document = result.document["scores"]
    assert document["nominal"]["validation"] == {"error": "rollout diverged at tick 7"}
    assert document["nominal"]["training"]["count"] > 0
    assert document["fitted"]["validation"]["count"] > 0
    assert result.metrics == {}  # no --metrics: no metrics.json documents
    assert "validation scores  nominal: not evaluated: rollout diverged at tick 7" in \
        result.summary()
    with_metrics = engine.run_calibration(request, metrics=True)
    assert set(with_metrics.metrics) == {"fitted"}  # the nominal validation failed
    assert with_metrics.metrics["fitted"]


# --------------------------------------------------------------------------- 5. quat_from

def test_initial_quaternion_interpolates_on_the_short_arc() -> None:
    from fibril_calibration.request.source_states import state_values
    from fibril_calibration.request.streams import MappedStream
    from fibril_calibration.recordings.sources import Stream

    half = 0.1
    q0 = [1.0, 0.0, 0.0, 0.0]
    q1 = [-np.cos(half), -np.sin(half), 0.0, 0.0]  # the same orientation as +q, other sign
    stream = Stream("test", np.array([0, 10], dtype=np.int64), np.array([q0, q1]),
                    ("w", "x", "y", "z"))
    where = s.Where("r.yaml", "initial_state", CalibrationRequestError)
    mapped = MappedStream(stream, where, None)
    out = state_values([({"type": "mocap", "body": "b"}, [("quat", mapped)])], 5, 0, "w",
                       where)
    q = np.array(out[0]["quat"])
    expected = np.array([np.cos(half / 2), np.sin(half / 2), 0.0, 0.0])
    assert min(np.abs(q - expected).max(), np.abs(q + expected).max()) < 1e-12


# --------------------------------------------------------------------------- 6. --metrics

def test_metrics_names_stay_inside_the_folder(tmp_path: Path) -> None:
    from fibril_calibration.metrics_json import safe_name, write_metrics

    folder = tmp_path / "metrics"
    written = write_metrics(folder, {"..": {"a": 1}, ".": {"a": 2}, "a/b": {"a": 3},
                                     "a-b": {"a": 4}, "x\\..\\y": {"a": 5}})
    assert len(set(written)) == 5
    for path in written:
        assert path.resolve().parent.parent == folder.resolve()
        assert path.exists()
    assert safe_name("..") == "_.." and safe_name("a/b") == "a-b"
    assert not (tmp_path / "metrics.json").exists()


def test_metrics_folder_that_cannot_be_made_is_a_calibration_error(tmp_path: Path) -> None:
    from fibril_calibration.metrics_json import write_metrics

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CalibrationError, match=r"--metrics: cannot create the folder "
                                               r"'.*file/ep'") as info:
        write_metrics(blocker, {"ep": {}})
    assert "\n" not in str(info.value)


def test_duplicate_or_colliding_evaluate_sets_are_refused(tmp_path: Path) -> None:
    from fibril_calibration.cli import check_output_folders

    def args(*evaluate: str, metrics: Path | None = None) -> argparse.Namespace:
        return argparse.Namespace(evaluate=list(evaluate), metrics=metrics)

    with pytest.raises(CalibrationError, match="--evaluate 'nominal' is given twice"):
        check_output_folders(args("nominal", "nominal"))
    with pytest.raises(CalibrationError, match=r"--evaluate 'a/fit.json' and 'b/fit.json' "
                                               r"would both write to"):
        check_output_folders(args("a/fit.json", "b/fit.json", metrics=tmp_path / "m"))
    check_output_folders(args("a/fit.json", "b/fit.json"))  # no --metrics: no folders
    check_output_folders(args("nominal", "fit.json", metrics=tmp_path / "m"))


# --------------------------------------------------------------------------- 7. dead code

def test_starting_point_and_time_offsets_exports() -> None:
    import dataclasses

    from fibril_calibration.recordings import time_offsets
    from fibril_calibration.solve.starting_point import StartingPoint

    assert [f.name for f in dataclasses.fields(StartingPoint)] == ["physical", "warnings"]
    for name in ("candidate_builder", "offset_ticks", "shifted_linear", "TimeOffsetTarget",
                 "OffsetAwareBuilder", "OffsetPlan"):
        assert name in time_offsets.__all__
    for name in time_offsets.__all__:
        assert hasattr(time_offsets, name)
