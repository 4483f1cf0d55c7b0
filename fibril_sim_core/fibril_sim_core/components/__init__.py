"""Standard Fibril components: actuator endpoints and devices."""

from .base import BuildContext, ComponentType, Field, ResolvedComponent
from .device import Device, DeviceDescriptor
from .endpoint import ActuatorDescriptor, Command, Endpoint
from .registry import ComponentRegistry

__all__ = [
    "ActuatorDescriptor", "BuildContext", "Command", "ComponentRegistry", "ComponentType",
    "Device", "DeviceDescriptor", "Endpoint", "Field", "ResolvedComponent",
]
