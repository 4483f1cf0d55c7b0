"""SIL closed loop: control periods per second in sync mode against free running at rtf 1.

The drivetrain example (1 kHz physics) with the example wheel-speed controller at 500 Hz
(control period 2 ms), as two processes on a private ROS domain over shared memory:

- sync: the node steps one control period, publishes its outputs and /clock, waits for the
  controller's MotorCommand, steps on; as fast as that loop goes.
- free: the node paces at real-time factor 1 and the controller answers when it can.

Reported: control periods per second (simulated ticks / 2 per wall second) of each, measured
with nothing else subscribed (the node and the controller alone) and again with the observer
below attached (a third Python process on the same cores), their ratio, the controller's commands per period, and the round-trip latency per period: in sync mode
the wall time between consecutive /clock messages at an observer (one period: step, publish,
controller, answer); in free mode the wall time from a /clock to the next command seen by the
observer (the controller's reaction). Target: sync >= 2x real time (1000 periods/s).

    python bench/sil_loop.py [--seconds 5] [--repeats 1]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for package in ('fibril_sim_core', 'fibril_calibration', 'fibril_sim_ros'):
    sys.path.insert(0, str(ROOT / package))
os.environ.setdefault('FASTDDS_BUILTIN_TRANSPORTS', 'SHM')
os.environ['PYTHONPATH'] = os.pathsep.join(
    [str(ROOT / p) for p in ('fibril_sim_core', 'fibril_calibration', 'fibril_sim_ros')]
    + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p])

MANIFEST = ROOT / 'config' / 'examples' / 'drivetrain' / 'simulation.yaml'
CONTROL_PERIOD_S = 0.002
PERIOD_TICKS = 2  # 1 ms physics


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float('nan')


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    except OSError:
        return float('nan')
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def _from_checkout(root: Path | None, module: str, entry: str = 'main') -> list[str] | None:
    """A command running ``module`` of another checkout (``--baseline``), else None."""
    if root is None:
        return None
    paths = [str(root / 'fibril_sim_ros'), str(root / 'fibril_sim_core')]
    code = (f'import sys; sys.path[:0] = {paths!r}; '
            f'from {module} import {entry}; sys.exit({entry}())')
    return [sys.executable, '-c', code]


def measure(sync: bool, seconds: float, baseline: Path | None = None) -> dict[str, float]:
    from fibril_sim_ros.testing import SimHarness, example_controller_command, ros_args
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    from fibril_msgs.msg import MotorCommand

    options = dict(sync_topics=['/motor/command'], control_period=CONTROL_PERIOD_S,
                   sync_timeout=10.0) if sync else dict(real_time_factor=1.0)
    controller = example_controller_command()
    node_command = _from_checkout(baseline, 'fibril_sim_ros.sim_node')
    if baseline is not None:  # that checkout's controller too, with the same parameters
        controller = [*_from_checkout(baseline, 'fibril_sim_ros.examples.wheel_speed_controller'),
                      *ros_args({'use_sim_time': True})]
    with SimHarness(MANIFEST, controller=controller, node_command=node_command,
                    **options) as sim:
        clocks: list[float] = []
        commands: list[float] = []
        latencies: list[float] = []

        def on_clock(_: Clock) -> None:
            clocks.append(time.perf_counter())

        def on_command(_: MotorCommand) -> None:
            now = time.perf_counter()
            commands.append(now)
            if clocks:
                latencies.append(now - clocks[-1])

        sim.set_paused(False)
        sim.spin(0.5)  # warm-up
        # 1. The rate, nobody else listening: the loop of the node and the controller alone.
        cpu0 = {p.name: _cpu_seconds(p.pid) for p in sim.processes}
        before, wall0 = sim.get_state(), time.perf_counter()
        sim.spin(seconds)
        after, wall1 = sim.get_state(), time.perf_counter()
        cpu1 = {p.name: _cpu_seconds(p.pid) for p in sim.processes}
        periods = (after.tick - before.tick) / PERIOD_TICKS
        # 2. The round trip, seen by an observer in this process (/clock and the commands,
        # deserialized by rclpy's SingleThreadedExecutor): a third busy process on the same
        # cores, so the rate is measured again with it, and reported apart.
        best_effort = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
        sim.node.create_subscription(Clock, '/clock', on_clock, best_effort)
        sim.node.create_subscription(MotorCommand, '/motor/command', on_command,
                                     QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
        sim.spin(0.3)
        clocks.clear(), commands.clear(), latencies.clear()
        observed0, observed_wall0 = sim.get_state(), time.perf_counter()
        sim.spin(seconds)
        observed1, observed_wall1 = sim.get_state(), time.perf_counter()
        observed_rate = (observed1.tick - observed0.tick) / PERIOD_TICKS / (
            observed_wall1 - observed_wall0)
        cpu = {name: (cpu1[name] - cpu0[name]) / periods * 1e3 if periods else 0.0
               for name in cpu0}
        wall = wall1 - wall0
        intervals = [b - a for a, b in itertools.pairwise(clocks)]
        round_trip = intervals if sync else latencies
        # sync: the period split at the observer into the controller's part (/clock -> its
        # command) and the node's part (command -> next /clock: commit, step, publish)
        node_part = []
        index = 0
        for command in commands:
            while index + 1 < len(clocks) and clocks[index + 1] <= command:
                index += 1
            if index + 1 < len(clocks):
                node_part.append(clocks[index + 1] - command)
        return {
            'controller_p50_ms': 1e3 * _percentile(latencies, 0.5),
            'node_p50_ms': 1e3 * _percentile(node_part, 0.5),
            'periods_per_s': periods / wall,
            'observed_periods_per_s': observed_rate,
            'real_time_factor': periods * CONTROL_PERIOD_S / wall,
            # accepted by the node's ingress (the observer, a slower reader, may miss some)
            'commands_per_period': (after.accepted_inputs - before.accepted_inputs) / periods
            if periods else 0.0,
            'round_trip_p50_ms': 1e3 * _percentile(round_trip, 0.5),
            'round_trip_p99_ms': 1e3 * _percentile(round_trip, 0.99),
            # CPU time (all threads, user + system) per control period of each process
            'node_cpu_ms': cpu.get('fibril_sim', float('nan')),
            'controller_cpu_ms': sum(v for k, v in cpu.items() if k != 'fibril_sim'),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=5.0, help='wall seconds per measurement')
    parser.add_argument('--repeats', type=int, default=1)
    parser.add_argument('--baseline', type=Path, default=None,
                        help='another checkout: its node and controller run too, interleaved '
                             '(old vs new in the same run)')
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {'sync': [], 'free': []}
    if args.baseline is not None:
        results['sync (baseline)'] = []
    for _ in range(args.repeats):  # interleaved
        results['sync'].append(measure(True, args.seconds))
        if args.baseline is not None:
            results['sync (baseline)'].append(measure(True, args.seconds,
                                                      args.baseline.resolve()))
        results['free'].append(measure(False, args.seconds))

    def median(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[mode])

    for mode, what in (('sync', 'clock-to-clock (one period)'),
                       ('free', 'clock-to-command (controller reaction)')):
        print(f'{mode:4}: {median(mode, "periods_per_s"):7.0f} control periods/s '
              f'(real-time factor {median(mode, "real_time_factor"):.2f}), '
              f'{median(mode, "commands_per_period"):.2f} commands/period, round trip '
              f'{what} p50 {median(mode, "round_trip_p50_ms"):.2f} ms, '
              f'p99 {median(mode, "round_trip_p99_ms"):.2f} ms')
    print(f'with the observer attached (a third process reading /clock and the commands): '
          f'sync {median("sync", "observed_periods_per_s"):.0f}, free '
          f'{median("free", "observed_periods_per_s"):.0f} control periods/s')
    print(f'sync period split at the observer: controller (/clock -> command) p50 '
          f'{median("sync", "controller_p50_ms"):.2f} ms, node (command -> next /clock) p50 '
          f'{median("sync", "node_p50_ms"):.2f} ms')
    print(f'sync CPU per period: node {median("sync", "node_cpu_ms"):.2f} ms, controller '
          f'{median("sync", "controller_cpu_ms"):.2f} ms (all threads; a period cannot be '
          f'shorter than the part of them on its critical path)')
    if args.baseline is not None:
        mode = 'sync (baseline)'
        print(f'baseline {args.baseline} (its node and controller), sync: '
              f'{median(mode, "periods_per_s"):.0f} control periods/s, round trip p50 '
              f'{median(mode, "round_trip_p50_ms"):.2f} ms (controller '
              f'{median(mode, "controller_p50_ms"):.2f} ms, node {median(mode, "node_p50_ms"):.2f}'
              f' ms), CPU per period: node {median(mode, "node_cpu_ms"):.2f} ms, controller '
              f'{median(mode, "controller_cpu_ms"):.2f} ms')
    ratio = median('sync', 'periods_per_s') / median('free', 'periods_per_s')
    print(f'sync / free-running at rtf 1: {ratio:.2f}x (target >= 2x real time: '
          f'{"met" if median("sync", "real_time_factor") >= 2 else "NOT met"})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
