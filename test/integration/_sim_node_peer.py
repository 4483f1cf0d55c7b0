"""Test helpers (not a test module): the sim node as a child process, and an rclpy peer node in
the test process that subscribes, publishes and calls services from a background executor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import rclpy
from rclpy.exceptions import InvalidHandle
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from _patience import patience

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "config" / "examples" / "drivetrain" / "simulation.yaml"

RELIABLE = QoSProfile(depth=1000, history=HistoryPolicy.KEEP_LAST,
                      reliability=ReliabilityPolicy.RELIABLE)
BEST_EFFORT = QoSProfile(depth=1000, history=HistoryPolicy.KEEP_LAST,
                         reliability=ReliabilityPolicy.BEST_EFFORT)
CLOCK = QoSProfile(depth=1000, history=HistoryPolicy.KEEP_LAST,
                   reliability=ReliabilityPolicy.RELIABLE,
                   durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Services whose request changes nothing: a lost reply is safe to ask again.
_IDEMPOTENT = frozenset({"GetState", "SetPaused", "SetParameters", "GetParameters"})
# Live /clock only: no history sample arriving after a newer live one.
LIVE_CLOCK = RELIABLE


def ns(stamp: Any) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def _child_signals() -> None:
    # The suite may run with SIGINT ignored; the child gets the default dispositions.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class SimProcess:
    """``python -m fibril_sim_ros.sim_node`` with the test's environment (SHM, domain id)."""

    def __init__(self, tmp_path: Path, params: dict[str, Any], name: str = "sim",
                 params_file: Path | None = None, log_level: str | None = None) -> None:
        self.out = tmp_path / f"{name}.out"
        self.err = tmp_path / f"{name}.err"
        command = [sys.executable, "-m", "fibril_sim_ros.sim_node", "--ros-args"]
        if params_file is not None:
            command += ["--params-file", str(params_file)]
        if log_level is not None:
            command += ["--log-level", f"fibril_sim:={log_level}"]
        for key, value in params.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, (list, tuple)):
                value = "[" + ",".join(str(v) for v in value) + "]"
            command += ["-p", f"{key}:={value}"]
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.process = subprocess.Popen(command, env=dict(os.environ), stdout=out,
                                            stderr=err, stdin=subprocess.DEVNULL,
                                            preexec_fn=_child_signals)

    def log(self) -> str:
        return (f"--- node stdout ---\n{self.out.read_text(errors='replace')}\n"
                f"--- node stderr ---\n{self.err.read_text(errors='replace')}")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=patience(timeout))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


class Peer:
    """An rclpy node in the test process, spun by a background executor thread."""

    def __init__(self, name: str = "fibril_test_peer") -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.lock = threading.Lock()
        self.handles: dict[int, Any] = {}
        self.clients: dict[tuple[type, str], Any] = {}
        self._stop = False
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop and self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=0.02)
            except InvalidHandle:
                # A subscription ``unsubscribe`` destroyed from the test's thread while this
                # pass waited on it: spin on (returning here left every later test of the
                # module without messages or service replies).
                continue
            except Exception:  # noqa: BLE001 - shutting down
                return

    def subscribe(self, cls: type, topic: str, qos: QoSProfile = RELIABLE,
                  on_message: Callable[[Any], None] | None = None) -> list[tuple[Any, int]]:
        """Messages with their source (publication) timestamps, in arrival order."""
        received: list[tuple[Any, int]] = []

        def callback(msg: Any, info: Any) -> None:
            with self.lock:
                received.append((msg, int(info["source_timestamp"])))
            if on_message is not None:
                on_message(msg)

        subscription = self.node.create_subscription(cls, topic, callback, qos)
        self.handles[id(received)] = subscription
        return received

    def unsubscribe(self, received: list) -> None:
        """Stop a subscription made by ``subscribe`` (this process has less to do)."""
        subscription = self.handles.pop(id(received), None)
        if subscription is not None:
            self.node.destroy_subscription(subscription)

    def publisher(self, cls: type, topic: str, qos: QoSProfile = RELIABLE) -> Any:
        return self.node.create_publisher(cls, topic, qos)

    def call(self, cls: type, name: str, request: Any, timeout: float = 20.0) -> Any:
        """Call ``name`` and wait for its reply. The node drops a reply to a client whose reply
        reader it has not discovered yet (Fast DDS: "failed to send response"), so clients are
        kept for the next call, and a request that changes nothing is re-sent every 2 s. A
        ``Step`` is preceded by ``Step(steps=0)`` (changes nothing), re-sent until answered, so
        that its reply has a way back (the node may be a new process since the client's last
        call): seen beside two hogs, a first ``Step(1)`` got no reply in 130 s."""
        step = cls.__name__ == "Step"
        if step and request.steps:
            self.call(cls, name, cls.Request(steps=0), timeout)  # (idempotent: re-sent)
        client = self._client(cls, name)
        timeout = patience(timeout)
        assert client.wait_for_service(timeout_sec=timeout), f"service {name} not available"
        idempotent = cls.__name__ in _IDEMPOTENT or (step and not request.steps)
        attempt = 2.0 if idempotent else timeout
        deadline = time.monotonic() + timeout
        while True:
            future = client.call_async(request)
            resend = min(deadline, time.monotonic() + attempt)
            while not future.done() and time.monotonic() < resend:
                time.sleep(0.005)
            if future.done():
                return future.result()
            client.remove_pending_request(future)
            assert time.monotonic() < deadline, f"no reply from {name} in {timeout} s"

    def wait_for_service(self, cls: type, name: str, sim: SimProcess,
                         timeout: float = 30.0) -> None:
        client = self._client(cls, name)
        deadline = time.monotonic() + patience(timeout)
        while not client.wait_for_service(timeout_sec=0.1):
            assert sim.alive(), f"the node exited early\n{sim.log()}"
            assert time.monotonic() < deadline, f"{name} not available\n{sim.log()}"

    def _client(self, cls: type, name: str) -> Any:
        if (cls, name) not in self.clients:
            self.clients[cls, name] = self.node.create_client(cls, name)
        return self.clients[cls, name]

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               log: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + patience(timeout)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{log()}")
        time.sleep(0.01)


def snapshot(items: Sequence[Any], lock: threading.Lock) -> list[Any]:
    with lock:
        return list(items)
