"""Session-wide test environment.

ROS 2 tests use Fast DDS over shared memory only (no network traffic), in a ROS domain of
their own per test process (locked, so concurrent sessions and parallel workers on one machine
never see each other).
Both are set before any test imports rclpy, and child processes inherit them.

Rendering (the camera device, render observations) uses an offscreen OpenGL context: unless
MUJOCO_GL is set already, EGL is chosen when libEGL is installed, else OSMesa when libOSMesa
is (CI installs one); with neither, the rendering tests skip and say why.

A suite started as a background job (``make test &``, a CI step run with ``&``) inherits
SIGINT ignored, and so would every child it starts: the tests that stop a node, a launch or a
trace writer with SIGINT (as Ctrl-C does) need it to act, so it is set back to Python's default
here, in the session and each worker, before any child is started.
"""

from __future__ import annotations

import ctypes.util
import fcntl
import os
import signal
import tempfile

import pytest

os.environ.setdefault('FASTDDS_BUILTIN_TRANSPORTS', 'SHM')


if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _own_domain(pool: range = range(101, 201)) -> str:
    """A ROS domain no other test process on this machine holds (a lock file held for the
    process's lifetime): parallel workers (pytest -n) and concurrent sessions never share one."""
    for domain in pool:
        handle = open(os.path.join(tempfile.gettempdir(),  # noqa: SIM115 - held until exit
                                   f'fibril_sim-test-domain-{domain}.lock'), 'a+')
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held.append(handle)
        return str(domain)
    return str(1 + os.getpid() % 100)  # every one taken: a likely free one


_held: list[object] = []
# Chosen here unless the user set one; a pytest-xdist worker inherits the domain its
# controller chose (the environment is copied), so each worker chooses its own again.
if 'ROS_DOMAIN_ID' not in os.environ or (os.environ.get('FIBRIL_TEST_DOMAIN_CHOSEN')
                                         and os.environ.get('PYTEST_XDIST_WORKER')):
    os.environ['ROS_DOMAIN_ID'] = _own_domain()
    os.environ['FIBRIL_TEST_DOMAIN_CHOSEN'] = '1'


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


#: The test files that take longest, heaviest first (measured 2026-12-07, per-file totals of
#: `--junitxml` times with -n 2: doc snippets, node and CLI processes, calibrations, the abuse
#: test's idle-client probe, mypy). With ``--dist loadfile`` a file runs in one worker;
#: pytest-xdist would hand out files by their number of tests (many small tests first), leaving
#: files of one or two long tests to the end where one worker runs them alone. pytest.ini turns
#: that off (``--no-loadscope-reorder``) and the files are collected in this order instead: the
#: long ones start first and the many short files fill both workers at the end. A file missing
#: here only runs later; none is left out.
HEAVY_FILES = (
    "docs/test_snippets.py",
    "integration/test_readme_ros2_commands.py",
    "integration/test_server_abuse.py",
    "integration/test_sil_regression.py",
    "integration/test_calibrate_cli.py",
    "unit/test_bad_input_fuzz.py",
    "integration/test_sil_sync.py",
    "integration/test_sim_node.py",
    "unit/test_trace_columns.py",
    "integration/test_ros2_launch.py",
    "unit/test_dask_calibration.py",
    "integration/test_panda_example.py",
    "integration/test_sil_harness.py",
    "integration/test_shutdown.py",
    "unit/test_typing.py",
    "integration/test_ros2_tools.py",
    "unit/test_dask_experiment.py",
    "unit/test_python_api.py",
    "integration/test_real_time_factor_range.py",
    "integration/test_serve.py",
    "unit/test_ros_package_extension.py",
    "integration/test_quadruped_leg_example.py",
    "unit/test_calibration_report.py",
    "launch/test_sil_demo_launch.py",
    "unit/test_trace_integrity.py",
    "launch/test_sim_launch.py",
    "unit/test_runtime.py",
    "launch/test_sil_demo_regression.py",
    "integration/test_experiment_cli.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of HEAVY_FILES first, in its order; the tests of a file keep their order."""
    here = os.path.dirname(os.path.abspath(__file__))
    rank = {os.path.join(here, *name.split("/")): n for n, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))
