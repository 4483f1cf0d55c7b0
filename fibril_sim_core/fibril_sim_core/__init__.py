"""fibril_sim_core: the pure-Python simulation core of Fibril Sim (never imports rclpy).

MJCF + SimulationManifest → SimulationBuilder → SimulationPlan (immutable) →
SimulationInstance (one run) / SimulationRuntime (live host thread + connections).
"""

from .components import ComponentRegistry, ComponentType, Field
from .errors import (ComponentError, FibrilError, IngressError, InstanceError, ManifestError,
                     PlanError, TraceError)
from .ingress import external_input
from .instance import SimulationInstance
from .manifest import SimulationManifest, load_manifest
from .overlays import (ComponentTarget, MujocoTarget, OverlayArtifact, OverlayError,
                       OverlayParameter, OverlayTarget, ParameterOverlays,
                       load_overlay_artifact, overlay_document, parse_target)
from .plan import SimulationBuilder, SimulationPlan
from .records import (ActuatorApplication, DeviceOutput, ExternalInput, FrameTiming,
                      IngressRecord, StateSnapshot)
from .runtime import SimulationConnection, SimulationHost, SimulationRuntime
from .samples import STANDARD_SAMPLE_TYPES, SampleType, SampleTypeRegistry
from .timebase import Timebase

__all__ = [
    "STANDARD_SAMPLE_TYPES", "ActuatorApplication", "ComponentError", "ComponentRegistry",
    "ComponentTarget", "ComponentType", "DeviceOutput", "ExternalInput", "FibrilError", "Field",
    "FrameTiming", "IngressError", "IngressRecord", "InstanceError", "ManifestError",
    "MujocoTarget", "OverlayArtifact", "OverlayError", "OverlayParameter", "OverlayTarget",
    "ParameterOverlays", "PlanError", "SampleType", "SampleTypeRegistry", "SimulationBuilder",
    "SimulationConnection", "SimulationHost", "SimulationInstance", "SimulationManifest",
    "SimulationPlan", "SimulationRuntime", "StateSnapshot", "Timebase", "TraceError",
    "external_input", "load_manifest", "load_overlay_artifact", "overlay_document",
    "parse_target",
]
