"""``fibril_sim calibrate``: fit physical parameters to recorded episodes.

    fibril_sim calibrate calibration.yaml
    fibril_sim calibrate calibration.yaml --json
    fibril_sim calibrate calibration.yaml --output result.json --output-overlay fit.json

The default output is a readable summary; ``--json`` prints the full result document. Progress
lines go to stderr. Output files are checked before the run and written atomically after it
succeeds. Errors are FibrilErrors, which ``fibril_sim`` prints as one line (exit 2).

``register(subparsers)`` adds the command to the ``fibril_sim`` argparse parser; ``main`` is the
same command as the ROS 2 executable ``ros2 run fibril_calibration calibrate calibration.yaml``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``calibrate`` to a ``fibril_sim`` sub-command set; returns its parser."""
    parser = subparsers.add_parser(
        "calibrate", help="fit physical parameters to recorded episodes",
        description="Replay recorded episodes on candidate simulation plans and fit the "
                    "request's physical parameters to the observed signals.")
    parser.add_argument("request", type=Path, help="calibration request (schema 3.1, YAML)")
    parser.add_argument("--json", action="store_true",
                        help="print the full result document as JSON instead of a summary")
    parser.add_argument("--output", type=Path, metavar="RESULT.json",
                        help="also write the full result document to this file")
    parser.add_argument("--output-overlay", type=Path, metavar="FIT.json",
                        help="write the fitted parameter overlay artifact (loadable from a "
                             "manifest's parameter_overlays)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(handler=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``ros2 run fibril_calibration calibrate REQUEST [options]``: exactly ``fibril_sim
    calibrate`` (same options, messages and exit codes)."""
    from fibril_sim_core.cli import main as fibril_sim

    return fibril_sim(["calibrate", *(sys.argv[1:] if argv is None else argv)])


def run(args: argparse.Namespace) -> int:
    """The ``calibrate`` handler: returns the exit code (0 when the run completes)."""
    from .engine import run_calibration
    from .result import check_writable, to_json, write_atomic

    if args.output is not None:
        check_writable(args.output, "--output")
    if args.output_overlay is not None:
        check_writable(args.output_overlay, "--output-overlay")
    from fibril_sim_core._signals import Interrupted, ShutdownSignals

    progress = None if args.quiet else _progress
    # SIGINT/SIGTERM raise Interrupted (exit 130/143): nothing is written for an unfinished fit.
    try:
        with ShutdownSignals():
            result = run_calibration(args.request, progress=progress)
    except Interrupted as exc:
        # Nothing is open for writing; candidates still evaluating on worker threads are
        # abandoned rather than awaited (that could take longer than a stop may).
        print(f"fibril_sim: {'interrupted' if exc.exit_code == 130 else 'terminated'}",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(exc.exit_code)
    if args.output is not None:
        write_atomic(args.output, result.to_json())
    if args.output_overlay is not None:
        write_atomic(args.output_overlay, to_json(result.parameter_overlay))
    if args.json:
        sys.stdout.write(result.to_json())
    else:
        sys.stdout.write(result.summary())
        for label, path in (("result", args.output), ("overlay", args.output_overlay)):
            if path is not None:
                sys.stdout.write(f"{label:<11}  {path}\n")
    return 0


def _progress(message: str) -> None:
    print(f"fibril_sim calibrate: {message}", file=sys.stderr, flush=True)
