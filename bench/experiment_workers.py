"""Experiment throughput: eight variants of the wheel-damping study, workers=1 against workers=2.

Both settings run the same generated experiment (baseline + 8 damping variants of the
drivetrain example, each run writing its MCAP trace), interleaved over several repeats so that
machine noise hits both alike; the medians of the wall times and their ratio are reported.
workers=2 pays for spawning two worker processes (each imports MuJoCo) once per experiment.

Usage: ``python bench/experiment_workers.py [--steps 4000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from fibril_sim_core.experiments.runner import run_experiment

EXAMPLE = Path(__file__).resolve().parents[1] / "config/examples/drivetrain"
DAMPINGS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15)


def write_experiment(folder: Path, workers: int, steps: int) -> Path:
    variants = "\n".join(f"  - id: damping-{i}\n    parameter_values: {{wheel_damping: {d}}}"
                         for i, d in enumerate(DAMPINGS))
    path = folder / f"study-w{workers}.yaml"
    path.write_text(f"""schema_version: {{major: 1, minor: 0}}
id: bench-w{workers}
model: {{manifest: {EXAMPLE / 'simulation.yaml'}}}
scenario: {EXAMPLE / 'drive-start.yaml'}
parameters: {{baseline_overlay: {EXAMPLE / 'damping-baseline.yaml'}}}
variants:
{variants}
metrics:
  - {{id: displacement, kind: signal, signal: body:chassis.position, reduce: delta_norm}}
  - {{id: wheel_speed, kind: signal, signal: joint:wheel_joint.velocity, reduce: final}}
execution: {{steps: {steps}, timeout_seconds: 600, workers: {workers}, cpu_budget: 2,
             mujoco_internal_threads: 1}}
""")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fibril-bench-exp-"))
    times: dict[int, list[float]] = {1: [], 2: []}
    results: dict[int, dict] = {}
    try:
        experiments = {w: write_experiment(folder, w, args.steps) for w in times}
        for repeat in range(args.repeats):
            for workers in (1, 2) if repeat % 2 == 0 else (2, 1):
                traces = folder / f"traces-w{workers}-{repeat}"
                start = time.perf_counter()
                results[workers] = run_experiment(experiments[workers], traces=traces)
                times[workers].append(time.perf_counter() - start)
                shutil.rmtree(traces)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    same = all(
        a["metrics"]["wheel_speed"] == b["metrics"]["wheel_speed"] and a["status"] == b["status"]
        for a, b in zip(results[1]["runs"], results[2]["runs"]))
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"9 runs (baseline + {len(DAMPINGS)} variants) x {args.steps} ticks, "
          f"{args.repeats} repeats, {os.cpu_count()} cpu(s)")
    print(f"  workers=1   median {one:7.2f} s   {[round(t, 2) for t in times[1]]}")
    print(f"  workers=2   median {two:7.2f} s   {[round(t, 2) for t in times[2]]}")
    print(f"  speed-up workers=2 vs 1: {one / two:.2f}x  (wall ratio w2/w1 {two / one:.2f}); "
          f"identical run records: {same}")


if __name__ == "__main__":
    main()
