"""The test helpers' handling of the ``ros2`` tool's own rare crash on exit (no ROS needed)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

import pytest

from _ros2_cli import NOT_YET_DISCOVERED, run_until_discovered

MESSAGE = 'clock:\n  sec: 6\n  nanosec: 580000000\n---\n'


Run = Callable[[Sequence[str], dict[str, str]], subprocess.CompletedProcess[str]]


def _runs(*outcomes: tuple[int, str]) -> tuple[list[int], Run]:
    """A stand-in for the ``ros2`` call that gives these (exit, output) in turn."""
    calls: list[int] = []

    def run(args: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        code, out = outcomes[len(calls)]
        calls.append(code)
        return subprocess.CompletedProcess(['ros2', *args], code, out, '')
    return calls, run


def test_a_crash_after_the_whole_message_is_run_once_more() -> None:
    calls, run = _runs((-11, MESSAGE), (0, MESSAGE))
    with pytest.warns(UserWarning, match='died of signal 11 after its message'):
        assert run_until_discovered(['topic', 'echo'], {}, run=run) == MESSAGE
    assert calls == [-11, 0]


def test_a_second_crash_fails() -> None:
    calls, run = _runs((-11, MESSAGE), (-11, MESSAGE))
    with pytest.warns(UserWarning), \
            pytest.raises(AssertionError, match='exit -11 .an earlier run died of signal 11 after its message'):
        run_until_discovered(['topic', 'echo'], {}, run=run)
    assert calls == [-11, -11]


def test_a_crash_before_the_message_fails_at_once() -> None:
    calls, run = _runs((-11, 'clock:\n  sec: 6\n'))
    with pytest.raises(AssertionError, match='exit -11'):
        run_until_discovered(['topic', 'echo'], {}, run=run)
    assert calls == [-11]


def test_not_yet_discovered_is_tried_again() -> None:
    calls, run = _runs((1, f'WARNING: topic [/clock] {NOT_YET_DISCOVERED}'), (0, MESSAGE))
    assert run_until_discovered(['topic', 'echo'], {}, run=run) == MESSAGE
    assert calls == [1, 0]
