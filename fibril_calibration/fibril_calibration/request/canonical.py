"""Canonical JSON of request parts: the document, episode and observation hashes are taken
over it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np


# --------------------------------------------------------------------------- hashing

def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_default,
                      allow_nan=False)


def canonical_sha256(value: object) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def _default(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return str(value)
