"""Smoke test of the ROS 2 stack the project runs on: two processes, fibril_msgs on the wire.

A child process (``_smoke_peer.py``) publishes ``fibril_msgs/msg/DeviceSample`` and hosts a
``fibril_msgs/srv/Step`` service; this process subscribes (reliable QoS), checks what arrives,
and calls the service. It proves that the pip-built fibril_msgs, rclpy and Fast DDS (shared
memory transport, see test/conftest.py) work together across processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip('rclpy')

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402

from fibril_msgs.msg import DeviceSample  # noqa: E402
from fibril_msgs.srv import Step  # noqa: E402

PEER = Path(__file__).with_name('_smoke_peer.py')
TIMEOUT_S = 20.0
WANTED_SAMPLES = 5
RELIABLE = QoSProfile(
    depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
)


def _peer_output(tmp_path: Path) -> str:
    out = (tmp_path / 'peer.out').read_text(errors='replace')
    err = (tmp_path / 'peer.err').read_text(errors='replace')
    return f'--- peer stdout ---\n{out}\n--- peer stderr ---\n{err}'


@pytest.mark.ros
def test_device_samples_and_step_service_across_processes(tmp_path: Path) -> None:
    assert os.environ.get('FASTDDS_BUILTIN_TRANSPORTS') == 'SHM'
    assert int(os.environ['ROS_DOMAIN_ID']) in range(1, 201)
    namespace = f'/fibril_smoke_{os.getpid()}'

    with open(tmp_path / 'peer.out', 'w') as out, open(tmp_path / 'peer.err', 'w') as err:
        peer = subprocess.Popen(
            [sys.executable, str(PEER), '--namespace', namespace, '--lifetime', '60'],
            env=dict(os.environ),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    context = rclpy.Context()
    node = None
    executor = None
    try:
        rclpy.init(context=context)
        node = rclpy.create_node('fibril_smoke_test', namespace=namespace, context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        received: list[DeviceSample] = []
        node.create_subscription(DeviceSample, 'samples', received.append, RELIABLE)

        deadline = time.monotonic() + TIMEOUT_S
        while len(received) < WANTED_SAMPLES and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
            if peer.poll() is not None:
                pytest.fail(f'peer exited early ({peer.returncode})\n{_peer_output(tmp_path)}')
        assert len(received) >= WANTED_SAMPLES, (
            f'received {len(received)} DeviceSample messages in {TIMEOUT_S} s\n'
            f'{_peer_output(tmp_path)}'
        )

        sequence = [int(msg.values[0]) for msg in received]
        assert sequence == list(range(sequence[0], sequence[0] + len(sequence))), sequence
        for msg in received:
            seq = int(msg.values[0])
            assert msg.header.frame_id == 'smoke_frame'
            assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (1, seq)
            assert msg.acquisition_episode_time_ns == 1_000_000 * seq
            assert msg.delivery_episode_time_ns == 1_000_000 * seq + 500_000
            assert msg.episode == 3
            assert msg.device_id == 'smoke_imu'
            assert msg.sample_type == 'fibril_sim/smoke_sample/v1'
            assert list(msg.values) == [float(seq), 0.5, -1.25]
            assert list(msg.component_names) == ['seq', 'half', 'neg']

        client = node.create_client(Step, 'step')
        assert client.wait_for_service(timeout_sec=max(0.1, deadline - time.monotonic())), (
            f'step service not available\n{_peer_output(tmp_path)}'
        )
        future = client.call_async(Step.Request(steps=7))
        executor.spin_until_future_complete(future, timeout_sec=TIMEOUT_S)
        assert future.done(), f'no Step response in {TIMEOUT_S} s\n{_peer_output(tmp_path)}'
        response = future.result()
        assert response.success is True
        assert response.message == 'stepped 7'
        assert response.tick == 70
        assert response.episode_time_ns == 7_000_000
        assert response.session_time_ns == 7_000_007
    finally:
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        context.try_shutdown()
        peer.terminate()
        try:
            peer.wait(timeout=5)
        except subprocess.TimeoutExpired:
            peer.kill()
            peer.wait(timeout=5)
