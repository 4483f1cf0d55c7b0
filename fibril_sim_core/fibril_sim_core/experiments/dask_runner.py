"""Runs an experiment on a Dask cluster: each run is one task.

The files the runs are built from (experiment, manifest, MJCF with its includes and assets,
overlays, scenario) travel as one content-addressed bundle, sent once to each worker; a worker
writes it into its own folder and builds from there, never from the submitter's paths.

Traces stream back: a run writes its trace on the worker's disk; a trace of at most
``CHUNK_BYTES`` travels with the run's record, a longer one stays on that worker's disk and is
read back chunk by chunk (tasks pinned to that worker, at most ``CHUNKS_AHEAD`` chunks in
flight), so neither side ever holds a whole long trace in memory. The client writes it under
``--traces`` (it appears complete or not at all). A run whose worker dies, before its record
or before its trace came back, is recorded as a ``runtime_failure`` naming the worker; its
siblings go on. Per-run timeouts are the runner's own (checked on the worker while it steps).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from ..execution.bundle import Bundle, collect_bundle, manifest_files
from ..execution.dask_session import (DaskClient, DaskFuture, DaskSession, WorkerVersionError,
                                      distributed, worker_cache)
from .experiment import Experiment
from .run import RUNTIME_FAILURE, RunJob, RunRecord, execute_run, failed_record, progress_line

#: Scheduler metadata under which each started run names its worker (see ``_claim``).
METADATA_KEY = "fibril_sim"
#: A trace up to this size comes back with its record; a longer one in chunks of this size.
CHUNK_BYTES = 8 << 20
#: Chunk reads in flight per trace (the next one is read while the last one is written).
CHUNKS_AHEAD = 2


@dataclass(frozen=True)
class _Task:
    """One run as a worker receives it: paths relative to the bundle, the trace path only to
    report."""

    experiment: str
    job: RunJob
    token: str
    chunk_bytes: int


@dataclass(frozen=True)
class _TraceFile:
    """One file of a run's trace: its content when it came with the record, else its size
    (read back from the worker's ``_Outcome.folder``)."""

    relative: str
    size: int
    content: bytes | None


@dataclass(frozen=True)
class _Outcome:
    """What a run task returns: the record, and where its trace is."""

    record: RunRecord
    worker: str
    folder: str | None  # on the worker, until read back; None: nothing left there
    files: tuple[_TraceFile, ...]


def run_on_dask(session: DaskSession, experiment: Experiment, jobs: list[RunJob],
                progress: Callable[[str], None] | None) -> list[RunRecord]:
    """The runs' records, in ``jobs`` order."""
    bundle = collect_bundle(experiment_files(experiment))
    token = uuid.uuid4().hex
    client = session.client
    shipped = session.scatter(bundle)
    futures = {session.submit(_run_task, shipped,
                              _Task(bundle.relative(job.experiment), job, token, CHUNK_BYTES),
                              key=f"fibril-run-{job.run_id}-{token}"): i
               for i, job in enumerate(jobs)}
    results: dict[int, RunRecord] = {}
    try:
        for future in distributed.as_completed(futures):
            i = futures[future]
            results[i] = _collect(client, future, jobs[i])
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


def _collect(client: DaskClient, future: DaskFuture[_Outcome], job: RunJob) -> RunRecord:
    """The run's record, its trace written here; a lost task is the run's runtime failure."""
    try:
        outcome: _Outcome = future.result()
    except WorkerVersionError:
        raise  # a worker that joined with other versions: the command stops
    except Exception as exc:  # noqa: BLE001 - KilledWorker, a lost connection, ...
        return failed_record(job, RUNTIME_FAILURE, f"Dask task failed: {_first_line(exc)}")
    if not outcome.files:
        return outcome.record
    try:
        _write_trace(client, outcome, job.trace)
    except _TraceLost as exc:
        return failed_record(job, RUNTIME_FAILURE, str(exc))
    finally:
        if outcome.folder is not None:  # the worker's copy: read back or lost
            distributed.fire_and_forget(client.submit(
                _remove, outcome.folder, workers=[outcome.worker], allow_other_workers=False,
                pure=False))
    return outcome.record


class _TraceLost(Exception):
    """A chunk of a trace could not be read back from its worker."""


def _write_trace(client: DaskClient, outcome: _Outcome, folder: Path) -> None:
    """The trace's files under ``folder``, which appears complete or not at all."""
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for file in outcome.files:
            path = staging / file.relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as stream:
                if file.content is not None:
                    stream.write(file.content)
                else:
                    _stream_file(client, outcome, file, stream)
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _stream_file(client: DaskClient, outcome: _Outcome, file: _TraceFile,
                 stream: BinaryIO) -> None:
    """Read ``file`` back from its worker in chunks, a few in flight, written in order."""
    assert outcome.folder is not None
    offsets = iter(range(0, file.size, CHUNK_BYTES))
    pending: list[DaskFuture[bytes]] = []

    def ahead() -> None:
        for offset in offsets:
            pending.append(client.submit(
                _read_chunk, outcome.folder, file.relative, offset, CHUNK_BYTES,
                workers=[outcome.worker], allow_other_workers=False, pure=False))
            if len(pending) >= CHUNKS_AHEAD:
                return

    ahead()
    try:
        while pending:
            try:
                chunk: bytes = pending[0].result()
            except Exception as exc:  # noqa: BLE001 - the worker died, its disk is gone
                raise _TraceLost(f"Dask worker {outcome.worker} was lost before the run's "
                                 f"trace came back ({_first_line(exc)})") from None
            pending.pop(0)
            stream.write(chunk)
            del chunk
            ahead()
    finally:
        if pending:
            client.cancel(pending, force=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def _run_task(bundle: Bundle, task: _Task) -> _Outcome:
    """On a worker: one run from the bundle; its record and trace (inline when short, else
    left in a folder of this worker for ``_read_chunk``)."""
    worker = distributed.get_worker().address
    died = _claim(task.token, task.job.run_id)
    if died is not None:
        return _Outcome(failed_record(task.job, RUNTIME_FAILURE,
                                      f"Dask worker {died} died while running it"),
                        worker, None, ())
    cache = Path(worker_cache())
    root = bundle.materialize(cache / "fibril_sim-bundles")
    scratch = Path(tempfile.mkdtemp(prefix="fibril_sim-run-", dir=cache))
    keep = False
    try:
        trace = scratch / task.job.run_id
        job = replace(task.job, experiment=root / task.experiment, trace=trace,
                      shown=((str(trace), str(task.job.trace)), (str(root), bundle.root)))
        record = execute_run(job)
        sizes = [(p, p.stat().st_size) for p in _files(trace)]
        if sum(size for _, size in sizes) <= task.chunk_bytes:
            files = tuple(_TraceFile(str(p.relative_to(trace)), size, p.read_bytes())
                          for p, size in sizes)
            return _Outcome(record, worker, None, files)
        keep = True
        return _Outcome(record, worker, str(trace),
                        tuple(_TraceFile(str(p.relative_to(trace)), size, None)
                              for p, size in sizes))
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


def _read_chunk(folder: str, relative: str, offset: int, size: int) -> bytes:
    """On the worker that ran the run: ``size`` bytes of a trace file from ``offset``."""
    with open(os.path.join(folder, relative), "rb") as stream:
        stream.seek(offset)
        return stream.read(size)


def _remove(folder: str) -> None:
    """On that worker: the run's scratch folder, once its trace came back (or was lost)."""
    shutil.rmtree(Path(folder).parent, ignore_errors=True)


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
