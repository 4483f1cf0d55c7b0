"""Server abuse: what hostile clients make ``fibril_sim serve`` hold, and whether it gives it back.

``fibril_sim serve --tcp 127.0.0.1:0 --token-file ... --mode fast`` runs the drivetrain example in
a child process; from this process, over loopback only:

1. one unauthenticated frame of ``--frame-mib`` MiB (default 1024), then thirty 100 MiB frames;
2. ``--clients`` (default 500) silent clients: authenticate, subscribe to every record, read
   nothing, then leave without a word.

Printed for each: the server's RSS (``/proc/PID/status``) before, at its peak, and 8 s after the
abuse ended, and how many clients were refused. Issue 23 measured, before the limits: 3.1 GB held
for one 1 GiB frame (2.2 GB for thirty 100 MiB ones), and 71 → 585 MB for 500 silent clients,
never given back.

Usage: ``python bench/server_abuse.py [--frame-mib 1024] [--clients 500]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test" / "integration"))
from _abuse import SilentClient, rss_mb, send_raw, settled_rss_mb  # noqa: E402
from _children import MANIFEST, Child  # noqa: E402

from fibril_sim_core import SimulationConnection  # noqa: E402

TOKEN = b"bench-server-abuse-token-0123456789"
MIB = 1 << 20


class Peak:
    """The highest RSS of a process, sampled every 50 ms on a thread while in use."""

    def __init__(self, pid: int) -> None:
        self.pid, self.value, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.value = max(self.value, rss_mb(self.pid))
            time.sleep(0.05)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def report(what: str, before: float, peak: float, after: float) -> None:
    print(f"{what}: RSS before {before:.0f} MiB, peak {peak:.0f} MiB, 8 s after {after:.0f} MiB "
          f"({after - before:+.0f} MiB)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frame-mib", type=int, default=1024)
    parser.add_argument("--clients", type=int, default=500)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fibril-abuse-"))
    token = folder / "token"
    token.write_bytes(TOKEN)
    token.chmod(0o600)
    child = Child(["serve", MANIFEST, "--tcp", "127.0.0.1:0", "--token-file", token,
                   "--mode", "fast", "--paused"], folder)
    try:
        address = child.first_line().split(" ", 1)[1]
        pid = child.process.pid
        with SimulationConnection.connect(address, token=TOKEN, name="observer") as observer:
            observer.step(10)
            context = zmq.Context()
            try:
                before = settled_rss_mb(pid)
                with Peak(pid) as peak:
                    answer = send_raw(context, address, [bytes(args.frame_mib * MIB)], timeout=10)
                time.sleep(8)
                report(f"one {args.frame_mib} MiB unauthenticated frame "
                       f"({'answered: ' + str(answer) if answer else 'connection closed'})",
                       before, peak.value, rss_mb(pid))
                before = settled_rss_mb(pid)
                frame = bytes(100 * MIB)
                with Peak(pid) as peak:
                    for _ in range(30):
                        send_raw(context, address, [frame], timeout=2)
                time.sleep(8)
                report("thirty 100 MiB unauthenticated frames", before, peak.value, rss_mb(pid))
                del frame

                before = settled_rss_mb(pid)
                with Peak(pid) as peak:
                    clients = [SilentClient(context, address, TOKEN)
                               for _ in range(args.clients)]
                    refused = sum(c.refused is not None for c in clients)
                    observer.resume()
                    time.sleep(5)
                    observer.pause()
                    for client in clients:
                        client.close()
                    deadline = time.monotonic() + 60
                    while observer.state()["clients"] > 1 and time.monotonic() < deadline:
                        time.sleep(0.2)
                time.sleep(8)
                report(f"{args.clients} silent subscribed clients ({refused} refused: too many)",
                       before, peak.value, rss_mb(pid))
            finally:
                context.term()
    finally:
        child.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
