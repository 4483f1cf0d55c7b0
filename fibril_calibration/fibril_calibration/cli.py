"""``fibril_sim calibrate``: fit physical parameters to recorded episodes.

    fibril_sim calibrate calibration.yaml
    fibril_sim calibrate calibration.yaml --json
    fibril_sim calibrate calibration.yaml --output result.json --output-overlay fit.json
    fibril_sim calibrate calibration.yaml --evaluate nominal --evaluate fit.json
    fibril_sim calibrate calibration.yaml --metrics DIR --write-sim-csv DIR \
        --output-sysid-params sysid_best_params.json    # the lab's Franka formats

The default output is a readable summary; ``--json`` prints the full result document. Progress
lines go to stderr. Output files are checked before the run and written atomically after it
succeeds. Errors are FibrilErrors, which ``fibril_sim`` prints as one line (exit 2).

``register(subparsers)`` adds the command to the ``fibril_sim`` argparse parser; ``main`` is the
same command as the ROS 2 executable ``ros2 run fibril_calibration calibrate calibration.yaml``
(usage ``calibrate REQUEST ...``, errors ``calibrate: error: ...``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from ._atomic import write_atomic
from .errors import CalibrationError, CalibrationRequestError

if TYPE_CHECKING:  # the calibration modules load on use (see below)
    from fibril_sim_core.plan import SimulationPlan

    from ._json import JsonObject, JsonValue
    from .engine import CalibrationResult
    from .metrics_json import MetricsDocuments
    from .request.document import CalibrationRequest
    from .sim_csv import SimReplay
    from .solve.problem import Progress

# ``register`` runs for every ``fibril_sim`` command (``--help`` included): the calibration
# modules (numpy, mujoco, the request and solver) are imported inside the handlers that use
# them, so that other commands do not pay their start-up time.


_DESCRIPTION = ("Replay recorded episodes on candidate simulation plans and fit the request's "
                "physical parameters to the observed signals.")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]
             ) -> argparse.ArgumentParser:
    """Add ``calibrate`` (and ``recording info``) to a ``fibril_sim`` sub-command set; returns
    the ``calibrate`` parser."""
    parser = subparsers.add_parser(
        "calibrate", help="fit physical parameters to recorded episodes", description=_DESCRIPTION)
    _add_arguments(parser, "fibril_sim calibrate")
    _register_report(subparsers)
    from .recording_cli import register as register_recording

    register_recording(subparsers)  # `fibril_sim recording info`
    return parser


def _register_report(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]
                     ) -> None:
    """``fibril_sim report RESULT.json --output DIR``: the report of an existing result."""
    parser = subparsers.add_parser(
        "report", help="draw a calibration result as an HTML + PNG report",
        description="Write the HTML + PNG report of an existing calibration (or --evaluate) "
                    "result, re-simulating only the scored parameter sets; refuses when the "
                    "request, model or data on disk no longer hash to what the result "
                    "recorded.")
    parser.add_argument("result", type=Path, help="calibration result JSON (--output)")
    parser.add_argument("--output", type=Path, metavar="DIR",
                        help="report folder (index.html + PNG figures)")
    parser.add_argument("--export-mjcf", type=Path, metavar="FITTED.xml",
                        help="also write the model with the fitted values as one MJCF file")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(handler=run_report, command_name="fibril_sim report")


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
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="write the HTML + PNG report of the result to this folder "
                             "(needs matplotlib: fibril_calibration[report])")
    parser.add_argument("--export-mjcf", type=Path, metavar="FITTED.xml",
                        help="write the model with the fitted values as one MJCF file (for "
                             "tools that cannot read overlays)")
    parser.add_argument("--output-sysid-params", type=Path, metavar="FILE.json",
                        help="write the fitted values in the lab's sysid_best_params.json "
                             "shape (metrics.json's sysid_params then names it)")
    parser.add_argument("--sysid-joints", metavar="J1,...,J7",
                        help="joints of --output-sysid-params, in the lab's order (default: "
                             "the joint_position observations, else the fitted joints)")
    parser.add_argument("--sysid-motors", metavar="M1,...",
                        help="motor components whose command_latency is motor_delay_steps")
    parser.add_argument("--write-sim-csv", type=Path, metavar="DIR",
                        help="write the lab's sim CSV + sidecar of every validation episode "
                             "of a franka_sysid recording to DIR/<episode>/ (with --evaluate: "
                             "DIR/<set>/<episode>/); metrics.json then names them")
    parser.add_argument("--sim-csv-ee", metavar="SITE|BODY",
                        help="the end effector of the sim CSV's x_*/quat_* columns (default: "
                             "the site the model's site actuators drive)")
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


@dataclass(frozen=True)
class CalibrateOptions:
    """The ``calibrate`` command's options, read once from its argparse Namespace (an option
    the Namespace lacks takes its default)."""

    request: Path = Path()
    json: bool = False
    quiet: bool = False
    output: Path | None = None
    output_overlay: Path | None = None
    evaluate: tuple[str, ...] = ()
    metrics: Path | None = None
    report: Path | None = None
    export_mjcf: Path | None = None
    output_sysid_params: Path | None = None
    sysid_joints: str | None = None
    sysid_motors: str | None = None
    write_sim_csv: Path | None = None
    sim_csv_ee: str | None = None
    scheduler: str | None = None
    command_name: str = "fibril_sim calibrate"
    #: every option as given (``--output-sysid-params`` records the command line)
    given: tuple[tuple[str, object], ...] = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CalibrateOptions:
        given = {k: v for k, v in vars(args).items() if k != "handler"}
        values = {f.name: given[f.name] for f in fields(cls)
                  if given.get(f.name) is not None}
        if "evaluate" in values:
            values["evaluate"] = tuple(values["evaluate"])
        return cls(**values, given=tuple(given.items()))


def run(args: argparse.Namespace) -> int:
    """The ``calibrate`` handler: returns the exit code (0 when the run completes)."""
    from fibril_sim_core._signals import Interrupted, ShutdownSignals

    with _loaded_uncollected():
        from .engine import run_calibration
        from .result import check_writable, to_json

    options = CalibrateOptions.from_args(args)
    if options.output is not None:
        check_writable(options.output, "--output")
    if options.output_overlay is not None:
        check_writable(options.output_overlay, "--output-overlay")
    _check_report_options(options)
    if options.output_sysid_params is not None:
        check_writable(options.output_sysid_params, "--output-sysid-params")
    name = options.command_name
    progress = None if options.quiet else (lambda message: _progress(name, message))
    check_output_folders(options)
    # SIGINT/SIGTERM raise Interrupted (exit 130/143): nothing is written for an unfinished fit.
    try:
        with ShutdownSignals(), _mujoco_warnings_kept():
            if options.evaluate:
                return _evaluate(options, progress, options.scheduler)
            result = run_calibration(options.request, progress=progress,
                                     scheduler=options.scheduler,
                                     metrics=options.metrics is not None)
    except Interrupted as exc:
        # Nothing is open for writing; candidates still evaluating on worker threads are
        # abandoned rather than awaited (that could take longer than a stop may).
        print(f"{name.split()[0]}: {'interrupted' if exc.exit_code == 130 else 'terminated'}",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(exc.exit_code)
    _warn(name, result.document.get("warnings"))
    _error_lines(name, result.document, options.quiet)
    # The lab-format files are made before anything is written (a replay may fail).
    sysid = _sysid_params(options, result)
    made = _sim_replays(options, result.request,
                        {"fitted": (result.fitted_plan, result.fitted_values)})
    if options.output is not None:
        write_atomic(options.output, result.to_json())
    documents = {"fitted": result.metrics.get("fitted", {})}
    sims = _write_lab_files(options, sysid, made, documents, single=True)
    written = _write_metrics(options, documents, single=True)
    if options.output_overlay is not None:
        write_atomic(options.output_overlay, to_json(result.parameter_overlay))
    _report_outputs(options, result.document, result.request, progress)
    if options.json:
        sys.stdout.write(result.to_json())
    else:
        sys.stdout.write(result.summary())
        for label, path in (("result", options.output), ("overlay", options.output_overlay),
                            ("report", options.report), ("mjcf", options.export_mjcf),
                            ("sysid", options.output_sysid_params)):
            if path is not None:
                sys.stdout.write(f"{label:<11}  {path}\n")
        if written:
            sys.stdout.write(f"metrics      {len(written)} metrics.json under "
                             f"{options.metrics}\n")
        if sims:
            sys.stdout.write(f"sim csv      {len(sims)} sim CSV(s) under "
                             f"{options.write_sim_csv}\n")
    return 0


@contextlib.contextmanager
def _loaded_uncollected() -> Iterator[None]:
    """Load the calibration stack (NumPy, MuJoCo, SciPy, the request and solver modules) with
    the cyclic garbage collector paused, then freeze what it made (``gc.freeze``): some 100 000
    long-lived objects (modules, classes, functions) that every later full collection, and
    the interpreter's collections at exit, would traverse again for nothing (about 0.1 s of
    CPU of a ``fibril_sim calibrate`` process). Only in a process that has not loaded the
    stack yet; an importer that holds it already (a test session, a notebook) is left alone.
    At exit, what is alive then is frozen too: the result is written, and the memory goes back
    to the system without a last traversal."""
    if "fibril_calibration.engine" in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
        atexit.register(gc.freeze)


def check_output_folders(options: CalibrateOptions | argparse.Namespace) -> None:
    """--evaluate names, --metrics and --write-sim-csv folders: checked before any run."""
    if isinstance(options, argparse.Namespace):
        options = CalibrateOptions.from_args(options)
    evaluate = options.evaluate
    seen: set[str] = set()
    for name in evaluate:
        if name in seen:
            raise CalibrationError(f"--evaluate {name!r} is given twice")
        seen.add(name)
    sim_folder = options.write_sim_csv
    if options.sim_csv_ee and sim_folder is None:
        raise CalibrationError("--sim-csv-ee names the end effector of --write-sim-csv; give "
                               "--write-sim-csv DIR too")
    if sim_folder is not None and sim_folder.exists() and not sim_folder.is_dir():
        raise CalibrationError(f"--write-sim-csv {str(sim_folder)!r} is not a folder")
    folder = options.metrics
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


def _write_metrics(options: CalibrateOptions, documents: Mapping[str, MetricsDocuments], *,
                   single: bool) -> list[Path]:
    """metrics.json files of each parameter set (one set: straight under --metrics)."""
    folder = options.metrics
    if folder is None:
        return []
    from .metrics_json import write_metrics

    written: list[Path] = []
    for name, episodes in documents.items():
        target = folder if single else folder / _set_folder(name)
        written.extend(write_metrics(target, episodes))
    return written


def _sysid_params(options: CalibrateOptions, result: CalibrationResult) -> JsonObject | None:
    """``--output-sysid-params``: the fitted plan's values in the lab's shape."""
    if options.output_sysid_params is None:
        return None
    from .sysid_export import fitted_joints, sysid_document, trajectories

    plan = result.fitted_plan
    joints = ([j for j in options.sysid_joints.split(",") if j] if options.sysid_joints
              else fitted_joints(result.request, plan))
    motors = [m for m in (options.sysid_motors or "").split(",") if m]
    command = {k: (str(v) if isinstance(v, Path) else v) for k, v in options.given}
    return sysid_document(plan, joints, motors=motors,
                          best_score=float(result.outcome.final_objective),
                          parameters=result.request.parameters, args=command,
                          trajectories=trajectories(result.request))


def _sim_replays(options: CalibrateOptions, request: CalibrationRequest,
                 plans: Mapping[str, tuple[SimulationPlan | None, Mapping[str, float] | None]]
                 ) -> dict[str, list[SimReplay]]:
    """``--write-sim-csv``: each parameter set's replays (a plan of None: the set is built
    here from its ``--evaluate`` name)."""
    if options.write_sim_csv is None:
        return {}
    from .sim_csv import replays, set_plan

    made = {}
    for name, (plan, values) in plans.items():
        if plan is None or values is None:
            plan, values = set_plan(request, name)
        made[name] = replays(request, plan, name, values, ee=options.sim_csv_ee)
    return made


def _write_lab_files(options: CalibrateOptions, sysid: JsonObject | None,
                     made: Mapping[str, list[SimReplay]],
                     documents: Mapping[str, MetricsDocuments], *,
                     single: bool) -> list[Path]:
    """Write sysid_best_params.json and the sim CSVs + sidecars; the metrics.json documents
    then name them (``sysid_params``, ``sim_csv`` / ``sim_sidecar``). The sim CSVs written."""
    if sysid is None and not made:  # no lab format asked for: nothing to import
        return []
    from .metrics_json import name_sim_files, name_sysid_params
    from .result import strict_object, to_json
    from .sim_csv import write_sim_csvs

    if sysid is not None and options.output_sysid_params is not None:
        write_atomic(options.output_sysid_params, to_json(strict_object(sysid)))
        name_sysid_params(documents.get("fitted", {}), options.output_sysid_params)
    written: list[Path] = []
    folder = options.write_sim_csv
    for name, items in made.items():
        if folder is None:  # pragma: no cover - nothing is made without --write-sim-csv
            break
        target = folder if single else folder / _set_folder(name)
        files = write_sim_csvs(target, items)
        name_sim_files(documents.get(name, {}), files)
        written.extend(csv for csv, _ in files.values())
    return written


def _evaluate(options: CalibrateOptions, progress: Progress | None,
              scheduler: str | None = None) -> int:
    """``--evaluate``: score nominal / overlay parameter sets, no fit (no overlay written);
    on Dask when ``scheduler`` (or the environment / request) says so."""
    with _loaded_uncollected():
        from .engine import open_backend
        from .report import error_summary, floor_scores
        from .request.document import load_calibration_request
        from ._json import json_object
        from .result import strict, to_json
        from .parameter_sets import evaluate_parameter_sets
        from .analysis.scores import scores_text, signal_units

    if options.output_overlay is not None:
        raise CalibrationError("--output-overlay writes a fit; --evaluate does not fit")
    if options.export_mjcf is not None:
        raise CalibrationError("--export-mjcf writes a fitted model; --evaluate does not fit")
    if options.output_sysid_params is not None:
        raise CalibrationError("--output-sysid-params writes a fit; --evaluate does not fit")
    metrics: dict[str, MetricsDocuments] = {}
    with open_backend(scheduler, os.environ, progress) as backend:
        if progress is not None:
            progress(f"loading {options.request}")
        request = load_calibration_request(options.request)
        document = evaluate_parameter_sets(request, options.evaluate, progress=progress,
                                           metrics=metrics, session=backend.session(request))
    scores = json_object(document["scores"], "scores")
    document["error_summary"] = strict(error_summary(scores,
                                                     floor_scores(request,
                                                                  signal_units(request))))
    name = options.command_name
    _warn(name, document.get("warnings"))
    _error_lines(name, document, options.quiet)
    text = to_json(document)
    made = _sim_replays(options, request, dict.fromkeys(options.evaluate, (None, None)))
    if options.output is not None:
        write_atomic(options.output, text)
    sims = _write_lab_files(options, None, made, metrics, single=False)
    _report_outputs(options, document, request, progress)
    written = _write_metrics(options, metrics, single=False)
    if options.json:
        sys.stdout.write(text)
    else:
        lines = [f"evaluation   {request.path}  (no fit)"]
        for name, entry in scores.items():
            values = ", ".join(f"{k}={v:.6g}" for k, v in json_object(
                json_object(entry, name)["values"], "values").items())
            lines.append(f"{name}: {values}")
        lines.extend(scores_text(scores))
        if options.output is not None:
            lines.append(f"result       {options.output}")
        if options.report is not None:
            lines.append(f"report       {options.report}")
        if written:
            lines.append(f"metrics      {len(written)} metrics.json under {options.metrics}")
        if sims:
            lines.append(f"sim csv      {len(sims)} sim CSV(s) under {options.write_sim_csv}")
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


def _warn(name: str, warnings: JsonValue) -> None:
    """Recording warnings go to stderr even with --quiet (they qualify the result); only
    after a run succeeds, so that an error stays the one line on stderr."""
    from ._json import json_list, json_object

    for warning in map(json_object, json_list(warnings or ())):
        if warning.get("code") in ("recording_unchecked", "gravity_compensated_torque_inputs"):
            print(f"{name.split()[0]}: warning: {warning['message']}", file=sys.stderr,
                  flush=True)


def _progress(name: str, message: str) -> None:
    print(f"{name}: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- report hooks

def _check_report_options(options: CalibrateOptions) -> None:
    """--report / --export-mjcf: fail before any fitting (matplotlib missing, bad folder)."""
    from .result import check_writable

    if options.report is not None:
        from fibril_sim_core.reporting import check_report_folder, require_matplotlib

        require_matplotlib("--report")
        check_report_folder(options.report, "--report")
    if options.export_mjcf is not None:
        check_writable(options.export_mjcf, "--export-mjcf")


def _report_outputs(options: CalibrateOptions, document: Mapping[str, JsonValue],
                    request: CalibrationRequest, progress: Progress | None,
                    result_path: Path | None = None) -> None:
    result_path = result_path or options.output
    if options.export_mjcf is not None:
        from .report.writer import export_fitted_mjcf

        export_fitted_mjcf(document, request, options.export_mjcf,
                           result_path=None if result_path is None else str(result_path))
    folder = options.report
    if folder is not None:
        from .report.writer import report_result

        index = report_result(document, folder, where=str(folder), request=request,
                              result_path=None if result_path is None else str(result_path),
                              progress=progress)
        if progress is not None:
            progress(f"report: {index}")


def _error_lines(name: str, document: Mapping[str, JsonValue], quiet: bool) -> None:
    """The physical-unit error per signal and pooled (nominal, fitted, hold-last) on stderr:
    the numbers of the result's ``error_summary``."""
    if quiet:
        return
    from ._json import json_object
    from .report.physical_errors import error_lines

    summary = document.get("error_summary")
    for line in error_lines(None if summary is None else json_object(summary, "error_summary")):
        print(f"{name}: {line}", file=sys.stderr, flush=True)


