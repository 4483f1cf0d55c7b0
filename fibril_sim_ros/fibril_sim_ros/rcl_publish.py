"""Publishing serialized bytes without holding the GIL during the DDS write.

rclpy's ``Publisher.publish`` keeps the GIL for the whole ``rcl_publish`` call. A DDS write to a
matched subscriber in another process costs tens of microseconds (shared-memory hand-over,
waking the reader, the reliable protocol), longer than a physics tick, and while it runs no
other Python thread of the node can step the simulation. ``raw_sender`` calls rcl's public
``rcl_publish_serialized_message`` on the same ``rcl_publisher_t`` through ctypes, which
releases the GIL for the call, so the host thread steps while the writer thread writes. When
librcl cannot be found (another rclpy build) it falls back to ``Publisher.publish``.

``publish_many`` writes a batch of such messages; with the optional C extension
``_publish_batch`` (built when the package is installed with a C compiler) the GIL is released
once for the whole batch instead of once per message: the writer thread then no longer takes
the GIL back between writes, which kept the stepping thread waiting (measured in the README's
node benchmark).
"""

from __future__ import annotations

import ctypes
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # (annotations only: this module loads no more of rclpy than ctypes needs)
    from rclpy.publisher import Publisher
    from rclpy.type_support import Msg

_publish_batch: ModuleType | None
try:  # (our C extension: no stubs, so imported by name)
    _publish_batch = importlib.import_module("fibril_sim_ros._publish_batch")
except ImportError:  # installed without a C compiler: message by message
    _publish_batch = None


class _Allocator(ctypes.Structure):
    _fields_ = [("allocate", ctypes.c_void_p), ("deallocate", ctypes.c_void_p),
                ("reallocate", ctypes.c_void_p), ("zero_allocate", ctypes.c_void_p),
                ("state", ctypes.c_void_p)]


class _SerializedMessage(ctypes.Structure):
    """rcl_serialized_message_t (rcutils_uint8_array_t)."""

    _fields_ = [("buffer", ctypes.c_char_p), ("buffer_length", ctypes.c_size_t),
                ("buffer_capacity", ctypes.c_size_t), ("allocator", _Allocator)]


class _ErrorString(ctypes.Structure):
    _fields_ = [("str", ctypes.c_char * 1024)]


class _Publish(Protocol):
    """rcl_publish_serialized_message as bound by ``_bind`` (non-zero: it failed)."""

    def __call__(self, publisher: int, message: _SerializedMessage, allocation: None, /
                 ) -> int: ...


# A topic's writer: a message object (rclpy's publish) or its serialized bytes (GIL-free).
Send = Callable[[object], None]


def _loaded(name: str) -> ctypes.CDLL | None:
    """The copy of ``name`` this process already loaded (rclpy's), by its path."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.rstrip().rsplit(" ", 1)[-1]
                if path.endswith("/" + name):
                    return ctypes.CDLL(path)
    except OSError:
        pass
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


_publish: _Publish | None = None
_publish_address = 0
_error: Callable[[], _ErrorString] | None = None
_reset: Callable[[], None] | None = None
_topics: dict[int, str] = {}  # rcl_publisher_t address -> topic name, for error messages


def _bind() -> _Publish | None:
    """rcl's publish function, bound on first use (None: no librcl / librcutils)."""
    global _publish, _publish_address, _error, _reset
    if _publish is not None:
        return _publish
    rcl, rcutils = _loaded("librcl.so"), _loaded("librcutils.so")
    if rcl is None or rcutils is None:
        return None
    try:
        publish = rcl.rcl_publish_serialized_message
        error, reset = rcutils.rcutils_get_error_string, rcutils.rcutils_reset_error
    except AttributeError:
        return None
    publish.argtypes = [ctypes.c_void_p, ctypes.POINTER(_SerializedMessage), ctypes.c_void_p]
    publish.restype = ctypes.c_int
    error.argtypes, error.restype = [], _ErrorString
    reset.argtypes, reset.restype = [], None
    _publish, _error, _reset = publish, error, reset
    _publish_address = ctypes.cast(publish, ctypes.c_void_p).value or 0
    return publish


def raw_sender(publisher: Publisher[Msg]) -> Send:
    """A function that publishes ``bytes`` (a serialized message) GIL-free, and anything
    else (a message object) with ``publisher.publish``. The publisher must outlive every
    call (the node stops its writers before it destroys its publishers)."""
    fallback: Send = publisher.publish
    pointer = getattr(getattr(publisher, "handle", None), "pointer", None)
    if not isinstance(pointer, int):
        return fallback
    publish = _bind()
    if publish is None:
        return fallback
    make = _SerializedMessage
    topic = publisher.topic_name

    def send(payload: object) -> None:
        if type(payload) is not bytes:
            fallback(payload)
            return
        size = len(payload)
        if publish(pointer, make(payload, size, size), None):
            raise RuntimeError(f"publishing on {topic} failed: {_take_error()}")

    _topics[pointer] = topic
    send.rcl_publisher = pointer  # type: ignore[attr-defined]  # what publish_many takes
    return send


def rcl_publisher(send: Send) -> int | None:
    """The rcl_publisher_t address of a ``raw_sender`` (None for any other function)."""
    return getattr(send, "rcl_publisher", None)


def publish_many(publishers: list[int], payloads: list[bytes]) -> list[str]:
    """Write ``payloads[i]`` (serialized messages) on ``publishers[i]`` (``rcl_publisher``
    addresses), in order; returns the reasons of the writes that failed (the others were
    written). Every publisher must outlive the call."""
    failures: list[str] = []
    if _publish_batch is not None:
        start = 0
        while (failed := _publish_batch.publish_many(_publish_address, publishers, payloads,
                                                     start)) >= 0:
            failures.append(_failure(publishers[failed]))
            start = failed + 1
        return failures
    publish, make = _publish, _SerializedMessage
    if publish is None:  # (the addresses came from raw_sender, which bound it)
        raise RuntimeError("publish_many: rcl_publish_serialized_message is not bound")
    for pointer, payload in zip(publishers, payloads):
        size = len(payload)
        if publish(pointer, make(payload, size, size), None):
            failures.append(_failure(pointer))
    return failures


def _failure(pointer: int) -> str:
    where = _topics.get(pointer) or f"the rcl publisher at 0x{pointer:x}"
    return f"publishing on {where} failed: {_take_error()}"


def _take_error() -> str:
    """rcl's error message of this thread's last failed call, cleared."""
    if _error is None or _reset is None:  # (a failed write implies they are bound)
        return "librcutils is not bound"
    reason: bytes = _error().str
    _reset()
    return reason.decode(errors="replace")
