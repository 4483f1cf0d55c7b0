"""``recording info --fields TOPIC``: a topic's message in the request's own field syntax
(``position[joint1]``, ``pose.pose.orientation``), constants left out, array elements named by
the first message's ``name`` list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .sources import SourceError

if TYPE_CHECKING:  # rosbags loads on use
    from rosbags.rosbag2 import Reader

__all__ = ["FieldLine", "field_tree", "fields_text"]


@dataclass(frozen=True)
class FieldLine:
    """One mappable field: its path in the request's syntax and what it holds."""

    path: str
    type: str
    note: str = ""


def field_tree(path: Path, topic: str, *, types: Sequence[Path] = ()) -> tuple[str,
                                                                              list[FieldLine]]:
    """The message type of ``topic`` and its fields (constants left out); array elements named
    by a ``name`` list beside them are listed by the names of the topic's first message."""
    from .message_types import bag_typestore_with

    reader = _open_rosbags(path)
    try:
        found = [c for c in reader.connections if c.topic == topic]
        if not found:
            topics = sorted({c.topic for c in reader.connections})
            raise SourceError(f"recording {str(path)!r} has no topic {topic!r}; its topics: "
                              f"{', '.join(topics) or 'none'}")
        msgtype = found[0].msgtype
        store = bag_typestore_with(reader.connections, types)
        if msgtype not in store.fielddefs:
            from .message_types import missing_definition

            raise SourceError(missing_definition(path, topic, msgtype))
        first = None
        for _, _, raw in reader.messages(connections=found):
            try:
                first = store.deserialize_cdr(raw, msgtype)
            except Exception:  # noqa: BLE001 - the tree is still listed without names
                first = None
            break
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001 - rosbags' reader errors
        raise SourceError(f"cannot read recording {str(path)!r}: {exc}") from None
    finally:
        reader.close()
    lines: list[FieldLine] = []
    _walk(store.fielddefs, msgtype, "", first, lines, 0)
    return msgtype, lines


def _open_rosbags(path: Path) -> Reader:
    from rosbags.rosbag2 import Reader

    if not path.exists():
        raise SourceError(f"recording {str(path)!r} does not exist")
    try:
        reader = Reader(path)
        reader.open()
    except Exception as exc:  # noqa: BLE001 - rosbags raises its own and OS errors
        raise SourceError(f"cannot read recording {str(path)!r}: {exc}") from None
    return reader


_VECTOR = {"x", "y", "z"}


def _walk(defs: dict[str, Any], msgtype: str, prefix: str, value: object,
          lines: list[FieldLine], depth: int) -> None:
    if depth > 20:
        return
    fields = defs[msgtype][1]
    names = {name for name, _ in fields}
    for name, (kind, detail) in fields:
        path = f"{prefix}{name}"
        child = getattr(value, name, None) if value is not None else None
        kind = int(kind)
        if kind == 1:  # a base type
            lines.append(FieldLine(path, detail[0], "" if detail[0] != "string" else
                                   "text: not a value"))
        elif kind == 2:  # a nested message
            inner = {n for n, _ in defs[detail][1]} if detail in defs else set()
            if {"x", "y", "z", "w"} <= inner:
                lines.append(FieldLine(path, _short(detail), "quaternion: w, x, y, z"))
            elif _VECTOR <= inner:
                lines.append(FieldLine(path, _short(detail), "vector: x, y, z"))
            if detail in defs:
                _walk(defs, detail, path + ".", child, lines, depth + 1)
        else:  # an array or a sequence
            (inner_kind, inner_detail), size = detail
            shown = (inner_detail[0] if int(inner_kind) == 1 else _short(inner_detail))
            shape = f"{shown}[{size}]" if kind == 3 else f"{shown}[]"
            if int(inner_kind) != 1:
                lines.append(FieldLine(path, shape, "array of messages: not mappable"))
            elif inner_detail[0] == "string":
                lines.append(FieldLine(path, shape, "names" if name == "name" else "text"))
            elif "name" in names and name != "name":
                listed = list(getattr(value, "name", None) or [])
                count = len(child) if child is not None else None
                if listed and count == len(listed):
                    for element in listed:
                        lines.append(FieldLine(f"{path}[{element}]", inner_detail[0]))
                elif count:
                    lines.append(FieldLine(f"{path}[0..{count - 1}]", inner_detail[0],
                                           "by index"))
                else:
                    lines.append(FieldLine(f"{path}[<name>]", inner_detail[0],
                                           "empty in the first message" if value is not None
                                           else "element by name"))
            else:
                lines.append(FieldLine(path, shape, "whole array, or [index]"))


def _short(msgtype: str) -> str:
    parts = msgtype.split("/")
    return f"{parts[0]}/{parts[-1]}" if len(parts) >= 2 else msgtype


def fields_text(path: Path, topic: str, msgtype: str, lines: Sequence[FieldLine]) -> str:
    width = max([len(line.path) for line in lines] + [5])
    out = [f"topic {topic} ({msgtype}) of {path}: fields as a request names them "
           f"(field: ...)"]
    for line in lines:
        note = f"  ({line.note})" if line.note else ""
        out.append(f"  {line.path:<{width}}  {line.type}{note}")
    return "\n".join(out) + "\n"
