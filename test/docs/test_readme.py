"""README.md stays a front page: at most 150 lines, and every relative link in it resolves (a
file or folder of the repository; an anchor is not checked). Its commands run with the docs
snippets (test_snippets.py) and its ros2 commands in
test/integration/test_readme_ros2_commands.py."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAX_LINES = 150
# [text](target) outside code spans; images too.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans
    return [t for t in _LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t)]


def test_readme_is_at_most_150_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES})"


def test_every_relative_link_in_the_readme_resolves() -> None:
    links = relative_links(README.read_text(encoding="utf-8"))
    assert len(links) >= 10, links
    broken = [link for link in links if not (README.parent / link.split("#")[0]).exists()]
    assert broken == [], f"README.md links to missing files: {broken}"


def test_link_extraction() -> None:
    text = ("See [a](docs/a.md), ![img](x.png) and [web](https://x.org), [top](#top), "
            "`[not](code.md)`.\n```\n[no](block.md)\n```\n")
    assert relative_links(text) == ["docs/a.md", "x.png"]
