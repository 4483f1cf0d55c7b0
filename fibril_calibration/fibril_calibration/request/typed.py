"""The calibration request as typed Python objects, for notebooks: what a YAML request says,
built from arrays or values, written out as a reviewable file (``to_yaml``) and resolved by the
same loader as a file (``resolve``), so both give the same request and the same request hash.

Each object mirrors one part of the schema-3.1 document and keeps the values it was given as
they are (an ``int`` stays an ``int``: the request hash is taken over the document). A part the
document can hold but Python code rarely builds (sections such as ``optimizer`` or ``fit``, an
episode's ``initial_state`` entries, a recording ``sources`` block) is a plain mapping in the
document's own form. Nothing is checked here: ``resolve`` checks everything, as for a file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar, Unpack, cast

import numpy.typing as npt

from fibril_sim_core import schema as s

from .._atomic import write_atomic
from .._json import JsonObject, JsonValue, json_list
from ..errors import CalibrationRequestError
from .document import SCHEMA_MAJOR, SCHEMA_MINORS, parse_calibration_request

if TYPE_CHECKING:
    from ..model.decoders import CalibrationDeviceOutputDecoderRegistry
    from .document import CalibrationRequest as ResolvedRequest
    from .document import CandidateFactory

MOTOR_COMMAND = "fibril_sim/motor_command/v1"
_NS = 1_000_000_000
_P = TypeVar("_P", bound="_Part")


def _document(obj: _Part, *, skip: Iterable[str] = ()) -> JsonObject:
    """The set fields of a typed part as document keys (None: not in the document)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)
            if f.name not in skip and getattr(obj, f.name) is not None}


def _plain(value: object) -> JsonValue:
    """Tuples as lists, mappings as dicts: the document's own (YAML) form. Parts hold
    document values only (a number, string, bool or None at the leaves)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return cast("JsonValue", value)


def _frozen(value: JsonValue) -> JsonValue:
    """Lists as tuples (hashable-looking, immutable parts); mappings stay mappings."""
    if isinstance(value, Mapping):
        return {k: _frozen(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _typed(cls: type[_P], body: object, where: s.Where) -> _P:
    """A typed part from its document mapping; a key the type has no field for is an error."""
    body = s.mapping(body, where)
    names = {f.name for f in fields(cls) if f.name != "commands"}
    unknown = sorted(set(body) - names)
    if unknown:
        raise where.key(str(unknown[0])).fail(f"unknown key {unknown[0]!r}; expected one of "
                                              f"{', '.join(sorted(names))}")
    return cls(**{k: _frozen(v) for k, v in body.items()})


@dataclass(frozen=True)
class _Part:
    """Lists given to a part are kept as tuples, so parts built from Python lists equal those
    read from a document. (A dataclass without fields: the parts' base.)"""

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _frozen(getattr(self, f.name)))


# --------------------------------------------------------------------------- parameters

@dataclass(frozen=True)
class Parameter(_Part):
    """One calibrated parameter (``parameters[i]``). ``target`` is ``"mujoco:<kind>:<object>"``,
    ``"component:<id>:<key>"`` or their mapping form."""

    id: str
    lower: float
    upper: float
    initial: float
    target: str | Mapping[str, JsonValue] | None = None
    targets: Sequence[str | Mapping[str, JsonValue]] | None = None
    unit: str | None = None
    provenance: str | None = None
    nominal: float | None = None
    parameterization: str | None = None
    coordinate_scale: float | None = None
    prior: Mapping[str, JsonValue] | None = None
    description: str | None = None

    def to_document(self) -> JsonObject:
        return _document(self)


@dataclass(frozen=True)
class Observation(_Part):
    """What is read from the simulation and compared (``observations[i]``): ``source`` is
    ``sensor``, ``joint_position``, ``joint_velocity``, ``body_position``, ``device_output``..."""

    id: str
    source: str
    name: str | None = None
    indices: Sequence[int | str] | None = None
    sample_type: str | None = None
    sample_every_steps: int | None = None
    timestamp: str | None = None

    def to_document(self) -> JsonObject:
        return _document(self)


