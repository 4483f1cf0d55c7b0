"""fibril_sim_core: the pure-Python simulation core of Fibril Sim (never imports rclpy).

MJCF + SimulationManifest → SimulationBuilder → SimulationPlan (immutable) →
SimulationInstance (one run) / SimulationRuntime (live host thread + connections).

The names below are imported on first use, so that ``import fibril_sim_core.errors`` (what a
command line needs to start) does not load MuJoCo, NumPy and rosbags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# The public API; everything else is imported from its module or subpackage (``components``,
# ``overlays``, ``records``, ``runtime``, ``trace``, ``samples``...).
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("ComponentError", "FibrilError", "IngressError", "InstanceError",
                     "ManifestError", "PlanError", "ServerError"), ".errors"),
    "external_input": ".ingress",
    "SimulationInstance": ".instance",
    "SimulationManifest": ".manifest", "load_manifest": ".manifest",
    **dict.fromkeys(("MujocoTarget", "OverlayParameter", "ParameterOverlays"), ".overlays"),
    "SimulationBuilder": ".plan", "SimulationPlan": ".plan",
    **dict.fromkeys(("ActuatorApplication", "DeviceOutput", "ExternalInput", "IngressRecord",
                     "StateSnapshot"), ".records"),
    **dict.fromkeys(("ServerOptions", "SimulationConnection", "SimulationRuntime",
                     "SimulationServer"), ".runtime"),
    "ShutdownSignals": "._signals",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:
    from ._signals import ShutdownSignals
    from .errors import (ComponentError, FibrilError, IngressError, InstanceError,
                         ManifestError, PlanError, ServerError)
    from .ingress import external_input
    from .instance import SimulationInstance
    from .manifest import SimulationManifest, load_manifest
    from .overlays import MujocoTarget, OverlayParameter, ParameterOverlays
    from .plan import SimulationBuilder, SimulationPlan
    from .records import (ActuatorApplication, DeviceOutput, ExternalInput, IngressRecord,
                          StateSnapshot)
    from .runtime import ServerOptions, SimulationConnection, SimulationRuntime, SimulationServer
