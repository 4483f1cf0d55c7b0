"""CandidatePlanBuilder: calibration parameter values → a normal SimulationPlan.

The boundary of the calibration core is ``CalibrationParameterValues -> SimulationPlan``. The
default builder binds each physical value to its typed targets as an ``OverlayParameter`` and
hands them to ``SimulationBuilder`` as construction input: component-config targets are applied
to the effective config after profile composition, MuJoCo targets to the parsed MjSpec before
compilation. No MJCF text is edited and there is no calibration-only execution path.

The programmatic API accepts any object with the same ``build`` method (a model variant, an
extension config) without changing the calibration core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.manifest import SimulationManifest, load_manifest
from fibril_sim_core.overlays import (OverlayError, OverlayParameter, ParameterOverlays,
                                      overlay_document)
from fibril_sim_core.plan import SimulationBuilder, SimulationPlan

from .._json import JsonObject, JsonValue
from ..parameters import CalibrationParameter

if TYPE_CHECKING:
    from fibril_sim_core.overlays import OverlayTarget

CalibrationParameterValues = Mapping[str, float]
"""Physical values by parameter id (declaration order)."""


@runtime_checkable
class CandidatePlanBuilderProtocol(Protocol):
    """What the calibration core needs: physical values → an immutable SimulationPlan.

    ``build`` raises a FibrilError (e.g. PlanError) for values the model cannot take; it may be
    called from several threads at once.
    """

    def build(self, values: CalibrationParameterValues) -> SimulationPlan: ...


@runtime_checkable
class OverlayingBuilder(Protocol):
    """A candidate builder that says which typed overlays its values make (the fitted
    overlay artifact is written from them)."""

    def overlay_parameters(self, values: CalibrationParameterValues
                           ) -> Sequence[OverlayParameter]: ...


class CandidatePlanBuilder:
    """The standard adapter: values → typed ``OverlayParameter``s → ``SimulationBuilder``.

    The manifest is loaded once and reused. A candidate costs one copy of the parsed MjSpec
    and one compile, or, for target kinds that ``SimulationBuilder`` writes into a compiled
    model, no compile at all (see ``fibril_sim_core.overlays.compiled``).
    """

    def __init__(self, manifest: SimulationManifest | str | Path,
                 parameters: Sequence[CalibrationParameter], *,
                 builder: SimulationBuilder | None = None,
                 fixed_overlays: Sequence[OverlayParameter] = ()) -> None:
        if not isinstance(manifest, SimulationManifest):
            manifest = load_manifest(manifest)
        self.manifest = manifest
        self.parameters = tuple(parameters)
        self.builder = builder or SimulationBuilder()
        # Overlays held at fixed values in every candidate (e.g. the parameters of an
        # evaluated artifact that the request does not fit); the fitted ones come first.
        self.fixed_overlays = tuple(fixed_overlays)
        self._template: ParameterOverlays | None = None

    @classmethod
    def holding(cls, fixed: Sequence[OverlayParameter]
                ) -> Callable[[SimulationManifest | str | Path, Sequence[CalibrationParameter]],
                              CandidatePlanBuilder]:
        """A ``(manifest, parameters) -> builder`` factory whose builders hold ``fixed``
        overlays in every candidate (a request's ``fixed_overlays``); the class itself when
        there are none."""
        if not fixed:
            return cls
        return lambda manifest, parameters: cls(manifest, parameters, fixed_overlays=fixed)

    def overlay_parameters(self, values: CalibrationParameterValues
                           ) -> tuple[OverlayParameter, ...]:
        """The typed overlay parameters of ``values`` (every declared parameter, in order)."""
        missing = [p.id for p in self.parameters if p.id not in values]
        if missing:
            raise KeyError(f"no value for parameter(s) {', '.join(missing)}")
        # time offsets are taken off before a builder is made (time_offsets.candidate_builder)
        return tuple(OverlayParameter(p.id, float(values[p.id]),
                                      cast("tuple[OverlayTarget, ...]", tuple(p.targets)),
                                      p.unit, p.provenance) for p in self.parameters)

    def build(self, values: CalibrationParameterValues) -> SimulationPlan:
        template = self._template
        if template is None:
            try:
                template = ParameterOverlays(self.overlay_parameters(values)
                                             + self.fixed_overlays)
            except OverlayError as exc:
                if not self.fixed_overlays:
                    raise
                ids = ", ".join(p.id for p in self.fixed_overlays)
                raise OverlayError(f"with the fixed overlays {ids}: {exc}") from None
            self._template = overlays = template
        else:  # same targets, new values: only the values are checked again
            missing = [p.id for p in self.parameters if p.id not in values]
            if missing:
                raise KeyError(f"no value for parameter(s) {', '.join(missing)}")
            overlays = template.with_values({p.id: float(values[p.id])
                                             for p in self.parameters})
        try:
            return self.builder.build(self.manifest, overlays=overlays)
        except FibrilError as exc:
            if not self.fixed_overlays:
                raise
            ids = ", ".join(p.id for p in self.fixed_overlays)
            try:  # the same error class, its message naming the fixed overlays
                error = type(exc)(f"with the fixed overlays {ids}: {exc}")
            except Exception:  # noqa: BLE001 - a subclass with another constructor
                error = FibrilError(f"with the fixed overlays {ids}: {exc}")
            raise error from None

    def release(self, plan: SimulationPlan) -> None:
        """The calibration is done with a candidate plan (no reference to it, its instances or
        its model is kept): the builder may reuse its model for a later candidate."""
        self.builder.release(plan)

    def overlay_document(self, values: CalibrationParameterValues, *, id: str | None = None,
                         source: Mapping[str, JsonValue] | None = None) -> JsonObject:
        """The portable overlay artifact of ``values`` (loads as a manifest parameter_overlay)."""
        return overlay_document(self.overlay_parameters(values), id=id, source=source)
