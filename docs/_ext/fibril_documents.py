"""Reference tables of the documents the calibration and experiment loaders read, and of the
documents they write: the calibration request, the calibration result, the experiment and its
result, the parameter overlay artifact.

Names of choices (alignments, commit policies, metric kinds...) come from the loaders' own
constants, so a new choice shows up here; the keys are tables written from the loaders'
``_schema.keys`` checks, which test/docs/test_reference.py records while loading the example
documents and holds against these tables (a key a loader accepts and this page lacks fails it).
"""

from __future__ import annotations

from typing import Any

from fibril_reference import REQUIRED, Key, _fmt, _sections, _table

k = Key


# --------------------------------------------------------------------------- overlay
def overlay_keys() -> list[Key]:
    from fibril_sim_core.overlays import artifact as a

    return [
        k("", "format", "str", f"`{a.ARTIFACT_FORMAT}` when given", ""),
        k("", "schema_version", "mapping", "`{major: 1, minor: 0 or 1}`; 1.1 added the range "
          "targets (`joint_range`, `tendon_range`), `equality_weld_torquescale` and "
          "`plugin_attribute`", REQUIRED),
        k("schema_version", "major", "int", str(a.SCHEMA_MAJOR), REQUIRED),
        k("schema_version", "minor", "int", " or ".join(map(str, a.SCHEMA_MINORS)), REQUIRED),
        k("", "id", "str", "the artifact's id (a calibration writes its `parameter_set_id`)", ""),
        k("", "description", "str", "free text", ""),
        k("", "source", "mapping", "where the values came from (a calibration writes its "
          "request, result and fit); not read", ""),
        k("", "parameters", "list", "the parameters, applied in order; ids unique", REQUIRED),
        k("parameters[]", "id", "str", "the parameter's id; a later artifact's parameter with "
          "the same id replaces it", REQUIRED),
        k("parameters[]", "value", "float or list of float", "the value; a list for a target of "
          "several components (`body_inertia`, a range `[min, max]`)", REQUIRED),
        k("parameters[]", "unit", "str", "the value's unit, recorded (not converted)", ""),
        k("parameters[]", "provenance", "str", "where the value came from", ""),
        k("parameters[]", "description", "str", "free text", ""),
        k("parameters[]", "target", "str or mapping", "one target: "
          "`mujoco:<kind>:<object>[:<index>]`, `{type: mujoco, kind, object, "
          "component_index}` or `{type: component_config, component, config_path}` (exactly "
          "one of `target` / `targets`)", ""),
        k("parameters[]", "targets", "list", "several targets set to the same value", ""),
    ]


def overlay_target_keys() -> list[Key]:
    return [
        k("target (mujoco)", "type", "str", "`mujoco`", REQUIRED),
        k("target (mujoco)", "kind", "str", "the MuJoCo field (kinds below)", REQUIRED),
        k("target (mujoco)", "object", "str", "the named MuJoCo object (body, joint, geom, "
          "actuator, tendon, equality, plugin instance)", REQUIRED),
        k("target (mujoco)", "component_index", "int", "the component of a vector field", "0"),
        k("target (component_config)", "type", "str", "`component_config`", REQUIRED),
        k("target (component_config)", "component", "str", "a component id of the manifest",
          REQUIRED),
        k("target (component_config)", "config_path", "str", "a numeric scalar of its effective "
          "config (after the profile), e.g. `noise_counts`", REQUIRED),
    ]


