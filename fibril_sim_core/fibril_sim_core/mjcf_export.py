"""A plan's model as one MJCF file, for tools that cannot read parameter overlays.

``export_mjcf`` writes the MjSpec that ``SimulationBuilder`` compiles (the model with the
MuJoCo overlays applied and the components' additions) through ``MjSpec.to_xml``. MuJoCo writes
numbers with 6 significant digits, which would change a fitted damping of 0.05009247 into
0.0500925; every numeric attribute whose spec value rounds to what was written is rewritten at
full precision (an orientation given as Euler angles or axis-angle as the compiler resolves
it), so the file compiles to the plan's own compiled-model hash. That hash is checked before
the file is written: a model the exporter cannot reproduce exactly is an error, never a file
that silently differs.
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

import mujoco
import numpy as np

from . import provenance as prov
from .errors import FibrilError
from .manifest import SimulationManifest, load_manifest
from .overlays import OverlayParameter, ParameterOverlays
from .plan import SimulationBuilder

#: An element of a MuJoCo spec whose numbers the export rewrites (a body, joint, geom, ...).
SpecElement: TypeAlias = ("mujoco.MjsBody | mujoco.MjsJoint | mujoco.MjsGeom | mujoco.MjsSite"
                          " | mujoco.MjsActuator | mujoco.MjsSensor | mujoco.MjsTendon"
                          " | mujoco.MjsElement")

__all__ = ["MjcfExportError", "export_mjcf", "mjcf_text"]

# XML element tag → the MjSpec list its elements come from, in document order.
_LISTS = {"body": "bodies", "joint": "joints", "freejoint": "joints", "geom": "geoms",
          "site": "sites", "camera": "cameras", "light": "lights"}
_SECTIONS = {"actuator": "actuators", "sensor": "sensors", "tendon": "tendons",
             "equality": "equalities"}


class MjcfExportError(FibrilError):
    """The model cannot be written as an MJCF file that compiles to the same model."""


def mjcf_text(spec: mujoco.MjSpec, model_dir: Path, comment: str) -> str:
    """The MJCF of ``spec`` with full-precision numbers and ``comment`` on top; asset folders
    are made absolute (the file may be written anywhere)."""
    for attribute in ("meshdir", "texturedir"):
        folder = getattr(spec, attribute, "") or ""
        if not os.path.isabs(folder):
            setattr(spec, attribute, str((model_dir / folder).resolve()) + os.sep)
    root = ET.fromstring(spec.to_xml())
    _exact_numbers(spec, root)
    body = ET.tostring(root, encoding="unicode")
    safe = comment.replace("--", "- -")
    return f"<!-- {safe} -->\n{body}\n"


def export_mjcf(manifest: SimulationManifest | str | Path,
                overlays: ParameterOverlays | Sequence[OverlayParameter] | None, path: Path, *,
                comment: str,
                expected_sha256: str | None = None) -> str:
    """Write the plan's model of ``manifest`` + ``overlays`` to ``path`` (atomically); returns
    the file's compiled-model hash, which must equal ``expected_sha256`` when given."""
    if not isinstance(manifest, SimulationManifest):
        manifest = load_manifest(manifest)
    builder = SimulationBuilder()
    spec = builder.model_spec(manifest, overlays)
    reference = prov.compiled_model_sha256(builder.build(manifest, overlays).model)
    text = mjcf_text(spec, Path(manifest.model).parent, comment)
    try:
        exported = prov.compiled_model_sha256(mujoco.MjSpec.from_string(text).compile())
    except Exception as exc:  # noqa: BLE001 - MuJoCo raises plain ValueError
        raise MjcfExportError(f"--export-mjcf {str(path)!r}: the written model does not "
                              f"compile: {str(exc).splitlines()[0]}") from None
    for label, wanted in (("plan", reference), ("result", expected_sha256)):
        if wanted is not None and exported != wanted:
            raise MjcfExportError(
                f"--export-mjcf {str(path)!r}: the MJCF compiles to model hash "
                f"{exported[:16]}, the fitted {label}'s is {wanted[:16]}; this model holds "
                f"something MjSpec.to_xml does not write exactly, no file written")
    _write_atomic(path, text)
    return exported


def _exact_numbers(spec: mujoco.MjSpec, root: ET.Element) -> None:
    world = root.find("worldbody")
    if world is not None:
        for tag, attribute in _LISTS.items():
            items = [i for i in getattr(spec, attribute)
                     if not (tag == "body" and i.name == "world")]
            if tag in ("joint", "freejoint"):
                elements = [e for e in world.iter() if e.tag in ("joint", "freejoint")]
                if tag == "freejoint":
                    continue
            else:
                elements = [e for e in world.iter() if e.tag == tag]
            _match(spec, elements, items)
    for tag, attribute in _SECTIONS.items():
        section = root.find(tag)
        if section is not None:
            _match(spec, list(section), list(getattr(spec, attribute)))
    option = root.find("option")
    if option is not None:
        _rewrite(option, spec.option, None)


def _match(spec: mujoco.MjSpec, elements: Sequence[ET.Element], items: Sequence[SpecElement]
           ) -> None:
    if len(elements) != len(items):
        return  # not the same order: leave MuJoCo's text (the hash check decides)
    for element, item in zip(elements, items):
        name = element.get("name")
        if name is not None and name != getattr(item, "name", name):
            return
        _rewrite(element, item, spec)


def _rewrite(element: ET.Element, item: SpecElement | mujoco.MjOption,
             spec: mujoco.MjSpec | None) -> None:
    for key, text in list(element.attrib.items()):
        try:
            written = np.array([float(x) for x in text.split()], dtype=float)
        except ValueError:
            continue
        if key == "quat" and spec is not None and hasattr(item, "alt"):
            value = _orientation(spec, item)
        else:
            value = getattr(item, key, None)
        if value is None or isinstance(value, (str, bool, int)):
            continue  # integers and flags are written exactly
        if isinstance(value, np.ndarray) and value.dtype.kind != "f":
            continue
        try:
            exact = np.atleast_1d(np.asarray(value, dtype=float)).ravel()
        except (TypeError, ValueError):
            continue
        if exact.size < written.size or written.size == 0:
            continue
        exact = exact[:written.size]
        if np.allclose(exact, written, rtol=1e-5, atol=1e-12):
            element.set(key, " ".join(repr(float(v)) for v in exact))


def _orientation(spec: mujoco.MjSpec, item: SpecElement) -> object:
    """The quaternion the compiler makes of an element's orientation (Euler, axis-angle ...),
    as MuJoCo gives it (an array, or None when it cannot be resolved)."""
    alt = item.alt
    if alt.type == mujoco.mjtOrientation.mjORIENTATION_QUAT:
        return item.quat
    compiler = spec.compiler
    try:
        return spec.resolve_orientation(bool(compiler.degree), compiler.eulerseq, alt)
    except Exception:  # noqa: BLE001 - left as MuJoCo wrote it
        return None


def _write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.absolute().parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
