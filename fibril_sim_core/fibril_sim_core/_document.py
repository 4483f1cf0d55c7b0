"""The types at the document boundary: what a YAML or JSON document holds once parsed, and
what we write as JSON.

A parsed value is a ``Node``: anything the safe loaders build (mappings, lists, strings,
numbers, booleans, null; dates, bytes or sets for explicit YAML tags). Nothing is assumed
about it until a ``schema`` helper has narrowed it with ``isinstance`` (``mapping``,
``string``, ``number``, ...), so it is ``object``, not ``Any``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

#: A value read from a YAML or JSON document, not checked yet.
Node: TypeAlias = object
#: A document's mapping once checked to be one (its values still unchecked).
NodeMap: TypeAlias = Mapping[str, Node]

#: A value we write as JSON (or YAML): what ``json.dumps`` takes without a ``default``.
JsonValue: TypeAlias = (
    "None | bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue]")
#: A JSON object we write.
JsonObject: TypeAlias = Mapping[str, JsonValue]
