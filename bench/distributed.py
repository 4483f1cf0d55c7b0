"""The Dask backend against the local one on the same cores: a 32-run experiment and the
finite-difference Jacobian batches of the 7-joint Panda calibration.

* experiment: baseline + 31 wheel-damping variants of the drivetrain example (each run writes
  its MCAP trace); the local backend with ``workers: 2`` against ``--scheduler`` on a
  ``LocalCluster`` of 2 single-threaded worker processes, then the same on 8 worker processes
  (throughput per worker-core: what scaling out beyond the cores costs);
* calibration: ``CalibrationProblem.evaluate_many`` of Jacobian batches (the point and one
  perturbation per parameter: 22 candidates × the training windows) of
  config/examples/panda/calibration.yaml, ``max_parallelism: 2`` threads against 2 Dask workers.

The settings alternate (local, dask, dask, local, ...) so that machine load hits both alike; the
cluster is started once, outside the timings (its start-up is reported apart). Per-task overhead
is ``(dask wall - local wall) * workers / tasks``. Medians of ``--repeats`` and ratios
(throughput of dask / local) are printed.

Usage: ``python bench/distributed.py [--steps 2000] [--repeats 1] [--batches 2] [--skip-8]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# This file's name is the Dask package's: its folder must not shadow ``import distributed``.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config/examples/drivetrain"
PANDA = REPO / "config/examples/panda/calibration.yaml"
RUNS = 32


def write_experiment(folder: Path, steps: int) -> Path:
    variants = "\n".join(f"  - id: damping-{i:02d}\n    parameter_values: {{wheel_damping: "
                         f"{0.005 + 0.005 * i:.4f}}}" for i in range(RUNS - 1))
    path = folder / "study.yaml"
    path.write_text(f"""schema_version: {{major: 1, minor: 0}}
id: bench-distributed
model: {{manifest: simulation.yaml}}
scenario: drive-start.yaml
parameters: {{baseline_overlay: damping-baseline.yaml}}
variants:
{variants}
metrics:
  - {{id: displacement, kind: signal, signal: body:chassis.position, reduce: delta_norm}}
  - {{id: wheel_speed, kind: signal, signal: joint:wheel_joint.velocity, reduce: final}}
execution: {{steps: {steps}, timeout_seconds: 600, workers: 2, cpu_budget: 2,
             mujoco_internal_threads: 1}}
