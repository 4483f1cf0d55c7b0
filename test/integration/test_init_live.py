"""``fibril_sim init`` then the node, with no hand-written YAML: the Menagerie Panda's generated
manifest and bridge file go live, every encoder and the ground truth publish, and a JointState on
the generated ``/joint_commands`` topic moves the arm (read back from its encoder topic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fibril_sim_core.cli import main

pytestmark = pytest.mark.ros
PANDA = Path("/work/shared/models/franka_emika_panda/scene.xml")
for _base in (Path(__file__).resolve().parents[2].parent,
              Path(__file__).resolve().parents[2].parent.parent):
    if (_base / "shared/models/franka_emika_panda/scene.xml").is_file():
        PANDA = _base / "shared/models/franka_emika_panda/scene.xml"


@pytest.mark.skipif(not PANDA.is_file(), reason=f"the Menagerie Panda is not at {PANDA}")
def test_generated_panda_goes_live(tmp_path: Path) -> None:
    pytest.importorskip("rclpy")
    from sensor_msgs.msg import JointState

    from fibril_sim_ros.testing import SimHarness

    assert main(["init", str(PANDA), "--output", str(tmp_path / "panda")]) == 0
    encoders = [f"/joint{i}_encoder" for i in range(1, 8)] + \
        ["/finger_joint1_encoder", "/finger_joint2_encoder"]
    with SimHarness(tmp_path / "panda" / "simulation.yaml",
                    bridge=tmp_path / "panda" / "bridge.yaml", log_dir=tmp_path / "log",
                    subscriptions={t: JointState for t in [*encoders, "/joint_states"]},
                    startup_timeout=120) as sim:
        for topic in encoders:
            sample = sim.wait_for(topic, JointState, timeout_sim=0.1)
            assert sample.name == [topic.strip("/").removesuffix("_encoder")]
        truth = sim.wait_for("/joint_states", JointState, timeout_sim=0.1)
        assert {f"joint{i}" for i in range(1, 8)} <= set(truth.name)
        sim.publish("/joint_commands", JointState(name=["joint1"], position=[0.5]))
        reached = sim.wait_for("/joint1_encoder", JointState,
                               lambda m: abs(m.position[0] - 0.5) < 0.01, timeout_sim=3.0)
        assert abs(reached.position[0] - 0.5) < 0.01
