"""Bad input never crashes: a seeded mutation corpus of every file kind people write.

Each case mutates one of the drivetrain example files (manifest, through ``inspect`` and
``run``; recorded inputs; overlay artifact; experiment and its scenario; calibration request,
and the recorded inputs and samples it names) — byte flips, non-UTF-8 bytes, deep nesting, alias bombs, huge numbers, .inf/.nan,
wrong types, deleted keys, truncation — and runs the real
``fibril_sim`` entry (``cli.main`` in-process). Every case must end with exit 2 and one
stderr line ``fibril_sim: error: ...`` naming the mutated file, or succeed when the mutant is
still valid; never a traceback, within a time bound per case and a bound on memory growth.
A few cases also run as child processes under an address-space limit.

Long steps are cut where they do not test input handling: the experiment's runs are not
stepped (``_simulate`` is replaced) and a valid calibration request is loaded, not solved.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fibril_sim_core import schema
from fibril_sim_core.cli import main
from fibril_sim_core.errors import FibrilError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
# A longer or different corpus: FIBRIL_FUZZ_CASES=1000 FIBRIL_FUZZ_SEED=7 pytest this file.
SEED = int(os.environ.get("FIBRIL_FUZZ_SEED", "20261201"))
CASES_PER_KIND = int(os.environ.get("FIBRIL_FUZZ_CASES", "50"))
CASE_SECONDS = 5.0
MEMORY_GROWTH_MB = 400

BOMB = ('bomb0: &b0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
        + "".join(f"bomb{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 9)}]\n" for i in range(1, 9)))


class _Validated(Exception):
    """Raised by the stubbed calibration solve: the request loaded and validated."""


# ------------------------------------------------------------------ mutations
def _numbers(text: str) -> list[re.Match[str]]:
    return list(re.finditer(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])", text))


def _values(text: str) -> list[re.Match[str]]:
    """``key: value`` spans (block style) and flow values after ``: ``."""
    return list(re.finditer(r"(?<=: )[^\s,{}\[\]#][^,{}\[\]#\n]*", text))


def _replace(text: str, match: re.Match[str], new: str) -> str:
    return text[:match.start()] + new + text[match.end():]


def _mutate_text(rng: random.Random, text: str) -> tuple[str, bytes]:
    """One mutation: (its name, the mutated file bytes)."""
    data = text.encode()
    kind = rng.choice(["byte_flip", "non_utf8", "nesting", "alias_bomb", "huge_number",
                       "non_finite", "wrong_type", "delete_line", "truncate", "control",
                       "recursive_alias", "huge_string", "duplicate_key", "tab_indent"])
    if kind == "byte_flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return kind, bytes(out)
    if kind == "non_utf8":
        at = rng.randrange(len(data))
        return kind, data[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80",
                                             b"\xf8\x88\x80\x80\x80"]) + data[at:]
    if kind == "control":
        at = rng.randrange(len(data))
        return kind, data[:at] + rng.choice([b"\x00", b"\x01", b"\x1b", b"\x7f"]) + data[at:]
    values = _values(text)
    numbers = _numbers(text)
    if kind == "nesting" and values:
        depth = rng.choice([499, 600, 1200, 20000])
        nested = "[" * depth + "1" + "]" * depth
        return kind, _replace(text, rng.choice(values), nested).encode()
    if kind == "alias_bomb" and values:
        return kind, (BOMB + _replace(text, rng.choice(values), "*b8")).encode()
    if kind == "recursive_alias" and values:
        return kind, _replace(text, rng.choice(values), "&r [1, *r]").encode()
    if kind == "huge_number" and numbers:
        new = rng.choice(["1.0e+300", "-1e300", "1e400", "1" + "0" * 5000, "9" * 40,
                          "1e-320", "123456789012345678901234567890"])
        return kind, _replace(text, rng.choice(numbers), new).encode()
    if kind == "non_finite" and numbers:
        return kind, _replace(text, rng.choice(numbers),
                              rng.choice([".inf", "-.inf", ".nan", ".NaN"])).encode()
    if kind == "wrong_type" and values:
        new = rng.choice(["[]", "{}", "[1, 2]", "{a: 1}", "true", "null", "''", "'text'",
                          "2001-02-30", "!!binary aGVsbG8=", "0x1F", "1_0", "~", "- 1"])
        return kind, _replace(text, rng.choice(values), new).encode()
    if kind == "huge_string" and values:
        return kind, _replace(text, rng.choice(values), "x" * 200_000).encode()
    if kind == "duplicate_key":
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        return kind, "".join(lines[:i + 1] + [lines[i]] + lines[i + 1:]).encode()
    if kind == "tab_indent":
        return kind, text.replace("  ", "\t", 1).encode()
    if kind == "truncate":
        return kind, data[:rng.randrange(len(data))]
    lines = text.splitlines(keepends=True)  # delete_line (and fallbacks)
    content = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip()
               .startswith("#")]
    drop = rng.choice(content)
    return "delete_line", "".join(lines[:drop] + lines[drop + 1:]).encode()


def _mutate_document(rng: random.Random, text: str) -> tuple[str, bytes]:
    """A structural mutation of the parsed document: one value replaced or one key removed."""
    doc = schema.load_yaml_text(text, "example", FibrilError)
    paths: list[tuple[Any, Any]] = []
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for key, value in items:
            paths.append((node, key))
            stack.append(value)
    node, key = rng.choice(paths)
    if isinstance(node, dict) and rng.random() < 0.4:
        del node[key]
        name = "delete_key"
    else:
        node[key] = rng.choice([None, True, -1, 0, 2**70, 1.5e300, float("inf"), float("nan"),
                                "", "?", [], {}, [[[]]], {"x": 1}, list(range(3)), "0.5",
                                -0.0, 1e-300])
        name = "replace_value"
    return name, yaml.safe_dump(doc, sort_keys=False).encode()


def mutants(text: str, seed: int, count: int, *, yaml_file: bool = True
            ) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        out.append(_mutate_document(rng, text) if yaml_file and rng.random() < 0.35
                   else _mutate_text(rng, text))
    return out


# ------------------------------------------------------------------ the file kinds
@dataclass(frozen=True)
class Kind:
    name: str
    source: str  # the example file mutated
    argv: Callable[[Path], list[str]]  # the CLI call, given the example folder copy
    valid_codes: tuple[int, ...] = (0,)
    # Files an error may name instead: the ones the mutated file points to, when a mutation
    # makes them wrong for it (a request whose observation no longer fits its CSV samples).
    also_named: tuple[str, ...] = ()
    yaml_file: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        return (self.source, *self.also_named)


def _with_overlay(folder: Path) -> list[str]:
    manifest = (folder / "simulation.yaml").read_text()
    (folder / "with-overlay.yaml").write_text(
        manifest.replace("\ntrace:", "\nparameter_overlays: [damping-baseline.yaml]\ntrace:"))
    return ["inspect", str(folder / "with-overlay.yaml")]


KINDS = [
    Kind("manifest", "simulation.yaml", lambda f: ["inspect", str(f / "simulation.yaml")]),
    Kind("inputs", "inputs.yaml", lambda f: ["run", str(f / "simulation.yaml"), "--steps", "20",
                                             "--inputs", str(f / "inputs.yaml")]),
    Kind("overlay", "damping-baseline.yaml", _with_overlay),
    Kind("experiment", "wheel-damping-study.yaml",
         lambda f: ["experiment", "run", str(f / "wheel-damping-study.yaml"), "--output",
                    str(f / "out" / "results.json")], valid_codes=(0, 1)),
    Kind("calibration", "calibration.yaml",
         lambda f: ["calibrate", str(f / "calibration.yaml"), "--quiet"],
         also_named=("calibration_data/",)),
    Kind("scenario", "drive-start.yaml",
         lambda f: ["experiment", "run", str(f / "wheel-damping-study.yaml"), "--output",
                    str(f / "out" / "results.json")], valid_codes=(0, 1)),
    Kind("manifest_run", "simulation.yaml",
         lambda f: ["run", str(f / "simulation.yaml"), "--steps", "30"]),
    # The files a calibration request names: recorded inputs (YAML) and samples (CSV).
    Kind("recorded_inputs", "calibration_data/run-01_inputs.yaml",
         lambda f: ["calibrate", str(f / "calibration.yaml"), "--quiet"]),
    Kind("samples_csv", "calibration_data/run-01_motor_current.csv",
         lambda f: ["calibrate", str(f / "calibration.yaml"), "--quiet"], yaml_file=False),
]


@pytest.fixture()
def stubs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs that are not input handling: not stepped, not solved."""
    from fibril_calibration import engine
    from fibril_calibration.request import load_calibration_request
    from fibril_sim_core.experiments import run

    def simulate(plan: Any, scenario: Any, execution: Any, trace: Path, observers: Any
                 ) -> tuple[str, str, float]:
        plan.create_instance(execution.seed, scenario=scenario, collect=False)
        return run.TIMEOUT, "not stepped (fuzz test)", 0.0

    def calibrate(request: Path, **_: Any) -> Any:
        load_calibration_request(request)
        raise _Validated

    monkeypatch.setattr(run, "_simulate", simulate)
    monkeypatch.setattr(engine, "run_calibration", calibrate)


