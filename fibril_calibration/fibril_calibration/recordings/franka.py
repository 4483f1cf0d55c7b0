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
  stitched across the hole;
* the ring log's ``<stem>_targets.csv`` (one row per Cartesian setpoint: ``target_idx``,
  ``head``, ``seq_effective``, ``x_des_*``, ``quat_des_*``) as the columns ``targets.NAME``
  (groups ``targets.x_des``, ``targets.quat_des`` wxyz, ``targets.rotvec_des``), each row at
  the frame the data-format document says its setpoint is in force from, ``(head + 1 -
  seq_first) / 1 kHz`` (``seq_effective`` is late by up to a poll period in files written by
  ``scripts/shm_log.py``; the run's own ``target_idx`` is checked against it): the setpoint
  changes of a 1 kHz run, to replay with ``commit: next_tick`` (zero-order held).
  The file is found beside the CSV, else at the sidecar's ``ring_log.targets_path`` (relative
  to the CSV's folder when relative), and read only when a ``targets.`` column is named.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
import numpy as np
import numpy.typing as npt

from .._json import JsonObject, JsonValue, json_list, json_object

from .franka_sidecar import (TARGET_KINDS, Abort, RingLogIssues, SidecarProblem,
                             anchor_relative, check_schema, parse_abort, ring_log_issues)
from .sources import CsvSource, SourceError, SourceInfo, Stream, check_times, when

__all__ = ["FrankaSource", "FrankaTargetSource", "RingTargets", "episode_recording"]

_VECTORS = {"x": "x_", "x_des": "x_des_", "dx_des": "dx_des_"}
_QUATERNIONS = {"quat": "quat_", "quat_des": "quat_des_"}
_JOINT_GROUPS = ("q", "dq", "tau", "tau_J")
_ROTVEC = ("rotvec_des_x", "rotvec_des_y", "rotvec_des_z")
_XREL = ("xrel_des_x", "xrel_des_y", "xrel_des_z")
TARGETS = "targets."
#: a source's own column reader (the base class's, past the derived columns)
Column = Callable[[str], npt.NDArray[np.float64]]
_TARGET_COLUMNS = ("target_idx", "head", "seq_effective", "x_des_x", "x_des_y", "x_des_z",
                   "quat_des_x", "quat_des_y", "quat_des_z", "quat_des_w")


def _float(value: JsonValue) -> float:
    """A sidecar number (a numeric string too, as float() reads it); TypeError otherwise."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"not a number: {type(value).__name__}")


def _frame(value: object, where: str) -> int:
    """A sidecar frame number: an integer (or an integral, finite float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (np.isfinite(value) and value == round(value))):
        raise SourceError(f"{where}: expected a frame number (an integer), got {value!r}")
    return int(value)


class FrankaSource(CsvSource):
    """A Franka sysid run: its CSV and sidecar.

    ``accept`` names the ring-log problems a request takes knowingly (``dropped_frames``,
    ``save_error``); ``abort`` is ``refuse`` (an aborted run is a request error) or
    ``truncate`` (its rows after ``abort.time_s`` are left out). See ``franka_sidecar``.
    """

    format = "franka_sysid"

    def __init__(self, path: Path, sidecar: Path | None = None, *,
                 accept: Sequence[str] = (), abort: str = "refuse") -> None:
        sidecar = sidecar or path.with_suffix(".json")
        label = f"recording {str(path)!r}"
        try:
            loaded = json.loads(sidecar.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SourceError(f"{label}: its sidecar {str(sidecar)!r} does not exist (the "
                              f"franka_sysid format is a CSV plus <stem>.json; name another "
                              f"with sidecar:)") from None
        except (OSError, ValueError) as exc:
            raise SourceError(f"{label}: cannot read its sidecar {str(sidecar)!r}: "
                              f"{exc}") from None
        if not isinstance(loaded, dict):
            raise SourceError(f"sidecar {str(sidecar)!r}: expected a JSON object")
        self.sidecar: dict[str, JsonValue] = loaded
        self.sidecar_path = sidecar
        self._targets: RingTargets | None = None
        try:
            self._check_sidecar()
        except SidecarProblem as exc:
            raise SourceError(str(exc)) from None
        controller = self.sidecar.get("controller")
        self.controller = controller if isinstance(controller, str) else None
        super().__init__(path, "t_s", "s")
        ring = self.sidecar.get("ring_log") or {}
        if not isinstance(ring, dict):
            ring = {}
        self.seq_first: int | None = None
        if "seq" in self._index:
            raw = self.column("seq")  # SourceError for text that is not a number
            bad = np.flatnonzero(~np.isfinite(raw) | (raw != np.round(raw)))
            if bad.size:
                n = int(bad[0])
                raise SourceError(f"{label} column 'seq' line {n + 2}: "
                                  f"{self.cell(n, 'seq')!r} is not a frame number")
            seq = raw.astype(np.int64)
            first = ring.get("seq_first")
            where = f"sidecar {str(self.sidecar_path)!r} ring_log.seq_first"
            self.seq_first = _frame(first, where) if first is not None else int(seq[0])
            self.times_ns = (seq - self.seq_first) * 1_000_000
            self.time_column = "seq"
            check_times(self.times_ns, f"{label} column 'seq'", lines=2)
        self.forbidden = self._forbidden(ring)
        self.accepted = tuple(accept)
        self.ring_issues = self._ring_issues(label)
        self.abort = self._abort(label, abort)

    def _check_sidecar(self) -> None:
        """A run's sidecar: schema_version 2 (``franka_sidecar.check_schema``)."""
        check_schema(self.sidecar, self.sidecar_path)

    def _ring_issues(self, label: str) -> RingLogIssues:
        """Dropped frames and a failed fetch: reported, and refused (``check_window``) where
        the rows they concern are in a window, unless accepted. Both concern the 1 kHz ring
        log: a run read from it (a ``seq`` column) has them at unknown rows, i.e. anywhere; the
        50 Hz ``--log`` CSV's rows are not concerned (its targets file would be)."""
        try:
            issues = ring_log_issues(self.sidecar, self.sidecar_path)
        except SidecarProblem as exc:
            raise SourceError(str(exc)) from None
        where = f"({str(self.sidecar_path)!r})"
        if self.seq_first is not None:
            if issues.dropped_frames and "dropped_frames" not in self.accepted:
                self.forbidden.append((-2 ** 62, 2 ** 62, (
                    f"ring log's {issues.dropped_frames} dropped frame(s) at unrecorded rows "
                    f"(ring_log.dropped_frames; accept: [dropped_frames] takes them)")))
            if issues.save_error and "save_error" not in self.accepted:
                self.forbidden.append((-2 ** 62, 2 ** 62, (
                    f"ring log's failed save ({issues.save_error!r}; accept: [save_error] "
                    f"takes the rows that were written)")))
        self.warnings = tuple(
            f"{label}: {name} {where}: " + (
                f"{issues.dropped_frames} dropped frame(s) in the ring log" if name ==
                "dropped_frames" else f"the ring log's fetch failed: {issues.save_error}")
            + (" (accepted)" if name in self.accepted else "")
            for name in issues.present)
        return issues

    def _abort(self, label: str, policy: str) -> Abort | None:
        """An aborted run is refused, or with ``truncate`` cut after ``abort.time_s``."""
        try:
            abort = parse_abort(self.sidecar, self.sidecar_path)
        except SidecarProblem as exc:
            raise SourceError(str(exc)) from None
        if abort is None:
            return None
        if policy != "truncate":
            raise SourceError(f"{label}: the run was {abort.describe()} (sidecar "
                              f"{str(self.sidecar_path)!r}); abort: truncate uses its rows up "
                              f"to then")
        keep = int(np.searchsorted(self.times_ns, round(abort.time_s * 1e9), "right"))
        if keep < 2:
            raise SourceError(f"{label}: the run was {abort.describe()}: fewer than two rows "
                              f"before it")
        self._keep = keep
        return abort

    @property
    def ring_log_report(self) -> JsonObject | None:
        """What the episode's source info says of the ring log's problems and the abort."""
        if not self.ring_issues and self.abort is None:
            return None
        report = self.ring_issues.report(self.accepted)
        if self.abort is not None:
            kept = self._rows if self._keep is None else self._keep
            report["abort"] = {"code": self.abort.code, "name": self.abort.name,
                               "value": self.abort.value, "time_s": self.abort.time_s,
                               "rows_kept": self._keep, "rows_left_out": self._rows - kept}
        return report

    # An aborted run read with ``abort: truncate`` ends at its abort: every column, the time
    # base and the row count stop at the last row at or before abort.time_s.
    _keep: int | None = None

    @property
    def _rows(self) -> int:
        return super().rows

    @property
    def rows(self) -> int:
        return self._rows if self._keep is None else self._keep

    @property
    def times_ns(self) -> np.ndarray:
        times = super().times_ns  # the time base read (or set) as CsvSource keeps it
        return times if self._keep is None else times[:self._keep]

    @times_ns.setter
    def times_ns(self, value: np.ndarray) -> None:
        # (super() reads a property but cannot set one: what CsvSource's setter does)
        self._times = value

    def _forbidden(self, ring: Mapping[str, JsonValue]) -> list[tuple[int, int, str]]:
        """(start ns, end ns, reason) spans no window may cross."""
        where = f"sidecar {str(self.sidecar_path)!r} ring_log"
        out: list[tuple[int, int, str]] = []
        first = self.seq_first
        for gap in json_list(ring.get("gaps") or [], f"{where}.gaps"):
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
        node: JsonValue = self.sidecar
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
            out = [_float(v) for v in values]
        except (TypeError, ValueError):
            raise SourceError(f"sidecar {str(self.sidecar_path)!r} {key!r} is not numeric: "
                              f"{node!r}") from None
        if not all(np.isfinite(out)):
            raise SourceError(f"sidecar {str(self.sidecar_path)!r} {key!r} is not finite: "
                              f"{node!r}")
        return out

    def column(self, name: str) -> np.ndarray:
        if name.startswith(TARGETS):
            return self.targets.column(name[len(TARGETS):])
        derived = _derived(self, name, super().column)
        values = derived if derived is not None else super().column(name)
        return values if self._keep is None else values[:self._keep]

    @property
    def targets(self) -> RingTargets:
        """The ring log's ``<stem>_targets.csv`` (read once, on first use)."""
        if self._targets is None:
            self._targets = RingTargets(self._targets_path(), self)
        return self._targets

    @property
    def targets_report(self) -> JsonObject | None:
        """How the targets file was placed and checked (None until a targets. column is read)."""
        return None if self._targets is None else dict(self._targets.report)

    def describe(self) -> SourceInfo:
        return SourceInfo(self.path, self.format, True, warnings=self.warnings, sidecar=True,
                          controller=self.controller, ring_log=self.ring_log_report,
                          ring_targets=self.targets_report)

    def _targets_path(self) -> Path:
        beside = self.path.with_name(f"{self.path.stem}_targets.csv")
        if beside.is_file():
            return beside
        ring = json_object(self.sidecar.get("ring_log") or {}, "ring_log")  # checked: a mapping
        named = ring.get("targets_path")
        if isinstance(named, str) and named:
            candidate = Path(named)
            if not candidate.is_absolute():
                candidate = self.path.parent / candidate
            if candidate.is_file():
                return candidate
        raise SourceError(f"recording {str(self.path)!r}: its ring-log targets file "
                          f"{str(beside)!r} does not exist (nor the sidecar's "
                          f"ring_log.targets_path {named!r}); the targets.* columns come "
                          f"from it")

    def expand(self, columns: Sequence[str]) -> list[str]:
        out: list[str] = []
        for name in columns:
            if name.startswith(TARGETS):
                out.extend(TARGETS + n for n in self.targets.expand([name[len(TARGETS):]]))
            elif name in self._index or name in _ROTVEC or name in _XREL:
                out.append(name)
            elif name == "rotvec_des":
                out.extend(_ROTVEC)
            elif name == "xrel_des":
                out.extend(_XREL)
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
               message_type: str | None = None, check_values: bool = True) -> Stream:
        expanded = self.expand(columns) if columns else columns
        if expanded and any(c.startswith(TARGETS) for c in expanded):
            if not all(c.startswith(TARGETS) for c in expanded):
                raise SourceError(f"recording {str(self.path)!r}: columns {list(columns or [])} "
                                  f"mix the run's rows and its targets file's (another time "
                                  f"base); map the targets.* columns separately")
            stream = self.targets.stream(columns=[c[len(TARGETS):] for c in expanded],
                                         check_values=check_values)
            return replace(stream, components=tuple(expanded))
        return super().stream(topic=topic, field=field, columns=expanded, time=time,
                              message_type=message_type, check_values=check_values)


def episode_recording(info: Mapping[str, object]) -> FrankaSource:
    """The franka_sysid run of an episode's source info, opened again as the request read it
    (its sidecar, the ring-log problems it accepted, an abort it truncated at)."""
    report = json_object(info.get("ring_log") or {}, "ring_log")
    sidecar = info.get("sidecar")
    return FrankaSource(Path(str(info["path"])), Path(str(sidecar)) if sidecar else None,
                        accept=tuple(str(a) for a in json_list(report.get("accepted") or ())),
                        abort="truncate" if report.get("abort") else "refuse")


class FrankaTargetSource(FrankaSource):
    """A target CSV + sidecar of the lab's trajectory generators (``scripts/gen_*_traj.py``,
    ``format: franka_target``): the 1 kHz commanded reference ``t_s``, ``x_des_*``,
    ``dx_des_*``, ``quat_des_*`` with the same anchor / gain fields as a run's sidecar and a
    ``controller`` of the three named kinds, recorded in the episode's source summary. Its
    columns and groups are a run's (``x_des``, ``quat_des`` wxyz, ``rotvec_des``,
    ``xrel_des``): a source of recorded inputs, to replay the commanded reference open loop."""

    format = "franka_target"
    REQUIRED = ("t_s", *(f"x_des_{c}" for c in "xyz"), *(f"dx_des_{c}" for c in "xyz"),
                *(f"quat_des_{c}" for c in "xyzw"))

    def __init__(self, path: Path, sidecar: Path | None = None) -> None:
        super().__init__(path, sidecar)
        label = f"target CSV {str(path)!r}"
        missing = [c for c in self.REQUIRED if c not in self._index]
        if missing:
            raise SourceError(f"{label} has no column(s) {', '.join(missing)}; a target CSV "
                              f"has {', '.join(self.REQUIRED)}")
        steps = np.diff(self.times_ns)
        off = np.flatnonzero(np.abs(steps - 1_000_000) > 1_000)
        if off.size:
            n = int(off[0]) + 1
            raise SourceError(f"{label} column 't_s' line {n + 2}: {self.cell(n, 't_s')!r} is "
                              f"{steps[n - 1] / 1e6:g} ms after the row before; a target CSV is "
                              f"a 1 kHz reference (1 ms steps)")

    def _check_sidecar(self) -> None:
        kind = self.sidecar.get("controller")
        if kind not in TARGET_KINDS:
            raise SidecarProblem(f"sidecar {str(self.sidecar_path)!r} controller {kind!r} is "
                                 f"not a target kind; expected one of "
                                 f"{', '.join(TARGET_KINDS)}")


class RingTargets(CsvSource):
    """``<stem>_targets.csv`` of a 1 kHz ring log: one row per setpoint, placed where the
    data-format document says setpoint k is in force, from the frame ``head_k + 1`` (on the
    run's ``seq`` time base). ``seq_effective`` is not the time base: the document says
    ``scripts/shm_log.py`` writes it late by up to one poll period; how late it is, is
    reported (``report``). Where the run has a ``target_idx`` column (the setpoint in force at
    each tick) the first tick of every setpoint must lie within the document's one tick of
    uncertainty of ``head_k + 1``; a larger disagreement is refused, naming both files' lines."""

    TOLERANCE_TICKS = 1  # the data-format document's "one tick of uncertainty"

    def __init__(self, path: Path, run: FrankaSource) -> None:
        super().__init__(path, "head", "ms")
        label = f"recording {str(path)!r}"
        missing = [c for c in _TARGET_COLUMNS if c not in self._index]
        if missing:
            raise SourceError(f"{label} (ring-log targets of {str(run.path)!r}) has no "
                              f"column(s) {', '.join(missing)}; its columns: "
                              f"{', '.join(self.header)}")
        if run.seq_first is None:
            raise SourceError(f"{label}: the run {str(run.path)!r} has no seq column to place "
                              f"its targets on (a 1 kHz ring log has one)")
        for name in ("head", "seq_effective", "target_idx"):
            raw = self.column(name)
            bad = np.flatnonzero(~np.isfinite(raw) | (raw != np.round(raw)))
            if bad.size:
                n = int(bad[0])
                raise SourceError(f"{label} column {name!r} line {n + 2}: "
                                  f"{self.cell(n, name)!r} is not an integer")
        index = self.column("target_idx").astype(np.int64)
        wrong = np.flatnonzero(index != np.arange(index.size))
        if wrong.size:
            n = int(wrong[0])
            raise SourceError(f"{label} column 'target_idx' line {n + 2}: expected {n} (one row "
                              f"per target, in order), got {int(index[n])}")
        declared = json_object(run.sidecar.get("ring_log") or {}).get("num_targets")
        if isinstance(declared, int) and not isinstance(declared, bool) and declared and \
                declared != index.size:
            raise SourceError(f"{label} has {index.size} target row(s), the sidecar "
                              f"{str(run.sidecar_path)!r} ring_log.num_targets says {declared}")
        head = self.column("head").astype(np.int64)
        in_force = head + 1  # setpoint k is in force from seq = head_k + 1
        late = self.column("seq_effective").astype(np.int64) - in_force
        self.report: JsonObject = {
            "placed_at": "head + 1 (the data-format document's first frame in force)",
            "targets": int(index.size),
            "seq_effective_late_rows": int(np.count_nonzero(late)),
            "seq_effective_late_max_ticks": int(late.max(initial=0)),
            "seq_effective_early_max_ticks": int(max(0, -late.min(initial=0))),
            "run_target_idx": None}
        if "target_idx" in run._index:
            self.report["run_target_idx"] = self._check_run(run, path, index.size, in_force)
        self.times_ns = (in_force - run.seq_first) * 1_000_000
        self.sidecar, self.sidecar_path = run.sidecar, run.sidecar_path

    def _check_run(self, run: FrankaSource, path: Path, count: int,
                   in_force: np.ndarray) -> dict[str, int]:
        """The run's ``target_idx`` against ``head + 1``: every setpoint's first tick in the
        run within TOLERANCE_TICKS of its frame; the counts of exact and off-by-one ones."""
        label = f"recording {str(run.path)!r} column 'target_idx'"
        used = run.column("target_idx")
        bad = np.flatnonzero(~np.isfinite(used) | (used != np.round(used)) | (used < -1))
        if bad.size:
            n = int(bad[0])
            raise SourceError(f"{label} line {n + 2}: {run.cell(n, 'target_idx')!r} "
                              f"is not a target row (an integer, -1 before the first)")
        used = used.astype(np.int64)
        beyond = np.flatnonzero(used >= count)
        if beyond.size:
            n = int(beyond[0])
            raise SourceError(f"{label} line {n + 2}: target {int(used[n])} is not in "
                              f"{str(path)!r} ({count} row(s))")
        seq = run.times_ns // 1_000_000 + run.seq_first
        # first run row of every setpoint that appears after the previous one took over
        # (a change right after a ring-log gap is not checked: it may have begun in the gap)
        changes = np.flatnonzero((np.diff(used) != 0) & (np.diff(seq) == 1)) + 1
        checked = exact = 0
        for n in changes.tolist():
            k = int(used[n])
            if k < 0:
                continue
            shift = int(seq[n] - in_force[k])
            checked += 1
            exact += shift == 0
            if abs(shift) > self.TOLERANCE_TICKS:
                raise SourceError(
                    f"{label} line {n + 2}: target {k} is first in force at seq {int(seq[n])}, "
                    f"but {str(path)!r} line {k + 2} has head {int(in_force[k]) - 1} (in force "
                    f"from seq {int(in_force[k])}: {shift:+d} tick(s), more than the data-format "
                    f"document's one tick of uncertainty)")
        return {"checked": checked, "exact": exact, "off_by_one": checked - exact}

    def column(self, name: str) -> np.ndarray:
        derived = _derived(self, name, super().column)
        return derived if derived is not None else super().column(name)

    def expand(self, columns: Sequence[str]) -> list[str]:
        out: list[str] = []
        for name in columns:
            if name == "rotvec_des":
                out.extend(_ROTVEC)
            elif name == "xrel_des":
                out.extend(_XREL)
            elif name == "quat_des":
                out.extend(f"quat_des_{c}" for c in "wxyz")
            elif name == "x_des":
                out.extend(f"x_des_{c}" for c in "xyz")
            elif name in self._index or name in _ROTVEC or name in _XREL:
                out.append(name)
            else:
                raise SourceError(f"recording {str(self.path)!r} has no column {name!r}; its "
                                  f"columns: {', '.join(self.header)} (and the groups x_des, "
                                  f"quat_des, rotvec_des, xrel_des)")
        return out


def _derived(source: FrankaSource | RingTargets, name: str, column: Column) -> np.ndarray | None:
    """A column computed from the file's and the sidecar's (``rotvec_des_*``,
    ``xrel_des_*``), cached on the source; None for any other name (or one the file has)."""
    if name in source._index:
        return None
    make: Callable[[], Sequence[np.ndarray]]
    if name in _ROTVEC:
        names, make = _ROTVEC, lambda: _rotvec(source, source.sidecar, source.sidecar_path,
                                                column)
    elif name in _XREL:
        names, make = _XREL, lambda: _xrel(source, column)
    else:
        return None
    cached: np.ndarray | None = source._columns.get(name)
    if cached is None:
        source._columns.update(zip(names, make()))
        cached = source._columns[name]
    return cached


def _xrel(source: FrankaSource | RingTargets, column: Column) -> list[np.ndarray]:
    """The xrel_des columns: ``x_des_*`` in the anchor frame (``x_anchor``,
    ``q_anchor_xyzw``): the position setpoints of site actuators whose reference site is the
    anchor, as rotvec_des are the orientation ones."""
    target = _finite_columns(source, column, "x_des_", "xyz")
    try:
        relative = anchor_relative(target, source.sidecar, source.sidecar_path)
    except SidecarProblem as exc:
        raise SourceError(str(exc)) from None
    return [np.ascontiguousarray(relative[:, i]) for i in range(3)]


def _rotvec(source: CsvSource, sidecar: Mapping[str, JsonValue], sidecar_path: Path,
            column: Column) -> list[np.ndarray]:
    """The rotvec_des columns of ``source``: ``log(conj(q_anchor) ⊗ q_des)``."""
    from ..alignment import quat_error

    anchor = sidecar.get("q_anchor_xyzw")
    if not (isinstance(anchor, list) and len(anchor) == 4):
        raise SourceError(f"sidecar {str(sidecar_path)!r} has no q_anchor_xyzw (4 "
                          f"numbers) for the rotvec_des columns")
    x, y, z, w = (float(v) for v in anchor)
    target = _finite_columns(source, column, "quat_des_", "wxyz")
    rotvec = quat_error(target, np.tile([w, x, y, z], (target.shape[0], 1)))
    return [np.ascontiguousarray(rotvec[:, i]) for i in range(3)]


def _finite_columns(source: CsvSource, column: Column, stem: str, axes: str) -> np.ndarray:
    """The columns ``stem + axis`` side by side; a row with NaN is a SourceError naming the
    count, the first one's time and its line of the file."""
    values = np.column_stack([column(f"{stem}{c}") for c in axes])
    bad = ~np.all(np.isfinite(values), axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        times = source.times_ns
        raise SourceError(f"recording {str(source.path)!r} columns {stem}*: "
                          f"{int(bad.sum())} row(s) with NaN, the first at "
                          f"{when(times[first], int(times[0]))} (line "
                          f"{first + source.first_line})")
    return values
