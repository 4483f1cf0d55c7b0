"""Recordings as robots write them (issue 24): each test makes the input that stalled a new
user and checks the outcome end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("arm")
    data = rig.recording(folder)
    data["folder"] = folder
    data["csv"] = rig.write_csv(folder / "log.csv", data)
    return data


def _gravcomp_arm(folder: Path, gravcomp: bool) -> Path:
    """The rig's arm under gravity, link2 gravity-compensated or not."""
    xml = rig.ARM_XML.replace('gravity="0 0 0"', 'gravity="0 0 -9.81"')
    if gravcomp:
        xml = xml.replace('<body name="link2" pos="0.3 0 0">',
                          '<body name="link2" pos="0.3 0 0" gravcomp="1">')
    folder.mkdir(parents=True, exist_ok=True)
    manifest = rig.write_arm(folder)
    (folder / "arm.xml").write_text(xml)
    return manifest


def test_gravity_compensated_model_driven_by_recorded_torques_warns(arm: dict[str, Any],
                                                                    tmp_path: Path) -> None:
    """Item 8: torque inputs replayed on a model whose bodies compensate gravity: the request
    load names the bodies, joints and episodes (progress line and result warnings); a model
    without gravcomp gets no warning."""
    from fibril_calibration.engine import run_calibration
    from fibril_calibration.request.gravity_check import gravcomp_warnings

    for gravcomp in (True, False):
        folder = tmp_path / f"gravcomp-{gravcomp}"
        manifest = _gravcomp_arm(folder, gravcomp)
        doc = rig.request(manifest, {"path": str(arm["csv"]), "time_column": "t_s"},
                          csv_log=True, windows={"every": 0.5})
        request = rig.load_request(folder, doc)
        found = gravcomp_warnings(request)
        if not gravcomp:
            assert found == []
            continue
        (warning,) = found
        assert warning["bodies"] == ["link2"] and warning["joints"] == ["j1", "j2"]
        assert "counted twice" in warning["message"]
        doc["optimizer"] = {"max_iterations": 1}
        path = rig.write_request(folder, doc, "fit.yaml")
        lines: list[str] = []
        result = run_calibration(path, progress=lines.append)
        assert any(line.startswith("warning: the model compensates gravity") for line in lines)
        assert any(w.get("code") == "gravity_compensated_torque_inputs"
                   for w in result.document["warnings"])


def test_panda_example_names_its_gravity_compensation() -> None:
    """Item 8: the example's README and model file say what gravcomp assumes of a log."""
    readme = (REPO / "config/examples/panda/README.md").read_text()
    assert "gravcomp" in readme and "measured" in readme
    model = (REPO / "config/examples/panda/model/panda_torque.xml").read_text()
    assert "include gravity" in model.split("<worldbody>")[0]
    maker = (REPO / "config/examples/panda/make_model.py").read_text()
    assert "include gravity" in maker
    assert yaml.safe_load((REPO / "config/examples/panda/panda.yaml").read_text())


def _export(path: Path, data: dict[str, Any], *, delimiter: str, header: list[str] | None,
            epoch: int = 1763146355421617551) -> Path:
    """The arm's CSV log as a robot exports it: 19-digit ns stamps, ``delimiter``, and a
    header row only when given."""
    import csv

    rows = list(csv.reader(rig.write_csv(path.with_suffix(".plain"), data).open()))[1:]
    with path.open("w", newline="") as out:
        writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
        if header is not None:
            writer.writerow(header)
        for row in rows:
            writer.writerow([epoch + round(float(row[0]) * 1e9), *row[1:]])
    return path


