"""Calibrations on the Dask backend (one LocalCluster of 2 worker processes): the drivetrain
example and a calibration from a recorded rosbag2 bag give bit for bit the fitted values,
verdict, intervals and summaries of the local backend; ``max_parallelism`` bounds the tasks
in flight."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _recording_rig as rig  # type: ignore[import-not-found]  # noqa: E402  # beside this file
from _dask_rig import (OTHER_MUJOCO, OtherMujoco,  # type: ignore[import-not-found]  # noqa: E402
                       late_worker, run_without_dask, worker_of)
from _patience import patience  # type: ignore[import-not-found]  # noqa: E402  # test/
from fibril_calibration.engine import run_calibration  # noqa: E402
from fibril_sim_core.execution import Backend, ExecutionError  # noqa: E402

distributed = pytest.importorskip("distributed")

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config" / "examples" / "drivetrain"
#: What may differ between two backends: wall times, the execution statistics and backend.
RUN_SPECIFIC = ("wall_time_s", "execution")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as local:
        yield local


def _same_result(local: Any, remote: Any) -> None:
    assert np.array_equal(local.outcome.fitted, remote.outcome.fitted)
    assert local.fitted_values == remote.fitted_values
    a, b = local.document, remote.document
    assert sorted(a) == sorted(b)
    for key in a:
        if key not in RUN_SPECIFIC:
            assert a[key] == b[key], key
    assert a["execution"]["backend"] == {"backend": "local", "scheduler": None}
    assert b["execution"]["backend"]["backend"] == "dask"
    assert b["execution"]["backend"]["workers"] == 2
    assert b["execution"]["statistics"]["evaluations"] == a["execution"]["statistics"][
        "evaluations"]


@pytest.mark.slow
def test_drivetrain_calibration_is_bit_identical_on_dask(cluster: Any, tmp_path: Path) -> None:
    folder = tmp_path / "drivetrain"
    shutil.copytree(DRIVETRAIN, folder)
    request = folder / "calibration.yaml"
    doc = yaml.safe_load(request.read_text())
    # A short fit and a short profile are enough to compare (profiles: intervals, verdict),
    # on one training episode (max_parallelism 1: one task in flight either way; the bag test
    # below sends two episodes per candidate to the two workers) and the held-out one.
    doc.setdefault("optimizer", {})["max_iterations"] = 3
    doc["analysis"]["profile_likelihood"]["samples_per_parameter"] = 3
    doc["training"] = doc["training"][:1]
    request.write_text(yaml.safe_dump(doc, sort_keys=False))
    local = run_calibration(request, environ={})
    lines: list[str] = []
    remote = run_calibration(request, environ={}, scheduler=cluster.scheduler_address,
                             progress=lines.append)
    _same_result(local, remote)
    assert any(line.startswith(f"dask: {cluster.scheduler_address}, 2 worker(s)")
               for line in lines)
    assert remote.outcome.verdict == local.outcome.verdict


def _bag_request(folder: Path, **execution: Any) -> Path:
    """A short calibration of a recorded bag (two parameters: a Jacobian batch is two
    candidates)."""
    data = rig.recording(folder, duration_s=0.2)
    bag = rig.write_bag(folder / "bag", data, "mcap")
    doc = rig.request(data["manifest"], {"path": str(bag)}, optimizer={"max_iterations": 2})
    if execution:
        doc["execution"] = execution
    return Path(rig.write_request(folder, doc))


@pytest.mark.slow
def test_bag_calibration_is_bit_identical_on_dask(cluster: Any, tmp_path: Path) -> None:
    data = rig.recording(tmp_path, duration_s=0.4)
    bag = rig.write_bag(tmp_path / "bag", data, "mcap")
    doc = rig.request(data["manifest"], {"path": str(bag)}, windows={"every": 0.2},
                      optimizer={"max_iterations": 5})
    doc["execution"] = {"max_parallelism": 2}
    request = rig.write_request(tmp_path, doc)
    local = run_calibration(request, environ={})
    remote = run_calibration(request, environ={"FIBRIL_DASK_SCHEDULER":
                                               cluster.scheduler_address})
    assert len(local.request.training) == 2  # two windows: two episodes per candidate
    _same_result(local, remote)


OVERLAY = """format: fibril_sim/parameter_overlay
schema_version: {major: 1, minor: 0}
id: evaluated-set
parameters:
  - {id: wheel_damping, unit: N_m_s_per_rad, provenance: test, value: 0.03,
     target: "mujoco:joint_damping:wheel_joint:0"}
  - {id: motor_resistance, unit: ohm, provenance: test, value: 2.5,
     target: "mujoco:dcmotor_resistance:drive"}
  - {id: wheel_armature, unit: kg_m2, provenance: test, value: 0.05,
     target: "mujoco:joint_armature:wheel_joint:0"}
