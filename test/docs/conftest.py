"""The docs tests' summary: how many snippets of docs/ ran, by kind, and how many were skipped;
how many keys the generated Reference was checked to cover."""

from __future__ import annotations

from collections import Counter

#: Filled by test_snippets.py: "yaml:manifest", "command", "python", "skipped" ... -> count.
SNIPPET_COUNTS: Counter[str] = Counter()
#: Filled by test_reference.py: reference section -> keys covered.
REFERENCE_COUNTS: Counter[str] = Counter()


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ANN001
    if REFERENCE_COUNTS:
        detail = ", ".join(f"{k} {v}" for k, v in sorted(REFERENCE_COUNTS.items()))
        terminalreporter.write_line(f"reference keys covered: {sum(REFERENCE_COUNTS.values())} "
                                    f"({detail})")
    if not SNIPPET_COUNTS:
        return
    ran = {k: v for k, v in SNIPPET_COUNTS.items() if k != "skipped"}
    detail = ", ".join(f"{k} {v}" for k, v in sorted(ran.items()))
    terminalreporter.write_line(
        f"docs snippets: {sum(ran.values())} executed ({detail}); "
        f"{SNIPPET_COUNTS['skipped']} skipped")
