"""The ingress-only ExternalInput contract: rejections are clear, counted and traced; many
threads may enqueue while the owner thread advances, and nothing is lost or reordered."""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from _models import HINGE_XML, MOTOR_PAYLOAD, build, command, motor, multi_xml

from fibril_sim_core import (
    ActuatorApplication,
    ExternalInput,
    IngressError,
    IngressRecord,
    SimulationInstance,
    external_input,
)


@pytest.fixture()
def instance(tmp_path: Path) -> SimulationInstance:
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command"),
                                       motor("p", "push", "push/command")])
    return plan.create_instance()


def _raw(source: str, sequence, payload_type: str = MOTOR_PAYLOAD,
         payload=None) -> ExternalInput:
    payload = {"mode": "voltage", "value": 1.0} if payload is None else payload
    return ExternalInput(source, sequence, payload_type, payload)


REJECTIONS = [
    (_raw("brake/command", 0),
     "unknown source_id 'brake/command'; known sources: drive/command, push/command, "
     "fibril_sim/entity_state"),
    (_raw("drive/command", 0, payload_type="fibril_sim/motor_command/v2"),
     ("source 'drive/command' accepts payload_type 'fibril_sim/motor_command/v1', got "
      "'fibril_sim/motor_command/v2'")),
    (_raw("drive/command", 0, payload=[1, 2]),
     "source 'drive/command': payload must be a JSON object, got list"),
    (_raw("drive/command", 0, payload={"mode": "voltage"}),
     "source 'drive/command' sequence 0: payload 'value' must be a finite number, got None"),
    (_raw("drive/command", 0, payload={"mode": "voltage", "value": float("nan")}),
     "source 'drive/command' sequence 0: payload 'value' must be a finite number, got nan"),
    (_raw("drive/command", 0, payload={"mode": "voltage", "value": True}),
     "source 'drive/command' sequence 0: payload 'value' must be a finite number, got True"),
    (_raw("drive/command", 0, payload={"mode": "voltage", "value": 1, "speed": 2}),
     "source 'drive/command' sequence 0: unknown payload key(s) speed; expected mode, value"),
    (_raw("drive/command", 0, payload={"mode": "warp", "value": 1}),
     ("source 'drive/command' sequence 0: payload 'mode' must be one of duty, voltage, torque, "
      "velocity, position, got 'warp'")),
    (_raw("drive/command", -1),
     "source 'drive/command': source_sequence must be a non-negative integer, got -1"),
    (_raw("drive/command", 1.5),
     "source 'drive/command': source_sequence must be a non-negative integer, got 1.5"),
]


@pytest.mark.parametrize(("item", "message"), REJECTIONS)
def test_rejected_input_is_counted_traced_and_never_reaches_ctrl(
        instance: SimulationInstance, item: ExternalInput, message: str) -> None:
    instance.advance(3)
    with pytest.raises(IngressError) as info:
        instance.enqueue(item)
    assert str(info.value) == message
    assert (instance.rejected_count, instance.accepted_count) == (1, 0)
    assert instance.poll() == []  # not emitted before the next boundary
    instance.advance(1)
    records = instance.poll()
    (rejected,) = [r for r in records if isinstance(r, IngressRecord)]
    assert not rejected.accepted
    assert rejected.commit_tick == -1
    assert rejected.reject_reason == message
    assert rejected.source_id == item.source_id
    assert rejected.session_time_ns == 3_000_000  # when it was rejected
    assert not [r for r in records if isinstance(r, ActuatorApplication)]
    assert np.all(instance.data.ctrl == 0.0)


def test_source_sequence_must_increase_per_source(instance: SimulationInstance) -> None:
    assert instance.enqueue(command("drive/command", 5, "voltage", 1.0)) == 0
    for sequence in (5, 4):
        with pytest.raises(IngressError) as info:
            instance.enqueue(command("drive/command", sequence, "voltage", 2.0))
        assert str(info.value) == (f"source 'drive/command': source_sequence {sequence} does "
                                   f"not increase (last accepted 5)")
    # Sequences are per source; a rejection does not advance the source's sequence.
    assert instance.enqueue(command("push/command", 0, "torque", 0.5)) == 1
    assert instance.enqueue(command("drive/command", 6, "voltage", 3.0)) == 2
    instance.advance(1)
    records = instance.poll()
    accepted = [r for r in records if isinstance(r, IngressRecord) and r.accepted]
    rejected = [r for r in records if isinstance(r, IngressRecord) and not r.accepted]
    assert [(r.source_id, r.source_sequence, r.acceptance_sequence, r.commit_tick)
            for r in accepted] == [("drive/command", 5, 0, 0), ("push/command", 0, 1, 0),
                                   ("drive/command", 6, 2, 0)]
    assert [r.source_sequence for r in rejected] == [5, 4]
    assert (instance.accepted_count, instance.rejected_count) == (3, 2)
    assert instance.data.ctrl[0] == 3.0  # the last accepted command, never the rejected 2.0