"""


@pytest.mark.slow
def test_evaluate_on_dask_gives_the_local_document(cluster: Any, tmp_path: Path) -> None:
    """``--evaluate`` with --scheduler: nominal and an overlay artifact whose extra parameter
    (not fitted by the request) is held fixed on the workers, as locally."""
    from fibril_calibration.cli import main

    folder = tmp_path / "drivetrain"
    shutil.copytree(DRIVETRAIN, folder)
    overlay = folder / "evaluated.yaml"
    overlay.write_text(OVERLAY)
    request = folder / "calibration.yaml"
    sets = ["--evaluate", "nominal", "--evaluate", str(overlay)]
    assert main([str(request), "--quiet", *sets, "--output", str(tmp_path / "local.json")]) == 0
    assert main([str(request), "--quiet", *sets, "--output", str(tmp_path / "dask.json"),
                 "--scheduler", cluster.scheduler_address]) == 0
    local = json.loads((tmp_path / "local.json").read_text())
    remote = json.loads((tmp_path / "dask.json").read_text())
    assert local == remote
    assert local["scores"]["nominal"] != local["scores"][str(overlay)]


def _interval(_: Any, item: int) -> tuple[float, float]:
    start = time.monotonic()
    time.sleep(0.3)
    return start, time.monotonic()


def test_a_task_limit_bounds_the_tasks_in_flight(cluster: Any) -> None:
    from fibril_sim_core.execution.dask_session import open_session

    with open_session(Backend("dask", cluster.scheduler_address)) as session:
        shared = session.scatter(b"")
        bounded = [value for _, value in session.map(_interval, shared, range(4), limit=1)]
        free = [value for _, value in session.map(_interval, shared, range(4))]
    # (both workers run on this machine: time.monotonic is one clock)
    assert all(a[1] <= b[0] for a, b in zip(bounded, bounded[1:]))
    assert any(b[0] < a[1] for a, b in zip(free, free[1:]))


def test_max_parallelism_in_a_request_bounds_the_tasks_in_flight(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's ``max_parallelism`` below the cluster's threads (1 < 2): never more than
    one task submitted and not finished, though batches have several tasks."""
    from fibril_sim_core.execution.dask_session import DaskSession

    request = _bag_request(tmp_path, max_parallelism=1)
    submitted: list[Any] = []
    in_flight: list[int] = []
    batches: list[int] = []
    submit, map_ = DaskSession.submit, DaskSession.map

    def counting_submit(self: DaskSession, *args: Any, **kwargs: Any) -> Any:
        future = submit(self, *args, **kwargs)
        submitted.append(future)
        in_flight.append(sum(not f.done() for f in submitted))
        return future

    def counting_map(self: DaskSession, function: Any, shared: Any, items: Any,
                     limit: int | None = None) -> Any:
        batches.append(len(items))
        return map_(self, function, shared, items, limit)

    monkeypatch.setattr(DaskSession, "submit", counting_submit)
    monkeypatch.setattr(DaskSession, "map", counting_map)
    result = run_calibration(request, environ={}, scheduler=cluster.scheduler_address)
    document: Any = result.document
    assert document["execution"]["backend"]["workers"] == 2
    assert max(batches) >= 2 and len(in_flight) == sum(batches)
    assert max(in_flight) == 1


