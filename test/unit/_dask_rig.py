"""A Dask worker that joins a running cluster late, reporting another MuJoCo version: the
``dask worker`` command as a user starts it, with a preload that changes ``mujoco.__version__``
in that worker process only (the test process and the cluster's other workers keep theirs)."""

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

from _patience import patience  # type: ignore[import-not-found]  # noqa: E402  # test/

#: The version the late worker reports.
OTHER_MUJOCO = "0.0.1"


@contextmanager
def late_worker(client: Any, folder: Path) -> Iterator[str]:
    """The address of a new single-threaded worker of ``client``'s scheduler, once the
    scheduler lists it; stopped (and gone from the scheduler) on exit."""
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
        while not set(client.nthreads()) - before:
            assert worker.poll() is None, "the late worker exited"
            assert time.monotonic() < deadline, "the late worker did not join"
            time.sleep(0.05)
        (address,) = set(client.nthreads()) - before
        yield str(address)
    finally:
        worker.terminate()
        worker.wait(timeout=patience(60.0))
        deadline = time.monotonic() + patience(30.0)
        while set(client.nthreads()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