def test_csv_as_exported(arm: dict[str, Any], tmp_path: Path) -> None:
    """Item 3: headerless files named by columns (a list or {index: name}), the time column
    found by its name, 19-digit ns stamps, ';' and tab delimiters, and a header row that is
    data told apart in the error; each loads the same episode as the plain log."""
    names = ["t_s", "tau1", "tau2", "q1", "q2", "dq1", "dq2"]
    plain = rig.load_request(tmp_path, rig.request(
        arm["manifest"], {"path": str(arm["csv"]), "time_column": "t_s"}, csv_log=True))
    reference = plain.training[0].signal("q").values

    def loads(source: dict[str, Any], name: str) -> None:
        request = rig.load_request(tmp_path, rig.request(arm["manifest"], source,
                                                         csv_log=True), name)
        np.testing.assert_array_equal(request.training[0].signal("q").values, reference)

    ns = ["time_ns", *names[1:]]
    headerless = _export(tmp_path / "state.csv", arm, delimiter=";", header=None)
    loads({"path": str(headerless), "header": False, "columns": ns}, "list.yaml")
    loads({"path": str(headerless), "header": False,
           "columns": {0: "time_ns", 1: "tau1", 2: "tau2", 3: "q1", 4: "q2", 5: "dq1",
                       6: "dq2"}}, "map.yaml")
    tabbed = _export(tmp_path / "state.tsv", arm, delimiter="\t",
                     header=["timestamp", *names[1:]])
    loads({"path": str(tabbed)}, "implicit.yaml")  # timestamp: found, 19 digits: ns
    rig.request_fails(tmp_path, rig.request(arm["manifest"], {"path": str(headerless)},
                                                   csv_log=True),
                             "the first row looks like data: 1763146355421617551, ",
                             "set header: false")
    # a headerless file's bad cell: its line is the file's own (row 1 is line 1)
    lines = headerless.read_text().splitlines()
    lines[4] = lines[4].replace(";", ";x", 1)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    rig.request_fails(tmp_path, rig.request(arm["manifest"], {
        "path": str(bad), "header": False, "columns": ns}, csv_log=True),
        "column 'tau1' line 5: 'x")


def _split(arm: dict[str, Any], folder: Path, state_lag_s: float) -> tuple[Path, Path]:
    """The arm's log as a robot's two exports: command.csv (t_s, tau1, tau2) and state.csv
    (t_s, q1, q2, dq1, dq2), the state logger's clock ``state_lag_s`` behind."""
    import csv

    rows = list(csv.reader(arm["csv"].open()))
    command, state = folder / "command.csv", folder / "state.csv"
    with command.open("w") as c, state.open("w") as st:
        c.write("t_s,tau1,tau2\n")
        st.write("t_s,q1,q2,dq1,dq2\n")
        for row in rows[1:]:
            c.write(",".join(row[:3]) + "\n")
            st.write(",".join([repr(float(row[0]) - state_lag_s), *row[3:]]) + "\n")
    return command, state


def test_one_episode_from_several_files_with_an_offset(arm: dict[str, Any],
                                                        tmp_path: Path) -> None:
    """Item 2: command and state in separate files, the state file's clock 0.25 s behind:
    with offset 0.25 on the state source every window equals the single-file log's."""
    single = rig.load_request(tmp_path, rig.request(
        arm["manifest"], {"path": str(arm["csv"]), "time_column": "t_s"}, csv_log=True,
        windows={"every": 0.25}), "single.yaml")
    command, state = _split(arm, tmp_path, 0.25)
    doc = rig.request(arm["manifest"], "command", csv_log=True, windows={"every": 0.25},
                      sources={"command": {"path": str(command)},
                               "state": {"path": str(state), "offset": 0.25}})
    episode = doc["training"][0]
    episode["signals"]["q"]["source"] = "state"
    for entry in episode["initial_state"]:
        for key in ("qpos_from", "qvel_from"):
            entry[key]["source"] = "state"
    split = rig.load_request(tmp_path, doc, "split.yaml")
    assert [e.id for e in split.training] == [e.id for e in single.training]
    for a, b in zip(single.training, split.training):
        assert a.recorded_inputs == b.recorded_inputs
        np.testing.assert_array_equal(a.signal("q").times_ns, b.signal("q").times_ns)
        np.testing.assert_array_equal(a.signal("q").values, b.signal("q").values)
        assert a.initial_state == b.initial_state
    assert split.training[0].source["sources"] == [
        {"path": str(command), "offset_s": 0.0}, {"path": str(state), "offset_s": 0.25}]
    # without the offset the state lags: the windows hold other samples
    del doc["sources"]["state"]["offset"]
    unshifted = rig.load_request(tmp_path, doc, "unshifted.yaml")
    # (the windows start where both files have data, but the states in them are 0.25 s off)
    assert unshifted.training[0].recorded_inputs == single.training[0].recorded_inputs
    assert not np.array_equal(unshifted.training[0].signal("q").values,
                              single.training[0].signal("q").values)


