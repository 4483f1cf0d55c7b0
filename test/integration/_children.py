"""Child processes of the serve / shutdown tests: ``fibril_sim`` started with explicit signal
dispositions (the suite itself may run with SIGINT ignored, and a child inherits that)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from _patience import patience

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
MANIFEST = EXAMPLE / "simulation.yaml"
PACKAGES = [REPO / "fibril_sim_core", REPO / "fibril_calibration"]


def environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, PACKAGES), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def dispositions(sigint: Any = signal.SIG_DFL) -> Callable[[], None]:
    """A preexec_fn: SIGINT as given (default: the default action), SIGTERM default."""
    def apply() -> None:
        signal.signal(signal.SIGINT, sigint)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return apply


class Child:
    """``python -m fibril_sim_core.cli ARGS`` with stdout piped and stderr in a file."""

    def __init__(self, args: Sequence[str], folder: Path, *, sigint: Any = signal.SIG_DFL,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.stderr_path = folder / f"stderr-{time.monotonic_ns()}.txt"
        self._stderr: IO[bytes] = self.stderr_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "fibril_sim_core.cli", *map(str, args)],
            env=env or environment(), stdout=subprocess.PIPE, stderr=self._stderr,
            preexec_fn=dispositions(sigint), cwd=cwd, text=True)

    def first_line(self, timeout: float = 60.0) -> str:
        """The first stdout line (``serving ADDRESS``), or fail with the child's stderr."""
        import selectors

        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        timeout = patience(timeout)
        if not selector.select(timeout):
            raise AssertionError(f"no output in {timeout} s; stderr: {self.stderr()}")
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        assert line, f"the child exited: {self.process.wait()}; stderr: {self.stderr()}"
        return line.strip()

    def stop(self, signum: int, timeout: float = 30.0) -> tuple[int, float]:
        """Send ``signum``; return (exit code, seconds until it exited)."""
        start = time.monotonic()
        self.process.send_signal(signum)
        code = self.process.wait(patience(timeout))
        return code, time.monotonic() - start

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


def refusal_line(*args: str | Path) -> str:
    """Run ``fibril_sim ARGS`` expecting a user error: exit 2 and one line on stderr, no
    traceback; that line."""
    result = subprocess.run([sys.executable, "-m", "fibril_sim_core.cli", *map(str, args)],
                            capture_output=True, text=True, env=environment(), timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Until ``condition()``; ``timeout`` is a quiet machine's, scaled by ``patience``."""
    deadline = time.monotonic() + patience(timeout)
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        time.sleep(0.05)
