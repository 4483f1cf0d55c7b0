"""The stepping loop of an instance, for every kind of run, and what happens at its boundaries
besides device reads: committing inputs and releasing commands, state snapshots, state capture,
and replayed blocks stepped as one ``mujoco.rollout``.

One loop: what a traced run does differently (deferred reads, state snapshots straight into the
trace's rows, delayed samples delivered at the next stop) is decided once per advance() and
held in locals, so the loop costs no more than the two copies it replaced. Between two events
it makes one ``mj_step(m, d, nstep=k)`` call.
"""

from __future__ import annotations

import heapq
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, cast

import mujoco
import numpy as np
import numpy.typing as npt

from .device_reads import DeviceReads
from .entities import Entities, EntityCommand
from .ingress import ENTITY, AcceptedInput, Ingress
from .listeners import Listeners
from .read_schedule import DEFER_TICKS, NEVER, TRACE_HANDOFF
from .recorded_inputs import ControlTrajectory, RecordedInputs
from .records import ActuatorApplication, IngressRecord, StateSnapshot
from .replay import MIN_ROLLOUT_TICKS, StateCapture, block_controls, replay_controls, roll, \
    state_offsets

if TYPE_CHECKING:
    from .components import ActuatorDescriptor, Endpoint

__all__ = ["Stepper", "state_views"]

Array = npt.NDArray[np.float64]
#: (MjData array flattened, first column, end column) of a state row.
StateCopy = tuple[Array, int, int]
#: A queued input: (tick, order, input); released commands by tick, recorded inputs reversed.
Queued = tuple[int, int, AcceptedInput]


def state_views(data: mujoco.MjData) -> tuple[Array, ...]:
    """MjData's arrays of a state snapshot, fetched once (each attribute access makes a new
    numpy view), in the order of ``sample_block.STATE_FIELDS``."""
    return (data.qpos, data.qvel, data.act, data.ctrl, data.actuator_force, data.sensordata,
            data.xpos, data.xquat)


