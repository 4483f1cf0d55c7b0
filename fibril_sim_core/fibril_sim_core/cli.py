"""``fibril_sim``: write a manifest for a model, inspect a plan, run a simulation into a trace,
query traces.

User mistakes print one line ``fibril_sim: error: ...`` and exit 2; never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ._signals import Interrupted, ShutdownSignals
from .errors import FibrilError

if TYPE_CHECKING:
    from ._document import JsonValue
    from .plan import SimulationPlan
    from .records import IngressRecord

    #: ``fibril_sim``'s subcommands, which plugins add theirs to.
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

# The commands import what they need when they run (the imports inside the handlers): a
# command line must start without MuJoCo, NumPy and the trace stack (``fibril_sim --help``,
# ``fibril_sim calibrate --help``), so only the standard library and these two small modules
# are imported here.

#: Entry-point group through which other packages add ``fibril_sim`` commands: each entry is a
#: ``register(subparsers)`` function (fibril_calibration adds ``calibrate`` this way, so the
#: core never imports it).
COMMANDS_GROUP = "fibril_sim.commands"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# `fibril_sim serve --idle-probe`: a tenth of a second up to a day.
_MIN_IDLE_PROBE_S = 0.1
_MAX_IDLE_PROBE_S = 86_400.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    return run_handler("fibril_sim", args.handler, args)


def run_handler(prog: str, handler: Callable[[argparse.Namespace], int],
                args: argparse.Namespace) -> int:
    """Run a command handler under the command-line contract shared by ``fibril_sim`` and the
    packages' own executables (``ros2 run fibril_calibration calibrate``): a FibrilError is one
    line ``PROG: error: ...`` (exit 2, never a traceback), SIGINT / SIGTERM print
    ``PROG: interrupted`` / ``terminated`` (130 / 143), a closed stdout pipe is not an error."""
    try:
        return handler(args)
    except FibrilError as exc:
        print(f"{prog}: error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM through _signals.Interrupted
        code = exc.exit_code if isinstance(exc, Interrupted) else EXIT_INTERRUPTED
        print(f"{prog}: {'interrupted' if code == EXIT_INTERRUPTED else 'terminated'}",
              file=sys.stderr)
        return code
    except BrokenPipeError:  # e.g. `fibril_sim trace query ... | head`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _one_line(message: str, limit: int = 1000) -> str:
    """An error message as one line of bounded length (a document can put a 200 kB string
    where a name belongs): the head names file and key path, the tail the problem."""
    message = message.replace("\r", " ").replace("\n", " ")
    if len(message) <= limit:
        return message
    left = len(message) - 900
    return f"{message[:600]} ...({left} characters left out)... {message[-300:]}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fibril_sim",
        description="Fibril Sim: MuJoCo simulations with virtual devices, traces and "
                    "parameter tools.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    inspect = commands.add_parser("inspect", help="resolve a manifest and show the plan")
    inspect.add_argument("manifest", type=Path)
    inspect.add_argument("--json", action="store_true", help="the full plan document as JSON")
    inspect.set_defaults(handler=_inspect)

    run = commands.add_parser("run", help="run a simulation, optionally into an MCAP trace")
    run.add_argument("manifest", type=Path)
    length = run.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, help="physics ticks to run")
    length.add_argument("--duration", type=float, help="simulated seconds to run")
    run.add_argument("--seed", type=int,
                     help="episode seed (default: the manifest's scenario.seed, else 0)")
    run.add_argument("--trace", type=Path, help="write a rosbag2/MCAP trace into this new folder")
    run.add_argument("--inputs", type=Path, help="recorded inputs to replay (YAML)")
    run.add_argument("--inputs-from-trace", type=Path, metavar="TRACE",
                     help="replay the accepted inputs of episode 0 of a trace (e.g. of a live "
                          "sim_node session) at their commit ticks; without --steps or "
                          "--duration, runs as long as that episode")
    run.set_defaults(handler=_run)

    serve = commands.add_parser(
        "serve", help="run a simulation headless for remote clients until SIGINT/SIGTERM")
    serve.add_argument("manifest", type=Path)
    where = serve.add_mutually_exclusive_group()
    where.add_argument("--socket", type=Path, metavar="PATH",
                       help="Unix socket to listen on (created 0600; default: fibril.sock in "
                            "a new private directory)")
    where.add_argument("--tcp", metavar="HOST:PORT",
                       help="listen on TCP instead (needs --token-file; port 0: any free port)")
    serve.add_argument("--token-file", type=Path, metavar="FILE",
                       help="shared token clients must prove (required with --tcp; mode 0600)")
    serve.add_argument("--rtf", type=float, help="real-time factor (default: the manifest's)")
    serve.add_argument("--mode", choices=("realtime", "fast", "lockstep"),
                       help="pacing (default: the manifest's runtime.mode)")
    serve.add_argument("--paused", action="store_true", help="start paused")
    serve.add_argument("--seed", type=int,
                       help="episode seed (default: the manifest's scenario.seed, else 0)")
    serve.add_argument("--trace", type=Path, help="write a rosbag2/MCAP trace into this new folder")
    serve.add_argument("--idle-probe", type=float, metavar="SECONDS",
                       help="check a client that made no request for this long for being "
                            "gone; a gone one is dropped with its subscriptions (default 30)")
    serve.set_defaults(handler=_serve)

    trace = commands.add_parser("trace", help="read traces")
    trace_commands = trace.add_subparsers(title="trace commands", metavar="COMMAND")
    query = trace_commands.add_parser("query", help="extract one signal from a trace")
    query.add_argument("trace", type=Path)
    query.add_argument("selector", help="body:<name>.position|quaternion, "
                       "joint:<name>.position|velocity, sensor:<name>, "
                       "actuator:<endpoint>.applied|force, device:<id>")
    query.add_argument("--format", choices=("csv", "json"), default="csv")
    query.add_argument("--salvage", action="store_true",
                       help="read a damaged or truncated trace as far as it is intact; what is "
                            "missing is listed as warnings on stderr")
    query.set_defaults(handler=_trace_query)

    init = commands.add_parser(
        "init", help="write a commented manifest and bridge file for an MJCF model",
        description="Write DIR/simulation.yaml (a SimulationManifest: every actuator an "
                    "endpoint in the modes its MuJoCo type accepts, every hinge/slide joint an "
                    "encoder, MJCF sensors as devices where a device type fits) and "
                    "DIR/bridge.yaml, validated before they are written.")
    init.add_argument("model", type=Path, help="the MJCF file (.xml)")
    init.add_argument("--output", "-o", type=Path, required=True, metavar="DIR",
                      help="folder for simulation.yaml and bridge.yaml (created)")
    init.add_argument("--joints", action="append", default=[], metavar="PATTERN",
                      help="give encoders only to the joints matching this glob (repeatable; "
                           "default: every hinge and slide joint)")
    init.add_argument("--no-encoders", action="store_true",
                      help="no encoders (the bridge's /joint_states still carries every joint)")
    init.add_argument("--cameras", action="store_true",
                      help="make the model's named cameras devices (default: commented out; "
                           "rendering needs an offscreen OpenGL)")
    init.add_argument("--encoder-rate", type=float, default=500.0, metavar="HZ",
                      help="encoder sample rate, Hz of sim time (default 500)")
    init.add_argument("--sensor-rate", type=float, default=100.0, metavar="HZ",
                      help="IMU, rangefinder and touch sample rate, Hz (default 100)")
    init.add_argument("--camera-rate", type=float, default=30.0, metavar="HZ",
                      help="camera frame rate, Hz (default 30)")
    init.add_argument("--force", action="store_true", help="replace existing files in DIR")
    init.set_defaults(handler=_init)

    experiment = commands.add_parser("experiment", help="parameter experiments")
    experiment_commands = experiment.add_subparsers(title="experiment commands",
                                                    metavar="COMMAND")
    exp_run = experiment_commands.add_parser(
        "run", help="run the baseline and explicit variants of an experiment")
    exp_run.add_argument("experiment", type=Path)
    exp_run.add_argument("--output", type=Path, required=True,
                         help="result JSON (written only when the experiment completes)")
    exp_run.add_argument("--traces", type=Path,
                         help="new folder for the runs' traces (default: <output>.traces)")
    exp_run.add_argument("--overwrite", action="store_true",
                         help="replace an existing trace folder (never done without it)")
    exp_run.add_argument("--report", type=Path, metavar="DIR",
                         help="also write an HTML + PNG report (metrics against the baseline, "
                              "run status, parameter differences, signals across runs); needs "
                              "matplotlib")
    exp_run.add_argument("--report-signal", action="append", metavar="SELECTOR",
                         help="a trace selector to overlay across runs in the report "
                              "(repeatable; default: the signal metrics' selectors)")
    add_scheduler_option(exp_run)
    exp_run.set_defaults(handler=_experiment_run)
    _register_plugins(commands)
    return parser


def add_scheduler_option(parser: argparse.ArgumentParser) -> None:
    """``--scheduler``: run on Dask (shared by ``experiment run`` and ``calibrate``)."""
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run on Dask: tcp://HOST:8786 (a running scheduler) or local:N (N "
                             "worker processes on this machine); default: the document's "
                             "execution.backend, or FIBRIL_DASK_SCHEDULER when set")


def _register_plugins(commands: Commands) -> None:
    """Commands other installed packages declare in the ``fibril_sim.commands`` entry-point
    group (``fibril_sim calibrate`` from fibril_calibration); a package that fails to load is
    reported on stderr and left out, the other commands still work."""
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            register = entry.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break fibril_sim
            print(f"fibril_sim: warning: command {entry.name!r} ({entry.value}) cannot be "
                  f"loaded: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        register(commands)


def _experiment_run(args: argparse.Namespace) -> int:
    from .experiments.runner import run_experiment, write_json_atomically

    traces = args.traces or args.output.with_name(args.output.stem + ".traces")
    report = getattr(args, "report", None)
    if report is not None:  # before any run: no matplotlib, or a folder that is not a report's
        from .reporting import check_report_folder, require_matplotlib

        require_matplotlib("--report")
        check_report_folder(report, "--report")
    # SIGINT/SIGTERM raise Interrupted: runs stop, their traces close, no result is written.
    with ShutdownSignals():
        document = run_experiment(args.experiment, traces=traces, overwrite=args.overwrite,
                                  scheduler=args.scheduler,
                                  progress=lambda line: print(line, file=sys.stderr,
                                                              flush=True))
    write_json_atomically(args.output, document)
    if report is not None:
        from .experiments.experiment import load_experiment
        from .experiments.report import default_signals, write_experiment_report

        signals = args.report_signal or default_signals(load_experiment(args.experiment))
        write_experiment_report(document, report, signals)
    summary = document["summary"]
    print(f"{summary['succeeded']}/{summary['runs']} run(s) succeeded: "
          + ", ".join(f"{n} {s}" for s, n in sorted(summary["by_status"].items())))
    for run in document["runs"]:
        metrics = ", ".join(f"{k}={_short(v)}" for k, v in run["metrics"].items())
        print(f"  {run['id']:<16} {run['status']:<18} {metrics}")
    print(f"results: {args.output}\ntraces:  {traces}")
    if report is not None:
        print(f"report:  {report}")
    return 0 if summary["succeeded"] == summary["runs"] else 1


def _init(args: argparse.Namespace) -> int:
    from .manifest_init import InitOptions, command_line, generate, write

    extra = [f"--joints={p}" for p in args.joints]
    extra += ["--no-encoders"] * args.no_encoders + ["--cameras"] * args.cameras
    options = InitOptions(
        encoder_rate=args.encoder_rate, sensor_rate=args.sensor_rate,
        camera_rate=args.camera_rate, joints=tuple(args.joints), encoders=not args.no_encoders,
        cameras=args.cameras, command=command_line(str(args.model), str(args.output), extra))
    result = generate(args.model, args.output, options)
    manifest, bridge = write(result, args.output, force=args.force)
    print(f"wrote {manifest}: {len(result.endpoints)} endpoint(s), "
          f"{len(result.devices)} device(s)")
    print(f"wrote {bridge}")
    for line in result.skipped:
        print(f"  as a comment: {line}")
    print(f"next: python -m fibril_sim_ros.sim_node --ros-args -p manifest:={manifest} "
          f"-p bridge:={bridge}")
    return 0


def _short(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)


def _inspect(args: argparse.Namespace) -> int:
    from .plan import SimulationBuilder

    plan = SimulationBuilder().build(args.manifest)
    document = plan.inspect()
    document["parameters"] = _overlay_parameters(plan)
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    model = document["model"]
    print(f"manifest  {document['manifest']}")
    print(f"model     {model['path']}  (timestep {model['timestep_ns'] / 1e6:g} ms, "
          f"nq {model['nq']}, nv {model['nv']}, nu {model['nu']}, bodies {model['nbody']})")
    print(f"scenario  keyframe {document['scenario']['keyframe'] or '-'}, "
          f"{document['scenario']['initial_inputs']} initial input(s), "
          f"episode seed {document['scenario']['seed']}")
    print("components")
    for item in document["components"]:
        if item["role"] == "actuator":
            print(f"  {item['id']:<18} {item['type']:<28} endpoint {item['endpoint']} -> "
                  f"{item['binding']['actuator']}  modes {', '.join(item['modes'])}  "
                  f"latency {item['command_latency']['seconds'] * 1e3:g} ms")
        else:
            print(f"  {item['id']:<18} {item['type']:<28} {item['sample_type']}  "
                  f"every {item['period']['seconds'] * 1e3:g} ms, "
                  f"latency {item['latency']['seconds'] * 1e3:g} ms")
    overlays = plan.manifest.parameter_overlays
    print(f"parameters {len(document['parameters'])} from {len(overlays)} overlay file(s)"
          + ("" if overlays else " (the model as authored)"))
    for item in document["parameters"]:
        unit = f" {item['unit']}" if item.get("unit") else ""
        print(f"  {item['id']:<18} {_short(item['value'])}{unit}  -> {', '.join(item['targets'])}"
              f"  ({Path(item['source']).name})")
    provenance = document["provenance"]
    print(f"provenance manifest {provenance['manifest_sha256'][:12]}  model "
          f"{provenance['model_sha256'][:12]}  compiled {provenance['compiled_model_sha256'][:12]}"
          f"  parameters {provenance['parameter_set_hash'][:12]}  "
          f"mujoco {provenance['build']['mujoco']}")
    return 0


def _overlay_parameters(plan: SimulationPlan) -> list[dict[str, JsonValue]]:
    """The loaded overlays' parameters: id, value, unit, typed targets and the overlay file
    that supplies each (a later file replaces an earlier one's parameter with the same id)."""
    from .overlays import load_overlay_artifact

    source: dict[str, str] = {}
    for path in plan.manifest.parameter_overlays:
        for parameter in load_overlay_artifact(path).parameters:
            source[parameter.id] = str(path)
    out: list[dict[str, JsonValue]] = []
    for item in plan.provenance["parameters"]:
        targets = item["targets"] if "targets" in item else [item["target"]]
        out.append({"id": item["id"], "value": item["value"], "unit": item.get("unit"),
                    "targets": [_target_key(t) for t in targets],
                    "typed_targets": targets, "source": source.get(item["id"])})
    return out


def _target_key(target: Mapping[str, JsonValue]) -> str:
    if target["type"] == "component_config":
        return f"component_config:{target['component']}:{target['config_path']}"
    tail = target.get("attribute", target.get("component_index"))
    return f"mujoco:{target['kind']}:{target['object']}:{tail}"


def _run(args: argparse.Namespace) -> int:

    # The first SIGINT/SIGTERM stops the run at the next chunk boundary; the trace is closed.
    with ShutdownSignals(raise_interrupt=False) as signals:
        return _run_until_signal(args, signals)


def _run_until_signal(args: argparse.Namespace, signals: ShutdownSignals) -> int:
    from .inputs_file import load_inputs
    from .plan import SimulationBuilder
    from .records import ActuatorApplication, DeviceOutput, FrameTiming, IngressRecord
    from .trace import TraceWriter

    plan = SimulationBuilder().build(args.manifest)
    timebase = plan.timebase
    if args.inputs is not None and args.inputs_from_trace is not None:
        raise FibrilError("give --inputs or --inputs-from-trace, not both")
    traced: list[IngressRecord] = []
    traced_ticks = 0
    if args.inputs_from_trace is not None:
        traced, traced_ticks = _trace_inputs(args.inputs_from_trace, plan)
    if args.steps is None and args.duration is None:
        if args.inputs_from_trace is None:
            raise FibrilError("give --steps or --duration (or --inputs-from-trace)")
        ticks = traced_ticks
    elif args.steps is not None:
        if args.steps < 0:
            raise FibrilError(f"--steps must be >= 0, got {args.steps}")
        ticks = args.steps
    else:
        if not args.duration >= 0:
            raise FibrilError(f"--duration must be a number of seconds >= 0, got "
                              f"{args.duration:g}")
        try:
            ticks = timebase.ticks_ceil(args.duration)
        except ValueError as exc:
            raise FibrilError(f"--duration: {exc}") from None
    recorded = load_inputs(args.inputs, timebase, plan.endpoints) if args.inputs else traced
    trace = None
    if args.trace is not None:
        trace = TraceWriter(args.trace, provenance=plan.run_provenance(args.seed),
                            layout=dict(plan.layout))
    counts: Counter[str] = Counter()
    instance = None
    started = time.perf_counter()
    stopped_by: int | None = None
    try:
        instance = plan.create_instance(args.seed, trace=trace, collect=False)
        if trace is None:
            # Inputs and their applications are counted as they come; the samples nobody
            # takes are not made (counted from the schedules, see sample_counts).
            instance.subscribe(lambda r: None if type(r) is DeviceOutput
                               else counts.update((type(r).__name__,)))
            instance.set_interest({IngressRecord: None, ActuatorApplication: None})
        # else the trace counts its records: with it listening alone, the instance keeps
        # the samples as columns and computes them in blocks (the fast traced path)
        if recorded:
            instance.enqueue_recorded_trace_inputs(recorded)
        # Offline runs advance in chunks of ten runtime frames; each chunk is one FrameTiming.
        frame = max(1, timebase.ticks_ceil(plan.manifest.runtime.frame_duration_s) * 10)
        remaining = ticks
        while remaining > 0 and signals.received is None:
            chunk = min(frame, remaining)
            start_sim, start = instance.session_time_ns, time.perf_counter()
            instance.advance(chunk)
            wall = time.perf_counter() - start
            remaining -= chunk
            if trace is not None and plan.manifest.trace.frame_timing:
                sim = (instance.session_time_ns - start_sim) / 1e9
                trace.write(FrameTiming(instance.episode, instance.tick,
                                        instance.episode_time_ns, instance.session_time_ns,
                                        wall, sim / wall if wall > 0 else 0.0))
        stopped_by = signals.received
    except KeyboardInterrupt as exc:  # a handler installed by an embedding program
        stopped_by = exc.signum if isinstance(exc, Interrupted) else 2
    finally:
        if trace is not None:
            trace.close()
            counts.update({label: count for label, count in trace.counts.items()
                           if label not in ("EpisodeStart", "FrameTiming")})
    if stopped_by is not None:
        at = instance.tick if instance is not None else 0
        verb = "interrupted" if stopped_by == 2 else "terminated"
        print(f"fibril_sim: {verb} at tick {at}"
              + (f"; trace closed: {args.trace}" if trace is not None else ""), file=sys.stderr)
        return 128 + stopped_by
    wall = time.perf_counter() - started
    if trace is None:
        counts.update(sample_counts(plan, ticks))
    sim_s = ticks * timebase.timestep_s
    print(f"ran {ticks} ticks ({sim_s:g} s simulated) in {wall:.3f} s wall "
          f"(real-time factor {sim_s / wall if wall > 0 else float('inf'):.1f})")
    for name in sorted(counts):
        print(f"  {name:<24} {counts[name]} record(s)")
    if instance is not None and instance.rejected_count:
        print(f"  rejected inputs: {instance.rejected_count}")
    if trace is not None:
        print(f"trace: {args.trace}")
    return 0


def sample_counts(plan: SimulationPlan, ticks: int) -> dict[str, int]:
    """The samples each device delivers in the first ``ticks`` ticks of an episode: one
    acquired every period from tick 0, delivered ``max(1, latency)`` ticks later (the
    instance's time model), so an untraced run need not make them to count them."""
    counts = {}
    for device in plan.devices:
        first = max(1, device.latency_ticks)  # delivery tick of the sample acquired at 0
        if ticks >= first:
            counts[device.id] = (ticks - first) // device.period_ticks + 1
    return counts


class _RuntimeChanges(TypedDict, total=False):
    """What ``serve``'s options change in the manifest's runtime options."""

    mode: str
    real_time_factor: float
    start_paused: bool


def _serve(args: argparse.Namespace) -> int:
    """``fibril_sim serve``: a runtime with a server, headless, until SIGINT/SIGTERM."""
    from .plan import SimulationBuilder
    from .runtime import ServerOptions, SimulationRuntime
    from .trace import TraceWriter

    # Connections and refused clients are logged on stderr.
    logging.basicConfig(level=logging.INFO, format="fibril_sim serve: %(message)s",
                        stream=sys.stderr)
    from .manifest import real_time_factor_problem

    problem = None if args.rtf is None else real_time_factor_problem(args.rtf)
    if problem is not None:
        raise FibrilError(f"--rtf {problem}")
    token = _read_token(args.token_file) if args.token_file is not None else None
    if args.tcp is not None and token is None:
        raise FibrilError("--tcp needs --token-file: TCP clients must prove a shared token")
    idle_probe = _idle_probe(args.idle_probe, ServerOptions.idle_probe)
    plan = SimulationBuilder().build(args.manifest)
    changes: _RuntimeChanges = {}
    if args.rtf is not None:
        changes["real_time_factor"] = args.rtf
    if args.mode is not None:
        changes["mode"] = args.mode
    if args.paused:
        changes["start_paused"] = True
    options = dataclasses.replace(plan.manifest.runtime, **changes)
    server = ServerOptions(socket=args.socket, unix=args.tcp is None, tcp=args.tcp,
                           token=token, idle_probe=idle_probe)
    trace = None
    if args.trace is not None:
        trace = TraceWriter(args.trace, provenance=plan.run_provenance(args.seed),
                            layout=dict(plan.layout))
    try:
        runtime = SimulationRuntime(plan, seed=args.seed, trace=trace, options=options,
                                    server=server)
        code = runtime.run_until_signal(
            on_started=lambda r: print(f"serving {r.address}", flush=True))
    finally:
        if trace is not None:
            trace.close()
    verb = "interrupted" if code == EXIT_INTERRUPTED else "terminated"
    print(f"fibril_sim: {verb} at episode {runtime.instance.episode} tick "
          f"{runtime.instance.tick}" + (f"; trace closed: {args.trace}" if trace else ""),
          file=sys.stderr)
    return code


def _idle_probe(seconds: float | None, default: float) -> float:
    """``--idle-probe``: a finite number of seconds from 0.1 to a day."""
    if seconds is None:
        return default
    if not math.isfinite(seconds) or not _MIN_IDLE_PROBE_S <= seconds <= _MAX_IDLE_PROBE_S:
        raise FibrilError(f"--idle-probe {seconds:g}: must be a number of seconds from "
                          f"{_MIN_IDLE_PROBE_S:g} to {_MAX_IDLE_PROBE_S:g}")
    return seconds


def _read_token(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
        token = path.read_bytes().strip()
    except OSError as exc:
        raise FibrilError(f"--token-file {path}: cannot read: {exc.strerror}") from None
    if mode & 0o077:
        raise FibrilError(f"--token-file {path}: readable by others (mode "
                          f"{mode & 0o777:04o}); chmod 600 {path}")
    if len(token) < 16:
        raise FibrilError(f"--token-file {path}: the token must be at least 16 bytes")
    return token


def _trace_inputs(path: Path, plan: SimulationPlan) -> tuple[list[IngressRecord], int]:
    """The accepted inputs of episode 0 of a trace, without the scenario's initial inputs
    (the new instance commits those itself), and the episode's length in ticks."""
    from .ingress import external_input
    from .trace import TraceReader

    with TraceReader(path) as reader:
        records = [r for r in reader.external_inputs() if r.episode == 0 and r.accepted]
        ticks = max((f.tick for f in reader.frame_timings() if f.episode == 0), default=0)
        if not ticks:
            step = reader.timestep_ns
            ticks = max((o.delivery_time_ns // step for o in reader.device_outputs()
                         if o.episode == 0), default=0)
    initial = [(i.source_id, i.source_sequence, i.payload_type,
                external_input(i.source_id, i.source_sequence, i.payload_type,
                               i.payload).payload_json)
               for i in plan.scenario.initial_inputs]
    # The scenario's inputs are committed first at tick 0, before any live input.
    head = [(r.source_id, r.source_sequence, r.payload_type, r.payload_json)
            for r in records[:len(initial)] if r.commit_tick == 0]
    if initial and head == initial:
        records = records[len(initial):]
    return records, ticks


def _trace_query(args: argparse.Namespace) -> int:
    from .trace.query import query, to_csv, to_json
    from .trace.reader import TraceReader, TraceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)  # printed below, one line each
        with TraceReader(args.trace, salvage=args.salvage) as reader:
            result = query(reader, args.selector)
            problems = reader.problems
    text = to_csv(result) if args.format == "csv" else to_json(result)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    for problem in problems:
        print(f"fibril_sim: warning: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
