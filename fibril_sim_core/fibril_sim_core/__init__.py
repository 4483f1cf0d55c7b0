"""fibril_sim_core: the pure-Python simulation core of Fibril Sim (never imports rclpy).

MJCF + SimulationManifest → SimulationBuilder → SimulationPlan (immutable) →
SimulationInstance (one run) / SimulationRuntime (live host thread + connections).

The names below are imported on first use, so that ``import fibril_sim_core.errors`` (what a
command line needs to start) does not load MuJoCo, NumPy and rosbags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("ComponentRegistry", "ComponentType", "Field"), ".components"),
    **dict.fromkeys(("ComponentError", "FibrilError", "IngressError", "InstanceError",
                     "ManifestError", "PlanError", "ServerError", "TraceError"), ".errors"),
    "external_input": ".ingress",
    "SimulationInstance": ".instance",
    "SimulationManifest": ".manifest", "load_manifest": ".manifest",
    **dict.fromkeys(("ComponentTarget", "MujocoTarget", "OverlayArtifact", "OverlayError",
                     "OverlayParameter", "OverlayTarget", "ParameterOverlays",
                     "load_overlay_artifact", "overlay_document", "parse_target"), ".overlays"),
    "SimulationBuilder": ".plan", "SimulationPlan": ".plan",
    **dict.fromkeys(("ActuatorApplication", "DeviceOutput", "EpisodeStart", "ExternalInput",
                     "FrameTiming", "IngressRecord", "RenderFrame", "StateSnapshot"),
                    ".records"),
    **dict.fromkeys(("RecordFilter", "RemoteConnection", "RenderRequest", "ServerOptions",
                     "SimulationConnection", "SimulationHost", "SimulationRuntime",
                     "SimulationServer"), ".runtime"),
    **dict.fromkeys(("DeviceColumns", "SampleBlock", "TraceBuffer"), ".sample_block"),
    **dict.fromkeys(("STANDARD_SAMPLE_TYPES", "SampleType", "SampleTypeRegistry"), ".samples"),
    "Timebase": ".timebase",
    "ShutdownSignals": "._signals",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:
    from .components import ComponentRegistry, ComponentType, Field
    from .errors import (ComponentError, FibrilError, IngressError, InstanceError,
                         ManifestError, PlanError, ServerError, TraceError)
    from .ingress import external_input
    from .instance import SimulationInstance
    from .manifest import SimulationManifest, load_manifest
    from .overlays import (ComponentTarget, MujocoTarget, OverlayArtifact, OverlayError,
                           OverlayParameter, OverlayTarget, ParameterOverlays,
                           load_overlay_artifact, overlay_document, parse_target)
    from .plan import SimulationBuilder, SimulationPlan
    from .records import (ActuatorApplication, DeviceOutput, EpisodeStart, ExternalInput,
                          FrameTiming, IngressRecord, RenderFrame, StateSnapshot)
    from .runtime import (RecordFilter, RemoteConnection, RenderRequest, ServerOptions,
                          SimulationConnection, SimulationHost, SimulationRuntime,
                          SimulationServer)
    from .sample_block import DeviceColumns, SampleBlock, TraceBuffer
    from .samples import STANDARD_SAMPLE_TYPES, SampleType, SampleTypeRegistry
    from ._signals import ShutdownSignals
    from .timebase import Timebase
