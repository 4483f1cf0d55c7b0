"""One run of a parameter experiment: its plan from the manifest plus the baseline overlay with
the run's values, its trace, metrics and assertions, and its record with a result class.

Every failure becomes a result class, never an exception, so that a run never stops its
siblings; the runner (``runner``, ``dask_runner``) decides where runs execute.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict

import mujoco
import numpy as np
import numpy.typing as npt

from .._document import JsonValue, Node
from ..schema import Where
from .._signals import Interrupted, terminating
from ..errors import FibrilError
from ..execution.bundle import remap
from ..manifest import load_scenario
from ..manifest import ScenarioSpec
from ..overlays import OverlayArtifact, OverlayError, load_overlay_artifact, parse_value
from ..overlays.artifact import OverlayParameter, Value
from ..plan import SimulationBuilder, SimulationPlan
from ..trace import TraceWriter
from .experiment import Execution, Experiment, load_experiment
from .metrics import COMPARE, ContactObserver, MetricUnavailable, MetricValue, signal_metric

# Result classes, in the order a run can fail.
INVALID_PARAMETER = "invalid_parameter"
COMPILE_FAILURE = "compile_failure"
RUNTIME_FAILURE = "runtime_failure"
TIMEOUT = "timeout"
UNAVAILABLE_METRIC = "unavailable_metric"
ASSERTION_FAILURE = "assertion_failure"
SUCCEEDED = "succeeded"

_CHUNK_TICKS = 100
_NUMERICAL_WARNINGS = ("mjWARN_BADQPOS", "mjWARN_BADQVEL", "mjWARN_BADQACC", "mjWARN_BADCTRL",
                       "mjWARN_CONTACTFULL", "mjWARN_CNSTRFULL", "mjWARN_INERTIA")


class ParameterChange(TypedDict, total=False):
    """A run's value of a parameter that differs from the baseline overlay's."""

    baseline: JsonValue
    value: JsonValue
    delta: float  # (both floats)


class AssertionOutcome(TypedDict):
    metric: str
    op: str
    value: float
    actual: MetricValue
    passed: bool
    status: str  # passed, failed or unavailable_metric


class RunRecord(TypedDict, total=False):
    """A run's record (JSON): filled in as the run goes, every key present once finished
    (``_finish``); the experiment report's ``runs`` entries."""

    id: str
    role: str
    started_at: str | None
    episode_seed: int
    parameters: dict[str, JsonValue]
    parameter_diff: dict[str, ParameterChange]
    parameter_set_hash: JsonValue  # null when the run failed before its plan was built
    targets: list[JsonValue] | None
    plan: dict[str, JsonValue] | None  # SimulationPlan.inspect()
    trace: str | None
    metrics: dict[str, MetricValue]
    assertions: list[AssertionOutcome]
    status: str
    success: bool
    error_reason: str | None
    finished_at: str
    wall_seconds: float


@dataclass(frozen=True)
class RunJob:
    """What a worker needs for one run (picklable)."""

    experiment: Path
    run_id: str
    role: str
    values: Mapping[str, Node]
    trace: Path
    #: The episode seed the run starts from (``runner._check_start`` decides it).
    episode_seed: int
    #: (path here, path to report) pairs: a Dask worker builds from its copy of the
    #: submitter's files and reports the submitter's paths.
    shown: tuple[tuple[str, str], ...] = ()


def progress_line(done: int, total: int, record: RunRecord) -> str:
    """``[done/total] id status (wall s): reason``, one per finished run, on every backend."""
    reason = f": {record['error_reason']}" if record["error_reason"] else ""
    return (f"[{done}/{total}] {record['id']} {record['status']} "
            f"({record['wall_seconds']:.2f} s){reason}")


def execute_run(job: RunJob) -> RunRecord:
    """One run, start to finish; every failure becomes a result class, never an exception.

    SIGINT / SIGTERM stop it (its trace closes); a pool worker then exits at once, so the
    parent does not wait for it."""
    worker = multiprocessing.parent_process() is not None
    try:
        stopping = terminating()
        if stopping is not None:  # a worker told to stop takes no new run
            raise Interrupted(stopping)
        record = _execute_run(job)
        for here, shown in job.shown:
            record = remap(record, here, shown)
        return record
    except KeyboardInterrupt as exc:
        if worker:  # its run's trace is closed (finally); exit without joining queue threads
            os._exit(getattr(exc, "exit_code", 130))
        raise


