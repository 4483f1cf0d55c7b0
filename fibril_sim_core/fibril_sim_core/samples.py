"""Stable DeviceOutput sample types and their typed decoders.

A decoder turns a DeviceOutput into a float vector with named components; calibration and trace
queries select components by name or index. Custom devices register their own sample types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from .components import body_kinematics, camera, digital_input, encoder, imu, motor_feedback
from .components import planar_lidar, rangefinder
from .records import DeviceOutput


@dataclass(frozen=True)
class SampleType:
    """A sample type id, its component names (None: variable length) and its decoder."""

    id: str
    components: tuple[str, ...] | None
    decode: Callable[[DeviceOutput], np.ndarray]


def _vector(output: DeviceOutput) -> np.ndarray:
    return np.asarray(output.values, dtype=np.float64)


class SampleTypeRegistry:
    def __init__(self) -> None:
        self._types: dict[str, SampleType] = {}

    @classmethod
    def standard(cls) -> SampleTypeRegistry:
        registry = cls()
        for sample_id, components in (
                (encoder.SAMPLE_TYPE, encoder.COMPONENTS), (imu.SAMPLE_TYPE, imu.COMPONENTS),
                (rangefinder.SAMPLE_TYPE, rangefinder.COMPONENTS),
                (digital_input.SAMPLE_TYPE, digital_input.COMPONENTS),
                (motor_feedback.SAMPLE_TYPE, motor_feedback.COMPONENTS),
                (body_kinematics.SAMPLE_TYPE, body_kinematics.COMPONENTS),
                (planar_lidar.SAMPLE_TYPE, None), (camera.RGB_SAMPLE_TYPE, None),
                (camera.DEPTH_SAMPLE_TYPE, None)):
            registry.register(SampleType(sample_id, components, _vector))
        return registry

    def register(self, sample_type: SampleType) -> None:
        self._types[sample_type.id] = sample_type

    def get(self, sample_id: str) -> SampleType:
        try:
            return self._types[sample_id]
        except KeyError:
            known = ", ".join(sorted(self._types))
            raise KeyError(f"unknown sample type {sample_id!r}; known: {known}") from None

    def __contains__(self, sample_id: str) -> bool:
        return sample_id in self._types

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._types))

    def decode(self, output: DeviceOutput) -> np.ndarray:
        return self.get(output.sample_type).decode(output)


STANDARD_SAMPLE_TYPES = SampleTypeRegistry.standard()
