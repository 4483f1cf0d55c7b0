"""The three packages type-check under ``mypy --strict`` (mypy.ini at the repository root).

Typed seams are part of the interface: a Protocol or a frozen dataclass that a caller
misuses should fail here, not at run time on a user's robot. mypy runs in a subprocess
(its own cache in the repository's ``.mypy_cache``), once over the three packages.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (requirements.txt pins it)")

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fibril_sim_core/fibril_sim_core", "fibril_calibration/fibril_calibration",
            "fibril_sim_ros/fibril_sim_ros")


@pytest.mark.slow
def test_packages_pass_mypy_strict() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                           *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