def _execute_run(job: RunJob) -> RunRecord:
    started = _now()
    clock = time.perf_counter()
    record: RunRecord = {"id": job.run_id, "role": job.role, "started_at": started}
    experiment = load_experiment(job.experiment)
    record["episode_seed"] = job.episode_seed
    baseline = load_overlay_artifact(experiment.baseline_overlay)
    declared = {p.id: _plain(p.value) for p in baseline.parameters}
    try:
        parameters = _parameters(baseline, job.values, _where(experiment, job))
    except OverlayError as exc:
        given = {k: _as_given(v) for k, v in job.values.items()}
        record["parameters"] = given
        record["parameter_diff"] = _diff(declared, given)
        return _finish(record, clock, job, INVALID_PARAMETER, str(exc))
    chosen: dict[str, JsonValue] = {p.id: _plain(p.value) for p in parameters}
    record["parameters"] = chosen
    record["parameter_diff"] = _diff(declared, chosen)
    try:
        plan = SimulationBuilder().build(experiment.manifest, parameters)
    except FibrilError as exc:  # PlanError, OverlayError, ManifestError, ComponentError
        return _finish(record, clock, job, COMPILE_FAILURE, str(exc))
    record["parameter_set_hash"] = plan.provenance["parameter_set_hash"]
    record["targets"] = list(plan.provenance["parameters"])
    record["plan"] = plan.inspect()
    scenario = load_scenario(experiment.scenario) if experiment.scenario else None
    execution = experiment.execution
    observers: dict[str, ContactObserver] = {}
    contact_errors: dict[str, str] = {}
    for metric in experiment.metrics:
        if metric.kind in ("contact_duration", "max_contact_wrench") and metric.contact:
            try:
                observers.setdefault(metric.contact, ContactObserver(plan.model, metric.contact))
            except MetricUnavailable as exc:
                contact_errors[metric.contact] = str(exc)
    status, reason, sim_wall = _simulate(plan, scenario, execution, job, observers)
    record["trace"] = str(job.trace)
    if status != SUCCEEDED:
        return _finish(record, clock, job, status, reason)
    metrics, unavailable = _metrics(experiment, plan, job.trace, observers, contact_errors,
                                    sim_wall)
    record["metrics"] = metrics
    outcomes = _assertions(experiment, metrics)
    record["assertions"] = outcomes
    # An asserted metric without a value (an event_reached that never fired) cannot be
    # compared: the run has an unavailable metric, not a failed assertion.
    for outcome in outcomes:
        if outcome["status"] == UNAVAILABLE_METRIC and outcome["metric"] not in unavailable:
            unavailable[outcome["metric"]] = (f"metric {outcome['metric']!r}: no value to "
                                              f"assert on (an event that never happened)")
    if unavailable:
        return _finish(record, clock, job, UNAVAILABLE_METRIC, "; ".join(unavailable.values()))
    failed = [o for o in outcomes if not o["passed"]]
    if failed:
        reason = "; ".join(f"{o['metric']} = {o['actual']!r} is not {o['op']} {o['value']:g}"
                           for o in failed)
        return _finish(record, clock, job, ASSERTION_FAILURE, reason)
    return _finish(record, clock, job, SUCCEEDED, None)


def _where(experiment: Experiment, job: RunJob) -> Where:
    for i, variant in enumerate(experiment.variants):
        if variant.id == job.run_id:
            return Where(str(experiment.path), f"variants[{i}].parameter_values", OverlayError)
    return Where(str(experiment.baseline_overlay), "parameters", OverlayError)


def _parameters(baseline: OverlayArtifact, values: Mapping[str, Node], where: Where
                ) -> list[OverlayParameter]:
    declared = {p.id: p for p in baseline.parameters}
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise where.fail(f"{', '.join(map(repr, unknown))} not declared by the baseline "
                         f"overlay {baseline.path}; declared: {', '.join(declared) or 'none'}")
    out = []
    for pid, parameter in declared.items():
        raw = values[pid]
        raw = list(raw) if isinstance(raw, tuple) else raw
        out.append(parameter.with_value(parse_value(raw, parameter.targets, where.key(pid), pid)))
    return out


def _simulate(plan: SimulationPlan, scenario: ScenarioSpec | None, execution: Execution,
              job: RunJob,
              observers: Mapping[str, ContactObserver]) -> tuple[str, str | None, float]:
    """Step the run; returns (status, reason, wall seconds spent stepping)."""
    warnings = [getattr(mujoco.mjtWarning, name) for name in _NUMERICAL_WARNINGS]
    trace = None
    wall = 0.0
    provenance = plan.run_provenance(job.episode_seed)
    for here, shown in job.shown:
        provenance = remap(provenance, here, shown)
    try:
        trace = TraceWriter(job.trace, provenance=provenance, layout=dict(plan.layout))
        instance = plan.create_instance(job.episode_seed, scenario=scenario, trace=trace,
                                        collect=False)
        model, data = instance.model, instance.data
        chunk = 1 if observers else _CHUNK_TICKS
        deadline = time.perf_counter() + execution.timeout_seconds
        start = time.perf_counter()
        done = 0
        while done < execution.steps:
            step = min(chunk, execution.steps - done)
            instance.advance(step)
            done += step
            for observer in observers.values():
                observer.observe(model, data)
            if done % _CHUNK_TICKS == 0 or done == execution.steps:
                for warning in warnings:
                    if data.warning[warning].number:
                        name = mujoco.mjtWarning(warning).name
                        return (RUNTIME_FAILURE, f"MuJoCo warning {name} (info "
                                f"{data.warning[warning].lastinfo}) by tick {instance.tick}",
                                time.perf_counter() - start)
                if not (_finite(data.qpos) and _finite(data.qvel)):
                    return (RUNTIME_FAILURE, f"non-finite state at tick {instance.tick}",
                            time.perf_counter() - start)
                if time.perf_counter() > deadline:
                    return (TIMEOUT, f"timeout_seconds {execution.timeout_seconds:g} exceeded "
                            f"at tick {instance.tick} of {execution.steps}",
                            time.perf_counter() - start)
        wall = time.perf_counter() - start
    except FibrilError as exc:
        return RUNTIME_FAILURE, str(exc), wall
    except Exception as exc:  # noqa: BLE001 - a variant's failure never stops its siblings
        return RUNTIME_FAILURE, f"{type(exc).__name__}: {exc}", wall
    finally:
        if trace is not None:
            trace.close()
    return SUCCEEDED, None, wall


