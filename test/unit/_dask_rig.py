"""Workers reporting another MuJoCo version: ``OtherMujoco``, a worker plugin that makes the
workers present report it, and ``late_worker``, a worker that joins a running cluster late (the
``dask worker`` command as a user starts it, with a preload that changes ``mujoco.__version__``
in that worker process only: the test process and the cluster's other workers keep theirs).
``run_without_dask``: a ``fibril_sim`` command that must not import Dask."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest  # noqa: E402

from _patience import patience  # type: ignore[import-not-found]  # noqa: E402  # test/

distributed = pytest.importorskip("distributed")

#: The version these workers report.
OTHER_MUJOCO = "0.0.1"


class OtherMujoco(distributed.WorkerPlugin):  # type: ignore[name-defined,misc]  # Dask's, untyped
    """Makes a worker report another MuJoCo version (restored on teardown)."""

    name = "fibril-test-other-mujoco"

    def setup(self, worker: Any) -> None:
        import mujoco
        self.version = mujoco.__version__
        mujoco.__version__ = OTHER_MUJOCO

    def teardown(self, worker: Any) -> None:
        import mujoco
        mujoco.__version__ = self.version


@contextmanager
def late_worker(client: Any, folder: Path) -> Iterator[str]:
    """The address of a new single-threaded worker of ``client``'s scheduler, once the
    scheduler has it running (it takes tasks from then on); stopped (and gone from the
    scheduler) on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    preload = folder / "other_mujoco.py"
    preload.write_text(f"import mujoco\nmujoco.__version__ = {OTHER_MUJOCO!r}\n")
    before = set(client.nthreads())
    # The test process's path: the worker unpickles this package's (and tests') functions.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", client.scheduler.address,
         "--nthreads", "1", "--no-nanny", "--no-dashboard", "--preload", str(preload),
         "--local-directory", str(folder)],
        env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + patience(60.0)
        while not (running := [address for address, info
                               in client.scheduler_info()["workers"].items()
                               if address not in before and info["status"] == "running"]):
            assert worker.poll() is None, "the late worker exited"
            assert time.monotonic() < deadline, "the late worker did not join"
            time.sleep(0.05)
        yield str(running[0])
    finally:
        worker.terminate()
        worker.wait(timeout=patience(60.0))
        deadline = time.monotonic() + patience(30.0)
        while set(client.nthreads()) - before and time.monotonic() < deadline:
            time.sleep(0.05)


def worker_of(_: object, item: int) -> str:
    """A task (``DaskSession.map``): the address of the worker that ran it, a moment later."""
    time.sleep(0.2)
    return str(distributed.get_worker().address)


def run_without_dask(arguments: list[str], cwd: Path) -> None:
    """``fibril_sim ARGUMENTS`` in a fresh process without FIBRIL_DASK_SCHEDULER: it exits 0
    and neither dask nor distributed was imported (the local default)."""
    code = ("import sys; from fibril_sim_core import cli; "
            f"code = cli.main({arguments!r}); "
            "assert code == 0, code; "
            "assert not {'dask', 'distributed'} & set(sys.modules), 'dask imported'")
    env = {k: v for k, v in os.environ.items() if k != "FIBRIL_DASK_SCHEDULER"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=cwd,
                   timeout=patience(300.0), capture_output=True)
