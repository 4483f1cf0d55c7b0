"""Runs an experiment on a Dask cluster: each run is one task.

The files the runs are built from (experiment, manifest, MJCF with its includes and assets,
overlays, scenario) travel as one content-addressed bundle, scattered once; a worker writes it
into its own folder and builds from there, never from the submitter's paths. Each task returns
its record and the files of its trace, which are written under ``--traces`` here. A run whose
worker dies is recorded as a ``runtime_failure`` naming the worker; its siblings go on.
Per-run timeouts are the runner's own (checked on the worker while it steps).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import distributed

from ..execution.bundle import Bundle, collect_bundle, manifest_files
from ..execution.dask_session import DaskSession, worker_cache
from .experiment import Experiment
from .run import RUNTIME_FAILURE, RunJob, execute_run, failed_record, progress_line

#: Scheduler metadata under which each started run names its worker (see ``_claim``).
METADATA_KEY = "fibril_sim"


@dataclass(frozen=True)
class _Task:
    """One run as a worker receives it: paths relative to the bundle, the trace path only to
    report."""

    experiment: str
    job: RunJob
    token: str


def run_on_dask(session: DaskSession, experiment: Experiment, jobs: list[RunJob],
                progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """The runs' records, in ``jobs`` order."""
    bundle = collect_bundle(experiment_files(experiment))
    token = uuid.uuid4().hex
    client = session.client
    shipped = session.scatter(bundle)
    futures = {session.submit(_run_task, shipped,
                              _Task(bundle.relative(job.experiment), job, token),
                              key=f"fibril-run-{job.run_id}-{token}"): i
               for i, job in enumerate(jobs)}
    results: dict[int, dict[str, Any]] = {}
    try:
        for future in distributed.as_completed(futures):
            i = futures[future]
            results[i] = _collect(future, jobs[i])
            if progress is not None:
                progress(progress_line(len(results), len(jobs), results[i]))
    finally:  # also on SIGINT / SIGTERM: nothing keeps running on the cluster
        client.cancel(list(futures), force=True)
        client.set_metadata([METADATA_KEY, token], {})
    return [results[i] for i in range(len(jobs))]


def experiment_files(experiment: Experiment) -> list[Path]:
    """Every file a run of ``experiment`` reads."""
    files = [experiment.path, experiment.baseline_overlay, *manifest_files(experiment.manifest)]
    if experiment.scenario is not None:
        files.append(experiment.scenario)
    return files


def _collect(future: Any, job: RunJob) -> dict[str, Any]:
    """The run's record, its trace written here; a lost task is the run's runtime failure."""
    try:
        record, trace = future.result()
    except Exception as exc:  # noqa: BLE001 - KilledWorker, a lost connection, ...
        return failed_record(job, RUNTIME_FAILURE, f"Dask task failed: {type(exc).__name__}: "
                                                   f"{str(exc).splitlines()[0] if str(exc) else ''}")
    if trace:
        _write_trace(job.trace, trace)
    return record


def _write_trace(folder: Path, files: dict[str, bytes]) -> None:
    """The trace's files under ``folder``, which appears complete or not at all."""
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for relative, content in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _run_task(bundle: Bundle, task: _Task) -> tuple[dict[str, Any], dict[str, bytes]]:
    """On a worker: one run from the bundle; (record, trace files)."""
    died = _claim(task.token, task.job.run_id)
    if died is not None:
        return failed_record(task.job, RUNTIME_FAILURE,
                             f"Dask worker {died} died while running it"), {}
    cache = Path(worker_cache())
    root = bundle.materialize(cache / "fibril_sim-bundles")
    scratch = Path(tempfile.mkdtemp(prefix="fibril_sim-run-", dir=cache))
    try:
        trace = scratch / task.job.run_id
        job = replace(task.job, experiment=root / task.experiment, trace=trace,
                      shown=((str(trace), str(task.job.trace)), (str(root), bundle.root)))
        record = execute_run(job)
        files = {str(p.relative_to(trace)): p.read_bytes() for p in _files(trace)}
        return record, files
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _files(folder: Path) -> Iterable[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []


def _claim(token: str, run_id: str) -> str | None:
    """Note on the scheduler that this worker runs ``run_id``; if an earlier attempt already
    did, its worker died mid-run (Dask re-ran the task): return that worker's address."""
    client = distributed.get_client()
    key = [METADATA_KEY, token, run_id]
    before = client.get_metadata(key, None)
    if before is not None:
        return str(before)
    client.set_metadata(key, distributed.get_worker().address)
    return None
