"""The generated Reference pages: one source of truth, the code.

Component types and their config keys come from the registry's ``Field`` definitions (the very
objects the loader validates with); the manifest's and the bridge file's own keys from the
tables below, which test/docs/test_reference.py holds against the keys the loaders accept
(it records every key set they check); the CLI from its argparse parsers; the sim_node
parameters from the node's own declarations. ``write_pages`` renders them as Markdown into
docs/reference/generated/ when Sphinx starts (and for the tests, without Sphinx).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fibril_documents beside it

GENERATED = Path(__file__).resolve().parents[1] / "reference" / "generated"
REQUIRED = "required"


@dataclass(frozen=True)
class Key:
    """One documented key: where it sits (``section``, a key path with ``[]`` for list items
    and ``<name>`` for user-chosen names), its type, unit, default and meaning."""

    section: str
    name: str
    type: str
    meaning: str
    default: str = ""
    unit: str = ""

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name


def _fmt(value: Any) -> str:
    if value is REQUIRED:
        return REQUIRED
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isclose(value, 2 * math.pi):
            return "2π"
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if value == "":
        return '""'
    return str(value)


# --------------------------------------------------------------------------- manifest
def manifest_keys() -> list[Key]:
    """The SimulationManifest's own keys (component config keys: ``component_types``)."""
    from fibril_sim_core.manifest import (MAX_REAL_TIME_FACTOR, MIN_REAL_TIME_FACTOR,
                                          RUNTIME_MODES, RuntimeOptions, TraceOptions)

    trace, runtime = TraceOptions(), RuntimeOptions()
    k = Key
    return [
        k("", "schema_version", "mapping", "`{major: 3, minor: 0 or 1}`; 3.1 added "
          "`parameter_overlays`", REQUIRED),
        k("schema_version", "major", "int", "3", REQUIRED),
        k("schema_version", "minor", "int", "0 or 1", REQUIRED),
        k("", "model", "path", "the MJCF file, relative to the manifest's folder; the physics "
          "timestep is its `<option timestep>` (never a manifest key)", REQUIRED),
        k("", "profiles", "mapping", "named config defaults for one component type, "
          "referenced by `components[].profile`", "{}"),
        k("profiles.<name>", "type", "str", "the component type the profile is for", REQUIRED),
        k("profiles.<name>", "config", "mapping", "config defaults (the component's own config "
          "wins, nested mappings merged)", "{}"),
        k("", "components", "list", "actuator endpoints and devices (see Component types)",
          "[]"),
        k("components[]", "id", "str", "unique id; a device's samples and the default ROS "
          "topic `/<id>` are named after it", REQUIRED),
        k("components[]", "type", "str", "a registered component type, e.g. "
          "`fibril_sim/encoder`", REQUIRED),
        k("components[]", "profile", "str", "a profile of the same type to start from", ""),
        k("components[]", "endpoint", "str", "actuators: the endpoint name inputs address "
          "(default: the id)", ""),
        k("components[]", "bind", "mapping", "the MuJoCo objects it binds, by name (keys per "
          "type)", "{}"),
        k("components[]", "config", "mapping", "the type's config keys (per type, below)",
          "{}"),
        k("", "extensions", "list of str", "`module` or `module:function` called with the "
          "component registry to add types", "[]"),
        k("", "trace", "mapping", "what a trace holds (where it goes: `--trace DIR`)", "{}"),
        k("trace", "state_every_steps", "int", "a state snapshot every this many physics "
          "steps (0: none)", _fmt(trace.state_every_steps), "steps"),
        k("trace", "frame_timing", "bool", "record each frame's wall and simulated time",
          _fmt(trace.frame_timing)),
        k("", "runtime", "mapping", "how a live run paces the simulation", "{}"),
        k("runtime", "mode", "str", "one of " + ", ".join(RUNTIME_MODES), runtime.mode),
        k("runtime", "real_time_factor", "float", f"simulated / wall time, "
          f"{MIN_REAL_TIME_FACTOR:g} … {MAX_REAL_TIME_FACTOR:g}",
          _fmt(runtime.real_time_factor)),
        k("runtime", "frame_duration", "float", "simulated time per runtime frame (the "
          "pacing unit)", _fmt(runtime.frame_duration_s), "s"),
        k("runtime", "start_paused", "bool", "start paused", _fmt(runtime.start_paused)),
        k("", "parameter_overlays", "list of path", "overlay artifacts applied to the model "
          "and component config, in order (3.1)", "[]"),
        k("", "scenario", "mapping", "how every episode starts", "{}"),
        k("scenario", "keyframe", "str", "the MJCF keyframe restored at tick 0", ""),
        k("scenario", "seed", "int", "the episode seed instances start from when the caller "
          "names none (`--seed` overrides it); the plan's provenance `episode_seed`", "0"),
        k("scenario", "initial_inputs", "list", "inputs committed at tick 0 of every episode",
          "[]"),
        k("scenario.initial_inputs[]", "source_id", "str", "the endpoint addressed",
          REQUIRED),
        k("scenario.initial_inputs[]", "source_sequence", "int", "the input's sequence "
          "number at its source (>= 0)", REQUIRED),
        k("scenario.initial_inputs[]", "payload_type", "str", "e.g. "
          "`fibril_sim/motor_command/v1`", REQUIRED),
        k("scenario.initial_inputs[]", "payload", "mapping", "the payload, e.g. "
          "`{mode: duty, value: 0.5}` (or `payload_json`)", ""),
        k("scenario.initial_inputs[]", "payload_json", "str", "the payload as a JSON string "
          "(or `payload`)", ""),
    ]


