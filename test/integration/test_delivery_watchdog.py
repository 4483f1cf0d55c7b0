"""The node's real-time watchdog: a host stalled on purpose (a record callback that sleeps on
the host thread, the test hook) makes outputs late; the node logs one WARN naming the cause
(host overrun) with the lateness, and ``get_state`` reports the lateness percentiles, the count
of late outputs and that warning. In-process, so the hook can reach the host thread."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from fibril_msgs.srv import GetState  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from fibril_sim_ros.sim_node import SimNode  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

MANIFEST = (Path(__file__).resolve().parents[2] / "config" / "examples" / "drivetrain"
            / "simulation.yaml")


def _wait(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_a_stalled_host_is_warned_about_and_get_state_says_so(capfd) -> None:
    context = rclpy.Context()
    rclpy.init(context=context, args=["--ros-args", "-p", f"manifest:={MANIFEST}",
                                      "-p", "lateness_warn_ms:=50"])
    node = SimNode(context=context)
    try:
        listener = rclpy.create_node("watchdog_listener", context=context)
        listener.create_subscription(JointState, "/wheel_encoder", lambda _: None, 10)
        stalled: list[float] = []

        def stall(frame) -> None:  # the test hook: the host thread stuck for 300 ms, once
            if not stalled and frame.session_time_ns >= 500_000_000:
                stalled.append(time.monotonic())
                time.sleep(0.3)

        node.connection.on_record(stall, kinds="frame_timing")
        _wait(lambda: stalled and time.monotonic() > stalled[0] + 0.5, 60)
        state = node._on_get_state(GetState.Request(), GetState.Response())
        assert state.mode == "realtime"
        assert state.lateness_max_ms >= 250.0
        assert state.late_deliveries >= 1
        assert "host overrun" in state.lateness_warning, state.lateness_warning
        assert state.lateness_p50_ms < 50.0  # the stall, not the rest, was late
        listener.destroy_node()
    finally:
        node.close()
        node.destroy_node()
        context.try_shutdown()
    err = capfd.readouterr().err
    warnings = [line for line in err.splitlines()
                if "WARN" in line and "real-time delivery" in line]
    assert len(warnings) >= 1, err
    assert "host overrun" in warnings[0] and "ms late" in warnings[0]
    # At most one a second: the stall's catch-up (hundreds of late samples) is one warning.
    assert len(warnings) <= 2, warnings
