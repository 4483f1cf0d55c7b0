"""Recorded-input files for ``fibril_sim run --inputs``: timed ExternalInputs to replay.

```yaml
schema_version: {major: 1, minor: 0}
inputs:
  - {time: 0.5, source_id: motor/command, source_sequence: 1,
     payload_type: fibril_sim/motor_command/v1, payload: {mode: duty, value: 0.3}}
  - {commit_tick: 900, source_id: ..., payload_json: '{"mode":"duty","value":0}', ...}
```
Each input gives ``time`` (seconds, a whole number of ticks) or ``commit_tick``; the file order
is the acceptance order within a tick. Given the plan's endpoints, every input is checked here
as the ingress would check it, so an error names the file and the key path
(``<file>: inputs[3].payload.mode: ...``) instead of surfacing while the run steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import schema as s
from .errors import ManifestError
from .manifest import InputSpec, parse_input_spec
from .records import IngressRecord
from .timebase import Timebase

if TYPE_CHECKING:
    from .components import ActuatorDescriptor

# An endpoint's parse error that names one payload field: "payload 'mode' must be ...".
_PAYLOAD_FIELD = re.compile(r"^payload '([A-Za-z_][A-Za-z0-9_]*)' ")


def load_inputs(path: str | Path, timebase: Timebase,
                endpoints: Mapping[str, ActuatorDescriptor] | None = None
                ) -> list[IngressRecord]:
    """Read a recorded-inputs file; with ``endpoints`` (``plan.endpoints``) each input's source,
    payload type and payload are validated against them too."""
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
        if endpoints is not None:
            _check_endpoint(spec, at, endpoints)
        try:
            text = json.dumps(dict(spec.payload), sort_keys=True, separators=(",", ":"),
                              allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise at.key("payload").fail(f"not representable as JSON: {exc}") from None
        records.append(IngressRecord(
            0, spec.source_id, spec.source_sequence, spec.payload_type, text, True, tick, n,
            "", 0))
    # The ingress accepts a source's inputs only with increasing source_sequence, in commit
    # (tick, file) order: say which input breaks that here, not while the run steps.
    last: dict[str, tuple[int, int]] = {}
    for record in sorted(records, key=lambda r: (r.commit_tick, r.acceptance_sequence)):
        previous = last.get(record.source_id)
        if previous is not None and record.source_sequence <= previous[0]:
            raise where.key(record.acceptance_sequence).key("source_sequence").fail(
                f"{record.source_sequence} does not increase for source "
                f"{s.short(record.source_id)} in commit order (inputs[{previous[1]}] has "
                f"{previous[0]})")
        last[record.source_id] = (record.source_sequence, record.acceptance_sequence)
    return records


def _check_endpoint(spec: InputSpec, at: s.Where, endpoints: Mapping[str, ActuatorDescriptor]
                    ) -> None:
    endpoint = endpoints.get(spec.source_id)
    if endpoint is None:
        raise at.key("source_id").fail(f"unknown source_id {s.short(spec.source_id)}; known "
                                       f"sources: {', '.join(endpoints) or 'none'}")
    if spec.payload_type != endpoint.payload_type:
        raise at.key("payload_type").fail(f"{s.short(spec.payload_type)} is not accepted by "
                                          f"{spec.source_id!r}; expected "
                                          f"{endpoint.payload_type!r}")
    try:
        endpoint.create().parse(spec.payload)
    except ValueError as exc:
        message = str(exc)
        field = _PAYLOAD_FIELD.match(message)
        where = at.key("payload")
        raise (where.key(field.group(1)) if field else where).fail(message) from None
