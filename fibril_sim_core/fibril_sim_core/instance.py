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

import dataclasses
import heapq
import weakref
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol, cast

import mujoco
import numpy as np

from .errors import IngressError, InstanceError
from .entities import Entities, EntityCommand
from .ingress import ENTITY, AcceptedInput, Ingress, external_input
from .recorded_inputs import (ControlTrajectory, EndpointSignature, RecordedInputs,
                              prepare_recorded_inputs)
from .records import (ActuatorApplication, DeviceOutput, EpisodeStart, ExternalInput,
                      IngressRecord, StateSnapshot)
from .read_schedule import (DEFER_TICKS, NEVER, TRACE_HANDOFF, Deferral, Phase, ReadSchedule,
                            read_schedule)
from .replay import (CAPTURE_FIELDS, MIN_ROLLOUT_TICKS, StateCapture, block_controls,
                     replay_controls, roll, state_offsets)
from .sample_block import STATE_FIELDS, DeviceColumns, TraceBuffer
from .sinks import Record, RecordWriter, TraceHandoff, TraceSink
from .state_entries import inject_state

if TYPE_CHECKING:
    from .components import ActuatorDescriptor, Device, DeviceDescriptor, Endpoint
    from .manifest import ScenarioSpec, SimulationManifest
    from .timebase import Timebase

#: What a read needs of a device, unpacked once: (acquire, id, sample type, component names,
#: frame, latency).
_Read = tuple[Callable[[mujoco.MjModel, mujoco.MjData], np.ndarray], str, str, tuple[str, ...],
              str, int]

__all__ = ["InstancePlan", "Interest", "Record", "SimulationInstance", "StateCapture",
           "component_rng"]

#: The record types an instance emits to its sinks (EpisodeStart goes to every subscriber).
_MADE_HERE = (DeviceOutput, IngressRecord, ActuatorApplication, StateSnapshot)

#: What the subscribers want, by record type: the ids of the devices / endpoints / sources
#: wanted (None: all of them); a type left out is wanted by nobody. None: everything.
Interest = Mapping[type, "frozenset[str] | None"]


def component_rng(seed: int, component_id: str) -> np.random.Generator:
    """One stream per (episode seed, component id): adding a component changes no other's noise."""
    return np.random.default_rng(np.random.SeedSequence(
        [seed & 0xFFFFFFFF, seed >> 32, zlib.crc32(component_id.encode())]))


class InstancePlan(Protocol):
    """What an instance reads of the plan that made it (a ``SimulationPlan``). A Protocol, so
    this module needs no import of ``plan``, which imports it to create instances."""

    @property
    def manifest(self) -> SimulationManifest: ...
    @property
    def model(self) -> mujoco.MjModel: ...
    @property
    def timebase(self) -> Timebase: ...
    @property
    def devices(self) -> tuple[DeviceDescriptor, ...]: ...
    @property
    def actuators(self) -> tuple[ActuatorDescriptor, ...]: ...
    @property
    def keyframe_id(self) -> int: ...
    @property
    def scenario(self) -> ScenarioSpec: ...
    @property
    def recorded_input_signature(self) -> EndpointSignature: ...

    def inspect(self) -> dict[str, Any]: ...


