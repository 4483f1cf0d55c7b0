"""As fast as possible, the sim node's frames grow toward ~20 ms of wall time each.

Frames of the manifest's length (10 ms simulated) last a millisecond or less when the
simulation runs far faster than real time, and each frame costs a timing record, a /clock, a
publisher wake-up and a host round trip: longer frames made the node ~15 % faster in
bench/ros_rtf.py's fast phase. Services wait for the end of a frame, so the growth is bounded
by wall time, not by a number of ticks.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from fibril_sim_ros.sim_node import FAST_FRAME_MAX_FACTOR, FAST_FRAME_WALL_S, SimNode


def _node(mode: str = "fast", frame_ticks: int = 10) -> SimpleNamespace:
    """What ``_adapt_fast_frame`` reads and writes of the node."""
    host = SimpleNamespace(frame_ticks=frame_ticks)
    return SimpleNamespace(mode=mode, _mode_lock=threading.Lock(), fast_frame_ticks=10,
                           _runtime=SimpleNamespace(host=host))


def _adapt(node: SimpleNamespace, wall_s: float) -> int:
    SimNode._adapt_fast_frame(node, wall_s)  # type: ignore[arg-type]
    return node._runtime.host.frame_ticks


def test_short_frames_double_up_to_the_bound() -> None:
    node = _node()
    seen = [_adapt(node, 0.001) for _ in range(12)]
    assert seen[:4] == [20, 40, 80, 160]
    assert seen[-1] == FAST_FRAME_MAX_FACTOR * 10  # never more than 100 manifest frames


def test_long_frames_halve_down_to_the_manifests() -> None:
    node = _node(frame_ticks=640)
    seen = [_adapt(node, 3 * FAST_FRAME_WALL_S) for _ in range(8)]
    assert seen[:3] == [320, 160, 80]
    assert seen[-1] == 10


def test_frames_near_the_target_keep_their_length() -> None:
    node = _node(frame_ticks=160)
    assert _adapt(node, FAST_FRAME_WALL_S) == 160
    assert _adapt(node, 0.6 * FAST_FRAME_WALL_S) == 160
    assert _adapt(node, 1.9 * FAST_FRAME_WALL_S) == 160


def test_other_modes_keep_their_frames() -> None:
    for mode in ("realtime", "sync"):
        node = _node(mode=mode, frame_ticks=2)
        assert _adapt(node, 0.0001) == 2

