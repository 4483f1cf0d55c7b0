"""Time and peak memory of the calibration report (issue 25).

Two cases, each in a child process of its own (so its peak RSS is its own):

* ``drivetrain``: the drivetrain example's calibration (config/examples/drivetrain/
  calibration.yaml) is run once in the child and timed; then the report of its result is
  written ``--repeats`` times the way ``fibril_sim report RESULT.json --output DIR`` does it
  (load the request, check its hashes, re-simulate the nominal and fitted sets, draw). Quoted:
  the median report time and its ratio to the calibration's own wall time. Targets: < 5 s and
  < 20 % of the calibration.
* ``synthetic``: a synthetic result of 20 episodes x 7 signals x 10 000 samples (7 parameters,
  profiles, SVD, correlation), drawn ``--repeats`` times (no re-simulation: there is no
  model). Targets: < 5 s, peak RSS < 1 GB.
* ``experiment``: the drivetrain wheel-damping study (config/examples/drivetrain/
  wheel-damping-study.yaml) is run once in the child and timed; then its report is written
  ``--repeats`` times the way ``fibril_sim experiment run EXP --report DIR`` does it (the
  default signals, read back from the runs' traces). Quoted: the median report time and its
  ratio to the experiment's own wall time.

Wall and CPU time (this process and its drawing workers) are both printed: on a loaded
machine the wall time is noisy.

Usage: ``python bench/report.py [--repeats 3] [--case drivetrain|synthetic|experiment]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REQUEST = ROOT / "config" / "examples" / "drivetrain" / "calibration.yaml"
EXPERIMENT = ROOT / "config" / "examples" / "drivetrain" / "wheel-damping-study.yaml"
CASES = ("drivetrain", "synthetic", "experiment")


def _clock() -> tuple[float, float]:
    """Wall time, and CPU time of this process and its finished children (the report may
    draw its episode figures in worker processes)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), time.process_time() + children.ru_utime + children.ru_stime


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def child(case: str, repeats: int) -> dict[str, Any]:
    from fibril_calibration.report import report_result, write_report

    out: dict[str, Any] = {"case": case, "report_wall_s": [], "report_cpu_s": []}
    with tempfile.TemporaryDirectory() as folder:
        if case == "drivetrain":
            from fibril_calibration.engine import run_calibration

            start = _clock()
            result = run_calibration(REQUEST)
            out["calibration_wall_s"], out["calibration_cpu_s"] = _since(start)
            document = json.loads(result.to_json())
            for i in range(repeats):
                start = _clock()
                report_result(document, Path(folder) / f"r{i}", where="bench")
                wall, cpu = _since(start)
                out["report_wall_s"].append(wall)
                out["report_cpu_s"].append(cpu)
        elif case == "experiment":
            from fibril_sim_core.experiments.experiment import load_experiment
            from fibril_sim_core.experiments.report import (default_signals,
                                                            write_experiment_report)
            from fibril_sim_core.experiments.runner import run_experiment

            start = _clock()
            document = run_experiment(EXPERIMENT, traces=Path(folder) / "traces")
            out["calibration_wall_s"], out["calibration_cpu_s"] = _since(start)
            for i in range(repeats):
                start = _clock()
                # as the CLI does it: the experiment file is read for its signals
                signals = default_signals(load_experiment(EXPERIMENT))
                write_experiment_report(document, Path(folder) / f"r{i}", signals)
                wall, cpu = _since(start)
                out["report_wall_s"].append(wall)
                out["report_cpu_s"].append(cpu)
            out["figures"] = len(list((Path(folder) / "r0").glob("*.png")))
        else:
            from fibril_calibration.report.synthetic import synthetic_result

            start = _clock()
            document, series = synthetic_result(episodes=20, signals=7, samples=10_000,
                                                parameters=7, quaternion=True)
            out["synthesis_wall_s"] = _since(start)[0]
            for i in range(repeats):
                start = _clock()
                write_report(document, Path(folder) / f"r{i}", series)
                wall, cpu = _since(start)
                out["report_wall_s"].append(wall)
                out["report_cpu_s"].append(cpu)
            out["figures"] = len(list((Path(folder) / "r0").glob("*.png")))
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", choices=CASES, action="append")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeats)))
        return
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for case in args.case or CASES:
        done = subprocess.run([sys.executable, __file__, "--child", case, "--repeats",
                               str(args.repeats)], capture_output=True, text=True, env=env,
                              check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        wall, cpu = statistics.median(r["report_wall_s"]), statistics.median(r["report_cpu_s"])
        line = (f"{case:<11} report median {wall:.2f} s wall, {cpu:.2f} s CPU "
                f"({len(r['report_wall_s'])} runs: "
                + ", ".join(f"{w:.2f}" for w in r["report_wall_s"]) + ")")
        if "calibration_wall_s" in r:
            own = "experiment" if case == "experiment" else "calibration"
            line += (f"; {own} {r['calibration_wall_s']:.2f} s wall, "
                     f"{r['calibration_cpu_s']:.2f} s CPU; ratio {wall / r['calibration_wall_s']:.1%}"
                     f" wall, {cpu / r['calibration_cpu_s']:.1%} CPU")
        if "figures" in r:
            line += f"; {r['figures']} figures"
        line += f"; peak RSS {r['peak_rss_mb']:.0f} MB"
        print(line, flush=True)


if __name__ == "__main__":
    main()
