"""The component registry: type id → ComponentType, standard types plus extensions."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

from .base import ComponentType
from .body_kinematics import BodyKinematicsType
from .camera import CameraType
from .digital_input import DigitalInputType
from .encoder import EncoderType
from .imu import ImuType
from .motor import MotorType
from .motor_feedback import MotorFeedbackType
from .planar_lidar import PlanarLidarType
from .rangefinder import RangefinderType

STANDARD_TYPES: tuple[type[ComponentType], ...] = (
    MotorType, EncoderType, ImuType, RangefinderType, PlanarLidarType, DigitalInputType,
    MotorFeedbackType, BodyKinematicsType, CameraType)


class ComponentRegistry:
    """Component types by id. Extensions add theirs through ``register``."""

    def __init__(self) -> None:
        self._types: dict[str, ComponentType] = {}

    @classmethod
    def standard(cls) -> ComponentRegistry:
        registry = cls()
        for kind in STANDARD_TYPES:
            registry.register(kind())
        return registry

    def register(self, component_type: ComponentType) -> None:
        if component_type.type_id in self._types:
            raise ValueError(f"component type {component_type.type_id!r} is already registered")
        self._types[component_type.type_id] = component_type

    def get(self, type_id: str) -> ComponentType | None:
        return self._types.get(type_id)

    def __getitem__(self, type_id: str) -> ComponentType:
        """The type ``type_id`` (KeyError for one never registered)."""
        return self._types[type_id]

    def __contains__(self, type_id: str) -> bool:
        return type_id in self._types

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._types))

    def load_extension(self, reference: str) -> None:
        """Import ``module`` or ``module:function`` and call it (default ``register``) with self."""
        module_name, _, function = reference.partition(":")
        module = importlib.import_module(module_name)
        register = getattr(module, function or "register")
        register(self)
