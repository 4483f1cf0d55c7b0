"""What the host's per-client streams (render frames, state observations) share: a table of
streams by id, each due at a session tick and owned by the connection that asked for it."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from ..errors import InstanceError


class Stream(Protocol):
    id: int
    due: int  # session tick of the next item
    owner: object


S = TypeVar("S", bound=Stream)


class StreamTable(Generic[S]):
    """A mixin for the host's stream collections; the class provides ``streams`` (id ->
    stream) and ``_next_id``."""

    streams: dict[int, S]
    _next_id: int

    @property
    def active(self) -> bool:
        return bool(self.streams)

    def _keep(self, stream: S) -> int:
        self.streams[stream.id] = stream
        self._next_id += 1
        return stream.id

    def remove(self, stream_id: int) -> bool:
        return self.streams.pop(stream_id, None) is not None

    def remove_owned_by(self, owner: object) -> None:
        for stream_id in [s.id for s in self.streams.values() if s.owner is owner]:
            del self.streams[stream_id]

    def ticks_until_due(self, session_tick: int) -> int:
        return min(s.due for s in self.streams.values()) - session_tick

    def stop(self, action: str, stream_id: object, owner: object, what: str) -> None:
        """A client's stop request: one stream by id, or (id None) every stream of
        ``owner``; InstanceError for anything else."""
        if owner is not None and stream_id is None:
            self.remove_owned_by(owner)
        elif isinstance(stream_id, bool) or not isinstance(stream_id, int):
            raise InstanceError(f"{action}: stream must be a stream id (an integer), got "
                                f"{stream_id!r}")
        elif not self.remove(stream_id):
            raise InstanceError(f"{action}: no {what} stream {stream_id!r}")
