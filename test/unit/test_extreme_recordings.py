"""Values that cannot be real, and the small ones of issue 23 (items 8 and 11).

A 1e300 torque, time or reference value in a CSV log is refused naming file, column and line;
no numpy RuntimeWarning reaches the user; an unstable rollout is the candidate's failure (an
error at the start of a fit, a failed score with --evaluate), never a score, and MuJoCo's own
"simulation is unstable" print is held back. A UTF-8 BOM before a CSV header is accepted; a bag
message that does not decode is named by its index and its time after the recording's start;
a one-row CSV is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.recordings.sources import SourceError
from fibril_calibration.recordings.formats import open_source

from fibril_sim_core.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "drivetrain"


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("extreme")
    data = rig.recording(folder, duration_s=0.5)
    data["folder"] = folder
    data["csv"] = rig.write_csv(folder / "log.csv", data)
    return data


def _calibrate(argv: list[str]) -> tuple[int, str, str, list[str]]:
    """``fibril_sim calibrate`` in-process: exit code, stdout, stderr, RuntimeWarnings."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        warnings.simplefilter("always")
        code = main(["calibrate", *argv])
    runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return code, out.getvalue(), err.getvalue(), runtime


def _csv_request(arm: dict[str, Any], path: Path, name: str) -> Path:
    doc = rig.request(arm["manifest"], {"path": str(path), "time_column": "t_s"},
                      csv_log=True, windows=[[0.0, 0.4]])
    doc["optimizer"] = {"max_iterations": 3}
    return rig.write_request(arm["folder"], doc, f"{name}.yaml")


def _edited(arm: dict[str, Any], name: str, row: int, column: int, value: str) -> Path:
    lines = arm["csv"].read_text().split("\n")
    fields = lines[row].split(",")
    fields[column] = value
    lines[row] = ",".join(fields)
    path = arm["folder"] / f"{name}.csv"
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("name, column, value, needles", [
    ("torque", 1, "1e300", ("column 'tau1' line 41", "1e+300 cannot be a recorded value")),
    ("time", 0, "1e300", ("column 't_s': line 41", "beyond 64-bit nanoseconds", "'1e300'")),
    ("reference", 4, "-1e300", ("column 'q2' line 41", "-1e+300 cannot be a recorded value")),
    ("overflow", 3, "1e400", ("line 41", "NaN or infinite")),
])
def test_values_that_cannot_be_real_are_refused_by_column_and_line(
        arm: dict[str, Any], name: str, column: int, value: str,
        needles: tuple[str, ...]) -> None:
    path = _edited(arm, name, 40, column, value)
    request = _csv_request(arm, path, name)
    for extra in ([], ["--evaluate", "nominal"]):
        code, _, err, runtime = _calibrate([str(request), "--quiet", *extra])
        assert code == 2 and runtime == [], (err, runtime)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("fibril_sim: error: "), lines
        assert str(path) in lines[0]
        for needle in needles:
            assert needle in lines[0], lines[0]


def test_an_unstable_rollout_is_a_failure_never_a_score(arm: dict[str, Any],
                                                         capfd: pytest.CaptureFixture[str]
                                                         ) -> None:
    """A 1e9 N m torque passes the value check but throws the arm into MuJoCo's instability:
    the fit stops with one error line, --evaluate records the failure instead of a score."""
    path = _edited(arm, "unstable", 40, 1, "1e9")
    request = _csv_request(arm, path, "unstable")
    code, _, err, runtime = _calibrate([str(request), "--quiet"])
    assert code == 2 and runtime == []
    assert err.splitlines() == [err.strip()] and "became unstable" in err
    code, out, err, runtime = _calibrate([str(request), "--quiet", "--evaluate", "nominal",
                                          "--json"])
    assert code == 0 and runtime == [] and err == ""
    training = json.loads(out)["scores"]["nominal"]["training"]
    assert set(training) == {"error"} and "became unstable" in training["error"]
    assert "unstable" not in capfd.readouterr().err  # MuJoCo's own print held back


