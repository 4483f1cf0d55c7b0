"""Tracing through the instance's columns (SampleBlock) writes what the record path wrote.

A SimulationInstance with a TraceWriter keeps the samples only the trace hears as columns and
hands them over in SampleBlocks; the writer lays them out from the columns. The trace must be
the one the record-by-record path (``write_many`` of DeviceOutputs, what it did before) writes,
message for message: topic, log time, sequence and payload bytes; and readable by rosbags,
mcap_ros2 and ``pymcap-cli doctor``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from fibril_sim_core.records import DeviceOutput, ExternalInput
from fibril_sim_core.sample_block import DeviceColumns, SampleBlock, TraceBuffer
from fibril_sim_core.trace import TraceReader, TraceWriter
from mcap.reader import make_reader
from test_trace import assert_doctor_ok
from test_trace_payloads import _reference

from fibril_sim_core import SimulationBuilder
from _patience import patience

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config/examples/drivetrain/simulation.yaml"
MOTOR = "fibril_sim/motor_command/v1"


class _RecordPath:
    """A TraceWriter seen without ``write_block``: the instance hands over record lists."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer

    def write(self, record: object) -> None:
        self.writer.write(record)  # type: ignore[arg-type]

    def write_many(self, records: list) -> None:
        self.writer.write_many(records)


def _messages(mcap: Path) -> list[tuple[str, int, int, bytes]]:
    """(topic, log time, sequence, payload) of every message, in sequence (write) order."""
    out = []
    with mcap.open("rb") as stream:
        for _, channel, message in make_reader(stream, validate_crcs=True).iter_messages(
                log_time_order=False):
            out.append((channel.topic, message.log_time, message.sequence, bytes(message.data)))
    out.sort(key=lambda m: m[2])
    return out


def _drive(instance, script) -> None:
    for step in script:
        if isinstance(step, int):
            instance.advance(step)
        elif isinstance(step, ExternalInput):
            instance.enqueue(step)
        else:
            step(instance)


def _trace(plan, folder: Path, script, *, columns: bool, seed: int = 2
           ) -> tuple[Path, TraceWriter]:
    writer = TraceWriter(folder, provenance=dict(plan.provenance), layout=dict(plan.layout))
    instance = plan.create_instance(seed=seed, collect=False,
                                    trace=writer if columns else _RecordPath(writer))
    assert (instance._listeners.trace_columns is not None) is columns  # the path under test
    _drive(instance, script)
    writer.close()
    return folder / f"{folder.name}.mcap", writer


def _assert_same_trace(plan, tmp_path: Path, script, seed: int = 2) -> list:
    """Columns and records give the same messages; both match the generic serializer's
    payloads of the records a subscriber gets. Returns those records."""
    new, writer = _trace(plan, tmp_path / "columns", script, columns=True, seed=seed)
    old, _ = _trace(plan, tmp_path / "records", script, columns=False, seed=seed)
    got, want = _messages(new), _messages(old)
    assert len(got) == len(want) == writer.record_count
    assert got == want
    heard: list = []
    instance = plan.create_instance(seed=seed, collect=False,
                                    snapshot_every=plan.manifest.trace.state_every_steps)
    instance.subscribe(heard.append)
    _drive(instance, script)
    traced = [m for m in got if m[0] != "/fibril/episodes"]
    records = [r for r in heard if type(r).__name__ != "EpisodeStart"]
    assert [(topic, data) for topic, _, _, data in traced] == [_reference(r) for r in records]
    return records


def test_drivetrain_traced_through_columns_is_the_record_path_bit_for_bit(
        tmp_path: Path) -> None:
    plan = SimulationBuilder().build(DRIVETRAIN)
    script = [
        1500,
        ExternalInput("motor/command", 1, MOTOR, {"mode": "voltage", "value": -3.0},
                      '{"mode": "voltage", "value": -3.0}'),
        5000,  # more than one hand-over (4096 records)
        lambda instance: instance.reset(seed=7),
        333, 1, 2,
    ]
    records = _assert_same_trace(plan, tmp_path, script)
    episodes = {r.episode for r in records if isinstance(r, DeviceOutput)}
    assert episodes == {0, 1}
    # readers of the columns' trace
    path = tmp_path / "columns"
    assert_doctor_ok(path / "columns.mcap")
    reader = TraceReader(path)
    outputs = [r for r in records if isinstance(r, DeviceOutput)]
    read = list(reader.device_outputs())
    assert len(read) == len(outputs)
    key = lambda r: (r.session_delivery_time_ns, r.device_id, r.acquisition_tick)
    for a, b in zip(sorted(read, key=key), sorted(outputs, key=key), strict=True):
        assert (a.device_id, a.episode, a.acquisition_tick, a.session_acquisition_time_ns,
                a.delivery_time_ns) == (b.device_id, b.episode, b.acquisition_tick,
                                        b.session_acquisition_time_ns, b.delivery_time_ns)
        assert np.array_equal(a.values, b.values)