def test_windows_start_where_every_stream_has_data(arm: dict[str, Any],
                                                   tmp_path: Path) -> None:
    """Item 6: the state log starts 0.3 s after the commands: every-windows start at 0.3 s
    (not at the first command, where the state has no sample), and each window says how much
    of each file the entry used."""
    command, state = _split(arm, tmp_path, 0.0)
    lines = state.read_text().splitlines()
    late = [lines[0]] + [line for line in lines[1:] if float(line.split(",")[0]) >= 0.3]
    state.write_text("\n".join(late) + "\n")
    doc = rig.request(arm["manifest"], "command", csv_log=True, windows={"every": 0.2},
                      sources={"command": {"path": str(command)},
                               "state": {"path": str(state)}})
    episode = doc["training"][0]
    episode["signals"]["q"]["source"] = "state"
    for entry in episode["initial_state"]:
        for key in ("qpos_from", "qvel_from"):
            entry[key]["source"] = "state"
    request = rig.load_request(tmp_path, doc)
    first = float(late[1].split(",")[0])  # the state's first sample, at or after 0.3 s
    tick = -(-round(first * 1e9) // 1_000_000) * 1_000_000  # on the 1 ms tick grid
    starts = [e.source["start_ns"] - e.source["origin_ns"] for e in request.training]
    assert starts == [tick, tick + 200_000_000, tick + 400_000_000]
    use = {u["path"]: u for u in request.training[0].source["recording_use"]}
    assert use[str(state)]["span_s"][0] == pytest.approx(0.3, abs=0.01)
    assert use[str(state)]["used_fraction"] > 0.8
    assert use[str(command)]["used_fraction"] < 0.7  # its first 0.3 s are not used
    # an explicit start still wins (and here finds no state sample in its first window)
    episode["windows"]["start"] = 0.0
    rig.request_fails(tmp_path, doc, "window 0", "has no sample in the window")


def test_sentinel_values_are_caught_not_fitted(arm: dict[str, Any], tmp_path: Path) -> None:
    """Item 4: Unitree's PosStopF (2.146e9, "no position command") in logged positions and
    1e10 in a command: a request error naming file, column, line, value and count (before,
    2.146e9 went into a reference signal and an initial state); valid + on_invalid: drop or
    hold leave them out."""
    lines = arm["csv"].read_text().splitlines()
    rows = [line.split(",") for line in lines]
    for n in (30, 31, 32):  # q1 (column 3) at lines 31-33: the driver's sentinel
        rows[n][3] = "2146000000.0"
    sentinel = tmp_path / "sentinel.csv"
    sentinel.write_text("\n".join(",".join(r) for r in rows) + "\n")
    doc = rig.request(arm["manifest"], {"path": str(sentinel), "time_column": "t_s"},
                      csv_log=True)
    rig.request_fails(tmp_path, doc, str(sentinel), "column 'q1' line 31: 2146000000.0",
                      "not a plausible joint 'j1' position", "3 such row(s)", "on_invalid")
    for policy in ("drop", "hold"):
        doc["training"][0]["signals"]["q"].update(valid={"min": -10, "max": 10},
                                                  on_invalid=policy)
        for entry in doc["training"][0]["initial_state"]:
            entry["qpos_from"].update(valid={"min": -10, "max": 10}, on_invalid=policy)
        request = rig.load_request(tmp_path, doc, f"{policy}.yaml")
        q = request.training[0].signal("q")
        assert np.abs(q.values).max() < 10
        clean = rig.load_request(tmp_path, rig.request(
            arm["manifest"], {"path": str(arm["csv"]), "time_column": "t_s"}, csv_log=True),
            "clean.yaml").training[0].signal("q")
        assert q.values.shape[0] == clean.values.shape[0] - (3 if policy == "drop" else 0)
        if policy == "hold":  # the held rows repeat line 30's values
            np.testing.assert_array_equal(q.values[29:32], np.repeat(clean.values[28:29], 3, 0))
    # a command of 1e10 (a "no velocity command" sentinel) on a torque endpoint
    rows = [line.split(",") for line in lines]
    rows[40][1] = "1e10"
    command = tmp_path / "command.csv"
    command.write_text("\n".join(",".join(r) for r in rows) + "\n")
    doc = rig.request(arm["manifest"], {"path": str(command), "time_column": "t_s"},
                      csv_log=True)
    rig.request_fails(tmp_path, doc, "column 'tau1' line 41: 10000000000.0",
                      "not a plausible", "j1/command")


def test_an_unstable_rollout_names_window_and_largest_values(arm: dict[str, Any],
                                                             tmp_path: Path) -> None:
    """Item 4: a command plausible by the default check (9e5 N m, under 1e6) still makes the
    rollout unstable: the error names the episode, the window's span in the recording and the
    largest input and initial value."""
    import mujoco
    from fibril_calibration.parameter_sets import evaluate_parameter_sets

    rows = [line.split(",") for line in arm["csv"].read_text().splitlines()]
    for n in range(40, 60):
        rows[n][1] = "900000"
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(",".join(r) for r in rows) + "\n")
    doc = rig.request(arm["manifest"], {"path": str(bad), "time_column": "t_s"},
                      csv_log=True, windows={"every": 0.25})
    request = rig.load_request(tmp_path, doc)
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda message: None)
    try:
        scores = evaluate_parameter_sets(request, ["nominal"])["scores"]
    finally:
        mujoco.set_mju_user_warning(previous)
    error = scores["nominal"]["training"]["error"]
    assert f"episode 'arm/w000' (window 0 s..0.25 s of '{bad}')" in error
    assert "became unstable" in error and "largest input j1/command = 900000" in error
    assert "largest initial" in error


