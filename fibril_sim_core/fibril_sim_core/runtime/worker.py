"""A SimulationServer's worker thread: the client requests that wait for the host.

The server thread never waits for the host (it keeps forwarding records meanwhile); the
requests that do (step, reset, state, ...) are turned into host requests here, one after
another, and each answer is handed back to the server, which sends it after every record
emitted before it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from ..errors import FibrilError, InstanceError, ServerError
from ..records import RenderFrame
from .host import SimulationHost
from .protocol import Message
from .render import RenderRequest
from .requests import (
    GetState,
    HostRequest,
    Pause,
    Reset,
    Resume,
    SetMode,
    SetRealTimeFactor,
    StartRender,
    Step,
    StopRender,
)
from .sessions import Client

#: The protocol operations the worker serves.
HOST_OPS = frozenset({"pause", "resume", "step", "reset", "rtf", "mode", "state", "render",
                      "stop_render"})
#: ``reply(client, request id, ok, result or error)``
Reply = Callable[[Client, object, bool, object], None]
_Work = tuple[Client, object, str, Message]


class HostWorker:
    """Runs clients' host requests on its own thread; ``render_sink(client)`` is where that
    client's render frames go."""

    def __init__(self, host: SimulationHost, reply: Reply,
                 render_sink: Callable[[Client], Callable[[RenderFrame], None]]) -> None:
        self.host = host
        self._reply = reply
        self._render_sink = render_sink
        self._queue: queue.Queue[_Work | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fibril-sim-server-worker",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Serve nothing more (requests queued are dropped); wait 5 s at most."""
        self._stopping = True
        self._queue.put(None)

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def put(self, client: Client, rid: object, op: str, document: Message) -> None:
        """Run ``op`` (one of ``HOST_OPS``) for ``client``; the answer goes to ``reply``."""
        self._queue.put((client, rid, op, document))

    def forget(self, client: Client) -> None:
        """``client`` is gone: stop its render streams (after its queued requests)."""
        self._queue.put((client, None, "forget", {}))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopping:
                return
            client, rid, op, document = item
            try:
                result = self._serve(client, op, document)
                ok = True
            except FibrilError as exc:
                result, ok = exc, False
            except Exception as exc:  # noqa: BLE001 - a bad request is answered, not fatal
                result, ok = ServerError(f"{op}: {type(exc).__name__}: {exc}"), False
            if op != "forget":
                self._reply(client, rid, ok, result)

    def _serve(self, client: Client, op: str, document: Message) -> object:
        if op == "forget":
            if self.host.running:
                self.host.request(StopRender(None, client.owner))
            return None
        return self.host.request(self._request(client, op, document))

    def _request(self, client: Client, op: str, document: Message
                 ) -> HostRequest[object]:
        """The host request of a client's message (``document`` is msgpack from the peer:
        the request checks its fields)."""
        match op:
            case "step":
                return Step(_field(document, "ticks"))
            case "reset":
                return Reset(_field(document, "keyframe"), _field(document, "seed"))
            case "rtf":
                factor = _field(document, "factor")
                if isinstance(factor, bool) or not isinstance(factor, (int, float)) or \
                        not factor > 0:
                    raise InstanceError(f"real_time_factor must be > 0, got {factor!r}")
                return SetRealTimeFactor(factor)
            case "mode":
                return SetMode(_field(document, "mode"))
            case "render":
                request = RenderRequest(_field(document, "camera"), _field(document, "width"),
                                        _field(document, "height"), _field(document, "rate_hz"),
                                        bool(document.get("depth", False)))
                return StartRender(request, self._render_sink(client), client.owner)
            case "stop_render":
                return StopRender(_field(document, "stream"), client.owner)
            case "pause":
                return Pause()
            case "resume":
                return Resume()
            case _:
                return GetState()


def _field(document: Message, key: str) -> Any:
    """A field of a peer's msgpack message (None when missing): whatever it is, the request
    made of it checks it."""
    return document.get(key)
