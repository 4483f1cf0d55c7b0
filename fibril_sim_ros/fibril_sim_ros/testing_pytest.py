"""pytest plugin: the ``fibril_sim`` fixture (enable with ``pytest_plugins =
["fibril_sim_ros.testing_pytest"]`` in a conftest.py or test module, or ``-p
fibril_sim_ros.testing_pytest``).

``fibril_sim(manifest, **options)`` starts a ``SimHarness`` (options as its constructor's) and
returns it started; every harness the test started is closed when the test ends, passed or
failed, so no process outlives it. Process logs go to the test's ``tmp_path`` (one directory
per harness), where pytest keeps them for the last runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .testing import SimHarness

__all__ = ['fibril_sim']


@pytest.fixture
def fibril_sim(tmp_path: Path) -> Iterator[Callable[..., SimHarness]]:
    """Factory fixture: ``sim = fibril_sim(manifest, controller=[...], seed=3)``."""
    harnesses: list[SimHarness] = []

    def start(manifest: str | os.PathLike[str], **options: Any) -> SimHarness:
        options.setdefault('log_dir', tmp_path / f'fibril_sim_{len(harnesses)}')
        harness = SimHarness(manifest, **options)
        harnesses.append(harness)
        return harness.start()

    yield start
    errors = []
    for harness in reversed(harnesses):
        try:
            harness.close()
        except Exception as exc:  # noqa: BLE001 - close the others, then report
            errors.append(exc)
    if errors:
        raise errors[0]
