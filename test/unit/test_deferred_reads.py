"""Deferred reads of a traced run: what the trace gets is what reading one by one gives.

While only the trace listens, the devices that say what they read (``block_inputs``) are not
read at their boundaries: the instance copies those MjData values into a row and the device
computes a block of samples at hand-over (``acquire_block``). These tests hold it to the
record path bit for bit: per device against ``acquire`` (noise streams cut anywhere, state
carried across blocks, signed zeros), and end to end through mode changes (a subscriber
joining and going quiet, inputs, resets).
"""

from __future__ import annotations

import time
from pathlib import Path

import mujoco
import numpy as np
import pytest
from fibril_sim_core.records import DeviceOutput, ExternalInput
from fibril_sim_core.trace import TraceWriter
from test_trace_columns import MOTOR, _drive, _messages, _trace
from test_trace_payloads import _reference

from fibril_sim_core import SimulationBuilder

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config/examples/drivetrain/simulation.yaml"


def _bits(values: np.ndarray) -> bytes:
    """The exact bytes (tells 0.0 from -0.0)."""
    return np.ascontiguousarray(values, dtype=np.float64).tobytes()


def _fill(data: mujoco.MjData, rng: np.random.Generator, n: int) -> None:
    """Arbitrary sensor / actuator values, with the awkward ones an encoder rounds:
    negatives just below zero and exact halves of a count."""
    for name in ("sensordata", "actuator_force", "actuator_velocity"):
        array = getattr(data, name)
        array[:] = rng.normal(0.0, 2.0, array.shape[0])
    if n % 3 == 0:
        data.sensordata[:] = -1e-5
    elif n % 3 == 1:
        data.sensordata[:] = rng.integers(-50, 50) * (2 * np.pi / 1024) + np.pi / 1024


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The example, and its model with a quantizing rangefinder and a threshold input."""
    from _models import build, device

    folder = tmp_path_factory.mktemp("more")
    more = build(folder, (DRIVETRAIN.parent / "drivetrain.xml").read_text(), [
        device("ranged", "rangefinder", {"site": "range_front"}, noise=0.01, resolution=0.01,
               min_range=0.3, max_range=2.0),
        device("switch", "digital_input", {"joint": "wheel_joint"}, threshold=0.1,
               invert=True)])
    return {"example": SimulationBuilder().build(DRIVETRAIN), "more": more}


@pytest.mark.parametrize("plan_name, device_id", [
    ("example", "wheel_encoder"), ("example", "chassis_imu"), ("example", "chassis_pose"),
    ("example", "drive_feedback"), ("example", "front_range"), ("more", "ranged"),
    ("more", "switch")])
@pytest.mark.parametrize("cuts", [(1, 7, 1), (5000, 3000), (2, 4096, 1, 9000)])
def test_acquire_block_is_acquire_one_by_one(plans: dict, plan_name: str, device_id: str,
                                             cuts: tuple[int, ...]) -> None:
    """Blocks of any size (past the noise buffers' refills of 4096 draws), with single
    ``acquire`` calls between them: the same samples and the same state left behind."""
    plan = plans[plan_name]
    spec = next(d for d in plan.devices if d.id == device_id)
    one = spec.create(np.random.default_rng(11))
    blocks = spec.create(np.random.default_rng(11))
    inputs = blocks.block_inputs()
    assert inputs is not None
    data = mujoco.MjData(plan.model)
    rng = np.random.default_rng(3)
    n = 0
    for size in cuts:
        want, rows = [], []
        for _ in range(size):
            _fill(data, rng, n)
            n += 1
            rows.append(np.concatenate([getattr(data, name)[list(indices)]
                                        for name, indices in inputs]))
            want.append(one.acquire(plan.model, data))
        got = blocks.acquire_block(plan.model, np.array(rows))
        assert got.shape == (size, len(want[0]))
        assert _bits(got) == _bits(np.array(want))
        _fill(data, rng, n)  # a single read between blocks continues both alike
        assert _bits(blocks.acquire(plan.model, data)) == _bits(one.acquire(plan.model, data))


def test_normal1_many_continues_normal1() -> None:
    plan = SimulationBuilder().build(DRIVETRAIN)
    spec = next(d for d in plan.devices if d.id == "wheel_encoder")
    one = spec.create(np.random.default_rng(5))
    many = spec.create(np.random.default_rng(5))
    for count in (0, 3, 4093, 1, 8192, 4096, 5):
        want = [one.normal1() for _ in range(count)]
        assert many.normal1_many(count).tolist() == want
    assert many.normal1() == one.normal1()


def test_traced_drivetrain_defers_its_devices_and_reads_the_delayed_one(
        tmp_path: Path) -> None:
    """The example's devices delivered at once are deferred (not read at their
    boundaries); the rangefinder, delivered 2 ticks later, is read as before."""
    plan = SimulationBuilder().build(DRIVETRAIN)
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as trace:
        instance = plan.create_instance(seed=1, trace=trace, collect=False)
        device_reads = instance._device_reads
        deferred = {device_reads.specs[i].id for i, _ in device_reads.deferral.devices}
        assert deferred == {"wheel_encoder", "chassis_imu", "chassis_pose", "drive_feedback"}
        reads: dict[str, int] = {}

        def counting(read: tuple) -> tuple:
            acquire, device_id = read[0], read[1]

            def counted(model, data):
                reads[device_id] = reads.get(device_id, 0) + 1
                return acquire(model, data)
            return (counted, *read[1:])

        device_reads.reads[:] = [counting(read) for read in device_reads.reads]
        instance.advance(1000)
        assert device_reads.deferral.used == 0  # all handed over
    assert reads == {"front_range": 50}
    # samples (encoder, IMU, range, pose, feedback), states, the episode start, the
    # scenario's initial input and its application
    assert trace.record_count == 500 + 200 + 50 + 100 + 500 + 100 + 1 + 2


def test_short_advances_read_one_by_one(tmp_path: Path, monkeypatch) -> None:
    """Computing a block at hand-over has a fixed cost: an ``advance`` shorter than
    ``DEFER_TICKS`` (tick by tick, as an experiment with contact observers steps) reads
    every device at its tick, as before."""
    from fibril_sim_core.read_schedule import DEFER_TICKS, Deferral

    plan = SimulationBuilder().build(DRIVETRAIN)
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as trace:
        instance = plan.create_instance(seed=1, trace=trace, collect=False)
        computed: list[int] = []
        complete = Deferral.complete

        def counted(self, *args):
            computed.append(self.used)
            return complete(self, *args)

        monkeypatch.setattr(Deferral, "complete", counted)
        for _ in range(40):
            instance.advance(DEFER_TICKS - 1)
        assert not any(computed)  # nothing deferred
        instance.advance(DEFER_TICKS)
        assert sum(computed) > 0


def test_mode_changes_keep_the_trace_bit_for_bit(tmp_path: Path) -> None:
    """Deferred, then a subscriber (reads one by one), then that subscriber wanting nothing
    (deferred again), with inputs, a reset and odd advance sizes: the record path's trace."""
    plan = SimulationBuilder().build(DRIVETRAIN)
    script = [
        1001,
        lambda instance: instance.subscribe(lambda record: None),
        499,
        ExternalInput("motor/command", 1, MOTOR, {"mode": "voltage", "value": -3.0},
                      '{"mode": "voltage", "value": -3.0}'),
        333,
        lambda instance: instance.set_interest({}),
        4500,
        ExternalInput("motor/command", 2, MOTOR, {"mode": "duty", "value": 0.2},
                      '{"mode": "duty", "value": 0.2}'),
        1, 1, 7,
        lambda instance: instance.reset(seed=9),
        2,
        lambda instance: instance.set_interest({DeviceOutput: frozenset({"wheel_encoder"})}),
        300,
    ]
    new, writer = _trace(plan, tmp_path / "columns", script, columns=True, seed=4)
    old, _ = _trace(plan, tmp_path / "records", script, columns=False, seed=4)
    got = _messages(new)
    assert got == _messages(old)
    assert len(got) == writer.record_count
    # and the records an untraced, collecting instance makes (the collection gets them all)
    instance = plan.create_instance(seed=4, collect=True,
                                    snapshot_every=plan.manifest.trace.state_every_steps)
    records: list = []
    _drive(instance, [step if not isinstance(step, int) else
                      (lambda n: lambda inst: (inst.advance(n), records.extend(inst.poll())))(step)
                      for step in script])
    records = [r for r in records if type(r).__name__ != "EpisodeStart"]
    traced = [(topic, data) for topic, _, _, data in got if topic != "/fibril/episodes"]
    assert traced == [_reference(r) for r in records]
    encoder = [r for r in records if isinstance(r, DeviceOutput)
               and r.device_id == "wheel_encoder"]
    assert len(encoder) > 3000
    assert {r.episode for r in encoder} == {0, 1}


