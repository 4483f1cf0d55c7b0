"""``fibril_sim calibrate``: fit physical parameters to recorded episodes.

    fibril_sim calibrate calibration.yaml
    fibril_sim calibrate calibration.yaml --json
    fibril_sim calibrate calibration.yaml --output result.json --output-overlay fit.json
    fibril_sim calibrate calibration.yaml --evaluate nominal --evaluate fit.json

The default output is a readable summary; ``--json`` prints the full result document. Progress
lines go to stderr. Output files are checked before the run and written atomically after it
succeeds. Errors are FibrilErrors, which ``fibril_sim`` prints as one line (exit 2).

``register(subparsers)`` adds the command to the ``fibril_sim`` argparse parser; ``main`` is the
same command as the ROS 2 executable ``ros2 run fibril_calibration calibrate calibration.yaml``
(usage ``calibrate REQUEST ...``, errors ``calibrate: error: ...``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


_DESCRIPTION = ("Replay recorded episodes on candidate simulation plans and fit the request's "
                "physical parameters to the observed signals.")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``calibrate`` to a ``fibril_sim`` sub-command set; returns its parser."""
    parser = subparsers.add_parser(
        "calibrate", help="fit physical parameters to recorded episodes", description=_DESCRIPTION)
    _add_arguments(parser, "fibril_sim calibrate")
    return parser