def _call(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except _Validated:
            code = 0
    return code, err.getvalue()


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_mutants_fail_with_one_line_naming_the_file(kind: Kind, tmp_path: Path,
                                                     stubs: None) -> None:
    text = (EXAMPLE / kind.source).read_text(encoding="utf-8")
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder)
    argv = kind.argv(folder)
    assert _call(argv)[0] in kind.valid_codes  # the unmutated file is valid
    rss = _max_rss_mb()
    problems: list[str] = []
    outcomes: dict[str, int] = {}
    cases = mutants(text, SEED + sum(map(ord, kind.name)), CASES_PER_KIND,
                    yaml_file=kind.yaml_file)
    for n, (mutation, data) in enumerate(cases):
        shutil.rmtree(folder / "out", ignore_errors=True)
        (folder / kind.source).write_bytes(data)
        label = f"{kind.name} case {n} ({mutation})"
        started = time.perf_counter()
        try:
            code, err = _call(argv)
        except BaseException as exc:  # noqa: BLE001 - a crash is what this test looks for
            problems.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        seconds = time.perf_counter() - started
        outcomes[mutation] = outcomes.get(mutation, 0) + 1
        if seconds > CASE_SECONDS:
            problems.append(f"{label}: took {seconds:.1f} s")
        if code in kind.valid_codes:
            continue
        lines = err.splitlines()
        if code != 2:
            problems.append(f"{label}: exit {code}: {err[:300]!r}")
        elif kind.name == "experiment":
            lines = [line for line in lines if not line.startswith("[")]  # progress lines
        if code == 2 and (len(lines) != 1 or not lines[0].startswith("fibril_sim: error: ")):
            problems.append(f"{label}: stderr is not one error line: {err[:300]!r}")
        elif code == 2 and not any(name in lines[0] for name in kind.names):
            problems.append(f"{label}: the error does not name {kind.source}: {lines[0][:300]}")
        elif code == 2 and len(lines[0]) > 2000:
            problems.append(f"{label}: a {len(lines[0])}-character error line: "
                            f"{lines[0][:300]}")
    (folder / kind.source).write_text(text, encoding="utf-8")
    growth = _max_rss_mb() - rss
    assert not problems, "\n".join(problems)
    assert growth < MEMORY_GROWTH_MB, f"max RSS grew by {growth:.0f} MB"
    assert sum(outcomes.values()) == CASES_PER_KIND


