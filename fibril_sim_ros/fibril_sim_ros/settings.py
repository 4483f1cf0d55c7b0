"""The sim node's parameters, checked once into a frozen ``NodeSettings`` (no rclpy here).

``NodeSettings.from_parameters(get)`` takes any ``name -> value`` lookup (the node passes its
parameters; a test passes a dict's ``get``) and raises ``NodeConfigError`` naming the
parameter and its value. ``NodeTiming.of`` adds what needs the plan: periods as whole ticks,
sync topics among the bridge's inputs, and the runtime's options.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.manifest import RuntimeOptions, real_time_factor_problem
from fibril_sim_core.runtime.server import ServerOptions
from fibril_sim_core.timebase import Timebase

from .priority import DEFAULT_THREAD_PRIORITY, MAX_BOOST

Mode = Literal["realtime", "fast", "sync"]
#: A parameter lookup: its value, or None when it has none (an unset string array).
ParameterLookup = Callable[[str], object]

DEFAULT_LATENESS_WARN_MS = 10.0
#: Parameters read at start-up only (a change while running is refused).
START_UP_ONLY = ("manifest", "bridge", "seed", "trace_dir", "clock_period", "sync_topics",
                 "sync_timeout", "control_period", "start_paused", "server_socket",
                 "thread_priority")


class NodeConfigError(FibrilError):
    """A parameter of the node is missing or invalid."""


def finite_number(name: str, value: object) -> float:
    """``value`` as a float; NodeConfigError unless it is a finite int or float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise NodeConfigError(f"parameter {name!r} must be a finite number, got {value!r}")
    return float(value)


