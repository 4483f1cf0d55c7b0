"""The request's ``parameters``: bounds, parameterization, prior and typed targets (overlay
targets, or a signal's ``time_offset``), checked on the candidate plans built at the initial
values and at both bounds."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import mujoco

from fibril_sim_core import schema as s
from fibril_sim_core.errors import FibrilError
from fibril_sim_core.overlays import OverlayError, OverlayTarget, parse_target, parse_value

from ..model.candidate_plan import CandidatePlanBuilderProtocol
from ..model.observations import ObservationSpec
from ..parameters import (PARAMETERIZATIONS, CalibrationParameter, Parameterization, Prior,
                          parameter_problems)
from ..recordings.time_offsets import TimeOffsetTarget
from .episode_specs import EpisodeSpec

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan

__all__ = ["bind_time_offsets", "check_activation_states", "parse_parameters", "probe_plans"]

#: A parameter's target: a typed overlay target, or the time offset of an observation or a
#: named source.
ParameterTarget = OverlayTarget | TimeOffsetTarget

def parse_parameters(value: object, where: s.Where) -> tuple[CalibrationParameter, ...]:
    """``parameters``: at least one, unique ids, one parameter per target."""
    items = s.sequence(value, where)
    if not items:
        raise where.fail("expected at least one parameter to fit")
    out: list[CalibrationParameter] = []
    seen: dict[str, str] = {}
    owners: dict[str, str] = {}
    for i, item in enumerate(items):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("id", "lower", "upper", "initial"),
               optional=("unit", "provenance", "nominal", "parameterization",
                         "coordinate_scale", "prior", "target", "targets", "description"))
        pid = s.string(body["id"], at.key("id"))
        if pid in seen:
            raise at.key("id").fail(f"duplicate parameter id {pid!r} (first declared at "
                                    f"{seen[pid]})")
        if pid == "__prior__":
            raise at.key("id").fail("the id '__prior__' is reserved for prior residuals")
        seen[pid] = at.path
        lower = s.number(body["lower"], at.key("lower"))
        upper = s.number(body["upper"], at.key("upper"))
        if not lower < upper:
            raise at.key("upper").fail(f"expected upper > lower ({lower:g}), got {upper:g}")
        initial = s.number(body["initial"], at.key("initial"))
        if not lower <= initial <= upper:
            raise at.key("initial").fail(f"initial {initial:g} lies outside the bounds "
                                         f"[{lower:g}, {upper:g}]")
        nominal = s.number(body["nominal"], at.key("nominal")) if "nominal" in body else None
        parameterization = s.string(body.get("parameterization", "linear"),
                                    at.key("parameterization"))
        if parameterization not in PARAMETERIZATIONS:
            raise at.key("parameterization").fail(
                f"unknown parameterization {parameterization!r}; expected one of "
                f"{', '.join(PARAMETERIZATIONS)}")
        if parameterization == "log_positive":
            if lower <= 0:
                raise at.key("lower").fail(f"log_positive searches log(value); lower must be "
                                           f"> 0, got {lower:g}")
            if nominal is not None and nominal <= 0:
                raise at.key("nominal").fail(f"log_positive parameters need a positive "
                                             f"nominal, got {nominal:g}")
        scale = None
        if "coordinate_scale" in body:
            scale = s.number(body["coordinate_scale"], at.key("coordinate_scale"),
                             positive=True)
        prior = None
        if "prior" in body:
            pw = at.key("prior")
            raw = s.mapping(body["prior"], pw)
            s.keys(raw, pw, required=("mean", "standard_deviation"))
            prior = Prior(s.number(raw["mean"], pw.key("mean")),
                          s.number(raw["standard_deviation"], pw.key("standard_deviation"),
                                   positive=True))
        unit = s.string(body["unit"], at.key("unit")) if "unit" in body else None
        provenance = (s.string(body["provenance"], at.key("provenance"))
                      if "provenance" in body else None)
        if "description" in body:
            s.string(body["description"], at.key("description"))
        targets = _targets(body, at)
        for key, number in (("lower", lower), ("upper", upper), ("initial", initial)):
            try:
                # a time-offset target has the ``key`` parse_value names
                parse_value(number, cast("Sequence[OverlayTarget]", targets), at.key(key), pid)
            except OverlayError as exc:  # pragma: no cover - parse_value raises where.error
                raise at.key(key).fail(str(exc)) from None
        for target in targets:
            other = owners.get(target.key)
            if other is not None:
                raise at.key("target").fail(f"{target.key} is already bound by parameter "
                                            f"{other!r}; one field takes one parameter")
            owners[target.key] = pid
        parameter = CalibrationParameter(
            id=pid, lower=lower, upper=upper, initial=initial, nominal=nominal, unit=unit,
            provenance=provenance,
            parameterization=cast(Parameterization, parameterization),  # checked above
            coordinate_scale=scale, prior=prior, targets=targets)
        problems = parameter_problems(parameter)
        if problems:
            raise at.fail("; ".join(problems))
        out.append(parameter)
    return tuple(out)


def _targets(body: Mapping[str, object], at: s.Where) -> tuple[ParameterTarget, ...]:
    if ("target" in body) == ("targets" in body):
        raise at.fail("give exactly one of 'target' (one typed target) or 'targets' (a list)")
    if "target" in body:
        return (_target(body["target"], at.key("target")),)
    raw = s.sequence(body["targets"], at.key("targets"))
    if not raw:
        raise at.key("targets").fail("expected at least one target")
    targets = tuple(_target(t, at.key("targets").key(i)) for i, t in enumerate(raw))
    kinds = {isinstance(t, TimeOffsetTarget) for t in targets}
    if len(kinds) > 1:
        raise at.key("targets").fail("a time_offset target cannot share a parameter with "
                                     "model targets")
    keys = [t.key for t in targets]
    if len(set(keys)) != len(keys):
        raise at.key("targets").fail("the same target is listed twice")
    return targets


def _target(raw: object, where: s.Where) -> ParameterTarget:
    """A typed overlay target, or ``{type: time_offset, observation: id}`` / ``{type:
    time_offset, source: name}`` (see ``time_offsets``)."""
    if isinstance(raw, Mapping) and raw.get("type") == "time_offset":
        if "source" in raw:
            s.keys(raw, where, required=("type", "source"))
            return TimeOffsetTarget(source=s.string(raw["source"], where.key("source")))
        s.keys(raw, where, required=("type", "observation"))
        return TimeOffsetTarget(s.string(raw["observation"], where.key("observation")))
    return parse_target(raw, where)


def bind_time_offsets(parameters: Sequence[CalibrationParameter],
                  observations: Mapping[str, ObservationSpec],
                  training: tuple[EpisodeSpec, ...], validation: tuple[EpisodeSpec, ...],
                  root: s.Where) -> tuple[tuple[EpisodeSpec, ...], tuple[EpisodeSpec, ...]]:
    """Bind time-offset parameters to their observations' signals, or to the signals read from
    their source: linear alignment only, and every sample still at or after time 0 at the upper
    bound. A source's offset is refused when that source feeds recorded inputs, when no
    signal is read from it, and on a signal whose observation has an offset too."""
    bounds: dict[str, tuple[float, float]] = {}
    by_source: dict[str, s.Where] = {}
    for i, parameter in enumerate(parameters):
        for target in parameter.targets:
            if isinstance(target, TimeOffsetTarget):
                at = root.key("parameters").key(i)
                if target.source is not None:
                    by_source[target.source] = at
                elif target.observation not in observations:
                    raise at.fail(f"time_offset names unknown observation "
                                  f"{target.observation!r}; declared: "
                                  f"{', '.join(observations)}")
                # Two offsets on one key never get here: ``parse_parameters`` refuses a second
                # parameter bound to the same target key (time_offset:<observation or source>).
                bounds[target.offset_key] = (parameter.lower * 1e9, parameter.upper * 1e9)
    if not bounds:
        return training, validation
    episodes = (*training, *validation)
    for name, at in by_source.items():
        feeding = [e.id for e in episodes if name in (e.source or {}).get("input_sources", ())]
        if feeding:
            raise at.fail(f"time_offset source {name!r} feeds recorded inputs (episode "
                          f"{feeding[0]!r}); its offset cannot be fitted (the inputs are cut "
                          f"once): fit the offset of the source its signals come from")
        if not any(sig.source == name for e in episodes for sig in e.signals):
            raise at.fail(f"time_offset source {name!r}: no episode compares a signal read "
                          f"from it (a name in sources, given as an episode's or a signal's "
                          f"source)")

    def bind(episode: EpisodeSpec) -> EpisodeSpec:
        signals = []
        for signal in episode.signals:
            key = signal.observation
            found = bounds.get(key)
            if signal.source is not None and f"source:{signal.source}" in bounds:
                if found is not None:
                    raise root.fail(f"{episode.scope} episode {episode.id!r} signal "
                                    f"{signal.observation!r} has two calibrated time offsets "
                                    f"(its observation's and its source {signal.source!r}'s); "
                                    f"fit one")
                key = f"source:{signal.source}"
                found = bounds[key]
            if found is not None:
                label = f"{episode.scope} episode {episode.id!r} signal {signal.observation!r}"
                if signal.alignment != "linear":
                    raise root.fail(f"{label}: a calibrated time_offset interpolates; the "
                                    f"signal needs alignment: linear, not {signal.alignment}")
                first = float(signal.times_ns[0])
                if first - found[1] < 0:
                    raise root.fail(f"{label}: its first sample at {first / 1e9:g} s would be "
                                    f"compared with the simulation before episode time 0 at "
                                    f"the time_offset upper bound {found[1] / 1e9:g} s; drop "
                                    f"the samples before {found[1] / 1e9:g} s or lower the "
                                    f"bound")
                signal = dataclasses.replace(signal, time_offset_bounds_ns=found,
                                             time_offset_key=key)
            signals.append(signal)
        return dataclasses.replace(episode, signals=tuple(signals))

    return tuple(bind(e) for e in training), tuple(bind(e) for e in validation)


def probe_plans(candidates: CandidatePlanBuilderProtocol,
                parameters: Sequence[CalibrationParameter],
                where: s.Where) -> dict[str, SimulationPlan]:
    """Build the nominal plan at the initial values; probe the lower and upper bounds too."""
    probes = (("initial", [p.initial for p in parameters]),
              ("lower", [p.lower for p in parameters]),
              ("upper", [p.upper for p in parameters]))
    plans: dict[str, SimulationPlan] = {}
    for label, values in probes:
        try:
            plans[label] = candidates.build(dict(zip((p.id for p in parameters), values)))
        except FibrilError as exc:
            raise where.fail(f"the candidate plan cannot be built with every parameter at its "
                             f"{label} value: {exc}") from None
    return plans


def check_activation_states(episodes: Sequence[EpisodeSpec], where: s.Where,
                             probes: Mapping[str, SimulationPlan]) -> None:
    """An actuator initial_state must fit every candidate: parameters such as a DC motor's
    inductance switch an activation state on or off, so check the plans at the bounds too."""
    for i, episode in enumerate(episodes):
        for j, entry in enumerate(episode.initial_state):
            if entry.get("type") != "actuator":
                continue
            name = entry["actuator"]
            for label in ("lower", "upper"):
                model = probes[label].model
                aid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, name)
                num = int(model.actuator_actnum[aid]) if aid >= 0 else 0
                if num != len(entry["act"]):
                    raise where.key(i).key("initial_state").key(j).key("act").fail(
                        f"actuator {name!r} has {len(entry['act'])} activation value(s) in "
                        f"the nominal plan but {num} with every parameter at its {label} "
                        f"bound (a parameter switches the activation state); fit a range "
                        f"where the state exists, or drop the actuator initial_state")