def test_invalid_payload_json_is_an_ingress_error() -> None:
    with pytest.raises(IngressError, match=r"source 'drive/command' sequence 4: payload_json is "
                                           r"not valid JSON"):
        external_input("drive/command", 4, MOTOR_PAYLOAD, '{"mode": duty}')


def test_accepted_input_commits_at_the_next_boundary(instance: SimulationInstance) -> None:
    instance.advance(10)
    assert instance.enqueue(command("drive/command", 0, "voltage", 2.5)) == 0
    assert instance.data.ctrl[0] == 0.0  # enqueue never touches MjData
    instance.advance(0)
    (commit,) = [r for r in instance.poll() if isinstance(r, IngressRecord)]
    assert commit.commit_tick == 10 and commit.accepted
    assert commit.payload_json == '{"mode":"voltage","value":2.5}'
    assert instance.data.ctrl[0] == 2.5


THREADS, PER_THREAD, BAD_EVERY = 8, 500, 50
HALF = PER_THREAD // 2


def test_concurrent_enqueue_while_advancing_loses_and_reorders_nothing(tmp_path: Path) -> None:
    plan = build(tmp_path, multi_xml(THREADS),
                 [motor(f"m{i}", f"m{i}", f"src{i}") for i in range(THREADS)])
    instance = plan.create_instance()
    barrier = threading.Barrier(THREADS + 1)
    errors: list[BaseException] = []
    rejected_by_thread = [0] * THREADS
    # Halfway, every producer waits until the owner thread has committed at least once more:
    # a deterministic point where enqueueing and committing interleave.
    halfway, release = threading.Semaphore(0), threading.Event()

    def produce(index: int) -> None:
        source = f"src{index}"
        try:
            barrier.wait()
            for sequence in range(PER_THREAD):
                if sequence == HALF:
                    halfway.release()
                    assert release.wait(30)
                if sequence % BAD_EVERY == 0:  # an invalid payload, rejected and counted
                    with pytest.raises(IngressError):
                        instance.enqueue(command(source, sequence, "voltage", 1.0))
                    rejected_by_thread[index] += 1
                instance.enqueue(command(source, sequence, "torque", float(sequence)))
                if sequence % 20 == 0:
                    time.sleep(0)  # let the owner thread commit between bursts
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(THREADS)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave producers and the owner thread finely
    try:
        for thread in threads:
            thread.start()
        barrier.wait()
        records, arrived, released_at = [], 0, -1
        while any(thread.is_alive() for thread in threads):
            instance.advance(1)
            records.extend(instance.poll())
            if released_at < 0:
                while halfway.acquire(blocking=False):
                    arrived += 1
                if arrived == THREADS:
                    instance.advance(1)  # commits everything enqueued before the halfway mark
                    records.extend(instance.poll())
                    released_at = instance.tick
                    release.set()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    instance.advance(1)
    records.extend(instance.poll())
    assert not errors

    total = THREADS * PER_THREAD
    commits = [r for r in records if isinstance(r, IngressRecord) and r.accepted]
    rejected = [r for r in records if isinstance(r, IngressRecord) and not r.accepted]
    applications = [r for r in records if isinstance(r, ActuatorApplication)]
    assert instance.accepted_count == len(commits) == len(applications) == total
    assert instance.rejected_count == len(rejected) == sum(rejected_by_thread) == \
        THREADS * (PER_THREAD // BAD_EVERY)
    # Every accepted input committed exactly once.
    assert len({(r.source_id, r.source_sequence) for r in commits}) == total
    assert sorted(r.acceptance_sequence for r in commits) == list(range(total))
    # Commits happen in acceptance order, at non-decreasing ticks.
    assert [r.acceptance_sequence for r in commits] == list(range(total))
    ticks = [r.commit_tick for r in commits]
    assert ticks == sorted(ticks)
    # Enqueued before the halfway mark: committed by then; after it: committed from then on.
    assert max(r.commit_tick for r in commits if r.source_sequence < HALF) <= released_at
    assert min(r.commit_tick for r in commits if r.source_sequence >= HALF) >= released_at
    assert released_at > 0
    # Per-source order is kept.
    per_source: dict[str, list[int]] = defaultdict(list)
    for record in commits:
        per_source[record.source_id].append(record.source_sequence)
    assert per_source == {f"src{i}": list(range(PER_THREAD)) for i in range(THREADS)}
    # Each application follows its commit; the last command of every source is in ctrl.
    assert [(a.endpoint, a.commanded) for a in applications] == \
        [(r.source_id, float(r.source_sequence)) for r in commits]
    np.testing.assert_array_equal(instance.data.ctrl, [PER_THREAD - 1.0] * THREADS)
    assert all(r.reject_reason.endswith("accepted: torque") for r in rejected)
