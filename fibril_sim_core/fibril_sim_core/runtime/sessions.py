"""A SimulationServer's clients: who is connected, and the handshake that admits them.

A client says ``hello`` on its control socket (with a token: answers the ``challenge`` with an
HMAC, ``auth``), is ``welcome``d with an id and a key, and attaches its stream socket with that
key. What a peer can make this hold is bounded: ``max_clients`` clients, ``_MAX_CHALLENGES``
unanswered challenges. Clients that made no request for ``idle_probe`` seconds are pinged, so
one that is gone is noticed (sending to it fails) and forgotten.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from .._document import JsonValue
from . import protocol
from .subscription import RecordFilter

log = logging.getLogger("fibril_sim.server")

_MAX_CHALLENGES = 1000  # unanswered challenges kept at most

Send = Callable[[bytes, bytes], None]  # (peer identity, message)
Refuse = Callable[[bytes, "zmq.Frame", str], None]  # (peer identity, its message, reason)


@dataclass
class Client:
    """A connected client: its two sockets' identities, what it subscribed to, and how its
    record stream is doing."""

    id: int
    name: str
    control: bytes
    key: bytes
    stream: bytes | None = None
    filters: tuple[RecordFilter, ...] = ()
    seq: int = 0  # stream messages sent or dropped
    delivered: int = -1  # the last stream message queued for sending
    drops: int = 0  # records dropped
    blocked_until: float = 0.0  # after a full queue: drop without encoding until then
    owner: object = field(default_factory=object)  # owns this client's render streams
    last_seen: float = field(default_factory=time.monotonic)  # its last request or probe
    in_flight: int = 0  # its requests waiting for the host

    @property
    def label(self) -> str:
        return f"{self.name or 'client'}#{self.id}"

    def wants(self, record: object) -> bool:
        return any(f.matches(record) for f in self.filters)


class Sessions:
    """The clients of a server by id and by socket identity, and their handshake.

    ``send`` and ``refuse`` answer a peer; ``disconnect`` drops a client that said hello
    again; ``plan`` is the plan document a welcome carries."""

    def __init__(self, token: bytes | None, max_clients: int, idle_probe: float, *,
                 send: Send, refuse: Refuse, disconnect: Callable[[Client, str], None],
                 plan: Callable[[], dict[str, JsonValue]]) -> None:
        self.token = token
        self.max_clients = max_clients
        self.idle_probe = idle_probe
        self._send = send
        self._refuse = refuse
        self._disconnect = disconnect
        self._plan = plan
        self.clients: dict[int, Client] = {}
        self.by_identity: dict[bytes, Client] = {}
        self._challenges: dict[bytes, tuple[bytes, str]] = {}
        self._next_client = 1
        self.next_probe = 0.0  # when idle clients are checked next

    def forget(self, client: Client) -> bool:
        """Drop ``client`` from the tables; False when it was not there (gone already)."""
        if self.clients.pop(client.id, None) is None:
            return False
        self.by_identity.pop(client.control, None)
        if client.stream is not None:
            self.by_identity.pop(client.stream, None)
        return True

    def hello(self, identity: bytes, frame: zmq.Frame, document: protocol.Message) -> None:
        name = str(document.get("name", ""))[:64]
        if self._full(identity, frame):
            return
        if self.token:
            nonce = secrets.token_bytes(32)
            self._challenges[identity] = (nonce, name)
            if len(self._challenges) > _MAX_CHALLENGES:  # never-answered ones do not pile up
                self._challenges.pop(next(iter(self._challenges)))
            self._send(identity, protocol.message("challenge", nonce=nonce))
            return
        self._welcome(identity, name)

    def auth(self, identity: bytes, frame: zmq.Frame, document: protocol.Message) -> None:
        pending = self._challenges.pop(identity, None)
        mac, client_nonce = document.get("mac"), document.get("nonce")
        if pending is None or not isinstance(mac, bytes) or not isinstance(client_nonce, bytes):
            self._refuse(identity, frame, "authentication out of order")
            return
        nonce, name = pending
        if not mac:
            self._refuse(identity, frame, "no token given")
            return
        expected = protocol.auth_mac(self.token or b"", nonce, client_nonce)
        if not secrets.compare_digest(expected, mac):
            self._refuse(identity, frame, "wrong token")
            return
        if self._full(identity, frame):  # others were welcomed since its hello
            return
        self._welcome(identity, name)

    def attach(self, identity: bytes, frame: zmq.Frame, document: protocol.Message) -> None:
        client_id = document.get("client")
        client = None if isinstance(client_id, bool) or not isinstance(client_id, int) \
            else self.clients.get(client_id)
        key = document.get("key")
        if client is None or not isinstance(key, bytes) or \
                not secrets.compare_digest(key, client.key):
            self._refuse(identity, frame, "stream attach with an unknown client key")
            return
        if client.stream not in (None, identity, client.control):
            self.by_identity.pop(client.stream, None)  # attached again: the old one is gone
        client.stream = identity
        self.by_identity[identity] = client
        self._send(identity, protocol.message("attached"))

    def probe_idle(self, now: float) -> None:
        """Ping the clients that made no request for ``idle_probe`` s: sending to one that is
        gone fails, and it is forgotten (with its subscriptions and render streams)."""
        self.next_probe = now + max(0.1, min(5.0, self.idle_probe / 2))
        for client in list(self.clients.values()):
            if now - client.last_seen >= self.idle_probe:
                client.last_seen = now
                self._send(client.control, protocol.message("ping"))

    def _full(self, identity: bytes, frame: zmq.Frame) -> bool:
        """Refuse a new client when ``max_clients`` are connected."""
        if len(self.clients) < self.max_clients or identity in self.by_identity:
            return False
        self._refuse(identity, frame, f"too many clients ({len(self.clients)} connected, "
                                      f"at most {self.max_clients})")
        return True

    def _welcome(self, identity: bytes, name: str) -> None:
        old = self.by_identity.get(identity)
        if old is not None:
            self._disconnect(old, "it said hello again")
        client = Client(self._next_client, name, identity, secrets.token_bytes(16))
        self._next_client += 1
        self.clients[client.id] = client
        self.by_identity[identity] = client
        self._send(identity, protocol.message(
            "welcome", client=client.id, key=client.key, plan=self._plan()))
        log.info("client %s connected", client.label)