# ------------------------------------------------------------------ child processes
def _fibril_sim(args: list[str], *, memory_mb: int = 3072, timeout: float = 60.0
                ) -> subprocess.CompletedProcess[str]:
    """``fibril_sim`` as a child process under an address-space limit."""
    def limit() -> None:
        size = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO / "fibril_sim_core"), str(REPO / "fibril_calibration"),
         os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "fibril_sim_core.cli", *args],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=limit)


@pytest.mark.slow
@pytest.mark.parametrize("name, content", [
    ("bomb", "schema_version: {major: 3, minor: 1}\n" + BOMB + "model: *b8\n"),
    ("deep", "schema_version: {major: 3, minor: 1}\nmodel: " + "[" * 100_000 + "]" * 100_000),
    ("non-utf8", "schema_version: {major: 3, minor: 1}\nmodel: drive\xfftrain.xml\n"),
    ("huge-period", (EXAMPLE / "simulation.yaml").read_text().replace("period: 0.002",
                                                                      "period: 1.0e+300", 1)),
], ids=["bomb", "deep", "non-utf8", "huge-period"])  # (an id is PYTEST_CURRENT_TEST in the
# child's environment: a 200 kB one is more than execve takes)
def test_child_process_bad_manifest_is_one_line(tmp_path: Path, name: str,
                                                content: str) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(content.encode("latin-1" if name == "non-utf8" else "utf-8"))
    for model in ("drivetrain.xml", "drivetrain_bench.xml"):
        shutil.copy(EXAMPLE / model, tmp_path / model)
    started = time.perf_counter()
    result = _fibril_sim(["inspect", str(path)])
    assert time.perf_counter() - started < 30
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fibril_sim: error: {path}"), lines
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("duration, message", [
    ("inf", "not a finite number of seconds"), ("1e300", "longer than the longest time"),
    ("nan", "must be a number of seconds >= 0")])
