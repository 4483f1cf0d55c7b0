"""``fibril_sim init``: a commented SimulationManifest and bridge file from any MJCF.

Your robot live without writing YAML: every actuator becomes a ``fibril_sim/motor`` endpoint
in the modes its MuJoCo type accepts (the same ``classify_actuator`` the node uses to refuse a
mode), every hinge / slide joint an encoder, and MJCF sensors become devices where a device
type fits (gyro + accelerometer on one site: an IMU; rangefinder; touch: a digital input);
named cameras are offered as camera devices (commented out unless asked for: rendering needs an
offscreen OpenGL). Everything else the model holds is listed as comments. The manifest is
validated by building its plan before anything is written; both files are written whole or not
at all.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mujoco

from . import schema as s
from .components.motor import classify_actuator
from .errors import FibrilError
from .manifest import SCHEMA_MAJOR, parse_manifest
from .plan import SimulationBuilder

MANIFEST_NAME = "simulation.yaml"
BRIDGE_NAME = "bridge.yaml"
_HINGE_SLIDE = (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)
#: JointState fields by the endpoint mode they carry (the bridge's ``field`` values).
_JOINT_FIELD = {"position": "position", "velocity": "velocity", "torque": "effort"}
_PLAIN = re.compile(r"[A-Za-z_/.][A-Za-z0-9_./-]*\Z")
_YAML_WORDS = frozenset({"true", "false", "null", "yes", "no", "on", "off", "y", "n", ".inf",
                         ".nan"})


class InitError(FibrilError):
    """The model cannot be turned into a manifest (names the model file and the element)."""


@dataclass(frozen=True)
class InitOptions:
    """What ``fibril_sim init`` generates. Rates are of simulated time (Hz), rounded to a
    whole number of physics steps."""

    encoder_rate: float = 500.0
    sensor_rate: float = 100.0
    camera_rate: float = 30.0
    joints: tuple[str, ...] = ()  # fnmatch patterns of joint names; empty: every hinge/slide
    encoders: bool = True
    cameras: bool = False
    command: str = "fibril_sim init"  # written into the header comment


@dataclass(frozen=True)
class InitResult:
    manifest_text: str
    bridge_text: str
    endpoints: tuple[str, ...]
    devices: tuple[str, ...]
    skipped: tuple[str, ...] = field(default=())  # one line each: what became a comment


def generate(model_path: str | Path, output: str | Path,
             options: InitOptions = InitOptions()) -> InitResult:
    """The manifest and bridge texts for ``model_path``, as they would be written into
    ``output`` (the model path in the manifest is relative to it); validated, not written."""
    model_file = Path(model_path)
    label = str(model_path)
    if not model_file.is_file():
        raise InitError(f"{label}: file not found")
    for name, rate in (("--encoder-rate", options.encoder_rate),
                       ("--sensor-rate", options.sensor_rate),
                       ("--camera-rate", options.camera_rate)):
        value: object = rate  # (whatever the caller passed)
        if not (isinstance(value, (int, float)) and value > 0 and value < 1e9):
            raise InitError(f"{name} must be a positive number of Hz, got {rate!r}")
    try:
        model = mujoco.MjModel.from_xml_path(str(model_file))
    except (ValueError, RuntimeError) as exc:
        raise InitError(f"{label}: the MJCF does not compile: "
                        f"{' '.join(str(exc).split())}") from None
    out_dir = Path(output)
    builder = _Builder(model, label, options)
    builder.collect()
    relative = os.path.relpath(model_file.resolve(), out_dir.resolve())
    manifest_text = builder.manifest_text(relative)
    bridge_text = builder.bridge_text()
    _validate(manifest_text, out_dir / MANIFEST_NAME, model_file.resolve())
    return InitResult(manifest_text, bridge_text, tuple(builder.endpoints),
                      tuple(builder.device_ids), tuple(builder.skipped))


def write(result: InitResult, output: str | Path, *, force: bool = False) -> tuple[Path, Path]:
    """Write both files into ``output`` (created); existing files are kept unless ``force``.
    Each file goes through a temporary file and a rename: never half written."""
    out_dir = Path(output)
    targets = (out_dir / MANIFEST_NAME, out_dir / BRIDGE_NAME)
    if not force:
        for target in targets:
            if target.exists():
                raise InitError(f"{target}: exists already; not overwritten (--force to "
                                f"replace it)")
    temporaries: list[Path] = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for target, text in zip(targets, (result.manifest_text, result.bridge_text)):
            temporary = target.with_name(f".{target.name}.tmp{os.getpid()}")
            temporary.write_text(text, encoding="utf-8")
            temporaries.append(temporary)
        for temporary, target in zip(temporaries, targets):
            os.replace(temporary, target)
    except OSError as exc:
        raise InitError(f"{out_dir}: cannot write: {exc.strerror or exc}") from None
    finally:  # also on SIGINT: no temporary file is left behind
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)
    return targets


def _validate(text: str, path: Path, model: Path) -> None:
    """Build the plan of the generated manifest (as it would be read from ``path``, with the
    model at ``model``: ``path``'s folder may not exist yet): a model init accepted but the
    loader refuses is a bug of init, reported as such."""
    document = s.load_yaml_text(text, str(path), InitError)
    if isinstance(document, dict):  # (init's own text: always a mapping)
        document["model"] = str(model)
    try:
        SimulationBuilder().build(parse_manifest(document, path.resolve()))
    except FibrilError as exc:
        raise InitError(f"the generated manifest does not load (please report it): "
                        f"{exc}") from None


# --------------------------------------------------------------------------- building
@dataclass
class _Component:
    comment: str
    lines: list[str]  # YAML lines of the list item (without indentation)
    active: bool = True


class _Builder:
    def __init__(self, model: mujoco.MjModel, label: str, options: InitOptions) -> None:
        self.model = model
        self.label = label
        self.options = options
        self.timestep = float(model.opt.timestep)
        self.timestep_ns = round(self.timestep * 1e9)
        self.components: list[_Component] = []
        self.endpoints: list[str] = []
        self.device_ids: list[str] = []
        self.skipped: list[str] = []
        self.unmapped_sensors: list[str] = []
        self.joint_inputs: dict[str, dict[str, str]] = {}  # mode -> joint -> endpoint
        self._ids: set[str] = set()

    # ----------------------------------------------------------------- names
    def _name(self, objtype: mujoco.mjtObj, index: int) -> str:
        return mujoco.mj_id2name(self.model, objtype, index) or ""

    def _unique(self, wanted: str) -> str:
        """A component id usable as a ROS topic name (the bridge's default topic is ``/id``)."""
        name = re.sub(r"[^A-Za-z0-9_]", "_", wanted).strip("_") or "component"
        if not (name[0].isalpha() or name[0] == "_"):
            name = "c_" + name
        candidate, n = name, 2
        while candidate in self._ids:
            candidate, n = f"{name}_{n}", n + 1
        self._ids.add(candidate)
        return candidate

    def _period(self, rate: float) -> str:
        ticks = max(1, round(1e9 / rate / self.timestep_ns))
        return _number(ticks * self.timestep_ns / 1e9)

    # ----------------------------------------------------------------- collect
    def collect(self) -> None:
        self._actuators()
        if self.options.encoders:
            self._encoders()
        self._sensors()
        self._cameras()

    def _actuators(self) -> None:
        model = self.model
        if model.nu == 0:
            raise InitError(f"{self.label}: no actuators: the model has no <actuator> element "
                            f"to command (add a <motor>, <position>, <velocity> or <general>)")
        for aid in range(model.nu):
            name = self._name(mujoco.mjtObj.mjOBJ_ACTUATOR, aid)
            target = self._transmission(aid)
            if not name:
                raise InitError(f"{self.label}: actuator {aid} ({target}) has no name; give it "
                                f"a name=\"...\" attribute")
            modes, kind = classify_actuator(model, aid)
            component_id = self._unique(name)
            endpoint = f"{component_id}/command"
            lines = [f"id: {_scalar(component_id)}", "type: fibril_sim/motor",
                     f"endpoint: {_scalar(endpoint)}", f"bind: {{actuator: {_scalar(name)}}}"]
            if not modes:
                self._ids.discard(component_id)
                self.components.append(_Component(
                    f"actuator {name!r} ({target}) takes no command: {kind.describe()}",
                    lines, active=False))
                self.skipped.append(f"actuator {name}: no command mode ({kind.name})")
                continue
            self.components.append(_Component(
                f"actuator {name!r} ({target}): {kind.describe()}; modes "
                f"{', '.join(modes)}", lines))
            self.endpoints.append(endpoint)
            if int(model.actuator_trntype[aid]) == mujoco.mjtTrn.mjTRN_JOINT:
                joint = self._name(mujoco.mjtObj.mjOBJ_JOINT, int(model.actuator_trnid[aid][0]))
                for mode in modes:
                    if mode in _JOINT_FIELD and joint:
                        self.joint_inputs.setdefault(mode, {}).setdefault(joint, endpoint)

    def _transmission(self, aid: int) -> str:
        model = self.model
        trn = int(model.actuator_trntype[aid])
        target = int(model.actuator_trnid[aid][0])
        kinds = {mujoco.mjtTrn.mjTRN_JOINT: ("joint", mujoco.mjtObj.mjOBJ_JOINT),
                 mujoco.mjtTrn.mjTRN_JOINTINPARENT: ("joint", mujoco.mjtObj.mjOBJ_JOINT),
                 mujoco.mjtTrn.mjTRN_TENDON: ("tendon", mujoco.mjtObj.mjOBJ_TENDON),
                 mujoco.mjtTrn.mjTRN_SITE: ("site", mujoco.mjtObj.mjOBJ_SITE),
                 mujoco.mjtTrn.mjTRN_BODY: ("body", mujoco.mjtObj.mjOBJ_BODY)}
        if trn not in kinds:
            trn_name: str = mujoco.mjtTrn(trn).name
            return "transmission " + trn_name.removeprefix("mjTRN_").lower()
        kind, objtype = kinds[trn]
        name = self._name(objtype, target)
        return f"on {kind} {name!r}" if name else f"on {kind} {target}"

    def _encoders(self) -> None:
        model = self.model
        patterns = self.options.joints
        matched: set[str] = set()
        for jid in range(model.njnt):
            if int(model.jnt_type[jid]) not in _HINGE_SLIDE:
                continue
            name = self._name(mujoco.mjtObj.mjOBJ_JOINT, jid)
            kind = "hinge" if int(model.jnt_type[jid]) == mujoco.mjtJoint.mjJNT_HINGE else "slide"
            if not name:
                if patterns:
                    continue
                body = self._name(mujoco.mjtObj.mjOBJ_BODY, int(model.jnt_bodyid[jid]))
                raise InitError(
                    f"{self.label}: joint {jid} ({kind} in body "
                    f"{body or int(model.jnt_bodyid[jid])!r}) has no name; give it a "
                    f"name=\"...\" attribute (or choose joints with --joints, or --no-encoders)")
            hits = [p for p in patterns if fnmatch.fnmatchcase(name, p)]
            if patterns and not hits:
                continue
            matched.update(hits)
            unit, counts = (("counts per revolution", "4096") if kind == "hinge" else
                            ("counts per metre", "100000"))
            component_id = self._unique(f"{name}_encoder")
            self.components.append(_Component(
                f"{kind} joint {name!r}: encoder ({unit}), sample [position, velocity, counts]",
                [f"id: {_scalar(component_id)}", "type: fibril_sim/encoder",
                 f"bind: {{joint: {_scalar(name)}}}",
                 f"config: {{period: {self._period(self.options.encoder_rate)}, latency: 0.0, "
                 f"frame_id: {_scalar(name)}, counts_per_revolution: {counts}, "
                 f"noise_counts: 0.0}}"]))
            self.device_ids.append(component_id)
        unmatched = [p for p in patterns if p not in matched]
        if unmatched:
            names = [self._name(mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt)
                     if int(model.jnt_type[j]) in _HINGE_SLIDE]
            known = ", ".join(n for n in names if n) or "none"
            raise InitError(f"{self.label}: --joints {unmatched[0]!r} matches no hinge or slide "
                            f"joint; known: {known}")

    def _sensors(self) -> None:
        model = self.model
        sensor = mujoco.mjtSensor
        by_site: dict[int, dict[int, int]] = {}  # site -> sensor type -> sensor id
        for sid in range(model.nsensor):
            stype = int(model.sensor_type[sid])
            on_site = int(model.sensor_objtype[sid]) == mujoco.mjtObj.mjOBJ_SITE
            if stype in (sensor.mjSENS_GYRO, sensor.mjSENS_ACCELEROMETER) and on_site:
                by_site.setdefault(int(model.sensor_objid[sid]), {}).setdefault(stype, sid)
        imu_sensors: set[int] = set()
        for site_id, found in by_site.items():
            if len(found) < 2:
                continue
            site = self._name(mujoco.mjtObj.mjOBJ_SITE, site_id)
            if not site:
                continue
            gyro, accel = found[sensor.mjSENS_GYRO], found[sensor.mjSENS_ACCELEROMETER]
            imu_sensors.update((gyro, accel))
            component_id = self._unique(site if "imu" in site.lower() else f"{site}_imu")
            self.components.append(_Component(
                f"gyro {self._sensor_label(gyro)} + accelerometer {self._sensor_label(accel)} "
                f"on site {site!r}: IMU, sample [gx, gy, gz, ax, ay, az] (rad/s, m/s²)",
                [f"id: {_scalar(component_id)}", "type: fibril_sim/imu",
                 f"bind: {{site: {_scalar(site)}}}",
                 f"config: {{period: {self._period(self.options.sensor_rate)}, latency: 0.0, "
                 f"frame_id: {_scalar(site)}, "
                 f"gyro_noise: {_number(float(model.sensor_noise[gyro]))}, "
                 f"accel_noise: {_number(float(model.sensor_noise[accel]))}}}"]))
            self.device_ids.append(component_id)
        for sid in range(model.nsensor):
            if sid in imu_sensors:
                continue
            stype = int(model.sensor_type[sid])
            name = self._name(mujoco.mjtObj.mjOBJ_SENSOR, sid)
            on_site = int(model.sensor_objtype[sid]) == mujoco.mjtObj.mjOBJ_SITE
            site = self._name(mujoco.mjtObj.mjOBJ_SITE, int(model.sensor_objid[sid])) \
                if on_site else ""
            period = self._period(self.options.sensor_rate)
            if stype == sensor.mjSENS_RANGEFINDER and site:
                cutoff = float(model.sensor_cutoff[sid])
                component_id = self._unique(name or f"{site}_range")
                self.components.append(_Component(
                    f"rangefinder {self._sensor_label(sid)} on site {site!r} (along its +z): "
                    f"sample [distance, hit]",
                    [f"id: {_scalar(component_id)}", "type: fibril_sim/rangefinder",
                     f"bind: {{site: {_scalar(site)}}}",
                     f"config: {{period: {period}, latency: 0.0, frame_id: {_scalar(site)}, "
                     f"max_range: {_number(cutoff if cutoff > 0 else 10.0)}, "
                     f"noise: {_number(float(model.sensor_noise[sid]))}}}"]))
                self.device_ids.append(component_id)
            elif stype == sensor.mjSENS_TOUCH and name:
                component_id = self._unique(name)
                self.components.append(_Component(
                    f"touch sensor {name!r}: digital input, 1 while its force exceeds 0 N",
                    [f"id: {_scalar(component_id)}", "type: fibril_sim/digital_input",
                     f"bind: {{sensor: {_scalar(name)}}}",
                     f"config: {{period: {period}, latency: 0.0, mode: threshold, "
                     f"threshold: 0.0}}"]))
                self.device_ids.append(component_id)
            else:
                kind = mujoco.mjtSensor(stype).name.removeprefix("mjSENS_").lower()
                where = f" on site {site!r}" if site else ""
                if name:
                    self.unmapped_sensors.append(
                        f"sensor {name!r} ({kind}{where}): no device type; its values are in "
                        f"a trace (fibril_sim trace query TRACE sensor:{name})")
                else:
                    self.unmapped_sensors.append(
                        f"sensor {sid} ({kind}{where}): unnamed; name it to map or query it")
                self.skipped.append(self.unmapped_sensors[-1])

    def _sensor_label(self, sid: int) -> str:
        name = self._name(mujoco.mjtObj.mjOBJ_SENSOR, sid)
        return repr(name) if name else f"#{sid}"

    def _cameras(self) -> None:
        for cid in range(self.model.ncam):
            name = self._name(mujoco.mjtObj.mjOBJ_CAMERA, cid)
            if not name:
                self.skipped.append(f"camera {cid}: unnamed; name it to use it as a device")
                continue
            component_id = self._unique(name)
            active = self.options.cameras
            self.components.append(_Component(
                f"camera {name!r}: RGB images" + ("" if active else
                " (uncomment, or init --cameras: rendering needs an offscreen OpenGL, "
                "MUJOCO_GL=egl or osmesa)"),
                [f"id: {_scalar(component_id)}", "type: fibril_sim/camera",
                 f"bind: {{camera: {_scalar(name)}}}",
                 f"config: {{period: {self._period(self.options.camera_rate)}, latency: 0.0, "
                 f"width: 320, height: 240}}"], active=active))
            if active:
                self.device_ids.append(component_id)
            else:
                self._ids.discard(component_id)
                self.skipped.append(f"camera {name}: commented out (init --cameras)")

    # ----------------------------------------------------------------- texts
    def manifest_text(self, model_relative: str) -> str:
        model = self.model
        out = [
            f"# SimulationManifest {SCHEMA_MAJOR}.1 generated by `{self.options.command}`",
            f"# (MuJoCo {mujoco.__version__}). Edit freely: it is yours now. Times are in "
            f"seconds; the physics",
            f"# timestep ({_number(self.timestep)} s) comes from the MJCF. Every component "
            f"type and config key: the",
            "# manifest reference (docs/, `make docs`); `fibril_sim inspect THIS_FILE` shows "
            "the resolved plan.",
            f"schema_version: {{major: {SCHEMA_MAJOR}, minor: 1}}",
            f"model: {_scalar(model_relative)}",
            "components:",
        ]
        for component in self.components:
            out.append(f"  # {component.comment}")
            prefix = "  - " if component.active else "  # - "
            rest = "    " if component.active else "  #   "
            out.append(prefix + component.lines[0])
            out.extend(rest + line for line in component.lines[1:])
        if self.unmapped_sensors:
            out.append("# MJCF sensors without a device type (recorded in traces as they are):")
            out.extend(f"#   {line}" for line in self.unmapped_sensors)
        out += ["trace:", "  state_every_steps: 10",
                "runtime:", "  mode: realtime        # paused | lockstep | realtime | fast",
                "  real_time_factor: 1.0"]
        keys = [self._name(mujoco.mjtObj.mjOBJ_KEY, k) for k in range(model.nkey)]
        named = [k for k in keys if k]
        if named:
            others = f" (also in the model: {', '.join(named[1:])})" if len(named) > 1 else ""
            out += [f"scenario:          # every episode starts from this keyframe{others}",
                    f"  keyframe: {_scalar(named[0])}"]
        return "\n".join(out) + "\n"

    def bridge_text(self) -> str:
        out = [
            f"# Bridge file generated by `{self.options.command}`: which ROS topics carry the",
            "# manifest's endpoints and devices. Endpoints and devices not named here get "
            "default topics",
            "# (endpoint E: /E as fibril_msgs/msg/MotorCommand; device D: /D in its standard "
            "message type).",
            "# Use it with: -p bridge:=THIS_FILE",
            "schema_version: {major: 1, minor: 0}",
            "defaults: true",
        ]
        inputs = [f"  - {{topic: {_scalar('/' + e)}, type: fibril_msgs/msg/MotorCommand, "
                  f"endpoint: {_scalar(e)}}}" for e in self.endpoints]
        groups = sorted(self.joint_inputs.items(), key=lambda item: -len(item[1]))
        for index, (mode, joints) in enumerate(groups):
            topic = "/joint_commands" if index == 0 else f"/joint_commands/{mode}"
            pairs = ", ".join(f"{_scalar(j)}: {_scalar(e)}" for j, e in joints.items())
            inputs.append(f"  # JointState.{_JOINT_FIELD[mode]} by joint name → {mode} "
                          f"commands")
            inputs.append(f"  - {{topic: {topic}, type: sensor_msgs/msg/JointState, "
                          f"field: {_JOINT_FIELD[mode]},")
            inputs.append(f"     joints: {{{pairs}}}}}")
        if inputs:
            out.append("inputs:")
            out.extend(inputs)
        out += ["joint_states: {topic: /joint_states, rate: 50.0}   # ground truth; "
                "false: off",
                "tf: {rate: 50.0}                                  # /tf and /tf_static; "
                "false: off",
                "robot_description: {topic: /robot_description}    # URDF made from the MJCF"]
        return "\n".join(out) + "\n"


def _scalar(text: str) -> str:
    """A YAML scalar for ``text``: plain when that reads back as the same string."""
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text, ensure_ascii=False)


def _number(value: float) -> str:
    text = repr(float(value))
    return text if "e" not in text else f"{value:.12g}"


def command_line(model: str, output: str, argv: Sequence[str]) -> str:
    """The command as a user would type it (for the header comment)."""
    return shlex.join(["fibril_sim", "init", model, "--output", output, *argv])