class Stepper:
    """One instance's stepping: the tick, the boundary work done (``processed``), the command
    releases waiting out their latency, the recorded inputs still to commit (reversed: the
    next at the end) with the replay they come from, the state capture and the pending state
    snapshot. ``start`` begins an episode; ``advance`` steps."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, reads: DeviceReads,
                 listeners: Listeners, ingress: Ingress, entities: Entities,
                 actuators: tuple[ActuatorDescriptor, ...], endpoints: list[Endpoint],
                 snapshot_every: int, timestep_ns: int,
                 rollout_context: AbstractContextManager[object]) -> None:
        self.model = model
        self.data = data
        self.reads = reads
        self.listeners = listeners
        self.columns = listeners.trace_columns  # (fixed: the trace is the instance's)
        self.ingress = ingress
        self.entities = entities
        self.actuators = actuators
        self.endpoints = endpoints  # (replaced in place each episode: the ingress holds it)
        self.snapshot_every = snapshot_every
        self.dt = timestep_ns
        self.rollout_context = rollout_context
        self.snapshot_views = state_views(data)
        # Where those go in a state row of the trace columns (see advance): the ones taken
        # before the step, the ones after; empty arrays left out.
        ends = np.cumsum([view.size for view in self.snapshot_views]).tolist()
        copies = [(view.reshape(-1), end - view.size, end)
                  for view, end in zip(self.snapshot_views, ends, strict=True)]
        self.state_copies: tuple[tuple[StateCopy, ...], tuple[StateCopy, ...]] = (
            tuple(c for c in copies[:4] if c[0].size), tuple(c for c in copies[4:] if c[0].size))
        self.state_layout = state_offsets(model)
        self.episode = 0
        self.session_offset = 0
        self.tick = 0
        self.processed = -1  # last boundary whose once-only work is done
        self.releases: list[Queued] = []
        self.recorded: list[Queued] = []
        # The replay whose remaining entries are the tail of ``recorded``, with its controls.
        self.replay: tuple[RecordedInputs, ControlTrajectory] | None = None
        self.capture: StateCapture | None = None
        self.order = 0  # tie-break of releases due at one tick: the order they were committed
        # (tick, qpos/qvel/act/ctrl before the step; None: taken into the trace's state row)
        self.snapshot_pre: tuple[int, tuple[Array, ...] | None] | None = None

    def start(self, episode: int, session_offset_ns: int) -> None:
        """Episode-local state: tick 0, nothing queued, captured or pending."""
        self.episode = episode
        self.session_offset = session_offset_ns
        self.tick = 0
        self.processed = -1
        self.releases = []
        self.recorded = []
        self.replay = None
        self.capture = None
        self.order = 0
        self.snapshot_pre = None

    def hand_over(self, *, settle: bool = False) -> None:
        """Give the records kept for the trace writer to it."""
        handoff = self.listeners.handoff
        if handoff is None:
            return
        self.reads.complete()
        handoff.hand_over(self.episode, self.session_offset, self.dt, settle=settle)

    def queue_recorded(self, records: RecordedInputs) -> bool:
        """Queue recorded inputs behind (or among) those queued; False when none are."""
        queued = list(records.queue)
        if not queued:
            return False
        recorded = self.recorded
        if recorded and recorded[0][:2] <= queued[-1][:2]:
            # Everything already queued replays first (ties too): the new block is the tail.
            self.recorded = queued + recorded
        elif recorded:
            merged = sorted(recorded + queued, key=lambda entry: entry[:2])
            merged.reverse()
            self.recorded = merged
            self.replay = None
            return True
        else:
            self.recorded = queued
        controls = records.controls(self.actuators, self.endpoints)
        self.replay = (records, controls) if controls is not None and self.replay is None \
            else None
        return True

    def advance(self, ticks: int) -> None:
        """Step ``ticks`` ticks. What a traced run does differently is decided here, once:
        when only the trace listens, a long enough advance() defers the reads
        (``DeviceReads.read``: ``Deferral``) and, at boundaries without inputs to commit, state
        snapshots go straight into the trace's state rows instead of StateSnapshot records."""
        model, data, step = self.model, self.data, mujoco.mj_step
        reads = self.reads
        out = self.listeners
        kept = out.kept
        target = self.tick + ticks
        has_work = self.ingress.has_work
        every = self.snapshot_every
        capture = self.capture
        heard = out.heard
        schedule = reads.schedule
        # From the next unprocessed boundary on (subscribing is an owner-thread call between
        # advance() calls, or from a callback, which only exists while listening).
        start = max(1, self.tick + (self.processed == self.tick))
        if schedule.heard != heard:
            reads.follow(heard, start)
        if schedule.batched and len(heard) < len(reads.devices):
            reads.skip_unheard(start, target)
        deferring = reads.deferring = schedule.defer_phases is not None and ticks >= DEFER_TICKS
        columns = self.columns
        trace_alone = out.emit_one is out.trace_sink
        # Only the trace listens (a callback that could subscribe meanwhile exists only while
        # others listen) and reads are deferred: the state copied before the step goes into
        # the trace's state row.
        state_rows = (self.state_copies[0] if deferring and columns is not None
                      and trace_alone and capture is None
                      and reads.silent_next == NEVER else None)
        # Only the trace listens to outputs and reads are deferred: a delayed sample due
        # between two stops is delivered at the next, ahead of its reads (where it is in the
        # order anyway), instead of MuJoCo stopping for it.
        lean = deferring and trace_alone and capture is None
        # Then every read is deferred (``read``'s first case), taken here without the call.
        table, phases = schedule.table, schedule.defer_phases
        deferred = phases if lean and table is not None and phases is not None else None
        gaps = table[1] if table is not None else ()
        cycle = len(gaps)
        read, read_deferred, deliver = reads.read, reads.read_deferred, reads.deliver
        deliveries = reads.deliveries  # (changed in place)
        pre_views = self.snapshot_views[:4]
        # The loop inlines the boundary's work and _next_event: it runs once per event, and at
        # kHz device rates that is nearly every tick.
        while True:
            t = self.tick
            if len(kept) >= TRACE_HANDOFF:
                self.hand_over()
            if self.processed != t:
                if lean and deliveries and deliveries[0][0] < t:
                    deliver(t - 1)
                if t == reads.next_read:
                    if deferred is not None:
                        phase = (t - 1) % cycle
                        reads.next_read = t + gaps[phase]
                        read_deferred(t, deferred[phase])
                    else:
                        read(t)
                if t == reads.silent_next:
                    reads.skip_last(t)
                if deliveries and deliveries[0][0] <= t:
                    deliver(t)
                if self.snapshot_pre is not None:
                    self._snapshot(t)
                if capture is not None:
                    capture.take_sensordata(t, data)
                self.processed = t
            committing = self.recorded or self.releases or has_work()
            if committing:
                self._commit(t)
            if capture is not None:
                capture.take_state(t, data)
            if t >= target:
                return
            following = reads.next_read
            if reads.silent_next < following:
                following = reads.silent_next
            if every:
                if self.snapshot_pre is None and t % every == 0:
                    # Captured right before the step so ctrl is what produces the step's forces.
                    if state_rows is not None and columns is not None and not committing:
                        row = columns.state_row()  # _snapshot fills the rest after the step
                        for view, first, end in state_rows:
                            row[first:end] = view
                        self.snapshot_pre = (t, None)
                    else:
                        qpos, qvel, act, ctrl = pre_views
                        self.snapshot_pre = (t, (qpos.copy(), qvel.copy(), act.copy(),
                                                 ctrl.copy()))
                snapshot = t + 1 if self.snapshot_pre is not None else (t // every + 1) * every
                if snapshot < following:
                    following = snapshot
            if deliveries and deliveries[0][0] < following and not lean:
                following = deliveries[0][0]
            if self.releases or self.recorded or capture is not None:
                following = self._next_event(t, following)
            if following > target:
                following = target
            elif following <= t:
                following = t + 1
            # (_block_end refuses a block without replayed inputs left or a capture.)
            if following == t + 1 and ((self.recorded and self.replay is not None)
                                       or capture is not None):
                end = self._block_end(t, target)
                if end - t >= MIN_ROLLOUT_TICKS:
                    self._block(t, end)
                    continue
            step(model, data, following - t)
            self.tick = following

    def _next_event(self, t: int, following: int) -> int:
        """The earliest of ``following`` (reads, deliveries, snapshots), command releases,
        recorded inputs and capture rows after boundary ``t``."""
        if self.releases and self.releases[0][0] < following:
            following = self.releases[0][0]
        if self.recorded and self.recorded[-1][0] < following:
            following = self.recorded[-1][0]
        if self.capture is not None:
            following = min(following, self.capture.next_event(t))
        return following

    # ----------------------------------------------------------------- replay blocks
    def _block_end(self, t: int, target: int) -> int:
        """How far from ``t`` nothing but replayed commands and captures happen (``t`` when a
        block cannot run: someone listens to records, a snapshot is due, live input waits)."""
        if self.listeners.sinks or self.snapshot_every or self.ingress.waiting:
            return t
        remaining = len(self.recorded)
        if remaining:
            if self.replay is None or remaining > len(self.replay[0].entries):
                return t
        elif self.capture is None:
            return t
        reads = self.reads
        end = min(reads.next_read, reads.silent_next, target)
        if reads.deliveries:
            end = min(end, reads.deliveries[0][0])
        for release, _, item in self.releases:  # a few commands waiting out their latency
            if self.endpoints[item.endpoint].control(item.endpoint_command) is None:
                end = min(end, release)
        return end

    def _block(self, t: int, end: int) -> None:
        """Step ``t`` → ``end`` in one rollout, committing and releasing the replayed commands
        due in ``(t, end)`` exactly as tick-by-tick stepping would."""
        model, data = self.model, self.data
        # Commands committed before the block that are released inside it go first (on one
        # ctrl they were committed before any command of the block).
        waiting: list[tuple[int, int, float]] = []
        while self.releases and self.releases[0][0] < end:
            release_tick, _, item = heapq.heappop(self.releases)
            control = self.endpoints[item.endpoint].control(item.endpoint_command)
            assert control is not None  # (_block_end ends the block at other releases)
            waiting.append((release_tick - t, *control))
        replay = self.replay
        if self.recorded and replay is not None:  # (_block_end: recorded ones are replay's)
            records, controls = replay
            first = len(records.entries) - len(self.recorded)
            table, consumed, later = replay_controls(data.ctrl, t, end, waiting, records,
                                                     controls, first)
            for release_tick, n in later:  # released after the block: they wait
                self.order += 1
                heapq.heappush(self.releases, (release_tick, self.order, records.entries[n]))
            if consumed:
                self.ingress.skip_past(int(records.acceptance_reached[first + consumed - 1]))
                del self.recorded[len(self.recorded) - consumed:]
        elif waiting:
            table = block_controls(data.ctrl, t, end, waiting, None, None, 0)[0]
        else:
            table = np.empty((end - t, model.nu))
            table[:] = data.ctrl
        roll(model, data, table, self.rollout_context, self.capture, t, self.state_layout)
        self.tick = end

    # ----------------------------------------------------------------- inputs
    def _commit(self, t: int) -> None:
        """Commit recorded and live inputs due at ``t``; apply commands released at ``t``."""
        recorded = self.recorded
        due = []
        while recorded and recorded[-1][0] <= t:
            due.append(recorded.pop()[2])
        # Commit order: live inputs, then the replayed ones due (numbered after them).
        pending, rejected = self.ingress.take(due)
        for record in rejected:
            self.listeners.emit(record)
        for item in pending:
            self._accept(t, item)
        releases = self.releases
        while releases and releases[0][0] <= t:
            self._release(t, heapq.heappop(releases)[2])

    def _accept(self, t: int, item: AcceptedInput) -> None:
        if self.listeners.hears_ingress:
            source = item.input
            self.listeners.emit(IngressRecord(
                self.episode, source.source_id, source.source_sequence, source.payload_type,
                source.payload_json, True, t, item.acceptance_sequence, "",
                self.session_offset + t * self.dt))
        if item.endpoint == ENTITY:  # placed now: nothing between commit and the state
            self.entities.apply(self.data, cast(EntityCommand, item.command))
            return
        latency = self.actuators[item.endpoint].latency_ticks
        if latency == 0:
            self._release(t, item)
        else:
            self.order += 1
            heapq.heappush(self.releases, (t + latency, self.order, item))

    def _release(self, t: int, item: AcceptedInput) -> None:
        endpoint = self.endpoints[item.endpoint]
        descriptor = endpoint.descriptor
        command = item.endpoint_command
        applied = endpoint.apply(self.data, command)
        if not self.listeners.hears_actuation:
            return
        self.listeners.emit(ActuatorApplication(
            self.episode, t, t * self.dt, self.session_offset + t * self.dt,
            descriptor.endpoint, descriptor.actuator, command.mode, command.value,
            command.value, applied))

    # ----------------------------------------------------------------- snapshots
    def _snapshot(self, t: int) -> None:
        """Complete the snapshot whose state was captured right before the step t-1 → t."""
        assert self.snapshot_pre is not None  # (called when one is pending)
        tick, before = self.snapshot_pre
        if before is None:  # taken into the trace's state row (see advance)
            columns = self.columns
            assert columns is not None  # (only a traced run takes a row)
            row = columns.state_row()
            for view, first, end in self.state_copies[1]:
                row[first:end] = view
            columns.commit_state(tick)
            self.snapshot_pre = None
            return
        qpos, qvel, act, ctrl = before
        force, sensordata, xpos, xquat = self.snapshot_views[4:]
        self.listeners.emit(StateSnapshot(
            self.episode, tick, tick * self.dt, self.session_offset + tick * self.dt,
            qpos, qvel, act, ctrl, force.copy(), sensordata.copy(), xpos.copy(), xquat.copy()))
        self.snapshot_pre = None
