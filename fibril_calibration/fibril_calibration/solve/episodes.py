"""Replaying one recorded episode on a candidate plan and turning it into residuals.

Lifecycle of a rollout (no calibration-only execution path):

1. ``plan.create_instance(seed=episode_seed)``: the manifest's scenario keyframe and initial
   external inputs are restored by the normal lifecycle;
2. ``instance.inject_state(initial_state)``;
3. ``instance.enqueue_recorded_trace_inputs(recorded_inputs)``: recorded commit ticks and
   acceptance order pass the ordinary ingress contract; nothing writes ``ctrl`` directly;
4. the instance advances event-driven to the boundaries where a snapshot observation is read
   and then to the rollout end; between those it runs whole ``mj_step(nstep=k)`` spans.

Rollout length: ``horizon_steps`` when given, otherwise the first tick at or after the last
reference time of the episode. Snapshot observations that need a later grid point (linear
alignment brackets the last reference time) extend the rollout to that point. Event-driven
observations see the samples stamped in ``[0, horizon]``.

The schedule of snapshot reads depends only on the reference times, the alignment and the
physics timestep, never on the candidate parameters, so it is computed once per episode.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import mujoco
import numpy as np
import numpy.typing as npt

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.records import ActuatorApplication, DeviceOutput

from ..alignment import align, quat_error
from ..errors import EvaluationError
from ..model.decoders import CalibrationDeviceOutputDecoderRegistry
from ..model.observations import ObservationSpec, SnapshotReader, snapshot_reader
from ..recordings.time_offsets import OffsetPlan, offset_ticks, shifted_linear

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan
    from fibril_sim_core.recorded_inputs import EndpointSignature, RecordedInputs

    from ..request.episode_specs import EpisodeSpec, SignalSpec

# MuJoCo resets the state (or zeroes a huge control: BADCTRL) and goes on: a rollout that
# raised any of these has no valid samples.
_WARNINGS = (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQPOS,
             mujoco.mjtWarning.mjWARN_BADQVEL, mujoco.mjtWarning.mjWARN_BADCTRL)


@dataclass(frozen=True)
class SignalSchedule:
    """One signal of an episode: its observation and (snapshot) the grid ticks to capture."""

    signal: SignalSpec
    observation: ObservationSpec
    ticks: np.ndarray | None  # snapshot: sorted unique ticks whose state is read
    # Exact alignment with one grid tick per reference sample: the track is already aligned.
    identity: bool = False


@dataclass
class ScheduleMemo:
    """What a schedule computes once for every candidate: the recorded inputs parsed per
    endpoint signature (a few: see ``_keep``), the captured ticks per set of captured signals
    and the capture rows a signal reads (None: all of them, in order)."""

    inputs: dict[EndpointSignature, RecordedInputs] = field(default_factory=dict)
    capture: dict[tuple[int, ...], npt.NDArray[np.int64]] = field(default_factory=dict)
    rows: dict[int, npt.NDArray[np.intp] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class EpisodeSchedule:
    """Parameter-independent rollout plan of one episode."""

    episode: EpisodeSpec
    timestep_ns: int
    horizon: int  # event-driven samples are those stamped at or before horizon·dt
    end_tick: int  # the rollout ends here at least (snapshot reads included)
    boundaries: tuple[int, ...]  # ascending boundaries with reads of derived values (poses)
    reads: tuple[tuple[tuple[int, int], ...], ...]  # per boundary: (signal index, row)
    signals: tuple[SignalSchedule, ...]
    # Per-schedule memo, the same for every candidate.
    prepared: ScheduleMemo = field(default_factory=ScheduleMemo, compare=False, repr=False)

    @cached_property
    def devices(self) -> frozenset[str]:
        """The devices an observation reads: only they run (the others' outputs would go
        nowhere)."""
        return frozenset(s.observation.target for s in self.signals
                         if s.observation.source == "device_output")

    @cached_property
    def residual_count(self) -> int:
        return sum(s.signal.count * s.observation.residual_dimension for s in self.signals)


def schedule_episode(episode: EpisodeSpec, observations: dict[str, ObservationSpec],
                     timestep_ns: int) -> EpisodeSchedule:
    """The ticks to capture for each snapshot signal and the rollout end."""
    last = max(int(signal.times_ns[-1]) for signal in episode.signals)
    horizon = episode.horizon_steps if episode.horizon_steps is not None else \
        -(-last // timestep_ns)
    signals: list[SignalSchedule] = []
    reads: dict[int, list[tuple[int, int]]] = {}
    end = horizon
    for index, signal in enumerate(episode.signals):
        observation = observations[signal.observation]
        if observation.event_driven:
            signals.append(SignalSchedule(signal, observation, None))
            continue
        if signal.time_offset_bounds_ns is not None:  # every tick a shifted sample may need

            ticks = offset_ticks(signal.times_ns, *signal.time_offset_bounds_ns,
                                 observation.sample_every_steps, timestep_ns)
        else:
            ticks = grid_ticks(signal.times_ns, signal.alignment,
                               observation.sample_every_steps, timestep_ns)
        identity = (signal.alignment == "exact" and not observation.quaternion
                    and np.array_equal(ticks * timestep_ns, signal.times_ns))
        signals.append(SignalSchedule(signal, observation, ticks, identity))
        shift = 1 if observation.derived else 0  # derived values of x(t) exist after step t
        if observation.pose:  # read from MjData at boundaries; the others come from a capture
            for row, tick in enumerate(ticks.tolist()):
                reads.setdefault(tick + shift, []).append((index, row))
        end = max(end, int(ticks[-1]) + shift)
    boundaries = tuple(sorted(reads))
    return EpisodeSchedule(episode, timestep_ns, horizon, end, boundaries,
                           tuple(tuple(reads[b]) for b in boundaries), tuple(signals))


def grid_ticks(times_ns: np.ndarray, alignment: str, every: int, timestep_ns: int) -> np.ndarray:
    """The observation-grid ticks (multiples of ``every``) that ``alignment`` needs."""
    grid = every * timestep_ns
    times = np.asarray(times_ns, dtype=np.int64)
    k = times // grid
    rest = times - k * grid
    if alignment in ("exact", "zero_order_hold"):
        needed = k
    elif alignment == "nearest":
        needed = np.where(2 * rest > grid, k + 1, k)  # a tie goes to the earlier grid point
    else:  # linear: both brackets unless the time is on the grid
        needed = np.concatenate((k, k[rest > 0] + 1))
    return np.unique(needed) * every


@dataclass
class Track:
    """Simulated samples of one signal: sorted times (ns) and one row per sample."""

    times_ns: np.ndarray
    values: np.ndarray
    offset_ns: float | None = None  # a calibrated time offset of the signal (``time_offsets``)


def _window(episode: EpisodeSpec) -> str:
    """`` (window 0.6 s..0.8 s of 'log.csv')`` for an episode cut from a recording."""
    source = episode.source or {}
    span = source.get("window_s")
    if not span:
        return ""
    return f" (window {span[0]:g} s..{span[1]:g} s of {source.get('path')!r})"


def _largest_values(episode: EpisodeSpec) -> str:
    """The largest recorded input and initial-state value, to look at first."""
    parts = []
    best: tuple[float, str] | None = None
    for record in episode.recorded_inputs:
        try:
            value = float(json.loads(record.payload_json).get("value"))
        except (ValueError, TypeError, AttributeError):
            continue
        if best is None or abs(value) > best[0]:
            best = (abs(value), f"input {record.source_id} = {value:g} at tick "
                                f"{record.commit_tick}")
    if best is not None:
        parts.append(f"largest {best[1]}")
    top: tuple[float, str] | None = None
    for entry in episode.initial_state:
        keys: tuple[Literal["qpos", "qvel", "pos", "quat"], ...] = ("qpos", "qvel", "pos", "quat")
        for key in keys:
            for value in entry.get(key) or ():
                if top is None or abs(float(value)) > top[0]:
                    what = entry.get("joint") or entry.get("body") or entry.get("type")
                    top = (abs(float(value)), f"initial {key} of {what} = {float(value):g}")
    if top is not None:
        parts.append(f"largest {top[1]}")
    return f" ({'; '.join(parts)}; check them with valid: / on_invalid:)" if parts else ""


def run_episode(plan: SimulationPlan, schedule: EpisodeSchedule,
                decoders: CalibrationDeviceOutputDecoderRegistry, *,
                rollout_context: AbstractContextManager[object] | None = None) -> list[Track]:
    """Roll the episode out on ``plan``; the simulated samples of each signal, in order.
    ``rollout_context`` is entered around each GIL-free MuJoCo rollout (see
    ``SimulationPlan.create_instance``)."""
    episode = schedule.episode
    label = f"episode {episode.id!r}"
    model = plan.model
    try:
        instance = plan.create_instance(episode.seed, collect=False, data=_scratch_data(model),
                                        rollout_context=rollout_context,
                                        devices=schedule.devices)
    except FibrilError as exc:
        raise EvaluationError(f"{label}: {exc}") from None
    try:
        if episode.initial_state:
            instance.inject_state([dict(entry) for entry in episode.initial_state])
    except FibrilError as exc:
        raise EvaluationError(f"{label}: initial_state: {exc}") from None
    try:
        if episode.recorded_inputs:
            signature = plan.recorded_input_signature
            prepared = schedule.prepared.inputs.get(signature)
            if prepared is None and episode.prepared_inputs is not None:
                source, parsed = episode.prepared_inputs
                if source is episode.recorded_inputs and parsed.signature == signature:
                    prepared = parsed
            if prepared is None:
                prepared = plan.prepare_recorded_inputs(episode.recorded_inputs)
                _keep(schedule.prepared.inputs, signature, prepared)
            instance.enqueue_recorded_trace_inputs(prepared)
    except FibrilError as exc:
        raise EvaluationError(f"{label}: recorded_inputs: {exc}") from None

    # Snapshot buffers and readers, resolved by name on this candidate's model.
    buffers: list[np.ndarray | None] = []
    readers: list[Callable[[mujoco.MjData], npt.NDArray[np.float64]] | None] = []
    # signal index -> reader of a qpos/qvel/sensordata signal
    captured: dict[int, SnapshotReader] = {}
    devices: dict[str, list[DeviceOutput]] = {}
    applications: dict[str, list[ActuatorApplication]] = {}
    extra = 0
    for index, item in enumerate(schedule.signals):
        observation = item.observation
        if item.ticks is None:
            buffers.append(None)
            readers.append(None)
            if observation.source == "device_output":
                devices.setdefault(observation.target, [])
                if observation.timestamp == "acquisition":
                    latency = plan.device(observation.target).latency_ticks
                    extra = max(extra, latency, 1)
                else:
                    extra = max(extra, 1)  # a latency-0 sample stamped at t is emitted at t+1
            else:
                applications.setdefault(observation.target, [])
            continue
        reader = snapshot_reader(observation, model)
        readers.append(reader.read)
        if not observation.pose:  # qpos / qvel / sensordata: taken by a StateCapture
            captured[index] = reader
            buffers.append(None)  # taken from the capture after the rollout
        else:
            buffers.append(np.empty((item.ticks.shape[0], observation.dimension)))

    if devices or applications:
        # ``record: Any``: dispatched on its exact type below, once per emitted record (a
        # cast or an isinstance per branch would cost on this path)
        def observe(record: Any,
                    devices: dict[str, list[DeviceOutput]] = devices,
                    applications: dict[str, list[ActuatorApplication]] = applications
                    ) -> None:
            kind = type(record)
            if kind is DeviceOutput:
                found: list[DeviceOutput] | list[ActuatorApplication] | None = devices.get(
                    record.device_id)
            elif kind is ActuatorApplication:
                found = applications.get(record.endpoint)
            else:
                return
            if found is not None:
                found.append(record)

        instance.subscribe(observe)

    data = instance.data
    capture = None
    if captured:
        key = tuple(captured)
        ticks = schedule.prepared.capture.get(key)
        if ticks is None:  # the same for every candidate: sorted unique union, computed once
            ticks = np.unique(np.concatenate(
                [schedule.signals[i].ticks for i in captured]))
            schedule.prepared.capture[key] = ticks
        capture = instance.capture(ticks, tuple(sorted({r.array for r in captured.values()})))
    try:
        for boundary, reads in zip(schedule.boundaries, schedule.reads):  # body poses
            instance.advance(boundary - instance.tick)
            for index, row in reads:
                # a pose signal's buffer and reader exist (None: captured or event-driven)
                buffers[index][row] = readers[index](data)  # type: ignore[index, misc]  # (see above)
        end = max(schedule.end_tick, schedule.horizon + extra if (devices or applications)
                  else schedule.end_tick)
        instance.advance(end - instance.tick)
    except FibrilError as exc:
        raise EvaluationError(f"{label}: rollout failed at tick {instance.tick}: {exc}") from None
    if capture is not None:
        for index, reader in captured.items():
            values = capture.values[reader.array]
            rows = _capture_rows(schedule, index, capture.ticks)
            columns = reader.index
            assert not isinstance(columns, tuple)  # qpos / qvel / sensordata: one row per tick
            buffers[index] = (values[:, columns] if rows is None else values[rows][:, columns])
    for warning in _WARNINGS:
        if data.warning[warning].number > 0:
            raise EvaluationError(
                f"{label}{_window(episode)}: the simulation became unstable ({warning.name} x"
                f"{data.warning[warning].number}); MuJoCo reset the state, so this candidate "
                f"has no valid rollout{_largest_values(episode)}")

    dt = schedule.timestep_ns
    limit = schedule.horizon * dt
    tracks: list[Track] = []
    for index, item in enumerate(schedule.signals):
        observation = item.observation
        if item.ticks is not None:
            # filled after the rollout for every snapshot signal (ticks is not None)
            tracks.append(Track(item.ticks * dt, buffers[index]))  # type: ignore[arg-type]  # (see above)
        elif observation.source == "device_output":
            tracks.append(_device_track(devices[observation.target], observation, decoders,
                                        limit, label))
        else:
            tracks.append(_application_track(applications[observation.target], observation,
                                             limit))
    offsets = plan.time_offsets if isinstance(plan, OffsetPlan) else None
    if offsets:
        for item, track in zip(schedule.signals, tracks):
            track.offset_ns = offsets.get(item.signal.time_offset_key or item.signal.observation)
    return tracks


def _capture_rows(schedule: EpisodeSchedule, index: int, captured: np.ndarray
                  ) -> np.ndarray | None:
    """Which capture rows signal ``index`` reads (None: all of them, in order); the same for
    every candidate, so computed once per schedule."""
    memo = schedule.prepared.rows
    if index not in memo:
        ticks = schedule.signals[index].ticks
        assert ticks is not None  # a captured (snapshot) signal
        memo[index] = (None if np.array_equal(ticks, captured)
                       else np.searchsorted(captured, ticks))
    return memo[index]


_SIGNATURES = 4  # parsed recordings kept per episode (one per endpoint signature)


def _keep(prepared: dict[EndpointSignature, RecordedInputs], signature: EndpointSignature,
          parsed: RecordedInputs) -> None:
    """Store a parsed recording, forgetting the oldest beyond a few signatures (candidates
    share one signature unless a parameter changes which modes an actuator accepts)."""
    signatures = list(prepared)
    for key in signatures[:max(0, len(signatures) + 1 - _SIGNATURES)]:
        prepared.pop(key, None)
    prepared[signature] = parsed


_SCRATCH = threading.local()


def _scratch_data(model: mujoco.MjModel) -> mujoco.MjData | None:
    """This thread's MjData from its previous rollout when the sizes match (a fresh instance
    resets it completely), so a candidate does not allocate MuJoCo's arena again."""
    data = getattr(_SCRATCH, "data", None)
    if data is None or data.signature != model.signature:
        data = mujoco.MjData(model)
        _SCRATCH.data = data
    return data


