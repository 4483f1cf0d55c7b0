"""Message definitions a bag does not carry: ``.msg`` folders and a ROS installation's share.

rosbag2 bags in MCAP embed each type's definition; sqlite3 bags written before ROS 2 Iron (and
some tools' bags since) do not. Such a bag's custom types decode only with definitions given
from outside:

* a source's ``types: [path/to/msg_dir, ...]``: ``.msg`` files, their package the folder
  above ``msg/`` (``my_robot_msgs/msg/LegState.msg`` is ``my_robot_msgs/msg/LegState``), or a
  package folder holding ``msg/``; registered with rosbags' typestore;
* a ROS installation: ``<prefix>/share/<package>/msg/<Name>.msg`` under each prefix of
  ``AMENT_PREFIX_PATH``, looked up only for the types still missing.

``missing_definition`` words the error when neither gives the type.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # rosbags loads on use (start-up time)
    from rosbags.interfaces.typing import Fielddefs, Typesdict
    from rosbags.typesys.store import Typestore

__all__ = ["BagConnection", "bag_typestore", "bag_typestore_with", "missing_definition",
           "msg_folder_types"]


class MessageDefinition(Protocol):
    """A connection's embedded definition: its format (MSG, IDL or none) and text."""

    @property
    def format(self) -> object: ...

    @property
    def data(self) -> str: ...


class BagConnection(Protocol):
    """One topic of a bag as read here: a rosbags ``Connection``, or the rosbag2_py reader's
    (``bag_readers.Connection``)."""

    @property
    def topic(self) -> str: ...

    @property
    def msgtype(self) -> str: ...

    @property
    def msgdef(self) -> MessageDefinition: ...


def _msg_files(folder: Path) -> Iterable[tuple[str, Path]]:
    """(package, .msg file) of a msg folder, a package folder, or a folder of packages."""
    if folder.is_file() and folder.suffix == ".msg":
        yield folder.parent.parent.name, folder
        return
    candidates = [folder] if folder.name == "msg" else (
        [folder / "msg"] if (folder / "msg").is_dir() else sorted(folder.glob("*/msg")))
    for msg_dir in candidates:
        for file in sorted(msg_dir.glob("*.msg")):
            yield msg_dir.parent.name, file


def msg_folder_types(folders: Sequence[Path]) -> Typesdict:
    """Parsed definitions (rosbags' fielddefs form) of every ``.msg`` file in ``folders``.
    Raises ValueError naming a folder that does not exist or a file that does not parse."""
    from rosbags.typesys import get_types_from_msg

    types: Typesdict = {}
    for folder in folders:
        if not folder.exists():
            raise ValueError(f"types folder {str(folder)!r} does not exist")
        found = list(_msg_files(folder))
        if not found:
            raise ValueError(f"types folder {str(folder)!r} holds no .msg files (expected "
                             f"<package>/msg/<Name>.msg)")
        for package, file in found:
            name = f"{package}/msg/{file.stem}"
            try:
                types.update(get_types_from_msg(file.read_text(encoding="utf-8"), name))
            except Exception as exc:  # noqa: BLE001 - rosbags' parser raises several types
                raise ValueError(f"types file {str(file)!r} does not parse as a .msg "
                                 f"definition: {exc}") from None
    return types


def _ament_types(missing: Iterable[str]) -> Typesdict:
    """Definitions of ``missing`` types found under AMENT_PREFIX_PATH's share folders (with
    the types their fields name, as far as they are found)."""
    from rosbags.typesys import get_types_from_msg

    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    types: Typesdict = {}
    todo = list(missing)
    while todo and prefixes:
        name = todo.pop()
        if name in types:
            continue
        parts = name.split("/")
        if len(parts) < 2:
            continue
        for prefix in prefixes:
            file = prefix / "share" / parts[0] / "msg" / f"{parts[-1]}.msg"
            if file.is_file():
                try:
                    found = get_types_from_msg(file.read_text(encoding="utf-8"),
                                               f"{parts[0]}/msg/{parts[-1]}")
                except Exception:  # noqa: BLE001 - a broken file is as good as none
                    break
                types.update(found)
                for _, fields in found.values():
                    todo.extend(_named(fields))
                break
    return types