def test_huge_sample_values_of_a_samples_file_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder)
    samples = folder / "calibration_data" / "run-01_motor_current.csv"
    lines = samples.read_text().split("\n")
    lines[5] = lines[5].split(",")[0] + ",1e300"
    samples.write_text("\n".join(lines))
    code, _, err, runtime = _calibrate([str(folder / "calibration.yaml"), "--quiet"])
    assert code == 2 and runtime == []
    assert str(samples) in err and "line 6" in err and "cannot be recorded values" in err


# --------------------------------------------------------------------------- item 11

def test_a_bom_before_the_header_is_accepted(arm: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + arm["csv"].read_bytes())
    plain, bom = (open_source(p, time_column="t_s") for p in (arm["csv"], path))
    assert bom.header == plain.header
    np.testing.assert_array_equal(bom.stream(columns=["q1", "tau2"]).values,
                                  plain.stream(columns=["q1", "tau2"]).values)
    # a samples file of a request too
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder)
    for samples in (folder / "calibration_data").glob("*.csv"):
        samples.write_bytes(b"\xef\xbb\xbf" + samples.read_bytes())
    from fibril_calibration.request import load_calibration_request

    with_bom = load_calibration_request(folder / "calibration.yaml")
    without = load_calibration_request(EXAMPLE / "calibration.yaml")
    for a, b in zip(with_bom.training, without.training):
        for x, y in zip(a.signals, b.signals):
            np.testing.assert_array_equal(x.values, y.values)


def test_a_one_row_csv_is_refused(arm: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    path.write_text("\n".join(arm["csv"].read_text().split("\n")[:2]) + "\n")
    request = _csv_request(arm, path, "one-row")
    code, _, err, _ = _calibrate([str(request), "--quiet"])
    assert code == 2 and str(path) in err and "has one row" in err
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder)
    samples = folder / "calibration_data" / "run-01_motor_current.csv"
    samples.write_text("\n".join(samples.read_text().split("\n")[:2]) + "\n")
    code, _, err, _ = _calibrate([str(folder / "calibration.yaml"), "--quiet"])
    assert code == 2 and str(samples) in err and "one sample row" in err


def test_a_bag_decode_error_names_the_message_and_its_time(arm: dict[str, Any],
                                                            tmp_path: Path) -> None:
    def broken(writer: Any, store: Any) -> list[tuple[int, Any, Any]]:
        Float64 = store.types["std_msgs/msg/Float64"]
        connection = writer.add_connection("/torque", Float64.__msgtype__, typestore=store)
        return [(rig.EPOCH + 100_000_000 + n * 10_000_000, connection, Float64(data=0.1 * n))
                for n in range(8)]

    bag = rig.write_bag(tmp_path / "bag", arm, "mcap", extra=broken)
    # the same bag again, with message 5 of /torque (at 0.15 s) cut to 6 bytes
    from rosbags.rosbag2 import Reader, Writer

    bad = tmp_path / "bad"
    store = rig.typestore()
    with Reader(bag) as reader, Writer(bad, version=9) as writer:
        made = {c.topic: writer.add_connection(c.topic, c.msgtype, typestore=store)
                for c in reader.connections}
        torque = 0
        for connection, t, raw in reader.messages():
            if connection.topic == "/torque":
                if torque == 5:
                    raw = bytes(raw[:6])
                torque += 1
            writer.write(made[connection.topic], t, raw)
    source = open_source(bad)
    with pytest.raises(SourceError) as info:
        source.stream(topic="/torque", field="data")
    text = str(info.value)
    assert "message 5 of the topic" in text and "0.15 s after the recording's start" in text


def test_a_huge_recorded_command_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder)
    inputs = folder / "calibration_data" / "run-01_inputs.yaml"
    inputs.write_text(inputs.read_text().replace('"value": 0.8}', '"value": 1e300}', 1))
    code, _, err, runtime = _calibrate([str(folder / "calibration.yaml"), "--quiet"])
    assert code == 2 and runtime == [] and len(err.splitlines()) == 1
    assert str(inputs) in err and "1e+300 cannot be a recorded command" in err
