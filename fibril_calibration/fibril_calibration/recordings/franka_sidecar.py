"""What a Franka sidecar says about its run, checked (franka-sysid-data-format.md).

* ``schema_version``: 2 is the version this reader understands; another (or none) is refused
  naming the file and the versions understood.
* ``ring_log``: ``dropped_frames`` > 0 (frames the 1 kHz log lost at unrecorded places) and
  ``save_error`` (the fetch of the ring log failed) are reported per episode; a window whose
  rows they concern is refused unless the source ``accept``s them.
* ``abort``: an aborted run (``code`` != 0) is refused naming its ``name``, ``value`` and
  ``time_s``, unless the source says ``abort: truncate``: its rows after ``abort.time_s`` are
  then left out.
* ``x_anchor`` with ``q_anchor_xyzw``: the anchor frame the replay's targets are relative to;
  ``anchor_relative`` puts a target position into it, as ``rotvec_des`` does the orientation.
* ``args.kp_*`` / ``kd_*``: the run's impedance gains (``gains``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .._json import JsonObject

if TYPE_CHECKING:
    from fibril_sim_core.overlays import OverlayParameter

__all__ = ["ACCEPTABLE", "ABORT_POLICIES", "CONTROLLERS", "SCHEMA_VERSIONS", "TARGET_KINDS",
           "Abort", "RingLogIssues", "anchor_relative", "check_schema", "gains", "parse_abort",
           "ring_log_issues"]

SCHEMA_VERSIONS = (2,)
#: ``accept:`` of a franka source: ring-log problems a request may take knowingly.
ACCEPTABLE = ("dropped_frames", "save_error")
#: ``abort:`` of a franka source: refuse an aborted run (default) or cut it at abort.time_s.
ABORT_POLICIES = ("refuse", "truncate")
#: The ``controller`` of a real run's sidecar (the document names these three).
CONTROLLERS = ("python_v4_chirp_excitation", "python_multiband_excitation", "python_sine")
#: The ``controller`` of a target CSV's sidecar (``scripts/gen_*_traj.py``).
TARGET_KINDS = ("multiband_excitation_target", "multiband_pos_only_target",
                "v4_chirp_excitation_target")
GAIN_KEYS = ("kp_pos", "kd_pos", "kp_ori", "kd_ori")


class SidecarProblem(ValueError):
    """A sidecar that cannot be used as it is; the message names file and key."""


def check_schema(sidecar: Mapping[str, object], path: Path) -> None:
    version = sidecar.get("schema_version")
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        shown = "no schema_version" if "schema_version" not in sidecar else \
            f"schema_version {version!r}"
        understood = ", ".join(map(str, SCHEMA_VERSIONS))
        raise SidecarProblem(f"sidecar {str(path)!r} has {shown}; this reader understands "
                             f"schema_version {understood} (franka-sysid-data-format.md)")


@dataclass(frozen=True)
class RingLogIssues:
    """``ring_log.dropped_frames`` and ``save_error`` of a sidecar (none: 0 and None)."""

    dropped_frames: int = 0
    save_error: str | None = None

    def __bool__(self) -> bool:
        return bool(self.dropped_frames or self.save_error)

    def report(self, accepted: Sequence[str]) -> JsonObject:
        return {"dropped_frames": self.dropped_frames, "save_error": self.save_error,
                "accepted": [a for a in accepted if a in self.present]}

    @property
    def present(self) -> tuple[str, ...]:
        return tuple(name for name, on in (("dropped_frames", self.dropped_frames > 0),
                                           ("save_error", self.save_error is not None)) if on)


def ring_log_issues(sidecar: Mapping[str, object], path: Path) -> RingLogIssues:
    ring = sidecar.get("ring_log")
    if ring is None:
        return RingLogIssues()
    if not isinstance(ring, Mapping):
        raise SidecarProblem(f"sidecar {str(path)!r} ring_log: expected an object or null, got "
                             f"{type(ring).__name__}")
    dropped = ring.get("dropped_frames", 0)
    if dropped is None:
        dropped = 0
    if isinstance(dropped, bool) or not isinstance(dropped, (int, float)) or dropped < 0 or (
            isinstance(dropped, float) and not dropped.is_integer()):
        raise SidecarProblem(f"sidecar {str(path)!r} ring_log.dropped_frames: expected a frame "
                             f"count, got {dropped!r}")
    error = ring.get("save_error")
    if error is not None and not isinstance(error, str):
        error = str(error)
    return RingLogIssues(int(dropped), error or None)


@dataclass(frozen=True)
class Abort:
    """The sidecar's ``abort`` block of an aborted run (``code`` != 0)."""

    code: int
    name: str
    value: float
    time_s: float

    def describe(self) -> str:
        return (f"aborted: code {self.code} {self.name!r}, value {self.value:g}, at "
                f"{self.time_s:g} s")