def _named(fields: Fielddefs) -> list[str]:
    """The message types a definition's fields name (a field, or an array / sequence of
    them)."""
    out: list[str] = []
    for _, (kind, detail) in fields:
        if int(kind) == 2 and isinstance(detail, str):
            out.append(detail)
        elif int(kind) in (3, 4) and isinstance(detail, tuple):
            inner = detail[0]
            if int(inner[0]) == 2 and isinstance(inner[1], str):
                out.append(inner[1])
    return out


def bag_typestore_with(connections: Sequence[BagConnection], folders: Sequence[Path] = ()
                       ) -> Typestore:
    """The bag's typestore (``sources``: known types, its embedded definitions), plus the
    ``.msg`` folders and, for types still missing, AMENT_PREFIX_PATH's share folders."""
    from rosbags.typesys.store import Typestore

    base = bag_typestore(connections)
    extra = msg_folder_types(folders) if folders else {}
    missing = {c.msgtype for c in connections} - set(base.fielddefs) - set(extra)
    if missing:
        extra.update({k: v for k, v in _ament_types(missing).items() if k not in extra})
    extra = {k: v for k, v in extra.items() if k not in base.fielddefs}
    if not extra:
        return base
    store = Typestore()
    store.fielddefs.update(base.fielddefs)
    store.types.update(base.types)
    try:
        store.register(extra)
    except Exception as exc:  # noqa: BLE001 - rosbags' TypesysError and friends
        raise ValueError(f"the given message definitions do not register: {exc}") from None
    return store


def missing_definition(path: Path, topic: str, msgtype: str) -> str:
    """The error for a topic whose type nobody defines."""
    return (f"recording {str(path)!r} topic {topic!r}: the bag carries no definition for "
            f"{msgtype} and it is not a known type; give one with the source's types: "
            f"[path/to/msg_dir, ...] (folders of .msg files, e.g. "
            f"{msgtype.split('/')[0]}/msg/{msgtype.split('/')[-1]}.msg) or source a ROS "
            f"installation that has it (AMENT_PREFIX_PATH/share/{msgtype.split('/')[0]}/msg)")


def bag_typestore(connections: Sequence[BagConnection]) -> Typestore:
    """The core's shared typestore (ROS 2 base types and fibril_msgs, its generated decoders
    reused) when every definition the bag embeds matches it; otherwise a private copy with
    the embedded definitions registered over it (those win: they describe the recorded
    bytes). The shared store is never changed."""
    from fibril_sim_core.trace.msgtypes import typestore
    from rosbags.typesys.store import Typestore

    shared = typestore()
    embedded = _embedded_types(connections)
    differing = {name: d for name, d in embedded.items() if shared.fielddefs.get(name) != d}
    if not differing:
        return shared
    store = Typestore()
    store.fielddefs.update({k: v for k, v in shared.fielddefs.items() if k not in differing})
    store.types.update({k: v for k, v in shared.types.items() if k not in differing})
    store.register(differing)
    return store


def _embedded_types(connections: Sequence[BagConnection]) -> Typesdict:
    """The message definitions a bag's connections embed (MSG or IDL), parsed; an
    unparsable one is skipped (the known types still decode)."""
    from rosbags.typesys import TypesysError, get_types_from_idl, get_types_from_msg

    types: Typesdict = {}
    for connection in connections:
        definition = connection.msgdef
        fmt = getattr(definition.format, "name", str(definition.format))
        try:
            if fmt == "MSG" and definition.data:
                types.update(get_types_from_msg(definition.data, connection.msgtype))
            elif fmt == "IDL" and definition.data:
                separator = "=" * 80 + "\n"
                if definition.data.startswith(f"{separator}IDL: "):
                    for part in definition.data.split(separator)[1:]:
                        types.update(get_types_from_idl(part.split("\n", 1)[1]))
                else:
                    types.update(get_types_from_idl(definition.data))
        except (TypesysError, ValueError, KeyError, IndexError):  # unparsable: skipped
            pass
    return types