def test_settle_drops_what_an_interrupted_read_left_half_kept(tmp_path: Path) -> None:
    """A Ctrl-C between the steps of a read can leave a sample without its order entry, an
    order entry without its sample, a tick without values, a record or state row without
    its entry: ``settle`` keeps every whole record, in order, and the block is written."""
    from fibril_sim_core.sample_block import OTHER, STATE, DeviceColumns, TraceBuffer

    buffer = TraceBuffer((DeviceColumns("a", "t/a/v1", ("x",), "", 0),
                          DeviceColumns("b", "t/b/v1", ("x",), "", 0),
                          DeviceColumns("c", "t/c/v1", ("x",), "", 0)), (1, 1, 0, 1, 1, 2, 3, 4))
    record = DeviceOutput(0, "o", "t/o/v1", 0, 0, 0, 0, 0, np.zeros(1), ("x",), "")
    buffer.put(0, [0, 1, 2], np.array([[0.0], [1.0], [2.0]]))  # three samples of a ...
    buffer.order += [0, 1, OTHER, 0]  # ... of which the last lost its entry
    buffer.ticks[1] += [0]
    buffer.values[1] += [np.array([5.0])]
    buffer.others.append(record)
    buffer.ticks[1].append(1)  # a tick whose values were not kept
    buffer.order.append(2)  # an entry whose sample was not kept
    buffer.state_row()[:] = 7.0
    buffer.commit_state(3)
    buffer.state_row()[:] = 8.0
    buffer.states_used += 1  # a state row without its entry
    buffer.order.append(OTHER)  # an entry without its record
    buffer.settle()
    block = buffer.take(0, 0, 1)
    assert block.order == [0, 1, OTHER, 0, STATE]
    assert block.ticks == [[0, 1], [0], []]
    assert np.array_equal(block.values[0], [[0.0], [1.0]])
    assert block.states is not None and block.states.ticks.tolist() == [3]
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as writer:
        writer.write_block(block)
    assert [m[0] for m in _messages(tmp_path / "t" / "t.mcap")] == [
        "/fibril/devices/a", "/fibril/devices/b", "/fibril/devices/o", "/fibril/devices/a",
        "/fibril/state"]


