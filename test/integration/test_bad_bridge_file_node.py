"""A bridge file whose ``field`` is a list, through the sim node as a process (issue 23 item
10): it was ``TypeError: unhashable type: 'list'`` with a traceback and exit 1; it is one line
naming the file, the key and the value, and exit 2 (a configuration error)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from _sim_node_peer import MANIFEST, SimProcess  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

#: The node exits while it is being built (no simulation runs): generous for a busy machine.
EXIT_SECONDS = 180


def test_a_list_as_joint_state_field_stops_the_node_with_one_line_and_exit_2(
        tmp_path: Path) -> None:
    bridge = tmp_path / "bridge.yaml"
    bridge.write_text("schema_version: {major: 1, minor: 0}\n"
                      "inputs:\n"
                      "  - topic: /joint_commands\n"
                      "    type: sensor_msgs/msg/JointState\n"
                      "    joints: {wheel_joint: motor/command}\n"
                      "    field: [velocity]\n")
    sim = SimProcess(tmp_path, {"manifest": MANIFEST, "bridge": bridge}, name="bad-field")
    try:
        assert sim.wait(EXIT_SECONDS) == 2, sim.log()
        lines = [line for line in sim.stderr().splitlines() if line.strip()]
        assert lines == [f"fibril_sim: error: {bridge}: inputs[0].field: unknown value list "
                         f"['velocity']; expected one of position, velocity, effort"], sim.log()
    finally:
        sim.stop()