def test_csv_errors_name_lines_and_bag_errors_name_messages(arm: dict[str, Any],
                                                            tmp_path: Path) -> None:
    """Item 7: a gap over max_gap and a repeated reference time name the CSV lines around
    them (a dropped sentinel row does not shift the numbering); a bag whose header stamps go
    backwards names the message."""
    lines = arm["csv"].read_text().splitlines()
    gap = [lines[0], *lines[1:60], *lines[80:]]  # rows of lines 61-80 missing
    path = tmp_path / "gap.csv"
    path.write_text("\n".join(gap) + "\n")
    doc = rig.request(arm["manifest"], {"path": str(path), "time_column": "t_s",
                                        "max_gap": 0.02}, csv_log=True)
    rig.request_fails(tmp_path, doc, "has a gap of", "between line 60 and line 61")
    rows = [line.split(",") for line in lines]
    rows[20][3] = "nan"  # line 21: dropped below
    rows[41][0] = rows[40][0]  # line 42 repeats line 41's time
    path = tmp_path / "repeat.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    doc = rig.request(arm["manifest"], {"path": str(path), "time_column": "t_s"},
                      csv_log=True)
    doc["training"][0]["signals"]["q"]["on_invalid"] = "drop"
    doc["training"][0]["initial_state"][0]["qpos_from"]["on_invalid"] = "drop"
    rig.request_fails(tmp_path, doc, "two samples at", "on line 41 and line 42")
    # a bag: header stamps going backwards at message 3 of /joint_states
    from fibril_calibration.recordings.formats import open_source
    from fibril_calibration.recordings.sources import SourceError

    data = dict(arm)
    bag = rig.write_bag(tmp_path / "bag", data, "mcap", header_offset_ns=0)
    source = open_source(bag)
    try:
        from rosbags.rosbag2 import Reader, Writer

        source.close()
        bad = tmp_path / "backwards"
        store = rig.typestore()
        with Reader(bag) as reader, Writer(bad, version=9) as writer:
            made = {c.topic: writer.add_connection(c.topic, c.msgtype, typestore=store)
                    for c in reader.connections}
            count = 0
            for connection, t, raw in reader.messages():
                if connection.topic == "/joint_states":
                    msg = store.deserialize_cdr(raw, connection.msgtype)
                    if count == 3:
                        msg.header.stamp.sec -= 1
                    raw = store.serialize_cdr(msg, connection.msgtype)
                    count += 1
                writer.write(made[connection.topic], t, raw)
        source = open_source(bad)
        with pytest.raises(SourceError) as info:
            source.stream(topic="/joint_states", field="position[j1]", time="header")
        assert "time goes backwards at message 3 " in str(info.value)
        assert "s into the recording (stamp 16999999" in str(info.value)
    finally:
        source.close()


