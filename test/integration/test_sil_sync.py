"""Sync mode (deterministic lockstep) with the example controller, as processes.

The same seed gives the same controller commands at the same commit ticks on every run (three
runs, the traces' ingress records and encoder samples compared field by field); a controller
that never answers makes the node fail loudly, naming the topic.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip('rclpy')

from _patience import patience  # noqa: E402
from fibril_sim_core.trace import TraceReader  # noqa: E402
from fibril_sim_ros.testing import SimHarnessError, example_controller_command  # noqa: E402

pytest_plugins = ['fibril_sim_ros.testing_pytest']

MANIFEST = Path(__file__).parents[2] / 'config' / 'examples' / 'drivetrain' / 'simulation.yaml'
# (a busy machine may hold a controller's answer for seconds: sync_timeout scales by patience)
LOCKSTEP = dict(sync_topics=['/motor/command'], control_period=0.002)
TICKS = 200  # 0.2 s of sim time: 100 control periods
# A controller that is up (on sim time, its publisher exists) but never answers.
MUTE_CONTROLLER = [sys.executable, '-c', (
    'import rclpy\n'
    'from rclpy.parameter import Parameter\n'
    'from fibril_msgs.msg import MotorCommand\n'
    'rclpy.init()\n'
    'node = rclpy.create_node("mute_controller", parameter_overrides=[\n'
    '    Parameter("use_sim_time", value=True)])\n'
    'node.create_publisher(MotorCommand, "/motor/command", 10)\n'
    'try:\n'
    '    rclpy.spin(node)\n'
    'except BaseException:\n'
    '    pass\n')]


# A controller that answers every /clock it receives (time 0 too, if it were offered one) with
# a duty that depends on the clock's time alone: which answer belongs to which period is the
# node's decision, and the runs must agree on it. (A controller that also reads the encoder
# depends on its own executor's order between the sample and the clock, which the node
# cannot decide; the example controller's test covers that case.)
CLOCK_ANSWERER = [sys.executable, '-c', (
    'import math\n'
    'import rclpy\n'
    'from rclpy.qos import QoSProfile, ReliabilityPolicy, DurabilityPolicy\n'
    'from rosgraph_msgs.msg import Clock\n'
    'from sensor_msgs.msg import JointState\n'
    'from fibril_msgs.msg import MotorCommand\n'
    'rclpy.init()\n'
    'node = rclpy.create_node("clock_answerer")\n'
    'seen = [0.0]\n'
    'def on_encoder(m):\n'
    '    seen[0] = m.velocity[0] if m.velocity else 0.0\n'
    'def on_clock(m):\n'
    '    t = m.clock.sec + m.clock.nanosec * 1e-9\n'
    '    duty = 0.5 + 0.4 * math.sin(25.0 * t)\n'
    '    publisher.publish(MotorCommand(mode=MotorCommand.MODE_DUTY, value=duty))\n'
    'node.create_subscription(JointState, "/wheel_encoder", on_encoder, 10)\n'
    'node.create_subscription(Clock, "/clock", on_clock, QoSProfile(depth=10, \n'
    '    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))\n'
    'publisher = node.create_publisher(MotorCommand, "/motor/command", 10)\n'
    'try:\n'
    '    rclpy.spin(node)\n'
    'except BaseException:\n'
    '    pass\n')]
CPU_HOG = [sys.executable, '-c', 'while True: pass']


def _trace_content(trace: Path) -> tuple[list[tuple], list[tuple]]:
    with TraceReader(trace) as reader:
        inputs = [(r.episode, r.source_id, r.source_sequence, r.payload_type, r.payload_json,
                   r.accepted, r.commit_tick, r.acceptance_sequence, r.session_time_ns)
                  for r in reader.external_inputs()]
        encoder = [(o.acquisition_tick, o.delivery_time_ns, tuple(o.values))
                   for o in reader.device_outputs('wheel_encoder')]
    return inputs, encoder


@pytest.mark.ros
@pytest.mark.slow
def test_sync_mode_is_reproducible_across_three_runs(fibril_sim, tmp_path: Path) -> None:
    runs = []
    for run in range(3):
        trace = tmp_path / f'run{run}'
        sim = fibril_sim(MANIFEST, seed=5, trace_dir=trace, controller=example_controller_command(),
                         sync_timeout=patience(5.0), **LOCKSTEP)
        reply = sim.step(TICKS)
        assert reply.tick == TICKS
        sim.close()  # SIGTERM: the node closes its trace complete
        runs.append(_trace_content(trace))

    inputs, encoder = runs[0]
    commands = [r for r in inputs if r[1] == 'motor/command' and r[2] > 0]  # not the scenario's
    # one command per control period, committed at the start of the next period (the answer
    # to the last period is still pending when the run stops: never committed, not traced)
    assert [r[6] for r in commands] == list(range(2, TICKS, 2)), [r[6] for r in commands]
    assert all(r[5] for r in commands)
    assert len({r[4] for r in commands}) > 50  # real, varying PI outputs
    assert len(encoder) == TICKS // 2
    for other in runs[1:]:
        assert other[0] == inputs
        assert other[1] == encoder


@pytest.mark.ros
@pytest.mark.slow
def test_lockstep_is_identical_under_load_with_a_controller_answering_every_clock(
        fibril_sim, tmp_path: Path) -> None:
    """Three runs with two CPU-burning processes beside them: the same commands at the same
    commit ticks, the same samples (no /clock outside a period, inputs arriving while a period
    is stepped held to its end, the first period only once the outputs' readers matched)."""
    hogs = [subprocess.Popen(CPU_HOG) for _ in range(2)]
    try:
        runs = []
        for run in range(3):
            trace = tmp_path / f'run{run}'
            sim = fibril_sim(MANIFEST, seed=5, trace_dir=trace, controller=CLOCK_ANSWERER,
                             sync_timeout=patience(5.0), **LOCKSTEP)
            assert sim.step(TICKS).tick == TICKS
            sim.close()
            runs.append(_trace_content(trace))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    inputs, encoder = runs[0]
    commands = [r for r in inputs if r[1] == 'motor/command' and r[2] > 0]
    assert [r[6] for r in commands] == list(range(2, TICKS, 2)), [r[6] for r in commands]
    assert len({r[4] for r in commands}) > 10  # the answers follow the samples
    for other in runs[1:]:
        assert other[0] == inputs
        assert other[1] == encoder


@pytest.mark.ros
def test_a_controller_that_never_answers_fails_sync_mode_naming_the_topic(fibril_sim) -> None:
    sim = fibril_sim(MANIFEST, controller=MUTE_CONTROLLER, sync_timeout=1.0,
                     ready_topics=['/motor/command'], **LOCKSTEP)
    # ~/step in sync mode: the call fails with the topic in its message
    with pytest.raises(SimHarnessError, match=r'sync: no message on /motor/command within '
                                              r'sync_timeout 1 s'):
        sim.step(10)
    # running free in sync mode: the node stops with status 1 and says why
    sim.set_paused(False)
    node = sim.processes[0]
    assert node.popen.wait(timeout=30) == 1
    assert 'no message on /motor/command within sync_timeout 1 s' in sim.log('fibril_sim')
