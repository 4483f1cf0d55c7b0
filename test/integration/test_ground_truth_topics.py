"""What a ROS user sees of the robot, end to end through the node process: /joint_states on
by default with effort, stamped exactly on the sim clock's grid; /tf and /tf_static with every
body's pose relative to its parent; get_state with joint names."""

from __future__ import annotations

from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from _sim_node_peer import MANIFEST, Peer, SimProcess, ns, snapshot, wait_until  # noqa: E402
from fibril_msgs.msg import MotorCommand  # noqa: E402
from fibril_msgs.srv import GetState, Step  # noqa: E402
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:Deprecated in favor of:DeprecationWarning")]

MS = 1_000_000
LATCHED = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST,
                     reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)


@pytest.fixture(scope="module")
def peer():
    node = Peer("fibril_ground_truth_peer")
    yield node
    node.close()


@pytest.fixture(scope="module")
def paused(tmp_path_factory, peer):
    """The drivetrain, paused (stepped by the tests), default bridge: ground truth on."""
    sim = SimProcess(tmp_path_factory.mktemp("ground_truth"),
                     {"manifest": str(MANIFEST), "start_paused": True, "real_time_factor": 0.0})
    peer.wait_for_service(Step, "/fibril_sim/step", sim)
    yield sim
    sim.stop()


def _step(peer: Peer, ticks: int) -> Step.Response:
    reply = peer.call(Step, "/fibril_sim/step", Step.Request(steps=ticks), timeout=60.0)
    assert reply.success, reply.message
    return reply


def _accepted(peer: Peer) -> int:
    return peer.call(GetState, "/fibril_sim/get_state", GetState.Request()).accepted_inputs


def _send(peer: Peer, publisher, msg, sim: SimProcess) -> None:
    """Publish until the node accepted it (a message sent before the node's reader matched
    this writer is lost; re-sent only after 3 s without it being counted)."""
    before = _accepted(peer)
    for _ in range(7):
        publisher.publish(msg)
        try:
            wait_until(lambda: _accepted(peer) > before, 3, "the command accepted")
            return
        except AssertionError:
            continue
    raise AssertionError(f"the command was never accepted\n{sim.log()}")


def test_tf_has_every_moving_body_and_tf_static_the_fixed_ones(tmp_path, peer) -> None:
    # First in this file: it starts a node of its own, and no other /fibril_sim node (the
    # module's `paused` one) may publish /tf or answer /fibril_sim/step beside it.
    tf2_msgs = pytest.importorskip("tf2_msgs.msg", reason="tf2_msgs is not installed (make "
                                   "setup builds it from ../shared/vendor/ros2)")
    import xml.etree.ElementTree as ET

    import yaml
    from rcl_interfaces.srv import GetParameters

    # The drivetrain with a fixed sensor mount on the chassis (a frame for /tf_static) and a
    # flap hinged off its origin (the URDF's joint frame of it is a link that is no body).
    source = Path(MANIFEST)
    model = (source.parent / "drivetrain.xml").read_text().replace(
        '<body name="axle"', '<body name="mount" pos="0 0 0.03" quat="0 0 0 1"><geom '
        'type="box" size=".01 .01 .01" mass="0.01"/></body>\n<body name="flap" pos="0.1 0 0">'
        '<joint name="flap_hinge" axis="0 1 0" pos="0 0 0.02"/><geom type="box" '
        'size=".01 .01 .01" mass="0.01"/></body>\n<body name="axle"', 1)
    (tmp_path / "drivetrain.xml").write_text(model)
    document = yaml.safe_load(source.read_text())
    (tmp_path / "simulation.yaml").write_text(yaml.safe_dump(document))
    sim = SimProcess(tmp_path, {"manifest": str(tmp_path / "simulation.yaml"),
                                "start_paused": True, "real_time_factor": 0.0}, name="tf")
    try:
        peer.wait_for_service(Step, "/fibril_sim/step", sim)
        tf = peer.subscribe(tf2_msgs.TFMessage, "/tf")
        static = peer.subscribe(tf2_msgs.TFMessage, "/tf_static", LATCHED)
        wait_until(lambda: peer.node.count_publishers("/tf") > 0, 20, "the /tf publisher",
                   sim.log)
        start = _step(peer, 1).session_time_ns
        end = _step(peer, 200).session_time_ns
        wait_until(lambda: tf and ns(tf[-1][0].transforms[0].header.stamp)
                   >= end - end % (20 * MS), 20, "/tf up to the last step", sim.log)
        messages = [m for m, _ in snapshot(tf, peer.lock)]
        peer.unsubscribe(tf)
        pairs = {(t.header.frame_id, t.child_frame_id) for t in messages[-1].transforms}
        assert pairs == {("world", "chassis"), ("chassis", "axle"), ("chassis", "flap")}
        stamps = sorted({ns(t.header.stamp) for m in messages for t in m.transforms})
        assert all(s % (20 * MS) == 0 for s in stamps) and stamps[-1] > start
        for msg in messages:
            for item in msg.transforms:
                q = item.transform.rotation
                assert abs(q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w - 1.0) < 1e-9
        wait_until(lambda: static, 20, "/tf_static", sim.log)
        (latched,) = [m for m, _ in snapshot(static, peer.lock)]
        peer.unsubscribe(static)
        mount, hinge = sorted(latched.transforms, key=lambda item: item.child_frame_id != "mount")
        assert (mount.header.frame_id, mount.child_frame_id) == ("chassis", "mount")
        t, q = mount.transform.translation, mount.transform.rotation
        assert (t.x, t.y, t.z) == pytest.approx((0.0, 0.0, 0.03))
        assert (q.x, q.y, q.z, q.w) == pytest.approx((0.0, 0.0, 1.0, 0.0))  # ROS: x y z w
        # the flap's joint frame sits at the hinge's anchor in the flap
        assert (hinge.header.frame_id, hinge.child_frame_id) == ("flap", "flap_hinge")
        t = hinge.transform.translation
        assert (t.x, t.y, t.z) == pytest.approx((0.0, 0.0, 0.02))
        # RViz draws the URDF only when every link has a transform
        reply = peer.call(GetParameters, "/fibril_sim/get_parameters",
                          GetParameters.Request(names=["robot_description"]))
        links = {link.get("name") for link in ET.fromstring(reply.values[0].string_value)
                 .iter("link")}
        framed = {"world"} | {c for _, c in pairs} | {t.child_frame_id
                                                     for t in latched.transforms}
        assert links == framed
    finally:
        sim.stop()