def run_report(args: argparse.Namespace) -> int:
    """``fibril_sim report RESULT.json --output DIR [--export-mjcf FITTED.xml]``."""
    from .report import load_request

    if args.output is None and args.export_mjcf is None:
        raise CalibrationError("report: give --output DIR and/or --export-mjcf FITTED.xml")
    if args.output is not None:
        from fibril_sim_core.reporting import check_report_folder, require_matplotlib

        require_matplotlib("report")
        check_report_folder(args.output, "--output")
    if args.export_mjcf is not None:
        from .result import check_writable

        check_writable(args.export_mjcf, "--export-mjcf")
    try:
        document = json.loads(args.result.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CalibrationError(f"report: {str(args.result)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CalibrationError(f"report: {str(args.result)!r} is not a readable JSON "
                               f"document: {exc}") from None
    if not isinstance(document, dict) or document.get("format") not in (
            "fibril_calibration/result", "fibril_calibration/evaluation"):
        raise CalibrationError(f"report: {str(args.result)!r} is not a calibration result "
                               f"(format fibril_calibration/result or /evaluation)")
    name = args.command_name
    progress = None if args.quiet else (lambda message: _progress(name, message))
    from fibril_sim_core._signals import ShutdownSignals

    with ShutdownSignals(), _mujoco_warnings_kept():
        request = load_request(document, str(args.result))
        options = CalibrateOptions(report=args.output, export_mjcf=args.export_mjcf,
                                   quiet=args.quiet, command_name=args.command_name)
        _report_outputs(options, document, request, progress, result_path=args.result)
    for label, path in (("report", args.output), ("mjcf", args.export_mjcf)):
        if path is not None:
            sys.stdout.write(f"{label:<11}  {path}\n")
    return 0
