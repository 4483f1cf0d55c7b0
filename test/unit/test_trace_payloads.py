"""The batch serializer writes every message byte for byte as rosbags' serializer does.

The reference is the generic path the trace writer used before (rosbags' ``serialize_cdr``
through the fibril_msgs typestore); the payloads are read back with the ``mcap`` library, an
independent reader, topic by topic and in order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fibril_sim_core.records import (
    ActuatorApplication,
    DeviceOutput,
    FrameTiming,
    IngressRecord,
    StateSnapshot,
)
from fibril_sim_core.trace import TraceWriter, msgtypes, actuator_topic, device_topic
from fibril_sim_core.trace.writer import FRAME_TIMING_TOPIC, INPUTS_TOPIC, STATE_TOPIC
from mcap.reader import make_reader

_NS = 1_000_000_000


def _reference(record: object) -> tuple[str, bytes]:
    """(topic, payload) through the typestore: today's writer's generic encoding."""
    store = msgtypes.typestore()
    types = store.types
    time = types["builtin_interfaces/msg/Time"]

    def stamp(ns: int) -> object:
        return time(*divmod(ns, _NS))

    def f64(values: object) -> np.ndarray:
        return np.ascontiguousarray(values, dtype=np.float64).reshape(-1)

    if isinstance(record, DeviceOutput):
        header = types["std_msgs/msg/Header"](stamp=stamp(record.session_delivery_time_ns),
                                               frame_id=record.frame_id)
        msg = types[msgtypes.DEVICE_SAMPLE](
            header=header, acquisition_stamp=stamp(record.session_acquisition_time_ns),
            acquisition_episode_time_ns=record.acquisition_time_ns,
            delivery_episode_time_ns=record.delivery_time_ns, episode=record.episode,
            device_id=record.device_id, sample_type=record.sample_type,
            values=f64(record.values), component_names=list(record.component_names))
        return device_topic(record.device_id), bytes(store.serialize_cdr(msg, msg.__msgtype__))
    if isinstance(record, StateSnapshot):
        msg = types[msgtypes.STATE_SNAPSHOT](
            stamp=stamp(record.session_time_ns), episode=record.episode, tick=record.tick,
            episode_time_ns=record.time_ns, qpos=f64(record.qpos), qvel=f64(record.qvel),
            act=f64(record.act), ctrl=f64(record.ctrl),
            actuator_force=f64(record.actuator_force), sensordata=f64(record.sensordata),
            xpos=f64(record.xpos), xquat=f64(record.xquat))
        return STATE_TOPIC, bytes(store.serialize_cdr(msg, msg.__msgtype__))
    if isinstance(record, ActuatorApplication):
        msg = types[msgtypes.ACTUATOR_APPLICATION](
            stamp=stamp(record.session_time_ns), episode=record.episode, tick=record.tick,
            endpoint=record.endpoint, actuator=record.actuator, mode=record.mode,
            commanded=float(record.commanded), released=float(record.released),
            applied=float(record.applied))
        return actuator_topic(record.endpoint), bytes(store.serialize_cdr(msg, msg.__msgtype__))
    if isinstance(record, IngressRecord):
        msg = types[msgtypes.EXTERNAL_INPUT](
            stamp=stamp(record.session_time_ns), episode=record.episode,
            source_id=record.source_id, source_sequence=record.source_sequence,
            payload_type=record.payload_type, payload_json=record.payload_json,
            commit_tick=record.commit_tick, acceptance_sequence=record.acceptance_sequence,
            accepted=record.accepted, reject_reason=record.reject_reason)
        return INPUTS_TOPIC, bytes(store.serialize_cdr(msg, msg.__msgtype__))
    assert isinstance(record, FrameTiming)
    msg = types[msgtypes.FRAME_TIMING](
        stamp=stamp(record.session_time_ns), episode=record.episode, tick=record.tick,
        episode_time_ns=record.episode_time_ns, session_time_ns=record.session_time_ns,
        wall_step_time=float(record.wall_step_time),
        real_time_factor=float(record.real_time_factor))
    return FRAME_TIMING_TOPIC, bytes(store.serialize_cdr(msg, msg.__msgtype__))


def _payloads(mcap: Path) -> dict[str, list[bytes]]:
    """Per topic, in write order: log time, then sequence (the writer's write order)."""
    topics: dict[str, list[tuple[int, int, bytes]]] = {}
    with mcap.open("rb") as stream:
        for _, channel, message in make_reader(stream, validate_crcs=True).iter_messages(
                log_time_order=False):
            topics.setdefault(channel.topic, []).append(
                (message.log_time, message.sequence, bytes(message.data)))
    return {topic: [data for *_, data in sorted(items)] for topic, items in topics.items()}


def _odd_records() -> list:
    """Every message type, with the shapes that move CDR alignment around."""
    rng = np.random.default_rng(3)
    out: list = []
    for n in range(40):
        s = 5 * _NS + n * 1_000_003
        out.append(DeviceOutput(n % 3, "enc/odd", "fibril_sim/test/v1", n, n * 10, n * 10 + 7,
                                s - 5, s, rng.normal(size=3), ("p", "v", "c"), "frame_x"))
        out.append(DeviceOutput(1, "a", "t", n, 0, 0, s, s, np.array([1.5 * n]), ("x",), ""))
        out.append(DeviceOutput(2, "empty", "fibril_sim/empty/v1", n, 0, 0, s, s,
                                np.empty(0), (), "f"))
        out.append(DeviceOutput(0, "grid", "fibril_sim/grid/v1", n, 0, 0, s, s,
                                rng.normal(size=(2, 3)), ("a", "b", "c", "d", "e", "f"), "cam"))
        out.append(StateSnapshot(0, n, n * 7, s, rng.normal(size=8), rng.normal(size=7),
                                 np.empty(0), rng.normal(size=1), rng.normal(size=1),
                                 rng.normal(size=5), rng.normal(size=(3, 3)),
                                 rng.normal(size=(3, 4))))
        out.append(ActuatorApplication(n, n, n * 10, s, "motor/command", "drive",
                                       "duty" if n % 2 else "velocity", 0.5 * n, 0.25, -1.0))
        payload = '{"mode": "duty", "value": %s}' % (n / 7) if n % 5 else '{"név": "ü"}'
        out.append(IngressRecord(n % 2, "motor/command", n, "fibril_sim/motor_command/v1",
                                 payload, n % 3 != 0, n if n % 3 else -1, n,
                                 "" if n % 3 else "stale sequence", s))
        out.append(IngressRecord(0, "x", n, "t", "", True, 0, 0, "", s))
        out.append(FrameTiming(0, n, n * 10, s, 1e-5 * n, 1.0 + n))
    return out


@pytest.mark.parametrize("batch_break", [False, True])
def test_every_payload_matches_the_generic_serializer(tmp_path: Path, batch_break: bool) -> None:
    records = _odd_records()
    path = tmp_path / "bag"
    with TraceWriter(path, provenance={}, layout={"timestep_ns": 1}) as writer:
        for n, record in enumerate(records):
            writer.write(record)
            if batch_break and n % 17 == 0:
                writer.flush()  # many small chunks and batches
    want: dict[str, list[bytes]] = {}
    for record in records:
        topic, data = _reference(record)
        want.setdefault(topic, []).append(data)
    got = _payloads(path / "bag.mcap")
    assert got.keys() == want.keys()
    for topic in want:
        assert got[topic] == want[topic], topic


def test_a_drivetrain_run_traces_exactly_what_the_generic_serializer_wrote(
        tmp_path: Path) -> None:
    """Every record of a run with all devices, snapshots and inputs, topic by topic."""
    from fibril_sim_core.records import ExternalInput

    from fibril_sim_core import SimulationBuilder

    manifest = Path(__file__).resolve().parents[2] / "config/examples/drivetrain/simulation.yaml"
    plan = SimulationBuilder().build(manifest)
    instance = plan.create_instance(seed=2, snapshot_every=10)
    path = tmp_path / "run"
    with TraceWriter(path, provenance=dict(plan.provenance), layout=dict(plan.layout)) as writer:
        instance.subscribe(writer.write)
        instance.advance(1500)
        instance.enqueue(ExternalInput("motor/command", 1, "fibril_sim/motor_command/v1",
                                       {"mode": "voltage", "value": -3.0}))
        instance.advance(1500)
    want: dict[str, list[bytes]] = {}
    for record in instance.poll():
        topic, data = _reference(record)
        want.setdefault(topic, []).append(data)
    got = _payloads(path / "run.mcap")
    assert got.keys() == want.keys() and len(want) == 8
    for topic in want:
        assert got[topic] == want[topic], topic