def test_child_process_huge_duration_is_one_line(duration: str, message: str) -> None:
    result = _fibril_sim(["run", str(EXAMPLE / "simulation.yaml"), "--duration", duration])
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fibril_sim: error: --duration"), lines
    assert message in lines[0]


# ------------------------------------------------------------------ recordings (issue 23)
# Recording sources a calibration request reads: MCAP bags (rosbags writes chunk CRC 0), a raw
# MCAP file with and without CRCs, a sqlite3 bag and a CSV log, each cut, bit-flipped, given
# huge values or a BOM. Every mutant loads (its damage is said in a warning, or it changed
# nothing the calibration reads) or ends in one error line naming the recording; never a
# traceback, never a numpy RuntimeWarning. Bridge-file fuzzing lives in its own section.
@dataclass(frozen=True)
class RecordingKind:
    name: str
    file: str  # the file mutated, relative to the recording folder
    source: str  # the request's source path, relative to the recording folder
    binary: bool = True


RECORDING_KINDS = [
    RecordingKind("mcap_bag", "bag-mcap/bag-mcap.mcap", "bag-mcap"),
    RecordingKind("raw_mcap", "raw.mcap", "raw.mcap"),
    RecordingKind("raw_mcap_crc", "crc.mcap", "crc.mcap"),
    RecordingKind("sqlite3_bag", "bag-sqlite3/bag-sqlite3.db3", "bag-sqlite3"),
    RecordingKind("csv_log", "log.csv", "log.csv", binary=False),
]


