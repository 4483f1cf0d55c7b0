"""RemoteConnection: a SimulationConnection to a SimulationServer in another process.

It has the in-process connection's methods (submit, on_record with filters, pause, resume,
step, reset, set_real_time_factor, set_mode, state, render, close), so a ROS node or a test
harness works with either. Records arrive on a receiver thread of this connection and callbacks
run there (in-process callbacks run on the host thread). A control call that returns has
waited for every record the server sent before its answer: in lockstep, when ``step(n)``
returns, the callbacks have seen every record of those ticks, as in process.

Thread-safe: any thread may call any method; calls are sent one at a time.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import zmq

from .._document import JsonValue
from ..errors import InstanceError, ServerError
from ..records import ExternalInput
from . import protocol
from .host import RecordCallback
from .requests import State
from .subscription import RecordFilter

log = logging.getLogger("fibril_sim.client")
T = TypeVar("T")
_RECEIVE_QUEUE = 256  # record messages buffered on this side before the server drops


def zmq_endpoint(url: str) -> str:
    """``unix:///path`` → ``ipc:///path``; ``tcp://host:port`` as it is."""
    if url.startswith("unix://"):
        path = url[len("unix://"):]
        if not path.startswith("/"):
            raise ServerError(f"connect: {url!r}: a unix:// address needs an absolute path "
                              f"(unix:///run/user/1000/fibril.sock)")
        return f"ipc://{path}"
    if url.startswith("tcp://"):
        host, sep, port = url[len("tcp://"):].rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ServerError(f"connect: {url!r}: expected tcp://HOST:PORT")
        return url
    raise ServerError(f"connect: {url!r}: expected unix:///path/to/socket or tcp://HOST:PORT")


@dataclass(eq=False)
class _Callback:
    """An ``on_record`` subscription (its handle)."""

    callback: RecordCallback
    filter: RecordFilter


