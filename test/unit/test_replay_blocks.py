"""Replayed recorded commands stepped as one ``mujoco.rollout`` block are bit-identical to
tick-by-tick stepping, and StateCapture gives the same values either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _models import DRIVETRAIN, HINGE_XML, build, dense_records, device, motor
from fibril_sim_core import SimulationBuilder
from fibril_sim_core.errors import InstanceError

FIELDS = ("qpos", "qvel", "act", "sensordata")


def _run(plan, records, ticks: int, capture_ticks, *, blocks: bool, prepared=None):
    instance = plan.create_instance(3, collect=False)
    if not blocks:
        instance.subscribe(lambda record: None)  # a listener: tick-by-tick stepping
    instance.enqueue_recorded_trace_inputs(prepared if prepared is not None else records)
    capture = instance.capture(capture_ticks, FIELDS)
    for chunk in (5, 37, ticks - 42):  # blocks must also cross advance() calls correctly
        instance.advance(chunk)
    state = {name: getattr(instance.data, name).copy()
             for name in ("qpos", "qvel", "act", "ctrl", "sensordata", "xpos")}
    return capture, state


def _assert_same(a, b) -> None:
    (capture_a, state_a), (capture_b, state_b) = a, b
    assert capture_a.complete and capture_b.complete
    for name in FIELDS:
        assert not np.isnan(capture_a.values[name]).any(), name
        np.testing.assert_array_equal(capture_a.values[name], capture_b.values[name], name)
    for name in state_a:
        np.testing.assert_array_equal(state_a[name], state_b[name], name)


@pytest.fixture
def hinge(tmp_path: Path):
    return build(tmp_path, HINGE_XML, [
        motor("m_drive", "drive", "drive/command"),
        motor("m_push", "push", "push/command", command_latency=0.003),
        motor("m_servo", "servo", "servo/command"),
    ])


SOURCES = {"drive/command": "voltage", "push/command": "torque", "servo/command": "position"}


def test_blocks_are_bit_identical_to_tick_by_tick(hinge) -> None:
    records = dense_records(SOURCES, 400)
    ticks = np.arange(0, 400)
    _assert_same(_run(hinge, records, 400, ticks, blocks=True),
                 _run(hinge, records, 400, ticks, blocks=False))


def test_sparse_commands_and_sparse_capture(hinge) -> None:
    records = dense_records(SOURCES, 400, every=13)
    ticks = np.arange(3, 398, 11)
    _assert_same(_run(hinge, records, 400, ticks, blocks=True),
                 _run(hinge, records, 400, ticks, blocks=False))


def test_prepared_inputs_replay_into_many_instances(hinge) -> None:
    records = dense_records(SOURCES, 400)
    prepared = hinge.prepare_recorded_inputs(records)
    ticks = np.arange(0, 400, 2)
    first = _run(hinge, records, 400, ticks, blocks=True, prepared=prepared)
    second = _run(hinge, records, 400, ticks, blocks=True, prepared=prepared)
    _assert_same(first, second)
    _assert_same(first, _run(hinge, records, 400, ticks, blocks=False))


def test_devices_bound_the_blocks_and_stay_identical() -> None:
    plan = SimulationBuilder().build(DRIVETRAIN)  # six devices, a DC motor with activation
    records = dense_records({"motor/command": "duty"}, 300)
    ticks = np.arange(0, 300)
    blocked = plan.create_instance(1, collect=False)
    outputs: list = []
    blocked.enqueue_recorded_trace_inputs(records)
    capture = blocked.capture(ticks, FIELDS)
    blocked.advance(300)
    reference = plan.create_instance(1, collect=True)
    reference.enqueue_recorded_trace_inputs(records)
    expected = reference.capture(ticks, FIELDS)
    reference.advance(300)
    outputs = reference.poll()
    for name in FIELDS:
        np.testing.assert_array_equal(capture.values[name], expected.values[name], name)
    assert any(type(r).__name__ == "DeviceOutput" for r in outputs)


def test_capture_in_the_past_is_an_error(hinge) -> None:
    instance = hinge.create_instance()
    instance.advance(5)
    with pytest.raises(InstanceError, match="before the current tick 5"):
        instance.capture([2, 8])
    with pytest.raises(InstanceError, match="unknown field"):
        instance.capture([8], ("qpos", "xpos"))


def test_capture_without_commands_uses_blocks(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [device("enc", "encoder", {"joint": "shaft"},
                                              period=0.05)])
    a = plan.create_instance(collect=False)
    capture_a = a.capture(np.arange(200), FIELDS)
    a.data.qvel[:] = 1.0
    a.advance(200)
    b = plan.create_instance(collect=True)
    capture_b = b.capture(np.arange(200), FIELDS)
    b.data.qvel[:] = 1.0
    b.advance(200)
    for name in FIELDS:
        np.testing.assert_array_equal(capture_a.values[name], capture_b.values[name], name)


def test_blocks_really_run_and_listeners_disable_them(hinge, monkeypatch) -> None:
    from fibril_sim_core import replay as module

    calls: list[int] = []
    real = module.rollout.rollout

    def counting(model, data, initial, control, **kwargs):
        calls.append(len(control))
        return real(model, data, initial, control, **kwargs)

    monkeypatch.setattr(module.rollout, "rollout", counting)
    records = dense_records(SOURCES, 400)
    _run(hinge, records, 400, np.arange(400), blocks=True)
    # Blocks end at each advance() boundary and at the latency-3 releases still queued.
    assert calls and sum(calls) > 350
    calls.clear()
    _run(hinge, records, 400, np.arange(400), blocks=False)
    assert calls == []


def test_activation_states_roll_out_identically() -> None:
    from fibril_sim_core import MujocoTarget, OverlayParameter

    inductance = OverlayParameter("L", 0.004, (MujocoTarget("dcmotor_inductance", "drive"),))
    plan = SimulationBuilder().build(DRIVETRAIN, [inductance])
    assert plan.model.na == 1
    records = dense_records({"motor/command": "duty"}, 300, every=3)
    ticks = np.arange(0, 300)
    runs = []
    for listen in (False, True):
        instance = plan.create_instance(2, collect=listen)
        instance.enqueue_recorded_trace_inputs(records)
        capture = instance.capture(ticks, FIELDS)
        instance.advance(300)
        runs.append(capture)
    for name in FIELDS:
        np.testing.assert_array_equal(runs[0].values[name], runs[1].values[name], name)
    assert np.abs(runs[0].values["act"]).max() > 0


def test_recycled_mjdata_is_reset_and_checked(hinge) -> None:
    records = dense_records(SOURCES, 200)
    ticks = np.arange(0, 200)
    first = hinge.create_instance(3, collect=False)
    first.enqueue_recorded_trace_inputs(records)
    first.capture(ticks, FIELDS)
    first.advance(200)
    recycled = hinge.create_instance(3, collect=False, data=first.data)
    assert recycled.data is first.data and recycled.tick == 0
    recycled.enqueue_recorded_trace_inputs(records)
    again = recycled.capture(ticks, FIELDS)
    recycled.advance(200)
    fresh = hinge.create_instance(3, collect=False)
    fresh.enqueue_recorded_trace_inputs(records)
    expected = fresh.capture(ticks, FIELDS)
    fresh.advance(200)
    for name in FIELDS:
        np.testing.assert_array_equal(again.values[name], expected.values[name], name)
    other = SimulationBuilder().build(DRIVETRAIN)
    with pytest.raises(InstanceError, match="signature"):
        other.create_instance(data=first.data)


def test_selected_devices_run_alone_and_unchanged(monkeypatch) -> None:
    """devices=: the devices left out emit nothing and no longer cut blocks; the selected ones
    emit exactly what they emit when every device runs (one noise stream per device)."""
    from fibril_sim_core import replay as module

    plan = SimulationBuilder().build(DRIVETRAIN)
    records = dense_records({"motor/command": "duty"}, 300)
    ids = [d.id for d in plan.devices]
    keep = "chassis_imu"  # a noisy device between others in the manifest

    def outputs(devices):
        instance = plan.create_instance(4, collect=True, devices=devices)
        instance.enqueue_recorded_trace_inputs(records)
        instance.advance(300)
        return [r for r in instance.poll() if type(r).__name__ == "DeviceOutput"]

    everything = outputs(None)
    selected = outputs([keep])
    assert {o.device_id for o in everything} == set(ids)
    assert selected and {o.device_id for o in selected} == {keep}
    mine = [o for o in everything if o.device_id == keep]
    assert [o.acquisition_tick for o in selected] == [o.acquisition_tick for o in mine]
    np.testing.assert_array_equal(np.array([o.values for o in selected]),
                                  np.array([o.values for o in mine]))

    calls: list[int] = []
    real = module.rollout.rollout
    monkeypatch.setattr(module.rollout, "rollout",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    quiet = plan.create_instance(4, collect=False, devices=())
    quiet.enqueue_recorded_trace_inputs(records)
    quiet.advance(300)
    assert len(calls) <= 3  # one block per advance, not one step per device read

    with pytest.raises(InstanceError, match="no device.*'nope'"):
        plan.create_instance(devices=["nope", keep])
