"""Clean shutdown of every long-running command on SIGINT and SIGTERM (real processes).

The host stops at a tick boundary, the trace is closed complete (MCAP summary and index,
metadata.yaml), unfinished results are not written, the process exits within 2 s with 130 /
143. A second signal forces exit. A run started with SIGINT ignored still stops on SIGTERM.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _children import EXAMPLE, MANIFEST, Child, environment, wait_for
from _patience import patience
from mcap.reader import make_reader

from fibril_sim_core.trace import TraceReader


def _assert_complete_trace(trace: Path) -> int:
    """A finished bag: metadata.yaml, an MCAP with footer, summary and chunk index, readable
    by TraceReader; returns its message count."""
    assert (trace / "metadata.yaml").is_file()
    (mcap,) = trace.glob("*.mcap")
    with mcap.open("rb") as stream:
        summary = make_reader(stream).get_summary()
    assert summary is not None and summary.statistics is not None
    assert summary.chunk_indexes, "no chunk index"
    with TraceReader(trace) as reader:
        assert reader.message_count == summary.statistics.message_count > 0
        assert [e.episode for e in reader.episodes()] == [0]
    return summary.statistics.message_count


def _started(trace: Path) -> bool:
    return bool(list(trace.glob("*.mcap")))


@pytest.mark.parametrize(("signum", "code", "verb"), [(signal.SIGTERM, 143, "terminated"),
                                                      (signal.SIGINT, 130, "interrupted")])
def test_run_stops_cleanly(tmp_path: Path, signum: int, code: int, verb: str) -> None:
    trace = tmp_path / "trace"
    child = Child(["run", MANIFEST, "--duration", "3600", "--trace", trace], tmp_path)
    try:
        wait_for(lambda: _started(trace), 60, "the run to start")
        time.sleep(1.5)
        assert child.process.poll() is None
        exit_code, seconds = child.stop(signum)
        err = child.stderr()
    finally:
        child.close()
    assert exit_code == code and seconds < patience(2.0), (seconds, err)
    assert re.fullmatch(rf"fibril_sim: {verb} at tick \d+; trace closed: {re.escape(str(trace))}\n",
                        err), err
    _assert_complete_trace(trace)


def test_run_with_sigint_ignored_stops_on_sigterm(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    child = Child(["run", MANIFEST, "--duration", "3600", "--trace", trace], tmp_path,
                  sigint=signal.SIG_IGN)
    try:
        wait_for(lambda: _started(trace), 60, "the run to start")
        child.process.send_signal(signal.SIGINT)  # a background job: Ctrl-C is not for it
        time.sleep(1.0)
        assert child.process.poll() is None
        exit_code, seconds = child.stop(signal.SIGTERM)
        err = child.stderr()
    finally:
        child.close()
    assert exit_code == 143 and seconds < patience(2.0), (seconds, err)
    assert "terminated at tick" in err and "Traceback" not in err
    _assert_complete_trace(trace)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_serve_stops_cleanly(tmp_path: Path, signum: int, code: int) -> None:
    trace = tmp_path / "trace"
    child = Child(["serve", MANIFEST, "--trace", trace, "--rtf", "5"], tmp_path)
    try:
        line = child.first_line()
        assert line.startswith("serving unix://")
        time.sleep(1.5)
        exit_code, seconds = child.stop(signum)
        err = child.stderr()
    finally:
        child.close()
    assert exit_code == code and seconds < patience(2.0), (seconds, err)
    assert re.search(r"at episode 0 tick \d+; trace closed: ", err), err
    socket = Path(line.split("unix://", 1)[1])
    assert not socket.exists()  # the server removed its socket
    assert _assert_complete_trace(trace) > 1000


SECOND_SIGNAL = """
import time
from fibril_sim_core._signals import ShutdownSignals
with ShutdownSignals(raise_interrupt=False) as signals:
    print("ready", flush=True)
    signals.wait()
    print("cleaning up", flush=True)
    time.sleep(30)  # a clean-up that takes too long
print("done", flush=True)
"""


def test_a_second_signal_forces_exit(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", SECOND_SIGNAL], env=environment(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGTERM)
        assert child.stdout.readline() == "cleaning up\n"
        start = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=patience(10))
    finally:
        if child.poll() is None:
            child.kill()
    assert time.monotonic() - start < patience(2.0)
    assert child.returncode == 130 and out == ""
    assert err == "fibril_sim: SIGINT again: exiting now\n"


def _experiment(tmp_path: Path, workers: int) -> Path:
    for name in ("simulation.yaml", "drivetrain.xml", "drive-start.yaml",
                 "damping-baseline.yaml"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    doc = yaml.safe_load((EXAMPLE / "wheel-damping-study.yaml").read_text())
    doc["execution"].update(steps=50_000_000, timeout_seconds=600.0, workers=workers)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("workers", [1, 2])
def test_experiment_run_stops_cleanly_without_a_result(tmp_path: Path, workers: int) -> None:
    study = _experiment(tmp_path, workers)
    output = tmp_path / "results.json"
    traces = tmp_path / "traces"
    child = Child(["experiment", "run", study, "--output", output, "--traces", traces],
                  tmp_path)
    try:
        wait_for(lambda: len(list(traces.glob("*/*.mcap"))) >= min(workers, 2), 90,
                 "the runs to start")
        time.sleep(1.0)
        exit_code, seconds = child.stop(signal.SIGTERM)
        err = child.stderr()
    finally:
        child.close()
    assert exit_code == 143 and seconds < patience(2.0), (seconds, err)
    assert err.rstrip().endswith("fibril_sim: terminated"), err
    assert "Traceback" not in err
    assert not output.exists()  # an unfinished experiment writes no result
    started = [p.parent for p in traces.glob("*/*.mcap")]
    assert started
    for trace in started:  # every started run's trace is complete and readable
        assert (trace / "metadata.yaml").exists(), (trace, err)
        with TraceReader(trace) as reader:
            assert reader.message_count > 0


def test_calibrate_stops_cleanly_without_a_result(tmp_path: Path) -> None:
    result, overlay = tmp_path / "result.json", tmp_path / "fit.json"
    child = Child(["calibrate", EXAMPLE / "calibration.yaml", "--output", result,
                   "--output-overlay", overlay], tmp_path, cwd=EXAMPLE)
    try:
        wait_for(lambda: child.stderr().strip() != "", 90, "calibration progress")
        time.sleep(1.0)
        assert child.process.poll() is None, child.stderr()
        exit_code, seconds = child.stop(signal.SIGTERM)
        err = child.stderr()
    finally:
        child.close()
    assert exit_code == 143 and seconds < patience(2.0), (seconds, err)
    assert err.rstrip().endswith("fibril_sim: terminated") and "Traceback" not in err, err
    assert not result.exists() and not overlay.exists()


def test_the_same_signal_twice_at_once_is_one_request_to_stop(tmp_path: Path) -> None:
    """Ctrl-C on ``ros2 launch`` in a terminal reaches the node twice (its process group and
    launch passing it on): the duplicate is ignored; the same signal later still forces exit."""
    child = subprocess.Popen([sys.executable, "-c", SECOND_SIGNAL], env=environment(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGINT)
        child.send_signal(signal.SIGINT)
        assert child.stdout.readline() == "cleaning up\n"
        time.sleep(0.3)
        assert child.poll() is None  # still cleaning up: the duplicate did not force exit
        time.sleep(1.0)
        child.send_signal(signal.SIGINT)  # a second request, a second later
        out, err = child.communicate(timeout=patience(10))
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130
    assert err == "fibril_sim: SIGINT again: exiting now\n"