class RemoteConnection:
    """A client of a SimulationServer (see the module docstring)."""

    def __init__(self, url: str, *, token: str | bytes | None = None, name: str = "",
                 timeout: float = 10.0, request_timeout: float = 120.0) -> None:
        self.url = url
        endpoint = zmq_endpoint(url)
        if url.startswith("unix://") and not Path(url[len("unix://"):]).exists():
            raise ServerError(f"connect: {url}: no such socket (is `fibril_sim serve` running?)")
        self._timeout = timeout
        self._request_timeout = request_timeout
        self._context = zmq.Context()
        self._control = _socket(self._context, zmq.DEALER)
        self._control.connect(endpoint)
        self._lock = threading.Lock()  # one call on the control socket at a time
        self._next_id = 0
        self._callbacks: list[_Callback] = []  # one per on_record call
        self._received = -1
        self._lost = 0
        self._progress = threading.Condition()
        self._closed = False
        self._receiver: threading.Thread | None = None
        self._stream: zmq.Socket[bytes] | None = None
        try:
            welcome = self._handshake(token, name)
            self.client_id: int = _integer(welcome.get("client"), "welcome: client")
            plan = welcome.get("plan")
            self._description: dict[str, JsonValue] = plan if isinstance(plan, dict) else {}
            self._stream = stream = _socket(self._context, zmq.DEALER)
            stream.setsockopt(zmq.RCVHWM, _RECEIVE_QUEUE)
            stream.connect(endpoint)
            stream.send(protocol.request("attach", client=self.client_id, key=welcome["key"]))
            self._expect(stream, "attached", "attaching the record stream")
        except BaseException:
            self._shutdown()
            raise
        self._receiver = threading.Thread(target=self._receive, daemon=True,
                                          name=f"fibril-sim-client-{self.client_id}")
        self._receiver.start()

    # ------------------------------------------------------------------ the connection API
    @property
    def plan(self) -> dict[str, JsonValue]:
        """The server's plan as ``fibril_sim inspect --json`` shows it (a remote client never
        holds the MuJoCo model)."""
        return self._description

    def describe(self) -> dict[str, JsonValue]:
        return self._description

    def submit(self, item: ExternalInput) -> int:
        """Returns the acceptance sequence or raises IngressError, as in process."""
        return self._call_as(int, "submit", input=protocol.input_to_wire(item))

    def on_record(self, callback: RecordCallback, kinds: Iterable[str] | str | None = None,
                  devices: Iterable[str] | str | None = None) -> object:
        """Receive records on this connection's receiver thread; only the ``kinds`` and
        ``devices`` asked for travel from the server. Returns a handle for
        ``set_record_filter``."""
        record_filter = RecordFilter.of(kinds, devices)
        entry = _Callback(callback, record_filter)
        with self._progress:
            self._callbacks.append(entry)
            filters = [c.filter.document() for c in self._callbacks]
        self._call("subscribe", filters=filters)
        return entry

    def set_record_filter(self, handle: object, kinds: Iterable[str] | str | None = None,
                          devices: Iterable[str] | str | None = None) -> None:
        """Change what the ``on_record`` subscription ``handle`` receives (as in process;
        from the server's answer on)."""
        record_filter = RecordFilter.of(kinds, devices)
        with self._progress:
            entry = next((c for c in self._callbacks if c is handle), None)
            if entry is None:
                raise InstanceError("set_record_filter: not a subscription of this connection")
            entry.filter = record_filter
            filters = [c.filter.document() for c in self._callbacks]
        self._call("subscribe", filters=filters)

    def pause(self) -> State:
        return self._call_as(dict, "pause")

    def resume(self) -> State:
        return self._call_as(dict, "resume")

    def step(self, ticks: int) -> State:
        return self._call_as(dict, "step", ticks=ticks)

    def reset(self, keyframe: str | None = None, seed: int | None = None) -> State:
        return self._call_as(dict, "reset", keyframe=keyframe, seed=seed)

    def set_real_time_factor(self, factor: float) -> State:
        return self._call_as(dict, "rtf", factor=factor)

    def set_mode(self, mode: str) -> State:
        return self._call_as(dict, "mode", mode=mode)

    def state(self) -> State:
        """As in process, plus ``lost_messages``: record messages the server dropped for this
        client (``drops`` counts the records)."""
        state = self._call_as(dict, "state")
        state["lost_messages"] = self._lost
        return state

    def render(self, camera: str | None, width: int, height: int, rate_hz: float,
               depth: bool = False) -> int:
        return self._call_as(int, "render", camera=camera, width=width, height=height,
                          rate_hz=rate_hz, depth=depth)

    def stop_render(self, stream: int) -> None:
        self._call("stop_render", stream=stream)

    def close(self) -> None:
        """Say bye (the server drops this client's subscriptions and render streams)."""
        if self._closed:
            return
        try:
            with self._lock:
                self._control.send(protocol.request("bye", id=-1))
                self._control.poll(500)
        except zmq.ZMQError:
            pass
        self._shutdown()

    def __enter__(self) -> RemoteConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _handshake(self, token: str | bytes | None, name: str) -> protocol.Message:
        self._control.send(protocol.request("hello", name=name))
        reply = self._expect(self._control, ("welcome", "challenge"), "connecting")
        if reply["t"] == "challenge":
            nonce = secrets.token_bytes(32)
            if not token:  # say so, so that the server logs the refusal
                self._control.send(protocol.request("auth", nonce=nonce, mac=b""))
                raise ServerError(f"connect: {self.url}: the server requires a token")
            secret = token.encode() if isinstance(token, str) else token
            server_nonce = reply.get("nonce")
            if not isinstance(server_nonce, bytes):
                raise ServerError(f"connect: {self.url}: a challenge without a nonce")
            self._control.send(protocol.request(
                "auth", nonce=nonce, mac=protocol.auth_mac(secret, server_nonce, nonce)))
            reply = self._expect(self._control, ("welcome",), "authenticating")
        return reply

    def _expect(self, sock: zmq.Socket[bytes], kinds: tuple[str, ...] | str, doing: str
                ) -> protocol.Message:
        kinds = (kinds,) if isinstance(kinds, str) else kinds
        if not sock.poll(int(self._timeout * 1000)):
            raise ServerError(f"connect: {self.url}: no simulation server answered in "
                              f"{self._timeout:g} s ({doing})")
        reply = protocol.check_version(protocol.unpack(sock.recv()))
        if reply.get("t") == "refused":
            raise ServerError(f"connect: {self.url}: refused by the server: "
                              f"{reply.get('reason')}")
        if reply.get("t") not in kinds:
            raise ServerError(f"connect: {self.url}: unexpected answer {reply.get('t')!r} "
                              f"while {doing}")
        return reply

    def _call(self, op: str, **fields: object) -> object:
        if self._closed:
            raise InstanceError("the connection is closed")
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            data = protocol.request(op, id=rid, **fields)
            if len(data) > protocol.MAX_REQUEST_BYTES:  # the server would drop the connection
                raise ServerError(f"{self.url}: a {op!r} request of {len(data)} bytes is too "
                                  f"large (the server takes at most "
                                  f"{protocol.MAX_REQUEST_BYTES})")
            self._control.send(data)
            deadline = time.monotonic() + self._request_timeout
            while True:
                if not self._control.poll(200):
                    if time.monotonic() > deadline:
                        raise ServerError(f"{self.url}: no answer to {op!r} in "
                                          f"{self._request_timeout:g} s")
                    continue
                reply = protocol.check_version(protocol.unpack(self._control.recv()))
                # anything else, e.g. the server's "ping" to an idle client, is skipped
                if reply.get("t") == "refused":
                    raise ServerError(f"{self.url}: refused by the server: "
                                      f"{reply.get('reason')}")
                if reply.get("t") == "reply" and reply.get("id") == rid:
                    break
        self._wait_for(_integer(reply.get("delivered", -1), f"{op}: delivered"))
        if not reply.get("ok"):
            raise protocol.error_from_wire(reply)
        return reply.get("result")

    def _call_as(self, kind: type[T], op: str, **fields: object) -> T:
        """A request whose answer must be a ``kind`` (the state document, a sequence number
        or a stream id); ServerError naming the answer otherwise."""
        result = self._call(op, **fields)
        if isinstance(result, bool) or not isinstance(result, kind):
            raise ServerError(f"{self.url}: {op}: expected a {kind.__name__}, got {result!r}")
        return result

    def _wait_for(self, delivered: int) -> None:
        """Until the receiver has handled the record messages sent before this answer (not on
        the receiver thread itself: a callback may call submit)."""
        if threading.current_thread() is self._receiver:
            return
        deadline = time.monotonic() + self._request_timeout
        with self._progress:
            while self._received < delivered and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ServerError(f"{self.url}: records before the answer did not arrive "
                                      f"in {self._request_timeout:g} s")
                self._progress.wait(min(remaining, 0.2))

    def _receive(self) -> None:
        stream = self._stream
        if stream is None:  # (started only once attached)
            return
        while not self._closed:
            try:
                if not stream.poll(100):
                    continue
                frames = stream.recv_multipart()
            except zmq.ZMQError:
                return
            try:
                header = protocol.check_version(protocol.unpack(frames[0]))
            except Exception:  # noqa: BLE001 - not ours: ignore
                continue
            if header.get("t") != "records":
                continue
            seq = _integer(header.get("seq"), "records: seq")
            with self._progress:
                callbacks = [(c.callback, c.filter) for c in self._callbacks]
            for frame in frames[1:]:  # each record handed on as soon as it is decoded
                record = protocol.record_from_wire(frame)
                for callback, record_filter in callbacks:
                    if record_filter.matches(record):
                        try:
                            callback(record)
                        except Exception:  # noqa: BLE001 - one bad callback stops nothing
                            log.exception("on_record callback %r failed", callback)
            with self._progress:
                if seq > self._received + 1:
                    self._lost += seq - self._received - 1  # messages, dropped by the server
                self._received = seq
                self._progress.notify_all()

    def _shutdown(self) -> None:
        self._closed = True
        with self._progress:
            self._progress.notify_all()
        receiver = self._receiver
        if receiver is not None and receiver is not threading.current_thread():
            receiver.join(2)
        for sock in (self._control, self._stream):
            if sock is not None:
                sock.close(0)
        self._context.term()


def _integer(value: object, what: str) -> int:
    """An integer field of a server message; ServerError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServerError(f"protocol: {what} must be an integer, got {value!r}")
    return value


def _socket(context: zmq.Context[zmq.Socket[bytes]], kind: int) -> zmq.Socket[bytes]:
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
    return sock