def _add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """The command's options, one definition for ``fibril_sim calibrate`` and ``calibrate``;
    ``name`` prefixes its progress lines."""
    parser.add_argument("request", type=Path, help="calibration request (schema 3.1, YAML)")
    parser.add_argument("--json", action="store_true",
                        help="print the full result document as JSON instead of a summary")
    parser.add_argument("--output", type=Path, metavar="RESULT.json",
                        help="also write the full result document to this file")
    parser.add_argument("--output-overlay", type=Path, metavar="FIT.json",
                        help="write the fitted parameter overlay artifact (loadable from a "
                             "manifest's parameter_overlays)")
    parser.add_argument("--evaluate", action="append", metavar="OVERLAY.json|nominal",
                        help="score a fixed parameter set on the episodes without fitting: "
                             "'nominal' (the initial values) or an overlay artifact; "
                             "repeatable")
    parser.add_argument("--metrics", type=Path, metavar="DIR",
                        help="write the lab's metrics.json (sim vs real, schema 1) of every "
                             "validation episode to DIR/<episode>/ (with --evaluate: "
                             "DIR/<set>/<episode>/)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    from fibril_sim_core.cli import add_scheduler_option

    add_scheduler_option(parser)
    parser.set_defaults(handler=run, command_name=name)


def main(argv: Sequence[str] | None = None) -> int:
    """``ros2 run fibril_calibration calibrate REQUEST [options]``: ``fibril_sim calibrate``
    (same options and exit codes) under its own name, in usage, errors and progress lines."""
    from fibril_sim_core.cli import run_handler

    parser = argparse.ArgumentParser(prog="calibrate", description=_DESCRIPTION)
    _add_arguments(parser, "calibrate")
    return run_handler("calibrate", run, parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The ``calibrate`` handler: returns the exit code (0 when the run completes)."""
    from .engine import run_calibration
    from .result import check_writable, to_json, write_atomic

    if args.output is not None:
        check_writable(args.output, "--output")
    if args.output_overlay is not None:
        check_writable(args.output_overlay, "--output-overlay")
    from fibril_sim_core._signals import Interrupted, ShutdownSignals

    name = getattr(args, "command_name", "fibril_sim calibrate")
    progress = None if args.quiet else (lambda message: _progress(name, message))
    _metrics_folder(args)
    # SIGINT/SIGTERM raise Interrupted (exit 130/143): nothing is written for an unfinished fit.
    try:
        with ShutdownSignals(), _mujoco_warnings_kept():
            scheduler = getattr(args, "scheduler", None)
            if getattr(args, "evaluate", None):
                if scheduler is not None:
                    from .errors import CalibrationRequestError

                    raise CalibrationRequestError("--scheduler: --evaluate scores a few sets "
                                                  "locally; run it without --scheduler")
                return _evaluate(args, progress)
            result = run_calibration(args.request, progress=progress, scheduler=scheduler,
                                     metrics=getattr(args, "metrics", None) is not None)
    except Interrupted as exc:
        # Nothing is open for writing; candidates still evaluating on worker threads are
        # abandoned rather than awaited (that could take longer than a stop may).
        print(f"{name.split()[0]}: {'interrupted' if exc.exit_code == 130 else 'terminated'}",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(exc.exit_code)
    _warn(name, result.document.get("warnings"))
    if args.output is not None:
        write_atomic(args.output, result.to_json())
    written = _write_metrics(args, {"fitted": result.metrics.get("fitted", {})}, single=True)
    if args.output_overlay is not None:
        write_atomic(args.output_overlay, to_json(result.parameter_overlay))
    if args.json:
        sys.stdout.write(result.to_json())
    else:
        sys.stdout.write(result.summary())
        for label, path in (("result", args.output), ("overlay", args.output_overlay)):
            if path is not None:
                sys.stdout.write(f"{label:<11}  {path}\n")
        if written:
            sys.stdout.write(f"metrics      {len(written)} metrics.json under {args.metrics}\n")
    return 0


def _metrics_folder(args: argparse.Namespace) -> None:
    from .errors import CalibrationError

    evaluate = getattr(args, "evaluate", None) or []
    seen: set[str] = set()
    for name in evaluate:
        if name in seen:
            raise CalibrationError(f"--evaluate {name!r} is given twice")
        seen.add(name)
    folder = getattr(args, "metrics", None)
    if folder is None:
        return
    if folder.exists() and not folder.is_dir():
        raise CalibrationError(f"--metrics {str(folder)!r} is not a folder")
    folders: dict[str, str] = {}
    for name in evaluate:  # DIR/<set>/: two sets may not share a folder
        key = _set_folder(name).lower()
        if key in folders:
            shared = str(folder / _set_folder(name))
            raise CalibrationError(f"--metrics {str(folder)!r}: --evaluate {folders[key]!r} and "
                                   f"{name!r} would both write to {shared!r}")
        folders[key] = name


def _set_folder(name: str) -> str:
    """The folder under --metrics of one --evaluate parameter set (its file stem)."""
    from .metrics_json import safe_name

    return safe_name(Path(name).stem or name)


def _write_metrics(args: argparse.Namespace, documents: dict[str, Any], *,
                   single: bool) -> list[Path]:
    """metrics.json files of each parameter set (one set: straight under --metrics)."""
    from .metrics_json import write_metrics

    folder = getattr(args, "metrics", None)
    if folder is None:
        return []
    written: list[Path] = []
    for name, episodes in documents.items():
        target = folder if single else folder / _set_folder(name)
        written.extend(write_metrics(target, episodes))
    return written


def _evaluate(args: argparse.Namespace, progress: Any) -> int:
    """``--evaluate``: score nominal / overlay parameter sets, no fit (no overlay written)."""
    from .errors import CalibrationError
    from .request.document import load_calibration_request
    from .result import to_json, write_atomic
    from .scores import evaluate_parameter_sets, scores_text

    if args.output_overlay is not None:
        raise CalibrationError("--output-overlay writes a fit; --evaluate does not fit")
    if progress is not None:
        progress(f"loading {args.request}")
    request = load_calibration_request(args.request)
    metrics: dict[str, Any] = {}
    document = evaluate_parameter_sets(request, args.evaluate, progress=progress,
                                       metrics=metrics)
    _warn(getattr(args, "command_name", "fibril_sim calibrate"), document.get("warnings"))
    text = to_json(document)
    if args.output is not None:
        write_atomic(args.output, text)
    written = _write_metrics(args, metrics, single=False)
    if args.json:
        sys.stdout.write(text)
    else:
        lines = [f"evaluation   {request.path}  (no fit)"]
        for name, entry in document["scores"].items():
            values = ", ".join(f"{k}={v:.6g}" for k, v in entry["values"].items())
            lines.append(f"{name}: {values}")
        lines.extend(scores_text(document["scores"]))
        if args.output is not None:
            lines.append(f"result       {args.output}")
        if written:
            lines.append(f"metrics      {len(written)} metrics.json under {args.metrics}")
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


@contextlib.contextmanager
def _mujoco_warnings_kept() -> Iterator[None]:
    """MuJoCo prints "The simulation is unstable" on stderr by itself; during a calibration
    the rollout reads the same warning from its counters and makes it the candidate's
    failure (an error, or a set's score recorded as failed), so the print is held back."""
    import mujoco

    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda message: None)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def _warn(name: str, warnings: Any) -> None:
    """Recording warnings go to stderr even with --quiet (they qualify the result); only
    after a run succeeds, so that an error stays the one line on stderr."""
    for warning in warnings or ():
        if warning.get("code") == "recording_unchecked":
            print(f"{name.split()[0]}: warning: {warning['message']}", file=sys.stderr,
                  flush=True)


def _progress(name: str, message: str) -> None:
    print(f"{name}: {message}", file=sys.stderr, flush=True)
