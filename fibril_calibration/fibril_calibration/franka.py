"""The lab's Franka sysid logs as a named source format (``format: franka_sysid``).

A run is a CSV (one row per control tick) plus a sidecar JSON (``<stem>.json``, schema 2; see
the data-format document): the 50 Hz ``--log`` CSV or the 1 kHz ring log (``seq``,
``target_idx``). As a source this format is a CSV log with

* time from ``seq`` when the file has it (``t = (seq - seq_first) / 1 kHz``, ``seq_first`` from
  the sidecar's ``ring_log``), else from ``t_s`` (seconds);
* column groups in the order calibration uses: ``quat`` and ``quat_des`` are the xyzw columns
  ``quat_x..quat_w`` / ``quat_des_x..quat_des_w`` read as w, x, y, z; ``x``, ``x_des`` and
  ``dx_des`` the three position columns ``x_x, x_y, x_z`` (...); ``q``, ``dq``, ``tau`` and
  ``tau_J`` the joint columns ``q1..qN`` (...);
* ``rotvec_des_x``, ``rotvec_des_y``, ``rotvec_des_z`` (group ``rotvec_des``): the target
  orientation as the rotation vector ``log(conj(q_anchor) ⊗ q_des)`` from the sidecar's
  ``q_anchor_xyzw`` to ``quat_des_*``, rad: the setpoints of a Cartesian impedance made of
  MuJoCo site actuators against an anchor-oriented reference site (config/examples/panda);
* sidecar values for initial states (``qpos_from: {sidecar: q_init, index: 2}``, only for a
  window that starts at the run's first row);
* the ring log's ``gaps`` (frame ranges lost to the ring buffer) and ``resets`` (controller
  restarts) as spans no window may cross: such a window is a request error, never silently
  stitched across the hole.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .sources import CsvSource, SourceError, Stream, check_times

__all__ = ["FrankaSource"]

_VECTORS = {"x": "x_", "x_des": "x_des_", "dx_des": "dx_des_"}
_QUATERNIONS = {"quat": "quat_", "quat_des": "quat_des_"}
_JOINT_GROUPS = ("q", "dq", "tau", "tau_J")
_ROTVEC = ("rotvec_des_x", "rotvec_des_y", "rotvec_des_z")


def _frame(value: Any, where: str) -> int:
    """A sidecar frame number: an integer (or an integral, finite float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (np.isfinite(value) and value == round(value))):
        raise SourceError(f"{where}: expected a frame number (an integer), got {value!r}")
    return int(value)


