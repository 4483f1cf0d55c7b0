"""Experiments on the Dask backend, against one LocalCluster of 2 worker processes: the same
records and trace payloads as the local backend, a killed worker failing exactly its own run,
workers with another MuJoCo version refused before any work, an unreachable scheduler failing
fast with one line; and the backend selection itself (no cluster needed)."""

from __future__ import annotations

import copy
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcap.reader import make_reader

from fibril_sim_core import cli
from fibril_sim_core.experiments.runner import run_experiment
from fibril_sim_core.execution import (Backend, ExecutionError, collect_bundle, public_address,
                                       resolve_backend)
from fibril_sim_core.experiments.experiment import ExperimentError, load_experiment

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _patience import patience  # type: ignore[import-not-found]  # noqa: E402  # test/
from _dask_rig import (OTHER_MUJOCO, OtherMujoco,  # type: ignore[import-not-found]  # noqa: E402
                       late_worker, run_without_dask)

distributed = pytest.importorskip("distributed")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
WALL_KEYS = ("started_at", "finished_at", "wall_seconds")
METRICS = [
    {"id": "final_wheel_speed", "kind": "signal", "signal": "joint:wheel_joint.velocity",
     "reduce": "final"},
    {"id": "peak_motor_force", "kind": "signal", "signal": "actuator:motor/command.force",
     "reduce": "max_abs"},
    {"id": "wheel_contact_time", "kind": "contact_duration", "contact": "wheel_left"},
]


