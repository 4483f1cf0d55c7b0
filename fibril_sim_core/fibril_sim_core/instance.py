"""SimulationInstance: the mutable state of one run of a SimulationPlan.

Time model. A tick is one physics step; boundary ``t`` is the moment after ``t`` steps. After a
MuJoCo step from state x(t-1) to x(t), MjData holds x(t) in qpos/qvel but every derived quantity
(kinematics, sensordata, actuator forces, contacts) belongs to x(t-1), the state the step
started from. So a device acquiring at tick ``a`` is read at boundary ``a + 1``, which makes every
sample consistent with one state without an extra ``mj_forward``. Its output is delivered at
``max(a + 1, a + latency)``, stamped with acquisition time ``a·dt`` and delivery time
``(a + latency)·dt``.

Stepping is event-driven: between two events (input commit, command release, acquisition,
delivery, state snapshot) the instance makes one ``mj_step(m, d, nstep=k)`` call.

Threads. ``enqueue`` may be called from any thread; everything else belongs to the owner thread.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np

from .errors import IngressError, InstanceError
from .ingress import AcceptedInput, Ingress, external_input
from .records import (ActuatorApplication, DeviceOutput, ExternalInput, IngressRecord,
                      StateSnapshot)

if TYPE_CHECKING:
    from .components import Device, Endpoint
    from .manifest import ScenarioSpec
    from .plan import SimulationPlan

Record = DeviceOutput | ActuatorApplication | IngressRecord | StateSnapshot
_NEVER = 1 << 62


def component_rng(seed: int, component_id: str) -> np.random.Generator:
    """One stream per (episode seed, component id): adding a component changes no other's noise."""
    return np.random.default_rng(np.random.SeedSequence(
        [seed & 0xFFFFFFFF, seed >> 32, zlib.crc32(component_id.encode())]))


