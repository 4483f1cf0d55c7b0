"""The runnable snippets of README.md and docs/: extracted from the Markdown pages and run as a user would.

A fenced block is a snippet by its language:

- ``yaml``: validated by the real loader of its kind, recognised by its keys (a manifest, a
  bridge file, recorded inputs, an experiment, a calibration request) or named by a marker
  (below): ``kind=manifest|bridge|inputs|experiment|calibration|overlay``, or ``kind=fragment`` for an
  excerpt (parsed only). A bridge or inputs document is checked against the plan of
  ``manifest=PATH`` (default: the drivetrain example's manifest);
- ``bash`` / ``sh`` / ``shell``: run by bash (``set -euo pipefail``; a line ending in ``&``
  starts a background process that is stopped (SIGTERM) when the block ends); ``console``: the ``$ ``
  lines only;
- ``python``: executed in a fresh interpreter.

An HTML comment right before the fence (invisible on the rendered page and on GitHub) says
more: ``<!-- snippet: ros -->`` needs a ROS 2 installation (rclpy and the ``ros2`` command;
skipped without one), ``<!-- snippet: skip: REASON -->`` is never run (``make setup``,
``git clone``), ``file=PATH`` writes the YAML block there for later snippets, ``cwd=DIR`` runs
the block there (and resolves its relative paths there), ``requires=PATH`` skips it when that
path is missing from the workspace.

Each page runs in a workspace of its own: a temporary folder with a copy of config/ and the
test model fixtures, and ``mujoco_menagerie`` linked to the shared models when they are on
this machine; snippets of a page share it, in page order.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXCLUDED = ("_build", "_ext", "reference/generated")
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<body>.*?)\s*-->\s*$")
RUNNABLE = {"yaml": "yaml", "yml": "yaml", "bash": "command", "sh": "command",
            "shell": "command", "console": "command", "python": "python", "py": "python"}
SHELL_WALL = 300.0
SHARED_MODELS = [REPO.parent / "shared" / "models", REPO.parent.parent / "shared" / "models",
                 Path("/work/shared/models")]


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    language: str
    text: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return RUNNABLE.get(self.language, "")

    @property
    def label(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def pages() -> list[Path]:
    """README.md and the pages of docs/ (not the generated Reference)."""
    found = [REPO / "README.md"]
    for path in sorted(DOCS.rglob("*.md")):
        relative = path.relative_to(DOCS).as_posix()
        if not any(relative == e or relative.startswith(e + "/") for e in EXCLUDED):
            found.append(path)
    return found


def _options(body: str) -> dict[str, str]:
    if body.startswith("skip"):
        return {"skip": body[4:].lstrip(": ").strip() or "marked skip"}
    options = {}
    for token in body.split():
        key, _, value = token.partition("=")
        options[key] = value or "yes"
    return options


def extract(page: Path, text: str | None = None) -> list[Snippet]:
    """The page's fenced blocks in a runnable language, with their markers."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    snippets: list[Snippet] = []
    marker: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        found = _MARKER.match(line.strip())
        if found:
            marker = _options(found.group("body"))
            index += 1
            continue
        fence = _FENCE.match(line)
        if fence is None:
            if line.strip():
                marker = {}
            index += 1
            continue
        info = fence.group("info").strip()
        language = info.split()[0].strip("{}") if info else ""
        close = fence.group("fence")
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(close):
            body.append(lines[index])
            index += 1
        start = index - len(body)
        if language in RUNNABLE:
            snippets.append(Snippet(page, start, language, "\n".join(body) + "\n",
                                    dict(marker)))
        marker = {}
        index += 1
    return snippets


def ros_missing() -> str | None:
    """Why ROS-marked snippets cannot run here, or None."""
    if importlib.util.find_spec("rclpy") is None:
        return "rclpy is not installed"
    if shutil.which("ros2", path=_path()) is None:
        return "the ros2 command is not installed"
    return None


def _path() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def workspace(folder: Path) -> Path:
    """A page's workspace: config/ and the test models copied, the shared models linked."""
    shutil.copytree(REPO / "config", folder / "config", symlinks=True)
    shutil.copytree(REPO / "test" / "unit" / "fixtures" / "init_models",
                    folder / "test" / "unit" / "fixtures" / "init_models")
    for candidate in SHARED_MODELS:
        if (candidate / "franka_emika_panda").is_dir():
            (folder / "mujoco_menagerie").symlink_to(candidate)
            break
    return folder


class Skip(Exception):
    """The snippet is not run here (the reason is the message)."""


def run(snippet: Snippet, work: Path) -> str:
    """Run one snippet in ``work``; returns what it was (``yaml:<kind>``, ``command``,
    ``python``); raises Skip, or AssertionError naming the page and line."""
    options = snippet.options
    if "skip" in options:
        raise Skip(f"{snippet.label}: {options['skip']}")
    if "requires" in options and not (work / options["requires"]).exists():
        raise Skip(f"{snippet.label}: needs {options['requires']}, absent here")
    if "ros" in options and ros_missing():
        raise Skip(f"{snippet.label}: needs ROS 2 ({ros_missing()})")
    cwd = work / options.get("cwd", ".")
    if snippet.kind == "yaml":
        return "yaml:" + _yaml(snippet, work, cwd)
    if snippet.kind == "python":
        command = [sys.executable, "-c", snippet.text]
    else:
        script = snippet.text
        if snippet.language == "console":
            script = "\n".join(line[2:] for line in script.splitlines()
                               if line.startswith("$ "))
        command = ["bash", "-c", "set -euo pipefail\n"
                   "trap 'jobs -p | xargs -r kill -TERM 2>/dev/null; wait' EXIT\n" + script]
    if "ros" in options:
        with _ros_domain(work) as env:
            _process(command, snippet, cwd, env)
    else:
        _process(command, snippet, cwd, {})
    return snippet.kind


