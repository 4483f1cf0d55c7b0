"""Soak: rejected inputs into a traced session for minutes; the server's memory stays flat.

``fibril_sim serve --trace`` runs the drivetrain example in real time in a child process; a
remote client in this process sends malformed commands as fast as the server answers them
(stale sequence numbers, unknown sources, bad payloads: each rejected, and traced with its
reason). The server's RSS (``/proc/PID/status``) is sampled every few seconds.

Printed: the RSS before any input, after the warm-up (the first minute: allocator pools, the
trace's first chunks) and at the end, the inputs sent, and whether the end is within 10 % of
the warm-up figure (issue 23: once 113 → 493 MB in 180 s, a message shape kept per rejected
input). The trace is read back at the end: every rejected input is in it.

Usage: ``python bench/soak_rejected_inputs.py [--seconds 600] [--warmup 60]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fibril_sim_core import IngressError, SimulationConnection, external_input
from fibril_sim_core.trace import TraceReader

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "config" / "examples" / "drivetrain" / "simulation.yaml"
DUTY = "fibril_sim/motor_command/v1"
ACCEPTED = 10**15  # the one accepted input's sequence number: every later one is stale


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def malformed(n: int):
    """The n-th malformed input (a reason naming its sequence number, strings of its own)."""
    if n % 3 == 0:  # stale: below the accepted ACCEPTED
        return external_input("motor/command", n, DUTY, {"mode": "duty", "value": 0.1})
    if n % 3 == 1:
        return external_input(f"ghost/{n}", n, f"x/{n % 11}", {"n": n})
    return external_input("motor/command", 2 * ACCEPTED + n, DUTY,
                          {"mode": "duty", "value": f"v{n}"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fibril-soak-"))
    trace = folder / "trace"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO / "fibril_sim_core"), os.environ.get("PYTHONPATH", "")]))
    server = subprocess.Popen(
        [sys.executable, "-m", "fibril_sim_core.cli", "serve", str(MANIFEST), "--socket",
         str(folder / "sim.sock"), "--mode", "realtime", "--trace", str(trace)],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = server.stdout.readline().strip()  # type: ignore[union-attr]
        if not line.startswith("serving "):
            raise SystemExit(f"the server did not start: {line!r}")
        address = line.split(" ", 1)[1]
        with SimulationConnection.connect(address, name="soak") as client:
            client.submit(external_input("motor/command", ACCEPTED, DUTY,
                                         {"mode": "duty", "value": 0.3}))
            time.sleep(2)
            before = rss_mb(server.pid)
            print(f"server RSS before any rejected input: {before:.1f} MB", flush=True)
            start = time.monotonic()
            sample_at = start + args.every
            warm: float | None = None
            sent = 0
            samples: list[tuple[float, float]] = []
            while (now := time.monotonic()) - start < args.seconds:
                try:
                    client.submit(malformed(sent))
                except IngressError:
                    pass
                sent += 1
                if now >= sample_at:
                    sample_at += args.every
                    rss = rss_mb(server.pid)
                    samples.append((now - start, rss))
                    if warm is None and now - start >= args.warmup:
                        warm = rss
                    print(f"  {now - start:6.0f} s  {sent:9d} rejected  RSS {rss:7.1f} MB",
                          flush=True)
            state = client.state()
        end = rss_mb(server.pid)
        warm = warm if warm is not None else before
        print(f"rejected inputs sent: {sent} ({sent / args.seconds:.0f}/s); server counted "
              f"{state['rejected_inputs']} rejected, {state['accepted_inputs']} accepted")
        print(f"server RSS: before {before:.1f} MB, after the {args.warmup:g} s warm-up "
              f"{warm:.1f} MB, end {end:.1f} MB, max {max(r for _, r in samples):.1f} MB")
        growth = (end - warm) / warm
        print(f"growth after the warm-up: {100 * growth:+.1f} % "
              f"({'flat within 10 %' if abs(growth) <= 0.10 else 'NOT flat'})")
        server.terminate()
        server.wait(60)
        with TraceReader(trace) as reader:
            traced = sum(1 for r in reader.external_inputs() if not r.accepted)
        print(f"rejected inputs in the trace: {traced}")
        return 0 if abs(growth) <= 0.10 and traced >= sent else 1
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