class SimulationInstance:
    """One run: MuJoCo state, episode/session time, device queues, drivers, ingress, RNG."""

    def __init__(self, plan: SimulationPlan, *, seed: int = 0,
                 scenario: ScenarioSpec | None = None, trace: Any = None,
                 snapshot_every: int | None = None, collect: bool = True) -> None:
        self.plan = plan
        self.model = plan.model
        self.data = mujoco.MjData(plan.model)
        self.scenario = scenario or plan.scenario
        self._dt = plan.timebase.timestep_ns
        self._seed = seed
        self._episode = 0
        self._session_offset = 0
        self._subscribers: list[Callable[[Record], None]] = []
        self._collect = collect
        self._collected: list[Record] = []
        if trace is not None:
            self._subscribers.append(trace.write)
        if snapshot_every is None:
            snapshot_every = plan.manifest.trace.state_every_steps if trace is not None else 0
        self._snapshot_every = snapshot_every
        self._endpoints: list[Endpoint] = [a.create() for a in plan.actuators]
        self._ingress = Ingress(plan.actuators, self._endpoints, self._clock)
        self._start_episode()

    # ----------------------------------------------------------------- lifecycle
    def _start_episode(self) -> None:
        """Episode-local state: physics, tick, devices and their RNG, queues, drivers."""
        model, data = self.model, self.data
        keyframe = self._keyframe_id
        if keyframe >= 0:
            mujoco.mj_resetDataKeyframe(model, data, keyframe)
        else:
            mujoco.mj_resetData(model, data)
        self._tick = 0
        self._processed = -1  # last boundary whose once-only work is done
        self._devices: list[Device] = [
            d.create(component_rng(self._seed, d.id)) for d in self.plan.devices]
        self._read_at = [1] * len(self._devices)
        self._period = [d.period_ticks for d in self.plan.devices]
        self._latency = [d.latency_ticks for d in self.plan.devices]
        self._deliveries: list[tuple[int, int, DeviceOutput]] = []
        self._releases: list[tuple[int, int, AcceptedInput]] = []
        self._recorded: list[tuple[int, int, AcceptedInput]] = []
        self._order = 0
        self._snapshot_pre: tuple[int, tuple[np.ndarray, ...]] | None = None
        self._endpoints[:] = [a.create() for a in self.plan.actuators]
        if self.scenario.initial_inputs:
            self.enqueue_recorded_trace_inputs([
                IngressRecord(self._episode, i.source_id, i.source_sequence, i.payload_type,
                              external_input(i.source_id, i.source_sequence, i.payload_type,
                                             i.payload).payload_json,
                              True, 0, n, "", 0)
                for n, i in enumerate(self.scenario.initial_inputs)])

    @property
    def _keyframe_id(self) -> int:
        name = self.scenario.keyframe
        if name is None:
            return -1
        if self.scenario is self.plan.scenario:
            return self.plan.keyframe_id
        key = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, name)
        if key < 0:
            raise InstanceError(f"scenario keyframe {name!r} is not in the model")
        return key

    def reset(self, *, seed: int | None = None, keyframe: str | None = None) -> None:
        """Start a new episode from the same plan. EpisodeTime restarts at 0; SessionTime goes
        on. ``seed`` replaces the episode seed (default: keep it, so episodes repeat exactly);
        ``keyframe`` overrides the scenario keyframe for this and later episodes."""
        if keyframe is not None:
            from .manifest import ScenarioSpec

            if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, keyframe) < 0:
                raise InstanceError(f"reset: no keyframe named {keyframe!r} in the model")
            self.scenario = ScenarioSpec(keyframe, self.scenario.initial_inputs)
        if seed is not None:
            self._seed = seed
        self._session_offset += self._tick * self._dt
        self._episode += 1
        self._start_episode()

    # ----------------------------------------------------------------- time
    @property
    def tick(self) -> int:
        return self._tick

    @property
    def episode(self) -> int:
        return self._episode

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def episode_time_ns(self) -> int:
        return self._tick * self._dt

    @property
    def session_time_ns(self) -> int:
        return self._session_offset + self._tick * self._dt

    def _clock(self) -> tuple[int, int]:
        return self._episode, self.session_time_ns

    # ----------------------------------------------------------------- ingress
    @property
    def sources(self) -> list[str]:
        return self._ingress.sources

    @property
    def accepted_count(self) -> int:
        return self._ingress.accepted_count

    @property
    def rejected_count(self) -> int:
        return self._ingress.rejected_count

    def enqueue(self, item: ExternalInput) -> int:
        """Thread-safe. Accept an input for the next tick boundary; return its acceptance
        sequence. Raises IngressError (and records the rejection) for bad input."""
        return self._ingress.enqueue(item)

    def enqueue_recorded_trace_inputs(self, records: Iterable[IngressRecord | Mapping]) -> int:
        """Replay recorded inputs at their recorded commit ticks, in recorded acceptance order.

        Rejected records are skipped (they never reached physics in the recording either).
        Returns the number queued. Raises IngressError naming the record that is invalid.
        """
        accepted: list[tuple[int, int, ExternalInput]] = []
        for n, record in enumerate(records):
            record = _as_record(record, n)
            if not record.accepted:
                continue
            if record.commit_tick < self._tick:
                raise IngressError(f"recorded input {n} ({record.source_id!r} sequence "
                                   f"{record.source_sequence}): commit_tick {record.commit_tick} "
                                   f"is before the current tick {self._tick}")
            item = external_input(record.source_id, record.source_sequence,
                                  record.payload_type, record.payload_json)
            accepted.append((record.commit_tick, record.acceptance_sequence, item))
        accepted.sort(key=lambda entry: (entry[0], entry[1]))
        last: dict[str, int] = {}
        queued: list[tuple[int, int, AcceptedInput]] = []
        for commit_tick, acceptance, item in accepted:
            if item.source_sequence <= last.get(item.source_id, -1):
                raise IngressError(f"recorded input {item.source_id!r}: source_sequence "
                                   f"{item.source_sequence} does not increase in acceptance "
                                   f"order")
            last[item.source_id] = item.source_sequence
            index, command = self._ingress.parse(item)
            queued.append((commit_tick, acceptance,
                           AcceptedInput(acceptance, item, index, command, commit_tick)))
        self._recorded = sorted(self._recorded + queued, key=lambda entry: entry[:2])
        self._recorded.reverse()  # pop() from the end in order
        return len(queued)

    # ----------------------------------------------------------------- outputs
    def subscribe(self, callback: Callable[[Record], None]) -> None:
        """Call ``callback`` (on the owner thread) with every record as it is emitted."""
        self._subscribers.append(callback)

    def poll(self) -> list[Record]:
        """Records emitted since the last poll (when the instance collects them)."""
        records, self._collected = self._collected, []
        return records

    def _emit(self, record: Record) -> None:
        if self._collect:
            self._collected.append(record)
        for callback in self._subscribers:
            callback(record)

    # ----------------------------------------------------------------- state
    def inject_state(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Set joint qpos/qvel, mocap pose or actuator activation, e.g. an episode's initial
        state. Entries: ``{type: joint, joint, qpos?, qvel?}``, ``{type: mocap, body, pos?,
        quat?}``, ``{type: actuator, actuator, act}``."""
        model, data = self.model, self.data
        for n, entry in enumerate(entries):
            where = f"inject_state[{n}]"
            kind = entry.get("type")
            if kind == "joint":
                jid = self._object(mujoco.mjtObj.mjOBJ_JOINT, entry.get("joint"), where, "joint")
                jtype = int(model.jnt_type[jid])
                nq, nv = {0: (7, 6), 1: (4, 3), 2: (1, 1), 3: (1, 1)}[jtype]
                qadr, vadr = int(model.jnt_qposadr[jid]), int(model.jnt_dofadr[jid])
                _assign(data.qpos, qadr, nq, entry.get("qpos"), f"{where}.qpos")
                _assign(data.qvel, vadr, nv, entry.get("qvel"), f"{where}.qvel")
            elif kind == "mocap":
                bid = self._object(mujoco.mjtObj.mjOBJ_BODY, entry.get("body"), where, "body")
                mocap = int(model.body_mocapid[bid])
                if mocap < 0:
                    raise InstanceError(f"{where}.body: body {entry.get('body')!r} is not a "
                                        f"mocap body")
                _assign(data.mocap_pos[mocap], 0, 3, entry.get("pos"), f"{where}.pos")
                _assign(data.mocap_quat[mocap], 0, 4, entry.get("quat"), f"{where}.quat")
            elif kind == "actuator":
                aid = self._object(mujoco.mjtObj.mjOBJ_ACTUATOR, entry.get("actuator"), where,
                                   "actuator")
                adr, num = int(model.actuator_actadr[aid]), int(model.actuator_actnum[aid])
                if num == 0:
                    raise InstanceError(f"{where}.actuator: actuator {entry.get('actuator')!r} "
                                        f"has no activation state")
                _assign(data.act, adr, num, entry.get("act"), f"{where}.act")
            else:
                raise InstanceError(f"{where}.type: expected joint, mocap or actuator, got "
                                    f"{kind!r}")

    def _object(self, objtype: mujoco.mjtObj, name: Any, where: str, kind: str) -> int:
        index = mujoco.mj_name2id(self.model, objtype, name) if isinstance(name, str) else -1
        if index < 0:
            raise InstanceError(f"{where}.{kind}: no MuJoCo {kind} named {name!r}")
        return index

    # ----------------------------------------------------------------- stepping
    def step(self) -> None:
        """Advance by one physics tick."""
        self.advance(1)

    def advance(self, ticks: int) -> None:
        """Advance by ``ticks`` physics ticks, one ``mj_step(nstep=k)`` between events."""
        if ticks < 0:
            raise InstanceError(f"advance: ticks must be >= 0, got {ticks}")
        model, data, step = self.model, self.data, mujoco.mj_step
        target = self._tick + ticks
        ingress = self._ingress
        while True:
            t = self._tick
            if self._processed != t:
                self._boundary(t)
                self._processed = t
            if self._recorded or self._releases or ingress.waiting:
                self._commit(t)
            if t >= target:
                return
            if self._snapshot_every and t % self._snapshot_every == 0 \
                    and self._snapshot_pre is None:
                # Captured right before the step so ctrl is what produces the step's forces.
                self._snapshot_pre = (t, (data.qpos.copy(), data.qvel.copy(), data.act.copy(),
                                          data.ctrl.copy()))
            following = self._next_event(t)
            if following > target:
                following = target
            step(model, data, following - t)
            self._tick = following

    def _next_event(self, t: int) -> int:
        following = min(self._read_at) if self._read_at else _NEVER
        if self._deliveries and self._deliveries[0][0] < following:
            following = self._deliveries[0][0]
        if self._releases and self._releases[0][0] < following:
            following = self._releases[0][0]
        if self._recorded and self._recorded[-1][0] < following:
            following = self._recorded[-1][0]
        every = self._snapshot_every
        if every:
            snapshot = t + 1 if self._snapshot_pre is not None else (t // every + 1) * every
            if snapshot < following:
                following = snapshot
        return following if following > t else t + 1

    def _boundary(self, t: int) -> None:
        """Once-only work at boundary ``t``: reads for tick t-1, deliveries, snapshots."""
        model, data = self.model, self.data
        read_at = self._read_at
        dt = self._dt
        for i, at in enumerate(read_at):
            if at != t:
                continue
            device = self._devices[i]
            descriptor = device.descriptor
            acquired = t - 1
            latency = self._latency[i]
            values = device.acquire(model, data)
            offset = self._session_offset
            output = DeviceOutput(
                self._episode, descriptor.id, descriptor.sample_type, acquired, acquired * dt,
                (acquired + latency) * dt, offset + acquired * dt,
                offset + (acquired + latency) * dt, values, descriptor.component_names,
                descriptor.frame_id)
            deliver_at = acquired + latency
            if deliver_at <= t:
                self._emit(output)
            else:
                self._order += 1
                heapq.heappush(self._deliveries, (deliver_at, self._order, output))
            read_at[i] = at + self._period[i]
        deliveries = self._deliveries
        while deliveries and deliveries[0][0] <= t:
            self._emit(heapq.heappop(deliveries)[2])
        if self._snapshot_pre is not None:
            self._snapshot(t)

    def _commit(self, t: int) -> None:
        """Commit recorded and live inputs due at ``t``; apply commands released at ``t``."""
        recorded = self._recorded
        while recorded and recorded[-1][0] <= t:
            self._accept(t, recorded.pop()[2])
        pending, rejected = self._ingress.take()
        for record in rejected:
            self._emit(record)
        for item in pending:
            self._accept(t, item)
        releases = self._releases
        while releases and releases[0][0] <= t:
            self._release(t, heapq.heappop(releases)[2])

    def _accept(self, t: int, item: AcceptedInput) -> None:
        source = item.input
        self._emit(IngressRecord(
            self._episode, source.source_id, source.source_sequence, source.payload_type,
            source.payload_json, True, t, item.acceptance_sequence, "",
            self._session_offset + t * self._dt))
        latency = self.plan.actuators[item.endpoint].latency_ticks
        if latency == 0:
            self._release(t, item)
        else:
            self._order += 1
            heapq.heappush(self._releases, (t + latency, self._order, item))

    def _release(self, t: int, item: AcceptedInput) -> None:
        endpoint = self._endpoints[item.endpoint]
        descriptor = endpoint.descriptor
        command = item.command
        applied = endpoint.apply(self.data, command)
        self._emit(ActuatorApplication(
            self._episode, t, t * self._dt, self._session_offset + t * self._dt,
            descriptor.endpoint, descriptor.actuator, command.mode, command.value,
            command.value, applied))

    def _snapshot(self, t: int) -> None:
        """Complete the snapshot whose state was captured right before the step t-1 → t."""
        data = self.data
        tick, (qpos, qvel, act, ctrl) = self._snapshot_pre
        self._emit(StateSnapshot(
            self._episode, tick, tick * self._dt, self._session_offset + tick * self._dt,
            qpos, qvel, act, ctrl, data.actuator_force.copy(), data.sensordata.copy(),
            data.xpos.copy(), data.xquat.copy()))
        self._snapshot_pre = None

    def state(self) -> dict[str, Any]:
        """A summary of where the instance is (for services and status displays)."""
        return {"episode": self._episode, "tick": self._tick,
                "episode_time_ns": self.episode_time_ns, "session_time_ns": self.session_time_ns,
                "qpos": self.data.qpos.tolist(), "qvel": self.data.qvel.tolist(),
                "accepted_inputs": self.accepted_count, "rejected_inputs": self.rejected_count}


def _as_record(record: IngressRecord | Mapping, n: int) -> IngressRecord:
    if isinstance(record, IngressRecord):
        return record
    if not isinstance(record, Mapping):
        raise IngressError(f"recorded input {n}: expected a mapping, got "
                           f"{type(record).__name__}")
    missing = [key for key in ("source_id", "source_sequence", "payload_type", "payload_json",
                               "commit_tick", "acceptance_sequence") if key not in record]
    if missing:
        raise IngressError(f"recorded input {n}: missing {', '.join(missing)}")
    for key in ("source_sequence", "commit_tick", "acceptance_sequence"):
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise IngressError(f"recorded input {n}: {key} must be a non-negative integer, "
                               f"got {value!r}")
    return IngressRecord(0, str(record["source_id"]), record["source_sequence"],
                         str(record["payload_type"]), str(record["payload_json"]),
                         bool(record.get("accepted", True)), record["commit_tick"],
                         record["acceptance_sequence"], "", 0)


def _assign(target: np.ndarray, start: int, width: int, values: Any, where: str) -> None:
    if values is None:
        return
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.shape[0] != width:
        raise InstanceError(f"{where}: expected {width} value(s), got {array.shape[0]}")
    if not np.all(np.isfinite(array)):
        raise InstanceError(f"{where}: values must be finite, got {array.tolist()}")
    target[start:start + width] = array
