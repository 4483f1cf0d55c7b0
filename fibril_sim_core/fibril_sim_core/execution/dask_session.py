"""A connection to a Dask cluster (the ``dask`` backend); the only module that imports Dask.

``local:N`` starts a ``LocalCluster`` of N single-threaded worker processes on this machine;
any other address connects to a running scheduler. Before any work is sent, every worker's
library versions are compared with this process's: a mismatch is an error naming the worker.
A worker that joins later is checked when it receives the run's shared values (``scatter``):
if its versions differ, every task it is given fails with that error, which stops the command.

What every task of a run needs (a calibration's episodes, an experiment's files) is sent once
per worker as a worker plugin (``DaskSession.scatter``) and kept there deserialized; tasks name
it by key. Dask's own scattered data would not do: its memory manager drops the replicas no
waiting task needs (ReduceReplicas, every 2 s), so each batch of tasks fetched and unpickled
megabytes again on every other worker.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Generic, Protocol, TypeAlias, TypeVar, cast

from .._document import JsonValue
from .backend import Backend, ExecutionError, public_address

#: The ``distributed`` package (None when Dask is not installed). Dask ships no complete type
#: information: it is handled as ``Any`` here, at the boundary, and nowhere else.
distributed: Any
#: A task's outcome, as ``DaskSession.map`` hands it over: ``(True, result)`` or
#: ``(False, exception)``; the result is whatever the task returned (pickled by Dask).
TaskOutcome: TypeAlias = tuple[bool, Any]

_V = TypeVar("_V")  # a shared value
_I = TypeVar("_I")  # a task's item
_R = TypeVar("_R")  # a task's result
_R_co = TypeVar("_R_co", covariant=True)


class DaskFuture(Protocol[_R_co]):
    """The part of a ``distributed.Future`` we use: a task's result (or its exception)."""

    def result(self) -> _R_co: ...


class DaskClient(Protocol):
    """The part of a ``distributed.Client`` we use (Dask's own objects are untyped: these
    Protocols say what this package relies on)."""

    dashboard_link: str

    def scheduler_info(self) -> dict[str, object]: ...

    def register_plugin(self, plugin: object, name: str) -> object: ...

    def unregister_worker_plugin(self, name: str) -> object: ...

    def submit(self, function: Callable[..., _R], *args: object, key: str | None = None,
               pure: bool = True, workers: list[str] | None = None,
               allow_other_workers: bool = False) -> DaskFuture[_R]: ...

    def cancel(self, futures: Sequence[DaskFuture[object]], force: bool = False) -> object: ...

    def set_metadata(self, key: list[str], value: object) -> object: ...

    def wait_for_workers(self, n_workers: int, timeout: float | None = None) -> object: ...

    def run(self, function: Callable[[], _R]) -> dict[str, _R]: ...

    def nthreads(self) -> dict[str, int]: ...

    def close(self) -> object: ...


class DaskCluster(Protocol):
    """The part of a ``LocalCluster`` we use."""

    def close(self) -> object: ...


try:
    distributed = importlib.import_module("distributed")
except ImportError:  # pragma: no cover - depends on the installation
    distributed = None

#: How long reaching a scheduler may take, all of it: the TCP connection, Dask's handshake and
#: the client's registration. Short enough that a whole command with an unreachable address
#: (imports included, a few seconds on a busy machine) fails within the issue's 10 s.
CONNECT_SECONDS = 5.0
#: How much longer than CONNECT_SECONDS the command waits for the connection attempt's thread
#: (which reports its own failures at CONNECT_SECONDS) before giving up on it.
_GRACE_SECONDS = 1.0
WORKERS_SECONDS = 60.0
#: Packages whose versions must be the same on the client and on every worker.
CHECKED_PACKAGES = ("mujoco", "numpy", "scipy", "fibril_sim_core", "fibril_calibration")


