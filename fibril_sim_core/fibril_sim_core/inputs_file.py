"""Recorded-input files for ``fibril_sim run --inputs``: timed ExternalInputs to replay.

```yaml
schema_version: {major: 1, minor: 0}
inputs:
  - {time: 0.5, source_id: motor/command, source_sequence: 1,
     payload_type: fibril_sim/motor_command/v1, payload: {mode: duty, value: 0.3}}
  - {commit_tick: 900, source_id: ..., payload_json: '{"mode":"duty","value":0}', ...}
```
Each input gives ``time`` (seconds, a whole number of ticks) or ``commit_tick``; the file order
is the acceptance order within a tick.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import _schema as s
from .errors import ManifestError
from .manifest import parse_input_spec
from .records import IngressRecord
from .timebase import Timebase


def load_inputs(path: str | Path, timebase: Timebase) -> list[IngressRecord]:
    file = Path(path)
    root = s.Where(str(file), "", ManifestError)
    doc = s.mapping(s.load_yaml(file, ManifestError), root)
    s.keys(doc, root, required=("schema_version", "inputs"))
    s.version(doc["schema_version"], root.key("schema_version"), major=1, minors=(0,))
    records: list[IngressRecord] = []
    where = root.key("inputs")
    for n, item in enumerate(s.sequence(doc["inputs"], where)):
        at = where.key(n)
        body = dict(s.mapping(item, at))
        if ("time" in body) == ("commit_tick" in body):
            raise at.fail("give exactly one of 'time' (seconds) or 'commit_tick'")
        if "time" in body:
            seconds = s.number(body.pop("time"), at.key("time"), minimum=0.0)
            try:
                tick = timebase.ticks(seconds)
            except ValueError as exc:
                raise at.key("time").fail(str(exc)) from None
        else:
            tick = s.integer(body.pop("commit_tick"), at.key("commit_tick"), minimum=0)
        spec = parse_input_spec(body, at)
        records.append(IngressRecord(
            0, spec.source_id, spec.source_sequence, spec.payload_type,
            json.dumps(dict(spec.payload), sort_keys=True, separators=(",", ":")), True, tick, n,
            "", 0))
    return records
