"""Damaged and truncated traces are never read silently wrong (issue 11 items 3 and 5).

A damaged chunk, summary or metadata file is a one-line TraceError naming the file, the chunk
and the session-time range; ``salvage`` returns what is intact and lists what is missing. A
trace whose writer was SIGKILLed stays readable up to its last complete chunk.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from fibril_sim_core.errors import TraceError
from fibril_sim_core.records import StateSnapshot
from fibril_sim_core.trace import TraceWriter
from fibril_sim_core.trace.mcap_file import McapIndex
from fibril_sim_core.trace.query import query
from fibril_sim_core.trace.reader import TraceReader, TraceWarning

from _patience import patience

REPO = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(str(REPO / p) for p in (
    "fibril_sim_core", "fibril_calibration", "fibril_sim_ros"))
LAYOUT = {"timestep_ns": 1_000_000, "bodies": ["world", "b"],
          "joints": [{"name": "j", "type": "hinge", "qposadr": 0, "dofadr": 0}]}
TICKS, PER_CHUNK = 500, 100


def _snapshot(tick: int) -> StateSnapshot:
    value = np.array([float(tick)])
    return StateSnapshot(0, tick, tick * 1_000_000, tick * 1_000_000, value, -value, np.empty(0),
                         value, value, value, np.zeros((2, 3)) + tick, np.ones((2, 4)))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """500 snapshots in 5 chunks of 100 (one per 100 ms of session time)."""
    path = tmp_path_factory.mktemp("integrity") / "run"
    with TraceWriter(path, provenance={"run": 1}, layout=LAYOUT) as writer:
        for tick in range(TICKS):
            writer.write(_snapshot(tick))
            if tick % PER_CHUNK == PER_CHUNK - 1:
                writer.flush()
    assert len(McapIndex(path / "run.mcap").chunks) == TICKS // PER_CHUNK
    return path


def _copy(pristine: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(pristine, target)
    return target


def _ticks(path: Path, salvage: bool = False) -> list[int]:
    return [int(row[2]) for row in query(path, "joint:j.position", salvage=salvage).rows]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fibril_sim_core.cli", *args], capture_output=True, text=True,
        timeout=60, check=False, env=dict(os.environ, PYTHONPATH=PYTHONPATH))


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fibril_sim: error: "), proc.stderr
    return lines[0]


def test_pristine_trace_reads_whole(pristine: Path) -> None:
    assert _ticks(pristine) == list(range(TICKS))
    with TraceReader(pristine) as reader:
        assert reader.problems == [] and not reader.truncated


def test_corrupted_chunk_is_an_error_naming_file_chunk_and_time(pristine: Path,
                                                                tmp_path: Path) -> None:
    path = _copy(pristine, tmp_path)
    mcap = path / "run.mcap"
    chunk = McapIndex(mcap).chunks[2]
    data = bytearray(mcap.read_bytes())
    middle = chunk.offset + chunk.length // 2
    data[middle:middle + 8] = bytes(b ^ 0x5A for b in data[middle:middle + 8])
    mcap.write_bytes(bytes(data))
    with pytest.raises(TraceError) as info:
        query(path, "joint:j.position")
    text = str(info.value)
    assert "\n" not in text
    assert str(mcap) in text and "chunk 2" in text
    assert "0.200000 s to 0.299000 s" in text and "trace query --salvage" in text

    line = _one_line_error(_cli("trace", "query", str(path), "joint:j.position"))
    assert "chunk 2" in line

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _ticks(path, salvage=True) == [*range(200), *range(300, TICKS)]
    assert any(issubclass(w.category, TraceWarning) and "chunk 2" in str(w.message)
               for w in caught)
    proc = _cli("trace", "query", str(path), "joint:j.position", "--salvage")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 + TICKS - PER_CHUNK
    warning, = proc.stderr.strip().splitlines()
    assert warning.startswith("fibril_sim: warning: ") and "chunk 2" in warning
    assert "0.200000 s to 0.299000 s" in warning and "missing" in warning


def test_no_flipped_byte_is_read_silently_wrong(pristine: Path, tmp_path: Path) -> None:
    """Flip bytes all over the file: every read either fails cleanly or is exactly right."""
    good = query(pristine, "joint:j.velocity").rows
    size = (pristine / "run.mcap").stat().st_size
    original = (pristine / "run.mcap").read_bytes()
    path = _copy(pristine, tmp_path)
    mcap = path / "run.mcap"
    failures = 0
    for position in np.linspace(0, size - 1, 160).astype(int).tolist():
        data = bytearray(original)
        data[position] ^= 0xFF
        mcap.write_bytes(bytes(data))
        try:
            rows = query(path, "joint:j.velocity").rows
        except TraceError as exc:
            assert "\n" not in str(exc)
            failures += 1
            continue
        assert rows == good, f"byte {position} flipped: read wrong data without an error"
    assert failures > 100


def test_damaged_metadata_yaml_is_one_line(pristine: Path, tmp_path: Path) -> None:
    path = _copy(pristine, tmp_path)
    metadata = path / "metadata.yaml"
    text = metadata.read_bytes()
    metadata.write_bytes(text[:40] + b"\xff\xfe" + text[42:])
    with pytest.raises(TraceError, match=r"metadata.yaml: not UTF-8 text \(byte 40\)"):
        TraceReader(path)
    assert "not UTF-8" in _one_line_error(_cli("trace", "query", str(path), "joint:j.position"))
    metadata.write_bytes(text[: len(text) // 3])  # cut in the middle of a quoted string
    line = _one_line_error(_cli("trace", "query", str(path), "joint:j.position"))
    assert "metadata.yaml" in line


def test_missing_metadata_yaml_uses_the_mcap_copy(pristine: Path, tmp_path: Path) -> None:
    path = _copy(pristine, tmp_path)
    (path / "metadata.yaml").unlink()
    with TraceReader(path) as reader:
        assert reader.provenance == {"run": 1}
        assert [s.tick for s in reader.snapshots()] == list(range(TICKS))


def test_truncated_trace_needs_salvage_and_says_where(pristine: Path, tmp_path: Path) -> None:
    path = _copy(pristine, tmp_path)
    mcap = path / "run.mcap"
    chunks = McapIndex(mcap).chunks
    cut = chunks[3].offset + chunks[3].length // 2  # inside chunk 3: chunks 0-2 complete
    mcap.write_bytes((pristine / "run.mcap").read_bytes()[:cut])
    with pytest.raises(TraceError, match=r"truncated after session time 0\.299000 s.*--salvage"):
        TraceReader(path)
    with pytest.warns(TraceWarning, match="truncated after session time 0.299000 s"):
        reader = TraceReader(path, salvage=True)
    with reader:
        assert reader.truncated
        assert [s.tick for s in reader.snapshots()] == list(range(300))
        assert reader.topics == {"/fibril/state": 300}
    proc = _cli("trace", "query", str(path), "joint:j.position", "--salvage")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 301
    assert "truncated after session time 0.299000 s" in proc.stderr
    _one_line_error(_cli("trace", "query", str(path), "joint:j.position"))


SIGKILL_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from fibril_sim_core import SimulationBuilder
    from fibril_sim_core.trace import TraceWriter
    plan = SimulationBuilder().build(Path(sys.argv[2]))
    writer = TraceWriter(sys.argv[1], provenance=dict(plan.provenance), layout=dict(plan.layout))
    instance = plan.create_instance(seed=1, trace=writer, collect=False)
    start = time.monotonic()
    while True:
        instance.advance(100)
        if time.monotonic() - start > 1.5:
            print(instance.tick, flush=True)
            start = float("inf")
""")


