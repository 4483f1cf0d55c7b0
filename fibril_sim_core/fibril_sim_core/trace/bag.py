"""The bag's files: rosbag2 ``metadata.yaml`` (version 8, as ``ros2 bag`` and rosbags write it)
and the MCAP schemas, for the trace writer's worker (``_worker``) and its constructor."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypedDict

import yaml

from .encoder import Encoder
from .mcap_file import McapFile

if TYPE_CHECKING:
    from rosbags.typesys.store import Typestore

#: rosbag2 metadata version 8 is the newest that Jazzy's ``ros2 bag`` reads.
BAG_VERSION: Final = 8


def library() -> str:
    """The MCAP header's library name: this package and its version."""
    try:
        return f"fibril_sim_core-{version('fibril_sim_core')}"
    except PackageNotFoundError:
        return "fibril_sim_core"


@dataclass(slots=True)
class Bag:
    """Files and metadata of the bag being written."""

    path: Path
    mcap: McapFile
    custom_data: dict[str, str]
    typestore: Typestore
    schemas: dict[str, int] = field(default_factory=dict)  # message type -> schema id


class _Nanoseconds(TypedDict):
    nanoseconds: int


class _Since(TypedDict):
    nanoseconds_since_epoch: int


class _TopicMetadata(TypedDict):
    name: str
    type: str
    serialization_format: str
    offered_qos_profiles: str
    type_description_hash: str


class _TopicCount(TypedDict):
    topic_metadata: _TopicMetadata
    message_count: int


class _FileEntry(TypedDict):
    path: str
    starting_time: _Since
    duration: _Nanoseconds
    message_count: int


#: ``rosbag2_bagfile_information`` as metadata.yaml holds it (version 8).
BagInformation = TypedDict("BagInformation", {
    "version": int, "storage_identifier": str, "relative_file_paths": list[str],
    "duration": _Nanoseconds, "starting_time": _Since, "message_count": int,
    "topics_with_message_count": list[_TopicCount], "compression_format": str,
    "compression_mode": str, "files": list[_FileEntry], "custom_data": dict[str, str],
    "ros_distro": str})


def metadata(bag: Bag, encoder: Encoder | None, counts: dict[int, int],
             start: int | None, end: int | None) -> BagInformation:
    """rosbag2 metadata (version 8), as ``ros2 bag`` and rosbags write it."""
    start = start or 0
    duration = max(0, (end or 0) - start)
    total = sum(counts.values())
    name = bag.mcap.path.name
    topics: list[_TopicCount] = []
    if encoder is not None:
        for topic, channel in encoder.channels.items():
            msgtype = encoder.msgtypes[channel]
            topics.append({
                "topic_metadata": {
                    "name": topic, "type": msgtype, "serialization_format": "cdr",
                    "offered_qos_profiles": "",
                    "type_description_hash": bag.typestore.hash_rihs01(msgtype)},
                "message_count": counts.get(channel, 0)})
    return {
        "version": BAG_VERSION,
        "storage_identifier": "mcap",
        "relative_file_paths": [name],
        "duration": {"nanoseconds": duration},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": total,
        "topics_with_message_count": topics,
        "compression_format": "",
        "compression_mode": "",
        "files": [{"path": name, "starting_time": {"nanoseconds_since_epoch": start},
                   "duration": {"nanoseconds": duration}, "message_count": total}],
        "custom_data": bag.custom_data,
        "ros_distro": "rosbags",
    }


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when available: 10x faster


def dump_metadata(information: BagInformation) -> str:
    """The rosbag2 metadata as YAML (block style, sorted keys, like ros2 bag's)."""
    return yaml.dump(information, Dumper=_DUMPER, default_flow_style=False, sort_keys=True)


def write_metadata_yaml(path: Path, serialized: str) -> None:
    """Replace ``metadata.yaml`` atomically (a reader never sees half a file)."""
    body = "".join("  " + line if line.strip() else line
                   for line in serialized.splitlines(keepends=True))
    tmp = path / "metadata.yaml.tmp"
    tmp.write_text("rosbag2_bagfile_information:\n" + body, encoding="utf-8")
    os.replace(tmp, path / "metadata.yaml")


def schema_id(bag: Bag, msgtype: str) -> int:
    """The MCAP schema of ``msgtype``, added on its first use."""
    schema = bag.schemas.get(msgtype)
    if schema is None:
        schema = bag.schemas[msgtype] = len(bag.schemas) + 1
        text, _ = bag.typestore.generate_msgdef(msgtype, ros_version=2)
        bag.mcap.add_schema(schema, msgtype, "ros2msg", text.encode())
    return schema