def test_an_interrupted_traced_advance_hands_over_every_whole_record(tmp_path: Path) -> None:
    """Ctrl-C inside a read of the lean loop, after a tick was kept but not its values:
    the trace still closes with every record before it, readable."""
    plan = SimulationBuilder().build(DRIVETRAIN)
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as writer:
        instance = plan.create_instance(seed=1, trace=writer, collect=False)
        calls = 0
        read_columns = instance._device_reads.read_columns

        def interrupted(t, indices):
            nonlocal calls
            calls += 1
            if calls == 30:  # the rangefinder's 30th read: its tick kept, then Ctrl-C
                instance._device_reads.columns.ticks[2].append(t - 1)
                raise KeyboardInterrupt
            return read_columns(t, indices)

        instance._device_reads.read_columns = interrupted
        with pytest.raises(KeyboardInterrupt):
            instance.advance(2000)
    messages = _messages(tmp_path / "t" / "t.mcap")
    assert len(messages) == writer.record_count > 0
    assert {topic for topic, *_ in messages} >= {"/fibril/devices/wheel_encoder",
                                                 "/fibril/state"}


def test_state_rows_are_the_snapshots_a_subscriber_gets(tmp_path: Path) -> None:
    """The lean loop keeps state snapshots as rows; made back into records (what the
    encoder falls back to) they are the subscriber's StateSnapshots, array for array."""
    from fibril_sim_core.records import StateSnapshot
    from fibril_sim_core.trace.encoder import state_records

    plan = SimulationBuilder().build(DRIVETRAIN)
    blocks: list = []
    with TraceWriter(tmp_path / "t", provenance={}, layout={}) as writer:
        write_block = writer.write_block
        writer.write_block = lambda block: (blocks.append(block), write_block(block))
        instance = plan.create_instance(seed=1, trace=writer, collect=False)
        instance.advance(95)
    reference = plan.create_instance(seed=1, collect=True, snapshot_every=10)
    reference.advance(95)
    want = [r for r in reference.poll() if isinstance(r, StateSnapshot)]
    rows = [r for block in blocks if block.states is not None for r in state_records(block)]
    assert len(rows) == 9  # the first is taken by the general loop (the initial input)
    got = sorted(rows + [r for block in blocks for r in block.others
                         if isinstance(r, StateSnapshot)], key=lambda r: r.tick)
    assert len(got) == len(want) == 10
    for a, b in zip(got, want, strict=True):
        assert (a.episode, a.tick, a.time_ns, a.session_time_ns) == (
            b.episode, b.tick, b.time_ns, b.session_time_ns)
        for name in ("qpos", "qvel", "act", "ctrl", "actuator_force", "sensordata", "xpos",
                     "xquat"):
            assert getattr(a, name).shape == getattr(b, name).shape, name
            assert _bits(getattr(a, name)) == _bits(getattr(b, name)), name


