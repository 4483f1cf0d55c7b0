"""fibril_sim_ros.testing: what the harness hands the node, and that it leaves no process behind.

The clean-up tests run a user's test in a child pytest: once failing with the processes still
up (the fixture must kill every process group, grandchildren included), once killed outright
with SIGKILL (the children die with it). Each checks by PID that nothing survived.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fibril_sim_ros import testing
from fibril_sim_ros.testing import (
    SimHarnessError,
    example_controller_command,
    ros_args,
    sim_launch_description,
    sim_node_parameters,
)

pytest_plugins = ['fibril_sim_ros.testing_pytest']

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / 'config' / 'examples' / 'drivetrain' / 'simulation.yaml'


# ------------------------------------------------------------------------ parameters, commands
def test_node_parameters_are_typed_and_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    params = sim_node_parameters('robot.yaml', bridge='b.yaml', seed=3, real_time_factor=2,
                                 trace_dir='out', sync_topics=('/motor/command',),
                                 sync_timeout=1, control_period=0.004,
                                 extra={'clock_period': 0.001})
    assert params == {
        'manifest': str(tmp_path / 'robot.yaml'), 'seed': 3, 'start_paused': True,
        'real_time_factor': 2.0, 'bridge': str(tmp_path / 'b.yaml'),
        'trace_dir': str(tmp_path / 'out'), 'sync_topics': ['/motor/command'],
        'sync_timeout': 1.0, 'control_period': 0.004, 'clock_period': 0.001}
    assert isinstance(params['real_time_factor'], float)


def test_ros_args_keep_types_through_yaml() -> None:
    assert ros_args({'manifest': '/a b/1.0', 'rtf': 1.0, 'paused': True, 'seed': 0,
                     'topics': ['/x']}) == [
        '--ros-args', '-p', 'manifest:="/a b/1.0"', '-p', 'rtf:=1.0', '-p', 'paused:=true',
        '-p', 'seed:=0', '-p', 'topics:=["/x"]']


def test_example_controller_command_runs_on_sim_time() -> None:
    command = example_controller_command(setpoint=8.0)
    assert command[:3] == [sys.executable, '-m', 'fibril_sim_ros.examples.wheel_speed_controller']
    assert command[3:] == ['--ros-args', '-p', 'use_sim_time:=true', '-p', 'setpoint:=8.0']


def test_launch_description_without_launch_says_what_is_missing() -> None:
    try:  # (the repository's launch/ directory is importable as a namespace package)
        from launch import LaunchDescription  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip('launch is installed here; test/launch/ covers the factory')
    with pytest.raises(SimHarnessError, match='needs the ROS 2 launch packages .*SimHarness'):
        sim_launch_description(MANIFEST)


def test_domain_locks_are_exclusive() -> None:
    first = testing.lock_domain(testing.DEFAULT_DOMAIN_POOL)
    try:
        second = testing.lock_domain(testing.DEFAULT_DOMAIN_POOL)
        try:
            assert second.domain_id != first.domain_id
        finally:
            second.release()
        with pytest.raises(SimHarnessError, match=f'no free ROS domain in \\[{first.domain_id}\\]'):
            testing.lock_domain([first.domain_id])
    finally:
        first.release()


def test_launcher_resets_ignored_signals(tmp_path: Path) -> None:
    """A suite may run with SIGINT ignored; ignored dispositions survive exec, so the launcher
    puts SIGINT / SIGTERM back to their defaults before it becomes the command."""
    # (Python installs its KeyboardInterrupt handler for a SIGINT it finds at its default)
    probe = ('import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, '
             'signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)')
    result = subprocess.run(
        [sys.executable, '-m', 'fibril_sim_ros.testing', 'exec', '--', sys.executable, '-c',
         probe], capture_output=True, text=True, timeout=30,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert result.stdout.split() == ['True', 'True'], result.stderr
    usage = subprocess.run([sys.executable, '-m', 'fibril_sim_ros.testing'],
                           capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and 'usage:' in usage.stderr


# ------------------------------------------------------------------------------------ clean-up
USER_TEST = '''
import json, os, sys, time
from pathlib import Path
from sensor_msgs.msg import JointState
from fibril_sim_ros.testing import example_controller_command

pytest_plugins = ['fibril_sim_ros.testing_pytest']
PIDS = Path({pids!r})
# a "controller" that starts a grandchild of its own: only a process-group kill reaches it
SPAWNER = [sys.executable, '-c', 'import subprocess, sys, time; '
           'p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]); '
           'print("GRANDCHILD", p.pid, flush=True); time.sleep(600)']


def test_user(fibril_sim):
    sim = fibril_sim({manifest!r}, controllers=[example_controller_command(), SPAWNER],
                     ready_nodes=1)
    sim.wait_for('/wheel_encoder', JointState, timeout_sim=0.1)
    deadline = time.monotonic() + 30
    while 'GRANDCHILD' not in sim.log('controller1') and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(sim.log('controller1').split()[1])
    PIDS.write_text(json.dumps(sim.pids + [grandchild]))
    if {hang!r}:
        time.sleep(600)
    assert False, 'deliberate failure'
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != 'Z'


def _run_user_test(tmp_path: Path, hang: bool) -> tuple[subprocess.Popen[str], Path]:
    pids = tmp_path / 'pids.json'
    (tmp_path / 'test_user.py').write_text(textwrap.dedent(USER_TEST.format(
        pids=str(pids), manifest=str(MANIFEST), hang=hang)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
         str(tmp_path / 'test_user.py')], cwd=tmp_path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    return child, pids


def _kill_group(child: subprocess.Popen[str]) -> None:
    """End the user test's session (its pytest and whatever it started), whatever happened."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait(timeout=30)