@dataclass
class DaskSession:
    """An open client; ``describe()`` is the provenance a result records."""

    backend: Backend
    client: DaskClient
    versions: dict[str, str]
    workers: dict[str, dict[str, str]] = field(default_factory=dict)
    cluster: DaskCluster | None = None
    #: Threads of all workers when connected: how many tasks run at once.
    threads: int = 1
    #: Names of the worker plugins that hold this session's shared values.
    plugins: list[str] = field(default_factory=list)

    @property
    def dashboard(self) -> str | None:
        try:
            services = self.client.scheduler_info().get("services", {})
            return self.client.dashboard_link \
                if isinstance(services, dict) and "dashboard" in services else None
        except Exception:  # noqa: BLE001 - the link is a convenience, never an error
            return None

    def scatter(self, value: _V) -> Shared[_V]:
        """``value`` sent once to every worker, those that join later included, and kept
        there (deserialized) until the session closes; tasks receive the handle. A worker
        whose versions differ from this process's keeps a WorkerVersionError instead, which
        its tasks raise."""
        shared: Shared[_V] = Shared(uuid.uuid4().hex)
        name = f"fibril_sim-shared-{shared.key}"
        self.client.register_plugin(_Keep(shared.key, value, self.versions), name=name)
        self.plugins.append(name)
        return shared

    def forget(self) -> None:
        """Drop this session's shared values from the workers."""
        while self.plugins:
            name = self.plugins.pop()
            try:
                self.client.unregister_worker_plugin(name)
            except Exception:  # noqa: BLE001 - a closing cluster forgets them anyway
                pass

    def submit(self, function: Callable[[_V, _I], _R], shared: Shared[_V], item: _I,
               key: str | None = None) -> DaskFuture[_R]:
        """A future of ``function(value, item)`` on a worker, ``value`` its copy of
        ``shared``."""
        return self.client.submit(_call, function, shared, item, key=key, pure=False)

    def map(self, function: Callable[[_V, _I], _R], shared: Shared[_V], items: Sequence[_I],
            limit: int | None = None) -> list[TaskOutcome]:
        """``function(value, item)`` for each item as one task each, ``value`` the one
        ``shared`` holds on the worker, at most ``limit`` in flight (all at once when None);
        ``(True, result)`` or ``(False, exception)`` per item, in ``items`` order. A worker
        with other versions (WorkerVersionError) stops it at once."""
        futures: dict[DaskFuture[_R], int] = {}
        outcomes: list[TaskOutcome | None] = [None] * len(items)
        pending = iter(enumerate(items))
        ahead = len(items) if limit is None else max(1, limit)

        def submit() -> None:
            for i, item in pending:
                futures[self.submit(function, shared, item)] = i
                if len(futures) >= ahead:
                    return

        submit()
        try:
            running = distributed.as_completed(list(futures))
            for future in running:
                i = futures.pop(future)
                try:
                    outcomes[i] = (True, future.result())
                except WorkerVersionError:
                    raise
                except Exception as exc:  # noqa: BLE001 - handed to the caller, in order
                    outcomes[i] = (False, exc)
                before = set(futures)
                submit()
                running.update([f for f in futures if f not in before])
        finally:
            if futures:
                self.client.cancel(list(futures), force=True)
        finished: list[TaskOutcome] = []
        for outcome in outcomes:
            assert outcome is not None  # as_completed ran out: every item has finished
            finished.append(outcome)
        return finished

    def describe(self) -> dict[str, JsonValue]:
        """Backend, scheduler (no credentials), worker count and the workers' versions (the
        same as this process's: ``check_versions`` refused any other)."""
        return {**self.backend.describe(), "workers": len(self.workers),
                "worker_versions": dict(self.versions)}


def versions() -> dict[str, str]:
    """This process's versions of the checked packages (``mujoco.__version__`` and friends, so
    that what is imported counts, not what some metadata says)."""
    out: dict[str, str] = {}
    for name in CHECKED_PACKAGES:
        try:
            module = __import__(name)
        except ImportError:
            continue
        version = getattr(module, "__version__", None)
        if version is None:
            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                version = "unknown"
        out[name] = str(version)
    return out