class SimulationInstance:
    """One run: MuJoCo state, episode/session time, device queues, drivers, ingress, RNG."""

    def __init__(self, plan: InstancePlan, *, seed: int = 0,
                 scenario: ScenarioSpec | None = None, trace: TraceSink | None = None,
                 snapshot_every: int | None = None, collect: bool = True,
                 data: mujoco.MjData | None = None,
                 rollout_context: AbstractContextManager[object] | None = None,
                 devices: Collection[str] | None = None) -> None:
        self.plan = plan
        if devices is not None:
            known = {d.id for d in plan.devices}
            unknown = sorted(set(devices) - known)
            if unknown:
                raise InstanceError(f"create_instance: no device(s) {', '.join(map(repr, unknown))}"
                                    f" in the plan; devices: {', '.join(sorted(known)) or 'none'}")
        # The devices this instance runs (all by default).
        self._device_specs = tuple(d for d in plan.devices if devices is None or d.id in devices)
        self._device_index = {d.id: i for i, d in enumerate(self._device_specs)}
        self.model = plan.model
        if data is not None and data.signature != plan.model.signature:
            raise InstanceError("create_instance: the MjData given was made for a model of "
                                "other sizes (signature mismatch)")
        # A recycled MjData (same size signature) is reset below like a new one.
        self.data = data if data is not None else mujoco.MjData(plan.model)
        self.scenario = scenario or plan.scenario
        self._dt = plan.timebase.timestep_ns
        self._seed = seed
        self._episode = 0
        self._session_offset = 0
        self._subscribers: list[Callable[[Record], None]] = []
        self._collect = collect
        self._collected: list[Record] = []
        self._sinks: list[Callable[[Record], None]] = []  # collection, then subscribers
        self._interest: Interest | None = None  # of the subscribers (set_interest)
        self._heard: frozenset[int] = frozenset()  # devices whose samples someone takes
        self._hears_ingress = False  # someone takes ingress records
        self._hears_actuation = False  # someone takes actuator application records
        # MjData's arrays, fetched once (each attribute access makes a new numpy view), in
        # the order of STATE_FIELDS.
        d = self.data
        self._snapshot_views = (d.qpos, d.qvel, d.act, d.ctrl, d.actuator_force, d.sensordata,
                                d.xpos, d.xquat)
        # What is kept for the trace between hand-overs (see sinks): the records, or with a
        # BlockSink the samples only the trace hears as columns (_trace_columns).
        self._handoff = None if trace is None else TraceHandoff.of(trace, tuple(
            DeviceColumns(d.id, d.sample_type, d.component_names, d.frame_id,
                          d.latency_ticks) for d in self._device_specs),
            tuple(view.size for view in self._snapshot_views))
        self._trace_columns: TraceBuffer | None = None
        self._trace_write: Callable[[Record], None] | None = None
        if self._handoff is not None:
            self._trace_columns = self._handoff.columns
            self._trace_buffer = self._handoff.kept  # its length: how much is kept
            self._trace_sink = self._handoff.keep
            self._subscribers.append(self._trace_sink)
        else:
            self._trace_buffer = ()
            self._trace_sink = _nobody
            if isinstance(trace, RecordWriter):
                self._trace_write = trace.write
                self._subscribers.append(self._trace_write)
            elif trace is not None:
                raise InstanceError(f"create_instance: trace must have write_many or write "
                                    f"(a TraceWriter), got a {type(trace).__name__}")
        # The single list sink, or None (then _emit; a bound method kept here would make the
        # instance a reference cycle, freed only by the cyclic GC).
        self._emit_one: Callable[[Record], None] | None = None
        self._update_sinks()
        if snapshot_every is None:
            snapshot_every = plan.manifest.trace.state_every_steps if trace is not None else 0
        self._snapshot_every = snapshot_every
        self._endpoints: list[Endpoint] = [a.create() for a in plan.actuators]
        # The ingress reads the clock through a weak reference: a bound method would make
        # instance -> ingress -> instance a cycle, which only the cyclic GC frees, and with it
        # the plan and its compiled model (a calibration makes one per candidate).
        this = weakref.ref(self)
        self.entities = Entities(plan.model)
        self._ingress = Ingress(plan.actuators, self._endpoints,
                                lambda: _clock_of(this), self.entities)
        # Where those go in a state row of the trace columns (see _advance): the
        # ones taken before the step, the ones after; empty arrays left out.
        ends = np.cumsum([view.size for view in self._snapshot_views]).tolist()
        copies = [(view.reshape(-1), end - view.size, end)
                  for view, end in zip(self._snapshot_views, ends, strict=True)]
        self._state_copies = (tuple(c for c in copies[:4] if c[0].size),
                              tuple(c for c in copies[4:] if c[0].size))
        self._state_layout = state_offsets(plan.model)
        self._rollout_context = nullcontext() if rollout_context is None else rollout_context
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
            d.create(component_rng(self._seed, d.id)) for d in self._device_specs]
        periods = [d.period_ticks for d in self._device_specs]
        self._latency = [d.latency_ticks for d in self._device_specs]
        # What a read needs per device, unpacked once: (acquire, id, sample type, names, frame,
        # latency).
        self._reads: list[_Read] = [(device.acquire, spec.id, spec.sample_type, spec.component_names,
                        spec.frame_id, spec.latency_ticks)
                       for device, spec in zip(self._devices, self._device_specs, strict=True)]
        self._skips = [device.skip for device in self._devices]
        if self._episode == 0:  # what the devices read is the plan's: one for all episodes
            self._deferral = (Deferral.of(self._devices, self._latency, self.data)
                              if self._trace_columns is not None else None)
        self._deferring = False  # this advance() defers (long enough: DEFER_TICKS)
        self._next_read = 1 if self._devices else NEVER
        # Silent stepping (nothing listens): a device delivering at once whose draws per
        # sample are known is not stopped for; its draws are taken per advance() and, when its
        # state needs it, its last sample is skipped at its tick (ReadSchedule.silent_at).
        self._reading = ReadSchedule(periods, self._latency, tuple(
            i for i, device in enumerate(self._devices)
            if self._latency[i] <= 1 and device.silent_draws() is not None))
        self._read_at = self._reading.read_at  # (per device, without a tabulated schedule)
        self._period = self._reading.periods
        self._silent_next = NEVER
        self._deliveries: list[tuple[int, int, DeviceOutput]] = []
        self._releases: list[tuple[int, int, AcceptedInput]] = []
        self._recorded: list[tuple[int, int, AcceptedInput]] = []
        # The replay whose remaining entries are the tail of _recorded, with its controls.
        self._replay: tuple[RecordedInputs, ControlTrajectory] | None = None
        self._capture: StateCapture | None = None
        self._order = 0
        # (tick, qpos/qvel/act/ctrl before the step; None: taken into the trace's state row)
        self._snapshot_pre: tuple[int, tuple[np.ndarray, ...] | None] | None = None
        self._endpoints[:] = [a.create() for a in self.plan.actuators]
        # The scenario's initial inputs take acceptance 0..n-1 and commit first, at tick 0.
        initial = []
        for n, spec in enumerate(self.scenario.initial_inputs):
            item = external_input(spec.source_id, spec.source_sequence, spec.payload_type,
                                  spec.payload)
            initial.append(AcceptedInput(n, item, *self._ingress.parse(item)))
        self._ingress.start_episode(initial)
        start = EpisodeStart(self._episode, self._seed, self.scenario.keyframe or "",
                             self._session_offset)
        for callback in self._subscribers:  # not collected: poll() stays the run's records
            callback(start)
        self._hand_over()

    @property
    def _keyframe_id(self) -> int:
        name = self.scenario.keyframe
        if name is None:
            return -1
        if self.scenario is self.plan.scenario:
            return self.plan.keyframe_id
        key = int(mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, name))
        if key < 0:
            raise InstanceError(f"scenario keyframe {name!r} is not in the model")
        return key

    def reset(self, *, seed: int | None = None, keyframe: str | None = None) -> None:
        """Start a new episode from the same plan. EpisodeTime restarts at 0; SessionTime goes
        on. ``seed`` replaces the episode seed (default: keep it, so episodes repeat exactly);
        ``keyframe`` overrides the scenario keyframe for this and later episodes."""
        if keyframe is not None:
            if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, keyframe) < 0:
                raise InstanceError(f"reset: no keyframe named {keyframe!r} in the model")
            self.scenario = dataclasses.replace(self.scenario, keyframe=keyframe)
        if seed is not None:
            self._seed = seed
        if self._handoff is not None:  # the kept samples belong to the episode ending here
            self._hand_over()
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

    def enqueue_recorded_trace_inputs(
            self, records: RecordedInputs | Iterable[IngressRecord | Mapping[str, Any]]) -> int:
        """Replay recorded inputs at their recorded commit ticks, in recorded acceptance order.

        ``records`` are IngressRecords (or mappings with their keys), or a RecordedInputs
        prepared once with ``plan.prepare_recorded_inputs`` for replaying into many instances.
        Rejected records are skipped (they never reached physics in the recording either).
        Returns the number queued. Raises IngressError naming the record that is invalid.
        """
        if not isinstance(records, RecordedInputs) or \
                records.signature != self.plan.recorded_input_signature:
            source = (records.entries if isinstance(records, RecordedInputs) else records)
            records = prepare_recorded_inputs(self.plan.actuators, (
                IngressRecord(0, e.input.source_id, e.input.source_sequence,
                              e.input.payload_type, e.input.payload_json, True, e.commit_tick,
                              e.acceptance_sequence, "", 0) if isinstance(e, AcceptedInput)
                else e for e in source))
        entries = records.entries
        if entries and entries[0].commit_tick < self._tick:
            first = entries[0]
            raise IngressError(f"recorded input ({first.input.source_id!r} sequence "
                               f"{first.input.source_sequence}): commit_tick "
                               f"{first.commit_tick} is before the current tick {self._tick}")
        queued = list(records.queue)
        if not queued:
            return 0
        if self._recorded and self._recorded[0][:2] <= queued[-1][:2]:
            # Everything already queued replays first (ties too): the new block is the tail.
            self._recorded = queued + self._recorded
        elif self._recorded:
            merged = sorted(self._recorded + queued, key=lambda entry: entry[:2])
            merged.reverse()
            self._recorded = merged
            self._replay = None
            return len(entries)
        else:
            self._recorded = queued
        controls = records.controls(self.plan.actuators, self._endpoints)
        self._replay = (records, controls) if controls is not None and self._replay is None \
            else None
        return len(entries)

    def capture(self, ticks: Sequence[int] | np.ndarray,
                fields: Sequence[str] = CAPTURE_FIELDS) -> StateCapture:
        """Take qpos / qvel / act / sensordata at ``ticks`` (of this episode) as the instance
        runs, without a per-tick callback: a replayed block fills it straight from the
        rollout. One capture per episode; the ticks must not be in the past."""
        array = np.asarray(ticks, dtype=np.int64)
        if array.ndim != 1 or (array.size > 1 and not np.all(array[1:] > array[:-1])):
            array = np.unique(array)
        if array.size and array[0] < self._tick:
            raise InstanceError(f"capture: tick {int(array[0])} is before the current tick "
                                f"{self._tick}")
        self._capture = StateCapture(self.model, array, fields)
        return self._capture

    # ----------------------------------------------------------------- outputs
    def subscribe(self, callback: Callable[[Record], None]) -> None:
        """Call ``callback`` (on the owner thread) with every record as it is emitted (the
        subscribers may say they want less: ``set_interest``)."""
        self._subscribers.append(callback)
        self._update_sinks()

    def set_interest(self, interest: Interest | None) -> None:
        """What the subscribers want, together (None: everything). The samples of a device
        nobody wants are not made (its noise stream and state move on as if they were, so
        what others receive does not change), nor ingress and actuator records when nobody
        wants them; with nothing wanted the instance steps as if nobody listened. Others may
        still arrive (subscribers filter). The collection and the trace always get every
        record. Takes effect from the next ``advance`` on (an owner-thread call)."""
        self._interest = None if interest is None else dict(interest)
        self._update_sinks()

    def _update_sinks(self) -> None:
        # In place, like the subscriber list it mirrors: a callback that subscribes or polls
        # while a record is being emitted sees the same effect as before the sinks existed.
        interest = self._interest
        external = [s for s in self._subscribers if s is not self._trace_sink
                    and s is not self._trace_write]
        # Nobody wants anything the instance makes (a host's own records, e.g. frame timings,
        # do not count): the external sinks get nothing.
        quiet = (interest is not None and external
                 and not any(kind in interest for kind in _MADE_HERE))
        subscribers = [s for s in self._subscribers if s not in external] if quiet \
            else self._subscribers
        self._sinks[:] = ([self._collected.append] if self._collect else []) + subscribers
        # One sink that is a list's append (the collection or the trace's list): the hot
        # paths call it directly. It calls nothing back, so nobody can subscribe meanwhile.
        alone = len(self._sinks) == 1 and (not subscribers or
                                           subscribers[0] is self._trace_sink)
        self._emit_one = self._sinks[0] if alone else None
        everything = (self._collect or len(self._subscribers) > len(external)  # the trace
                      or interest is None)
        if not self._sinks:
            self._heard = frozenset()
            self._hears_ingress = self._hears_actuation = False
        elif everything or interest is None:
            self._heard = frozenset(range(len(self._device_specs)))
            self._hears_ingress = self._hears_actuation = True
        else:
            devices = interest.get(DeviceOutput, ())
            self._heard = frozenset(i for i, spec in enumerate(self._device_specs)
                                    if devices is None or spec.id in devices)
            self._hears_ingress = IngressRecord in interest
            self._hears_actuation = ActuatorApplication in interest

    @property
    def _listening(self) -> bool:
        return bool(self._sinks)

    def poll(self) -> list[Record]:
        """Records emitted since the last poll (when the instance collects them)."""
        records, self._collected = self._collected, []
        self._update_sinks()
        return records

    def _emit(self, record: Record) -> None:
        for sink in self._sinks:
            sink(record)

    # ----------------------------------------------------------------- state
    def inject_state(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Set joint qpos/qvel, mocap pose or actuator activation, e.g. an episode's initial
        state. Entries: ``{type: joint, joint, qpos?, qvel?}``, ``{type: mocap, body, pos?,
        quat?}``, ``{type: actuator, actuator, act}``."""
        inject_state(self.model, self.data, entries)

    # ----------------------------------------------------------------- stepping
    def step(self) -> None:
        """Advance by one physics tick."""
        self.advance(1)

    def advance(self, ticks: int) -> None:
        """Advance by ``ticks`` physics ticks, one ``mj_step(nstep=k)`` between events.

        A block of replayed recorded commands that nobody listens to record by record (no
        subscriber, no collection, no device or snapshot due) runs as one ``mujoco.rollout``
        with the control trajectory those commands produce: the same steps, bit for bit.
        """
        if ticks < 0:
            raise InstanceError(f"advance: ticks must be >= 0, got {ticks}")
        if self._handoff is None:
            self._advance(ticks)
            return
        try:
            self._advance(ticks)
        except BaseException:
            self._hand_over(settle=True)  # what an interrupted read left, made whole
            raise
        self._hand_over()

    def _hand_over(self, *, settle: bool = False) -> None:
        """Give the records kept for the trace writer to it."""
        handoff = self._handoff
        if handoff is None:
            return
        columns = self._trace_columns
        if columns is not None and self._deferral is not None and self._deferral.used:
            self._deferral.complete(self.model, self._devices, columns)
        handoff.hand_over(self._episode, self._session_offset, self._dt, settle=settle)

    def _advance(self, ticks: int) -> None:
        """The stepping loop, for every kind of run. What a traced run does differently is
        decided per advance(): when only the trace listens, a long enough advance() defers
        the reads (``_read``: ``Deferral``) and, at boundaries without inputs to commit, state
        snapshots go straight into the trace's state rows instead of StateSnapshot records."""
        model, data, step = self.model, self.data, mujoco.mj_step
        kept = self._trace_buffer
        target = self._tick + ticks
        has_work = self._ingress.has_work
        every = self._snapshot_every
        capture = self._capture
        heard = self._heard
        reading = self._reading
        if reading.heard != heard:
            self._follow_reads(heard)
        if reading.batched and len(heard) < len(self._devices):
            self._skip_unheard(target)
        self._deferring = reading.defer_phases is not None and ticks >= DEFER_TICKS
        columns = self._trace_columns
        # Only the trace listens (a callback that could subscribe meanwhile exists only while
        # others listen) and reads are deferred: the state copied before the step goes into
        # the trace's state row.
        state_rows = (self._state_copies[0] if self._deferring and columns is not None
                      and self._emit_one is self._trace_sink and capture is None
                      and self._silent_next == NEVER else None)
        # Only the trace listens to outputs and reads are deferred: a delayed sample due
        # between two stops is delivered at the next, ahead of its reads (where it is in the
        # order anyway), instead of MuJoCo stopping for it.
        lean = self._deferring and self._emit_one is self._trace_sink and capture is None
        # Then every read is deferred (``_read``'s first case), taken here without the call.
        table, phases = reading.table, reading.defer_phases
        deferred = phases if lean and table is not None and phases is not None else None
        gaps = table[1] if table is not None else ()
        cycle = len(gaps)
        read_deferred = self._read_deferred
        # The loop inlines _boundary and _next_event: it runs once per event, and at kHz device
        # rates that is nearly every tick.
        while True:
            t = self._tick
            if len(kept) >= TRACE_HANDOFF:
                self._hand_over()
            if self._processed != t:
                deliveries = self._deliveries
                if lean and deliveries and deliveries[0][0] < t:
                    self._deliver(t - 1)
                if t == self._next_read:
                    if deferred is not None:
                        phase = (t - 1) % cycle
                        self._next_read = t + gaps[phase]
                        read_deferred(t, deferred[phase])
                    else:
                        self._read(t)
                if t == self._silent_next:
                    self._skip_last(t)
                deliveries = self._deliveries
                if deliveries and deliveries[0][0] <= t:
                    self._deliver(t)
                if self._snapshot_pre is not None:
                    self._snapshot(t)
                if capture is not None:
                    capture.take_sensordata(t, data)
                self._processed = t
            committing = self._recorded or self._releases or has_work()
            if committing:
                self._commit(t)
            if capture is not None:
                capture.take_state(t, data)
            if t >= target:
                return
            following = self._next_read
            if self._silent_next < following:
                following = self._silent_next
            if every:
                if self._snapshot_pre is None and t % every == 0:
                    # Captured right before the step so ctrl is what produces the step's forces.
                    if state_rows is not None and columns is not None and not committing:
                        row = columns.state_row()  # _snapshot fills the rest after the step
                        for view, first, end in state_rows:
                            row[first:end] = view
                        self._snapshot_pre = (t, None)
                    else:
                        qpos, qvel, act, ctrl = self._snapshot_views[:4]
                        self._snapshot_pre = (t, (qpos.copy(), qvel.copy(), act.copy(),
                                                  ctrl.copy()))
                snapshot = t + 1 if self._snapshot_pre is not None else (t // every + 1) * every
                if snapshot < following:
                    following = snapshot
            deliveries = self._deliveries
            if deliveries and deliveries[0][0] < following and not lean:
                following = deliveries[0][0]
            if self._releases or self._recorded or capture is not None:
                following = self._next_event(t, following)
            if following > target:
                following = target
            elif following <= t:
                following = t + 1
            # (_block_end refuses a block without replayed inputs left or a capture.)
            if following == t + 1 and ((self._recorded and self._replay is not None)
                                       or capture is not None):
                end = self._block_end(t, target)
                if end - t >= MIN_ROLLOUT_TICKS:
                    self._block(t, end)
                    continue
            step(model, data, following - t)
            self._tick = following

    def _follow_reads(self, heard: frozenset[int]) -> None:
        """Follow the schedule of the devices read while ``heard`` are heard (the others
        that are batched are skipped in bulk, see ``_skip_unheard``) from the next
        unprocessed boundary on (subscribing is an owner-thread call between advance()
        calls, or from a callback, which only exists while listening)."""
        start = max(1, self._tick + (self._processed == self._tick))
        self._next_read = self._reading.follow(heard, start, self._deferral)

    def _skip_unheard(self, target: int) -> None:
        """Silent stepping to ``target``: the samples of the batched devices nobody hears up
        to ``target`` are skipped at once (``ReadSchedule.skip_unheard``)."""
        start = max(1, self._tick + (self._processed == self._tick))
        if start <= target:
            self._silent_next = self._reading.skip_unheard(start, target, self._devices)

    def _skip_last(self, t: int) -> None:
        model, data = self.model, self.data
        indices, self._silent_next = self._reading.take_silent(t)
        for i in indices:
            self._devices[i].skip(model, data)

    def _next_event(self, t: int, following: int) -> int:
        """The earliest of ``following`` (reads, deliveries, snapshots), command releases,
        recorded inputs and capture rows after boundary ``t``."""
        if self._releases and self._releases[0][0] < following:
            following = self._releases[0][0]
        if self._recorded and self._recorded[-1][0] < following:
            following = self._recorded[-1][0]
        if self._capture is not None:
            following = min(following, self._capture.next_event(t))
        return following

    # ----------------------------------------------------------------- replay blocks
    def _block_end(self, t: int, target: int) -> int:
        """How far from ``t`` nothing but replayed commands and captures happen (``t`` when a
        block cannot run: someone listens to records, a snapshot is due, live input waits)."""
        if self._listening or self._snapshot_every or self._ingress.waiting:
            return t
        remaining = len(self._recorded)
        if remaining:
            if self._replay is None or remaining > len(self._replay[0].entries):
                return t
        elif self._capture is None:
            return t
        end = min(self._next_read, self._silent_next, target)
        if self._deliveries:
            end = min(end, self._deliveries[0][0])
        for release, _, item in self._releases:  # a few commands waiting out their latency
            if self._endpoints[item.endpoint].control(item.endpoint_command) is None:
                end = min(end, release)
        return end

    def _block(self, t: int, end: int) -> None:
        """Step ``t`` → ``end`` in one rollout, committing and releasing the replayed commands
        due in ``(t, end)`` exactly as tick-by-tick stepping would."""
        model, data = self.model, self.data
        # Commands committed before the block that are released inside it go first (on one
        # ctrl they were committed before any command of the block).
        waiting: list[tuple[int, int, float]] = []
        while self._releases and self._releases[0][0] < end:
            release_tick, _, item = heapq.heappop(self._releases)
            control = self._endpoints[item.endpoint].control(item.endpoint_command)
            assert control is not None  # (_block_end ends the block at other releases)
            waiting.append((release_tick - t, *control))
        replay = self._replay
        if self._recorded and replay is not None:  # (_block_end: recorded ones are replay's)
            records, controls = replay
            first = len(records.entries) - len(self._recorded)
            table, consumed, later = replay_controls(data.ctrl, t, end, waiting, records,
                                                     controls, first)
            for release_tick, n in later:  # released after the block: they wait
                self._order += 1
                heapq.heappush(self._releases, (release_tick, self._order, records.entries[n]))
            if consumed:
                self._ingress.skip_past(int(records.acceptance_reached[first + consumed - 1]))
                del self._recorded[len(self._recorded) - consumed:]
        elif waiting:
            table = block_controls(data.ctrl, t, end, waiting, None, None, 0)[0]
        else:
            table = np.empty((end - t, model.nu))
            table[:] = data.ctrl
        roll(model, data, table, self._rollout_context, self._capture, t, self._state_layout)
        self._tick = end

    def _deliver(self, t: int) -> None:
        """Emit the delayed device outputs due at boundary ``t``."""
        deliveries = self._deliveries
        emit = self._emit_one or self._emit
        columns = self._trace_columns
        if columns is not None and emit is self._trace_sink:  # only the trace: as columns
            index = self._device_index
            while deliveries and deliveries[0][0] <= t:
                output = heapq.heappop(deliveries)[2]
                i = index[output[1]]
                columns.ticks[i].append(output[3])
                columns.values[i].append(output[8])
                columns.order.append(i)
            return
        while deliveries and deliveries[0][0] <= t:
            emit(heapq.heappop(deliveries)[2])

    def _read(self, t: int) -> None:
        """The devices due at boundary ``t`` sample tick t-1 (see the time model above)."""
        acquired = t - 1
        reading = self._reading
        schedule = reading.table
        indices: Sequence[int]
        if schedule is not None:
            due, gaps = schedule
            phase = acquired % len(gaps)
            self._next_read = t + gaps[phase]
            phases = reading.defer_phases
            if self._deferring and phases is not None and self._emit_one is self._trace_sink:
                self._read_deferred(t, phases[phase])
                return
            indices = due[phase]
        else:  # periods whose common cycle is too long for a table
            indices, self._next_read = reading.due_untabulated(t)
        model, data = self.model, self.data
        reads = self._reads
        unheard = reading.unheard
        if unheard:
            if not self._sinks:  # silent: every device read is unheard (no filtering)
                quiet, indices = indices, ()
            else:
                quiet = [i for i in indices if i in unheard]
                if quiet:
                    indices = [i for i in indices if i not in unheard]
            skips = self._skips
            for i in quiet:  # outputs delivered at once would go nowhere: only skip them
                read = reads[i]
                if read[5] > 1:  # delivered later: someone may listen by then
                    self._delay(t, read, read[0](model, data))
                else:  # the device's state and noise stream move on as if acquired
                    skips[i](model, data)
            if not indices:
                return
        emit = self._emit_one or self._emit
        columns = self._trace_columns
        if columns is not None and emit is self._trace_sink:  # only the trace
            self._read_columns(t, indices, columns.order)
            return
        dt = self._dt
        episode = self._episode
        acquired_ns = acquired * dt
        offset = self._session_offset
        new = tuple.__new__
        for i in indices:
            read = reads[i]
            acquire, device_id, sample_type, names, frame_id, latency = read
            values = acquire(model, data)
            if latency > 1:
                self._delay(t, read, values)
            else:
                deliver_ns = (acquired + latency) * dt
                emit(new(DeviceOutput, (episode, device_id, sample_type, acquired, acquired_ns,
                                        deliver_ns, offset + acquired_ns, offset + deliver_ns,
                                        values, names, frame_id)))

    def _read_deferred(self, t: int, phase: Phase) -> None:
        """The reads at boundary ``t`` while they are deferred (only the trace listens): the
        deferred devices' inputs are copied (``Deferral.gather``), their samples computed at
        hand-over; the others (``phase``'s second item) are read now."""
        entries, now, gather = phase
        columns, deferral = self._trace_columns, self._deferral
        assert columns is not None and deferral is not None  # (deferring: both exist)
        if now:
            self._read_columns(t, now)
        if gather:
            deferral.gather(t - 1, self.model, self._devices, columns)
        columns.order.extend(entries)

    def _read_columns(self, t: int, indices: Iterable[int],
                      order: list[int] | None = None) -> None:
        """Read ``indices`` at boundary ``t`` while only the trace listens: a sample delivered
        at once goes to its device's columns (see sample_block) and its entry to ``order``
        (None: the caller writes it, with the deferred ones'), a later one to the delivery
        queue."""
        model, data = self.model, self.data
        reads = self._reads
        columns = self._trace_columns
        assert columns is not None  # (only the trace listens: as columns)
        ticks, kept = columns.ticks, columns.values
        acquired = t - 1
        for i in indices:
            read = reads[i]
            values = read[0](model, data)
            if read[5] > 1:
                self._delay(t, read, values)
            else:
                ticks[i].append(acquired)
                kept[i].append(values)
                if order is not None:
                    order.append(i)

    def _delay(self, t: int, read: _Read, values: np.ndarray) -> None:
        """Queue the output of a read at boundary ``t`` for its delivery tick."""
        _, device_id, sample_type, names, frame_id, latency = read
        acquired = t - 1
        dt = self._dt
        deliver_at = acquired + latency
        offset = self._session_offset
        self._order += 1
        heapq.heappush(self._deliveries, (deliver_at, self._order, tuple.__new__(DeviceOutput, (
            self._episode, device_id, sample_type, acquired, acquired * dt, deliver_at * dt,
            offset + acquired * dt, offset + deliver_at * dt, values, names, frame_id))))

    def _commit(self, t: int) -> None:
        """Commit recorded and live inputs due at ``t``; apply commands released at ``t``."""
        recorded = self._recorded
        due = []
        while recorded and recorded[-1][0] <= t:
            due.append(recorded.pop()[2])
        # Commit order: live inputs, then the replayed ones due (numbered after them).
        pending, rejected = self._ingress.take(due)
        for record in rejected:
            self._emit(record)
        for item in pending:
            self._accept(t, item)
        releases = self._releases
        while releases and releases[0][0] <= t:
            self._release(t, heapq.heappop(releases)[2])

    def _accept(self, t: int, item: AcceptedInput) -> None:
        if self._hears_ingress:
            source = item.input
            self._emit(IngressRecord(
                self._episode, source.source_id, source.source_sequence, source.payload_type,
                source.payload_json, True, t, item.acceptance_sequence, "",
                self._session_offset + t * self._dt))
        if item.endpoint == ENTITY:  # placed now: nothing between commit and the state
            self.entities.apply(self.data, cast(EntityCommand, item.command))
            return
        latency = self.plan.actuators[item.endpoint].latency_ticks
        if latency == 0:
            self._release(t, item)
        else:
            self._order += 1
            heapq.heappush(self._releases, (t + latency, self._order, item))

    def _release(self, t: int, item: AcceptedInput) -> None:
        endpoint = self._endpoints[item.endpoint]
        descriptor = endpoint.descriptor
        command = item.endpoint_command
        applied = endpoint.apply(self.data, command)
        if not self._hears_actuation:
            return
        self._emit(ActuatorApplication(
            self._episode, t, t * self._dt, self._session_offset + t * self._dt,
            descriptor.endpoint, descriptor.actuator, command.mode, command.value,
            command.value, applied))

    def _snapshot(self, t: int) -> None:
        """Complete the snapshot whose state was captured right before the step t-1 → t."""
        assert self._snapshot_pre is not None  # (called when one is pending)
        tick, before = self._snapshot_pre
        if before is None:  # taken into the trace's state row (see _advance)
            columns = self._trace_columns
            assert columns is not None  # (only a traced run takes a row)
            row = columns.state_row()
            for view, first, end in self._state_copies[1]:
                row[first:end] = view
            columns.commit_state(tick)
            self._snapshot_pre = None
            return
        qpos, qvel, act, ctrl = before
        force, sensordata, xpos, xquat = self._snapshot_views[4:]
        self._emit(StateSnapshot(
            self._episode, tick, tick * self._dt, self._session_offset + tick * self._dt,
            qpos, qvel, act, ctrl, force.copy(), sensordata.copy(), xpos.copy(), xquat.copy()))
        self._snapshot_pre = None

    def state(self) -> dict[str, Any]:
        """A summary of where the instance is (for services and status displays)."""
        return {"episode": self._episode, "tick": self._tick,
                "episode_time_ns": self.episode_time_ns, "session_time_ns": self.session_time_ns,
                "qpos": self.data.qpos.tolist(), "qvel": self.data.qvel.tolist(),
                "accepted_inputs": self.accepted_count, "rejected_inputs": self.rejected_count}


def _nobody(record: Record) -> None:
    """The trace sink of an instance without a RecordSink: never called (no list keeps)."""


def _clock_of(instance: weakref.ref[SimulationInstance]) -> tuple[int, int]:
    """The clock of an instance still alive (the ingress only asks while it runs)."""
    alive = instance()
    if alive is None:
        raise InstanceError("the instance of this ingress is gone")
    return alive._clock()
