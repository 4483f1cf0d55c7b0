"""In real time the host hands each record over at its due wall time, not at a frame's end.

A sample is due when the paced simulation clock reaches its delivery time (acquisition +
device latency). The host steps a piece of about a millisecond ahead and then holds each
boundary's records until that boundary's wall time: a controller sees the samples spread as
the sensor produced them, not in bursts at frame (or piece) ends. A fake clock makes this
exact: stepping takes no time on it, so every hand-over happens at its due time to the
nanosecond, and a stall on the host thread shows up as lateness and as a host overrun.
"""

from __future__ import annotations

import threading

import pytest
from _models import HINGE_XML, build, device, motor
from _runtime_rig import wait_for
from fibril_sim_core.manifest import RuntimeOptions
from fibril_sim_core.records import DeviceOutput, FrameTiming
from fibril_sim_core.runtime.host import SimulationHost
from fibril_sim_core.runtime.observation import ObservationRequest


class FakeClock:
    """Time moves only when the host waits (stepping is instantaneous), or when told to."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.t += seconds
        return False


def _host(tmp_path, clock: FakeClock) -> SimulationHost:
    # 4 kHz physics: a 1 ms pacing piece is 4 ticks; the encoder acquires every 1 ms and
    # delivers 0.5 ms later, the IMU every 2 ms at once (latency 0: the next boundary).
    plan = build(tmp_path, HINGE_XML.replace('timestep="0.001"', 'timestep="0.00025"'), [
        motor("m", "drive", "drive/command"),
        device("enc", "encoder", {"joint": "shaft"}, period=0.001, latency=0.0005),
        device("gyro", "encoder", {"joint": "axle"}, period=0.002)])
    return SimulationHost(plan.create_instance(seed=0, collect=False),
                          RuntimeOptions(mode="realtime", frame_duration_s=0.02,
                                         start_paused=True), clock=clock)


def _run(host: SimulationHost, until) -> None:
    if host.thread is None:
        host.start()
    try:
        host.request("resume")
        wait_for(until, 30)
    finally:
        host.stop()


def test_samples_are_handed_over_at_their_due_time_not_batched_to_frame_ends(tmp_path) -> None:
    clock = FakeClock()
    host = _host(tmp_path, clock)
    got: list = []
    host.add_callback(lambda record: got.append((clock.now(), record)))
    observed: list = []  # ground truth (joint states) at 500 Hz, through its own sink
    host.start()
    host.request("observe", (ObservationRequest(500.0), lambda o: observed.append(
        (clock.now(), o)), None))
    _run(host, lambda: sum(type(r) is FrameTiming for _, r in list(got)) >= 6)
    # (Up to the 5th frame: stopping ends the frame it interrupts at once.)
    end = [r for _, r in got if type(r) is FrameTiming][4].session_time_ns
    samples = [(now, r) for now, r in got
               if type(r) is DeviceOutput and r.session_delivery_time_ns <= end]
    frames = [(now, r) for now, r in got if type(r) is FrameTiming][:5]
    assert {r.device_id for _, r in samples} == {"enc", "gyro"}
    timestep = 250_000
    for now, record in samples:
        # Emitted at its delivery boundary (latency 0: the boundary after acquisition) ...
        emitted = max(record.session_delivery_time_ns,
                      record.session_acquisition_time_ns + timestep)
        # ... and handed over exactly when the paced clock reaches it.
        assert now == pytest.approx(host.wall_time(emitted), abs=1e-9), record
    observed = [(now, o) for now, o in list(observed) if o.session_time_ns <= end]
    assert len(observed) >= 5 * 10
    for now, observation in observed:  # so does the ground truth
        assert now == pytest.approx(host.wall_time(observation.session_time_ns), abs=1e-9)
    for now, frame in frames:  # /clock goes out at its time too
        assert now == pytest.approx(host.wall_time(frame.session_time_ns), abs=1e-9)
    # 20 ms frames, yet no two encoder samples leave together: one a millisecond.
    encoder = [now for now, r in samples if r.device_id == "enc"]
    assert len(encoder) >= 5 * 20 - 2
    gaps = [b - a for a, b in zip(encoder, encoder[1:])]
    assert min(gaps) == pytest.approx(0.001, abs=1e-9)
    assert max(gaps) == pytest.approx(0.001, abs=1e-9)


def test_a_stalled_host_delivers_late_and_reports_the_overrun(tmp_path) -> None:
    clock = FakeClock()
    host = _host(tmp_path, clock)
    got: list = []
    stalled: list = []

    def stall(record: FrameTiming) -> None:  # the test hook: the host thread is stuck 300 ms
        if len(stalled) == 0 and record.session_time_ns >= 40_000_000:
            stalled.append(clock.now())
            clock.t += 0.3

    from fibril_sim_core.runtime.subscription import RecordFilter

    host.add_callback(stall, RecordFilter.of(kinds="frame_timing"))
    host.add_callback(lambda record: got.append((clock.now(), record)),
                      RecordFilter.of(kinds="device_output"))
    _run(host, lambda: stalled and got[-1][0] > stalled[0] + 0.31)
    assert stalled
    assert host.overrun_s == pytest.approx(0.3, abs=1e-6)
    assert host.overrun_at == pytest.approx(stalled[0] + 0.3, abs=1e-6)
    late = [now - host.wall_time(r.session_delivery_time_ns) for now, r in got
            if now > stalled[0]]
    assert late and late[0] == pytest.approx(0.3, abs=0.001)  # the first sample after it


def test_thread_priority_renices_the_given_threads_or_says_why_not() -> None:
    import os

    from fibril_sim_ros.priority import boost

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        problem = boost([thread, None, threading.Thread()], 5)  # (unstarted: skipped)
        if os.geteuid() == 0:
            assert problem is None
            assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == -5
        else:
            assert problem is not None and "CAP_SYS_NICE" in problem
    finally:
        stop.set()
        thread.join()
