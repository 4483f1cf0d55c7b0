"""Acceptance order is unique per episode, and every episode's seed is in the trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _models import DRIVETRAIN, HINGE_XML, MOTOR_PAYLOAD, build, command, device, motor
from fibril_sim_core.cli import main
from fibril_sim_core.manifest import RuntimeOptions
from fibril_sim_core.trace import TraceReader, TraceWriter

from fibril_sim_core import DeviceOutput, IngressRecord, SimulationBuilder, SimulationRuntime
from fibril_sim_core.records import EpisodeStart

INITIAL = {"initial_inputs": [{"source_id": "drive/command", "source_sequence": 0,
                               "payload_type": MOTOR_PAYLOAD,
                               "payload": {"mode": "voltage", "value": 1.0}}]}


def _commits(records: list) -> list[tuple[int, int, int]]:
    return [(r.episode, r.commit_tick, r.acceptance_sequence) for r in records
            if isinstance(r, IngressRecord) and r.accepted]


def _strictly_increasing_per_episode(commits: list[tuple[int, int, int]]) -> bool:
    last: dict[int, int] = {}
    for episode, _, acceptance in commits:
        if acceptance <= last.get(episode, -1):
            return False
        last[episode] = acceptance
    return True


def test_cli_trace_with_inputs_has_unique_acceptance_order(tmp_path: Path) -> None:
    inputs = DRIVETRAIN.parent / "inputs.yaml"
    trace = tmp_path / "trace"
    assert main(["run", str(DRIVETRAIN), "--steps", "1600", "--inputs", str(inputs),
                 "--trace", str(trace)]) == 0
    with TraceReader(trace) as reader:
        commits = [(r.source_sequence, r.commit_tick, r.acceptance_sequence)
                   for r in reader.external_inputs()]
    # The scenario's initial input is 0; the file's inputs (numbered 0, 1, 2 there) follow.
    assert commits == [(0, 0, 0), (1, 500, 1), (2, 1000, 2), (3, 1500, 3)]


def test_runtime_live_input_follows_the_initial_input(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command")], scenario=INITIAL)
    records: list = []
    with SimulationRuntime(plan, options=RuntimeOptions(mode="lockstep")) as runtime:
        connection = runtime.connect()
        connection.on_record(records.append)
        connection.step(160)
        assert connection.submit(command("drive/command", 1, "voltage", 2.0)) == 1
        connection.step(5)
        assert connection.submit(command("drive/command", 2, "voltage", 3.0)) == 2
        connection.reset()  # waiting inputs are renumbered after the new episode's initial one
        connection.step(3)
        assert connection.submit(command("drive/command", 3, "voltage", 4.0)) == 2
        connection.step(3)
    assert _commits(records) == [(0, 0, 0), (0, 160, 1), (1, 0, 0), (1, 0, 1), (1, 3, 2)]


def test_replayed_inputs_keep_free_numbers_and_come_after_live_ones(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command"),
                                       motor("p", "push", "push/command")], scenario=INITIAL)
    instance = plan.create_instance()
    push = '{"mode":"torque","value":0.5}'
    instance.enqueue_recorded_trace_inputs([
        IngressRecord(0, "push/command", 0, MOTOR_PAYLOAD, push, True, 0, 0, "", 0),  # used
        IngressRecord(0, "push/command", 1, MOTOR_PAYLOAD, push, True, 4, 7, "", 0),  # free
        IngressRecord(0, "push/command", 2, MOTOR_PAYLOAD, push, True, 6, 8, "", 0)])
    instance.advance(3)
    assert instance.enqueue(command("drive/command", 1, "voltage", 2.0)) == 2  # taken: 0, 1
    instance.advance(1)
    # Enqueued after boundary 4 committed the replayed 7: it commits at tick 4 too, as 8.
    assert instance.enqueue(command("drive/command", 2, "voltage", 3.0)) == 8
    instance.advance(4)
    commits = _commits(instance.poll())
    assert commits == [(0, 0, 0), (0, 0, 1), (0, 3, 2), (0, 4, 7), (0, 4, 8), (0, 6, 9)]
    assert _strictly_increasing_per_episode(commits)


def test_every_episode_seed_is_in_the_trace_and_replays_it(tmp_path: Path) -> None:
    plan = SimulationBuilder().build(DRIVETRAIN)
    trace = tmp_path / "trace"
    live: list[DeviceOutput] = []
    writer = TraceWriter(trace, provenance=dict(plan.provenance, seed=3), layout=dict(plan.layout))
    with SimulationRuntime(plan, seed=3, trace=writer,
                           options=RuntimeOptions(mode="lockstep")) as runtime:
        connection = runtime.connect()
        connection.on_record(lambda r: live.append(r) if isinstance(r, DeviceOutput) else None)
        connection.step(50)
        connection.reset(seed=11)
        connection.step(50)
        connection.reset()  # keeps the seed: episode 2 repeats episode 1
        connection.step(50)
    writer.close()
    with TraceReader(trace) as reader:
        episodes = reader.episodes()
        traced = list(reader.device_outputs("chassis_imu"))
    assert [(e.episode, e.seed, e.keyframe) for e in episodes] == \
        [(0, 3, "rest"), (1, 11, "rest"), (2, 11, "rest")]
    assert [e.session_time_ns for e in episodes] == [0, 50_000_000, 100_000_000]
    assert all(isinstance(e, EpisodeStart) for e in episodes)
    # Episode 1 replays exactly from the trace alone: a fresh instance with its seed.
    replay = plan.create_instance(episodes[1].seed)
    replay.advance(50)
    again = [r for r in replay.poll() if isinstance(r, DeviceOutput)
             and r.device_id == "chassis_imu"]
    first = [r for r in traced if r.episode == 1]
    assert len(first) == len(again) > 0
    assert all(np.array_equal(a.values, b.values) for a, b in zip(first, again))
    assert not np.array_equal(first[0].values,
                              next(r for r in traced if r.episode == 0).values)