def test_joint_states_are_on_by_default_on_the_grid_with_effort(paused, peer) -> None:
    states = peer.subscribe(JointState, "/joint_states")
    wait_until(lambda: peer.node.count_publishers("/joint_states") > 0
               and peer.node.get_publishers_info_by_topic("/joint_states")[0] is not None,
               20, "the /joint_states publisher", paused.log)
    command = peer.publisher(MotorCommand, "/motor/command")
    wait_until(lambda: command.get_subscription_count() > 0, 20, "the command subscription",
               paused.log)
    start = _step(peer, 1).session_time_ns
    _send(peer, command, MotorCommand(mode=MotorCommand.MODE_DUTY, value=0.8), paused)
    end = _step(peer, 4999).session_time_ns  # 5 s of simulated time, ending on the grid
    period = 20 * MS
    expected = list(range(start - start % period + period, end + 1, period))
    # A message stamped at the start may come before the grid; wait for the last one on it.
    wait_until(lambda: any(ns(m.header.stamp) >= end for m, _ in snapshot(states, peer.lock)),
               20, "every /joint_states", paused.log)
    received = [m for m, _ in snapshot(states, peer.lock)]
    peer.unsubscribe(states)
    stamps = [ns(m.header.stamp) for m in received]
    assert stamps[-len(expected):] == expected  # exactly k / 50 Hz, none missing
    last = received[-1]
    assert last.name == ["wheel_joint"]
    assert len(last.position) == len(last.velocity) == len(last.effort) == 1
    assert last.velocity[0] > 1.0 and last.effort[0] != 0.0  # the motor drives the wheel
    state = peer.call(GetState, "/fibril_sim/get_state", GetState.Request())
    assert state.joint_names == ["wheel_joint"]
    assert state.joint_positions[0] == pytest.approx(last.position[0], abs=1e-12)


def test_robot_description_is_latched_and_a_parameter_naming_the_tf_frames(paused, peer) -> None:
    import xml.etree.ElementTree as ET

    from rcl_interfaces.srv import GetParameters
    from std_msgs.msg import String

    description = peer.subscribe(String, "/robot_description", LATCHED)
    wait_until(lambda: description, 20, "/robot_description", paused.log)
    urdf = description[0][0].data
    peer.unsubscribe(description)
    robot = ET.fromstring(urdf)
    links = {link.get("name") for link in robot.iter("link")}
    assert {"world", "chassis", "axle"} <= links  # the TF frame names
    joints = {j.get("name"): j.get("type") for j in robot.iter("joint")}
    assert joints["wheel_joint"] == "continuous"
    reply = peer.call(GetParameters, "/fibril_sim/get_parameters",
                      GetParameters.Request(names=["robot_description"]))
    assert reply.values[0].string_value == urdf
