"""Deferred reads of a traced run: what the trace gets is what reading one by one gives.

While only the trace listens, the devices that say what they read (``block_inputs``) are not
read at their boundaries: the instance copies those MjData values into a row and the device
computes a block of samples at hand-over (``acquire_block``). These tests hold it to the
record path bit for bit: per device against ``acquire`` (noise streams cut anywhere, state
carried across blocks, signed zeros), and end to end through mode changes (a subscriber
joining and going quiet, inputs, resets).
"""

from __future__ import annotations

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


@pytest.mark.parametrize("device_id", ["wheel_encoder", "chassis_imu", "chassis_pose",
                                       "drive_feedback"])
@pytest.mark.parametrize("cuts", [(1, 7, 1), (5000, 3000), (2, 4096, 1, 9000)])
def test_acquire_block_is_acquire_one_by_one(device_id: str, cuts: tuple[int, ...]) -> None:
    """Blocks of any size (past the noise buffers' refills of 4096 draws), with single
    ``acquire`` calls between them: the same samples and the same state left behind."""
    plan = SimulationBuilder().build(DRIVETRAIN)
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
        deferred = {instance._device_specs[i].id for i, _ in instance._deferral.devices}
        assert deferred == {"wheel_encoder", "chassis_imu", "chassis_pose", "drive_feedback"}
        reads: dict[str, int] = {}

        def counting(read: tuple) -> tuple:
            acquire, device_id = read[0], read[1]

            def counted(model, data):
                reads[device_id] = reads.get(device_id, 0) + 1
                return acquire(model, data)
            return (counted, *read[1:])

        instance._reads[:] = [counting(read) for read in instance._reads]
        instance.advance(1000)
        assert instance._deferral.used == 0  # all handed over
    assert reads == {"front_range": 50}
    # samples (encoder, IMU, range, pose, feedback), states, the episode start, the
    # scenario's initial input and its application
    assert trace.record_count == 500 + 200 + 50 + 100 + 500 + 100 + 1 + 2


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