def _device_track(outputs: list[DeviceOutput], observation: ObservationSpec,
                  decoders: CalibrationDeviceOutputDecoderRegistry, limit: int,
                  label: str) -> Track:
    acquisition = observation.timestamp == "acquisition"
    kept = [o for o in outputs
            if (o.acquisition_time_ns if acquisition else o.delivery_time_ns) <= limit]
    decoder = decoders.get(observation.sample_type or "")
    if decoder is None:
        raise EvaluationError(f"{label}: no decoder for sample type {observation.sample_type!r}")
    width = len(decoder.components)
    values = np.empty((len(kept), width))
    for row, output in enumerate(kept):
        if output.sample_type != observation.sample_type:
            raise EvaluationError(f"{label}: device {observation.name!r} emitted "
                                  f"{output.sample_type!r}, not {observation.sample_type!r}")
        decoded = np.asarray(decoder.decode(output), dtype=np.float64).ravel()
        if decoded.shape[0] != width:
            raise EvaluationError(f"{label}: the decoder of {observation.sample_type!r} returned "
                                  f"{decoded.shape[0]} value(s), expected {width}")
        values[row] = decoded
    if observation.indices is not None:
        values = values[:, list(observation.indices)]
    times = np.fromiter(((o.acquisition_time_ns if acquisition else o.delivery_time_ns)
                         for o in kept), dtype=np.int64, count=len(kept))
    order = np.argsort(times, kind="stable")  # delivery order is already time order
    return Track(times[order], values[order])