# --------------------------------------------------------------------------- episodes

@dataclass(frozen=True)
class Signal(_Part):
    """The reference samples of one observation in one episode: inline ``samples``
    (``[{time_ns, values}]``, see ``from_arrays``), a ``samples_file``, a trace selector
    (``samples_from``) or, in a recording-source episode, a ``stream`` (``column``, ``topic``,
    ``field``...)."""

    alignment: str = "exact"
    residual_scale: float | None = None
    residual_scales: Sequence[float] | None = None
    scale_semantics: str | None = None
    samples: Sequence[Mapping[str, JsonValue]] | None = None
    samples_file: str | None = None
    samples_from: Mapping[str, JsonValue] | None = None
    stream: Mapping[str, JsonValue] | None = None

    @classmethod
    def from_arrays(cls, times: npt.ArrayLike, values: npt.ArrayLike, *,
                    residual_scale: float | None = None,
                    alignment: str = "exact", scale_semantics: str | None = None) -> Signal:
        """Samples from arrays: ``times`` in seconds (n,), ``values`` (n,) or (n, dimension)."""
        return cls(alignment=alignment, residual_scale=residual_scale,
                   scale_semantics=scale_semantics, samples=_samples(times, values))

    def to_document(self) -> JsonObject:
        out = _document(self, skip=("stream",))
        out.update({k: _plain(v) for k, v in (self.stream or {}).items()})
        return out


def _samples(times: npt.ArrayLike, values: npt.ArrayLike) -> tuple[JsonObject, ...]:
    import numpy as np

    t = np.asarray(times, dtype=np.float64).reshape(-1)
    v = np.asarray(values, dtype=np.float64)
    v = v.reshape(len(t), -1) if v.size else v.reshape(len(t), 0)
    if v.shape[0] != t.shape[0]:
        raise ValueError(f"{t.shape[0]} times but {v.shape[0]} rows of values")
    return tuple({"time_ns": _ns(time), "values": [float(x) for x in row]}
                 for time, row in zip(t, v))


def _ns(seconds: float) -> int:
    if not math.isfinite(seconds):
        raise ValueError(f"time {seconds!r} is not a finite number of seconds")
    return int(round(seconds * _NS))


