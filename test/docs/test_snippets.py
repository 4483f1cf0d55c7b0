"""Every command, YAML and Python snippet of README.md and docs/ runs (see _snippets for the rules): YAML
through the real loaders, commands in bash, Python in a fresh interpreter. One test per page;
the terminal summary counts what ran. ROS-marked snippets skip without a ROS 2 installation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _snippets as sn  # noqa: E402
from conftest import SNIPPET_COUNTS  # noqa: E402

# A page with ROS-marked snippets is a ``ros`` test (``-m "not ros"`` leaves it out).
PAGES = [pytest.param(p, id=str(p.relative_to(sn.REPO)),
                      marks=[pytest.mark.ros] if any("ros" in s.options for s in sn.extract(p))
                      else [])
         for p in sn.pages() if sn.extract(p)]


@pytest.mark.parametrize("page", PAGES)
def test_page_snippets_run(page: Path, tmp_path: Path) -> None:
    work = sn.workspace(tmp_path)
    skipped = []
    for snippet in sn.extract(page):
        try:
            SNIPPET_COUNTS[sn.run(snippet, work)] += 1
        except sn.Skip as reason:
            SNIPPET_COUNTS["skipped"] += 1
            skipped.append(str(reason))
    for reason in skipped:
        print(f"skipped {reason}")


def test_extraction_sees_markers_and_languages(tmp_path: Path) -> None:
    text = ("# probe\n\n<!-- snippet: ros cwd=config -->\n```bash\necho hi\n```\n\n"
            "```text\nnot run\n```\n\n<!-- snippet: skip: installs things -->\n\n"
            "```console\n$ make setup\noutput\n```\n\n```yaml\na: 1\n```\n")
    found = sn.extract(sn.DOCS / "probe.md", text)
    assert [(s.language, s.options, s.line) for s in found] == [
        ("bash", {"ros": "yes", "cwd": "config"}, 4),
        ("console", {"skip": "installs things"}, 14),
        ("yaml", {}, 19)]


def test_a_failing_snippet_fails_naming_page_and_line(tmp_path: Path) -> None:
    snippet = sn.Snippet(sn.DOCS / "index.md", 7, "yaml",
                         "schema_version: {major: 3, minor: 1}\nmodel: missing.xml\n")
    with pytest.raises(AssertionError, match=r"index\.md:7: .*model.*missing\.xml"):
        sn.run(snippet, tmp_path)
    command = sn.Snippet(sn.DOCS / "index.md", 9, "bash", "fibril_sim run nothing.yaml "
                         "--duration 0.1\n")
    with pytest.raises(AssertionError, match=r"index\.md:9: exit status 2"):
        sn.run(command, tmp_path)


@pytest.mark.parametrize("text, kind", [
    ("schema_version: {major: 3, minor: 1}\nmodel: drivetrain.xml\n", "manifest"),
    ("schema_version: {major: 1, minor: 0}\ninputs:\n  - {topic: /a, "
     "type: fibril_msgs/msg/MotorCommand, endpoint: motor/command}\n", "bridge"),
    ("schema_version: {major: 1, minor: 0}\ninputs:\n  - {time: 0.5, "
     "source_id: motor/command, source_sequence: 1, payload_type: "
     "fibril_sim/motor_command/v1, payload: {mode: duty, value: 0.8}}\n", "inputs"),
], ids=["manifest", "bridge", "inputs"])
def test_yaml_kinds_are_recognised_and_validated(text: str, kind: str, tmp_path: Path) -> None:
    work = sn.workspace(tmp_path)
    options = {"cwd": "config/examples/drivetrain"} if kind == "manifest" else {}
    assert sn.run(sn.Snippet(sn.DOCS / "p.md", 3, "yaml", text, options), work) == f"yaml:{kind}"
    broken = text.replace("motor/command", "nothing/command").replace("drivetrain.xml", "x.xml")
    with pytest.raises(AssertionError, match=r"p\.md:3: "):
        sn.run(sn.Snippet(sn.DOCS / "p.md", 3, "yaml", broken, options), work)
    with pytest.raises(AssertionError, match="no recognised kind"):
        sn.run(sn.Snippet(sn.DOCS / "p.md", 3, "yaml", "a: 1\n"), work)