def test_rosbags_and_mcap_ros2_read_the_columns_trace(tmp_path: Path) -> None:
    from mcap_ros2.decoder import DecoderFactory
    from rosbags.rosbag2 import Reader

    plan = SimulationBuilder().build(DRIVETRAIN)
    path, writer = _trace(plan, tmp_path / "bag", [3000], columns=True)
    with Reader(tmp_path / "bag") as bag:
        assert bag.message_count == writer.record_count
        topics = {c.topic for c in bag.connections}
    assert "/fibril/devices/wheel_encoder" in topics
    with path.open("rb") as stream:
        decoded = list(make_reader(stream, decoder_factories=[DecoderFactory()])
                       .iter_decoded_messages(topics=["/fibril/devices/wheel_encoder"]))
    assert len(decoded) == 1500
    assert [m.device_id for *_, m in decoded[:2]] == ["wheel_encoder"] * 2
    assert decoded[1][3].acquisition_episode_time_ns == 2_000_000


def test_lidar_scene_traced_through_columns_is_the_record_path_bit_for_bit(
        tmp_path: Path) -> None:
    """Variable devices: a lidar, delayed samples (kept as records), a digital input, and a
    subscriber joining mid-run (the trace then takes records again)."""
    from _models import SCENE_XML, build, device

    (tmp_path / "plan").mkdir()
    plan = build(tmp_path / "plan", SCENE_XML, [
        device("imu", "imu", {"site": "block_imu"}, period=0.002, gyro_noise=0.01,
               accel_noise=0.2, latency=0.003),
        device("pose", "body_kinematics", {"body": "block"}, period=0.003,
               position_noise=0.01),
        device("hit", "rangefinder", {"site": "range_x"}, noise=0.01),
        device("miss", "rangefinder", {"site": "range_up"}, period=0.002, noise=0.01),
        device("touch", "digital_input", {"geom": "block_geom"}, period=0.002,
               mode="contact"),
        device("scan", "planar_lidar", {"site": "range_x"}, period=0.005, rays=16,
               noise=0.02, latency=0.001),
    ], trace={"state_every_steps": 7})
    script = [900, lambda instance: instance.subscribe(lambda record: None), 4500]
    records = _assert_same_trace(plan, tmp_path, script, seed=5)
    assert {r.device_id for r in records if isinstance(r, DeviceOutput)} == {
        "imu", "pose", "hit", "miss", "touch", "scan"}


def test_unusual_values_fall_back_to_records(tmp_path: Path) -> None:
    """A block whose samples are not 1-D arrays of one size (a custom device) is laid out
    record by record, with the same payloads."""
    specs = (DeviceColumns("grid", "t/grid/v1", ("a", "b", "c", "d"), "cam", 1),
             DeviceColumns("list", "t/list/v1", ("x",), "", 0),
             DeviceColumns("ragged", "t/ragged/v1", (), "", 0),
             DeviceColumns("scalar", "t/scalar/v1", ("s",), "", 2))
    buffer = TraceBuffer(specs)
    for tick in range(100):
        buffer.ticks[0].append(tick)
        buffer.values[0].append(np.arange(4.0).reshape(2, 2) + tick)
        buffer.order.append(0)
        buffer.ticks[1].append(tick)
        buffer.values[1].append([float(tick)])  # type: ignore[arg-type]
        buffer.order.append(1)
        buffer.ticks[2].append(tick)
        buffer.values[2].append(np.ones(1 + tick % 3))
        buffer.order.append(2)
        buffer.ticks[3].append(tick)
        buffer.values[3].append(np.array(tick / 3))  # 0-d
        buffer.order.append(3)
    block = buffer.take(3, 10**9, 1_000_000)
    assert not buffer.order and not buffer.ticks[0] and len(block) == 400
    with TraceWriter(tmp_path / "block", provenance={}, layout={}) as writer:
        writer.write_block(block)
        with pytest.raises(TypeError, match="takes a SampleBlock"):
            writer.write_block(list(block.order))  # type: ignore[arg-type]
    got = _messages(tmp_path / "block" / "block.mcap")
    want = []
    for tick in range(100):
        for spec, values in zip(specs, (np.arange(4.0).reshape(2, 2) + tick, [float(tick)],
                                        np.ones(1 + tick % 3), np.array([tick / 3])),
                                strict=True):
            want.append(_reference(DeviceOutput(
                3, spec.device_id, spec.sample_type, tick, tick * 10**6,
                (tick + spec.latency_ticks) * 10**6, 10**9 + tick * 10**6,
                10**9 + (tick + spec.latency_ticks) * 10**6, np.asarray(values, float),
                spec.component_names, spec.frame_id)))
    assert [(topic, data) for topic, _, _, data in got] == want
    assert [sequence for _, _, sequence, _ in got] == list(range(400))