def parse_abort(sidecar: Mapping[str, object], path: Path) -> Abort | None:
    """The run's abort, or None for a clean run (no block, or ``code`` 0)."""
    block = sidecar.get("abort")
    if block is None:
        return None
    where = f"sidecar {str(path)!r} abort"
    if not isinstance(block, Mapping):
        raise SidecarProblem(f"{where}: expected an object with code, name, value, time_s")
    code = block.get("code", 0)
    if isinstance(code, bool) or not isinstance(code, (int, float)) or not float(code).is_integer():
        raise SidecarProblem(f"{where}.code: expected an integer, got {code!r}")
    if code == 0:
        return None
    time_s = block.get("time_s")
    if isinstance(time_s, bool) or not isinstance(time_s, (int, float)) or not math.isfinite(
            time_s) or time_s < 0:
        raise SidecarProblem(f"{where}.time_s: expected the abort time in seconds, got "
                             f"{time_s!r}")
    value = block.get("value", math.nan)
    value = float(value) if isinstance(value, (int, float)) and not isinstance(
        value, bool) else math.nan
    return Abort(int(code), str(block.get("name", "")), value, float(time_s))


def anchor(sidecar: Mapping[str, object], path: Path
           ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(``x_anchor`` (3), ``q_anchor_xyzw`` as wxyz (4), normalised)."""
    position, orientation = sidecar.get("x_anchor"), sidecar.get("q_anchor_xyzw")
    if not (_numbers(position, 3) and _numbers(orientation, 4)):
        raise SidecarProblem(f"sidecar {str(path)!r} needs x_anchor (3 numbers) and "
                             f"q_anchor_xyzw (4 numbers) for the anchor-relative targets; "
                             f"it has x_anchor {position!r}, q_anchor_xyzw {orientation!r}")
    assert isinstance(position, (list, tuple)) and isinstance(orientation, (list, tuple))
    x, y, z, w = (float(v) for v in orientation)
    quat = np.array([w, x, y, z])
    norm = float(np.linalg.norm(quat))
    if not norm > 0:
        raise SidecarProblem(f"sidecar {str(path)!r} q_anchor_xyzw is not a rotation")
    return np.array([float(v) for v in position]), quat / norm


def anchor_relative(positions: npt.ArrayLike, sidecar: Mapping[str, object],
                    path: Path) -> npt.NDArray[np.float64]:
    """Target positions (n, 3) in the anchor frame: ``R(q_anchor)ᵀ (x_des - x_anchor)``, the
    setpoint of a site actuator whose reference site is the anchor."""
    origin, quat = anchor(sidecar, path)
    w, x, y, z = quat
    rotation = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                         [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                         [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
    relative: npt.NDArray[np.float64] = (
        (np.asarray(positions, dtype=np.float64) - origin) @ rotation)
    return relative


def gains(sidecar: Mapping[str, object], path: Path) -> dict[str, float]:
    """``args.kp_pos``, ``kd_pos``, ``kp_ori``, ``kd_ori``: positive numbers."""
    args = sidecar.get("args")
    if not isinstance(args, Mapping):
        raise SidecarProblem(f"sidecar {str(path)!r} has no args object with "
                             f"{', '.join(GAIN_KEYS)}")
    out = {}
    for key in GAIN_KEYS:
        value = args.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or not math.isfinite(value):
            raise SidecarProblem(f"sidecar {str(path)!r} args.{key} is {value!r}, not a "
                                 f"positive number")
        out[key] = float(value)
    return out


def _numbers(value: object, count: int) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) == count
            and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v) for v in value))


#: Where the gains go by default: the Cartesian impedance of config/examples/panda (MuJoCo
#: position actuators on the end-effector site, kp / kv).
POSITION_ACTUATORS = ("ee_x", "ee_y", "ee_z")
ORIENTATION_ACTUATORS = ("ee_rx", "ee_ry", "ee_rz")


def gain_overlays(sidecar: Mapping[str, object], path: Path, *,
                  position: Sequence[str] = POSITION_ACTUATORS,
                  orientation: Sequence[str] = ORIENTATION_ACTUATORS
                  ) -> tuple[OverlayParameter, ...]:
    """The run's ``args.kp_*`` / ``kd_*`` as overlay parameters of the impedance's actuators:
    ``actuator_position_kp`` / ``_kv`` of ``position`` (kp_pos, kd_pos) and ``orientation``
    (kp_ori, kd_ori), so the replay uses the gains the run was recorded with."""
    from fibril_sim_core.overlays import MujocoTarget, OverlayParameter

    values = gains(sidecar, path)
    out: list[OverlayParameter] = []
    for key, kind, actuators, unit in (("kp_pos", "actuator_position_kp", position, "N_per_m"),
                                       ("kd_pos", "actuator_position_kv", position, "N_s_per_m"),
                                       ("kp_ori", "actuator_position_kp", orientation,
                                        "N_m_per_rad"),
                                       ("kd_ori", "actuator_position_kv", orientation,
                                        "N_m_s_per_rad")):
        out.append(OverlayParameter(key, values[key],
                                    tuple(MujocoTarget(kind, a) for a in actuators), unit,
                                    f"sidecar {path} args.{key}"))
    return tuple(out)
