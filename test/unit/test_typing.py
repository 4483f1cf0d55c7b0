"""The three packages type-check under ``mypy --strict`` (mypy.ini at the repository root).

Checked against the library versions requirements.txt pins (their annotations are part of
the check: numpy 1.26's differ from numpy 2's), so it skips in an environment with another
numpy, such as make test-distro's.

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


def _pinned(name: str) -> str | None:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    return None


@pytest.mark.slow
def test_packages_pass_mypy_strict() -> None:
    import numpy

    if numpy.__version__ != _pinned("numpy"):
        pytest.skip(f"typed against numpy {_pinned('numpy')} (requirements.txt), "
                    f"not {numpy.__version__}")
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                           *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