def test_sample_block_records_are_counted_and_refused_after_close(tmp_path: Path) -> None:
    from fibril_sim_core.errors import TraceError

    buffer = TraceBuffer(())
    writer = TraceWriter(tmp_path / "t", provenance={}, layout={})
    buffer.other(DeviceOutput(0, "d", "s", 0, 0, 0, 0, 0, np.zeros(1), ("x",), ""))
    block = buffer.take(0, 0, 1)
    writer.write_block(block)
    writer.write_block(SampleBlock([], [], (), [], [], 0, 0, 1))  # nothing: a no-op
    assert writer.record_count == 1
    writer.close()
    with pytest.raises(TraceError, match="closed"):
        writer.write_block(block)
    assert len(_messages(tmp_path / "t" / "t.mcap")) == 1


def _encoder_buffer() -> TraceBuffer:
    return TraceBuffer((DeviceColumns("enc", "t/enc/v1", ("p", "v"), "wheel", 1),))


def _take(buffer: TraceBuffer, ticks: range, episode: int = 0) -> SampleBlock:
    """The block of ``buffer``'s encoder samples at ``ticks`` (as the instance keeps them)."""
    for tick in ticks:
        buffer.ticks[0].append(tick)
        buffer.values[0].append(np.array([tick * 0.5, -1.0]))
        buffer.order.append(0)
    return buffer.take(episode, 0, 1_000_000)


def _block(ticks: range, episode: int = 0) -> SampleBlock:
    return _take(_encoder_buffer(), ticks, episode)


def test_records_written_one_by_one_keep_their_place_before_a_block(
        tmp_path: Path, monkeypatch) -> None:
    """A block written while single records wait for the worker goes after them (its
    sequence numbers follow theirs), whoever lays it out."""
    from fibril_sim_core.trace import writer as writer_module

    monkeypatch.setattr(writer_module, "_LAY_OUT_HERE", 1)  # small blocks laid out here
    first = DeviceOutput(0, "other", "t/o/v1", 0, 0, 0, 0, 0, np.zeros(2), ("a", "b"), "")
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as writer:
        writer.write(first)
        writer.write_block(_block(range(200)))
        writer.flush()
        writer.write_block(_block(range(200, 300)))  # nothing waits: laid out here
        writer.write(first._replace(acquisition_tick=1))
    got = _messages(tmp_path / "t" / "t.mcap")
    assert [m[2] for m in got] == list(range(302))
    assert got[0][0] == got[-1][0] == "/fibril/devices/other"
    assert {m[0] for m in got[1:-1]} == {"/fibril/devices/enc"}


