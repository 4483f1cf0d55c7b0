"""fibril_sim_ros's optional C extension (``_publish_batch``): a wheel built with a C compiler
contains it; without one the package still builds (and writes message by message)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fibril_sim_ros"


def _wheel_files(tmp_path: Path, **env: str) -> list[str]:
    """The files of a wheel of fibril_sim_ros built here (setuptools from the venv, which
    requirements.txt pins)."""
    # A copy: a build in the repository would leave build/ and an egg-info there.
    source = tmp_path / "src"
    subprocess.run(["cp", "-rL", str(PACKAGE), str(source)], check=True)
    for built in source.rglob("*.so"):  # an editable install builds it in place
        built.unlink()
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        check=False, capture_output=True, text=True, env={**os.environ, **env})
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "dist").glob("fibril_sim_ros-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_a_wheel_built_with_a_compiler_has_the_extension(tmp_path: Path) -> None:
    files = _wheel_files(tmp_path)
    assert any(f.startswith("fibril_sim_ros/_publish_batch") and f.endswith(".so")
               for f in files), files


def test_without_a_compiler_the_package_builds_without_it(tmp_path: Path) -> None:
    files = _wheel_files(tmp_path, CC="/bin/false", LDSHARED="/bin/false")
    assert "fibril_sim_ros/rcl_publish.py" in files
    assert not any(f.startswith("fibril_sim_ros/_publish_batch") and f.endswith(".so")
                   for f in files), files
