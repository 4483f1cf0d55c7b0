"""A connection to a Dask cluster (the ``dask`` backend); the only module that imports Dask.

``local:N`` starts a ``LocalCluster`` of N single-threaded worker processes on this machine;
any other address connects to a running scheduler. Before any work is sent, every worker's
library versions are compared with this process's: a mismatch is an error naming the worker.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from .backend import Backend, ExecutionError, public_address

try:
    import distributed
except ImportError:  # pragma: no cover - depends on the installation
    distributed = None

CONNECT_SECONDS = 8.0
WORKERS_SECONDS = 60.0
#: Packages whose versions must be the same on the client and on every worker.
CHECKED_PACKAGES = ("mujoco", "numpy", "scipy", "fibril_sim_core", "fibril_calibration")


@dataclass
class DaskSession:
    """An open client; ``describe()`` is the provenance a result records."""

    backend: Backend
    client: Any
    versions: dict[str, str]
    workers: dict[str, dict[str, str]] = field(default_factory=dict)
    cluster: Any = None
    #: Threads of all workers when connected: how many tasks run at once.
    threads: int = 1

    @property
    def dashboard(self) -> str | None:
        try:
            services = self.client.scheduler_info().get("services", {})
            return self.client.dashboard_link if "dashboard" in services else None
        except Exception:  # noqa: BLE001 - the link is a convenience, never an error
            return None

    def scatter(self, value: Any) -> Any:
        """``value`` sent once and kept by every worker (see ``scatter_everywhere``)."""
        return scatter_everywhere(self.client, value)

    def map(self, function: Callable[..., Any], shared: Any, items: Sequence[Any],
            limit: int | None = None) -> list[tuple[bool, Any]]:
        """``function(shared, item)`` for each item as one task each, at most ``limit`` in
        flight (all at once when None); ``(True, result)`` or ``(False, exception)`` per item,
        in ``items`` order. ``shared`` is a future (``scatter_everywhere``)."""
        futures: dict[Any, int] = {}
        outcomes: list[tuple[bool, Any] | None] = [None] * len(items)
        pending = iter(enumerate(items))
        ahead = len(items) if limit is None else max(1, limit)

        def submit() -> None:
            for i, item in pending:
                futures[self.client.submit(function, shared, item, pure=False)] = i
                if len(futures) >= ahead:
                    return

        submit()
        try:
            running = distributed.as_completed(list(futures))
            for future in running:
                i = futures.pop(future)
                try:
                    outcomes[i] = (True, future.result())
                except Exception as exc:  # noqa: BLE001 - handed to the caller, in order
                    outcomes[i] = (False, exc)
                before = set(futures)
                submit()
                running.update([f for f in futures if f not in before])
        finally:
            if futures:
                self.client.cancel(list(futures), force=True)
        return outcomes  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
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
            client = distributed.Client(backend.scheduler, timeout=f"{CONNECT_SECONDS}s")
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        raise ExecutionError(f"Dask scheduler {address}: cannot connect within "
                             f"{CONNECT_SECONDS:g} s ({_first_line(exc)})") from None
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
        client.close()
        if cluster is not None:
            cluster.close()


def check_versions(client: dict[str, str], workers: dict[str, dict[str, str]]) -> None:
    """Every worker must import the client's versions of the checked packages."""
    for worker, theirs in sorted(workers.items()):
        for name, ours in client.items():
            if theirs.get(name) != ours:
                raise ExecutionError(
                    f"Dask worker {public_address(worker)} has {name} "
                    f"{theirs.get(name, 'not installed')}, this machine {ours}: the versions "
                    f"must match (results would differ); no work was sent")


def scatter_everywhere(client: Any, value: Any) -> Any:
    """``value`` sent once from here and copied between the workers (scattered data cannot be
    recomputed: with a copy on every worker, a killed worker loses nothing its siblings need)."""
    future = client.scatter(value, hash=False)
    client.replicate([future])
    return future


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
