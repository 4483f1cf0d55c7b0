"""Runs a parameter experiment: the baseline and each explicit variant, each into its own trace.

Every run builds a normal SimulationPlan from the canonical manifest plus the baseline overlay
with the variant's values, so construction provenance and ``parameter_set_hash`` are the usual
ones. A failing variant is recorded with its result class and never stops its siblings.
Variant-level parallelism uses separate processes (``workers``, forked from a fork server) or,
with ``execution.backend: dask``, one Dask task per run (``dask_runner``); records are identical
to a serial run apart from timestamps and wall times.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import mujoco

from .._schema import Where
from .._signals import Interrupted, raise_on_termination, terminating
from ..errors import FibrilError
from ..execution.backend import resolve_backend
from ..execution.bundle import remap
from .experiment import BASELINE_ID, Experiment, ExperimentError, load_experiment
from ..manifest import load_manifest, load_scenario
from .metrics import COMPARE, ContactObserver, MetricUnavailable, signal_metric
from ..overlays import OverlayArtifact, OverlayError, load_overlay_artifact, parse_value
from ..plan import SimulationBuilder
from ..provenance import sha256_file
from ..trace import TraceWriter

RESULT_FORMAT = "fibril_sim/experiment_result"
# 1.1: execution.backend (backend, scheduler, worker count and versions).
RESULT_VERSION = {"major": 1, "minor": 1}

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


@dataclass(frozen=True)
class RunJob:
    """What a worker needs for one run (picklable)."""

    experiment: Path
    run_id: str
    role: str
    values: Mapping[str, Any]
    trace: Path
    #: (path here, path to report) pairs: a Dask worker builds from its copy of the
    #: submitter's files and reports the submitter's paths.
    shown: tuple[tuple[str, str], ...] = ()


def run_experiment(experiment: Experiment | str | Path, *, traces: Path,
                   progress: Callable[[str], None] | None = None,
                   overwrite: bool = False, scheduler: str | None = None,
                   environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run every run of ``experiment``; return the versioned result document.

    ``scheduler`` (``--scheduler``) or ``FIBRIL_DASK_SCHEDULER`` in ``environ`` (default: this
    process's environment) run it on Dask instead of the document's ``execution.backend``.

    ``traces`` must not exist, unless ``overwrite`` (an explicit choice, ``--overwrite``):
    then an existing trace folder is removed once the experiment has been validated, but only
    an empty one or one that holds nothing but run traces, never any other folder a mistyped
    ``--traces`` names."""
    if not isinstance(experiment, Experiment):
        experiment = load_experiment(experiment)
    backend = resolve_backend(experiment.execution.backend, scheduler,
                              os.environ if environ is None else environ,
                              experiment.execution.workers)
    baseline = load_overlay_artifact(experiment.baseline_overlay)
    _check_start(experiment)
    existing = traces.exists() or traces.is_symlink()
    if existing:
        if not overwrite:
            raise ExperimentError(f"{traces}: the trace folder already exists; pass "
                                  f"--overwrite to replace it, or choose another with --traces")
        if not _is_trace_folder(traces):
            raise ExperimentError(f"{traces}: exists and is not the trace folder of an "
                                  f"experiment run (only run traces: folders holding a "
                                  f"rosbag2 metadata.yaml or .mcap files); not replaced")
    baseline_values = {p.id: p.value for p in baseline.parameters}
    jobs = [RunJob(experiment.path, BASELINE_ID, "baseline", baseline_values,
                   traces / BASELINE_ID)]
    jobs += [RunJob(experiment.path, v.id, "variant", {**baseline_values, **v.parameter_values},
                    traces / v.id) for v in experiment.variants]
    if not backend.is_dask:
        _new_folder(traces, existing)
        records = _run_all(jobs, experiment.execution.workers, progress)
        return _document(experiment, baseline, records, traces, backend.describe())
    # Dask is imported only when it is used; the trace folder is touched only once the
    # cluster is reachable and its workers' versions are checked.
    from ..execution.dask_session import open_session
    from .dask_runner import run_on_dask

    with open_session(backend, progress) as session:
        _new_folder(traces, existing)
        records = run_on_dask(session, experiment, jobs, progress)
        return _document(experiment, baseline, records, traces, session.describe())


def _new_folder(traces: Path, existing: bool) -> None:
    if existing:
        shutil.rmtree(traces)
    traces.mkdir(parents=True)


def _is_trace_folder(path: Path) -> bool:
    """Whether ``path`` is a real folder holding only run traces (each a folder with a rosbag2
    ``metadata.yaml`` or ``.mcap`` files): what ``--overwrite`` may remove."""
    if path.is_symlink() or not path.is_dir():
        return False
    for entry in path.iterdir():
        if entry.is_symlink() or not entry.is_dir():
            return False
        if not ((entry / "metadata.yaml").is_file() or any(entry.glob("*.mcap"))):
            return False
    return True


