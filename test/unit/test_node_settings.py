"""The sim node's parameters are checked in ``NodeSettings.from_parameters`` without rclpy:
every bad value is a NodeConfigError naming the parameter and the value, and the periods land
on the plan's time grid (``NodeTiming.of``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fibril_sim_core.runtime import ServerOptions
from fibril_sim_core.timebase import Timebase
from fibril_sim_ros.settings import NodeConfigError, NodeSettings, NodeTiming

DEFAULTS: dict[str, object] = {
    "manifest": "robot.yaml", "bridge": "", "real_time_factor": 1.0, "start_paused": False,
    "seed": -1, "trace_dir": "", "clock_period": 0.0, "sync_topics": None,
    "sync_timeout": 5.0, "control_period": 0.0, "server_socket": "",
    "lateness_warn_ms": 10.0, "thread_priority": 0,
}


def _settings(**changed: object) -> NodeSettings:
    return NodeSettings.from_parameters({**DEFAULTS, **changed}.get)


def test_the_defaults_make_a_real_time_node() -> None:
    settings = _settings()
    assert settings.manifest == Path("robot.yaml")
    assert settings.mode == "realtime" and settings.real_time_factor == 1.0
    assert settings.bridge is None and settings.trace_dir is None and settings.server is None
    assert settings.seed is None  # the manifest's scenario.seed
    assert settings.lateness_warn_s == 0.01 and settings.thread_priority == 0


def test_modes_follow_the_real_time_factor_and_the_sync_topics() -> None:
    assert _settings(real_time_factor=0).mode == "fast"
    assert _settings(real_time_factor=2).real_time_factor == 2.0  # an integer is a number
    sync = _settings(sync_topics=["/motor/command", ""], control_period=0.002)
    assert sync.mode == "sync" and sync.sync_topics == ("/motor/command",)
    assert sync.control_period_s == 0.002 and sync.sync_timeout_s == 5.0


@pytest.mark.parametrize(("name", "value", "match"), [
    ("manifest", "", "'manifest' is required"),
    ("real_time_factor", -1.0, "'real_time_factor' must be 0"),
    ("real_time_factor", float("nan"), "'real_time_factor' must be a finite number"),
    ("seed", -2, "'seed' must be >= 0"),
    ("clock_period", float("inf"), "'clock_period' must be a finite number"),
    ("lateness_warn_ms", 0, "'lateness_warn_ms' must be a number of milliseconds > 0"),
    ("thread_priority", 99, "'thread_priority' must be in 0.."),
    ("server_socket", "/no/such/dir/sim.sock", "server_socket: directory /no/such/dir"),
])
def test_a_bad_parameter_is_named_with_its_value(name: str, value: object, match: str) -> None:
    with pytest.raises(NodeConfigError, match=match):
        _settings(**{name: value})


def test_sync_only_parameters_are_checked_in_sync_mode_only() -> None:
    assert _settings(sync_timeout=0.0).sync_timeout_s == 0.0  # unused: not checked
    with pytest.raises(NodeConfigError, match="'sync_timeout' must be > 0, got 0.0"):
        _settings(sync_topics=["/cmd"], sync_timeout=0.0)
    with pytest.raises(NodeConfigError, match="'control_period' must be a finite number"):
        _settings(sync_topics=["/cmd"], control_period=float("nan"))


def test_server_socket_auto_is_a_private_directory(tmp_path: Path) -> None:
    assert _settings(server_socket="auto").server == ServerOptions()
    assert _settings(server_socket=str(tmp_path / "s.sock")).server == \
        ServerOptions(socket=tmp_path / "s.sock")


def test_timing_puts_the_periods_on_the_grid() -> None:
    timebase = Timebase.from_seconds(0.001)
    timing = NodeTiming.of(_settings(), timebase, 2, 0.01, {"/cmd"})
    assert timing.clock_ticks == 2  # the fastest device's period
    assert timing.fast_frame_ticks == 10 and timing.control_ticks == 0
    assert timing.options.mode == "realtime" and timing.options.start_paused
    assert timing.options.frame_duration_s == pytest.approx(0.002)  # a frame a clock
    sync = NodeTiming.of(_settings(sync_topics=["/cmd"]), timebase, 2, 0.01, {"/cmd"})
    assert sync.control_ticks == 2 and sync.options.mode == "fast"
    with pytest.raises(NodeConfigError, match="'clock_period'"):
        NodeTiming.of(_settings(clock_period=0.0015), timebase, 2, 0.01, {"/cmd"})
    with pytest.raises(NodeConfigError, match="'/other' is not an input topic of the bridge; "
                                              "inputs: /cmd"):
        NodeTiming.of(_settings(sync_topics=["/other"]), timebase, 2, 0.01, {"/cmd"})


def test_settings_need_no_rclpy() -> None:
    """The module loads, and checks, in a process where rclpy cannot be imported."""
    code = ("import sys; sys.modules['rclpy'] = None\n"
            "from fibril_sim_ros.settings import NodeSettings\n"
            "s = NodeSettings.from_parameters({'manifest': 'm.yaml', 'real_time_factor': 0,"
            " 'lateness_warn_ms': 5, 'clock_period': 0.0}.get)\n"
            "assert s.mode == 'fast' and 'rclpy' not in [m for m in sys.modules"
            " if sys.modules[m] is not None]\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
