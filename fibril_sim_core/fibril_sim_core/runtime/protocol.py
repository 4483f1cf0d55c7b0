"""The wire protocol between a SimulationServer and remote connections (version 1).

Every message is one msgpack map with ``v`` (the protocol version) and ``op`` (requests) or
``t`` (what the server sends: ``challenge``, ``welcome``, ``reply``, ``records``). Records travel
as msgpack lists ``[kind, field...]`` in their dataclass field order, numpy arrays as an
extension type (dtype, shape, raw bytes), so a remote client receives the same values bit for
bit. Nothing is ever unpickled.

Authentication (required on TCP, optional on a Unix socket): the server answers ``hello`` with a
random nonce, the client proves it knows the shared token with HMAC-SHA256(token, label +
server nonce + client nonce).

Size limits (what a client sends; the server's messages are not limited: a render frame of a
large camera is megabytes). A message is one frame. Before authentication a peer may send
``MAX_UNAUTHENTICATED_BYTES`` (4 KiB: ``hello``, ``auth`` and ``attach`` are under 200 bytes);
a longer one is refused unread. After it, ``MAX_REQUEST_BYTES`` (1 MiB: the largest legitimate
request is a ``subscribe`` naming thousands of devices; an input is a small JSON object). The
server's ZeroMQ socket enforces that limit on every frame: a longer frame closes the peer's
connection before it is read into memory. A RemoteConnection refuses to send a longer request
(``ServerError``), as the server could not answer it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Mapping
from typing import TypeAlias

import msgpack
import numpy as np

from .. import errors
from ..ingress import external_input, payload_text
from ..records import ClientRecord, DeviceOutput, ExternalInput, StateObservation
from .subscription import RECORD_KINDS

PROTOCOL_VERSION = 1
MAX_UNAUTHENTICATED_BYTES = 4096  # a message from a peer that has not authenticated
MAX_REQUEST_BYTES = 1 << 20  # a frame from any peer (ZeroMQ's MAXMSGSIZE on the server)
_ARRAY_EXT = 1
_AUTH_LABEL = b"fibril-sim/1/auth"
_TYPES: dict[str, type[ClientRecord]] = {kind: cls for cls, kind in RECORD_KINDS.items()}
#: The errors a reply may name (those of ``errors.py``), by name.
_ERRORS: dict[str, type[errors.FibrilError]] = {
    name: cls for name, cls in vars(errors).items()
    if isinstance(cls, type) and issubclass(cls, errors.FibrilError)}
_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in RECORD_KINDS
    if dataclasses.is_dataclass(cls)}
_FIELDS.update({DeviceOutput: DeviceOutput._fields,  # (the two NamedTuple records)
                StateObservation: StateObservation._fields})

#: A message as it arrives: a msgpack map whose values are the peer's, checked (narrowed with
#: ``isinstance``) where they are read.
Message: TypeAlias = dict[str, object]


def _default(value: object) -> object:
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        return msgpack.ExtType(_ARRAY_EXT, msgpack.packb(
            [array.dtype.str, list(array.shape), array.tobytes()], use_bin_type=True))
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot encode a {type(value).__name__}")


def _ext_hook(code: int, data: bytes) -> object:
    if code != _ARRAY_EXT:
        return msgpack.ExtType(code, data)
    dtype, shape, raw = msgpack.unpackb(data, raw=False)
    return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape).copy()


def pack(message: object) -> bytes:
    data: bytes = msgpack.packb(message, use_bin_type=True, default=_default)
    return data


def unpack(data: bytes | memoryview) -> object:
    return msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=False)


def message(kind: str, **fields: object) -> bytes:
    """A server message of type ``kind``."""
    return pack({"v": PROTOCOL_VERSION, "t": kind, **fields})


def request(op: str, **fields: object) -> bytes:
    """A client request ``op``."""
    return pack({"v": PROTOCOL_VERSION, "op": op, **fields})


def record_to_wire(record: object) -> bytes:
    """One record as msgpack bytes (encoded once, sent to every client that wants it)."""
    if type(record) is DeviceOutput:
        values = record[8]
        if type(values) is np.ndarray and values.ndim == 1 and values.dtype.str == "<f8" \
                and type(record[9]) is tuple:
            return _device_output_to_wire(record, values)
        cls: type = DeviceOutput
    else:
        cls = type(record)
    return pack([RECORD_KINDS[cls], *(getattr(record, name) for name in _FIELDS[cls])])


# The constant parts of a device's DeviceOutput messages, by (device id, sample type, names,
# frame, value count), and the message head by episode: a sample is then one msgpack call for
# its ticks and times, and its raw values. The bytes are exactly what ``pack`` makes.
_DEVICE_PARTS: dict[tuple[object, ...], tuple[bytes, bytes, bytes]] = {}
_DEVICE_HEADS: dict[int, bytes] = {}


def _device_output_to_wire(record: DeviceOutput, values: np.ndarray) -> bytes:
    count = values.shape[0]
    key = (record[1], record[2], record[9], record[10], count)
    parts = _DEVICE_PARTS.get(key)
    if parts is None:
        if len(_DEVICE_PARTS) > 4096:
            _DEVICE_PARTS.clear()
        raw = 8 * count
        inner = b"\x93" + pack("<f8") + pack([count]) + _bin_header(raw)
        parts = _DEVICE_PARTS[key] = (
            pack(record[1]) + pack(record[2]), _ext_header(len(inner) + raw) + inner,
            pack(list(record[9])) + pack(record[10]))
    head = _DEVICE_HEADS.get(record[0])
    if head is None:
        if len(_DEVICE_HEADS) > 4096:
            _DEVICE_HEADS.clear()
        head = _DEVICE_HEADS[record[0]] = (b"\x9c" + pack(RECORD_KINDS[DeviceOutput])
                                           + pack(record[0]))
    ids, ext, tail = parts
    return b"".join((head, ids, pack(record[3:8])[1:], ext, values.tobytes(), tail))


def _bin_header(size: int) -> bytes:
    if size < 1 << 8:
        return b"\xc4" + size.to_bytes(1, "big")
    if size < 1 << 16:
        return b"\xc5" + size.to_bytes(2, "big")
    return b"\xc6" + size.to_bytes(4, "big")


def _ext_header(size: int) -> bytes:
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}.get(size)
    if fixed is not None:
        return bytes((fixed, _ARRAY_EXT))
    if size < 1 << 8:
        return b"\xc7" + size.to_bytes(1, "big") + bytes((_ARRAY_EXT,))
    if size < 1 << 16:
        return b"\xc8" + size.to_bytes(2, "big") + bytes((_ARRAY_EXT,))
    return b"\xc9" + size.to_bytes(4, "big") + bytes((_ARRAY_EXT,))


_DEVICE_KIND = RECORD_KINDS[DeviceOutput]
_DEVICE_FIELD_COUNT = len(DeviceOutput._fields)


def record_from_wire(data: bytes) -> ClientRecord:
    message = unpack(data)
    if not isinstance(message, list) or not message:
        raise errors.ServerError("protocol: a record must be a non-empty list")
    kind, *values = message
    if kind == _DEVICE_KIND and len(values) == _DEVICE_FIELD_COUNT:
        values[9] = tuple(values[9])
        return tuple.__new__(DeviceOutput, values)  # positional: a NamedTuple
    cls = _TYPES.get(kind)
    if cls is None:
        raise errors.ServerError(f"protocol: unknown record kind {kind!r}")
    fields = dict(zip(_FIELDS[cls], values))
    if "component_names" in fields:
        fields["component_names"] = tuple(fields["component_names"])
    return cls(**fields)


def input_to_wire(item: ExternalInput) -> list[object]:
    return [item.source_id, item.source_sequence, item.payload_type, payload_text(item)]


def input_from_wire(fields: object) -> ExternalInput:
    """The ExternalInput a ``submit`` carries (``input_to_wire``'s list). Only its shape is
    checked here: its values are the peer's, which the ingress checks (recording a
    rejection)."""
    if not isinstance(fields, (list, tuple)):
        raise TypeError(f"submit: input must be a list, got {type(fields).__name__}")
    source, sequence, payload_type, payload = fields
    return external_input(source, sequence, payload_type, payload)


def error_to_wire(exc: BaseException) -> dict[str, str]:
    name = type(exc).__name__
    return {"error": name if name in _ERRORS else "FibrilError", "message": str(exc)}


def error_from_wire(reply: Mapping[str, object]) -> errors.FibrilError:
    cls = _ERRORS.get(str(reply.get("error")), errors.FibrilError)
    return cls(str(reply.get("message", "")))


def auth_mac(token: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(token, _AUTH_LABEL + server_nonce + client_nonce, hashlib.sha256).digest()


def check_version(document: object) -> Message:
    """The message as a dict, or ServerError when it is not one of this protocol version."""
    if not isinstance(document, dict):
        raise errors.ServerError("protocol: a message must be a map")
    version = document.get("v")
    if version != PROTOCOL_VERSION:
        raise errors.ServerError(f"protocol: version {version!r} is not supported (this side "
                                 f"speaks version {PROTOCOL_VERSION})")
    return document