def _with_chunk_crcs(source: Path, target: Path) -> None:
    """``source`` with every chunk's CRC32 filled in (rosbags writes 0)."""
    from binascii import crc32

    blob = bytearray(source.read_bytes())
    at, end = 8, len(blob) - 8 - 29
    while at < end:
        length = int.from_bytes(blob[at + 1:at + 9], "little")
        if blob[at] == 0x06:  # chunk: start, end, size, crc, compression, records
            crc_at = at + 9 + 24
            name = int.from_bytes(blob[crc_at + 4:crc_at + 8], "little")
            records = crc_at + 8 + name + 8
            blob[crc_at:crc_at + 4] = crc32(bytes(blob[records:at + 9 + length])).to_bytes(
                4, "little")
        at += 9 + length
    target.write_bytes(bytes(blob))


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import _recording_rig as rig

    folder = tmp_path_factory.mktemp("recordings")
    data = rig.recording(folder, duration_s=0.3)
    rig.write_bag(folder / "bag-mcap", data, "mcap")
    rig.write_bag(folder / "bag-sqlite3", data, "sqlite3")
    rig.raw_mcap(folder / "bag-mcap", folder / "raw.mcap")
    _with_chunk_crcs(folder / "raw.mcap", folder / "crc.mcap")
    rig.write_csv(folder / "log.csv", data)
    return folder


def _recording_request(folder: Path, kind: RecordingKind) -> Path:
    import _recording_rig as rig

    csv_log = not kind.binary
    source: dict[str, Any] = {"path": kind.source}
    if csv_log:
        source["time_column"] = "t_s"
    doc = rig.request(folder / "arm.yaml", source, csv_log=csv_log, windows=[[0.0, 0.2]])
    doc["manifest"] = "arm.yaml"
    return rig.write_request(folder, doc, f"request-{kind.name}.yaml")