@contextmanager
def open_session(backend: Backend, progress: Callable[[str], None] | None = None
                 ) -> Iterator[DaskSession]:
    """Connect (or start ``local:N``), check the workers' versions, report the dashboard."""
    if distributed is None:
        raise ExecutionError("the dask backend needs Dask: pip install 'dask[distributed]' "
                             "(or fibril_sim_core[dask])")
    assert backend.scheduler is not None
    address = public_address(backend.scheduler)
    cluster = None
    try:
        if backend.scheduler.startswith("local:"):
            count = int(backend.scheduler.split(":", 1)[1])
            cluster = distributed.LocalCluster(
                n_workers=count, threads_per_worker=1, processes=True,
                dashboard_address=":0", silence_logs=logging.ERROR)
            client = distributed.Client(cluster)
        else:
            client = _connect(backend.scheduler)
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        raise ExecutionError(f"Dask scheduler {address}: cannot start ({_first_line(exc)})"
                             ) from None
    session = DaskSession(backend, client, versions(), cluster=cluster)
    try:
        try:
            client.wait_for_workers(1, timeout=WORKERS_SECONDS)
        except TimeoutError:
            raise ExecutionError(f"Dask scheduler {address}: no worker joined within "
                                 f"{WORKERS_SECONDS:g} s") from None
        session.workers = dict(client.run(versions))
        session.threads = max(1, sum(client.nthreads().values()))
        check_versions(session.versions, session.workers)
        if progress is not None:
            link = session.dashboard
            progress(f"dask: {address}, {len(session.workers)} worker(s)"
                     + (f", dashboard {link}" if link else ""))
        yield session
    finally:
        session.forget()  # a long-lived scheduler would keep every run's values otherwise
        client.close()
        if cluster is not None:
            cluster.close()


def _connect(scheduler: str) -> DaskClient:
    """A client of the scheduler at ``scheduler`` within CONNECT_SECONDS, whatever listens
    there; any failure is one ExecutionError naming the address.

    Dask bounds the TCP connection but not the handshake read after it: a server that accepts
    and never answers (a plain web server, a wrong port) would hold ``Client()`` forever, and
    one that answers something else raises whatever decoding its bytes raised. So the attempt
    runs in a daemon thread (it never keeps the process alive) and first asks the address, in
    an event loop of its own with a deadline, who it is; this thread stops waiting after
    CONNECT_SECONDS (plus a grace). A client the abandoned attempt still makes is closed."""
    attempt = _Attempt(scheduler)
    threading.Thread(target=attempt.run, name="fibril_sim-dask-connect", daemon=True).start()
    attempt.done.wait(CONNECT_SECONDS + _GRACE_SECONDS)
    with attempt.lock:
        attempt.abandoned = True
        client, error = attempt.client, attempt.error
    if client is not None:
        return client
    reason = "no answer" if error is None else _first_line(error)
    raise ExecutionError(f"Dask scheduler {public_address(scheduler)}: cannot connect within "
                         f"{CONNECT_SECONDS:g} s ({reason})")


@dataclass
class _Attempt:
    """One connection attempt (``run`` in its own thread); the waiting thread reads ``client``
    or ``error`` under ``lock`` and sets ``abandoned``."""

    scheduler: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    client: DaskClient | None = None
    error: BaseException | None = None
    abandoned: bool = False

    def run(self) -> None:
        try:
            asyncio.run(_identify(self.scheduler))
            client: DaskClient = distributed.Client(self.scheduler,
                                                    timeout=f"{CONNECT_SECONDS:g}s")
        except BaseException as exc:  # noqa: BLE001 - reported by the waiting thread
            with self.lock:
                self.error = exc
            self.done.set()
            return
        with self.lock:
            keep = not self.abandoned
            if keep:
                self.client = client
        if not keep:  # too late: nobody will use it
            client.close()
        self.done.set()


