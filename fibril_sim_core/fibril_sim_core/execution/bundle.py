"""The files a run is built from, shipped by content: workers never read the submitter's paths.

A bundle keeps each file's path relative to the files' common folder and its content under its
SHA-256. A worker writes it once into a folder named after the bundle's digest (the same layout,
so documents that name each other by relative path resolve as on the submitting machine) and
builds from there; ``remap`` then puts the submitter's paths back into what the run reports.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import mujoco

from ..manifest import load_manifest
from ..provenance import asset_files, included_files
from .backend import ExecutionError

_T = TypeVar("_T")


@dataclass(frozen=True)
class Bundle:
    """``files``: (path relative to ``root``, sha256) in a fixed order; ``blobs``: the
    contents by sha256; ``digest`` names the whole bundle."""

    root: str
    files: tuple[tuple[str, str], ...]
    blobs: Mapping[str, bytes]
    digest: str

    def relative(self, path: Path) -> str:
        return os.path.relpath(Path(path).resolve(), self.root)

    def materialize(self, cache: Path) -> Path:
        """The bundle's folder under ``cache`` (written on first use; each blob's hash is
        checked, so a corrupted transfer is an error, never a different model)."""
        target = cache / self.digest
        if target.is_dir():
            return target
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.digest[:16]}.", dir=cache))
        try:
            for relative, sha in self.files:
                content = self.blobs[sha]
                if hashlib.sha256(content).hexdigest() != sha:
                    raise ExecutionError(f"{relative}: content does not match its sha256 {sha}")
                path = staging / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
            try:
                os.rename(staging, target)
            except OSError:  # another task on this machine wrote it first: same content
                if not target.is_dir():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target


def collect_bundle(paths: Iterable[Path]) -> Bundle:
    """A bundle of ``paths`` (duplicates and order do not matter)."""
    resolved = sorted({Path(p).resolve() for p in paths})
    if not resolved:
        raise ExecutionError("nothing to ship: no files")
    root = os.path.commonpath([str(p.parent) for p in resolved])
    files: list[tuple[str, str]] = []
    blobs: dict[str, bytes] = {}
    for path in resolved:
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise ExecutionError(f"{path}: cannot read: {exc.strerror or exc}") from None
        sha = hashlib.sha256(content).hexdigest()
        blobs[sha] = content
        files.append((os.path.relpath(path, root), sha))
    digest = hashlib.sha256("\n".join(f"{sha} {rel}" for rel, sha in files).encode()
                            ).hexdigest()
    return Bundle(root, tuple(files), blobs, digest)


def manifest_files(manifest: Path) -> list[Path]:
    """Every file a plan of ``manifest`` is built from: the manifest, its MJCF model with the
    files it includes and the assets it reads (meshes, textures, ...), its parameter
    overlays."""
    loaded = load_manifest(manifest)
    return [loaded.path, *loaded.parameter_overlays, *included_files(loaded.model),
            *asset_files(mujoco.MjSpec.from_file(str(loaded.model)), loaded.model)]


def remap(value: _T, old: str, new: str) -> _T:
    """``value`` (JSON-like) with every occurrence of the folder ``old`` in its strings and keys
    replaced by ``new``: a worker's copy of the bundle reported as the submitter's files (of
    the same shape: a record stays a record)."""
    return cast("_T", _remap(value, old, new))


def _remap(value: object, old: str, new: str) -> object:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, Mapping):
        return {_remap(k, old, new): _remap(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_remap(v, old, new) for v in value]
    if isinstance(value, tuple):
        return tuple(_remap(v, old, new) for v in value)
    return value