def _experiment(folder: Path, name: str, *, steps: int, variants: int,
                **execution: Any) -> Path:
    doc = {"schema_version": {"major": 1, "minor": 0}, "id": name,
           "model": {"manifest": "simulation.yaml"}, "scenario": "drive-start.yaml",
           "parameters": {"baseline_overlay": "damping-baseline.yaml"},
           "variants": [{"id": f"damping-{i}", "parameter_values": {"wheel_damping": 0.01 * i}}
                        for i in range(1, variants + 1)],
           "metrics": copy.deepcopy(METRICS),
           "execution": {"steps": steps, "timeout_seconds": 120.0,
                         "mujoco_internal_threads": 1, **execution}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as local:
        yield local


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dask") / "example"
    shutil.copytree(EXAMPLE, folder)
    return folder


def _messages(trace: Path) -> list[tuple[str, int, bytes]]:
    out = []
    for file in sorted(trace.glob("*.mcap")):
        with file.open("rb") as stream:
            for _, channel, message in make_reader(stream).iter_messages():
                out.append((channel.topic, message.log_time, message.data))
    return out


def _comparable(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in WALL_KEYS}


# ------------------------------------------------------------------ same results as local
@pytest.mark.slow
def test_dask_gives_the_records_and_trace_payloads_of_the_local_backend(
        cluster: Any, example: Path) -> None:
    path = _experiment(example, "same", steps=300, variants=3)
    local = run_experiment(path, traces=example / "local.traces", environ={})
    lines: list[str] = []
    remote = run_experiment(path, traces=example / "dask.traces", environ={},
                            scheduler=cluster.scheduler_address, progress=lines.append)
    assert [r["id"] for r in remote["runs"]] == [r["id"] for r in local["runs"]]
    for a, b in zip(local["runs"], remote["runs"]):
        assert b["status"] == "succeeded"
        # Paths name the submitter's files, not the worker's copy; traces land under --traces.
        assert b["plan"]["manifest"] == str(example / "simulation.yaml")
        assert b["trace"] == str(example / "dask.traces" / b["id"])
        assert _comparable(b) == {**_comparable(a), "trace": b["trace"]}
        assert _messages(Path(b["trace"])) == _messages(Path(a["trace"]))
        assert ((Path(b["trace"]) / "metadata.yaml").read_text()
                == (Path(a["trace"]) / "metadata.yaml").read_text().replace(
                    str(example / "local.traces"), str(example / "dask.traces")))
    assert remote["summary"] == local["summary"]
    backend = remote["execution"]["backend"]
    assert backend["backend"] == "dask" and backend["workers"] == 2
    assert backend["scheduler"] == cluster.scheduler_address
    assert backend["worker_versions"]["mujoco"] == local["mujoco_version"]
    assert local["execution"]["backend"] == {"backend": "local", "scheduler": None}
    assert lines[0].startswith(f"dask: {cluster.scheduler_address}, 2 worker(s)")
    assert sorted(line.split()[1] for line in lines[1:]) == sorted(r["id"] for r in local["runs"])
    assert lines[-1].startswith("[4/4] ")


def _run_folders() -> list[str]:
    """On a worker: the run scratch folders left in its local directory."""
    from fibril_sim_core.execution.dask_session import worker_cache
    return sorted(str(p) for p in Path(worker_cache()).glob("fibril_sim-run-*"))


@pytest.mark.slow
def test_a_long_trace_streams_back_in_chunks(cluster: Any, example: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace longer than CHUNK_BYTES stays on its worker's disk and is read back chunk by
    chunk into --traces: the same payloads as locally, nothing left on the workers."""
    from fibril_sim_core.experiments import dask_runner

    monkeypatch.setattr(dask_runner, "CHUNK_BYTES", 4096)
    path = _experiment(example, "chunked", steps=400, variants=2)
    local = run_experiment(path, traces=example / "chunked-local.traces", environ={})
    remote = run_experiment(path, traces=example / "chunked-dask.traces", environ={},
                            scheduler=cluster.scheduler_address)
    for a, b in zip(local["runs"], remote["runs"]):
        assert b["status"] == "succeeded" and b["trace"] == str(example / "chunked-dask.traces"
                                                                 / b["id"])
        sizes = [f.stat().st_size for f in Path(b["trace"]).rglob("*") if f.is_file()]
        assert sum(sizes) > 4096 and max(sizes) > 2 * 4096  # several chunks of one file
        assert _messages(Path(b["trace"])) == _messages(Path(a["trace"]))
    assert not [p.name for p in (example / "chunked-dask.traces").iterdir()
                if p.name.startswith(".")]  # no staging folder left here
    with distributed.Client(cluster.scheduler_address) as client:
        deadline = time.monotonic() + 30
        while any(client.run(_run_folders).values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(client.run(_run_folders).values())


# ------------------------------------------------------------------ refused before any work
def test_a_worker_with_another_mujoco_version_is_refused(cluster: Any, example: Path) -> None:
    path = _experiment(example, "versions", steps=10, variants=1)
    traces = example / "versions.traces"
    with distributed.Client(cluster) as client:
        client.register_plugin(OtherMujoco())
        try:
            with pytest.raises(ExecutionError) as caught:
                run_experiment(path, traces=traces, environ={},
                               scheduler=cluster.scheduler_address)
        finally:
            client.unregister_worker_plugin(OtherMujoco.name)
    message = str(caught.value)
    import mujoco
    assert message.startswith("Dask worker tcp://127.0.0.1:")
    assert f"has mujoco 0.0.1, this machine {mujoco.__version__}" in message
    assert "no work was sent" in message
    assert not traces.exists()


def test_a_worker_that_joins_after_the_check_with_another_mujoco_version_stops_the_run(
        cluster: Any, example: Path, tmp_path: Path) -> None:
    """A worker that joins once the versions were checked (started here when the command
    reports its connection) refuses the run it is given: the command stops with the
    connect-time error naming it and both versions."""
    import dask
    import mujoco

    path = _experiment(example, "late", steps=10, variants=7)
    joined: list[str] = []
    with ExitStack() as stack:
        spy = stack.enter_context(distributed.Client(cluster.scheduler_address,
                                                     set_as_default=False))

        def join_when_connected(line: str) -> None:
            if line.startswith("dask: "):
                joined.append(stack.enter_context(late_worker(spy, tmp_path / "late")))
                # The runs go to the late worker alone: left to the scheduler, the workers
                # that were there first may take all of them on a busy machine.
                stack.enter_context(dask.annotate(workers=joined, allow_other_workers=False))

        with pytest.raises(ExecutionError) as caught:
            run_experiment(path, traces=example / "late.traces", environ={},
                           scheduler=cluster.scheduler_address, progress=join_when_connected)
    assert str(caught.value) == (
        f"Dask worker {joined[0]} has mujoco {OTHER_MUJOCO}, this machine "
        f"{mujoco.__version__}: the versions must match (results would differ); it joined "
        f"after the versions were checked, its tasks were refused")


def test_an_unreachable_scheduler_fails_within_10_s_with_one_line(
        example: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The experiment entry point's one-line failure. The connection's time limit is shortened
    here (what a user waits for, 5 s, is tested through the calibrate entry point in
    test_dask_calibration.py; both reach the scheduler through the same session)."""
    from fibril_sim_core.execution import dask_session

    assert dask_session.CONNECT_SECONDS == 5.0
    monkeypatch.setattr(dask_session, "CONNECT_SECONDS", 1.0)
    path = _experiment(example, "unreachable", steps=10, variants=1)
    code = cli.main(["experiment", "run", str(path), "--output", str(example / "u.json"),
                     "--scheduler", "tcp://127.0.0.1:9"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("fibril_sim: error: Dask scheduler tcp://127.0.0.1:9: cannot "
                          "connect within 1 s")
    assert not (example / "u.json").exists() and not (example / "u.traces").exists()


@contextmanager
def _listening(answer: bytes) -> Iterator[str]:
    """The address of a TCP server here that accepts, sends ``answer`` (nothing when empty)
    and keeps the connection open: not a Dask scheduler."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(connection)
            if answer:
                connection.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in accepted:
            connection.close()
        server.close()


@pytest.mark.parametrize("answer, reason", [
    (b"", "it accepted the connection but never answered as a Dask scheduler)"),
    (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/html\r\n\r\n<html>no</html>\r\n",
     "its answer is not Dask's ("),
], ids=["silent", "http"])
def test_a_server_that_is_no_dask_scheduler_fails_within_the_limit_with_one_line(
        answer: bytes, reason: str, example: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Dask's own connect waits forever for a handshake from a server that accepts and never
    answers, and raises whatever decoding a foreign answer raised; both are the one-line
    error, within the time limit (shortened here)."""
    from fibril_sim_core.execution import dask_session

    monkeypatch.setattr(dask_session, "CONNECT_SECONDS", 1.0)
    path = _experiment(example, "foreign", steps=10, variants=1)
    codes: list[int] = []
    with _listening(answer) as address:
        command = threading.Thread(target=lambda: codes.append(cli.main(
            ["experiment", "run", str(path), "--output", str(example / "f.json"),
             "--scheduler", address])), daemon=True)  # (a hang fails the test, not the suite)
        command.start()
        command.join(patience(8.0))  # the 1 s limit, its grace and a margin
        assert not command.is_alive(), "still connecting"
    assert codes == [2]
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"fibril_sim: error: Dask scheduler {address}: cannot connect within "
                          f"1 s ({reason}")
    assert not (example / "f.json").exists()


# ------------------------------------------------------------------ failure isolation
@pytest.mark.slow
def test_a_worker_killed_during_a_run_fails_exactly_that_run(cluster: Any,
                                                             example: Path) -> None:
    path = _experiment(example, "killed", steps=6000, variants=3)
    killed: dict[str, str] = {}

    def kill_the_first_worker_that_starts_a_run() -> None:
        with distributed.Client(cluster.scheduler_address) as spy:
            pids = spy.run(os.getpid)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                claims = spy.get_metadata(["fibril_sim"], {})
                runs = {run: worker for token in claims.values() for run, worker in
                        (token or {}).items()}
                if runs:
                    run, worker = sorted(runs.items())[0]
                    os.kill(pids[worker], signal.SIGKILL)
                    killed.update(run=run, worker=worker)
                    return
                time.sleep(0.02)

    spy = threading.Thread(target=kill_the_first_worker_that_starts_a_run)
    spy.start()
    try:
        document = run_experiment(path, traces=example / "killed.traces", environ={},
                                  scheduler=cluster.scheduler_address)
    finally:
        spy.join()
    statuses = {r["id"]: r["status"] for r in document["runs"]}
    assert statuses.pop(killed["run"]) == "runtime_failure"
    assert set(statuses.values()) == {"succeeded"}
    failed = next(r for r in document["runs"] if r["id"] == killed["run"])
    assert failed["error_reason"] == f"Dask worker {killed['worker']} died while running it"
    assert failed["trace"] is None and not (example / "killed.traces" / killed["run"]).exists()
    cluster.wait_for_workers(2, timeout=60)


def test_a_run_past_its_timeout_is_stopped_on_the_worker(cluster: Any, example: Path) -> None:
    # The runner checks timeout_seconds while it steps, on whichever worker runs it: the run
    # ends as "timeout" long before its 20 000 ticks, and the other run is not held up.
    path = _experiment(example, "timeout", steps=20000, variants=1, timeout_seconds=1.0e-6)
    document = run_experiment(path, traces=example / "timeout.traces", environ={},
                              scheduler=cluster.scheduler_address)
    assert [(r["id"], r["status"]) for r in document["runs"]] == [
        ("baseline", "timeout"), ("damping-1", "timeout")]
    for run in document["runs"]:
        assert run["error_reason"].startswith("timeout_seconds 1e-06 exceeded at tick ")
        assert run["error_reason"].endswith(" of 20000")
        assert run["success"] is False and run["metrics"] == {}


# ------------------------------------------------------------------ backend selection
def test_backend_precedence_cli_then_environment_then_document(tmp_path: Path) -> None:
    document = Backend("dask", "tcp://lab:8786")
    env = {"FIBRIL_DASK_SCHEDULER": "tcp://env:8786"}
    assert resolve_backend(document, "local:3", env) == Backend("dask", "local:3")
    assert resolve_backend(document, None, env) == Backend("dask", "tcp://env:8786")
    assert resolve_backend(document, None, {}) == document
    assert resolve_backend(Backend(), None, {}) == Backend()
    assert resolve_backend(Backend("dask"), None, {}, default_workers=4) == Backend("dask",
                                                                                    "local:4")
    with pytest.raises(ExecutionError, match=r"^--scheduler: 'local:0': local:N needs"):
        resolve_backend(Backend(), "local:0", {})
    with pytest.raises(ExecutionError, match=r"^FIBRIL_DASK_SCHEDULER: 'http://x:1' is not"):
        resolve_backend(Backend(), None, {"FIBRIL_DASK_SCHEDULER": "http://x:1"})
    assert public_address("tcp://user:secret@lab:8786") == "tcp://lab:8786"
    assert public_address("tls://lab:8786?token=abc") == "tls://lab:8786"


def test_document_backend_keys(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    path = _experiment(tmp_path / "ex", "doc", steps=10, variants=0, backend="dask",
                       scheduler="tcp://lab:8786")
    assert load_experiment(path).execution.backend == Backend("dask", "tcp://lab:8786")
    path = _experiment(tmp_path / "ex", "doc", steps=10, variants=0, scheduler="local:2")
    with pytest.raises(ExperimentError, match=r"doc.yaml: execution.scheduler: only the dask "
                                              r"backend takes a scheduler"):
        load_experiment(path)
    path = _experiment(tmp_path / "ex", "doc", steps=10, variants=0, backend="spark")
    with pytest.raises(ExperimentError, match=r"execution.backend: expected one of local, dask"):
        load_experiment(path)


def test_the_bundle_ships_contents_by_hash_and_rebuilds_the_layout(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    files = [tmp_path / "ex" / "simulation.yaml", tmp_path / "ex" / "drivetrain.xml"]
    bundle = collect_bundle(files)
    copy_root = bundle.materialize(tmp_path / "cache")
    assert copy_root.name == bundle.digest
    for file in files:
        assert (copy_root / file.name).read_bytes() == file.read_bytes()
    assert bundle.materialize(tmp_path / "cache") == copy_root  # written once


def test_the_local_default_never_imports_dask(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    path = _experiment(tmp_path / "ex", "plain", steps=20, variants=1)
    run_without_dask(["experiment", "run", str(path), "--output", str(tmp_path / "out.json")],
                     tmp_path)