def _check_start(experiment: Experiment) -> None:
    """A broken manifest, fixed overlay or scenario is the experiment's error, not a run's."""
    plan = SimulationBuilder().build(experiment.manifest)
    if experiment.scenario is None:
        return
    scenario = load_scenario(experiment.scenario)
    try:
        plan.create_instance(scenario=scenario, collect=False)
    except FibrilError as exc:
        raise ExperimentError(f"{experiment.scenario}: {exc}") from None


def _run_all(jobs: list[RunJob], workers: int,
             progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    def report(done: int, record: dict[str, Any]) -> None:
        if progress is not None:
            progress(progress_line(done, len(jobs), record))

    if workers == 1 or len(jobs) == 1:
        records = []
        for job in jobs:
            records.append(execute_run(job))
            report(len(records), records[-1])
        return records
    # A fork server that has imported MuJoCo and this module forks each worker: workers start in
    # milliseconds and never inherit the parent's threads (trace writers, user code).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    results: dict[int, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context,
                             initializer=raise_on_termination) as pool:
        try:
            futures = {pool.submit(execute_run, job): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except BrokenProcessPool as exc:
                    results[i] = failed_record(jobs[i], RUNTIME_FAILURE,
                                         f"worker process died: {exc}")
                report(len(results), results[i])
        except KeyboardInterrupt:  # SIGINT / SIGTERM: stop the workers, their traces close
            _stop_workers(pool)
            raise
    return [results[i] for i in range(len(jobs))]


def progress_line(done: int, total: int, record: Mapping[str, Any]) -> str:
    """``[done/total] id status (wall s): reason``, one per finished run, on every backend."""
    reason = f": {record['error_reason']}" if record["error_reason"] else ""
    return (f"[{done}/{total}] {record['id']} {record['status']} "
            f"({record['wall_seconds']:.2f} s){reason}")


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and SIGTERM the workers (each closes its run's trace and
    exits); one that does not exit in time is killed."""
    # The executor keeps no public list of its processes, and shutdown() forgets them.
    pids = [p.pid for p in (getattr(pool, "_processes", None) or {}).values() if p.pid]
    pool.shutdown(wait=False, cancel_futures=True)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + 1.7
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _signal(pid, 0)]
        time.sleep(0.02)
    for pid in pids:
        if _signal(pid, signal.SIGKILL):
            print(f"fibril_sim: experiment worker {pid} did not stop in time: killed (its "
                  f"run's trace may be incomplete)", file=sys.stderr, flush=True)


def _signal(pid: int, signum: int) -> bool:
    """Send ``signum`` (0: only check); False when the process is gone."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def execute_run(job: RunJob) -> dict[str, Any]:
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


def _execute_run(job: RunJob) -> dict[str, Any]:
    started = _now()
    clock = time.perf_counter()
    record: dict[str, Any] = {"id": job.run_id, "role": job.role, "started_at": started}
    experiment = load_experiment(job.experiment)
    baseline = load_overlay_artifact(experiment.baseline_overlay)
    declared = {p.id: _plain(p.value) for p in baseline.parameters}
    try:
        parameters = _parameters(baseline, job.values, _where(experiment, job))
    except OverlayError as exc:
        given = {k: _as_given(v) for k, v in job.values.items()}
        record["parameters"] = given
        record["parameter_diff"] = _diff(declared, given)
        return _finish(record, clock, job, INVALID_PARAMETER, str(exc))
    record["parameters"] = {p.id: _plain(p.value) for p in parameters}
    record["parameter_diff"] = _diff(declared, record["parameters"])
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


def _parameters(baseline: OverlayArtifact, values: Mapping[str, Any], where: Where
                ) -> list[Any]:
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


def _simulate(plan: Any, scenario: Any, execution: Any, job: RunJob,
              observers: Mapping[str, ContactObserver]) -> tuple[str, str | None, float]:
    """Step the run; returns (status, reason, wall seconds spent stepping)."""
    warnings = [getattr(mujoco.mjtWarning, name) for name in _NUMERICAL_WARNINGS]
    trace = None
    wall = 0.0
    provenance: Any = dict(plan.provenance, seed=execution.seed)
    for here, shown in job.shown:
        provenance = remap(provenance, here, shown)
    try:
        trace = TraceWriter(job.trace, provenance=provenance, layout=dict(plan.layout))
        instance = plan.create_instance(execution.seed, scenario=scenario, trace=trace,
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


def _finite(array: Any) -> bool:
    return bool(all(math.isfinite(v) for v in array))


def _metrics(experiment: Experiment, plan: Any, trace: Path,
             observers: Mapping[str, ContactObserver], contact_errors: Mapping[str, str],
             sim_wall: float) -> tuple[dict[str, Any], dict[str, str]]:
    """Metric values, and the reason of each metric that could not be computed."""
    values: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    dt = plan.timebase.timestep_s
    for metric in experiment.metrics:
        try:
            if metric.kind in ("signal", "event_reached"):
                values[metric.id] = signal_metric(trace, metric)
            elif metric.kind in ("contact_duration", "max_contact_wrench"):
                if metric.contact in contact_errors:
                    raise MetricUnavailable(contact_errors[metric.contact])
                observer = observers[metric.contact or ""]
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


def _assertions(experiment: Experiment, metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    outcomes = []
    for assertion in experiment.assertions:
        actual = metrics.get(assertion.metric)
        comparable = isinstance(actual, (int, float)) and not isinstance(actual, bool)
        passed = comparable and COMPARE[assertion.op](float(actual), assertion.value)
        status = UNAVAILABLE_METRIC if actual is None else "passed" if passed else "failed"
        outcomes.append({"metric": assertion.metric, "op": assertion.op,
                         "value": assertion.value, "actual": actual, "passed": bool(passed),
                         "status": status})
    return outcomes


def _finish(record: dict[str, Any], clock: float, job: RunJob, status: str,
            reason: str | None) -> dict[str, Any]:
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


def failed_record(job: RunJob, status: str, reason: str) -> dict[str, Any]:
    """The record of a run that never reported back (its worker died)."""
    return _finish({"id": job.run_id, "role": job.role, "started_at": None},
                   time.perf_counter(), job, status, reason)


def _diff(baseline: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    diff = {}
    for pid, value in values.items():
        before = baseline.get(pid)
        if before != value or type(before) is not type(value):
            entry: dict[str, Any] = {"baseline": before, "value": value}
            if type(value) is float and type(before) is float:
                entry["delta"] = value - before
            diff[pid] = entry
    return diff


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [float(v) for v in value]
    return float(value) if isinstance(value, (int, float)) else value


def _as_given(value: Any) -> Any:
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


def _document(experiment: Experiment, baseline: OverlayArtifact,
              records: list[dict[str, Any]], traces: Path,
              backend: Mapping[str, Any]) -> dict[str, Any]:
    manifest = load_manifest(experiment.manifest)
    sources = {
        "experiment": {"path": str(experiment.path), "sha256": experiment.sha256},
        "manifest": {"path": str(experiment.manifest), "sha256": manifest.sha256,
                     "file_sha256": sha256_file(experiment.manifest)},
        "model": {"path": str(manifest.model), "sha256": sha256_file(manifest.model)},
        "baseline_overlay": {"path": str(experiment.baseline_overlay),
                             "sha256": baseline.sha256},
        "scenario": ({"path": str(experiment.scenario),
                      "sha256": sha256_file(experiment.scenario)}
                     if experiment.scenario else None),
    }
    by_id = {r["id"]: r for r in records}
    base = by_id[BASELINE_ID]
    comparison = []
    for record in records:
        if record["role"] != "variant":
            continue
        metric_diff = {}
        for mid, value in record["metrics"].items():
            before = base["metrics"].get(mid)
            entry: dict[str, Any] = {"baseline": before, "variant": value}
            if isinstance(value, float) and isinstance(before, float):
                entry["delta"] = value - before
            metric_diff[mid] = entry
        comparison.append({"id": record["id"], "success": record["success"],
                           "status": record["status"],
                           "parameter_diff": record["parameter_diff"],
                           "metric_diff": metric_diff, "trace": record["trace"]})
    execution = experiment.execution
    return {
        "format": RESULT_FORMAT,
        "schema_version": RESULT_VERSION,
        "experiment": {"id": experiment.id, "path": str(experiment.path),
                       "sha256": experiment.sha256},
        "sources": sources,
        "sources_sha256": hashlib.sha256(json.dumps(sources, sort_keys=True).encode()
                                         ).hexdigest(),
        "manifest": str(experiment.manifest),
        "scenario": str(experiment.scenario) if experiment.scenario else None,
        "baseline_overlay": {"path": str(experiment.baseline_overlay), "sha256": baseline.sha256,
                             "parameters": [p.describe() for p in baseline.parameters]},
        "mujoco_version": mujoco.__version__,
        "execution": {"steps": execution.steps, "timeout_seconds": execution.timeout_seconds,
                      "workers": execution.workers, "cpu_budget": execution.cpu_budget,
                      "mujoco_internal_threads": execution.mujoco_internal_threads,
                      "seed": execution.seed, "backend": dict(backend)},
        "traces": str(traces),
        "summary": {"runs": len(records),
                    "succeeded": sum(1 for r in records if r["success"]),
                    "by_status": _count(r["status"] for r in records)},
        "runs": records,
        "comparison": {"baseline": {"id": BASELINE_ID, "success": base["success"],
                                    "status": base["status"], "metrics": base["metrics"],
                                    "trace": base["trace"]},
                       "variants": comparison},
    }


def _count(statuses: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts


def write_json_atomically(path: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` so that ``path`` is either complete or absent, never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            json.dump(document, stream, indent=2, allow_nan=False)
            stream.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
