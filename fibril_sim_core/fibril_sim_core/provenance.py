"""What a plan was built from: hashes of manifest, model, assets, compiled model, parameters.

Comparing two runs needs more than numbers: it needs to know what was run.
"""

from __future__ import annotations

import hashlib
import platform
import xml.etree.ElementTree as ElementTree
from importlib import metadata
from pathlib import Path

import mujoco
import numpy as np


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def included_files(model_path: Path) -> list[Path]:
    """MJCF files pulled in by ``<include file=...>``, recursively (the model itself first)."""
    seen: list[Path] = []
    pending = [model_path.resolve()]
    while pending:
        path = pending.pop()
        if path in seen or not path.is_file():
            continue
        seen.append(path)
        try:
            root = ElementTree.parse(path).getroot()
        except ElementTree.ParseError:
            continue
        for element in root.iter("include"):
            name = element.get("file")
            if name:
                pending.append((path.parent / name).resolve())
    return seen


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


def compiled_model_sha256(model: mujoco.MjModel) -> str:
    buffer = np.zeros(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, buffer)
    return hashlib.sha256(buffer.tobytes()).hexdigest()


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_identity() -> dict[str, str]:
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