@dataclass(frozen=True)
class Commands(_Part):
    """Commands sent to one actuator endpoint (a ``fibril_sim/motor`` component's
    ``<id>/command``): ``values[i]`` in ``mode`` (``torque``, ``voltage``, ``duty``, ...) from
    ``times[i]`` seconds, committed at the first physics tick at or after it."""

    endpoint: str
    times: Sequence[float]
    values: Sequence[float]
    mode: str | Sequence[str]

    def records(self, timestep_ns: int, *, first_acceptance: int = 0) -> list[JsonObject]:
        """The recorded inputs (``recorded_inputs[i]``) on a model stepping every
        ``timestep_ns``."""
        modes = [self.mode] * len(self.times) if isinstance(self.mode, str) else list(self.mode)
        if not len(self.times) == len(self.values) == len(modes):
            raise ValueError(f"endpoint {self.endpoint!r}: {len(self.times)} times, "
                             f"{len(self.values)} values, {len(modes)} modes")
        out: list[JsonObject] = []
        for i, (time, value, mode) in enumerate(zip(self.times, self.values, modes)):
            tick = -(-_ns(float(time)) // timestep_ns)  # ceil: the first tick at or after it
            out.append({"source_id": self.endpoint, "source_sequence": i + 1,
                        "payload_type": MOTOR_COMMAND,
                        "payload_json": _json({"mode": mode, "value": float(value)}),
                        "commit_tick": max(0, tick),
                        "acceptance_sequence": first_acceptance + i})
        return out


def _json(payload: Mapping[str, JsonValue]) -> str:
    import json

    return json.dumps(payload, separators=(", ", ": "))


class _Column(Protocol):
    def to_numpy(self) -> npt.ArrayLike: ...


class DataFrameLike(Protocol):
    """What ``Episode.from_dataframe`` reads of a pandas DataFrame (pandas is not a
    dependency): a column, or several, by name."""

    def __getitem__(self, key: str | list[str], /) -> _Column: ...


class ArrayOptions(TypedDict, total=False):
    """``Episode.from_arrays``' keyword options that ``from_dataframe`` passes on."""

    initial_state: Sequence[Mapping[str, JsonValue]] | None
    residual_scales: Mapping[str, float] | float | None
    alignment: str
    scale_semantics: str | None
    episode_seed: int | None
    weight: float | None
    horizon_steps: int | None


@dataclass(frozen=True)
class Episode(_Part):
    """One recorded episode (``training[i]`` / ``validation[i]``): its signals by observation
    id, and its inputs as ``commands`` (arrays), ``recorded_inputs`` (the document's records)
    or a file, a trace ``recording``, or a recording ``source`` with ``inputs`` streams."""

    id: str
    signals: Mapping[str, Signal]
    episode_seed: int | None = None
    weight: float | None = None
    horizon_steps: int | None = None
    initial_state: Sequence[Mapping[str, JsonValue]] | None = None
    initial_state_fit: Sequence[str] | None = None
    commands: Sequence[Commands] = ()
    recorded_inputs: Sequence[Mapping[str, JsonValue]] | None = None
    recorded_inputs_file: str | None = None
    recording: str | None = None
    recording_episode: int | None = None
    source: str | None = None
    windows: Mapping[str, JsonValue] | None = None
    inputs: Sequence[Mapping[str, JsonValue]] | None = None
    description: str | None = None

    @classmethod
    def from_arrays(cls, id: str, times: npt.ArrayLike | None = None, *,
                    inputs: Mapping[str, tuple[object, ...]] | None = None,
                    signals: Mapping[str, object] | None = None,
                    initial_state: Sequence[Mapping[str, JsonValue]] | None = None,
                    residual_scales: Mapping[str, float] | float | None = None,
                    alignment: str = "exact", scale_semantics: str | None = None,
                    episode_seed: int | None = None, weight: float | None = None,
                    horizon_steps: int | None = None) -> Episode:
        """An episode from arrays, times in seconds from the episode start.

        ``inputs={endpoint: (times, values, mode)}``; ``signals={observation: (times, values)}``;
        either may leave its times out (``values`` or ``(values, mode)``) when ``times`` gives
        the shared time vector. ``residual_scales`` is one scale or one per observation."""
        def timed(item: object, size: int) -> tuple[Any, ...]:  # arrays: checked by numpy
            parts = tuple(item) if isinstance(item, tuple) else (item,)
            if len(parts) == size:
                return parts
            if len(parts) == size - 1 and times is not None:
                return (times, *parts)
            names = "times, values, mode" if size == 3 else "times, values"
            raise ValueError(f"expected ({names}), or the same without times when the "
                             f"episode's times are given; got {len(parts)} items")

        commands = []
        for endpoint, item in (inputs or {}).items():
            t, values, mode = timed(item, 3)
            commands.append(Commands(endpoint, tuple(float(x) for x in _flat(t)),
                                     tuple(float(x) for x in _flat(values)),
                                     mode if isinstance(mode, str) else tuple(mode)))
        built = {}
        for observation, given in (signals or {}).items():
            t, values = timed(given, 2)
            scale = (residual_scales.get(observation) if isinstance(residual_scales, Mapping)
                     else residual_scales)
            built[observation] = Signal.from_arrays(t, values, residual_scale=scale,
                                                    alignment=alignment,
                                                    scale_semantics=scale_semantics)
        return cls(id=id, signals=built, episode_seed=episode_seed, weight=weight,
                   horizon_steps=horizon_steps,
                   initial_state=None if initial_state is None else tuple(initial_state),
                   commands=tuple(commands))

    @classmethod
    def from_dataframe(cls, id: str, frame: DataFrameLike, *, time: str = "t",
                       inputs: Mapping[str, tuple[str, str]] | None = None,
                       signals: Mapping[str, str | Sequence[str]] | None = None,
                       **options: Unpack[ArrayOptions]) -> Episode:
        """An episode from a pandas DataFrame: ``time`` names its seconds column,
        ``inputs={endpoint: (column, mode)}``, ``signals={observation: column or columns}``;
        the other options as in ``from_arrays``."""
        times = frame[time].to_numpy()
        return cls.from_arrays(
            id, times,
            inputs={e: (frame[c].to_numpy(), mode) for e, (c, mode) in (inputs or {}).items()},
            signals={o: frame[[c] if isinstance(c, str) else list(c)].to_numpy()
                     for o, c in (signals or {}).items()},
            **options)

    def to_document(self, timestep_ns: int | None = None) -> JsonObject:
        """The episode's document; ``commands`` become ``recorded_inputs`` on the model's
        ``timestep_ns`` grid."""
        out = _document(self, skip=("signals", "commands"))
        out["signals"] = {k: v.to_document() for k, v in self.signals.items()}
        if self.commands:
            if timestep_ns is None:
                raise ValueError(f"episode {self.id!r}: commands need the model's timestep")
            records = list(json_list(out.get("recorded_inputs", []), "recorded_inputs"))
            for command in self.commands:
                records += command.records(timestep_ns, first_acceptance=len(records))
            out["recorded_inputs"] = records
        return out


def _flat(values: npt.ArrayLike) -> list[float]:
    import numpy as np

    return list(np.asarray(values).reshape(-1))


# --------------------------------------------------------------------------- the request

_PATH_KEYS = ("samples_file", "recorded_inputs_file", "recording", "path", "sidecar")


@dataclass(frozen=True)
class CalibrationRequest(_Part):
    """A calibration request built in Python. ``base`` is the folder its relative paths
    (``manifest``, ``samples_file``...) resolve against (default: the current folder)."""

    manifest: str | Path
    parameters: Sequence[Parameter]
    observations: Sequence[Observation]
    training: Sequence[Episode]
    validation: Sequence[Episode] = ()
    sources: Mapping[str, JsonValue] | None = None
    optimizer: Mapping[str, JsonValue] | None = None
    objective: Mapping[str, JsonValue] | None = None
    execution: Mapping[str, JsonValue] | None = None
    analysis: Mapping[str, JsonValue] | None = None
    fit: Mapping[str, JsonValue] | None = None
    context: Mapping[str, JsonValue] | None = None
    base: Path | None = field(default=None, compare=False)
    schema_version: tuple[int, int] = (SCHEMA_MAJOR, SCHEMA_MINORS[-1])

    @property
    def folder(self) -> Path:
        return Path(self.base if self.base is not None else Path.cwd()).resolve()

    def to_document(self) -> JsonObject:
        """The schema-3.1 document (what a YAML file of this request holds)."""
        timestep = (_timestep_ns(self.folder / self.manifest)
                    if any(e.commands for e in (*self.training, *self.validation)) else None)
        major, minor = self.schema_version
        doc: JsonObject = {
            "schema_version": {"major": major, "minor": minor},
            "manifest": str(self.manifest),
            "parameters": [p.to_document() for p in self.parameters],
            "observations": [o.to_document() for o in self.observations],
            "training": [e.to_document(timestep) for e in self.training],
        }
        if self.validation:
            doc["validation"] = [e.to_document(timestep) for e in self.validation]
        for key in ("sources", "optimizer", "objective", "execution", "analysis", "fit",
                    "context"):
            value = getattr(self, key)
            if value is not None:
                doc[key] = _plain(value)
        return doc

    def resolve(self, *, decoders: CalibrationDeviceOutputDecoderRegistry | None = None,
                candidate_builder: CandidateFactory | None = None) -> ResolvedRequest:
        """Validate and resolve as the YAML loader does (``parse_calibration_request``);
        errors name ``<folder>/<python request>`` and the key path."""
        return parse_calibration_request(self.to_document(), self.folder / "<python request>",
                                         decoders=decoders, candidate_builder=candidate_builder)

    def to_yaml(self, path: str | Path) -> Path:
        """Write the request as a YAML file (relative paths rewritten for the file's folder);
        ``fibril_sim calibrate <path>`` then runs the same calibration."""
        import yaml

        target = Path(path).resolve()
        doc = _moved(self.to_document(), self.folder, target.parent)
        write_atomic(target, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True,
                                            width=100))
        return target

    @classmethod
    def from_document(cls, document: object, base: str | Path, *,
                      file: str = "<python request>") -> CalibrationRequest:
        """The typed request of a parsed document (unknown keys are errors naming them)."""
        folder = Path(base).resolve()
        root = s.Where(str(folder / file), "", CalibrationRequestError)
        doc = s.mapping(document, root)
        known = {f.name for f in fields(cls) if f.name not in ("base",)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise root.key(str(unknown[0])).fail(f"unknown key {unknown[0]!r}")
        version = s.mapping(doc.get("schema_version", {}), root.key("schema_version"))

        def episodes(key: str) -> tuple[Episode, ...]:
            out = []
            for i, raw in enumerate(s.sequence(doc.get(key, []), root.key(key))):
                at = root.key(key).key(i)
                body = dict(s.mapping(raw, at))
                signals = s.mapping(body.pop("signals", {}), at.key("signals"))
                episode = _typed(Episode, {**body, "signals": {}}, at)
                typed = {}
                for name, sig in signals.items():
                    sig_body = dict(s.mapping(sig, at.key("signals").key(name)))
                    own = {f.name for f in fields(Signal)} - {"stream"}
                    stream = {k: sig_body.pop(k) for k in list(sig_body) if k not in own}
                    typed[name] = _typed(Signal, {**sig_body, **({"stream": stream}
                                                                if stream else {})},
                                         at.key("signals").key(name))
                out.append(replace(episode, signals=typed))
            return tuple(out)

        return cls(
            manifest=s.string(doc.get("manifest"), root.key("manifest")),
            parameters=tuple(_typed(Parameter, p, root.key("parameters").key(i))
                             for i, p in enumerate(s.sequence(doc.get("parameters", []),
                                                              root.key("parameters")))),
            observations=tuple(_typed(Observation, o, root.key("observations").key(i))
                               for i, o in enumerate(s.sequence(doc.get("observations", []),
                                                                root.key("observations")))),
            training=episodes("training"), validation=episodes("validation"),
            # sections as the document gives them: checked when the request is resolved
            **{k: cast("Mapping[str, JsonValue]", _frozen(doc[k]))
               for k in ("sources", "optimizer", "objective", "execution", "analysis", "fit",
                         "context") if k in doc},
            base=folder,
            # as the document gives it: checked when the request is resolved
            schema_version=cast("tuple[int, int]", (version.get("major"), version.get("minor"))))

    @classmethod
    def from_yaml(cls, path: str | Path) -> CalibrationRequest:
        """The typed request of a YAML request file (relative paths stay relative to it)."""
        file = Path(path).resolve()
        return cls.from_document(s.load_yaml(file, CalibrationRequestError), file.parent,
                                 file=file.name)


def _timestep_ns(manifest: Path) -> int:
    """The physics timestep of a manifest's model (MJCF ``<option timestep>``), from the spec
    alone: no compile."""
    import mujoco

    from fibril_sim_core.manifest import load_manifest

    spec = mujoco.MjSpec.from_file(str(load_manifest(manifest).model))
    return int(round(spec.option.timestep * _NS))


def _moved(doc: JsonValue, old: Path, new: Path, key: str | None = None) -> JsonValue:
    """``doc`` with every relative path (``manifest`` and the path keys of episodes, signals
    and sources) rewritten from folder ``old`` to folder ``new``."""
    if old == new:
        return doc
    if isinstance(doc, Mapping):
        return {k: (_relocated(v, old, new) if k in (*_PATH_KEYS, "manifest")
                    and isinstance(v, str) else _moved(v, old, new, k))
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [_moved(v, old, new, key) for v in doc]
    return doc


def _relocated(path: str, old: Path, new: Path) -> str:
    """Relative to ``new`` when the folders share more than the root, else absolute."""
    if Path(path).is_absolute():
        return path
    if os.path.commonpath([old, new]) == old.anchor:
        return str(old / path)
    return os.path.relpath(old / path, new)
