"""Session-wide test environment.

ROS 2 tests use Fast DDS over shared memory only (no network traffic), in a ROS domain of
their own per test session, so concurrent sessions on one machine do not see each other.
Both are set before any test imports rclpy, and child processes inherit them.

Rendering (the camera device, render observations) uses an offscreen OpenGL context: unless
MUJOCO_GL is set already, EGL is chosen when libEGL is installed, else OSMesa when libOSMesa
is (CI installs one); with neither, the rendering tests skip and say why.
"""

from __future__ import annotations

import ctypes.util
import os

import pytest

os.environ.setdefault('FASTDDS_BUILTIN_TRANSPORTS', 'SHM')
os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))


def _offscreen_gl() -> str | None:
    for platform, library in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if ctypes.util.find_library(library):
            return platform
    return None


if "MUJOCO_GL" not in os.environ and _offscreen_gl():
    os.environ["MUJOCO_GL"] = _offscreen_gl()  # type: ignore[assignment]


def pytest_report_header() -> str:
    """The machine's speed factor at start (see ``_patience``): a slow or busy machine shows."""
    from _patience import speed_factor

    return f"fibril: machine speed factor {speed_factor():.1f} (timeouts scale by it)"


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makemodule(module_path, parent):
    """launch_testing's plugin imports each module itself; a module-level skip or import
    error must stay that module's, not skip or fail its whole directory."""
    try:
        return (yield)
    except (pytest.skip.Exception, Exception):
        return pytest.Module.from_parent(parent, path=module_path)


@pytest.fixture(autouse=True)
def _project_loggers_propagate():
    """launch (imported by launch_testing's pytest plugin) makes every logger created after
    it a LaunchLogger that does not propagate, so caplog would see none of the project's
    records: they propagate to the root logger again, as outside that plugin."""
    import logging

    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("fibril_sim") and isinstance(logger, logging.Logger):
            logger.propagate = True
    yield
