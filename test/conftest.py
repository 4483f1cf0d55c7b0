"""Session-wide test environment.

ROS 2 tests use Fast DDS over shared memory only (no network traffic), in a ROS domain of
their own per test session, so concurrent sessions on one machine do not see each other.
Both are set before any test imports rclpy, and child processes inherit them.
"""

from __future__ import annotations

import os

os.environ.setdefault('FASTDDS_BUILTIN_TRANSPORTS', 'SHM')
os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