async def _identify(scheduler: str) -> None:
    """Raises unless a Dask scheduler answers at ``scheduler`` within CONNECT_SECONDS (what
    the error message says: its reason)."""
    async def ask() -> object:
        comm = await distributed.comm.connect(
            scheduler, timeout=f"{CONNECT_SECONDS:g}s",
            **distributed.Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity"})
            reply: object = await comm.read()
            return reply
        finally:
            comm.abort()

    try:
        # (Dask's connect reports an unanswered TCP connection itself at CONNECT_SECONDS.)
        reply = await asyncio.wait_for(ask(), CONNECT_SECONDS + _GRACE_SECONDS / 2)
    except TimeoutError:  # (asyncio.wait_for's, since Python 3.11)
        raise _NotAScheduler("it accepted the connection but never answered as a Dask "
                             "scheduler") from None
    except distributed.comm.CommClosedError:
        raise _NotAScheduler("it closed the connection without answering as a Dask "
                             "scheduler") from None
    except OSError:
        raise  # its first line names the address and the time limit
    except Exception as exc:  # noqa: BLE001 - whatever decoding a foreign answer raised
        raise _NotAScheduler(f"its answer is not Dask's ({type(exc).__name__})") from None
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise _NotAScheduler(f"it answered as a Dask {kind}, not a scheduler" if kind
                             else "its answer is not a Dask scheduler's")


class _NotAScheduler(Exception):
    """What answers at the address is not a Dask scheduler."""


def check_versions(client: dict[str, str], workers: dict[str, dict[str, str]]) -> None:
    """Every worker must import the client's versions of the checked packages."""
    for worker, theirs in sorted(workers.items()):
        mismatch = version_mismatch(worker, client, theirs)
        if mismatch is not None:
            raise ExecutionError(f"{mismatch}; no work was sent")


def version_mismatch(worker: str, client: dict[str, str], theirs: dict[str, str]
                     ) -> str | None:
    """What differs between the client's versions and a worker's (None: nothing)."""
    for name, ours in client.items():
        if theirs.get(name) != ours:
            return (f"Dask worker {public_address(worker)} has {name} "
                    f"{theirs.get(name, 'not installed')}, this machine {ours}: the versions "
                    f"must match (results would differ)")
    return None


class WorkerVersionError(ExecutionError):
    """A worker that joined after the versions were checked has other versions: raised by
    each task it is given (see ``_Keep.setup``); ``DaskSession.map`` and the experiment
    runner stop the command with it."""


@dataclass(frozen=True)
class Shared(Generic[_V]):
    """A value ``DaskSession.scatter`` sent to the workers: tasks carry this key, never the
    value (no transfer per task, nothing for Dask's memory manager to move)."""

    key: str

    def value(self) -> _V:
        """The value, on a worker of the session that shared it."""
        with _KEPT_LOCK:
            try:
                kept = _KEPT[self.key]
            except KeyError:
                raise ExecutionError(f"shared value {self.key} is not on this Dask worker "
                                     f"(its session has closed)") from None
        if isinstance(kept, _Refused):
            raise WorkerVersionError(kept.message)
        return cast("_V", kept)  # (kept by scatter for this handle)


@dataclass(frozen=True)
class _Refused:
    """Kept instead of a shared value by a worker whose versions differ from the client's."""

    message: str


_KEPT: dict[str, object] = {}
_KEPT_LOCK = threading.Lock()


class _Keep(distributed.WorkerPlugin if distributed is not None else object):  # type: ignore[misc]  # a base class of type Any (Dask's)
    """Puts a shared value into the worker process's ``_KEPT`` (and takes it out); on a
    worker whose versions differ from the client's (one that joined after ``open_session``
    checked them), the reason instead."""

    def __init__(self, key: str, value: object, versions: dict[str, str]) -> None:
        self.key = key
        self.held = value
        self.versions = versions

    def setup(self, worker: Any) -> None:  # (a distributed.Worker)
        mismatch = version_mismatch(str(worker.address), self.versions, versions())
        kept = self.held if mismatch is None else _Refused(
            f"{mismatch}; it joined after the versions were checked, its tasks were refused")
        with _KEPT_LOCK:
            _KEPT[self.key] = kept

    def teardown(self, worker: object) -> None:
        with _KEPT_LOCK:
            _KEPT.pop(self.key, None)


def _call(function: Callable[[_V, _I], _R], shared: Shared[_V], item: _I) -> _R:
    """A task: ``function`` on the worker's copy of ``shared``."""
    return function(shared.value(), item)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def worker_cache() -> str:
    """A folder private to the current Dask worker (removed with it)."""
    try:
        return str(distributed.get_worker().local_directory)
    except (ValueError, AttributeError):  # not on a worker: the submitting process itself
        import tempfile
        return os.path.join(tempfile.gettempdir(), "fibril_sim-bundles")
