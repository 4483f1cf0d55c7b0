"""SIL demo: the drivetrain simulation and the wheel-speed PI controller as two processes.

    python -m fibril_sim_ros.examples.sil_demo [--duration 3] [--mode realtime|sync|both]
        [--setpoint 10] [--seed 0] [--check]

Runs the simulation node and ``sil_controller`` on a private ROS domain (shared-memory
transport), lets ``--duration`` seconds of sim time pass, and prints how the wheel tracked its
setpoint (speed over time, time to reach it, overshoot, steady-state error) and the measured
real-time factor: in real time (factor 1) and in sync mode (lockstep with the controller, as
fast as the two answer each other). Exit status 0 when every run completed (with ``--check``:
and met the example's bounds, within 5 % of the setpoint by 0.5 s and overshoot at most 10 %),
1 otherwise, 2 for bad options. A real-time run on a machine too busy for the controller to
answer every period tracks worse; sync mode does not depend on it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

REACH_WITHIN_S = 0.5
MAX_OVERSHOOT = 0.10
WINDOW = 25  # encoder samples averaged (50 ms at 500 Hz)
EXAMPLE = Path('config') / 'examples' / 'drivetrain' / 'simulation.yaml'


def default_manifest() -> Path:
    """The drivetrain example: in the source tree, else in the installed package's share."""
    source = Path(__file__).resolve().parents[3] / EXAMPLE
    if source.is_file():
        return source
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory('fibril_sim_ros')) / EXAMPLE
    except (ImportError, LookupError):
        return source


@dataclass(frozen=True)
class Tracking:
    """How one run tracked the setpoint."""

    mode: str
    setpoint: float
    speeds: list[tuple[float, float]]  # (sim s since start, rad/s over WINDOW samples)
    reached_s: float | None
    peak: float
    steady_error: float
    real_time_factor: float
    wall_s: float

    @property
    def overshoot(self) -> float:
        return max(0.0, self.peak - self.setpoint) / self.setpoint

    @property
    def ok(self) -> bool:
        return (self.reached_s is not None and self.reached_s <= REACH_WITHIN_S
                and self.overshoot <= MAX_OVERSHOOT)


def run(mode: str, manifest: Path, duration: float, setpoint: float, seed: int) -> Tracking:
    from sensor_msgs.msg import JointState

    from fibril_sim_ros.testing import SimHarness, example_controller_command

    sync = mode == 'sync'
    with SimHarness(manifest, seed=seed, controller=example_controller_command(setpoint=setpoint),
                    subscriptions={'/wheel_encoder': JointState}, real_time_factor=1.0,
                    sync_topics=['/motor/command'] if sync else (),
                    control_period=0.002 if sync else None) as sim:
        before, wall = sim.get_state(), time.perf_counter()
        sim.set_paused(False)
        samples = sim.collect('/wheel_encoder', JointState, duration_sim=duration,
                              timeout_wall=max(120.0, 60 * duration))
        after, wall = sim.get_state(), time.perf_counter() - wall
    rtf = (after.session_time_ns - before.session_time_ns) / 1e9 / wall
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in samples]
    angles = [m.position[0] for m in samples]
    start = stamps[0] if stamps else 0.0
    speeds = [(stamps[i] - start,
               (angles[i] - angles[i - WINDOW]) / (stamps[i] - stamps[i - WINDOW]))
              for i in range(WINDOW, len(samples))]
    reached = next((t for t, v in speeds if abs(v - setpoint) <= 0.05 * setpoint), None)
    steady = [v for t, v in speeds if t >= duration / 2] or [0.0]
    return Tracking(mode, setpoint, speeds, reached, max((v for _, v in speeds), default=0.0),
                    mean(steady) - setpoint, rtf, wall)


def report(result: Tracking) -> str:
    lines = [f'{result.mode}: {len(result.speeds)} encoder windows, sim {result.speeds[-1][0]:.2f}'
             f' s in {result.wall_s:.2f} s wall: real-time factor {result.real_time_factor:.2f}'
             if result.speeds else f'{result.mode}: no encoder samples']
    marks = [0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0]
    row = []
    for mark in marks:
        near = [v for t, v in result.speeds if abs(t - mark) < 0.002]
        if near:
            row.append(f'{mark:g} s: {near[0]:5.2f}')
    lines.append('  wheel speed (rad/s, 50 ms average) ' + ' | '.join(row))
    reached = 'never' if result.reached_s is None else f'{result.reached_s:.3f} s'
    lines.append(f'  setpoint {result.setpoint:g} rad/s: within 5 % after {reached} (bound '
                 f'{REACH_WITHIN_S} s), peak {result.peak:.2f} rad/s = overshoot '
                 f'{100 * result.overshoot:.1f} % (bound {100 * MAX_OVERSHOOT:.0f} %), '
                 f'steady-state error {result.steady_error:+.3f} rad/s -> '
                 f'{"OK" if result.ok else "OUT OF BOUNDS"}')
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='sil_demo', description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=3.0, help='sim seconds per run')
    parser.add_argument('--mode', choices=('realtime', 'sync', 'both'), default='both')
    parser.add_argument('--setpoint', type=float, default=10.0, help='rad/s')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--manifest', type=Path, default=None)
    parser.add_argument('--check', action='store_true', help='exit 1 when a run misses the bounds')
    args = parser.parse_args(argv)
    if not 0.1 <= args.duration <= 60:
        parser.error(f'--duration must be within 0.1 .. 60 s of sim time, got {args.duration}')
    if not (math.isfinite(args.setpoint) and args.setpoint > 0):
        parser.error(f'--setpoint must be a speed > 0 rad/s, got {args.setpoint}')
    args.manifest = args.manifest or default_manifest()
    if not args.manifest.is_file():
        parser.error(f'--manifest {args.manifest}: no such file')
    from fibril_sim_ros.testing import SimHarnessError

    modes = ('realtime', 'sync') if args.mode == 'both' else (args.mode,)
    ok = True
    for mode in modes:
        try:
            result = run(mode, args.manifest, args.duration, args.setpoint, args.seed)
        except SimHarnessError as exc:
            print(f'sil_demo: {mode} run failed: {exc}', file=sys.stderr)
            return 1
        print(report(result), flush=True)
        ok &= result.ok
    return 0 if ok or not args.check else 1


if __name__ == '__main__':
    sys.exit(main())
