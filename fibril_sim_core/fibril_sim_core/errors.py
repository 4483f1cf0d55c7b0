"""The typed errors of fibril_sim_core.

Every user-facing error names what is wrong (file, key path, object, value) so that a CLI can
print it as one line, never as a traceback.
"""

from __future__ import annotations


class FibrilError(Exception):
    """Base of every error fibril_sim_core raises for bad input or bad use."""


class ManifestError(FibrilError):
    """The SimulationManifest (or a file it names) is invalid."""


class ComponentError(FibrilError):
    """A component type, profile, binding or effective config is invalid."""


class PlanError(FibrilError):
    """The model and manifest cannot be resolved into a SimulationPlan."""


class IngressError(FibrilError):
    """An ExternalInput was rejected; it is counted and traced, never reaches physics."""


class InstanceError(FibrilError):
    """A SimulationInstance was used in a way its lifecycle does not allow."""


class TraceError(FibrilError):
    """A trace cannot be written, read or queried."""


class ServerError(FibrilError):
    """A simulation server cannot be started or reached, or refused a client."""