def _application_track(records: list[ActuatorApplication], observation: ObservationSpec,
                       limit: int) -> Track:
    kept = [r for r in records if r.time_ns <= limit]
    values = np.array([(r.commanded, r.released, r.applied) for r in kept],
                      dtype=np.float64).reshape(len(kept), 3)
    indices = list(observation.indices or (2,))
    times = np.fromiter((r.time_ns for r in kept), dtype=np.int64, count=len(kept))
    return Track(times, values[:, indices])


def episode_residuals(schedule: EpisodeSchedule, tracks: list[Track]
                      ) -> tuple[np.ndarray, list[tuple[str, int, int]]]:
    """Unweighted residuals ``(sim - rec) / scale`` of one episode and its signal slices."""
    parts: list[np.ndarray] = []
    slices: list[tuple[str, int, int]] = []
    start = 0
    label = f"episode {schedule.episode.id!r}"
    for item, track in zip(schedule.signals, tracks):
        signal, observation = item.signal, item.observation
        if item.identity:
            aligned = track.values
        elif signal.time_offset_bounds_ns is not None:
            aligned = shifted_linear(signal.times_ns, track.offset_ns or 0.0, track.times_ns,
                                     track.values, quaternion=observation.quaternion,
                                     label=f"{label} signal {signal.observation!r}")
        else:
            aligned = align(signal.times_ns, track.times_ns, track.values, signal.alignment,
                            quaternion=observation.quaternion,
                            label=f"{label} signal {signal.observation!r}")
        if observation.quaternion:
            difference = quat_error(aligned, signal.values)
        else:
            difference = aligned - signal.values
        residual = (difference / signal.residual_scales).ravel()
        parts.append(residual)
        slices.append((signal.observation, start, start + residual.shape[0]))
        start += residual.shape[0]
    residuals = np.concatenate(parts) if parts else np.empty(0)
    if not np.isfinite(residuals).all():
        bad = int(np.flatnonzero(~np.isfinite(residuals))[0])
        for (name, first, stop), item in zip(slices, schedule.signals):
            if first <= bad < stop:
                sample = (bad - first) // max(1, item.observation.residual_dimension)
                raise EvaluationError(
                    f"{label} signal {name!r}: non-finite simulated value at reference sample "
                    f"{sample} (time_ns {int(item.signal.times_ns[sample])})")
    return residuals, slices