def test_an_interrupted_lay_out_loses_no_record(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C while write_block lays a block out in the stepping thread: the block goes to the
    worker instead, and the trace closed afterwards holds every record once, in order."""
    from fibril_sim_core.trace import encoder
    from fibril_sim_core.trace import writer as writer_module

    monkeypatch.setattr(writer_module, "_LAY_OUT_HERE", 1)  # small blocks laid out here
    real = encoder.Encoder.encode_block
    calls = {"n": 0}

    def interrupted(self, block, *rest):  # the second lay-out is interrupted
        calls["n"] += 1
        if calls["n"] == 2:
            real(self, block, *rest)  # even after the work is done, before it is queued
            raise KeyboardInterrupt
        return real(self, block, *rest)

    monkeypatch.setattr(encoder.Encoder, "encode_block", interrupted)
    writer = TraceWriter(tmp_path / "t", provenance={}, layout={"timestep_ns": 1_000_000})
    writer.write_block(_block(range(100)))
    with pytest.raises(KeyboardInterrupt):
        writer.write_block(_block(range(100, 200)))
    writer.write_block(_block(range(200, 300)))
    assert writer.record_count == 300
    writer.close()
    got = _messages(tmp_path / "t" / "t.mcap")
    assert [m[2] for m in got] == list(range(300))
    assert [m[1] for m in got] == [(tick + 1) * 1_000_000 for tick in range(300)]
    assert TraceReader(tmp_path / "t").message_count == 300


def test_frame_sized_hand_overs_are_joined_bit_for_bit(tmp_path: Path) -> None:
    """A runtime advances a frame at a time: its small blocks are joined by the worker (across
    a reset too, which starts a new block) and give the record path's trace."""
    plan = SimulationBuilder().build(DRIVETRAIN)
    script: list = [10] * 150 + [lambda instance: instance.reset()] + [7] * 100
    _assert_same_trace(plan, tmp_path, script)


def test_records_written_between_frame_blocks_are_laid_out_with_them(
        tmp_path: Path, monkeypatch) -> None:
    """A runtime writes its FrameTiming one by one between the frames' blocks: the worker lays
    a run of them out at once (one lay-out per frame held the GIL often enough to delay
    real-time frames by tens of ms), and every record keeps its place."""
    from fibril_sim_core.trace import encoder

    real = encoder.Encoder.encode_block_steps
    sizes: list[int] = []

    def counted(self, block):
        sizes.append(len(block))
        return real(self, block)

    monkeypatch.setattr(encoder.Encoder, "encode_block_steps", counted)
    single = DeviceOutput(0, "other", "t/o/v1", 0, 0, 0, 0, 0, np.zeros(2), ("a", "b"), "")
    buffer = _encoder_buffer()
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as writer:
        for frame in range(100):  # faster than the worker's poll: they wait together
            writer.write_block(_take(buffer, range(frame * 10, frame * 10 + 10)))
            writer.write(single._replace(acquisition_tick=frame))
    got = _messages(tmp_path / "t" / "t.mcap")
    assert [m[2] for m in got] == list(range(1100))
    assert [m[0] for m in got[:11]] == ["/fibril/devices/enc"] * 10 + ["/fibril/devices/other"]
    assert [m[1] for m in got if m[0] == "/fibril/devices/enc"] == [
        (tick + 1) * 1_000_000 for tick in range(1000)]
    assert len(sizes) < 10 and sum(sizes) == 1100, sizes


def _paced_session(writer: TraceWriter, idle: bool) -> None:
    """What a real-time runtime hands a trace: a frame's small block, then its record written
    one by one, then record lists (another listener), 300 frames; with ``idle``, the producer
    offers its idle time after every frame (as the host does between real-time frames)."""
    single = DeviceOutput(0, "other", "t/o/v1", 0, 0, 0, 0, 0, np.zeros(2), ("a", "b"), "")
    buffer = _encoder_buffer()
    for frame in range(300):
        if frame < 150:
            writer.write_block(_take(buffer, range(frame * 3, frame * 3 + 3)))
            writer.write(single._replace(acquisition_tick=frame))
        else:
            writer.write_many([single._replace(acquisition_tick=frame, values=np.ones(2) * k)
                               for k in range(3)])
        if idle:
            writer.serialize_until(time.perf_counter() + 0.01)


def _encoding_threads(monkeypatch) -> list[tuple[str, int]]:
    """(thread name, records) of every Encoder call from now on."""
    import threading

    from fibril_sim_core.trace import encoder

    calls: list[tuple[str, int]] = []
    for name in ("encode_steps", "encode_block_steps"):
        real = getattr(encoder.Encoder, name)

        def wrapper(self, batch, _real=real):
            calls.append((threading.current_thread().name, len(batch)))
            return _real(self, batch)

        monkeypatch.setattr(encoder.Encoder, name, wrapper)
    return calls


def test_a_paced_producer_serializes_in_its_idle_time_bit_for_bit(
        tmp_path: Path, monkeypatch) -> None:
    """serialize_until encodes the queue's front in the caller's thread (a real-time host's
    idle time, so the worker's Python never holds the GIL when stepping resumes); the worker
    leaves such a trickle to it. The trace is the one the worker alone writes, byte for
    byte."""
    from fibril_sim_core.trace import writer as writer_module

    with TraceWriter(tmp_path / "worker", provenance={}, layout={}) as writer:
        _paced_session(writer, idle=False)
    monkeypatch.setattr(writer_module, "_HELP_WINDOW", 60.0)  # however slow this machine is
    calls = _encoding_threads(monkeypatch)
    with TraceWriter(tmp_path / "idle", provenance={}, layout={}) as writer:
        _paced_session(writer, idle=True)
        here = sum(n for thread, n in calls if thread == "MainThread")
    want = _messages(tmp_path / "worker" / "worker.mcap")
    assert _messages(tmp_path / "idle" / "idle.mcap") == want
    assert len(want) == 150 * 4 + 150 * 3
    # every batch of _IDLE_RECORDS, or _IDLE_AGE old, was taken here; at most the last
    # ones were left to the worker's close
    assert here >= len(want) - writer_module._IDLE_RECORDS, calls


def test_no_idle_time_or_too_little_to_do_leaves_the_queue_to_the_worker(
        tmp_path: Path, monkeypatch) -> None:
    """A deadline too close, or a few records just after a batch, are not worth starting: the
    caller encodes nothing then, and every record still reaches the trace (the worker's
    flush)."""
    from fibril_sim_core.trace import writer as writer_module

    monkeypatch.setattr(writer_module, "_HELP_WINDOW", 60.0)
    monkeypatch.setattr(writer_module, "_IDLE_AGE", 60.0)  # no stale step, however slow
    calls = _encoding_threads(monkeypatch)
    single = DeviceOutput(0, "other", "t/o/v1", 0, 0, 0, 0, 0, np.zeros(2), ("a", "b"), "")
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as writer:
        writer.write_many([single._replace(acquisition_tick=k) for k in range(500)])
        writer.serialize_until(time.perf_counter())  # no idle time
        writer.serialize_until(time.perf_counter() + 1e-5)  # too little
        assert not calls
        batch = writer_module._IDLE_RECORDS
        writer.serialize_until(time.perf_counter() + 1.0)  # batches while a batch waits
        assert calls == [("MainThread", batch)] * (500 // batch)
        writer.serialize_until(time.perf_counter() + 1.0)  # fewer left, just after a batch
        assert len(calls) == 500 // batch
        writer.flush()  # the worker's, though the producer helps
        assert sum(n for _, n in calls) == 500
        assert calls[-1][0] != "MainThread"
        writer.write_many([single._replace(acquisition_tick=k) for k in range(500, 510)])
        writer.serialize_until(time.perf_counter() + 1.0)  # 10 records, just after a batch
        assert sum(n for _, n in calls) == 500
    got = _messages(tmp_path / "t" / "t.mcap")
    assert [m[2] for m in got] == list(range(510))
    assert [name for name, _ in calls[-1:]] != ["MainThread"]  # the close took the last 10


def test_a_step_is_tried_when_none_was_for_a_while(tmp_path: Path, monkeypatch) -> None:
    """The mean cost of a step decides whether one fits; one that grew too large (a slow
    step) would keep the producer from ever trying again: after ``_IDLE_AGE`` without a step,
    one is made in whatever idle time there is."""
    from fibril_sim_core.trace import writer as writer_module

    monkeypatch.setattr(writer_module, "_HELP_WINDOW", 60.0)
    monkeypatch.setattr(writer_module, "_IDLE_AGE", 1.0)  # not reached before the sleep
    calls = _encoding_threads(monkeypatch)
    single = DeviceOutput(0, "other", "t/o/v1", 0, 0, 0, 0, 0, np.zeros(2), ("a", "b"), "")
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as writer:
        writer._step_cost = 1.0  # learnt from a step that took a second
        writer.write_many([single._replace(acquisition_tick=k) for k in range(100)])
        writer.serialize_until(time.perf_counter() + 0.01)
        assert not calls
        time.sleep(writer_module._IDLE_AGE)
        writer.serialize_until(time.perf_counter() + 0.01)
        assert calls == [("MainThread", writer_module._IDLE_RECORDS)]
        assert writer._step_cost < 1.0
    assert len(_messages(tmp_path / "t" / "t.mcap")) == 100


def test_join_keeps_order_and_columns() -> None:
    a, b = _block(range(3)), _block(range(3, 5))
    assert not a.joins(b)  # two buffers: other devices tuples
    buffer = TraceBuffer((DeviceColumns("enc", "t", (), "", 0),))
    buffer.ticks[0].append(1)
    buffer.values[0].append(np.zeros(1))
    buffer.order.append(0)
    first = buffer.take(0, 0, 1)
    buffer.other("x")
    second = buffer.take(0, 0, 1)
    third = buffer.take(1, 5, 1)
    assert first.joins(second) and not second.joins(third)
    joined = SampleBlock.join([first, second])
    assert joined.order == [0, -1] and joined.others == ["x"] and joined.ticks == [[1]]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_leaves_a_complete_columns_trace(tmp_path: Path, signum: int) -> None:
    """SIGINT / SIGTERM while an instance steps with a columns trace: the trace is closed
    complete (summary, metadata.yaml, doctor), and every device's samples run without a gap
    from tick 0 (at most the samples of the interrupted hand-over are missing, at the end)."""
    path = tmp_path / "signalled"
    script = textwrap.dedent(f"""
        import signal, sys
        def stop(signum, frame):
            raise KeyboardInterrupt(signum)
        signal.signal(signal.SIGINT, stop)  # whatever this process inherited
        signal.signal(signal.SIGTERM, stop)
        from fibril_sim_core import SimulationBuilder
        from fibril_sim_core.trace import TraceWriter
        plan = SimulationBuilder().build({str(DRIVETRAIN)!r})
        writer = TraceWriter(sys.argv[1], provenance={{"run": "signal"}},
                             layout=dict(plan.layout))
        try:
            instance = plan.create_instance(seed=1, trace=writer, collect=False)
            while True:
                instance.advance(997)
                print(instance.tick, flush=True)
        finally:
            writer.close()
        """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO / "fibril_sim_core"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        reached = 0
        for line in proc.stdout:
            reached = int(line)
            if reached >= 10_000:
                break
        assert reached >= 10_000, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=patience(20))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in stderr
    assert_doctor_ok(path / "signalled.mcap")
    with TraceReader(path) as reader:
        assert not reader.truncated and not reader.problems
        import yaml

        meta = yaml.safe_load((path / "metadata.yaml").read_text())
        assert meta["rosbag2_bagfile_information"]["message_count"] == reader.message_count > 0
        ticks: dict[str, list[int]] = {}
        for output in reader.device_outputs():
            ticks.setdefault(output.device_id, []).append(output.acquisition_tick)
        periods = {"wheel_encoder": 2, "chassis_imu": 5, "front_range": 20,
                   "chassis_pose": 10, "drive_feedback": 2}
        assert ticks.keys() == periods.keys()
        for device, got in ticks.items():
            got.sort()
            assert got == list(range(0, periods[device] * len(got), periods[device])), device
            assert got[-1] >= reached - 4096 - periods[device], device


def test_with_another_listener_the_trace_gets_record_lists(tmp_path: Path) -> None:
    """While someone else listens every record is an object anyway: they go to the writer as
    lists (its batch encoder is the cheaper one for them; laying them out as blocks made
    the node's real-time frames late), and as blocks again once the trace alone listens."""
    calls: list[str] = []

    class Writer:
        def write(self, record: object) -> None:
            calls.append("write")

        def write_many(self, records: list) -> None:
            calls.append("many")

        def write_block(self, block: SampleBlock) -> None:
            calls.append("block")

    plan = SimulationBuilder().build(DRIVETRAIN)
    instance = plan.create_instance(seed=1, collect=False, trace=Writer())
    heard: list = []
    instance.subscribe(heard.append)
    instance.advance(50)
    assert heard and calls and set(calls) == {"many"}
    instance._listeners.subscribers.remove(heard.append)  # (no public unsubscribe)
    instance._listeners.update()
    calls.clear()
    instance.advance(50)
    assert calls == ["block"]
