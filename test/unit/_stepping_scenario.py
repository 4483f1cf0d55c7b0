"""A long drivetrain run with every device, live inputs, snapshots and a reset, as a digest.

Used by test_stepping_identity.py: the event-driven stepping must keep every output bit of the
implementation the fixture was recorded with. Run this module to print the digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
from fibril_sim_core.records import ExternalInput

from fibril_sim_core import SimulationBuilder

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "config/examples/drivetrain/simulation.yaml"


def _fields(record: object) -> list:
    # acceptance_sequence is left out: its numbering is fixed elsewhere (issue 11 item 6),
    # independently of the stepping.
    if dataclasses.is_dataclass(record):
        return [getattr(record, f.name) for f in dataclasses.fields(record)
                if f.name != "acceptance_sequence"]
    return list(record)  # a NamedTuple (DeviceOutput)


def record_digest(records: list) -> tuple[str, int]:
    h = hashlib.sha256()
    for record in records:
        h.update(type(record).__name__.encode())
        for value in _fields(record):
            if isinstance(value, np.ndarray):
                h.update(str(value.dtype).encode() + str(value.shape).encode())
                h.update(np.ascontiguousarray(value).tobytes())
            else:
                h.update(repr(value).encode())
    return h.hexdigest(), len(records)


def run(create=None, ticks: int = 12_000) -> dict[str, object]:
    """Digest of every record (and final state) of a fixed scenario; ``create(plan, **kw)``
    makes the instance (default ``plan.create_instance``)."""
    plan = SimulationBuilder().build(MANIFEST)
    if create is None:
        instance = plan.create_instance(seed=3, snapshot_every=10)
    else:
        instance = create(plan, seed=3, snapshot_every=10)
    records: list = []
    sequence = 1
    for n, chunk in enumerate((1, 7, 250, 2, 1741, ticks // 2, 3, ticks // 4)):
        if n in (2, 4, 6):
            mode = ("voltage", "duty", "voltage")[n // 2 - 1]
            instance.enqueue(ExternalInput("motor/command", sequence, "fibril_sim/motor_command/v1",
                                           {"mode": mode, "value": 0.2 * n}))
            sequence += 1
        if n == 5:
            records.extend(instance.poll())
            instance.reset(seed=5)
        instance.advance(chunk)
        records.extend(instance.poll())
    digest, count = record_digest(records)
    state = hashlib.sha256(instance.data.qpos.tobytes() + instance.data.qvel.tobytes()).hexdigest()
    return {"records": digest, "count": count, "state": state, "tick": instance.tick}


if __name__ == "__main__":
    import mujoco

    print(json.dumps({"mujoco": mujoco.__version__, **run()}, indent=1))
