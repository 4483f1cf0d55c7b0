"""SimulationServer: remote clients of a SimulationHost, over ZeroMQ.

Transport: one ZeroMQ ROUTER socket (pyzmq), on a Unix domain socket by default (mode 0600, in
a private 0700 directory) and on TCP only when asked (loopback unless told otherwise; then a
shared token is required, checked with an HMAC challenge). Messages are msgpack (protocol.py);
nothing is pickled.

Threads. The host thread only appends the records some client wants to a deque (no encoding,
no I/O, nothing that can block); the server thread owns the socket: it encodes each record once
and sends it to every client whose subscription matches, without blocking. Each client has a
bounded send queue (ZeroMQ's high-water mark); when it is full the batch is dropped and counted
for that client (``state()["drops"]``), so a slow or dead client never stalls stepping. Control
requests that wait for the host (step, reset, state, ...) run on a worker thread; their replies
go out only after every record emitted before them, so a client that steps in lockstep has
received every record of those ticks when ``step`` returns.

Each client opens two sockets: control (requests and replies) and stream (records). A client
that disconnects or says ``bye`` loses its subscriptions and render streams, nothing else.

Hostile peers. What a peer can make the server hold is bounded, and given back when it leaves:

* message size: a frame longer than ``protocol.MAX_REQUEST_BYTES`` (1 MiB) closes the peer's
  connection before it is read (ZeroMQ's MAXMSGSIZE); before authentication a message longer
  than ``protocol.MAX_UNAUTHENTICATED_BYTES`` (4 KiB) is refused unread, and so is a message of
  more than one frame. ZeroMQ limits frames, not the number of frames of a message: a peer that
  never ends a multipart message is held by ZeroMQ until its connection closes (heartbeats:
  5 s after it stops answering);
* clients: at most ``ServerOptions.max_clients`` (64) at once, ``hello`` beyond that is
  refused; at most 1000 unanswered challenges; at most 16 requests of a client waiting for the
  host (more are answered with an error at once); up to 64 messages queued from each peer;
* per client: ``send_queue`` (256) record messages queued, each at most 256 records or 16 KiB
  (a render frame may be larger: one a message), so a client that reads nothing holds at most
  about 4 MiB, until ZeroMQ's heartbeats (5 s) close its connection;
* records waiting for the server thread: at most 10 000; beyond that, in real time they are
  dropped and counted for every subscribed client, otherwise the host waits for the server;
* gone clients: a client that made no request for ``idle_probe`` seconds (30) is sent a
  ``ping`` (clients ignore it); one that is gone is forgotten with everything it had. Freed
  memory is handed back to the system (glibc's ``malloc_trim``) 1, 3 and 5 s after clients
  leave, so the server's RSS returns to near its baseline (heap fragmentation aside).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from ..errors import FibrilError, ServerError
from ..records import RenderFrame
from . import protocol
from .host import CallbackHandle, SimulationHost
from .listen import ServerOptions as ServerOptions  # (re-exported: its home before listen.py)
from .listen import UnixListener, bind_tcp, bind_unix, release_freed_memory
from .requests import State
from .sessions import Client, Sessions
from .subscription import AnyOf, RecordFilter
from .worker import HOST_OPS, HostWorker

log = logging.getLogger("fibril_sim.server")

_BATCH = 256  # records per message at most
_MESSAGE_BYTES = 1 << 14  # bytes per record message at most (unless one record is larger)
_MAX_BACKLOG = 10_000  # records waiting for the server thread at most
_BACKLOG_WAIT_S = 2.0  # how long the host waits for the server (not in real time) at most
_MAX_IN_FLIGHT = 16  # requests of one client waiting for the host at most
_RECEIVE_QUEUE = 64  # messages queued from one peer (ZeroMQ's RCVHWM)
_TRIM_AFTER_S = 1.0  # freed memory is handed back this long after clients leave
_EAGER_BACKLOG = 2048  # records kept before the server is woken mid-frame when not paced
_BLOCKED_S = 0.02  # a client whose queue is full is retried after this long

@dataclass(frozen=True, slots=True)
class _Targeted:
    """A record for one client only (its render frames)."""

    client: int
    record: object

class SimulationServer:
    """Serve remote SimulationConnections of one host (see the module docstring)."""

    def __init__(self, host: SimulationHost, options: ServerOptions | None = None) -> None:
        self.host = host
        self.options = options or ServerOptions()
        if self.options.tcp is not None and not self.options.token:
            raise ServerError("server: a TCP listener needs a shared token (--token-file)")
        self.addresses: list[str] = []
        self._context: zmq.Context[zmq.Socket[bytes]] | None = None
        self._router: zmq.Socket[bytes] | None = None
        self._wake_pull: zmq.Socket[bytes] | None = None
        self._wake_url = f"inproc://fibril-sim-wake-{id(self)}"
        self._thread: threading.Thread | None = None
        self._worker = HostWorker(host, self._queue_reply, self._render_sink)
        self._records: deque[object] = deque()
        self._replies: deque[tuple[Client, Callable[[], bytes]]] = deque()
        self._signals: dict[int, tuple[zmq.Socket[bytes], list[bool]]] = {}
        self._signal_lock = threading.Lock()
        self._sessions = Sessions(
            self.options.token, self.options.max_clients, self.options.idle_probe,
            send=self._send, refuse=self._refuse, disconnect=self._disconnect,
            plan=host.instance.plan.inspect)
        self._clients = self._sessions.clients
        self._by_identity = self._sessions.by_identity
        # The handshake (sessions.py): hello (auth with a token), then the stream's attach.
        self._hello = self._sessions.hello
        self._eager = False  # some subscribed client is receiving (its queue is not full)
        self._wanted_types: dict[type, frozenset[str] | None] = {}  # what clients want
        self._host_handle: CallbackHandle | None = None  # the host callback (its filter follows)
        self._host_signalled = [False]  # the host thread's wake-up flag, once it has one
        self._stopping = False
        self._unix = UnixListener("")  # the Unix socket's files, once made
        self.refused = 0
        self.dropped_total = 0
        self._overflowed = 0  # records the host thread dropped (the backlog was full)
        self._overflow_counted = 0  # of those, charged to the clients so far
        self._trim_at = 0.0  # when freed memory is handed back (0: nothing to hand back)
        self._trims_left = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SimulationServer:
        context = zmq.Context()
        self._context = context
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        router.setsockopt(zmq.SNDHWM, self.options.send_queue)
        router.setsockopt(zmq.RCVHWM, _RECEIVE_QUEUE)
        router.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_REQUEST_BYTES)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.HEARTBEAT_IVL, 1000)
        router.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
        self._router = router
        try:
            if self.options.unix:
                bind_unix(router, self.options.socket, self._unix)
                self.addresses.append(self._unix.address)
            if self.options.tcp is not None:
                self.addresses.append(bind_tcp(router, self.options.tcp))
        except BaseException:
            self._close_sockets()
            raise
        self._wake_pull = wake = context.socket(zmq.PULL)
        wake.bind(self._wake_url)
        self._host_handle = self.host.add_callback(self._on_record, AnyOf(()))
        self.host.add_frame_listener(self._on_frame)
        self.host.add_state_provider(self._state)
        self._thread = threading.Thread(target=self._serve, name="fibril-sim-server",
                                        daemon=True)
        self._thread.start()
        self._worker.start()
        return self

    def stop(self) -> None:
        """Stop serving; remote clients see no more answers. Removes the socket it made."""
        if self._thread is None:
            return
        self._stopping = True
        self._worker.stop()
        self._wake()
        self._thread.join(5)
        self._worker.join(5)
        self._thread = None
        self._close_sockets()

    @property
    def address(self) -> str:
        """The first address clients connect to (``unix://...`` or ``tcp://...``)."""
        return self.addresses[0] if self.addresses else ""

    def _close_sockets(self) -> None:
        for sock, _ in self._signals.values():
            sock.close(0)
        self._signals.clear()
        for own in (self._router, self._wake_pull):
            if own is not None:
                own.close(0)
        self._router = self._wake_pull = None
        if self._context is not None:
            self._context.term()
            self._context = None
        self._unix.close()

    # ------------------------------------------------------------------ host thread
    def _on_record(self, record: object) -> None:
        """Host thread: keep a record some client wants (the host's dispatch checked it
        against the clients' filters, ``AnyOf``)."""
        records = self._records
        if len(records) >= _MAX_BACKLOG and not self._room():
            self._overflowed += 1  # charged to the clients by the server thread
            return
        records.append(record)
        if self._host_signalled[0]:
            return  # the server thread is awake already
        if not self.host.paced and len(records) < _EAGER_BACKLOG:
            return  # not in real time: woken once per frame (_on_frame), not per record
        woke = self._wake()
        self._host_signalled = self._signals.get(threading.get_ident(),
                                                 (None, self._host_signalled))[1]
        if woke and self._eager and self.host.paced:
            # Let the server thread forward it now rather than after the rest of this frame
            # (the GIL is released here only): what keeps delivery latency low in real time.
            time.sleep(0)

    def _room(self) -> bool:
        """Host thread, the backlog full: in real time there is none (the record is dropped,
        pacing comes first); otherwise wait until the server thread, which never waits for
        clients, has forwarded half of it (at most ``_BACKLOG_WAIT_S``)."""
        if self.host.paced or self._thread is None:
            return False
        deadline = time.monotonic() + _BACKLOG_WAIT_S
        while len(self._records) >= _MAX_BACKLOG // 2 and not self._stopping:
            self._wake()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def _on_frame(self) -> None:
        """Host thread, after each frame: wake the server for what the frame emitted."""
        records = self._records
        if records and not self._host_signalled[0]:
            if not self._eager and len(records) < _EAGER_BACKLOG:
                return  # every client that wants them is full: counted when it is retried
            self._wake()
            self._host_signalled = self._signals.get(threading.get_ident(),
                                                     (None, self._host_signalled))[1]

    def _wake(self) -> bool:
        """Wake the server thread (any thread; one inproc socket per thread); True when this
        call sent the wake-up."""
        ident = threading.get_ident()
        entry = self._signals.get(ident)
        if entry is None:
            if self._context is None:
                return False
            with self._signal_lock:
                sock = self._context.socket(zmq.PUSH)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(self._wake_url)
                entry = self._signals[ident] = (sock, [False])
        sock, signalled = entry
        if signalled[0]:
            return False
        signalled[0] = True
        try:
            sock.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:
            signalled[0] = False
            return False
        return True

    def _state(self) -> State:
        clients = list(self._clients.values())
        return {"clients": len(clients), "drops": {c.label: c.drops for c in clients},
                "dropped_records": self.dropped_total, "refused_clients": self.refused,
                "server": list(self.addresses)}

    # ------------------------------------------------------------------ server thread
    def _serve(self) -> None:
        router, wake = self._router, self._wake_pull
        if router is None or wake is None:  # (stopped before it ran)
            return
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(wake, zmq.POLLIN)
        while not self._stopping:
            timeout = 500
            if self._records and not self._eager:  # retry full clients when they are due
                due = min((c.blocked_until for c in self._clients.values()
                           if c.blocked_until), default=0.0)
                timeout = max(1, min(500, int((due - time.monotonic()) * 1000) + 1))
            try:
                events = dict(poller.poll(timeout))
            except zmq.ZMQError:
                break
            if wake in events:
                while True:
                    try:
                        wake.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
            for _, signalled in list(self._signals.values()):
                signalled[0] = False
            replies = []
            while self._replies:
                replies.append(self._replies.popleft())
            try:
                self._flush_records()
            except Exception:  # one bad batch must not stop serving
                log.exception("server: forwarding records failed; that batch is lost")
            for client, reply in replies:
                client.in_flight -= 1
                self._send(client.control, reply())
            if router in events:
                self._receive(router)
            now = time.monotonic()
            if now >= self._sessions.next_probe:
                self._sessions.probe_idle(now)
            if self._trim_at and now >= self._trim_at:
                release_freed_memory()
                self._trims_left -= 1
                self._trim_at = now + 2 * _TRIM_AFTER_S if self._trims_left > 0 else 0.0

    def _receive(self, router: zmq.Socket[bytes]) -> None:
        """Handle what peers sent, 1000 messages at most (a message is let go of at once:
        nothing keeps a large one alive until the next arrives)."""
        for _ in range(1000):
            try:
                frames = router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                self._handle(frames)
            except Exception as exc:  # a peer never stops the server
                log.exception("server: a message could not be handled")
                self._refuse_safely(frames, f"the server could not handle the "
                                    f"message ({type(exc).__name__}: {exc})")
            del frames

    def _flush_records(self) -> None:
        records = self._records
        lost = self._overflowed - self._overflow_counted  # the host dropped them (backlog)
        self._overflow_counted += lost
        if not records and not lost:
            return
        batch = []
        while records:
            batch.append(records.popleft())
        targeted = {n: item for n, item in enumerate(batch) if type(item) is _Targeted}
        encoded: dict[int, bytes] = {}
        chosen: dict[tuple[RecordFilter, ...], list[int]] = {}  # what each filter set wants
        now = time.monotonic()
        for client in list(self._clients.values()):
            if client.stream is None or not client.filters:
                continue
            if lost:
                client.drops += lost
                self.dropped_total += lost
                client.seq += 1
            wanted = chosen.get(client.filters)
            if wanted is None:
                wanted = chosen[client.filters] = [
                    n for n, item in enumerate(batch)
                    if type(item) is not _Targeted and client.wants(item)]
            if targeted:  # its own render frames
                mine = [n for n, item in targeted.items() if item.client == client.id
                        and client.wants(item.record)]
                if mine:
                    wanted = sorted(wanted + mine)
            if not wanted:
                continue
            if client.blocked_until > now:  # its queue was full a moment ago: count only
                client.drops += len(wanted)
                self.dropped_total += len(wanted)
                client.seq += 1
                continue
            frames: list[bytes] = []
            size = 0
            for at, n in enumerate(wanted):
                data = encoded.get(n)
                if data is None:
                    item = batch[n]
                    data = encoded[n] = protocol.record_to_wire(
                        item.record if type(item) is _Targeted else item)
                frames.append(data)
                size += len(data)
                if len(frames) == _BATCH or size >= _MESSAGE_BYTES:
                    self._send_records(client, frames)
                    frames, size = [], 0
                    if client.id not in self._clients:
                        break  # gone
                    if client.blocked_until > now:  # full: the rest is dropped unencoded
                        rest = len(wanted) - at - 1
                        client.drops += rest
                        self.dropped_total += rest
                        break
            if frames:
                self._send_records(client, frames)
        self._eager = any(c.filters and c.stream is not None and c.blocked_until <= now
                          for c in self._clients.values())

    def _send_records(self, client: Client, frames: list[bytes]) -> None:
        header = protocol.message("records", seq=client.seq, n=len(frames))
        router, stream = self._router, client.stream
        if router is None or stream is None:  # stopped, or (never here) no stream attached
            return
        try:
            router.send_multipart([stream, header, *frames], zmq.NOBLOCK)
        except zmq.Again:
            client.drops += len(frames)
            self.dropped_total += len(frames)
            client.blocked_until = time.monotonic() + _BLOCKED_S
        except zmq.ZMQError as exc:
            if exc.errno == errno.EHOSTUNREACH:
                self._disconnect(client, "its stream is gone")
            else:
                log.warning("server: sending records to %s failed: %s", client.label, exc)
                self._disconnect(client, f"sending its records failed ({exc})")
            return
        else:
            client.delivered = client.seq
        client.seq += 1

    def _send(self, identity: bytes, data: bytes) -> None:
        router = self._router
        if router is None:  # stopped: nobody to answer
            return
        try:
            router.send_multipart([identity, data], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            client = self._by_identity.get(identity)
            if client is not None:
                self._disconnect(client, "it reads no answers" if exc.errno == errno.EAGAIN
                                 else "its control socket is gone")

    def _handle(self, frames: list[zmq.Frame]) -> None:
        identity = frames[0].bytes
        data = frames[-1]
        client = self._by_identity.get(identity)
        known = client is not None and identity == client.control
        limit = protocol.MAX_REQUEST_BYTES if known else protocol.MAX_UNAUTHENTICATED_BYTES
        if len(frames) != 2:
            self._refuse(identity, data, f"a message is one frame, got {len(frames) - 1}")
            return
        if len(data) > limit:  # refused unread
            self._refuse(identity, data, f"a message of {len(data)} bytes"
                         f"{'' if known else ' before authentication'} (at most {limit})")
            self._trim_soon()
            return
        try:
            document = protocol.check_version(protocol.unpack(data.buffer))
            op = document.get("op")
            rid = document.get("id")
        except Exception as exc:  # noqa: BLE001 - garbage from a peer is refused, not fatal
            self._refuse(identity, data, f"not a fibril_sim message ({exc})")
            return
        if known and client is not None:
            client.last_seen = time.monotonic()
        if op == "hello":
            self._hello(identity, frames[-1], document)
            return
        if op == "auth":
            self._sessions.auth(identity, frames[-1], document)
            return
        if op == "attach":
            self._sessions.attach(identity, frames[-1], document)
            return
        if client is None or identity != client.control:
            self._refuse(identity, frames[-1], f"request {op!r} before authentication")
            return
        try:
            if op == "submit":
                result = self.host.instance.enqueue(protocol.input_from_wire(document["input"]))
            elif op == "subscribe":
                filters = document.get("filters", ())
                if not isinstance(filters, (list, tuple)) or \
                        not all(isinstance(f, dict) for f in filters):
                    raise ServerError("subscribe: filters must be a list of "
                                      "{kinds, devices} maps")
                client.filters = tuple(RecordFilter.of(f.get("kinds"), f.get("devices"))
                                       for f in filters)
                self._update_wanted()
                result = None
            elif op == "bye":
                self._reply(client, rid, True, None)
                self._disconnect(client, "it said bye")
                return
            elif op in HOST_OPS:
                if client.in_flight >= _MAX_IN_FLIGHT:
                    raise ServerError(f"{op}: {client.in_flight} requests of this client wait "
                                      f"for the simulation already (at most {_MAX_IN_FLIGHT})")
                client.in_flight += 1
                self._worker.put(client, rid, op, document)
                return
            else:
                raise ServerError(f"unknown request {op!r}")
        except (FibrilError, KeyError, TypeError, ValueError) as exc:
            self._reply(client, rid, False, exc)
            return
        self._reply(client, rid, True, result)

    def _reply(self, client: Client, rid: object, ok: bool, result: object) -> None:
        self._send(client.control, _reply_bytes(client, rid, ok, result))

    def _refuse_safely(self, frames: list[zmq.Frame], reason: str) -> None:
        try:
            self._refuse(frames[0].bytes, frames[-1], reason)
        except Exception:  # the refusal itself is best effort
            log.exception("server: refusing a message failed")

    def _refuse(self, identity: bytes, frame: zmq.Frame, reason: str) -> None:
        self.refused += 1
        try:
            peer = frame.get("Peer-Address")
        except (zmq.ZMQError, AttributeError, TypeError):
            peer = None
        log.warning("refused a client%s: %s", f" from {peer}" if peer else "", reason)
        self._send(identity, protocol.message("refused", reason=reason))

    def _disconnect(self, client: Client, why: str) -> None:
        if not self._sessions.forget(client):
            return
        client.filters = ()
        self._update_wanted()
        self._worker.forget(client)
        self._trim_soon()
        log.info("client %s disconnected: %s", client.label, why)

    def _trim_soon(self) -> None:
        """Hand freed memory back 1, 3 and 5 s after the last client left (ZeroMQ frees a
        connection's buffers a moment after it closes)."""
        self._trim_at = time.monotonic() + _TRIM_AFTER_S
        self._trims_left = 3

    def _update_wanted(self) -> None:
        """The kinds (and devices) any client wants, for the host thread's quick check; the
        host makes only what some client of it wants."""
        filters = AnyOf(tuple(f for client in self._clients.values() for f in client.filters))
        self._wanted_types = filters.wanted
        self._eager = bool(self._wanted_types)
        if self._host_handle is not None:
            self._host_handle = self.host.set_callback_filter(self._host_handle, filters)

    # ------------------------------------------------------------------ worker thread
    def _queue_reply(self, client: Client, rid: object, ok: bool, result: object) -> None:
        """Worker thread: send this answer after the records emitted before it (encoded
        when sent: ``delivered`` counts them)."""
        self._replies.append((client, lambda: _reply_bytes(client, rid, ok, result)))
        self._wake()

    def _render_sink(self, client: Client) -> Callable[[RenderFrame], None]:
        """Where ``client``'s render frames go (to it alone), on the host thread."""
        def sink(frame: RenderFrame, client_id: int = client.id) -> None:
            if len(self._records) >= _MAX_BACKLOG:
                self._overflowed += 1
                return
            self._records.append(_Targeted(client_id, frame))
            self._wake()

        return sink


def _reply_bytes(client: Client, rid: object, ok: bool, result: object) -> bytes:
    if ok:
        return protocol.message("reply", id=rid, ok=True, result=result,
                                delivered=client.delivered)
    error = result if isinstance(result, FibrilError) else ServerError(
        f"bad request: {type(result).__name__}: {result}")
    return protocol.message("reply", id=rid, ok=False, delivered=client.delivered,
                            **protocol.error_to_wire(error))