def overlay_page() -> str:
    from fibril_sim_core.overlays.mujoco_targets import KINDS

    lines = ["## Keys", "", "Generated from `fibril_sim_core.overlays.artifact` (the loader "
             "`load_overlay_artifact`).", ""]
    for section, keys in _sections(overlay_keys()).items():
        lines += [f"### `{section or '(top level)'}`", "", *_table(keys, with_unit=False), ""]
    for section, keys in _sections(overlay_target_keys()).items():
        lines += [f"### {section}", "", *_table(keys, with_unit=False), ""]
    lines += ["### MuJoCo kinds", "", "| kind | object | components | value | schema |",
              "|---|---|---|---|---|"]
    for name, kind in KINDS.items():
        value = ("`[min, max]`" if kind.range else "> 0" if kind.positive
                 else ">= 0" if kind.nonnegative else "any")
        lines.append(f"| `{name}` | {kind.objtype} | {kind.width} | {value} | 1.{kind.minor} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- experiment
def experiment_keys() -> list[Key]:
    from fibril_sim_core.experiments import experiment as e

    return [
        k("", "schema_version", "mapping", "`{major: 1, minor: 0}`", REQUIRED),
        k("schema_version", "major", "int", str(e.SCHEMA_MAJOR), REQUIRED),
        k("schema_version", "minor", "int", " or ".join(map(str, e.SCHEMA_MINORS)), REQUIRED),
        k("", "id", "str", "the experiment's id", REQUIRED),
        k("", "description", "str", "free text", ""),
        k("", "model", "mapping", "the one canonical model", REQUIRED),
        k("model", "manifest", "path", "the SimulationManifest every run builds its plan from "
          "(relative to the experiment file)", REQUIRED),
        k("", "scenario", "path", "a scenario file replacing the manifest's `scenario` "
          "(keyframe, initial inputs, seed)", ""),
        k("", "parameters", "mapping", "what is varied", REQUIRED),
        k("parameters", "baseline_overlay", "path", "the overlay artifact of the baseline run; "
          "variants may only replace ids it declares", REQUIRED),
        k("", "variants", "list", "explicit runs beside the baseline (never a Cartesian "
          "product)", "[]"),
        k("variants[]", "id", "str", f"unique run id (not `{e.BASELINE_ID}`)", REQUIRED),
        k("variants[]", "parameter_values", "mapping", "parameter id → value, replacing the "
          "baseline's", REQUIRED),
        k("variants[]", "description", "str", "free text", ""),
        k("", "metrics", "list", "what each run measures", "[]"),
        k("metrics[]", "id", "str", "unique metric id", REQUIRED),
        k("metrics[]", "kind", "str", "one of " + ", ".join(e.METRIC_KINDS), REQUIRED),
        k("metrics[]", "signal", "str", "`signal`, `event_reached`: a trace selector "
          "(`body:<name>.position`, `joint:<name>.velocity`, `device:<id>`, ...), sampled where "
          "the run's trace samples it", ""),
        k("metrics[]", "reduce", "str", "`signal`: one of " + ", ".join(e.REDUCERS), ""),
        k("metrics[]", "threshold", "float", "`signal` with `reduce: duration_above`: seconds "
          "the signal is above it", ""),
        k("metrics[]", "op", "str", "`event_reached`: one of " + ", ".join(e.OPERATORS)
          + "; the first time `signal op value` holds", ""),
        k("metrics[]", "value", "float", "`event_reached`: the value compared with", ""),
        k("metrics[]", "contact", "str", "`contact_duration`, `max_contact_wrench`: a geom or "
          "body, observed every tick", ""),
        k("", "assertions", "list", "checks of metrics; a failed one makes the run "
          "`assertion_failure`", "[]"),
        k("assertions[]", "metric", "str", "a metric id", REQUIRED),
        k("assertions[]", "op", "str", "one of " + ", ".join(e.OPERATORS), REQUIRED),
        k("assertions[]", "value", "float", "the value the metric is compared with", REQUIRED),
        k("", "execution", "mapping", "how the runs execute", REQUIRED),
        k("execution", "steps", "int", "physics ticks per run", REQUIRED),
        k("execution", "timeout_seconds", "float", "wall seconds per run (then `timeout`)",
          REQUIRED),
        k("execution", "mujoco_internal_threads", "int", "must be 1 (schema 1.0)", REQUIRED),
        k("execution", "workers", "int", "runs in parallel (processes), at most `cpu_budget`",
          "1"),
        k("execution", "cpu_budget", "int", "CPUs the experiment may use", "workers"),
        k("execution", "seed", "int", "the episode seed of every run (also the result's "
          "`execution.seed`)", "the scenario's: the `scenario` file's, else the manifest's"),
        k("execution", "backend", "str", "`local` or `dask` (see Experiments on a Dask "
          "cluster)", "local"),
        k("execution", "scheduler", "str", "dask: `local:N` or `tcp://HOST:PORT`", ""),
    ]


EXPERIMENT_RESULT = [
    ("format", "str", "`fibril_sim/experiment_result`"),
    ("schema_version", "mapping", "`{major: 1, minor: 1}`"),
    ("experiment", "mapping", "the experiment's id, path and sha256"),
    ("sources", "mapping", "every file read (experiment, manifest, scenario, overlays, model), "
     "each with path and sha256"),
    ("sources_sha256", "str", "hash over `sources`"),
    ("manifest", "str", "the manifest path as the experiment names it"),
    ("scenario", "str or null", "the scenario override"),
    ("baseline_overlay", "mapping", "path and sha256 of the baseline overlay"),
    ("mujoco_version", "str", "the MuJoCo that ran"),
    ("execution", "mapping", "the execution settings used"),
    ("traces", "str", "the folder of the runs' traces (one per run)"),
    ("summary", "mapping", "`runs`, `succeeded`, `by_status` counts"),
    ("runs", "list", "one record per run, baseline first (keys below)"),
    ("comparison", "mapping", "per run: parameter and metric differences to the baseline"),
]

EXPERIMENT_RUN = [
    ("id", "str", "the run id (`baseline` or a variant's)"),
    ("role", "str", "`baseline` or `variant`"),
    ("started_at", "str", "ISO 8601 wall time"),
    ("finished_at", "str", "ISO 8601 wall time"),
    ("wall_seconds", "float", "wall time of the run"),
    ("episode_seed", "int", "the seed the run used"),
    ("parameters", "mapping", "every parameter's full value"),
    ("parameter_diff", "mapping", "per changed parameter: baseline, value, delta"),
    ("parameter_set_hash", "str or null", "over id, target and value (null: failed before "
     "its plan was built)"),
    ("targets", "list or null", "the resolved targets of each parameter"),
    ("plan", "mapping or null", "the plan's `fibril_sim inspect --json` document"),
    ("trace", "str", "the run's trace folder"),
    ("metrics", "mapping", "metric id → value (null: an unasserted `event_reached` that never "
     "fired)"),
    ("assertions", "list", "per assertion: metric, op, value, actual, `status` (passed, failed, "
     "unavailable_metric)"),
    ("status", "str", "`succeeded`, `invalid_parameter`, `compile_failure`, `runtime_failure`, "
     "`timeout`, `unavailable_metric` or `assertion_failure`"),
    ("success", "bool", "status is `succeeded`"),
    ("error_reason", "str or null", "why the run failed"),
]


def _fields_table(rows: list[tuple[str, str, str]]) -> list[str]:
    return ["| key | type | meaning |", "|---|---|---|",
            *(f"| `{name}` | {kind} | {meaning} |" for name, kind, meaning in rows)]


def experiment_page() -> str:
    lines = ["# Experiment reference", "",
             "Generated from `fibril_sim_core.experiments.experiment` (the loader "
             "`load_experiment`). An experiment document (YAML, schema 1.0) names one manifest, "
             "a baseline overlay and explicit variants; `fibril_sim experiment run FILE "
             "--output RESULT.json` runs them. Tutorial: "
             "[a parameter experiment](../../tutorials/parameter-experiment.md).", "",
             "## Experiment document", ""]
    for section, keys in _sections(experiment_keys()).items():
        lines += [f"### `{section or '(top level)'}`", "", *_table(keys, with_unit=False), ""]
    lines += ["## Result document (`fibril_sim/experiment_result` 1.1)", "",
              "Written only when the experiment completes; exit status 0 when every run "
              "succeeded, 1 otherwise, 2 for a bad experiment.", "",
              *_fields_table(EXPERIMENT_RESULT), "", "### `runs[]`", "",
              *_fields_table(EXPERIMENT_RUN), ""]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- calibration
def calibration_keys() -> list[Key]:
    from fibril_calibration.model import observations as o
    from fibril_calibration.request import document as d
    from fibril_calibration.request import episode_specs as es
    from fibril_calibration.request import mapping as m
    from fibril_calibration.request.validity import ON_INVALID
    from fibril_calibration.alignment import ALIGNMENTS
    from fibril_calibration.parameters import PARAMETERIZATIONS
    from fibril_calibration.loss_spec import LOSS_TYPES

    one_of = lambda names: "one of " + ", ".join(f"`{n}`" for n in names)  # noqa: E731
    ep = "training[]"
    sig = "training[].signals.<observation id>"
    opt, fit = d.OptimizerSpec(), d.FitSpec()
    return [
        # ---- top level
        k("", "schema_version", "mapping", f"`{{major: {d.SCHEMA_MAJOR}, minor: "
          f"{d.SCHEMA_MINORS[-1]}}}`", REQUIRED),
        k("schema_version", "major", "int", str(d.SCHEMA_MAJOR), REQUIRED),
        k("schema_version", "minor", "int", " or ".join(map(str, d.SCHEMA_MINORS)), REQUIRED),
        k("", "manifest", "path", "the SimulationManifest every candidate plan is built from "
          "(relative to the request)", REQUIRED),
        k("", "parameters", "list", "the parameters to fit", REQUIRED),
        k("", "observations", "list", "what is compared (each episode's signals name them)",
          REQUIRED),
        k("", "training", "list", "the episodes fitted to (inline, trace or source episodes)",
          REQUIRED),
        k("", "validation", "list", "held-out episodes, scored but not fitted (same keys as "
          "`training[]`)", "[]"),
        k("", "sources", "mapping", "named recording sources that episodes and their streams "
          "refer to by name", "{}"),
        k("", "optimizer", "mapping", "the solver's settings", "{}"),
        k("", "objective", "mapping", "how residuals are weighed", "{}"),
        k("", "execution", "mapping", "parallelism and caching", "{}"),
        k("", "analysis", "mapping", "extra analysis of the fit", "{}"),
        k("", "fit", "mapping", "the criteria of the fit verdict (without them: "
          "`indeterminate`)", "{}"),
        k("", "context", "mapping", "free string / number / boolean entries copied into the "
          "result's context (names the result writes itself are refused: "
          + ", ".join(f"`{n}`" for n in d.RESERVED_CONTEXT_KEYS[:3]) + ", ...)", "{}"),
        k("", "sidecar_gains", "str or mapping", "franka_sysid: take the run's impedance gains "
          "(`args.kp_pos/kd_pos/kp_ori/kd_ori`) as fixed actuator kp/kv overlays", ""),
        k("sidecar_gains", "source", "str", "a name in `sources` whose sidecar holds the gains "
          "(or `sidecar`)", ""),
        k("sidecar_gains", "sidecar", "path", "the sidecar JSON (or `source`)", ""),
        k("sidecar_gains", "position_actuators", "list of str", "the actuators kp_pos/kd_pos "
          "apply to", "ee_x, ee_y, ee_z"),
        k("sidecar_gains", "orientation_actuators", "list of str", "the actuators "
          "kp_ori/kd_ori apply to", "ee_rx, ee_ry, ee_rz"),
        # ---- parameters
        k("parameters[]", "id", "str", "unique parameter id (the result and the overlay use "
          "it)", REQUIRED),
        k("parameters[]", "lower", "float", "lower bound", REQUIRED),
        k("parameters[]", "upper", "float", "upper bound", REQUIRED),
        k("parameters[]", "initial", "float", "the optimizer's start (see "
          "`optimizer.interior_start`)", REQUIRED),
        k("parameters[]", "nominal", "float", "the model's value: the `nominal` scores and "
          "the origin of `normalized_linear`", "initial"),
        k("parameters[]", "unit", "str", "the value's unit, recorded", ""),
        k("parameters[]", "provenance", "str", "where the nominal value came from", ""),
        k("parameters[]", "description", "str", "free text", ""),
        k("parameters[]", "parameterization", "str", "the optimizer's coordinate: "
          + one_of(PARAMETERIZATIONS), "linear"),
        k("parameters[]", "coordinate_scale", "float", "the physical scale of one coordinate "
          "unit (dimensionless analysis)", "per parameterization"),
        k("parameters[]", "prior", "mapping", "a Gaussian prior (makes the intervals "
          "non-likelihood)", ""),
        k("parameters[]", "target", "str or mapping", "an overlay target (see the overlay "
          "reference), or `{type: time_offset, observation: id}` / `{type: time_offset, "
          "source: name}` (unit s: shifts that observation's reference samples, or every "
          "signal read from that named source; needs `alignment: linear`)", ""),
        k("parameters[]", "targets", "list", "several overlay targets set to one value", ""),
        k("parameters[].prior", "mean", "float", "prior mean", REQUIRED),
        k("parameters[].prior", "standard_deviation", "float", "prior standard deviation "
          "(> 0)", REQUIRED),
        k("parameters[].target", "type", "str", "`time_offset` (else an overlay target)",
          REQUIRED),
        k("parameters[].target", "observation", "str", "time_offset: the observation shifted",
          "this or `source`"),
        k("parameters[].target", "source", "str", "time_offset: a name in `sources`; every "
          "signal read from it shifted (refused for a source feeding `inputs`)",
          "this or `observation`"),
        # ---- observations
        k("observations[]", "id", "str", "unique observation id", REQUIRED),
        k("observations[]", "source", "str", one_of(o.NAMED_SOURCES + o.INDEXED_SOURCES),
          REQUIRED),
        k("observations[]", "name", "str", "the named object (joint, sensor, body, actuator "
          "endpoint, device id); named sources", ""),
        k("observations[]", "indices", "list", "`qpos` / `qvel` / `sensordata`: indices; "
          "`device_output`: sample fields or indices", ""),
        k("observations[]", "sample_type", "str", "`device_output`: the device's sample type, "
          "e.g. `fibril_sim/motor_feedback_sample/v1`", ""),
        k("observations[]", "sample_every_steps", "int", "snapshot sources: compare every this "
          "many ticks (event sources: 1)", "1"),
        k("observations[]", "timestamp", "str", "`device_output`: " + one_of(o.TIMESTAMPS)
          + " time of its samples", "delivery"),
        # ---- episodes
        k(ep, "id", "str", "unique episode id (source episodes: `<id>/w000`, ... per window)",
          REQUIRED),
        k(ep, "signals", "mapping", "observation id → its reference samples (keys below)",
          REQUIRED),
        k(ep, "episode_seed", "int", "the devices' noise seed of its rollouts", "0"),
        k(ep, "weight", "float", "residual weight of the episode (residuals × √weight; > 0)",
          "1"),
        k(ep, "horizon_steps", "int", "ticks simulated (needed by `linear` alignment of an "
          "event-driven observation)", "to the last reference sample"),
        k(ep, "description", "str", "free text", ""),
        k(ep, "initial_state", "list", "the state set at tick 0 through `inject_state` (after "
          "the scenario's keyframe)", "[]"),
        k(ep, "initial_state_fit", "list", "`[qpos, qvel]` or a part: fit those parts of "
          "every hinge/slide joint entry as nuisance parameters of the episode", "[]"),
        k(ep, "recorded_inputs", "list", "inline episodes: the inputs, committed at their "
          "recorded ticks", "[]"),
        k(ep, "recorded_inputs_file", "path", "inline episodes: a YAML file "
          "`{recorded_inputs: [...]}` (or a `fibril_sim run --inputs` file)", ""),
        k(ep, "recording", "path", "trace episodes: a Fibril trace whose accepted inputs are "
          "replayed", ""),
        k(ep, "recording_episode", "int", "trace episodes: the trace's episode", "the first"),
        k(ep, "source", "str or mapping", "source episodes: a name in `sources` or a source "
          "mapping inline", ""),
        k(ep, "windows", "mapping or list", "source episodes: cut the recording into windows "
          "(`[[start, end], ...]` in s, or the mapping below)", "the whole recording"),
        k(ep, "inputs", "list", "source episodes: streams that become commands", "[]"),
        k("training[].windows", "every", "float (s)", "window spacing", REQUIRED, "s"),
        k("training[].windows", "length", "float (s)", "window length", "every", "s"),
        k("training[].windows", "start", "float (s)", "first window's start", "0", "s"),
        k("training[].windows", "end", "float (s)", "no window past this", "the recording's "
          "end", "s"),
        k("training[].windows", "validation_every", "int", "every Nth window of a training "
          "entry goes to validation", ""),
        k("training[].recorded_inputs[]", "source_id", "str", "the endpoint", REQUIRED),
        k("training[].recorded_inputs[]", "source_sequence", "int", "increasing per source",
          REQUIRED),
        k("training[].recorded_inputs[]", "payload_type", "str",
          "`fibril_sim/motor_command/v1`", REQUIRED),
        k("training[].recorded_inputs[]", "commit_tick", "int", "the tick it is committed at",
          REQUIRED),
        k("training[].recorded_inputs[]", "acceptance_sequence", "int", "its order within the "
          "tick", REQUIRED),
        k("training[].recorded_inputs[]", "payload", "mapping", "e.g. `{mode: duty, value: "
          "0.5}` (or `payload_json`)", ""),
        k("training[].recorded_inputs[]", "payload_json", "str", "the payload as JSON", ""),
        k("training[].recorded_inputs[]", "accepted", "bool", "false: a rejected input, "
          "skipped", "true"),
        k("training[].initial_state[]", "type", "str", "`joint`, `mocap` or `actuator`",
          REQUIRED),
        k("training[].initial_state[]", "joint", "str", "joint: its name", ""),
        k("training[].initial_state[]", "qpos", "float or list", "joint: position(s)", ""),
        k("training[].initial_state[]", "qvel", "float or list", "joint: velocity(ies)", ""),
        k("training[].initial_state[]", "qpos_from", "mapping", "source episodes: the position "
          "at the window start from `{signal: id}`, a stream, or `{sidecar: q_init, index: i}`",
          ""),
        k("training[].initial_state[]", "qvel_from", "mapping", "source episodes: the velocity "
          "at the window start, as `qpos_from`", ""),
        k("training[].initial_state[]", "body", "str", "mocap: the mocap body", ""),
        k("training[].initial_state[]", "pos", "list", "mocap: position", ""),
        k("training[].initial_state[]", "quat", "list", "mocap: orientation (w, x, y, z)", ""),
        k("training[].initial_state[]", "actuator", "str", "actuator: its name", ""),
        k("training[].initial_state[]", "act", "float or list", "actuator: activation state",
          ""),
        k("training[].initial_state[].<part>_from", "signal", "str", "a signal of the entry",
          ""),
        k("training[].initial_state[].<part>_from", "sidecar", "str", "franka_sysid: a sidecar "
          "array, e.g. `q_init`", ""),
        k("training[].initial_state[].<part>_from", "index", "int", "the sidecar array's "
          "element", ""),
        # ---- signals
        k(sig, "alignment", "str", "how reference times meet the simulation: "
          + one_of(ALIGNMENTS), REQUIRED),
        k(sig, "residual_scale", "float", "residual = (sim − rec) / scale (one for every "
          "component; > 0)", "this or `residual_scales`"),
        k(sig, "residual_scales", "list of float", "one scale per component",
          "this or `residual_scale`"),
        k(sig, "scale_semantics", "str", one_of(es.SCALE_SEMANTICS)
          + "; `measurement_standard_deviation` makes the residuals standardized", "user_scale"),
        k(sig, "samples", "list", "inline reference samples", ""),
        k(sig, "samples_file", "path", "a CSV of reference samples (`time_ns` then one column "
          "per component)", ""),
        k(sig, "samples_from", "mapping", "trace episodes: the samples of a trace selector",
          ""),
        k(f"{sig}.samples[]", "time_ns", "int", "episode time, strictly increasing", REQUIRED),
        k(f"{sig}.samples[]", "values", "list of float", "one per component", REQUIRED),
        k(f"{sig}.samples_from", "selector", "str", "a `fibril_sim trace query` selector",
          REQUIRED),
        k(f"{sig}.samples_from", "recording", "path", "another trace", "the episode's"),
        k(f"{sig}.samples_from", "columns", "list", "names or indices of the kept value "
          "columns", "all"),
        # ---- streams (source episodes: signals, inputs, *_from)
        k("<stream>", "topic", "str", "bags: the topic", ""),
        k("<stream>", "field", "str", "bags: `name[index]`, `name[joint]`, nested `a.b.c`; a "
          "Vector3 gives x, y, z, a Quaternion w, x, y, z", ""),
        k("<stream>", "type", "str", "bags: check the topic's message type", ""),
        k("<stream>", "time", "str", "`log` or `header` for this stream", "the source's"),
        k("<stream>", "column", "str", "CSV: the column", ""),
        k("<stream>", "columns", "list", "CSV: several columns (one per component)", ""),
        k("<stream>", "max_gap", "float (s)", "refuse a gap between samples longer than this",
          "the source's", "s"),
        k("<stream>", "source", "str or mapping", "read this stream from another source", "the "
          "entry's"),
        k("<stream>", "valid", "mapping", "plausible range `{min, max}` of the values", ""),
        k("<stream>", "on_invalid", "str", "outside `valid`, NaN: " + one_of(ON_INVALID),
          "error"),
        k("<stream>.valid", "min", "float", "lowest plausible value", ""),
        k("<stream>.valid", "max", "float", "highest plausible value", ""),
        k("training[].inputs[]", "commit", "str", "the tick a sample is committed at: "
          + one_of(m.COMMIT_POLICIES), REQUIRED),
        k("training[].inputs[]", "source_id", "str", "the endpoint one stream commands", ""),
        k("training[].inputs[]", "endpoints", "mapping", "column (CSV) or joint name (bag) → "
          "endpoint, for several", ""),
        k("training[].inputs[]", "mode", "str", "the command mode (duty, voltage, torque, "
          "velocity, position); not needed for MotorCommand streams", ""),
        # ---- sources
        k("sources.<name>", "path", "path", "a rosbag2 folder, `.mcap`, `.db3` or `.csv`",
          REQUIRED),
        k("sources.<name>", "format", "str", "`rosbag2`, `mcap`, `sqlite3`, `csv`, "
          "`franka_sysid`, `franka_target`", "from the path"),
        k("sources.<name>", "time", "str", "bags: `log` (receive time) or `header` "
          "(header.stamp)", "log"),
        k("sources.<name>", "reader", "str", "bags: `rosbags`, `rosbag2_py` or `auto`",
          "rosbags"),
        k("sources.<name>", "types", "list of path", "bags without embedded definitions: "
          "`.msg` folders or files", ""),
        k("sources.<name>", "time_column", "str", "CSV: the time column", "found by its name"),
        k("sources.<name>", "time_unit", "str", "CSV: `s`, `ms`, `us`, `ns`", "from the "
          "column's name"),
        k("sources.<name>", "header", "bool", "CSV: false for a file without a header row "
          "(give `columns`)", "true"),
        k("sources.<name>", "columns", "list of str", "CSV without header: the column names",
          ""),
        k("sources.<name>", "delimiter", "str", "CSV: `,`, `;` or a tab", "detected"),
        k("sources.<name>", "max_gap", "float (s)", "refuse a gap longer than this in any "
          "stream", "none", "s"),
        k("sources.<name>", "origin", "float (s)", "time 0 of the recording", "the earliest "
          "mapped sample", "s"),
        k("sources.<name>", "offset", "float (s)", "added to this source's times (aligning "
          "several files)", "0", "s"),
        k("sources.<name>", "sidecar", "path", "franka_sysid: the sidecar JSON", "beside the "
          "CSV"),
        k("sources.<name>", "accept", "list of str", "franka_sysid: accept runs with "
          "`dropped_frames` / `save_error`", "refuse"),
        k("sources.<name>", "abort", "str", "franka_sysid: `truncate` an aborted run", "refuse"),
        # ---- settings
        k("optimizer", "type", "str", " or ".join(f"`{t}`" for t in d.OPTIMIZER_TYPES)
          + " (both run scipy's `least_squares`, trf)", opt.type),
        k("optimizer", "max_iterations", "int", "iterations at most", _fmt(opt.max_iterations)),
        k("optimizer", "function_tolerance", "float", "scipy's `ftol`", "scipy's"),
        k("optimizer", "parameter_tolerance", "float", "scipy's `xtol`", "scipy's"),
        k("optimizer", "gradient_tolerance", "float", "scipy's `gtol`", "scipy's"),
        k("optimizer", "finite_difference_relative_step", "float", "the Jacobian's relative "
          "step", "scipy's"),
        k("optimizer", "jacobian", "str", "`central` or `forward` differences", opt.jacobian),
        k("optimizer", "interior_start", "mapping", "start a parameter whose `initial` is a "
          "bound `fraction` of its range inside", ""),
        k("optimizer.interior_start", "fraction", "float", "0 < fraction < 0.5", REQUIRED),
        k("objective", "standardized_gaussian_residuals", "bool", "the residuals are "
          "standardized Gaussian (intervals are likelihood-based)", "false"),
        k("objective", "loss", "mapping", "a robust loss", "none (squared)"),
        k("objective.loss", "type", "str", one_of(LOSS_TYPES), REQUIRED),
        k("objective.loss", "scale", "float", "the loss's soft margin", "1"),
        k("execution", "max_parallelism", "int", "threads (or dask tasks) evaluating episodes "
          "and Jacobian columns", "1"),
        k("execution", "cache_entries", "int", "evaluations memoized", "256"),
        k("execution", "backend", "str", "`local` or `dask`", "local"),
        k("execution", "scheduler", "str", "dask: `local:N` or `tcp://HOST:PORT`", ""),
        k("analysis", "profile_likelihood", "mapping", "profile each parameter", "off"),
        k("analysis", "information_matrix", "bool", "report the information matrix", "false"),
        k("analysis.profile_likelihood", "enabled", "bool", "run it", "false"),
        k("analysis.profile_likelihood", "samples_per_parameter", "int", "profile points (>= 3)",
          "21"),
        k("fit", "max_training_rms", "float", "verdict: training standardized RMS at most", ""),
        k("fit", "max_validation_rms", "float", "verdict: validation standardized RMS at most",
          ""),
        k("fit", "max_local_condition_number", "float", "verdict: condition number at most", ""),
        k("fit", "max_episode_rms_ratio", "float", "verdict: worst / best episode RMS at most",
          ""),
        k("fit", "reject_parameter_near_bound", "bool", "verdict: no fitted value near a bound",
          _fmt(fit.reject_parameter_near_bound)),
        k("fit", "near_bound_fraction", "float", "what 'near' means, as a fraction of the range",
          "1e-3"),
    ]


CALIBRATION_RESULT = [
    ("format", "str", "`fibril_calibration/result`"),
    ("schema_version", "mapping", "`{major, minor}` of the result"),
    ("request", "mapping", "the request's path, sha256, schema version, manifest, optimizer type"),
    ("outcome_version", "int", "version of the termination / verdict vocabulary"),
    ("optimizer", "mapping", "solver id, `optimization_termination`, status, message, "
     "iterations, `initial_objective`, `final_objective`, finite-difference settings, the "
     "start used (`start`, `interior_start_fraction`)"),
    ("warnings", "list", "`{code, message, ...}`: `initial_value_at_bound` (parameter, bound, "
     "value, start), `recording_unchecked` (a bag without checksums), ..."),
    ("optimization_termination", "str", "`converged`, `max_iterations` or `no_convergence`"),
    ("evaluations", "mapping", "rollout counts: training, validation, failed, the optimizer's "
     "function and Jacobian evaluations"),
    ("wall_time_s", "float", "wall time of the calibration"),
    ("objective", "mapping", "loss, prior, `standardized_gaussian_residuals`"),
    ("likelihood_interpretation_valid", "bool", "standardized Gaussian residuals, no prior, no "
     "robust loss: standard deviations and intervals are given only then"),
    ("parameters", "list", "per parameter: id, value, unit, initial, nominal, bounds, standard "
     "deviation, 95 % interval, identifiable, near-bound flag"),
    ("fitted_parameters", "mapping", "parameter id → fitted value"),
    ("optimization_summary", "mapping", "residual count, SSE, RMS: aggregate and per episode "
     "(priors as a `__prior__` episode)"),
    ("training_summary", "mapping", "the same for the training episodes, with "
     "`nuisance_degrees_of_freedom` and `rms_dof_corrected`"),
    ("validation_summary", "mapping", "the same for the validation episodes"),
    ("local_identifiability", "mapping", "SVD of the data-only Jacobian in dimensionless "
     "coordinates: singular values, numerical rank, condition number, directions, per-parameter "
     "identifiability, `covariance` ((JᵀJ)⁺, correlation, physical units, "
     "`residual_variance_estimate`)"),
    ("information_matrix", "mapping or null", "`fisher_information_approximation` or "
     "`sensitivity_gram_matrix`, with eigenvalues and rank (`analysis.information_matrix`)"),
    ("profile_likelihood", "mapping or null", "per parameter: the profile and its chi-squared "
     "crossings (`analysis.profile_likelihood`)"),
    ("fit", "mapping", "`verdict` (`plausible_fit`, `no_plausible_fit`, `indeterminate`), "
     "`reasons` (e.g. `cross_episode_inconsistency`), `criteria`, `measurements`"),
    ("context", "mapping", "the request's context and provenance hashes (episode content, "
     "observation spec, optimizer options, episode seeds)"),
    ("candidate_plan", "mapping", "the fitted values and the fitted plan's provenance"),
    ("parameter_contract", "list", "each parameter as declared (bounds, initial, nominal, "
     "parameterization, targets)"),
    ("target_mapping", "mapping", "parameter → resolved overlay targets, with its sha256"),
    ("observations", "list", "each observation as resolved"),
    ("episodes", "mapping", "`training` and `validation`: per episode its id, source (window, "
     "reader, ring targets), seed, counts"),
    ("execution", "mapping", "parallelism, cache, backend and statistics (failures, cache hits)"),
    ("parameter_overlay", "mapping", "the fit as an overlay artifact (what `--output-overlay` "
     "writes; loads unchanged in a manifest's `parameter_overlays`)"),
    ("scores", "mapping", "`nominal` and `fitted`: for training and validation the "
     "standardized RMS and per signal each component's RMS and max abs error in physical units"),
    ("error_summary", "mapping", "nominal against fitted errors against a hold-last floor, per "
     "set (what the report draws)"),
    ("input_timing", "mapping or null", "source episodes: per commit policy the samples, how many "
     "moved, the largest shift, how many were held at a window start"),
    ("initial_state_fit", "mapping", "with `initial_state_fit`: per episode each nuisance "
     "coordinate's logged value, offset, estimate, identified, step; rank, sensitivity health, "
     "first and second pass"),
]


def calibration_request_page() -> str:
    lines = ["# Calibration request reference", "",
             "Generated from `fibril_calibration.request` (the loader "
             "`load_calibration_request`). A request (YAML, schema 3.1) names a manifest, the "
             "parameters to fit, the observations compared and the training and validation "
             "episodes. Paths are relative to the request file. Episodes come in three kinds: "
             "**inline** (`recorded_inputs` / `recorded_inputs_file` and `samples` / "
             "`samples_file`), **trace** (`recording` and `samples_from`) and **source** "
             "(`source`, `windows`, `inputs`, and streams in `signals`). Recording sources in "
             "detail: [recording sources](../recording-sources.md); how the fit runs: "
             "[calibration](../../concepts/calibration.md).", ""]
    for section, keys in _sections(calibration_keys()).items():
        title = {"<stream>": "streams of source episodes: `signals.<id>`, `inputs[]`, "
                 "`initial_state[].<part>_from`"}.get(section, f"`{section or '(top level)'}`")
        lines += [f"## {title}", "", *_table(keys), ""]
    return "\n".join(lines) + "\n"


def calibration_result_page() -> str:
    lines = ["# Calibration result reference", "",
             "The result document `fibril_sim calibrate REQUEST --output FILE` (or `--json`) "
             "writes (`fibril_calibration.result`). Top-level keys, in the order written:", "",
             *_fields_table(CALIBRATION_RESULT), "",
             "`--evaluate` writes a `fibril_calibration/evaluation` document instead: "
             "`scores` per evaluated set. `--metrics DIR` writes the lab's `metrics.json` per "
             "validation episode ([calibration](../../concepts/calibration.md)).", ""]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, Any]:
    return {"experiment": experiment_page, "calibration_request": calibration_request_page,
            "calibration_result": calibration_result_page, "overlay_keys": overlay_page}
