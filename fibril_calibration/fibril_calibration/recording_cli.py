"""``fibril_sim recording info PATH``: what a recording holds (``recording_info``).

    fibril_sim recording info bags/run1                   # topics, counts, rates, definitions
    fibril_sim recording info bags/run1 --fields /joint_states
    fibril_sim recording info logs/state.csv --json

Also ``ros2 run fibril_calibration recording_info PATH [options]``. Errors are one line
(exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import CalibrationError

_DESCRIPTION = ("Describe a recording (rosbag2 folder, .mcap, .db3 or CSV log): its topics "
                "or columns, counts, rates, time spans, and a topic's fields as a calibration "
                "request names them.")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]
             ) -> argparse.ArgumentParser:
    """Add ``recording info`` to a ``fibril_sim`` sub-command set."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "recording", help="inspect recordings for calibration",
        description="Inspect recordings for calibration.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    info = commands.add_parser("info", help="what a recording holds", description=_DESCRIPTION)
    _add_arguments(info)
    return parser


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="rosbag2 folder, .mcap, .db3 or .csv file")
    parser.add_argument("--fields", metavar="TOPIC",
                        help="print the field tree of TOPIC's message type in the request's "
                             "field syntax")
    parser.add_argument("--types", action="append", type=Path, default=[], metavar="DIR",
                        help="a folder of .msg files for types the bag does not define "
                             "(repeatable; as a source's types: [...])")
    parser.add_argument("--gap", type=float, default=5.0, metavar="FACTOR",
                        help="CSV: report intervals over FACTOR x the median (default 5)")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.set_defaults(handler=run)


def main(argv: Sequence[str] | None = None) -> int:
    """``ros2 run fibril_calibration recording_info PATH [options]``."""
    from fibril_sim_core.cli import run_handler

    parser = argparse.ArgumentParser(prog="recording_info", description=_DESCRIPTION)
    _add_arguments(parser)
    return run_handler("recording_info", run, parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    # the readers (rosbags, mcap) load for this command only, not for ``fibril_sim --help``
    from .recordings.recording_info import (as_dict, field_tree, fields_text, info_text,
                                            recording_info)
    from .recordings.sources import SourceError

    if args.gap <= 1:
        raise CalibrationError(f"--gap {args.gap}: expected a factor above 1")
    try:
        if args.fields is not None:
            if not (args.path.is_dir() or args.path.suffix.lower() in (".mcap", ".db3")):
                raise CalibrationError(f"--fields: {str(args.path)!r} is not a bag (a CSV "
                                       f"log has columns, listed without --fields)")
            msgtype, lines = field_tree(args.path, args.fields, types=args.types)
            if args.json:
                document = {"path": str(args.path), "topic": args.fields, "type": msgtype,
                            "fields": [{"path": f.path, "type": f.type, "note": f.note}
                                       for f in lines]}
                sys.stdout.write(json.dumps(document, indent=2) + "\n")
            else:
                sys.stdout.write(fields_text(args.path, args.fields, msgtype, lines))
            return 0
        info = recording_info(args.path, gap_factor=args.gap, types=args.types)
    except (SourceError, ValueError) as exc:
        raise CalibrationError(str(exc)) from None
    if args.json:
        sys.stdout.write(json.dumps(as_dict(info), indent=2) + "\n")
    else:
        sys.stdout.write(info_text(info))
    return 0