def _stamp(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def test_error_times_are_seconds_into_the_recording_with_the_stamp(arm: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    """Item 5: a repeated reference time, a gap over max_gap, a stream with no sample in a
    window and a window that does not fit give their times as seconds into the recording
    with the file's stamp in parentheses (before: bare epoch seconds ``1.76314636e+09 s``,
    or seconds "after the origin" without the stamp)."""
    names = ["time_ns", "tau1", "tau2", "q1", "q2", "dq1", "dq2"]
    exported = _export(tmp_path / "plain.csv", arm, delimiter=",", header=names)
    lines = exported.read_text().splitlines()
    stamps = [int(line.split(",")[0]) for line in lines[1:]]  # stamps[i]: line i + 2
    first = stamps[0]

    def into(ns: int) -> str:
        return f"{(ns - first) / 1e9:.9g} s"

    rows = [line.split(",") for line in lines]
    rows[41][0] = rows[40][0]  # line 42 repeats line 41's time
    path = tmp_path / "repeat.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    doc = rig.request(arm["manifest"], {"path": str(path)}, csv_log=True)
    text = rig.request_fails(tmp_path, doc, "two samples at "
                             f"{into(stamps[39])} into the recording (stamp "
                             f"{_stamp(stamps[39])} s) on line 41 and line 42",
                             "reference times must increase strictly")
    assert "e+09" not in text
    # a gap (the rows of lines 61-80 missing): both ends as seconds into it, with stamps
    gap = tmp_path / "gap.csv"
    gap.write_text("\n".join([lines[0], *lines[1:60], *lines[80:]]) + "\n")
    doc = rig.request(arm["manifest"], {"path": str(gap), "max_gap": 0.02}, csv_log=True)
    rig.request_fails(tmp_path, doc, "between line 60 and line 61, from "
                      f"{into(stamps[58])} to {into(stamps[79])} into the recording (stamps "
                      f"{_stamp(stamps[58])} s to {_stamp(stamps[79])} s), more than max_gap")
    # a window with no sample of the signal: the signal's span, with its stamps
    doc = rig.request(arm["manifest"], {"path": str(exported)}, csv_log=True,
                      windows=[[0.1, 0.2]])
    signal = doc["training"][0]["signals"]["q"]
    state = tmp_path / "state.csv"
    state.write_text("\n".join([lines[0], *(line for line in lines[1:]
                                            if int(line.split(",")[0]) - first >= 3 * 10**8)])
                     + "\n")
    late = [s for s in stamps if s - first >= 3 * 10**8]
    doc["sources"] = {"state": {"path": str(state)}}
    signal["source"] = "state"
    rig.request_fails(tmp_path, doc, "has no sample in the window (its samples span "
                      f"{into(late[0])} to {into(late[-1])} into the recording (stamps "
                      f"{_stamp(late[0])} s to {_stamp(late[-1])} s))")
    # no window fits after a late start: the start and end, with their stamps
    doc = rig.request(arm["manifest"], {"path": str(exported)}, csv_log=True,
                      windows={"every": 0.2, "start": 0.9})
    rig.request_fails(tmp_path, doc, "no window of 0.2 s fits from 0.9 s to "
                      f"{into(stamps[-1])} into the recording (stamps "
                      f"{_stamp(first + 900_000_000)} s to {_stamp(stamps[-1])} s)")


def test_error_stamps_are_the_files_own_under_an_offset(arm: dict[str, Any],
                                                        tmp_path: Path) -> None:
    """Item 2 + 5: a stream of a source with an ``offset`` is moved onto the episode's time
    base; its errors still give the stamp written in its file (with the seconds into the
    recording on the episode's base)."""
    command, state = _split(arm, tmp_path, -0.25)  # the state's clock 0.25 s ahead
    lines = state.read_text().splitlines()
    state.write_text("\n".join([lines[0], *lines[1:60], *lines[80:]]) + "\n")
    file_ns = [round(float(line.split(",")[0]) * 1e9) for line in lines[1:]]
    doc = rig.request(arm["manifest"], "command", csv_log=True,
                      sources={"command": {"path": str(command)},
                               "state": {"path": str(state), "offset": -0.25}})
    episode = doc["training"][0]
    episode["signals"]["q"].update(source="state", max_gap=0.02)
    for entry in episode["initial_state"]:
        for key in ("qpos_from", "qvel_from"):
            entry[key]["source"] = "state"
    origin = file_ns[0] - 250_000_000  # the command log's first time: the episode's origin
    rig.request_fails(tmp_path, doc, "between line 60 and line 61, from "
                      f"{(file_ns[58] - 250_000_000 - origin) / 1e9:.9g} s to "
                      f"{(file_ns[79] - 250_000_000 - origin) / 1e9:.9g} s into the recording "
                      f"(stamps {_stamp(file_ns[58])} s to {_stamp(file_ns[79])} s)")