def lateness_threshold(value: object) -> float:
    """``lateness_warn_ms`` in seconds (a positive number of ms)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise NodeConfigError(f"parameter 'lateness_warn_ms' must be a number of "
                              f"milliseconds > 0, got {value!r}")
    return float(value) / 1e3


def real_time_factor(value: object) -> float:
    """A real-time factor the node takes (0: as fast as possible)."""
    problem = real_time_factor_problem(value, zero_allowed=True)
    if problem is not None:
        raise NodeConfigError(f"parameter 'real_time_factor' {problem}")
    return finite_number("real_time_factor", value)


def server_options(value: object) -> ServerOptions | None:
    """``server_socket``: "" none (default), ``auto`` a private directory, else a path
    (its directory must exist; the socket is made 0600)."""
    text = str(value or "").strip()
    if not text:
        return None
    if text == "auto":
        return ServerOptions()
    path = Path(text).expanduser()
    if not path.parent.is_dir():
        raise NodeConfigError(f"parameter server_socket: directory {path.parent} does not "
                              f"exist (value {text!r})")
    return ServerOptions(socket=path)


@dataclass(frozen=True)
class NodeSettings:
    """Every start-up parameter of the node, checked."""

    manifest: Path
    bridge: str | None  # None: the default topics
    real_time_factor: float  # 0: as fast as possible
    start_paused: bool
    seed: int | None  # None: the manifest's scenario.seed
    trace_dir: str | None
    clock_period_s: float  # <= 0: the fastest device's period
    sync_topics: tuple[str, ...]
    sync_timeout_s: float  # sync mode only
    control_period_s: float  # sync mode only; 0: the clock period
    server: ServerOptions | None
    lateness_warn_s: float
    thread_priority: int

    @property
    def mode(self) -> Mode:
        if self.sync_topics:
            return "sync"
        return "realtime" if self.real_time_factor > 0 else "fast"

    @classmethod
    def from_parameters(cls, get: ParameterLookup) -> NodeSettings:
        manifest = str(get("manifest") or "")
        if not manifest:
            raise NodeConfigError("parameter 'manifest' is required (-p manifest:=PATH)")
        rtf = real_time_factor(get("real_time_factor"))
        seed = _integer("seed", get("seed"), -1)
        if seed < -1:
            raise NodeConfigError(f"parameter 'seed' must be >= 0 (or -1: the manifest's "
                                  f"scenario.seed), got {seed}")
        raw_topics = get("sync_topics")
        topics = raw_topics if isinstance(raw_topics, (list, tuple)) else []
        sync_topics = tuple(str(t) for t in topics if str(t))
        timeout = control = 0.0
        if sync_topics:
            control = finite_number("control_period", get("control_period"))
            timeout = finite_number("sync_timeout", get("sync_timeout"))
            if not timeout > 0:
                raise NodeConfigError(f"parameter 'sync_timeout' must be > 0, got {timeout!r}")
        priority = _integer("thread_priority", get("thread_priority"), DEFAULT_THREAD_PRIORITY)
        if not 0 <= priority <= MAX_BOOST:
            raise NodeConfigError(f"parameter 'thread_priority' must be in 0..{MAX_BOOST}, "
                                  f"got {priority}")
        return cls(manifest=Path(manifest), bridge=str(get("bridge") or "") or None,
                   real_time_factor=rtf, start_paused=bool(get("start_paused")),
                   seed=None if seed == -1 else seed,
                   trace_dir=str(get("trace_dir") or "") or None,
                   clock_period_s=finite_number("clock_period", get("clock_period")),
                   sync_topics=sync_topics, sync_timeout_s=timeout, control_period_s=control,
                   server=server_options(get("server_socket")),
                   lateness_warn_s=lateness_threshold(get("lateness_warn_ms")),
                   thread_priority=priority)


@dataclass(frozen=True)
class NodeTiming:
    """The settings' periods on the plan's time grid, and how the runtime paces."""

    clock_ticks: int  # 0: no /clock period (no device)
    fast_frame_ticks: int  # as fast as possible, a frame is at least this long
    control_ticks: int  # sync mode: one period; else 0
    options: RuntimeOptions

    @classmethod
    def of(cls, settings: NodeSettings, timebase: Timebase, fastest_period_ticks: int,
           manifest_frame_s: float, input_topics: Collection[str]) -> NodeTiming:
        fastest = fastest_period_ticks * timebase.timestep_s
        clock_period = settings.clock_period_s or fastest
        clock_ticks = _ticks(timebase, "clock_period", clock_period) if clock_period > 0 else 0
        frame_s = manifest_frame_s
        # Fast mode keeps the manifest's frames (fewer host round trips) and publishes /clock
        # between device messages instead; paced modes make a frame of each clock period.
        fast_frame_ticks = max(1, timebase.ticks_ceil(frame_s))
        if clock_ticks:
            frame_s = min(frame_s, clock_ticks * timebase.timestep_s)
        # Paused until the node is complete: real-time pacing starts from then, not from the
        # host thread's start with the rest of the set-up still to do.
        if settings.sync_topics:
            for topic in settings.sync_topics:
                if topic not in input_topics:
                    raise NodeConfigError(
                        f"parameter 'sync_topics': {topic!r} is not an input topic of the "
                        f"bridge; inputs: {', '.join(sorted(input_topics)) or 'none'}")
            control = settings.control_period_s or clock_period or timebase.timestep_s
            control_ticks = _ticks(timebase, "control_period", control)
            # As fast as possible in frames of one control period, paused until resumed; the
            # host waits for the answers at the end of each frame (SyncDriver.on_frame).
            options = RuntimeOptions(mode="fast", real_time_factor=1.0,
                                     frame_duration_s=control_ticks * timebase.timestep_s,
                                     start_paused=True)
            return cls(clock_ticks, fast_frame_ticks, control_ticks, options)
        rtf = settings.real_time_factor
        options = RuntimeOptions(mode="realtime" if rtf > 0 else "fast",
                                 real_time_factor=rtf if rtf > 0 else 1.0,
                                 frame_duration_s=frame_s, start_paused=True)
        return cls(clock_ticks, fast_frame_ticks, 0, options)


def _ticks(timebase: Timebase, name: str, seconds: float) -> int:
    try:
        return timebase.ticks(seconds, 1)
    except ValueError as exc:
        raise NodeConfigError(f"parameter {name!r}: {exc}") from None


def _integer(name: str, value: object, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise NodeConfigError(f"parameter {name!r} must be an integer, got {value!r}")
    return value