class FrankaSource(CsvSource):
    """A Franka sysid run: its CSV and sidecar."""

    format = "franka_sysid"

    def __init__(self, path: Path, sidecar: Path | None = None) -> None:
        sidecar = sidecar or path.with_suffix(".json")
        label = f"recording {str(path)!r}"
        try:
            self.sidecar = json.loads(sidecar.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SourceError(f"{label}: its sidecar {str(sidecar)!r} does not exist (the "
                              f"franka_sysid format is a CSV plus <stem>.json; name another "
                              f"with sidecar:)") from None
        except (OSError, ValueError) as exc:
            raise SourceError(f"{label}: cannot read its sidecar {str(sidecar)!r}: "
                              f"{exc}") from None
        if not isinstance(self.sidecar, dict):
            raise SourceError(f"sidecar {str(sidecar)!r}: expected a JSON object")
        self.sidecar_path = sidecar
        super().__init__(path, "t_s", "s")
        ring = self.sidecar.get("ring_log") or {}
        self.seq_first: int | None = None
        if "seq" in self._index:
            raw = self.column("seq")  # SourceError for text that is not a number
            bad = np.flatnonzero(~np.isfinite(raw) | (raw != np.round(raw)))
            if bad.size:
                n = int(bad[0])
                raise SourceError(f"{label} column 'seq' line {n + 2}: "
                                  f"{self._rows[n][self._index['seq']]!r} is not a frame number")
            seq = raw.astype(np.int64)
            first = ring.get("seq_first")
            where = f"sidecar {str(self.sidecar_path)!r} ring_log.seq_first"
            self.seq_first = _frame(first, where) if first is not None else int(seq[0])
            self.times_ns = (seq - self.seq_first) * 1_000_000
            self.time_column = "seq"
            check_times(self.times_ns, f"{label} column 'seq'", lines=True)
        self.forbidden = self._forbidden(ring)

    def _forbidden(self, ring: dict[str, Any]) -> list[tuple[int, int, str]]:
        """(start ns, end ns, reason) spans no window may cross."""
        where = f"sidecar {str(self.sidecar_path)!r} ring_log"
        out: list[tuple[int, int, str]] = []
        first = self.seq_first
        for gap in ring.get("gaps") or []:
            if not (isinstance(gap, (list, tuple)) and len(gap) == 2):
                raise SourceError(f"{where}.gaps: expected [first_seq, last_seq] pairs, got "
                                  f"{gap!r}")
            if first is None:
                raise SourceError(f"{where}.gaps: the CSV has no seq column to place them")
            g0, g1 = _frame(gap[0], f"{where}.gaps"), _frame(gap[1], f"{where}.gaps")
            a, b = (g0 - first) * 1_000_000, (g1 - first) * 1_000_000
            out.append((a, b, f"ring log gap of frames {g0}..{g1}"))
        resets = ring.get("resets")
        if isinstance(resets, (list, tuple)):
            for seq in resets:
                if first is None:
                    raise SourceError(f"{where}.resets: the CSV has no seq column to place "
                                      f"them")
                frame = _frame(seq, f"{where}.resets")
                t = (frame - first) * 1_000_000
                out.append((t, t, f"controller reset at frame {frame}"))
        elif isinstance(resets, (int, float)) and resets > 0:
            reason = f"{resets:g} controller reset(s) at unrecorded times"
            out.append((-2 ** 62, 2 ** 62, reason))
        return out

    def check_window(self, start_ns: int, end_ns: int) -> str | None:
        """Why the window ``[start, end]`` (source times) cannot be used, or None."""
        for a, b, reason in self.forbidden:
            if a <= end_ns and b >= start_ns:
                return f"it crosses the {reason} ({str(self.sidecar_path)!r})"
        return None

    def sidecar_value(self, key: str, index: int | None) -> list[float]:
        """A numeric sidecar entry (``q_init``, ``args.kp_pos``: dotted), or one element."""
        node: Any = self.sidecar
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise SourceError(f"sidecar {str(self.sidecar_path)!r} has no {key!r}")
            node = node[part]
        values = node if isinstance(node, list) else [node]
        if index is not None:
            if not -len(values) <= index < len(values):
                raise SourceError(f"sidecar {str(self.sidecar_path)!r} {key!r} has "
                                  f"{len(values)} value(s), no index {index}")
            values = [values[index]]
        try:
            out = [float(v) for v in values]
        except (TypeError, ValueError):
            raise SourceError(f"sidecar {str(self.sidecar_path)!r} {key!r} is not numeric: "
                              f"{node!r}") from None
        if not all(np.isfinite(out)):
            raise SourceError(f"sidecar {str(self.sidecar_path)!r} {key!r} is not finite: "
                              f"{node!r}")
        return out

    def column(self, name: str) -> np.ndarray:
        if name in _ROTVEC and name not in self._index:
            cached = self._columns.get(name)
            if cached is None:
                self._rotvec_columns()
                cached = self._columns[name]
            return cached
        return super().column(name)

    def _rotvec_columns(self) -> None:
        from .alignment import quat_error

        anchor = self.sidecar.get("q_anchor_xyzw")
        if not (isinstance(anchor, list) and len(anchor) == 4):
            raise SourceError(f"sidecar {str(self.sidecar_path)!r} has no q_anchor_xyzw (4 "
                              f"numbers) for the rotvec_des columns")
        x, y, z, w = (float(v) for v in anchor)
        target = np.column_stack([super(FrankaSource, self).column(f"quat_des_{c}")
                                  for c in "wxyz"])
        bad = ~np.all(np.isfinite(target), axis=1)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise SourceError(f"recording {str(self.path)!r} columns quat_des_*: "
                              f"{int(bad.sum())} row(s) with NaN, the first at "
                              f"{self.times_ns[first] / 1e9:.9g} s")
        rotvec = quat_error(target, np.tile([w, x, y, z], (target.shape[0], 1)))
        for i, name in enumerate(_ROTVEC):
            self._columns[name] = np.ascontiguousarray(rotvec[:, i])

    def expand(self, columns: Sequence[str]) -> list[str]:
        out: list[str] = []
        for name in columns:
            if name in self._index or name in _ROTVEC:
                out.append(name)
            elif name == "rotvec_des":
                out.extend(_ROTVEC)
            elif name in _QUATERNIONS:
                stem = _QUATERNIONS[name]
                out.extend(f"{stem}{c}" for c in "wxyz")
            elif name in _VECTORS:
                out.extend(f"{_VECTORS[name]}{c}" for c in "xyz")
            elif name in _JOINT_GROUPS:
                count = 1
                while f"{name}{count}" in self._index:
                    count += 1
                if count == 1:
                    raise SourceError(f"recording {str(self.path)!r} has no {name}1.. columns")
                out.extend(f"{name}{i}" for i in range(1, count))
            else:
                out.append(name)  # CsvSource words the missing column
        return out

    def stream(self, *, topic: str | None = None, field: str | None = None,
               columns: Sequence[str] | None = None, time: str | None = None,
               message_type: str | None = None) -> Stream:
        expanded = self.expand(columns) if columns else columns
        return super().stream(topic=topic, field=field, columns=expanded, time=time,
                              message_type=message_type)
