"""The physical unit of an observation's residual components, as the scores, the error
summary and the report name it: a device sample's components by their sample type, and
``NO_UNIT`` where the unit is not known (such signals are never pooled).

Kept apart from ``scores`` (which loads MuJoCo and the problem) so the report's error summary
reads the units without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["DEVICE_UNITS", "NO_UNIT", "device_unit"]

NO_UNIT = "observation units"  # never pooled: two such signals need not be commensurable

#: The unit of each DeviceSample component whose unit does not depend on what the device is
#: bound to (an encoder's position is rad or m by its joint, a motor's force N·m or N and
#: scaled by its gear: those are left to "observation units"). Component names are the
#: sample types' (fibril_sim_core.components.*.COMPONENTS).
DEVICE_UNITS: Mapping[str, Mapping[str, str]] = {
    "fibril_sim/motor_feedback_sample/v1": {"current": "A"},
    "fibril_sim/imu_sample/v1": {"gx": "rad/s", "gy": "rad/s", "gz": "rad/s",
                                 "ax": "m/s²", "ay": "m/s²", "az": "m/s²"},
    "fibril_sim/rangefinder_sample/v1": {"distance": "m"},
    "fibril_sim/encoder_sample/v1": {"counts": "counts"},
    "fibril_sim/body_kinematics_sample/v1": {
        "px": "m", "py": "m", "pz": "m", "vx": "m/s", "vy": "m/s", "vz": "m/s",
        "wx": "rad/s", "wy": "rad/s", "wz": "rad/s"},
}


def device_unit(sample_type: str | None, indices: Sequence[int | str] | None) -> str | None:
    """The unit of a ``device_output`` observation: its components' common unit, or None
    (unknown, or components of different units: such a signal is never pooled)."""
    if sample_type is None or sample_type not in DEVICE_UNITS:
        return None
    units = DEVICE_UNITS[sample_type]
    if indices is None or any(isinstance(i, int) for i in indices):
        from fibril_sim_core.samples import SampleTypeRegistry

        registry = SampleTypeRegistry.standard()
        components = (registry.get(sample_type).components or () if sample_type in registry
                      else ())
        names = [components[i] if isinstance(i, int) and 0 <= i < len(components) else i
                 for i in (indices if indices is not None else range(len(components)))]
    else:
        names = list(indices)
    found = {units.get(str(n)) for n in names}
    return found.pop() if len(found) == 1 and None not in found else None