def test_calibrate_refuses_a_worker_with_another_mujoco_version(cluster: Any,
                                                                 tmp_path: Path) -> None:
    """As for experiments: before any episode is decoded or any work is sent."""
    import mujoco

    request = _bag_request(tmp_path)
    with distributed.Client(cluster.scheduler_address, set_as_default=False) as client:
        client.register_plugin(OtherMujoco())
        try:
            with pytest.raises(ExecutionError) as caught:
                run_calibration(request, environ={}, scheduler=cluster.scheduler_address)
        finally:
            client.unregister_worker_plugin(OtherMujoco.name)
    message = str(caught.value)
    assert message.startswith("Dask worker tcp://127.0.0.1:")
    assert message.endswith(f" has mujoco {OTHER_MUJOCO}, this machine {mujoco.__version__}: "
                            f"the versions must match (results would differ); no work was sent")


def test_the_local_default_never_imports_dask(tmp_path: Path) -> None:
    """``fibril_sim calibrate`` without --scheduler, FIBRIL_DASK_SCHEDULER or a dask
    ``execution.backend``: a whole fit, and neither dask nor distributed imported."""
    request = _bag_request(tmp_path)
    run_without_dask(["calibrate", str(request), "--quiet", "--output", str(tmp_path / "fit.json")],
                     tmp_path)
    assert json.loads((tmp_path / "fit.json").read_text())["execution"]["backend"] == {
        "backend": "local", "scheduler": None}


def test_a_worker_that_joins_later_with_another_mujoco_version_takes_no_work(
        cluster: Any, tmp_path: Path) -> None:
    """A worker that joins after the versions were checked (here: after the values were
    shared, which it receives on joining) refuses every task with the connect-time error,
    naming itself and both versions; the first refusal stops ``map``."""
    import dask
    import mujoco
    from fibril_sim_core.execution.dask_session import open_session

    with open_session(Backend("dask", cluster.scheduler_address)) as session:
        shared = session.scatter(b"")
        with late_worker(session.client, tmp_path / "late") as late:
            # The tasks go to the late worker alone: left to the scheduler, the workers that
            # were there first may take all of them on a busy machine (seen once).
            try:
                with dask.annotate(workers=[late], allow_other_workers=False):
                    ran = session.map(worker_of, shared, range(4))
            except ExecutionError as exc:
                caught = exc
            else:
                pytest.fail(f"no task was refused: {ran} (the late worker: {late})")
    assert str(caught) == (
        f"Dask worker {late} has mujoco {OTHER_MUJOCO}, this machine {mujoco.__version__}: "
        f"the versions must match (results would differ); it joined after the versions were "
        f"checked, its tasks were refused")


def test_calibrate_with_an_unreachable_scheduler_fails_with_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The ROS entry point (``ros2 run fibril_calibration calibrate``) takes --scheduler too;
    the scheduler is reached before the request's episodes are decoded (the time limit is
    shortened here; the whole command's is tested below)."""
    from fibril_calibration.cli import main
    from fibril_sim_core.execution import dask_session

    monkeypatch.setattr(dask_session, "CONNECT_SECONDS", 1.0)
    code = main([str(DRIVETRAIN / "calibration.yaml"), "--quiet", "--scheduler",
                 "tcp://127.0.0.1:9"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("calibrate: error: Dask scheduler tcp://127.0.0.1:9: cannot connect "
                          "within 1 s")


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def test_a_whole_calibrate_command_with_an_unreachable_scheduler_fails_within_10_s(
        tmp_path: Path) -> None:
    """``fibril_sim calibrate ... --scheduler ADDRESS`` as a user runs it: one line, no
    traceback, exit status 2; the connection's limit (5 s) leaves the imports room within the
    issue's 10 s (the wall-time bound here is loose: busy machines)."""
    address = f"tcp://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fibril_sim_core.cli", "calibrate",
                           str(DRIVETRAIN / "calibration.yaml"), "--scheduler", address],
                          capture_output=True, text=True, cwd=tmp_path,
                          timeout=patience(120.0))
    elapsed = time.monotonic() - start
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"fibril_sim: error: Dask scheduler {address}: cannot connect within "
                           f"5 s (Timed out trying to connect to {address} after 5 s)\n")
    assert elapsed < patience(60.0)  # (a hang; not the 10 s: busy machines)
