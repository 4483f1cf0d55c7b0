"""The stepping hot path keeps every output bit (issue 11 item 4: faster, nothing else).

Two references: the digest of a long all-device run recorded with the implementation before
the hot-path work (fixtures/stepping_drivetrain.json, checked where MuJoCo is the version it
was recorded with), and that implementation itself, kept below as ``ReferenceInstance`` (the
old ``advance`` / ``_next_event`` / ``_block_end`` / ``_boundary`` / ``_emit``), run side by
side with the current one on this machine in several scenarios.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
from pathlib import Path
from typing import Any

import _stepping_scenario as scenario
import mujoco
import numpy as np
import pytest
from fibril_sim_core.instance import SimulationInstance
from fibril_sim_core.read_schedule import NEVER
from fibril_sim_core.replay import MIN_ROLLOUT_TICKS
from fibril_sim_core.records import (
    ActuatorApplication,
    DeviceOutput,
    ExternalInput,
    IngressRecord,
)
from fibril_sim_core.stepping import Stepper

from fibril_sim_core import SimulationBuilder

FIXTURE = Path(__file__).parent / "fixtures" / "stepping_drivetrain.json"


class ReferenceStepper(Stepper):
    """The stepping of the implementation before the hot-path work, verbatim (its state now
    held by the instance's parts: the stepper, its ``reads`` and ``listeners``)."""

    def advance(self, ticks: int) -> None:
        model, data, step = self.model, self.data, mujoco.mj_step
        target = self.tick + ticks
        ingress = self.ingress
        while True:
            t = self.tick
            if self.processed != t:
                self._boundary(t)
                self.processed = t
            if self.recorded or self.releases or ingress.waiting:
                self._commit(t)
            capture = self.capture
            if capture is not None:
                capture.take_state(t, data)
            if t >= target:
                return
            if self.snapshot_every and t % self.snapshot_every == 0 \
                    and self.snapshot_pre is None:
                # Captured right before the step so ctrl is what produces the step's forces.
                self.snapshot_pre = (t, (data.qpos.copy(), data.qvel.copy(), data.act.copy(),
                                         data.ctrl.copy()))
            following = self._next_event(t)
            if following > target:
                following = target
            if following == t + 1 and (self.replay is not None or self.capture is not None):
                end = self._block_end(t, target)
                if end - t >= MIN_ROLLOUT_TICKS:
                    self._block(t, end)
                    continue
            step(model, data, following - t)
            self.tick = following

    def _next_event(self, t: int) -> int:  # type: ignore[override]  # the old one, verbatim
        read_at = self.reads.schedule.read_at
        deliveries = self.reads.deliveries
        following = min(read_at) if read_at else NEVER
        if deliveries and deliveries[0][0] < following:
            following = deliveries[0][0]
        if self.releases and self.releases[0][0] < following:
            following = self.releases[0][0]
        if self.recorded and self.recorded[-1][0] < following:
            following = self.recorded[-1][0]
        every = self.snapshot_every
        if every:
            snapshot = t + 1 if self.snapshot_pre is not None else (t // every + 1) * every
            if snapshot < following:
                following = snapshot
        if self.capture is not None:
            following = min(following, self.capture.next_event(t))
        return following if following > t else t + 1

    def _block_end(self, t: int, target: int) -> int:
        '''How far from ``t`` nothing but replayed commands and captures happen (``t`` when a
        block cannot run: someone listens to records, a snapshot is due, live input waits).'''
        if self.listeners.sinks or self.snapshot_every or self.ingress.waiting:
            return t
        remaining = len(self.recorded)
        if remaining:
            if self.replay is None or remaining > len(self.replay[0].entries):
                return t
        elif self.capture is None:
            return t
        read_at = self.reads.schedule.read_at
        end = min(min(read_at) if read_at else NEVER, target)
        if self.reads.deliveries:
            end = min(end, self.reads.deliveries[0][0])
        for release, _, item in self.releases:  # a few commands waiting out their latency
            if self.endpoints[item.endpoint].control(item.command) is None:
                end = min(end, release)
        return end

    def _boundary(self, t: int) -> None:
        '''Once-only work at boundary ``t``: reads for tick t-1, deliveries, snapshots.'''
        model, data = self.model, self.data
        reads = self.reads
        read_at = reads.schedule.read_at
        dt = self.dt
        for i, at in enumerate(read_at):
            if at != t:
                continue
            device = reads.devices[i]
            descriptor = device.descriptor
            acquired = t - 1
            latency = reads.latency[i]
            values = device.acquire(model, data)
            offset = self.session_offset
            output = DeviceOutput(
                self.episode, descriptor.id, descriptor.sample_type, acquired, acquired * dt,
                (acquired + latency) * dt, offset + acquired * dt,
                offset + (acquired + latency) * dt, values, descriptor.component_names,
                descriptor.frame_id)
            deliver_at = acquired + latency
            if deliver_at <= t:
                self.listeners.emit(output)
            else:
                reads.order += 1
                heapq.heappush(reads.deliveries, (deliver_at, reads.order, output))
            read_at[i] = at + reads.schedule.periods[i]
        deliveries = reads.deliveries
        while deliveries and deliveries[0][0] <= t:
            self.listeners.emit(heapq.heappop(deliveries)[2])
        if self.snapshot_pre is not None:
            self._snapshot(t)
        if self.capture is not None:
            self.capture.take_sensordata(t, data)


class ReferenceInstance(SimulationInstance):
    """An instance stepping with ``ReferenceStepper`` (its emission is the instance's with
    nobody stating an interest: the collection, then the subscribers)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stepper.__class__ = ReferenceStepper  # the old loop on the same state


def _reference(plan, **kwargs):
    return ReferenceInstance(plan, **kwargs)


def _fields(record: object) -> list:
    if dataclasses.is_dataclass(record):
        return [getattr(record, f.name) for f in dataclasses.fields(record)]
    return list(record)


def assert_same_records(expected: list, actual: list) -> None:
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual, strict=True):
        assert type(got) is type(want)
        for a, b in zip(_fields(want), _fields(got), strict=True):
            if isinstance(a, np.ndarray):
                assert a.dtype == b.dtype and a.shape == b.shape
                assert a.tobytes() == b.tobytes()
            else:
                assert type(a) is type(b) and a == b


def test_long_run_matches_the_recorded_digest() -> None:
    recorded = json.loads(FIXTURE.read_text())
    if recorded.pop("mujoco") != mujoco.__version__:
        pytest.skip(f"digest recorded with MuJoCo {json.loads(FIXTURE.read_text())['mujoco']}")
    assert scenario.run() == recorded


def test_long_run_matches_the_reference_path() -> None:
    assert scenario.run() == scenario.run(_reference)


@pytest.fixture(scope="module")
def plan():
    return SimulationBuilder().build(scenario.MANIFEST)


def _command(sequence: int, value: float) -> ExternalInput:
    return ExternalInput("motor/command", sequence, "fibril_sim/motor_command/v1",
                         {"mode": "duty", "value": value})


def test_subscriber_added_while_samples_are_in_flight(plan) -> None:
    """Samples acquired while nobody listened but delivered after a subscribe arrive."""
    runs = []
    for make in (plan.create_instance, lambda **kw: ReferenceInstance(plan, **kw)):
        instance = make(seed=9, collect=False)
        taken: list = []
        instance.advance(1001)  # front_range (latency 2) has a sample in flight now
        instance.subscribe(taken.append)
        instance.enqueue(_command(1, -0.4))
        instance.advance(3000)
        instance.reset(seed=2)
        instance.advance(777)
        runs.append(taken)
    assert any(isinstance(r, DeviceOutput) and r.acquisition_tick == 1000
               and r.device_id == "front_range" for r in runs[0])
    assert_same_records(runs[1], runs[0])


def test_replayed_inputs_and_capture_match(plan) -> None:
    records = [IngressRecord(0, "motor/command", n, "fibril_sim/motor_command/v1",
                             json.dumps({"mode": "duty", "value": 0.1 * (n % 7) - 0.3}), True,
                             40 * n + 3, n, "", 0) for n in range(60)]
    prepared = plan.prepare_recorded_inputs(records)
    ticks = np.arange(0, 2500, 7)
    results = []
    for make in (plan.create_instance, lambda **kw: ReferenceInstance(plan, **kw)):
        for collect in (False, True):
            instance = make(seed=4, collect=collect)
            instance.enqueue_recorded_trace_inputs(prepared)
            capture = instance.capture(ticks)
            instance.advance(2500)
            results.append((capture.values, instance.poll(), instance.data.qpos.tobytes()))
    for new, old in ((results[0], results[2]), (results[1], results[3])):
        for name in new[0]:
            assert new[0][name].tobytes() == old[0][name].tobytes(), name
        assert_same_records(old[1], new[1])
        assert new[2] == old[2]


def test_periods_without_a_short_common_cycle(tmp_path: Path) -> None:
    """Periods whose least common multiple is too long to tabulate take the general path."""
    text = scenario.MANIFEST.read_text()
    text = text.replace("model: drivetrain.xml", f"model: {scenario.MANIFEST.parent}/drivetrain.xml")
    text = text.replace("config: {period: 0.002, latency: 0.001}",
                        "config: {period: 0.257, latency: 0.003}")
    text = text.replace("config: {period: 0.005, latency: 0.001, gyro_noise",
                        "config: {period: 0.263, latency: 0.001, gyro_noise")
    manifest = tmp_path / "simulation.yaml"
    manifest.write_text(text)
    odd = SimulationBuilder().build(manifest)
    periods = sorted(d.period_ticks for d in odd.devices)
    assert np.lcm.reduce(periods) > 1 << 16
    a = odd.create_instance(seed=1, snapshot_every=25)
    b = ReferenceInstance(odd, seed=1, snapshot_every=25)
    assert a._device_reads.schedule.table is None
    for instance in (a, b):
        instance.advance(6000)
        instance.enqueue(_command(1, 0.9))
        instance.advance(4000)
    assert_same_records(b.poll(), a.poll())


def test_callbacks_that_subscribe_or_poll_while_a_record_is_emitted(plan) -> None:
    runs = []
    for make in (plan.create_instance, lambda **kw: ReferenceInstance(plan, **kw)):
        instance = make(seed=5)
        late: list = []
        polled: list = []

        def first(record: object, instance=instance, late=late, polled=polled) -> None:
            if len(polled) == 3:
                instance.subscribe(late.append)
            polled.append(len(instance.poll()))

        instance.subscribe(first)
        instance.advance(40)
        runs.append((polled, late, instance.poll()))
    assert runs[0][0] == runs[1][0]
    assert_same_records(runs[1][1], runs[0][1])
    assert_same_records(runs[1][2], runs[0][2])


def test_unheard_samples_are_skipped_with_the_same_noise_streams(tmp_path: Path) -> None:
    """While nothing listens, samples delivered at once are skipped (Device.skip: no values,
    no rays cast, nothing rendered) yet every device's state and noise stream move on as if
    acquired: subscribing later gives the samples a run listening all along gives."""
    from _models import SCENE_XML, build, device

    plan = build(tmp_path, SCENE_XML, [
        device("imu", "imu", {"site": "block_imu"}, period=0.002, gyro_noise=0.01,
               accel_noise=0.2),
        device("pose", "body_kinematics", {"body": "block"}, period=0.003,
               position_noise=0.01, velocity_noise=0.02),
        device("hit", "rangefinder", {"site": "range_x"}, noise=0.01),
        device("miss", "rangefinder", {"site": "range_up"}, period=0.002, noise=0.01),
        device("touch", "digital_input", {"geom": "block_geom"}, period=0.002,
               mode="contact"),
        device("scan", "planar_lidar", {"site": "range_x"}, period=0.005, rays=16,
               noise=0.02),
    ])
    silent = plan.create_instance(seed=3, collect=False)
    heard = plan.create_instance(seed=3, collect=False)
    late: list = []
    always: list = []
    heard.subscribe(always.append)
    for instance in (silent, heard):
        instance.advance(777)
    silent.subscribe(late.append)
    for instance in (silent, heard):
        instance.advance(600)
    tail = [r for r in always if not isinstance(r, DeviceOutput) or r.acquisition_tick >= 777]
    assert {r.device_id for r in late if isinstance(r, DeviceOutput)} == \
        {"imu", "pose", "hit", "miss", "touch", "scan"}
    assert_same_records(tail, late)


@pytest.mark.parametrize("steps", [(1, 2, 7, 333, 1000), (4097,), (2, 2, 2, 2)])
def test_unheard_encoder_and_motor_feedback_resume_exactly(tmp_path: Path, steps) -> None:
    """Silent stepping takes the draws of unheard samples at once and skips only the last
    encoder sample at its tick (the next velocity needs it), over advance() calls of any
    length: listening afterwards gives what a run listening all along gives."""
    from _models import HINGE_XML, build, device, motor

    plan = build(tmp_path, HINGE_XML, [
        motor("m", "drive", "motor/command"),
        device("enc", "encoder", {"joint": "shaft"}, period=0.003, noise_counts=0.7),
        device("slide", "encoder", {"joint": "rail"}, period=0.002),
        device("fb", "motor_feedback", {"actuator": "drive"}, period=0.002, force_noise=0.1,
               velocity_noise=0.2, current_noise=0.05),
    ])
    silent = plan.create_instance(seed=11, collect=False)
    heard = plan.create_instance(seed=11, collect=False)
    always: list = []
    late: list = []
    heard.subscribe(always.append)
    for ticks in steps:
        for instance in (silent, heard):
            instance.advance(ticks)
    silent.subscribe(late.append)
    for instance in (silent, heard):
        instance.enqueue(_command(1, 0.7))
        instance.advance(500)
    start = sum(steps)
    tail = [r for r in always if not isinstance(r, DeviceOutput) or r.acquisition_tick >= start]
    assert_same_records(tail, late)


@pytest.mark.parametrize("counts", [(0, 1), (5, 3), (4095, 2), (4096, 4096), (9000, 1),
                                    (300000, 7)])
def test_skip_draws_leaves_the_stream_where_the_draws_would(counts) -> None:
    from fibril_sim_core.components.device import Device
    from fibril_sim_core.instance import component_rng

    normal, normal1 = counts
    for kind in ("normal", "normal1"):
        drawn, skipped = (Device(None, component_rng(5, "d")) for _ in range(2))  # type: ignore[arg-type]
        for device in (drawn, skipped):
            device.normal(3) if kind == "normal" else device.normal1()  # a started stream
        if kind == "normal":
            for _ in range(normal // 7):
                drawn.normal(7)
            drawn.normal(normal % 7) if normal % 7 else None
            skipped.skip_draws(normal, 0)
            assert drawn.normal(9).tobytes() == skipped.normal(9).tobytes()
        else:
            for _ in range(normal1):
                drawn.normal1()
            skipped.skip_draws(0, normal1)
            assert [drawn.normal1() for _ in range(5000)] == \
                [skipped.normal1() for _ in range(5000)]


def test_unheard_samples_with_periods_without_a_short_common_cycle(tmp_path: Path) -> None:
    """Silent stepping on the general read path (no phase table) resumes exactly too."""
    text = scenario.MANIFEST.read_text()
    text = text.replace("model: drivetrain.xml", f"model: {scenario.MANIFEST.parent}/drivetrain.xml")
    text = text.replace("config: {period: 0.002, latency: 0.001}",
                        "config: {period: 0.257, latency: 0.003}")
    text = text.replace("config: {period: 0.005, latency: 0.001, gyro_noise",
                        "config: {period: 0.263, latency: 0.003, gyro_noise")
    manifest = tmp_path / "simulation.yaml"
    manifest.write_text(text)
    odd = SimulationBuilder().build(manifest)
    silent = odd.create_instance(seed=2, collect=False)
    heard = odd.create_instance(seed=2, collect=False)
    always: list = []
    late: list = []
    heard.subscribe(always.append)
    for ticks in (700, 1, 2600):
        for instance in (silent, heard):
            instance.advance(ticks)
    assert silent._device_reads.schedule.table is None  # no phase table
    assert heard._device_reads.schedule.table is None
    silent.subscribe(late.append)
    for instance in (silent, heard):
        instance.advance(3000)
    # The outputs delivered from boundary 3301 on (some acquired before it, while silent).
    outputs = [r for r in late if isinstance(r, DeviceOutput)]
    seen = {(r.device_id, r.acquisition_tick) for r in outputs}
    tail = [r for r in always if isinstance(r, DeviceOutput)
            and ((r.device_id, r.acquisition_tick) in seen or r.acquisition_tick >= 3301)]
    late = outputs
    assert {r.device_id for r in late if isinstance(r, DeviceOutput)} >= {
        "wheel_encoder", "chassis_imu", "drive_feedback", "chassis_pose"}
    assert_same_records(tail, late)


# ------------------------------------------------------------------------------- interest
_INTERESTS = [
    {DeviceOutput: frozenset({"wheel_encoder"})},  # one device, no ingress records
    {},  # nothing at all: steps as if nobody listened
    {DeviceOutput: frozenset({"chassis_imu", "chassis_pose"}), IngressRecord: None},
    {DeviceOutput: None},  # every device, still no ingress / actuator records
    None,  # everything
]


def _wanted_by(interest, record) -> bool:
    if interest is None:
        return True
    if type(record) not in interest:
        return False
    ids = interest[type(record)]
    return ids is None or getattr(record, "device_id", None) in ids


@pytest.mark.parametrize("steps", [(1, 7, 333, 4097, 250), (2, 2, 2, 2, 2), (500,) * 5])
def test_interest_makes_only_what_is_wanted_and_changes_nothing_else(plan, steps) -> None:
    """An instance told what its subscriber wants makes only that (no samples of the other
    devices, no ingress / actuator records when unwanted), over interests that change
    between advance() calls: what it emits is exactly what a run making everything emits of
    the same kinds and devices, bit for bit, and the physics is the same."""
    narrow = plan.create_instance(seed=9, collect=False)
    full = plan.create_instance(seed=9, collect=False)
    got: list = []
    everything: list = []
    narrow.subscribe(got.append)
    full.subscribe(everything.append)
    for n, (ticks, interest) in enumerate(zip(steps, _INTERESTS, strict=True)):
        narrow.set_interest(interest)
        mark, mark_full = len(got), len(everything)
        for instance in (narrow, full):
            instance.enqueue(_command(n + 1, 0.2 * n - 0.3))
            instance.advance(ticks)
        made = got[mark:]
        assert_same_records([r for r in everything[mark_full:] if _wanted_by(interest, r)],
                            [r for r in made if _wanted_by(interest, r)])
        # Nothing else was made, but the rangefinder's samples acquired before (delivered
        # later: someone may want them by then).
        extra = [r for r in made if not _wanted_by(interest, r)]
        assert all(getattr(r, "device_id", None) == "front_range" for r in extra), extra[:3]
    kinds = {type(r) for r in got}
    assert DeviceOutput in kinds and IngressRecord in kinds and ActuatorApplication in kinds
    np.testing.assert_array_equal(narrow.data.qpos, full.data.qpos)


def test_interest_of_nothing_steps_like_nobody_listening(plan) -> None:
    listened = plan.create_instance(seed=4, collect=False)
    quiet: list = []
    listened.subscribe(quiet.append)
    listened.set_interest({})
    silent = plan.create_instance(seed=4, collect=False)
    for instance in (listened, silent):
        instance.advance(3000)
    assert quiet == []  # (its EpisodeStart came before it subscribed)
    assert listened._device_reads.schedule.heard == frozenset() and not listened._listeners.sinks
    np.testing.assert_array_equal(listened.data.qpos, silent.data.qpos)
