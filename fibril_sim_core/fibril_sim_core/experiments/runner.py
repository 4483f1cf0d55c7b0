"""Runs a parameter experiment: the baseline and each explicit variant, each into its own trace.

Every run builds a normal SimulationPlan from the canonical manifest plus the baseline overlay
with the variant's values, so construction provenance and ``parameter_set_hash`` are the usual
ones (one run: ``run``). A failing variant is recorded with its result class and never stops
its siblings.
Variant-level parallelism uses separate processes (``workers``, forked from a fork server) or,
with ``execution.backend: dask``, one Dask task per run (``dask_runner``); records are identical
to a serial run apart from timestamps and wall times.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TypedDict

import mujoco

from .._document import JsonValue
from .._signals import raise_on_termination
from ..errors import FibrilError
from ..execution.backend import resolve_backend
from ..manifest import load_manifest, load_scenario
from ..overlays import OverlayArtifact, load_overlay_artifact
from ..plan import SimulationBuilder
from ..provenance import sha256_file
from .experiment import BASELINE_ID, Experiment, ExperimentError, load_experiment
# The result classes and one run (``run``); re-exported: callers name them through the runner.
from .run import (ASSERTION_FAILURE, COMPILE_FAILURE, INVALID_PARAMETER,  # noqa: F401
                  RUNTIME_FAILURE, SUCCEEDED, TIMEOUT, UNAVAILABLE_METRIC, RunJob, execute_run,
                  failed_record, progress_line)
from .metrics import MetricValue
from .run import ParameterChange, RunRecord

RESULT_FORMAT = "fibril_sim/experiment_result"
# 1.1: execution.backend (backend, scheduler, worker count and versions).
RESULT_VERSION = {"major": 1, "minor": 1}


class MetricChange(TypedDict, total=False):
    baseline: MetricValue
    variant: MetricValue
    delta: float  # (both floats)


class VariantComparison(TypedDict):
    id: str
    success: bool
    status: str
    parameter_diff: dict[str, ParameterChange]
    metric_diff: dict[str, MetricChange]
    trace: str | None


class BaselineSummary(TypedDict):
    id: str
    success: bool
    status: str
    metrics: dict[str, MetricValue]
    trace: str | None


class Comparison(TypedDict):
    baseline: BaselineSummary
    variants: list[VariantComparison]


class Summary(TypedDict):
    runs: int
    succeeded: int
    by_status: dict[str, int]


class ExperimentResult(TypedDict):
    """The versioned result document ``run_experiment`` returns (``fibril_sim experiment``
    writes it as JSON, ``report`` draws it)."""

    format: str
    schema_version: dict[str, int]
    experiment: dict[str, str]
    sources: dict[str, JsonValue]
    sources_sha256: str
    manifest: str
    scenario: str | None
    baseline_overlay: dict[str, JsonValue]
    mujoco_version: str
    execution: dict[str, JsonValue]
    traces: str
    summary: Summary
    runs: list[RunRecord]
    comparison: Comparison


def run_experiment(experiment: Experiment | str | Path, *, traces: Path,
                   progress: Callable[[str], None] | None = None,
                   overwrite: bool = False, scheduler: str | None = None,
                   environ: Mapping[str, str] | None = None) -> ExperimentResult:
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
    seed = _check_start(experiment)
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
                   traces / BASELINE_ID, seed)]
    jobs += [RunJob(experiment.path, v.id, "variant", {**baseline_values, **v.parameter_values},
                    traces / v.id, seed) for v in experiment.variants]
    if not backend.is_dask:
        _new_folder(traces, existing)
        records = _run_all(jobs, experiment.execution.workers, progress)
        return _document(experiment, baseline, records, traces, seed,
                         backend.describe())
    # Dask is imported only when it is used; the trace folder is touched only once the
    # cluster is reachable and its workers' versions are checked.
    from ..execution.dask_session import open_session
    from .dask_runner import run_on_dask

    with open_session(backend, progress) as session:
        _new_folder(traces, existing)
        records = run_on_dask(session, experiment, jobs, progress)
        return _document(experiment, baseline, records, traces, seed,
                         session.describe())


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


def _check_start(experiment: Experiment) -> int:
    """A broken manifest, fixed overlay or scenario is the experiment's error, not a run's.
    Returns the episode seed every run starts from: ``execution.seed``, else the seed of the
    scenario the runs use (the experiment's scenario file replaces the manifest's scenario,
    seed included; without one, the manifest's: the plan's ``episode_seed``)."""
    plan = SimulationBuilder().build(experiment.manifest)
    seed = experiment.execution.seed
    if experiment.scenario is None:
        return plan.episode_seed if seed is None else seed
    scenario = load_scenario(experiment.scenario)
    try:
        plan.create_instance(scenario=scenario, collect=False)
    except FibrilError as exc:
        raise ExperimentError(f"{experiment.scenario}: {exc}") from None
    return scenario.seed if seed is None else seed


def _run_all(jobs: list[RunJob], workers: int,
             progress: Callable[[str], None] | None) -> list[RunRecord]:
    def report(done: int, record: RunRecord) -> None:
        if progress is not None:
            progress(progress_line(done, len(jobs), record))

    if workers == 1 or len(jobs) == 1:
        records: list[RunRecord] = []
        for job in jobs:
            records.append(execute_run(job))
            report(len(records), records[-1])
        return records
    # A fork server that has imported MuJoCo and this module forks each worker: workers start in
    # milliseconds and never inherit the parent's threads (trace writers, user code).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    results: dict[int, RunRecord] = {}
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


def _document(experiment: Experiment, baseline: OverlayArtifact,
              records: list[RunRecord], traces: Path, seed: int,
              backend: Mapping[str, JsonValue]) -> ExperimentResult:
    manifest = load_manifest(experiment.manifest)
    sources: dict[str, JsonValue] = {
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
    comparison: list[VariantComparison] = []
    for record in records:
        if record["role"] != "variant":
            continue
        metric_diff: dict[str, MetricChange] = {}
        for mid, value in record["metrics"].items():
            before = base["metrics"].get(mid)
            entry: MetricChange = {"baseline": before, "variant": value}
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
                      "seed": seed, "backend": dict(backend)},
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


def _count(statuses: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts


def write_json_atomically(path: Path, document: Mapping[str, object]) -> None:
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