def component_types() -> list[tuple[Any, list[Key]]]:
    """Each standard component type with its bind and config keys, from its definitions."""
    from fibril_sim_core.components.base import REQUIRED as FIELD_REQUIRED
    from fibril_sim_core.components.registry import ComponentRegistry

    registry = ComponentRegistry.standard()
    out = []
    for type_id in registry:
        kind = registry.get(type_id)
        required, optional = kind.bind_keys
        keys = [Key(f"{type_id}.bind", name, "str", "name of the MuJoCo object bound",
                    REQUIRED if name in required else "") for name in (*required, *optional)]
        for name, field in kind.fields.items():
            default = REQUIRED if field.default is FIELD_REQUIRED else field.default
            kinds = {"duration": "float (s, whole physics steps)", "floats": "list of float"}
            constraints = []
            if field.positive:
                constraints.append("> 0")
            if field.minimum is not None:
                constraints.append(f">= {field.minimum:g}")
            if field.maximum is not None:
                constraints.append(f"<= {_fmt(float(field.maximum))}")
            if field.choices:
                constraints.append("one of " + ", ".join(field.choices))
            meaning = field.doc + (f" ({'; '.join(constraints)})" if constraints else "")
            keys.append(Key(f"{type_id}.config", name, kinds.get(field.kind, field.kind),
                            meaning, _fmt(default), field.unit))
        out.append((kind, keys))
    return out