""")
    return path


def interleaved(settings: dict[str, Callable[[int], float]], repeats: int
                ) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in settings}
    names = list(settings)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            times[name].append(settings[name](repeat))
            print(f"  {name:<12} run {repeat}: {times[name][-1]:.2f} s", flush=True)
    return times


def report(label: str, times: dict[str, list[float]], units: int, workers: int,
           tasks: int | None = None, unit: str = "tasks") -> None:
    """Medians, throughput ratios and the per-task overhead ``(dask - local) * workers /
    tasks`` (``tasks``: the Dask tasks, when they are not the units of work)."""
    tasks = units if tasks is None else tasks
    local = statistics.median(times["local"])
    print(f"{label}: {units} {unit}, {tasks} Dask tasks")
    for name, values in times.items():
        median = statistics.median(values)
        line = f"  {name:<12} median {median:7.2f} s  {units / median:7.2f} {unit}/s"
        if name != "local":
            # Paired: each repetition's local and dask runs were side by side (a load spike
            # on one of them moves one ratio, not the median of ratios).
            paired = statistics.median(a / b for a, b in zip(times["local"], values))
            line += (f"  throughput {local / median:.2f}x local (paired median "
                     f"{paired:.2f}x), overhead {(median - local) * workers / tasks * 1e3:.1f}"
                     f" ms/task")
        print(line)


def experiment_part(cluster: Any, folder: Path, steps: int, repeats: int) -> None:
    from fibril_sim_core.experiments.runner import run_experiment

    example = folder / "example"
    shutil.copytree(EXAMPLE, example)
    path = write_experiment(example, steps)

    def run(scheduler: str | None) -> Callable[[int], float]:
        def once(repeat: int) -> float:
            traces = folder / f"traces-{scheduler is not None}-{repeat}-{time.monotonic_ns()}"
            start = time.perf_counter()
            document = run_experiment(path, traces=traces, environ={}, scheduler=scheduler)
            elapsed = time.perf_counter() - start
            assert document["summary"]["succeeded"] == RUNS, document["summary"]
            shutil.rmtree(traces)
            return elapsed
        return once

    times = interleaved({"local": run(None), "dask-2": run(cluster.scheduler_address)},
                        repeats)
    report(f"experiment ({steps} steps per run)", times, RUNS, 2)


def eight_workers(folder: Path, steps: int, repeats: int) -> None:
    """The experiment on 8 worker processes (on this machine's cores) against local, as
    ``experiment_part``: what scaling out beyond the cores costs."""
    from fibril_sim_core.execution.dask_session import distributed
    from fibril_sim_core.experiments.runner import run_experiment

    path = folder / "example" / "study.yaml"
    cores = len(os.sched_getaffinity(0))
    start = time.perf_counter()
    with distributed.LocalCluster(n_workers=8, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        print(f"8-worker LocalCluster started in {time.perf_counter() - start:.1f} s")

        def run(scheduler: str | None) -> Callable[[int], float]:
            def once(repeat: int) -> float:
                traces = folder / f"traces8-{scheduler is not None}-{repeat}"
                start = time.perf_counter()
                run_experiment(path, traces=traces, environ={}, scheduler=scheduler)
                elapsed = time.perf_counter() - start
                shutil.rmtree(traces)
                return elapsed
            return once

        times = interleaved({"local": run(None), "dask-8": run(cluster.scheduler_address)},
                            repeats)
    report(f"experiment on 8 worker processes ({cores} cores)", times, RUNS, 8)
    median = statistics.median(times["dask-8"])
    local = statistics.median(times["local"])
    print(f"  per core: local {RUNS / local / cores:.2f} runs/s, dask-8 "
          f"{RUNS / median / cores:.2f} runs/s ({RUNS / median / 8:.3f} per worker process)")


def calibration_part(cluster: Any, repeats: int, batches: int) -> None:
    import dataclasses

    from fibril_calibration.request.document import load_calibration_request
    from fibril_calibration.solve.dask_rollouts import DaskRollouts, task_layout
    from fibril_calibration.solve.problem import CalibrationProblem
    from fibril_sim_core.execution import Backend
    from fibril_sim_core.execution.dask_session import open_session

    loaded = load_calibration_request(PANDA)
    request = dataclasses.replace(loaded, execution=loaded.execution.with_max_parallelism(2))
    initial = np.array([p.initial for p in request.parameters])
    episodes = len(request.training)

    def points(repeat: int, batch: int) -> list[np.ndarray]:
        # A fresh base point each time: no evaluation is a cache hit.
        base = initial * (1.0 + 1e-3 * (repeat * batches + batch + 1))
        return [base] + [base + 1e-4 * base * np.eye(len(base))[i] for i in range(len(base))]

    def evaluate(problem: CalibrationProblem) -> Callable[[int], float]:
        def once(repeat: int) -> float:
            start = time.perf_counter()
            for batch in range(batches):
                problem.evaluate_many(points(repeat, batch))
            return time.perf_counter() - start
        return once

    with CalibrationProblem(request) as local, CalibrationProblem(request) as remote, \
            open_session(Backend("dask", cluster.scheduler_address)) as session:
        remote.set_remote(DaskRollouts.for_problem(session, remote))
        check = points(99, 0)[:2]
        assert all(np.array_equal(a.residuals, b.residuals) for a, b in
                   zip(local.evaluate_many(check), remote.evaluate_many(check)))
        times = interleaved({"local": evaluate(local), "dask-2": evaluate(remote)}, repeats)
        rollout_s = remote.statistics.rollout_seconds / max(1, remote.statistics.rollouts)
    rollouts = batches * (len(initial) + 1) * episodes
    tasks = batches * len(task_layout(len(initial) + 1, episodes, 2))
    report(f"calibration (Panda, {len(initial)} parameters, {episodes} training windows, "
           f"{batches} Jacobian batch(es); {rollout_s * 1e3:.1f} ms per rollout on a worker)",
           times, rollouts, 2, tasks, "rollouts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--skip-8", action="store_true", help="no 8-worker figure")
    parser.add_argument("--only", choices=("experiment", "calibration"))
    args = parser.parse_args()
    from fibril_sim_core.execution.dask_session import distributed

    folder = Path(tempfile.mkdtemp(prefix="fibril-bench-dask-"))
    try:
        start = time.perf_counter()
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster:
            print(f"2-worker LocalCluster started in {time.perf_counter() - start:.1f} s")
            if args.only != "calibration":
                experiment_part(cluster, folder, args.steps, args.repeats)
            if args.only != "experiment":
                calibration_part(cluster, args.repeats, args.batches)
        if not args.skip_8 and args.only != "calibration":
            eight_workers(folder, args.steps, args.repeats)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
