"""What a plan was built from: hashes of manifest, model, assets, compiled model, parameters.

Comparing two runs needs more than numbers: it needs to know what was run.
"""

from __future__ import annotations

import hashlib
import os
import platform
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import mujoco
import numpy as np

_V = TypeVar("_V")


class DeferredMapping(Mapping[str, _V]):
    """A read-only mapping whose values are computed on first access, all at once.

    A plan's provenance and trace layout are pure functions of immutable inputs (the compiled
    model, the overlays, the descriptors) but cost more than the rest of a build; a calibration
    builds one plan per candidate and reads them only for the fitted one.
    """

    def __init__(self, compute: Callable[[], Mapping[str, _V]]) -> None:
        self._compute: Callable[[], Mapping[str, _V]] | None = compute
        self._values: Mapping[str, _V] | None = None
        self._lock = threading.Lock()

    def _resolved(self) -> Mapping[str, _V]:
        values = self._values
        if values is None:
            with self._lock:
                if self._values is None:
                    assert self._compute is not None
                    self._values = dict(self._compute())
                    self._compute = None  # drop what the computation held
                values = self._values
        return values

    def __getitem__(self, key: str) -> _V:
        return self._resolved()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolved())

    def __len__(self) -> int:
        return len(self._resolved())

    def __repr__(self) -> str:
        return f"DeferredMapping({dict(self._resolved())!r})"

    def __reduce__(self) -> tuple[type[dict[str, _V]], tuple[dict[str, _V]]]:
        # Pickled or deep-copied as the plain mapping it stands for (the computation is not).
        return (dict, (dict(self._resolved()),))


def file_key(path: Path) -> tuple[str, int, int]:
    """Identity of a file's current content for caching: path, mtime, size."""
    stat = path.stat()
    return os.path.abspath(path), stat.st_mtime_ns, stat.st_size


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, remembered while the file is unchanged (calibration builds one plan
    per candidate from the same files)."""
    return _sha256_file(file_key(path))


@lru_cache(maxsize=1024)
def _sha256_file(key: tuple[str, int, int]) -> str:
    digest = hashlib.sha256()
    with Path(key[0]).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def included_files(model_path: Path) -> list[Path]:
    """MJCF files pulled in by ``<include file=...>``, recursively (the model itself first)."""
    return [Path(key[0]) for key in included_file_keys(model_path)]


def included_file_keys(model_path: Path) -> tuple[tuple[str, int, int], ...]:
    """``file_key`` of the model and of every file it includes, recursively (model first).

    The include tree is remembered per model file and reused while every file in it keeps its
    key (one stat per file), so an include added to a nested file is seen at once."""
    first = file_key(model_path)
    cached = _TREES.get(first)
    if cached is not None:
        try:
            if all(file_key(Path(key[0])) == key for key in cached[1:]):
                return cached
        except OSError:
            pass
    keys: list[tuple[str, int, int]] = []
    seen: set[str] = set()
    pending = [Path(first[0])]
    while pending:
        path = pending.pop()
        name = str(path)
        if name in seen or not path.is_file():
            continue
        seen.add(name)
        try:
            key = file_key(path)
        except OSError:  # removed meanwhile
            continue
        keys.append(key)
        pending.extend(reversed(_includes(key)))
    tree = tuple(keys)
    if len(_TREES) >= 256:
        _TREES.pop(next(iter(_TREES)))
    _TREES[first] = tree
    return tree


_TREES: dict[tuple[str, int, int], tuple[tuple[str, int, int], ...]] = {}


@lru_cache(maxsize=1024)
def _includes(key: tuple[str, int, int]) -> tuple[Path, ...]:
    """The files one MJCF file includes directly (resolved against its folder)."""
    path = Path(key[0])
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError):
        return ()
    return tuple((path.parent / name).resolve()
                 for element in root.iter("include") if (name := element.get("file")))


def asset_files(spec: mujoco.MjSpec, model_path: Path) -> list[Path]:
    """Files the compiled model reads: meshes, textures, height fields, skins."""
    base = model_path.parent
    meshdir = base / (spec.meshdir or "")
    texturedir = base / (spec.texturedir or "")
    files: list[Path] = []
    for mesh in spec.meshes:
        if mesh.file:
            files.append(meshdir / mesh.file)
    for texture in spec.textures:
        if texture.file:
            files.append(texturedir / texture.file)
        for name in getattr(texture, "cubefiles", []) or []:
            if name:
                files.append(texturedir / name)
    for hfield in spec.hfields:
        if hfield.file:
            files.append(base / hfield.file)
    for skin in spec.skins:
        if skin.file:
            files.append(meshdir / skin.file)
    return [path.resolve() for path in files if path.is_file()]


def saved_model(model: mujoco.MjModel) -> bytes:
    """The model as MuJoCo saves it (MJB): every field, byte for byte."""
    buffer = np.zeros(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, buffer)
    return buffer.tobytes()


def compiled_model_sha256(model: mujoco.MjModel) -> str:
    return hashlib.sha256(saved_model(model)).hexdigest()


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_identity() -> dict[str, str]:
    return dict(_build_identity())


@lru_cache(maxsize=1)
def _build_identity() -> dict[str, str]:
    return {
        "mujoco": mujoco.__version__,
        "fibril_sim_core": package_version("fibril_sim_core"),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)