def test_a_live_runtime_with_no_client_traces_through_the_lean_loop(
        tmp_path: Path, monkeypatch) -> None:
    """``fibril_sim serve --trace`` with nobody connected: the host's instance has only the
    trace listening, takes the lean loop (frames of 100 ticks, as fast as possible), and
    writes what an offline run of the same ticks writes (frame timings aside, their wall
    times differ)."""
    from fibril_sim_core.device_reads import DeviceReads
    from fibril_sim_core.manifest import RuntimeOptions
    from fibril_sim_core.trace import FRAME_TIMING_TOPIC

    from fibril_sim_core import SimulationRuntime

    lean = 0
    real = DeviceReads.read_deferred

    def counted(self, t, phase):
        nonlocal lean
        lean += 1
        return real(self, t, phase)

    monkeypatch.setattr(DeviceReads, "read_deferred", counted)
    plan = SimulationBuilder().build(DRIVETRAIN)
    live = TraceWriter(tmp_path / "live", provenance={}, layout={})
    runtime = SimulationRuntime(plan, seed=3, trace=live, server=None,
                                options=RuntimeOptions(mode="fast", frame_duration_s=0.1))
    runtime.start()
    try:
        deadline = time.monotonic() + 30
        while runtime.instance.tick < 5000 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        runtime.stop()
        live.close()
    ticks = runtime.instance.tick
    assert ticks >= 5000 and lean > 0
    with TraceWriter(tmp_path / "offline", provenance={}, layout={}) as offline:
        plan.create_instance(seed=3, trace=offline, collect=False).advance(ticks)

    def content(name: str) -> list[tuple[str, int, bytes]]:
        return [(topic, log_time, data) for topic, log_time, _, data
                in _messages(tmp_path / name / f"{name}.mcap") if topic != FRAME_TIMING_TOPIC]

    got = content("live")
    assert len(got) > 7000
    assert got == content("offline")
