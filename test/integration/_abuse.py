"""Hostile clients of a SimulationServer, for the abuse tests and ``bench/server_abuse.py``.

They speak the wire protocol with raw ZeroMQ sockets (what an attacker would do, not what a
RemoteConnection does) over loopback, and read a server process's memory from /proc.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import zmq

from fibril_sim_core.runtime import protocol


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid`` in MiB (VmRSS, Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def settled_rss_mb(pid: int, seconds: float = 1.0) -> float:
    """The process's RSS once it has stopped changing by more than 1 MiB a ``seconds``."""
    last = rss_mb(pid)
    for _ in range(30):
        time.sleep(seconds)
        now = rss_mb(pid)
        if abs(now - last) < 1.0:
            return now
        last = now
    return last


def _socket(context: zmq.Context, address: str) -> zmq.Socket:
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


def _answer(sock: zmq.Socket, timeout: float) -> dict[str, Any] | None:
    if not sock.poll(int(timeout * 1000)):
        return None
    return protocol.unpack(sock.recv())


def send_raw(context: zmq.Context, address: str, frames: list[bytes],
             timeout: float = 10.0, *, until_closed: bool = False) -> dict[str, Any] | None:
    """Send ``frames`` as one message from a new, unauthenticated peer; the server's answer,
    or None when none came in ``timeout`` (e.g. it closed the connection). ``until_closed``:
    None as soon as the server closes the connection unanswered (a socket monitor sees it),
    without waiting out ``timeout`` for an answer that cannot come any more."""
    sock = _socket(context, address)
    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED) if until_closed else None
    try:
        sock.send_multipart(frames)
        if monitor is None:
            return _answer(sock, timeout)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready = dict(poller.poll(max(1, int(left * 1000))))
            if sock in ready:  # an answer queued before the connection closed comes first
                return protocol.unpack(sock.recv())
            if monitor in ready:
                return None  # closed by the server, unanswered
        return None
    finally:
        if monitor is not None:
            sock.disable_monitor()
            monitor.close(0)
        sock.close(0)


class SilentClient:
    """Authenticates, attaches a record stream, subscribes to every record, then reads
    nothing (its stream socket buffers as little as ZeroMQ allows)."""

    def __init__(self, context: zmq.Context, address: str, token: bytes | None,
                 timeout: float = 30.0) -> None:
        self.control = _socket(context, address)
        self.stream: zmq.Socket | None = None
        self.refused: str | None = None
        self.control.send(protocol.request("hello", name="silent"))
        answer = self._expect(self.control, timeout)
        if answer.get("t") == "challenge":
            nonce = secrets.token_bytes(32)
            self.control.send(protocol.request(
                "auth", nonce=nonce, mac=protocol.auth_mac(token or b"", answer["nonce"], nonce)))
            answer = self._expect(self.control, timeout)
        if answer.get("t") == "refused":
            self.refused = str(answer.get("reason"))
            return
        assert answer.get("t") == "welcome", answer
        stream = context.socket(zmq.DEALER)
        stream.setsockopt(zmq.LINGER, 0)
        stream.setsockopt(zmq.RCVHWM, 1)
        stream.setsockopt(zmq.RCVBUF, 4096)
        stream.connect(address)
        self.stream = stream
        stream.send(protocol.request("attach", client=answer["client"], key=answer["key"]))
        assert self._expect(stream, timeout).get("t") == "attached"
        self.control.send(protocol.request("subscribe", id=1,
                                           filters=[{"kinds": None, "devices": None}]))
        assert self._expect(self.control, timeout).get("ok") is True

    @staticmethod
    def _expect(sock: zmq.Socket, timeout: float) -> dict[str, Any]:
        answer = _answer(sock, timeout)
        assert answer is not None, f"no answer in {timeout} s"
        return answer

    def close(self) -> None:
        """Leave without a word (no ``bye``): the sockets just close."""
        for sock in (self.control, self.stream):
            if sock is not None:
                sock.close(0)