def test_sigkilled_writer_leaves_a_readable_trace(tmp_path: Path) -> None:
    path = tmp_path / "killed"
    manifest = REPO / "config/examples/drivetrain/simulation.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGKILL_SCRIPT, str(path), str(manifest)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=PYTHONPATH))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # after 1.5 s of stepping
        assert line, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=patience(10))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert (path / "metadata.yaml").is_file()
    with pytest.raises(TraceError, match=r"killed\.mcap: trace is truncated after session time"):
        TraceReader(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        with TraceReader(path, salvage=True) as reader:
            assert reader.truncated and "truncated after" in reader.problems[0]
            ticks = [s.tick for s in reader.snapshots()]
            encoder = [o.acquisition_tick for o in reader.device_outputs("wheel_encoder")]
    # Everything up to the last complete chunk, contiguous from the start: at least a second
    # of simulated time made it (chunks reach the disk at least every 0.5 s of wall time).
    assert ticks == list(range(0, 10 * len(ticks), 10)) and len(ticks) >= 100
    assert encoder == list(range(0, 2 * len(encoder), 2))
    proc2 = _cli("trace", "query", str(path), "device:wheel_encoder", "--salvage")
    assert proc2.returncode == 0 and "truncated after" in proc2.stderr
    assert len(proc2.stdout.splitlines()) == len(encoder) + 1


def test_a_failing_disk_fails_every_later_write(tmp_path: Path, monkeypatch) -> None:
    from fibril_sim_core.trace import mcap_file

    def full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mcap_file.McapFile, "write_chunk", full)
    writer = TraceWriter(tmp_path / "full", provenance={}, layout=LAYOUT)
    writer.write(_snapshot(0))
    with pytest.raises(TraceError, match="writing the trace failed.*No space left"):
        writer.flush()
    for tick in range(3):  # the failure is sticky, and nothing piles up in memory
        with pytest.raises(TraceError, match="No space left"):
            for _ in range(1024):
                writer.write(_snapshot(tick))
    with pytest.raises(TraceError, match="No space left"):
        writer.close()
    writer.close()  # idempotent
