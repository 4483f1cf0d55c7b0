"""A stalled client beside a paced host: does the host keep its pace?

``fibril_sim serve`` runs the drivetrain example at 5x real time (5 000 ticks/s) in a child
process. An observer client measures the host's pace (sim ticks per wall second, from
``state()``) in alternating one-second windows, without and then with a second client whose
record callback never returns (its records must be dropped, not waited for). Reported: the
median pace of each, their ratio, and the drops counted for the stalled client.

Target: ratio >= 0.9 (the suite's test checks the behaviour: records dropped, the host
stepping on, the other client receiving; this is the wall-clock figure).

Usage: ``python bench/stalled_client.py [--windows 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from fibril_sim_core import SimulationConnection

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "config" / "examples" / "drivetrain" / "simulation.yaml"


def _pace(connection: SimulationConnection, seconds: float = 1.0) -> float:
    first = connection.state()
    time.sleep(seconds)
    last = connection.state()
    return (last["session_time_ns"] - first["session_time_ns"]) / 1e6 / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=5, help="one-second windows of each")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO / "fibril_sim_core"), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen([sys.executable, "-m", "fibril_sim_core.cli", "serve",
                              str(MANIFEST), "--mode", "realtime", "--rtf", "5"],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        address = child.stdout.readline().split(" ", 1)[1].strip()  # type: ignore[union-attr]
        with SimulationConnection.connect(address, name="observer") as observer:
            alone = [_pace(observer) for _ in range(args.windows)]
            stuck = threading.Event()
            stalled = SimulationConnection.connect(address, name="stalled")
            stalled.on_record(lambda record: stuck.wait(), kinds=None)
            beside = [_pace(observer) for _ in range(args.windows)]
            drops = observer.state()["drops"]
            stuck.set()
            stalled.close()
    finally:
        child.terminate()
        child.wait(30)
    a, b = statistics.median(alone), statistics.median(beside)
    print(f"host pace at rtf 5 (target 5000 ticks/s), median of {args.windows} 1 s windows")
    print(f"  alone:                  {a:7.0f} ticks/s  {[round(v) for v in alone]}")
    print(f"  beside a stalled client: {b:6.0f} ticks/s  {[round(v) for v in beside]}")
    print(f"  ratio {b / a:.3f} (target >= 0.9); drops {drops}")


if __name__ == "__main__":
    main()
