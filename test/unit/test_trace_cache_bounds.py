"""A traced session holds no memory per rejected input (issue 23, item 5).

Rejected inputs carry client-chosen strings (source ids, payload types, payloads) and a reason
that names the sequence number; the trace encoder once made and kept a message shape for each,
so a client sending malformed commands grew the simulation's memory without end. These tests
send 20 000 rejected inputs into a traced instance and check the encoder's caches stay small,
the process's memory does not grow with them, and every rejection is still in the trace with
its reason, byte for byte as rosbags serializes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcap.reader import make_reader

from fibril_sim_core import IngressError, SimulationBuilder, external_input
from fibril_sim_core.records import IngressRecord
from fibril_sim_core.trace import INPUTS_TOPIC, TraceReader, TraceWriter, msgtypes
from fibril_sim_core.trace.encoder import Encoder, ShapeCache

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "config" / "examples" / "drivetrain" / "simulation.yaml"
DUTY = "fibril_sim/motor_command/v1"
REJECTED = 20_000
MB = 1 << 20


def _rss() -> int:
    """This process's resident memory in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _malformed(n: int):
    """The n-th malformed input: a stale sequence, an unknown source or a bad payload, each
    with strings of its own."""
    if n % 3 == 0:
        return external_input("motor/command", n, DUTY, {"mode": "duty", "value": 0.1})
    if n % 3 == 1:
        return external_input(f"ghost/{n}/{'é' * (n % 7)}", n, f"x/{n % 11}", {"n": n})
    return external_input("motor/command", 10**9 + n, DUTY, {"mode": "duty", "value": f"v{n}"})


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_rejected_inputs_neither_grow_the_encoder_nor_the_process(tmp_path: Path) -> None:
    plan = SimulationBuilder().build(MANIFEST)
    reasons: dict[tuple[str, int], str] = {}
    with TraceWriter(tmp_path / "t", provenance=dict(plan.provenance),
                     layout=dict(plan.layout)) as writer:
        instance = plan.create_instance(seed=1, trace=writer, collect=False)
        instance.enqueue(external_input("motor/command", 10**6, DUTY,
                                        {"mode": "duty", "value": 0.2}))
        instance.advance(20)
        for n in range(2_000):  # warm up: allocator pools, the first chunks
            try:
                instance.enqueue(_malformed(n))
            except IngressError:
                pass
            if n % 100 == 99:
                instance.advance(1)
        writer.flush()
        before = _rss()
        for n in range(2_000, 2_000 + REJECTED):
            item = _malformed(n)
            with pytest.raises(IngressError) as raised:
                instance.enqueue(item)
            reasons[(item.source_id, item.source_sequence)] = str(raised.value)
            if n % 100 == 99:
                instance.advance(1)
        instance.advance(1)
        writer.flush()
        grown = _rss() - before
        encoder = writer._shared.encoder
        # a shape per length combination of the clients' strings (some dozens here), never one
        # per input (20 000+ before the fix), and never more than the cache's bound
        assert len(encoder.shapes) < 256, len(encoder.shapes)
        assert len(encoder.shapes) <= encoder.shapes.limit
        assert len(encoder.channels) == len(encoder.msgtypes) < 16
        assert len(encoder.counts) < 16  # by device and record type, not by input
    assert grown < 40 * MB, f"RSS grew {grown / MB:.0f} MB for {REJECTED} rejected inputs"
    with TraceReader(tmp_path / "t") as reader:
        rejected = {(r.source_id, r.source_sequence): r for r in reader.external_inputs()
                    if not r.accepted}
    for key, reason in reasons.items():  # every rejection traced, with its reason
        assert rejected[key].reject_reason == reason, key
        assert rejected[key].commit_tick == -1


def _reference(record: IngressRecord) -> bytes:
    """The message as rosbags serializes it (the generic encoder)."""
    store = msgtypes.typestore()
    types = store.types
    stamp = types["builtin_interfaces/msg/Time"](*divmod(record.session_time_ns, 10**9))
    msg = types[msgtypes.EXTERNAL_INPUT](
        stamp=stamp, episode=record.episode, source_id=record.source_id,
        source_sequence=record.source_sequence, payload_type=record.payload_type,
        payload_json=record.payload_json, commit_tick=record.commit_tick,
        acceptance_sequence=record.acceptance_sequence, accepted=record.accepted,
        reject_reason=record.reject_reason)
    return bytes(store.serialize_cdr(msg, msg.__msgtype__))


def test_inputs_with_strings_of_every_length_are_written_as_rosbags_writes_them(
        tmp_path: Path) -> None:
    records = [IngressRecord(n % 2, source, n, payload_type, json.dumps({"n": "µ" * n}),
                             accepted, n if accepted else -1, n, reason, 10**9 + n)
               for n, (source, payload_type, accepted, reason) in enumerate([
                   ("", "", True, ""),
                   ("a", "t", False, "r"),
                   ("motor/command", DUTY, True, ""),
                   ("motor/command", DUTY, False, "source 'motor/command': source_sequence 3 "
                                                  "does not increase (last accepted 1000000)"),
                   ("ghost/ü", "x/ÿ", False, "unknown source 'ghost/ü' — 日本"),
                   ("ab", "cd", False, "efg"),
                   ("abc", "de", False, "fg"),
               ] * 3)]
    with TraceWriter(tmp_path / "t", provenance={}, layout={"timestep_ns": 1_000_000}) as writer:
        for record in records:
            writer.write(record)
    with (tmp_path / "t" / "t.mcap").open("rb") as stream:
        written = [bytes(message.data) for _, channel, message in
                   make_reader(stream, validate_crcs=True).iter_messages(log_time_order=False)
                   if channel.topic == INPUTS_TOPIC]
    assert written == [_reference(r) for r in records]
    with TraceReader(tmp_path / "t") as reader:
        assert list(reader.external_inputs()) == records


def test_the_shape_cache_keeps_the_most_recently_used_within_its_bounds() -> None:
    encoder = Encoder()
    cache = encoder.shapes = ShapeCache(limit=8, budget=1 << 30)
    records = [IngressRecord(0, "s" * n, n, "t", "{}", False, -1, 0, "r" * n, n)
               for n in range(1, 40)]
    for record in records:  # a shape each (their strings' lengths differ)
        encoder.encode([records[0], record])
    assert len(cache) == 8
    assert cache.get((IngressRecord, 1, 1, 2, 1)) is not None  # used by every batch: kept
    assert cache.get((IngressRecord, 2, 1, 2, 2)) is None  # long unused: evicted
    small = ShapeCache(limit=100, budget=2_000)
    for record in records:
        key = (IngressRecord, len(record.source_id), 1, 2, len(record.reject_reason))
        small.add(key, encoder._shape(key))
    assert small.size <= 2_000 and 1 < len(small) < 20
    blocks, *_ , failures = encoder.encode(records)  # evicted shapes are made again
    assert not failures and len(b"".join(blocks)) > 0
