"""fibril_sim_ros installs the example configurations from inside its own folder.

``colcon build --symlink-install`` mirrors every data_files source to
``build/fibril_sim_ros/<source>``: a source outside the package (``../config/...``) lands in
``build/config/``, outside the package's build folder.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

import pytest
import setuptools

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fibril_sim_ros"


def _setup_kwargs(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    captured: dict[str, Any] = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    monkeypatch.chdir(PACKAGE)
    runpy.run_path(str(PACKAGE / "setup.py"), run_name="__main__")
    return captured


def test_every_data_file_source_lies_inside_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    data_files = _setup_kwargs(monkeypatch)["data_files"]
    for _, sources in data_files:
        for source in sources:
            assert not os.path.isabs(source), source
            assert not os.path.normpath(source).startswith(".."), (
                f"{source}: outside fibril_sim_ros/ (colcon --symlink-install puts it outside "
                "build/fibril_sim_ros)")
            assert (PACKAGE / source).is_file(), source


def test_every_example_configuration_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    data_files = _setup_kwargs(monkeypatch)["data_files"]
    installed = {
        os.path.join(destination, os.path.basename(source)): (PACKAGE / source).resolve()
        for destination, sources in data_files for source in sources
    }
    examples = sorted(p for p in (REPO / "config").rglob("*") if p.is_file())
    assert examples
    for path in examples:
        target = os.path.join("share/fibril_sim_ros/config", str(path.relative_to(REPO / "config")))
        assert installed.get(target) == path.resolve(), target