def _table(keys: Iterable[Key], with_unit: bool = True) -> list[str]:
    head = "| key | type | unit | default | meaning |" if with_unit else \
        "| key | type | default | meaning |"
    lines = [head, "|" + "---|" * (5 if with_unit else 4)]
    for key in keys:
        cells = [f"`{key.name}`", key.type] + ([key.unit or "–"] if with_unit else []) + \
            [key.default or "–", key.meaning.replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _sections(keys: list[Key]) -> dict[str, list[Key]]:
    sections: dict[str, list[Key]] = {}
    for key in keys:
        sections.setdefault(key.section, []).append(key)
    return sections


def manifest_page() -> str:
    lines = ["# Manifest reference", "",
             "Generated from the loader's definitions (`fibril_sim_core.manifest`, the "
             "component types' `fields`). A SimulationManifest is YAML (the YAML 1.2 core "
             "schema: `1e-3` is a number, `yes` a string); times are in seconds. Unknown keys "
             "are errors naming the file and key path.", "", "## Document keys", ""]
    for section, keys in _sections(manifest_keys()).items():
        lines += [f"### `{section or '(top level)'}`", "", *_table(keys), ""]
    lines += ["## Component types", ""]
    for kind, keys in component_types():
        module = sys.modules[type(kind).__module__]
        doc = (type(kind).__doc__ or module.__doc__ or "").strip().split("\n\n")[0]
        lines += [f"### `{kind.type_id}`", "", f"Role: {kind.role}."]
        sample = getattr(module, "SAMPLE_TYPE", None)
        if sample:
            lines[-1] += f" Sample type `{sample}`."
        if doc:
            lines += ["", " ".join(doc.split())]
        bind = [k for k in keys if k.section.endswith(".bind")]
        config = [k for k in keys if k.section.endswith(".config")]
        if bind:
            lines += ["", "Bind keys:", "", *_table(bind, with_unit=False)]
        lines += ["", "Config keys:", "", *_table(config), ""]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- bridge
def bridge_keys() -> list[Key]:
    from fibril_sim_ros import bridge as b

    k = Key
    qos = [k("<entry>.qos", "reliability", "str", ", ".join(b.RELIABILITY), "reliable"),
           k("<entry>.qos", "durability", "str", ", ".join(b.DURABILITY), "volatile"),
           k("<entry>.qos", "depth", "int", f"history depth, 1 … {b.MAX_QOS_DEPTH:,}",
             f"10 (outputs {b.OUTPUT_QOS.depth})")]
    return [
        k("", "schema_version", "mapping", "`{major: 1, minor: 0}`", REQUIRED),
        k("schema_version", "major", "int", "1", REQUIRED),
        k("schema_version", "minor", "int", "0", REQUIRED),
        k("", "defaults", "bool", "default entries for the endpoints and devices not named",
          "true"),
        k("", "inputs", "list", "subscriptions whose messages become inputs", "[]"),
        k("inputs[]", "topic", "str", "ROS topic name", REQUIRED),
        k("inputs[]", "type", "str", ", ".join(b.INPUT_TYPES), REQUIRED),
        k("inputs[]", "endpoint", "str", "MotorCommand, Float64: the endpoint addressed", ""),
        k("inputs[]", "endpoints", "list of str", "Float64MultiArray: endpoints in array order",
          ""),
        k("inputs[]", "joints", "mapping", "JointState: joint name → endpoint", ""),
        k("inputs[]", "mode", "str", "Float64, Float64MultiArray: one of "
          + ", ".join(b.MOTOR_MODES) + " (the endpoints must accept it)", ""),
        k("inputs[]", "field", "str", "JointState: " + ", ".join(b.JOINT_FIELDS)
          + " (effort is torque)", "position"),
        k("inputs[]", "scale", "float", "value × scale + offset is commanded", "1"),
        k("inputs[]", "offset", "float", "added after scale", "0"),
        k("inputs[]", "qos", "mapping", "see `<entry>.qos`", "{}"),
        k("", "outputs", "list", "how devices are published", "[]"),
        k("outputs[]", "device", "str", "the device id", REQUIRED),
        k("outputs[]", "topic", "str", "ROS topic name", "/<device>"),
        k("outputs[]", "type", "str", "a message type that can carry the device's samples "
          "(standard type or fibril_msgs/msg/DeviceSample)", "per device type"),
        k("outputs[]", "frame_id", "str", "header.frame_id", "the device's frame"),
        k("outputs[]", "stamp", "str", ", ".join(b.STAMPS) + ": which time header.stamp "
          "carries", "acquisition"),
        k("outputs[]", "raw_topic", "str", "also publish the samples as DeviceSample here", ""),
        k("outputs[]", "info_topic", "str", "camera: the CameraInfo topic",
          "<topic dir>/camera_info"),
        k("outputs[]", "child_frame_id", "str", "Odometry: child_frame_id", "the body"),
        k("outputs[]", "field_of_view", "float", "Range: field_of_view (0 … 2π)", "0", "rad"),
        k("outputs[]", "radiation_type", "str", "Range: " + ", ".join(b.RADIATION_TYPES),
          "infrared"),
        k("outputs[]", "qos", "mapping", "see `<entry>.qos`", "{}"),
        k("", "joint_states", "mapping or bool", "ground-truth sensor_msgs/JointState of every "
          "joint; false: off", "on"),
        k("joint_states", "topic", "str", "ROS topic name", "/joint_states"),
        k("joint_states", "rate", "float", "of simulated time (whole physics steps)",
          _fmt(b.JointStatesEntry.rate), "Hz"),
        k("joint_states", "qos", "mapping", "see `<entry>.qos`", "{}"),
        k("joint_states", "fast_wall_rate", "float", "running as fast as possible: at most "
          "this often in wall time (0: every grid point)", _fmt(b.FAST_WALL_RATE), "Hz"),
        k("", "tf", "mapping or bool", "/tf (moving bodies) and /tf_static; false: off", "on"),
        k("tf", "rate", "float", "of simulated time", _fmt(b.TfEntry.rate), "Hz"),
        k("tf", "frame_prefix", "str", "prefix of the frame names (the body names)", '""'),
        k("tf", "fast_wall_rate", "float", "as for joint_states", _fmt(b.FAST_WALL_RATE), "Hz"),
        k("", "robot_description", "mapping or bool", "URDF made from the MJCF, latched; "
          "false: off", "on"),
        k("robot_description", "topic", "str", "ROS topic name", "/robot_description"),
        k("", "markers", "mapping or bool", "the scene's geoms as a MarkerArray, latched",
          "off"),
        k("markers", "topic", "str", "ROS topic name", "/fibril_sim/markers"),
        *qos,
    ]


def bridge_page() -> str:
    from fibril_sim_ros import bridge as b

    lines = ["# Bridge file reference", "",
             "Generated from `fibril_sim_ros.bridge`. The bridge file (`-p bridge:=FILE`) maps "
             "endpoints and devices to ROS topics; without one every endpoint `E` gets input "
             "`/E` (fibril_msgs/msg/MotorCommand) and every device `D` output `/D` in its "
             "standard message type.", "", "Output message types per device type:", "",
             "| device type | message types (first: default) |", "|---|---|"]
    for device, kinds in b.OUTPUT_TYPES.items():
        lines.append(f"| `{device}` | {', '.join(kinds)} |")
    lines.append("")
    for section, keys in _sections(bridge_keys()).items():
        lines += [f"## `{section or '(top level)'}`", "", *_table(keys), ""]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- CLI
def _commands(parser: argparse.ArgumentParser, prefix: str
              ) -> Iterable[tuple[str, argparse.ArgumentParser]]:
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{prefix} {name}")


def cli_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    from fibril_sim_core import cli

    return list(_commands(cli._parser(), "fibril_sim"))


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
        if action.option_strings and action.nargs != 0:
            name += f" {action.metavar or action.dest.upper()}".replace("|", "\\|")
        default = "" if action.default in (None, False, [], argparse.SUPPRESS) \
            else _fmt(action.default)
        if action.required:
            default = REQUIRED
        choices = f" (one of {', '.join(map(str, action.choices))})" if action.choices else ""
        text = (action.help or "") % {"default": action.default} if action.help else ""
        rows.append(f"| {name} | {default or '–'} | "
                    f"{(text + choices).replace('|', chr(92) + '|') or '–'} |")
    return rows


def cli_page() -> str:
    lines = ["# Command-line reference", "",
             "Generated from the argparse parsers of `fibril_sim` (commands of installed "
             "packages included, e.g. `calibrate`). Mistakes print one line `fibril_sim: "
             "error: ...` and exit 2; SIGINT / SIGTERM exit 130 / 143.", ""]
    for name, parser in cli_commands():
        rows = _option_rows(parser)
        lines += [f"## `{name}`", ""]
        if parser.description:
            lines += [" ".join(parser.description.split()), ""]
        usage = parser.format_usage().strip().removeprefix("usage: ")
        lines += ["```text", usage, "```", ""]
        if rows:
            lines += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- sim_node
#: What each sim_node parameter means (its name, type and default come from the node).
SIM_NODE_PARAMETERS = {
    "manifest": ("", "the SimulationManifest to run (required)"),
    "bridge": ("", "a bridge file (empty: every topic from the manifest's defaults)"),
    "real_time_factor": ("", "simulated / wall time; 0: as fast as possible (settable "
                             "while running)"),
    "start_paused": ("", "start paused; `/clock` is published once so waiting nodes do not "
                         "deadlock; `~/step` or `~/set_paused` go on"),
    "seed": ("", "episode seed (>= 0): the devices' noise streams; -1 (the default): the "
                 "manifest's `scenario.seed`"),
    "trace_dir": ("", "write a rosbag2/MCAP trace of the session into this new folder"),
    "clock_period": ("s", "`/clock` at least this often in simulated time, plus at every "
                         "frame (0: the fastest device period)"),
    "sync_topics": ("", "sync mode: step one control period, then wait until each of these "
                        "input topics answered"),
    "sync_timeout": ("s", "sync mode: wall seconds a topic may take to answer"),
    "control_period": ("s", "sync mode: simulated time per period (0: clock_period)"),
    "server_socket": ("", "also serve the node's simulation to remote `SimulationConnection` "
                          "clients (a viewer, a test harness) on this Unix socket (mode 0600; "
                          "`auto`: a private directory; the address is in the start-up line; "
                          "empty: none). Meant for observing (records, state, render "
                          "observations): control the node through its services, since a "
                          "remote `pause` / `reset` bypasses the node's own paused flag. TCP: "
                          "`fibril_sim serve`"),
    "lateness_warn_ms": ("ms", "real time: an output written later than this after its due "
                               "time counts as late; the watchdog warns (at most once a "
                               "second) with the cause it sees (settable while running)"),
    "thread_priority": ("", "real time: run the delivery threads at nice -N where the process "
                            "may (root, CAP_SYS_NICE or a nice limit; otherwise one INFO line); "
                            "as fast as possible and in sync mode they keep the process's "
                            "priority; 0: unchanged"),
}


def sim_node_parameters() -> list[tuple[str, str, Any]]:
    """(name, type, default) as the node declares them (its ``_declare``, recorded)."""
    from fibril_sim_ros.sim_node import SimNode

    declared: list[tuple[str, str, Any]] = []

    class Recorder:
        def declare_parameter(self, name: str, value: Any = None, *_: Any, **__: Any) -> None:
            kind = getattr(value, "name", None)  # a Parameter.Type: no default
            if kind is not None:
                declared.append((name, kind.lower().replace("_", " "), REQUIRED))
            else:
                declared.append((name, type(value).__name__, value))

    SimNode._declare(Recorder())  # type: ignore[arg-type]
    return declared


def sim_node_page() -> str:
    from fibril_sim_ros import sim_node

    lines = ["# sim_node reference", "",
             "Generated from `fibril_sim_ros.sim_node` (node name "
             f"`{sim_node.NODE_NAME}`).", "", "```text",
             "python -m fibril_sim_ros.sim_node --ros-args -p manifest:=PATH [-p name:=value ...]",
             "ros2 run fibril_sim_ros sim_node --ros-args -p manifest:=PATH ...", "```", "",
             "## Parameters", "", "| parameter | type | unit | default | meaning |",
             "|---|---|---|---|---|"]
    for name, kind, default in sim_node_parameters():
        unit, meaning = SIM_NODE_PARAMETERS.get(name, ("", "(undocumented)"))
        shown = "–" if default is REQUIRED else _fmt(default)
        lines.append(f"| `{name}` | {kind} | {unit or '–'} | {shown} | {meaning} |")
    doc = (sim_node.__doc__ or "").strip().split("\n\n")
    lines += ["", "## Behaviour, services and exit status", ""]
    lines += [" ".join(part.split()) + "\n" for part in doc[1:]
              if not part.startswith("    ")]  # the usage block is above
    lines += [f"Exit codes: 0 normal shutdown, {sim_node.EXIT_CONFIG} bad manifest / bridge / "
              f"parameter, {sim_node.EXIT_FAILURE} sync timeout or host failure, 130 / 143 "
              f"after SIGINT / SIGTERM.", ""]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- pages
PAGES: dict[str, Callable[[], str]] = {
    "manifest": manifest_page,
    "bridge": bridge_page,
    "cli": cli_page,
    "sim_node": sim_node_page,
}


#: Parts of hand-written pages (``{include}``d there), not pages: excluded from the build.
FRAGMENTS = "_fragments"


def all_pages() -> dict[str, Callable[[], str]]:
    """Every generated page and fragment by its path under ``generated/`` (no suffix)."""
    import fibril_documents

    pages = dict(PAGES)
    for name, render in fibril_documents.pages().items():
        pages[f"{FRAGMENTS}/{name}" if name.endswith("_keys") else name] = render
    return pages


def write_pages(folder: Path = GENERATED) -> list[Path]:
    """Write every generated page (only when its text changed: Sphinx rebuilds what changed)."""
    (folder / FRAGMENTS).mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in all_pages().items():
        path = folder / f"{name}.md"
        text = render()
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", lambda app: write_pages())
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # pragma: no cover
    for page in write_pages():
        print(page)
