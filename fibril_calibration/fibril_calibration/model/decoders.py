"""Typed DeviceOutput decoders for ``device_output`` observations.

A ``device_output`` selector names a device of the plan and its stable ``sample_type``; the
decoder registered for that sample type turns each DeviceOutput into a float vector with named
components, from which ``indices`` select. The standard components (digital input, joint encoder,
rangefinder, motor feedback, body kinematics, IMU) are registered by default; a custom
DeviceOutput registers its own decoder on a ``CalibrationDeviceOutputDecoderRegistry`` passed to
the programmatic API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from fibril_sim_core.components import (body_kinematics, digital_input, encoder, imu,
                                        motor_feedback, rangefinder)
from fibril_sim_core.records import DeviceOutput

Decode = Callable[[DeviceOutput], np.ndarray]


def decode_values(output: DeviceOutput) -> np.ndarray:
    """The default decoder: the sample's value vector as float64."""
    return np.asarray(output.values, dtype=np.float64)


@dataclass(frozen=True)
class CalibrationDeviceOutputDecoder:
    """How one sample type becomes a fixed-length vector: its component names and decoder.

    ``decode`` must return exactly ``len(components)`` finite-or-not floats; a wrong length is
    an evaluation error naming the device and sample type.
    """

    sample_type: str
    components: tuple[str, ...]
    decode: Decode = decode_values

    def __post_init__(self) -> None:
        if not self.sample_type:
            raise ValueError("a decoder needs a non-empty sample_type")
        if not self.components:
            raise ValueError(f"decoder for {self.sample_type!r}: a decoder needs at least one "
                             f"named component (calibration needs fixed-length vectors)")
        if len(set(self.components)) != len(self.components):
            raise ValueError(f"decoder for {self.sample_type!r}: component names repeat")


STANDARD_DECODERS: tuple[CalibrationDeviceOutputDecoder, ...] = tuple(
    CalibrationDeviceOutputDecoder(sample_type, tuple(components))
    for sample_type, components in (
        (digital_input.SAMPLE_TYPE, digital_input.COMPONENTS),
        (encoder.SAMPLE_TYPE, encoder.COMPONENTS),
        (rangefinder.SAMPLE_TYPE, rangefinder.COMPONENTS),
        (motor_feedback.SAMPLE_TYPE, motor_feedback.COMPONENTS),
        (body_kinematics.SAMPLE_TYPE, body_kinematics.COMPONENTS),
        (imu.SAMPLE_TYPE, imu.COMPONENTS),
    ))


class CalibrationDeviceOutputDecoderRegistry:
    """sample_type → decoder. ``standard()`` holds the CLI's standard components."""

    def __init__(self) -> None:
        self._decoders: dict[str, CalibrationDeviceOutputDecoder] = {}

    @classmethod
    def standard(cls) -> CalibrationDeviceOutputDecoderRegistry:
        registry = cls()
        for decoder in STANDARD_DECODERS:
            registry.register(decoder)
        return registry

    def register(self, decoder: CalibrationDeviceOutputDecoder | str,
                 components: tuple[str, ...] | list[str] | None = None,
                 decode: Decode | None = None, *, replace: bool = False) -> None:
        """Register a decoder object, or ``(sample_type, components, decode)``.

        A sample type is registered once; ``replace=True`` overrides an earlier decoder.
        """
        if isinstance(decoder, str):
            if components is None:
                raise ValueError(f"decoder for {decoder!r}: give its component names")
            decoder = CalibrationDeviceOutputDecoder(decoder, tuple(components),
                                                     decode or decode_values)
        if decoder.sample_type in self._decoders and not replace:
            raise ValueError(f"a decoder for sample type {decoder.sample_type!r} is already "
                             f"registered (pass replace=True to override it)")
        self._decoders[decoder.sample_type] = decoder

    def get(self, sample_type: str) -> CalibrationDeviceOutputDecoder | None:
        return self._decoders.get(sample_type)

    def __contains__(self, sample_type: object) -> bool:
        return sample_type in self._decoders

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._decoders))

    def copy(self) -> CalibrationDeviceOutputDecoderRegistry:
        registry = CalibrationDeviceOutputDecoderRegistry()
        registry._decoders = dict(self._decoders)
        return registry