def _finite(array: npt.NDArray[np.float64]) -> bool:
    return bool(all(math.isfinite(v) for v in array))


def _metrics(experiment: Experiment, plan: SimulationPlan, trace: Path,
             observers: Mapping[str, ContactObserver], contact_errors: Mapping[str, str],
             sim_wall: float) -> tuple[dict[str, MetricValue], dict[str, str]]:
    """Metric values, and the reason of each metric that could not be computed."""
    values: dict[str, MetricValue] = {}
    unavailable: dict[str, str] = {}
    dt = plan.timebase.timestep_s
    for metric in experiment.metrics:
        try:
            if metric.kind in ("signal", "event_reached"):
                values[metric.id] = signal_metric(trace, metric)
            elif metric.kind in ("contact_duration", "max_contact_wrench"):
                contact = metric.contact or ""
                if contact in contact_errors:
                    raise MetricUnavailable(contact_errors[contact])
                observer = observers[contact]
                values[metric.id] = (observer.ticks_in_contact * dt
                                     if metric.kind == "contact_duration" else observer.max_force)
            else:  # rtf
                simulated = experiment.execution.steps * dt
                values[metric.id] = simulated / sim_wall if sim_wall > 0 else None
            value = values[metric.id]
            if isinstance(value, float) and not math.isfinite(value):
                raise MetricUnavailable(f"value is {value}")
        except MetricUnavailable as exc:
            values[metric.id] = None
            unavailable[metric.id] = f"metric {metric.id!r}: {exc}"
    return values, unavailable


def _assertions(experiment: Experiment, metrics: Mapping[str, MetricValue]
                ) -> list[AssertionOutcome]:
    outcomes: list[AssertionOutcome] = []
    for assertion in experiment.assertions:
        actual = metrics.get(assertion.metric)
        passed = (isinstance(actual, (int, float)) and not isinstance(actual, bool)
                  and COMPARE[assertion.op](float(actual), assertion.value))
        status = UNAVAILABLE_METRIC if actual is None else "passed" if passed else "failed"
        outcomes.append({"metric": assertion.metric, "op": assertion.op,
                         "value": assertion.value, "actual": actual, "passed": bool(passed),
                         "status": status})
    return outcomes


def _finish(record: RunRecord, clock: float, job: RunJob, status: str,
            reason: str | None) -> RunRecord:
    record.setdefault("parameters", {k: _as_given(v) for k, v in job.values.items()})
    record.setdefault("parameter_diff", {})
    # Keys of the built plan: null when the run failed before its plan was built.
    record.setdefault("parameter_set_hash", None)
    record.setdefault("targets", None)
    record.setdefault("plan", None)
    record.setdefault("metrics", {})
    record.setdefault("assertions", [])
    record.setdefault("trace", None)
    record["status"] = status
    record["success"] = status == SUCCEEDED
    record["error_reason"] = reason
    record["finished_at"] = _now()
    record["wall_seconds"] = time.perf_counter() - clock
    return record


def failed_record(job: RunJob, status: str, reason: str) -> RunRecord:
    """The record of a run that never reported back (its worker died)."""
    return _finish({"id": job.run_id, "role": job.role, "started_at": None,
                    "episode_seed": job.episode_seed},
                   time.perf_counter(), job, status, reason)


def _diff(baseline: Mapping[str, JsonValue], values: Mapping[str, JsonValue]
          ) -> dict[str, ParameterChange]:
    diff: dict[str, ParameterChange] = {}
    for pid, value in values.items():
        before = baseline.get(pid)
        if before != value or type(before) is not type(value):
            entry: ParameterChange = {"baseline": before, "value": value}
            if type(value) is float and type(before) is float:
                entry["delta"] = value - before
            diff[pid] = entry
    return diff


def _plain(value: Value) -> float | list[float]:
    return [float(v) for v in value] if isinstance(value, (tuple, list)) else float(value)


def _as_given(value: Node) -> JsonValue:
    """A requested value as the user wrote it, but always strict-JSON safe."""
    if isinstance(value, (list, tuple)):
        return [_as_given(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else repr(float(value))
    return repr(value)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