def _mutate_recording(rng: random.Random, data: bytes, binary: bool) -> tuple[str, bytes]:
    """One mutation of a recording file: truncation, bit flips, huge values, a BOM."""
    kinds = ["truncate", "bit_flip", "bit_flips"] + ([] if binary else
                                                     ["huge_value", "non_finite", "bom"])
    kind = rng.choice(kinds)
    if kind == "truncate":
        return kind, data[:rng.randrange(len(data))]
    if kind in ("bit_flip", "bit_flips"):
        out = bytearray(data)
        for _ in range(1 if kind == "bit_flip" else rng.randint(2, 6)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        return kind, bytes(out)
    if kind == "bom":
        return kind, b"\xef\xbb\xbf" + data
    text = data.decode()
    numbers = _numbers(text)
    new = (rng.choice(["1e300", "-1e300", "1e400", "1e13", "-9" * 30]) if kind == "huge_value"
           else rng.choice(["nan", "inf", "-inf", "NaN"]))
    return kind, _replace(text, rng.choice(numbers), new).encode()


def _streams_of(path: Path) -> list[Any]:
    import _recording_rig as rig
    from fibril_calibration.recordings.formats import open_source

    source = open_source(path)
    try:
        out = [source.stream(topic="/joint_states", field=f"position[{j}]").values
               for j in rig.JOINTS]
        out.append(source.stream(topic="/joint_commands", field="effort").values)
        out.append(source.stream(topic="/joint_states", field="position[j1]").times_ns)
    finally:
        source.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", RECORDING_KINDS, ids=lambda k: k.name)
def test_recording_mutants_fail_with_one_line_naming_the_recording(
        kind: RecordingKind, recordings: Path, tmp_path: Path, stubs: None) -> None:
    import warnings

    import numpy as np

    folder = tmp_path / "recordings"
    shutil.copytree(recordings, folder)
    request = _recording_request(folder, kind)
    argv = ["calibrate", str(request), "--quiet"]
    assert _call(argv)[0] == 0  # the unmutated recording loads
    target = folder / kind.file
    original = target.read_bytes()
    reference = _streams_of(folder / kind.source) if kind.name == "raw_mcap_crc" else None
    named = str(folder / kind.source)
    problems: list[str] = []
    outcomes: dict[str, int] = {}
    rng = random.Random(SEED + sum(map(ord, kind.name)))
    for n in range(CASES_PER_KIND):
        mutation, data = _mutate_recording(rng, original, kind.binary)
        target.write_bytes(data)
        label = f"{kind.name} case {n} ({mutation})"
        started = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                code, err = _call(argv)
        except BaseException as exc:  # noqa: BLE001 - a crash is what this test looks for
            problems.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        outcomes[mutation] = outcomes.get(mutation, 0) + 1
        runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        if runtime:
            problems.append(f"{label}: RuntimeWarning reached the user: {runtime[0][:200]}")
        if time.perf_counter() - started > CASE_SECONDS:
            problems.append(f"{label}: took {time.perf_counter() - started:.1f} s")
        if code == 0:
            if reference is not None:  # with CRCs nothing may change silently
                got = _streams_of(folder / kind.source)
                if not all(a.shape == b.shape and np.array_equal(a, b)
                           for a, b in zip(got, reference)):
                    problems.append(f"{label}: loaded with changed values despite its CRCs")
            continue
        lines = err.splitlines()
        if code != 2 or len(lines) != 1 or not lines[0].startswith("fibril_sim: error: "):
            problems.append(f"{label}: exit {code}, stderr {err[:300]!r}")
        elif named not in lines[0]:
            problems.append(f"{label}: the error does not name {named}: {lines[0][:300]}")
    target.write_bytes(original)
    assert not problems, "\n".join(problems)
    assert sum(outcomes.values()) == CASES_PER_KIND


# ------------------------------------------------------------------ bridge files (issue 23)
# The sim node's bridge file (topics, message types, QoS, frames for the drivetrain plan),
# mutated like the documents above, and every key of it given every wrong value: each mutant
# loads or raises BridgeError with one line naming the file (the node prints that line and
# exits 2; test/integration/test_bad_bridge_file_node.py checks the process). Never a
# TypeError or any other exception.
BRIDGE = """\
schema_version: {major: 1, minor: 0}
defaults: true
inputs:
  - topic: /motor/command
    type: fibril_msgs/msg/MotorCommand
    endpoint: motor/command
    qos: {reliability: best_effort, durability: volatile, depth: 5}
  - {topic: /motor/duty_percent, type: std_msgs/msg/Float64, endpoint: motor/command,
     mode: duty, scale: 0.01, offset: 0.0}
  - {topic: forward_commands, type: std_msgs/Float64MultiArray, endpoints: [motor/command],
     mode: voltage, scale: 12.0}
outputs:
  - device: wheel_encoder
    topic: /wheel_encoder
    type: sensor_msgs/msg/JointState
    frame_id: wheel_joint
    raw_topic: /wheel_encoder/counts
    stamp: acquisition
    qos: {reliability: reliable, durability: volatile, depth: 10}
  - {device: chassis_imu, topic: ~/imu, frame_id: imu, stamp: delivery}
  - {device: front_range, field_of_view: 0.5, radiation_type: ultrasound}
  - {device: chassis_pose, type: nav_msgs/msg/Odometry, child_frame_id: base_link}
  - {device: drive_feedback, type: fibril_msgs/msg/DeviceSample}
joint_states: {topic: /joint_states, rate: 50.0, qos: {depth: 100}}
tf: {rate: 25.0, frame_prefix: sim/}
robot_description: {topic: /robot_description}
markers: {topic: /fibril_sim/markers}
"""
# A JointState input (the drivetrain's motor takes no position, velocity or effort, so this
# entry is refused as a whole; its keys' wrong values must be refused first, and cleanly).
JOINT_STATE_BRIDGE = """\
schema_version: {major: 1, minor: 0}
inputs:
  - topic: /joint_commands
    type: sensor_msgs/msg/JointState
    joints: {wheel_joint: motor/command}
    field: velocity
"""
WRONG_VALUES: list[Any] = [
    None, True, False, -1, 0, 2**70, 1.5e300, float("inf"), float("nan"), -0.0, 1e-300, "",
    "?", "0.5", "yes", "12:30:45", "/caf\u00e9", "~x", "//x", "x" * 10_000, [], {}, [[[]]],
    {"x": 1}, [1, 2, 3], ["velocity"], {"reliability": "reliable"}]
BRIDGE_CASES = 4 * CASES_PER_KIND  # a bridge file loads in milliseconds


@pytest.fixture(scope="module")
def drivetrain_plan() -> Any:
    from fibril_sim_core import SimulationBuilder

    return SimulationBuilder().build(EXAMPLE / "simulation.yaml")


def _bridge_outcome(plan: Any, path: Path, data: bytes) -> str | None:
    """None when ``data`` loads as a bridge or fails as it must; otherwise what went wrong."""
    from fibril_sim_ros.bridge import BridgeError, load_bridge

    path.write_bytes(data)
    started = time.perf_counter()
    try:
        load_bridge(plan, path)
    except BridgeError as exc:
        message = str(exc)
        if "\n" in message or "\r" in message:
            return f"not one line: {message[:300]!r}"
        if not message.startswith(f"{path}: "):
            return f"does not name the file first: {message[:300]}"
        if len(message) > 1000:
            return f"a {len(message)}-character message: {message[:300]}"
    except BaseException as exc:  # noqa: BLE001 - a crash is what this test looks for
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    seconds = time.perf_counter() - started
    return f"took {seconds:.1f} s" if seconds > CASE_SECONDS else None


@pytest.mark.slow
def test_bridge_mutants_fail_with_one_bridge_error_line(drivetrain_plan: Any,
                                                        tmp_path: Path) -> None:
    from fibril_sim_ros.bridge import load_bridge

    path = tmp_path / "bridge.yaml"
    path.write_text(BRIDGE)
    assert {e.topic for e in load_bridge(drivetrain_plan, path).inputs} >= {
        "/motor/command", "/motor/duty_percent", "/forward_commands"}  # the original is valid
    rss = _max_rss_mb()
    problems = []
    outcomes: dict[str, int] = {}
    for n, (mutation, data) in enumerate(mutants(BRIDGE, SEED + sum(map(ord, "bridge")),
                                                 BRIDGE_CASES)):
        outcomes[mutation] = outcomes.get(mutation, 0) + 1
        problem = _bridge_outcome(drivetrain_plan, path, data)
        if problem is not None:
            problems.append(f"bridge case {n} ({mutation}): {problem}")
    growth = _max_rss_mb() - rss
    assert not problems, "\n".join(problems)
    assert growth < MEMORY_GROWTH_MB, f"max RSS grew by {growth:.0f} MB"
    assert sum(outcomes.values()) == BRIDGE_CASES and len(outcomes) > 10, outcomes


def _key_paths(doc: Any) -> list[tuple[Any, ...]]:
    """Every key and list index of ``doc``, as paths from the root."""
    paths: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while stack:
        prefix, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for key, value in items:
            paths.append((*prefix, key))
            stack.append(((*prefix, key), value))
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("base", [BRIDGE, JOINT_STATE_BRIDGE], ids=["bridge", "joint_state"])
def test_every_bridge_key_with_every_wrong_value_is_a_bridge_error(
        drivetrain_plan: Any, tmp_path: Path, base: str) -> None:
    """Issue 23 item 10: ``field: [velocity]`` was ``TypeError: unhashable type: 'list'``."""
    path = tmp_path / "bridge.yaml"
    problems = []
    original = schema.load_yaml_text(base, "base", FibrilError)
    paths = _key_paths(original)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    for key_path in paths:
        for value in [*WRONG_VALUES, "<deleted>"]:
            doc = copy.deepcopy(original)
            parent = doc
            for key in key_path[:-1]:
                parent = parent[key]
            if value == "<deleted>":
                del parent[key_path[-1]]
            else:
                parent[key_path[-1]] = value
            problem = _bridge_outcome(drivetrain_plan, path,
                                      yaml.dump(doc, Dumper=dumper).encode())
            if problem is not None:
                shown = "deleted" if value == "<deleted>" else schema.short(value)
                problems.append(f"{'.'.join(map(str, key_path))} = {shown}: {problem}")
    assert len(paths) > (30 if base is BRIDGE else 8)
    assert not problems, "\n".join(problems)
