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

This module holds the public run API (reset, enqueue, advance, subscribe, state); the work is
done by its parts: ``listeners`` (who hears which records, the trace hand-off), ``device_reads``
(the devices, their read schedule and delayed outputs), ``stepping`` (the one stepping loop,
commits, snapshots, replay blocks), ``ingress``, ``replay`` and ``state_entries``.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Protocol

import mujoco
import numpy as np
import numpy.typing as npt

from ._document import JsonValue
from .device_reads import DeviceReads, component_rng
from .errors import IngressError, InstanceError
from .entities import Entities
from .ingress import AcceptedInput, Ingress, external_input
from .listeners import Interest, Listeners
from .recorded_inputs import EndpointSignature, RecordedInputs, prepare_recorded_inputs
from .records import EpisodeStart, ExternalInput, IngressRecord
from .replay import CAPTURE_FIELDS, StateCapture
from .sample_block import DeviceColumns
from .sinks import Record, TraceSink
from .state_entries import inject_state
from .stepping import Stepper, state_views

if TYPE_CHECKING:
    from .components import ActuatorDescriptor, DeviceDescriptor, Endpoint
    from .manifest import ScenarioSpec, SimulationManifest
    from .timebase import Timebase

__all__ = ["InstancePlan", "Interest", "Record", "SimulationInstance", "StateCapture",
           "component_rng"]


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

    def inspect(self) -> dict[str, JsonValue]: ...



class SimulationInstance:
    """One run: MuJoCo state, episode/session time, and its parts by responsibility: who
    listens (``Listeners``), the devices and their reads (``DeviceReads``), the ingress, and
    the stepping loop with commits, snapshots and replay blocks (``Stepper``)."""

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
        specs = tuple(d for d in plan.devices if devices is None or d.id in devices)
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
        self._listeners = Listeners(trace, collect, tuple(
            DeviceColumns(d.id, d.sample_type, d.component_names, d.frame_id,
                          d.latency_ticks) for d in specs),
            tuple(view.size for view in state_views(self.data)))
        if snapshot_every is None:
            snapshot_every = plan.manifest.trace.state_every_steps if trace is not None else 0
        self._endpoints: list[Endpoint] = [a.create() for a in plan.actuators]
        # The ingress reads the clock through a weak reference: a bound method would make
        # instance -> ingress -> instance a cycle, which only the cyclic GC frees, and with it
        # the plan and its compiled model (a calibration makes one per candidate).
        this = weakref.ref(self)
        self.entities = Entities(plan.model)
        self._ingress = Ingress(plan.actuators, self._endpoints,
                                lambda: _clock_of(this), self.entities)
        self._device_reads = DeviceReads(self.model, self.data, specs, self._dt,
                                         self._listeners)
        self._stepper = Stepper(self.model, self.data, self._device_reads, self._listeners,
                                self._ingress, self.entities, plan.actuators, self._endpoints,
                                snapshot_every, self._dt,
                                nullcontext() if rollout_context is None else rollout_context)
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
        self._stepper.start(self._episode, self._session_offset)
        self._device_reads.start(self._episode, self._session_offset, self._seed)
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
        for callback in self._listeners.subscribers:  # not collected: poll() stays the run's
            callback(start)
        self._stepper.hand_over()

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
        # The kept samples belong to the episode ending here.
        self._stepper.hand_over()
        self._session_offset += self._stepper.tick * self._dt
        self._episode += 1
        self._start_episode()

    # ----------------------------------------------------------------- time
    @property
    def tick(self) -> int:
        return self._stepper.tick

    @property
    def episode(self) -> int:
        return self._episode

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def episode_time_ns(self) -> int:
        return self._stepper.tick * self._dt

    @property
    def session_time_ns(self) -> int:
        return self._session_offset + self._stepper.tick * self._dt

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
            self, records: RecordedInputs | Iterable[IngressRecord | Mapping[str, object]]) -> int:
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
        tick = self._stepper.tick
        if entries and entries[0].commit_tick < tick:
            first = entries[0]
            raise IngressError(f"recorded input ({first.input.source_id!r} sequence "
                               f"{first.input.source_sequence}): commit_tick "
                               f"{first.commit_tick} is before the current tick {tick}")
        return len(entries) if self._stepper.queue_recorded(records) else 0

    def capture(self, ticks: Sequence[int] | npt.NDArray[np.int64],
                fields: Sequence[str] = CAPTURE_FIELDS) -> StateCapture:
        """Take qpos / qvel / act / sensordata at ``ticks`` (of this episode) as the instance
        runs, without a per-tick callback: a replayed block fills it straight from the
        rollout. One capture per episode; the ticks must not be in the past."""
        array = np.asarray(ticks, dtype=np.int64)
        if array.ndim != 1 or (array.size > 1 and not np.all(array[1:] > array[:-1])):
            array = np.unique(array)
        tick = self._stepper.tick
        if array.size and array[0] < tick:
            raise InstanceError(f"capture: tick {int(array[0])} is before the current tick "
                                f"{tick}")
        capture = self._stepper.capture = StateCapture(self.model, array, fields)
        return capture

    # ----------------------------------------------------------------- outputs
    def subscribe(self, callback: Callable[[Record], None]) -> None:
        """Call ``callback`` (on the owner thread) with every record as it is emitted (the
        subscribers may say they want less: ``set_interest``)."""
        self._listeners.subscribe(callback)

    def set_interest(self, interest: Interest | None) -> None:
        """What the subscribers want, together (None: everything). The samples of a device
        nobody wants are not made (its noise stream and state move on as if they were, so
        what others receive does not change), nor ingress and actuator records when nobody
        wants them; with nothing wanted the instance steps as if nobody listened. Others may
        still arrive (subscribers filter). The collection and the trace always get every
        record. Takes effect from the next ``advance`` on (an owner-thread call)."""
        self._listeners.set_interest(interest)

    def poll(self) -> list[Record]:
        """Records emitted since the last poll (when the instance collects them)."""
        return self._listeners.poll()

    # ----------------------------------------------------------------- state
    def inject_state(self, entries: Sequence[Mapping[str, object]]) -> None:
        """Set joint qpos/qvel, mocap pose or actuator activation, e.g. an episode's initial
        state. Entries: ``{type: joint, joint, qpos?, qvel?}``, ``{type: mocap, body, pos?,
        quat?}``, ``{type: actuator, actuator, act}``."""
        inject_state(self.model, self.data, entries)

    def state(self) -> dict[str, JsonValue]:
        """A summary of where the instance is (for services and status displays)."""
        return {"episode": self._episode, "tick": self._stepper.tick,
                "episode_time_ns": self.episode_time_ns, "session_time_ns": self.session_time_ns,
                "qpos": self.data.qpos.tolist(), "qvel": self.data.qvel.tolist(),
                "accepted_inputs": self.accepted_count, "rejected_inputs": self.rejected_count}

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
        stepper = self._stepper
        if self._listeners.handoff is None:
            stepper.advance(ticks)
            return
        try:
            stepper.advance(ticks)
        except BaseException:
            stepper.hand_over(settle=True)  # what an interrupted read left, made whole
            raise
        stepper.hand_over()


def _clock_of(instance: weakref.ref[SimulationInstance]) -> tuple[int, int]:
    """The clock of an instance still alive (the ingress only asks while it runs)."""
    alive = instance()
    if alive is None:
        raise InstanceError("the instance of this ingress is gone")
    return alive.episode, alive.session_time_ns
