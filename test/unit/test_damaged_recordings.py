"""Damaged recordings are one-line request errors, never tracebacks or silently changed data.

The arm recording of ``_recording_rig`` is written as rosbags writes it (MCAP chunks with CRC
0, sqlite3), then damaged: a chunk CRC that no longer matches, a cut sqlite3 database, bit flips
in an MCAP's structure (record lengths, message times, channel ids, index, statistics). What the
file's own redundancy can check is an error naming the file; what it cannot (a payload byte of
an MCAP without CRCs) is a warning in the result and on stderr.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from binascii import crc32
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.recordings.mcap_integrity import McapDamage, check_mcap
from fibril_calibration.recordings.sources import SourceError
from fibril_calibration.recordings.formats import open_source

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("damaged")
    data = rig.recording(folder, duration_s=0.4)
    data["folder"] = folder
    data["mcap"] = rig.write_bag(folder / "bag-mcap", data, "mcap")
    data["sqlite3"] = rig.write_bag(folder / "bag-sqlite3", data, "sqlite3")
    data["raw"] = rig.raw_mcap(data["mcap"], folder / "raw.mcap")
    return data


def _records(blob: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    """(opcode, record start, record end) of the MCAP records in [start, end)."""
    out, at = [], start
    while at < end:
        length = struct.unpack_from("<Q", blob, at + 1)[0]
        out.append((blob[at], at, at + 9 + length))
        at += 9 + length
    return out


def _chunk(blob: bytes) -> tuple[int, int, int]:
    """The first chunk: (its start, the CRC field's offset, where its records start)."""
    for opcode, at, _ in _records(blob, 8, len(blob) - 8 - 29):
        if opcode == 0x06:
            crc_at = at + 9 + 24
            name = struct.unpack_from("<I", blob, crc_at + 4)[0]
            return at, crc_at, crc_at + 4 + 4 + name + 8
    raise AssertionError("no chunk")


def with_chunk_crcs(source: Path, target: Path) -> Path:
    """``source`` with every chunk's CRC filled in (rosbags writes 0)."""
    blob = bytearray(source.read_bytes())
    for opcode, at, end in _records(bytes(blob), 8, len(blob) - 8 - 29):
        if opcode == 0x06:
            crc_at = at + 9 + 24
            name = struct.unpack_from("<I", blob, crc_at + 4)[0]
            records = crc_at + 4 + 4 + name + 8
            struct.pack_into("<I", blob, crc_at, crc32(bytes(blob[records:end])))
    target.write_bytes(bytes(blob))
    return target


def _message_fields(blob: bytes) -> list[tuple[str, int]]:
    """(field, absolute offset) of each message record's opcode, length, channel and log time
    in the first chunk: the structure a flip there changes."""
    _, _, records = _chunk(blob)
    size = struct.unpack_from("<Q", blob, records - 8)[0]
    out = []
    for opcode, at, _ in _records(blob, records, records + size):
        if opcode == 0x05:
            out += [("opcode", at), ("length", at + 1), ("length", at + 2),
                    ("channel", at + 9), ("log_time", at + 15), ("log_time", at + 17)]
    return out


def _streams(path: Path) -> list[np.ndarray]:
    source = open_source(path)
    try:
        out = [source.stream(topic="/joint_states", field=f"position[{j}]").values
               for j in rig.JOINTS]
        out.append(source.stream(topic="/joint_commands", field="effort").values)
        out.append(source.stream(topic="/joint_states", field="position[j1]").times_ns)
    finally:
        source.close()
    return out


def _load_fails(arm: dict[str, Any], source: dict[str, Any], *needles: str) -> str:
    return rig.request_fails(arm["folder"], rig.request(arm["manifest"], source), *needles)


# --------------------------------------------------------------------------- CRCs

def test_chunk_crc_mismatch_is_a_request_error(arm: dict[str, Any], tmp_path: Path) -> None:
    good = with_chunk_crcs(arm["raw"], tmp_path / "crc.mcap")
    assert check_mcap(good).crc_checked and not check_mcap(good).warnings
    rig.load_request(arm["folder"], rig.request(arm["manifest"], {"path": str(good)}))
    blob = bytearray(good.read_bytes())
    _, _, records = _chunk(bytes(blob))
    payloads = [at for field, at in _message_fields(bytes(blob)) if field == "log_time"]
    for n, at in enumerate([records + 40, payloads[3] + 30, payloads[-1] + 25]):
        bad = bytearray(blob)
        bad[at] ^= 1 << (n % 8)
        path = tmp_path / f"flip{n}.mcap"
        path.write_bytes(bytes(bad))
        _load_fails(arm, {"path": str(path)}, str(path), "checksum does not match")
        with pytest.raises(SourceError, match="damaged"):
            open_source(path)


def test_mcap_without_crcs_warns_in_the_result_and_on_stderr(arm: dict[str, Any],
                                                              tmp_path: Path) -> None:
    found = check_mcap(arm["raw"])
    assert not found.crc_checked and found.messages > 0
    assert "without checksums" in found.warnings[0]
    doc = rig.request(arm["manifest"], {"path": str(arm["raw"])}, windows=[[0.0, 0.2]])
    doc["optimizer"] = {"max_iterations": 2}
    request = rig.write_request(tmp_path, doc)
    output = tmp_path / "result.json"
    result = subprocess.run([sys.executable, "-m", "fibril_sim_core.cli", "calibrate",
                             str(request), "--quiet", "--output", str(output)],
                            capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fibril_sim: warning: recording "), lines
    assert str(arm["raw"]) in lines[0] and "cannot be detected" in lines[0]
    document = json.loads(output.read_text())
    unchecked = [w for w in document["warnings"] if w["code"] == "recording_unchecked"]
    assert len(unchecked) == 1 and unchecked[0]["path"] == str(arm["raw"])
    assert unchecked[0]["episodes"] == ["arm/w000"]
    assert "warning" in result.stdout and "cannot be detected" in result.stdout  # summary
    # with CRCs: nothing to warn about
    good = with_chunk_crcs(arm["raw"], tmp_path / "crc.mcap")
    loaded = rig.load_request(tmp_path, rig.request(arm["manifest"], {"path": str(good)}))
    assert loaded.training and all("warnings" not in e.source for e in loaded.training)


def test_structure_flips_without_crcs_are_errors_never_silent_changes(
        arm: dict[str, Any], tmp_path: Path) -> None:
    """Flips in message record lengths, channel ids and log times, in the message index and
    the summary: each is found (or changes nothing a stream gives); payload flips are what
    the warning is about."""
    blob = arm["raw"].read_bytes()
    reference = _streams(arm["raw"])
    fields = _message_fields(blob)
    picked = fields[::max(1, len(fields) // 24)]
    _, _, records = _chunk(blob)
    size = struct.unpack_from("<Q", blob, records - 8)[0]
    tail = [at for opcode, at, _ in _records(blob, records + size, len(blob) - 8 - 29)
            if opcode in (0x07, 0x08, 0x0B)]  # message index, chunk index, statistics
    picked += [("index", at + k) for at in tail for k in (12, 20, 27)]
    found = unchanged = 0
    for n, (field, at) in enumerate(picked):
        bad = bytearray(blob)
        bad[at] ^= 1 << (n % 7)
        path = tmp_path / "flip.mcap"
        path.write_bytes(bytes(bad))
        try:
            check_mcap(path)
        except McapDamage:
            found += 1
            text = _load_fails(arm, {"path": str(path)}, str(path), "is damaged")
            assert "Traceback" not in text
            continue
        streams = _streams(path)  # not found: then nothing the calibration reads changed
        assert all(a.shape == b.shape and np.array_equal(a, b)
                   for a, b in zip(streams, reference)), f"{field} flip at byte {at}"
        unchanged += 1
    assert found >= len(picked) * 3 // 4, (found, unchanged)


def test_dropped_and_moved_messages_are_found(arm: dict[str, Any], tmp_path: Path) -> None:
    """The silent cases of the issue: a message moved to another channel (dropped from its
    topic) and a message whose log time changed, both without CRCs."""
    blob = arm["raw"].read_bytes()
    fields = _message_fields(blob)
    channel = [at for f, at in fields if f == "channel"][5]
    log_time = [at for f, at in fields if f == "log_time"][7]
    for name, at, bit in (("channel", channel, 2), ("log_time", log_time, 3)):
        bad = bytearray(blob)
        bad[at] ^= 1 << bit
        path = tmp_path / f"{name}.mcap"
        path.write_bytes(bytes(bad))
        _load_fails(arm, {"path": str(path)}, str(path), "is damaged")


@pytest.mark.parametrize("fraction", [0.2, 0.6, 0.95, 0.999])
def test_truncated_mcap_is_a_request_error(arm: dict[str, Any], tmp_path: Path,
                                           fraction: float) -> None:
    blob = arm["raw"].read_bytes()
    path = tmp_path / "cut.mcap"
    path.write_bytes(blob[:int(len(blob) * fraction)])
    _load_fails(arm, {"path": str(path)}, str(path))
    bag = tmp_path / "bag"
    shutil.copytree(arm["mcap"], bag)
    (mcap,) = bag.glob("*.mcap")
    mcap.write_bytes(blob[:int(len(blob) * fraction)])
    _load_fails(arm, {"path": str(bag)}, str(bag))


# --------------------------------------------------------------------------- sqlite3

@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.99, 0.999])
def test_truncated_sqlite3_bag_is_a_request_error(arm: dict[str, Any], tmp_path: Path,
                                                  fraction: float) -> None:
    bag = tmp_path / "bag"
    shutil.copytree(arm["sqlite3"], bag)
    (db,) = bag.glob("*.db3")
    blob = db.read_bytes()
    db.write_bytes(blob[:int(len(blob) * fraction)])
    for path in (bag, db):
        text = _load_fails(arm, {"path": str(path)}, str(path))
        assert "CorruptError" not in text


def test_sqlite3_bag_warns_that_payloads_are_unchecked(arm: dict[str, Any]) -> None:
    request = rig.load_request(arm["folder"], rig.request(arm["manifest"],
                                                          {"path": str(arm["sqlite3"])}))
    warnings = request.training[0].source["warnings"]
    assert len(warnings) == 1 and "sqlite3 storage keeps no checksums" in warnings[0]


def test_metadata_counts_are_checked(arm: dict[str, Any], tmp_path: Path) -> None:
    bag = tmp_path / "bag"
    shutil.copytree(arm["sqlite3"], bag)
    (db,) = bag.glob("*.db3")
    import sqlite3

    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM messages WHERE id = (SELECT MAX(id) FROM messages)")
    _load_fails(arm, {"path": str(bag)}, str(bag), "metadata.yaml counts")