@contextmanager
def _ros_domain(work: Path) -> Iterator[dict[str, str]]:
    """A ROS domain held by this snippet alone (the test harness's lock files), over shared
    memory; a ``ros2`` daemon a command started on it is stopped at the end."""
    from fibril_sim_ros.testing import DEFAULT_DOMAIN_POOL, lock_domain

    lock = lock_domain(DEFAULT_DOMAIN_POOL)
    env = {"ROS_DOMAIN_ID": str(lock.domain_id), "FASTDDS_BUILTIN_TRANSPORTS": "SHM",
           "ROS_LOG_DIR": str(work / "ros_log")}
    try:
        yield env
    finally:
        subprocess.run(["ros2", "daemon", "stop"], env=dict(os.environ, PATH=_path(), **env),
                       capture_output=True, timeout=60, check=False)
        lock.release()


def _process(command: list[str], snippet: Snippet, cwd: Path, extra: dict[str, str]) -> None:
    env = dict(os.environ, PATH=_path(), PYTHONUNBUFFERED="1", **extra)
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=SHELL_WALL)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate()
        raise AssertionError(f"{snippet.label}: still running after {SHELL_WALL:g} s\n"
                             f"{output[-3000:]}") from None
    finally:
        try:  # nothing the snippet started outlives it
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    assert process.returncode == 0, (f"{snippet.label}: exit status {process.returncode}\n"
                                     f"{snippet.text}\n--- output ---\n{output[-3000:]}")


def _yaml(snippet: Snippet, work: Path, cwd: Path) -> str:
    from fibril_sim_core import schema as s
    from fibril_sim_core.errors import FibrilError

    options = snippet.options
    target = work / options["file"] if "file" in options else cwd / f"snippet-{snippet.line}.yaml"
    document = s.load_yaml_text(snippet.text, snippet.label, FibrilError)
    kind = options.get("kind") or _detect(document)
    if kind is None:
        raise AssertionError(f"{snippet.label}: a YAML snippet of no recognised kind: mark it "
                             f"<!-- snippet: kind=manifest|bridge|inputs|experiment|"
                             f"calibration|overlay|fragment -->")
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind != "fragment":
        target.write_text(snippet.text, encoding="utf-8")
    try:
        _validate(kind, target, work, cwd, options)
    except FibrilError as exc:
        raise AssertionError(f"{snippet.label}: {exc}") from None
    return kind


#: The manifest a bridge or inputs snippet is checked against unless ``manifest=PATH`` says.
DEFAULT_MANIFEST = "config/examples/drivetrain/simulation.yaml"
_BRIDGE_KEYS = {"defaults", "outputs", "joint_states", "tf", "robot_description", "markers"}


def _detect(document: object) -> str | None:
    """The kind of a whole document, recognised by its keys (None: mark it)."""
    if not isinstance(document, dict):
        return None
    version = document.get("schema_version")
    major = version.get("major") if isinstance(version, dict) else None
    model = document.get("model")
    if major == 3 and isinstance(model, str):
        return "manifest"
    if "manifest" in document and "parameters" in document:
        return "calibration"
    if document.get("format") == "fibril_sim/parameter_overlay":
        return "overlay"
    if isinstance(model, dict) and "parameters" in document and "id" in document:
        return "experiment"
    if major == 1:
        inputs = document.get("inputs")
        first = inputs[0] if isinstance(inputs, list) and inputs else {}
        if _BRIDGE_KEYS & set(document) or (isinstance(first, dict) and "topic" in first):
            return "bridge"
        if isinstance(first, dict) and "source_id" in first:
            return "inputs"
    return None


def _plan(options: dict[str, str], work: Path, cwd: Path):  # type: ignore[no-untyped-def]
    from fibril_sim_core.plan import SimulationBuilder

    if "manifest" in options:
        return SimulationBuilder().build(cwd / options["manifest"])
    return SimulationBuilder().build(work / DEFAULT_MANIFEST)


def _validate(kind: str, target: Path, work: Path, cwd: Path, options: dict[str, str]) -> None:
    if kind == "manifest":
        from fibril_sim_core.plan import SimulationBuilder

        SimulationBuilder().build(target)
    elif kind == "bridge":
        from fibril_sim_ros.bridge import load_bridge

        load_bridge(_plan(options, work, cwd), target)
    elif kind == "inputs":
        from fibril_sim_core.inputs_file import load_inputs

        plan = _plan(options, work, cwd)
        load_inputs(target, plan.timebase, plan.endpoints)
    elif kind == "experiment":
        from fibril_sim_core.experiments.experiment import load_experiment

        load_experiment(target)
    elif kind == "calibration":
        from fibril_calibration.request import load_calibration_request

        load_calibration_request(target)
    elif kind == "overlay":
        from fibril_sim_core.overlays import load_overlay_artifact

        load_overlay_artifact(target)
    elif kind != "fragment":
        raise AssertionError(f"unknown snippet kind {kind!r}")


def all_snippets() -> Iterator[Snippet]:
    for page in pages():
        yield from extract(page)