def _assert_all_gone(pids: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [pid for pid in pids if _alive(pid)]
    for pid in survivors:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f'orphans: {survivors}'


@pytest.mark.ros
@pytest.mark.slow
def test_fixture_kills_every_process_group_after_a_failing_test(tmp_path: Path) -> None:
    child, pids_file = _run_user_test(tmp_path, hang=False)
    try:
        output, _ = child.communicate(timeout=120)
    finally:
        _kill_group(child)
    assert child.returncode == 1, output
    assert 'deliberate failure' in output
    pids = json.loads(pids_file.read_text())
    assert len(pids) == 4  # node, controller, spawner, the spawner's own child
    _assert_all_gone(pids)


@pytest.mark.ros
@pytest.mark.slow
def test_children_die_with_a_killed_test_process(tmp_path: Path) -> None:
    child, pids_file = _run_user_test(tmp_path, hang=True)
    deadline = time.monotonic() + 90
    while not pids_file.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not pids_file.exists():
        _kill_group(child)  # the hanging user test must not outlive this one
        pytest.fail(child.communicate(timeout=10)[0] if child.returncode is not None
                    else 'no pids within 90 s')
    time.sleep(0.2)
    node, controller, spawner, _grandchild = json.loads(pids_file.read_text())
    os.killpg(child.pid, signal.SIGKILL)  # no teardown runs at all
    child.communicate(timeout=30)
    # the harness's direct children die with it (parent-death signal); a grandchild that a
    # controller started itself is that controller's to clean up
    _assert_all_gone([node, controller, spawner])
    try:
        os.kill(_grandchild, signal.SIGKILL)
    except ProcessLookupError:
        pass


# A stand-in for the node whose first get_state reply is lost, as Fast DDS loses a reply to a
# client whose reply reader the node has not discovered yet ("failed to send response").
_LOSSY_NODE = textwrap.dedent('''
    import sys
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from fibril_msgs.srv import GetState, Reset, SetPaused, Step

    rclpy.init(args=sys.argv)
    node = rclpy.create_node('fibril_sim')
    asked = []

    def get_state(request, response):
        asked.append(1)
        print(f'get_state request {len(asked)}', flush=True)
        response.paused = True
        return response

    service = node.create_service(GetState, '~/get_state', get_state)
    send = service.send_response
    service.send_response = lambda response, header: (
        send(response, header) if len(asked) > 1 else None)
    for srv_type, name in ((Step, 'step'), (Reset, 'reset'), (SetPaused, 'set_paused')):
        node.create_service(srv_type, f'~/{name}', lambda request, response: response)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
''')


@pytest.mark.ros
def test_start_up_survives_a_lost_get_state_reply(tmp_path: Path) -> None:
    script = tmp_path / 'lossy_node.py'
    script.write_text(_LOSSY_NODE)
    harness = testing.SimHarness(MANIFEST, node_command=[sys.executable, str(script)],
                                 log_dir=tmp_path / 'logs', startup_timeout=20.0)
    began = time.monotonic()
    with harness:
        took = time.monotonic() - began
        assert harness.paused
        log = harness.log()
    assert 'get_state request 2' in log  # the first went unanswered and was sent again
    assert took < testing.STARTUP_ATTEMPT_WALL + 8.0


# ----------------------------------------------------------------------------------- the API
@pytest.mark.ros
def test_step_wait_for_collect_publish_and_reset(fibril_sim) -> None:
    from sensor_msgs.msg import JointState

    from fibril_msgs.msg import MotorCommand

    sim = fibril_sim(MANIFEST, seed=1, subscriptions={'/wheel_encoder': JointState})
    assert sim.get_state().tick == 0  # paused at time 0, nothing ran yet
    assert sim.step(7).tick == 7

    # the scenario drives the wheel forward at duty 0.5: wait until it turned 0.2 rad
    turned = sim.wait_for('/wheel_encoder', JointState, lambda m: m.position[0] > 0.2,
                          timeout_sim=1.0)
    assert turned.position[0] > 0.2
    with pytest.raises(testing.WaitTimeout, match=r'/wheel_encoder: no message satisfying the '
                                                  r'predicate within 0.05 s of sim time'):
        sim.wait_for('/wheel_encoder', JointState, lambda m: m.position[0] < -1.0,
                     timeout_sim=0.05)

    # a command of our own reverses it; collect sees every sample of 0.2 s (500 Hz)
    sim.publish('/motor/command', MotorCommand(mode=MotorCommand.MODE_DUTY, value=-0.8))
    before = sim.get_state().tick
    samples = sim.collect('/wheel_encoder', JointState, duration_sim=0.2)
    assert sim.get_state().tick - before == 200
    assert samples[-1].velocity[0] < -5.0
    stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in samples]
    assert all(b - a == 2_000_000 for a, b in zip(stamps[-100:], stamps[-99:]))

    # reset: a new episode from the keyframe, sim time still going forward
    clock = sim.get_state().session_time_ns
    reply = sim.reset(seed=9)
    assert (reply.episode, reply.seed) == (1, 9)
    state = sim.get_state()
    assert state.tick == 0 and state.session_time_ns >= clock
